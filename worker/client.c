/* Client library for psd (see client.h): requests go to all shards at once
 * and replies are collected with zmq_poll under a deadline. */
#include "client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "curve_keys.h"
#include "heartbeat.h"
#include "log.h"
#include "ps_error.h"
#include "wire.h"

typedef struct {
    void *sock;
    char endpoint[280];
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

struct ps_client {
    void *zctx;
    shard_conn *shards;
    size_t n_shards;
    ps_client_tensor *tensors;
    unsigned char *ready; /* per tensor: gradients final in the open step exchange */
    size_t n_tensors, cap_tensors;
    unsigned worker_index, num_workers;
    uint64_t next_id;
    int timeout_ms, attempt_ms;
    uint64_t rng;
    ps_heartbeat *heartbeat;
    int connected;  /* the sockets exist (made at the first request) */
    int have_curve; /* CurveZMQ: every socket is a CURVE client with these keys */
    int step_open;  /* between ps_client_step_begin and ps_client_step_end */
    int step_rc;    /* the first send error of the open step exchange */
    uint64_t step_clock;
    ps_curve_client curve;               /* secret: wiped on close */
    char job_id[PS_WIRE_MAX_JOB_ID + 1]; /* "" : none named */
    char error[512];
};

static int fail(ps_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ps_client *c, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return rc;
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int open_socket(ps_client *c, shard_conn *s) {
    s->sock = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!s->sock) return PS_ENOMEM;
    int linger = 0, ivl = 100, ivl_max = 2000;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
    /* ZeroMQ reconnects by itself, with its own exponential backoff */
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    if (c->have_curve && ps_curve_client_apply(s->sock, &c->curve) != PS_OK) return PS_EINVAL;
    return zmq_connect(s->sock, s->endpoint) == 0 ? PS_OK : PS_EINVAL;
}

/* Opens every shard's socket at the first request, so that the options set after
 * ps_client_open (CurveZMQ keys) apply to every connection: a socket opened earlier
 * would first try to talk in plaintext. */
static int connect_all(ps_client *c) {
    if (c->connected) return PS_OK;
    for (size_t i = 0; i < c->n_shards; i++) {
        shard_conn *s = &c->shards[i];
        if (s->sock) zmq_close(s->sock);
        s->sock = NULL;
        if (open_socket(c, s) != PS_OK)
            return fail(c, PS_EINVAL, "cannot connect to %s: %s", s->endpoint + 6,
                        zmq_strerror(zmq_errno()));
    }
    c->connected = 1;
    return PS_OK;
}

int ps_client_open(ps_client **out, const char *const *endpoints, size_t n_shards,
                   unsigned worker_index, unsigned num_workers, char *err, size_t errlen) {
    *out = NULL;
    if (n_shards == 0) {
        snprintf(err, errlen, "no parameter servers given");
        return PS_EINVAL;
    }
    ps_client *c = calloc(1, sizeof *c);
    if (!c || !(c->shards = calloc(n_shards, sizeof *c->shards)) || !(c->zctx = zmq_ctx_new())) {
        ps_client_close(c);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    c->n_shards = n_shards;
    c->worker_index = worker_index;
    c->num_workers = num_workers;
    c->timeout_ms = 120000;
    c->attempt_ms = 5000;
    c->next_id = 1;
    c->rng = now_ms() ^ ((uint64_t)worker_index << 40) ^ 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n_shards; i++)
        snprintf(c->shards[i].endpoint, sizeof c->shards[i].endpoint, "%s%s",
                 strncmp(endpoints[i], "ipc://", 6) == 0 ? "" : "tcp://", endpoints[i]);
    *out = c;
    return PS_OK;
}

int ps_client_set_curve(ps_client *c, const char *secret_file, const char *server_key_file,
                        char *err, size_t errlen) {
    if (c->heartbeat) {
        snprintf(err, errlen, "set the CurveZMQ keys before the first request");
        return PS_EINVAL;
    }
    ps_curve_client k;
    int rc = ps_curve_client_load(&k, secret_file, server_key_file, err, errlen);
    if (rc != PS_OK) return rc;
    c->curve = k;
    c->have_curve = 1;
    ps_curve_wipe(&k, sizeof k);
    c->connected = 0; /* reopened with the keys at the next request */
    return PS_OK;
}

void ps_client_close(ps_client *c) {
    if (!c) return;
    ps_heartbeat_stop(c->heartbeat);
    for (size_t i = 0; c->shards && i < c->n_shards; i++) {
        if (c->shards[i].sock) zmq_close(c->shards[i].sock);
        free(c->shards[i].tensors);
    }
    if (c->zctx) zmq_ctx_term(c->zctx);
    ps_curve_wipe(&c->curve, sizeof c->curve);
    free(c->shards);
    free(c->tensors);
    free(c->ready);
    free(c);
}

void ps_client_set_timeout(ps_client *c, int timeout_ms) {
    c->timeout_ms = timeout_ms;
}

void ps_client_set_retry(ps_client *c, int attempt_ms) {
    c->attempt_ms = attempt_ms > 0 ? attempt_ms : 1;
}

const char *ps_client_error(const ps_client *c) {
    return c->error;
}

size_t ps_client_num_shards(const ps_client *c) {
    return c->n_shards;
}

int ps_client_add(ps_client *c, const ps_client_tensor *t) {
    if (t->shard >= c->n_shards)
        return fail(c, PS_EINVAL, "tensor %s: shard %u out of range", t->name, t->shard);
    if (c->n_tensors == c->cap_tensors) {
        size_t cap = c->cap_tensors ? c->cap_tensors * 2 : 16;
        ps_client_tensor *nt = realloc(c->tensors, cap * sizeof *nt);
        if (!nt) return PS_ENOMEM;
        c->tensors = nt;
        unsigned char *nr = realloc(c->ready, cap);
        if (!nr) return PS_ENOMEM;
        c->ready = nr;
        c->cap_tensors = cap;
    }
    shard_conn *s = &c->shards[t->shard];
    if (s->n_tensors == s->cap_tensors) {
        size_t cap = s->cap_tensors ? s->cap_tensors * 2 : 8;
        size_t *ni = realloc(s->tensors, cap * sizeof *ni);
        if (!ni) return PS_ENOMEM;
        s->tensors = ni;
        s->cap_tensors = cap;
    }
    s->tensors[s->n_tensors++] = c->n_tensors;
    c->ready[c->n_tensors] = 0;
    c->tensors[c->n_tensors++] = *t;
    return PS_OK;
}

static size_t tensor_numel(const ps_client_tensor *t) {
    size_t n = 1;
    for (size_t d = 0; d < t->rank; d++)
        n *= t->shape[d];
    return n;
}

/* Sends hdr (+ payloads) to shard i as a new request. */
static int send_request(ps_client *c, size_t i, Ps__Header *hdr, const ps_payload *pl, size_t n) {
    hdr->protocol_version = PS_PROTOCOL_VERSION;
    hdr->request_id = c->next_id++;
    shard_conn *s = &c->shards[i];
    s->want_id = hdr->request_id;
    s->attempt_deadline = now_ms() + (uint64_t)c->attempt_ms;
    s->reopened = 0;
    if (ps_wire_send(s->sock, NULL, 0, hdr, pl, n, 0) != PS_OK)
        return fail(c, PS_EIO, "send to %s failed: %s", s->endpoint, zmq_strerror(zmq_errno()));
    return PS_OK;
}

/* One request round: how to (re)send it to a shard, what to do with a reply,
 * and what a shard restart (a new incarnation) means for it. */
typedef struct {
    const char *what;
    int (*send)(ps_client *c, size_t shard, void *ctx);
    int (*on_reply)(ps_client *c, size_t shard, Ps__Header *hdr, ps_frames *f, void *ctx);
    int fail_on_restart; /* push: gradients for a version the shard no longer has */
    int stale_is_drop;   /* push: ESTALE from the same incarnation is a dropped push */
    void *ctx;
} op_spec;

/* Sends a Hello probe to shard i: its Welcome tells whether the process we
 * talked to is still there (same incarnation) and rejoins the expected set. */
static void send_probe(ps_client *c, size_t i, uint64_t now) {
    shard_conn *s = &c->shards[i];
    Ps__Header h = PS__HEADER__INIT;
    Ps__Hello hello = PS__HELLO__INIT;
    hello.worker_index = c->worker_index;
    hello.num_workers = c->num_workers;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = c->next_id++;
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    s->probe_id = h.request_id;
    uint64_t wait = (uint64_t)c->attempt_ms < 2000 ? (uint64_t)c->attempt_ms : 2000;
    s->probe_deadline = now + wait;
    ps_wire_send(s->sock, NULL, 0, &h, NULL, 0, ZMQ_DONTWAIT);
}

/* A probe went unanswered: reopen the socket (drops whatever was queued for
 * a dead peer) and wait 100 ms doubling to 4 s, +-25% jitter, before the next. */
static void probe_timed_out(ps_client *c, size_t i, const char *what, uint64_t now) {
    shard_conn *s = &c->shards[i];
    s->probe_id = 0;
    if (s->probes++ == 0)
        PS_WARN("%s: psd %zu (%s) does not answer; reconnecting", what, i, s->endpoint + 6);
    zmq_close(s->sock);
    open_socket(c, s);
    s->reopened = 1;
    unsigned shift = s->probes < 6 ? s->probes : 6;
    uint64_t base = 100u << shift; /* 200 ms .. 6.4 s */
    if (base > 4000) base = 4000;
    c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t jitter = (c->rng >> 33) % (base / 2 + 1);
    s->next_probe_at = now + base * 3 / 4 + jitter;
    s->after_probe = PROBE_RESEND; /* whatever was in flight was lost with the socket */
}

/* A shard's address as the user gave it: "host:port" or "ipc://PATH". */
static const char *shard_addr(const shard_conn *s) {
    return strncmp(s->endpoint, "tcp://", 6) == 0 ? s->endpoint + 6 : s->endpoint;
}

/* Shard i held this job's variables and no longer does: a new process without them
 * (restarted with no checkpoint to restore). Returns PS_ELOST naming the shard. */
static int lost(ps_client *c, size_t i, const char *what) {
    return fail(c, PS_ELOST,
                "%s: psd %zu (%s) lost the job's variables: it restarted without them (no "
                "checkpoint to restore), so its part of the model is gone",
                what, i, shard_addr(&c->shards[i]));
}

/* A Welcome answering shard i's probe. Returns PS_OK to keep waiting (or the
 * request was re-sent), or the op's outcome for this shard. */
static int probe_answered(ps_client *c, size_t i, const Ps__Welcome *w, op_spec *op, int *done) {
    shard_conn *s = &c->shards[i];
    s->probe_id = 0;
    if (s->probes) PS_INFO("%s: psd %zu answers again", op->what, i);
    s->probes = 0;
    int restarted = s->incarnation && w->incarnation != s->incarnation;
    s->incarnation = w->incarnation;
    int action = s->after_probe;
    s->after_probe = PROBE_WAIT;
    *done = 0;
    if (restarted && w->num_vars == 0 && s->had_vars) {
        *done = 1;
        s->want_id = 0;
        return lost(c, i, op->what);
    }
    if (restarted) {
        PS_WARN("%s: psd %zu restarted (now at version %llu)", op->what, i,
                (unsigned long long)w->version);
        s->version = w->version;
        s->pushed = 0;
        if (op->fail_on_restart) {
            *done = 1;
            s->want_id = 0;
            return fail(c, PS_ERESTARTED, "%s: psd %zu restarted from a checkpoint", op->what, i);
        }
        return op->send(c, i, op->ctx);
    }
    if (action == PROBE_RESEND || s->reopened) return op->send(c, i, op->ctx);
    if (action == PROBE_STALE) { /* same process: the push really was late */
        *done = 1;
        s->want_id = 0;
        if (op->stale_is_drop) {
            s->pushed = 1;
            return PS_OK;
        }
        return fail(c, PS_ESTALE, "%s: psd %zu: %s", op->what, i, c->error);
    }
    s->attempt_deadline = now_ms() + (uint64_t)c->attempt_ms; /* alive: keep waiting */
    return PS_OK;
}

/* Waits until every shard with an outstanding request answered (or the
 * overall deadline). A shard silent past the attempt time is probed with a
 * Hello; one that does not answer is reconnected with backoff and jitter,
 * and the request re-sent once it is back. Returns the first error seen. */
static int collect(ps_client *c, op_spec *op) {
    size_t n = c->n_shards;
    zmq_pollitem_t *items = calloc(n, sizeof *items);
    if (!items) return PS_ENOMEM;
    int rc = PS_OK;
    uint64_t start = now_ms(), deadline = start + (uint64_t)c->timeout_ms,
             next_note = start + 10000;
    for (;;) {
        size_t waiting = 0;
        uint64_t now = now_ms(), wake = deadline < next_note ? deadline : next_note;
        for (size_t i = 0; i < n; i++) {
            shard_conn *s = &c->shards[i];
            items[i] = (zmq_pollitem_t){s->sock, 0, s->want_id ? ZMQ_POLLIN : 0, 0};
            if (!s->want_id) continue;
            waiting++;
            if (s->probe_id && now >= s->probe_deadline) probe_timed_out(c, i, op->what, now);
            if (!s->probe_id && now >= s->attempt_deadline && now >= s->next_probe_at)
                send_probe(c, i, now);
            items[i].socket = s->sock; /* may have been reopened */
            uint64_t t = s->probe_id ? s->probe_deadline
                                     : (s->attempt_deadline > s->next_probe_at ? s->attempt_deadline
                                                                               : s->next_probe_at);
            if (t < wake) wake = t;
        }
        if (waiting == 0) break;
        if (now >= deadline) {
            for (size_t i = 0; i < n; i++) {
                if (!c->shards[i].want_id) continue;
                c->shards[i].want_id = c->shards[i].probe_id = 0;
                if (rc == PS_OK)
                    rc = fail(c, PS_ETIMEDOUT, "%s: no answer from psd %zu (%s) within %d ms",
                              op->what, i, c->shards[i].endpoint + 6, c->timeout_ms);
            }
            break;
        }
        if (now >= next_note) {
            for (size_t i = 0; i < n; i++)
                if (c->shards[i].want_id)
                    PS_INFO("%s: still waiting for psd %zu (%s) after %llu s", op->what, i,
                            c->shards[i].endpoint + 6, (unsigned long long)((now - start) / 1000));
            next_note = now + 10000;
            continue;
        }
        int ready = zmq_poll(items, (int)n, (long)(wake > now ? wake - now : 0));
        if (ready < 0) {
            if (zmq_errno() == EINTR) continue;
            rc = fail(c, PS_EIO, "poll failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (!(items[i].revents & ZMQ_POLLIN)) continue;
            shard_conn *s = &c->shards[i];
            ps_frames f;
            if (ps_frames_recv(s->sock, ZMQ_DONTWAIT, &f) != PS_OK) continue;
            Ps__Header *h = NULL;
            char err[256];
            int drc = f.n >= 1 ? ps_header_decode(zmq_msg_data(&f.frames[0]),
                                                  zmq_msg_size(&f.frames[0]), &h, err, sizeof err)
                               : PS_EPROTO;
            int r2 = PS_OK, done = 0;
            if (h && drc != PS_OK && s->probe_id && h->request_id == s->probe_id) {
                s->probe_id = 0; /* a malformed answer to our Hello */
                s->want_id = 0;
                done = 1;
                r2 = fail(c, drc, "%s: bad reply from psd %zu: %s", op->what, i, err);
            } else if (h && s->probe_id && h->request_id == s->probe_id) {
                if (h->body_case == PS__HEADER__BODY_WELCOME) {
                    r2 = probe_answered(c, i, h->welcome, op, &done);
                    if (r2 != PS_OK) done = 1;
                } else { /* the shard refused our Hello: report that */
                    s->probe_id = 0;
                    s->want_id = 0;
                    done = 1;
                    r2 = fail(c, PS_EREMOTE, "%s: psd %zu refused the worker's Hello: %s", op->what,
                              i, h->body_case == PS__HEADER__BODY_ERROR ? h->error->message : "?");
                }
            } else if (h && h->request_id != s->want_id) {
                /* an answer to a request we gave up on or re-sent */
            } else if (drc != PS_OK) {
                s->want_id = 0;
                done = 1;
                r2 = fail(c, drc, "%s: bad reply from psd %zu: %s", op->what, i, err);
            } else if (h->body_case == PS__HEADER__BODY_ERROR &&
                       (h->error->code == PS_EREJOIN || h->error->code == PS_ESTALE)) {
                /* not in the expected set any more, or a version the shard does
                 * not have: ask it who it is (a Hello also rejoins) */
                fail(c, h->error->code, "%s", h->error->message);
                s->after_probe = h->error->code == PS_EREJOIN ? PROBE_RESEND : PROBE_STALE;
                if (!s->probe_id) send_probe(c, i, now_ms());
            } else {
                s->want_id = 0;
                done = 1;
                if (h->body_case == PS__HEADER__BODY_ERROR && h->error->code == PS_ENOENT &&
                    s->had_vars) {
                    r2 = lost(c, i, op->what); /* shards never delete variables */
                } else if (h->body_case == PS__HEADER__BODY_ERROR) {
                    r2 = h->error->code < 0 ? h->error->code : PS_EREMOTE;
                    fail(c, r2, "%s: psd %zu answered %s: %s", op->what, i, h->error->code_name,
                         h->error->message);
                } else {
                    r2 = op->on_reply(c, i, h, &f, op->ctx);
                }
            }
            if (done && rc == PS_OK) rc = r2;
            if (h) ps__header__free_unpacked(h, NULL);
            ps_frames_close(&f);
        }
        if (rc == PS_ELOST) { /* final: no answer from the others can make up for it (and a
                               * sync barrier on them may wait for a worker that stopped) */
            for (size_t i = 0; i < n; i++)
                c->shards[i].want_id = c->shards[i].probe_id = 0;
            break;
        }
    }
    free(items);
    return rc;
}

static int expect_body(ps_client *c, size_t shard, const Ps__Header *h, Ps__Header__BodyCase want,
                       const char *what) {
    if (h->body_case == want) return PS_OK;
    return fail(c, PS_EPROTO, "%s: psd %zu answered with body %d", what, shard, (int)h->body_case);
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
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_WELCOME, "hello");
    if (rc != PS_OK) return rc;
    const Ps__Welcome *w = h->welcome;
    if (w->shard_index != shard || w->num_shards != c->n_shards)
        return fail(
            c, PS_EINVAL, "psd at %s is shard %u of %u, but this worker lists it as %zu of %zu",
            c->shards[shard].endpoint + 6, w->shard_index, w->num_shards, shard, c->n_shards);
    int async = w->mode == PS__MODE__MODE_ASYNC;
    if (ctx->have_mode && async != ctx->async)
        return fail(c, PS_EINVAL, "shards disagree on the mode (sync/async)");
    ctx->async = async;
    ctx->have_mode = 1;
    if (w->version < ctx->version) ctx->version = w->version;
    if (w->heartbeat_ms && (!ctx->heartbeat_ms || w->heartbeat_ms < ctx->heartbeat_ms))
        ctx->heartbeat_ms = w->heartbeat_ms;
    if (w->worker_clock > ctx->worker_clock) ctx->worker_clock = w->worker_clock;
    if (w->num_workers != c->num_workers)
        return fail(c, PS_EPROTO, "psd %zu (%s) says the job has %u workers, this worker %u", shard,
                    c->shards[shard].endpoint + 6, w->num_workers, c->num_workers);
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
    return send_request(c, i, &h, NULL, 0);
}

/* Sends to every shard that has tensors (all: every shard), then collects. */
static int round_trip(ps_client *c, op_spec *op, int all) {
    int rc = connect_all(c);
    if (rc != PS_OK) return rc;
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++)
        if (all || c->shards[i].n_tensors) rc = op->send(c, i, op->ctx);
    int rc2 = collect(c, op);
    return rc != PS_OK ? rc : rc2;
}

