/* Transfer learning through real processes (docs/TRAINING.md, "Transfer
 * learning"): a base CNN trained alone and exported as base.keras; a new head
 * on it with the base frozen (a spec wrapping the archive: "trainable": false,
 * "head"), trained through psd (one shard of our own, sync, 2 workers) and
 * under all-reduce (mirrored, 2 workers). The frozen variables come out
 * bit-identical to the base's, psd holds only the head's variables and
 * receives pushes of their size alone, and the test accuracy beats chance (0.1)
 * by far. Then the fine-tuning run (a spec wrapping the first run's export that
 * unfreezes the top layers, at a lower learning rate): those move, the layers
 * still frozen do not. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps.h"
#include "proc.h"
#include "stats.h"
#include "testutil.h"
#include "train_jobs.h"

/* The base's variables in order: conv2d_0 (72 + 8), batch_normalization_0 (4 x 8),
 * conv2d_1 (1152 + 16), dense_0 (400 x 32 + 32), then dense_1 (32 x 10 + 10). */
#define CONV0_FLOATS 80
#define BN_FLOATS 32
#define CONV1_FLOATS 1168
#define DENSE0_FLOATS 12832
#define BASE_FROZEN (CONV0_FLOATS + BN_FLOATS + CONV1_FLOATS + DENSE0_FLOATS)
#define HEAD_FLOATS 330

static const char base_spec[] =
    "{\"input_shape\": [28, 28, 1], \"layers\": ["
    "{\"type\": \"Conv2D\", \"filters\": 8, \"kernel_size\": 3, \"activation\": \"relu\"},"
    "{\"type\": \"BatchNormalization\"}, {\"type\": \"MaxPooling2D\"},"
    "{\"type\": \"Conv2D\", \"filters\": 16, \"kernel_size\": 3, \"activation\": \"relu\"},"
    "{\"type\": \"MaxPooling2D\"}, {\"type\": \"Flatten\"},"
    "{\"type\": \"Dense\", \"units\": 32, \"activation\": \"relu\"},"
    "{\"type\": \"Dense\", \"units\": 10}],"
    " \"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true}\n";

/* the base frozen, a new head after its 32-unit layer */
static const char stage1_spec[] =
    "{\"keras\": \"base.keras\", \"trainable\": false,"
    " \"head\": {\"after\": \"dense_0\", \"layers\": [{\"type\": \"Dense\", \"units\": 10}]},"
    " \"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true,"
    " \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.003}}\n";

/* the top two layers of the base unfrozen, at a tenth of the rate */
static const char stage2_spec[] =
    "{\"keras\": \"stage1.keras\", \"trainable\": {\"conv2d_1\": true, \"dense_0\": true},"
    " \"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true,"
    " \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.0003}}\n";

static char *dir;
static float *base;
static size_t nbase;

static void write_file(const char *name, const char *text) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static void path_of(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
}

/* The chief's "test accuracy: X" */
static double accuracy_of(const char *tag) {
    char log[800];
    job_log(dir, tag, log, sizeof log);
    size_t n = 0;
    char *text = ps_test_slurp(log, &n);
    const char *at = text ? strstr(text, "test accuracy: ") : NULL;
    ck_assert_msg(at, "no test accuracy in %s", log);
    double a = atof(at + strlen("test accuracy: "));
    free(text);
    return a;
}

/* The base is trained once, before the tests (an unchecked fixture: in the runner's
 * process; Check forks each test from it), and each test starts from the same files. */
static void setup_once(void) {
    ps_test_children_die_with_me();
    dir = ps_test_mkdtemp();
    write_file("base.json", base_spec);
    write_file("stage1.json", stage1_spec);
    write_file("stage2.json", stage2_spec);
    char model[700], out[700];
    path_of(model, sizeof model, "base.json");
    path_of(out, sizeof out, "base.keras");
    const char *args[] = {"--model", model, "--max-train", "6000", "--export", out, NULL};
    job_spec j = {.kind = JOB_ALONE, .workers = 1, .args = args, .tag = "base"};
    base = job_params(dir, &j, &nbase);
    ck_assert_uint_eq(nbase, BASE_FROZEN + HEAD_FLOATS);
}

static void teardown_once(void) {
    free(base);
    ps_test_rmdir(dir);
    free(dir);
}

