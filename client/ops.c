/* libps operations: hello, job and shard checks, create, pull, push, goodbye; each one
 * request round over conn.c's engine. */
#include "client_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "optim_spec_proto.h"

int ps__expect_body(ps_client *c, size_t shard, const Ps__Header *h, Ps__Header__BodyCase want,
                    const char *what) {
    if (h->body_case == want) return PS_OK;
    return ps__fail(c, PS_EPROTO, "%s: psd %zu answered with body %d", what, shard,
                    (int)h->body_case);
}

typedef struct {
    int async;
    uint64_t version;
    int have_mode;
    unsigned heartbeat_ms;
    uint64_t worker_clock;
} hello_ctx;

static int on_welcome(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    hello_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_WELCOME, "hello");
    if (rc != PS_OK) return rc;
    const Ps__Welcome *w = h->welcome;
    if (w->shard_index != shard || w->num_shards != c->n_shards)
        return ps__fail(
            c, PS_EINVAL, "psd at %s is shard %u of %u, but this worker lists it as %zu of %zu",
            c->shards[shard].endpoint + 6, w->shard_index, w->num_shards, shard, c->n_shards);
    int async = w->mode == PS__MODE__MODE_ASYNC;
    if (ctx->have_mode && async != ctx->async)
        return ps__fail(c, PS_EINVAL, "shards disagree on the mode (sync/async)");
    ctx->async = async;
    ctx->have_mode = 1;
    if (w->version < ctx->version) ctx->version = w->version;
    if (w->heartbeat_ms && (!ctx->heartbeat_ms || w->heartbeat_ms < ctx->heartbeat_ms))
        ctx->heartbeat_ms = w->heartbeat_ms;
    if (w->worker_clock > ctx->worker_clock) ctx->worker_clock = w->worker_clock;
    if (w->num_workers != c->num_workers)
        return ps__fail(c, PS_EPROTO, "psd %zu (%s) says the job has %u workers, this worker %u",
                        shard, c->shards[shard].endpoint + 6, w->num_workers, c->num_workers);
    shard_conn *s = &c->shards[shard];
    s->incarnation = w->incarnation;
    s->version = w->version;
    s->welcome_clock = w->worker_clock;
    s->pushed = 0;
    s->welcome_vars = w->num_vars;
    snprintf(s->job_id, sizeof s->job_id, "%s", w->job_id ? w->job_id : "");
    return PS_OK;
}

static int send_hello(ps_client *c, size_t i, void *ctx) {
    (void)ctx;
    Ps__Header h = PS__HEADER__INIT;
    Ps__Hello hello = PS__HELLO__INIT;
    hello.worker_index = c->worker_index;
    hello.num_workers = c->num_workers;
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    return ps__send_request(c, i, &h, NULL, 0);
}

int ps_client_hello(ps_client *c, int *async, uint64_t *version) {
    hello_ctx ctx = {0, UINT64_MAX, 0, 0, 0};
    op_spec op = {"hello", send_hello, on_welcome, 0, 0, &ctx};
    if (c->step_open) return ps__fail(c, PS_EINVAL, "hello during a step exchange");
    int rc = ps__round_trip(c, &op, 1);
    if (rc != PS_OK) return rc;
    if (async) *async = ctx.async;
    if (version) *version = ctx.version;
    if (!c->heartbeat && ctx.heartbeat_ms) {
        const char **eps = calloc(c->n_shards, sizeof *eps);
        if (!eps) return ps__fail(c, PS_ENOMEM, "out of memory");
        for (size_t i = 0; i < c->n_shards; i++)
            eps[i] = c->shards[i].endpoint;
        rc = ps_heartbeat_start(eps, c->n_shards, c->worker_index, ctx.heartbeat_ms,
                                c->have_curve ? &c->curve : NULL, &c->heartbeat);
        free(eps);
        if (rc != PS_OK) return ps__fail(c, rc, "cannot start the heartbeat thread");
    }
    for (size_t i = 0; i < c->n_shards; i++)
        c->shards[i].worker_clock = ctx.worker_clock;
    c->said_hello = 1;
    c->async = ctx.async;
    return PS_OK;
}