int ps_client_hello(ps_client *c, int *async, uint64_t *version) {
    hello_ctx ctx = {0, UINT64_MAX, 0, 0, 0};
    op_spec op = {"hello", send_hello, on_welcome, 0, 0, &ctx};
    int rc = round_trip(c, &op, 1);
    if (rc != PS_OK) return rc;
    if (async) *async = ctx.async;
    if (version) *version = ctx.version;
    if (!c->heartbeat && ctx.heartbeat_ms) {
        const char **eps = calloc(c->n_shards, sizeof *eps);
        if (!eps) return PS_ENOMEM;
        for (size_t i = 0; i < c->n_shards; i++)
            eps[i] = c->shards[i].endpoint;
        rc = ps_heartbeat_start(eps, c->n_shards, c->worker_index, ctx.heartbeat_ms,
                                c->have_curve ? &c->curve : NULL, &c->heartbeat);
        free(eps);
        if (rc != PS_OK) return fail(c, rc, "cannot start the heartbeat thread");
    }
    for (size_t i = 0; i < c->n_shards; i++)
        c->shards[i].worker_clock = ctx.worker_clock;
    return PS_OK;
}

int ps_client_set_job(ps_client *c, const char *job_id) {
    if (job_id && *job_id && !ps_job_id_valid(job_id))
        return fail(c, PS_EINVAL, "job id '%.80s': want 1..%u of A-Z a-z 0-9 . _ -", job_id,
                    PS_WIRE_MAX_JOB_ID);
    snprintf(c->job_id, sizeof c->job_id, "%s", job_id ? job_id : "");
    return PS_OK;
}

