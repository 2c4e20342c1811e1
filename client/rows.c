/* libps's embedding tables: create, pull rows, push rows (ps.h). A call's ids
 * are deduplicated (ps_rows_dedupe), grouped by the shard that holds them
 * (ps_rows_split), sent to every shard concerned at once over conn.c's
 * request round, and the answers scattered back to the order asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "client_impl.h"
#include "optim_rows.h"
#include "rows.h"

#define PULL_CHUNK ((size_t)1 << 22) /* ids per pull round: bounds the call's scratch */

struct ps_table {
    ps_client *c;
    char name[PS_WIRE_MAX_NAME + 1];
    uint64_t dim, num_rows, key;
    /* per call, grown as needed: n entries */
    uint64_t *uniq, *sids; /* distinct ids; the same grouped by shard */
    uint32_t *where, *order, *pos;
    size_t cap;
    float *rows; /* rows (pull) or summed gradients (push), grouped by shard */
    size_t rows_cap;
    uint32_t *counts, *offs; /* per shard */
};

void ps_client_table_spec(ps_table_spec *spec, const char *name, uint64_t dim,
                          const char *optimizer, float lr) {
    memset(spec, 0, sizeof *spec);
    spec->name = name;
    spec->dim = dim;
    spec->optimizer = optimizer ? optimizer : "sgd";
    spec->lr = lr;
    ps_row_opt_kind k = PS_ROW_SGD;
    ps_row_opt_parse_kind(spec->optimizer, &k);
    ps_row_opt o = ps_row_opt_default(k, lr);
    spec->epsilon = o.eps;
    spec->initial_accumulator = o.initial_accumulator;
    spec->beta1 = o.beta_1, spec->beta2 = o.beta_2;
    spec->l1 = o.l1, spec->l2 = o.l2, spec->lr_power = o.lr_power;
    spec->init_lo = -0.05f, spec->init_hi = 0.05f;
}

uint64_t ps_client_table_dim(const ps_table *t) {
    return t ? t->dim : 0;
}

static void table_free(ps_table *t) {
    if (!t) return;
    free(t->uniq), free(t->sids), free(t->where), free(t->order), free(t->pos);
    free(t->rows), free(t->counts), free(t->offs);
    free(t);
}

void ps__tables_free(ps_client *c) {
    for (size_t i = 0; i < c->n_tables; i++) table_free(c->tables[i]);
    free(c->tables);
    c->tables = NULL;
    c->n_tables = c->cap_tables = 0;
}

/* ---- create ---------------------------------------------------------------------- */

typedef struct {
    Ps__TableSpec spec;
    Ps__RowOptimizer opt;
    size_t created;
} create_ctx;

static int send_create(ps_client *c, size_t i, void *vctx) {
    create_ctx *ctx = vctx;
    Ps__Header h = PS__HEADER__INIT;
    Ps__CreateTable ct = PS__CREATE_TABLE__INIT;
    ct.table = &ctx->spec;
    ct.job_id = c->job_id;
    h.body_case = PS__HEADER__BODY_CREATE_TABLE;
    h.create_table = &ct;
    return ps__send_request(c, i, &h, NULL, 0);
}

static int on_created(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    create_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_CREATE_TABLE_REPLY, "create_table");
    if (rc == PS_OK && h->create_table_reply->created) ctx->created++;
    return rc;
}

static const struct {
    const char *name;
    Ps__RowOptKind kind;
} opt_kinds[] = {
    {"sgd", PS__ROW_OPT_KIND__ROW_SGD},
    {"adagrad", PS__ROW_OPT_KIND__ROW_ADAGRAD},
    {"rowwise_adagrad", PS__ROW_OPT_KIND__ROW_ROWWISE_ADAGRAD},
    {"lazy_adam", PS__ROW_OPT_KIND__ROW_LAZY_ADAM},
    {"ftrl", PS__ROW_OPT_KIND__ROW_FTRL},
};

