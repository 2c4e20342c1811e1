/* The worker's one exchange seam: how a step's gradients become the next
 * step's parameters. The training loop (train.c) talks only to this interface;
 * each way of combining gradients is one implementation file: exchange_ps.c
 * (psd shards through the client), exchange_local.c (--no-ps: the optimizer in
 * this process), exchange_collective.c (all-reduce between the workers). A new
 * strategy is a new file, not a branch in the loop. */
#ifndef PS_EXCHANGE_H
#define PS_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "job_metrics.h"
#include "loss_scale.h"
#include "model.h"
#include "ps_error.h"
#include "train.h"
#include "worker_state.h"

/* Joining the job: what the loop says (in) and where the job is (out). */
typedef struct {
    uint64_t total_steps; /* in: this worker's steps over the whole job (epochs x steps) */
    uint64_t steps_per_epoch; /* in: this worker's steps per epoch (local SGD rounds end with
                               *     each epoch); 0: not known */
    unsigned *recreated;  /* in: where the chief lists shards whose lost variables it */
    size_t recreated_cap; /*     re-created (may be NULL / 0) */
    size_t n_recreated;   /* out: how many it listed */
    int async;            /* out: the job's mode (1 async, 0 sync) */
    uint64_t clock;       /* out: steps this worker's job has done (0: a fresh job) */
    ps_loss_scale *scaler; /* in/out: the loop's loss scaler (mixed_float16), NULL: none;
                            * all-reduce restores it from the chief's checkpoint and
                            * gives every rank the chief's, and checkpoints it */
} ps_exchange_job;

/* One strategy's operations, each on the implementation's state `self`.
 * Every int-returning op returns PS_OK or an error with a one-line reason in
 * err. Called in this order: join once; per step step_begin, the model's
 * backward pass (grads_ready for each range whose gradients are final),
 * step_end; eval_sync before the chief evaluates; finish once after the last
 * step (only when all went well); free last, always. */
typedef struct {
    const char *name; /* for logs, e.g. "local" */
    /* Makes the parameters the job's current ones and says where the job is
     * (hello, create or wait for the variables, check the progress). */
    int (*join)(void *self, ps_exchange_job *job, char *err, size_t errlen);
    /* Before the step `clock` (steps done) computes: the parameters must hold
     * the values it starts from when this returns. */
    int (*step_begin)(void *self, uint64_t clock, char *err, size_t errlen);
    /* During the backward pass: the gradients in [begin, end) are final for
     * this step (the model's gradient hook). NULL: nothing to do. */
    void (*grads_ready)(void *self, const float *begin, const float *end);
    /* After the backward pass: the step's gradients are complete; apply or
     * exchange them. A step a shard dropped or lost to a restart is not an error. */
    int (*step_end)(void *self, char *err, size_t errlen);
    /* Loss scaling (mixed_float16), in place of step_end: the gradients are
     * unscaled and complete (grads_ready was not called: step_end_checked hands
     * them all on), bad = 1 when this worker's hold an inf or NaN. The strategy
     * decides whether the step updates the variables and sets *skipped = 1 when
     * it did not: --no-ps and psd, this worker's bad (psd: the push still goes,
     * flagged skipped, so a sync step can close); all-reduce, the reduced
     * gradient's check, so every replica skips together. */
    int (*step_end_checked)(void *self, int bad, int *skipped, char *err, size_t errlen);
    /* Before an evaluation: the parameters become the values to evaluate
     * (NULL: they already are). newest = 0: those after this worker's `clock` steps (sync) or once
     * every worker's pushes up to version `want` are in (async); newest = 1: the newest there are.
     */
    int (*eval_sync)(void *self, int newest, uint64_t clock, uint64_t want, char *err,
                     size_t errlen);
    /* The job is done for this worker (goodbye); failures are only logged.
     * NULL: nothing to say. */
    void (*finish)(void *self);
    /* After a failure: 1 when it was another worker's (a dead, silent or faulty
     * peer, replicas that diverged), not this one's. NULL: never. */
    int (*peer_failed)(void *self);
    /* Frees self and everything it owns. */
    void (*free)(void *self);
    /* Gradient payload bytes this worker has put on the wire so far (pushes to psd,
     * all-reduce frames). NULL: none are sent. */
    uint64_t (*bytes_sent)(void *self);
    /* Every worker, after the last step of epoch e->epoch (before the chief's
     * evaluation): the job-wide sums of the training metrics. e comes with
     * e->mine and total = mine (ps_job_metrics_begin); the strategy sets total,
     * reported and each to the workers' (psd: each worker reports to shard 0,
     * the chief asks for the totals; all-reduce: an all-gather, every rank gets
     * them). Sums it cannot get (psd did not answer) are logged and e keeps this
     * worker's own: an error only when training cannot go on (a broken ring).
     * NULL: this worker's own (--no-ps). */
    int (*reduce_metrics)(void *self, ps_job_epoch *e, char *err, size_t errlen);
    /* Embedding tables (the model's Embedding layers, emb_tables.h), after join:
     * rows_pull writes the rows of n distinct ids of table e (the values this
     * step starts from) into out[n * dim]; rows_push hands on their gradients
     * (d(mean loss)/d(row)), before step_end, `last` set on the step's last
     * one: a strategy may send them at once
     * (psd: ahead of the step's dense push on the same sockets) or keep them
     * for step_end. NULL: the strategy keeps no tables (its open refuses a
     * model that has some). */
    int (*rows_pull)(void *self, size_t e, const uint64_t *ids, size_t n, float *out, char *err,
                     size_t errlen);
    int (*rows_push)(void *self, size_t e, const uint64_t *ids, size_t n, const float *grads,
                     int last, char *err, size_t errlen);
    /* After join: this worker's own state that a resumed job needs and that no
     * checkpoint of the variables holds (top-k residuals, local SGD's optimizer),
     * added to s as entries pointing into the strategy's buffers (worker_state.h:
     * the loop saves and loads them). PS_OK or PS_ENOMEM. NULL: none. */
    int (*state)(void *self, ps_wstate *s);
    /* An elastic job (psworker --elastic): the live workers' indices as shard 0 knows
     * them now, ascending, into ids (cap entries; *n: how many there are), and the
     * fewest live workers its steps close with into *min (0: all expected). PS_OK or an
     * error with err set. NULL: the strategy has no live set (only psd has). */
    int (*live_workers)(void *self, unsigned *ids, size_t cap, size_t *n, unsigned *min,
                        char *err, size_t errlen);
} ps_exchange_ops;

