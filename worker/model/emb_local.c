/* A whole embedding table in this process (emb_local.h). */
#include "emb_local.h"

#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "rows.h"

struct ps_emb_local {
    size_t input_dim, dim, slot_floats;
    ps_row_opt opt;
    uint64_t updates; /* applications so far (lazy Adam's t) */
    float *w, *slots;
    /* the last lookup */
    uint64_t *uniq;
    uint32_t *where;
    float *rows;
    size_t cap, n_uniq;
};

int ps_emb_local_new(const char *name, size_t input_dim, size_t dim, float lo, float hi,
                     uint64_t seed, const ps_row_opt *opt, ps_emb_local **out) {
    *out = NULL;
    if (!input_dim || !dim || !opt || input_dim > SIZE_MAX / dim / sizeof(float)) return PS_EINVAL;
    ps_emb_local *t = calloc(1, sizeof *t);
    if (!t) return PS_ENOMEM;
    t->input_dim = input_dim;
    t->dim = dim;
    t->opt = *opt;
    t->slot_floats = ps_row_opt_slot_floats(opt->kind, dim);
    t->w = malloc(input_dim * dim * sizeof *t->w);
    t->slots = malloc((t->slot_floats ? input_dim * t->slot_floats : 1) * sizeof *t->slots);
    if (!t->w || !t->slots) {
        ps_emb_local_free(t);
        return PS_ENOMEM;
    }
    uint64_t key = ps_rows_table_key(name);
    for (size_t id = 0; id < input_dim; id++) {
        ps_rows_initial(seed, key, id, lo, hi, t->w + id * dim, dim);
        if (t->slot_floats) ps_row_opt_init(opt, t->slots + id * t->slot_floats, dim);
    }
    *out = t;
    return PS_OK;
}

int ps_emb_local_for(const ps_model *m, size_t e, uint64_t seed, const ps_row_opt *opt,
                     ps_emb_local **out) {
    const ps_model_embedding *me = ps_model_embedding_at(m, e);
    if (!me) return PS_EINVAL;
    return ps_emb_local_new(me->name, me->input_dim, me->dim, me->init_lo, me->init_hi, seed, opt,
                            out);
}

void ps_emb_local_free(ps_emb_local *t) {
    if (!t) return;
    free(t->w);
    free(t->slots);
    free(t->uniq);
    free(t->where);
    free(t->rows);
    free(t);
}

const float *ps_emb_local_row(const ps_emb_local *t, uint64_t id) {
    return id < t->input_dim ? t->w + id * t->dim : NULL;
}

float *ps_emb_local_row_mut(ps_emb_local *t, uint64_t id) {
    return id < t->input_dim ? t->w + id * t->dim : NULL;
}

int ps_emb_local_lookup(ps_emb_local *t, const uint64_t *ids, size_t batch, const float **rows,
                        size_t *n_uniq, const uint32_t **where) {
    if (!batch) return PS_EINVAL;
    for (size_t i = 0; i < batch; i++)
        if (ids[i] >= t->input_dim) return PS_EINVAL;
    if (batch > t->cap) {
        uint64_t *u = realloc(t->uniq, batch * sizeof *u);
        if (u) t->uniq = u;
        uint32_t *w = realloc(t->where, batch * sizeof *w);
        if (w) t->where = w;
        float *r = realloc(t->rows, batch * t->dim * sizeof *r);
        if (r) t->rows = r;
        if (!u || !w || !r) return PS_ENOMEM;
        t->cap = batch;
    }
    t->n_uniq = 0;
    int rc = ps_rows_dedupe(ids, batch, t->uniq, &t->n_uniq, t->where);
    if (rc != PS_OK) return rc;
    for (size_t u = 0; u < t->n_uniq; u++)
        memcpy(t->rows + u * t->dim, t->w + t->uniq[u] * t->dim, t->dim * sizeof *t->rows);
    *rows = t->rows;
    *n_uniq = t->n_uniq;
    *where = t->where;
    return PS_OK;
}

int ps_emb_local_feed(ps_emb_local *t, ps_model *m, size_t e, const uint64_t *ids, size_t batch) {
    const float *rows;
    const uint32_t *where;
    size_t n;
    const ps_model_embedding *me = ps_model_embedding_at(m, e);
    if (!me) return PS_EINVAL;
    int rc = ps_emb_local_lookup(t, ids, batch * me->width, &rows, &n, &where);
    return rc == PS_OK ? ps_model_set_embedding_rows(m, e, rows, n, where, batch) : rc;
}

int ps_emb_local_apply(ps_emb_local *t, const float *grads, size_t n_uniq) {
    if (!grads || n_uniq != t->n_uniq) return PS_EINVAL;
    return ps_emb_local_apply_ids(t, t->uniq, grads, n_uniq);
}

int ps_emb_local_apply_model(ps_emb_local *t, const ps_model *m, size_t e) {
    size_t n = 0;
    const float *g = ps_model_embedding_grads(m, e, &n);
    return g ? ps_emb_local_apply(t, g, n) : PS_EINVAL;
}

int ps_emb_local_apply_ids(ps_emb_local *t, const uint64_t *ids, const float *grads, size_t n) {
    if (n && (!ids || !grads)) return PS_EINVAL;
    for (size_t u = 0; u < n; u++)
        if (ids[u] >= t->input_dim) return PS_EINVAL;
    t->updates++;
    for (size_t u = 0; u < n; u++) {
        uint64_t id = ids[u];
        ps_row_opt_apply(&t->opt, t->w + id * t->dim,
                         t->slot_floats ? t->slots + id * t->slot_floats : NULL, grads + u * t->dim,
                         t->dim, t->updates);
    }
    return PS_OK;
}

size_t ps_emb_local_bytes(size_t input_dim, size_t dim, const ps_row_opt *opt) {
    size_t per_row = dim + ps_row_opt_slot_floats(opt->kind, dim);
    if (per_row < dim || (per_row && input_dim > SIZE_MAX / per_row / sizeof(float)))
        return SIZE_MAX;
    return input_dim * per_row * sizeof(float);
}

const float *ps_emb_local_values(const ps_emb_local *t, size_t *n_values, const float **slots,
                                 size_t *n_slots) {
    *n_values = t->input_dim * t->dim;
    *slots = t->slot_floats ? t->slots : NULL;
    *n_slots = t->slot_floats ? t->input_dim * t->slot_floats : 0;
    return t->w;
}

float *ps_emb_local_values_mut(ps_emb_local *t, size_t *n_values, float **slots, size_t *n_slots) {
    *n_values = t->input_dim * t->dim;
    *slots = t->slot_floats ? t->slots : NULL;
    *n_slots = t->slot_floats ? t->input_dim * t->slot_floats : 0;
    return t->w;
}

uint64_t ps_emb_local_updates(const ps_emb_local *t) {
    return t->updates;
}

void ps_emb_local_set_updates(ps_emb_local *t, uint64_t updates) {
    t->updates = updates;
}
