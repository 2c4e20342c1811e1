/* psd: one libuv loop owns all of a shard's state; a ZeroMQ ROUTER is watched
 * through ZMQ_FD (edge-triggered) and every request goes through one dispatch
 * table. No locks: only the loop thread touches the server (a checkpoint's
 * write on libuv's thread pool touches only its own snapshot). */
#ifndef PS_SERVER_H
#define PS_SERVER_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "ckpt_file.h"
#include "config.h"
#include "monitor.h"
#include "shard.h"
#include "wire.h"

#define PS_BODY_CASES 64 /* > every Ps__Header__BodyCase value */
#define PS_ERR_CODES 32  /* > -(every ps_err value) */
/* Job-wide training metrics (epoch_metrics.c): epochs kept, and the largest
 * sample count a report may carry (its sums stay exact in a double). */
#define PS_EPOCH_METRICS_KEPT 8
#define PS_EPOCH_METRICS_MAX_SAMPLES (1ull << 48)

typedef struct {
    uint64_t requests, errors;
    uint64_t by_type[PS_BODY_CASES];          /* requests by Header body case (0: undecodable) */
    uint64_t by_error[PS_ERR_CODES];          /* error replies by -code */
    uint64_t bytes_in, bytes_out, dropped_replies;
    uint64_t push_bytes; /* gradient payload bytes of Push/PushPull requests, as sent */
    uint64_t checkpoints;
    uint64_t checkpoint_failures; /* saves that failed (timer, request or shutdown) */
    uint64_t heartbeats;
    /* connections CurveZMQ refused (auth.c): unknown key, plaintext, bad handshake */
    uint64_t auth_denied;
    uint64_t turns_cut; /* loop turns that stopped at --turn-messages or the time budget */
} ps_server_stats;

/* A Checkpoint request waiting for its checkpoint to be written (checkpointer.c). */
typedef struct {
    void *identity; /* owned copy */
    size_t identity_len;
    uint64_t request_id;
} ps_ckpt_waiter;

typedef struct ps_server {
    ps_server_config cfg;
    uv_loop_t *loop;
    uv_poll_t poll; /* on ZMQ_FD */
    uv_signal_t sigterm, sigint;
    int handles_open;
    void *zctx, *router;
    /* CurveZMQ: ZAP handler and authorized keys (auth.c); NULL: plaintext */
    struct ps_auth *auth;
    char endpoint[256]; /* "host:port" actually bound; with --transport ipc "ipc://PATH" */
    int ipc_bound;      /* ipc: we bound cfg.ipc_path, the socket file (dev, ino) */
    dev_t ipc_dev;
    ino_t ipc_ino;
    int ipc_lock; /* ipc: 1 + the fd of PATH.lock (ipc_lock.h), held while we live; 0: none */
    /* the shard's state: variables, tables, members, version and sync step,
     * deferred pulls (shard/shard.h) */
    ps_shard shard;
    ps_server_stats stats;
    uv_timer_t member_timer;
    uv_timer_t ckpt_timer;
    uint64_t incarnation; /* random per process start */
    uint64_t ckpt_version; /* version of the newest checkpoint written or restored */
    uint64_t ckpt_ns;      /* when (monotonic), 0: none */
    uint64_t ckpt_pushes;  /* stats.pushes_applied when it was taken (0: restored) */
    struct ps_ckpt_job *ckpt_job; /* the checkpoint being written off the loop; NULL: none */
    ps_ckpt_waiter *ckpt_next;    /* Checkpoint requests waiting for the next checkpoint */
    size_t ckpt_next_n, ckpt_next_cap;
    int ckpt_stop_after; /* SIGTERM/SIGINT during a write: the final checkpoint, then stop */
    uint64_t start_ns;
    uv_timer_t watchdog_timer;  /* systemd WatchdogSec (notify.c) */
    struct ps_metrics *metrics; /* HTTP /metrics and /healthz (metrics.c), NULL: off */
    void *monitor; /* PAIR reading the ROUTER's monitor events (monitor.c); NULL: none */
    uv_poll_t monitor_poll;
    int monitor_started;
    uv_idle_t resume;     /* runs the next turn of a drain cut short (bounded turns) */
    uint64_t drop_log_ns; /* dropped replies are logged at most once a second */
    uint64_t drops_unlogged;
    uint64_t nomem_logged; /* the shard's apply_nomem when last logged */
    int below_min;         /* fewer live workers than --workers-min, as last logged */
    int stopping;
    int final_ckpt_failed; /* the checkpoint at SIGTERM/SIGINT failed: exit non-zero */
    float *scratch;        /* for misaligned payload frames */
    size_t scratch_cap;
    struct ps_epoch_metrics *epoch_metrics; /* ReportMetrics (epoch_metrics.c); NULL: none */
    struct ps_repl *repl; /* --replicas 2 (replica.h); NULL: an unreplicated shard */
    int failed;           /* stopped by an error (a backup that cannot follow): exit 2 */
} ps_server;

/* A decoded request as the handlers see it. Payload frames are read in place. */
typedef struct ps_request {
    const void *identity;
    size_t identity_len;
    int fd; /* the connection's socket (ZMQ_SRCFD), -1 if unknown */
    Ps__Header *hdr;
    zmq_msg_t *payloads;
    size_t n_payloads;
} ps_request;

/* Sets up the server state and binds the ROUTER (with --curve-secret: a CURVE server
 * whose ZAP handler admits only the --authorized-keys). Returns PS_OK, PS_EADDRINUSE
 * or PS_EINVAL/PS_EFORMAT/PS_EIO with a reason in err. Does not start the loop. */
