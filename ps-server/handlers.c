/* Request handlers: Hello, CreateVars, Pull (deferred until its version
 * exists, or until the bounded-staleness gate opens), Push (sync: average
 * then apply once per step; async: apply on arrival), Heartbeat, Goodbye,
 * Checkpoint, Stats, Shutdown. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "optim_spec_proto.h"
#include "ps_error.h"
#include "replica.h"
#include "server.h"

/* Index of the first NaN or Inf of x[0..n), or n. */
static size_t first_non_finite(const float *x, size_t n) {
    size_t k = 0;
    while (k < n && isfinite(x[k]))
        k++;
    return k;
}

int ps__handle_hello(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__Hello *h = r->hdr->hello;
    if (h->num_workers != (uint32_t)s->cfg.workers) {
        snprintf(err, errlen, "this psd serves a job of %ld workers, the client says %u",
                 s->cfg.workers, h->num_workers);
        return PS_EINVAL;
    }
    if (h->worker_index >= (uint32_t)s->cfg.workers) {
        snprintf(err, errlen, "worker index %u out of range (job has %ld workers)", h->worker_index,
                 s->cfg.workers);
        return PS_EINVAL;
    }
    int serving = ps__repl_serving(s); /* a backup only says who it is */
    if (serving) PS_INFO("hello from worker %u", h->worker_index);
    /* a disconnect already reported for this socket number is an older connection's */
    if (serving) ps__monitor_drain(s);
    if (serving && ps_shard_hello(&s->shard, h->worker_index, r->fd)) {
        PS_INFO("worker %u %s (%u live)", h->worker_index,
                s->cfg.workers_min ? "joined" : "rejoined", s->shard.members.live);
        ps__log_quorum(s);
    }
    Ps__Header out = PS__HEADER__INIT;
    Ps__Welcome w = PS__WELCOME__INIT;
    w.shard_index = (uint32_t)s->cfg.shard;
    w.num_shards = (uint32_t)s->cfg.num_shards;
    w.mode = s->cfg.mode == PS_MODE_ASYNC ? PS__MODE__MODE_ASYNC : PS__MODE__MODE_SYNC;
    w.version = s->shard.step.version;
    w.num_workers = (uint32_t)s->cfg.workers;
    w.num_vars = (uint32_t)s->shard.store.n;
    long hb = s->cfg.worker_timeout_ms / 4;
    w.heartbeat_ms = (uint32_t)(hb < 50 ? 50 : hb);
    w.incarnation = s->incarnation;
    w.worker_clock = s->shard.members.m[h->worker_index].clock;
    w.job_id = s->shard.job_id;
    ps__repl_welcome(s, &w);
    out.body_case = PS__HEADER__BODY_WELCOME;
    out.welcome = &w;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    return PS_OK;
}

