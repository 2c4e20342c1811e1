/* systemd deployment: the units of deploy/systemd pass `systemd-analyze verify`, and a real
 * psd under a fake NOTIFY_SOCKET sends READY=1 only once it serves, WATCHDOG=1 while its loop
 * runs, and STOPPING=1 on SIGTERM. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"

#define START_MS 10000
#define WATCHDOG_USEC "200000" /* pings every 100 ms */

/* A failed assertion ends a test with _exit (fork mode): no checked teardown runs. So the
 * temp dirs live under a base dir made and removed by an unchecked fixture (in the Check
 * parent), and every psd gets PS_PARENT_PID (it dies with the test process). */
static void base_setup(void) {
    ps_test_push_tmpdir();
}

static void base_teardown(void) {
    ps_test_pop_tmpdir();
}

/* ---- systemd-analyze verify ------------------------------------------------------------- */

/* The full path of `prog` found on $PATH, or 0 when it is not there. */
static int find_in_path(const char *prog, char *out, size_t outlen) {
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path && *path ? path : "/usr/bin:/bin:/usr/sbin:/sbin");
    for (char *save = NULL, *dir = strtok_r(buf, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(out, outlen, "%s/%s", dir, prog);
        if (access(out, X_OK) == 0) return 1;
    }
    return 0;
}

/* Copies deploy/systemd/<unit>@.service to dir/<unit>@0.service (an instance: verify loads
 * it as psd@0.service) with the ExecStart binary `from` replaced by `to`, which must exist
 * for verify to pass. */
static void write_instance(const char *dir, const char *unit, const char *from, const char *to,
                           char *out, size_t outlen) {
    char src[2048];
    snprintf(src, sizeof src, "%s/deploy/systemd/%s@.service", ps_test_source_root(), unit);
    char *text = ps_test_slurp(src, NULL);
    ck_assert_msg(text != NULL, "cannot read %s", src);
    char needle[256];
    snprintf(needle, sizeof needle, "ExecStart=%s ", from);
    char *at = strstr(text, needle);
    ck_assert_msg(at != NULL, "%s: no '%s'", src, needle);
    ck_assert_msg(strstr(at + 1, needle) == NULL, "%s: two '%s'", src, needle);
    snprintf(out, outlen, "%s/%s@0.service", dir, unit);
    FILE *f = fopen(out, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%.*sExecStart=%s %s", (int)(at - text), text, to, at + strlen(needle));
    ck_assert_int_eq(fclose(f), 0);
    free(text);
}

/* Lines verify may print that say nothing about the units themselves: the env files are
 * on the deployment host, not here, and a container has no systemd as PID 1. (systemd 252
 * in the Debian 12 container printed none of them: verify printed nothing for good units.) */
static int tolerated(const char *line) {
    return strstr(line, "/etc/ps/") || strstr(line, "has not been booted with systemd");
}

/* Runs `systemd-analyze verify --man=no units...`; returns its exit status and writes its
 * output to out_path. verify exits 0 even when it ignored a bad line ("Unknown key ...,
 * ignoring"), so callers look at the output too (count_problems). */
static int run_verify(const char *analyze, const char *const *units, const char *out_path) {
    const char *argv[8] = {analyze, "verify", "--man=no"};
    int n = 3;
    for (int i = 0; units[i] && n < 7; i++)
        argv[n++] = units[i];
    argv[n] = NULL;
    setenv("SYSTEMD_LOG_LEVEL", "info", 1); /* warnings about ignored lines are at warning */
    setenv("SYSTEMD_LOG_COLOR", "0", 1);
    unlink(out_path);
    pid_t pid = ps_test_spawn(argv, out_path);
    ck_assert_int_gt(pid, 0);
    return ps_test_wait(pid, 60000);
}

/* Lines of the output that are not tolerated; the first is copied to first. */
static int count_problems(const char *out_path, char *first, size_t firstlen) {
    FILE *f = fopen(out_path, "r");
    ck_assert_ptr_nonnull(f);
    char line[2048];
    int bad = 0;
    first[0] = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || tolerated(line)) continue;
        if (!bad++) snprintf(first, firstlen, "%s", line);
    }
    fclose(f);
    return bad;
}

static int have_analyze(char *path, size_t len) {
    if (find_in_path("systemd-analyze", path, len)) return 1;
    printf("systemd unit checks skipped: systemd-analyze is not on PATH (Debian: apt-get "
           "install systemd)\n");
    return 0;
}

