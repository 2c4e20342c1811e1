/* psd's event loop: the ROUTER socket watched through ZMQ_FD, signals, and
 * orderly shutdown (see server.h). */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "ipc_lock.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "ps_error.h"
#include "replica.h"

uint64_t ps__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A number that differs between two starts of psd (workers notice a restart). */
static uint64_t new_incarnation(void) {
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&v, sizeof v, 1, f) != 1) v = ps__now_ns() ^ ((uint64_t)getpid() << 32);
    if (f) fclose(f);
    return v ? v : 1;
}

int ps__write_ready_file(const char *path, const char *endpoint, char *err, size_t errlen) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", endpoint) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write ready file %s: %s", path, strerror(errno));
        return PS_EIO;
    }
    return PS_OK;
}

/* 1 when host (a --bind value) only accepts connections from this machine:
 * 127.0.0.0/8, ::1 or localhost. */
static int is_loopback(const char *host) {
    char h[256];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') /* [::1] */
        snprintf(h, sizeof h, "%.*s", (int)(n - 2), host + 1);
    else
        snprintf(h, sizeof h, "%s", host);
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, h, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return strcmp(h, "localhost") == 0;
}

/* Before binding ipc://path. ZeroMQ would replace any file there, even the socket of a
 * live psd, so: nothing there is fine; a socket nobody accepts on (left by a psd that
 * died) is removed; a socket something accepts on is PS_EADDRINUSE; anything else is
 * left alone and PS_EINVAL. */
static int clear_stale_socket(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return PS_OK;
        snprintf(err, errlen, "cannot check --ipc-path %s: %s", path, strerror(errno));
        return PS_EIO;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "--ipc-path %s exists and is not a socket; not replacing it", path);
        return PS_EINVAL;
    }
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof a.sun_path) { /* the config checked it; stay safe anyway */
        snprintf(err, errlen, "--ipc-path %s is too long for a Unix socket", path);
        return PS_EINVAL;
    }
    memcpy(a.sun_path, path, len + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot make a probe socket: %s", strerror(errno));
        return PS_EIO;
    }
    int live = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    int e = errno;
    close(fd);
    if (live) {
        snprintf(err, errlen, "cannot listen on ipc://%s: another process is listening there",
                 path);
        return PS_EADDRINUSE;
    }
    if (e != ECONNREFUSED) {
        snprintf(err, errlen, "cannot check --ipc-path %s: %s", path, strerror(e));
        return PS_EIO;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove the stale socket %s: %s", path, strerror(errno));
        return PS_EIO;
    }
    PS_INFO("removed the stale socket %s (left by a psd that did not stop cleanly)", path);
    return PS_OK;
}

/* Makes the ROUTER (not bound yet); with --curve-secret a CURVE server with its ZAP
 * handler, which must exist before the ROUTER binds. */