int ps__handle_create_vars(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__CreateVars *cv = r->hdr->create_vars;
    int rc = ps_tensors_check(cv->vars, cv->n_vars, r->payloads, r->n_payloads, err, errlen);
    if (rc != PS_OK) return rc;
    const char *job = cv->job_id ? cv->job_id : "";
    rc = ps_shard_check_job(&s->shard, job, err, errlen);
    if (rc != PS_OK) return rc;
    if (cv->n_optimizers != cv->n_vars) {
        snprintf(err, errlen, "%zu variables but %zu optimizers", cv->n_vars, cv->n_optimizers);
        return PS_EPROTO;
    }
    /* Validate everything before creating anything: the request is all or nothing. */
    size_t new_vars = 0;
    uint64_t max_bytes = (uint64_t)s->cfg.max_tensor_mb << 20;
    for (size_t i = 0; i < cv->n_vars; i++) {
        const Ps__TensorMeta *m = cv->vars[i];
        if (m->nbytes > max_bytes) {
            snprintf(err, errlen, "variable '%s' has %llu bytes, more than --max-tensor-mb %ld",
                     m->name, (unsigned long long)m->nbytes, s->cfg.max_tensor_mb);
            return PS_EINVAL;
        }
        new_vars += ps_store_find(&s->shard.store, m->name) == NULL;
        ps_opt_spec opt = ps_opt_spec_from_proto(cv->optimizers[i]);
        char why[200];
        if (ps_opt_spec_validate(&opt, why, sizeof why) != PS_OK) {
            snprintf(err, errlen, "variable '%s': %s", m->name, why);
            return PS_EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(cv->vars[j]->name, m->name) == 0) {
                snprintf(err, errlen, "variable '%s' listed twice", m->name);
                return PS_EINVAL;
            }
        }
        const ps_var *v = ps_store_find(&s->shard.store, m->name);
        if (v && !ps_var_same_shape(v, m->n_shape, m->shape)) {
            snprintf(err, errlen, "variable '%s' exists with a different shape", m->name);
            return PS_EEXIST;
        }
        if (v && !ps_opt_spec_same(&v->opt, &opt)) {
            char have[400], want[400];
            snprintf(err, errlen, "variable '%s' exists with optimizer %s, the request says %s",
                     m->name, ps_opt_spec_describe(&v->opt, have, sizeof have),
                     ps_opt_spec_describe(&opt, want, sizeof want));
            return PS_EEXIST;
        }
        if (!v) {
            const float *init = ps_frame_floats(&r->payloads[i], &s->scratch, &s->scratch_cap);
            if (!init) return PS_ENOMEM;
            size_t k = first_non_finite(init, ps_tensor_numel(m));
            if (k < ps_tensor_numel(m)) {
                snprintf(err, errlen, "variable '%s': initial value %zu is %s", m->name, k,
                         isnan(init[k]) ? "NaN" : "infinite");
                return PS_EINVAL;
            }
        }
    }
    if (s->shard.store.n + new_vars > (size_t)s->cfg.max_vars) {
        snprintf(err, errlen, "creating %zu variables would make %zu, more than --max-vars %ld",
                 new_vars, s->shard.store.n + new_vars, s->cfg.max_vars);
        return PS_EINVAL;
    }
    protobuf_c_boolean *created = calloc(cv->n_vars ? cv->n_vars : 1, sizeof *created);
    if (!created) return PS_ENOMEM;
    for (size_t i = 0; i < cv->n_vars && rc == PS_OK; i++) {
        const Ps__TensorMeta *m = cv->vars[i];
        if (ps_store_find(&s->shard.store, m->name)) continue; /* same name and shape: keep it */
        const float *init = ps_frame_floats(&r->payloads[i], &s->scratch, &s->scratch_cap);
        ps_opt_spec opt = ps_opt_spec_from_proto(cv->optimizers[i]);
        ps_var *v;
        rc = init ? ps_shard_create_var(&s->shard, m->name, m->n_shape, m->shape, init, &opt, &v)
                  : PS_ENOMEM;
        if (rc == PS_OK) {
            created[i] = 1;
            char d[400];
            PS_INFO("created %s [%zu floats] with %s", v->name, v->numel,
                    ps_opt_spec_describe(&opt, d, sizeof d));
        }
    }
    if (rc == PS_OK && job[0] && !s->shard.job_id[0]) {
        ps_shard_claim_job(&s->shard, job);
        PS_INFO("the variables belong to job %s", s->shard.job_id);
    }
    if (rc == PS_OK) {
        Ps__Header out = PS__HEADER__INIT;
        Ps__CreateVarsReply rep = PS__CREATE_VARS_REPLY__INIT;
        rep.created = created;
        rep.n_created = cv->n_vars;
        rep.version = s->shard.step.version;
        out.body_case = PS__HEADER__BODY_CREATE_VARS_REPLY;
        out.create_vars_reply = &rep;
        ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    } else {
        snprintf(err, errlen, "out of memory creating variables");
    }
    free(created);
    return rc;
}

/* The variables a Pull or a PushPull wants back. */
static size_t want_count(const Ps__Header *req) {
    return req->body_case == PS__HEADER__BODY_PULL ? req->pull->n_names
                                                   : req->push_pull->push->n_grads;
}

static const char *want_name(const Ps__Header *req, size_t i) {
    return req->body_case == PS__HEADER__BODY_PULL ? req->pull->names[i]
                                                   : req->push_pull->push->grads[i]->name;
}

/* Replies to a Pull (push_pull 0) or PushPull for vars[0..n) whose version exists.
 * The frames are the variables' own value blocks (zero-copy, with a reference each:
 * an update meanwhile writes a copy, see ps_var_writable). */
