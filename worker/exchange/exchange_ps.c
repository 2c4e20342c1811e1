/* The exchange through psd shards (see exchange.h): the client joins the job
 * (the chief creates the variables, the others wait for them), and each step
 * sends the gradients and brings back the values, as one PushPull round trip
 * per shard or, with --push-pull no, a pull then a push. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps.h"
#include "clip.h"
#include "emb_tables.h"
#include "exchange.h"
#include "half.h"
#include "local_opt.h"
#include "log.h"
#include "placement.h"

typedef struct {
    const ps_train_config *cfg; /* borrowed */
    ps_model *model;            /* borrowed */
    ps_client *client;          /* owned */
    int async;                  /* the shards' mode, from the hello */
    uint64_t clock;             /* the current step's: steps done before it */
    int fresh;                  /* the params hold the values the last step exchange brought back */
    /* clipping (the model's clipnorm, clipvalue or global_clipnorm), on this worker's
     * own gradient before it is pushed: NULL / 0 when the optimizer does not clip */
    const ps_opt_spec *clip;
    ps_clip_range *ranges;  /* the trainable variables' gradients */
    size_t n_ranges;
    unsigned char *clipped; /* per range: clipped this step */
    /* the model's embedding tables on psd (ps_model_embedding_at order), made at join;
     * with any, a step's dense push waits for step_end, after the rows (rows_push) */
    ps_table **tables;
    size_t n_tables;
    ps_row_opt row_opt;
    size_t n_tensors; /* the pieces registered with the client */
} ps_ex;

/* all: every variable's optimizer on psd (local SGD's delta rule); NULL: the model's.
 * The frozen variables stay here: psd never sees them (constants of the job, the
 * same on every worker from the same --init-from / --model file or --seed). */
static int register_vars(ps_model *m, ps_client *c, unsigned n_shards, const ps_opt_spec *all,
                         size_t *added, char *err, size_t errlen) {
    size_t nv = ps_model_num_vars(m), n = 0;
    ps_place_var *in = calloc(nv + 1, sizeof *in);
    size_t *var_of = calloc(nv + 1, sizeof *var_of); /* in[k] is variable var_of[k] */
    if (!in || !var_of) {
        free(in);
        free(var_of);
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < nv; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->frozen) continue;
        var_of[n] = i;
        in[n++] = (ps_place_var){v->name, v->shape[0], v->numel / v->shape[0]};
    }
    ps_placement pl;
    int rc = ps_place(in, n, n_shards, PS_PLACE_MIN_SLICE_BYTES, &pl);
    if (rc != PS_OK) {
        free(in);
        free(var_of);
        snprintf(err, errlen, "placing variables: %s", ps_strerror(rc));
        return rc;
    }
    for (size_t k = 0; k < pl.n && rc == PS_OK; k++) {
        const ps_place_piece *pc = &pl.pieces[k];
        size_t var = var_of[pc->var];
        const ps_model_var *v = ps_model_var_at(m, var);
        size_t row = v->numel / v->shape[0];
        ps_client_tensor t = {.shard = pc->shard, .rank = (size_t)v->rank};
        snprintf(t.name, sizeof t.name, "%s", pc->name);
        t.shape[0] = pc->row_end - pc->row_begin;
        t.shape[1] = v->rank > 1 ? v->shape[1] : 0;
        t.param = ps_model_params(m) + v->offset + pc->row_begin * row;
        t.grad = ps_model_grads(m) + v->offset + pc->row_begin * row;
        t.opt = all ? *all : *ps_model_var_optimizer(m, var); /* moving statistics: SGD 1 */
        rc = ps_client_add(c, &t);
        if (rc == PS_OK && added) (*added)++;
        PS_DEBUG("%s -> psd %u", t.name, t.shard);
    }
    ps_placement_free(&pl);
    free(in);
    free(var_of);
    return rc;
}

int ps_train_register_vars(ps_model *m, ps_client *c, unsigned n_shards, char *err, size_t errlen) {
    return register_vars(m, c, n_shards, NULL, NULL, err, errlen);
}

/* Every worker creates the model's tables (the same spec: the shards keep the
 * first), named after their layers, spread over every shard. */
