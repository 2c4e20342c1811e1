/* psd's checkpoints (see checkpoint.h): the store and the tables as checkpoint
 * variables and table tensors, through a snapshot, and back; the file itself
 * (layout, naming, newest valid, pruning) is common/ckpt_file.c, shared with
 * the all-reduce chief; a table's tensors are ckpt_tables.c's. */
#include "checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_tables.h"
#include "errf.h"
#include "optim.h"
#include "ps_error.h"

struct ps_ckpt_snapshot {
    ps_ckpt_meta m;
    size_t nv;
    ps_ckpt_var *vars;
    /* copy: per variable its name, shape and slots (copies) and its shared values */
    int copied;
    char **names;
    uint64_t *shapes;   /* [nv][PS_WIRE_MAX_RANK] */
    float **slots;      /* [nv][PS_OPT_MAX_SLOTS] */
    const float **values; /* [nv]: the references on the values (ps_var_share) */
    size_t nt;
    ps_ckpt_table_copy *tables; /* [nt] */
    uint64_t bytes;             /* copied */
};

void ps_ckpt_snapshot_free(ps_ckpt_snapshot *s) {
    if (!s) return;
    for (size_t i = 0; s->copied && i < s->nv; i++) {
        free(s->names[i]);
        for (int k = 0; k < PS_OPT_MAX_SLOTS; k++)
            free(s->slots[i * PS_OPT_MAX_SLOTS + k]);
        if (s->values[i]) ps_var_unshare((void *)s->values[i], NULL);
    }
    for (size_t i = 0; i < s->nt; i++)
        ps_ckpt_table_copy_free(&s->tables[i]);
    free(s->vars), free(s->names), free(s->shapes), free(s->slots), free(s->values);
    free(s->tables);
    free(s);
}

/* Variable i as s will write it: copies of its name, shape and slots, a
 * reference on its values. PS_OK or PS_ENOMEM. */
static int copy_var(ps_ckpt_snapshot *s, size_t i, const ps_var *v) {
    uint64_t *shape = s->shapes + i * PS_WIRE_MAX_RANK;
    float **slots = s->slots + i * PS_OPT_MAX_SLOTS;
    memcpy(shape, v->shape, v->rank * sizeof *shape);
    if (!(s->names[i] = strdup(v->name))) return PS_ENOMEM;
    int ns = ps_optim_num_slots(v->opt.kind);
    for (int k = 0; k < ns; k++) {
        if (!(slots[k] = malloc(v->numel * sizeof(float)))) return PS_ENOMEM;
        memcpy(slots[k], v->slots[k], v->numel * sizeof(float));
        s->bytes += v->numel * sizeof(float);
    }
    s->values[i] = ps_var_share(v);
    s->vars[i] = (ps_ckpt_var){.name = s->names[i],
                               .rank = v->rank,
                               .shape = shape,
                               .numel = v->numel,
                               .w = s->values[i],
                               .slots = (const float *const *)slots,
                               .opt = v->opt,
                               .updates = v->updates};
    return PS_OK;
}

int ps_ckpt_snapshot_take(const ps_store *st, const ps_tables *ts, const ps_ckpt_meta *m, int copy,
                          ps_ckpt_snapshot **out) {
    *out = NULL;
    ps_ckpt_snapshot *s = calloc(1, sizeof *s);
    if (!s) return PS_ENOMEM;
    s->m = *m;
    s->nv = st->n;
    s->nt = ts ? ts->n : 0;
    s->copied = copy;
    size_t nv = s->nv ? s->nv : 1;
    s->vars = calloc(nv, sizeof *s->vars);
    s->tables = calloc(s->nt ? s->nt : 1, sizeof *s->tables);
    if (copy) {
        s->names = calloc(nv, sizeof *s->names);
        s->shapes = calloc(nv * PS_WIRE_MAX_RANK, sizeof *s->shapes);
        s->slots = calloc(nv * PS_OPT_MAX_SLOTS, sizeof *s->slots);
        s->values = calloc(nv, sizeof *s->values);
    }
    int rc = s->vars && s->tables && (!copy || (s->names && s->shapes && s->slots && s->values))
                 ? PS_OK
                 : PS_ENOMEM;
    for (size_t i = 0; rc == PS_OK && i < s->nv; i++) {
        const ps_var *v = st->vars[i];
        if (copy) {
            rc = copy_var(s, i, v);
            continue;
        }
        s->vars[i] = (ps_ckpt_var){.name = v->name,
                                   .rank = v->rank,
                                   .shape = v->shape,
                                   .numel = v->numel,
                                   .w = v->w,
                                   .slots = (const float *const *)v->slots,
                                   .opt = v->opt,
                                   .updates = v->updates};
    }
    for (size_t i = 0; rc == PS_OK && i < s->nt; i++) {
        const ps_ckpt_table_copy *c = &s->tables[i];
        rc = ps_ckpt_table_copy_take(ts->v[i], &s->tables[i]);
        s->bytes += c->n * (4 + c->dim + c->slot_floats) * sizeof(float);
    }
    if (rc != PS_OK) {
        ps_ckpt_snapshot_free(s);
        return rc;
    }
    *out = s;
    return PS_OK;
}

