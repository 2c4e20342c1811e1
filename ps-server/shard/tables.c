/* The shard's embedding tables and their step state (tables.h). */
#include "tables.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "ps_error.h"

void ps_tables_init(ps_tables *ts, uint32_t workers) {
    memset(ts, 0, sizeof *ts);
    ts->workers = workers;
}

static void entry_free(ps_table_entry *e) {
    if (!e) return;
    ps_table_free(e->t);
    ps_row_sum_free(&e->step_sum);
    free(e->pushed);
    free(e);
}

void ps_tables_free(ps_tables *ts) {
    for (size_t i = 0; i < ts->n; i++) entry_free(ts->v[i]);
    free(ts->v);
    ps_tables_init(ts, ts->workers);
}

ps_table_entry *ps_tables_find(const ps_tables *ts, const char *name) {
    for (size_t i = 0; i < ts->n; i++) /* a handful of tables: a scan */
        if (strcmp(ts->v[i]->name, name) == 0) return ts->v[i];
    return NULL;
}

int ps_table_entry_cfg_check(uint64_t num_rows, const ps_table_cfg *c, char *why, size_t whylen) {
    if (c->dim == 0 || c->dim > PS_TABLE_MAX_DIM)
        return ps_errf(PS_EINVAL, why, whylen, "dim %zu (allowed 1..%u)", c->dim, PS_TABLE_MAX_DIM);
    const ps_row_opt *p = &c->opt;
    if ((unsigned)p->kind > PS_ROW_FTRL)
        return ps_errf(PS_EINVAL, why, whylen, "optimizer kind %u is unknown", (unsigned)p->kind);
    if (!(isfinite(p->lr) && p->lr > 0))
        return ps_errf(PS_EINVAL, why, whylen, "lr must be finite and > 0");
    if (!(isfinite(p->eps) && p->eps >= 0))
        return ps_errf(PS_EINVAL, why, whylen, "epsilon must be >= 0");
    if (!(isfinite(p->initial_accumulator) && p->initial_accumulator >= 0))
        return ps_errf(PS_EINVAL, why, whylen, "initial_accumulator must be >= 0");
    if (p->kind == PS_ROW_FTRL && !(p->initial_accumulator > 0))
        return ps_errf(PS_EINVAL, why, whylen, "ftrl needs initial_accumulator > 0");
    if (p->kind == PS_ROW_LAZY_ADAM &&
        !(p->beta_1 >= 0 && p->beta_1 < 1 && p->beta_2 >= 0 && p->beta_2 < 1))
        return ps_errf(PS_EINVAL, why, whylen, "lazy_adam needs 0 <= beta1, beta2 < 1");
    if (p->kind == PS_ROW_FTRL && !(isfinite(p->l1) && p->l1 >= 0 && isfinite(p->l2) &&
                                    p->l2 >= 0 && isfinite(p->lr_power) && p->lr_power <= 0))
        return ps_errf(PS_EINVAL, why, whylen, "ftrl needs l1, l2 >= 0 and lr_power <= 0");
    if (!(isfinite(c->init_lo) && isfinite(c->init_hi) && c->init_lo <= c->init_hi))
        return ps_errf(PS_EINVAL, why, whylen, "the initializer needs finite init_lo <= init_hi");
    if (c->max_rows >= UINT32_MAX)
        return ps_errf(PS_EINVAL, why, whylen, "max_rows must be below 2^32 (rows per shard)");
    if (c->full != PS_TABLE_EVICT_LRU && c->full != PS_TABLE_REFUSE)
        return ps_errf(PS_EINVAL, why, whylen, "unknown policy %u at the cap", (unsigned)c->full);
    if (num_rows && (c->min_count > 1 || c->ttl_steps || c->max_rows))
        return ps_errf(PS_EINVAL, why, whylen,
                       "min_count, ttl_steps and max_rows are for dynamic tables (num_rows 0)");
    return PS_OK;
}

