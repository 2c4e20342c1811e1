/* psd's embedding-table requests (issue 27): CreateTable, PullRows, PushRows.
 * They adapt the protocol to the tables (tables.h): every check first, then
 * the change, so a refused request changes nothing. A shard holds the rows
 * whose (table, id) hash to it (common/rows.h); it does not check that: a
 * client that sends it other ids gets them served and stored here, and only
 * misses them itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"
#include "rows.h"
#include "server.h"

static const ps_row_opt_kind kinds[] = {
    [PS__ROW_OPT_KIND__ROW_SGD] = PS_ROW_SGD,
    [PS__ROW_OPT_KIND__ROW_ADAGRAD] = PS_ROW_ADAGRAD,
    [PS__ROW_OPT_KIND__ROW_ROWWISE_ADAGRAD] = PS_ROW_ROWWISE_ADAGRAD,
    [PS__ROW_OPT_KIND__ROW_LAZY_ADAM] = PS_ROW_LAZY_ADAM,
    [PS__ROW_OPT_KIND__ROW_FTRL] = PS_ROW_FTRL,
};

static int bad(char *err, size_t errlen, const char *table, const char *what) {
    snprintf(err, errlen, "table '%.200s': %s", table, what);
    return PS_EINVAL;
}

/* The spec as a table config; PS_EINVAL with the reason when it is not one. */
static int table_cfg(const ps_server *s, const Ps__TableSpec *t, ps_table_cfg *c, char *err,
                     size_t errlen) {
    memset(c, 0, sizeof *c);
    const char *name = t->name ? t->name : "";
    if (!name[0] || strlen(name) > PS_WIRE_MAX_NAME) {
        snprintf(err, errlen, "a table name must have 1..%u bytes", PS_WIRE_MAX_NAME);
        return PS_EINVAL;
    }
    const Ps__RowOptimizer *o = t->optimizer;
    if (!o || (unsigned)o->kind >= sizeof kinds / sizeof kinds[0])
        return bad(err, errlen, name, "no optimizer, or one psd does not know");
    c->opt = ps_row_opt_default(kinds[o->kind], o->lr);
    c->opt.eps = o->epsilon;
    c->opt.initial_accumulator = o->initial_accumulator;
    c->opt.beta_1 = o->beta1, c->opt.beta_2 = o->beta2;
    c->opt.l1 = o->l1, c->opt.l2 = o->l2, c->opt.lr_power = o->lr_power;
    c->dim = t->dim > SIZE_MAX ? SIZE_MAX : (size_t)t->dim;
    c->seed = t->seed;
    c->key = ps_rows_table_key(name);
    c->init_lo = t->init_lo, c->init_hi = t->init_hi;
    c->min_count = t->min_count;
    c->ttl_steps = t->ttl_steps;
    c->max_rows = t->max_rows > SIZE_MAX ? SIZE_MAX : (size_t)t->max_rows;
    c->full = t->refuse_when_full ? PS_TABLE_REFUSE : PS_TABLE_EVICT_LRU;
    char why[160];
    if (ps_table_entry_cfg_check(t->num_rows, c, why, sizeof why) != PS_OK)
        return bad(err, errlen, name, why);
    (void)s;
    return PS_OK;
}

int ps__handle_create_table(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__CreateTable *ct = r->hdr->create_table;
    if (!ct->table) {
        snprintf(err, errlen, "CreateTable without a table");
        return PS_EPROTO;
    }
    const char *job = ct->job_id ? ct->job_id : "";
    int rc = ps_shard_check_job(&s->shard, job, err, errlen);
    if (rc != PS_OK) return rc;
    ps_table_cfg cfg;
    rc = table_cfg(s, ct->table, &cfg, err, errlen);
    if (rc != PS_OK) return rc;
    const char *name = ct->table->name;
    if (ps_store_find(&s->shard.store, name)) {
        snprintf(err, errlen, "'%.200s' is a dense variable on shard %ld, not a table", name,
                 s->cfg.shard);
        return PS_EEXIST;
    }
    ps_table_entry *e = ps_tables_find(&s->shard.tables, name);
    int created = 0;
    if (e && !ps_table_entry_same(e, ct->table->num_rows, &cfg)) {
        snprintf(err, errlen, "table '%.200s' exists on shard %ld with another spec", name,
                 s->cfg.shard);
        return PS_EEXIST;
    }
    if (!e) {
        if (s->shard.store.n + s->shard.tables.n >= (size_t)s->cfg.max_vars) {
            snprintf(err, errlen, "one more table would make more than --max-vars %ld variables",
                     s->cfg.max_vars);
            return PS_EINVAL;
        }
        rc = ps_shard_create_table(&s->shard, name, ct->table->num_rows, &cfg, &e);
        if (rc != PS_OK) return rc;
        created = 1;
        PS_INFO("created table %s [%s, dim %zu] with %s", name,
                ct->table->num_rows ? "fixed" : "dynamic", cfg.dim,
                ps_row_opt_kind_name(cfg.opt.kind));
        ps_shard_claim_job(&s->shard, job);
    }
    Ps__Header out = PS__HEADER__INIT;
    Ps__CreateTableReply rep = PS__CREATE_TABLE_REPLY__INIT;
    rep.created = created;
    rep.version = s->shard.step.version;
    out.body_case = PS__HEADER__BODY_CREATE_TABLE_REPLY;
    out.create_table_reply = &rep;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    return PS_OK;
}

