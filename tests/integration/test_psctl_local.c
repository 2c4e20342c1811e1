/* Integration tests for `psctl local` against fake psd/psworker shell scripts: success
 * with prefixed output, a failing worker, signals, deadlines, bad flags and --help. */
#include <check.h>
#include <cjson/cJSON.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels.h"
#include "psctl_local_fakes.h"
#include "run.h"
#include "testutil.h"

/* ---- tests --------------------------------------------------------------------- */

START_TEST(test_happy_path_prefixes_and_sigterm) {
    char summary[4200];
    snprintf(summary, sizeof summary, "%s/summary.json", tdir);
    const char *args[] = {
        "psctl", "local",        "--ps", "2",         "--workers", "2",      "--mode",
        "sync",  "--epochs",     "3",    "--summary", summary,     "--seed", "7",
        "--compression", "topk:0.5", "--",    "--extra-flag", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);

    char parent[64];
    snprintf(parent, sizeof parent, "[psd 0] psd 0 listening parent=%d\n", (int)r.pid);
    ck_assert_contains(r.out, parent);
    ck_assert_contains(r.out, "[psd 1] psd 1 listening");
    ck_assert_contains(r.err, "[psd 1] psd 1 log on stderr\n");
    ck_assert_contains(r.out, "[worker 0] args: --ps 127.0.0.1:21000,127.0.0.1:21001 --index 0 "
                              "--workers 2 --epochs 3 --seed 7 --summary ");
    ck_assert_contains(r.out, "[worker 1] args: --ps 127.0.0.1:21000,127.0.0.1:21001 --index 1 "
                              "--workers 2 --epochs 3 --seed 7 --device cpu --progress plain "
                              "--compression topk:0.5 --extra-flag\n");
    ck_assert_contains(r.out, "--progress plain --compression topk:0.5 --extra-flag\n");
    /* '\r' ends a line when stdout is not a terminal. */
    ck_assert_contains(r.out, "[worker 0] epoch 1 10%\n[worker 0] epoch 1 50%\n"
                              "[worker 0] epoch 1 done\n");
    ck_assert_contains(r.out, "[worker 1] no newline at the end\n");
    ck_assert_contains(r.err, "[worker 1] worker 1 log on stderr\n");
    ck_assert_contains(r.out, "[psd 0] psd 0 got SIGTERM\n");
    ck_assert_contains(r.out, "[psd 1] psd 1 got SIGTERM\n");
    ck_assert_contains(r.err, "psctl: job finished: 2 ps, 2 workers, mode sync\n");

    const char *out_prefixes[] = {"[psd 0] ", "[psd 1] ", "[worker 0] ", "[worker 1] ", NULL};
    const char *err_prefixes[] = {"[psd 0] ",    "[psd 1] ", "[worker 0] ",
                                  "[worker 1] ", "psctl: ",  NULL};
    assert_prefixed(r.out, out_prefixes);
    assert_prefixed(r.err, err_prefixes);
    ck_assert_int_eq(for_each_fake(count_one), 2 + 2 + 2); /* psds, workers, sleeps */
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_worker_fails_stops_everyone) {
    /* --max-restarts 0: the first failure stops the job (test_psctl_restart.c has restarts). */
    const char *args[] = {"psctl", "local",          "--ps", "2",  "--workers",    "2", "--mode",
                          "async", "--max-restarts", "0",    "--", "--fail-index", "1", "--hang",
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 1 failed (exit status 3)\n");
    ck_assert_msg(strstr(r.err, "job finished") == NULL, "claims success:\n%s", r.err);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ck_assert_int_ge(for_each_fake(count_one), 2 + 2 + 1);
    ps_test_run_free(&r);
}
END_TEST

static void interrupt_with(int sig, int want_code) {
    const char *args[] = {"psctl",  "local", "--ps", "2",      "--workers", "2",
                          "--mode", "sync",  "--",   "--hang", NULL};
    const char *markers[] = {"worker 0 hanging", "worker 1 hanging", NULL};
    ps_test_signal_when act = {markers, sig, 0};
    ps_test_run_result r;
    run_psctl(args, NULL, &act, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == want_code, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, sig == SIGINT ? "got SIGINT" : "got SIGTERM");
    ck_assert_contains(r.out, "[psd 0] psd 0 got SIGTERM\n");
    ck_assert_int_eq(for_each_fake(count_one), 2 + 2 + 4);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}

START_TEST(test_sigint_stops_all_exit_130) {
    interrupt_with(SIGINT, 130);
}
END_TEST

START_TEST(test_sigterm_stops_all_exit_143) {
    interrupt_with(SIGTERM, 143);
}
END_TEST

START_TEST(test_psd_never_ready_fails_after_deadline) {
    const char *args[] = {"psctl", "local", "--ps", "2", "--workers", "1", "--mode", "sync", NULL};
    const char *env[] = {"FAKE_PSD_NOREADY=1", "PSCTL_READY_TIMEOUT_MS=500", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 1 not ready within 0.5 s");
    ck_assert_msg(strstr(r.err, "psd 0 not ready") == NULL, "blames psd 0:\n%s", r.err);
    ck_assert_msg(strstr(r.out, "[worker") == NULL, "a worker started:\n%s", r.out);
    ck_assert_msg(r.secs < 10.0, "took %.1f s", r.secs);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_psd_dies_while_running) {
    const char *args[] = {"psctl",  "local", "--ps", "2",      "--workers", "1",
                          "--mode", "sync",  "--",   "--hang", NULL};
    const char *env[] = {"FAKE_PSD_DIE=0", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd 0 ");
    ck_assert_contains(r.err, "exit status 4");
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_timeout_stops_all) {
    const char *args[] = {"psctl", "local",     "--ps", "1",  "--workers", "2", "--mode",
                          "async", "--timeout", "1",    "--", "--hang",    NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: timeout");
    ck_assert_msg(r.secs < 10.0, "took %.1f s", r.secs);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

typedef struct {
    const char *args[16];
    const char *want; /* in stderr */
} bad_case;

static const bad_case bad_cases[] = {
    {{"psctl", NULL}, "usage: psctl"},
    {{"psctl", "bogus", NULL}, "unknown command 'bogus'"},
    {{"psctl", "local", NULL}, "--ps is required"},
    {{"psctl", "local", "--ps", "0", "--workers", "1", "--mode", "sync", NULL}, "--ps"},
    {{"psctl", "local", "--ps", "two", "--workers", "1", "--mode", "sync", NULL}, "--ps"},
    {{"psctl", "local", "--ps", "1", "--workers", "0", "--mode", "sync", NULL}, "--workers"},
    {{"psctl", "local", "--ps", "1", "--workers", "-3", "--mode", "sync", NULL}, "--workers"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "fast", NULL}, "--mode"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", NULL}, "--mode is required"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--epochs", "0", NULL},
     "--epochs"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--epochs", "1.5", NULL},
     "--epochs"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--timeout", "-1", NULL},
     "--timeout"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "--bogus", NULL},
     "--bogus"},
    {{"psctl", "local", "--mode", "sync", "--ps", NULL}, "--ps needs a value"},
    {{"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", "stray", NULL}, "'stray'"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "", NULL}, "'' has an empty id"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "0,,1", NULL}, "an empty id"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "1,", NULL}, "an empty id"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "a", NULL}, "not a number"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "-1", NULL}, "not a number"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "all,0", NULL}, "not a number"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "1,0,1", NULL}, "listed twice"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "256", NULL}, "too large"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", "--workers", "3", "--gpus", "0,1", NULL},
     "--workers 3 disagrees with --gpus 0,1"},
    {{"psctl", "local", "--ps", "1", "--mode", "sync", NULL}, "--workers (or --gpus) is required"},
};