int ps_client_check_shards(ps_client *c, unsigned *lost_shards, size_t cap, size_t *n_lost) {
    size_t holding = 0, n = 0;
    for (size_t i = 0; i < c->n_shards; i++) {
        const shard_conn *s = &c->shards[i];
        if (!s->welcome_vars) continue;
        /* "" on either side: a shard or client from before job ids, or a client naming none */
        if (c->job_id[0] && s->job_id[0] && strcmp(c->job_id, s->job_id) != 0)
            return fail(c, PS_EEXIST,
                        "psd %zu (%s) holds the variables of job '%s', this is job '%s': "
                        "give the job's own --job-id, or fresh shards",
                        i, shard_addr(s), s->job_id, c->job_id);
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
                                     used ? ", " : "", i, shard_addr(s));
    }
    if (n_lost) *n_lost = n;
    if (n == 0) return PS_OK;
    return fail(c, PS_ELOST,
                "%s lost the job's variables: %s none while %zu other shard%s hold%s theirs "
                "(restarted without a checkpoint to restore)",
                names, n == 1 ? "it holds" : "they hold", holding, holding == 1 ? "" : "s",
                holding == 1 ? "s" : "");
}

uint64_t ps_client_worker_clock(const ps_client *c) {
    return c->n_shards ? c->shards[0].worker_clock : 0;
}

