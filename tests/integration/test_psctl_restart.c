/* psctl's supervision against fake psd/psworker scripts: a failed worker or psd is
 * restarted with backoff (psd on the same port) until --max-restarts, SIGTERM during a
 * pending restart, exit status 2 never restarted. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "proc.h"
#include "ps_error.h"
#include "psctl_fakes.h"
#include "run.h"
#include "testutil.h"
#include "wire.h"

/* ---- restarts ------------------------------------------------------------------ */

START_TEST(test_worker_sigkilled_once_is_restarted_and_job_succeeds) {
    const char *args[] = {"psctl",  "local",      "--ps", "1",           "--workers", "2",
                          "--mode", "sync",       "--",   "--die-index", "1",         "--die-how",
                          "kill",   "--die-runs", "1",    NULL};
    const char *env[] = {"FAKE_TOKEN=abc", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 killed by signal 9; restarting (1/3)\n");
    ck_assert_contains(r.err, "psctl: job finished: 1 ps, 2 workers, mode sync\n");
    /* Restarted with the same arguments and environment (PS_PARENT_PID included). */
    char *lines[16];
    int n = read_lines("worker-1.starts", lines);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(lines[0], lines[1]);
    ck_assert_contains(lines[0], "--index 1 ");
    ck_assert_contains(lines[0], "|abc|");
    free_lines(lines, n);
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    ck_assert_int_eq(count_lines("psd-0.argv"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

/* Nanoseconds between start k and k+1 of worker j (from worker-<j>.times). */
static double start_gap_s(int j, int k) {
    char name[64], *lines[16];
    snprintf(name, sizeof name, "worker-%d.times", j);
    int n = read_lines(name, lines);
    ck_assert_int_gt(n, k + 1);
    double gap = (double)(atoll(lines[k + 1]) - atoll(lines[k])) / 1e9;
    free_lines(lines, n);
    return gap;
}

START_TEST(test_worker_always_failing_gives_up_after_max_restarts) {
    const char *args[] = {"psctl", "local",          "--ps", "1",  "--workers",   "2", "--mode",
                          "async", "--max-restarts", "2",    "--", "--die-index", "1", "--die-how",
                          "3",     "--hang",         NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 exited with status 3; restarting (1/2)\n");
    ck_assert_contains(r.err, "psctl: worker 1 exited with status 3; restarting (2/2)\n");
    ck_assert_contains(r.err, "psctl: worker 1 failed (exit status 3); gave up after 2 restarts "
                              "(--max-restarts 2)\n");
    ck_assert_lacks(r.err, "job finished");
    ck_assert_int_eq(count_lines("worker-1.starts"), 3);
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    /* Backoff: 0.2 s before the first restart, 0.4 s before the second. */
    double g0 = start_gap_s(1, 0), g1 = start_gap_s(1, 1);
    ck_assert_msg(g0 >= 0.18 && g0 < 3.0, "first restart after %.3f s", g0);
    ck_assert_msg(g1 >= 0.38 && g1 < 3.0, "second restart after %.3f s", g1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_sigterm_while_a_restart_is_pending_stops_at_once) {
    /* The third restart waits 0.8 s; SIGTERM then must cancel it, not wait for it. */
    const char *args[] = {
        "psctl", "local", "--ps",        "1", "--workers", "1", "--mode", "sync", "--max-restarts",
        "10",    "--",    "--die-index", "0", "--die-how", "3", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, term_on_marker, "restarting (3/10)", &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 143, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, "psctl: got SIGTERM; stopping all processes\n");
    ck_assert_lacks(r.err, "restarting (4/10)");
    ck_assert_int_eq(count_lines("worker-0.starts"), 3);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_sigkilled_comes_back_on_its_port) {
    const char *args[] = {"psctl", "local",       "--ps", "2",  "--workers", "1", "--mode",
                          "sync",  "--transport", "tcp",  "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=1", "FAKE_PSD_DIE_HOW=kill", "FAKE_PSD_DIE_RUNS=1", NULL};
    ps_test_run_result r;
    run_psctl(args, env, term_on_marker, "psd 1 back at", &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 143, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, "psctl: psd 1 killed by signal 9; restarting (1/3)\n");
    ck_assert_contains(r.err, "psctl: psd 1 back at 127.0.0.1:22001\n");
    /* First start --port 0, the restart --port 22001; everything else the same. */
    char *lines[16];
    int n = read_lines("psd-1.argv", lines);
    ck_assert_int_eq(n, 2);
    ck_assert_contains(lines[0], "--port 0 ");
    ck_assert_contains(lines[1], "--port 22001 ");
    char *p = strstr(lines[1], "--port 22001 ");
    memmove(p + strlen("--port 0 "), p + strlen("--port 22001 "),
            strlen(p + strlen("--port 22001 ")) + 1);
    memcpy(p, "--port 0 ", strlen("--port 0 "));
    ck_assert_str_eq(lines[0], lines[1]);
    free_lines(lines, n);
    ck_assert_int_eq(count_lines("psd-0.argv"), 1);
    ck_assert_int_eq(count_lines("worker-0.starts"), 1); /* the workers keep running */
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_failing_gives_up_naming_it) {
    const char *args[] = {"psctl", "local",          "--ps", "1",  "--workers", "1", "--mode",
                          "sync",  "--max-restarts", "1",    "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=0", "FAKE_PSD_DIE_HOW=1", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 0 exited with status 1; restarting (1/1)\n");
    ck_assert_contains(r.err, "psctl: psd 0 failed (exit status 1); gave up after 1 restart "
                              "(--max-restarts 1)\n");
    ck_assert_int_eq(count_lines("psd-0.argv"), 2);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_back_on_another_port_stops_job) {
    const char *args[] = {"psctl", "local",       "--ps", "1",  "--workers", "1", "--mode",
                          "sync",  "--transport", "tcp",  "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=0", "FAKE_PSD_DIE_HOW=kill", "FAKE_PSD_DIE_RUNS=1",
                         "FAKE_PSD_WRONG_PORT=0", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 0 came back at 127.0.0.1:22100, not at "
                              "127.0.0.1:22000 where the workers expect it; stopping\n");
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_max_restarts_0_stops_everything_at_first_failure) {
    const char *wargs[] = {
        "psctl", "local",          "--ps", "2",      "--workers",   "2", "--mode",
        "sync",  "--max-restarts", "0",    "--",     "--die-index", "1", "--die-how",
        "kill",  "--die-runs",     "1",    "--hang", NULL};
    ps_test_run_result r;
    run_psctl(wargs, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 killed by signal 9\n");
    ck_assert_lacks(r.err, "restarting");
    ck_assert_int_eq(count_lines("worker-1.starts"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);

    const char *pargs[] = {"psctl", "local",          "--ps", "2",  "--workers", "1", "--mode",
                           "sync",  "--max-restarts", "0",    "--", "--hang",    NULL};
    const char *env[] = {"FAKE_PSD_DIE=1", "FAKE_PSD_DIE_HOW=kill", NULL};
    forget_runs(); /* the fake psd dies once worker 0 has started: this time, not last */
    run_psctl(pargs, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 1 killed by signal 9\n");
    ck_assert_lacks(r.err, "restarting");
    ck_assert_int_eq(count_lines("psd-1.argv"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_exit_status_2_is_not_restarted) {
    const char *args[] = {"psctl", "local", "--ps",        "1", "--workers", "1", "--mode",
                          "sync",  "--",    "--die-index", "0", "--die-how", "2", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 0 failed (exit status 2); exit status 2 means bad "
                              "configuration: not restarted\n");
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

static Suite *psctl_restart_suite(void) {
    Suite *s = suite_create("psctl_restart");

    TCase *sup = psctl_fakes_tcase("supervision");
    tcase_add_test(sup, test_worker_sigkilled_once_is_restarted_and_job_succeeds);
    tcase_add_test(sup, test_worker_always_failing_gives_up_after_max_restarts);
    tcase_add_test(sup, test_sigterm_while_a_restart_is_pending_stops_at_once);
    tcase_add_test(sup, test_psd_sigkilled_comes_back_on_its_port);
    tcase_add_test(sup, test_psd_failing_gives_up_naming_it);
    tcase_add_test(sup, test_psd_back_on_another_port_stops_job);
    tcase_add_test(sup, test_max_restarts_0_stops_everything_at_first_failure);
    tcase_add_test(sup, test_exit_status_2_is_not_restarted);
    suite_add_tcase(s, sup);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_restart_suite());
}
