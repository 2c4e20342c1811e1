/* The embedding layers' rows of a step: what the caller gives (n_uniq
 * distinct rows and, per sample, the row it reads) and takes back (the rows'
 * gradients), on the model's device; the per-row grouping of the samples
 * that makes the backward pass a deterministic gather. The tables themselves
 * are never here (model.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "model_impl.h"
#include "ps_error.h"

struct ps_emb_state {
    ps_model_embedding info;
    size_t n_uniq, batch; /* of the rows given (0: none); batch in samples */
    size_t slots;         /* batch * info.width: the ids read, one row each */
    size_t cap_u, cap_b;
    float *d_rows, *d_grads;              /* [cap_u, dim] on the device */
    float *h_grads;                       /* host: d_grads itself on the CPU */
    uint32_t *d_where, *d_order, *d_offs; /* [cap_b], [cap_b], [cap_u + 1] */
    uint32_t *h_order, *h_offs;           /* host: the device's own on the CPU */
    bool fresh;                           /* given since the last train step */
    bool has_grads;                       /* a train step left row gradients */
};

static bool on_cuda(const ps_model *m) {
    return ps_k_dev_kind(m->dev) != PS_K_CPU;
}

int ps_model_add_id_input(ps_model *m, const char *name, bool seq, size_t width, size_t *k,
                          char *err, size_t errlen) {
    if (m->nids == PS_MAX_ID_INPUTS) {
        snprintf(err, errlen, "more than %d id inputs", PS_MAX_ID_INPUTS);
        return PS_EFORMAT;
    }
    if (!name[0] || strlen(name) >= sizeof m->ids[0].name) {
        snprintf(err, errlen, "an id input's name must have 1 to %zu characters",
                 sizeof m->ids[0].name - 1);
        return PS_EFORMAT;
    }
    if (width == 0 || width > PS_MAX_ID_WIDTH) {
        snprintf(err, errlen, "id input '%s': %zu ids per sample (1 to %d)", name, width,
                 PS_MAX_ID_WIDTH);
        return PS_EFORMAT;
    }
    for (size_t i = 0; i < m->nids; i++) {
        if (!strcmp(m->ids[i].name, name)) {
            snprintf(err, errlen, "two id inputs are named '%s'", name);
            return PS_EFORMAT;
        }
    }
    snprintf(m->ids[m->nids].name, sizeof m->ids[0].name, "%s", name);
    m->ids[m->nids].seq = seq;
    m->ids[m->nids].width = width;
    *k = m->nids++;
    return PS_OK;
}

static void release(ps_model *m, ps_emb_state *s) {
    ps_k_free(m->dev, s->d_rows);
    ps_k_free(m->dev, s->d_grads);
    ps_k_free(m->dev, s->d_where);
    ps_k_free(m->dev, s->d_order);
    ps_k_free(m->dev, s->d_offs);
    if (on_cuda(m)) {
        free(s->h_grads);
        free(s->h_order);
        free(s->h_offs);
    }
    ps_model_embedding info = s->info;
    memset(s, 0, sizeof *s);
    s->info = info;
}

void ps_rows_release(ps_model *m) {
    for (size_t e = 0; e < m->nembs; e++)
        release(m, &m->embs[e]);
}

void ps_rows_free(ps_model *m) {
    if (m->embs && m->dev) ps_rows_release(m);
    free(m->embs);
    m->embs = NULL;
    m->nembs = 0;
}

int ps_rows_setup(ps_model *m) {
    size_t n = 0;
    for (size_t j = 0; j < m->nops; j++)
        n += m->ops[j].kind == OP_EMBEDDING;
    m->nembs = n;
    if (!n) return PS_OK;
    if (!(m->embs = calloc(n, sizeof *m->embs))) return PS_ENOMEM;
    for (size_t j = 0, e = 0; j < m->nops; j++) {
        ps_op *o = &m->ops[j];
        if (o->kind != OP_EMBEDDING) continue;
        ps_model_embedding *in = &m->embs[e].info;
        if (o->prefix[0])
            snprintf(in->name, sizeof in->name, "%s", o->prefix);
        else
            snprintf(in->name, sizeof in->name, "embedding_%zu", e);
        in->input_dim = o->table_rows;
        in->dim = o->out.c;
        in->ids_input = o->ids;
        in->width = m->ids[o->ids].width;
        in->init_lo = o->init_lo;
        in->init_hi = o->init_hi;
        in->min_count = o->table_min_count;
        in->ttl_steps = o->table_ttl_steps;
        in->max_rows = o->table_max_rows;
        in->refuse_when_full = o->table_refuse;
        in->trainable = !o->frozen;
        o->emb = e++;
    }
    return PS_OK;
}