int ps_client_check_progress(ps_client *c, int async, uint64_t total_steps) {
    /* sync: a step closes only with a push, and each worker makes total_steps of them
     * (more than total_steps closed steps is possible: backup workers, or a laggard
     * closing steps alone after the others finished; more than this bound is not) */
    uint64_t w = c->num_workers ? c->num_workers : 1;
    uint64_t sync_max = total_steps > UINT64_MAX / w ? UINT64_MAX : total_steps * w;
    for (size_t i = 0; i < c->n_shards; i++) {
        const shard_conn *s = &c->shards[i];
        if (!async && s->version > sync_max)
            return fail(c, PS_EPROTO,
                        "psd %zu (%s) is at version %llu, but a sync job of this size closes at "
                        "most %llu steps (%llu workers x epochs x steps per epoch): a shard of "
                        "another job, or workers started with other --epochs/--max-steps?",
                        i, s->endpoint + 6, (unsigned long long)s->version,
                        (unsigned long long)sync_max, (unsigned long long)w);
        if (async && s->welcome_clock > total_steps)
            return fail(c, PS_EPROTO,
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
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_CREATE_VARS_REPLY, "create");
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
    Ps__Optimizer *opts;
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
        return PS_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        const ps_client_tensor *t = &c->tensors[c->shards[i].tensors[k]];
        ps_tensor_meta_f32(&fs->metas[k], t->name, t->shape, t->rank, fs->shapes + 2 * k);
        fs->ptrs[k] = &fs->metas[k];
        /* zero-copy: the frame is the caller's buffer, which stays unchanged until the reply */
        fs->pl[k] = (ps_payload){use_grad ? t->grad : t->param, tensor_numel(t) * sizeof(float),
                                 NULL, NULL};
        Ps__Optimizer *o = &fs->opts[k];
        ps_opt_spec_to_proto(&t->opt, o);
        fs->optptrs[k] = o;
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
        rc = send_request(c, i, &h, fs.pl, cv.n_vars);
    }
    frame_set_free(&fs);
    return rc;
}

