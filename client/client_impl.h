/* libps inside: the client's state and the request-round engine (conn.c) shared by the
 * operations (ops.c, admin.c) and the step exchange (step.c). Not installed. */
#ifndef PS_CLIENT_IMPL_H
#define PS_CLIENT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "curve_keys.h"
#include "heartbeat.h"
#include "ps.pb-c.h"
#include "ps.h"
#include "replicas.h"
#include "wire.h"

/* Room for an endpoint with its "tcp://" prefix and NUL. */
#define PS_ENDPOINT_SIZE 280

typedef struct {
    void *sock;
    const char *endpoint; /* replicas[replica]: the ZeroMQ endpoint the socket talks to */
    /* the shard's replica group (replica.c): one endpoint for a plain shard */
    char replicas[PS_MAX_REPLICAS][PS_ENDPOINT_SIZE];
    size_t n_replicas, replica;
    void *monitor;     /* replicated: PAIR receiving sock's connection events, else NULL */
    int link_down;     /* replicated: the monitor says sock's connection is down */
    uint64_t term;     /* highest replica-group term any of its replicas claimed */
    size_t primary;    /* the replica last confirmed primary */
    int failover;      /* looking for the primary: probing replica after replica */
    unsigned failover_steps; /* replicas tried in this fail-over (backoff, probe wait) */
    uint64_t want_id;  /* request id of the outstanding request, 0 = none */
    uint64_t probe_id; /* outstanding Hello probe (is the shard alive? restarted?), 0 = none */
    uint64_t attempt_deadline, probe_deadline, next_probe_at; /* ms, monotonic */
    unsigned probes;      /* unanswered probes in a row: the reconnect backoff */
    int after_probe;      /* what to do when the probe is answered (PROBE_*) */
    int reopened;         /* the socket was reopened since want_id was sent */
    uint64_t incarnation; /* the shard process we talk to (from its Welcome) */
    uint64_t version;     /* version of the values last pulled from this shard */
    int pushed;           /* pushed gradients computed from `version` */
    size_t n_ready;       /* step exchange: tensors whose gradients are final */
    int step_sent;        /* step exchange: this shard's push-pull is out */
    uint64_t worker_clock;
    uint64_t welcome_clock; /* async: this worker's clock as this shard's Welcome said */
    unsigned heartbeat_ms;
    uint32_t welcome_vars;               /* variables the shard held at the last Hello */
    char job_id[PS_WIRE_MAX_JOB_ID + 1]; /* the job they belong to, from the same Welcome */
    int had_vars;    /* the shard has held this job's variables (values or a CreateVars reply) */
    size_t *tensors; /* indices into c->tensors living on this shard */
    size_t n_tensors, cap_tensors;
} shard_conn;

enum { PROBE_WAIT = 0, PROBE_RESEND, PROBE_STALE };

/* A tensor's pushed gradient as encoded for the wire (compress.c). */
typedef struct {
    unsigned char *buf; /* the encoded payload (sent zero-copy, kept until the next push) */
    size_t cap, bytes;
    uint64_t nnz; /* top-k: pairs in buf */
    uint64_t gen; /* c->push_gen it was encoded for: a re-send reuses it */
    float *residual; /* top-k: what was not sent yet (numel floats) */
} enc_state;

struct ps_client {
    void *zctx;
    shard_conn *shards;
    size_t n_shards;
    ps_client_tensor *tensors;
    unsigned char *ready; /* per tensor: gradients final in the open step exchange */
    size_t n_tensors, cap_tensors;
    unsigned worker_index, num_workers;
    uint64_t next_id;
    uint64_t monitor_seq; /* names each socket monitor's inproc endpoint */
    int timeout_ms, attempt_ms;
    uint64_t rng;
    ps_heartbeat *heartbeat;
    int connected;  /* the sockets exist (made at the first request) */
    int have_curve; /* CurveZMQ: every socket is a CURVE client with these keys */
    int ipv6;       /* ZMQ_IPV6 on every socket */
    int said_hello; /* ps_client_hello succeeded once */
    int async;      /* the shards' mode, from the last hello */
    struct ps_table **tables; /* embedding tables (rows.c), owned */
    size_t n_tables, cap_tables;
    int step_open;  /* between ps_client_step_begin and ps_client_step_end */
    int step_rc;    /* the first send error of the open step exchange */
    uint64_t step_clock;
    ps_compression compress; /* push encoding (ps_client_set_compression) */
    float topk_ratio;
    enc_state *enc;      /* per tensor (cap_tensors entries, zeroed) */
    uint64_t push_gen;   /* counts push rounds: encodings are made once per round, and a
                          * push carries it as its seq (a re-send of the round repeats it) */
    uint64_t push_session; /* random per client: the namespace of the pushes' seq */
    uint64_t rows_seq;     /* counts row pushes: each carries it (a re-send repeats it) */
    uint64_t push_bytes; /* gradient payload bytes sent in pushes */
    uint32_t *enc_scratch; /* top-k selection scratch */
    size_t enc_scratch_cap;
    int warned_saturated;
    int push_skipped; /* pushes carry Push.skipped (ps_client_set_push_skipped) */
    ps_curve_client curve;               /* secret: wiped on close */
    char job_id[PS_WIRE_MAX_JOB_ID + 1]; /* "" : none named */
    char error[512];
};

/* One request round: how to (re)send it to a shard, what to do with a reply,
 * and what a shard restart (a new incarnation) means for it. */
