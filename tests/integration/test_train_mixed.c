/* Mixed precision through real psd and psworker processes on 127.0.0.1:
 * - an injected fp16 overflow (--inject-overflow-at-step) in a sync job
 *   through psd: the step is skipped (the variables after 4 steps are those
 *   after 3, bit for bit, while a 4th good step changes them), the loss scale
 *   halves (logged, and in the summary);
 * - two workers, one overflowing, sync and async: the job goes on (sync, the
 *   step closes on the other worker's gradient; async, the skipped push still
 *   counts, so the chief's evaluation does not wait for it);
 * - multi_worker_mirrored: one replica's overflow makes every replica skip
 *   (checked on the reduced gradient), and their variables stay equal; the
 *   scale is in the chief's checkpoint: a restart resumes with it;
 * - mixed_float16 and mixed_bfloat16 training of the MLP and of a small CNN
 *   (Keras' own mixed_float16 file) reaches the float32 run's accuracy. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "saved.h"
#include "proc.h"
#include "ps_error.h"
#include "testutil.h"

static cJSON *summary(const char *path) {
    char *text = ps_test_slurp(path, NULL);
    ck_assert_msg(text != NULL, "no summary %s", path);
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "summary is not JSON: %s", text);
    free(text);
    return j;
}

static double num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsNumber(v), "summary lacks %s", key);
    return v->valuedouble;
}

static void expect_log(const char *log, const char *text) {
    const char *out = ps_test_text(log);
    if (out && strstr(out, text)) return;
    ps_test_dump(log);
    ck_abort_msg("%s lacks \"%s\"", log, text);
}

/* One sync psd and `workers` psworkers (mode sync/async), each given common
 * args and worker 1 also `w1` (NULL-terminated, may be NULL). Logs in
 * dir/TAG-w.log; the chief's summary in dir/TAG.json. */
static void ps_job(const char *dir, const char *tag, const char *mode, int workers,
                   const char *const *common, const char *const *w1) {
    ps_test_psd psd;
    char nw[16];
    snprintf(nw, sizeof nw, "%d", workers);
    const char *pargs[] = {"--workers", nw, "--mode", mode, NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, pargs, 10000), 0);
    pid_t pid[2];
    char log[2][600], sum[600];
    snprintf(sum, sizeof sum, "%s/%s.json", dir, tag);
    for (int w = 0; w < workers; w++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", w);
        snprintf(log[w], sizeof log[w], "%s/%s-%d.log", dir, tag, w);
        const char *argv[64] = {getenv("PSWORKER"), "--ps", psd.endpoint, "--index", idx,
                                "--workers", nw, "--progress", "none", "--timeout", "60",
                                "--summary", sum};
        int k = 13;
        for (int i = 0; common[i]; i++)
            argv[k++] = common[i];
        for (int i = 0; w == 1 && w1 && w1[i]; i++)
            argv[k++] = w1[i];
        argv[k] = NULL;
        pid[w] = ps_test_spawn(argv, log[w]);
    }
    int st[2] = {0, 0};
    for (int w = 0; w < workers; w++)
        st[w] = ps_test_wait(pid[w], 120000);
    for (int w = 0; w < workers; w++)
        if (st[w] != 0) ps_test_dump(log[w]);
    if (st[0] || st[1]) ps_test_dump(psd.log);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);
    for (int w = 0; w < workers; w++)
        ck_assert_msg(st[w] == 0, "%s: worker %d exit %d", tag, w, st[w]);
}

/* The saved model's tensors, concatenated (malloc'd), *n floats. */
static float *saved(const char *path, size_t *n) {
    return ps_test_read_saved(path, n);
}

#define SHORT "--epochs", "1", "--max-train", "2000", "--max-test", "200", "--seed", "3"

