/* The worker's client library for psd: one DEALER per shard, requests to all
 * shards in flight at once, pull into and push from the caller's buffers.
 * Usable on its own for a custom training loop. Not thread-safe: one thread
 * per client. */
#ifndef PS_CLIENT_H
#define PS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "optim_spec.h"
#include "proto/ps.pb-c.h"

typedef struct ps_client ps_client;

/* A tensor (or row slice of one) that lives on one shard. */
typedef struct {
    char name[96]; /* name on the shard */
    unsigned shard;
    size_t rank;
    size_t shape[2];
    float *param; /* borrowed: pulls write here; CreateVars sends it as the initial value */
    float *grad;  /* borrowed: pushes send this (must stay unchanged until the push returns) */
    ps_opt_spec opt;
} ps_client_tensor;

/* Makes a client for one DEALER per endpoint ("host:port" for tcp, or "ipc://PATH" as
 * is); the sockets connect at the first request (after ps_client_set_curve, if called).
 * Returns PS_OK with *out owned by the caller (ps_client_close), or an error with a
 * reason in err. */
int ps_client_open(ps_client **out, const char *const *endpoints, size_t n_shards,
                   unsigned worker_index, unsigned num_workers, char *err, size_t errlen);
/* CurveZMQ: every socket of the client (request sockets, the ones reopened on
 * reconnect, and the heartbeat thread's) becomes a CURVE client with the key pair
 * in secret_file (psctl keygen's NAME.key) talking to shards whose public key is in
 * server_key_file (the server's .pub). Call before the first request (after one,
 * the sockets are reopened, dropping what was in flight; after the heartbeat has
 * started, PS_EINVAL). Returns PS_OK, PS_EINVAL (a file cannot be read) or
 * PS_EFORMAT (malformed), with a reason in err. */
int ps_client_set_curve(ps_client *c, const char *secret_file, const char *server_key_file,
                        char *err, size_t errlen);
void ps_client_close(ps_client *c);
/* Deadline for one request round (default 120000 ms); sync pulls wait for
 * the slowest worker, so this bounds a barrier too. */
void ps_client_set_timeout(ps_client *c, int timeout_ms);
/* A shard silent this long during a round (default 5000 ms) is probed with a
 * Hello: same process → keep waiting; no answer → reconnect with backoff and
 * jitter and re-send; a new process (restarted from a checkpoint) → re-send
 * (pulls) or PS_ERESTARTED (pushes). */
void ps_client_set_retry(ps_client *c, int attempt_ms);
/* Registers a tensor (copied). PS_OK, PS_EINVAL (bad shard) or PS_ENOMEM. */
int ps_client_add(ps_client *c, const ps_client_tensor *t);
/* Hello to every shard: checks protocol version and job size, joins the
 * expected set, and starts the heartbeat thread (at the interval psd asks).
 * *async is set from the shards' mode (they must agree); *version = the
 * smallest shard version. */
int ps_client_hello(ps_client *c, int *async, uint64_t *version);
/* Names the job the variables belong to (1..PS_WIRE_MAX_JOB_ID bytes of [A-Za-z0-9._-];
 * NULL or "": none, nothing is checked): CreateVars carries it, and a shard holding
 * another job's variables refuses them. PS_OK or PS_EINVAL (a malformed id). */
int ps_client_set_job(ps_client *c, const char *job_id);
/* After ps_client_hello, before creating anything: what the shards hold. PS_EEXIST when
 * a shard holds another job's variables. PS_ELOST when some shards hold variables and
 * others that should hold some (by placement) hold none: they lost them; their indices
 * go to lost_shards[0..cap) (may be NULL) and their count to *n_lost (may be NULL), and
 * the error names them with their addresses. PS_OK otherwise (*n_lost = 0). */
int ps_client_check_shards(ps_client *c, unsigned *lost_shards, size_t cap, size_t *n_lost);
/* Async: this worker's clock (pushes made) as the shards last saw it. */
uint64_t ps_client_worker_clock(const ps_client *c);
/* Checks what the shards said of the job's progress against its size (total_steps
 * per worker): sync, no shard's version is beyond what the job's pushes can close
 * (workers x total_steps; one step per push at most); async, no shard remembers
 * more pushes from this worker than total_steps. Returns PS_OK, or PS_EPROTO naming
 * the shard (ps_client_error): an impossible version is an error, not clamped. */
int ps_client_check_progress(ps_client *c, int async, uint64_t total_steps);
/* Creates every registered tensor on its shard with its current param values;
 * existing ones (same shape) are kept. *created counts new ones (may be NULL). */
int ps_client_create_vars(ps_client *c, size_t *created);
/* Pulls every registered tensor into its param buffer from all shards at once;
 * each shard answers when its version >= min_version. *version = smallest shard version.
 * Every request returns PS_ELOST (naming the shard) when a shard that held this job's
 * variables no longer does (it restarted without a checkpoint); never PS_ENOENT then. */
int ps_client_pull(ps_client *c, uint64_t min_version, uint64_t *version);
/* The training loop's pull: sync, each shard answers with the step this
 * worker last pushed to, once closed (or at once if it pushed nothing since
 * its last pull); async, the newest values, unless --staleness holds this
 * worker (at `clock` pushes) back. */
int ps_client_pull_next(ps_client *c, int async, uint64_t clock, uint64_t *version);
/* Pushes every registered tensor's grad, tagged with `step`, to all shards at once.
 * *applied_all is 1 when every shard completed the step with this push (may be NULL). */
int ps_client_push(ps_client *c, uint64_t step, int *applied_all);
/* The training loop's push: each shard's gradients are tagged with the
 * version pulled from it; `clock` = pushes made before (async). *dropped
 * counts shards that dropped it (its step had closed). PS_ERESTARTED when a
 * shard restarted from a checkpoint meanwhile (pull again and go on). */
int ps_client_push_next(ps_client *c, uint64_t clock, size_t *dropped);
/* The training loop's step exchange, one round trip per shard instead of a
 * push and a pull: each shard gets a PushPull of its gradients (tagged as
 * ps_client_push_next tags them; `clock` = pushes made before, async) whose
 * reply carries its values after the update, copied into the param buffers.
 * A shard's request goes out as soon as all its tensors' gradients are final
 * (ps_client_grads_ready, called during the backward pass), so it travels
 * while the rest of the step is computed; ps_client_step_end sends the rest
 * and waits for every reply. *dropped counts shards that dropped the push
 * (its step had closed); *fresh is 1 when every shard sent values, so the
 * next step can start without a pull (0: pull first, e.g. after a shard
 * restarted: PS_ERESTARTED as for ps_client_push_next). The gradients must
 * stay unchanged until ps_client_step_end returns. */
void ps_client_step_begin(ps_client *c, uint64_t clock);
/* The gradients in [begin, end) are final for this step (tensors whose grad
 * buffer lies inside count as ready). */
void ps_client_grads_ready(ps_client *c, const float *begin, const float *end);
int ps_client_step_end(ps_client *c, size_t *dropped, int *fresh);
/* Tells every shard this worker is done (it leaves the expected set); stops
 * the heartbeat. */
int ps_client_goodbye(ps_client *c);
/* Asks one shard for its stats; *out is owned by the caller
 * (ps__header__free_unpacked(*out, NULL)), its body is stats_reply. */
int ps_client_stats(ps_client *c, unsigned shard, Ps__Header **out);
/* Asks one shard to shut down. */
int ps_client_shutdown(ps_client *c, unsigned shard);
/* The last error's message ("" if none); valid until the next call. */
const char *ps_client_error(const ps_client *c);
size_t ps_client_num_shards(const ps_client *c);

#endif
