/* libps connection: one DEALER per shard, the request-round engine (send to all shards,
 * collect replies under a deadline), probes and reconnects with backoff, and logging. */
#include "client_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <time.h>
#include <zmq.h>

#include "tfconfig.h"

static ps_lib_log_fn log_fn;
static void *log_user;
static ps_lib_log_level log_min = PS_LIB_LOG_INFO;

void ps_lib_set_log(ps_lib_log_fn fn, void *user, ps_lib_log_level min_level) {
    log_fn = fn;
    log_user = user;
    log_min = min_level;
}

void ps__log(ps_lib_log_level level, const char *fmt, ...) {
    if (!log_fn || level < log_min) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log_fn(log_user, level, line);
}

int ps__fail(ps_client *c, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return rc;
}

uint64_t ps__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int ps__open_socket(ps_client *c, shard_conn *s) {
    s->sock = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!s->sock) return PS_ENOMEM;
    int linger = 0, ivl = 100, ivl_max = 2000;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
    /* ZeroMQ reconnects by itself, with its own exponential backoff */
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    if (c->ipv6) zmq_setsockopt(s->sock, ZMQ_IPV6, &c->ipv6, sizeof c->ipv6);
    if (c->have_curve && ps_curve_client_apply(s->sock, &c->curve) != PS_OK) return PS_EINVAL;
    if (ps__monitor_open(c, s) != PS_OK) return PS_ENOMEM; /* before connecting: no event lost */
    return zmq_connect(s->sock, s->endpoint) == 0 ? PS_OK : PS_EINVAL;
}

void ps__close_socket(shard_conn *s) {
    if (s->sock && s->monitor) zmq_socket_monitor(s->sock, NULL, 0);
    if (s->monitor) zmq_close(s->monitor);
    if (s->sock) zmq_close(s->sock);
    s->sock = s->monitor = NULL;
    s->link_down = 0;
}

/* Opens every shard's socket at the first request, so that the options set after
 * ps_client_open (CurveZMQ keys) apply to every connection: a socket opened earlier
 * would first try to talk in plaintext. */
int ps__connect_all(ps_client *c) {
    if (c->connected) return PS_OK;
    for (size_t i = 0; i < c->n_shards; i++) {
        shard_conn *s = &c->shards[i];
        ps__close_socket(s);
        if (ps__open_socket(c, s) != PS_OK)
            return ps__fail(c, PS_EINVAL, "cannot connect to %s: %s", ps__shard_addr(s),
                            zmq_strerror(zmq_errno()));
    }
    c->connected = 1;
    return PS_OK;
}

