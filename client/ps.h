/* libps: the public client library for psd shards (pull, push, the training step's
 * exchange, placement, admin requests). No protobuf or ZeroMQ types appear here. */
#ifndef PS_H
#define PS_H

#include <stddef.h>
#include <stdint.h>

#include "optim_spec.h"
#include "ps_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PS_API __attribute__((visibility("default")))

/* Conventions: every function that can fail returns PS_OK (0) or a negative ps_err
 * (ps_error.h) and keeps a one-line reason readable with ps_client_error(c) until the
 * next call on the same client. The library never exits and never prints: its log
 * lines go to the callback set with ps_lib_set_log (none by default). A ps_client is
 * not thread-safe: every call on one client must come from one thread at a time
 * (different clients may be used from different threads). Functions that are
 * thread-safe say so. */

typedef struct ps_client ps_client;

/* ---- logging ---------------------------------------------------------------------- */

typedef enum {
    PS_LIB_LOG_DEBUG = 0,
    PS_LIB_LOG_INFO,
    PS_LIB_LOG_WARN,
    PS_LIB_LOG_ERROR
} ps_lib_log_level;

/* Receives one line (no newline) at `level`; user as given to ps_lib_set_log. */
typedef void (*ps_lib_log_fn)(void *user, ps_lib_log_level level, const char *line);

/* Process-wide: lines at `min_level` or above go to fn (NULL: dropped, the default).
 * Call before any client is opened; not thread-safe against clients logging at the same
 * time. fn may be called from any thread that uses a client. */
PS_API void ps_lib_set_log(ps_lib_log_fn fn, void *user, ps_lib_log_level min_level);

/* ---- placement (thread-safe: no state) ------------------------------------------- */

/* A variable to place: a name and a shape (rank 0: a scalar). */
typedef struct {
    const char *name;
    size_t rank;
    const size_t *shape; /* rank entries, each > 0 */
} ps_var_desc;

/* Where one variable, or a row range of it, lives. */
typedef struct {
    size_t var;                /* index into the input array */
    unsigned shard;            /* 0 .. num_shards-1 */
    unsigned part, num_parts;  /* num_parts == 1: the whole variable */
    size_t row_begin, row_end; /* rows [row_begin, row_end) of shape[0] */
    char name[96];             /* its name on the shard: the variable's, or "<name>/part_<k>" */
} ps_piece;

/* The placement every psworker computes: a variable of B bytes (float32) is split by
 * rows (its first dimension) into min(num_shards, rows, ceil(B / 256 KiB)) parts, and
 * pieces go largest first to the least loaded shard. The same inputs give the same
 * placement everywhere. On PS_OK *pieces (caller frees with ps_pieces_free) holds
 * *n_pieces pieces in input order (var, then part). PS_EINVAL (bad names or shapes,
 * num_shards 0) or PS_ENOMEM with a reason in err; *pieces is then NULL. */
PS_API int ps_place_vars(const ps_var_desc *vars, size_t n, unsigned num_shards, ps_piece **pieces,
                         size_t *n_pieces, char *err, size_t errlen);
/* Frees what ps_place_vars returned; NULL is ignored. */
PS_API void ps_pieces_free(ps_piece *pieces);

/* ---- optimizer specs (thread-safe: no state) ------------------------------------- */

/* Reads an optimizer spec from JSON text in the model spec's form (optim_spec.h,
 * ps_opt_spec_from_json): a quoted name ("\"adam\"") or an object {"name": "adam",
 * "learning_rate": 0.01, ...} with Keras's keys; the kind's defaults fill the rest.
 * Writes *out on success only. PS_OK, PS_EFORMAT (not JSON, an unknown name or key:
 * err names it) or PS_EINVAL (a value out of range, a NULL argument). */
PS_API int ps_opt_spec_from_json_text(const char *json, ps_opt_spec *out, char *err,
                                      size_t errlen);

/* ---- the cluster from TensorFlow's TF_CONFIG (thread-safe: no state) ------------- */

