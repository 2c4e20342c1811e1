/* A parameter-server shard as a state machine (see shard.h). */
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

const double ps_shard_lat_bounds[PS_LAT_BUCKETS] = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 1.0};

uint64_t ps_shard_now(const ps_shard *sh) {
    return sh->clock(sh->clock_ctx);
}

int ps_shard_init(ps_shard *sh, const ps_shard_config *cfg, ps_shard_clock_fn *clock,
                  void *clock_ctx, const ps_shard_out *out) {
    memset(sh, 0, sizeof *sh);
    sh->cfg = *cfg;
    sh->clock = clock;
    sh->clock_ctx = clock_ctx;
    sh->out = *out;
    ps_store_init(&sh->store);
    ps_tables_init(&sh->tables, cfg->workers);
    ps_tables_set_bound(&sh->tables, cfg->max_table_bytes);
    ps_pending_init(&sh->pending, &cfg->pending);
    int rc = ps_step_init(&sh->step, cfg->workers);
    if (rc == PS_OK)
        rc = ps_members_init(&sh->members, cfg->workers, cfg->workers_min == 0,
                             cfg->worker_timeout_ns, cfg->tick_ns, ps_shard_now(sh));
    if (rc != PS_OK) ps_shard_free(sh);
    return rc;
}

void ps_shard_free(ps_shard *sh) {
    ps_pending_free(&sh->pending);
    ps_store_free(&sh->store);
    ps_tables_free(&sh->tables);
    ps_step_free(&sh->step);
    ps_members_free(&sh->members);
}

/* Logs e (with the version after it) when someone listens. */
static void emit(ps_shard *sh, ps_shard_event *e) {
    if (!sh->out.log) return;
    e->version = sh->step.version;
    sh->out.log(sh->out.ctx, e);
}

static void emit_worker(ps_shard *sh, ps_shard_event_kind kind, uint32_t w) {
    ps_shard_event e = {.kind = kind, .worker = w};
    emit(sh, &e);
}

static void count_nomem(ps_shard *sh, int rc) {
    if (rc == PS_ENOMEM) sh->stats.apply_nomem++;
}

static void note_latency(ps_shard *sh, uint64_t t0) {
    double seconds = (double)(ps_shard_now(sh) - t0) / 1e9;
    size_t b = 0;
    while (b < PS_LAT_BUCKETS && seconds > ps_shard_lat_bounds[b])
        b++;
    sh->stats.lat_buckets[b]++;
    sh->stats.lat_sum += seconds;
    sh->stats.lat_count++;
}

/* --- membership ------------------------------------------------------------ */

int ps_shard_check_worker(const ps_shard *sh, uint32_t w, char *err, size_t errlen) {
    if (ps_members_valid(&sh->members, w)) return PS_OK;
    snprintf(err, errlen, "worker index %u out of range (job has %u workers)", w, sh->cfg.workers);
    return PS_EINVAL;
}

void ps_shard_seen(ps_shard *sh, uint32_t w) {
    ps_members_seen(&sh->members, w, ps_shard_now(sh));
}

static int staleness_allows(const ps_shard *sh, int has_worker, uint64_t clock) {
    if (!sh->cfg.async || sh->cfg.staleness < 0 || !has_worker) return 1;
    uint64_t min = ps_members_min_clock(&sh->members);
    return min == UINT64_MAX || clock <= min + (uint64_t)sh->cfg.staleness;
}

int ps_shard_below_min(const ps_shard *sh) {
    return sh->cfg.workers_min && sh->members.live < sh->cfg.workers_min;
}

static uint32_t needed(const ps_shard *sh) {
    if (ps_shard_below_min(sh)) return UINT32_MAX; /* no step closes: they wait */
    return ps_step_needed(&sh->step, sh->cfg.to_aggregate, sh->members.live);
}

/* Sync: closes the step when enough workers pushed; the apply latency counts
 * from t0 (a direct push's apply began before). */
