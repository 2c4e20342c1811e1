/* psworker --sync-every K (local SGD) through real processes.
 * - Model averaging: 2 workers take K = 4 local steps (SGD with momentum, each
 *   its own optimizer state), then combine, twice; the chief's saved variables
 *   must equal (within 1e-5) the mean of the workers' local results computed
 *   here, independently: a replica of the model per worker, fed the batches
 *   psworker's batcher gives that worker, averaged every K steps. The two
 *   workers' local results differ by far more, so taking one worker's values,
 *   a sum, or a wrong anchor fails. Through psd (2 shards, sync) and all-reduce
 *   (mirrored).
 * - One worker: local SGD through psd is plain training (--sync-every 1),
 *   within 1e-6.
 * - A short run with K = 4 trains (sync and async, the default Adam MLP).
 * - Resume: a job of K = 4 continues on the same psd at the right epoch, and
 *   psd refuses the job's variables to a worker without --sync-every (they
 *   are held with SGD rate 1, the deltas' rule). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "local_opt.h"
#include "model.h"
#include "proc.h"
#include "ps_error.h"
#include "testutil.h"
#include "train_jobs.h"

#define K 4
#define ROUNDS 2
#define B 16
#define MAX_TRAIN 2000

static char model[600];

/* The mean of W workers' local results after ROUNDS rounds of K steps (see
 * above); *spread: max |worker 0 - worker 1| before the last averaging. */
static float *reference(unsigned workers, double *spread, size_t *n) {
    ps_dataset d;
    char err[256];
    ck_assert_int_eq(ps_dataset_load_dir(ps_test_data_dir(), 1, MAX_TRAIN, &d, err, sizeof err),
                     PS_OK);
    ps_model *m[2];
    ps_local_opt *o[2];
    ps_batcher b[2];
    float *x = malloc(B * d.dim * sizeof *x);
    int32_t *y = malloc(B * sizeof *y);
    for (unsigned w = 0; w < workers; w++) {
        ck_assert_int_eq(ps_model_load(model, &m[w], err, sizeof err), PS_OK);
        ps_model_init_params(m[w], 1); /* psworker's default --seed */
        ck_assert_int_eq(ps_local_opt_new(m[w], &o[w]), PS_OK);
        ck_assert_int_eq(ps_batcher_init(&b[w], &d, w, workers, B, 1), PS_OK);
        ps_batcher_start_epoch(&b[w], 0);
    }
    *n = ps_model_num_params(m[0]);
    float *mean = malloc(*n * sizeof *mean);
    memcpy(mean, ps_model_params(m[0]), *n * sizeof *mean);
    for (int r = 0; r < ROUNDS; r++) {
        for (unsigned w = 0; w < workers; w++) {
            memcpy(ps_model_params(m[w]), mean, *n * sizeof *mean);
            for (int s = 0; s < K; s++) {
                float loss;
                size_t correct, nb = ps_batcher_next(&b[w], x, y);
                ck_assert_uint_eq(nb, B);
                ck_assert_int_eq(ps_model_train_step(m[w], x, y, nb, &loss, &correct), PS_OK);
                ps_local_opt_step(o[w]);
            }
        }
        for (size_t i = 0; i < *n; i++) {
            double sum = 0;
            for (unsigned w = 0; w < workers; w++)
                sum += ps_model_params(m[w])[i];
            mean[i] = (float)(sum / workers);
        }
        *spread = workers > 1 ? max_abs_diff(ps_model_params(m[0]), ps_model_params(m[1]), *n) : 0;
    }
    for (unsigned w = 0; w < workers; w++) {
        ps_local_opt_free(o[w]);
        ps_batcher_free(&b[w]);
        ps_model_free(m[w]);
    }
    free(x);
    free(y);
    ps_dataset_free(&d);
    return mean;
}

static const char *const averaging_args[] = {"--model",      model, "--max-train", "2000",
                                             "--max-steps",  "8",   "--batch",     "16",
                                             "--sync-every", "4",   NULL};

static void check_averaging(job_kind kind) {
    ck_assert_int_eq(K * ROUNDS, 8);
    char *dir = ps_test_mkdtemp();
    size_t n = 0, nref = 0;
    double spread = 0;
    float *ref = reference(2, &spread, &nref);
    job_spec j = {.kind = kind, .workers = 2, .args = averaging_args, .tag = "lsgd"};
    float *got = job_params(dir, &j, &n);
    ck_assert_uint_eq(n, nref);
    double d = max_abs_diff(got, ref, n);
    ck_assert_msg(spread > 1e-3, "the workers' local results barely differ (%g)", spread);
    ck_assert_msg(d <= 1e-5,
                  "kind %d: max |combined - mean of local results| = %g (the workers "
                  "differ by %g)",
                  (int)kind, d, spread);
    free(got);
    free(ref);
    ps_test_rmdir(dir);
    free(dir);
}