static int create_tables(ps_ex *x, char *err, size_t errlen) {
    for (size_t e = 0; e < x->n_tables; e++) {
        const ps_model_embedding *me = ps_model_embedding_at(x->model, e);
        ps_table_spec spec;
        ps_client_table_spec(&spec, me->name, me->dim,
                             ps_row_opt_kind_name(x->row_opt.kind), x->row_opt.lr);
        spec.epsilon = x->row_opt.eps;
        spec.initial_accumulator = x->row_opt.initial_accumulator;
        spec.beta1 = x->row_opt.beta_1, spec.beta2 = x->row_opt.beta_2;
        spec.num_rows = me->input_dim;
        spec.init_lo = me->init_lo, spec.init_hi = me->init_hi;
        spec.seed = x->cfg->seed;
        spec.min_count = me->min_count;
        spec.ttl_steps = me->ttl_steps;
        spec.max_rows = me->max_rows;
        spec.refuse_when_full = me->refuse_when_full;
        if (ps_client_create_table(x->client, &spec, &x->tables[e]) != PS_OK) {
            snprintf(err, errlen, "embedding table '%s': %s", me->name,
                     ps_client_error(x->client));
            return PS_EINVAL;
        }
    }
    if (x->n_tables)
        PS_INFO("%zu embedding table(s) on psd, rows updated by %s", x->n_tables,
                ps_row_opt_kind_name(x->row_opt.kind));
    return PS_OK;
}

static int ps_rows_pull(void *self, size_t e, const uint64_t *ids, size_t n, float *out,
                        char *err, size_t errlen) {
    ps_ex *x = self;
    int rc = ps_client_pull_rows(x->tables[e], ids, n, out);
    if (rc != PS_OK) snprintf(err, errlen, "%s", ps_client_error(x->client));
    return rc;
}

/* The step's last row push ends it on the shards that hold no dense variable. */
static int ps_rows_push(void *self, size_t e, const uint64_t *ids, size_t n, const float *grads,
                        int last, char *err, size_t errlen) {
    ps_ex *x = self;
    uint64_t dropped = 0;
    int rc = ps_client_push_rows(x->tables[e], ids, n, grads, last ? PS_ROWS_END_STEP : 0,
                                 &dropped);
    if (rc == PS_ERESTARTED) {
        PS_WARN("%s; this step's rows are lost, going on", ps_client_error(x->client));
        rc = PS_OK;
    }
    if (rc != PS_OK) snprintf(err, errlen, "%s", ps_client_error(x->client));
    return rc;
}

/* Joins the job through libps (ps_client_join): hello; the chief checks the
 * shards and creates the variables, the others wait for them; then where the
 * job is: a worker (re)starting into a running job continues where its data
 * shard is. Sync: one version per step; async: the shards remember this
 * worker's clock (its pushes). A shard that lost its part of the variables
 * (restarted without a checkpoint) while the others still hold theirs fails
 * the job (PS_ELOST, naming it), unless --recreate-lost-variables says to
 * create them again with their initial values (logged, and listed in the
 * summary). Another job's variables, or an impossible version: an error
 * naming the shard. */
static int ps_join(void *self, ps_exchange_job *job, char *err, size_t errlen) {
    ps_ex *x = self;
    const ps_train_config *cfg = x->cfg;
    ps_join_info info = {.chief = cfg->index == 0,
                         .recreate_lost = x->cfg->recreate_lost,
                         .wait_ms = cfg->timeout_ms,
                         .total_steps = job->total_steps,
                         .lost = job->recreated,
                         .lost_cap = job->recreated_cap};
    job->n_recreated = 0;
    int rc = ps_client_join(x->client, &info);
    x->async = info.async;
    job->async = info.async;
    if (rc == PS_ELOST)
        snprintf(err, errlen,
                 "%s; not re-creating them (--recreate-lost-variables yes would, with their "
                 "initial values)",
                 ps_client_error(x->client));
    else if (rc != PS_OK)
        snprintf(err, errlen, "%s", ps_client_error(x->client));
    if (rc != PS_OK) return rc;
    if (info.n_lost) {
        job->n_recreated = info.n_lost < job->recreated_cap ? info.n_lost : job->recreated_cap;
        PS_ERROR("%s; --recreate-lost-variables: re-creating them with their INITIAL values "
                 "(that part of the model starts over)",
                 info.lost_error);
    }
    if (info.chief)
        PS_INFO("created %zu variables (%zu parameters) on %zu shards", info.created,
                ps_model_num_updated_params(x->model), cfg->n_ps);
    job->clock = info.clock;
    return create_tables(x, err, errlen);
}

