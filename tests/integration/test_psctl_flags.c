/* psctl's psd pass-through flags against fake psd/psworker scripts: what reaches psd,
 * bad values (exit 2), a checkpoint dir that cannot be made, and --help. */
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

/* ---- psd flags ------------------------------------------------------------------- */

START_TEST(test_psd_flags_passed_through) {
    char ckpt[4200], want[4400], sub[4300];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt/run1", tdir); /* two levels made */
    const char *args[] = {"psctl",
                          "local",
                          "--ps",
                          "2",
                          "--workers",
                          "2",
                          "--mode",
                          "sync",
                          "--checkpoint-dir",
                          ckpt,
                          "--checkpoint-every",
                          "30",
                          "--worker-timeout",
                          "5000",
                          "--replicas-to-aggregate",
                          "1",
                          "--workers-min",
                          "1",
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    for (int i = 0; i < 2; i++) {
        char name[32], *lines[16];
        snprintf(name, sizeof name, "psd-%d.argv", i);
        int n = read_lines(name, lines);
        ck_assert_int_eq(n, 1);
        snprintf(want, sizeof want,
                 "--checkpoint-dir %s/ps-%d --checkpoint-every 30 --worker-timeout 5000 "
                 "--replicas-to-aggregate 1 --workers-min 1",
                 ckpt, i);
        ck_assert_contains(lines[0], want);
        ck_assert_lacks(lines[0], "--staleness");
        free_lines(lines, n);
        struct stat st;
        snprintf(sub, sizeof sub, "%s/ps-%d", ckpt, i);
        ck_assert_msg(stat(sub, &st) == 0 && S_ISDIR(st.st_mode), "%s was not made", sub);
    }
    ps_test_run_free(&r);

    /* async: --staleness; without the other flags none of them is passed. */
    const char *async_args[] = {"psctl",  "local", "--ps",        "1", "--workers", "1",
                                "--mode", "async", "--staleness", "4", NULL};
    forget_runs();
    run_psctl(async_args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char *lines[16];
    int n = read_lines("psd-0.argv", lines);
    ck_assert_int_eq(n, 1);
    ck_assert_contains(lines[0], "--mode async --ready-file ");
    ck_assert_contains(lines[0], " --staleness 4");
    ck_assert_lacks(lines[0], "--checkpoint");
    ck_assert_lacks(lines[0], "--worker-timeout");
    ck_assert_lacks(lines[0], "--replicas");
    free_lines(lines, n);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

typedef struct {
    const char *args[20];
    const char *want; /* in stderr */
} bad_case;

#define LOCAL "psctl", "local", "--ps", "1", "--workers", "2"
static const bad_case bad_cases[] = {
    {{LOCAL, "--mode", "sync", "--max-restarts", "-1", NULL}, "--max-restarts needs an integer"},
    {{LOCAL, "--mode", "sync", "--max-restarts", "x", NULL}, "--max-restarts"},
    {{LOCAL, "--mode", "sync", "--max-restarts", "1001", NULL}, "from 0 to 1000"},
    {{LOCAL, "--mode", "sync", "--checkpoint-dir", "", NULL}, "--checkpoint-dir needs"},
    {{LOCAL, "--mode", "sync", "--checkpoint-dir", "d", "--checkpoint-every", "-5", NULL},
     "--checkpoint-every needs an integer"},
    {{LOCAL, "--mode", "sync", "--checkpoint-dir", "d", "--checkpoint-every", "1.5", NULL},
     "--checkpoint-every"},
    {{LOCAL, "--mode", "sync", "--checkpoint-every", "10", NULL},
     "--checkpoint-every needs --checkpoint-dir"},
    {{LOCAL, "--mode", "sync", "--worker-timeout", "abc", NULL}, "--worker-timeout needs"},
    {{LOCAL, "--mode", "sync", "--worker-timeout", "-1", NULL}, "--worker-timeout needs"},
    {{LOCAL, "--mode", "sync", "--replicas-to-aggregate", "-1", NULL}, "--replicas-to-aggregate"},
    {{LOCAL, "--mode", "sync", "--replicas-to-aggregate", "3", NULL},
     "--replicas-to-aggregate 3 is more than the 2 workers"},
    {{LOCAL, "--mode", "async", "--replicas-to-aggregate", "1", NULL}, "--mode sync only"},
    {{LOCAL, "--mode", "sync", "--workers-min", "3", NULL},
     "--workers-min 3 is more than the 2 workers"},
    {{LOCAL, "--mode", "async", "--workers-min", "1", NULL}, "--mode sync only"},
    {{LOCAL, "--mode", "sync", "--replicas", "0", NULL},
     "psctl local: --replicas needs an integer from 1 to 2, got '0'"},
    {{LOCAL, "--mode", "sync", "--replicas", "9", NULL},
     "psctl local: --replicas needs an integer from 1 to 2, got '9'"},
    {{LOCAL, "--mode", "sync", "--replicas", "two", NULL},
     "psctl local: --replicas needs an integer from 1 to 2, got 'two'"},
    {{"psctl", "local", "--strategy", "mirrored", "--workers", "2", "--replicas", "2", NULL},
     "psctl local: --replicas applies to --strategy parameter_server only; --strategy mirrored "
     "runs no psd"},
    {{"psctl", "local", "--strategy", "multi_worker_mirrored", "--workers", "2", "--lease-ms",
      "300", NULL},
     "psctl local: --lease-ms applies to --strategy parameter_server only"},
    {{LOCAL, "--mode", "sync", "--lease-ms", "300", NULL},
     "psctl local: --lease-ms is the primary's lease over its backups: it needs --replicas 2 or "
     "more"},
    {{LOCAL, "--mode", "sync", "--replicas", "1", "--lease-ms", "300", NULL},
     "--lease-ms is the primary's lease over its backups"},
    {{LOCAL, "--mode", "sync", "--replicas", "2", "--lease-ms", "0", NULL},
     "--lease-ms needs an integer from 1 to"},
    {{LOCAL, "--mode", "async", "--staleness", "-2", NULL}, "--staleness needs an integer"},
    {{LOCAL, "--mode", "sync", "--staleness", "2", NULL}, "--mode async only"},
    {{LOCAL, "--mode", "sync", "--job-id", "a b", NULL}, "--job-id needs 1 to 64 of"},
    {{LOCAL, "--mode", "sync", "--compression", "topk:0", NULL},
     "--compression 'topk:0': the top-k ratio must be a number with 0 < RATIO <= 1"},
    {{LOCAL, "--mode", "sync", "--compression", "int8", NULL},
     "--compression 'int8': want none, fp16, bf16 or topk:RATIO"},
    {{"psctl", "checkpoint", NULL}, "--ps is required (or TF_CONFIG with cluster.ps)"},
    {{"psctl", "checkpoint", "--ps", "127.0.0.1:1", "--timeout", "0", NULL}, "--timeout needs"},
    {{"psctl", "checkpoint", "--ps", "127.0.0.1:1", "--timeout", "ten", NULL}, "--timeout"},
    {{"psctl", "checkpoint", "--ps", "", NULL}, "--ps lists no ps shards"},
    {{"psctl", "checkpoint", "--ps", "localhost", NULL}, "--ps"},
    {{"psctl", "shutdown", "--ps", "127.0.0.1:0", NULL}, "port 1..65535"},
    {{"psctl", "shutdown", "--ps", "127.0.0.1:1", "stray", NULL}, "unexpected argument 'stray'"},
    {{"psctl", "shutdown", "--bogus", NULL}, "unknown option '--bogus'"},
    {{"psctl", "shutdown", "--ps", NULL}, "needs a value"},
};

START_TEST(test_bad_flag_values_exit_2) {
    const bad_case *c = &bad_cases[_i];
    ps_test_run_result r;
    run_psctl(c->args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "case %d: exit %d, stderr:\n%s", _i,
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, c->want);
    ck_assert_int_eq(for_each_recorded(ps_test_proc_alive) + count_lines("psd-0.argv"), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_checkpoint_dir_that_cannot_be_made_exit_2) {
    char file[4200], dir[4300];
    snprintf(file, sizeof file, "%s/a-file", tdir);
    ck_assert_int_eq(ps_test_write_file(file, "x", 1), 0);
    snprintf(dir, sizeof dir, "%s/ckpt", file);
    const char *args[] = {LOCAL, "--mode", "sync", "--checkpoint-dir", dir, NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl local: --checkpoint-dir: cannot make ");
    ck_assert_int_eq(count_lines("psd-0.argv"), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_help_lists_new_flags_and_commands) {
    const char *top[] = {"psctl", "--help", NULL};
    const char *local[] = {"psctl", "local", "--help", NULL};
    const char *ckpt[] = {"psctl", "checkpoint", "--help", NULL};
    const char *shut[] = {"psctl", "shutdown", "-h", NULL};
    ps_test_run_result r;
    run_psctl(top, NULL, NULL, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    ck_assert_contains(r.out, "  checkpoint ");
    ck_assert_contains(r.out, "  shutdown ");
    ps_test_run_free(&r);
    run_psctl(local, NULL, NULL, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    const char *flags[] = {"--max-restarts N",
                           "--checkpoint-dir DIR",
                           "DIR/ps-<i>",
                           "--checkpoint-every SECONDS",
                           "--worker-timeout MS",
                           "--replicas-to-aggregate R",
                           "--staleness S",
                           "--workers-min M",
                           "--replicas R",
                           "--lease-ms L",
                           "Replicas (--replicas 2)",
                           "Restarts:",
                           "--port P",
                           NULL};
    for (const char *const *f = flags; *f; f++)
        ck_assert_contains(r.out, *f);
    ps_test_run_free(&r);
    const char *const *cmds[] = {ckpt, shut};
    for (int i = 0; i < 2; i++) {
        run_psctl(cmds[i], NULL, NULL, NULL, &r);
        ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
        ck_assert_contains(r.out, "--ps HOST:PORT,...");
        ck_assert_contains(r.out, "--timeout SECONDS");
        ck_assert_contains(r.out, "TF_CONFIG");
        ps_test_run_free(&r);
    }
}
END_TEST

static Suite *psctl_flags_suite(void) {
    Suite *s = suite_create("psctl_restart");

    TCase *sup = psctl_fakes_tcase("supervision");
    tcase_add_test(sup, test_psd_flags_passed_through);
    tcase_add_loop_test(sup, test_bad_flag_values_exit_2, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(sup, test_checkpoint_dir_that_cannot_be_made_exit_2);
    tcase_add_test(sup, test_help_lists_new_flags_and_commands);
    suite_add_tcase(s, sup);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_flags_suite());
}