/* each test's processes die with its own (forked) process */
static void setup(void) {
    ps_test_children_die_with_me();
}

/* Trains the new head on the frozen base; returns the saved variables. */
static float *stage1(job_kind kind, const char *ps, const char *tag, const char *export_to) {
    char model[700], out[700];
    path_of(model, sizeof model, "stage1.json");
    path_of(out, sizeof out, export_to ? export_to : "unused.keras");
    const char *args[] = {"--model", model, "--max-train", "6000", "--export", out, NULL};
    job_spec j = {.kind = kind, .workers = kind == JOB_ALONE ? 1 : 2, .ps = ps, .args = args,
                  .tag = tag};
    size_t n = 0;
    float *p = job_params(dir, &j, &n);
    ck_assert_uint_eq(n, BASE_FROZEN + HEAD_FLOATS);
    ck_assert_msg(memcmp(p, base, BASE_FROZEN * sizeof *p) == 0,
                  "%s: a frozen variable changed in training", tag);
    ck_assert_msg(max_abs_diff(p + BASE_FROZEN, base + BASE_FROZEN, HEAD_FLOATS) > 1e-3,
                  "%s: the new head did not train (or was not new)", tag);
    double acc = accuracy_of(tag);
    ck_assert_msg(acc > 0.5, "%s: test accuracy %.4f on the frozen base (chance: 0.1)", tag, acc);
    return p;
}

START_TEST(frozen_base_through_psd) {
    ps_test_psd psd;
    const char *pa[] = {"--workers", "2", "--mode", "sync", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, pa, 10000), 0);
    free(stage1(JOB_PSD, psd.endpoint, "psd", NULL));
    ps_stats st;
    ps_test_shard_stats(psd.endpoint, &st);
    uint64_t held = 0;
    for (size_t i = 0; i < st.n_vars; i++) {
        ck_assert_msg(strncmp(st.vars[i].name, "head_0/", 7) == 0,
                      "psd holds '%s': only the head's variables should be there",
                      st.vars[i].name);
        held += st.vars[i].numel;
    }
    ck_assert_uint_eq(held, HEAD_FLOATS);
    /* every push carried the head's gradients alone (float32, no compression) */
    ck_assert_uint_gt(st.push_bytes, 0);
    ck_assert_uint_eq(st.push_bytes % (HEAD_FLOATS * sizeof(float)), 0);
    ps_stats_free(&st);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);
}
END_TEST

START_TEST(frozen_base_mirrored) {
    free(stage1(JOB_MIRRORED, NULL, "mirrored", NULL));
}
END_TEST

START_TEST(fine_tuning_unfreezes_the_top) {
    float *s1 = stage1(JOB_ALONE, NULL, "alone", "stage1.keras");
    char model[700];
    path_of(model, sizeof model, "stage2.json");
    const char *args[] = {"--model", model, "--max-train", "3000", NULL};
    job_spec j = {.kind = JOB_ALONE, .workers = 1, .args = args, .tag = "stage2"};
    size_t n = 0;
    float *s2 = job_params(dir, &j, &n);
    ck_assert_uint_eq(n, BASE_FROZEN + HEAD_FLOATS);
    size_t still = CONV0_FLOATS + BN_FLOATS; /* conv2d_0 and the batch normalization */
    ck_assert_msg(memcmp(s2, s1, still * sizeof *s2) == 0, "a layer still frozen changed");
    ck_assert_msg(max_abs_diff(s2 + still, s1 + still, CONV1_FLOATS) > 1e-5,
                  "conv2d_1, unfrozen, did not move");
    ck_assert_msg(max_abs_diff(s2 + still + CONV1_FLOATS, s1 + still + CONV1_FLOATS,
                               DENSE0_FLOATS) > 1e-5,
                  "dense_0, unfrozen, did not move");
    ck_assert_msg(accuracy_of("stage2") > 0.5, "fine-tuning lost the accuracy");
    free(s1);
    free(s2);
}
END_TEST

int main(void) {
    Suite *s = suite_create("transfer");
    TCase *tc = tcase_create("transfer");
    tcase_set_timeout(tc, 400);
    tcase_add_unchecked_fixture(tc, setup_once, teardown_once);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, frozen_base_through_psd);
    tcase_add_test(tc, frozen_base_mirrored);
    tcase_add_test(tc, fine_tuning_unfreezes_the_top);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