int ps_client_create_table(ps_client *c, const ps_table_spec *spec, ps_table **out) {
    *out = NULL;
    if (c->step_open) return ps__fail(c, PS_EINVAL, "create_table during a step exchange");
    const char *name = spec->name ? spec->name : "";
    if (!name[0] || strlen(name) > PS_WIRE_MAX_NAME)
        return ps__fail(c, PS_EINVAL, "a table name must have 1..%u bytes", PS_WIRE_MAX_NAME);
    if (spec->dim == 0 || spec->dim > 65536)
        return ps__fail(c, PS_EINVAL, "table '%s': dim %llu (allowed 1..65536)", name,
                        (unsigned long long)spec->dim);
    create_ctx ctx = {PS__TABLE_SPEC__INIT, PS__ROW_OPTIMIZER__INIT, 0};
    const char *on = spec->optimizer ? spec->optimizer : "sgd";
    size_t k = 0;
    while (k < sizeof opt_kinds / sizeof opt_kinds[0] && strcmp(opt_kinds[k].name, on) != 0) k++;
    if (k == sizeof opt_kinds / sizeof opt_kinds[0])
        return ps__fail(c, PS_EINVAL,
                        "table '%s': optimizer '%.40s' (want sgd, adagrad, rowwise_adagrad, "
                        "lazy_adam or ftrl)",
                        name, on);
    for (size_t i = 0; i < c->n_tables; i++)
        if (strcmp(c->tables[i]->name, name) == 0)
            return ps__fail(c, PS_EEXIST, "table '%s' was created on this client already", name);
    ctx.opt.kind = opt_kinds[k].kind;
    ctx.opt.lr = spec->lr;
    ctx.opt.epsilon = spec->epsilon;
    ctx.opt.initial_accumulator = spec->initial_accumulator;
    ctx.opt.beta1 = spec->beta1, ctx.opt.beta2 = spec->beta2;
    ctx.opt.l1 = spec->l1, ctx.opt.l2 = spec->l2, ctx.opt.lr_power = spec->lr_power;
    ctx.spec.name = (char *)name;
    ctx.spec.dim = spec->dim;
    ctx.spec.num_rows = spec->num_rows;
    ctx.spec.optimizer = &ctx.opt;
    ctx.spec.init_lo = spec->init_lo, ctx.spec.init_hi = spec->init_hi;
    ctx.spec.seed = spec->seed;
    ctx.spec.min_count = spec->min_count;
    ctx.spec.ttl_steps = spec->ttl_steps;
    ctx.spec.max_rows = spec->max_rows;
    ctx.spec.refuse_when_full = spec->refuse_when_full != 0;

    ps_table *t = calloc(1, sizeof *t);
    if (t) t->counts = calloc(c->n_shards, sizeof *t->counts);
    if (t && t->counts) t->offs = calloc(c->n_shards + 1, sizeof *t->offs);
    if (!t || !t->offs) {
        table_free(t);
        return ps__fail(c, PS_ENOMEM, "out of memory");
    }
    if (c->n_tables == c->cap_tables) {
        size_t cap = c->cap_tables ? 2 * c->cap_tables : 4;
        ps_table **v = realloc(c->tables, cap * sizeof *v);
        if (!v) {
            table_free(t);
            return ps__fail(c, PS_ENOMEM, "out of memory");
        }
        c->tables = v, c->cap_tables = cap;
    }
    op_spec op = {"create_table", send_create, on_created, 0, 0, &ctx};
    int rc = ps__round_trip(c, &op, 1);
    if (rc != PS_OK) {
        table_free(t);
        return rc;
    }
    t->c = c;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dim = spec->dim;
    t->num_rows = spec->num_rows;
    t->key = ps_rows_table_key(name);
    c->tables[c->n_tables++] = t;
    *out = t;
    return PS_OK;
}

/* ---- the call's ids -------------------------------------------------------------- */

static int reserve(ps_table *t, size_t n) {
    if (n > t->cap || !t->uniq) { /* at least once: an empty call has buffers too */
        size_t cap = n < 64 ? 64 : n;
        uint64_t *u = realloc(t->uniq, cap * sizeof *u);
        if (u) t->uniq = u;
        uint64_t *sid = u ? realloc(t->sids, cap * sizeof *sid) : NULL;
        if (sid) t->sids = sid;
        uint32_t *w = sid ? realloc(t->where, cap * sizeof *w) : NULL;
        if (w) t->where = w;
        uint32_t *o = w ? realloc(t->order, cap * sizeof *o) : NULL;
        if (o) t->order = o;
        uint32_t *p = o ? realloc(t->pos, cap * sizeof *p) : NULL;
        if (p) t->pos = p;
        if (!p) return PS_ENOMEM;
        t->cap = cap;
    }
    size_t need = n * (size_t)t->dim;
    if (need > t->rows_cap || !t->rows) {
        float *r = realloc(t->rows, (need ? need : 1) * sizeof *r);
        if (!r) return PS_ENOMEM;
        t->rows = r, t->rows_cap = need;
    }
    return PS_OK;
}

/* Deduplicates ids[0..n) and groups the distinct ones by shard: t->sids,
 * t->counts, t->offs, t->pos (distinct id -> grouped place), t->where. Returns
 * the number of distinct ids, or (size_t)-1 (message set). */