/* A worker's view of TF_CONFIG, by psworker's rules: ps_list gets cluster.ps joined by
 * commas ("host:port", "ipc://PATH" or a replica group "ADDR|ADDR", each checked), *index
 * the task's worker index (a "chief" is worker 0 and "worker" i is i + 1 when a chief is
 * listed), *num_workers chief + workers. PS_OK; PS_EFORMAT (not JSON, wrong types) or
 * PS_EINVAL (no task, a task that is not a worker or chief, no cluster.ps, a bad address,
 * ps_len too small), with a reason in err (ps_list is then ""). */
PS_API int ps_tf_config_worker(const char *json, char *ps_list, size_t ps_len, unsigned *index,
                               unsigned *num_workers, char *err, size_t errlen);

/* ---- a client --------------------------------------------------------------------- */

/* Thread-safety of everything below that takes a ps_client: one thread at a time per
 * client (the heartbeat thread a client starts shares nothing with the caller's). */

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

/* Makes a client for one connection per endpoint ("host:port" for tcp, or
 * "ipc://PATH"); the sockets connect at the first request (after ps_client_set_curve, if
 * called). An endpoint may instead list a shard's replica group, its addresses separated
 * by '|' ("10.0.0.1:5000|10.0.0.2:5000", at most 8, the initial primary first): the shard
 * is still one entry of endpoints, and the client talks to the replica that is its
 * group's primary, failing over to the next one (round robin) when the one in use says it
 * is not the primary, drops its connection or goes silent, and re-sending the request in
 * flight there (within the request's timeout; one INFO log line per fail-over). Returns
 * PS_OK with *out owned by the caller (ps_client_close); PS_EINVAL for no endpoints or a
 * malformed one (an empty replica, more than 8), PS_ENOMEM, with a reason in err (*out
 * NULL). */
PS_API int ps_client_open(ps_client **out, const char *const *endpoints, size_t n_shards,
                          unsigned worker_index, unsigned num_workers, char *err, size_t errlen);
/* CurveZMQ: every socket of the client (request sockets, the ones reopened on
 * reconnect, and the heartbeat thread's) becomes a CURVE client with the key pair
 * in secret_file (psctl keygen's NAME.key) talking to shards whose public key is in
 * server_key_file (the server's .pub). Call before the first request (after one,
 * the sockets are reopened, dropping what was in flight; after the heartbeat has
 * started, PS_EINVAL). Returns PS_OK, PS_EINVAL (a file cannot be read) or
 * PS_EFORMAT (malformed), with a reason in err. */
PS_API int ps_client_set_curve(ps_client *c, const char *secret_file, const char *server_key_file,
                               char *err, size_t errlen);
/* Stops the heartbeat, closes the sockets, frees c; NULL is ignored. No other call on c
 * may run at the same time or after it. */
PS_API void ps_client_close(ps_client *c);
/* Deadline for one request round (default 120000 ms; > 0); sync pulls wait for
 * the slowest worker, so this bounds a barrier too. PS_OK or PS_EINVAL. */
PS_API int ps_client_set_timeout(ps_client *c, int timeout_ms);
/* A shard silent this long during a round (default 5000 ms) is probed with a
 * Hello: same process → keep waiting; no answer → reconnect with backoff and
 * jitter and re-send; a new process (restarted from a checkpoint) → re-send
 * (pulls) or PS_ERESTARTED (pushes). Values < 1 count as 1. PS_OK. */
PS_API int ps_client_set_retry(ps_client *c, int attempt_ms);
/* Lets "host:port" endpoints resolve to IPv6 as well (default off). Call before the
 * first request. PS_OK. */
PS_API int ps_client_set_ipv6(ps_client *c, int on);
/* Registers a tensor (copied). PS_OK, PS_EINVAL (bad shard, name or shape) or PS_ENOMEM. */
PS_API int ps_client_add(ps_client *c, const ps_client_tensor *t);
/* Hello to every shard: checks protocol version and job size, joins the
 * expected set, and starts the heartbeat thread (at the interval psd asks).
 * *async is set from the shards' mode (they must agree); *version = the
 * smallest shard version (either may be NULL). Must come before pull, push and the
 * step exchange, which name this worker (else PS_EINVAL). */
