/* A minimal HTTP/1.x server on a libuv loop (see http.h): non-blocking streams,
 * a deadline per connection, a cap on connections (at the cap the connection idle
 * longest makes room: idle or slow clients cannot shut a scrape out), and a
 * lingering close so a client still sending (a body, an oversized request) reads
 * its reply. */
#include "http.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ps_error.h"

enum { READING, WRITING, LINGERING, CLOSING };
enum { P_MORE, P_DONE, P_BAD };

typedef struct conn {
    ps__http_server *srv;
    struct conn *prev, *next;
    uv_tcp_t tcp;
    uv_timer_t timer; /* the request deadline, then the linger time */
    uv_write_t write_req;
    uv_shutdown_t shutdown_req;
    int state;
    uint64_t active_ms; /* when it was accepted or last received bytes (loop time) */
    int handles;        /* of tcp and timer, not yet closed */
    int eof;            /* the client closed its side while we wrote */
    char *out;          /* the reply being written */
    size_t len;         /* request bytes in `in` */
    char in[PS_HTTP_MAX_HEADER];
} conn;

struct ps__http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    ps__http_handler fn;
    void *ctx;
    conn *conns; /* open connections, newest first */
    size_t n_conns;
    size_t refs; /* listener, connections and rejected sockets not yet closed */
    uint64_t evicted;
    int stopping;
};

/* ---- parsing ---- */