static size_t group(ps_table *t, const uint64_t *ids, size_t n, const char *what) {
    ps_client *c = t->c;
    if (reserve(t, n) != PS_OK) {
        ps__fail(c, PS_ENOMEM, "%s: out of memory for %zu ids", what, n);
        return (size_t)-1;
    }
    size_t nu = 0;
    if (ps_rows_dedupe(ids, n, t->uniq, &nu, t->where) != PS_OK) {
        ps__fail(c, PS_ENOMEM, "%s: out of memory for %zu ids", what, n);
        return (size_t)-1;
    }
    ps_rows_split(t->key, t->uniq, nu, (uint32_t)c->n_shards, t->counts, t->order, NULL);
    t->offs[0] = 0;
    for (size_t s = 0; s < c->n_shards; s++) t->offs[s + 1] = t->offs[s] + t->counts[s];
    for (size_t k = 0; k < nu; k++) {
        t->sids[k] = t->uniq[t->order[k]];
        t->pos[t->order[k]] = (uint32_t)k;
    }
    return nu;
}

/* PS_OK when every id is in range (a fixed table) and n fits the wire's limits. */
static int check_call(ps_table *t, const uint64_t *ids, size_t n, const char *what) {
    ps_client *c = t->c;
    if (ps__need_hello(c, what) != PS_OK) return PS_EINVAL;
    if (c->step_open) return ps__fail(c, PS_EINVAL, "%s during a step exchange", what);
    if (n && !ids) return ps__fail(c, PS_EINVAL, "%s: no ids", what);
    if (n > UINT32_MAX) return ps__fail(c, PS_EINVAL, "%s: %zu ids in one call", what, n);
    for (size_t i = 0; t->num_rows && i < n; i++)
        if (ids[i] >= t->num_rows)
            return ps__fail(c, PS_EINVAL, "%s: id %llu (at %zu) out of range for table '%s' of "
                            "%llu rows", what, (unsigned long long)ids[i], i, t->name,
                            (unsigned long long)t->num_rows);
    return PS_OK;
}

/* ---- pull ------------------------------------------------------------------------ */

static int send_pull(ps_client *c, size_t i, void *vctx) {
    ps_table *t = vctx;
    Ps__Header h = PS__HEADER__INIT;
    Ps__PullRows p = PS__PULL_ROWS__INIT;
    p.table = t->name;
    p.n = t->counts[i];
    p.min_version = c->async ? 0 : c->shards[i].version;
    h.body_case = PS__HEADER__BODY_PULL_ROWS;
    h.pull_rows = &p;
    ps_payload pl = {t->sids + t->offs[i], (size_t)t->counts[i] * sizeof(uint64_t), NULL, NULL};
    return ps__send_request(c, i, &h, &pl, 1);
}

static int on_pulled(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    ps_table *t = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_PULL_ROWS_REPLY, "pull_rows");
    if (rc != PS_OK) return rc;
    const Ps__PullRowsReply *p = h->pull_rows_reply;
    size_t bytes = (size_t)t->counts[shard] * t->dim * sizeof(float);
    if (p->n != t->counts[shard] || p->dim != t->dim || f->n != 2 ||
        zmq_msg_size(&f->frames[1]) != bytes)
        return ps__fail(c, PS_EPROTO,
                        "pull_rows: psd %zu answered %llu rows of dim %llu in %zu frames for "
                        "%u rows of dim %llu of table '%s'",
                        shard, (unsigned long long)p->n, (unsigned long long)p->dim, f->n - 1,
                        t->counts[shard], (unsigned long long)t->dim, t->name);
    memcpy(t->rows + (size_t)t->offs[shard] * t->dim, zmq_msg_data(&f->frames[1]), bytes);
    return PS_OK;
}

static int pull_chunk(ps_table *t, const uint64_t *ids, size_t n, float *out) {
    ps_client *c = t->c;
    size_t nu = group(t, ids, n, "pull_rows");
    if (nu == (size_t)-1) return PS_ENOMEM;
    int rc = ps__connect_all(c);
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++)
        if (t->counts[i]) rc = send_pull(c, i, t);
    op_spec op = {"pull_rows", send_pull, on_pulled, 0, 0, t};
    int rc2 = ps__collect(c, &op);
    if (rc == PS_OK) rc = rc2;
    if (rc != PS_OK) return rc;
    size_t dim = (size_t)t->dim;
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * dim, t->rows + (size_t)t->pos[t->where[i]] * dim, dim * sizeof *out);
    return PS_OK;
}

int ps_client_pull_rows(ps_table *t, const uint64_t *ids, size_t n, float *out) {
    if (!t) return PS_EINVAL;
    int rc = check_call(t, ids, n, "pull_rows");
    for (size_t at = 0; rc == PS_OK && at < n; at += PULL_CHUNK) {
        size_t k = n - at < PULL_CHUNK ? n - at : PULL_CHUNK;
        rc = pull_chunk(t, ids + at, k, out + at * (size_t)t->dim);
    }
    return rc;
}

/* ---- push ------------------------------------------------------------------------ */

