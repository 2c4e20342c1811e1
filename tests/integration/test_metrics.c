/* psd's HTTP endpoint against real clients: curl for /metrics and /healthz, promtool
 * for the exposition format, raw sockets for garbage, oversized, slow and idle
 * clients, and the worker client library for values that move. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"

#define PROM_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define REPLY_MS 5000

static ps_test_psd psd;
static char tmp[512]; /* curl's outputs */
static int mport;     /* the metrics port psd logged */

/* Forks and execs argv with stdin from in_path (or /dev/null), stdout to out_path
 * and stderr to err_path (truncated); waits up to timeout_ms. Returns the exit status. */
static int run(const char *const *argv, const char *in_path, const char *out_path,
               const char *err_path, int timeout_ms) {
    pid_t pid = fork();
    if (pid == 0) {
        int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0 || err < 0) _exit(126);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    ck_assert_msg(pid > 0, "fork: %s", strerror(errno));
    return ps_test_wait(pid, timeout_ms);
}

/* curl's reply to one request: status (-1 when curl failed), content type, body. */
typedef struct {
    int status;
    char ctype[128];
    char *body; /* owned */
} reply;

/* Requests http://127.0.0.1:mport<path> with curl (method NULL: GET; data: a body). */
static reply http(const char *method, const char *path, const char *data) {
    char url[256], body[600], out[600], err[600];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", mport, path);
    snprintf(body, sizeof body, "%s/body", tmp);
    snprintf(out, sizeof out, "%s/curl.out", tmp);
    snprintf(err, sizeof err, "%s/curl.err", tmp);
    const char *argv[16] = {"curl", "-sS", "-m", "5",
                            "-o",   body,  "-w", "%{http_code} %{content_type}"};
    int n = 8;
    if (method) {
        argv[n++] = "-X";
        argv[n++] = method;
    }
    if (data) {
        argv[n++] = "--data-binary";
        argv[n++] = data;
    }
    argv[n++] = url;
    argv[n] = NULL;
    reply r = {-1, "", NULL};
    int st = run(argv, NULL, out, err, 10000);
    ck_assert_msg(st != 127, "curl is not installed (deploy/bootstrap.sh installs it)");
    char *o = ps_test_slurp(out, NULL);
    if (st == 0 && o && sscanf(o, "%d %127[^\n]", &r.status, r.ctype) >= 1) {
        r.body = ps_test_slurp(body, NULL);
    } else {
        r.status = -1;
        ps_test_dump(err);
    }
    free(o);
    unlink(body);
    return r;
}

/* GET /metrics: asserts 200 and the content type; returns the body (caller frees). */
static char *scrape(void) {
    reply r = http(NULL, "/metrics", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.ctype, PROM_TYPE);
    ck_assert_ptr_nonnull(r.body);
    return r.body;
}

/* The value of one series, e.g. `psd_version{shard="0"}`; fails when absent. */
static double value(const char *text, const char *series) {
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
    }
    ck_abort_msg("series %s missing from /metrics:\n%s", series, text);
    return NAN;
}

/* ---- raw sockets ---- */

static int raw_connect(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)mport)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
                  strerror(errno));
    return fd;
}

static void raw_send(int fd, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
        ck_assert_msg(w > 0, "send: %s", strerror(errno));
        data += w;
        n -= (size_t)w;
    }
}

/* Reads until the peer closes or timeout_ms pass; returns the bytes read (NUL-terminated
 * in buf) and sets *closed when the peer closed (EOF or reset). */
static size_t raw_read(int fd, char *buf, size_t cap, int timeout_ms, int *closed) {
    size_t len = 0;
    long long deadline = ps_test_now_ms() + timeout_ms;
    *closed = 0;
    for (;;) {
        long long left = deadline - ps_test_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r <= 0) {
            *closed = 1;
            break;
        }
        len += (size_t)r;
        if (len == cap - 1) break;
    }
    buf[len] = 0;
    return len;
}

/* Sends `req` on a fresh connection and expects the status line `want` followed by
 * the server closing the connection. */
