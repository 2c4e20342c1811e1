/* Exact resume, one option at a time: a job of 2 epochs against the same job
 * stopped after its first epoch and restarted for the second (every worker
 * restarted: psd shards that stayed up, or the all-reduce chief's checkpoint);
 * the final variables must be equal bit for bit, and the History files byte
 * for byte (job_expect_exact_resume, train_jobs.c). Each case is a state that
 * a restart used to lose:
 * - dropout: the masks follow the model's step count (with accumulated
 *   micro-batches under all-reduce, which the count counts);
 * - mixed_float16 through psd: each worker's loss scale (halved by an injected
 *   overflow in the first half; the summaries' loss_scale and skipped_steps);
 * - top-k compression: each worker's residuals, through psd and all-reduce;
 * - local SGD: each worker's own optimizer (momentum), through psd and
 *   all-reduce;
 * - TensorBoard: the resumed run's batch_ and epoch_ steps continue. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "tb.pb-c.h"
#include "testutil.h"
#include "train_jobs.h"

static char mlp[600], momentum[600];

/* A small MLP with Dropout, written into dir. */
static void dropout_model(const char *dir, char *path, size_t n) {
    snprintf(path, n, "%s/dropout.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"name\": \"mlp_dropout\", \"input_shape\": [784], \"layers\": ["
          "{\"type\": \"Dense\", \"units\": 32, \"activation\": \"relu\"},"
          "{\"type\": \"Dropout\", \"rate\": 0.5}, {\"type\": \"Dense\", \"units\": 10}],"
          "\"loss\": \"sparse_categorical_crossentropy\","
          "\"optimizer\": {\"name\": \"sgd\", \"learning_rate\": 0.05}, \"batch_size\": 16}",
          f);
    ck_assert_int_eq(fclose(f), 0);
}

#define SHORT "--max-train", "400", "--max-steps", "5", "--batch", "16"

/* The steps of the events of tag in the event files under dir (one file). */
static size_t tag_steps(const char *dir, const char *tag, long long *steps, size_t max) {
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "no %s", dir);
    struct dirent *de;
    char path[1200] = "";
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0)
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    closedir(d);
    size_t len = 0, n = 0;
    unsigned char *b = (unsigned char *)ps_test_slurp(path, &len);
    ck_assert_msg(b != NULL, "no event file in %s", dir);
    for (size_t at = 0; at + 12 <= len;) { /* u64 length, u32 CRC, data, u32 CRC */
        uint64_t rl = 0;
        for (int i = 7; i >= 0; i--)
            rl = rl << 8 | b[at + (size_t)i];
        Tb__Event *ev = tb__event__unpack(NULL, (size_t)rl, b + at + 12);
        ck_assert_ptr_nonnull(ev);
        int summary = ev->what_case == TB__EVENT__WHAT_SUMMARY; /* a oneof */
        for (size_t v = 0; summary && v < ev->summary->n_value && n < max; v++)
            if (strcmp(ev->summary->value[v]->tag, tag) == 0) steps[n++] = (long long)ev->step;
        tb__event__free_unpacked(ev, NULL);
        at += 12 + (size_t)rl + 4;
    }
    free(b);
    return n;
}

/* One case: the job (kind, workers, psworker flags) interrupted after its first
 * epoch and resumed, against the same job uninterrupted (job_expect_exact_resume). */
static void expect_case(job_kind kind, int workers, const char **args, const char *tag) {
    char *dir = ps_test_mkdtemp();
    job_spec j = {.kind = kind, .workers = workers, .args = args, .tag = tag};
    job_expect_exact_resume(dir, &j);
    ps_test_rmdir(dir);
    free(dir);
}