static int reply_values(ps_server *s, const void *identity, size_t identity_len,
                        uint64_t request_id, int push_pull, ps_var *const *vars, size_t n,
                        int applied, int dropped) {
    Ps__TensorMeta *metas = calloc(n ? n : 1, sizeof *metas);
    Ps__TensorMeta **mptrs = calloc(n ? n : 1, sizeof *mptrs);
    uint64_t *shapes = calloc(n ? n * PS_WIRE_MAX_RANK : 1, sizeof *shapes);
    ps_payload *pl = calloc(n ? n : 1, sizeof *pl);
    int rc = (metas && mptrs && shapes && pl) ? PS_OK : PS_ENOMEM;
    for (size_t i = 0; i < n && rc == PS_OK; i++) {
        const ps_var *v = vars[i];
        size_t shape[PS_WIRE_MAX_RANK];
        for (size_t d = 0; d < v->rank; d++)
            shape[d] = (size_t)v->shape[d];
        ps_tensor_meta_f32(&metas[i], v->name, shape, v->rank, shapes + i * PS_WIRE_MAX_RANK);
        mptrs[i] = &metas[i];
        pl[i] = (ps_payload){ps_var_share(v), v->numel * sizeof(float), ps_var_unshare, NULL};
    }
    if (rc == PS_OK) {
        Ps__Header out = PS__HEADER__INIT;
        Ps__PullReply rep = PS__PULL_REPLY__INIT;
        Ps__PushReply prep = PS__PUSH_REPLY__INIT;
        Ps__PushPullReply pprep = PS__PUSH_PULL_REPLY__INIT;
        rep.tensors = mptrs;
        rep.n_tensors = n;
        rep.version = s->shard.step.version;
        if (!push_pull) {
            out.body_case = PS__HEADER__BODY_PULL_REPLY;
            out.pull_reply = &rep;
        } else {
            prep.version = s->shard.step.version;
            prep.applied = applied;
            prep.dropped = dropped;
            pprep.push = &prep;
            pprep.pull = &rep;
            out.body_case = PS__HEADER__BODY_PUSH_PULL_REPLY;
            out.push_pull_reply = &pprep;
        }
        ps__server_reply(s, identity, identity_len, request_id, &out, pl, n);
    }
    free(metas);
    free(mptrs);
    free(shapes);
    free(pl);
    return rc;
}

/* Answers r (a Pull or PushPull) with the values now when min_version exists
 * and the staleness gate is open, else the shard keeps it waiting (with the
 * variables it names, not the request) until a step or push makes it so. */
