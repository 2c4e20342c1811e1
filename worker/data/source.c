/* Record sources (source.h): what every format shares, and datasets held in
 * memory (IDX, CIFAR-10). */
#include "source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

void ps_sample_free(ps_sample *s) {
    if (!s) return;
    free(s->x);
    free(s->bytes);
    free(s->ids);
    ps_image_free(&s->img);
    memset(s, 0, sizeof *s);
}

int ps_sample_reserve(ps_sample *s, size_t n) {
    if (n <= s->cap && s->x) return PS_OK;
    float *x = realloc(s->x, (n ? n : 1) * sizeof *x);
    if (!x) return PS_ENOMEM;
    s->x = x, s->cap = n ? n : 1;
    return PS_OK;
}

int ps_sample_reserve_bytes(ps_sample *s, size_t n) {
    if (n <= s->bytes_cap && s->bytes) return PS_OK;
    uint8_t *b = realloc(s->bytes, n ? n : 1);
    if (!b) return PS_ENOMEM;
    s->bytes = b, s->bytes_cap = n ? n : 1;
    return PS_OK;
}

int ps_sample_reserve_ids(ps_sample *s, size_t n) {
    if (n <= s->ids_cap && s->ids) return PS_OK;
    uint64_t *v = realloc(s->ids, (n ? n : 1) * sizeof *v);
    if (!v) return PS_ENOMEM;
    s->ids = v, s->ids_cap = n ? n : 1;
    return PS_OK;
}

int ps_source_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    if (i >= src->n) {
        snprintf(err, errlen, "record %zu of %zu: out of range", i, src->n);
        return PS_EINVAL;
    }
    return src->ops->read(src, i, s, err, errlen);
}

void ps_source_close(ps_source *src) {
    if (!src) return;
    if (src->ops && src->ops->close) src->ops->close(src);
    free(src->file_start);
    free(src);
}

ps_source *ps_source_new(const ps_source_ops *ops, size_t n_files) {
    ps_source *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->file_start = calloc(n_files + 1, sizeof *s->file_start);
    if (!s->file_start) {
        free(s);
        return NULL;
    }
    s->ops = ops;
    s->n_files = n_files;
    return s;
}

/* ---- in memory ---- */

static int memory_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const ps_dataset *d = src->self;
    if (ps_sample_reserve(s, d->dim) != PS_OK) return PS_ENOMEM;
    memcpy(s->x, d->x + i * d->dim, d->dim * sizeof *s->x);
    s->h = src->h, s->w = src->w, s->c = src->c;
    s->label = d->y[i];
    return PS_OK;
}

static const ps_source_ops memory_ops = {.read = memory_read, .close = NULL};

int ps_source_memory(const ps_dataset *d, const char *format, ps_source **out, char *err,
                     size_t errlen) {
    *out = NULL;
    if (!d || d->n == 0 || d->dim == 0) {
        snprintf(err, errlen, "%s: no samples", format ? format : "dataset");
        return PS_EINVAL;
    }
    ps_source *s = ps_source_new(&memory_ops, 1);
    if (!s) return PS_ENOMEM;
    s->self = (void *)d;
    s->format = format ? format : "in memory";
    s->n = d->n;
    s->file_start[1] = d->n;
    bool img = d->h && d->w && d->c && d->h * d->w * d->c == d->dim;
    s->h = img ? d->h : 1, s->w = img ? d->w : 1, s->c = img ? d->c : d->dim;
    s->num_classes = d->num_classes;
    snprintf(s->desc, sizeof s->desc, "%zu samples of %zux%zux%zu in memory", d->n, s->h, s->w,
             s->c);
    *out = s;
    return PS_OK;
}
