/* Embedding tables held whole by every all-reduce rank, their rows exchanged
 * as rows (mirror_tables.h). */
#include "mirror_tables.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "emb_local.h"
#include "emb_tables.h"
#include "mirror_rows.h"
#include "ps_error.h"

/* One table's rows kept this step. */
typedef struct {
    uint64_t *ids;
    float *grads;
    size_t n, cap;
} kept_rows;

struct ps_mirror_tables {
    size_t n;
    ps_emb_local **t;
    ps_mirror_shape *shape;
    kept_rows *kept;
    ps_row_sum *sums;
    size_t *counts;           /* scratch: kept rows per table */
    const uint64_t **ids_ptr; /* scratch for the encoder */
    const float **grads_ptr;
    unsigned char *block; /* this rank's block (8-byte aligned: malloc) */
    size_t block_cap, max_block;
    uint64_t rows_gathered;
    /* checkpoint entries: 2 per table (values, slots), their names and shapes */
    ps_ckpt_var *ck;
    char (*ck_names)[2][PS_WIRE_MAX_NAME + 1];
    uint64_t (*ck_shapes)[2][2];
    const float *no_slots[PS_OPT_MAX_SLOTS];
};

static double mib(size_t bytes) {
    return (double)bytes / (1024.0 * 1024.0);
}

/* Every table must fit before any is made: the refusal comes at once. */
static int check_fit(ps_model *m, const ps_row_opt *opt, size_t max_bytes, char *err,
                     size_t errlen) {
    for (size_t e = 0; e < ps_model_num_embeddings(m); e++) {
        const ps_model_embedding *me = ps_model_embedding_at(m, e);
        if (!me->input_dim) {
            snprintf(err, errlen,
                     "embedding '%s' is a dynamic table (no input_dim: ids of any value%s), whose "
                     "size the all-reduce strategies cannot bound: they mirror fixed tables of at "
                     "most --max-mirrored-table-mb %.0f MiB each on every worker; train it with "
                     "--strategy parameter_server (the table lives on psd)",
                     me->name, me->max_rows ? ", max_rows per psd shard" : "", mib(max_bytes));
            return PS_EINVAL;
        }
        size_t bytes = ps_emb_local_bytes(me->input_dim, me->dim, opt);
        if (bytes > max_bytes) {
            snprintf(err, errlen,
                     "embedding '%s' [%zu, %zu] takes %.1f MiB on every worker with its "
                     "optimizer's slots (%s), more than --max-mirrored-table-mb %.0f MiB: the "
                     "all-reduce strategies mirror a table on every worker; train it with "
                     "--strategy parameter_server (the table lives on psd, split over its "
                     "shards), or raise the bound",
                     me->name, me->input_dim, me->dim, bytes == SIZE_MAX ? 0.0 : mib(bytes),
                     ps_row_opt_kind_name(opt->kind), mib(max_bytes));
            return PS_EINVAL;
        }
    }
    return PS_OK;
}

