/* A batch's embedding rows through the exchange (emb_feed.h). */
#include "emb_feed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "rows.h"

typedef struct {
    uint64_t *col, *uniq; /* the batch's ids of this layer's input; distinct ones */
    uint32_t *where;
    float *rows;
    size_t cap, n_uniq, dim;
    size_t first, width; /* its input's id columns: [first, first + width) of a record's */
} feed_layer;

struct ps_emb_feed {
    size_t n, n_ids;
    feed_layer *l;
};

int ps_emb_feed_new(const ps_model *m, size_t n_ids, ps_emb_feed **out, char *err,
                    size_t errlen) {
    *out = NULL;
    size_t n = ps_model_num_embeddings(m), k = ps_model_num_id_inputs(m);
    size_t cols = ps_model_id_columns(m);
    if (!n && !k && !n_ids) return PS_OK;
    if (cols != n_ids) {
        snprintf(err, errlen,
                 "the model reads %zu id(s) a sample from %zu id input(s)%s%s but the data gives "
                 "%zu id column(s) a record (the id inputs read the data spec's \"id_columns\" "
                 "in order, an input of shape [n] the next n)",
                 cols, k, k ? ", the first " : "", k ? ps_model_id_input_name(m, 0) : "", n_ids);
        return PS_EINVAL;
    }
    ps_emb_feed *f = calloc(1, sizeof *f);
    if (f) f->l = calloc(n ? n : 1, sizeof *f->l);
    if (!f || !f->l) {
        free(f);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    f->n = n, f->n_ids = n_ids;
    for (size_t e = 0; e < n; e++) {
        const ps_model_embedding *me = ps_model_embedding_at(m, e);
        f->l[e].dim = me->dim;
        f->l[e].width = me->width;
        for (size_t i = 0; i < me->ids_input; i++)
            f->l[e].first += ps_model_id_input_width(m, i);
    }
    *out = f;
    return PS_OK;
}

void ps_emb_feed_free(ps_emb_feed *f) {
    if (!f) return;
    for (size_t e = 0; e < f->n; e++) {
        feed_layer *l = &f->l[e];
        free(l->col), free(l->uniq), free(l->where), free(l->rows);
    }
    free(f->l);
    free(f);
}

static int reserve(feed_layer *l, size_t nb) {
    if (nb <= l->cap) return PS_OK;
    uint64_t *c = realloc(l->col, nb * sizeof *c);
    if (c) l->col = c;
    uint64_t *u = c ? realloc(l->uniq, nb * sizeof *u) : NULL;
    if (u) l->uniq = u;
    uint32_t *w = u ? realloc(l->where, nb * sizeof *w) : NULL;
    if (w) l->where = w;
    float *r = w ? realloc(l->rows, nb * l->dim * sizeof *r) : NULL;
    if (r) l->rows = r;
    if (!r) return PS_ENOMEM;
    l->cap = nb;
    return PS_OK;
}

int ps_emb_feed_rows(ps_emb_feed *f, ps_model *m, ps_exchange *ex, const uint64_t *ids, size_t nb,
                     char *err, size_t errlen) {
    if (!f) return PS_OK;
    for (size_t e = 0; e < f->n; e++) {
        feed_layer *l = &f->l[e];
        size_t slots = nb * l->width;
        int rc = reserve(l, slots);
        for (size_t i = 0; rc == PS_OK && i < nb; i++)
            memcpy(l->col + i * l->width, ids + i * f->n_ids + l->first,
                   l->width * sizeof *l->col);
        if (rc == PS_OK) rc = ps_rows_dedupe(l->col, slots, l->uniq, &l->n_uniq, l->where);
        if (rc != PS_OK) {
            snprintf(err, errlen, "out of memory for a batch's embedding rows");
            return rc;
        }
        rc = ps_exchange_rows_pull(ex, e, l->uniq, l->n_uniq, l->rows, err, errlen);
        if (rc != PS_OK) return rc;
        rc = ps_model_set_embedding_rows(m, e, l->rows, l->n_uniq, l->where, nb);
        if (rc != PS_OK) {
            snprintf(err, errlen, "embedding '%s': %s", ps_model_embedding_at(m, e)->name,
                     ps_strerror(rc));
            return rc;
        }
    }
    return PS_OK;
}

int ps_emb_feed_push(ps_emb_feed *f, ps_model *m, ps_exchange *ex, char *err, size_t errlen) {
    if (!f) return PS_OK;
    size_t last = f->n;
    for (size_t e = 0; e < f->n; e++) {
        size_t n = 0;
        if (ps_model_embedding_grads(m, e, &n)) last = e;
    }
    for (size_t e = 0; e < f->n; e++) {
        size_t n = 0;
        const float *g = ps_model_embedding_grads(m, e, &n);
        if (!g) continue; /* not trainable */
        int rc = ps_exchange_rows_push(ex, e, f->l[e].uniq, n, g, e == last, err, errlen);
        if (rc != PS_OK) return rc;
    }
    return PS_OK;
}