/* The table a request names, or PS_ENOENT. */
static int find_table(ps_server *s, const char *name, ps_table_entry **e, char *err,
                      size_t errlen) {
    *e = ps_tables_find(&s->shard.tables, name ? name : "");
    if (*e) return PS_OK;
    snprintf(err, errlen, "no table named '%.200s' on shard %ld", name ? name : "", s->cfg.shard);
    return PS_ENOENT;
}

/* A payload frame as n items of `size` bytes, aligned: the frame itself, or a
 * copy in *owned (the caller frees it). PS_OK, PS_EPROTO (length) or PS_ENOMEM. */
static int frame_items(const zmq_msg_t *f, size_t size, uint64_t n, const void **out, void **owned,
                       const char *what, char *err, size_t errlen) {
    *owned = NULL;
    size_t len = zmq_msg_size((zmq_msg_t *)f);
    if (len != n * size) {
        snprintf(err, errlen, "%s frame of %zu bytes, expected %llu x %zu", what, len,
                 (unsigned long long)n, size);
        return PS_EPROTO;
    }
    const void *d = zmq_msg_data((zmq_msg_t *)f);
    if (((uintptr_t)d & (size - 1)) == 0 || len == 0) {
        *out = d;
        return PS_OK;
    }
    *owned = malloc(len);
    if (!*owned) return PS_ENOMEM;
    memcpy(*owned, d, len);
    *out = *owned;
    return PS_OK;
}

/* n rows of e in one request: within the limits, ids in range. */
static int check_ids(const ps_server *s, const ps_table_entry *e, const uint64_t *ids, uint64_t n,
                     char *err, size_t errlen) {
    size_t k = ps_table_entry_bad_id(e, ids, (size_t)n);
    if (k < n) {
        snprintf(err, errlen, "id %llu (at %zu) out of range for table '%s' of %llu rows",
                 (unsigned long long)ids[k], k, e->name, (unsigned long long)e->num_rows);
        return PS_EINVAL;
    }
    (void)s;
    return PS_OK;
}

static int check_count(const ps_server *s, const ps_table_entry *e, uint64_t n, char *err,
                       size_t errlen) {
    if (n > PS_ROWS_MAX_IDS || n * e->cfg.dim > PS_ROWS_MAX_VALUES) {
        snprintf(err, errlen,
                 "%llu rows of table '%s' (dim %zu) in one request; allowed %llu rows and %llu "
                 "values: split it",
                 (unsigned long long)n, e->name, e->cfg.dim, (unsigned long long)PS_ROWS_MAX_IDS,
                 (unsigned long long)PS_ROWS_MAX_VALUES);
        return PS_EINVAL;
    }
    (void)s;
    return PS_OK;
}

static void free_payload(void *data, void *hint) {
    (void)hint;
    free(data);
}

int ps__reply_rows(ps_server *s, const void *identity, size_t identity_len, uint64_t request_id,
                   ps_table_entry *e, const uint64_t *ids, size_t n) {
    size_t bytes = n * e->cfg.dim * sizeof(float);
    float *rows = malloc(bytes ? bytes : 1);
    if (!rows) return PS_ENOMEM;
    ps_table_pull(e->t, ids, n, rows);
    Ps__Header out = PS__HEADER__INIT;
    Ps__PullRowsReply rep = PS__PULL_ROWS_REPLY__INIT;
    rep.n = n;
    rep.dim = e->cfg.dim;
    rep.version = s->shard.step.version;
    out.body_case = PS__HEADER__BODY_PULL_ROWS_REPLY;
    out.pull_rows_reply = &rep;
    ps_payload pl = {rows, bytes, free_payload, NULL};
    /* the frame owns rows from here on, sent or not */
    ps__server_reply(s, identity, identity_len, request_id, &out, &pl, 1);
    return PS_OK;
}