static int answer_or_defer(ps_server *s, ps_request *r, uint64_t min_version, int has_worker,
                           uint64_t clock, int applied, int dropped, char *err, size_t errlen) {
    size_t n = want_count(r->hdr);
    ps_var **vars = malloc((n ? n : 1) * sizeof *vars);
    if (!vars) {
        snprintf(err, errlen, "out of memory answering a pull");
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        vars[i] = ps_store_find(&s->shard.store, want_name(r->hdr, i));
    int push_pull = r->hdr->body_case == PS__HEADER__BODY_PUSH_PULL;
    ps_shard_pull_req p = {
        .request_id = r->hdr->request_id,
        .min_version = min_version,
        .clock = clock,
        .has_worker = has_worker,
        .push_pull = push_pull,
        .applied = applied,
        .dropped = dropped,
        .worker = push_pull ? r->hdr->push_pull->push->worker_index : r->hdr->pull->worker_index,
    };
    ps__monitor_drain(s); /* a disconnect reported for this socket must not hit this pull */
    int rc =
        ps_shard_pull(&s->shard, r->identity, r->identity_len, r->fd, &p, vars, n, err, errlen);
    if (rc == 1)
        rc = reply_values(s, r->identity, r->identity_len, r->hdr->request_id, push_pull, vars, n,
                          applied, dropped);
    free(vars);
    return rc > 0 ? PS_OK : rc;
}

int ps__handle_pull(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__Pull *p = r->hdr->pull;
    if (p->n_names == 0 || p->n_names > PS_WIRE_MAX_FRAMES) {
        snprintf(err, errlen, "pull of %zu names (allowed 1..%u)", p->n_names, PS_WIRE_MAX_FRAMES);
        return PS_EPROTO;
    }
    if (p->has_worker) {
        int rc = ps_shard_check_worker(&s->shard, p->worker_index, err, errlen);
        if (rc != PS_OK) return rc;
        ps_shard_seen(&s->shard, p->worker_index);
    }
    for (size_t i = 0; i < p->n_names; i++) {
        if (!ps_store_find(&s->shard.store, p->names[i])) {
            snprintf(err, errlen, "no variable named '%.200s' on shard %ld", p->names[i],
                     s->cfg.shard);
            return PS_ENOENT;
        }
    }
    return answer_or_defer(s, r, p->min_version, p->has_worker, p->clock, 0, 0, err, errlen);
}

void ps__pending_answer(void *server, ps_pending_pull *p) {
    ps_server *s = server;
    const void *id = p->peer->identity;
    size_t id_len = p->peer->identity_len;
    int rc = p->table ? ps__reply_rows(s, id, id_len, p->request_id, p->table, p->ids, p->n_ids)
                      : reply_values(s, id, id_len, p->request_id, p->push_pull, p->vars, p->n_vars,
                                     p->applied, p->dropped);
    if (rc != PS_OK)
        ps__server_reply_error(s, id, id_len, p->request_id, PS_ENOMEM,
                               "out of memory answering a pull");
}

/* 1 when every float of g[0..n) is finite. Branch-free over the bits (the
 * exponent all ones is Inf or NaN), so the compiler vectorizes it. */
static int all_finite(const float *g, size_t n) {
    const uint32_t *u = (const uint32_t *)(const void *)g;
    uint32_t bad = 0;
    for (size_t k = 0; k < n; k++)
        bad |= (uint32_t)((u[k] & 0x7f800000u) == 0x7f800000u);
    return bad == 0;
}

/* Checks every gradient names a variable of the same shape and is finite. */
static int check_grads(ps_server *s, const Ps__Push *p, ps_request *r, const float **data,
                       char *err, size_t errlen) {
    int rc = ps_grads_check(p->grads, p->n_grads, r->payloads, r->n_payloads, err, errlen);
    if (rc != PS_OK) return rc;
    if (p->n_grads == 0) {
        snprintf(err, errlen, "push carries no gradients");
        return PS_EPROTO;
    }
    for (size_t i = 0; i < p->n_grads; i++) {
        const Ps__TensorMeta *m = p->grads[i];
        const ps_var *v = ps_store_find(&s->shard.store, m->name);
        if (!v) {
            snprintf(err, errlen, "no variable named '%.200s' on shard %ld", m->name, s->cfg.shard);
            return PS_ENOENT;
        }
        if (!ps_var_same_shape(v, m->n_shape, m->shape)) {
            snprintf(err, errlen, "gradient for '%s' has the wrong shape", m->name);
            return PS_ESHAPE;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(p->grads[j]->name, m->name) == 0) {
                snprintf(err, errlen, "gradient for '%s' listed twice", m->name);
                return PS_EINVAL;
            }
        }
        /* Each frame is read in place when aligned; a misaligned one is copied
         * once into its own buffer (kept until the push is applied). */
        const void *raw = zmq_msg_data(&r->payloads[i]);
        if (m->dtype != PS__DTYPE__DT_F32) {
            /* encoded (--compression): decoded into float before the sum or apply */
            float *dense = malloc(v->numel * sizeof(float));
            if (!dense) return PS_ENOMEM;
            data[i] = dense;
            rc = ps_grad_decode(m, &r->payloads[i], dense, err, errlen);
            if (rc != PS_OK) return rc;
        } else if (((uintptr_t)raw & 3u) != 0) {
            float *copy = malloc(v->numel * sizeof(float));
            if (!copy) return PS_ENOMEM;
            memcpy(copy, raw, v->numel * sizeof(float));
            data[i] = copy;
        } else {
            data[i] = raw;
        }
        if (!p->skipped && !all_finite(data[i], v->numel)) { /* skipped: never read */
            size_t k = 0;
            while (isfinite(data[i][k]))
                k++;
            snprintf(err, errlen, "gradient for '%s' has a NaN or Inf at %zu", m->name, k);
            return PS_EINVAL;
        }
    }
    return PS_OK;
}

/* A checked push, before its gradients are used. */
typedef struct {
    ps_shard_push_plan plan;
    ps_var **vars;      /* per gradient: its variable */
    const float **data; /* per gradient: the frame itself, or an aligned copy (owned) */
} push_plan;