START_TEST(psd_sync_averages_the_workers) {
    check_averaging(JOB_PSD);
}
END_TEST

START_TEST(mirrored_averages_the_workers) {
    check_averaging(JOB_MIRRORED);
}
END_TEST

START_TEST(one_worker_is_plain_training) {
    char *dir = ps_test_mkdtemp();
    const char *plain[] = {"--model", model, "--max-train",  "2000", "--max-steps", "8",
                           "--batch", "16",  "--sync-every", "1",    NULL};
    job_spec a = {.kind = JOB_PSD, .workers = 1, .args = averaging_args, .tag = "k4"};
    job_spec b = {.kind = JOB_PSD, .workers = 1, .args = plain, .tag = "k1"};
    size_t na = 0, nb = 0;
    float *pa = job_params(dir, &a, &na), *pb = job_params(dir, &b, &nb);
    ck_assert_uint_eq(na, nb);
    double d = max_abs_diff(pa, pb, na);
    ck_assert_msg(d <= 1e-6, "1 worker: max |--sync-every 4 - plain| = %g", d);
    free(pa);
    free(pb);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* The chief's "test accuracy: X" line. */
static double accuracy(const char *dir, const char *tag) {
    char log[800];
    job_log(dir, tag, log, sizeof log);
    const char *t = ps_test_text(log), *at = t ? strstr(t, "test accuracy: ") : NULL;
    ck_assert_msg(at, "no test accuracy in %s", log);
    return atof(at + strlen("test accuracy: "));
}

START_TEST(k4_trains_sync_and_async) {
    char *dir = ps_test_mkdtemp();
    const char *args[] = {"--max-train", "4000", "--batch", "32", "--sync-every", "4", NULL};
    job_spec s = {.kind = JOB_PSD, .workers = 2, .mode = "sync", .args = args, .tag = "sync"};
    job_spec a = {.kind = JOB_PSD, .workers = 2, .mode = "async", .args = args, .tag = "async"};
    ck_assert_int_eq(job_run(dir, &s), 0);
    ck_assert_int_eq(job_run(dir, &a), 0);
    double as = accuracy(dir, "sync"), aa = accuracy(dir, "async");
    fprintf(stderr, "--sync-every 4, 2 workers: test accuracy %.4f sync, %.4f async\n", as, aa);
    /* 1 epoch of 2000 samples per worker, 63 local steps, 16 rounds. Sync is
     * deterministic (0.758); async depends on which delta lands when (each is
     * applied whole: the values move by the sum of the workers' progress), 0.78
     * typically and 0.616 seen once under the sanitizer build: its bar is well
     * above chance (0.1) rather than near the typical figure. */
    ck_assert_msg(as >= 0.65, "sync, --sync-every 4: test accuracy %.4f < 0.65", as);
    ck_assert_msg(aa >= 0.5, "async, --sync-every 4: test accuracy %.4f < 0.5", aa);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(resumes_on_the_same_psd) {
    char *dir = ps_test_mkdtemp();
    ps_test_psd psd;
    const char *pa[] = {"--workers", "1", "--mode", "sync", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, pa, 10000), 0);
    job_spec first = {
        .kind = JOB_PSD, .workers = 1, .ps = psd.endpoint, .args = averaging_args, .tag = "first"};
    job_spec again = first;
    again.epochs = "2", again.tag = "again";
    const char *plain[] = {"--model", model,     "--max-train", "2000", "--max-steps",
                           "8",       "--batch", "16",          NULL};
    job_spec other = {.kind = JOB_PSD,
                      .workers = 1,
                      .ps = psd.endpoint,
                      .args = plain,
                      .epochs = "2",
                      .tag = "plain"};
    ck_assert_int_eq(job_run(dir, &first), 0);
    ck_assert_int_eq(job_run(dir, &again), 0);
    ck_assert_int_eq(job_run(dir, &other), 2);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);
    char log[800];
    job_log(dir, "again", log, sizeof log);
    ck_assert_msg(ps_test_file_has(log, "joining a running job: epoch 2, step 0 of 8"),
                  "the second run did not continue at epoch 2: %s", ps_test_text(log));
    job_log(dir, "plain", log, sizeof log);
    ck_assert_msg(ps_test_file_has(log, "exists with optimizer sgd"), "%s", ps_test_text(log));
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static void setup(void) {
    ps_test_children_die_with_me();
}

static Suite *make_suite(void) {
    snprintf(model, sizeof model, "%s/examples/mlp_momentum.json", ps_test_source_root());
    Suite *s = suite_create("local_sgd");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 180);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, psd_sync_averages_the_workers);
    tcase_add_test(tc, mirrored_averages_the_workers);
    tcase_add_test(tc, one_worker_is_plain_training);
    tcase_add_test(tc, k4_trains_sync_and_async);
    tcase_add_test(tc, resumes_on_the_same_psd);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSWORKER", make_suite);
}
