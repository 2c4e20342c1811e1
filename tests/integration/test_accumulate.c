/* psworker --accumulate-steps N through real processes: N micro-batches of b
 * per step reach the variables of one batch of N x b (within 1e-5: an MLP
 * without dropout or batch normalization, SGD with momentum, so a wrong scale
 * shows) through psd (2 shards, sync, 2 workers), all-reduce (mirrored, 2
 * workers) and alone (--no-ps, over a whole epoch whose last step takes the
 * remainder: 1000 samples = 15 steps of 64 and one of 40, three micro-batches
 * of 16, 16 and 8). The chief logs the effective global batch. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "proc.h"
#include "ps_error.h"
#include "testutil.h"
#include "train_jobs.h"

static char model[600];

/* One job with batch 64, one with 4 micro-batches of 16; compares them. */
static void check_equal(job_kind kind, unsigned workers, const char *max_train,
                        const char *max_steps) {
    char *dir = ps_test_mkdtemp();
    const char *big[] = {"--model", model,     "--max-train", max_train, "--max-steps",
                         max_steps, "--batch", "64",          NULL};
    const char *acc[] = {
        "--model", model, "--max-train",        max_train, "--max-steps", max_steps,
        "--batch", "16",  "--accumulate-steps", "4",       NULL};
    job_spec a = {.kind = kind, .workers = workers, .args = big, .tag = "big"};
    job_spec b = {.kind = kind, .workers = workers, .args = acc, .tag = "acc"};
    size_t na = 0, nb = 0;
    float *pa = job_params(dir, &a, &na), *pb = job_params(dir, &b, &nb);
    ck_assert_uint_eq(na, nb);
    ps_model *m;
    char err[256], log[800], line[128];
    ck_assert_int_eq(ps_model_load(model, &m, err, sizeof err), PS_OK);
    ps_model_init_params(m, 1); /* psworker's default --seed */
    ck_assert_uint_eq(ps_model_num_params(m), na);
    double moved = max_abs_diff(pa, ps_model_params(m), na);
    ps_model_free(m);
    double d = max_abs_diff(pa, pb, na);
    ck_assert_msg(moved > 1e-3, "the variables barely moved (%g)", moved);
    ck_assert_msg(d <= 1e-5, "kind %d, %u workers: max |batch 64 - 4 x 16 accumulated| = %g",
                  (int)kind, workers, d);
    job_log(dir, "acc", log, sizeof log);
    snprintf(line, sizeof line, "x batch 16 x 4 accumulated micro-batches = global batch %u",
             64 * workers);
    ck_assert_msg(ps_test_file_has(log, line), "no '%s' in %s", line, log);
    free(pa);
    free(pb);
    ps_test_rmdir(dir);
    free(dir);
}

START_TEST(psd_sync_two_workers) {
    check_equal(JOB_PSD, 2, "1280", "5");
}
END_TEST

START_TEST(mirrored_two_workers) {
    check_equal(JOB_MIRRORED, 2, "1280", "5");
}
END_TEST

START_TEST(alone_whole_epoch_with_remainder) {
    check_equal(JOB_ALONE, 1, "1000", "0");
}
END_TEST

static void setup(void) {
    ps_test_children_die_with_me();
}

static Suite *make_suite(void) {
    snprintf(model, sizeof model, "%s/examples/mlp_momentum.json", ps_test_source_root());
    Suite *s = suite_create("accumulate");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, psd_sync_two_workers);
    tcase_add_test(tc, mirrored_two_workers);
    tcase_add_test(tc, alone_whole_epoch_with_remainder);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSWORKER", make_suite);
}