static void push_plan_free(ps_request *r, const Ps__Push *p, push_plan *pl) {
    for (size_t i = 0; pl->data && i < p->n_grads; i++)
        if (pl->data[i] && (const void *)pl->data[i] != zmq_msg_data(&r->payloads[i]))
            free((void *)pl->data[i]);
    free(pl->data);
    free(pl->vars);
    pl->data = NULL;
    pl->vars = NULL;
}

/* Validates a push and lets the shard decide what it does; changes nothing yet
 * but the worker's liveness and the dropped-push counters. */
static int push_prepare(ps_server *s, ps_request *r, const Ps__Push *p, push_plan *pl, char *err,
                        size_t errlen) {
    memset(pl, 0, sizeof *pl);
    int rc = ps_shard_push_admit(&s->shard, p->worker_index, p->step, p->session, p->seq, &pl->plan,
                                 err, errlen);
    if (rc != PS_OK) return rc;
    if (pl->plan.retry) {
        PS_DEBUG("push from worker %u (seq %llu) is a retry of one applied: not applied again",
                 p->worker_index, (unsigned long long)p->seq);
        return PS_OK;
    }
    if (pl->plan.dropped) {
        PS_DEBUG("push from worker %u for step %llu dropped (shard at %llu)", p->worker_index,
                 (unsigned long long)p->step, (unsigned long long)s->shard.step.version);
        return PS_OK;
    }
    size_t n = p->n_grads ? p->n_grads : 1;
    pl->data = calloc(n, sizeof *pl->data);
    pl->vars = calloc(n, sizeof *pl->vars);
    if (!pl->data || !pl->vars) {
        push_plan_free(r, p, pl);
        return PS_ENOMEM;
    }
    rc = check_grads(s, p, r, pl->data, err, errlen);
    for (size_t i = 0; rc == PS_OK && i < p->n_grads; i++)
        pl->vars[i] = ps_store_find(&s->shard.store, p->grads[i]->name);
    if (rc != PS_OK) push_plan_free(r, p, pl);
    return rc;
}

/* Hands the gradients of a prepared push to the shard (ps_shard_push_commit).
 * A skipped push (the worker's gradients overflowed) counts the same but adds
 * nothing: a sync step averages over the pushes that carry gradients (none: it
 * closes with no update, the version advancing); async, the version and the
 * worker's clock advance without an update. */
static void push_commit(ps_server *s, const Ps__Push *p, push_plan *pl) {
    if (pl->plan.dropped) return;
    if (p->skipped)
        PS_DEBUG("push from worker %u skipped (its gradients overflowed)", p->worker_index);
    ps_shard_push_commit(&s->shard, p->worker_index, p->clock, p->skipped, pl->vars,
                         (const float *const *)pl->data, p->n_grads, &pl->plan);
}

/* A Push is answered before its gradients are applied: the outcome is known
 * once they are checked, and the worker's next request is handled only after
 * the apply anyway (one loop thread), so the apply overlaps the reply's trip
 * and the worker's next send. (Not on a replicated shard: there the reply is
 * held until the backup applied the push, so the push is logged first.) */
/* The gradient payload bytes of a Push or PushPull, as they came (StatsReply.push_bytes). */
static void count_push_bytes(ps_server *s, const ps_request *r) {
    for (size_t i = 0; i < r->n_payloads; i++)
        s->stats.push_bytes += zmq_msg_size((zmq_msg_t *)&r->payloads[i]);
}

int ps__handle_push(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__Push *p = r->hdr->push;
    count_push_bytes(s, r);
    push_plan pl;
    int rc = push_prepare(s, r, p, &pl, err, errlen);
    if (rc != PS_OK) return rc;
    Ps__Header out = PS__HEADER__INIT;
    Ps__PushReply rep = PS__PUSH_REPLY__INIT;
    rep.version = s->shard.step.version + (uint64_t)(pl.plan.applied && !pl.plan.dropped);
    rep.applied = pl.plan.applied;
    rep.dropped = pl.plan.dropped && !pl.plan.retry;
    rep.duplicate = pl.plan.retry;
    out.body_case = PS__HEADER__BODY_PUSH_REPLY;
    out.push_reply = &rep;
    /* a replicated shard's reply waits for the backup: it goes after the entry */
    if (s->repl) push_commit(s, p, &pl);
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    if (!s->repl) push_commit(s, p, &pl);
    push_plan_free(r, p, &pl);
    return PS_OK;
}