static void raw_expect(const char *req, size_t n, const char *want) {
    int fd = raw_connect();
    raw_send(fd, req, n);
    char buf[4096];
    int closed;
    raw_read(fd, buf, sizeof buf, 5000, &closed);
    close(fd);
    ck_assert_msg(strncmp(buf, want, strlen(want)) == 0, "want \"%s\", got \"%.80s\"", want, buf);
    ck_assert_msg(closed, "the server did not close the connection after \"%s\"", want);
}

/* ---- fixtures ---- */

static void cleanup_at_exit(void) {
    ps_test_psd_stop(&psd, 2000);
    if (tmp[0]) ps_test_rmdir(tmp);
    tmp[0] = 0;
}

static void make_tmp(void) {
    atexit(cleanup_at_exit);
    ps_test_children_die_with_me();
    char *d = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(d);
    snprintf(tmp, sizeof tmp, "%s", d);
    free(d);
}

/* The port in "metrics on http://HOST:PORT/metrics" once psd logged it into *(int *)ctx
 * (1), or 0; fails the test when psd exited meanwhile. */
static int metrics_port_logged(void *ctx) {
    char *log = ps_test_slurp(psd.log, NULL);
    const char *m = log ? strstr(log, "metrics on http://") : NULL;
    const char *colon = m ? strchr(m + 18, ':') : NULL;
    *(int *)ctx = colon ? atoi(colon + 1) : 0;
    free(log);
    if (*(int *)ctx > 0) return 1;
    ck_assert_msg(ps_test_alive(psd.pid), "psd exited");
    return 0;
}

/* Waits for psd to log its metrics address; returns the port. */
static int wait_metrics_port(void) {
    int port = 0;
    if (ps_test_wait_until(metrics_port_logged, &port, 5000, 5)) return port;
    ps_test_dump(psd.log);
    ck_abort_msg("psd did not log its metrics address");
    return -1;
}

static void setup(void) {
    make_tmp();
    const char *args[] = {"--workers",      "1",         "--mode", "sync", "--metrics-port", "0",
                          "--metrics-bind", "127.0.0.1", NULL};
    ck_assert_msg(ps_test_psd_start(&psd, args, 10000) == 0, "psd did not start");
    mport = wait_metrics_port();
}

/* Stops psd (unless a test did) and checks it exited 0 with every handle closed. */
static void expect_clean_exit(void) {
    int st = 0;
    if (psd.pid > 0) {
        kill(psd.pid, SIGTERM);
        st = ps_test_wait(psd.pid, 5000);
        psd.pid = 0;
    }
    char *log = ps_test_slurp(psd.log, NULL);
    int leaked = log && strstr(log, "handles still open") != NULL;
    free(log);
    if (st != 0 || leaked) ps_test_dump(psd.log);
    ck_assert_msg(st == 0, "psd exited with status %d after SIGTERM", st);
    ck_assert_msg(!leaked, "psd closed its loop with handles still open");
}

static void teardown(void) {
    expect_clean_exit();
    ps_test_psd_stop(&psd, 0); /* removes its temp dir */
    ps_test_rmdir(tmp);
    tmp[0] = 0;
}

/* ---- the endpoints ---- */

