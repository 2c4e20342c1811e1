/* psd's event loop: the ROUTER socket watched through ZMQ_FD, signals, and
 * orderly shutdown (see server.h). */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "ps_error.h"

uint64_t ps__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int write_ready_file(const char *path, const char *endpoint, char *err, size_t errlen) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", endpoint) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write ready file %s: %s", path, strerror(errno));
        return PS_EIO;
    }
    return PS_OK;
}

int ps_server_init(ps_server *s, uv_loop_t *loop, const ps_server_config *cfg, char *err,
                   size_t errlen) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->loop = loop;
    s->start_ns = ps__now_ns();
    ps_store_init(&s->store);
    s->pushed = calloc((size_t)cfg->workers, 1);
    s->zctx = zmq_ctx_new();
    if (!s->pushed || !s->zctx) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    s->router = zmq_socket(s->zctx, ZMQ_ROUTER);
    int one = 1, linger = 1000;
    zmq_setsockopt(s->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(s->router, ZMQ_LINGER, &linger, sizeof linger);
    char addr[300];
    if (cfg->port == 0)
        snprintf(addr, sizeof addr, "tcp://%s:*", cfg->bind);
    else
        snprintf(addr, sizeof addr, "tcp://%s:%ld", cfg->bind, cfg->port);
    if (zmq_bind(s->router, addr) != 0) {
        int e = zmq_errno();
        snprintf(err, errlen, "cannot listen on %s: %s", addr, zmq_strerror(e));
        return e == EADDRINUSE ? PS_EADDRINUSE : PS_EINVAL;
    }
    char last[256];
    size_t last_len = sizeof last;
    zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, last, &last_len);
    snprintf(s->endpoint, sizeof s->endpoint, "%s",
             strncmp(last, "tcp://", 6) == 0 ? last + 6 : last);
    if (cfg->ready_file[0] && write_ready_file(cfg->ready_file, s->endpoint, err, errlen) != PS_OK)
        return PS_EIO;
    return PS_OK;
}

/* ZMQ_FD is edge-triggered: drain while ZMQ_EVENTS says POLLIN; ZMQ_EVENTS is
 * re-read on each turn, which also covers the state changes our sends cause. */
static void drain(ps_server *s) {
    while (!s->stopping) {
        int events = 0;
        size_t len = sizeof events;
        if (zmq_getsockopt(s->router, ZMQ_EVENTS, &events, &len) != 0) return;
        if (!(events & ZMQ_POLLIN)) return;
        ps_frames f;
        int rc = ps_frames_recv(s->router, ZMQ_DONTWAIT, &f);
        if (rc == PS_ETIMEDOUT) continue;
        if (rc != PS_OK) {
            PS_WARN("receive failed: %s", zmq_strerror(zmq_errno()));
            return;
        }
        ps__server_dispatch(s, &f);
        ps_frames_close(&f);
    }
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
    ps_server_stop(s);
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
    s->poll.data = s->sigterm.data = s->sigint.data = s;
    s->handles_open = 3;
    uv_poll_start(&s->poll, UV_READABLE, on_poll);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    PS_INFO("shard %ld/%ld listening on %s, mode %s, %ld workers", s->cfg.shard, s->cfg.num_shards,
            s->endpoint, ps_mode_name(s->cfg.mode), s->cfg.workers);
    drain(s); /* messages may have arrived before the poll started */
    uv_run(s->loop, UV_RUN_DEFAULT);
    return PS_OK;
}

void ps_server_stop(ps_server *s) {
    if (s->stopping) return;
    s->stopping = 1;
    ps__server_answer_pending(s);
    if (s->handles_open > 0) {
        uv_close((uv_handle_t *)&s->poll, on_close);
        uv_close((uv_handle_t *)&s->sigterm, on_close);
        uv_close((uv_handle_t *)&s->sigint, on_close);
    }
}

void ps_server_free(ps_server *s) {
    if (s->router) zmq_close(s->router);
    if (s->zctx) zmq_ctx_term(s->zctx);
    ps_store_free(&s->store);
    free(s->pushed);
    free(s->scratch);
    s->router = s->zctx = NULL;
    s->pushed = NULL;
    s->scratch = NULL;
}