int ps_client_create_vars(ps_client *c, size_t *created) {
    size_t count = 0;
    op_spec op = {"create", send_create, on_created, 0, 0, &count};
    int rc = round_trip(c, &op, 0);
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
static int take_values(ps_client *c, size_t shard, const Ps__PullReply *p, ps_frames *f,
                       const char *what) {
    shard_conn *s = &c->shards[shard];
    char err[256];
    if (!p) return fail(c, PS_EPROTO, "%s: psd %zu sent no values", what, shard);
    int rc = ps_tensors_check(p->tensors, p->n_tensors, f->frames + 1, f->n - 1, err, sizeof err);
    if (rc != PS_OK) return fail(c, rc, "%s: bad reply from psd %zu: %s", what, shard, err);
    if (p->n_tensors != s->n_tensors)
        return fail(c, PS_EPROTO, "%s: psd %zu sent %zu tensors, asked %zu", what, shard,
                    p->n_tensors, s->n_tensors);
    for (size_t k = 0; k < s->n_tensors; k++) {
        const ps_client_tensor *t = &c->tensors[s->tensors[k]];
        size_t bytes = tensor_numel(t) * sizeof(float);
        if (strcmp(p->tensors[k]->name, t->name) != 0 || zmq_msg_size(&f->frames[k + 1]) != bytes)
            return fail(c, PS_ESHAPE, "%s: psd %zu sent '%s' where '%s' [%zu bytes] was expected",
                        what, shard, p->tensors[k]->name, t->name, bytes);
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
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_PULL_REPLY, "pull");
    if (rc == PS_OK) rc = take_values(c, shard, h->pull_reply, f, "pull");
    if (rc == PS_OK && h->pull_reply->version < ctx->version) ctx->version = h->pull_reply->version;
    return rc;
}

static int send_pull(ps_client *c, size_t i, void *vctx) {
    pull_ctx *ctx = vctx;
    shard_conn *s = &c->shards[i];
    char **names = calloc(s->n_tensors ? s->n_tensors : 1, sizeof *names);
    if (!names) return PS_ENOMEM;
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
    int rc = send_request(c, i, &h, NULL, 0);
    free(names);
    return rc;
}

int ps_client_pull(ps_client *c, uint64_t min_version, uint64_t *version) {
    pull_ctx ctx = {UINT64_MAX, min_version, 0, 0, 0};
    op_spec op = {"pull", send_pull, on_pulled, 0, 0, &ctx};
    int rc = round_trip(c, &op, 0);
    if (rc == PS_OK && version) *version = ctx.version;
    return rc;
}

int ps_client_pull_next(ps_client *c, int async, uint64_t clock, uint64_t *version) {
    pull_ctx ctx = {UINT64_MAX, 0, 1, async, clock};
    op_spec op = {"pull", send_pull, on_pulled, 0, 0, &ctx};
    int rc = round_trip(c, &op, 0);
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
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_PUSH_REPLY, "push");
    if (rc != PS_OK) return rc;
    if (!h->push_reply->applied) ctx->applied = 0;
    if (h->push_reply->dropped) ctx->dropped++;
    c->shards[shard].pushed = 1;
    return PS_OK;
}

