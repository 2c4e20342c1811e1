/* Training through real psd and psworker processes on 127.0.0.1: one epoch of
 * Fashion-MNIST in sync and in async mode reaches an accuracy threshold, the
 * summary file is complete, and bad worker configuration fails clearly.
 * Under the sanitizers (PS_SANITIZED=1: an unoptimised build) the four jobs that
 * train to an accuracy bar (one epoch sync and async, the main job's two epochs sync
 * and async) run the same processes on the first SAN_TRAIN samples and only have to
 * beat chance by far (SAN_MIN_ACC): the optimised build of the suite checks their
 * accuracy; this build checks the code paths. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "testutil.h"

#define SAN_TRAIN "6000" /* 3000 a worker: ceil(3000 / 64) = 47 steps an epoch */
#define SAN_STEPS 47
#define SAN_MIN_ACC 0.5

static int sanitized(void) {
    const char *s = getenv("PS_SANITIZED");
    return s && strcmp(s, "1") == 0;
}

/* Runs 2 psd + 2 workers for one epoch; returns the chief's summary (cJSON, caller frees). */
static cJSON *run_job(const char *mode, const char *dir) {
    ps_test_psd psd[2];
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--shard", i ? "1" : "0", "--num-shards", "2", "--workers",
                              "2",       "--mode",      mode,           NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[i], args, 10000), 0);
    }
    char ps[300], summary[600], log0[600], log1[600];
    snprintf(ps, sizeof ps, "%s,%s", psd[0].endpoint, psd[1].endpoint);
    snprintf(summary, sizeof summary, "%s/summary-%s.json", dir, mode);
    snprintf(log0, sizeof log0, "%s/chief-%s.log", dir, mode);
    snprintf(log1, sizeof log1, "%s/worker1-%s.log", dir, mode);
    const char *w0[] = {getenv("PSWORKER"),
                        "--ps",
                        ps,
                        "--index",
                        "0",
                        "--workers",
                        "2",
                        "--epochs",
                        "1",
                        "--summary",
                        summary,
                        "--timeout",
                        "60",
                        sanitized() ? "--max-train" : NULL,
                        SAN_TRAIN,
                        NULL};
    const char *w1[] = {getenv("PSWORKER"),
                        "--ps",
                        ps,
                        "--index",
                        "1",
                        "--workers",
                        "2",
                        "--epochs",
                        "1",
                        "--timeout",
                        "60",
                        sanitized() ? "--max-train" : NULL,
                        SAN_TRAIN,
                        NULL};
    pid_t p0 = ps_test_spawn(w0, log0), p1 = ps_test_spawn(w1, log1);
    int s0 = ps_test_wait(p0, 120000), s1 = ps_test_wait(p1, 120000);
    if (s0 != 0 || s1 != 0) {
        ps_test_dump(log0);
        ps_test_dump(log1);
        ps_test_dump(psd[0].log);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(ps_test_psd_stop(&psd[i], 5000), 0);
    ck_assert_int_eq(s0, 0);
    ck_assert_int_eq(s1, 0);
    const char *text = ps_test_text(summary);
    ck_assert_msg(text != NULL, "no summary written");
    cJSON *j = cJSON_Parse(text);
    ck_assert_ptr_nonnull(j);
    const char *out = ps_test_text(log0);
    ck_assert_msg(strstr(out, sanitized() ? "47/47 [" : "469/469 [") &&
                      strstr(out, "val_accuracy:"),
                  "no Keras-like progress line in the chief's output:\n%s", out);
    return j;
}