PS_API int ps_client_hello(ps_client *c, int *async, uint64_t *version);
/* Names the job the variables belong to (1..64 bytes of [A-Za-z0-9._-];
 * NULL or "": none, nothing is checked): CreateVars carries it, and a shard holding
 * another job's variables refuses them. PS_OK or PS_EINVAL (a malformed id). */
PS_API int ps_client_set_job(ps_client *c, const char *job_id);
/* After ps_client_hello, before creating anything: what the shards hold. PS_EEXIST when
 * a shard holds another job's variables. PS_ELOST when some shards hold variables and
 * others that should hold some (by placement) hold none: they lost them; their indices
 * go to lost_shards[0..cap) (may be NULL) and their count to *n_lost (may be NULL), and
 * the error names them with their addresses. PS_OK otherwise (*n_lost = 0). */
PS_API int ps_client_check_shards(ps_client *c, unsigned *lost_shards, size_t cap, size_t *n_lost);
/* Async: this worker's clock (pushes made) as the shards last saw it (0 before hello). */
PS_API uint64_t ps_client_worker_clock(const ps_client *c);
/* Checks what the shards said of the job's progress against its size (total_steps
 * per worker): sync, no shard's version is beyond what the job's pushes can close
 * (workers x total_steps; one step per push at most); async, no shard remembers
 * more pushes from this worker than total_steps. Returns PS_OK, or PS_EPROTO naming
 * the shard: an impossible version is an error, not clamped. */
PS_API int ps_client_check_progress(ps_client *c, int async, uint64_t total_steps);
/* Creates every registered tensor on its shard with its current param values;
 * existing ones (same shape) are kept. *created counts new ones (may be NULL). */
PS_API int ps_client_create_vars(ps_client *c, size_t *created);
/* Pulls every registered tensor into its param buffer from all shards at once;
 * each shard answers when its version >= min_version. *version = smallest shard version.
 * Every request returns PS_ELOST (naming the shard) when a shard that held this job's
 * variables no longer does (it restarted without a checkpoint); never PS_ENOENT then. */
PS_API int ps_client_pull(ps_client *c, uint64_t min_version, uint64_t *version);
/* The training loop's pull: sync, each shard answers with the step this
 * worker last pushed to, once closed (or at once if it pushed nothing since
 * its last pull); async, the newest values, unless --staleness holds this
 * worker (at `clock` pushes) back. */
PS_API int ps_client_pull_next(ps_client *c, int async, uint64_t clock, uint64_t *version);
/* Pushes every registered tensor's grad, tagged with `step`, to all shards at once.
 * *applied_all is 1 when every shard completed the step with this push (may be NULL). */
PS_API int ps_client_push(ps_client *c, uint64_t step, int *applied_all);
/* The training loop's push: each shard's gradients are tagged with the
 * version pulled from it; `clock` = pushes made before (async). *dropped
 * counts shards that dropped it (its step had closed). PS_ERESTARTED when a
 * shard restarted from a checkpoint meanwhile (pull again and go on). */
PS_API int ps_client_push_next(ps_client *c, uint64_t clock, size_t *dropped);
/* skipped = 1: the pushes that follow (ps_client_push, _push_next, the step
 * exchange's PushPulls) carry Push.skipped: the step's gradients overflowed
 * (mixed_float16 loss scaling), so psd counts the push (sync: towards closing
 * the step; async: the worker's clock and the version) but applies nothing and
 * does not check the values. 0 (the default) turns it off. */
PS_API void ps_client_set_push_skipped(ps_client *c, int skipped);

/* ---- embedding tables: rows by id ------------------------------------------------- */

