/* .npz archives (npz.h): the zip's end of central directory record (found in
 * the last 64 KiB + 22 bytes), its ZIP64 locator and record when present,
 * the central directory (ZIP64 extra fields for sizes and offsets of
 * 0xFFFFFFFF) and each member's local header, every offset, size and count
 * checked against the buffer before it is read; stored members are handed to
 * ps_npy_parse in place. */
#include "npz.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_error.h"

enum {
    EOCD_SIG = 0x06054b50, /* end of central directory record */
    EOCD_LEN = 22,
    LOC64_SIG = 0x07064b50, /* ZIP64 end of central directory locator */
    LOC64_LEN = 20,
    EOCD64_SIG = 0x06064b50, /* ZIP64 end of central directory record */
    EOCD64_LEN = 56,
    CDH_SIG = 0x02014b50, /* central directory file header */
    CDH_LEN = 46,
    LFH_SIG = 0x04034b50, /* local file header */
    LFH_LEN = 30,
    MAX_COMMENT = 0xffff,
    ZIP64_EXTRA = 0x0001,
    NAME_SHOWN = 200, /* at most this much of a member's name in a message */
};

#define U32_MAX_FIELD 0xffffffffu /* a 32-bit field whose value is in the ZIP64 extra */

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) {
    return rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return PS_EFORMAT;
}

typedef struct {
    uint64_t offset, size, count;
    size_t end_limit; /* the directory must end at or before this offset */
} cdir;

/* Finds the end of central directory record (and the ZIP64 one it points
 * to) and checks the directory it describes lies inside buf. */
static int find_directory(const uint8_t *buf, size_t len, cdir *cd, char *err, size_t errlen) {
    if (len < EOCD_LEN)
        return bad(err, errlen, "not a zip archive: %zu bytes is shorter than its end record", len);
    size_t at = len - EOCD_LEN;
    size_t lowest = at > MAX_COMMENT ? at - MAX_COMMENT : 0;
    /* the last signature whose comment fits in what follows it */
    while (!(rd32(buf + at) == EOCD_SIG && rd16(buf + at + 20) <= len - EOCD_LEN - at)) {
        if (at == lowest)
            return bad(err, errlen,
                       "no zip end of central directory record: not an .npz "
                       "archive, or a truncated one");
        at--;
    }
    const uint8_t *e = buf + at;
    uint64_t disk = rd16(e + 4), cd_disk = rd16(e + 6), n_disk = rd16(e + 8);
    cd->count = rd16(e + 10);
    cd->size = rd32(e + 12);
    cd->offset = rd32(e + 16);
    cd->end_limit = at;
    if (at >= LOC64_LEN && rd32(e - LOC64_LEN) == LOC64_SIG) {
        const uint8_t *l = e - LOC64_LEN;
        size_t loc_at = at - LOC64_LEN;
        uint64_t rec = rd64(l + 8);
        if (rd32(l + 4) != 0 || rd32(l + 16) > 1)
            return bad(err, errlen, "a split (multi-part) zip archive is not supported");
        if (rec > loc_at || loc_at - rec < EOCD64_LEN)
            return bad(err, errlen,
                       "ZIP64 end of central directory record at offset %llu "
                       "does not fit before its locator at %zu",
                       (unsigned long long)rec, loc_at);
        const uint8_t *r = buf + rec;
        if (rd32(r) != EOCD64_SIG)
            return bad(err, errlen,
                       "no ZIP64 end of central directory record at offset %llu, "
                       "where its locator points",
                       (unsigned long long)rec);
        disk = rd32(r + 16), cd_disk = rd32(r + 20), n_disk = rd64(r + 24);
        cd->count = rd64(r + 32);
        cd->size = rd64(r + 40);
        cd->offset = rd64(r + 48);
        cd->end_limit = (size_t)rec;
    }
    if (disk != 0 || cd_disk != 0 || n_disk != cd->count)
        return bad(err, errlen, "a split (multi-part) zip archive is not supported");
    if (cd->count > PS_NPZ_MAX_MEMBERS)
        return bad(err, errlen, "archive declares %llu members, over the limit of %d",
                   (unsigned long long)cd->count, PS_NPZ_MAX_MEMBERS);
    if (cd->offset > cd->end_limit || cd->size > cd->end_limit - cd->offset)
        return bad(err, errlen,
                   "central directory (%llu bytes at offset %llu) runs past the "
                   "end of the archive (its end record is at %zu of %zu bytes)",
                   (unsigned long long)cd->size, (unsigned long long)cd->offset, cd->end_limit,
                   len);
    if (cd->count > cd->size / CDH_LEN)
        return bad(err, errlen,
                   "central directory of %llu bytes cannot hold the %llu "
                   "members the archive declares",
                   (unsigned long long)cd->size, (unsigned long long)cd->count);
    return PS_OK;
}