START_TEST(test_bad_flags_exit_2) {
    const bad_case *c = &bad_cases[_i];
    ps_test_run_result r;
    run_psctl(c->args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "case %d: exit %d, stderr:\n%s", _i,
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, c->want);
    ck_assert_msg(strstr(r.out, "[psd") == NULL, "case %d started something", _i);
    ck_assert_int_eq(for_each_fake(count_one), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_missing_binary_exit_2) {
    const char *args[] = {"psctl", "local", "--ps", "1", "--workers", "1", "--mode", "sync", NULL};
    const char *env[] = {"PSD=/nonexistent/psd", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, &r);
    ck_assert(r.finished);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 2);
    ck_assert_contains(r.err, "PSD=/nonexistent/psd");
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_help) {
    const char *top[] = {"psctl", "--help", NULL};
    const char *local[] = {"psctl", "local", "--help", NULL};
    ps_test_run_result r;
    run_psctl(top, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    ck_assert_contains(r.out, "local");
    ps_test_run_free(&r);
    run_psctl(local, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    const char *flags[] = {"--ps N",  "--workers M", "--mode sync|async", "--epochs",
                           "--model", "--data",      "--summary",         "--batch",
                           "--seed",  "--timeout",   "--gpus all|0,1",    "--device cpu",
                           NULL};
    for (const char *const *f = flags; *f; f++)
        ck_assert_contains(r.out, *f);
    ps_test_run_free(&r);
}
END_TEST

static Suite *psctl_local_suite(void) {
    Suite *s = suite_create("psctl_local");
    TCase *fake = psctl_local_tcase("fakes", 60);
    tcase_add_test(fake, test_happy_path_prefixes_and_sigterm);
    tcase_add_test(fake, test_worker_fails_stops_everyone);
    tcase_add_test(fake, test_sigint_stops_all_exit_130);
    tcase_add_test(fake, test_sigterm_stops_all_exit_143);
    tcase_add_test(fake, test_psd_never_ready_fails_after_deadline);
    tcase_add_test(fake, test_psd_dies_while_running);
    tcase_add_test(fake, test_timeout_stops_all);
    tcase_add_loop_test(fake, test_bad_flags_exit_2, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(fake, test_missing_binary_exit_2);
    tcase_add_test(fake, test_help);
    suite_add_tcase(s, fake);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_local_suite());
}
