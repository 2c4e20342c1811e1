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
    PS_INFO("hello from worker %u", h->worker_index);
    ps__member_join(s, h->worker_index);
    Ps__Header out = PS__HEADER__INIT;
    Ps__Welcome w = PS__WELCOME__INIT;
    w.shard_index = (uint32_t)s->cfg.shard;
    w.num_shards = (uint32_t)s->cfg.num_shards;
    w.mode = s->cfg.mode == PS_MODE_ASYNC ? PS__MODE__MODE_ASYNC : PS__MODE__MODE_SYNC;
    w.version = s->step.version;
    w.num_workers = (uint32_t)s->cfg.workers;
    w.num_vars = (uint32_t)s->store.n;
    long hb = s->cfg.worker_timeout_ms / 4;
    w.heartbeat_ms = (uint32_t)(hb < 50 ? 50 : hb);
    w.incarnation = s->incarnation;
    w.worker_clock = s->members.m[h->worker_index].clock;
    w.job_id = s->job_id;
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
    if (job[0] && !ps_job_id_valid(job)) {
        snprintf(err, errlen, "bad job id (want 1..%u of A-Z a-z 0-9 . _ -)", PS_WIRE_MAX_JOB_ID);
        return PS_EINVAL;
    }
    /* Variables are created once per job: never mix two jobs' variables on a shard. */
    if (job[0] && s->job_id[0] && strcmp(job, s->job_id) != 0) {
        snprintf(err, errlen, "shard %ld holds the variables of job '%s', not of job '%s'",
                 s->cfg.shard, s->job_id, job);
        return PS_EEXIST;
    }
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
        new_vars += ps_store_find(&s->store, m->name) == NULL;
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
        const ps_var *v = ps_store_find(&s->store, m->name);
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
    if (s->store.n + new_vars > (size_t)s->cfg.max_vars) {
        snprintf(err, errlen, "creating %zu variables would make %zu, more than --max-vars %ld",
                 new_vars, s->store.n + new_vars, s->cfg.max_vars);
        return PS_EINVAL;
    }
    protobuf_c_boolean *created = calloc(cv->n_vars ? cv->n_vars : 1, sizeof *created);
    if (!created) return PS_ENOMEM;
    for (size_t i = 0; i < cv->n_vars && rc == PS_OK; i++) {
        const Ps__TensorMeta *m = cv->vars[i];
        if (ps_store_find(&s->store, m->name)) continue; /* same name and shape: keep it */
        const float *init = ps_frame_floats(&r->payloads[i], &s->scratch, &s->scratch_cap);
        ps_opt_spec opt = ps_opt_spec_from_proto(cv->optimizers[i]);
        ps_var *v;
        rc = init ? ps_store_create(&s->store, m->name, m->n_shape, m->shape, init, &opt, &v)
                  : PS_ENOMEM;
        if (rc == PS_OK) {
            created[i] = 1;
            char d[400];
            PS_INFO("created %s [%zu floats] with %s", v->name, v->numel,
                    ps_opt_spec_describe(&opt, d, sizeof d));
        }
    }
    if (rc == PS_OK && job[0] && !s->job_id[0]) {
        snprintf(s->job_id, sizeof s->job_id, "%s", job);
        PS_INFO("the variables belong to job %s", s->job_id);
    }
    if (rc == PS_OK) {
        Ps__Header out = PS__HEADER__INIT;
        Ps__CreateVarsReply rep = PS__CREATE_VARS_REPLY__INIT;
        rep.created = created;
        rep.n_created = cv->n_vars;
        rep.version = s->step.version;
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
        rep.version = s->step.version;
        if (!push_pull) {
            out.body_case = PS__HEADER__BODY_PULL_REPLY;
            out.pull_reply = &rep;
        } else {
            prep.version = s->step.version;
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
 * and the staleness gate is open, else keeps it on the pending list (it owns
 * r->hdr then) until a step or push makes it so. */
static int answer_or_defer(ps_server *s, ps_request *r, uint64_t min_version, int has_worker,
                           uint64_t clock, int applied, int dropped, char *err, size_t errlen) {
    int gate_open = ps__staleness_allows(s, has_worker, clock);
    if (min_version <= s->step.version && gate_open) {
        size_t n = want_count(r->hdr);
        ps_var **vars = malloc((n ? n : 1) * sizeof *vars);
        if (!vars) return PS_ENOMEM;
        for (size_t i = 0; i < n; i++)
            vars[i] = ps_store_find(&s->store, want_name(r->hdr, i));
        int rc = reply_values(s, r->identity, r->identity_len, r->hdr->request_id,
                              r->hdr->body_case == PS__HEADER__BODY_PUSH_PULL, vars, n, applied,
                              dropped);
        free(vars);
        return rc;
    }
    if (!gate_open) s->stats.staleness_waits++;
    /* sync: only the open step's result can be waited for; async: any future
     * version (pushes keep arriving; the client bounds the wait) */
    if (s->cfg.mode == PS_MODE_SYNC && min_version > s->step.version + 1) {
        /* ESTALE: the client's idea of this shard is out of date (it may have
         * restarted from a checkpoint); a worker asks who we are and resyncs */
        snprintf(err, errlen, "pull asks for version %llu but the shard is at %llu",
                 (unsigned long long)min_version, (unsigned long long)s->step.version);
        return PS_ESTALE;
    }
    /* the deferred pull keeps the variables, not the request (its padding, its names) */
    size_t n = want_count(r->hdr);
    ps_var **vars = malloc((n ? n : 1) * sizeof *vars);
    if (!vars) {
        snprintf(err, errlen, "out of memory deferring a pull");
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        vars[i] = ps_store_find(&s->store, want_name(r->hdr, i));
    int push_pull = r->hdr->body_case == PS__HEADER__BODY_PUSH_PULL;
    ps_pending_info info = {
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
    int rc = ps_pending_add(&s->pending, r->identity, r->identity_len, r->fd, vars, n, &info,
                            ps__now_ns(), err, errlen);
    free(vars);
    return rc;
}

int ps__handle_pull(ps_server *s, ps_request *r, char *err, size_t errlen) {
    const Ps__Pull *p = r->hdr->pull;
    if (p->n_names == 0 || p->n_names > PS_WIRE_MAX_FRAMES) {
        snprintf(err, errlen, "pull of %zu names (allowed 1..%u)", p->n_names, PS_WIRE_MAX_FRAMES);
        return PS_EPROTO;
    }
    if (p->has_worker) {
        if (p->worker_index >= (uint32_t)s->cfg.workers) {
            snprintf(err, errlen, "worker index %u out of range (job has %ld workers)",
                     p->worker_index, s->cfg.workers);
            return PS_EINVAL;
        }
        ps__member_seen(s, p->worker_index);
    }
    for (size_t i = 0; i < p->n_names; i++) {
        if (!ps_store_find(&s->store, p->names[i])) {
            snprintf(err, errlen, "no variable named '%.200s' on shard %ld", p->names[i],
                     s->cfg.shard);
            return PS_ENOENT;
        }
    }
    return answer_or_defer(s, r, p->min_version, p->has_worker, p->clock, 0, 0, err, errlen);
}

void ps__server_answer_pending(ps_server *s) {
    ps_pending_pull *p = s->pending.head;
    while (p) {
        ps_pending_pull *next = p->next;
        if ((p->min_version > s->step.version || !ps__staleness_allows(s, p->has_worker, p->clock)) &&
            !s->stopping) {
            p = next;
            continue;
        }
        const void *id = p->peer->identity;
        size_t id_len = p->peer->identity_len;
        if (s->stopping)
            ps__server_reply_error(s, id, id_len, p->request_id, PS_ESHUTDOWN,
                                   "psd is shutting down");
        else if (p->table ? ps__reply_rows(s, id, id_len, p->request_id, p->table, p->ids,
                                           p->n_ids) != PS_OK
                          : reply_values(s, id, id_len, p->request_id, p->push_pull, p->vars,
                                         p->n_vars, p->applied, p->dropped) != PS_OK)
            ps__server_reply_error(s, id, id_len, p->request_id, PS_ENOMEM,
                                   "out of memory answering a pull");
        ps_pending_remove(&s->pending, p);
        p = next;
    }
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
        const ps_var *v = ps_store_find(&s->store, m->name);
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

const double ps__lat_bounds[PS_LAT_BUCKETS] = {1e-5,   2.5e-5, 5e-5, 1e-4,   2.5e-4, 5e-4, 1e-3,
                                               2.5e-3, 5e-3,   1e-2, 2.5e-2, 5e-2,   0.1,  1.0};

void ps__stats_apply_latency(ps_server *s, double seconds) {
    size_t b = 0;
    while (b < PS_LAT_BUCKETS && seconds > ps__lat_bounds[b])
        b++;
    s->stats.lat_buckets[b]++;
    s->stats.lat_sum += seconds;
    s->stats.lat_count++;
}

static void warn_nomem(int rc) {
    if (rc == PS_ENOMEM) PS_ERROR("out of memory applying an update: a gradient was dropped");
}

/* Sync: closes the step when enough workers pushed; the apply latency counts
 * from t0 (a direct push's apply began before). */
static int try_close_step(ps_server *s, uint64_t t0) {
    if (!ps_step_ready(&s->step, ps__members_needed(s))) return 0;
    for (size_t i = 0; i < s->store.n; i++)
        warn_nomem(ps_var_apply_accumulated(s->store.vars[i]));
    warn_nomem(ps_tables_close_step(&s->tables, s->step.version + 1));
    ps__stats_apply_latency(s, (double)(ps__now_ns() - t0) / 1e9);
    ps_step_close(&s->step);
    s->stats.updates_applied++;
    ps__server_answer_pending(s);
    return 1;
}

int ps__sync_try_close_step(ps_server *s) {
    return try_close_step(s, ps__now_ns());
}

void ps__sync_count_push(ps_server *s, uint32_t w) {
    ps_step_count(&s->step, w);
    try_close_step(s, ps__now_ns());
}

/* Async: records worker w's clock and the staleness of its push. */
static void note_clock(ps_server *s, uint32_t w, uint64_t clock) {
    uint64_t staleness = ps_members_note_clock(&s->members, w, clock);
    if (staleness > s->stats.max_staleness) s->stats.max_staleness = staleness;
}

/* A checked push, before its gradients are used. */
typedef struct {
    const float **data; /* per gradient: the frame itself, or an aligned copy (owned) */
    int dropped;        /* sync: for a closed step, or a second one: nothing to apply */
    int applied;        /* async: applied; sync: the step closes with this push */
    int direct;         /* sync: this push alone closes the step: applied without averaging */
} push_plan;

static void push_plan_free(ps_request *r, const Ps__Push *p, push_plan *pl) {
    if (!pl->data) return;
    for (size_t i = 0; i < p->n_grads; i++)
        if (pl->data[i] && (const void *)pl->data[i] != zmq_msg_data(&r->payloads[i]))
            free((void *)pl->data[i]);
    free(pl->data);
    pl->data = NULL;
}

/* Validates a push and decides what it does; changes nothing yet but the
 * worker's liveness and the dropped-push counters. */
static int push_prepare(ps_server *s, ps_request *r, const Ps__Push *p, push_plan *pl, char *err,
                        size_t errlen) {
    memset(pl, 0, sizeof *pl);
    if (p->worker_index >= (uint32_t)s->cfg.workers) {
        snprintf(err, errlen, "worker index %u out of range (job has %ld workers)", p->worker_index,
                 s->cfg.workers);
        return PS_EINVAL;
    }
    ps__member_seen(s, p->worker_index);
    if (!ps_members_live(&s->members, p->worker_index)) {
        snprintf(err, errlen, "worker %u is not in the expected set (timed out or finished)",
                 p->worker_index);
        return PS_EREJOIN;
    }
    if (s->cfg.mode == PS_MODE_SYNC) {
        ps_step_verdict verdict = ps_step_admit(&s->step, p->worker_index, p->step);
        if (verdict == PS_STEP_AHEAD) { /* ESTALE: as for pulls, the client must resync */
            snprintf(err, errlen, "push for step %llu but the shard is at %llu",
                     (unsigned long long)p->step, (unsigned long long)s->step.version);
            return PS_ESTALE;
        }
        /* A push for a closed step (backup workers: R pushes already closed it)
         * or a second one from the same worker (a retry after a reconnect) is
         * dropped: counted, answered, not an error. */
        if (verdict == PS_STEP_DROP) {
            s->stats.dropped_pushes++;
            s->stats.stale_pushes++;
            PS_DEBUG("push from worker %u for step %llu dropped (shard at %llu)", p->worker_index,
                     (unsigned long long)p->step, (unsigned long long)s->step.version);
            pl->dropped = 1;
            return PS_OK;
        }
    }
    pl->data = calloc(p->n_grads ? p->n_grads : 1, sizeof *pl->data);
    if (!pl->data) return PS_ENOMEM;
    int rc = check_grads(s, p, r, pl->data, err, errlen);
    if (rc != PS_OK) {
        push_plan_free(r, p, pl);
        return rc;
    }
    if (s->cfg.mode == PS_MODE_SYNC) {
        uint32_t needed = ps__members_needed(s);
        pl->applied = s->step.pushes + 1 >= needed;
        /* the mean of one gradient is itself: skip the accumulator (bit-identical) */
        pl->direct = s->step.pushes == 0 && needed <= 1;
    } else {
        pl->applied = 1;
    }
    return PS_OK;
}

/* Uses the gradients of a prepared push: async, applies them (a new version);
 * sync, adds them to the step (closing it when this push completes it). A
 * skipped push (the worker's gradients overflowed) counts the same but adds
 * nothing: a sync step averages over the pushes that carry gradients (none: it
 * closes with no update, the version advancing); async, the version and the
 * worker's clock advance without an update. */
static void push_commit(ps_server *s, const Ps__Push *p, push_plan *pl) {
    if (pl->dropped) return;
    uint64_t t0 = ps__now_ns();
    if (p->skipped)
        PS_DEBUG("push from worker %u skipped (its gradients overflowed)", p->worker_index);
    for (size_t i = 0; i < p->n_grads && !p->skipped; i++) {
        ps_var *v = ps_store_find(&s->store, p->grads[i]->name);
        if (s->cfg.mode == PS_MODE_ASYNC || pl->direct)
            warn_nomem(ps_var_apply(v, pl->data[i]));
        else
            warn_nomem(ps_var_accumulate(v, pl->data[i]));
    }
    if (!p->skipped) s->stats.pushes_applied++;
    if (s->cfg.mode == PS_MODE_SYNC) {
        ps_step_count(&s->step, p->worker_index);
        try_close_step(s, pl->direct ? t0 : ps__now_ns());
    } else {
        ps__stats_apply_latency(s, (double)(ps__now_ns() - t0) / 1e9);
        note_clock(s, p->worker_index, p->clock);
        s->step.version++;
        if (!p->skipped) s->stats.updates_applied++;
        if (s->pending.head) ps__server_answer_pending(s);
    }
}

/* A Push is answered before its gradients are applied: the outcome is known
 * once they are checked, and the worker's next request is handled only after
 * the apply anyway (one loop thread), so the apply overlaps the reply's trip
 * and the worker's next send. */
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
    rep.version = s->step.version + (uint64_t)(pl.applied && !pl.dropped);
    rep.applied = pl.applied;
    rep.dropped = pl.dropped;
    out.body_case = PS__HEADER__BODY_PUSH_REPLY;
    out.push_reply = &rep;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    push_commit(s, p, &pl);
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
        if (!p->grads[i] || !ps_store_find(&s->store, p->grads[i]->name)) {
            snprintf(err, errlen, "no variable named '%.200s' on shard %ld",
                     p->grads[i] ? p->grads[i]->name : "", s->cfg.shard);
            return PS_ENOENT;
        }
    }
    /* its pull may have to wait: refused before the push is applied if it could not */
    ps__monitor_drain(s);
    int rc = ps_pending_room(&s->pending, r->identity, r->identity_len, p->n_grads, err, errlen);
    if (rc != PS_OK) return rc;
    push_plan pl;
    rc = push_prepare(s, r, p, &pl, err, errlen);
    if (rc != PS_OK) return rc;
    push_commit(s, p, &pl);
    push_plan_free(r, p, &pl);
    uint64_t min_version = s->cfg.mode == PS_MODE_SYNC ? p->step + 1 : 0;
    return answer_or_defer(s, r, min_version, 1, p->clock + 1, pl.applied, pl.dropped, err, errlen);
}

int ps__handle_stats(ps_server *s, ps_request *r, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    Ps__Header out = PS__HEADER__INIT;
    Ps__StatsReply st = PS__STATS_REPLY__INIT;
    st.version = s->step.version;
    st.mode = s->cfg.mode == PS_MODE_ASYNC ? PS__MODE__MODE_ASYNC : PS__MODE__MODE_SYNC;
    st.shard_index = (uint32_t)s->cfg.shard;
    st.num_workers = (uint32_t)s->cfg.workers;
    st.requests = s->stats.requests;
    st.errors = s->stats.errors;
    st.pushes_applied = s->stats.pushes_applied;
    st.stale_pushes = s->stats.stale_pushes;
    st.updates_applied = s->stats.updates_applied;
    st.bytes_in = s->stats.bytes_in;
    st.bytes_out = s->stats.bytes_out;
    st.pending_pulls = s->pending.n;
    st.pending_pull_bytes = s->pending.bytes;
    st.pending_pulls_refused = s->pending.refused;
    st.pending_pulls_timed_out = s->pending.timed_out;
    st.pending_pulls_released = s->pending.released;
    st.dropped_replies = s->stats.dropped_replies;
    st.loop_turns_cut = s->stats.turns_cut;
    st.live_workers = s->members.live;
    st.workers_removed = s->members.removed;
    st.dropped_pushes = s->stats.dropped_pushes;
    st.max_staleness = s->stats.max_staleness;
    st.staleness_waits = s->stats.staleness_waits;
    st.checkpoints = s->stats.checkpoints;
    st.checkpoint_version = s->ckpt_version;
    st.checkpoint_age_seconds = s->ckpt_ns ? (double)(ps__now_ns() - s->ckpt_ns) / 1e9 : -1.0;
    st.incarnation = s->incarnation;
    st.auth_denied = s->stats.auth_denied;
    st.checkpoint_failures = s->stats.checkpoint_failures;
    st.job_id = s->job_id;
    st.push_bytes = s->stats.push_bytes;
    st.uptime_seconds = (double)(ps__now_ns() - s->start_ns) / 1e9;
    size_t n = s->store.n;
    Ps__VarStats *vs = calloc(n ? n : 1, sizeof *vs);
    Ps__VarStats **vp = calloc(n ? n : 1, sizeof *vp);
    if (!vs || !vp) {
        free(vs);
        free(vp);
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ps__var_stats__init(&vs[i]);
        vs[i].name = s->store.vars[i]->name;
        vs[i].numel = s->store.vars[i]->numel;
        vs[i].optimizer = (char *)ps_opt_kind_name(s->store.vars[i]->opt.kind);
        vp[i] = &vs[i];
    }
    st.vars = vp;
    st.n_vars = n;
    size_t nt = s->tables.n;
    Ps__TableStats *ts = calloc(nt ? nt : 1, sizeof *ts);
    Ps__TableStats **tp = calloc(nt ? nt : 1, sizeof *tp);
    if (!ts || !tp) {
        free(vs), free(vp), free(ts), free(tp);
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < nt; i++) {
        const ps_table_entry *e = s->tables.v[i];
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
    free(vs), free(vp), free(ts), free(tp);
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

static int check_worker(const ps_server *s, uint32_t w, char *err, size_t errlen) {
    if (w < (uint32_t)s->cfg.workers) return PS_OK;
    snprintf(err, errlen, "worker index %u out of range (job has %ld workers)", w, s->cfg.workers);
    return PS_EINVAL;
}

/* One-way: no reply. A heartbeat keeps a live worker live; it does not
 * bring back a removed one (that takes a Hello). */
int ps__handle_heartbeat(ps_server *s, ps_request *r, char *err, size_t errlen) {
    uint32_t w = r->hdr->heartbeat->worker_index;
    int rc = check_worker(s, w, err, errlen);
    if (rc == PS_OK) ps__member_seen(s, w);
    return rc;
}

int ps__handle_goodbye(ps_server *s, ps_request *r, char *err, size_t errlen) {
    uint32_t w = r->hdr->goodbye->worker_index;
    int rc = check_worker(s, w, err, errlen);
    if (rc != PS_OK) return rc;
    Ps__Header out = PS__HEADER__INIT;
    Ps__GoodbyeReply rep = PS__GOODBYE_REPLY__INIT;
    out.body_case = PS__HEADER__BODY_GOODBYE_REPLY;
    out.goodbye_reply = &rep;
    ps__server_reply(s, r->identity, r->identity_len, r->hdr->request_id, &out, NULL, 0);
    ps__member_leave(s, w);
    return PS_OK;
}

int ps__handle_checkpoint(ps_server *s, ps_request *r, char *err, size_t errlen) {
    return ps__ckpt_request(s, r, err, errlen); /* replies when the file is written */
}