typedef struct {
    ps_table *t;
    int ends;
    uint64_t *step; /* per shard: the step pushed for */
    uint64_t seq;   /* this push's (c->rows_seq): a re-send repeats it */
    uint64_t rows_dropped;
    size_t dropped; /* shards that dropped the push */
} push_ctx;

/* Sync: whether this push is the worker's push for the step on shard i: the
 * worker's last row push of the step (PS_ROWS_END_STEP) to a shard that holds
 * none of its dense variables (where no dense push will end the step). */
static int ends_here(const ps_client *c, const push_ctx *ctx, size_t i) {
    return !c->async && ctx->ends && c->shards[i].n_tensors == 0;
}

static int send_push(ps_client *c, size_t i, void *vctx) {
    push_ctx *ctx = vctx;
    ps_table *t = ctx->t;
    Ps__Header h = PS__HEADER__INIT;
    Ps__PushRows p = PS__PUSH_ROWS__INIT;
    p.table = t->name;
    p.n = t->counts[i];
    p.step = ctx->step[i];
    p.worker_index = c->worker_index;
    p.ends_step = ends_here(c, ctx, i);
    p.session = c->push_session;
    p.seq = ctx->seq;
    h.body_case = PS__HEADER__BODY_PUSH_ROWS;
    h.push_rows = &p;
    ps_payload pl[2] = {
        {t->sids + t->offs[i], (size_t)t->counts[i] * sizeof(uint64_t), NULL, NULL},
        {t->rows + (size_t)t->offs[i] * t->dim, (size_t)t->counts[i] * t->dim * sizeof(float),
         NULL, NULL},
    };
    return ps__send_request(c, i, &h, pl, 2);
}

static int on_pushed(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    push_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_PUSH_ROWS_REPLY, "push_rows");
    if (rc != PS_OK) return rc;
    ctx->rows_dropped += h->push_rows_reply->rows_dropped;
    if (h->push_rows_reply->dropped) ctx->dropped++; /* a duplicate: its first copy counted */
    else if (ends_here(c, ctx, shard)) c->shards[shard].version = ctx->step[shard] + 1;
    return PS_OK;
}

int ps_client_push_rows(ps_table *t, const uint64_t *ids, size_t n, const float *grads, int flags,
                        uint64_t *rows_dropped) {
    if (rows_dropped) *rows_dropped = 0;
    if (!t) return PS_EINVAL;
    ps_client *c = t->c;
    int rc = check_call(t, ids, n, "push_rows");
    if (rc != PS_OK) return rc;
    if (n && !grads) return ps__fail(c, PS_EINVAL, "push_rows: no gradients");
    size_t nu = group(t, ids, n, "push_rows");
    if (nu == (size_t)-1) return PS_ENOMEM;
    size_t dim = (size_t)t->dim;
    for (size_t s = 0; s < c->n_shards; s++)
        if (t->counts[s] > PS_ROWS_MAX_IDS || (uint64_t)t->counts[s] * dim > PS_ROWS_MAX_VALUES)
            return ps__fail(c, PS_EINVAL,
                            "push_rows: %u distinct rows of table '%s' (dim %zu) for psd %zu in "
                            "one push; allowed %llu rows and %llu values",
                            t->counts[s], t->name, dim, s, (unsigned long long)PS_ROWS_MAX_IDS,
                            (unsigned long long)PS_ROWS_MAX_VALUES);
    /* duplicate ids' gradients summed, in the order of the ids (deterministic) */
    memset(t->rows, 0, nu * dim * sizeof *t->rows);
    for (size_t i = 0; i < n; i++) {
        float *dst = t->rows + (size_t)t->pos[t->where[i]] * dim;
        const float *g = grads + i * dim;
        for (size_t d = 0; d < dim; d++) dst[d] += g[d];
    }
    uint64_t *steps = calloc(c->n_shards, sizeof *steps);
    if (!steps) return ps__fail(c, PS_ENOMEM, "out of memory");
    for (size_t s = 0; s < c->n_shards; s++) steps[s] = c->shards[s].version;
    push_ctx ctx = {t, (flags & PS_ROWS_END_STEP) != 0, steps, ++c->rows_seq, 0, 0};
    rc = ps__connect_all(c);
    /* sync: every shard, so that each counts this worker's push for the step */
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++)
        if (t->counts[i] || !c->async) rc = send_push(c, i, &ctx);
    op_spec op = {"push_rows", send_push, on_pushed, 1, 0, &ctx};
    int rc2 = ps__collect(c, &op);
    if (rc == PS_OK) rc = rc2;
    free(steps);
    if (rows_dropped) *rows_dropped = ctx.rows_dropped;
    if (rc == PS_OK && ctx.dropped)
        CL_DEBUG("push_rows: %zu shards dropped the push (its step had closed)", ctx.dropped);
    return rc;
}
