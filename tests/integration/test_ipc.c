/* The ipc transport with real processes: psd --transport ipc serves the client library
 * and psctl status on a Unix socket, replaces a dead psd's stale socket but not a live
 * one, removes its socket at a clean stop, refuses bad --ipc-path configurations, binds
 * TF_CONFIG's ipc:// entry; psctl local --transport ipc trains and leaves no directory; of
 * two psd started at once on one path exactly one serves (PATH.lock). */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"

#define EXIT_MS 10000
#define READY_MS 10000
#define N 4
#define LR 0.5f

static char dir[64];      /* short (socket paths must fit sun_path): /tmp/psipc.XXXXXX */
static char sock[128];    /* dir/psd.sock */
static pid_t running[2];  /* psd processes this test started and has not reaped */
static char logs[2][128]; /* their stdout+stderr */
static char readies[2][128];

static void kill_running(void) {
    for (int i = 0; i < 2; i++) {
        if (running[i] > 0) {
            kill(running[i], SIGKILL);
            ps_test_wait(running[i], 2000);
            running[i] = 0;
        }
    }
}

/* A failed assertion exits the test process without the teardown: clean up anyway. */
static void cleanup_at_exit(void) {
    kill_running();
    if (dir[0]) ps_test_rmdir(dir);
}