typedef struct op_spec {
    const char *what;
    int (*send)(ps_client *c, size_t shard, void *ctx);
    int (*on_reply)(ps_client *c, size_t shard, Ps__Header *hdr, ps_frames *f, void *ctx);
    int fail_on_restart; /* push: gradients for a version the shard no longer has */
    int stale_is_drop;   /* push: ESTALE from the same incarnation is a dropped push */
    void *ctx;
    int no_probe;             /* admin: a silent shard is not probed, it times out */
    ps_shard_result *results; /* NULL, or per shard: its outcome (admin fan-out) */
} op_spec;

/* Writes the message into c->error and returns rc. */
int ps__fail(ps_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sends one line to the callback of ps_lib_set_log (if any, and at its level). */
void ps__log(ps_lib_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t ps__now_ms(void);
/* Opens every shard's socket at the first request. PS_OK or PS_EINVAL (message set). */
int ps__connect_all(ps_client *c);
/* Sends hdr (+ payloads) to shard i as a new request. PS_OK or PS_EIO (message set). */
int ps__send_request(ps_client *c, size_t i, Ps__Header *hdr, const ps_payload *pl, size_t n);
/* Waits for every outstanding request of the round; returns its first error. */
int ps__collect(ps_client *c, op_spec *op);
/* Sends to every shard that has tensors (all: every shard), then collects. */
int ps__round_trip(ps_client *c, op_spec *op, int all);
/* PS_OK when h's body is `want`, else PS_EPROTO naming the shard. */
int ps__expect_body(ps_client *c, size_t shard, const Ps__Header *h, Ps__Header__BodyCase want,
                    const char *what);
/* A shard's address as the user gave it: "host:port" or "ipc://PATH". */
const char *ps__shard_addr(const shard_conn *s);
/* Copies a reply's values into shard's param buffers and records its version. */
int ps__take_values(ps_client *c, size_t shard, const Ps__PullReply *p, ps_frames *f,
                    const char *what);
/* Sends shard i's gradients as a Push, or (with_pull) a PushPull. */
int ps__send_grads(ps_client *c, size_t i, uint64_t step, uint64_t clock, int with_pull);
/* The payload of tensor ti's gradient as this round pushes it: the grad buffer
 * itself (no compression) or its encoding, made once per c->push_gen. Fills the meta's
 * dtype, nbytes and nnz. PS_OK or PS_ENOMEM (message set). */
int ps__grad_payload(ps_client *c, size_t ti, Ps__TensorMeta *m, ps_payload *pl);
/* Frees the table handles (ps_client_close). */
void ps__tables_free(ps_client *c);
/* Frees the encoding state (ps_client_close). */
void ps__compress_free(ps_client *c);

/* (Re)opens shard s's socket to s->endpoint (and its monitor when replicated). PS_OK, or
 * PS_ENOMEM / PS_EINVAL with zmq_errno() saying why. */
int ps__open_socket(ps_client *c, shard_conn *s);
/* Closes shard s's socket and monitor (NULL ones are skipped). */
void ps__close_socket(shard_conn *s);

/* ---- replica groups (replica.c) ---- */

/* Fills s's replica group from a ps list entry ("ADDR" or "ADDR|ADDR|...", each
 * "host:port" or "ipc://PATH") and points s->endpoint at the first. PS_OK or PS_EINVAL
 * with a reason (naming entry i) in err. */
int ps__replicas_parse(shard_conn *s, size_t i, const char *entry, char *err, size_t errlen);
/* 1 when s has more than one replica (fail-over applies), else 0. */
static inline int ps__replicated(const shard_conn *s) {
    return s->n_replicas > 1;
}
/* Starts watching s->sock's connection (replicated shards only). PS_OK or PS_ENOMEM. */
int ps__monitor_open(ps_client *c, shard_conn *s);
/* Reads every queued connection event of s's monitor into s->link_down. */
void ps__monitor_drain(shard_conn *s);
/* 1 when a Welcome from a replicated shard's current replica says it is not the primary
 * to use: primary false, or a term below the highest seen. 0 for a plain shard. */
int ps__not_primary(const shard_conn *s, const Ps__Welcome *w);
/* A replica answered Welcome as the primary (or as a psd without replication): records its
 * term, ends a fail-over (one INFO line when the primary changed), points the heartbeat at
 * it. No-op for a plain shard. */
void ps__primary_found(ps_client *c, size_t i, const Ps__Welcome *w, const char *what);
/* Moves shard i to its next replica (round robin): reopens the socket there and schedules
 * a Hello probe after a short jittered backoff, the outstanding request to be re-sent when
 * a primary answers. why says what happened to the replica left (logged at DEBUG once per
 * fail-over). */
void ps__failover_next(ps_client *c, size_t i, const char *why, const char *what, uint64_t now);
/* How long a probe may go unanswered: attempt_ms capped at 2 s; during a fail-over
 * shorter (0.5 s, growing each round of the group), so a silent replica is left soon. */
uint64_t ps__probe_wait_ms(const ps_client *c, const shard_conn *s);

/* PS_EINVAL (message set) unless ps_client_hello succeeded. */
int ps__need_hello(ps_client *c, const char *what);

#define CL_DEBUG(...) ps__log(PS_LIB_LOG_DEBUG, __VA_ARGS__)
#define CL_INFO(...) ps__log(PS_LIB_LOG_INFO, __VA_ARGS__)
#define CL_WARN(...) ps__log(PS_LIB_LOG_WARN, __VA_ARGS__)

static inline size_t ps__tensor_numel(const ps_client_tensor *t) {
    size_t n = 1;
    for (size_t d = 0; d < t->rank; d++)
        n *= t->shape[d];
    return n;
}

#endif