size_t ps_model_num_id_inputs(const ps_model *m) {
    return m->nids;
}

size_t ps_model_id_input_width(const ps_model *m, size_t k) {
    return k < m->nids ? m->ids[k].width : 0;
}

size_t ps_model_id_columns(const ps_model *m) {
    size_t n = 0;
    for (size_t k = 0; k < m->nids; k++)
        n += m->ids[k].width;
    return n;
}

const char *ps_model_id_input_name(const ps_model *m, size_t k) {
    return k < m->nids ? m->ids[k].name : NULL;
}

size_t ps_model_num_embeddings(const ps_model *m) {
    return m->nembs;
}

const ps_model_embedding *ps_model_embedding_at(const ps_model *m, size_t e) {
    return e < m->nembs ? &m->embs[e].info : NULL;
}

/* Grows s's buffers to n_uniq rows and batch slots (ids read). */
static int grow(ps_model *m, ps_emb_state *s, size_t n_uniq, size_t batch) {
    size_t dim = s->info.dim;
    bool cuda = on_cuda(m);
    if (n_uniq > s->cap_u) {
        ps_k_free(m->dev, s->d_rows);
        ps_k_free(m->dev, s->d_grads);
        ps_k_free(m->dev, s->d_offs);
        if (cuda) {
            free(s->h_grads);
            free(s->h_offs);
        }
        s->d_rows = s->d_grads = s->h_grads = NULL;
        s->d_offs = s->h_offs = NULL;
        s->cap_u = 0;
        int rc = ps_k_malloc(m->dev, n_uniq * dim * sizeof(float), (void **)&s->d_rows);
        if (rc == PS_OK)
            rc = ps_k_malloc(m->dev, n_uniq * dim * sizeof(float), (void **)&s->d_grads);
        if (rc == PS_OK)
            rc = ps_k_malloc(m->dev, (n_uniq + 1) * sizeof(uint32_t), (void **)&s->d_offs);
        if (rc == PS_OK && cuda) {
            s->h_grads = malloc(n_uniq * dim * sizeof(float));
            s->h_offs = malloc((n_uniq + 1) * sizeof(uint32_t));
            if (!s->h_grads || !s->h_offs) rc = PS_ENOMEM;
        } else if (rc == PS_OK) {
            s->h_grads = s->d_grads;
            s->h_offs = s->d_offs;
        }
        if (rc != PS_OK) return rc;
        s->cap_u = n_uniq;
    }
    if (batch > s->cap_b) {
        ps_k_free(m->dev, s->d_where);
        ps_k_free(m->dev, s->d_order);
        if (cuda) free(s->h_order);
        s->d_where = s->d_order = s->h_order = NULL;
        s->cap_b = 0;
        int rc = ps_k_malloc(m->dev, batch * sizeof(uint32_t), (void **)&s->d_where);
        if (rc == PS_OK) rc = ps_k_malloc(m->dev, batch * sizeof(uint32_t), (void **)&s->d_order);
        if (rc == PS_OK && cuda && !(s->h_order = malloc(batch * sizeof(uint32_t)))) rc = PS_ENOMEM;
        if (rc == PS_OK && !cuda) s->h_order = s->d_order;
        if (rc != PS_OK) return rc;
        s->cap_b = batch;
    }
    return PS_OK;
}

/* The samples grouped by the row they read (a counting sort, samples in
 * increasing order within a row): order[batch] and offs[n_uniq + 1]. */
