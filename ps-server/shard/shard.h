/* A parameter-server shard as a state machine with no I/O: requests in (plain C
 * types, already decoded and checked against the wire's rules by the server),
 * state changes and answers out. It owns the variables (store.h), the embedding
 * tables (tables.h), the expected set of workers (members.h), the version and
 * the open sync step (step.h) and the deferred pulls (pending.h); the server
 * around it adapts protobuf, the transport, HTTP and checkpoints.
 *
 * A request's own answer is the caller's to send (the functions say what it is);
 * answers to deferred pulls, which another request or the clock releases, go
 * through ps_shard_out. Time comes from the clock given at init, so tests run it
 * with simulated time. One thread: nothing here locks. */
#ifndef PS_SHARD_H
#define PS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "job_id.h"
#include "members.h"
#include "pending.h"
#include "step.h"
#include "store.h"
#include "tables.h"

/* Upper bounds (seconds) of the apply-latency histogram buckets (+Inf last). */
#define PS_LAT_BUCKETS 14
extern const double ps_shard_lat_bounds[PS_LAT_BUCKETS];

typedef struct {
    int async;             /* 0: sync steps; 1: each push applied on arrival */
    uint32_t workers;      /* workers in the job */
    uint32_t to_aggregate; /* sync: pushes that close a step (0: every live worker) */
    uint32_t workers_min;  /* sync: steps close only with this many live; a slot is live
                            * from its Hello (0: all expected from the start) */
    long staleness;        /* async: max clock lead over the slowest live worker (-1: none) */
    long shard;            /* this shard's index (in messages) */
    uint64_t worker_timeout_ns, tick_ns; /* membership (members.h) */
    ps_pending_limits pending;
    uint64_t max_table_bytes; /* --max-table-mb */
} ps_shard_config;

typedef struct {
    uint64_t pushes_applied, stale_pushes, updates_applied, dropped_pushes;
    uint64_t max_staleness, staleness_waits;
    uint64_t apply_nomem;    /* updates (or parts) dropped: out of memory applying them */
    uint64_t retried_pushes; /* pushes whose (session, seq) was applied before: not again */
    uint64_t lat_buckets[PS_LAT_BUCKETS + 1]; /* optimizer applies by duration; last: +Inf */
    double lat_sum;                           /* seconds */
    uint64_t lat_count;
} ps_shard_stats;

/* A change of the shard's state, as a log entry: the shard's inputs once they
 * were checked, in the order it applied them. A second shard that replays the
 * same entries in the same order (ps_shard_replay) holds the same bytes: the
 * state machine is deterministic in its inputs, and what depends on the clock
 * (a worker removed for silence, or because its connection closed) enters the
 * log as its outcome, not as the time. The pointers are valid during the
 * callback only. */
typedef enum {
    PS_EV_CREATE_VAR,   /* name, rank, shape, values (init), opt */
    PS_EV_CREATE_TABLE, /* name, num_rows, table */
    PS_EV_CLAIM_JOB,    /* name (the job id) */
    PS_EV_HELLO,        /* worker */
    PS_EV_GOODBYE,      /* worker */
    PS_EV_REMOVE,       /* worker (silent past the timeout, or its connection closed) */
    PS_EV_PUSH,         /* worker, step, clock, session, seq, skipped, n, names, grads */
    PS_EV_PUSH_ROWS,    /* name (the table), worker, step, n (ids), ids, values (grads) */
    PS_EV_END_STEP,     /* worker */
} ps_shard_event_kind;

typedef struct {
    ps_shard_event_kind kind;
    uint32_t worker;
    uint64_t step, clock, session, seq;
    int skipped;
    const char *name;
    size_t rank;
    const uint64_t *shape;
    const float *values;
    ps_opt_spec opt;
    uint64_t num_rows;
    const ps_table_cfg *table;
    size_t n;
    const char *const *names;  /* PS_EV_PUSH: n variable names */
    const float *const *grads; /* PS_EV_PUSH: n gradients */
    const uint64_t *ids;       /* PS_EV_PUSH_ROWS: n ids */
    uint64_t version;          /* the shard's version after the entry */
} ps_shard_event;

/* Answers to deferred pulls, released by a closed step, a push, a membership
 * change, the clock or the stop (the pull is removed right after the call). */
typedef struct {
    void *ctx;
    /* p can be answered now: its values (p->vars) or rows (p->table, p->ids) */
    void (*answer)(void *ctx, ps_pending_pull *p);
    /* p fails: PS_ETIMEDOUT, PS_EREJOIN, PS_ESHUTDOWN */
    ps_pending_answer_fn *fail;
    /* every change of state, in order (NULL: not logged) */
    void (*log)(void *ctx, const ps_shard_event *e);
} ps_shard_out;