/* An embedding table of [rows, dim] floats addressed by 64-bit id, spread over
 * every shard by a hash of (table, id): a pull or push costs the rows it names,
 * never the table's size. A row not stored yet reads as its initial values
 * (uniform in [init_lo, init_hi), from seed, table name and id: the same on
 * every process). Dynamic tables (num_rows 0) take any id; min_count,
 * ttl_steps and max_rows apply to them (docs/ARCHITECTURE.md, "Embedding
 * tables"). */
typedef struct {
    const char *name;      /* 1..255 bytes; not a dense variable's name */
    uint64_t dim;          /* 1..65536 */
    uint64_t num_rows;     /* a fixed table: ids < num_rows; 0: dynamic */
    const char *optimizer; /* "sgd", "adagrad", "rowwise_adagrad", "lazy_adam", "ftrl" */
    float lr, epsilon, initial_accumulator, beta1, beta2, l1, l2, lr_power;
    float init_lo, init_hi; /* Keras' Embedding: -0.05, 0.05 */
    uint64_t seed;
    uint32_t min_count;   /* pushes of a row before it is stored (0, 1: at once) */
    uint64_t ttl_steps;   /* rows not pushed for this many steps expire (0: never) */
    uint64_t max_rows;    /* rows each shard stores at most (0: no cap) */
    int refuse_when_full; /* at the cap: 1 refuse new rows, 0 evict the least recently used */
} ps_table_spec;

/* A spec with Keras' defaults for the optimizer ("sgd" when NULL) at rate lr:
 * epsilon 1e-7, initial_accumulator 0.1, beta1 0.9, beta2 0.999, lr_power -0.5,
 * initializer uniform(-0.05, 0.05), seed 0, dynamic off (num_rows must be set,
 * or left 0 for a dynamic table). */
PS_API void ps_client_table_spec(ps_table_spec *spec, const char *name, uint64_t dim,
                                 const char *optimizer, float lr);

/* A table handle: owned by its client, freed by ps_client_close. */
typedef struct ps_table ps_table;

/* Creates the table on every shard (an existing one with the same spec is
 * kept; another spec is PS_EEXIST) and returns its handle (pulls and pushes
 * need ps_client_hello or ps_client_join first). PS_OK, PS_EINVAL (a bad spec, reason
 * set), PS_EEXIST, PS_ENOMEM or a transport error. */
PS_API int ps_client_create_table(ps_client *c, const ps_table_spec *spec, ps_table **out);

/* Rows ids[0..n) into out[n * dim], in the order asked: ids deduplicated,
 * split by shard, all shards asked at once, the answers scattered back (an id
 * given twice gets the same row twice). Sync: each shard answers once its
 * version is at least the one this client last pulled or stepped to. */
PS_API int ps_client_pull_rows(ps_table *t, const uint64_t *ids, size_t n, float *out);

/* Pushes grads[n * dim] for rows ids[0..n): duplicate ids' gradients summed,
 * split by shard, sent at once. Sync: they join the open step (every shard
 * gets a push, an empty one if it holds none of the rows, so that the step's
 * mean divides by the workers); one push per table and step, before the
 * step's dense push. Flag PS_ROWS_END_STEP marks the worker's last row push of
 * the step: on the shards that hold none of this client's dense variables
 * (ps_client_add), where no dense push will come, it ends the worker's step
 * (a client with no dense variables: on every shard); the next pull waits for
 * the step. Sync clients must set it on their last row push of each step.
 * *rows_dropped (may be NULL): async, row gradients psd did not apply (rows
 * not admitted yet, or refused at a cap); sync, 0. */
#define PS_ROWS_END_STEP 1
PS_API int ps_client_push_rows(ps_table *t, const uint64_t *ids, size_t n, const float *grads,
                               int flags, uint64_t *rows_dropped);

/* The table's dim (0 for NULL). */
PS_API uint64_t ps_client_table_dim(const ps_table *t);

/* ---- gradient compression ---------------------------------------------------------- */