/* Replaces the fields that hold 0xFFFFFFFF (uncompressed size, compressed
 * size, local header offset: that order) by the ZIP64 extra field's values.
 * False when the extra data is malformed or lacks a value it must give. */
static bool zip64_fields(const uint8_t *x, size_t xlen, uint64_t *usize, uint64_t *csize,
                         uint64_t *offset) {
    while (xlen >= 4) {
        size_t id = rd16(x), sz = rd16(x + 2);
        if (sz > xlen - 4) return false;
        if (id == ZIP64_EXTRA) {
            const uint8_t *p = x + 4, *end = p + sz;
            uint64_t *fields[3] = {usize, csize, offset};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != U32_MAX_FIELD) continue;
                if (end - p < 8) return false;
                *fields[i] = rd64(p);
                p += 8;
            }
            return true;
        }
        x += 4 + sz, xlen -= 4 + sz;
    }
    return true; /* no ZIP64 field: the 32-bit values stand */
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that appears twice, or NULL; *rc is PS_ENOMEM when the
 * sorted copy cannot be allocated. */
static const char *duplicate(const ps_npz_member *m, size_t n, int *rc) {
    *rc = PS_OK;
    if (n < 2) return NULL;
    const char **names = malloc(n * sizeof *names);
    if (!names) {
        *rc = PS_ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        names[i] = m[i].name;
    qsort(names, n, sizeof *names, by_name);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(names[i - 1], names[i]) == 0) dup = names[i];
    free(names);
    return dup;
}