/* A push, then a pull of the same variables answered with the values after
 * this push's update: sync, once the step closed (a dropped push: at once,
 * its step has closed); async, at once unless the staleness gate holds this
 * worker, now one clock further, back. */
int ps__handle_push_pull(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__Push *p = r->hdr->push_pull->push;
    count_push_bytes(s, r);
    if (!p || p->n_grads == 0 || p->n_grads > PS_WIRE_MAX_FRAMES) {
        snprintf(err, errlen, "push-pull of %zu gradients (allowed 1..%u)", p ? p->n_grads : 0,
                 PS_WIRE_MAX_FRAMES);
        return PS_EPROTO;
    }
    for (size_t i = 0; i < p->n_grads; i++) { /* the pull side, even for a dropped push */
        if (!p->grads[i] || !ps_store_find(&s->shard.store, p->grads[i]->name)) {
            snprintf(err, errlen, "no variable named '%.200s' on shard %ld",
                     p->grads[i] ? p->grads[i]->name : "", s->cfg.shard);
            return PS_ENOENT;
        }
    }
    /* its pull may have to wait: refused before the push is applied if it could not */
    ps__monitor_drain(s);
    int rc =
        ps_pending_room(&s->shard.pending, r->identity, r->identity_len, p->n_grads, err, errlen);
    if (rc != PS_OK) return rc;
    push_plan pl;
    rc = push_prepare(s, r, p, &pl, err, errlen);
    if (rc != PS_OK) return rc;
    push_commit(s, p, &pl);
    push_plan_free(r, p, &pl);
    uint64_t min_version = s->cfg.mode == PS_MODE_SYNC ? p->step + 1 : 0;
    /* a retry is answered as the push it repeats was */
    return answer_or_defer(s, r, min_version, 1, p->clock + 1, pl.plan.applied,
                           pl.plan.dropped && !pl.plan.retry, err, errlen);
}