/* ---- clipping before the push ----
 * Per variable (clipnorm, clipvalue): a variable is clipped as soon as the backward
 * pass has made its gradient final, so each shard's push still leaves as early as
 * without clipping. global_clipnorm needs every gradient first: the pushes wait
 * for the end of the backward pass. */

/* Clips the trainable variables lying wholly in [begin, end). Returns 1 when the
 * range may be pushed (every trainable variable it touches is clipped), 0 when it
 * waits for the step's end (global_clipnorm, or a variable only partly inside). */
static int clip_ready(ps_ex *x, const float *begin, const float *end) {
    if (ps_clip_needed(x->clip) == 2) return 0;
    float *g = ps_model_grads(x->model);
    int whole = 1;
    for (size_t i = 0; i < x->n_ranges; i++) {
        const float *a = g + x->ranges[i].off, *b = a + x->ranges[i].len;
        if (b <= begin || a >= end) continue;
        if (a < begin || b > end) {
            whole = 0;
            continue;
        }
        if (!x->clipped[i]) ps_clip_apply(x->clip, g, &x->ranges[i], 1);
        x->clipped[i] = 1;
    }
    return whole;
}

/* At the step's end: clips what is not clipped yet (global_clipnorm: everything). */
static void clip_rest(ps_ex *x) {
    float *g = ps_model_grads(x->model);
    if (ps_clip_needed(x->clip) == 2) {
        ps_clip_apply(x->clip, g, x->ranges, x->n_ranges);
        return;
    }
    for (size_t i = 0; i < x->n_ranges; i++)
        if (!x->clipped[i]) ps_clip_apply(x->clip, g, &x->ranges[i], 1);
}

static int clip_open(ps_ex *x, char *err, size_t errlen) {
    const ps_opt_spec *o = ps_model_optimizer(x->model);
    /* local SGD pushes a K-step delta, not a gradient: the local optimizer clipped
     * each of those steps' gradients already (local_opt.c) */
    if (!ps_clip_needed(o) || x->cfg->sync_every > 1) return PS_OK;
    if (ps_trainable_ranges(x->model, &x->ranges, &x->n_ranges) != PS_OK ||
        !(x->clipped = calloc(x->n_ranges ? x->n_ranges : 1, 1))) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    x->clip = o;
    PS_INFO("each worker's gradient is clipped before the push (%s)",
            o->global_clipnorm > 0 ? "global_clipnorm: pushes wait for the whole backward pass"
            : o->clipnorm > 0      ? "clipnorm, per variable"
                                   : "clipvalue");
    return PS_OK;
}

/* Pulls, unless the last step's exchange brought the values back. */
static int ps_step_begin(void *self, uint64_t clock, char *err, size_t errlen) {
    ps_ex *x = self;
    x->clock = clock;
    if (x->clip) memset(x->clipped, 0, x->n_ranges);
    int rc = x->fresh ? PS_OK : ps_client_pull_next(x->client, x->async, clock, NULL);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s", ps_client_error(x->client));
        return rc;
    }
    x->fresh = 0;
    return PS_OK;
}

/* A push a shard dropped (its step had closed: backup workers) or a shard
 * restarted from a checkpoint meanwhile is not an error: the next pull
 * catches up. */
static int step_result(ps_ex *x, int rc, size_t dropped, char *err, size_t errlen) {
    if (rc == PS_ERESTARTED) {
        PS_WARN("%s; this step's gradients are lost, going on", ps_client_error(x->client));
        rc = PS_OK;
    }
    if (dropped) PS_DEBUG("push dropped by %zu shard(s): the step had closed", dropped);
    if (rc != PS_OK) snprintf(err, errlen, "%s", ps_client_error(x->client));
    return rc;
}

