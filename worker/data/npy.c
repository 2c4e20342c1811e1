/* .npy files (npy.h): the header is the Python literal numpy writes, e.g.
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
 * parsed here by a small scanner that accepts exactly those three keys. */
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c reads little-endian data in place: a big-endian host needs byte swaps"
#endif

static const struct {
    const char *descr;
    ps_npy_dtype dtype;
    size_t size;
} dtypes[] = {
    {"|b1", PS_NPY_BOOL, 1}, {"|i1", PS_NPY_I1, 1}, {"|u1", PS_NPY_U1, 1},
    {"<i2", PS_NPY_I2, 2},   {"<u2", PS_NPY_U2, 2}, {"<i4", PS_NPY_I4, 4},
    {"<u4", PS_NPY_U4, 4},   {"<i8", PS_NPY_I8, 8}, {"<u8", PS_NPY_U8, 8},
    {"<f2", PS_NPY_F2, 2},   {"<f4", PS_NPY_F4, 4}, {"<f8", PS_NPY_F8, 8},
};

typedef struct {
    const char *p, *end;
} scan;

static void skip_ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n'))
        s->p++;
}

static bool eat(scan *s, char c) {
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "...") into out (at most cap - 1 chars). */
static bool quoted(scan *s, char *out, size_t cap) {
    skip_ws(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"')) return false;
    char q = *s->p++;
    size_t n = 0;
    while (s->p < s->end && *s->p != q) {
        if (n + 1 >= cap) return false;
        out[n++] = *s->p++;
    }
    if (s->p >= s->end) return false;
    s->p++;
    out[n] = '\0';
    return true;
}

static bool word(scan *s, const char *w) {
    skip_ws(s);
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0) return false;
    s->p += n;
    return true;
}

static bool shape_tuple(scan *s, ps_npy *a) {
    if (!eat(s, '(')) return false;
    a->ndim = 0;
    for (;;) {
        skip_ws(s);
        if (eat(s, ')')) return true;
        if (a->ndim == PS_NPY_MAX_DIMS || s->p >= s->end || !isdigit((unsigned char)*s->p))
            return false;
        size_t v = 0;
        while (s->p < s->end && isdigit((unsigned char)*s->p)) {
            unsigned d = (unsigned)(*s->p++ - '0');
            if (v > (SIZE_MAX - d) / 10) return false;
            v = v * 10 + d;
        }
        skip_ws(s);
        if (s->p < s->end && *s->p == 'L') s->p++; /* Python 2's long */
        a->shape[a->ndim++] = v;
        if (!eat(s, ',')) return eat(s, ')');
    }
}