/* An exchange: the strategy's operations and its state (owned). Embedded in
 * its owner; ops == NULL: none made yet. */
typedef struct {
    const ps_exchange_ops *ops;
    void *self;
} ps_exchange;

/* psd shards through the client (exchange_ps.c): registers the model's
 * variables (placed over cfg->n_ps shards) with a new client; per step one
 * PushPull round trip per shard, sent as soon as its gradients are final, or
 * with cfg->separate_pull a pull then a push. cfg and m are borrowed and must
 * outlive the exchange. Returns PS_OK with *out set (ps_exchange_free), or an
 * error with a reason in err (*out then holds nothing). */
int ps_exchange_ps_open(const ps_train_config *cfg, ps_model *m, ps_exchange *out, char *err,
                        size_t errlen);
/* The optimizer in this process (exchange_local.c, --no-ps): the same
 * formulas psd applies, on m's own parameters after each step; the model's
 * embedding tables held whole here (rows start as psd's would with this
 * seed). m is borrowed and must outlive the exchange. Returns PS_OK with *out
 * set (ps_exchange_free), or PS_ENOMEM / PS_EINVAL (a table it cannot hold, an
 * optimizer the rows cannot take) with a reason in err. */
int ps_exchange_local_open(ps_model *m, uint64_t seed, ps_exchange *out, char *err,
                           size_t errlen);

/* The all-reduce strategies (exchange_collective.c, --strategy mirrored |
 * multi_worker_mirrored): every worker holds the variables and runs the
 * optimizer (local_opt.c, as --no-ps) on the mean of all workers' gradients,
 * summed over a ring (collective/ring.h) between the cfg->peers, in buckets of
 * at least cfg->bucket_bytes started as the backward pass makes them final.
 * The chief's initial variables (or its checkpoint in cfg->checkpoint_dir,
 * with the clock) are broadcast at join; the variables' checksums are
 * compared every cfg->check_every steps. cfg and m are borrowed and must
 * outlive the exchange. Returns PS_OK with *out set (ps_exchange_free), or an
 * error with a reason in err (PS_EINVAL: a configuration the strategy cannot
 * run, e.g. --communication nccl without NCCL). */