/* Sends shard i's gradients as a Push, or (with_pull) a PushPull. */
static int send_grads(ps_client *c, size_t i, uint64_t step, uint64_t clock, int with_pull) {
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
        if (with_pull) {
            pp.push = &push;
            h.body_case = PS__HEADER__BODY_PUSH_PULL;
            h.push_pull = &pp;
        } else {
            h.body_case = PS__HEADER__BODY_PUSH;
            h.push = &push;
        }
        rc = send_request(c, i, &h, fs.pl, push.n_grads);
    }
    frame_set_free(&fs);
    return rc;
}

static int send_push(ps_client *c, size_t i, void *vctx) {
    push_ctx *ctx = vctx;
    return send_grads(c, i, ctx->per_shard_step ? c->shards[i].version : ctx->step, ctx->clock, 0);
}

int ps_client_push(ps_client *c, uint64_t step, int *applied_all) {
    push_ctx ctx = {1, 0, 0, step, 0};
    op_spec op = {"push", send_push, on_pushed, 1, 1, &ctx};
    int rc = round_trip(c, &op, 0);
    if (applied_all) *applied_all = ctx.applied;
    return rc;
}

int ps_client_push_next(ps_client *c, uint64_t clock, size_t *dropped) {
    push_ctx ctx = {1, 0, 1, 0, clock};
    op_spec op = {"push", send_push, on_pushed, 1, 1, &ctx};
    int rc = round_trip(c, &op, 0);
    if (dropped) *dropped = (size_t)ctx.dropped;
    return rc;
}

