/* psctl local with an all-reduce strategy against fake psworker scripts: no psd, each
 * worker's TF_CONFIG names the ring, a failed worker restarts the whole set (from the
 * chief's checkpoint, counted against --max-restarts), exit status 2 stops the job at once,
 * the psd-only flags are refused. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "psctl_fakes.h"
#include "run.h"
#include "testutil.h"

#define PSCTL_CKPT_STEPS_FLAG_TEST "checkpoint-every-steps" /* psctl/local.h's flag */

/* Checks one recorded TF_CONFIG: only a "worker" list of n entries 127.0.0.1:PORT with
 * distinct ports, and task {"type": "worker", "index": j}. Copies the list (as JSON text)
 * into cluster[n] so that the workers of one start can be compared. */
static void check_tf_config(const char *text, int n, int j, char *cluster, size_t len) {
    cJSON *tf = cJSON_Parse(text);
    ck_assert_msg(tf != NULL, "TF_CONFIG is not JSON: %s", text);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(tf, "cluster");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(c, "worker");
    ck_assert_msg(cJSON_IsArray(w) && cJSON_GetArraySize(w) == n, "worker list: %s", text);
    ck_assert_msg(cJSON_GetArraySize(c) == 1, "more than a worker list: %s", text);
    int ports[16];
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(w, i);
        ck_assert(cJSON_IsString(e));
        ck_assert_msg(sscanf(e->valuestring, "127.0.0.1:%d", &ports[i]) == 1 && ports[i] > 0 &&
                          ports[i] < 65536,
                      "entry %s", e->valuestring);
        for (int k = 0; k < i; k++)
            ck_assert_msg(ports[k] != ports[i], "port %d twice: %s", ports[i], text);
    }
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(tf, "task");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(task, "type");
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(task, "index");
    ck_assert_msg(cJSON_IsString(type) && strcmp(type->valuestring, "worker") == 0, "%s", text);
    ck_assert_msg(cJSON_IsNumber(index) && index->valueint == j, "index in %s", text);
    char *s = cJSON_PrintUnformatted(w);
    snprintf(cluster, len, "%s", s);
    free(s);
    cJSON_Delete(tf);
}

