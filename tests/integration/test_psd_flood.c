/* recv flood: a peer sends psd a burst of small requests and never reads the replies.
 * psd's loop must keep its own heartbeat meanwhile: WATCHDOG=1 keeps coming (fake
 * NOTIFY_SOCKET, as systemd sets it), GET /healthz is answered, and SIGTERM sent
 * mid-flood ends psd promptly. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"
#include "wire.h"

#define START_MS 10000
#define WATCHDOG_USEC "200000" /* a ping every 100 ms */
#define WINDOW_MS 3000         /* watched while the flood runs */
#define MAX_GAP_MS 1500        /* between two pings (or the window's ends) */
#define MAX_HEALTHZ_MS 2000
#define MAX_EXIT_MS 3000 /* from SIGTERM to exit */

#define NVARS 5000 /* each Stats reply lists them: a 4-byte request, ~100 us of work */

/* Requests in the flood: enough for several seconds of psd's work (a loop that drained
 * them all in one turn would be deaf that long); fewer under the sanitizers, where each
 * costs more. PS_FLOOD_N overrides. */
static long flood_count(void) {
    const char *n = getenv("PS_FLOOD_N");
    if (n && atol(n) > 0) return atol(n);
    const char *san = getenv("PS_SANITIZED");
    return san && strcmp(san, "1") == 0 ? 50000 : 200000;
}

/* Creates NVARS one-float variables (so that a Stats reply has work in it), 1000 per
 * CreateVars (a message carries at most 1024 tensors). */
static void create_vars(const char *endpoint) {
    static float v[NVARS], g[NVARS];
    for (int b = 0; b < NVARS; b += 1000) {
        ps_client *c;
        const char *eps[1] = {endpoint};
        char err[256];
        ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
        ps_client_set_timeout(c, 10000);
        for (int i = b; i < b + 1000 && i < NVARS; i++) {
            ps_client_tensor t = {
                .shard = 0, .rank = 1, .shape = {1}, .opt = ps_opt_spec_default(PS_OPT_SGD)};
            snprintf(t.name, sizeof t.name, "var%05d", i);
            t.param = &v[i];
            t.grad = &g[i];
            ck_assert_int_eq(ps_client_add(c, &t), PS_OK);
        }
        ck_assert_msg(ps_client_hello(c, NULL, NULL) == PS_OK, "%s", ps_client_error(c));
        ck_assert_msg(ps_client_create_vars(c, NULL) == PS_OK, "%s", ps_client_error(c));
        ps_client_close(c);
    }
}

typedef struct {
    char dir[512], sock_path[600], ready[600], log[600];
    int fd; /* the fake service manager's datagram socket */
    pid_t pid;
    char endpoint[128];
    int http_port;
} flood_psd;

static flood_psd P = {.fd = -1};