static int try_close_step(ps_shard *sh, uint64_t t0) {
    if (!ps_step_ready(&sh->step, needed(sh))) return 0;
    for (size_t i = 0; i < sh->store.n; i++)
        count_nomem(sh, ps_var_apply_accumulated(sh->store.vars[i]));
    count_nomem(sh, ps_tables_close_step(&sh->tables, sh->step.version + 1));
    note_latency(sh, t0);
    ps_step_close(&sh->step);
    sh->stats.updates_applied++;
    ps_shard_answer_pending(sh);
    return 1;
}

/* Answers what a change of the expected set may have unblocked. */
static void membership_changed(ps_shard *sh) {
    if (!sh->cfg.async)
        try_close_step(sh, ps_shard_now(sh));
    else if (sh->pending.head)
        ps_shard_answer_pending(sh);
}

int ps_shard_hello(ps_shard *sh, uint32_t w, int conn) {
    int rejoined = ps_members_join(&sh->members, w, ps_shard_now(sh), conn);
    if (rejoined && sh->cfg.workers_min) membership_changed(sh); /* the minimum reached */
    emit_worker(sh, PS_EV_HELLO, w);
    return rejoined;
}

int ps_shard_goodbye(ps_shard *sh, uint32_t w) {
    if (!ps_members_leave(&sh->members, w)) return 0;
    membership_changed(sh);
    emit_worker(sh, PS_EV_GOODBYE, w);
    return 1;
}

/* Workers gone[w] left the expected set: answers what that unblocks; what it
 * does not answer waits for a worker that is gone (EREJOIN). */
static void workers_removed(ps_shard *sh, const unsigned char *gone) {
    membership_changed(sh);
    /* logged with the version after what the removal closed: a follower that
     * replays it closes the same step */
    for (uint32_t w = 0; w < sh->members.n; w++)
        if (gone[w]) emit_worker(sh, PS_EV_REMOVE, w);
    for (uint32_t w = 0; w < sh->members.n; w++)
        if (gone[w]) ps_pending_drop_worker(&sh->pending, w, sh->out.fail, sh->out.ctx);
}

uint32_t ps_shard_tick(ps_shard *sh, unsigned char *gone) {
    uint64_t now = ps_shard_now(sh);
    uint32_t removed = ps_members_expire(&sh->members, now, gone);
    if (removed) workers_removed(sh, gone);
    ps_pending_expire(&sh->pending, now, sh->out.fail, sh->out.ctx);
    return removed;
}

uint32_t ps_shard_disconnected(ps_shard *sh, int conn, unsigned char *gone, size_t *pulls) {
    *pulls = ps_pending_release_fd(&sh->pending, conn);
    uint32_t removed = ps_members_disconnect(&sh->members, conn, gone);
    if (removed) workers_removed(sh, gone);
    return removed;
}

/* --- variables ------------------------------------------------------------- */

int ps_shard_check_job(const ps_shard *sh, const char *job, char *err, size_t errlen) {
    if (job[0] && !ps_job_id_valid(job)) {
        snprintf(err, errlen, "bad job id (want 1..%u of A-Z a-z 0-9 . _ -)", PS_WIRE_MAX_JOB_ID);
        return PS_EINVAL;
    }
    /* variables are created once per job: never mix two jobs' variables on a shard */
    if (job[0] && sh->job_id[0] && strcmp(job, sh->job_id) != 0) {
        snprintf(err, errlen, "shard %ld holds the variables of job '%s', not of job '%s'",
                 sh->cfg.shard, sh->job_id, job);
        return PS_EEXIST;
    }
    return PS_OK;
}

void ps_shard_claim_job(ps_shard *sh, const char *job) {
    if (!job[0] || sh->job_id[0]) return;
    snprintf(sh->job_id, sizeof sh->job_id, "%s", job);
    ps_shard_event e = {.kind = PS_EV_CLAIM_JOB, .name = sh->job_id};
    emit(sh, &e);
}

int ps_shard_create_var(ps_shard *sh, const char *name, size_t rank, const uint64_t *shape,
                        const float *init, const ps_opt_spec *opt, ps_var **out) {
    int rc = ps_store_create(&sh->store, name, rank, shape, init, opt, out);
    if (rc != PS_OK) return rc;
    ps_shard_event e = {.kind = PS_EV_CREATE_VAR,
                        .name = name,
                        .rank = rank,
                        .shape = shape,
                        .values = init,
                        .opt = *opt};
    emit(sh, &e);
    return PS_OK;
}