START_TEST(units_pass_systemd_analyze_verify) {
    char analyze[4096];
    if (!have_analyze(analyze, sizeof analyze)) return;
    const char *psd = getenv("PSD"), *worker = getenv("PSWORKER");
    ck_assert_msg(psd && worker, "PSD and PSWORKER must be set");
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char psd_unit[1024], worker_unit[1024], out[1024], first[2048];
    write_instance(dir, "psd", "/usr/local/bin/psd", psd, psd_unit, sizeof psd_unit);
    write_instance(dir, "worker", "/usr/local/bin/psworker", worker, worker_unit,
                   sizeof worker_unit);
    snprintf(out, sizeof out, "%s/verify.out", dir);
    const char *units[] = {psd_unit, worker_unit, NULL};
    int rc = run_verify(analyze, units, out);
    int bad = count_problems(out, first, sizeof first);
    if (rc != 0 || bad) ps_test_dump(out);
    ck_assert_msg(rc == 0, "systemd-analyze verify exited %d", rc);
    ck_assert_msg(bad == 0, "systemd-analyze verify: %d problem line(s), first: %s", bad, first);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* The check above would pass vacuously if verify said nothing about bad lines: give it a
 * unit with an unknown key and an invalid value and see both reported. */
START_TEST(verify_reports_unknown_keys_and_invalid_values) {
    char analyze[4096];
    if (!have_analyze(analyze, sizeof analyze)) return;
    const char *psd = getenv("PSD");
    ck_assert_msg(psd != NULL, "PSD must be set");
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char unit[1024], bad_unit[1100], out[1024], first[2048];
    write_instance(dir, "psd", "/usr/local/bin/psd", psd, unit, sizeof unit);
    char *text = ps_test_slurp(unit, NULL);
    ck_assert_ptr_nonnull(text);
    char *svc = strstr(text, "[Service]\n");
    ck_assert_ptr_nonnull(svc);
    svc += strlen("[Service]\n");
    snprintf(bad_unit, sizeof bad_unit, "%s/psdbad@0.service", dir);
    FILE *f = fopen(bad_unit, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%.*sWatchdogSecs=30\nNotifyAccess=mains\n%s", (int)(svc - text), text, svc);
    ck_assert_int_eq(fclose(f), 0);
    free(text);
    snprintf(out, sizeof out, "%s/verify.out", dir);
    const char *units[] = {bad_unit, NULL};
    run_verify(analyze, units, out);
    int bad = count_problems(out, first, sizeof first);
    char *all = ps_test_slurp(out, NULL);
    ck_assert_ptr_nonnull(all);
    int found = strstr(all, "WatchdogSecs") && strstr(all, "mains");
    if (bad < 2 || !found) ps_test_dump(out);
    ck_assert_msg(bad >= 2 && found, "verify did not report both bad lines (%d problem lines)",
                  bad);
    free(all);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- psd under a fake NOTIFY_SOCKET ----------------------------------------------------- */

static int have_libsystemd(void) {
    if (ps_test_psd_has_libsystemd()) return 1;
    printf("systemd notification checks skipped: %s is not linked with libsystemd (built "
           "with -Dsystemd=disabled, or libsystemd-dev missing)\n",
           getenv("PSD") ? getenv("PSD") : "$PSD");
    return 0;
}

typedef struct {
    char dir[512];
    char sock_path[600];
    char ready[600];
    char log[600];
    char ckpt[600];
    int fd; /* bound AF_UNIX datagram socket: the "service manager" */
    pid_t pid;
} notified_psd;

/* Binds the fake notify socket and starts psd with NOTIFY_SOCKET, WATCHDOG_USEC and
 * WATCHDOG_PID (its own pid, or watchdog_pid when non-zero) as systemd would set them. */
static void notified_start(notified_psd *n, pid_t watchdog_pid) {
    memset(n, 0, sizeof *n);
    n->fd = -1;
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    snprintf(n->dir, sizeof n->dir, "%s", dir);
    free(dir);
    snprintf(n->sock_path, sizeof n->sock_path, "%s/notify", n->dir);
    snprintf(n->ready, sizeof n->ready, "%s/ready", n->dir);
    snprintf(n->log, sizeof n->log, "%s/psd.log", n->dir);
    snprintf(n->ckpt, sizeof n->ckpt, "%s/ckpt", n->dir);

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_msg(strlen(n->sock_path) < sizeof sa.sun_path, "socket path too long: %s",
                  n->sock_path);
    memcpy(sa.sun_path, n->sock_path, strlen(n->sock_path) + 1);
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(n->fd, 0);
    ck_assert_msg(bind(n->fd, (struct sockaddr *)&sa, sizeof sa) == 0, "bind %s: %s", n->sock_path,
                  strerror(errno));

    const char *psd = getenv("PSD");
    ck_assert_msg(psd != NULL, "PSD must be set");
    char parent[32];
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    const char *argv[] = {psd,      "--bind",           "127.0.0.1", "--port",
                          "0",      "--shard",          "0",         "--num-shards",
                          "1",      "--workers",        "1",         "--ready-file",
                          n->ready, "--checkpoint-dir", n->ckpt,     "--checkpoint-every",
                          "0",      "--log-level",      "debug",     NULL};
    n->pid = fork();
    ck_assert_int_ge(n->pid, 0);
    if (n->pid == 0) {
        char wpid[32];
        snprintf(wpid, sizeof wpid, "%ld", (long)(watchdog_pid ? watchdog_pid : getpid()));
        setenv("NOTIFY_SOCKET", n->sock_path, 1);
        setenv("WATCHDOG_USEC", WATCHDOG_USEC, 1);
        setenv("WATCHDOG_PID", wpid, 1);
        setenv("PS_PARENT_PID", parent, 1); /* dies with this test process */
        int fd = open(n->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
}

/* Waits until deadline_ms (monotonic) for one notification; returns its length (text in buf,
 * NUL-terminated), or 0 at the deadline. */
static size_t notified_recv(notified_psd *n, long long deadline_ms, char *buf, size_t len) {
    for (;;) {
        long long left = deadline_ms - ps_test_now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = n->fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        ck_assert_int_ge(r, 0);
        if (r == 0) return 0;
        ssize_t got = recv(n->fd, buf, len - 1, MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        ck_assert_int_gt(got, 0);
        buf[got] = 0;
        return (size_t)got;
    }
}

/* 1 when the notification has exactly this line (e.g. "READY=1"). */
static int has_line(const char *msg, const char *line) {
    size_t n = strlen(line);
    for (const char *p = msg; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == 0)) return 1;
    return 0;
}

/* Stops psd (SIGTERM, then SIGKILL after timeout_ms) if it runs; closes and removes the
 * rest. Returns psd's exit status as ps_test_wait does (or -1 if it was not running). */
static int notified_cleanup(notified_psd *n, int timeout_ms) {
    int rc = -1;
    if (n->pid > 0) {
        kill(n->pid, SIGTERM);
        rc = ps_test_wait(n->pid, timeout_ms);
        n->pid = 0;
    }
    if (n->fd >= 0) close(n->fd);
    n->fd = -1;
    if (n->dir[0]) ps_test_rmdir(n->dir);
    n->dir[0] = 0;
    return rc;
}

/* Reads "host:port" from the ready file (0 if it is not there yet). */
static int read_ready(const char *path, char *endpoint, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(endpoint, (int)len, f) != NULL;
    fclose(f);
    endpoint[strcspn(endpoint, "\n")] = 0;
    return ok && endpoint[0];
}

/* Waits for READY=1 (the first notification), checks psd was listening by then (its ready
 * file, written after bind, exists and STATUS names that endpoint) and answers a Stats
 * request. */
static void expect_ready(notified_psd *n, char *endpoint, size_t len) {
    char msg[4096];
    size_t got = notified_recv(n, ps_test_now_ms() + START_MS, msg, sizeof msg);
    if (!got) ps_test_dump(n->log);
    ck_assert_msg(got > 0, "no notification within %d ms", START_MS);
    ck_assert_msg(has_line(msg, "READY=1"), "first notification is not READY=1: '%s'", msg);
    int listening = read_ready(n->ready, endpoint, len);
    ck_assert_msg(listening, "READY=1 arrived before psd was listening (no ready file)");
    char status[700];
    snprintf(status, sizeof status, "STATUS=serving shard 0/1 on %s (version 0)", endpoint);
    ck_assert_msg(has_line(msg, status), "READY=1 without '%s': '%s'", status, msg);

    ps_client *c = NULL;
    const char *eps[1] = {endpoint};
    char err[256];
    ck_assert_msg(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err) == PS_OK, "open: %s", err);
    ps_client_set_timeout(c, 5000);
    ps_stats h;
    int rc = ps_client_stats(c, 0, &h);
    ck_assert_msg(rc == PS_OK, "Stats after READY=1: %s", ps_client_error(c));
    ck_assert_ptr_nonnull(h.job_id); /* a StatsReply was decoded */
    ps_stats_free(&h);
    ps_client_close(c);
}

START_TEST(psd_ready_watchdog_and_stopping) {
    if (!have_libsystemd()) return;
    notified_psd n;
    notified_start(&n, 0);
    char endpoint[128], msg[4096];
    expect_ready(&n, endpoint, sizeof endpoint);

    /* WATCHDOG=1 every WATCHDOG_USEC/2 = 100 ms: about 10 in a second, at least 3. */
    int pings = 0, other = 0;
    char first_other[4096] = "";
    long long until = ps_test_now_ms() + 1000;
    while (notified_recv(&n, until, msg, sizeof msg)) {
        if (strcmp(msg, "WATCHDOG=1") == 0)
            pings++;
        else if (!other++)
            snprintf(first_other, sizeof first_other, "%s", msg);
    }
    printf("psd: %d WATCHDOG=1 in 1 s (WATCHDOG_USEC=%s)\n", pings, WATCHDOG_USEC);
    ck_assert_msg(pings >= 3, "%d WATCHDOG=1 in 1 s, expected >= 3", pings);
    ck_assert_msg(pings <= 30, "%d WATCHDOG=1 in 1 s: far more often than every 100 ms", pings);
    ck_assert_msg(other == 0, "unexpected notification while serving: '%s'", first_other);

    /* SIGTERM: a checkpoint, STOPPING=1, exit 0, and no ping after STOPPING=1. */
    ck_assert_int_eq(kill(n.pid, SIGTERM), 0);
    int stopping = 0, after = 0;
    long long deadline = ps_test_now_ms() + START_MS;
    while (!stopping && notified_recv(&n, deadline, msg, sizeof msg))
        if (has_line(msg, "STOPPING=1")) stopping = 1;
    ck_assert_msg(stopping, "no STOPPING=1 within %d ms of SIGTERM", START_MS);
    ck_assert_msg(has_line(msg, "STATUS=stopping shard 0/1 at version 0"), "STOPPING=1: '%s'", msg);
    int rc = ps_test_wait(n.pid, START_MS);
    n.pid = 0;
    if (rc != 0) ps_test_dump(n.log);
    ck_assert_msg(rc == 0, "psd exited %d after SIGTERM", rc);
    while (notified_recv(&n, ps_test_now_ms() + 1, msg, sizeof msg))
        after++;
    ck_assert_msg(after == 0, "%d notification(s) after STOPPING=1, last '%s'", after, msg);
    char *log = ps_test_slurp(n.log, NULL);
    ck_assert_ptr_nonnull(log);
    ck_assert_msg(strstr(log, "checkpoint version 0 written"), "no checkpoint at SIGTERM");
    ck_assert_msg(strstr(log, "sd_notify: READY=1 sent"), "no debug line for READY=1");
    free(log);
    notified_cleanup(&n, 1000);
}
END_TEST

/* sd_watchdog_enabled: WATCHDOG_USEC meant for another process (WATCHDOG_PID) is not ours,
 * so psd sends READY=1 but no pings. */
START_TEST(psd_ignores_watchdog_of_another_pid) {
    if (!have_libsystemd()) return;
    notified_psd n;
    notified_start(&n, getpid());
    char endpoint[128], msg[4096];
    expect_ready(&n, endpoint, sizeof endpoint);
    size_t got = notified_recv(&n, ps_test_now_ms() + 500, msg, sizeof msg);
    ck_assert_msg(got == 0, "notification without a watchdog of its own: '%s'", msg);
    int rc = notified_cleanup(&n, START_MS);
    ck_assert_msg(rc == 0, "psd exited %d after SIGTERM", rc);
}
END_TEST

int main(void) {
    char analyze[4096];
    if (!find_in_path("systemd-analyze", analyze, sizeof analyze) &&
        !ps_test_psd_has_libsystemd()) {
        printf("systemd tests skipped: no systemd-analyze on PATH and $PSD is not linked with "
               "libsystemd\n");
        return 77; /* meson: skipped */
    }
    Suite *s = suite_create("systemd");
    TCase *units = tcase_create("units");
    tcase_set_timeout(units, 120);
    tcase_add_unchecked_fixture(units, base_setup, base_teardown);
    tcase_add_test(units, units_pass_systemd_analyze_verify);
    tcase_add_test(units, verify_reports_unknown_keys_and_invalid_values);
    suite_add_tcase(s, units);
    TCase *notify = tcase_create("notify");
    tcase_set_timeout(notify, 60);
    tcase_add_unchecked_fixture(notify, base_setup, base_teardown);
    tcase_add_test(notify, psd_ready_watchdog_and_stopping);
    tcase_add_test(notify, psd_ignores_watchdog_of_another_pid);
    suite_add_tcase(s, notify);
    return ps_test_run_suite(s);
}
