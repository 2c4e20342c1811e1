/* libps admin requests: Stats, Checkpoint and Shutdown to one shard or to every shard
 * at once (psctl status/checkpoint/shutdown), replies converted to plain structs. */
#include "client_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { ADMIN_STATS, ADMIN_CHECKPOINT, ADMIN_SHUTDOWN } admin_kind;

typedef struct {
    admin_kind kind;
    Ps__Header *req;
    ps_stats *stats;          /* indexed by shard (ADMIN_STATS) */
    ps_checkpoint_info *ckpt; /* indexed by shard (ADMIN_CHECKPOINT), may be NULL */
} admin_ctx;

static char *dup_str(const char *s) {
    return strdup(s ? s : "");
}

void ps_stats_free(ps_stats *s) {
    if (!s) return;
    for (size_t k = 0; s->vars && k < s->n_vars; k++) {
        free(s->vars[k].name);
        free(s->vars[k].optimizer);
    }
    free(s->vars);
    for (size_t k = 0; s->tables && k < s->n_tables; k++) {
        free(s->tables[k].name);
        free(s->tables[k].optimizer);
    }
    free(s->tables);
    free(s->live_set);
    free(s->job_id);
    memset(s, 0, sizeof *s);
}

/* Copies r into *out. PS_OK, or PS_ENOMEM with *out empty. */
static int stats_from_reply(const Ps__StatsReply *r, ps_stats *out) {
    memset(out, 0, sizeof *out);
    out->version = r->version;
    out->mode = (int)r->mode;
    out->shard_index = r->shard_index;
    out->num_workers = r->num_workers;
    out->live_workers = r->live_workers;
    out->requests = r->requests;
    out->errors = r->errors;
    out->pushes_applied = r->pushes_applied;
    out->stale_pushes = r->stale_pushes;
    out->bytes_in = r->bytes_in;
    out->bytes_out = r->bytes_out;
    out->pending_pulls = r->pending_pulls;
    out->uptime_seconds = r->uptime_seconds;
    out->updates_applied = r->updates_applied;
    out->workers_removed = r->workers_removed;
    out->dropped_pushes = r->dropped_pushes;
    out->max_staleness = r->max_staleness;
    out->staleness_waits = r->staleness_waits;
    out->checkpoints = r->checkpoints;
    out->checkpoint_version = r->checkpoint_version;
    out->checkpoint_age_seconds = r->checkpoint_age_seconds;
    out->incarnation = r->incarnation;
    out->auth_denied = r->auth_denied;
    out->pending_pull_bytes = r->pending_pull_bytes;
    out->pending_pulls_refused = r->pending_pulls_refused;
    out->pending_pulls_timed_out = r->pending_pulls_timed_out;
    out->pending_pulls_released = r->pending_pulls_released;
    out->dropped_replies = r->dropped_replies;
    out->loop_turns_cut = r->loop_turns_cut;
    out->checkpoint_failures = r->checkpoint_failures;
    out->push_bytes = r->push_bytes;
    out->job_id = dup_str(r->job_id);
    if (!out->job_id) goto nomem;
    if (r->n_vars) {
        out->vars = calloc(r->n_vars, sizeof *out->vars);
        if (!out->vars) goto nomem;
        out->n_vars = r->n_vars;
        for (size_t k = 0; k < r->n_vars; k++) {
            out->vars[k].name = dup_str(r->vars[k]->name);
            out->vars[k].numel = r->vars[k]->numel;
            out->vars[k].optimizer = dup_str(r->vars[k]->optimizer);
            if (!out->vars[k].name || !out->vars[k].optimizer) goto nomem;
        }
    }
    if (r->n_tables) {
        out->tables = calloc(r->n_tables, sizeof *out->tables);
        if (!out->tables) goto nomem;
        out->n_tables = r->n_tables;
        for (size_t k = 0; k < r->n_tables; k++) {
            const Ps__TableStats *t = r->tables[k];
            ps_table_stats *o = &out->tables[k];
            o->name = dup_str(t->name);
            o->optimizer = dup_str(t->optimizer);
            if (!o->name || !o->optimizer) goto nomem;
            o->dim = t->dim, o->num_rows = t->num_rows, o->rows = t->rows;
            o->admitted = t->admitted, o->evicted = t->evicted, o->expired = t->expired;
            o->refused = t->refused, o->dropped = t->dropped, o->bytes = t->bytes;
            o->max_rows = t->max_rows;
        }
    }
    out->workers_min = r->workers_min;
    if (r->n_live_set) {
        out->live_set = calloc(r->n_live_set, sizeof *out->live_set);
        if (!out->live_set) goto nomem;
        out->n_live_set = r->n_live_set;
        for (size_t k = 0; k < r->n_live_set; k++)
            out->live_set[k] = r->live_set[k];
    }
    return PS_OK;
nomem:
    ps_stats_free(out);
    return PS_ENOMEM;
}

static int send_admin(ps_client *c, size_t i, void *vctx) {
    admin_ctx *ctx = vctx;
    return ps__send_request(c, i, ctx->req, NULL, 0);
}

