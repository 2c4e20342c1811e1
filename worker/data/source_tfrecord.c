/* TFRecord files of tf.train.Example as a record source (source.h). Each
 * file is indexed when opened: every record's 12-byte header is read (its
 * checksum verified, its length checked against the limit and the file's
 * size) and the record's offset kept, 8 bytes a record. A read then takes the
 * record with one pread, checks the data's checksum and parses the Example:
 * the image feature holds JPEG or PNG bytes (decoded), raw uint8 bytes of the
 * spec's shape, or floats; the label feature one int64. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "example.h"
#include "image.h"
#include "order.h"
#include "ps_error.h"
#include "source.h"
#include "tfrecord.h"

typedef struct {
    char **paths;
    int *fds;
    size_t n_paths;
    uint64_t *offsets; /* per record: its header's byte offset in its file */
    char image_key[128], label_key[128];
    size_t shape[3];
    int channels;
    size_t max_pixels, max_record;
    unsigned flags;
} tfr_state;

static int read_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (r <= 0) return r < 0 ? -1 : 0;
        got += (size_t)r;
    }
    return 1;
}


/* Indexes one file: appends its records' offsets to *offs. */
static int index_file(tfr_state *t, size_t f, uint64_t **offs, size_t *n, size_t *cap, char *err,
                      size_t errlen) {
    const char *path = t->paths[f];
    int fd = t->fds[f];
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return PS_EIO;
    }
    uint64_t size = (uint64_t)st.st_size, off = 0;
    for (size_t rec = 0; off < size; rec++) {
        uint8_t head[12];
        uint64_t len;
        int r = size - off >= sizeof head ? read_full(fd, head, sizeof head, off) : 0;
        if (r < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return PS_EIO;
        }
        const char *why = r == 0 ? "truncated length header"
                          : !ps_tfrecord_header(head, &len)
                              ? "the length's checksum does not match (not a TFRecord file, or damaged)"
                              : NULL;
        if (!why && len > t->max_record) why = "length over the limit";
        if (!why && (len > size - off - 12 || size - off - 12 - len < 4))
            why = "the length runs past the end of the file";
        if (why) {
            snprintf(err, errlen, "%s: record %zu at byte %llu: %s", path, rec,
                     (unsigned long long)off, why);
            return PS_EFORMAT;
        }
        if (*n == *cap) {
            size_t nc = *cap ? 2 * *cap : 1024;
            uint64_t *o = realloc(*offs, nc * sizeof *o);
            if (!o) return PS_ENOMEM;
            *offs = o, *cap = nc;
        }
        (*offs)[(*n)++] = off;
        off += 12 + len + 4;
    }
    return PS_OK;
}

static int tfr_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    tfr_state *t = src->self;
    size_t f = ps_order_file_of(src->file_start, src->n_files, i), rec = i - src->file_start[f];
    uint64_t off = t->offsets[i];
    char what[600];
    snprintf(what, sizeof what, "%s: record %zu at byte %llu", t->paths[f], rec,
             (unsigned long long)off);
    uint8_t head[12];
    uint64_t len = 0;
    if (read_full(t->fds[f], head, 12, off) != 1 || !ps_tfrecord_header(head, &len) ||
        len > t->max_record) {
        snprintf(err, errlen, "%s: the header changed since the file was indexed", what);
        return PS_EFORMAT;
    }
    if (ps_sample_reserve_bytes(s, (size_t)len + 4) != PS_OK) return PS_ENOMEM;
    int r = read_full(t->fds[f], s->bytes, (size_t)len + 4, off + 12);
    if (r != 1) {
        snprintf(err, errlen, "%s: %s", what, r < 0 ? strerror(errno) : "truncated record");
        return PS_EIO;
    }
    if (!ps_tfrecord_data_ok(s->bytes, (size_t)len, s->bytes + len)) {
        snprintf(err, errlen, "%s: the data's checksum does not match", what);
        return PS_EFORMAT;
    }
    ps_example *ex = NULL;
    char why[256];
    int rc = ps_example_parse(s->bytes, (size_t)len, &ex, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s: %s", what, why);
        return rc;
    }
    ps_feature img = ps_example_feature(ex, t->image_key), lab = ps_example_feature(ex, t->label_key);
    size_t want = t->shape[0] * t->shape[1] * t->shape[2];
    if (lab.kind != PS_FEATURE_INT64 || lab.n != 1) {
        snprintf(err, errlen, "%s: the label feature \"%s\" is %s, not one int64", what,
                 t->label_key, lab.kind == PS_FEATURE_NONE ? "missing" : "of another kind or length");
        rc = PS_EFORMAT;
    } else if (lab.int64s[0] < 0 || lab.int64s[0] > INT32_MAX) {
        snprintf(err, errlen, "%s: label %lld out of range", what, (long long)lab.int64s[0]);
        rc = PS_EFORMAT;
    } else if (img.kind == PS_FEATURE_BYTES && img.n == 1) {
        const uint8_t *b;
        size_t bl;
        ps_feature_bytes(&img, 0, &b, &bl);
        if (want && bl == want && ps_image_sniff(b, bl) == PS_IMAGE_UNKNOWN) {
            rc = ps_sample_reserve(s, want); /* raw uint8 of the spec's shape */
            for (size_t k = 0; rc == PS_OK && k < want; k++) s->x[k] = (float)b[k];
            s->h = t->shape[0], s->w = t->shape[1], s->c = t->shape[2];
        } else {
            /* b points into s->bytes: decode copies the pixels out before x is written */
            rc = ps_source_decode_image(b, bl, t->channels, t->max_pixels, t->flags, s, what, err,
                                        errlen);
        }
    } else if (img.kind == PS_FEATURE_FLOAT && img.n > 0 && (!want || img.n == want)) {
        rc = ps_sample_reserve(s, img.n);
        if (rc == PS_OK) memcpy(s->x, img.floats, img.n * sizeof *s->x);
        s->h = want ? t->shape[0] : 1, s->w = want ? t->shape[1] : 1,
        s->c = want ? t->shape[2] : img.n;
    } else {
        snprintf(err, errlen, "%s: the image feature \"%s\" is %s", what, t->image_key,
                 img.kind == PS_FEATURE_NONE ? "missing"
                 : img.kind == PS_FEATURE_FLOAT
                     ? "a float list of another length than the spec's \"shape\""
                     : "neither one bytes value (JPEG, PNG or raw uint8) nor a float list");
        rc = PS_EFORMAT;
    }
    if (rc == PS_OK) s->label = (int32_t)lab.int64s[0];
    ps_example_free(ex);
    return rc;
}

