/* Datasets: IDX parsing, gzip-or-raw file reading, images+labels loading and
 * the per-worker shard batcher with a reproducible per-epoch shuffle. */
#include "data.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "order.h"
#include "ps_error.h"

/* Largest file (after decompression) we accept: stops a gzip bomb. */
#define MAX_FILE_BYTES ((size_t)1 << 30)
#define CHUNK (64 * 1024)

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Returns PS_OK or PS_EFORMAT; out->data borrows from buf (caller keeps buf alive). */
int ps_idx_parse(const uint8_t *buf, size_t len, ps_idx *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (len < 4) {
        set_err(err, errlen, "IDX header too short: %zu bytes, need at least 4", len);
        return PS_EFORMAT;
    }
    if (buf[0] != 0 || buf[1] != 0) {
        set_err(err, errlen, "bad IDX magic 0x%02x%02x (expected 0x0000)", buf[0], buf[1]);
        return PS_EFORMAT;
    }
    if (buf[2] != 0x08) {
        set_err(err, errlen, "unsupported IDX type 0x%02x (only 0x08 unsigned byte)", buf[2]);
        return PS_EFORMAT;
    }
    int ndim = buf[3];
    if (ndim < 1 || ndim > 4) {
        set_err(err, errlen, "bad IDX dimension count %d (expected 1..4)", ndim);
        return PS_EFORMAT;
    }
    size_t header = 4 + 4 * (size_t)ndim;
    if (len < header) {
        set_err(err, errlen, "IDX header truncated: %d dims need %zu bytes, got %zu", ndim, header,
                len);
        return PS_EFORMAT;
    }
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        out->dims[i] = be32(buf + 4 + 4 * i);
        if (__builtin_mul_overflow(count, (size_t)out->dims[i], &count)) {
            set_err(err, errlen, "IDX dims overflow: product of %d dims does not fit", ndim);
            return PS_EFORMAT;
        }
    }
    size_t want;
    if (__builtin_add_overflow(count, header, &want)) {
        set_err(err, errlen, "IDX dims overflow: %zu elements plus header", count);
        return PS_EFORMAT;
    }
    if (len < want) {
        set_err(err, errlen, "truncated: expected %zu bytes, got %zu", want, len);
        return PS_EFORMAT;
    }
    if (len > want) {
        set_err(err, errlen, "trailing garbage: expected %zu bytes, got %zu", want, len);
        return PS_EFORMAT;
    }
    out->dtype = buf[2];
    out->ndim = ndim;
    out->data = buf + header;
    out->count = count;
    return PS_OK;
}

/* A growable byte buffer capped at MAX_FILE_BYTES. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes;

/* Ensures room for `more` bytes past len. Returns PS_OK, PS_EFORMAT (over the cap)
 * or PS_ENOMEM. */
static int bytes_reserve(bytes *b, size_t more) {
    if (more > MAX_FILE_BYTES - b->len) return PS_EFORMAT;
    if (b->len + more <= b->cap) return PS_OK;
    size_t ncap = b->cap ? b->cap : CHUNK;
    while (ncap < b->len + more)
        ncap *= 2;
    if (ncap > MAX_FILE_BYTES) ncap = MAX_FILE_BYTES;
    uint8_t *np = realloc(b->p, ncap);
    if (!np) return PS_ENOMEM;
    b->p = np;
    b->cap = ncap;
    return PS_OK;
}

static int read_raw(FILE *f, const char *path, bytes *out, char *err, size_t errlen) {
    for (;;) {
        int rc = bytes_reserve(out, CHUNK);
        if (rc == PS_EFORMAT) {
            set_err(err, errlen, "%s: file larger than %zu bytes", path, MAX_FILE_BYTES);
            return rc;
        }
        if (rc != PS_OK) {
            set_err(err, errlen, "%s: out of memory", path);
            return rc;
        }
        size_t got = fread(out->p + out->len, 1, CHUNK, f);
        out->len += got;
        if (got < CHUNK) break;
    }
    if (ferror(f)) {
        set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return PS_EIO;
    }
    return PS_OK;
}