/* PushPull: each shard's request goes out as soon as its gradients are final
 * (ps_pp_grads_ready), its reply brings the updated values. */
/* With embedding tables the step exchange opens at step_end, once the rows are
 * pushed: a sync step must not close on a dense push before this worker's rows. */
static int ps_pp_step_begin(void *self, uint64_t clock, char *err, size_t errlen) {
    ps_ex *x = self;
    int rc = ps_step_begin(self, clock, err, errlen);
    if (rc == PS_OK && !x->n_tables) ps_client_step_begin(x->client, clock);
    return rc;
}

static void ps_pp_grads_ready(void *self, const float *begin, const float *end) {
    ps_ex *x = self;
    if (x->n_tables) return; /* step_end sends everything */
    if (x->clip && !clip_ready(x, begin, end)) return;
    ps_client_grads_ready(x->client, begin, end);
}

static int ps_pp_step_end(void *self, char *err, size_t errlen) {
    ps_ex *x = self;
    size_t dropped = 0;
    if (x->n_tables) {
        const float *g = ps_model_grads(x->model);
        ps_client_step_begin(x->client, x->clock);
        if (x->clip) clip_rest(x);
        ps_client_grads_ready(x->client, g, g + ps_model_num_params(x->model));
    } else if (x->clip) {
        clip_rest(x);
        const float *g = ps_model_grads(x->model);
        ps_client_grads_ready(x->client, g, g + ps_model_num_params(x->model)); /* errors: below */
    }
    int rc = ps_client_step_end(x->client, &dropped, &x->fresh);
    return step_result(x, rc, dropped, err, errlen);
}

/* --push-pull no: the gradients go out in one push after the step; the next
 * step pulls. */
static int ps_push_step_end(void *self, char *err, size_t errlen) {
    ps_ex *x = self;
    size_t dropped = 0;
    if (x->clip) clip_rest(x);
    int rc = ps_client_push_next(x->client, x->clock, &dropped);
    return step_result(x, rc, dropped, err, errlen);
}

/* Sync: the step this worker last pushed to, once closed. Async: the version
 * by which every worker's pushes for the epoch are in (`want`), waiting at
 * most 15 s for it (a dead or restarted worker or shard may never get there),
 * then the newest. */
static int ps_eval_sync(void *self, int newest, uint64_t clock, uint64_t want, char *err,
                        size_t errlen) {
    ps_ex *x = self;
    int rc;
    if (!newest && !x->async) {
        rc = ps_client_pull_next(x->client, 0, clock, NULL);
    } else {
        if (newest) want = 0;
        ps_client_set_timeout(x->client, 15000);
        rc = ps_client_pull(x->client, want, NULL);
        ps_client_set_timeout(x->client, x->cfg->timeout_ms);
        if (rc == PS_ETIMEDOUT) {
            PS_WARN("the shards did not reach version %llu in 15 s: evaluating the newest values",
                    (unsigned long long)want);
            rc = ps_client_pull(x->client, 0, NULL);
        }
    }
    if (rc != PS_OK) snprintf(err, errlen, "%s", ps_client_error(x->client));
    return rc;
}

/* Every worker reports its epoch's sums to shard 0; the chief then asks for
 * the totals, waiting until every live worker has reported (sync: they end the
 * epoch with the chief; at most the request timeout, capped at 5 s) or, async
 * (the others may be far from the epoch's end), at most 2 s; what is missing
 * is logged. psd failing here costs the figures, not the job. */