static void tfr_close(ps_source *src) {
    tfr_state *t = src->self;
    if (!t) return;
    for (size_t f = 0; f < t->n_paths; f++) {
        if (t->fds && t->fds[f] >= 0) close(t->fds[f]);
        if (t->paths) free(t->paths[f]);
    }
    free(t->paths);
    free(t->fds);
    free(t->offsets);
    free(t);
}

static const ps_source_ops tfr_ops = {.read = tfr_read, .close = tfr_close};

int ps_source_tfrecord(const char *const *paths, size_t n_paths, const ps_source_opts *o,
                       ps_source **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_paths == 0) {
        snprintf(err, errlen, "TFRecord: no files");
        return PS_EINVAL;
    }
    ps_source *s = ps_source_new(&tfr_ops, n_paths);
    tfr_state *t = calloc(1, sizeof *t);
    if (!s || !t) {
        free(t), ps_source_close(s);
        return PS_ENOMEM;
    }
    s->self = t;
    s->format = "TFRecord";
    t->paths = calloc(n_paths, sizeof *t->paths);
    t->fds = malloc(n_paths * sizeof *t->fds);
    if (!t->paths || !t->fds) {
        ps_source_close(s);
        return PS_ENOMEM;
    }
    for (size_t f = 0; f < n_paths; f++) t->fds[f] = -1;
    t->n_paths = n_paths;
    snprintf(t->image_key, sizeof t->image_key, "%s", o && o->image_key ? o->image_key : "image");
    snprintf(t->label_key, sizeof t->label_key, "%s", o && o->label_key ? o->label_key : "label");
    if (o) memcpy(t->shape, o->shape, sizeof t->shape);
    t->channels = o ? o->channels : 0;
    t->max_pixels = o ? o->max_pixels : 0;
    t->flags = o ? o->image_flags : 0;
    t->max_record = o && o->max_record ? o->max_record : PS_TFRECORD_MAX_LEN_DEFAULT;
    size_t n = 0, cap = 0;
    int rc = PS_OK;
    for (size_t f = 0; rc == PS_OK && f < n_paths; f++) {
        t->paths[f] = strdup(paths[f]);
        t->fds[f] = open(paths[f], O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* no FIFO blocks */
        if (!t->paths[f]) {
            rc = PS_ENOMEM;
        } else if (t->fds[f] < 0) {
            snprintf(err, errlen, "%s: %s", paths[f], strerror(errno));
            rc = PS_EIO;
        } else {
            s->file_start[f] = n;
            rc = index_file(t, f, &t->offsets, &n, &cap, err, errlen);
        }
    }
    s->file_start[n_paths] = n;
    s->n = n;
    if (rc == PS_OK && n == 0) {
        snprintf(err, errlen, "%s%s: no records", paths[0], n_paths > 1 ? " and the others" : "");
        rc = PS_EFORMAT;
    }
    if (rc != PS_OK) {
        ps_source_close(s);
        return rc;
    }
    if (t->shape[0]) s->h = t->shape[0], s->w = t->shape[1], s->c = t->shape[2];
    snprintf(s->desc, sizeof s->desc, "%s%s (%zu file%s, %zu records)", paths[0],
             n_paths > 1 ? ", ..." : "", n_paths, n_paths > 1 ? "s" : "", n);
    *out = s;
    return PS_OK;
}