int ps_client_set_job(ps_client *c, const char *job_id) {
    if (job_id && *job_id && !ps_job_id_valid(job_id))
        return ps__fail(c, PS_EINVAL, "job id '%.80s': want 1..%u of A-Z a-z 0-9 . _ -", job_id,
                        PS_WIRE_MAX_JOB_ID);
    snprintf(c->job_id, sizeof c->job_id, "%s", job_id ? job_id : "");
    return PS_OK;
}

int ps_client_check_shards(ps_client *c, unsigned *lost_shards, size_t cap, size_t *n_lost) {
    if (n_lost) *n_lost = 0;
    if (ps__need_hello(c, "check_shards") != PS_OK) return PS_EINVAL;
    size_t holding = 0, n = 0;
    for (size_t i = 0; i < c->n_shards; i++) {
        const shard_conn *s = &c->shards[i];
        if (!s->welcome_vars) continue;
        /* "" on either side: a shard or client from before job ids, or a client naming none */
        if (c->job_id[0] && s->job_id[0] && strcmp(c->job_id, s->job_id) != 0)
            return ps__fail(c, PS_EEXIST,
                            "psd %zu (%s) holds the variables of job '%s', this is job '%s': "
                            "give the job's own --job-id, or fresh shards",
                            i, ps__shard_addr(s), s->job_id, c->job_id);
        holding++;
    }
    char names[256] = "";
    size_t used = 0;
    for (size_t i = 0; holding && i < c->n_shards; i++) {
        const shard_conn *s = &c->shards[i];
        if (s->welcome_vars || s->n_tensors == 0) continue; /* holds some, or should hold none */
        if (n < cap && lost_shards) lost_shards[n] = (unsigned)i;
        n++;
        if (used < sizeof names - 64)
            used += (size_t)snprintf(names + used, sizeof names - used, "%spsd %zu (%s)",
                                     used ? ", " : "", i, ps__shard_addr(s));
    }
    if (n_lost) *n_lost = n;
    if (n == 0) return PS_OK;
    return ps__fail(c, PS_ELOST,
                    "%s lost the job's variables: %s none while %zu other shard%s hold%s theirs "
                    "(restarted without a checkpoint to restore)",
                    names, n == 1 ? "it holds" : "they hold", holding, holding == 1 ? "" : "s",
                    holding == 1 ? "s" : "");
}

uint64_t ps_client_worker_clock(const ps_client *c) {
    return c->n_shards ? c->shards[0].worker_clock : 0;
}

int ps_client_check_progress(ps_client *c, int async, uint64_t total_steps) {
    if (ps__need_hello(c, "check_progress") != PS_OK) return PS_EINVAL;
    /* sync: a step closes only with a push, and each worker makes total_steps of them
     * (more than total_steps closed steps is possible: backup workers, or a laggard
     * closing steps alone after the others finished; more than this bound is not) */
    uint64_t w = c->num_workers ? c->num_workers : 1;
    uint64_t sync_max = total_steps > UINT64_MAX / w ? UINT64_MAX : total_steps * w;
    for (size_t i = 0; i < c->n_shards; i++) {
        const shard_conn *s = &c->shards[i];
        if (!async && s->version > sync_max)
            return ps__fail(
                c, PS_EPROTO,
                "psd %zu (%s) is at version %llu, but a sync job of this size closes at "
                "most %llu steps (%llu workers x epochs x steps per epoch): a shard of "
                "another job, or workers started with other --epochs/--max-steps?",
                i, s->endpoint + 6, (unsigned long long)s->version, (unsigned long long)sync_max,
                (unsigned long long)w);
        if (async && s->welcome_clock > total_steps)
            return ps__fail(c, PS_EPROTO,
                            "psd %zu (%s) says this worker has made %llu pushes, but the job has "
                            "only %llu steps per worker (epochs x steps per epoch): a shard of "
                            "another job, or a worker started with other --epochs/--max-steps?",
                            i, s->endpoint + 6, (unsigned long long)s->welcome_clock,
                            (unsigned long long)total_steps);
    }
    return PS_OK;
}

static int on_created(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_CREATE_VARS_REPLY, "create");
    if (rc != PS_OK) return rc;
    size_t *created = vctx;
    for (size_t i = 0; i < h->create_vars_reply->n_created; i++)
        *created += h->create_vars_reply->created[i] != 0;
    c->shards[shard].had_vars = 1;
    return PS_OK;
}