static int ps_reduce_metrics(void *self, ps_job_epoch *e, char *err, size_t errlen) {
    ps_ex *x = self;
    (void)err;
    (void)errlen;
    int rc = ps_client_report_metrics(x->client, e->epoch, &e->mine, NULL);
    if (rc != PS_OK) {
        PS_WARN("epoch %u: this worker's metrics did not reach psd 0: %s", e->epoch + 1,
                ps_client_error(x->client));
        return PS_OK;
    }
    if (x->cfg->index != 0) return PS_OK;
    int wait_ms = x->async ? 2000 : x->cfg->timeout_ms < 5000 ? x->cfg->timeout_ms : 5000;
    ps_epoch_metrics m;
    rc = ps_client_query_metrics(x->client, e->epoch, wait_ms, &m, e->each, e->workers);
    if (rc != PS_OK || m.reported == 0) {
        PS_WARN("epoch %u: no job-wide metrics from psd 0 (%s): this worker's own shown",
                e->epoch + 1, rc != PS_OK ? ps_client_error(x->client) : "no report kept");
        return PS_OK;
    }
    e->total = m.total;
    e->reported = m.reported;
    e->n_each = m.reported < e->workers ? m.reported : e->workers;
    if (m.reported < m.expected)
        PS_WARN("epoch %u: %u of %u live workers reported their metrics within %d ms: the "
                "job-wide loss and accuracy are over those %u",
                e->epoch + 1, m.reported, m.expected, wait_ms, m.reported);
    return PS_OK;
}

static int ps_live_workers(void *self, unsigned *ids, size_t cap, size_t *n, unsigned *min,
                           char *err, size_t errlen) {
    ps_ex *x = self;
    ps_stats st;
    int rc = ps_client_stats(x->client, 0, &st);
    if (rc != PS_OK) {
        snprintf(err, errlen, "the live workers from psd 0: %s", ps_client_error(x->client));
        return rc;
    }
    *n = st.n_live_set;
    *min = st.workers_min;
    for (size_t i = 0; i < st.n_live_set && i < cap; i++)
        ids[i] = st.live_set[i];
    ps_stats_free(&st);
    return PS_OK;
}

static void ps_finish(void *self) {
    ps_ex *x = self;
    if (ps_client_goodbye(x->client) != PS_OK)
        PS_WARN("goodbye: %s", ps_client_error(x->client)); /* the job is done anyway */
}

/* Loss scaling: an overflowing step's push still goes (a sync step waits for
 * every worker's), flagged skipped and with zeros in place of the gradients. */
static int step_end_checked(ps_ex *x, int bad, int *skipped, int (*end)(void *, char *, size_t),
                            char *err, size_t errlen) {
    if (bad) {
        memset(ps_model_grads(x->model), 0, ps_model_num_params(x->model) * sizeof(float));
        ps_client_set_push_skipped(x->client, 1);
    }
    int rc = end(x, err, errlen);
    ps_client_set_push_skipped(x->client, 0);
    *skipped = bad;
    return rc;
}

static int ps_pp_step_end_checked(void *self, int bad, int *skipped, char *err, size_t errlen) {
    return step_end_checked(self, bad, skipped, ps_pp_step_end, err, errlen);
}

static int ps_push_step_end_checked(void *self, int bad, int *skipped, char *err, size_t errlen) {
    return step_end_checked(self, bad, skipped, ps_push_step_end, err, errlen);
}

static void ps_free(void *self) {
    ps_ex *x = self;
    ps_client_close(x->client); /* and the table handles */
    free(x->tables);
    free(x->ranges);
    free(x->clipped);
    free(x);
}

static uint64_t ps_bytes_sent(void *self) {
    return ps_client_push_bytes(((ps_ex *)self)->client);
}

/* --compression topk: this worker's residuals, one per piece (the client's). */
static int ps_state(void *self, ps_wstate *s) {
    ps_ex *x = self;
    if (x->cfg->compression != PS_COMPRESSION_TOPK) return PS_OK;
    for (size_t i = 0; i < x->n_tensors; i++) {
        size_t n = 0;
        float *r = ps_client_topk_residual(x->client, i, &n);
        char name[64];
        snprintf(name, sizeof name, "topk_residual/%zu", i);
        if (!r || ps_wstate_add(s, name, r, n, NULL) != PS_OK) return PS_ENOMEM;
    }
    return PS_OK;
}

static const ps_exchange_ops push_pull_ops = {
    .rows_pull = ps_rows_pull,
    .rows_push = ps_rows_push,
    .bytes_sent = ps_bytes_sent,
    .state = ps_state,
    .reduce_metrics = ps_reduce_metrics,
    .live_workers = ps_live_workers,
    .name = "psd (push-pull)",
    .join = ps_join,
    .step_begin = ps_pp_step_begin,
    .grads_ready = ps_pp_grads_ready,
    .step_end = ps_pp_step_end,
    .step_end_checked = ps_pp_step_end_checked,
    .eval_sync = ps_eval_sync,
    .finish = ps_finish,
    .free = ps_free,
};