int ps_mirror_tables_open(ps_model *m, uint64_t seed, size_t max_bytes, ps_mirror_tables **out,
                          char *err, size_t errlen) {
    *out = NULL;
    size_t n = ps_model_num_embeddings(m);
    if (!n) return PS_OK;
    ps_row_opt opt;
    if (!max_bytes) max_bytes = (size_t)PS_MIRROR_TABLE_DEFAULT_MB << 20;
    int rc = ps_emb_row_opt(m, &opt, err, errlen);
    if (rc == PS_OK) rc = check_fit(m, &opt, max_bytes, err, errlen);
    if (rc != PS_OK) return rc;
    ps_mirror_tables *t = calloc(1, sizeof *t);
    if (t) {
        t->n = n;
        t->t = calloc(n, sizeof *t->t);
        t->shape = calloc(n, sizeof *t->shape);
        t->kept = calloc(n, sizeof *t->kept);
        t->sums = calloc(n, sizeof *t->sums);
        t->counts = calloc(n, sizeof *t->counts);
        t->ids_ptr = calloc(n, sizeof *t->ids_ptr);
        t->grads_ptr = calloc(n, sizeof *t->grads_ptr);
    }
    if (!t || !t->t || !t->shape || !t->kept || !t->sums || !t->counts || !t->ids_ptr ||
        !t->grads_ptr) {
        ps_mirror_tables_free(t);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    for (size_t e = 0; e < n; e++) {
        const ps_model_embedding *me = ps_model_embedding_at(m, e);
        t->shape[e] = (ps_mirror_shape){me->name, me->input_dim, me->dim};
        ps_row_sum_init(&t->sums[e], me->dim);
    }
    for (size_t e = 0; rc == PS_OK && e < n; e++) {
        rc = ps_emb_local_for(m, e, seed, &opt, &t->t[e]);
        if (rc != PS_OK)
            snprintf(err, errlen, "embedding '%s': cannot hold its table [%zu, %zu] here: %s",
                     t->shape[e].name, t->shape[e].input_dim, t->shape[e].dim, ps_strerror(rc));
    }
    if (rc != PS_OK) {
        ps_mirror_tables_free(t);
        return rc;
    }
    t->max_block = ps_mirror_rows_max_bytes(t->shape, n);
    *out = t;
    return PS_OK;
}

void ps_mirror_tables_free(ps_mirror_tables *t) {
    if (!t) return;
    for (size_t e = 0; e < t->n; e++) {
        if (t->t) ps_emb_local_free(t->t[e]);
        if (t->kept) free(t->kept[e].ids), free(t->kept[e].grads);
        if (t->sums) ps_row_sum_free(&t->sums[e]);
    }
    free(t->t), free(t->shape), free(t->kept), free(t->sums), free(t->counts);
    free(t->ids_ptr), free(t->grads_ptr), free(t->block);
    free(t->ck), free(t->ck_names), free(t->ck_shapes);
    free(t);
}

int ps_mirror_tables_pull(ps_mirror_tables *t, size_t e, const uint64_t *ids, size_t n, float *out,
                          char *err, size_t errlen) {
    size_t dim = t->shape[e].dim;
    for (size_t i = 0; i < n; i++) {
        const float *row = ps_emb_local_row(t->t[e], ids[i]);
        if (!row) {
            snprintf(err, errlen, "embedding table '%s': id %llu is out of its range [0, %zu)",
                     t->shape[e].name, (unsigned long long)ids[i], t->shape[e].input_dim);
            return PS_EINVAL;
        }
        memcpy(out + i * dim, row, dim * sizeof *out);
    }
    return PS_OK;
}

int ps_mirror_tables_keep(ps_mirror_tables *t, size_t e, const uint64_t *ids, size_t n,
                          const float *grads, char *err, size_t errlen) {
    kept_rows *k = &t->kept[e];
    size_t dim = t->shape[e].dim;
    if (n > t->shape[e].input_dim) {
        snprintf(err, errlen, "embedding table '%s': %zu rows pushed, it has %zu", t->shape[e].name,
                 n, t->shape[e].input_dim);
        return PS_EINVAL;
    }
    if (n > k->cap) {
        uint64_t *i2 = realloc(k->ids, n * sizeof *i2);
        if (i2) k->ids = i2;
        float *g2 = i2 ? realloc(k->grads, n * dim * sizeof *g2) : NULL;
        if (g2) k->grads = g2;
        if (!g2) {
            snprintf(err, errlen, "out of memory keeping the rows of table '%s'", t->shape[e].name);
            return PS_ENOMEM;
        }
        k->cap = n;
    }
    if (n) memcpy(k->ids, ids, n * sizeof *ids), memcpy(k->grads, grads, n * dim * sizeof *grads);
    k->n = n;
    return PS_OK;
}

int ps_mirror_tables_gather(ps_mirror_tables *t, ps_ring *ring, int *peer, char *err,
                            size_t errlen) {
    for (size_t e = 0; e < t->n; e++) {
        t->counts[e] = t->kept[e].n;
        t->ids_ptr[e] = t->kept[e].ids;
        t->grads_ptr[e] = t->kept[e].grads;
    }
    size_t len = ps_mirror_rows_bytes(t->shape, t->n, t->counts);
    if (len > t->block_cap) {
        unsigned char *b = realloc(t->block, len);
        if (!b) {
            snprintf(err, errlen, "out of memory for this step's embedding rows (%zu bytes)", len);
            return PS_ENOMEM;
        }
        t->block = b;
        t->block_cap = len;
    }
    ps_mirror_rows_encode(t->shape, t->n, t->counts, t->ids_ptr, t->grads_ptr, t->block);
    for (size_t e = 0; e < t->n; e++)
        t->kept[e].n = 0;
    unsigned size = ps_ring_size(ring);
    size_t *lens = calloc(size, sizeof *lens);
    if (!lens) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    void *all = NULL;
    char why[700];
    int rc = ps_ring_allgatherv(ring, t->block, len, t->max_block, &all, lens, why, sizeof why);
    if (rc != PS_OK) {
        if (rc != PS_ENOMEM && rc != PS_EINVAL) *peer = 1;
        snprintf(err, errlen, "exchanging the embedding rows: %s", why);
    } else {
        unsigned bad = 0;
        rc = ps_mirror_rows_sum(t->shape, t->n, all, lens, size, t->sums, &bad, err, errlen);
        if (rc == PS_EPROTO) *peer = 1;
    }
    if (rc == PS_OK)
        for (size_t e = 0; e < t->n; e++)
            t->rows_gathered += t->sums[e].n;
    free(all);
    free(lens);
    return rc;
}

int ps_mirror_tables_finite(const ps_mirror_tables *t) {
    for (size_t e = 0; e < t->n; e++) {
        const ps_row_sum *s = &t->sums[e];
        for (size_t i = 0; i < s->n * s->dim; i++)
            if (!(s->sums[i] - s->sums[i] == 0)) return 0;
    }
    return 1;
}

void ps_mirror_tables_apply(ps_mirror_tables *t) {
    for (size_t e = 0; e < t->n; e++) {
        ps_row_sum *s = &t->sums[e];
        /* a table no rank touched this step keeps its update count, as --no-ps's */
        if (s->n) ps_emb_local_apply_ids(t->t[e], s->ids, s->sums, s->n);
        ps_row_sum_clear(s);
    }
}

int ps_mirror_tables_ckpt_vars(ps_mirror_tables *t, const ps_ckpt_var **vars, size_t *n) {
    if (!t->ck) {
        t->ck = calloc(2 * t->n, sizeof *t->ck);
        t->ck_names = calloc(t->n, sizeof *t->ck_names);
        t->ck_shapes = calloc(t->n, sizeof *t->ck_shapes);
        if (!t->ck || !t->ck_names || !t->ck_shapes) {
            free(t->ck), free(t->ck_names), free(t->ck_shapes);
            t->ck = NULL, t->ck_names = NULL, t->ck_shapes = NULL;
            return PS_ENOMEM;
        }
    }
    size_t k = 0;
    for (size_t e = 0; e < t->n; e++) {
        size_t nv, ns;
        const float *slots;
        const float *w = ps_emb_local_values(t->t[e], &nv, &slots, &ns);
        uint64_t updates = ps_emb_local_updates(t->t[e]);
        snprintf(t->ck_names[e][0], sizeof t->ck_names[e][0], "@mirrored/%s", t->shape[e].name);
        t->ck_shapes[e][0][0] = t->shape[e].input_dim;
        t->ck_shapes[e][0][1] = t->shape[e].dim;
        t->ck[k++] = (ps_ckpt_var){.name = t->ck_names[e][0],
                                   .rank = 2,
                                   .shape = t->ck_shapes[e][0],
                                   .numel = nv,
                                   .w = w,
                                   .slots = t->no_slots,
                                   .opt = ps_opt_spec_default(PS_OPT_SGD),
                                   .updates = updates};
        if (!ns) continue;
        snprintf(t->ck_names[e][1], sizeof t->ck_names[e][1], "@mirrored/%s/slots",
                 t->shape[e].name);
        t->ck_shapes[e][1][0] = t->shape[e].input_dim;
        t->ck_shapes[e][1][1] = ns / t->shape[e].input_dim;
        t->ck[k++] = (ps_ckpt_var){.name = t->ck_names[e][1],
                                   .rank = 2,
                                   .shape = t->ck_shapes[e][1],
                                   .numel = ns,
                                   .w = slots,
                                   .slots = t->no_slots,
                                   .opt = ps_opt_spec_default(PS_OPT_SGD),
                                   .updates = updates};
    }
    *vars = t->ck;
    *n = k;
    return PS_OK;
}

int ps_mirror_tables_ckpt_load(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n,
                               char *why, size_t whylen) {
    ps_mirror_tables *t = user;
    const ps_ckpt_var *want;
    size_t n_want;
    if (ps_mirror_tables_ckpt_vars(t, &want, &n_want) != PS_OK) {
        snprintf(why, whylen, "out of memory");
        return PS_ENOMEM;
    }
    if (n != n_want) {
        snprintf(why, whylen, "%zu mirrored table entries, the model's tables make %zu", n, n_want);
        return PS_EFORMAT;
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(vars[i].name, want[i].name) != 0 || vars[i].numel != want[i].numel) {
            snprintf(why, whylen,
                     "entry '%s' [%zu values] where the model's tables have '%s' [%zu]",
                     vars[i].name, vars[i].numel, want[i].name, want[i].numel);
            return PS_EFORMAT;
        }
    size_t k = 0;
    for (size_t e = 0; e < t->n; e++) {
        size_t nv, ns;
        float *slots;
        float *w = ps_emb_local_values_mut(t->t[e], &nv, &slots, &ns);
        memcpy(w, f->t[vars[k].tensor].data, nv * sizeof *w);
        ps_emb_local_set_updates(t->t[e], vars[k++].updates);
        if (ns) memcpy(slots, f->t[vars[k++].tensor].data, ns * sizeof *slots);
    }
    return PS_OK;
}

int ps_mirror_tables_broadcast(ps_mirror_tables *t, ps_ring *ring, char *err, size_t errlen) {
    int rc = PS_OK;
    for (size_t e = 0; rc == PS_OK && e < t->n; e++) {
        size_t nv, ns;
        float *slots;
        float *w = ps_emb_local_values_mut(t->t[e], &nv, &slots, &ns);
        uint64_t updates = ps_emb_local_updates(t->t[e]);
        rc = ps_ring_broadcast(ring, 0, &updates, sizeof updates, err, errlen);
        if (rc == PS_OK) rc = ps_ring_broadcast(ring, 0, w, nv * sizeof *w, err, errlen);
        if (rc == PS_OK && ns)
            rc = ps_ring_broadcast(ring, 0, slots, ns * sizeof *slots, err, errlen);
        if (rc == PS_OK) ps_emb_local_set_updates(t->t[e], updates);
    }
    return rc;
}

int ps_mirror_tables_reseed(ps_mirror_tables *t, ps_model *m, uint64_t seed, char *err,
                            size_t errlen) {
    ps_row_opt opt;
    int rc = ps_emb_row_opt(m, &opt, err, errlen);
    for (size_t e = 0; rc == PS_OK && e < t->n; e++) {
        ps_emb_local *fresh = NULL;
        rc = ps_emb_local_for(m, e, seed, &opt, &fresh);
        if (rc != PS_OK) {
            snprintf(err, errlen, "embedding '%s': cannot remake its table: %s", t->shape[e].name,
                     ps_strerror(rc));
            break;
        }
        ps_emb_local_free(t->t[e]);
        t->t[e] = fresh;
    }
    return rc;
}

uint32_t ps_mirror_tables_crc(const ps_mirror_tables *t, uint32_t crc) {
    for (size_t e = 0; t && e < t->n; e++) {
        size_t nv, ns;
        const float *slots;
        const float *w = ps_emb_local_values(t->t[e], &nv, &slots, &ns);
        crc = ps_crc32c_extend(crc, w, nv * sizeof *w);
        if (ns) crc = ps_crc32c_extend(crc, slots, ns * sizeof *slots);
    }
    return crc;
}

uint64_t ps_mirror_tables_rows_gathered(const ps_mirror_tables *t) {
    return t ? t->rows_gathered : 0;
}