static void group(const uint32_t *where, size_t batch, size_t n_uniq, uint32_t *order,
                  uint32_t *offs) {
    memset(offs, 0, (n_uniq + 1) * sizeof *offs);
    for (size_t i = 0; i < batch; i++)
        offs[where[i] + 1]++;
    for (size_t u = 0; u < n_uniq; u++)
        offs[u + 1] += offs[u];
    for (size_t i = 0; i < batch; i++) /* offs[u] walks to row u's end = row u + 1's start */
        order[offs[where[i]]++] = (uint32_t)i;
    for (size_t u = n_uniq; u > 0; u--)
        offs[u] = offs[u - 1];
    offs[0] = 0;
}

int ps_model_set_embedding_rows(ps_model *m, size_t e, const float *rows, size_t n_uniq,
                                const uint32_t *where, size_t batch) {
    if (e >= m->nembs || n_uniq == 0 || batch == 0 || !rows || !where || n_uniq > UINT32_MAX)
        return PS_EINVAL;
    ps_emb_state *s = &m->embs[e];
    size_t slots = batch * s->info.width;
    if (slots / s->info.width != batch || slots > UINT32_MAX) return PS_EINVAL;
    for (size_t i = 0; i < slots; i++)
        if (where[i] >= n_uniq) return PS_EINVAL;
    s->n_uniq = s->batch = s->slots = 0;
    s->fresh = s->has_grads = false;
    int rc = grow(m, s, n_uniq, slots);
    if (rc != PS_OK) {
        release(m, s);
        return rc;
    }
    group(where, slots, n_uniq, s->h_order, s->h_offs);
    size_t dim = s->info.dim;
    rc = ps_k_copy_to_dev(m->dev, s->d_rows, rows, n_uniq * dim * sizeof(float));
    if (rc == PS_OK) rc = ps_k_copy_to_dev(m->dev, s->d_where, where, slots * sizeof *where);
    if (rc == PS_OK && on_cuda(m))
        rc = ps_k_copy_to_dev(m->dev, s->d_order, s->h_order, slots * sizeof(uint32_t));
    if (rc == PS_OK && on_cuda(m))
        rc = ps_k_copy_to_dev(m->dev, s->d_offs, s->h_offs, (n_uniq + 1) * sizeof(uint32_t));
    if (rc != PS_OK) return rc;
    s->n_uniq = n_uniq;
    s->batch = batch;
    s->slots = slots;
    s->fresh = true;
    return PS_OK;
}

const float *ps_model_embedding_grads(const ps_model *m, size_t e, size_t *n_uniq) {
    if (e >= m->nembs || !m->embs[e].has_grads) return NULL;
    if (n_uniq) *n_uniq = m->embs[e].n_uniq;
    return m->embs[e].h_grads;
}

int ps_rows_ready(const ps_model *m, size_t batch, bool train) {
    for (size_t e = 0; e < m->nembs; e++) {
        const ps_emb_state *s = &m->embs[e];
        if (s->batch != batch || (train && s->info.trainable && !s->fresh)) return PS_EINVAL;
    }
    return PS_OK;
}

int ps_rows_step_done(ps_model *m) {
    int rc = PS_OK;
    for (size_t e = 0; e < m->nembs && rc == PS_OK; e++) {
        ps_emb_state *s = &m->embs[e];
        if (!s->info.trainable) continue;
        s->fresh = false;
        if (on_cuda(m))
            rc = ps_k_copy_to_host(m->dev, s->h_grads, s->d_grads,
                                   s->n_uniq * s->info.dim * sizeof(float));
        s->has_grads = rc == PS_OK;
    }
    return rc;
}

const float *ps_rows_values(const ps_model *m, size_t e) {
    return m->embs[e].d_rows;
}

const uint32_t *ps_rows_where(const ps_model *m, size_t e) {
    return m->embs[e].d_where;
}

void ps_rows_groups(const ps_model *m, size_t e, const uint32_t **order, const uint32_t **offs,
                    size_t *n_uniq) {
    *order = m->embs[e].d_order;
    *offs = m->embs[e].d_offs;
    *n_uniq = m->embs[e].n_uniq;
}

float *ps_rows_grads_dev(ps_model *m, size_t e) {
    return m->embs[e].d_grads;
}