/* Builds metas (+ payloads from param or grad) for shard i's tensors. */
typedef struct {
    Ps__TensorMeta *metas;
    Ps__TensorMeta **ptrs;
    uint64_t *shapes;
    ps_payload *pl;
    ps_opt_proto *opts;
    Ps__Optimizer **optptrs;
} frame_set;

static void frame_set_free(frame_set *fs) {
    free(fs->metas);
    free(fs->ptrs);
    free(fs->shapes);
    free(fs->pl);
    free(fs->opts);
    free(fs->optptrs);
}

static int frame_set_build(ps_client *c, size_t i, int use_grad, frame_set *fs) {
    size_t n = c->shards[i].n_tensors, m = n ? n : 1;
    fs->metas = calloc(m, sizeof *fs->metas);
    fs->ptrs = calloc(m, sizeof *fs->ptrs);
    fs->shapes = calloc(m * 2, sizeof *fs->shapes);
    fs->pl = calloc(m, sizeof *fs->pl);
    fs->opts = calloc(m, sizeof *fs->opts);
    fs->optptrs = calloc(m, sizeof *fs->optptrs);
    if (!fs->metas || !fs->ptrs || !fs->shapes || !fs->pl || !fs->opts || !fs->optptrs)
        return ps__fail(c, PS_ENOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        const ps_client_tensor *t = &c->tensors[c->shards[i].tensors[k]];
        ps_tensor_meta_f32(&fs->metas[k], t->name, t->shape, t->rank, fs->shapes + 2 * k);
        fs->ptrs[k] = &fs->metas[k];
        /* zero-copy: the frame is the caller's buffer, which stays unchanged until the reply
         * (or, with compression, the client's encoding of it) */
        if (use_grad) {
            int rc = ps__grad_payload(c, c->shards[i].tensors[k], &fs->metas[k], &fs->pl[k]);
            if (rc != PS_OK) return rc;
        } else {
            fs->pl[k] = (ps_payload){t->param, ps__tensor_numel(t) * sizeof(float), NULL, NULL};
        }
        ps_opt_spec_to_proto(&t->opt, &fs->opts[k]);
        fs->optptrs[k] = &fs->opts[k].msg;
    }
    return PS_OK;
}

static int send_create(ps_client *c, size_t i, void *ctx) {
    (void)ctx;
    frame_set fs = {0};
    int rc = frame_set_build(c, i, 0, &fs);
    if (rc == PS_OK) {
        Ps__Header h = PS__HEADER__INIT;
        Ps__CreateVars cv = PS__CREATE_VARS__INIT;
        cv.vars = fs.ptrs;
        cv.n_vars = c->shards[i].n_tensors;
        cv.optimizers = fs.optptrs;
        cv.n_optimizers = cv.n_vars;
        if (c->job_id[0]) cv.job_id = c->job_id;
        h.body_case = PS__HEADER__BODY_CREATE_VARS;
        h.create_vars = &cv;
        /* ZeroMQ copies nothing: the frames point at the params, unchanged until the reply */
        rc = ps__send_request(c, i, &h, fs.pl, cv.n_vars);
    }
    frame_set_free(&fs);
    return rc;
}

int ps_client_create_vars(ps_client *c, size_t *created) {
    size_t count = 0;
    if (created) *created = 0;
    if (c->step_open) return ps__fail(c, PS_EINVAL, "create during a step exchange");
    op_spec op = {"create", send_create, on_created, 0, 0, &count};
    int rc = ps__round_trip(c, &op, 0);
    if (created) *created = count;
    return rc;
}

typedef struct {
    uint64_t version;
    uint64_t min_version; /* explicit pulls */
    int next;             /* ps_client_pull_next: per-shard versions, worker clock */
    int async;
    uint64_t clock;
} pull_ctx;