static void check_summary(cJSON *j, const char *mode, double min_acc) {
    const char *keys[] = {"test_accuracy", "test_loss", "epochs",          "steps",
                          "workers",       "shards",    "samples_per_sec", "wall_seconds"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(cJSON_IsNumber(cJSON_GetObjectItem(j, keys[i])), "summary lacks %s", keys[i]);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "mode")->valuestring, mode);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "workers")->valueint, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "shards")->valueint, 2);
    /* 30000 / 64, rounded up */
    ck_assert_int_eq(cJSON_GetObjectItem(j, "steps")->valueint, sanitized() ? SAN_STEPS : 469);
    double acc = cJSON_GetObjectItem(j, "test_accuracy")->valuedouble;
    if (sanitized()) min_acc = SAN_MIN_ACC;
    ck_assert_msg(acc >= min_acc, "%s: test accuracy %.4f < %.2f", mode, acc, min_acc);
    ck_assert(cJSON_GetObjectItem(j, "samples_per_sec")->valuedouble > 0);
}

START_TEST(sync_epoch_reaches_accuracy) {
    char *dir = ps_test_mkdtemp();
    cJSON *j = run_job("sync", dir);
    check_summary(j, "sync", 0.80);
    cJSON_Delete(j);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(async_epoch_reaches_accuracy) {
    char *dir = ps_test_mkdtemp();
    cJSON *j = run_job("async", dir);
    check_summary(j, "async", 0.80);
    cJSON_Delete(j);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static int run_worker_expect(const char *const *argv, const char *tf_config, const char *needle) {
    char *dir = ps_test_mkdtemp();
    char log[600];
    snprintf(log, sizeof log, "%s/out.log", dir);
    if (tf_config) setenv("TF_CONFIG", tf_config, 1);
    pid_t p = ps_test_spawn(argv, log);
    unsetenv("TF_CONFIG");
    int st = ps_test_wait(p, 30000);
    const char *out = ps_test_text(log);
    int found = out && strstr(out, needle) != NULL;
    if (!found) ps_test_dump(log);
    ps_test_rmdir(dir);
    free(dir);
    return found ? st : -100;
}

START_TEST(worker_help_and_bad_config) {
    const char *w = getenv("PSWORKER");
    const char *help[] = {w, "--help", NULL};
    ck_assert_int_eq(run_worker_expect(help, NULL, "usage: psworker"), 0);
    const char *noargs[] = {w, NULL};
    ck_assert_int_eq(run_worker_expect(noargs, NULL, "no parameter servers"), 2);
    const char *badps[] = {w, "--ps", "localhost", NULL};
    ck_assert_int_eq(run_worker_expect(badps, NULL, "not host:port"), 2);
    const char *badidx[] = {w, "--ps", "127.0.0.1:1", "--index", "3", "--workers", "2", NULL};
    ck_assert_int_eq(run_worker_expect(badidx, NULL, "out of range"), 2);
    ck_assert_int_eq(run_worker_expect(noargs, "{not json", "TF_CONFIG"), 2);
    const char *badmodel[] = {w, "--ps", "127.0.0.1:1", "--model", "/nonexistent.json", NULL};
    ck_assert_int_eq(run_worker_expect(badmodel, NULL, "/nonexistent.json"), 1);
}
END_TEST

/* One worker, one psd, with extra flags; returns the chief's test accuracy
 * (-1 if it failed; its output then contains `expect` when given). */
static double solo_job(const char *const *extra, const char *dir, const char *expect) {
    ps_test_psd psd;
    const char *pa[] = {"--workers", "1", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, pa, 10000), 0);
    char summary[700], log[700];
    snprintf(summary, sizeof summary, "%s/solo.json", dir);
    snprintf(log, sizeof log, "%s/solo.log", dir);
    unlink(summary);
    unlink(log);
    const char *argv[32] = {getenv("PSWORKER"), "--ps", psd.endpoint, "--summary", summary,
                            "--max-test",       "2000", "--epochs",   "1",         NULL};
    int n = 9;
    for (int i = 0; extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int st = ps_test_wait(ps_test_spawn(argv, log), 120000);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);
    const char *out = ps_test_text(log);
    if (expect) ck_assert_msg(out && strstr(out, expect), "no '%s' in:\n%s", expect, out);
    if (st != 0) return -1;
    cJSON *j = cJSON_Parse(ps_test_text(summary));
    ck_assert_ptr_nonnull(j);
    double acc = cJSON_GetObjectItem(j, "test_accuracy")->valuedouble;
    cJSON_Delete(j);
    return acc;
}

/* --save writes the final model; --init-from starts a new job from it (so two
 * steps already give the trained accuracy), and refuses a file that does not
 * fit the model. */
START_TEST(save_and_init_from) {
    char *dir = ps_test_mkdtemp();
    char saved[700], bad[700];
    snprintf(saved, sizeof saved, "%s/model.pstf", dir);
    const char *train[] = {"--max-train", "20000", "--save", saved, NULL};
    double trained = solo_job(train, dir, "saved the model to");
    ck_assert_double_gt(trained, 0.75);
    const char *resume[] = {"--init-from", saved, "--max-steps", "2", NULL};
    double resumed = solo_job(resume, dir, "initial values from");
    const char *scratch[] = {"--max-steps", "2", NULL};
    double fresh = solo_job(scratch, dir, NULL);
    printf("save/init-from: trained %.4f, 2 steps from the file %.4f, 2 from scratch %.4f\n",
           trained, resumed, fresh);
    ck_assert_double_gt(resumed, trained - 0.05);
    ck_assert_double_lt(fresh, 0.6);
    /* a model with another shape does not fit the file */
    snprintf(bad, sizeof bad, "%s/wide.json", dir);
    FILE *f = fopen(bad, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"input_shape\": [784], \"layers\": [{\"type\": \"Dense\", \"units\": 64,"
          " \"activation\": \"relu\"}, {\"type\": \"Dense\", \"units\": 10}]}",
          f);
    fclose(f);
    const char *mismatch[] = {"--init-from", saved, "--model", bad, "--max-steps", "1", NULL};
    ck_assert_double_eq(solo_job(mismatch, dir, "size differs for 'dense_0/kernel'"), -1);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* --no-ps (the optimizer in the worker, the benchmark floor) computes the
 * same model as one worker through psd: same formulas, same order, so the
 * test loss is bit-identical. */
START_TEST(no_ps_matches_one_worker_through_psd) {
    char *dir = ps_test_mkdtemp();
    const char *limits[] = {"--max-train", "6000", NULL};
    double via_psd = solo_job(limits, dir, NULL);
    char summary[700], log[700];
    snprintf(summary, sizeof summary, "%s/nops.json", dir);
    snprintf(log, sizeof log, "%s/nops.log", dir);
    const char *argv[] = {
        getenv("PSWORKER"), "--no-ps", "yes",         "--summary", summary, "--max-test", "2000",
        "--epochs",         "1",       "--max-train", "6000",      NULL};
    int st = ps_test_wait(ps_test_spawn(argv, log), 120000);
    if (st != 0) ps_test_dump(log);
    ck_assert_int_eq(st, 0);
    cJSON *j = cJSON_Parse(ps_test_text(summary));
    ck_assert_ptr_nonnull(j);
    double alone = cJSON_GetObjectItem(j, "test_accuracy")->valuedouble;
    cJSON_Delete(j);
    printf("--no-ps: test accuracy %.4f, through psd %.4f\n", alone, via_psd);
    ck_assert_double_eq(alone, via_psd);
    ck_assert_double_gt(alone, 0.7);
    /* --no-ps with a cluster is a configuration error */
    const char *bad[] = {getenv("PSWORKER"), "--no-ps", "yes", "--ps", "127.0.0.1:1", NULL};
    ck_assert_int_eq(run_worker_expect(bad, NULL, "--no-ps trains alone"), 2);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(worker_without_server_times_out) {
    /* a port nobody listens on: the worker gives up after --timeout with a clear message */
    const char *w = getenv("PSWORKER");
    const char *argv[] = {w,     "--ps",       "127.0.0.1:9", "--timeout", "1", "--max-train",
                          "100", "--max-test", "100",         NULL};
    ck_assert_int_eq(run_worker_expect(argv, NULL, "no answer from psd 0"), 1);
}
END_TEST

START_TEST(worker_accepts_tf_config) {
    /* TF_CONFIG with a chief: task worker 0 is global worker 1 of 2; it must
     * reach the psd named in cluster.ps and ask for a job of 2 workers */
    ps_test_psd psd;
    const char *args[] = {"--workers", "3", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, args, 10000), 0);
    char tf[512];
    snprintf(tf, sizeof tf,
             "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"], "
             "\"ps\": [\"%s\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
             psd.endpoint);
    const char *argv[] = {getenv("PSWORKER"), "--timeout", "5", "--max-train", "100",
                          "--max-test",       "100",       NULL};
    /* the psd serves 3 workers, TF_CONFIG says 2: the Hello is refused, naming both */
    int st = run_worker_expect(argv, tf, "job of 3 workers, the client says 2");
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);
    ck_assert_int_eq(st, 2); /* a configuration mismatch: exit status 2 */
}
END_TEST

