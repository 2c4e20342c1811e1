/* psctl local's control socket and the scaling it serves (control.h). */
#include "control.h"

#include "local.h"
#include "log.h"
#include "supervisor_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct psctl_control {
    uv_pipe_t server;
    int open;           /* the server handle is initialised and not closed */
    struct conn *conns; /* open connections */
} psctl_control;

typedef struct conn {
    uv_pipe_t pipe;
    uv_write_t write;
    sup *sv;
    struct conn *next;
    char in[PSCTL_CONTROL_LINE_MAX];
    size_t len;
    char out[PSCTL_CONTROL_LINE_MAX + 16];
    int answered;
} conn;

/* ---- scaling -------------------------------------------------------------------- */

static child *worker_at(sup *sv, int j) {
    return &sv->children[sv->npsd + j];
}

int psctl__scale(sup *sv, long k, char *msg, size_t n) {
    const psctl_local_opts *o = sv->job->opts;
    long slots = psctl_local_slots(o), now = sv->workers_active;
    if (!psctl_local_elastic(o)) {
        snprintf(msg, n,
                 "the job is not elastic (psctl local without --workers-min): its "
                 "workers cannot be scaled");
        return -1;
    }
    if (sv->phase != PHASE_RUNNING || sv->workers_ok > 0) {
        snprintf(msg, n, "the job is %s: no scaling now",
                 sv->phase == PHASE_STARTING ? "starting (its shards are not ready yet)"
                                             : "ending");
        return -1;
    }
    if (k < o->workers_min) {
        snprintf(msg, n, "--workers %ld is below the job's --workers-min %ld", k, o->workers_min);
        return -1;
    }
    if (k > slots) {
        snprintf(msg, n, "--workers %ld is above the job's %ld slots (psctl local %s %ld)", k,
                 slots, o->workers_max > 0 ? "--workers-max" : "--workers", slots);
        return -1;
    }
    if (k == now) {
        snprintf(msg, n, "the job has %ld workers already", k);
        return 0;
    }
    if (k > now) { /* the free slots must be free: no worker of theirs still stopping */
        for (long j = now; j < k; j++) {
            child *c = worker_at(sv, (int)j);
            for (int p = 0; p < 2; p++)
                psctl__close_pipe(c, p);
            if (c->running || c->restart_pending || c->proc_open ||
                c->pipe_state[0] == PIPE_CLOSING || c->pipe_state[1] == PIPE_CLOSING) {
                snprintf(msg, n, "%s is still stopping: try again in a moment", c->label);
                return -1;
            }
        }
        for (long j = now; j < k; j++) {
            child *c = worker_at(sv, (int)j);
            c->scaled_down = c->stop_sent = 0;
            c->restarts = 0;
            if (psctl__start_worker(sv, c) < 0) {
                snprintf(msg, n, "%s could not be started (said above)", c->label);
                return -1;
            }
            sv->workers_active = (int)j + 1;
        }
        psctl__say(sv, "scaled up from %ld to %ld workers (psctl scale)", now, k);
        if (k - now == 1)
            snprintf(msg, n, "started worker %ld: %ld workers", now, k);
        else
            snprintf(msg, n, "started workers %ld to %ld: %ld workers", now, k - 1, k);
        return 0;
    }
    for (long j = now - 1; j >= k; j--) {
        child *c = worker_at(sv, (int)j);
        if (c->restart_pending) { /* waiting to be restarted: it simply is not */
            uv_timer_stop(&c->restart_timer);
            c->restart_pending = 0;
        }
        c->scaled_down = 1;
        psctl__signal_child(c, SIGTERM);
    }
    sv->workers_active = (int)k;
    psctl__say(sv, "scaling down from %ld to %ld workers (psctl scale): SIGTERM to worker%s %ld%s",
               now, k, now - k > 1 ? "s" : "", k, now - k > 1 ? " and up" : "");
    snprintf(msg, n,
             "stopping worker%s %ld%s (SIGTERM: each leaves after its step): %ld "
             "workers",
             now - k > 1 ? "s" : "", k, now - k > 1 ? " and up" : "", k);
    psctl__check_done(sv);
    return 0;
}