START_TEST(overflow_skips_the_step_through_psd) {
    char *dir = ps_test_mkdtemp();
    char a[600], b[600], c[600], sa[600];
    snprintf(a, sizeof a, "%s/four-skipped.tf", dir);
    snprintf(b, sizeof b, "%s/three.tf", dir);
    snprintf(c, sizeof c, "%s/four.tf", dir);
    const char *run_a[] = {SHORT, "--dtype-policy", "mixed_float16", "--max-steps", "4",
                           "--inject-overflow-at-step", "4", "--save", a, NULL};
    const char *run_b[] = {SHORT, "--dtype-policy", "mixed_float16", "--max-steps", "3",
                           "--save", b, NULL};
    const char *run_c[] = {SHORT, "--dtype-policy", "mixed_float16", "--max-steps", "4",
                           "--save", c, NULL};
    ps_job(dir, "a", "sync", 1, run_a, NULL);
    ps_job(dir, "b", "sync", 1, run_b, NULL);
    ps_job(dir, "c", "sync", 1, run_c, NULL);
    char log[600];
    snprintf(log, sizeof log, "%s/a-0.log", dir);
    expect_log(log, "step 4: this worker's gradients held an inf or NaN: step skipped, loss "
                    "scale 32768 -> 16384");
    snprintf(sa, sizeof sa, "%s/a.json", dir);
    cJSON *j = summary(sa);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "dtype_policy")->valuestring, "mixed_float16");
    ck_assert_double_eq(num(j, "loss_scale"), 16384);
    ck_assert_double_eq(num(j, "skipped_steps"), 1);
    cJSON_Delete(j);
    snprintf(sa, sizeof sa, "%s/c.json", dir);
    j = summary(sa);
    ck_assert_double_eq(num(j, "loss_scale"), 32768);
    ck_assert_double_eq(num(j, "skipped_steps"), 0);
    cJSON_Delete(j);
    size_t na, nb, nc;
    float *va = saved(a, &na), *vb = saved(b, &nb), *vc = saved(c, &nc);
    ck_assert_uint_eq(na, nb);
    ck_assert_uint_eq(na, nc);
    ck_assert_msg(memcmp(va, vb, na * sizeof *va) == 0,
                  "the skipped 4th step changed the variables");
    ck_assert_msg(memcmp(vc, vb, na * sizeof *va) != 0, "a good 4th step changed nothing");
    free(va), free(vb), free(vc);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(one_worker_overflows_sync_and_async) {
    char *dir = ps_test_mkdtemp();
    const char *modes[] = {"sync", "async"};
    for (int i = 0; i < 2; i++) {
        const char *common[] = {SHORT, "--max-steps", "6", "--dtype-policy", "mixed_float16", NULL};
        const char *w1[] = {"--inject-overflow-at-step", "2", NULL};
        long long t0 = ps_test_now_ms();
        ps_job(dir, modes[i], modes[i], 2, common, w1);
        long long ms = ps_test_now_ms() - t0;
        char log[600], sum[600];
        snprintf(log, sizeof log, "%s/%s-1.log", dir, modes[i]);
        expect_log(log, "step 2: this worker's gradients held an inf or NaN: step skipped");
        snprintf(log, sizeof log, "%s/%s-0.log", dir, modes[i]);
        const char *out = ps_test_text(log);
        ck_assert_msg(out && !strstr(out, "step skipped") && !strstr(out, "did not reach version"),
                      "%s: the chief skipped or waited:\n%s", modes[i], out ? out : "");
        snprintf(sum, sizeof sum, "%s/%s.json", dir, modes[i]);
        cJSON *j = summary(sum);
        ck_assert_double_eq(num(j, "skipped_steps"), 0); /* the chief's own scaler */
        ck_assert_double_eq(num(j, "loss_scale"), 32768);
        ck_assert_double_eq(num(j, "steps"), 6);
        cJSON_Delete(j);
        ck_assert_msg(ms < 14000, "%s: %lld ms (an evaluation waited?)", modes[i], ms);
    }
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Two multi_worker_mirrored workers (TF_CONFIG), checkpoints in ckdir;
 * worker 1 injects an overflow at step `inject` (0: none). Logs dir/TAG-w.log. */
static void mirrored_job(const char *dir, const char *tag, const char *ckdir, const char *inject) {
    char eps[2][64], log[2][600], sum[600];
    for (int w = 0; w < 2; w++)
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
    snprintf(sum, sizeof sum, "%s/%s.json", dir, tag);
    pid_t pid[2];
    for (int w = 0; w < 2; w++) {
        char tf[512];
        snprintf(tf, sizeof tf,
                 "{\"cluster\": {\"worker\": [\"%s\", \"%s\"]}, \"task\": {\"type\": \"worker\", "
                 "\"index\": %d}}",
                 eps[0], eps[1], w);
        snprintf(log[w], sizeof log[w], "%s/%s-%d.log", dir, tag, w);
        const char *argv[] = {getenv("PSWORKER"), "--progress", "none", SHORT, "--max-steps", "6",
                              "--dtype-policy", "mixed_float16", "--check-every", "1",
                              "--checkpoint-dir", ckdir, "--summary", sum,
                              w && inject ? "--inject-overflow-at-step" : NULL, inject, NULL};
        setenv("TF_CONFIG", tf, 1);
        pid[w] = ps_test_spawn(argv, log[w]);
        unsetenv("TF_CONFIG");
    }
    int st[2];
    for (int w = 0; w < 2; w++)
        st[w] = ps_test_wait(pid[w], 120000);
    for (int w = 0; w < 2; w++) {
        if (st[w] != 0) ps_test_dump(log[w]);
        ck_assert_int_eq(st[w], 0); /* --check-every 1: the replicas stayed equal */
    }
}

START_TEST(mirrored_replicas_skip_together) {
    char *dir = ps_test_mkdtemp();
    char ckdir[600], log[600], sum[600];
    snprintf(ckdir, sizeof ckdir, "%s/ck", dir);
    mirrored_job(dir, "mirrored", ckdir, "3");
    for (int w = 0; w < 2; w++) {
        snprintf(log, sizeof log, "%s/mirrored-%d.log", dir, w);
        expect_log(log, "step 3: the all-reduced gradients held an inf or NaN: step skipped, loss "
                        "scale 32768 -> 16384");
    }
    snprintf(sum, sizeof sum, "%s/mirrored.json", dir);
    cJSON *j = summary(sum);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "strategy")->valuestring, "multi_worker_mirrored");
    ck_assert_double_eq(num(j, "loss_scale"), 16384); /* the chief's, though its own was finite */
    ck_assert_double_eq(num(j, "skipped_steps"), 1);
    cJSON_Delete(j);
    /* restarted: the chief's checkpoint brings the scale (and 3 good steps) back, to both */
    mirrored_job(dir, "again", ckdir, NULL);
    for (int w = 0; w < 2; w++) {
        snprintf(log, sizeof log, "%s/again-%d.log", dir, w);
        expect_log(log, "loss scale 16384 (3 good steps) after step 6");
    }
    snprintf(sum, sizeof sum, "%s/again.json", dir);
    j = summary(sum);
    ck_assert_double_eq(num(j, "loss_scale"), 16384);
    cJSON_Delete(j);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* --no-ps runs (the strategy does not matter for the arithmetic): accuracy of
 * each policy, which must be within 0.02 of float32's. */