typedef enum {
    PS_COMPRESS_NONE = 0, /* float32, as computed (the default) */
    PS_COMPRESS_F16,      /* IEEE binary16, round to nearest even; |g| > 65504 saturates */
    PS_COMPRESS_BF16,     /* bfloat16, round to nearest even */
    PS_COMPRESS_TOPK      /* per tensor, the k = max(1, ceil(ratio * numel)) entries of largest
                           * magnitude as (u32 index, f32 value) pairs, with error feedback */
} ps_compression;

/* How pushes (ps_client_push, ps_client_push_next, the step exchange) encode the
 * gradients; pulls and psd's state stay float32 (psd decodes before it sums or applies).
 * TOPK keeps a residual per registered tensor: each push adds the gradient to it, sends
 * its top k entries and zeroes them there, so what is not sent goes out in later pushes
 * (the residuals start at zero and are dropped by a change of kind). ratio: TOPK only,
 * 0 < ratio <= 1 (ignored otherwise). Not during a step exchange. PS_OK or PS_EINVAL. */
PS_API int ps_client_set_compression(ps_client *c, ps_compression kind, float ratio);
/* Gradient payload bytes this client's pushes have put on the wire (every attempt,
 * encoded as sent), since it was opened. */
PS_API uint64_t ps_client_push_bytes(const ps_client *c);
/* TOPK: the residual (error feedback) of the i-th tensor added (ps_client_add's order),
 * for a caller that saves it and puts it back when it resumes a job (psworker does):
 * numel floats owned by the client, made zeroed if the tensor has none yet; *numel gets
 * the count (may be NULL). NULL when the compression is not TOPK, i is not a tensor's
 * index, or memory ran out. */
PS_API float *ps_client_topk_residual(ps_client *c, size_t i, size_t *numel);

/* ---- the training step's exchange ------------------------------------------------- */

/* One round trip per shard instead of a push and a pull: each shard gets a PushPull of
 * its gradients (tagged as ps_client_push_next tags them; `clock` = pushes made before,
 * async) whose reply carries its values after the update, copied into the param
 * buffers. A shard's request goes out as soon as all its tensors' gradients are final
 * (ps_client_grads_ready, called during the backward pass), so it travels while the
 * rest of the step is computed; ps_client_step_end sends the rest and waits for every
 * reply. The gradients must stay unchanged until ps_client_step_end returns.
 * step_begin: PS_OK, or PS_EINVAL (before hello, or a step already open); a failure to
 * connect is returned here and by step_end. */
PS_API int ps_client_step_begin(ps_client *c, uint64_t clock);
/* The gradients in [begin, end) are final for this step (tensors whose grad buffer lies
 * inside count as ready). PS_OK, PS_EINVAL (no step open), or the step's first send
 * error (also returned by step_end). */
PS_API int ps_client_grads_ready(ps_client *c, const float *begin, const float *end);
/* Ends the step: *dropped counts shards that dropped the push (its step had closed);
 * *fresh is 1 when every shard sent values, so the next step can start without a pull
 * (0: pull first, e.g. after a shard restarted: PS_ERESTARTED as for
 * ps_client_push_next). PS_EINVAL when no step is open. */
PS_API int ps_client_step_end(ps_client *c, size_t *dropped, int *fresh);

/* How a worker joins a job (ps_client_join). */
typedef struct {
    /* in */
    int chief;            /* 1: this worker creates the variables (worker 0) */
    int recreate_lost;    /* chief: a shard that lost its variables gets them re-created
                             with their initial values (else PS_ELOST) */
    int wait_ms;          /* not the chief: how long to wait for the chief's variables
                             (0: the client's timeout) */
    uint64_t total_steps; /* the job's steps per worker, checked against the shards'
                             progress (ps_client_check_progress); 0: not checked */
    int pull;             /* 1: end with a pull of the current values (ps_client_pull_next) */
    unsigned *lost;       /* chief, recreate_lost: the shards re-created (may be NULL) */
    size_t lost_cap;
    /* out */
    int async;            /* the shards' mode */
    uint64_t version;     /* the smallest shard version at hello */
    uint64_t clock;       /* where this worker is: sync, the version; async, its pushes */
    size_t created;       /* chief: variables created now (0: they existed) */
    size_t n_lost;        /* chief: shards whose variables were re-created */
    char lost_error[512]; /* chief: what was lost, naming the shards ("" when nothing) */
    int waited;           /* not the chief: it waited for the chief's variables */
} ps_join_info;