/* Inflates the gzip stream from f (one or more members) into out. */
static int read_gz(FILE *f, const char *path, bytes *out, char *err, size_t errlen) {
    uint8_t *in = malloc(CHUNK);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (!in || inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
        set_err(err, errlen, "%s: out of memory starting zlib", path);
        free(in);
        return PS_ENOMEM;
    }
    int rc = PS_OK;
    int zrc = Z_OK;
    for (;;) {
        if (zs.avail_in == 0) {
            zs.avail_in = (uInt)fread(in, 1, CHUNK, f);
            zs.next_in = in;
            if (ferror(f)) {
                set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
                rc = PS_EIO;
                break;
            }
            if (zs.avail_in == 0) {
                if (zrc != Z_STREAM_END) {
                    set_err(err, errlen, "%s: truncated gzip stream", path);
                    rc = PS_EFORMAT;
                }
                break;
            }
        }
        if (zrc == Z_STREAM_END) {
            /* More input after a member: it must be another gzip member. */
            inflateReset(&zs);
        }
        rc = bytes_reserve(out, CHUNK);
        if (rc != PS_OK) {
            if (rc == PS_EFORMAT)
                set_err(err, errlen, "%s: decompressed size exceeds %zu bytes", path,
                        MAX_FILE_BYTES);
            else
                set_err(err, errlen, "%s: out of memory", path);
            break;
        }
        zs.next_out = out->p + out->len;
        zs.avail_out = (uInt)(out->cap - out->len);
        zrc = inflate(&zs, Z_NO_FLUSH);
        out->len = out->cap - zs.avail_out;
        if (zrc == Z_MEM_ERROR) {
            set_err(err, errlen, "%s: out of memory", path);
            rc = PS_ENOMEM;
            break;
        }
        if (zrc != Z_OK && zrc != Z_STREAM_END && zrc != Z_BUF_ERROR) {
            set_err(err, errlen, "%s: corrupt gzip data: %s", path,
                    zs.msg ? zs.msg : "inflate failed");
            rc = PS_EFORMAT;
            break;
        }
    }
    inflateEnd(&zs);
    free(in);
    return rc;
}

/* Returns PS_OK (caller frees *buf, non-NULL even for an empty file), PS_EIO,
 * PS_EFORMAT or PS_ENOMEM; on error *buf is NULL. */
int ps_read_maybe_gz(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return PS_EIO;
    }
    uint8_t magic[2] = {0, 0};
    size_t nm = fread(magic, 1, 2, f);
    if (ferror(f)) {
        set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
        fclose(f);
        return PS_EIO;
    }
    rewind(f);
    bytes b = {0};
    int rc;
    if (nm == 2 && magic[0] == 0x1f && magic[1] == 0x8b)
        rc = read_gz(f, path, &b, err, errlen);
    else
        rc = read_raw(f, path, &b, err, errlen);
    fclose(f);
    if (rc != PS_OK) {
        free(b.p);
        return rc;
    }
    if (!b.p) b.p = malloc(1); /* empty file: still hand back a buffer to free */
    if (!b.p) {
        set_err(err, errlen, "%s: out of memory", path);
        return PS_ENOMEM;
    }
    *buf = b.p;
    *len = b.len;
    return PS_OK;
}

