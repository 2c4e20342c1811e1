/* A crash never turns into a silently wrong model, with real processes:
 * - a 2-shard job (psctl local, no --checkpoint-dir) whose psd 1 is SIGKILLed mid-job
 *   and restarted empty: the job fails naming the shard, instead of the chief creating
 *   that shard's variables again with their initial values and ending with exit 0;
 *   with --recreate-lost-variables it does that, says so, and lists it in the summary;
 * - job ids: a shard holding another job's variables (created, or restored from its
 *   checkpoint) refuses them, and the client names both jobs. */
#include <check.h>
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"

/* Runs a 2-shard, 2-worker psctl local job on the real binaries, SIGKILLs psd 1 once the
 * variables exist, and waits for psctl to end. Returns its exit status; its output is in
 * dir/psctl.log. */
static int run_job_killing_psd1(const char *dir, const char *summary, int recreate) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    setenv("TMPDIR", dir, 1); /* psctl's run and socket dirs */
    setenv("XDG_RUNTIME_DIR", dir, 1);
    unsetenv("PS_PARENT_PID");
    char log[700];
    snprintf(log, sizeof log, "%s/psctl.log", dir);
    const char *argv[40] = {
        getenv("PSCTL"), "local",    "--ps", "2",         "--workers", "2",      "--mode",
        "sync",          "--epochs", "3",    "--summary", summary,     "--data", ps_test_data_dir(),
        "--timeout",     "150"};
    int n = 16;
    if (recreate) argv[n++] = "--recreate-lost-variables";
    const char *extra[] = {"--",        "--max-train", "6000",       "--max-test", "500",
                           "--slow-ms", "20",          "--retry-ms", "300",        NULL};
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    ck_assert_ptr_nonnull(argv[0]);
    pid_t psctl = ps_test_spawn(argv, log);
    ck_assert_int_gt(psctl, 0);
    /* mid-job: every worker has pulled the variables and trains */
    int started = ps_test_wait_file_has(log, "[worker 1] Epoch 1/", 120000, psctl);
    pid_t psd1 = started ? ps_test_find_child(psctl, "--shard", "1") : 0;
    if (psd1 > 0) kill(psd1, SIGKILL);
    int st = ps_test_wait(psctl, 170000);
    if (!psd1) {
        ps_test_dump(log);
        ck_abort_msg("the job did not start, or psd 1 was not found");
    }
    return st;
}

START_TEST(psd_restarted_empty_fails_the_job_naming_it) {
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char summary[700], log[700];
    snprintf(summary, sizeof summary, "%s/summary.json", dir);
    snprintf(log, sizeof log, "%s/psctl.log", dir);
    int st = run_job_killing_psd1(dir, summary, 0);
    if (st != 1) ps_test_dump(log);
    ck_assert_msg(st == 1, "psctl exited %d, want 1", st);
    ck_assert(ps_test_file_has(log, "psctl: psd 1 killed by signal 9; restarting"));
    ck_assert_msg(ps_test_file_has(log, "psd 1 (") &&
                      ps_test_file_has(log, "lost the job's variables"),
                  "the output does not name the shard that lost its variables");
    ck_assert(ps_test_file_has(log, "(exit status 4): a psd shard lost the job's variables"));
    ck_assert(!ps_test_file_has(log, "job finished"));
    ck_assert(!ps_test_file_has(log, "re-creating"));
    ck_assert_msg(access(summary, F_OK) != 0, "a summary was written for a failed job");
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(recreate_lost_variables_completes_and_says_so) {
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char summary[700], log[700];
    snprintf(summary, sizeof summary, "%s/summary.json", dir);
    snprintf(log, sizeof log, "%s/psctl.log", dir);
    int st = run_job_killing_psd1(dir, summary, 1);
    if (st != 0) ps_test_dump(log);
    ck_assert_msg(st == 0, "psctl exited %d, want 0", st);
    ck_assert(ps_test_file_has(log, "--recreate-lost-variables: re-creating them with their "
                                    "INITIAL values"));
    ck_assert(ps_test_file_has(log, "psctl: job finished"));
    FILE *f = fopen(summary, "r");
    ck_assert_msg(f != NULL, "no summary");
    char buf[1 << 14];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *o = cJSON_Parse(buf);
    ck_assert_ptr_nonnull(o);
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "recreated_lost_variables");
    ck_assert_msg(cJSON_IsArray(rec) && cJSON_GetArraySize(rec) == 1 &&
                      cJSON_GetArrayItem(rec, 0)->valueint == 1,
                  "summary: %s", buf);
    cJSON_Delete(o);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* A client of one shard with one variable "w", for job `job`. */
static ps_client *job_client(const ps_test_psd *p, const char *job, float *w, float *dw) {
    ps_client *c;
    char err[256];
    const char *eps[1] = {p->endpoint};
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, 10000);
    ck_assert_int_eq(ps_client_set_job(c, job), PS_OK);
    ps_client_tensor t = {
        .name = "w", .shard = 0, .rank = 1, .shape = {8}, .opt = ps_opt_spec_default(PS_OPT_SGD)};
    t.param = w;
    t.grad = dw;
    ck_assert_int_eq(ps_client_add(c, &t), PS_OK);
    ck_assert_msg(ps_client_hello(c, NULL, NULL) == PS_OK, "%s", ps_client_error(c));
    return c;
}

START_TEST(another_jobs_variables_refused_also_after_restore) {
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *args[] = {"--workers", "1", "--checkpoint-dir", ck, NULL};
    ps_test_psd p;
    ck_assert_int_eq(ps_test_psd_start(&p, args, 10000), 0);
    float w[8] = {0}, dw[8] = {0};
    ps_client *a = job_client(&p, "job-a", w, dw);
    ck_assert_int_eq(ps_client_check_shards(a, NULL, 0, NULL), PS_OK);
    ck_assert_msg(ps_client_create_vars(a, NULL) == PS_OK, "%s", ps_client_error(a));
    ps_client_close(a);
    for (int restarted = 0; restarted < 2; restarted++) {
        ps_client *b = job_client(&p, "job-b", w, dw);
        ck_assert_int_eq(ps_client_check_shards(b, NULL, 0, NULL), PS_EEXIST);
        ck_assert_msg(strstr(ps_client_error(b), "'job-a'") &&
                          strstr(ps_client_error(b), "'job-b'"),
                      "%s", ps_client_error(b));
        /* the shard itself refuses too */
        ck_assert_int_eq(ps_client_create_vars(b, NULL), PS_EEXIST);
        ps_client_close(b);
        ps_client *again = job_client(&p, "job-a", w, dw); /* its own job goes on */
        ck_assert_int_eq(ps_client_check_shards(again, NULL, 0, NULL), PS_OK);
        ck_assert_int_eq(ps_client_create_vars(again, NULL), PS_OK);
        ps_client_close(again);
        if (!restarted) { /* SIGTERM: a checkpoint, which must carry the job id */
            ck_assert_int_eq(kill(p.pid, SIGTERM), 0);
            ck_assert_int_eq(ps_test_wait(p.pid, 10000), 0);
            p.pid = 0;
            ck_assert_int_eq(ps_test_psd_restart(&p, args, 10000), 0);
            ck_assert(ps_test_file_has(p.log, "of job job-a"));
        }
    }
    ck_assert_int_eq(ps_test_psd_stop(&p, 10000), 0);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lost_variables");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, psd_restarted_empty_fails_the_job_naming_it);
    tcase_add_test(tc, recreate_lost_variables_completes_and_says_so);
    tcase_add_test(tc, another_jobs_variables_refused_also_after_restore);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