static int is_tchar(unsigned char c) {
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Parses the request line "METHOD SP TARGET SP HTTP/1.x" of `len` bytes (no CR/LF);
 * on success NUL-terminates the method and the target's path in place. */
static int parse_request_line(char *p, size_t len, char **method, char **path) {
    char *sp1 = memchr(p, ' ', len);
    if (!sp1 || sp1 == p || sp1 - p > 16) return P_BAD;
    for (char *q = p; q < sp1; q++)
        if (!is_tchar((unsigned char)*q)) return P_BAD;
    char *target = sp1 + 1;
    char *sp2 = memchr(target, ' ', len - (size_t)(target - p));
    if (!sp2 || sp2 == target || *target != '/') return P_BAD;
    for (char *q = target; q < sp2; q++)
        if ((unsigned char)*q <= 0x20 || (unsigned char)*q >= 0x7f) return P_BAD;
    size_t vlen = len - (size_t)(sp2 + 1 - p);
    if (vlen != 8 || (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
        return P_BAD;
    *sp1 = 0;
    *sp2 = 0;
    target[strcspn(target, "?#")] = 0;
    *method = p;
    *path = target;
    return P_DONE;
}

/* A header line "name: value" of `len` bytes (no CR/LF). */
static int header_ok(const char *p, size_t len) {
    const char *colon = memchr(p, ':', len);
    if (!colon || colon == p) return 0;
    for (const char *q = p; q < colon; q++)
        if (!is_tchar((unsigned char)*q)) return 0;
    for (const char *q = colon + 1; q < p + len; q++)
        if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f) return 0;
    return 1;
}

/* Looks at the bytes received so far: P_MORE (incomplete, nothing wrong yet),
 * P_BAD, or P_DONE with method and path set (pointing into buf). Lines end in
 * CRLF or a bare LF. A request line that cannot become valid is refused early. */
static int parse_request(char *buf, size_t len, char **method, char **path) {
    char *nl = memchr(buf, '\n', len);
    size_t first = nl ? (size_t)(nl - buf) : len;
    for (size_t i = 0; i < first; i++) {
        unsigned char c = (unsigned char)buf[i];
        int last = i + 1 == first;
        if (c == '\r' && last) continue;
        if (c < 0x20 || c >= 0x7f) return P_BAD;
    }
    if (!nl) return P_MORE;
    char *line_end = first && buf[first - 1] == '\r' ? nl - 1 : nl;
    char *pos = nl + 1;
    /* headers up to an empty line */
    for (;;) {
        char *e = memchr(pos, '\n', len - (size_t)(pos - buf));
        if (!e) return P_MORE;
        size_t l = (size_t)(e - pos);
        if (l && pos[l - 1] == '\r') l--;
        if (l == 0) break;
        if (!header_ok(pos, l)) return P_BAD;
        pos = e + 1;
    }
    return parse_request_line(buf, (size_t)(line_end - buf), method, path);
}

/* ---- connections ---- */

static void unref(ps__http_server *h) {
    if (--h->refs == 0) free(h);
}

static void on_conn_closed(uv_handle_t *hd) {
    conn *c = hd->data;
    if (--c->handles > 0) return;
    ps__http_server *h = c->srv;
    free(c->out);
    free(c);
    unref(h);
}

static void conn_close(conn *c) {
    if (c->state == CLOSING) return;
    c->state = CLOSING;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->srv->n_conns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timeout(uv_timer_t *t) {
    conn *c = t->data;
    if (c->state == READING) PS_DEBUG("http: request not complete in time, closing");
    conn_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
    conn *c = req->handle->data;
    if (c->state == CLOSING) return;
    if (status < 0) conn_close(c);
    /* else wait for the client's EOF, or the linger timer */
}

static void on_write(uv_write_t *req, int status) {
    conn *c = req->handle->data;
    if (c->state == CLOSING) return;
    if (status < 0 || c->eof) {
        conn_close(c);
        return;
    }
    /* Lingering close: send FIN, keep reading (and discarding) until the
     * client closes, so unread input does not turn our close into a reset
     * that could destroy the reply before the client read it. */
    c->state = LINGERING;
    uv_timer_start(&c->timer, on_timeout, PS_HTTP_LINGER_MS, 0);
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) conn_close(c);
}

static const char *reason(int status) {
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

/* Sends the reply (taking body) and moves to WRITING; closes on failure. */
static void respond(conn *c, int status, const char *ctype, char *body, size_t body_len) {
    const char *fmt = "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n";
    const char *allow = status == 405 ? "Allow: GET\r\n" : "";
    int hlen = snprintf(NULL, 0, fmt, status, reason(status), ctype, body_len, allow);
    c->out = hlen > 0 ? malloc((size_t)hlen + body_len + 1) : NULL;
    if (!c->out) {
        free(body);
        conn_close(c);
        return;
    }
    snprintf(c->out, (size_t)hlen + 1, fmt, status, reason(status), ctype, body_len, allow);
    if (body_len) memcpy(c->out + hlen, body, body_len);
    free(body);
    c->state = WRITING;
    uv_buf_t b = uv_buf_init(c->out, (unsigned)((size_t)hlen + body_len));
    if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) conn_close(c);
}

static void respond_text(conn *c, int status, const char *text) {
    size_t n = strlen(text);
    char *body = malloc(n);
    if (!body) {
        conn_close(c);
        return;
    }
    memcpy(body, text, n);
    respond(c, status, "text/plain; charset=utf-8", body, n);
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    conn *c = hd->data;
    if (c->state == READING)
        *buf = uv_buf_init(c->in + c->len, (unsigned)(sizeof c->in - c->len));
    else /* discarded: the request is no longer needed */
        *buf = uv_buf_init(c->in, (unsigned)sizeof c->in);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
    (void)buf;
    conn *c = st->data;
    if (n == 0 || c->state == CLOSING) return;
    if (n < 0) {
        if (n == UV_EOF && c->state == WRITING) { /* half-closed: the reply still goes out */
            c->eof = 1;
            uv_read_stop(st);
            return;
        }
        conn_close(c);
        return;
    }
    c->active_ms = uv_now(c->srv->loop);
    if (c->state != READING) return; /* a body, a pipelined request, or lingering */
    c->len += (size_t)n;
    char *method = NULL, *path = NULL;
    int rc = parse_request(c->in, c->len, &method, &path);
    if (rc == P_MORE && c->len < sizeof c->in) return;
    if (rc != P_DONE) {
        PS_DEBUG("http: %s request, answering 400", rc == P_MORE ? "oversized" : "malformed");
        respond_text(c, 400, "bad request\n");
        return;
    }
    if (strcmp(method, "GET") != 0) {
        respond_text(c, 405, "method not allowed\n");
        return;
    }
    ps__http_response r = {404, "text/plain; charset=utf-8", NULL, 0};
    c->srv->fn(c->srv->ctx, path, &r);
    PS_DEBUG("http: GET %s: %d", path, r.status);
    if (!r.body && r.body_len) {
        respond_text(c, 500, "out of memory\n");
        return;
    }
    respond(c, r.status, r.content_type, r.body, r.body_len);
}

static void on_rejected_closed(uv_handle_t *hd) {
    ps__http_server *h = hd->data;
    free(hd);
    unref(h);
}

/* Accepts a connection over the limit only to close it (an accept left
 * pending would stall the listener). */
static void reject(ps__http_server *h) {
    uv_tcp_t *t = malloc(sizeof *t);
    if (!t) {
        PS_ERROR("http: out of memory rejecting a connection");
        return;
    }
    uv_tcp_init(h->loop, t);
    t->data = h;
    h->refs++;
    uv_accept((uv_stream_t *)&h->listener, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, on_rejected_closed);
    PS_DEBUG("http: %zu connections open, closing a new one", h->n_conns);
}

/* At the cap: closes the connection that received nothing for longest (a reply it
 * does not read, an idle or slow one); 0 when there is none. */
static int evict_one(ps__http_server *h) {
    conn *victim = NULL;
    for (conn *c = h->conns; c; c = c->next)
        if (!victim || c->active_ms <= victim->active_ms) victim = c;
    if (!victim) return 0;
    h->evicted++;
    PS_DEBUG("http: %zu connections open, closing the one idle longest", h->n_conns);
    conn_close(victim);
    return 1;
}

static void on_connection(uv_stream_t *server, int status) {
    ps__http_server *h = server->data;
    if (status < 0) {
        PS_WARN("http: accept failed: %s", uv_strerror(status));
        return;
    }
    if (h->n_conns >= PS_HTTP_MAX_CONNS) evict_one(h);
    conn *c = h->n_conns < PS_HTTP_MAX_CONNS ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        reject(h);
        return;
    }
    c->srv = h;
    c->active_ms = uv_now(h->loop);
    uv_tcp_init(h->loop, &c->tcp);
    uv_timer_init(h->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles = 2;
    h->refs++;
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    h->n_conns++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timeout, PS_HTTP_REQUEST_MS, 0);
}

/* ---- the server ---- */

static void on_listener_closed(uv_handle_t *hd) {
    unref(hd->data);
}

int ps__http_server_start(uv_loop_t *loop, const char *bind, int port, ps__http_handler fn,
                          void *ctx, ps__http_server **out, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    int v6 = 0;
    if (uv_ip4_addr(bind, port, (struct sockaddr_in *)&ss) != 0) {
        v6 = 1;
        if (uv_ip6_addr(bind, port, (struct sockaddr_in6 *)&ss) != 0) {
            snprintf(err, errlen, "bad metrics address \"%s\" (want an IPv4 or IPv6 literal)",
                     bind);
            return PS_EINVAL;
        }
    }
    ps__http_server *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    h->loop = loop;
    h->fn = fn;
    h->ctx = ctx;
    h->refs = 1;
    uv_tcp_init(loop, &h->listener);
    h->listener.data = h;
    int rc = uv_tcp_bind(&h->listener, (const struct sockaddr *)&ss, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&h->listener, 128, on_connection);
    if (rc != 0) {
        snprintf(err, errlen, "cannot listen for metrics on %s%s%s:%d: %s", v6 ? "[" : "", bind,
                 v6 ? "]" : "", port, uv_strerror(rc));
        h->stopping = 1;
        uv_close((uv_handle_t *)&h->listener, on_listener_closed);
        return rc == UV_EADDRINUSE ? PS_EADDRINUSE : PS_EINVAL;
    }
    *out = h;
    return PS_OK;
}

int ps__http_server_address(ps__http_server *h, char *buf, size_t len) {
    struct sockaddr_storage ss;
    int n = sizeof ss;
    char host[64];
    if (uv_tcp_getsockname(&h->listener, (struct sockaddr *)&ss, &n) != 0) return PS_EIO;
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        if (uv_ip6_name(a, host, sizeof host) != 0) return PS_EIO;
        snprintf(buf, len, "[%s]:%u", host, (unsigned)ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        if (uv_ip4_name(a, host, sizeof host) != 0) return PS_EIO;
        snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(a->sin_port));
    }
    return PS_OK;
}

uint64_t ps__http_server_evicted(const ps__http_server *h) {
    return h->evicted;
}

void ps__http_server_stop(ps__http_server *h) {
    if (h->stopping) return;
    h->stopping = 1;
    uv_close((uv_handle_t *)&h->listener, on_listener_closed);
    while (h->conns)
        conn_close(h->conns);
}