START_TEST(metrics_is_valid_exposition) {
    char *text = scrape();
    const char *families[] = {
        "psd_requests_total counter",
        "psd_heartbeats_total counter",
        "psd_errors_total counter",
        "psd_bytes_received_total counter",
        "psd_bytes_sent_total counter",
        "psd_pushes_applied_total counter",
        "psd_stale_pushes_dropped_total counter",
        "psd_updates_applied_total counter",
        "psd_version gauge",
        "psd_live_workers gauge",
        "psd_workers gauge",
        "psd_workers_removed_total counter",
        "psd_pending_pulls gauge",
        "psd_max_staleness gauge",
        "psd_checkpoints_total counter",
        "psd_uptime_seconds gauge",
        "psd_variables gauge",
        "psd_parameters gauge",
        "psd_mode gauge",
        "psd_apply_latency_seconds histogram",
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "# TYPE %s\n", families[i]);
        ck_assert_msg(strstr(text, want), "no \"%s\" in /metrics", want);
    }
    ck_assert_double_eq(value(text, "psd_mode{shard=\"0\",mode=\"sync\"}"), 1);
    ck_assert_double_eq(value(text, "psd_workers{shard=\"0\"}"), 1);
    ck_assert_msg(!strstr(text, "psd_checkpoint_age_seconds"), "checkpoint age without one");
    free(text);

    /* promtool parses and lints the exposition */
    char body[600], out[600];
    snprintf(body, sizeof body, "%s/metrics.txt", tmp);
    snprintf(out, sizeof out, "%s/promtool.out", tmp);
    reply r = http(NULL, "/metrics", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(ps_test_write_file(body, r.body, strlen(r.body)), 0);
    free(r.body);
    const char *argv[] = {"promtool", "check", "metrics", NULL};
    int st = run(argv, body, out, out, 10000);
    ck_assert_msg(st != 127, "promtool not found: install the Debian package 'prometheus' "
                             "(deploy/bootstrap.sh does)");
    if (st != 0) ps_test_dump(out);
    ck_assert_msg(st == 0, "promtool check metrics exited %d", st);
}
END_TEST

/* An embedding table's counts appear per table (its name escaped as a label
 * value) and move with pushes; promtool accepts the exposition. */
START_TEST(tables_on_metrics) {
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ps_client *c;
    ck_assert_msg(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err) == PS_OK, "%s", err);
    ps_client_set_timeout(c, 10000);
    ck_assert_int_eq(ps_client_hello(c, NULL, NULL), PS_OK);
    ps_table_spec spec;
    ps_client_table_spec(&spec, "emb\"x", 8, "adagrad", 0.1f);
    spec.max_rows = 100;
    ps_table *t;
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    uint64_t ids[3] = {4, 9, 4};
    float g[3 * 8];
    for (int i = 0; i < 3 * 8; i++) g[i] = 0.5f;
    ck_assert_int_eq(ps_client_push_rows(t, ids, 3, g, PS_ROWS_END_STEP, NULL), PS_OK);
    float rows[3 * 8];
    ck_assert_int_eq(ps_client_pull_rows(t, ids, 3, rows), PS_OK); /* waits for the step */
    ps_client_close(c);
    char *text = scrape();
    ck_assert_double_eq(value(text, "psd_table_rows{shard=\"0\",table=\"emb\\\"x\"}"), 2);
    ck_assert_double_eq(value(text, "psd_table_rows_admitted_total{shard=\"0\",table=\"emb\\\"x\"}"),
                        2);
    ck_assert_double_eq(value(text, "psd_table_max_rows{shard=\"0\",table=\"emb\\\"x\"}"), 100);
    ck_assert_double_gt(value(text, "psd_table_bytes{shard=\"0\",table=\"emb\\\"x\"}"), 0);
    free(text);
    char body[600], out[600];
    snprintf(body, sizeof body, "%s/metrics.txt", tmp);
    snprintf(out, sizeof out, "%s/promtool.out", tmp);
    reply r = http(NULL, "/metrics", NULL);
    ck_assert_int_eq(ps_test_write_file(body, r.body, strlen(r.body)), 0);
    free(r.body);
    const char *argv[] = {"promtool", "check", "metrics", NULL};
    int st = run(argv, body, out, out, 10000);
    if (st != 0) ps_test_dump(out);
    ck_assert_msg(st == 0, "promtool check metrics exited %d", st);
}
END_TEST