static int on_admin(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    admin_ctx *ctx = vctx;
    switch (ctx->kind) {
    case ADMIN_STATS: {
        int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_STATS_REPLY, "stats");
        if (rc == PS_OK && stats_from_reply(h->stats_reply, &ctx->stats[shard]) != PS_OK)
            rc = ps__fail(c, PS_ENOMEM, "stats: out of memory");
        return rc;
    }
    case ADMIN_CHECKPOINT: {
        int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_CHECKPOINT_REPLY, "checkpoint");
        if (rc == PS_OK && ctx->ckpt) {
            const Ps__CheckpointReply *r = h->checkpoint_reply;
            ps_checkpoint_info *o = &ctx->ckpt[shard];
            o->version = r->version;
            o->bytes = r->bytes;
            snprintf(o->path, sizeof o->path, "%s", r->path ? r->path : "");
        }
        return rc;
    }
    case ADMIN_SHUTDOWN:
        return ps__expect_body(c, shard, h, PS__HEADER__BODY_SHUTDOWN_REPLY, "shutdown");
    }
    return PS_EINTERNAL;
}

/* One admin request to shard `only` (or every shard when all), collected under the
 * client's timeout. res (all: per shard) may be NULL. */
static int admin_round(ps_client *c, admin_kind kind, int all, unsigned only, ps_stats *stats,
                       ps_checkpoint_info *ckpt, ps_shard_result *res) {
    if (!all && only >= c->n_shards) return ps__fail(c, PS_EINVAL, "shard %u out of range", only);
    if (c->step_open) return ps__fail(c, PS_EINVAL, "admin request during a step exchange");
    Ps__Header h = PS__HEADER__INIT;
    Ps__Stats st = PS__STATS__INIT;
    Ps__Checkpoint ck = PS__CHECKPOINT__INIT;
    Ps__Shutdown sd = PS__SHUTDOWN__INIT;
    static const char *const what[] = {"stats", "checkpoint", "shutdown"};
    if (kind == ADMIN_STATS) {
        h.body_case = PS__HEADER__BODY_STATS;
        h.stats = &st;
    } else if (kind == ADMIN_CHECKPOINT) {
        h.body_case = PS__HEADER__BODY_CHECKPOINT;
        h.checkpoint = &ck;
    } else {
        h.body_case = PS__HEADER__BODY_SHUTDOWN;
        h.shutdown = &sd;
    }
    size_t n = c->n_shards;
    if (res) memset(res, 0, (all ? n : 1) * sizeof *res);
    if (stats) memset(stats, 0, (all ? n : 1) * sizeof *stats);
    if (ckpt) memset(ckpt, 0, (all ? n : 1) * sizeof *ckpt);
    /* the engine indexes by shard: a single request gets arrays of n */
    ps_stats *st_arr = stats;
    ps_checkpoint_info *ck_arr = ckpt;
    if (!all && kind == ADMIN_STATS && !(st_arr = calloc(n, sizeof *st_arr)))
        return ps__fail(c, PS_ENOMEM, "out of memory");
    if (!all && kind == ADMIN_CHECKPOINT && ckpt && !(ck_arr = calloc(n, sizeof *ck_arr))) {
        if (st_arr != stats) free(st_arr);
        return ps__fail(c, PS_ENOMEM, "out of memory");
    }
    admin_ctx ctx = {kind, &h, st_arr, ck_arr};
    op_spec op = {what[kind], send_admin, on_admin, 0, 0, &ctx, all, all ? res : NULL};
    int rc = ps__connect_all(c);
    if (rc == PS_OK && all) {
        for (size_t i = 0; i < n; i++) {
            int r = send_admin(c, i, &ctx);
            if (r != PS_OK && res) {
                res[i].rc = r;
                snprintf(res[i].error, sizeof res[i].error, "%s", c->error);
            }
            if (r != PS_OK && rc == PS_OK) rc = r;
        }
        int rc2 = ps__collect(c, &op);
        if (rc == PS_OK) rc = rc2;
    } else if (rc == PS_OK) {
        rc = send_admin(c, only, &ctx);
        if (rc == PS_OK) rc = ps__collect(c, &op);
    } else if (res && all) {
        for (size_t i = 0; i < n; i++) {
            res[i].rc = rc;
            snprintf(res[i].error, sizeof res[i].error, "%s", c->error);
        }
    }
    if (!all) {
        if (st_arr != stats) {
            if (rc == PS_OK && stats)
                stats[0] = st_arr[only];
            else
                ps_stats_free(&st_arr[only]);
            free(st_arr);
        }
        if (ck_arr != ckpt) {
            if (rc == PS_OK) ckpt[0] = ck_arr[only];
            free(ck_arr);
        }
    }
    return rc;
}

int ps_client_stats(ps_client *c, unsigned shard, ps_stats *out) {
    if (!out) return ps__fail(c, PS_EINVAL, "stats: no place for the result");
    return admin_round(c, ADMIN_STATS, 0, shard, out, NULL, NULL);
}

int ps_client_checkpoint(ps_client *c, unsigned shard, ps_checkpoint_info *out) {
    return admin_round(c, ADMIN_CHECKPOINT, 0, shard, NULL, out, NULL);
}

int ps_client_shutdown(ps_client *c, unsigned shard) {
    return admin_round(c, ADMIN_SHUTDOWN, 0, shard, NULL, NULL, NULL);
}

int ps_client_stats_all(ps_client *c, ps_stats *out, ps_shard_result *res) {
    if (!out) return ps__fail(c, PS_EINVAL, "stats: no place for the results");
    return admin_round(c, ADMIN_STATS, 1, 0, out, NULL, res);
}

int ps_client_checkpoint_all(ps_client *c, ps_checkpoint_info *out, ps_shard_result *res) {
    return admin_round(c, ADMIN_CHECKPOINT, 1, 0, NULL, out, res);
}

int ps_client_shutdown_all(ps_client *c, ps_shard_result *res) {
    return admin_round(c, ADMIN_SHUTDOWN, 1, 0, NULL, NULL, res);
}