int ps_tables_create(ps_tables *ts, const char *name, uint64_t num_rows, const ps_table_cfg *cfg,
                     ps_table_entry **out) {
    *out = NULL;
    if (ts->n == ts->cap) {
        size_t cap = ts->cap ? 2 * ts->cap : 4;
        ps_table_entry **v = realloc(ts->v, cap * sizeof *v);
        if (!v) return PS_ENOMEM;
        ts->v = v, ts->cap = cap;
    }
    ps_table_entry *e = calloc(1, sizeof *e);
    if (!e) return PS_ENOMEM;
    e->pushed = calloc(ts->workers ? ts->workers : 1, 1);
    int rc = e->pushed ? ps_table_new(cfg, &e->t) : PS_ENOMEM;
    if (rc != PS_OK) {
        entry_free(e);
        return rc;
    }
    strncpy(e->name, name, sizeof e->name - 1);
    e->num_rows = num_rows;
    e->workers = ts->workers;
    e->cfg = *cfg;
    ps_row_sum_init(&e->step_sum, cfg->dim);
    if (ts->max_bytes) ps_table_bound(e->t, (size_t)(ts->max_bytes / ps_table_row_bytes(cfg)));
    ts->v[ts->n++] = e;
    *out = e;
    return PS_OK;
}

int ps_table_entry_same(const ps_table_entry *e, uint64_t num_rows, const ps_table_cfg *cfg) {
    const ps_table_cfg *a = &e->cfg;
    return e->num_rows == num_rows && a->dim == cfg->dim && a->seed == cfg->seed &&
           a->key == cfg->key && a->init_lo == cfg->init_lo && a->init_hi == cfg->init_hi &&
           a->min_count == cfg->min_count && a->ttl_steps == cfg->ttl_steps &&
           a->max_rows == cfg->max_rows && a->full == cfg->full &&
           memcmp(&a->opt, &cfg->opt, sizeof a->opt) == 0;
}

size_t ps_table_entry_bad_id(const ps_table_entry *e, const uint64_t *ids, size_t n) {
    if (!e->num_rows) return n;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= e->num_rows) return i;
    return n;
}

int ps_table_entry_step_add(ps_table_entry *e, uint32_t w, const uint64_t *ids, size_t n,
                            const float *grads) {
    if (w >= e->workers) return PS_EINVAL;
    if (e->pushed[w]) return PS_EEXIST;
    int rc = ps_row_sum_add(&e->step_sum, ids, n, grads);
    if (rc != PS_OK) {
        ps_row_sum_clear(&e->step_sum);
        return rc;
    }
    e->pushed[w] = 1;
    e->step_pushes++;
    return PS_OK;
}

int ps_tables_close_step(ps_tables *ts, uint64_t step) {
    int rc = PS_OK;
    for (size_t i = 0; i < ts->n; i++) {
        ps_table_entry *e = ts->v[i];
        if (e->step_sum.n) {
            ps_row_sum_scale(&e->step_sum, 1.0f / (float)e->step_pushes);
            int r = ps_table_push(e->t, e->step_sum.ids, e->step_sum.n, e->step_sum.sums, step);
            if (r != PS_OK) rc = r;
        }
        ps_table_expire(e->t, step);
        ps_row_sum_clear(&e->step_sum);
        e->step_pushes = 0;
        memset(e->pushed, 0, e->workers ? e->workers : 1);
    }
    return rc;
}

int ps_table_entry_apply(ps_table_entry *e, const uint64_t *ids, size_t n, const float *grads,
                         uint64_t *dropped) {
    ps_table_counts before, after;
    ps_table_stats_get(e->t, &before);
    int rc = ps_row_sum_add(&e->step_sum, ids, n, grads);
    if (rc == PS_OK) {
        e->updates++;
        rc = ps_table_push(e->t, e->step_sum.ids, e->step_sum.n, e->step_sum.sums, e->updates);
        ps_table_expire(e->t, e->updates);
    }
    ps_row_sum_clear(&e->step_sum);
    ps_table_stats_get(e->t, &after);
    if (dropped) *dropped = after.dropped - before.dropped;
    return rc;
}

uint64_t ps_tables_bytes(const ps_tables *ts) {
    uint64_t b = 0;
    for (size_t i = 0; i < ts->n; i++) {
        const ps_table_entry *e = ts->v[i];
        ps_table_counts st;
        ps_table_stats_get(e->t, &st);
        b += st.bytes + e->step_sum.cap * (sizeof(uint64_t) + e->cfg.dim * sizeof(float)) +
             e->step_sum.index_cap * sizeof(uint32_t);
    }
    return b;
}

void ps_tables_set_bound(ps_tables *ts, uint64_t max_bytes) {
    ts->max_bytes = max_bytes;
    for (size_t i = 0; i < ts->n; i++)
        ps_table_bound(ts->v[i]->t,
                       max_bytes ? (size_t)(max_bytes / ps_table_row_bytes(&ts->v[i]->cfg)) : 0);
}