int ps_shard_create_table(ps_shard *sh, const char *name, uint64_t num_rows,
                          const ps_table_cfg *cfg, struct ps_table_entry **out) {
    int rc = ps_tables_create(&sh->tables, name, num_rows, cfg, out);
    if (rc != PS_OK) return rc;
    ps_shard_event e = {
        .kind = PS_EV_CREATE_TABLE, .name = name, .num_rows = num_rows, .table = cfg};
    emit(sh, &e);
    return PS_OK;
}

/* --- pulls ----------------------------------------------------------------- */

int ps_shard_pull(ps_shard *sh, const void *identity, size_t identity_len, int fd,
                  const ps_shard_pull_req *p, ps_var *const *vars, size_t n, char *err,
                  size_t errlen) {
    int gate_open = staleness_allows(sh, p->has_worker, p->clock);
    if (p->min_version <= sh->step.version && gate_open) return 1;
    if (!gate_open) sh->stats.staleness_waits++;
    /* sync: only the open step's result can be waited for; async: any future
     * version (pushes keep arriving; the client bounds the wait) */
    if (!sh->cfg.async && p->min_version > sh->step.version + 1) {
        /* the client's idea of this shard is out of date (it may have restarted
         * from a checkpoint); a worker asks who we are and resyncs */
        snprintf(err, errlen, "pull asks for version %llu but the shard is at %llu",
                 (unsigned long long)p->min_version, (unsigned long long)sh->step.version);
        return PS_ESTALE;
    }
    ps_pending_info info = {
        .request_id = p->request_id,
        .min_version = p->min_version,
        .clock = p->clock,
        .has_worker = p->has_worker,
        .push_pull = p->push_pull,
        .applied = p->applied,
        .dropped = p->dropped,
        .worker = p->worker,
    };
    int rc = ps_pending_add(&sh->pending, identity, identity_len, fd, vars, n, &info,
                            ps_shard_now(sh), err, errlen);
    return rc == PS_OK ? 0 : rc;
}

int ps_shard_pull_rows(ps_shard *sh, const void *identity, size_t identity_len, int fd,
                       uint64_t request_id, uint64_t min_version, struct ps_table_entry *e,
                       const uint64_t *ids, size_t n, char *err, size_t errlen) {
    if (min_version <= sh->step.version) return 1;
    if (!sh->cfg.async && min_version > sh->step.version + 1) {
        snprintf(err, errlen, "pull asks for version %llu but the shard is at %llu",
                 (unsigned long long)min_version, (unsigned long long)sh->step.version);
        return PS_ESTALE;
    }
    ps_pending_info info = {
        .request_id = request_id,
        .min_version = min_version,
        .table = e,
        .ids = ids,
        .n_ids = n,
    };
    int rc = ps_pending_add(&sh->pending, identity, identity_len, fd, NULL, 0, &info,
                            ps_shard_now(sh), err, errlen);
    return rc == PS_OK ? 0 : rc;
}

void ps_shard_answer_pending(ps_shard *sh) {
    ps_pending_pull *p = sh->pending.head;
    while (p) {
        ps_pending_pull *next = p->next;
        if (sh->stopping)
            sh->out.fail(sh->out.ctx, p, PS_ESHUTDOWN, "psd is shutting down");
        else if (p->min_version <= sh->step.version &&
                 staleness_allows(sh, p->has_worker, p->clock))
            sh->out.answer(sh->out.ctx, p);
        else {
            p = next;
            continue;
        }
        ps_pending_remove(&sh->pending, p);
        p = next;
    }
}

void ps_shard_stop(ps_shard *sh) {
    sh->stopping = 1;
    ps_shard_answer_pending(sh);
}

/* --- pushes ---------------------------------------------------------------- */

int ps_shard_admit_worker(ps_shard *sh, uint32_t w, char *err, size_t errlen) {
    int rc = ps_shard_check_worker(sh, w, err, errlen);
    if (rc != PS_OK) return rc;
    ps_shard_seen(sh, w);
    if (ps_members_live(&sh->members, w)) return PS_OK;
    snprintf(err, errlen, "worker %u is not in the expected set (timed out or finished)", w);
    return PS_EREJOIN;
}