int ps__handle_stats(ps_server *s, ps_request *r, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    Ps__Header out = PS__HEADER__INIT;
    Ps__StatsReply st = PS__STATS_REPLY__INIT;
    st.version = s->shard.step.version;
    st.mode = s->cfg.mode == PS_MODE_ASYNC ? PS__MODE__MODE_ASYNC : PS__MODE__MODE_SYNC;
    st.shard_index = (uint32_t)s->cfg.shard;
    st.num_workers = (uint32_t)s->cfg.workers;
    st.requests = s->stats.requests;
    st.errors = s->stats.errors;
    st.pushes_applied = s->shard.stats.pushes_applied;
    st.stale_pushes = s->shard.stats.stale_pushes;
    st.updates_applied = s->shard.stats.updates_applied;
    st.bytes_in = s->stats.bytes_in;
    st.bytes_out = s->stats.bytes_out;
    st.pending_pulls = s->shard.pending.n;
    st.pending_pull_bytes = s->shard.pending.bytes;
    st.pending_pulls_refused = s->shard.pending.refused;
    st.pending_pulls_timed_out = s->shard.pending.timed_out;
    st.pending_pulls_released = s->shard.pending.released;
    st.dropped_replies = s->stats.dropped_replies;
    st.loop_turns_cut = s->stats.turns_cut;
    st.live_workers = s->shard.members.live;
    st.workers_removed = s->shard.members.removed;
    st.dropped_pushes = s->shard.stats.dropped_pushes;
    st.max_staleness = s->shard.stats.max_staleness;
    st.staleness_waits = s->shard.stats.staleness_waits;
    st.checkpoints = s->stats.checkpoints;
    st.checkpoint_version = s->ckpt_version;
    st.checkpoint_age_seconds = s->ckpt_ns ? (double)(ps__now_ns() - s->ckpt_ns) / 1e9 : -1.0;
    st.incarnation = s->incarnation;
    st.auth_denied = s->stats.auth_denied;
    st.checkpoint_failures = s->stats.checkpoint_failures;
    st.job_id = s->shard.job_id;
    st.push_bytes = s->stats.push_bytes;
    st.uptime_seconds = (double)(ps__now_ns() - s->start_ns) / 1e9;
    uint32_t *live = calloc(s->shard.members.n ? s->shard.members.n : 1, sizeof *live);
    if (!live) return PS_ENOMEM;
    for (uint32_t w = 0; w < s->shard.members.n; w++)
        if (ps_members_live(&s->shard.members, w)) live[st.n_live_set++] = w;
    st.live_set = live;
    st.workers_min = (uint32_t)s->cfg.workers_min;
    size_t n = s->shard.store.n;
    Ps__VarStats *vs = calloc(n ? n : 1, sizeof *vs);
    Ps__VarStats **vp = calloc(n ? n : 1, sizeof *vp);
    if (!vs || !vp) {
        free(vs);
        free(vp);
        free(live);
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ps__var_stats__init(&vs[i]);
        vs[i].name = s->shard.store.vars[i]->name;
        vs[i].numel = s->shard.store.vars[i]->numel;
        vs[i].optimizer = (char *)ps_opt_kind_name(s->shard.store.vars[i]->opt.kind);
        vp[i] = &vs[i];
    }
    st.vars = vp;
    st.n_vars = n;
    size_t nt = s->shard.tables.n;
    Ps__TableStats *ts = calloc(nt ? nt : 1, sizeof *ts);
    Ps__TableStats **tp = calloc(nt ? nt : 1, sizeof *tp);
    if (!ts || !tp) {
        free(vs), free(vp), free(ts), free(tp), free(live);
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < nt; i++) {
        const ps_table_entry *e = s->shard.tables.v[i];
        ps_table_counts t;
        ps_table_stats_get(e->t, &t);
        ps__table_stats__init(&ts[i]);
        ts[i].name = (char *)e->name;
        ts[i].dim = e->cfg.dim;
        ts[i].num_rows = e->num_rows;
        ts[i].optimizer = (char *)ps_row_opt_kind_name(e->cfg.opt.kind);
        ts[i].rows = t.rows;
        ts[i].admitted = t.admitted;
        ts[i].evicted = t.evicted;
        ts[i].expired = t.expired;
        ts[i].refused = t.refused;
        ts[i].dropped = t.dropped;
        ts[i].bytes = t.bytes;
        ts[i].max_rows = ps_table_limit(e->t);
        tp[i] = &ts[i];
    }
    st.tables = tp;
    st.n_tables = nt;
    out.body_case = PS__HEADER__BODY_STATS_REPLY;
    out.stats_reply = &st;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    free(vs), free(vp), free(ts), free(tp), free(live);
    return PS_OK;
}

int ps__handle_shutdown(ps_server *s, ps_request *r, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    Ps__Header out = PS__HEADER__INIT;
    Ps__ShutdownReply rep = PS__SHUTDOWN_REPLY__INIT;
    out.body_case = PS__HEADER__BODY_SHUTDOWN_REPLY;
    out.shutdown_reply = &rep;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    PS_INFO("shutdown requested");
    ps_server_stop(s);
    return PS_OK;
}

/* One-way: no reply. A heartbeat keeps a live worker live; it does not
 * bring back a removed one (that takes a Hello). */
int ps__handle_heartbeat(ps_server *s, ps_request *r, char *err, size_t errlen) {
    uint32_t w = r->hdr->heartbeat->worker_index;
    int rc = ps_shard_check_worker(&s->shard, w, err, errlen);
    if (rc == PS_OK) ps_shard_seen(&s->shard, w);
    return rc;
}

int ps__handle_goodbye(ps_server *s, ps_request *r, char *err, size_t errlen) {
    uint32_t w = r->hdr->goodbye->worker_index;
    int rc = ps_shard_check_worker(&s->shard, w, err, errlen);
    if (rc != PS_OK) return rc;
    Ps__Header out = PS__HEADER__INIT;
    Ps__GoodbyeReply rep = PS__GOODBYE_REPLY__INIT;
    out.body_case = PS__HEADER__BODY_GOODBYE_REPLY;
    out.goodbye_reply = &rep;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    if (ps_shard_goodbye(&s->shard, w)) {
        PS_INFO("worker %u finished (%u live)", w, s->shard.members.live);
        ps__log_quorum(s);
    }
    return PS_OK;
}

int ps__handle_checkpoint(ps_server *s, ps_request *r, char *err, size_t errlen) {
    return ps__ckpt_request(s, r, err, errlen); /* replies when the file is written */
}