START_TEST(healthz_ok) {
    reply r = http(NULL, "/healthz", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ok\n");
    free(r.body);
}
END_TEST

START_TEST(unknown_path_404) {
    const char *paths[] = {"/nope", "/", "/metricsx", "/metrics/", "/healthz/x"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        reply r = http(NULL, paths[i], NULL);
        ck_assert_msg(r.status == 404, "%s: %d", paths[i], r.status);
        free(r.body);
    }
    reply r = http(NULL, "/metrics?x=1", NULL); /* the query string is ignored */
    ck_assert_int_eq(r.status, 200);
    free(r.body);
}
END_TEST

START_TEST(non_get_405) {
    reply r = http("POST", "/metrics", "a=1&b=2");
    ck_assert_int_eq(r.status, 405);
    free(r.body);
    r = http("DELETE", "/healthz", NULL);
    ck_assert_int_eq(r.status, 405);
    free(r.body);
    /* a body the server never reads must not turn the reply into a reset */
    size_t n = 200000;
    char *big = malloc(n + 1), path[600], arg[610];
    memset(big, 'x', n);
    snprintf(path, sizeof path, "%s/big", tmp);
    ck_assert_int_eq(ps_test_write_file(path, big, n), 0);
    free(big);
    snprintf(arg, sizeof arg, "@%s", path);
    r = http("PUT", "/metrics", arg);
    ck_assert_int_eq(r.status, 405);
    free(r.body);
}
END_TEST

START_TEST(garbage_request_400) {
    const char tls[] = "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03";
    raw_expect(tls, sizeof tls - 1, "HTTP/1.1 400 ");
    const char *bad[] = {
        "garbage\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET /metrics HTTP/9.9\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        "GET  /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: x\r\n\x01: y\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        raw_expect(bad[i], strlen(bad[i]), "HTTP/1.1 400 ");
    /* and a plain valid request on a raw socket works, bare LFs included */
    const char *ok = "GET /healthz HTTP/1.0\nHost: x\n\n";
    raw_expect(ok, strlen(ok), "HTTP/1.1 200 OK\r\n");
}
END_TEST

/* Builds "GET /healthz HTTP/1.1\r\n" plus padding headers up to `total` bytes
 * including the final blank line; caller frees. */
static char *padded_request(size_t total) {
    char *p = malloc(total + 1);
    size_t n = (size_t)sprintf(p, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; total - n > 80; i++)
        n += (size_t)sprintf(p + n, "X-Pad-%03d: %050d\r\n", i, i);
    size_t fill = total - n - 11; /* "X-End: " + CRLF CRLF */
    n += (size_t)sprintf(p + n, "X-End: ");
    memset(p + n, 'a', fill);
    n += fill;
    memcpy(p + n, "\r\n\r\n", 4);
    n += 4;
    ck_assert_uint_eq(n, total);
    p[n] = 0;
    return p;
}

START_TEST(oversized_headers_400) {
    char *fits = padded_request(8192);
    raw_expect(fits, 8192, "HTTP/1.1 200 OK\r\n");
    free(fits);
    char *big = padded_request(8193);
    raw_expect(big, 8193, "HTTP/1.1 400 ");
    free(big);
    big = padded_request(64 * 1024); /* the client is still sending when the reply goes */
    raw_expect(big, 64 * 1024, "HTTP/1.1 400 ");
    free(big);
}
END_TEST

START_TEST(slow_client_does_not_block) {
    int slow = raw_connect();
    raw_send(slow, "GET /metr", 9);
    long long t0 = ps_test_now_ms();
    char *text = scrape();
    ck_assert_msg(ps_test_now_ms() - t0 < 3000, "/metrics took %lld ms", ps_test_now_ms() - t0);
    free(text);
    char buf[65536]; /* the whole reply (over 8 KiB), so the read sees the close */
    int closed;
    ck_assert_uint_eq(raw_read(slow, buf, sizeof buf, 50, &closed), 0);
    ck_assert(!closed);
    raw_send(slow, "ics HTTP/1.1\r\nHost: x\r\n\r\n", 25);
    raw_read(slow, buf, sizeof buf, 5000, &closed);
    close(slow);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "got \"%.80s\"", buf);
    ck_assert_msg(strstr(buf, "Content-Type: " PROM_TYPE "\r\n"), "got \"%.200s\"", buf);
    ck_assert_msg(strstr(buf, "Connection: close\r\n"), "got \"%.200s\"", buf);
    ck_assert(closed);
}
END_TEST

START_TEST(idle_connection_closed) {
    int idle = raw_connect();
    int half = raw_connect();
    raw_send(half, "GET /healthz HTTP/1.1\r\n", 23);
    long long t0 = ps_test_now_ms();
    char buf[256];
    int closed;
    size_t n = raw_read(idle, buf, sizeof buf, 15000, &closed);
    long long waited = ps_test_now_ms() - t0;
    ck_assert_uint_eq(n, 0);
    ck_assert_msg(closed, "an idle connection was still open after 15 s");
    ck_assert_msg(waited > 4500, "closed after %lld ms, before the 5 s deadline", waited);
    n = raw_read(half, buf, sizeof buf, 2000, &closed);
    ck_assert_uint_eq(n, 0);
    ck_assert_msg(closed, "a half-sent request was still open after the deadline");
    close(idle);
    close(half);
    reply r = http(NULL, "/healthz", NULL);
    ck_assert_int_eq(r.status, 200);
    free(r.body);
}
END_TEST

/* 64 idle connections (the cap) cannot shut a scrape out: the new connection is
 * served promptly and the one idle longest makes room. */
START_TEST(connection_limit_evicts_idlest) {
    int fds[64];
    for (int i = 0; i < 64; i++)
        fds[i] = raw_connect();
    reply warm = http(NULL, "/healthz", NULL); /* all 64 are accepted by now */
    ck_assert_int_eq(warm.status, 200);
    free(warm.body);
    for (int round = 0; round < 3; round++) {
        long long t0 = ps_test_now_ms();
        reply r = http(NULL, "/healthz", NULL);
        long long took = ps_test_now_ms() - t0;
        ck_assert_msg(r.status == 200, "/healthz with 64 idle connections: status %d", r.status);
        ck_assert_msg(took < 2000, "/healthz with 64 idle connections took %lld ms", took);
        free(r.body);
    }
    char buf[256];
    int closed;
    raw_read(fds[0], buf, sizeof buf, 2000, &closed);
    ck_assert_msg(closed, "the connection idle longest was not closed to make room");
    raw_send(fds[63], "GET /healthz HTTP/1.1\r\n\r\n", 25);
    raw_read(fds[63], buf, sizeof buf, 5000, &closed);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "got \"%.80s\"", buf);
    for (int i = 0; i < 64; i++)
        close(fds[i]);
    reply m = http(NULL, "/metrics", NULL);
    ck_assert_int_eq(m.status, 200);
    ck_assert_msg(strstr(m.body, "psd_http_connections_evicted_total{shard=\"0\"} "),
                  "no eviction counter in /metrics");
    ck_assert_msg(!strstr(m.body, "psd_http_connections_evicted_total{shard=\"0\"} 0\n"),
                  "evictions not counted");
    free(m.body);
}
END_TEST