int ps_shard_push_admit(ps_shard *sh, uint32_t w, uint64_t step, uint64_t session, uint64_t seq,
                        ps_shard_push_plan *pl, char *err, size_t errlen) {
    memset(pl, 0, sizeof *pl);
    pl->session = session;
    pl->seq = seq;
    int rc = ps_shard_admit_worker(sh, w, err, errlen);
    if (rc != PS_OK) return rc;
    /* a re-send of a push whose reply was lost: applied once, answered again */
    if (ps_members_is_retry(&sh->members, w, 0, session, seq)) {
        sh->stats.retried_pushes++;
        pl->retry = pl->dropped = 1;
        pl->applied = sh->cfg.async;
        return PS_OK;
    }
    if (sh->cfg.async) {
        pl->applied = 1;
        return PS_OK;
    }
    ps_step_verdict verdict = ps_step_admit(&sh->step, w, step);
    if (verdict == PS_STEP_AHEAD) { /* as for pulls, the client must resync */
        snprintf(err, errlen, "push for step %llu but the shard is at %llu",
                 (unsigned long long)step, (unsigned long long)sh->step.version);
        return PS_ESTALE;
    }
    /* A push for a closed step (backup workers: R pushes already closed it) or a
     * second one from the same worker (a retry after a reconnect) is dropped:
     * counted, answered, not an error. */
    if (verdict == PS_STEP_DROP) {
        sh->stats.dropped_pushes++;
        sh->stats.stale_pushes++;
        pl->dropped = 1;
        return PS_OK;
    }
    uint32_t need = needed(sh);
    pl->applied = sh->step.pushes + 1 >= need;
    /* the mean of one gradient is itself: skip the accumulator (bit-identical) */
    pl->direct = sh->step.pushes == 0 && need <= 1;
    return PS_OK;
}

/* Logs a committed push (names and gradients as it came; the version after it). */
static void log_push(ps_shard *sh, uint32_t w, uint64_t step, uint64_t clock, int skipped,
                     ps_var *const *vars, const float *const *grads, size_t n,
                     const ps_shard_push_plan *pl) {
    if (!sh->out.log) return;
    const char *names_buf[16], **names = n <= 16 ? names_buf : malloc(n * sizeof *names);
    if (!names) { /* the backup finds the gap by the version and starts again */
        sh->stats.apply_nomem++;
        return;
    }
    for (size_t i = 0; i < n; i++)
        names[i] = vars[i]->name;
    ps_shard_event e = {.kind = PS_EV_PUSH,
                        .worker = w,
                        .step = step,
                        .clock = clock,
                        .session = pl->session,
                        .seq = pl->seq,
                        .skipped = skipped,
                        .n = n,
                        .names = names,
                        .grads = grads};
    emit(sh, &e);
    if (names != names_buf) free(names);
}

void ps_shard_push_commit(ps_shard *sh, uint32_t w, uint64_t clock, int skipped,
                          ps_var *const *vars, const float *const *grads, size_t n,
                          const ps_shard_push_plan *pl) {
    if (pl->dropped) return;
    uint64_t admitted_at = sh->step.version;
    uint64_t t0 = ps_shard_now(sh);
    for (size_t i = 0; i < n && !skipped; i++) {
        if (sh->cfg.async || pl->direct)
            count_nomem(sh, ps_var_apply(vars[i], grads[i]));
        else
            count_nomem(sh, ps_var_accumulate(vars[i], grads[i]));
    }
    if (!skipped) sh->stats.pushes_applied++;
    ps_members_applied(&sh->members, w, 0, pl->session, pl->seq);
    if (!sh->cfg.async) {
        ps_step_count(&sh->step, w);
        try_close_step(sh, pl->direct ? t0 : ps_shard_now(sh));
        log_push(sh, w, admitted_at, clock, skipped, vars, grads, n, pl);
        return;
    }
    note_latency(sh, t0);
    uint64_t staleness = ps_members_note_clock(&sh->members, w, clock);
    if (staleness > sh->stats.max_staleness) sh->stats.max_staleness = staleness;
    sh->step.version++;
    if (!skipped) sh->stats.updates_applied++;
    log_push(sh, w, admitted_at, clock, skipped, vars, grads, n, pl);
    if (sh->pending.head) ps_shard_answer_pending(sh);
}