/* ---- the socket ----------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h) {
    conn *c = h->data;
    psctl_control *ctl = c->sv->control; /* NULL: the server closed first */
    for (conn **p = ctl ? &ctl->conns : &c; ctl && *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    free(c);
}

static void close_conn(conn *c) {
    if (!uv_is_closing((uv_handle_t *)&c->pipe)) uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void on_written(uv_write_t *w, int status) {
    (void)status;
    close_conn(w->data);
}

static void answer(conn *c, int ok, const char *msg) {
    c->answered = 1;
    snprintf(c->out, sizeof c->out, "%s %s\n", ok ? "ok" : "error", msg);
    uv_buf_t b = uv_buf_init(c->out, (unsigned)strlen(c->out));
    c->write.data = c;
    if (uv_write(&c->write, (uv_stream_t *)&c->pipe, &b, 1, on_written) < 0) close_conn(c);
}

/* One request line (without its newline). */
static void serve(conn *c, const char *line) {
    char msg[PSCTL_CONTROL_LINE_MAX];
    char *end;
    if (strncmp(line, "scale ", 6) != 0) {
        answer(c, 0, "unknown request (want: scale K)");
        return;
    }
    long k = strtol(line + 6, &end, 10);
    if (end == line + 6 || *end || k < 0) {
        answer(c, 0, "scale needs a number of workers");
        return;
    }
    int r = psctl__scale(c->sv, k, msg, sizeof msg);
    answer(c, r == 0, msg);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
    (void)hint;
    conn *c = h->data;
    *b = uv_buf_init(c->in + c->len, (unsigned)(sizeof c->in - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    (void)b;
    conn *c = s->data;
    if (c->answered) return;
    if (nread < 0) {
        close_conn(c);
        return;
    }
    c->len += (size_t)nread;
    c->in[c->len] = '\0';
    char *nl = memchr(c->in, '\n', c->len);
    if (nl) {
        *nl = '\0';
        uv_read_stop(s);
        serve(c, c->in);
    } else if (c->len == sizeof c->in - 1) {
        uv_read_stop(s);
        answer(c, 0, "request too long");
    }
}

static void on_connection(uv_stream_t *server, int status) {
    sup *sv = server->data;
    if (status < 0) return;
    conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->sv = sv;
    uv_pipe_init(&sv->loop, &c->pipe, 0);
    c->pipe.data = c;
    uv_unref((uv_handle_t *)&c->pipe); /* a silent client must not hold psctl open */
    c->next = sv->control->conns;
    sv->control->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0 ||
        uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0)
        close_conn(c);
}

static void on_server_closed(uv_handle_t *h) {
    sup *sv = h->data;
    free(sv->control);
    sv->control = NULL;
}

int psctl__control_open(sup *sv, const char *path) {
    psctl_control *ctl = calloc(1, sizeof *ctl);
    if (!ctl) return UV_ENOMEM;
    int r = uv_pipe_init(&sv->loop, &ctl->server, 0);
    if (r < 0) {
        free(ctl);
        return r;
    }
    sv->control = ctl;
    ctl->server.data = sv;
    ctl->open = 1;
    r = uv_pipe_bind(&ctl->server, path);
    if (r == 0) r = uv_listen((uv_stream_t *)&ctl->server, 4, on_connection);
    uv_unref((uv_handle_t *)&ctl->server);
    if (r < 0) psctl__control_close(sv);
    return r;
}

void psctl__control_close(sup *sv) {
    psctl_control *ctl = sv->control;
    if (!ctl) return;
    for (conn *c = ctl->conns; c; c = c->next)
        close_conn(c);
    if (ctl->open) {
        ctl->open = 0;
        uv_close((uv_handle_t *)&ctl->server, on_server_closed);
    }
}