/* Reads and parses one IDX file; *buf owns the bytes idx points into. */
static int load_one(const char *path, uint8_t **buf, ps_idx *idx, char *err, size_t errlen) {
    size_t len;
    int rc = ps_read_maybe_gz(path, buf, &len, err, errlen);
    if (rc != PS_OK) return rc;
    char why[256];
    rc = ps_idx_parse(*buf, len, idx, why, sizeof why);
    if (rc != PS_OK) {
        set_err(err, errlen, "%s: %s", path, why);
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

/* Returns PS_OK (out owns x and y: ps_dataset_free), PS_EIO, PS_EFORMAT or
 * PS_ENOMEM; on error *out is zeroed. */
int ps_dataset_load_idx(const char *images_path, const char *labels_path, ps_dataset *out,
                        char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    uint8_t *ibuf = NULL, *lbuf = NULL;
    ps_idx im, lb;
    int rc = load_one(images_path, &ibuf, &im, err, errlen);
    if (rc != PS_OK) return rc;
    rc = load_one(labels_path, &lbuf, &lb, err, errlen);
    if (rc != PS_OK) goto done;

    rc = PS_EFORMAT;
    size_t n = im.dims[0], dim;
    if (im.ndim == 3)
        dim = (size_t)im.dims[1] * im.dims[2];
    else if (im.ndim == 2)
        dim = im.dims[1];
    else {
        set_err(err, errlen, "%s: images must be 3-D [n][rows][cols] or 2-D [n][dim], got %d-D",
                images_path, im.ndim);
        goto done;
    }
    if (lb.ndim != 1) {
        set_err(err, errlen, "%s: labels must be 1-D [n], got %d-D", labels_path, lb.ndim);
        goto done;
    }
    if (lb.dims[0] != n) {
        set_err(err, errlen, "%s has %zu images but %s has %u labels", images_path, n, labels_path,
                lb.dims[0]);
        goto done;
    }
    if (n == 0 || dim == 0) {
        set_err(err, errlen, "%s: empty dataset (%zu samples of %zu features)", images_path, n,
                dim);
        goto done;
    }
    rc = PS_ENOMEM;
    out->x = malloc(im.count * sizeof *out->x); /* count <= 1 GiB, so no overflow */
    out->y = malloc(n * sizeof *out->y);
    if (!out->x || !out->y) {
        set_err(err, errlen, "%s: out of memory for %zu samples", images_path, n);
        ps_dataset_free(out);
        goto done;
    }
    for (size_t i = 0; i < im.count; i++)
        out->x[i] = (float)im.data[i] / 255.0f;
    int maxl = 0;
    for (size_t i = 0; i < n; i++) {
        out->y[i] = lb.data[i];
        if (lb.data[i] > maxl) maxl = lb.data[i];
    }
    out->n = n;
    out->dim = dim;
    out->h = im.ndim == 3 ? im.dims[1] : 1;
    out->w = im.ndim == 3 ? im.dims[2] : 1;
    out->c = im.ndim == 3 ? 1 : dim;
    out->num_classes = maxl + 1;
    rc = PS_OK;
done:
    free(ibuf);
    free(lbuf);
    return rc;
}

/* Writes dir/base.gz to path if it exists, else dir/base. Returns PS_OK, PS_EINVAL
 * (path too long) or PS_EIO (neither exists). */
static int pick_path(char *path, size_t size, const char *dir, const char *base, char *err,
                     size_t errlen) {
    int k = snprintf(path, size, "%s/%s.gz", dir, base);
    if (k < 0 || (size_t)k >= size) {
        set_err(err, errlen, "dataset path too long: %s/%s.gz", dir, base);
        return PS_EINVAL;
    }
    if (access(path, F_OK) == 0) return PS_OK;
    snprintf(path, size, "%s/%s", dir, base);
    if (access(path, F_OK) == 0) return PS_OK;
    set_err(err, errlen, "no %s(.gz) in %s: %s", base, dir, strerror(errno));
    return PS_EIO;
}

/* Returns as ps_dataset_load_idx, or PS_EIO when neither file variant exists. */
int ps_dataset_load_dir(const char *dir, int train, size_t max_n, ps_dataset *out, char *err,
                        size_t errlen) {
    memset(out, 0, sizeof *out);
    const char *prefix = train ? "train" : "t10k";
    char ibase[64], lbase[64], ipath[PATH_MAX], lpath[PATH_MAX];
    snprintf(ibase, sizeof ibase, "%s-images-idx3-ubyte", prefix);
    snprintf(lbase, sizeof lbase, "%s-labels-idx1-ubyte", prefix);
    int rc = pick_path(ipath, sizeof ipath, dir, ibase, err, errlen);
    if (rc == PS_OK) rc = pick_path(lpath, sizeof lpath, dir, lbase, err, errlen);
    if (rc != PS_OK) return rc;
    rc = ps_dataset_load_idx(ipath, lpath, out, err, errlen);
    if (rc != PS_OK) return rc;
    /* num_classes stays that of the whole file, so a truncated run builds the same model. */
    if (max_n > 0 && max_n < out->n) {
        out->n = max_n;
        float *x = realloc(out->x, max_n * out->dim * sizeof *x);
        int32_t *y = realloc(out->y, max_n * sizeof *y);
        if (x) out->x = x; /* shrinking: on failure the old block is still fine */
        if (y) out->y = y;
    }
    return PS_OK;
}

/* Frees x and y and zeroes *d; safe on a zeroed or already-freed dataset. */
void ps_dataset_free(ps_dataset *d) {
    if (!d) return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}

/* Returns PS_OK, PS_EINVAL or PS_ENOMEM; b owns order, borrows d. */
int ps_batcher_init(ps_batcher *b, const ps_dataset *d, unsigned index, unsigned count,
                    size_t batch, uint64_t seed) {
    memset(b, 0, sizeof *b);
    if (!d || count == 0 || index >= count || batch == 0) return PS_EINVAL;
    size_t shard = d->n / count;
    if (shard == 0) return PS_EINVAL;
    b->order = malloc(shard * sizeof *b->order);
    if (!b->order) return PS_ENOMEM;
    b->data = d;
    b->shard_n = shard;
    b->batch = batch;
    b->seed = seed;
    b->index = index;
    b->count = count;
    ps_batcher_start_epoch(b, 0);
    return PS_OK;
}

/* Frees the order array and zeroes *b; safe after a failed init. */
void ps_batcher_free(ps_batcher *b) {
    if (!b) return;
    free(b->order);
    memset(b, 0, sizeof *b);
}

/* Returns floor(n / count). */
size_t ps_batcher_shard_size(const ps_batcher *b) {
    return b->shard_n;
}

/* Returns ceil(shard / batch). */
size_t ps_batcher_steps_per_epoch(const ps_batcher *b) {
    if (b->batch == 0) return 0;
    return (b->shard_n + b->batch - 1) / b->batch;
}

/* Same (seed, epoch, index) -> same order on every machine, whatever came before. */
void ps_batcher_start_epoch(ps_batcher *b, unsigned epoch) {
    /* Start from the canonical shard so the order depends only on (seed, epoch, index). */
    for (size_t k = 0; k < b->shard_n; k++)
        b->order[k] = b->index + k * b->count;
    uint64_t s = ps_order_seed(b->seed, epoch, b->index); /* order.h draws the same */
    for (size_t i = b->shard_n; i > 1; i--) {
        size_t j = (size_t)ps_order_below(&s, i);
        size_t t = b->order[i - 1];
        b->order[i - 1] = b->order[j];
        b->order[j] = t;
    }
    b->pos = 0;
}

/* Returns rows copied (<= batch; 0 at the end of the epoch); x and y are the caller's. */
size_t ps_batcher_next(ps_batcher *b, float *x, int32_t *y) {
    if (b->pos >= b->shard_n) return 0;
    size_t k = b->shard_n - b->pos;
    if (k > b->batch) k = b->batch;
    size_t dim = b->data->dim;
    for (size_t r = 0; r < k; r++) {
        size_t s = b->order[b->pos + r];
        memcpy(x + r * dim, b->data->x + s * dim, dim * sizeof *x);
        y[r] = b->data->y[s];
    }
    b->pos += k;
    return k;
}