int ps_client_open(ps_client **out, const char *const *endpoints, size_t n_shards,
                   unsigned worker_index, unsigned num_workers, char *err, size_t errlen) {
    *out = NULL;
    if (n_shards == 0 || !endpoints) {
        snprintf(err, errlen, "no parameter servers given");
        return PS_EINVAL;
    }
    shard_conn *shards = calloc(n_shards, sizeof *shards);
    if (!shards) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    for (size_t i = 0; i < n_shards; i++) {
        if (ps__replicas_parse(&shards[i], i, endpoints[i], err, errlen) != PS_OK) {
            free(shards);
            return PS_EINVAL;
        }
    }
    ps_client *c = calloc(1, sizeof *c);
    if (!c || !(c->zctx = zmq_ctx_new())) {
        free(shards);
        ps_client_close(c);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    c->shards = shards;
    c->n_shards = n_shards;
    c->worker_index = worker_index;
    c->num_workers = num_workers;
    c->timeout_ms = 120000;
    c->attempt_ms = 5000;
    c->next_id = 1;
    c->rng = ps__now_ms() ^ ((uint64_t)worker_index << 40) ^ 0x9E3779B97F4A7C15ull;
    /* a retried push is recognised by (session, seq): a new client is a new session */
    if (getrandom(&c->push_session, sizeof c->push_session, 0) != sizeof c->push_session)
        c->push_session = c->rng ^ ((uint64_t)getpid() << 20) ^ ps__now_ms();
    c->push_session |= 1; /* never 0 */
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
    ps__tables_free(c);
    for (size_t i = 0; c->shards && i < c->n_shards; i++) {
        ps__close_socket(&c->shards[i]);
        free(c->shards[i].tensors);
    }
    if (c->zctx) zmq_ctx_term(c->zctx);
    ps_curve_wipe(&c->curve, sizeof c->curve);
    free(c->shards);
    ps__compress_free(c);
    free(c->tensors);
    free(c->ready);
    free(c);
}

int ps_client_set_timeout(ps_client *c, int timeout_ms) {
    if (timeout_ms <= 0) return ps__fail(c, PS_EINVAL, "timeout %d ms: want > 0", timeout_ms);
    c->timeout_ms = timeout_ms;
    return PS_OK;
}

int ps_client_set_retry(ps_client *c, int attempt_ms) {
    c->attempt_ms = attempt_ms > 0 ? attempt_ms : 1;
    return PS_OK;
}

int ps_client_set_ipv6(ps_client *c, int on) {
    c->ipv6 = on != 0;
    c->connected = 0; /* reopened with the option at the next request */
    return PS_OK;
}

int ps__need_hello(ps_client *c, const char *what) {
    if (c->said_hello) return PS_OK;
    return ps__fail(c, PS_EINVAL, "%s before ps_client_hello: say hello to the shards first", what);
}

const char *ps_client_error(const ps_client *c) {
    return c ? c->error : "no client";
}

size_t ps_client_num_shards(const ps_client *c) {
    return c->n_shards;
}

int ps_client_add(ps_client *c, const ps_client_tensor *t) {
    if (t->shard >= c->n_shards)
        return ps__fail(c, PS_EINVAL, "tensor %.96s: shard %u out of range", t->name, t->shard);
    if (!t->name[0] || !memchr(t->name, 0, sizeof t->name))
        return ps__fail(c, PS_EINVAL, "a tensor needs a name (at most %zu bytes)",
                        sizeof t->name - 1);
    if (t->rank > 2 || !t->param)
        return ps__fail(c, PS_EINVAL, "tensor %s: want rank 0..2 and a param buffer", t->name);
    if (c->step_open)
        return ps__fail(c, PS_EINVAL, "tensor %s: added during a step exchange", t->name);
    if (c->n_tensors == c->cap_tensors) {
        size_t cap = c->cap_tensors ? c->cap_tensors * 2 : 16;
        ps_client_tensor *nt = realloc(c->tensors, cap * sizeof *nt);
        if (!nt) return ps__fail(c, PS_ENOMEM, "out of memory");
        c->tensors = nt;
        unsigned char *nr = realloc(c->ready, cap);
        if (!nr) return ps__fail(c, PS_ENOMEM, "out of memory");
        c->ready = nr;
        enc_state *ne = realloc(c->enc, cap * sizeof *ne);
        if (!ne) return ps__fail(c, PS_ENOMEM, "out of memory");
        memset(ne + c->cap_tensors, 0, (cap - c->cap_tensors) * sizeof *ne);
        c->enc = ne;
        c->cap_tensors = cap;
    }
    shard_conn *s = &c->shards[t->shard];
    if (s->n_tensors == s->cap_tensors) {
        size_t cap = s->cap_tensors ? s->cap_tensors * 2 : 8;
        size_t *ni = realloc(s->tensors, cap * sizeof *ni);
        if (!ni) return ps__fail(c, PS_ENOMEM, "out of memory");
        s->tensors = ni;
        s->cap_tensors = cap;
    }
    s->tensors[s->n_tensors++] = c->n_tensors;
    c->ready[c->n_tensors] = 0;
    c->tensors[c->n_tensors++] = *t;
    return PS_OK;
}

/* Sends hdr (+ payloads) to shard i as a new request. */
int ps__send_request(ps_client *c, size_t i, Ps__Header *hdr, const ps_payload *pl, size_t n) {
    hdr->protocol_version = PS_PROTOCOL_VERSION;
    hdr->request_id = c->next_id++;
    shard_conn *s = &c->shards[i];
    s->want_id = hdr->request_id;
    s->attempt_deadline = ps__now_ms() + (uint64_t)c->attempt_ms;
    s->reopened = 0;
    if (ps_wire_send(s->sock, NULL, 0, hdr, pl, n, 0) != PS_OK)
        return ps__fail(c, PS_EIO, "send to %s failed: %s", s->endpoint, zmq_strerror(zmq_errno()));
    return PS_OK;
}

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
    s->probe_deadline = now + ps__probe_wait_ms(c, s);
    ps_wire_send(s->sock, NULL, 0, &h, NULL, 0, ZMQ_DONTWAIT);
}

/* A probe went unanswered: a replicated shard moves on to its next replica; a plain
 * one reopens the socket (drops whatever was queued for a dead peer) and waits 100 ms
 * doubling to 4 s, +-25% jitter, before the next probe. */
