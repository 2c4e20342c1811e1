/* psd keeps its promise to checkpoint at shutdown, or says it could not, with real
 * processes:
 * - psctl local (a real job, 2 shards, --checkpoint-dir) killed with SIGKILL mid-job:
 *   each psd gets SIGTERM from the kernel, survives its dead pipes (no SIGPIPE death)
 *   and writes a final checkpoint holding the job's variables;
 * - a psd whose --checkpoint-dir becomes unusable after start (replaced by a file):
 *   failed checkpoints (requested, periodic) are counted in /metrics and Stats, and
 *   SIGTERM then exits 1, not 0. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "raw.h"
#include "store.h"
#include "testutil.h"

static unsigned long long wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000u + (unsigned long long)ts.tv_nsec / 1000000u;
}

/* ---- psctl SIGKILLed: the shards still checkpoint ---- */

START_TEST(psctl_sigkilled_shards_write_final_checkpoints) {
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* psctl's orphans come to us, to be waited for */
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    /* psctl cannot clean up after SIGKILL: its run and socket dirs go under ours */
    setenv("TMPDIR", dir, 1);
    setenv("XDG_RUNTIME_DIR", dir, 1);
    unsetenv("PS_PARENT_PID");
    char ck[700], log[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    snprintf(log, sizeof log, "%s/psctl.log", dir);
    const char *argv[] = {getenv("PSCTL"),
                          "local",
                          "--ps",
                          "2",
                          "--workers",
                          "1",
                          "--mode",
                          "sync",
                          "--epochs",
                          "50",
                          "--checkpoint-dir",
                          ck,
                          "--data",
                          ps_test_data_dir(),
                          "--",
                          "--max-train",
                          "2000",
                          "--max-test",
                          "100",
                          "--slow-ms",
                          "5",
                          NULL};
    ck_assert_ptr_nonnull(argv[0]);
    pid_t psctl = ps_test_spawn(argv, log);
    ck_assert_int_gt(psctl, 0);
    int started = ps_test_wait_file_has(log, "created ", 120000, psctl);
    pid_t psd[2] = {0, 0};
    for (int i = 0; started && i < 2; i++)
        psd[i] = ps_test_find_child(psctl, "--shard", i ? "1" : "0");
    if (!started || !psd[0] || !psd[1]) {
        kill(psctl, SIGTERM);
        ps_test_wait(psctl, 20000);
        ps_test_dump(log);
        ck_abort_msg("the job did not start (or its psd were not found)");
    }
    unsigned long long killed_at = wall_ms();
    ck_assert_int_eq(kill(psctl, SIGKILL), 0);
    ck_assert_int_eq(ps_test_wait(psctl, 5000), 128 + SIGKILL);
    for (int i = 0; i < 2; i++) {
        int st = ps_test_wait_gone(psd[i], 20000);
        if (st < 0) kill(psd[i], SIGKILL);
        ck_assert_msg(st == 0, "psd %d: exit status %d after its psctl was killed (want 0)", i, st);
    }
    /* every shard's newest checkpoint was written after the kill and holds variables */
    for (int i = 0; i < 2; i++) {
        char sub[800], path[1200], err[512];
        snprintf(sub, sizeof sub, "%s/ps-%d", ck, i);
        ps_store st;
        ps_store_init(&st);
        ps_ckpt_meta m;
        int rc = ps_ckpt_restore(sub, &st, NULL, &m, path, sizeof path, err, sizeof err);
        ck_assert_msg(rc == PS_OK, "shard %d: no valid checkpoint: %s", i, err);
        ck_assert_msg(m.unix_ms >= killed_at,
                      "shard %d: newest checkpoint %s is older than the kill", i, path);
        ck_assert_msg(st.n > 0, "shard %d: the checkpoint holds no variables", i);
        ck_assert_str_eq(m.job_id, "default");
        ps_store_free(&st);
    }
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- an unusable checkpoint directory ---- */

/* GET path from 127.0.0.1:port; returns the malloc'd response (headers and body). */
static char *http_get(int port, const char *path) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    ck_assert_int_eq(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    long long deadline = ps_test_now_ms() + 5000;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(deadline - ps_test_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        if (len + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    return buf;
}

/* The value of the sample "<name>{shard=\"0\"} V" in a /metrics text, or -1. */
static long long metric(const char *text, const char *name) {
    char want[200];
    snprintf(want, sizeof want, "\n%s{shard=\"0\"} ", name);
    const char *p = strstr(text, want);
    return p ? atoll(p + strlen(want)) : -1;
}

/* A counter of /metrics and the value it should reach; last is what it was at the last
 * look (ps_test_wait_until's context). */
typedef struct {
    int port;
    const char *name;
    long long want, last;
} metric_goal;

static int metric_reached(void *ctx) {
    metric_goal *g = ctx;
    char *text = http_get(g->port, "/metrics");
    g->last = metric(text, g->name);
    free(text);
    return g->last >= g->want;
}

static int metrics_port(const ps_test_psd *p) {
    ck_assert(ps_test_wait_file_has(p->log, "metrics on http://", 10000, p->pid));
    FILE *f = fopen(p->log, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        const char *m = strstr(line, "metrics on http://");
        const char *colon = m ? strchr(m + 18, ':') : NULL;
        if (colon) port = atoi(colon + 1);
    }
    fclose(f);
    return port;
}

/* Asks psd for a checkpoint; returns the error code of the reply (PS_OK for a
 * CheckpointReply). */
static int request_checkpoint(const ps_test_psd *p) {
    raw_conn r;
    raw_open(&r, p->endpoint);
    Ps__Header h = PS__HEADER__INIT;
    Ps__Checkpoint c = PS__CHECKPOINT__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = 7;
    h.body_case = PS__HEADER__BODY_CHECKPOINT;
    h.checkpoint = &c;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    Ps__Header *rep = raw_recv(&r, 10000, NULL);
    ck_assert_ptr_nonnull(rep);
    int code = rep->body_case == PS__HEADER__BODY_ERROR ? rep->error->code : PS_OK;
    ps__header__free_unpacked(rep, NULL);
    raw_close(&r);
    return code;
}

START_TEST(unusable_checkpoint_dir_counted_and_sigterm_exits_1) {
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char ck[700], moved[720];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    snprintf(moved, sizeof moved, "%s/ckpt.moved", dir);
    const char *args[] = {"--workers",
                          "1",
                          "--checkpoint-dir",
                          ck,
                          "--checkpoint-every",
                          "1",
                          "--metrics-port",
                          "0",
                          "--metrics-bind",
                          "127.0.0.1",
                          NULL};
    ps_test_psd p;
    ck_assert_int_eq(ps_test_psd_start(&p, args, 10000), 0);
    int port = metrics_port(&p);
    ck_assert_int_gt(port, 0);
    /* one variable, so there is something to lose */
    float w[16] = {0}, dw[16] = {0};
    const char *eps[1] = {p.endpoint};
    ps_client *c;
    char err[256];
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_tensor t = {
        .name = "w", .shard = 0, .rank = 1, .shape = {16}, .opt = ps_opt_spec_default(PS_OPT_SGD)};
    t.param = w;
    t.grad = dw;
    ck_assert_int_eq(ps_client_add(c, &t), PS_OK);
    ck_assert_msg(ps_client_hello(c, NULL, NULL) == PS_OK, "%s", ps_client_error(c));
    ck_assert_msg(ps_client_create_vars(c, NULL) == PS_OK, "%s", ps_client_error(c));
    ck_assert_int_eq(request_checkpoint(&p), PS_OK);

    /* the directory goes away, a file takes its name: no checkpoint can be written */
    ck_assert_int_eq(rename(ck, moved), 0);
    ck_assert_int_eq(ps_test_write_file(ck, "x", 1), 0);
    ck_assert_int_eq(ps_client_push(c, 0, NULL), PS_OK); /* the version moves */
    ck_assert_int_eq(request_checkpoint(&p), PS_EIO);
    char *text = http_get(port, "/metrics");
    if (metric(text, "psd_checkpoint_failures_total") < 1) fputs(text, stderr);
    ck_assert_msg(metric(text, "psd_checkpoint_failures_total") >= 1,
                  "no failed checkpoint counted in /metrics (printed above)");
    free(text);
    /* the timer (every second) fails too, and is counted */
    metric_goal goal = {port, "psd_checkpoint_failures_total", 2, 0};
    ps_test_wait_until(metric_reached, &goal, 10000, 50);
    ck_assert_msg(goal.last >= 2, "periodic checkpoint failures not counted (%lld)", goal.last);
    ps_stats h;
    ck_assert_int_eq(ps_client_stats(c, 0, &h), PS_OK);
    ck_assert_uint_ge(h.checkpoint_failures, 2);
    ps_stats_free(&h);
    ps_client_close(c);

    /* SIGTERM promises a checkpoint; it cannot be written: exit 1 */
    ck_assert_int_eq(kill(p.pid, SIGTERM), 0);
    int st = ps_test_wait(p.pid, 10000);
    p.pid = 0;
    if (st != 1) ps_test_dump(p.log);
    ck_assert_msg(st == 1, "psd exited with status %d after a failed final checkpoint (want 1)",
                  st);
    ck_assert(ps_test_file_has(p.log, "stopping without the final checkpoint"));
    ps_test_psd_stop(&p, 1000);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("final_checkpoint");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 200);
    tcase_add_test(tc, psctl_sigkilled_shards_write_final_checkpoints);
    tcase_add_test(tc, unusable_checkpoint_dir_counted_and_sigterm_exits_1);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