/* ---- the step exchange: push-pull per shard, each sent when its gradients are final ---- */

typedef struct {
    size_t dropped, fresh; /* shards that dropped the push; that sent values */
} step_ctx;

static int send_push_pull(ps_client *c, size_t i, void *vctx) {
    (void)vctx;
    shard_conn *s = &c->shards[i];
    s->step_sent = 1;
    return send_grads(c, i, s->version, c->step_clock, 1);
}

static int on_push_pulled(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    step_ctx *ctx = vctx;
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_PUSH_PULL_REPLY, "push-pull");
    if (rc != PS_OK) return rc;
    const Ps__PushPullReply *r = h->push_pull_reply;
    if (r->push && r->push->dropped) ctx->dropped++;
    rc = take_values(c, shard, r->pull, f, "push-pull");
    if (rc == PS_OK) ctx->fresh++;
    return rc;
}

void ps_client_step_begin(ps_client *c, uint64_t clock) {
    c->step_open = 1;
    c->step_clock = clock;
    c->step_rc = connect_all(c);
    for (size_t i = 0; i < c->n_shards; i++) {
        c->shards[i].n_ready = 0;
        c->shards[i].step_sent = 0;
    }
    memset(c->ready, 0, c->n_tensors);
}

void ps_client_grads_ready(ps_client *c, const float *begin, const float *end) {
    if (!c->step_open || c->step_rc != PS_OK) return;
    for (size_t i = 0; i < c->n_shards; i++) {
        shard_conn *s = &c->shards[i];
        if (s->step_sent || s->n_tensors == 0) continue;
        for (size_t k = 0; k < s->n_tensors; k++) {
            size_t ti = s->tensors[k];
            const ps_client_tensor *t = &c->tensors[ti];
            if (c->ready[ti] || t->grad < begin || t->grad + tensor_numel(t) > end) continue;
            c->ready[ti] = 1;
            s->n_ready++;
        }
        if (s->n_ready == s->n_tensors) {
            int rc = send_push_pull(c, i, NULL);
            if (rc != PS_OK && c->step_rc == PS_OK) c->step_rc = rc;
        }
    }
}