typedef uint64_t ps_shard_clock_fn(void *ctx); /* ns on a monotonic clock */

typedef struct {
    ps_shard_config cfg;
    ps_shard_clock_fn *clock;
    void *clock_ctx;
    ps_shard_out out;
    ps_store store;
    ps_tables tables;
    ps_members members;
    ps_step step; /* step.version: the shard's version */
    ps_pending pending;
    ps_shard_stats stats;
    /* the job whose variables the shard holds: from the first CreateVars or
     * CreateTable naming one, or from the checkpoint restored; "" none */
    char job_id[PS_WIRE_MAX_JOB_ID + 1];
    int stopping; /* every deferred pull is answered ESHUTDOWN from now on */
} ps_shard;

/* PS_OK or PS_ENOMEM (the shard is then freed). */
int ps_shard_init(ps_shard *sh, const ps_shard_config *cfg, ps_shard_clock_fn *clock,
                  void *clock_ctx, const ps_shard_out *out);
void ps_shard_free(ps_shard *sh);
uint64_t ps_shard_now(const ps_shard *sh);

/* --- membership ------------------------------------------------------------ */
/* PS_OK, or PS_EINVAL with the reason when w is not a worker index of the job. */
int ps_shard_check_worker(const ps_shard *sh, uint32_t w, char *err, size_t errlen);
/* Any sign of life from w (a request naming it, a heartbeat). */
void ps_shard_seen(ps_shard *sh, uint32_t w);
/* Hello on connection `conn` (-1: unknown): w (re)joins the expected set. 1 when
 * it was not in it. */
int ps_shard_hello(ps_shard *sh, uint32_t w, int conn);
/* Goodbye: w leaves, finished; what that unblocks is answered. 1 when it was live. */
int ps_shard_goodbye(ps_shard *sh, uint32_t w);
/* Sync with cfg.workers_min: 1 while fewer workers than that are live (steps wait). */
int ps_shard_below_min(const ps_shard *sh);
/* The clock's tick: removes the workers silent past the timeout (gone[w] set for
 * each, gone has cfg.workers entries), answers what that unblocks, fails the
 * removed workers' pulls (EREJOIN) and the pulls past their deadline
 * (ETIMEDOUT). Returns how many workers were removed. */
uint32_t ps_shard_tick(ps_shard *sh, unsigned char *gone);
/* Connection `conn` closed: its deferred pulls are dropped unanswered (returned in
 * *pulls), and the workers whose Hello came on it are removed at once, without
 * waiting for their timeout (gone[w] set for each); what that unblocks is
 * answered. Returns how many workers were removed. */
uint32_t ps_shard_disconnected(ps_shard *sh, int conn, unsigned char *gone, size_t *pulls);

/* --- variables ------------------------------------------------------------- */
/* Whether `job` may create variables or tables here: PS_OK, or PS_EINVAL (a bad
 * id) or PS_EEXIST (the shard holds another job's) with the reason. */
int ps_shard_check_job(const ps_shard *sh, const char *job, char *err, size_t errlen);
/* The shard belongs to `job` from now on, unless it belongs to one already. */
void ps_shard_claim_job(ps_shard *sh, const char *job);
/* Creates a variable (checked: a new name, finite values) with its optimizer.
 * PS_OK or PS_ENOMEM. */
int ps_shard_create_var(ps_shard *sh, const char *name, size_t rank, const uint64_t *shape,
                        const float *init, const ps_opt_spec *opt, ps_var **out);
/* Creates a table (checked: a new name, a valid config). PS_OK or PS_ENOMEM. */
int ps_shard_create_table(ps_shard *sh, const char *name, uint64_t num_rows,
                          const ps_table_cfg *cfg, struct ps_table_entry **out);

/* --- replication ------------------------------------------------------------ */
/* Applies one entry of another shard's log (a backup following its primary).
 * PS_OK; PS_EPROTO when it cannot apply here (err says why: the two have
 * diverged, the backup must start again from a snapshot); PS_ENOMEM. */
int ps_shard_replay(ps_shard *sh, const ps_shard_event *e, char *err, size_t errlen);

/* A backup takes over: the workers it knows from the log count as seen now (their
 * silence is measured from here, not from the entries that named them). */
void ps_shard_took_over(ps_shard *sh);
/* 1 when no sync step is open (async: always): the state a checkpoint or a
 * backup's snapshot can hold whole (they do not carry a step's partial sums). */
