/* TFRecord framing (tfrecord.h): buffered reads through stdio, every length
 * checked against the file's size and the limit before anything is allocated. */
#include "tfrecord.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "crc32c.h"
#include "ps_error.h"

uint32_t ps_tfrecord_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int ps_tfrecord_header(const uint8_t head[12], uint64_t *len) {
    *len = le64(head);
    return ps_tfrecord_mask(ps_crc32c(head, 8)) == le32(head + 8);
}

int ps_tfrecord_data_ok(const uint8_t *data, size_t len, const uint8_t foot[4]) {
    return ps_tfrecord_mask(ps_crc32c(data, len)) == le32(foot);
}

int ps_tfrecord_open(ps_tfrecord_reader *r, const char *path, size_t max_len, char *err,
                     size_t errlen) {
    memset(r, 0, sizeof *r);
    r->max_len = max_len ? max_len : PS_TFRECORD_MAX_LEN_DEFAULT;
    r->f = fopen(path, "rb");
    struct stat st;
    if (!r->f || fstat(fileno(r->f), &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (r->f) fclose(r->f);
        r->f = NULL;
        return PS_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        fclose(r->f);
        r->f = NULL;
        return PS_EIO;
    }
    r->size = (uint64_t)st.st_size;
    r->path = strdup(path);
    if (!r->path) {
        fclose(r->f);
        r->f = NULL;
        return PS_ENOMEM;
    }
    return PS_OK;
}

int ps_tfrecord_next(ps_tfrecord_reader *r, const uint8_t **data, size_t *len, char *err,
                     size_t errlen) {
    uint8_t head[12], foot[4];
    size_t got = fread(head, 1, sizeof head, r->f);
    if (got == 0 && feof(r->f)) return PS_ENOENT;
    const char *what = NULL;
    if (got != sizeof head) {
        what = ferror(r->f) ? strerror(errno) : "truncated length header";
        goto bad;
    }
    uint64_t n;
    if (!ps_tfrecord_header(head, &n)) {
        what = "the length's checksum does not match (not a TFRecord file, or damaged)";
        goto bad;
    }
    if (n > r->max_len) {
        snprintf(err, errlen, "%s: record %llu at byte %llu: length %llu over the limit of %zu",
                 r->path, (unsigned long long)r->index, (unsigned long long)r->offset,
                 (unsigned long long)n, r->max_len);
        return PS_EFORMAT;
    }
    if (r->offset + sizeof head > r->size || n > r->size - r->offset - sizeof head ||
        r->size - r->offset - sizeof head - n < sizeof foot) {
        snprintf(err, errlen, "%s: record %llu at byte %llu: length %llu runs past the end of "
                 "the file (%llu bytes)", r->path, (unsigned long long)r->index,
                 (unsigned long long)r->offset, (unsigned long long)n,
                 (unsigned long long)r->size);
        return PS_EFORMAT;
    }
    if (n > r->cap || !r->buf) {
        uint8_t *b = realloc(r->buf, n ? n : 1);
        if (!b) return PS_ENOMEM;
        r->buf = b;
        r->cap = n ? n : 1;
    }
    if (fread(r->buf, 1, n, r->f) != n || fread(foot, 1, sizeof foot, r->f) != sizeof foot) {
        what = ferror(r->f) ? strerror(errno) : "truncated record";
        goto bad;
    }
    if (!ps_tfrecord_data_ok(r->buf, n, foot)) {
        what = "the data's checksum does not match";
        goto bad;
    }
    *data = r->buf;
    *len = n;
    r->offset += sizeof head + n + sizeof foot;
    r->index++;
    return PS_OK;
bad:
    snprintf(err, errlen, "%s: record %llu at byte %llu: %s", r->path,
             (unsigned long long)r->index, (unsigned long long)r->offset, what);
    return PS_EFORMAT;
}

void ps_tfrecord_close(ps_tfrecord_reader *r) {
    if (r->f) fclose(r->f);
    free(r->path);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

int ps_tfrecord_write(FILE *f, const void *data, size_t len) {
    uint8_t head[12], foot[4];
    put_le(head, len, 8);
    put_le(head + 8, ps_tfrecord_mask(ps_crc32c(head, 8)), 4);
    put_le(foot, ps_tfrecord_mask(ps_crc32c(data, len)), 4);
    if (fwrite(head, 1, sizeof head, f) != sizeof head || fwrite(data, 1, len, f) != len ||
        fwrite(foot, 1, sizeof foot, f) != sizeof foot)
        return PS_EIO;
    return PS_OK;
}