int ps_client_step_end(ps_client *c, size_t *dropped, int *fresh) {
    step_ctx ctx = {0, 0};
    op_spec op = {"push-pull", send_push_pull, on_push_pulled, 1, 1, &ctx};
    int rc = c->step_rc;
    size_t want = 0;
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++) {
        shard_conn *s = &c->shards[i];
        if (s->n_tensors == 0) continue;
        want++;
        if (!s->step_sent) rc = send_push_pull(c, i, NULL);
    }
    int rc2 = collect(c, &op); /* also when a send failed: what went out is answered */
    c->step_open = 0;
    if (dropped) *dropped = ctx.dropped;
    if (fresh) *fresh = rc == PS_OK && rc2 == PS_OK && ctx.fresh == want;
    return rc != PS_OK ? rc : rc2;
}

typedef struct {
    Ps__Header__BodyCase want;
    Ps__Header *keep;
    Ps__Header *req;
    unsigned shard;
} one_ctx;

static int on_one(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    one_ctx *ctx = vctx;
    int rc = expect_body(c, shard, h, ctx->want, "request");
    if (rc != PS_OK) return rc;
    if (ctx->keep) return PS_OK; /* all-shard rounds keep nothing */
    /* re-decode a private copy the caller can keep */
    size_t len = ps__header__get_packed_size(h);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return PS_ENOMEM;
    ps__header__pack(h, buf);
    ctx->keep = ps__header__unpack(NULL, len, buf);
    free(buf);
    return ctx->keep ? PS_OK : PS_ENOMEM;
}

static int send_one(ps_client *c, size_t i, void *vctx) {
    one_ctx *ctx = vctx;
    return send_request(c, i, ctx->req, NULL, 0);
}

static int one_request(ps_client *c, unsigned shard, Ps__Header *h, Ps__Header__BodyCase want,
                       Ps__Header **out) {
    if (shard >= c->n_shards) return fail(c, PS_EINVAL, "shard %u out of range", shard);
    one_ctx ctx = {want, NULL, h, shard};
    op_spec op = {"request", send_one, on_one, 0, 0, &ctx};
    int rc = connect_all(c);
    if (rc == PS_OK) rc = send_one(c, shard, &ctx);
    if (rc == PS_OK) rc = collect(c, &op);
    if (rc == PS_OK && out)
        *out = ctx.keep;
    else if (ctx.keep)
        ps__header__free_unpacked(ctx.keep, NULL);
    return rc;
}

int ps_client_stats(ps_client *c, unsigned shard, Ps__Header **out) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Stats st = PS__STATS__INIT;
    h.body_case = PS__HEADER__BODY_STATS;
    h.stats = &st;
    return one_request(c, shard, &h, PS__HEADER__BODY_STATS_REPLY, out);
}

int ps_client_shutdown(ps_client *c, unsigned shard) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Shutdown sd = PS__SHUTDOWN__INIT;
    h.body_case = PS__HEADER__BODY_SHUTDOWN;
    h.shutdown = &sd;
    return one_request(c, shard, &h, PS__HEADER__BODY_SHUTDOWN_REPLY, NULL);
}

int ps_client_goodbye(ps_client *c) {
    ps_heartbeat_stop(c->heartbeat);
    c->heartbeat = NULL;
    Ps__Header h = PS__HEADER__INIT;
    Ps__Goodbye bye = PS__GOODBYE__INIT;
    bye.worker_index = c->worker_index;
    h.body_case = PS__HEADER__BODY_GOODBYE;
    h.goodbye = &bye;
    one_ctx ctx = {PS__HEADER__BODY_GOODBYE_REPLY, NULL, &h, 0};
    op_spec op = {"goodbye", send_one, on_one, 0, 0, &ctx};
    int rc = round_trip(c, &op, 1);
    if (ctx.keep) ps__header__free_unpacked(ctx.keep, NULL);
    return rc;
}