static void start_psd(flood_psd *p) {
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    free(dir);
    snprintf(p->sock_path, sizeof p->sock_path, "%s/notify", p->dir);
    snprintf(p->ready, sizeof p->ready, "%s/ready", p->dir);
    snprintf(p->log, sizeof p->log, "%s/psd.log", p->dir);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert(strlen(p->sock_path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, p->sock_path, strlen(p->sock_path) + 1);
    p->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(p->fd, 0);
    ck_assert_int_eq(bind(p->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char *psd = getenv("PSD");
    ck_assert_msg(psd != NULL, "PSD must be set");
    char parent[32];
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    const char *argv[] = {psd, "--bind",         "127.0.0.1", "--port",
                          "0", "--ready-file",   p->ready,    "--metrics-port",
                          "0", "--metrics-bind", "127.0.0.1", NULL};
    p->pid = fork();
    ck_assert_int_ge(p->pid, 0);
    if (p->pid == 0) {
        char wpid[32];
        snprintf(wpid, sizeof wpid, "%ld", (long)getpid());
        setenv("NOTIFY_SOCKET", p->sock_path, 1);
        setenv("WATCHDOG_USEC", WATCHDOG_USEC, 1);
        setenv("WATCHDOG_PID", wpid, 1);
        setenv("PS_PARENT_PID", parent, 1);
        int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
}

/* One notification within deadline (text in buf), or 0. */
static size_t recv_note(int fd, long long deadline, char *buf, size_t len) {
    for (;;) {
        long long left = deadline - ps_test_now_ms();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        ssize_t got = recv(fd, buf, len - 1, MSG_DONTWAIT);
        if (got <= 0) continue;
        buf[got] = 0;
        return (size_t)got;
    }
}

/* The metrics port from psd's log line "metrics on http://127.0.0.1:PORT/metrics". */
static int metrics_port(const char *log) {
    FILE *f = fopen(log, "r");
    if (!f) return 0;
    char line[1024];
    int port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        char *at = strstr(line, "metrics on http://127.0.0.1:");
        if (at) port = atoi(at + strlen("metrics on http://127.0.0.1:"));
    }
    fclose(f);
    return port;
}

/* Waits for READY=1, the ready file and the metrics port. */
static void wait_ready(flood_psd *p) {
    char msg[4096];
    long long deadline = ps_test_now_ms() + START_MS;
    int ready = 0;
    while (!ready && recv_note(p->fd, deadline, msg, sizeof msg))
        ready = strstr(msg, "READY=1") != NULL;
    if (!ready) ps_test_dump(p->log);
    ck_assert_msg(ready, "no READY=1 within %d ms", START_MS);
    FILE *f = fopen(p->ready, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(p->endpoint, sizeof p->endpoint, f));
    fclose(f);
    p->endpoint[strcspn(p->endpoint, "\n")] = 0;
    p->http_port = metrics_port(p->log);
    ck_assert_msg(p->http_port > 0, "no metrics port in the log");
}

/* ---- the flood: one DEALER, never reading ---- */

typedef struct {
    const char *endpoint;
    long count;
    atomic_long sent;
    atomic_int stop;
} flood;

static void *flood_run(void *arg) {
    flood *fl = arg;
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, hwm = (int)fl->count + 16;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm); /* queue it all: never block */
    char ep[200];
    snprintf(ep, sizeof ep, "tcp://%s", fl->endpoint);
    zmq_connect(s, ep);
    Ps__Header h = PS__HEADER__INIT;
    Ps__Stats st = PS__STATS__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.body_case = PS__HEADER__BODY_STATS;
    h.stats = &st;
    unsigned char buf[64];
    for (long i = 0; i < fl->count && !atomic_load(&fl->stop); i++) {
        h.request_id = (uint64_t)i + 1;
        size_t len = ps__header__pack(&h, buf);
        if (zmq_send(s, buf, len, ZMQ_DONTWAIT) < 0) break;
        atomic_store(&fl->sent, i + 1);
    }
    while (!atomic_load(&fl->stop)) /* keep the connection (and its backlog) open */
        ps_test_nap_ms(5);          /* pacing: polls the stop flag */
    zmq_close(s);
    zmq_ctx_term(ctx);
    return NULL;
}

/* ---- GET /healthz without blocking ---- */

static int http_start(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0); /* the kernel accepts */
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    return fd;
}

START_TEST(flood_keeps_watchdog_healthz_and_sigterm) {
    start_psd(&P);
    wait_ready(&P);
    create_vars(P.endpoint);
    flood fl = {.endpoint = P.endpoint, .count = flood_count()};
    pthread_t th;
    long long t0 = ps_test_now_ms(), last_ping = t0, max_gap = 0;
    ck_assert_int_eq(pthread_create(&th, NULL, flood_run, &fl), 0);
    int hfd = -1;
    long long http_sent = 0, http_ms = -1;
    int pings = 0;
    while (ps_test_now_ms() < t0 + WINDOW_MS) {
        long long now = ps_test_now_ms();
        if (hfd < 0 && http_ms < 0 && now >= t0 + 300) {
            hfd = http_start(P.http_port);
            http_sent = now;
        }
        struct pollfd pf[2] = {{.fd = P.fd, .events = POLLIN}, {.fd = hfd, .events = POLLIN}};
        int r = poll(pf, hfd >= 0 ? 2 : 1, (int)(t0 + WINDOW_MS - now));
        if (r <= 0) continue;
        if (pf[0].revents & POLLIN) {
            char msg[4096];
            ssize_t got = recv(P.fd, msg, sizeof msg - 1, MSG_DONTWAIT);
            if (got > 0) {
                msg[got] = 0;
                if (strstr(msg, "WATCHDOG=1")) {
                    long long at = ps_test_now_ms();
                    if (at - last_ping > max_gap) max_gap = at - last_ping;
                    last_ping = at;
                    pings++;
                }
            }
        }
        if (hfd >= 0 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            char buf[256] = "";
            ssize_t got = read(hfd, buf, sizeof buf - 1);
            if (got > 0) buf[got] = 0;
            ck_assert_msg(strncmp(buf, "HTTP/1.1 200", 12) == 0, "/healthz: '%.60s'", buf);
            http_ms = ps_test_now_ms() - http_sent;
            close(hfd);
            hfd = -1;
        }
    }
    long long end = ps_test_now_ms();
    if (end - last_ping > max_gap) max_gap = end - last_ping;
    long sent = atomic_load(&fl.sent);
    printf("flood: %ld of %ld requests sent in %d ms; %d pings, longest gap %lld ms; "
           "/healthz in %lld ms\n",
           sent, fl.count, WINDOW_MS, pings, max_gap, http_ms);
    /* SIGTERM while the backlog is still there */
    long long k0 = ps_test_now_ms();
    ck_assert_int_eq(kill(P.pid, SIGTERM), 0);
    int rc = ps_test_wait(P.pid, 30000);
    long long exit_ms = ps_test_now_ms() - k0;
    P.pid = 0;
    printf("flood: psd exited %d, %lld ms after SIGTERM\n", rc, exit_ms);
    atomic_store(&fl.stop, 1);
    pthread_join(th, NULL);
    if (hfd >= 0) close(hfd);
    ck_assert_msg(max_gap <= MAX_GAP_MS, "no WATCHDOG=1 for %lld ms during the flood (max %d)",
                  max_gap, MAX_GAP_MS);
    ck_assert_msg(http_ms >= 0 && http_ms <= MAX_HEALTHZ_MS,
                  "/healthz took %lld ms during the flood (max %d; -1: no answer in %d ms)",
                  http_ms, MAX_HEALTHZ_MS, WINDOW_MS - 300);
    ck_assert_msg(exit_ms <= MAX_EXIT_MS, "psd exited %lld ms after SIGTERM (max %d)", exit_ms,
                  MAX_EXIT_MS);
    ck_assert_msg(rc == 0, "psd exited %d after SIGTERM", rc);
    FILE *f = fopen(P.log, "r");
    ck_assert_ptr_nonnull(f);
    char line[2048];
    int drop_lines = 0;
    while (fgets(line, sizeof line, f))
        drop_lines += strstr(line, "dropped") != NULL;
    fclose(f);
    printf("flood: %d log lines about dropped replies\n", drop_lines);
    ck_assert_msg(drop_lines <= 2 * (WINDOW_MS / 1000 + 2) + 2,
                  "%d log lines about dropped replies: not rate-limited", drop_lines);
}
END_TEST

static void cleanup(void) {
    if (P.pid > 0) {
        kill(P.pid, SIGKILL);
        ps_test_wait(P.pid, 5000);
        P.pid = 0;
    }
    if (P.fd >= 0) close(P.fd);
    P.fd = -1;
    if (P.dir[0]) ps_test_rmdir(P.dir);
    P.dir[0] = 0;
}

int main(void) {
    if (!ps_test_psd_has_libsystemd()) {
        printf("flood test skipped: $PSD is not linked with libsystemd (no watchdog to watch)\n");
        return 77;
    }
    Suite *s = suite_create("psd_flood");
    TCase *tc = tcase_create("flood");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, cleanup);
    tcase_add_test(tc, flood_keeps_watchdog_healthz_and_sigterm);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