/* A worker's way into a job, in one call: hello; the chief checks the shards
 * (another job's variables: PS_EEXIST; a shard that lost its part: PS_ELOST
 * unless recreate_lost) and creates the variables; the others check the shards
 * and wait (up to wait_ms) until the variables exist, then where the job is
 * (info->clock), checked against total_steps; then, with pull, the current
 * values. Returns PS_OK or the first error (ps_client_error says why; a wait
 * that ran out is PS_ETIMEDOUT). Tables are created with ps_client_create_table
 * afterwards. */
PS_API int ps_client_join(ps_client *c, ps_join_info *info);

/* Tells every shard this worker is done (it leaves the expected set); stops the
 * heartbeat. */
PS_API int ps_client_goodbye(ps_client *c);

/* ---- admin requests (need no hello; one thread at a time per client) --------------- */

#define PS_MODE_SYNC 0
#define PS_MODE_ASYNC 1

typedef struct {
    char *name;
    uint64_t numel;
    char *optimizer; /* e.g. "adam lr=0.001 ..." */
} ps_var_stats;

/* One embedding table's share on a shard. */
typedef struct ps_table_stats {
    char *name, *optimizer;
    uint64_t dim, num_rows; /* num_rows 0: dynamic */
    uint64_t rows;          /* stored on the shard now */
    uint64_t admitted;      /* rows ever stored */
    uint64_t evicted;       /* removed at the cap (least recently used) */
    uint64_t expired;       /* removed for the TTL */
    uint64_t refused;       /* new rows refused at the cap */
    uint64_t dropped;       /* row gradients not applied (not admitted yet, or refused) */
    uint64_t bytes;         /* memory the rows, their state and the index take */
    uint64_t max_rows;      /* rows stored at most: the spec's cap, or psd's --max-table-mb
                               bound when lower (0: none) */
} ps_table_stats;

/* A shard's StatsReply; strings, vars and tables are owned (ps_stats_free). */
typedef struct {
    uint64_t version;
    int mode; /* PS_MODE_SYNC, PS_MODE_ASYNC (other: a newer psd) */
    unsigned shard_index, num_workers, live_workers;
    uint64_t requests, errors, pushes_applied, stale_pushes, bytes_in, bytes_out;
    uint64_t pending_pulls;
    double uptime_seconds;
    ps_var_stats *vars;
    size_t n_vars;
    uint64_t updates_applied, workers_removed, dropped_pushes, max_staleness;
    uint64_t staleness_waits, checkpoints, checkpoint_version;
    double checkpoint_age_seconds; /* -1: none */
    uint64_t incarnation, auth_denied, pending_pull_bytes, pending_pulls_refused;
    uint64_t pending_pulls_timed_out, pending_pulls_released, dropped_replies;
    uint64_t loop_turns_cut, checkpoint_failures;
    char *job_id; /* "" : none */
    uint64_t push_bytes; /* gradient payload bytes of pushes received, as sent (encoded) */
    struct ps_table_stats *tables; /* the shard's embedding tables */
    size_t n_tables;
    unsigned *live_set; /* the live workers' indices, ascending (live_workers of them) */
    size_t n_live_set;
    unsigned workers_min; /* sync: steps close only with this many live (0: all expected) */
} ps_stats;

/* Frees what s owns and zeroes it (the struct itself is the caller's); NULL is ignored.
 * Thread-safe for distinct structs. */
PS_API void ps_stats_free(ps_stats *s);