int ps_shard_push_rows(ps_shard *sh, struct ps_table_entry *e, uint32_t w, uint64_t step,
                       uint64_t session, uint64_t seq, const uint64_t *ids, size_t n,
                       const float *g, int *dropped, uint64_t *rows_dropped, char *err,
                       size_t errlen) {
    *dropped = 0;
    *rows_dropped = 0;
    int rc;
    if (ps_members_is_retry(&sh->members, w, 1, session, seq)) {
        sh->stats.retried_pushes++;
        *dropped = PS_SHARD_ROWS_RETRY;
        return PS_OK;
    }
    ps_shard_event ev = {.kind = PS_EV_PUSH_ROWS,
                         .name = e->name,
                         .worker = w,
                         .step = step,
                         .session = session,
                         .seq = seq,
                         .n = n,
                         .ids = ids,
                         .values = g};
    if (sh->cfg.async) {
        rc = ps_table_entry_apply(e, ids, n, g, rows_dropped);
        if (rc == PS_ENOMEM) snprintf(err, errlen, "out of memory applying row gradients");
        if (rc == PS_OK) {
            sh->stats.pushes_applied++;
            ps_members_applied(&sh->members, w, 1, session, seq);
            emit(sh, &ev);
        }
        return rc;
    }
    ps_step_verdict verdict = ps_step_admit(&sh->step, w, step);
    if (verdict == PS_STEP_AHEAD) {
        snprintf(err, errlen, "push for step %llu but the shard is at %llu",
                 (unsigned long long)step, (unsigned long long)sh->step.version);
        return PS_ESTALE;
    }
    if (verdict == PS_STEP_DROP || e->pushed[w]) {
        sh->stats.dropped_pushes++;
        *dropped = 1;
        return PS_OK;
    }
    rc = ps_table_entry_step_add(e, w, ids, n, g);
    if (rc == PS_ENOMEM) snprintf(err, errlen, "out of memory adding row gradients");
    if (rc == PS_OK) {
        ps_members_applied(&sh->members, w, 1, session, seq);
        emit(sh, &ev);
    }
    return rc;
}

void ps_shard_end_step(ps_shard *sh, uint32_t w) {
    ps_step_count(&sh->step, w);
    try_close_step(sh, ps_shard_now(sh));
    emit_worker(sh, PS_EV_END_STEP, w);
}

/* --- replication ------------------------------------------------------------ */

void ps_shard_took_over(ps_shard *sh) {
    uint64_t now = ps_shard_now(sh);
    for (uint32_t w = 0; w < sh->members.n; w++)
        if (ps_members_live(&sh->members, w)) ps_members_seen(&sh->members, w, now);
}

int ps_shard_between_steps(const ps_shard *sh) {
    if (sh->cfg.async) return 1;
    if (sh->step.pushes) return 0;
    for (size_t i = 0; i < sh->tables.n; i++)
        if (sh->tables.v[i]->step_pushes) return 0;
    return 1;
}

void ps_shard_adopt_members(ps_shard *sh, const ps_member *m, uint32_t n) {
    uint64_t now = ps_shard_now(sh);
    sh->members.live = 0;
    for (uint32_t w = 0; w < n && w < sh->members.n; w++) {
        ps_member *d = &sh->members.m[w];
        *d = m[w];
        d->conn = -1;
        d->last_seen_ns = now;
        sh->members.live += d->live;
    }
}

static int diverged(char *err, size_t errlen, const char *what, const ps_shard_event *e) {
    snprintf(err, errlen, "cannot follow: %s (entry of kind %d, version %llu)", what, (int)e->kind,
             (unsigned long long)e->version);
    return PS_EPROTO;
}