static void probe_timed_out(ps_client *c, size_t i, const char *what, uint64_t now) {
    shard_conn *s = &c->shards[i];
    s->probe_id = 0;
    if (ps__replicated(s)) {
        ps__failover_next(c, i, "does not answer", what, now);
        return;
    }
    if (s->probes++ == 0)
        CL_WARN("%s: psd %zu (%s) does not answer; reconnecting", what, i, s->endpoint + 6);
    ps__close_socket(s);
    ps__open_socket(c, s);
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
const char *ps__shard_addr(const shard_conn *s) {
    return strncmp(s->endpoint, "tcp://", 6) == 0 ? s->endpoint + 6 : s->endpoint;
}

/* Shard i held this job's variables and no longer does: a new process without them
 * (restarted with no checkpoint to restore). Returns PS_ELOST naming the shard. */
static int lost(ps_client *c, size_t i, const char *what) {
    return ps__fail(c, PS_ELOST,
                    "%s: psd %zu (%s) lost the job's variables: it restarted without them (no "
                    "checkpoint to restore), so its part of the model is gone",
                    what, i, ps__shard_addr(&c->shards[i]));
}

/* A Welcome answering shard i's probe. Returns PS_OK to keep waiting (or the
 * request was re-sent), or the op's outcome for this shard. */
static int probe_answered(ps_client *c, size_t i, const Ps__Welcome *w, op_spec *op, int *done) {
    shard_conn *s = &c->shards[i];
    s->probe_id = 0;
    if (s->probes) CL_INFO("%s: psd %zu answers again", op->what, i);
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
        CL_WARN("%s: psd %zu restarted (now at version %llu)", op->what, i,
                (unsigned long long)w->version);
        s->version = w->version;
        s->pushed = 0;
        if (op->fail_on_restart) {
            *done = 1;
            s->want_id = 0;
            return ps__fail(c, PS_ERESTARTED, "%s: psd %zu restarted from a checkpoint", op->what,
                            i);
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
        return ps__fail(c, PS_ESTALE, "%s: psd %zu: %s", op->what, i, c->error);
    }
    s->attempt_deadline = ps__now_ms() + (uint64_t)c->attempt_ms; /* alive: keep waiting */
    return PS_OK;
}

/* 1 when h, from a replicated shard's replica in use, says to ask another: ENOTPRIMARY,
 * or a Welcome from a backup or from a primary of an older term. */
static int not_primary(const shard_conn *s, const Ps__Header *h) {
    if (!ps__replicated(s)) return 0;
    if (h->body_case == PS__HEADER__BODY_ERROR) return h->error->code == PS_ENOTPRIMARY;
    return h->body_case == PS__HEADER__BODY_WELCOME && ps__not_primary(s, h->welcome);
}

/* Waits until every shard with an outstanding request answered (or the
 * overall deadline). A shard silent past the attempt time is probed with a
 * Hello; one that does not answer is reconnected with backoff and jitter,
 * and the request re-sent once it is back. A replicated shard whose replica in
 * use is not the primary, does not answer or drops its connection fails over
 * to the next replica (replica.c). Returns the first error seen. */
int ps__collect(ps_client *c, op_spec *op) {
    size_t n = c->n_shards;
    zmq_pollitem_t *items = calloc(2 * n, sizeof *items); /* the sockets, then monitors */
    if (!items) return ps__fail(c, PS_ENOMEM, "out of memory");
    int rc = PS_OK;
    char first_error[sizeof c->error] = "";
    uint64_t start = ps__now_ms(), deadline = start + (uint64_t)c->timeout_ms,
             next_note = start + 10000;
    for (;;) {
        size_t waiting = 0, n_mon = 0;
        uint64_t now = ps__now_ms(), wake = deadline < next_note ? deadline : next_note;
        for (size_t i = 0; i < n; i++) {
            shard_conn *s = &c->shards[i];
            items[i] = (zmq_pollitem_t){s->sock, 0, s->want_id ? ZMQ_POLLIN : 0, 0};
            if (!s->want_id) continue;
            waiting++;
            if (op->no_probe && !s->failover) continue;
            ps__monitor_drain(s);
            if (s->link_down && !op->no_probe) /* killed, or down when we came to it */
                ps__failover_next(c, i, "dropped the connection", op->what, now);
            if (s->probe_id && now >= s->probe_deadline) probe_timed_out(c, i, op->what, now);
            if (!s->probe_id && now >= s->attempt_deadline && now >= s->next_probe_at)
                send_probe(c, i, now);
            items[i].socket = s->sock; /* may have been reopened */
            if (s->monitor) items[n + n_mon++] = (zmq_pollitem_t){s->monitor, 0, ZMQ_POLLIN, 0};
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
                int r = ps__fail(c, PS_ETIMEDOUT, "%s: no answer from psd %zu (%s) within %d ms",
                                 op->what, i, ps__shard_addr(&c->shards[i]), c->timeout_ms);
                if (op->results) {
                    op->results[i].rc = r;
                    snprintf(op->results[i].error, sizeof op->results[i].error, "%s", c->error);
                }
                if (rc == PS_OK) {
                    rc = r;
                    snprintf(first_error, sizeof first_error, "%s", c->error);
                }
            }
            break;
        }
        if (now >= next_note) {
            for (size_t i = 0; i < n; i++)
                if (c->shards[i].want_id)
                    CL_INFO("%s: still waiting for psd %zu (%s) after %llu s", op->what, i,
                            c->shards[i].endpoint + 6, (unsigned long long)((now - start) / 1000));
            next_note = now + 10000;
            continue;
        }
        int ready = zmq_poll(items, (int)(n + n_mon), (long)(wake > now ? wake - now : 0));
        if (ready < 0) {
            if (zmq_errno() == EINTR) continue;
            rc = ps__fail(c, PS_EIO, "poll failed: %s", zmq_strerror(zmq_errno()));
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
                r2 = ps__fail(c, drc, "%s: bad reply from psd %zu: %s", op->what, i, err);
            } else if (h && s->probe_id && h->request_id == s->probe_id) {
                if (not_primary(s, h)) {
                    ps__failover_next(c, i, "is not the primary", op->what, ps__now_ms());
                } else if (h->body_case == PS__HEADER__BODY_WELCOME) {
                    ps__primary_found(c, i, h->welcome, op->what);
                    r2 = probe_answered(c, i, h->welcome, op, &done);
                    if (r2 != PS_OK) done = 1;
                } else { /* the shard refused our Hello: report that */
                    s->probe_id = 0;
                    s->want_id = 0;
                    done = 1;
                    r2 = ps__fail(c, PS_EREMOTE, "%s: psd %zu refused the worker's Hello: %s",
                                  op->what, i,
                                  h->body_case == PS__HEADER__BODY_ERROR ? h->error->message : "?");
                }
            } else if (h && h->request_id != s->want_id) {
                /* an answer to a request we gave up on or re-sent */
            } else if (drc != PS_OK) {
                s->want_id = 0;
                done = 1;
                r2 = ps__fail(c, drc, "%s: bad reply from psd %zu: %s", op->what, i, err);
            } else if (not_primary(s, h)) { /* ask the next replica; re-sent to the primary */
                ps__failover_next(c, i, "is not the primary", op->what, ps__now_ms());
            } else if (!op->no_probe && h->body_case == PS__HEADER__BODY_ERROR &&
                       (h->error->code == PS_EREJOIN || h->error->code == PS_ESTALE)) {
                /* not in the expected set any more, or a version the shard does
                 * not have: ask it who it is (a Hello also rejoins) */
                ps__fail(c, h->error->code, "%s", h->error->message);
                s->after_probe = h->error->code == PS_EREJOIN ? PROBE_RESEND : PROBE_STALE;
                if (!s->probe_id) send_probe(c, i, ps__now_ms());
            } else {
                s->want_id = 0;
                done = 1;
                if (h->body_case == PS__HEADER__BODY_ERROR && h->error->code == PS_ENOENT &&
                    s->had_vars) {
                    r2 = lost(c, i, op->what); /* shards never delete variables */
                } else if (h->body_case == PS__HEADER__BODY_ERROR) {
                    r2 = h->error->code < 0 ? h->error->code : PS_EREMOTE;
                    ps__fail(c, r2, "%s: psd %zu answered %s: %s", op->what, i, h->error->code_name,
                             h->error->message);
                    if (op->results) {
                        op->results[i].remote = 1;
                        snprintf(op->results[i].error, sizeof op->results[i].error, "%s",
                                 h->error->message ? h->error->message : "");
                    }
                } else {
                    if (h->body_case == PS__HEADER__BODY_WELCOME)
                        ps__primary_found(c, i, h->welcome, op->what);
                    r2 = op->on_reply(c, i, h, &f, op->ctx);
                }
            }
            if (done && op->results) {
                op->results[i].rc = r2;
                if (r2 != PS_OK && !op->results[i].remote)
                    snprintf(op->results[i].error, sizeof op->results[i].error, "%s", c->error);
            }
            if (done && r2 != PS_OK && rc == PS_OK) {
                rc = r2;
                snprintf(first_error, sizeof first_error, "%s", c->error);
            }
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
    if (rc != PS_OK && first_error[0]) snprintf(c->error, sizeof c->error, "%s", first_error);
    return rc;
}

/* Sends to every shard that has tensors (all: every shard), then collects. */
int ps__round_trip(ps_client *c, op_spec *op, int all) {
    int rc = ps__connect_all(c);
    if (rc != PS_OK) return rc;
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++)
        if (all || c->shards[i].n_tensors) rc = op->send(c, i, op->ctx);
    int rc2 = ps__collect(c, op);
    return rc != PS_OK ? rc : rc2;
}