int ps_server_init(ps_server *s, uv_loop_t *loop, const ps_server_config *cfg, char *err,
                   size_t errlen);
/* Starts watching the socket and the signals; runs the loop until shutdown. Returns
 * PS_OK (final_ckpt_failed says whether the checkpoint at SIGTERM/SIGINT failed),
 * PS_EADDRINUSE (the metrics port) or PS_EIO (the ZAP socket cannot be watched). */
int ps_server_run(ps_server *s);
/* Begins a graceful stop: answers pending pulls with ESHUTDOWN and closes handles. */
void ps_server_stop(ps_server *s);
/* Frees everything ps_server_init made (after the loop has ended). */
void ps_server_free(ps_server *s);

/* Handles one received message (frame 0 = identity): checks, dispatches and
 * replies. Never exits the process; bad input gets an error reply. */
void ps__server_dispatch(ps_server *s, ps_frames *f);
/* Sends a reply with `hdr` (its version and request id are filled in here). */
int ps__server_reply(ps_server *s, const void *identity, size_t identity_len, uint64_t request_id,
                     Ps__Header *hdr, const ps_payload *payloads, size_t n_payloads);
/* Logs the replies dropped since the last such line, if a second has passed (the
 * membership timer calls it, so the count of a burst that ended is not lost). */
void ps__server_log_drops(ps_server *s);
/* Sends an Error reply. */
void ps__server_reply_error(ps_server *s, const void *identity, size_t identity_len,
                            uint64_t request_id, int code, const char *msg);
/* A deferred pull's error answer (the pending list's callback; server is a ps_server). */
void ps__pending_answer_error(void *server, ps_pending_pull *p, int code, const char *msg);
/* Handlers; each replies itself on success, or returns an error for the dispatcher to send. */
int ps__handle_hello(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_create_vars(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_pull(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_push(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_push_pull(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_stats(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_shutdown(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_heartbeat(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_goodbye(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_checkpoint(ps_server *s, ps_request *r, char *err, size_t errlen);
/* Job-wide training metrics (epoch_metrics.c). */
int ps__handle_report_metrics(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_query_metrics(ps_server *s, ps_request *r, char *err, size_t errlen);
/* Embedding tables (rows_handlers.c). */
int ps__handle_create_table(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_pull_rows(ps_server *s, ps_request *r, char *err, size_t errlen);
int ps__handle_push_rows(ps_server *s, ps_request *r, char *err, size_t errlen);
/* Answers a PullRows with the rows of ids[0..n) now. PS_OK or PS_ENOMEM. */
int ps__reply_rows(ps_server *s, const void *identity, size_t identity_len, uint64_t request_id,
                   struct ps_table_entry *e, const uint64_t *ids, size_t n);
void ps__epoch_metrics_free(ps_server *s);

/* The shard (shard_loop.c): made from the flags, on the loop's clock. PS_OK or PS_ENOMEM. */
int ps__shard_init(ps_server *s);
/* The shard's tick (the timer calls it every ps__members_tick_ms): removes workers
 * silent for longer than --worker-timeout (a stall of psd's own loop is not
 * counted) and fails the pulls past --max-pull-wait-ms, with the log lines. */
void ps__members_expire(ps_server *s);
/* The connection on socket fd closed (the monitor saw it): its waiting pulls are
 * dropped, and a worker whose Hello came on it is removed at once, logged. */
void ps__server_disconnected(ps_server *s, int fd);
/* Logs when the live workers go below --workers-min (steps wait) or back to it. */
void ps__log_quorum(ps_server *s);
/* The tick's period in ms: --worker-timeout/4 (at most --max-pull-wait-ms/4) within [10, 1000]. */
uint64_t ps__members_tick_ms(const ps_server *s);

/* Checkpoints (checkpointer.c). Each is a snapshot taken on the loop (the loop's
 * only pause: the copy of the tables' rows and the variables' slots) written to
 * --checkpoint-dir on libuv's thread pool, one at a time; failures are logged and
 * counted in stats.checkpoint_failures. */
/* At start: loads the newest valid checkpoint, if any (PS_OK), or fails with a reason. */
int ps__ckpt_restore(ps_server *s, char *err, size_t errlen);
/* A Checkpoint request: answered once a checkpoint taken now (or, during a write,
 * the next one, which starts when that write ends) is written. PS_OK, or an error
 * for the dispatcher to send. */
int ps__ckpt_request(ps_server *s, const ps_request *r, char *err, size_t errlen);
/* The --checkpoint-every timer: a checkpoint if the version moved or a push was
 * applied since the last one, and none is being written. */
void ps__ckpt_periodic(ps_server *s);
/* SIGTERM/SIGINT: the final checkpoint (on the loop, after any write in flight),
 * then ps_server_stop; final_ckpt_failed when it fails. */
void ps__ckpt_stop_signal(ps_server *s);
/* The meta of a checkpoint (or a backup's snapshot) taken now. */
void ps__ckpt_meta_now(const ps_server *s, ps_ckpt_meta *m);
/* Frees the requests still waiting (after the loop ended). */
void ps__ckpt_free(ps_server *s);
/* Reads requests now (a reply sent outside a turn may have taken ZMQ_FD's edge). */
void ps__server_drain(ps_server *s);
/* Answers a deferred pull now (the shard's callback; server is a ps_server). */
void ps__pending_answer(void *server, ps_pending_pull *p);
/* Writes --ready-file (a backup: once it follows its primary). */
int ps__write_ready_file(const char *path, const char *endpoint, char *err, size_t errlen);
/* Nanoseconds on a monotonic clock. */
uint64_t ps__now_ns(void);

#endif