uint64_t ps_ckpt_snapshot_bytes(const ps_ckpt_snapshot *s) {
    return s->bytes;
}

int ps_ckpt_snapshot_write(const ps_ckpt_snapshot *s, const char *dir, int keep, char *path_out,
                           size_t path_len, uint64_t *bytes, char *err, size_t errlen) {
    size_t ntt = s->nt * PS_CKPT_TABLE_TENSORS;
    ps_tf_tensor *t = calloc(ntt ? ntt : 1, sizeof *t);
    if (!t) return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    for (size_t i = 0; i < s->nt; i++)
        ps_ckpt_table_copy_tensors(&s->tables[i], t + i * PS_CKPT_TABLE_TENSORS);
    int rc = ps_ckpt_write(dir, keep, s->vars, s->nv, t, s->nt, &s->m, path_out, path_len, bytes,
                           err, errlen);
    free(t);
    return rc;
}

int ps_ckpt_save(const char *dir, int keep, const ps_store *st, const ps_tables *ts,
                 const ps_ckpt_meta *m, char *path_out, size_t path_len, uint64_t *bytes, char *err,
                 size_t errlen) {
    if (!st || !m) return ps_errf(PS_EINVAL, err, errlen, "checkpoint: no store");
    ps_ckpt_snapshot *s;
    if (ps_ckpt_snapshot_take(st, ts, m, 0, &s) != PS_OK)
        return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    int rc = ps_ckpt_snapshot_write(s, dir, keep, path_out, path_len, bytes, err, errlen);
    ps_ckpt_snapshot_free(s);
    return rc;
}

/* Builds the store from a checked file (no duplicate names). Frees each
 * tensor's data once copied (lower peak memory). */
static int load_store(ps_store *st, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n,
                      char *why, size_t whylen) {
    for (size_t i = 0; i < n; i++) {
        const ps_ckpt_loaded_var *lv = &vars[i];
        if (ps_store_find(st, lv->name)) {
            snprintf(why, whylen, "variable '%s' appears twice", lv->name);
            return PS_EFORMAT;
        }
        ps_var *v;
        ps_tf_owned *t = &f->t[lv->tensor];
        if (ps_store_create(st, lv->name, lv->rank, lv->shape, t->data, &lv->opt, &v) != PS_OK) {
            snprintf(why, whylen, "out of memory");
            return PS_ENOMEM;
        }
        v->updates = lv->updates;
        free(t->data);
        t->data = NULL;
        for (uint32_t s = 0; s < lv->nslots; s++) {
            ps_tf_owned *sl = &f->t[lv->tensor + 1 + s];
            memcpy(v->slots[s], sl->data, v->numel * sizeof(float));
            free(sl->data);
            sl->data = NULL;
        }
    }
    return PS_OK;
}

/* Builds the tables of a checked file (layout 3; none before) into ts. */
static int load_tables(ps_tables *ts, const ps_store *st, ps_tf_file *f, const ps_ckpt_meta *m,
                       char *why, size_t whylen) {
    size_t first, nt;
    int rc = ps_ckpt_tables_of(f, &first, &nt, why, whylen);
    for (size_t i = 0; rc == PS_OK && i < nt; i++) {
        rc = ps_ckpt_table_load(f->t + first + i * PS_CKPT_TABLE_TENSORS, m->version, ts, why,
                                whylen);
        if (rc == PS_OK && ps_store_find(st, ts->v[ts->n - 1]->name))
            rc = ps_errf(PS_EFORMAT, why, whylen, "'%s' is both a variable and a table",
                         ts->v[ts->n - 1]->name);
    }
    return rc;
}

/* The file's store and tables go into fresh ones first, kept only when complete. */
typedef struct {
    ps_store fresh;
    ps_tables tables;
    uint32_t workers;
} restore_ctx;

static int accept_store(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n,
                        const ps_ckpt_meta *m, char *why, size_t whylen) {
    restore_ctx *c = user;
    ps_store_free(&c->fresh);
    ps_store_init(&c->fresh);
    ps_tables_free(&c->tables);
    ps_tables_init(&c->tables, c->workers);
    int rc = load_store(&c->fresh, f, vars, n, why, whylen);
    if (rc == PS_OK) rc = load_tables(&c->tables, &c->fresh, f, m, why, whylen);
    return rc;
}

int ps_ckpt_restore(const char *dir, ps_store *st, ps_tables *ts, ps_ckpt_meta *m, char *path_out,
                    size_t path_len, char *err, size_t errlen) {
    if (!dir || !st || st->n != 0 || (ts && ts->n != 0)) {
        snprintf(err, errlen, "checkpoint restore: needs a directory and an empty store");
        return PS_EINVAL;
    }
    restore_ctx c = {.workers = ts ? ts->workers : 1};
    ps_store_init(&c.fresh);
    ps_tables_init(&c.tables, c.workers);
    int rc = ps_ckpt_read_newest(dir, accept_store, &c, m, path_out, path_len, err, errlen);
    if (rc == PS_OK) {
        ps_store_free(st);
        *st = c.fresh;
        if (ts) {
            ps_tables_free(ts);
            *ts = c.tables;
        } else {
            ps_tables_free(&c.tables);
        }
    } else {
        ps_store_free(&c.fresh);
        ps_tables_free(&c.tables);
    }
    return rc;
}