static int make_router(ps_server *s, char *err, size_t errlen) {
    s->router = zmq_socket(s->zctx, ZMQ_ROUTER);
    if (!s->router) {
        snprintf(err, errlen, "cannot make the socket: %s", zmq_strerror(zmq_errno()));
        return PS_EIO;
    }
    int one = 1, linger = 1000;
    int rcvhwm = (int)s->cfg.zmq_rcvhwm, sndhwm = (int)s->cfg.zmq_sndhwm;
    zmq_setsockopt(s->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(s->router, ZMQ_LINGER, &linger, sizeof linger);
    /* ZeroMQ's own per-connection queues, explicit (--zmq-rcvhwm, --zmq-sndhwm) */
    zmq_setsockopt(s->router, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
    zmq_setsockopt(s->router, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm);
    /* a message larger than this drops its connection before any of it is buffered */
    int64_t maxmsg = (int64_t)s->cfg.max_message_mb << 20;
    zmq_setsockopt(s->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (s->cfg.curve_secret[0]) {
        int rc = ps__auth_init(&s->auth, s->zctx, s->router, s->cfg.curve_secret,
                               s->cfg.authorized_keys, &s->stats.auth_denied, err, errlen);
        if (rc != PS_OK) return rc;
    }
    ps__monitor_init(s); /* without it psd still runs (logged) */
    return PS_OK;
}

int ps_server_init(ps_server *s, uv_loop_t *loop, const ps_server_config *cfg, char *err,
                   size_t errlen) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->loop = loop;
    s->start_ns = ps__now_ns();
    s->incarnation = new_incarnation();
    s->zctx = zmq_ctx_new();
    if (ps__shard_init(s) != PS_OK || !s->zctx) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    int rc = make_router(s, err, errlen); /* key files are checked before a long restore */
    if (rc != PS_OK) return rc;
    if (cfg->checkpoint_dir[0] && ps__ckpt_restore(s, err, errlen) != PS_OK) return PS_EIO;
    rc = ps__repl_init(s, err, errlen); /* --replicas 2: after the restore it must know of */
    if (rc != PS_OK) return rc;
    char addr[1100];
    if (cfg->transport == PS_TRANSPORT_IPC) {
        /* the probe and the bind are one step only under the lock: of two psd started
         * at once, the second finds it held and stops here */
        int lock_fd;
        rc = ps__ipc_lock(cfg->ipc_path, &lock_fd, err, errlen);
        if (rc != PS_OK) return rc;
        s->ipc_lock = lock_fd + 1;
        rc = clear_stale_socket(cfg->ipc_path, err, errlen);
        if (rc != PS_OK) return rc;
        snprintf(addr, sizeof addr, "ipc://%s", cfg->ipc_path);
    } else if (cfg->port == 0)
        snprintf(addr, sizeof addr, "tcp://%s:*", cfg->bind);
    else
        snprintf(addr, sizeof addr, "tcp://%s:%ld", cfg->bind, cfg->port);
    if (zmq_bind(s->router, addr) != 0) {
        int e = zmq_errno();
        snprintf(err, errlen, "cannot listen on %s: %s", addr, zmq_strerror(e));
        return e == EADDRINUSE ? PS_EADDRINUSE : PS_EINVAL;
    }
    struct stat st;
    if (cfg->transport == PS_TRANSPORT_IPC && lstat(cfg->ipc_path, &st) == 0) {
        s->ipc_dev = st.st_dev; /* ours to remove at the end (ps_server_free) */
        s->ipc_ino = st.st_ino;
        s->ipc_bound = 1;
    }
    char last[256];
    size_t last_len = sizeof last;
    zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, last, &last_len);
    /* "host:port" for tcp (as before ipc existed), "ipc://PATH" for ipc */
    snprintf(s->endpoint, sizeof s->endpoint, "%s",
             strncmp(last, "tcp://", 6) == 0 ? last + 6 : last);
    if (!s->auth && cfg->transport == PS_TRANSPORT_TCP && !is_loopback(cfg->bind))
        PS_WARN("serving in plaintext on %s without authentication; use "
                "--curve-secret/--authorized-keys (psctl keygen) on untrusted networks",
                s->endpoint);
    return PS_OK;
}

#define TURN_NS 10000000ull /* at most 10 ms of requests per loop turn */

static void on_resume(uv_idle_t *h);

/* ZMQ_FD is edge-triggered: read while ZMQ_EVENTS says POLLIN; ZMQ_EVENTS is
 * re-read on each message, which also covers the state changes our sends cause.
 * A turn is bounded (--turn-messages, TURN_NS): when requests remain, the idle
 * handle brings us back on the next loop iteration, after timers (the watchdog,
 * membership), signals and HTTP had their turn; the edge will not come again. */
static void drain(ps_server *s) {
    uint64_t t0 = ps__now_ns();
    for (long n = 0; !s->stopping; n++) {
        int events = 0;
        size_t len = sizeof events;
        if (zmq_getsockopt(s->router, ZMQ_EVENTS, &events, &len) != 0) break;
        if (!(events & ZMQ_POLLIN)) break;
        if (n >= s->cfg.turn_messages || (n % 16 == 15 && ps__now_ns() - t0 > TURN_NS)) {
            s->stats.turns_cut++;
            uv_idle_start(&s->resume, on_resume);
            return;
        }
        ps_frames f;
        int rc = ps_frames_recv(s->router, ZMQ_DONTWAIT, &f);
        if (rc == PS_ETIMEDOUT) continue;
        if (rc != PS_OK) {
            PS_WARN("receive failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        ps__server_dispatch(s, &f);
        ps_frames_close(&f);
    }
    if (!s->stopping) uv_idle_stop(&s->resume);
}

static void on_resume(uv_idle_t *h) {
    drain(h->data);
}

void ps__server_drain(ps_server *s) {
    drain(s);
}

static void on_poll(uv_poll_t *h, int status, int events) {
    (void)events;
    ps_server *s = h->data;
    if (status < 0) {
        PS_ERROR("socket poll failed: %s", uv_strerror(status));
        ps_server_stop(s);
        return;
    }
    drain(s);
}

static void on_signal(uv_signal_t *h, int signum) {
    ps_server *s = h->data;
    PS_INFO("received %s, shutting down", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    ps__ckpt_stop_signal(s); /* with --checkpoint-dir: the final checkpoint, then the stop */
}

static void on_member_timer(uv_timer_t *t) {
    ps_server *s = t->data;
    ps__members_expire(s); /* and --max-pull-wait-ms */
    ps__server_log_drops(s);
    /* Removing a worker may close a step and send replies. A send on the
     * socket can consume ZMQ_FD's edge while requests wait to be read, and
     * the poll would not fire again for them: read them now. */
    drain(s);
}

static void on_ckpt_timer(uv_timer_t *t) {
    ps_server *s = t->data;
    ps__ckpt_periodic(s);
    drain(s); /* requests that arrived while the snapshot was taken (see above) */
}

static void on_close(uv_handle_t *h) {
    ps_server *s = h->data;
    s->handles_open--;
}

int ps_server_run(ps_server *s) {
    int fd;
    size_t len = sizeof fd;
    if (zmq_getsockopt(s->router, ZMQ_FD, &fd, &len) != 0) return PS_EIO;
    uv_poll_init(s->loop, &s->poll, fd);
    uv_signal_init(s->loop, &s->sigterm);
    uv_signal_init(s->loop, &s->sigint);
    uv_timer_init(s->loop, &s->member_timer);
    uv_timer_init(s->loop, &s->ckpt_timer);
    uv_timer_init(s->loop, &s->watchdog_timer);
    uv_idle_init(s->loop, &s->resume);
    s->poll.data = s->sigterm.data = s->sigint.data = s;
    s->member_timer.data = s->ckpt_timer.data = s->watchdog_timer.data = s->resume.data = s;
    s->handles_open = 7;
    uv_poll_start(&s->poll, UV_READABLE, on_poll);
    if (s->auth && ps__auth_start(s->auth, s->loop) != PS_OK) {
        PS_ERROR("cannot watch the ZAP handler's socket");
        ps_server_stop(s);
        uv_run(s->loop, UV_RUN_DEFAULT);
        return PS_EIO;
    }
    if (ps__monitor_start(s) != PS_OK) PS_WARN("cannot watch the connection monitor");
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uint64_t tick = ps__members_tick_ms(s);
    uv_timer_start(&s->member_timer, on_member_timer, tick, tick);
    if (s->cfg.checkpoint_dir[0] && s->cfg.checkpoint_every > 0) {
        uint64_t every = (uint64_t)s->cfg.checkpoint_every * 1000u;
        uv_timer_start(&s->ckpt_timer, on_ckpt_timer, every, every);
    }
    PS_INFO("shard %ld/%ld listening on %s, mode %s, %ld workers", s->cfg.shard, s->cfg.num_shards,
            s->endpoint, ps_mode_name(s->cfg.mode), s->cfg.workers);
    char err[1400]; /* room for the ready file's path */
    if (ps__metrics_start(s, err, sizeof err) != PS_OK) {
        PS_ERROR("%s", err);
        ps_server_stop(s);
        uv_run(s->loop, UV_RUN_DEFAULT);
        return PS_EADDRINUSE;
    }
    /* The ready file is written only now: a SIGTERM sent as soon as it
     * appears must find the handlers above installed (a clean stop, not the
     * default action's status 143). */
    if (ps__repl_start(s) != PS_OK) {
        PS_ERROR("cannot watch the socket to the primary");
        ps_server_stop(s);
        uv_run(s->loop, UV_RUN_DEFAULT);
        return PS_EIO;
    }
    /* a backup writes it once it follows its primary (replica.c) */
    if (s->cfg.ready_file[0] && ps__repl_serving(s) &&
        ps__write_ready_file(s->cfg.ready_file, s->endpoint, err, sizeof err) != PS_OK) {
        PS_ERROR("%s", err);
        ps_server_stop(s);
        uv_run(s->loop, UV_RUN_DEFAULT);
        return PS_EIO;
    }
    ps__log_quorum(s);   /* --workers-min: the steps wait for the first workers */
    ps__notify_ready(s); /* bound, checkpoint restored, about to serve */
    drain(s);            /* messages may have arrived before the poll started */
    uv_run(s->loop, UV_RUN_DEFAULT);
    return PS_OK;
}

void ps_server_stop(ps_server *s) {
    if (s->stopping) return;
    s->stopping = 1;
    ps__notify_stopping(s);
    ps__metrics_stop(s);
    ps_shard_stop(&s->shard); /* the waiting pulls are answered ESHUTDOWN */
    ps__auth_stop(s->auth);
    ps__monitor_stop(s);
    ps__repl_stop(s);
    if (s->handles_open > 0) {
        uv_close((uv_handle_t *)&s->poll, on_close);
        uv_close((uv_handle_t *)&s->sigterm, on_close);
        uv_close((uv_handle_t *)&s->sigint, on_close);
        uv_close((uv_handle_t *)&s->member_timer, on_close);
        uv_close((uv_handle_t *)&s->ckpt_timer, on_close);
        uv_close((uv_handle_t *)&s->watchdog_timer, on_close);
        uv_close((uv_handle_t *)&s->resume, on_close);
    }
}

void ps_server_free(ps_server *s) {
    ps__monitor_free(s);
    ps__repl_free(s); /* its socket, before the context ends */
    if (s->router) zmq_close(s->router);
    ps__auth_free(s->auth); /* after the ROUTER: without a ZAP handler CURVE admits anyone */
    s->auth = NULL;
    if (s->zctx) zmq_ctx_term(s->zctx);
    /* Our socket file, unless something else replaced it meanwhile (ZeroMQ may have
     * removed it already when the ROUTER closed). */
    struct stat st;
    if (s->ipc_bound && lstat(s->cfg.ipc_path, &st) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == s->ipc_dev && st.st_ino == s->ipc_ino && unlink(s->cfg.ipc_path) != 0)
        PS_WARN("cannot remove %s: %s", s->cfg.ipc_path, strerror(errno));
    s->ipc_bound = 0;
    ps__ipc_unlock(s->cfg.ipc_path, s->ipc_lock - 1); /* after the socket is gone */
    s->ipc_lock = 0;
    ps__ckpt_free(s);
    ps_shard_free(&s->shard);
    free(s->scratch);
    ps__epoch_metrics_free(s);
    s->router = s->zctx = NULL;
    s->scratch = NULL;
}