START_TEST(test_killed_worker_restarts_all_from_the_checkpoint) {
    /* a checkpoint the chief "wrote" at step 120 (psd's file name) */
    char ckpt[4200], file[4400];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", tdir);
    ck_assert_int_eq(mkdir(ckpt, 0700), 0);
    snprintf(file, sizeof file, "%s/ckpt-00000000000000000120-1700000000000.pstf", ckpt);
    ck_assert_int_eq(ps_test_write_file(file, "x", 1), 0);
    snprintf(file, sizeof file, "%s/ckpt-00000000000000000080-1700000000999.pstf", ckpt);
    ck_assert_int_eq(ps_test_write_file(file, "x", 1), 0);
    const char *args[] = {"psctl",
                          "local",
                          "--strategy",
                          "mirrored",
                          "--workers",
                          "2",
                          "--epochs",
                          "3",
                          "--seed",
                          "5",
                          "--checkpoint-dir",
                          ckpt,
                          "--",
                          "--die-wait",
                          "--die-index",
                          "1",
                          "--die-how",
                          "kill",
                          "--die-runs",
                          "1",
                          "--hang",
                          "--hang-runs",
                          "1",
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: strategy mirrored: starting 2 workers, ring on 127.0.0.1 "
                              "ports ");
    ck_assert_contains(r.err, "psctl: worker 1 was killed by signal 9; stopping the other workers "
                              "to restart all of them");
    ck_assert_contains(r.err, "psctl: all workers stopped (worker 1 was killed by signal 9)\n");
    ck_assert_contains(r.err, "psctl: restarting all 2 workers from the checkpoint at step 120 "
                              "(restart 1/3)\n");
    ck_assert_contains(r.err, "psctl: job finished: 2 workers, strategy mirrored (after restarting "
                              "the workers)\n");
    ck_assert_lacks(r.out, "[psd");
    ck_assert_int_eq(count_lines("worker-0.starts"), 2); /* worker 0 was stopped and restarted */
    ck_assert_int_eq(count_lines("worker-1.starts"), 2);
    /* every start: the strategy, the checkpoint dir, the training flags; no --ps/--index */
    char *lines[16], want[4400];
    snprintf(want, sizeof want,
             "--strategy mirrored --checkpoint-dir %s --checkpoint-every 60 --epochs 3 --seed 5 ",
             ckpt);
    for (int j = 0; j < 2; j++) {
        char name[32];
        snprintf(name, sizeof name, "worker-%d.starts", j);
        int n = read_lines(name, lines);
        for (int k = 0; k < n; k++) {
            ck_assert_contains(lines[k], want);
            ck_assert_lacks(lines[k], "--ps");
            ck_assert_lacks(lines[k], "--index");
            ck_assert_lacks(lines[k], "--mode");
        }
        free_lines(lines, n);
    }
    /* TF_CONFIG: the same worker list for both workers of a start, each its own index */
    char *tf0[16], *tf1[16], c0[512], c1[512];
    int n0 = read_lines("worker-0.tfconfig", tf0), n1 = read_lines("worker-1.tfconfig", tf1);
    ck_assert_int_eq(n0, 2);
    ck_assert_int_eq(n1, 2);
    for (int k = 0; k < 2; k++) {
        check_tf_config(tf0[k], 2, 0, c0, sizeof c0);
        check_tf_config(tf1[k], 2, 1, c1, sizeof c1);
        ck_assert_str_eq(c0, c1);
    }
    free_lines(tf0, n0);
    free_lines(tf1, n1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_gives_up_after_max_restarts_default_checkpoint_dir) {
    const char *args[] = {"psctl",     "local",      "--strategy",     "multi_worker_mirrored",
                          "--workers", "3",          "--max-restarts", "2",
                          "--",        "--die-wait", "--die-index",    "2",
                          "--die-how", "1",          "--hang",         NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 2 exited with status 1; stopping the other workers");
    ck_assert_contains(r.err, "psctl: restarting all 3 workers from the start (no checkpoint in ");
    ck_assert_contains(r.err, "(restart 1/2)\n");
    ck_assert_contains(r.err, "(restart 2/2)\n");
    ck_assert_contains(r.err, "psctl: worker 2 failed (exit status 1); gave up after 2 restarts of "
                              "all workers (--max-restarts 2)\n");
    ck_assert_lacks(r.err, "job finished");
    for (int j = 0; j < 3; j++) {
        char name[32], *lines[16];
        snprintf(name, sizeof name, "worker-%d.starts", j);
        int n = read_lines(name, lines);
        ck_assert_int_eq(n, 3);
        /* psctl's own checkpoint dir, the same for every start (removed at the end) */
        const char *dir = strstr(lines[0], "--checkpoint-dir ");
        ck_assert_ptr_nonnull(dir);
        ck_assert_contains(dir, "/psctl-local.");
        ck_assert_contains(dir, "/checkpoints ");
        ck_assert_contains(lines[0], "--strategy multi_worker_mirrored ");
        for (int k = 1; k < n; k++)
            ck_assert_str_eq(lines[k], lines[0]);
        free_lines(lines, n);
    }
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_exit_status_2_fails_the_job_at_once) {
    const char *args[] = {"psctl",       "local", "--strategy", "mirrored", "--workers", "2", "--",
                          "--die-index", "0",     "--die-how",  "2",        "--hang",    NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: worker 0 failed (exit status 2); exit status 2 means bad "
                              "configuration: not restarted\n");
    ck_assert_lacks(r.err, "restarting");
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    ck_assert_int_le(count_lines("worker-1.starts"), 1); /* may be stopped before it records */
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_sigterm_while_regrouping_stops_at_once) {
    /* worker 1 always fails; SIGTERM once the second restart began: the third (0.8 s of
     * backoff) never comes */
    const char *args[] = {"psctl",          "local", "--strategy", "mirrored",   "--workers",   "2",
                          "--max-restarts", "10",    "--",         "--die-wait", "--die-index", "1",
                          "--die-how",      "1",     "--hang",     NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, term_on_marker, "(restart 2/10)", &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 143, "exit %d, stderr:\n%s",
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, "psctl: got SIGTERM; stopping all processes\n");
    ck_assert_lacks(r.err, "(restart 3/10)");
    ck_assert_int_le(count_lines("worker-1.starts"), 3);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_allreduce_flags_passed_on) {
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/made/here", tdir); /* two levels made */
    const char *args[] = {"psctl",
                          "local",
                          "--strategy",
                          "mirrored",
                          "--communication",
                          "nccl",
                          "--workers",
                          "1",
                          "--mode",
                          "sync",
                          "--checkpoint-dir",
                          ckpt,
                          "--" PSCTL_CKPT_STEPS_FLAG_TEST,
                          "50",
                          "--checkpoint-every",
                          "0",
                          "--worker-timeout",
                          "3000",
                          "--job-id",
                          "j1",
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char *lines[16], want[4600];
    int n = read_lines("worker-0.starts", lines);
    ck_assert_int_eq(n, 1);
    snprintf(want, sizeof want,
             "--strategy mirrored --communication nccl --checkpoint-dir %s --checkpoint-every 0 "
             "--" PSCTL_CKPT_STEPS_FLAG_TEST " 50 --worker-timeout 3000 --device cpu ",
             ckpt);
    ck_assert_contains(lines[0], want);
    ck_assert_contains(lines[0], " --job-id j1");
    /* no --epochs given: the workers take the model spec's (or their default) */
    ck_assert_msg(!strstr(lines[0], "--epochs"), "--epochs passed on: %s", lines[0]);
    free_lines(lines, n);
    struct stat st;
    ck_assert_msg(stat(ckpt, &st) == 0 && S_ISDIR(st.st_mode), "%s was not made", ckpt);
    ck_assert_contains(r.err, "psctl: job finished: 1 workers, strategy mirrored\n");
    ps_test_run_free(&r);
}
END_TEST

typedef struct {
    const char *args[16];
    const char *want; /* in stderr */
} bad_case;

static const bad_case bad_cases[] = {
    {{"psctl", "local", "--strategy", "mirrored", "--ps", "1", "--workers", "2", NULL},
     "--ps applies to --strategy parameter_server only; --strategy mirrored runs no psd"},
    {{"psctl", "local", "--strategy", "mirrored", "--workers", "2", "--mode", "async", NULL},
     "--mode async: --strategy mirrored is synchronous"},
    {{"psctl", "local", "--strategy", "multi_worker_mirrored", "--workers", "2", "--transport",
      "tcp", NULL},
     "--transport applies to --strategy parameter_server only"},
    {{"psctl", "local", "--strategy", "mirrored", "--workers", "2", "--staleness", "1", NULL},
     "--staleness applies to --strategy parameter_server only"},
    {{"psctl", "local", "--strategy", "mirrored", "--workers", "2", "--recreate-lost-variables",
      NULL},
     "--recreate-lost-variables applies to --strategy parameter_server only"},
    {{"psctl", "local", "--ps", "1", "--workers", "2", "--mode", "sync", "--communication", "ring",
      NULL},
     "--communication applies to the all-reduce strategies"},
    {{"psctl", "local", "--ps", "1", "--workers", "2", "--mode", "sync",
      "--" PSCTL_CKPT_STEPS_FLAG_TEST, "5", NULL},
     "applies to the all-reduce strategies only"},
    {{"psctl", "local", "--strategy", "ring", "--workers", "2", NULL}, "--strategy"},
    {{"psctl", "local", "--strategy", "mirrored", "--workers", "2", "--communication", "mpi", NULL},
     "--communication"},
    {{"psctl", "local", "--strategy", "mirrored", NULL}, "--workers (or --gpus) is required"},
    {{"psctl", "local", "--workers", "2", "--mode", "sync", NULL}, "--ps is required"},
};

START_TEST(test_bad_flags_exit_2) {
    const bad_case *c = &bad_cases[_i];
    ps_test_run_result r;
    run_psctl(c->args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "case %d: exit %d, stderr:\n%s", _i,
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, c->want);
    ck_assert_int_eq(count_lines("worker-0.starts"), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_help_lists_the_strategies) {
    const char *args[] = {"psctl", "local", "--help", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    ck_assert_contains(r.out, "--strategy parameter_server|mirrored|multi_worker_mirrored");
    ck_assert_contains(r.out, "--communication auto|ring|nccl");
    ck_assert_contains(r.out, "--" PSCTL_CKPT_STEPS_FLAG_TEST " N");
    ck_assert_contains(r.out, "All-reduce strategies");
    ps_test_run_free(&r);
}
END_TEST

static Suite *psctl_allreduce_suite(void) {
    Suite *s = suite_create("psctl_allreduce");
    TCase *tc = psctl_fakes_tcase("allreduce");
    tcase_add_test(tc, test_killed_worker_restarts_all_from_the_checkpoint);
    tcase_add_test(tc, test_gives_up_after_max_restarts_default_checkpoint_dir);
    tcase_add_test(tc, test_exit_status_2_fails_the_job_at_once);
    tcase_add_test(tc, test_sigterm_while_regrouping_stops_at_once);
    tcase_add_test(tc, test_allreduce_flags_passed_on);
    tcase_add_loop_test(tc, test_bad_flags_exit_2, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, test_help_lists_the_strategies);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_allreduce_suite());
}