START_TEST(sigterm_with_open_connections) {
    int idle = raw_connect();
    int half = raw_connect();
    raw_send(half, "GET /metrics HTTP/1.1\r\nHost", 27);
    reply r = http(NULL, "/healthz", NULL); /* both are accepted by now */
    ck_assert_int_eq(r.status, 200);
    free(r.body);
    expect_clean_exit();
    close(idle);
    close(half);
}
END_TEST

/* ---- values move ---- */

#define NW 6
#define NB 4

/* Sends one undecodable message on a raw DEALER and waits for the Error reply. */
static void send_garbage_request(void) {
    void *ctx = zmq_ctx_new();
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", psd.endpoint);
    ck_assert_int_eq(zmq_connect(d, ep), 0);
    ck_assert_int_eq(zmq_send(d, "\xff\xfe garbage", 10, 0), 10);
    zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
    ck_assert_msg(zmq_poll(&it, 1, REPLY_MS) == 1, "no Error reply to a garbage request");
    char buf[512];
    ck_assert_int_gt(zmq_recv(d, buf, sizeof buf, 0), 0);
    zmq_close(d);
    zmq_ctx_term(ctx);
}

START_TEST(values_move_with_workload) {
    char *a = scrape();
    float w[NW] = {1, 2, 3, 4, 5, 6}, dw[NW] = {0}, b[NB] = {0}, db[NB] = {0};
    ps_client *c = NULL;
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ck_assert_msg(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err) == PS_OK, "open: %s", err);
    ps_client_set_timeout(c, REPLY_MS);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    ps_client_tensor tw = {.name = "w", .shard = 0, .rank = 2, .shape = {2, 3}, .opt = opt};
    tw.param = w;
    tw.grad = dw;
    ck_assert_int_eq(ps_client_add(c, &tw), PS_OK);
    ps_client_tensor tb = {.name = "b", .shard = 0, .rank = 1, .shape = {NB}, .opt = opt};
    tb.param = b;
    tb.grad = db;
    ck_assert_int_eq(ps_client_add(c, &tb), PS_OK);
    int async = -1;
    ck_assert_msg(ps_client_hello(c, &async, NULL) == PS_OK, "%s", ps_client_error(c));
    size_t created = 0;
    ck_assert_msg(ps_client_create_vars(c, &created) == PS_OK, "%s", ps_client_error(c));
    const int steps = 3;
    for (int t = 0; t < steps; t++) {
        uint64_t version = 0;
        ck_assert_msg(ps_client_pull(c, (uint64_t)t, &version) == PS_OK, "pull: %s",
                      ps_client_error(c));
        for (int i = 0; i < NW; i++)
            dw[i] = 0.5f * (float)(i + t);
        for (int i = 0; i < NB; i++)
            db[i] = 1.0f;
        int all = 0;
        ck_assert_msg(ps_client_push(c, (uint64_t)t, &all) == PS_OK, "push: %s",
                      ps_client_error(c));
    }
    char *m = scrape();