static double accuracy(const char *dir, const char *policy, const char *model, const char *train) {
    char sum[600], log[600], mpath[1024];
    snprintf(sum, sizeof sum, "%s/acc-%s.json", dir, policy);
    snprintf(log, sizeof log, "%s/acc-%s.log", dir, policy);
    const char *argv[32] = {getenv("PSWORKER"), "--no-ps", "yes", "--progress", "none",
                            "--epochs", "1", "--max-train", train, "--max-test", "1000",
                            "--dtype-policy", policy, "--summary", sum, NULL};
    if (model) {
        snprintf(mpath, sizeof mpath, "%s/%s", ps_test_source_root(), model);
        argv[15] = "--model";
        argv[16] = mpath;
        argv[17] = "--loss";
        argv[18] = "sparse_categorical_crossentropy";
        argv[19] = NULL;
    }
    int st = ps_test_wait(ps_test_spawn(argv, log), 120000);
    if (st != 0) ps_test_dump(log);
    ck_assert_int_eq(st, 0);
    cJSON *j = summary(sum);
    double acc = num(j, "test_accuracy");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "dtype_policy")->valuestring, policy);
    cJSON_Delete(j);
    return acc;
}

START_TEST(mixed_training_reaches_accuracy) {
    char *dir = ps_test_mkdtemp();
    struct {
        const char *model, *train;
        double min;
    } runs[] = {{NULL, "6000", 0.75}, {"tests/fixtures/keras/mixed_k3.json", "1500", 0.55}};
    for (int r = 0; r < 2; r++) {
        double f32 = accuracy(dir, "float32", runs[r].model, runs[r].train);
        double f16 = accuracy(dir, "mixed_float16", runs[r].model, runs[r].train);
        double bf16 = accuracy(dir, "mixed_bfloat16", runs[r].model, runs[r].train);
        fprintf(stderr, "%s: float32 %.4f, mixed_float16 %.4f, mixed_bfloat16 %.4f\n",
                runs[r].model ? runs[r].model : "MLP", f32, f16, bf16);
        ck_assert_msg(f32 >= runs[r].min, "float32 %.4f", f32);
        ck_assert_msg(fabs(f16 - f32) <= 0.02, "mixed_float16 %.4f vs float32 %.4f", f16, f32);
        ck_assert_msg(fabs(bf16 - f32) <= 0.02, "mixed_bfloat16 %.4f vs float32 %.4f", bf16, f32);
    }
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("train_mixed");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, overflow_skips_the_step_through_psd);
    tcase_add_test(tc, one_worker_overflows_sync_and_async);
    tcase_add_test(tc, mirrored_replicas_skip_together);
    tcase_add_test(tc, mixed_training_reaches_accuracy);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSWORKER", make_suite);
}