/* The main job as README command 1 runs it (and its async twin), through psctl. */
static double psctl_job(const char *mode) {
    char *dir = ps_test_mkdtemp();
    char summary[600], log[600];
    snprintf(summary, sizeof summary, "%s/summary.json", dir);
    snprintf(log, sizeof log, "%s/psctl.log", dir);
    const char *argv[] = {getenv("PSCTL"),
                          "local",
                          "--ps",
                          "2",
                          "--workers",
                          "2",
                          "--mode",
                          mode,
                          "--epochs",
                          "2",
                          "--summary",
                          summary,
                          "--timeout",
                          "200",
                          sanitized() ? "--" : NULL,
                          "--max-train",
                          SAN_TRAIN,
                          NULL};
    int st = ps_test_wait(ps_test_spawn(argv, log), 220000);
    if (st != 0) ps_test_dump(log);
    ck_assert_int_eq(st, 0);
    cJSON *j = cJSON_Parse(ps_test_text(summary));
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "epochs")->valueint, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "steps")->valueint, sanitized() ? 2 * SAN_STEPS : 938);
    double acc = cJSON_GetObjectItem(j, "test_accuracy")->valuedouble;
    cJSON_Delete(j);
    ps_test_rmdir(dir);
    free(dir);
    return acc;
}