int ps_npz_parse(const uint8_t *buf, size_t len, ps_npz *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    cdir cd = {0};
    int rc = find_directory(buf, len, &cd, err, errlen);
    if (rc != PS_OK) return rc;
    /* One block: the member table, then the names (each shorter than its entry). */
    size_t n = (size_t)cd.count, table = n * sizeof(ps_npz_member);
    ps_npz_member *m = malloc(table + (size_t)cd.size + 1);
    if (!m) {
        snprintf(err, errlen, "out of memory for the table of %zu members", n);
        return PS_ENOMEM;
    }
    char *names = (char *)m + table;
    size_t names_used = 0;
    size_t at = (size_t)cd.offset, end = at + (size_t)cd.size;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *h = buf + at;
        if (end - at < CDH_LEN || rd32(h) != CDH_SIG) {
            rc = bad(err, errlen,
                     "central directory entry %zu of %zu is truncated or has no "
                     "signature",
                     i + 1, n);
            goto fail;
        }
        unsigned flags = rd16(h + 8), method = rd16(h + 10);
        uint64_t csize = rd32(h + 20), usize = rd32(h + 24), offset = rd32(h + 42);
        size_t nlen = rd16(h + 28), xlen = rd16(h + 30), clen = rd16(h + 32);
        if (nlen + xlen + clen > end - at - CDH_LEN) {
            rc = bad(err, errlen, "central directory entry %zu of %zu runs past the directory",
                     i + 1, n);
            goto fail;
        }
        const char *name = (const char *)h + CDH_LEN;
        int shown = (int)(nlen < NAME_SHOWN ? nlen : NAME_SHOWN);
        if (!zip64_fields(h + CDH_LEN + nlen, xlen, &usize, &csize, &offset)) {
            rc =
                bad(err, errlen, "member '%.*s': malformed extra field (ZIP64 sizes)", shown, name);
            goto fail;
        }
        if (flags & 1) {
            rc = bad(err, errlen, "member '%.*s' is encrypted", shown, name);
            goto fail;
        }
        if (method == 8) {
            rc = bad(err, errlen,
                     "member '%.*s' is compressed (deflate): a compressed archive "
                     "(np.savez_compressed) cannot be memory-mapped; save it with np.savez",
                     shown, name);
            goto fail;
        }
        if (method != 0) {
            rc = bad(err, errlen,
                     "member '%.*s' uses compression method %u: only stored "
                     "members (np.savez) can be memory-mapped",
                     shown, name, method);
            goto fail;
        }
        if (csize != usize) {
            rc = bad(err, errlen,
                     "stored member '%.*s' says %llu bytes stored but %llu "
                     "uncompressed",
                     shown, name, (unsigned long long)csize, (unsigned long long)usize);
            goto fail;
        }
        if (nlen < 4 || memcmp(name + nlen - 4, ".npy", 4) != 0 || memchr(name, 0, nlen)) {
            rc = bad(err, errlen, "member '%.*s' is not named <name>.npy", shown, name);
            goto fail;
        }
        if (offset > len || len - offset < LFH_LEN || rd32(buf + offset) != LFH_SIG) {
            rc = bad(err, errlen,
                     "member '%.*s': no local header at offset %llu (archive of "
                     "%zu bytes)",
                     shown, name, (unsigned long long)offset, len);
            goto fail;
        }
        /* the local header's name and extra lengths, which may differ from the
         * central ones (np.savez's ZIP64 extra is only in the local header) */
        const uint8_t *l = buf + offset;
        size_t data = (size_t)offset + LFH_LEN + rd16(l + 26) + rd16(l + 28);
        if (data > len || csize > len - data) {
            rc = bad(err, errlen,
                     "member '%.*s': its %llu bytes at offset %zu run past the "
                     "end of the archive (%zu bytes)",
                     shown, name, (unsigned long long)csize, data, len);
            goto fail;
        }
        char why[256];
        rc = ps_npy_parse(buf + data, (size_t)csize, &m[i].arr, why, sizeof why);
        if (rc != PS_OK) {
            snprintf(err, errlen, "member '%.*s': %s", shown, name, why);
            goto fail;
        }
        m[i].name = names + names_used;
        memcpy(m[i].name, name, nlen - 4);
        m[i].name[nlen - 4] = '\0';
        names_used += nlen - 3;
        at += CDH_LEN + nlen + xlen + clen;
    }
    const char *dup = duplicate(m, n, &rc);
    if (rc != PS_OK) {
        snprintf(err, errlen, "out of memory checking %zu member names", n);
        goto fail;
    }
    if (dup) {
        rc = bad(err, errlen, "member '%.*s.npy' appears twice", NAME_SHOWN, dup);
        goto fail;
    }
    out->members = m;
    out->n = n;
    return PS_OK;
fail:
    free(m);
    return rc;
}

int ps_npz_open(const char *path, ps_npz *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return PS_EIO;
    }
    if (!S_ISREG(st.st_mode) || st.st_size == 0) {
        snprintf(err, errlen, "%s: %s", path,
                 S_ISREG(st.st_mode) ? "empty file" : "not a regular file");
        close(fd);
        return S_ISREG(st.st_mode) ? PS_EFORMAT : PS_EIO;
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        return PS_EIO;
    }
    char why[512];
    int rc = ps_npz_parse(map, len, out, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s: %s", path, why);
        munmap(map, len);
        return rc;
    }
    out->map = map;
    out->map_len = len;
    return PS_OK;
}

const ps_npy *ps_npz_get(const ps_npz *z, const char *name) {
    for (size_t i = 0; z && name && i < z->n; i++)
        if (strcmp(z->members[i].name, name) == 0) return &z->members[i].arr;
    return NULL;
}

void ps_npz_close(ps_npz *z) {
    free(z->members); /* the names live in the same block */
    if (z->map) munmap(z->map, z->map_len);
    memset(z, 0, sizeof *z);
}