int ps_shard_between_steps(const ps_shard *sh);
/* A backup given its primary's snapshot: the members as the primary had them
 * (the expected set, Goodbyes, clocks, the last applied push of each), seen now. */
void ps_shard_adopt_members(ps_shard *sh, const ps_member *m, uint32_t n);

/* --- pulls ----------------------------------------------------------------- */
typedef struct {
    uint64_t request_id, min_version, clock;
    int has_worker, push_pull, applied, dropped; /* push_pull: its push's outcome */
    uint32_t worker;
} ps_shard_pull_req;

/* A pull (or a PushPull's pull) of vars[0..n), from the connection `from`:
 * returns 1 when it can be answered now (the caller answers it), 0 when it was
 * deferred (answered later through out), or an error: PS_ESTALE (sync: a
 * version beyond the open step's; the client must resync), PS_EBUSY, PS_ENOMEM. */
int ps_shard_pull(ps_shard *sh, const void *identity, size_t identity_len, int fd,
                  const ps_shard_pull_req *p, ps_var *const *vars, size_t n, char *err,
                  size_t errlen);
/* A row pull of ids[0..n) of table e: as ps_shard_pull (no staleness gate). */
int ps_shard_pull_rows(ps_shard *sh, const void *identity, size_t identity_len, int fd,
                       uint64_t request_id, uint64_t min_version, struct ps_table_entry *e,
                       const uint64_t *ids, size_t n, char *err, size_t errlen);
/* Answers every deferred pull that can be answered now (all of them, ESHUTDOWN,
 * once stopping). */
void ps_shard_answer_pending(ps_shard *sh);
/* Stops: every deferred pull is answered ESHUTDOWN, now and from now on. */
void ps_shard_stop(ps_shard *sh);

/* --- pushes ---------------------------------------------------------------- */
/* What a push does, decided before its gradients are used. */
typedef struct {
    uint64_t session, seq; /* the push's identity (seq 0: unchecked) */
    int retry;             /* (session, seq) was applied before: answered, not applied again */
    int dropped;           /* sync: for a closed step, or a second one; a retry: nothing to apply */
    int applied;           /* async: applied; sync: the step closes with this push */
    int direct;            /* sync: this push alone closes the step: applied without averaging */
} ps_shard_push_plan;

/* Checks that w may push: a worker index of the job (else PS_EINVAL) in the
 * expected set (else PS_EREJOIN: it must say Hello again); counts as a sign of
 * life either way. */
int ps_shard_admit_worker(ps_shard *sh, uint32_t w, char *err, size_t errlen);
/* Admits a push of worker w for `step` (sync; async: any) with the identity
 * (session, seq): PS_OK with the plan (a dropped push is counted; a retry of one
 * applied before is dropped too, in either mode), or PS_EINVAL (no such worker),
 * PS_EREJOIN (not in the expected set) or PS_ESTALE (the shard is behind the
 * worker). Changes nothing but w's liveness and the dropped-push counters. */
int ps_shard_push_admit(ps_shard *sh, uint32_t w, uint64_t step, uint64_t session, uint64_t seq,
                        ps_shard_push_plan *pl, char *err, size_t errlen);
/* Uses an admitted push's gradients grads[i] for vars[i] (checked: shapes,
 * finite): async, applies them (a new version); sync, adds them to the step,
 * closing it when this push completes it. A skipped push (the worker's
 * gradients overflowed) counts the same but adds nothing. Answers what it
 * releases. */
void ps_shard_push_commit(ps_shard *sh, uint32_t w, uint64_t clock, int skipped,
                          ps_var *const *vars, const float *const *grads, size_t n,
                          const ps_shard_push_plan *pl);
/* Row gradients g (n x e's dim) for ids[0..n) of table e from worker w (checked:
 * ids in range, finite), with the identity (session, seq): sync, added to the
 * open step (dropped, counted, for a closed step or a second push); async,
 * applied now (*rows_dropped: rows a full table refused). A retry of one
 * applied before sets *dropped to PS_SHARD_ROWS_RETRY and changes nothing.
 * PS_OK, PS_ESTALE or PS_ENOMEM. */
#define PS_SHARD_ROWS_RETRY 2
int ps_shard_push_rows(ps_shard *sh, struct ps_table_entry *e, uint32_t w, uint64_t step,
                       uint64_t session, uint64_t seq, const uint64_t *ids, size_t n,
                       const float *g, int *dropped, uint64_t *rows_dropped, char *err,
                       size_t errlen);
/* Sync: worker w's pushes for the open step are in (a PushRows that ends its
 * step); the step closes when enough are. */
void ps_shard_end_step(ps_shard *sh, uint32_t w);

#endif