START_TEST(main_job_sync_two_epochs) {
    /* sync with the default seed is deterministic (two workers' sums commute exactly) */
    double acc = psctl_job("sync");
    double min = sanitized() ? SAN_MIN_ACC : 0.85;
    ck_assert_msg(acc >= min, "sync main job: test accuracy %.4f < %.2f", acc, min);
}
END_TEST

START_TEST(main_job_async_two_epochs) {
    /* async interleaving varies run to run: measured 0.8507..0.8623 over 5 runs, and
     * 0.8387 under the sanitizer build on a loaded machine (staler pushes); the floor
     * leaves room for that spread (chance is 0.1) */
    double acc = psctl_job("async");
    double min = sanitized() ? SAN_MIN_ACC : 0.82;
    ck_assert_msg(acc >= min, "async main job: test accuracy %.4f < %.2f", acc, min);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_short");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, sync_epoch_reaches_accuracy);
    tcase_add_test(tc, async_epoch_reaches_accuracy);
    tcase_add_test(tc, worker_help_and_bad_config);
    tcase_add_test(tc, worker_without_server_times_out);
    tcase_add_test(tc, save_and_init_from);
    tcase_add_test(tc, no_ps_matches_one_worker_through_psd);
    tcase_add_test(tc, worker_accepts_tf_config);
    tcase_add_test(tc, main_job_sync_two_epochs);
    tcase_add_test(tc, main_job_async_two_epochs);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