int ps_exchange_collective_open(const ps_train_config *cfg, ps_model *m, ps_exchange *out,
                                char *err, size_t errlen);

/* Local SGD (exchange_localsgd.c, --sync-every K > 1): wraps the strategy
 * `inner` (psd, or all-reduce opened with cfg->sync_every > 1; taken over: freed
 * with the wrapper, also on failure). Every worker takes K steps with the
 * optimizer in this process (local_opt.c), then hands inner its K-step delta
 * (the variables at the round's start minus its own now) as the gradient of one
 * inner step, with the variables put back to the round's start: psd applies
 * the deltas with SGD rate 1 (sync: their mean, so the result is the mean of
 * the workers' variables; async: each as it arrives), the all-reduce
 * subtracts their mean. A round also ends with each epoch (its last round may
 * be shorter). The inner strategy's clock counts rounds. Returns PS_OK with
 * *out set, or PS_ENOMEM with a reason in err. */
int ps_exchange_localsgd_open(const ps_train_config *cfg, ps_model *m, ps_exchange *inner,
                              ps_exchange *out, char *err, size_t errlen);
/* The optimizer the variables get on psd under local SGD: SGD with learning
 * rate 1 (w -= the workers' mean delta), like the moving statistics'. */
ps_opt_spec ps_localsgd_delta_opt(void);

/* 1 when this build can sum with NCCL (--communication nccl), else 0. */
int ps_exchange_nccl_built(void);

/* The loop's calls: each forwards to the strategy (see ps_exchange_ops). */
static inline int ps_exchange_join(ps_exchange *ex, ps_exchange_job *job, char *err,
                                   size_t errlen) {
    return ex->ops->join(ex->self, job, err, errlen);
}
static inline int ps_exchange_step_begin(ps_exchange *ex, uint64_t clock, char *err,
                                         size_t errlen) {
    return ex->ops->step_begin(ex->self, clock, err, errlen);
}
static inline void ps_exchange_grads_ready(ps_exchange *ex, const float *begin, const float *end) {
    if (ex->ops->grads_ready) ex->ops->grads_ready(ex->self, begin, end);
}
static inline int ps_exchange_step_end(ps_exchange *ex, char *err, size_t errlen) {
    return ex->ops->step_end(ex->self, err, errlen);
}
static inline int ps_exchange_step_end_checked(ps_exchange *ex, int bad, int *skipped, char *err,
                                               size_t errlen) {
    return ex->ops->step_end_checked(ex->self, bad, skipped, err, errlen);
}
static inline int ps_exchange_eval_sync(ps_exchange *ex, int newest, uint64_t clock, uint64_t want,
                                        char *err, size_t errlen) {
    return ex->ops->eval_sync ? ex->ops->eval_sync(ex->self, newest, clock, want, err, errlen)
                              : PS_OK;
}
static inline int ps_exchange_reduce_metrics(ps_exchange *ex, ps_job_epoch *e, char *err,
                                             size_t errlen) {
    return ex->ops->reduce_metrics ? ex->ops->reduce_metrics(ex->self, e, err, errlen) : PS_OK;
}
static inline int ps_exchange_rows_pull(ps_exchange *ex, size_t e, const uint64_t *ids, size_t n,
                                        float *out, char *err, size_t errlen) {
    return ex->ops->rows_pull(ex->self, e, ids, n, out, err, errlen);
}
static inline int ps_exchange_rows_push(ps_exchange *ex, size_t e, const uint64_t *ids, size_t n,
                                        const float *grads, int last, char *err, size_t errlen) {
    return ex->ops->rows_push(ex->self, e, ids, n, grads, last, err, errlen);
}
static inline int ps_exchange_state(ps_exchange *ex, ps_wstate *s) {
    return ex->ops->state ? ex->ops->state(ex->self, s) : PS_OK;
}
static inline void ps_exchange_finish(ps_exchange *ex) {
    if (ex->ops->finish) ex->ops->finish(ex->self);
}
static inline int ps_exchange_peer_failed(ps_exchange *ex) {
    return ex->ops && ex->ops->peer_failed ? ex->ops->peer_failed(ex->self) : 0;
}
/* Frees the strategy's state; an exchange never made is left alone. */
static inline void ps_exchange_free(ps_exchange *ex) {
    if (ex->ops) ex->ops->free(ex->self);
    ex->ops = NULL;
    ex->self = NULL;
}

#endif