static const ps_exchange_ops separate_ops = {
    .rows_pull = ps_rows_pull,
    .rows_push = ps_rows_push,
    .bytes_sent = ps_bytes_sent,
    .state = ps_state,
    .reduce_metrics = ps_reduce_metrics,
    .live_workers = ps_live_workers,
    .name = "psd (pull, push)",
    .join = ps_join,
    .step_begin = ps_step_begin,
    .step_end = ps_push_step_end,
    .step_end_checked = ps_push_step_end_checked,
    .eval_sync = ps_eval_sync,
    .finish = ps_finish,
    .free = ps_free,
};

/* The client: CurveZMQ if asked, timeouts, the job id, the variables. */
static int open_client(const ps_train_config *cfg, ps_model *m, ps_client **out,
                       size_t *n_tensors, char *err, size_t errlen) {
    int rc = ps_client_open(out, cfg->ps, cfg->n_ps, cfg->index, cfg->workers, err, errlen);
    if (rc != PS_OK) return rc;
    ps_client *c = *out;
    if (cfg->curve_secret || cfg->server_key) {
        if (!cfg->curve_secret || !cfg->server_key) {
            snprintf(err, errlen, "--curve-secret and --server-key go together");
            return PS_EINVAL;
        }
        /* PS_EINVAL (unreadable) or PS_EFORMAT (malformed): psworker exits 2 */
        rc = ps_client_set_curve(c, cfg->curve_secret, cfg->server_key, err, errlen);
        if (rc != PS_OK) return rc;
        PS_INFO("CurveZMQ on: key pair %s, server key %s", cfg->curve_secret, cfg->server_key);
    }
    ps_client_set_timeout(c, cfg->timeout_ms);
    if (cfg->retry_ms > 0) ps_client_set_retry(c, cfg->retry_ms);
    /* PS_COMPRESSION_* are ps_compression's numbers (half.h) */
    if (ps_client_set_compression(c, (ps_compression)cfg->compression, cfg->topk_ratio) != PS_OK) {
        snprintf(err, errlen, "--compression: %s", ps_client_error(c));
        return PS_EINVAL;
    }
    if (cfg->compression != PS_COMPRESSION_NONE)
        PS_INFO("pushes encode the gradients as %s", ps_compression_name(cfg->compression));
    if (ps_client_set_job(c, cfg->job_id) != PS_OK) {
        snprintf(err, errlen, "%s", ps_client_error(c));
        return PS_EINVAL;
    }
    /* local SGD: the workers push deltas, which psd subtracts (sync: their mean) */
    ps_opt_spec delta = ps_localsgd_delta_opt();
    return register_vars(m, c, (unsigned)cfg->n_ps, cfg->sync_every > 1 ? &delta : NULL,
                         n_tensors, err, errlen);
}

int ps_exchange_ps_open(const ps_train_config *cfg, ps_model *m, ps_exchange *out, char *err,
                        size_t errlen) {
    *out = (ps_exchange){0};
    ps_ex *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    *x = (ps_ex){.cfg = cfg, .model = m};
    int rc = PS_OK;
    x->n_tables = ps_model_num_embeddings(m);
    if (x->n_tables) {
        rc = ps_emb_row_opt(m, &x->row_opt, err, errlen);
        if (rc == PS_OK && !(x->tables = calloc(x->n_tables, sizeof *x->tables))) {
            snprintf(err, errlen, "out of memory");
            rc = PS_ENOMEM;
        }
    }
    if (rc == PS_OK) rc = clip_open(x, err, errlen);
    if (rc == PS_OK) rc = open_client(cfg, m, &x->client, &x->n_tensors, err, errlen);
    if (rc != PS_OK) {
        ps_free(x);
        return rc;
    }
    *out = (ps_exchange){.ops = cfg->separate_pull ? &separate_ops : &push_pull_ops, .self = x};
    return PS_OK;
}