static int replay_push(ps_shard *sh, const ps_shard_event *e, char *err, size_t errlen) {
    ps_shard_push_plan pl;
    int rc = ps_shard_push_admit(sh, e->worker, e->step, e->session, e->seq, &pl, err, errlen);
    if (rc != PS_OK) return diverged(err, errlen, "the push is not admitted here", e);
    if (pl.dropped) return diverged(err, errlen, "the push is dropped here", e);
    ps_var *buf[16], **vars = e->n <= 16 ? buf : malloc(e->n * sizeof *vars);
    if (!vars) return PS_ENOMEM;
    for (size_t i = 0; rc == PS_OK && i < e->n; i++)
        if (!(vars[i] = ps_store_find(&sh->store, e->names[i])))
            rc = diverged(err, errlen, "a pushed variable does not exist here", e);
    if (rc == PS_OK)
        ps_shard_push_commit(sh, e->worker, e->clock, e->skipped, vars, e->grads, e->n, &pl);
    if (vars != buf) free(vars);
    return rc;
}

static int replay_rows(ps_shard *sh, const ps_shard_event *e, char *err, size_t errlen) {
    struct ps_table_entry *t = ps_tables_find(&sh->tables, e->name);
    if (!t) return diverged(err, errlen, "the table does not exist here", e);
    if (!ps_members_live(&sh->members, e->worker))
        return diverged(err, errlen, "the worker is not live here", e);
    int dropped;
    uint64_t rows_dropped;
    int rc = ps_shard_push_rows(sh, t, e->worker, e->step, e->session, e->seq, e->ids, e->n,
                                e->values, &dropped, &rows_dropped, err, errlen);
    if (rc == PS_OK && dropped) return diverged(err, errlen, "the row push is dropped here", e);
    return rc == PS_ENOMEM ? rc : rc != PS_OK ? diverged(err, errlen, "row push refused", e) : rc;
}

int ps_shard_replay(ps_shard *sh, const ps_shard_event *e, char *err, size_t errlen) {
    int rc = PS_OK;
    unsigned char *gone;
    switch (e->kind) {
    case PS_EV_CREATE_VAR: {
        ps_var *v;
        if (ps_store_find(&sh->store, e->name))
            return diverged(err, errlen, "the variable exists here", e);
        rc = ps_shard_create_var(sh, e->name, e->rank, e->shape, e->values, &e->opt, &v);
        break;
    }
    case PS_EV_CREATE_TABLE: {
        struct ps_table_entry *t;
        if (ps_tables_find(&sh->tables, e->name))
            return diverged(err, errlen, "the table exists here", e);
        rc = ps_shard_create_table(sh, e->name, e->num_rows, e->table, &t);
        break;
    }
    case PS_EV_CLAIM_JOB:
        if (sh->job_id[0] && strcmp(sh->job_id, e->name) != 0)
            return diverged(err, errlen, "the shard holds another job", e);
        ps_shard_claim_job(sh, e->name);
        break;
    case PS_EV_HELLO:
    case PS_EV_GOODBYE:
    case PS_EV_REMOVE:
    case PS_EV_END_STEP:
        if (!ps_members_valid(&sh->members, e->worker))
            return diverged(err, errlen, "no such worker here", e);
        if (e->kind == PS_EV_HELLO)
            ps_shard_hello(sh, e->worker, -1);
        else if (e->kind == PS_EV_GOODBYE)
            ps_shard_goodbye(sh, e->worker);
        else if (e->kind == PS_EV_END_STEP)
            ps_shard_end_step(sh, e->worker);
        else if ((gone = calloc(sh->members.n, 1)) == NULL)
            return PS_ENOMEM;
        else {
            if (ps_members_remove(&sh->members, e->worker)) {
                gone[e->worker] = 1;
                workers_removed(sh, gone);
            }
            free(gone);
        }
        break;
    case PS_EV_PUSH:
        rc = replay_push(sh, e, err, errlen);
        break;
    case PS_EV_PUSH_ROWS:
        rc = replay_rows(sh, e, err, errlen);
        break;
    default:
        return diverged(err, errlen, "an entry of an unknown kind", e);
    }
    if (rc == PS_OK && sh->step.version != e->version)
        return diverged(err, errlen, "the version differs after it", e);
    return rc;
}