#define DELTA(series) (value(m, series) - value(a, series))
    ck_assert_double_eq(DELTA("psd_requests_total{shard=\"0\",type=\"Push\"}"), steps);
    ck_assert_double_ge(DELTA("psd_requests_total{shard=\"0\",type=\"Pull\"}"), steps);
    ck_assert_double_eq(DELTA("psd_requests_total{shard=\"0\",type=\"CreateVars\"}"), 1);
    ck_assert_double_eq(DELTA("psd_pushes_applied_total{shard=\"0\"}"), steps);
    ck_assert_double_eq(DELTA("psd_updates_applied_total{shard=\"0\"}"), steps);
    ck_assert_double_eq(value(m, "psd_version{shard=\"0\"}"), steps);
    ck_assert_double_gt(DELTA("psd_bytes_received_total{shard=\"0\"}"), 0);
    ck_assert_double_gt(DELTA("psd_bytes_sent_total{shard=\"0\"}"), 0);
    ck_assert_double_eq(value(m, "psd_variables{shard=\"0\"}"), 2);
    ck_assert_double_eq(value(m, "psd_parameters{shard=\"0\"}"), NW + NB);
    ck_assert_double_eq(value(m, "psd_live_workers{shard=\"0\"}"), 1);
    /* the histogram: one apply per sync step, cumulative buckets ending at the count */
    ck_assert_double_eq(DELTA("psd_apply_latency_seconds_count{shard=\"0\"}"), steps);
    double count = value(m, "psd_apply_latency_seconds_count{shard=\"0\"}");
    ck_assert_double_eq(value(m, "psd_apply_latency_seconds_bucket{shard=\"0\",le=\"+Inf\"}"),
                        count);
    ck_assert_double_gt(value(m, "psd_apply_latency_seconds_sum{shard=\"0\"}"), 0);
    double prev = 0;
    const char *les[] = {"1e-05", "0.0001", "0.001", "0.01", "0.1", "1", "+Inf"};
    for (size_t i = 0; i < sizeof les / sizeof les[0]; i++) {
        char series[128];
        snprintf(series, sizeof series, "psd_apply_latency_seconds_bucket{shard=\"0\",le=\"%s\"}",
                 les[i]);
        double v = value(m, series);
        ck_assert_msg(v >= prev, "bucket le=%s = %g < %g: not cumulative", les[i], v, prev);
        prev = v;
    }
    /* applies take microseconds here: all of them are within one second */
    ck_assert_double_eq(value(m, "psd_apply_latency_seconds_bucket{shard=\"0\",le=\"1\"}"), count);
    free(a);
    a = m;

    send_garbage_request();
    m = scrape();
    ck_assert_double_eq(DELTA("psd_errors_total{shard=\"0\",code=\"EPROTO\"}"), 1);
    ck_assert_double_eq(DELTA("psd_requests_total{shard=\"0\",type=\"invalid\"}"), 1);
    ck_assert_double_eq(DELTA("psd_errors_total{shard=\"0\",code=\"ENOENT\"}"), 0);