int ps_npy_parse(const uint8_t *buf, size_t len, ps_npy *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        snprintf(err, errlen, "not a .npy file (no \\x93NUMPY magic)");
        return PS_EFORMAT;
    }
    unsigned major = buf[6];
    size_t hlen, start;
    if (major == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) {
            snprintf(err, errlen, "truncated .npy header");
            return PS_EFORMAT;
        }
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
               (size_t)buf[11] << 24;
        start = 12;
    } else {
        snprintf(err, errlen, ".npy format version %u.%u is not one of 1.0, 2.0, 3.0", major,
                 buf[7]);
        return PS_EFORMAT;
    }
    if (hlen > len - start) {
        snprintf(err, errlen, ".npy header of %zu bytes runs past the end of the file", hlen);
        return PS_EFORMAT;
    }
    scan s = {(const char *)buf + start, (const char *)buf + start + hlen};
    bool have_descr = false, have_order = false, have_shape = false, fortran = false;
    char descr[32] = "";
    if (!eat(&s, '{')) goto syntax;
    while (!eat(&s, '}')) {
        char key[32];
        if (!quoted(&s, key, sizeof key) || !eat(&s, ':')) goto syntax;
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (!quoted(&s, descr, sizeof descr)) {
                snprintf(err, errlen, ".npy dtype is not a simple type (a structured array?)");
                return PS_EFORMAT;
            }
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            if (word(&s, "True"))
                fortran = true;
            else if (!word(&s, "False"))
                goto syntax;
            have_order = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (!shape_tuple(&s, out)) goto syntax;
            have_shape = true;
        } else {
            snprintf(err, errlen, ".npy header has an unexpected or repeated key '%.31s'", key);
            return PS_EFORMAT;
        }
        if (!eat(&s, ',')) {
            if (!eat(&s, '}')) goto syntax;
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape) {
        snprintf(err, errlen, ".npy header lacks %s", !have_descr ? "'descr'"
                                                      : !have_order ? "'fortran_order'"
                                                                    : "'shape'");
        return PS_EFORMAT;
    }
    if (fortran) {
        snprintf(err, errlen, ".npy array is in Fortran order: save it with "
                              "numpy.ascontiguousarray first");
        return PS_EFORMAT;
    }
    bool found = false; /* '<' little-endian, '|' not applicable (bytes), '=' native (little) */
    if (strlen(descr) == 3 && strchr("<|=", descr[0]))
        for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0] && !found; i++)
            if (strcmp(descr + 1, dtypes[i].descr + 1) == 0) {
                out->dtype = dtypes[i].dtype, out->itemsize = dtypes[i].size;
                found = true;
            }
    if (!found) {
        snprintf(err, errlen, ".npy dtype '%s' is not supported (%s)", descr,
                 descr[0] == '>' ? "big-endian: convert with astype('<...')"
                 : descr[1] == 'O' ? "an object array is a pickle"
                                   : "numbers and bools only");
        return PS_EFORMAT;
    }
    size_t count = 1;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] && count > SIZE_MAX / out->shape[i]) goto too_big;
        count *= out->shape[i];
    }
    if (count > SIZE_MAX / out->itemsize) goto too_big;
    size_t data_off = start + hlen;
    if (count * out->itemsize != len - data_off) {
        snprintf(err, errlen, ".npy header says %zu elements of %zu bytes, the file holds %zu "
                 "bytes of data", count, out->itemsize, len - data_off);
        return PS_EFORMAT;
    }
    out->count = count;
    out->data = buf + data_off;
    return PS_OK;
too_big:
    snprintf(err, errlen, ".npy shape is too large to address");
    return PS_EFORMAT;
syntax:
    snprintf(err, errlen, ".npy header is not a dict of 'descr', 'fortran_order' and 'shape'");
    return PS_EFORMAT;
}

int ps_npy_open(const char *path, ps_npy *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return PS_EIO;
    }
    if (!S_ISREG(st.st_mode) || st.st_size == 0) {
        snprintf(err, errlen, "%s: %s", path, S_ISREG(st.st_mode) ? "empty file" : "not a regular file");
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
    char why[200];
    int rc = ps_npy_parse(map, len, out, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s: %s", path, why);
        munmap(map, len);
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->map = map;
    out->map_len = len;
    return PS_OK;
}

void ps_npy_close(ps_npy *a) {
    if (a->map) munmap(a->map, a->map_len);
    memset(a, 0, sizeof *a);
}

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0    ? ldexp(m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

double ps_npy_get(const ps_npy *a, size_t i) {
    const uint8_t *p = a->data + i * a->itemsize;
    union {
        int8_t i1; uint8_t u1; int16_t i2; uint16_t u2; int32_t i4; uint32_t u4;
        int64_t i8; uint64_t u8; float f4; double f8;
    } v;
    memcpy(&v, p, a->itemsize); /* unaligned-safe; little-endian host */
    switch (a->dtype) {
    case PS_NPY_BOOL: return v.u1 != 0;
    case PS_NPY_I1: return v.i1;
    case PS_NPY_U1: return v.u1;
    case PS_NPY_I2: return v.i2;
    case PS_NPY_U2: return v.u2;
    case PS_NPY_I4: return v.i4;
    case PS_NPY_U4: return v.u4;
    case PS_NPY_I8: return (double)v.i8;
    case PS_NPY_U8: return (double)v.u8;
    case PS_NPY_F2: return half_to_double(v.u2);
    case PS_NPY_F4: return v.f4;
    case PS_NPY_F8: return v.f8;
    }
    return 0;
}

bool ps_npy_is_integer(const ps_npy *a) {
    return a->dtype < PS_NPY_F2;
}
