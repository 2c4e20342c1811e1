/* Tensor files (see tensorfile.h and docs/FORMATS.md): a buffered writer that
 * computes the CRCs as it goes and publishes the file atomically, and a
 * streaming reader that bounds every length before trusting it. */
#include "tensorfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "errf.h"
#include "ps_error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensor files store float32 little-endian; this host is not little-endian"
#endif

#define HEADER_BYTES 92u /* magic 8, version 4, kind 4, meta 64, n 8, crc 4 */
#define FOOTER_BYTES 20u /* magic 8, n 8, crc 4 */
#define MIN_RECORD 25u   /* name_len 4, name >= 1, rank 4, attr_len 4, numel 8, crc 4 */
#define IO_BUF (1u << 20)

static const char HEADER_MAGIC[8] = {'P', 'S', 'T', 'E', 'N', 'S', 'O', 'R'};
static const char FOOTER_MAGIC[8] = {'P', 'S', 'E', 'N', 'D', 0, 0, 0};


static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p) {
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* product(shape[0..rank)) into *out; 0 on overflow of size_t. */
static int shape_numel(const uint64_t *shape, uint32_t rank, uint64_t *out) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > SIZE_MAX / sizeof(float) / shape[i]) return 0;
        n *= shape[i];
    }
    *out = n;
    return 1;
}

/* ---- writer ---- */

typedef struct {
    int fd;
    uint8_t *buf;
    size_t len;
    uint32_t crc; /* running CRC of the bytes written with w_bytes */
    int errnum;   /* first write error */
} writer;

static void w_write_fd(writer *w, const uint8_t *p, size_t n) {
    while (n > 0 && w->errnum == 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0) {
            if (errno != EINTR) w->errnum = errno;
            continue;
        }
        p += k;
        n -= (size_t)k;
    }
}

static void w_flush(writer *w) {
    w_write_fd(w, w->buf, w->len);
    w->len = 0;
}