/* Copies a reply's values into the shard's param buffers and records its version. */
int ps__take_values(ps_client *c, size_t shard, const Ps__PullReply *p, ps_frames *f,
                    const char *what) {
    shard_conn *s = &c->shards[shard];
    char err[256];
    if (!p) return ps__fail(c, PS_EPROTO, "%s: psd %zu sent no values", what, shard);
    int rc = ps_tensors_check(p->tensors, p->n_tensors, f->frames + 1, f->n - 1, err, sizeof err);
    if (rc != PS_OK) return ps__fail(c, rc, "%s: bad reply from psd %zu: %s", what, shard, err);
    if (p->n_tensors != s->n_tensors)
        return ps__fail(c, PS_EPROTO, "%s: psd %zu sent %zu tensors, asked %zu", what, shard,
                        p->n_tensors, s->n_tensors);
    for (size_t k = 0; k < s->n_tensors; k++) {
        const ps_client_tensor *t = &c->tensors[s->tensors[k]];
        size_t bytes = ps__tensor_numel(t) * sizeof(float);
        if (strcmp(p->tensors[k]->name, t->name) != 0 || zmq_msg_size(&f->frames[k + 1]) != bytes)
            return ps__fail(c, PS_ESHAPE,
                            "%s: psd %zu sent '%s' where '%s' [%zu bytes] was expected", what,
                            shard, p->tensors[k]->name, t->name, bytes);
        /* the one copy on the pull path: from the received frame into place */
        memcpy(t->param, zmq_msg_data(&f->frames[k + 1]), bytes);
    }
    s->version = p->version;
    s->pushed = 0;
    s->had_vars = 1;
    return PS_OK;
}

static int on_pulled(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    pull_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_PULL_REPLY, "pull");
    if (rc == PS_OK) rc = ps__take_values(c, shard, h->pull_reply, f, "pull");
    if (rc == PS_OK && h->pull_reply->version < ctx->version) ctx->version = h->pull_reply->version;
    return rc;
}

static int send_pull(ps_client *c, size_t i, void *vctx) {
    pull_ctx *ctx = vctx;
    shard_conn *s = &c->shards[i];
    char **names = calloc(s->n_tensors ? s->n_tensors : 1, sizeof *names);
    if (!names) return ps__fail(c, PS_ENOMEM, "out of memory");
    for (size_t k = 0; k < s->n_tensors; k++)
        names[k] = c->tensors[s->tensors[k]].name;
    Ps__Header h = PS__HEADER__INIT;
    Ps__Pull pull = PS__PULL__INIT;
    pull.names = names;
    pull.n_names = s->n_tensors;
    pull.min_version = ctx->min_version;
    if (ctx->next) {
        /* sync: the step this worker contributed to, once it closed; async: any */
        pull.min_version = ctx->async ? 0 : s->version + (s->pushed ? 1u : 0u);
        pull.has_worker = 1;
        pull.worker_index = c->worker_index;
        pull.clock = ctx->clock;
    }
    h.body_case = PS__HEADER__BODY_PULL;
    h.pull = &pull;
    int rc = ps__send_request(c, i, &h, NULL, 0);
    free(names);
    return rc;
}

int ps_client_pull(ps_client *c, uint64_t min_version, uint64_t *version) {
    pull_ctx ctx = {UINT64_MAX, min_version, 0, 0, 0};
    if (ps__need_hello(c, "pull") != PS_OK || c->step_open)
        return c->step_open ? ps__fail(c, PS_EINVAL, "pull during a step exchange") : PS_EINVAL;
    op_spec op = {"pull", send_pull, on_pulled, 0, 0, &ctx};
    int rc = ps__round_trip(c, &op, 0);
    if (rc == PS_OK && version) *version = ctx.version;
    return rc;
}

int ps_client_pull_next(ps_client *c, int async, uint64_t clock, uint64_t *version) {
    pull_ctx ctx = {UINT64_MAX, 0, 1, async, clock};
    if (ps__need_hello(c, "pull") != PS_OK || c->step_open)
        return c->step_open ? ps__fail(c, PS_EINVAL, "pull during a step exchange") : PS_EINVAL;
    op_spec op = {"pull", send_pull, on_pulled, 0, 0, &ctx};
    int rc = ps__round_trip(c, &op, 0);
    if (rc == PS_OK && version) *version = ctx.version;
    return rc;
}

typedef struct {
    int applied, dropped;
    int per_shard_step; /* tag each shard with the version pulled from it */
    uint64_t step, clock;
} push_ctx;