typedef struct {
    uint64_t version, bytes;
    char path[4096];
} ps_checkpoint_info;

/* The outcome of one shard in a request sent to every shard. */
typedef struct {
    int rc;          /* PS_OK; PS_ETIMEDOUT: no answer in time; remote: the shard's code */
    int remote;      /* 1: the shard answered with an error reply (error = its message) */
    char error[512]; /* rc != PS_OK: why */
} ps_shard_result;

/* Asks one shard for its stats into *out (zeroed first; ps_stats_free on PS_OK). */
PS_API int ps_client_stats(ps_client *c, unsigned shard, ps_stats *out);
/* Asks one shard to write a checkpoint now; *out (may be NULL) says which. */
PS_API int ps_client_checkpoint(ps_client *c, unsigned shard, ps_checkpoint_info *out);
/* Asks one shard to shut down (it answers, then stops). */
PS_API int ps_client_shutdown(ps_client *c, unsigned shard);
/* The same sent to every shard at once, collected under one deadline (no probes: a
 * silent shard is PS_ETIMEDOUT). out and res have ps_client_num_shards entries; out[i]
 * is filled when res[i].rc == PS_OK (stats: free each with ps_stats_free). Returns PS_OK
 * when every shard succeeded, else the first shard's error (ps_client_error names it). */
PS_API int ps_client_stats_all(ps_client *c, ps_stats *out, ps_shard_result *res);
PS_API int ps_client_checkpoint_all(ps_client *c, ps_checkpoint_info *out, ps_shard_result *res);
PS_API int ps_client_shutdown_all(ps_client *c, ps_shard_result *res);

/* ---- job-wide training metrics (kept by shard 0) ---------------------------------- */

/* A worker's training figures over one epoch, as sums (so they add up over workers). */
typedef struct {
    double loss_sum;  /* sum of the per-sample losses: mean loss x samples */
    uint64_t correct; /* samples predicted right */
    uint64_t samples; /* samples trained on */
} ps_metric_sums;

/* One worker's report, as ps_client_query_metrics lists them. */
typedef struct {
    unsigned worker; /* worker index */
    ps_metric_sums sums;
} ps_worker_metrics;

/* The sums of one epoch over the workers that reported. */
typedef struct {
    uint32_t epoch;
    ps_metric_sums total; /* summed in worker order */
    unsigned reported;    /* workers whose report is in total */
    unsigned expected;    /* workers live in the job or reported (complete: reported ==
                           * expected) */
} ps_epoch_metrics;

/* Reports this worker's sums for `epoch` (0-based) to shard 0, which keeps the newest 8
 * epochs; a second report of the same epoch (a restarted worker) replaces the first.
 * *kept (may be NULL) is 0 when the epoch is older than those psd keeps. After
 * ps_client_hello. PS_OK; PS_EINVAL (before hello, a NULL argument, a loss sum that is
 * not finite, correct > samples, samples > 2^48, or a loss with no samples: psd refuses
 * the same), or the request's error. */
PS_API int ps_client_report_metrics(ps_client *c, uint32_t epoch, const ps_metric_sums *mine,
                                    int *kept);
/* Asks shard 0 for epoch's sums into *out (zeroed first). psd answers at once; the call
 * asks again every 20 ms until every expected worker has reported or wait_ms (>= 0) has
 * passed, then returns what is there (out->reported < out->expected: some had not
 * reported). each (may be NULL) gets the first `cap` reports in worker order. Needs no
 * hello. PS_OK, PS_EINVAL (NULL out, wait_ms < 0) or the request's error. */
PS_API int ps_client_query_metrics(ps_client *c, uint32_t epoch, int wait_ms,
                                   ps_epoch_metrics *out, ps_worker_metrics *each, size_t cap);

/* The last error's message ("" if none); valid until the next call on c (same thread). */
PS_API const char *ps_client_error(const ps_client *c);
PS_API size_t ps_client_num_shards(const ps_client *c);

#ifdef __cplusplus
}
#endif

#endif