static void setup(void) {
    atexit(cleanup_at_exit);
    snprintf(dir, sizeof dir, "/tmp/psipc.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(sock, sizeof sock, "%s/psd.sock", dir);
    for (int i = 0; i < 2; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/log.%d", dir, i);
        snprintf(readies[i], sizeof readies[i], "%s/ready.%d", dir, i);
    }
    ps_test_children_die_with_me();
    unsetenv("TF_CONFIG");
}

static void teardown(void) {
    kill_running();
    ps_test_rmdir(dir);
    dir[0] = '\0';
}

/* Starts $PSD (slot k: its log and ready file) with args after the program name.
 * Returns the pid. */
static pid_t spawn_psd(int k, const char *const *args) {
    const char *psd = getenv("PSD");
    ck_assert_ptr_nonnull(psd);
    const char *argv[40] = {psd, "--ready-file", readies[k], "--log-level", "debug"};
    int n = 5;
    for (int i = 0; args[i]; i++) {
        ck_assert_int_lt(n, 38);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    unlink(readies[k]);
    pid_t pid = ps_test_spawn(argv, logs[k]);
    ck_assert_int_gt(pid, 0);
    running[k] = pid;
    return pid;
}

/* Waits for slot k's ready file; returns its line without the newline. */
static const char *wait_ready(int k) {
    static char line[256];
    if (ps_test_wait_first_line(readies[k], running[k], line, sizeof line, READY_MS)) return line;
    ck_assert_msg(ps_test_alive(running[k]), "psd exited before it was ready:\n%s",
                  ps_test_text(logs[k]));
    ck_abort_msg("psd not ready within %d ms:\n%s", READY_MS, ps_test_text(logs[k]));
    return NULL;
}

/* Waits for slot k's psd to exit; returns its exit status. */
static int wait_exit(int k) {
    int st = ps_test_wait(running[k], EXIT_MS);
    running[k] = 0;
    ck_assert_msg(st >= 0, "psd did not exit within %d ms", EXIT_MS);
    return st;
}

/* Runs a program (stdout+stderr to out) to completion; returns its exit status. */
static int run(const char *const *argv, const char *out) {
    return ps_test_run_to(argv, out, EXIT_MS);
}

static int is_there(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Hello, CreateVars, Push, Pull through the client library at endpoint. */
static void exchange(const char *endpoint) {
    ps_client *c;
    char err[512];
    const char *eps[1] = {endpoint};
    ck_assert_msg(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err) == PS_OK, "open: %s", err);
    ps_client_set_timeout(c, 5000);
    float w[N] = {1.0f, -2.0f, 0.5f, 4.0f}, dw[N] = {0.5f, 1.0f, -2.0f, 0.25f};
    const float w0[N] = {1.0f, -2.0f, 0.5f, 4.0f};
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = LR;
    ps_client_tensor t = {.name = "w", .shard = 0, .rank = 1, .shape = {N}, .opt = opt};
    t.param = w;
    t.grad = dw;
    ck_assert_int_eq(ps_client_add(c, &t), PS_OK);
    int rc = ps_client_hello(c, NULL, NULL);
    ck_assert_msg(rc == PS_OK, "hello: %s", ps_client_error(c));
    rc = ps_client_create_vars(c, NULL);
    ck_assert_msg(rc == PS_OK, "create: %s", ps_client_error(c));
    int applied = 0;
    rc = ps_client_push(c, 0, &applied);
    ck_assert_msg(rc == PS_OK, "push: %s", ps_client_error(c));
    memset(w, 0, sizeof w);
    uint64_t version = 0;
    rc = ps_client_pull(c, 1, &version);
    ck_assert_msg(rc == PS_OK, "pull: %s", ps_client_error(c));
    ck_assert_uint_eq(version, 1);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(w[i], w0[i] - LR * dw[i]);
    ps_client_goodbye(c);
    ps_client_close(c);
}

/* A psd on --transport ipc: the ready file says ipc://PATH, the client library and psctl
 * status talk to it there, and a clean stop removes the socket. */
START_TEST(psd_serves_over_ipc) {
    spawn_psd(0, (const char *[]){"--transport", "ipc", "--ipc-path", sock, NULL});
    char want[160];
    snprintf(want, sizeof want, "ipc://%s", sock);
    ck_assert_str_eq(wait_ready(0), want);
    exchange(want);

    const char *psctl = getenv("PSCTL");
    ck_assert_ptr_nonnull(psctl);
    char out[128];
    snprintf(out, sizeof out, "%s/status.out", dir);
    int st = run((const char *[]){psctl, "status", "--ps", want, "--timeout", "5", NULL}, out);
    ck_assert_msg(st == 0, "psctl status exited %d:\n%s", st, ps_test_text(out));
    ck_assert_ptr_nonnull(strstr(ps_test_text(out), want));

    ck_assert(is_there(sock));
    kill(running[0], SIGTERM);
    ck_assert_int_eq(wait_exit(0), 0);
    ck_assert_msg(!is_there(sock), "the socket %s is still there after a clean stop", sock);
}
END_TEST

/* A socket file nobody listens on (a psd killed with SIGKILL leaves one) is replaced; a
 * live psd's socket is not taken over; a file that is not a socket is left alone. */
START_TEST(stale_socket_replaced_live_one_kept) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(sock), sizeof a.sun_path);
    memcpy(a.sun_path, sock, strlen(sock) + 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    close(fd); /* the file stays, nothing accepts on it */
    ck_assert(is_there(sock));

    const char *args[] = {"--transport", "ipc", "--ipc-path", sock, NULL};
    spawn_psd(0, args);
    wait_ready(0);
    ck_assert_ptr_nonnull(strstr(ps_test_text(logs[0]), "removed the stale socket"));

    spawn_psd(1, args);
    ck_assert_int_eq(wait_exit(1), 2);
    ck_assert_ptr_nonnull(strstr(ps_test_text(logs[1]), "another process is listening there"));
    char ep[160];
    snprintf(ep, sizeof ep, "ipc://%s", sock);
    exchange(ep); /* the first psd still has its socket */

    kill(running[0], SIGKILL); /* leaves its socket behind */
    ps_test_wait(running[0], EXIT_MS);
    running[0] = 0;
    ck_assert(is_there(sock));
    spawn_psd(0, args); /* a restart on the same path */
    wait_ready(0);
    exchange(ep);
    kill(running[0], SIGTERM);
    ck_assert_int_eq(wait_exit(0), 0);
    ck_assert(!is_there(sock));

    ck_assert_int_eq(ps_test_write_file(sock, "x", 1), 0);
    spawn_psd(1, args);
    ck_assert_int_eq(wait_exit(1), 2);
    ck_assert_ptr_nonnull(strstr(ps_test_text(logs[1]), "exists and is not a socket"));
    ck_assert_str_eq(ps_test_text(sock), "x");
}
END_TEST

/* Reaps slot k if it has exited: returns its exit status (128+signal when killed), or -1
 * while it runs. */
static int exited(int k) {
    int st;
    if (running[k] <= 0 || waitpid(running[k], &st, WNOHANG) != running[k]) return -1;
    running[k] = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The two racing psd of slots 0 and 1: exit statuses (-1: running) and ready files seen. */
typedef struct {
    int status[2], ready[2];
} race;

/* 1 once one has exited and the other is ready (or both are ready: the bug, or both
 * exited). */
static int race_decided(void *ctx) {
    race *r = ctx;
    for (int k = 0; k < 2; k++) {
        if (r->status[k] < 0) r->status[k] = exited(k);
        if (!r->ready[k]) r->ready[k] = strchr(ps_test_text(readies[k]), '\n') != NULL;
    }
    int any_exited = r->status[0] >= 0 || r->status[1] >= 0;
    return (r->ready[0] && r->ready[1]) || (r->status[0] >= 0 && r->status[1] >= 0) ||
           (any_exited && (r->ready[0] || r->ready[1]));
}

/* Two psd started at the same instant on one --ipc-path, several rounds (half of them
 * over a stale socket): exactly one reports ready and serves, the other exits 2 because
 * the first holds PATH.lock; a clean stop removes the socket and the lock file. */
START_TEST(two_psd_racing_for_one_path) {
    const char *args[] = {"--transport", "ipc", "--ipc-path", sock, NULL};
    char lock[160], ep[160];
    snprintf(lock, sizeof lock, "%s.lock", sock);
    snprintf(ep, sizeof ep, "ipc://%s", sock);
    for (int round = 0; round < 12; round++) {
        if (round % 2) { /* a socket file nobody accepts on, as a killed psd leaves */
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            ck_assert_int_ge(fd, 0);
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            memcpy(a.sun_path, sock, strlen(sock) + 1);
            ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
            close(fd);
        }
        spawn_psd(0, args);
        spawn_psd(1, args);
        race r = {{-1, -1}, {0, 0}};
        ps_test_wait_until(race_decided, &r, READY_MS, 5);
        int *status = r.status, *ready = r.ready;
        ck_assert_msg(!(ready[0] && ready[1]), "round %d: both psd reported ready on %s", round,
                      sock);
        int loser = status[0] >= 0 ? 0 : 1, winner = 1 - loser;
        ck_assert_msg(status[loser] == 2, "round %d: exits %d and %d, want one 2:\n%s\n%s", round,
                      status[0], status[1], ps_test_text(logs[0]), ps_test_text(logs[1]));
        ck_assert_msg(strstr(ps_test_text(logs[loser]), "holds the lock file"),
                      "round %d: no reason in:\n%s", round, ps_test_text(logs[loser]));
        ck_assert_msg(ready[winner] && status[winner] < 0, "round %d: the other psd:\n%s", round,
                      ps_test_text(logs[winner]));
        ck_assert(is_there(lock));
        if (round % 4 == 0) exchange(ep);
        kill(running[winner], SIGTERM);
        ck_assert_int_eq(wait_exit(winner), 0);
        ck_assert(!is_there(sock));
        ck_assert_msg(!is_there(lock), "round %d: %s is still there after a clean stop", round,
                      lock);
    }
}
END_TEST

typedef struct {
    const char *args[8];
    const char *want; /* in the output */
} bad_case;

static char long_path[200], long_ep[220];

/* Exit status 2 and a reason for each bad transport configuration (psd, psworker and
 * psctl status). */
START_TEST(bad_transport_config) {
    memset(long_path, 'x', 120);
    long_path[0] = '/';
    long_path[120] = '\0';
    snprintf(long_ep, sizeof long_ep, "ipc://%s", long_path);
    const bad_case psd_cases[] = {
        {{"--transport", "ipc", NULL}, "--transport ipc needs --ipc-path"},
        {{"--transport", "ipc", "--ipc-path", long_path, NULL}, "at most 107 fit in sun_path"},
        {{"--port", "0", "--ipc-path", sock, NULL}, "--ipc-path applies to --transport ipc only"},
        {{"--transport", "ipc", "--ipc-path", sock, "--port", "5", NULL},
         "--bind and --port apply to --transport tcp only"},
        {{"--transport", "udp", NULL}, "--transport needs one of tcp|ipc, got 'udp'"},
    };
    for (size_t i = 0; i < sizeof psd_cases / sizeof psd_cases[0]; i++) {
        spawn_psd(0, psd_cases[i].args);
        int st = wait_exit(0);
        ck_assert_msg(st == 2, "case %zu: exit %d:\n%s", i, st, ps_test_text(logs[0]));
        ck_assert_msg(strstr(ps_test_text(logs[0]), psd_cases[i].want), "case %zu: no '%s' in:\n%s",
                      i, psd_cases[i].want, ps_test_text(logs[0]));
    }
    ck_assert(!is_there(sock));

    char out[128];
    snprintf(out, sizeof out, "%s/out", dir);
    const char *worker = getenv("PSWORKER"), *psctl = getenv("PSCTL");
    ck_assert_ptr_nonnull(worker);
    ck_assert_ptr_nonnull(psctl);
    ck_assert_int_eq(run((const char *[]){worker, "--ps", long_ep, NULL}, out), 2);
    ck_assert_ptr_nonnull(strstr(ps_test_text(out), "at most 107"));
    ck_assert_int_eq(run((const char *[]){psctl, "status", "--ps", long_ep, NULL}, out), 2);
    ck_assert_ptr_nonnull(strstr(ps_test_text(out), "at most 107"));
    ck_assert_int_eq(run((const char *[]){psctl, "local", "--ps", "1", "--workers", "1", "--mode",
                                          "sync", "--transport", "udp", NULL},
                         out),
                     2);
    ck_assert_ptr_nonnull(strstr(ps_test_text(out), "--transport needs one of tcp|ipc, got 'udp'"));
}
END_TEST

/* TF_CONFIG whose own ps entry is ipc://PATH: psd listens there. */
START_TEST(tf_config_ipc_entry) {
    char tf[512];
    snprintf(tf, sizeof tf,
             "{\"cluster\": {\"ps\": [\"ipc://%s\"], \"worker\": [\"localhost:1\"]}, "
             "\"task\": {\"type\": \"ps\", \"index\": 0}}",
             sock);
    setenv("TF_CONFIG", tf, 1);
    spawn_psd(0, (const char *[]){NULL});
    unsetenv("TF_CONFIG");
    char want[160];
    snprintf(want, sizeof want, "ipc://%s", sock);
    ck_assert_str_eq(wait_ready(0), want);
    exchange(want);
    kill(running[0], SIGTERM);
    ck_assert_int_eq(wait_exit(0), 0);
    ck_assert(!is_there(sock));
}
END_TEST

/* psctl local --transport ipc: a short real job finishes, the shards listened in a
 * private directory under $XDG_RUNTIME_DIR, and that directory is gone afterwards. */
START_TEST(psctl_local_ipc_trains_and_cleans_up) {
    const char *psctl = getenv("PSCTL");
    ck_assert_ptr_nonnull(psctl);
    char xdg[128], out[128];
    snprintf(xdg, sizeof xdg, "%s/xdg", dir);
    snprintf(out, sizeof out, "%s/psctl.out", dir);
    ck_assert_int_eq(mkdir(xdg, 0700), 0);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    unsetenv("PS_PARENT_PID"); /* psctl sets its own for its children */
    const char *argv[] = {psctl,         "local",
                          "--ps",        "2",
                          "--workers",   "2",
                          "--mode",      "sync",
                          "--epochs",    "1",
                          "--transport", "ipc",
                          "--data",      ps_test_data_dir(),
                          "--timeout",   "100",
                          "--",          "--max-train",
                          "512",         "--max-test",
                          "256",         "--max-steps",
                          "2",           NULL};
    pid_t pid = ps_test_spawn(argv, out);
    ck_assert_int_gt(pid, 0);
    int st = ps_test_wait(pid, 120000);
    ck_assert_msg(st == 0, "psctl local exited %d:\n%s", st, ps_test_text(out));
    char want[200];
    snprintf(want, sizeof want, "psctl: psd shards ready at ipc://%s/psctl-ipc.", xdg);
    ck_assert_msg(strstr(ps_test_text(out), want), "no '%s' in:\n%s", want, ps_test_text(out));
    ck_assert_ptr_nonnull(strstr(ps_test_text(out), "psctl: job finished: 2 ps, 2 workers"));
    ck_assert_int_eq(rmdir(xdg), 0); /* empty: the socket directory was removed */
}
END_TEST

static Suite *ipc_suite(void) {
    Suite *s = suite_create("ipc");
    TCase *tc = tcase_create("ipc");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, psd_serves_over_ipc);
    tcase_add_test(tc, stale_socket_replaced_live_one_kept);
    tcase_add_test(tc, two_psd_racing_for_one_path);
    tcase_add_test(tc, bad_transport_config);
    tcase_add_test(tc, tf_config_ipc_entry);
    tcase_add_test(tc, psctl_local_ipc_trains_and_cleans_up);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(ipc_suite());
}