static int on_pushed(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    push_ctx *ctx = vctx;
    int rc = ps__expect_body(c, shard, h, PS__HEADER__BODY_PUSH_REPLY, "push");
    if (rc != PS_OK) return rc;
    if (!h->push_reply->applied) ctx->applied = 0;
    if (h->push_reply->dropped) ctx->dropped++;
    c->shards[shard].pushed = 1;
    return PS_OK;
}

/* Sends shard i's gradients as a Push, or (with_pull) a PushPull. */
int ps__send_grads(ps_client *c, size_t i, uint64_t step, uint64_t clock, int with_pull) {
    frame_set fs = {0};
    int rc = frame_set_build(c, i, 1, &fs);
    if (rc == PS_OK) {
        Ps__Header h = PS__HEADER__INIT;
        Ps__Push push = PS__PUSH__INIT;
        Ps__PushPull pp = PS__PUSH_PULL__INIT;
        push.grads = fs.ptrs;
        push.n_grads = c->shards[i].n_tensors;
        push.step = step;
        push.clock = clock;
        push.worker_index = c->worker_index;
        push.skipped = c->push_skipped != 0;
        push.session = c->push_session;
        push.seq = c->push_gen;
        if (with_pull) {
            pp.push = &push;
            h.body_case = PS__HEADER__BODY_PUSH_PULL;
            h.push_pull = &pp;
        } else {
            h.body_case = PS__HEADER__BODY_PUSH;
            h.push = &push;
        }
        rc = ps__send_request(c, i, &h, fs.pl, push.n_grads);
    }
    frame_set_free(&fs);
    return rc;
}

static int send_push(ps_client *c, size_t i, void *vctx) {
    push_ctx *ctx = vctx;
    return ps__send_grads(c, i, ctx->per_shard_step ? c->shards[i].version : ctx->step, ctx->clock,
                          0);
}

void ps_client_set_push_skipped(ps_client *c, int skipped) {
    c->push_skipped = skipped != 0;
}

int ps_client_push(ps_client *c, uint64_t step, int *applied_all) {
    push_ctx ctx = {1, 0, 0, step, 0};
    if (ps__need_hello(c, "push") != PS_OK || c->step_open)
        return c->step_open ? ps__fail(c, PS_EINVAL, "push during a step exchange") : PS_EINVAL;
    c->push_gen++; /* a new round: gradients are encoded afresh */
    op_spec op = {"push", send_push, on_pushed, 1, 1, &ctx};
    int rc = ps__round_trip(c, &op, 0);
    if (applied_all) *applied_all = ctx.applied;
    return rc;
}

int ps_client_push_next(ps_client *c, uint64_t clock, size_t *dropped) {
    push_ctx ctx = {1, 0, 1, 0, clock};
    if (ps__need_hello(c, "push") != PS_OK || c->step_open)
        return c->step_open ? ps__fail(c, PS_EINVAL, "push during a step exchange") : PS_EINVAL;
    c->push_gen++; /* a new round: gradients are encoded afresh */
    op_spec op = {"push", send_push, on_pushed, 1, 1, &ctx};
    int rc = ps__round_trip(c, &op, 0);
    if (dropped) *dropped = (size_t)ctx.dropped;
    return rc;
}

typedef struct {
    Ps__Header *req;
} goodbye_ctx;

static int send_goodbye(ps_client *c, size_t i, void *vctx) {
    goodbye_ctx *ctx = vctx;
    return ps__send_request(c, i, ctx->req, NULL, 0);
}

static int on_goodbye(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    (void)vctx;
    return ps__expect_body(c, shard, h, PS__HEADER__BODY_GOODBYE_REPLY, "goodbye");
}

int ps_client_goodbye(ps_client *c) {
    if (c->step_open) return ps__fail(c, PS_EINVAL, "goodbye during a step exchange");
    ps_heartbeat_stop(c->heartbeat);
    c->heartbeat = NULL;
    Ps__Header h = PS__HEADER__INIT;
    Ps__Goodbye bye = PS__GOODBYE__INIT;
    bye.worker_index = c->worker_index;
    h.body_case = PS__HEADER__BODY_GOODBYE;
    h.goodbye = &bye;
    goodbye_ctx ctx = {&h};
    op_spec op = {"goodbye", send_goodbye, on_goodbye, 0, 0, &ctx, 0, NULL};
    return ps__round_trip(c, &op, 1);
}