START_TEST(dropout_through_psd) {
    char *dir = ps_test_mkdtemp();
    char model[700], tb[800];
    dropout_model(dir, model, sizeof model);
    snprintf(tb, sizeof tb, "%s/tb", dir);
    /* only the chief writes event files; both halves into one directory */
    const char *args[] = {"--model", model, SHORT, "--tensorboard", tb, "--tensorboard-every",
                          "2", NULL};
    job_spec j = {.kind = JOB_PSD, .workers = 1, .args = args, .tag = "dropout-psd"};
    job_expect_exact_resume(dir, &j);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* TensorBoard: a run of 1 epoch of 5 steps, then the resumed one: its event file
 * goes on at step 6 (batch_ tags every 2 steps: 6, 8, 10) and epoch 1. */
START_TEST(tensorboard_steps_continue) {
    char *dir = ps_test_mkdtemp();
    char tb1[800], tb2[800], ck[800];
    snprintf(tb1, sizeof tb1, "%s/tb1", dir);
    snprintf(tb2, sizeof tb2, "%s/tb2", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    const char *a1[] = {"--model", mlp, SHORT, "--tensorboard", tb1, "--tensorboard-every", "2",
                        "--checkpoint-dir", ck, NULL};
    const char *a2[] = {"--model", mlp, SHORT, "--tensorboard", tb2, "--tensorboard-every", "2",
                        "--checkpoint-dir", ck, NULL};
    job_spec first = {.kind = JOB_MIRRORED, .workers = 1, .args = a1, .tag = "tb1"};
    job_spec again = {.kind = JOB_MIRRORED, .workers = 1, .args = a2, .tag = "tb2", .epochs = "2"};
    ck_assert_int_eq(job_run(dir, &first), 0);
    ck_assert_int_eq(job_run(dir, &again), 0);
    char run[900];
    long long steps[16];
    snprintf(run, sizeof run, "%s/train", tb2);
    size_t n = tag_steps(run, "batch_loss", steps, 16);
    ck_assert_msg(n == 3 && steps[0] == 6 && steps[1] == 8 && steps[2] == 10,
                  "resumed batch_loss steps: %zu, first %lld", n, n ? steps[0] : -1);
    n = tag_steps(run, "epoch_loss", steps, 16);
    ck_assert_msg(n == 1 && steps[0] == 1, "resumed epoch_loss steps: %zu, first %lld", n,
                  n ? steps[0] : -1);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(dropout_accumulated_mirrored) {
    char *dir = ps_test_mkdtemp();
    char model[700];
    dropout_model(dir, model, sizeof model);
    const char *args[] = {"--model", model, SHORT, "--accumulate-steps", "2", NULL};
    job_spec j = {.kind = JOB_MIRRORED, .workers = 2, .args = args, .tag = "dropout-mirrored"};
    job_expect_exact_resume(dir, &j);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(loss_scale_through_psd) {
    const char *args[] = {"--model", mlp, SHORT, "--dtype-policy", "mixed_float16",
                          "--inject-overflow-at-step", "2", NULL};
    expect_case(JOB_PSD, 1, args, "scale-psd");
}
END_TEST

START_TEST(topk_residuals_through_psd) {
    const char *args[] = {"--model", mlp, SHORT, "--compression", "topk:0.05",
                          NULL};
    expect_case(JOB_PSD, 1, args, "topk-psd");
}
END_TEST

START_TEST(topk_residuals_mirrored) {
    const char *args[] = {"--model", mlp, SHORT, "--compression", "topk:0.05",
                          NULL};
    expect_case(JOB_MIRRORED, 2, args, "topk-mirrored");
}
END_TEST

START_TEST(local_sgd_through_psd) {
    const char *args[] = {"--model", momentum, SHORT, "--sync-every", "2", NULL};
    expect_case(JOB_PSD, 1, args, "lsgd-psd");
}
END_TEST

START_TEST(local_sgd_mirrored) {
    const char *args[] = {"--model", momentum, SHORT, "--sync-every", "2", NULL};
    expect_case(JOB_MIRRORED, 2, args, "lsgd-mirrored");
}
END_TEST

static void setup(void) {
    ps_test_children_die_with_me();
}

static Suite *make_suite(void) {
    snprintf(mlp, sizeof mlp, "%s/examples/mlp_sgd.json", ps_test_source_root());
    snprintf(momentum, sizeof momentum, "%s/examples/mlp_momentum.json", ps_test_source_root());
    Suite *s = suite_create("exact_resume");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, dropout_through_psd);
    tcase_add_test(tc, tensorboard_steps_continue);
    tcase_add_test(tc, dropout_accumulated_mirrored);
    tcase_add_test(tc, loss_scale_through_psd);
    tcase_add_test(tc, topk_residuals_through_psd);
    tcase_add_test(tc, topk_residuals_mirrored);
    tcase_add_test(tc, local_sgd_through_psd);
    tcase_add_test(tc, local_sgd_mirrored);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD PSWORKER", make_suite);
}
