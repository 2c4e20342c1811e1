/* NumPy arrays as a record source (source.h): x [n, ...] and y [n] (or
 * [n, 1]) mapped, never read whole; record i is x[i] converted to floats as
 * it is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "npz.h"
#include "ps_error.h"
#include "source.h"

typedef struct {
    ps_npy x, y; /* views (owned mappings when from .npy files) */
    ps_npz npz;  /* the archive both are in, or zeroed */
    size_t per;  /* values per record */
    char x_name[256];
} npy_state;

static int npy_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    (void)err, (void)errlen;
    npy_state *a = src->self;
    if (ps_sample_reserve(s, a->per) != PS_OK) return PS_ENOMEM;
    size_t base = i * a->per;
    if (a->x.dtype == PS_NPY_F4) {
        memcpy(s->x, a->x.data + base * 4, a->per * 4);
    } else if (a->x.dtype == PS_NPY_U1) {
        const uint8_t *p = a->x.data + base;
        for (size_t k = 0; k < a->per; k++) s->x[k] = (float)p[k];
    } else {
        for (size_t k = 0; k < a->per; k++) s->x[k] = (float)ps_npy_get(&a->x, base + k);
    }
    s->h = src->h, s->w = src->w, s->c = src->c;
    s->label = (int32_t)ps_npy_get(&a->y, i);
    return PS_OK;
}

static void npy_close(ps_source *src) {
    npy_state *a = src->self;
    if (!a) return;
    ps_npy_close(&a->x); /* views into an archive have no mapping of their own */
    ps_npy_close(&a->y);
    ps_npz_close(&a->npz);
    free(a);
}

static const ps_source_ops npy_ops = {.read = npy_read, .close = npy_close};

/* Checks x and y against each other and sets the source's shape and classes. */
static int npy_setup(ps_source *s, npy_state *a, const ps_source_opts *o, const char *yname,
                     char *err, size_t errlen) {
    const ps_npy *x = &a->x, *y = &a->y;
    if (x->ndim < 1 || x->shape[0] == 0) {
        snprintf(err, errlen, "%s: x must be an array of records [n, ...], not %s", a->x_name,
                 x->ndim < 1 ? "a scalar" : "empty");
        return PS_EFORMAT;
    }
    size_t n = x->shape[0];
    if (!(y->ndim == 1 || (y->ndim == 2 && y->shape[1] == 1)) || y->shape[0] != n) {
        snprintf(err, errlen, "%s: y must be [%zu] (or [%zu, 1]) labels, one per record of x", yname,
                 n, n);
        return PS_EFORMAT;
    }
    if (!ps_npy_is_integer(y)) {
        snprintf(err, errlen, "%s: y must hold integer class labels, not floats", yname);
        return PS_EFORMAT;
    }
    int maxl = -1;
    for (size_t i = 0; i < n; i++) {
        double v = ps_npy_get(y, i);
        if (v < 0 || v > 65535) {
            snprintf(err, errlen, "%s: label %zu is %.0f: labels run from 0 to 65535", yname, i, v);
            return PS_EFORMAT;
        }
        if ((int)v > maxl) maxl = (int)v;
    }
    a->per = x->count / n;
    size_t h = 1, w = 1, c = a->per;
    if (x->ndim == 4) h = x->shape[1], w = x->shape[2], c = x->shape[3];
    if (x->ndim == 3) h = x->shape[1], w = x->shape[2], c = 1;
    if (o && o->shape[0]) {
        if (o->shape[0] * o->shape[1] * o->shape[2] != a->per) {
            snprintf(err, errlen, "%s: the spec's shape %zux%zux%zu is not the %zu values of a record",
                     a->x_name, o->shape[0], o->shape[1], o->shape[2], a->per);
            return PS_EFORMAT;
        }
        h = o->shape[0], w = o->shape[1], c = o->shape[2];
    }
    s->self = a;
    s->format = "NumPy";
    s->n = n;
    s->file_start[1] = n;
    s->h = h, s->w = w, s->c = c;
    s->num_classes = maxl + 1;
    snprintf(s->desc, sizeof s->desc, "%.160s (%zu records of %zux%zux%zu)", a->x_name, n, h, w, c);
    return PS_OK;
}

int ps_source_npy(const char *x_path, const char *y_path, const ps_source_opts *o,
                  ps_source **out, char *err, size_t errlen) {
    *out = NULL;
    npy_state *a = calloc(1, sizeof *a);
    ps_source *s = ps_source_new(&npy_ops, 1);
    if (!a || !s) {
        free(a), ps_source_close(s);
        return PS_ENOMEM;
    }
    snprintf(a->x_name, sizeof a->x_name, "%s", x_path);
    int rc = ps_npy_open(x_path, &a->x, err, errlen);
    if (rc == PS_OK) rc = ps_npy_open(y_path, &a->y, err, errlen);
    if (rc == PS_OK) rc = npy_setup(s, a, o, y_path, err, errlen);
    if (rc != PS_OK) {
        ps_npy_close(&a->x), ps_npy_close(&a->y), free(a);
        s->self = NULL;
        ps_source_close(s);
        return rc;
    }
    *out = s;
    return PS_OK;
}

int ps_source_npz(const char *path, const char *x_name, const char *y_name,
                  const ps_source_opts *o, ps_source **out, char *err, size_t errlen) {
    *out = NULL;
    npy_state *a = calloc(1, sizeof *a);
    ps_source *s = ps_source_new(&npy_ops, 1);
    if (!a || !s) {
        free(a), ps_source_close(s);
        return PS_ENOMEM;
    }
    snprintf(a->x_name, sizeof a->x_name, "%.200s[%.40s]", path, x_name);
    int rc = ps_npz_open(path, &a->npz, err, errlen);
    const ps_npy *x = rc == PS_OK ? ps_npz_get(&a->npz, x_name) : NULL;
    const ps_npy *y = rc == PS_OK ? ps_npz_get(&a->npz, y_name) : NULL;
    if (rc == PS_OK && (!x || !y)) {
        snprintf(err, errlen, "%s: no member \"%s\" (members are named in the data spec's \"x\" "
                 "and \"y\")", path, !x ? x_name : y_name);
        rc = PS_EFORMAT;
    }
    char yname[300];
    snprintf(yname, sizeof yname, "%.200s[%.40s]", path, y_name);
    if (rc == PS_OK) {
        a->x = *x, a->y = *y;
        rc = npy_setup(s, a, o, yname, err, errlen);
    }
    if (rc != PS_OK) {
        ps_npz_close(&a->npz);
        free(a);
        s->self = NULL;
        ps_source_close(s);
        return rc;
    }
    *out = s;
    return PS_OK;
}