int ps__handle_pull_rows(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__PullRows *p = r->hdr->pull_rows;
    ps_table_entry *e;
    int rc = find_table(s, p->table, &e, err, errlen);
    if (rc != PS_OK) return rc;
    if (r->n_payloads != 1) {
        snprintf(err, errlen, "PullRows takes one payload frame (the ids), not %zu", r->n_payloads);
        return PS_EPROTO;
    }
    rc = check_count(s, e, p->n, err, errlen);
    if (rc != PS_OK) return rc;
    const void *idv;
    void *owned;
    rc = frame_items(&r->payloads[0], sizeof(uint64_t), p->n, &idv, &owned, "ids", err, errlen);
    if (rc != PS_OK) return rc;
    const uint64_t *ids = idv;
    rc = check_ids(s, e, ids, p->n, err, errlen);
    if (rc == PS_OK) {
        ps__monitor_drain(s); /* a disconnect reported for this socket must not hit this pull */
        rc = ps_shard_pull_rows(&s->shard, r->identity, r->identity_len, r->fd, r->hdr->request_id,
                                p->min_version, e, ids, (size_t)p->n, err, errlen);
    }
    if (rc == 1)
        rc = ps__reply_rows(s, r->identity, r->identity_len, r->hdr->request_id, e, ids,
                            (size_t)p->n);
    free(owned);
    return rc;
}

/* The first non-finite value of g[0..n), or n. */
static size_t first_bad(const float *g, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(g[i])) return i;
    return n;
}

int ps__handle_push_rows(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__PushRows *p = r->hdr->push_rows;
    ps_table_entry *e;
    int rc = find_table(s, p->table, &e, err, errlen);
    if (rc != PS_OK) return rc;
    if (r->n_payloads != 2) {
        snprintf(err, errlen, "PushRows takes two payload frames (ids, gradients), not %zu",
                 r->n_payloads);
        return PS_EPROTO;
    }
    rc = ps_shard_check_worker(&s->shard, p->worker_index, err, errlen);
    if (rc == PS_OK) rc = check_count(s, e, p->n, err, errlen);
    if (rc == PS_OK) rc = ps_shard_admit_worker(&s->shard, p->worker_index, err, errlen);
    if (rc != PS_OK) return rc;
    const void *idv = NULL, *gv = NULL;
    void *owned_ids, *owned_g = NULL;
    rc = frame_items(&r->payloads[0], sizeof(uint64_t), p->n, &idv, &owned_ids, "ids", err, errlen);
    if (rc == PS_OK)
        rc = frame_items(&r->payloads[1], sizeof(float), p->n * e->cfg.dim, &gv, &owned_g,
                         "gradients", err, errlen);
    const uint64_t *ids = idv;
    const float *g = gv;
    if (rc == PS_OK) rc = check_ids(s, e, ids, p->n, err, errlen);
    if (rc == PS_OK) {
        size_t k = first_bad(g, (size_t)p->n * e->cfg.dim);
        if (k < p->n * e->cfg.dim) {
            snprintf(err, errlen, "gradient of row %llu of table '%s' has a NaN or Inf",
                     (unsigned long long)ids[k / e->cfg.dim], e->name);
            rc = PS_EINVAL;
        }
    }
    int dropped = 0;
    uint64_t rows_dropped = 0;
    if (rc == PS_OK)
        rc = ps_shard_push_rows(&s->shard, e, p->worker_index, p->step, p->session, p->seq, ids,
                                (size_t)p->n, g, &dropped, &rows_dropped, err, errlen);
    free(owned_ids), free(owned_g);
    if (rc != PS_OK) return rc;
    Ps__Header out = PS__HEADER__INIT;
    Ps__PushRowsReply rep = PS__PUSH_ROWS_REPLY__INIT;
    /* a retry is answered as the push it repeats was (its step end counted then) */
    rep.duplicate = dropped == PS_SHARD_ROWS_RETRY;
    rep.dropped = dropped == 1;
    rep.rows_dropped = rows_dropped;
    int closes = !s->shard.cfg.async && p->ends_step && !dropped;
    rep.version = s->shard.step.version;
    out.body_case = PS__HEADER__BODY_PUSH_ROWS_REPLY;
    out.push_rows_reply = &rep;
    /* a replicated shard's reply waits for the backup: it goes after the step's end */
    if (closes && s->repl) ps_shard_end_step(&s->shard, p->worker_index);
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    if (closes && !s->repl) ps_shard_end_step(&s->shard, p->worker_index);
    return PS_OK;
}