#undef DELTA
    free(a);
    free(m);
    ps_client_close(c);
}
END_TEST

/* ---- start-up failures ---- */

/* Runs psd with extra args (no fixture); returns its exit status and its output in log. */
static int psd_fails(const char *const *extra, char **log) {
    make_tmp();
    char path[600];
    snprintf(path, sizeof path, "%s/psd.log", tmp);
    const char *argv[32] = {getenv("PSD"), "--bind", "127.0.0.1", "--port", "0"};
    int n = 5;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = ps_test_spawn(argv, path);
    ck_assert_int_gt(pid, 0);
    int st = ps_test_wait(pid, 10000);
    *log = ps_test_slurp(path, NULL);
    ck_assert_ptr_nonnull(*log);
    ps_test_rmdir(tmp);
    tmp[0] = 0;
    return st;
}

START_TEST(port_in_use_exits_2) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
    char port[16];
    snprintf(port, sizeof port, "%d", ntohs(a.sin_port));
    const char *args[] = {"--metrics-bind", "127.0.0.1", "--metrics-port", port, NULL};
    char *log = NULL;
    int st = psd_fails(args, &log);
    close(l);
    ck_assert_msg(st == 2, "psd exited %d, want 2:\n%s", st, log);
    ck_assert_msg(strstr(log, "cannot listen for metrics on 127.0.0.1:") &&
                      strstr(log, "address already in use"),
                  "no reason given:\n%s", log);
    ck_assert_msg(!strstr(log, "handles still open"), "handles left open:\n%s", log);
    free(log);
}
END_TEST

START_TEST(bad_bind_address_exits_2) {
    const char *args[] = {"--metrics-bind", "not-an-address", "--metrics-port", "0", NULL};
    char *log = NULL;
    int st = psd_fails(args, &log);
    ck_assert_msg(st == 2, "psd exited %d, want 2:\n%s", st, log);
    ck_assert_msg(strstr(log, "bad metrics address"), "no reason given:\n%s", log);
    ck_assert_msg(!strstr(log, "handles still open"), "handles left open:\n%s", log);
    free(log);
}
END_TEST

static Suite *metrics_suite(void) {
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, metrics_is_valid_exposition);
    tcase_add_test(tc, tables_on_metrics);
    tcase_add_test(tc, healthz_ok);
    tcase_add_test(tc, unknown_path_404);
    tcase_add_test(tc, non_get_405);
    tcase_add_test(tc, garbage_request_400);
    tcase_add_test(tc, oversized_headers_400);
    tcase_add_test(tc, slow_client_does_not_block);
    tcase_add_test(tc, idle_connection_closed);
    tcase_add_test(tc, connection_limit_evicts_idlest);
    tcase_add_test(tc, sigterm_with_open_connections);
    tcase_add_test(tc, values_move_with_workload);
    suite_add_tcase(s, tc);

    tc = tcase_create("startup");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, port_in_use_exits_2);
    tcase_add_test(tc, bad_bind_address_exits_2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", metrics_suite);
}