/* Appends n bytes without touching the running CRC. */
static void w_raw(writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    if (w->len + n > IO_BUF) w_flush(w);
    if (n >= IO_BUF) {
        w_write_fd(w, p, n);
        return;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

/* Appends n bytes and extends the running CRC over them. */
static void w_bytes(writer *w, const void *data, size_t n) {
    w->crc = ps_crc32c_extend(w->crc, data, n);
    w_raw(w, data, n);
}

static void w_u32(writer *w, uint32_t v) {
    uint8_t b[4];
    put32(b, v);
    w_bytes(w, b, 4);
}

static void w_u64(writer *w, uint64_t v) {
    uint8_t b[8];
    put64(b, v);
    w_bytes(w, b, 8);
}

static int check_tensor(const ps_tf_tensor *t, size_t i, char *err, size_t errlen) {
    size_t nl = t->name ? strlen(t->name) : 0;
    uint64_t numel;
    if (nl == 0 || nl > PS_TF_MAX_NAME)
        return ps_errf(PS_EINVAL, err, errlen, "tensor %zu: name must have 1..%u bytes", i,
                    PS_TF_MAX_NAME);
    if (t->rank > PS_TF_MAX_RANK)
        return ps_errf(PS_EINVAL, err, errlen, "tensor %zu '%s': rank %u > %u", i, t->name, t->rank,
                    PS_TF_MAX_RANK);
    if (!shape_numel(t->shape, t->rank, &numel) || numel != t->numel)
        return ps_errf(PS_EINVAL, err, errlen, "tensor %zu '%s': numel %zu is not the shape's product",
                    i, t->name, t->numel);
    if (t->numel > 0 && !t->data)
        return ps_errf(PS_EINVAL, err, errlen, "tensor %zu '%s': no data", i, t->name);
    if (t->attr_len > PS_TF_MAX_ATTR || (t->attr_len > 0 && !t->attr))
        return ps_errf(PS_EINVAL, err, errlen, "tensor %zu '%s': bad attribute (%u bytes, max %u)", i,
                    t->name, t->attr_len, PS_TF_MAX_ATTR);
    return PS_OK;
}

static void write_all(writer *w, const ps_tf_header *h, const ps_tf_tensor *t, size_t n) {
    uint8_t hb[HEADER_BYTES];
    memcpy(hb, HEADER_MAGIC, 8);
    put32(hb + 8, PS_TF_FORMAT_VERSION);
    put32(hb + 12, h->kind);
    for (int k = 0; k < 8; k++)
        put64(hb + 16 + 8 * k, h->meta[k]);
    put64(hb + 80, (uint64_t)n);
    put32(hb + 88, ps_crc32c(hb, 88));
    w_raw(w, hb, sizeof hb);

    uint32_t all = 0; /* CRC over the record CRCs, for the footer */
    for (size_t i = 0; i < n && w->errnum == 0; i++) {
        w->crc = 0;
        uint32_t nl = (uint32_t)strlen(t[i].name);
        w_u32(w, nl);
        w_bytes(w, t[i].name, nl);
        w_u32(w, t[i].rank);
        for (uint32_t d = 0; d < t[i].rank; d++)
            w_u64(w, t[i].shape[d]);
        w_u32(w, t[i].attr_len);
        if (t[i].attr_len) w_bytes(w, t[i].attr, t[i].attr_len);
        w_u64(w, (uint64_t)t[i].numel);
        if (t[i].numel) w_bytes(w, t[i].data, t[i].numel * sizeof(float));
        uint8_t cb[4];
        put32(cb, w->crc);
        w_raw(w, cb, 4);
        all = ps_crc32c_extend(all, cb, 4);
    }

    uint8_t fb[FOOTER_BYTES];
    memcpy(fb, FOOTER_MAGIC, 8);
    put64(fb + 8, (uint64_t)n);
    put32(fb + 16, all);
    w_raw(w, fb, sizeof fb);
    w_flush(w);
}

/* fsync of the directory holding path, so the rename itself is durable. */
static int fsync_parent(const char *path, char *err, size_t errlen) {
    char *copy = strdup(path);
    if (!copy) return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = PS_OK;
    if (fd < 0 || fsync(fd) != 0)
        rc = ps_errf(PS_EIO, err, errlen, "fsync of directory %s: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(copy);
    return rc;
}

int ps_tf_write(const char *path, const ps_tf_header *h, const ps_tf_tensor *t, size_t n, char *err,
                size_t errlen) {
    if (!path || !h || (n > 0 && !t)) return ps_errf(PS_EINVAL, err, errlen, "bad arguments");
    for (size_t i = 0; i < n; i++) {
        int rc = check_tensor(&t[i], i, err, errlen);
        if (rc != PS_OK) return rc;
    }
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    writer w = {.fd = -1, .buf = malloc(IO_BUF)};
    if (!tmp || !w.buf) {
        free(tmp);
        free(w.buf);
        return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());

    int rc = PS_OK;
    w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd < 0) {
        rc = ps_errf(PS_EIO, err, errlen, "create %s: %s", tmp, strerror(errno));
        goto out;
    }
    write_all(&w, h, t, n);
    if (w.errnum != 0)
        rc = ps_errf(PS_EIO, err, errlen, "write %s: %s", tmp, strerror(w.errnum));
    else if (fsync(w.fd) != 0)
        rc = ps_errf(PS_EIO, err, errlen, "fsync %s: %s", tmp, strerror(errno));
    if (close(w.fd) != 0 && rc == PS_OK)
        rc = ps_errf(PS_EIO, err, errlen, "close %s: %s", tmp, strerror(errno));
    if (rc == PS_OK && rename(tmp, path) != 0)
        rc = ps_errf(PS_EIO, err, errlen, "rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != PS_OK) {
        unlink(tmp);
        goto out;
    }
    rc = fsync_parent(path, err, errlen);
out:
    free(tmp);
    free(w.buf);
    return rc;
}

/* ---- reader ---- */

typedef struct {
    int fd;
    uint8_t *buf;
    size_t pos, len;
    uint64_t off;  /* bytes consumed */
    uint64_t size; /* from fstat, for the bounds; a short read is still caught */
    uint32_t crc;  /* running CRC of the bytes read with r_bytes */
    const char *path;
} reader;

/* Reads up to n bytes into p; returns the count (short only at end of file), or -1. */
static ssize_t read_full(int fd, uint8_t *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

/* Consumes exactly n bytes into dst (no CRC). `what` names the field for the
 * truncation message. */
static int r_raw(reader *r, void *dst, size_t n, const char *what, char *err, size_t errlen) {
    uint8_t *d = dst;
    size_t need = n;
    while (need > 0) {
        if (r->pos == r->len) {
            ssize_t k;
            if (need >= IO_BUF) {
                k = read_full(r->fd, d, need);
                if (k < 0)
                    return ps_errf(PS_EIO, err, errlen, "read %s: %s", r->path, strerror(errno));
                d += k;
                need -= (size_t)k;
                r->off += (uint64_t)k;
                if (need > 0) break;
                continue;
            }
            k = read_full(r->fd, r->buf, IO_BUF);
            if (k < 0) return ps_errf(PS_EIO, err, errlen, "read %s: %s", r->path, strerror(errno));
            if (k == 0) break;
            r->pos = 0;
            r->len = (size_t)k;
        }
        size_t c = r->len - r->pos < need ? r->len - r->pos : need;
        memcpy(d, r->buf + r->pos, c);
        r->pos += c;
        r->off += c;
        d += c;
        need -= c;
    }
    if (need > 0)
        return ps_errf(PS_EFORMAT, err, errlen, "truncated at byte %" PRIu64 " reading %s", r->off,
                    what);
    return PS_OK;
}

static int r_bytes(reader *r, void *dst, size_t n, const char *what, char *err, size_t errlen) {
    int rc = r_raw(r, dst, n, what, err, errlen);
    if (rc == PS_OK) r->crc = ps_crc32c_extend(r->crc, dst, n);
    return rc;
}

static int r_u32(reader *r, uint32_t *v, const char *what, char *err, size_t errlen) {
    uint8_t b[4];
    int rc = r_bytes(r, b, 4, what, err, errlen);
    *v = get32(b);
    return rc;
}

static int r_u64(reader *r, uint64_t *v, const char *what, char *err, size_t errlen) {
    uint8_t b[8];
    int rc = r_bytes(r, b, 8, what, err, errlen);
    *v = get64(b);
    return rc;
}

static uint64_t remaining(const reader *r) {
    return r->size > r->off ? r->size - r->off : 0;
}

static void owned_free(ps_tf_owned *o) {
    free(o->name);
    free(o->data);
    free(o->attr);
}

/* Reads record i into *o (zeroed on entry); returns its stored CRC in *crc_out. */
static int read_record(reader *r, size_t i, ps_tf_owned *o, uint32_t *crc_out, char *err,
                       size_t errlen) {
    char what[PS_TF_MAX_NAME + 64];
    uint32_t nl, rank, alen, stored;
    uint64_t numel, want;
    int rc;
    r->crc = 0;
    snprintf(what, sizeof what, "tensor %zu", i);
    if ((rc = r_u32(r, &nl, what, err, errlen)) != PS_OK) return rc;
    if (nl == 0 || nl > PS_TF_MAX_NAME)
        return ps_errf(PS_EFORMAT, err, errlen, "tensor %zu: bad name length %u at byte %" PRIu64, i,
                    nl, r->off - 4);
    if (!(o->name = malloc(nl + 1))) return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    if ((rc = r_bytes(r, o->name, nl, what, err, errlen)) != PS_OK) return rc;
    o->name[nl] = '\0';
    if (strlen(o->name) != nl)
        return ps_errf(PS_EFORMAT, err, errlen, "tensor %zu: name contains a NUL byte", i);
    snprintf(what, sizeof what, "tensor %zu '%s'", i, o->name);
    if ((rc = r_u32(r, &rank, what, err, errlen)) != PS_OK) return rc;
    if (rank > PS_TF_MAX_RANK) return ps_errf(PS_EFORMAT, err, errlen, "%s: bad rank %u", what, rank);
    o->rank = rank;
    for (uint32_t d = 0; d < rank; d++)
        if ((rc = r_u64(r, &o->shape[d], what, err, errlen)) != PS_OK) return rc;
    if ((rc = r_u32(r, &alen, what, err, errlen)) != PS_OK) return rc;
    if (alen > PS_TF_MAX_ATTR)
        return ps_errf(PS_EFORMAT, err, errlen, "%s: attribute length %u > %u", what, alen,
                    PS_TF_MAX_ATTR);
    if (alen > 0) {
        if (!(o->attr = malloc(alen))) return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
        if ((rc = r_bytes(r, o->attr, alen, what, err, errlen)) != PS_OK) return rc;
        o->attr_len = alen;
    }
    if ((rc = r_u64(r, &numel, what, err, errlen)) != PS_OK) return rc;
    if (!shape_numel(o->shape, rank, &want) || want != numel)
        return ps_errf(PS_EFORMAT, err, errlen, "%s: numel %" PRIu64 " does not match its shape", what,
                    numel);
    if (numel > remaining(r) / sizeof(float))
        return ps_errf(PS_EFORMAT, err, errlen,
                    "truncated at byte %" PRIu64 ": %s needs %" PRIu64
                    " data bytes from byte %" PRIu64,
                    r->size, what, numel * sizeof(float), r->off);
    o->numel = (size_t)numel;
    if (numel > 0) {
        if (!(o->data = malloc(o->numel * sizeof(float))))
            return ps_errf(PS_ENOMEM, err, errlen, "out of memory for %s", what);
        if ((rc = r_bytes(r, o->data, o->numel * sizeof(float), what, err, errlen)) != PS_OK)
            return rc;
    }
    uint32_t computed = r->crc;
    uint8_t cb[4];
    if ((rc = r_raw(r, cb, 4, what, err, errlen)) != PS_OK) return rc;
    stored = get32(cb);
    if (stored != computed)
        return ps_errf(PS_EFORMAT, err, errlen, "bad CRC in %s (stored 0x%08x, computed 0x%08x)", what,
                    stored, computed);
    *crc_out = stored;
    return PS_OK;
}

static int read_all(reader *r, ps_tf_file *out, char *err, size_t errlen) {
    uint8_t hb[HEADER_BYTES];
    int rc = r_raw(r, hb, 8, "the header", err, errlen);
    if (rc != PS_OK) return rc;
    if (memcmp(hb, HEADER_MAGIC, 8) != 0)
        return ps_errf(PS_EFORMAT, err, errlen, "not a tensor file (bad magic)");
    if ((rc = r_raw(r, hb + 8, HEADER_BYTES - 8, "the header", err, errlen)) != PS_OK) return rc;
    uint32_t version = get32(hb + 8);
    if (version != PS_TF_FORMAT_VERSION)
        return ps_errf(PS_EFORMAT, err, errlen, "unsupported format version %u (this build reads %u)",
                    version, PS_TF_FORMAT_VERSION);
    uint32_t hcrc = ps_crc32c(hb, 88);
    if (get32(hb + 88) != hcrc)
        return ps_errf(PS_EFORMAT, err, errlen, "bad header CRC (stored 0x%08x, computed 0x%08x)",
                    get32(hb + 88), hcrc);
    out->h.kind = get32(hb + 12);
    for (int k = 0; k < 8; k++)
        out->h.meta[k] = get64(hb + 16 + 8 * k);
    uint64_t n = get64(hb + 80);
    uint64_t room =
        r->size > HEADER_BYTES + FOOTER_BYTES ? r->size - HEADER_BYTES - FOOTER_BYTES : 0;
    if (n > room / MIN_RECORD)
        return ps_errf(PS_EFORMAT, err, errlen,
                    "truncated at byte %" PRIu64 ": the header claims %" PRIu64
                    " tensors, more than the file can hold",
                    r->size, n);

    size_t cap = 0;
    uint32_t all = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            ps_tf_owned *t = realloc(out->t, cap * sizeof *t);
            if (!t) return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
            out->t = t;
        }
        ps_tf_owned *o = &out->t[out->n++];
        memset(o, 0, sizeof *o);
        uint32_t c = 0;
        if ((rc = read_record(r, (size_t)i, o, &c, err, errlen)) != PS_OK) return rc;
        uint8_t cb[4];
        put32(cb, c);
        all = ps_crc32c_extend(all, cb, 4);
    }

    uint8_t fb[FOOTER_BYTES];
    if ((rc = r_raw(r, fb, FOOTER_BYTES, "the footer", err, errlen)) != PS_OK) return rc;
    if (memcmp(fb, FOOTER_MAGIC, 8) != 0)
        return ps_errf(PS_EFORMAT, err, errlen, "bad footer magic at byte %" PRIu64,
                    r->off - FOOTER_BYTES);
    if (get64(fb + 8) != n)
        return ps_errf(PS_EFORMAT, err, errlen,
                    "footer counts %" PRIu64 " tensors, the header %" PRIu64, get64(fb + 8), n);
    if (get32(fb + 16) != all)
        return ps_errf(PS_EFORMAT, err, errlen, "bad footer CRC (stored 0x%08x, computed 0x%08x)",
                    get32(fb + 16), all);
    uint64_t end = r->off;
    if (r->size > end)
        return ps_errf(PS_EFORMAT, err, errlen,
                    "%" PRIu64 " bytes of trailing garbage after the footer (byte %" PRIu64 ")",
                    r->size - end, end);
    uint8_t extra;
    if (r_raw(r, &extra, 1, "", NULL, 0) == PS_OK)
        return ps_errf(PS_EFORMAT, err, errlen,
                    "trailing garbage after the footer (byte %" PRIu64 "; the file grew)", end);
    return PS_OK;
}

int ps_tf_read(const char *path, ps_tf_file *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    reader r = {.fd = open(path, O_RDONLY | O_CLOEXEC), .path = path};
    if (r.fd < 0) {
        int e = errno;
        return ps_errf(e == ENOENT ? PS_ENOENT : PS_EIO, err, errlen, "open %s: %s", path,
                    strerror(e));
    }
    struct stat sb;
    int rc = PS_OK;
    if (fstat(r.fd, &sb) != 0)
        rc = ps_errf(PS_EIO, err, errlen, "stat %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = ps_errf(PS_EIO, err, errlen, "%s is not a regular file", path);
    else if (!(r.buf = malloc(IO_BUF)))
        rc = ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    if (rc == PS_OK) {
        r.size = (uint64_t)sb.st_size;
        rc = read_all(&r, out, err, errlen);
    }
    free(r.buf);
    close(r.fd);
    if (rc != PS_OK) ps_tf_file_free(out);
    return rc;
}

void ps_tf_file_free(ps_tf_file *f) {
    for (size_t i = 0; i < f->n; i++)
        owned_free(&f->t[i]);
    free(f->t);
    memset(f, 0, sizeof *f);
}
