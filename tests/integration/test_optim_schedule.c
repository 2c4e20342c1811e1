/* Learning-rate schedules, weight decay and clipping through real processes: a
 * psworker against two psd shards in sync mode (the schedule and the weight decay
 * applied by psd, the clipping by the worker before its push, a variable split
 * over both shards) ends with the parameters (--save) of a psworker --no-ps with
 * the same model spec (all of it in the worker, local_opt.c), within 1e-6 after 20
 * steps: once with global_clipnorm (the pushes wait for the whole backward pass)
 * and a cosine warm-up, once with clipnorm (each variable clipped as its gradient
 * becomes final) and a piecewise-constant schedule. And the clipping did bite: the
 * same job without it ends elsewhere. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "saved.h"
#include "proc.h"
#include "ps_error.h"
#include "testutil.h"

#define SHARDS 2

static const char *const spec_head =
    "{\"input_shape\": [784], \"layers\": [{\"type\": \"Dense\", \"units\": 256, \"activation\": "
    "\"relu\"}, {\"type\": \"Dense\", \"units\": 10}], \"loss\": "
    "\"sparse_categorical_crossentropy\", \"from_logits\": true, \"optimizer\": ";

/* global_clipnorm well under the gradients' norm, a warm-up then cosine decay
 * (Keras 3's form), weight decay */
static const char *const opt_global =
    "{\"name\": \"sgd\", \"momentum\": 0.9, \"weight_decay\": 0.01, \"global_clipnorm\": 0.2, "
    "\"learning_rate\": {\"module\": \"keras.optimizers.schedules\", \"class_name\": "
    "\"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.0, \"decay_steps\": 15, "
    "\"alpha\": 0.1, \"name\": \"CosineDecay\", \"warmup_target\": 0.1, \"warmup_steps\": 5}, "
    "\"registered_name\": null}}";
static const char *const opt_global_unclipped =
    "{\"name\": \"sgd\", \"momentum\": 0.9, \"weight_decay\": 0.01, "
    "\"learning_rate\": {\"module\": \"keras.optimizers.schedules\", \"class_name\": "
    "\"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.0, \"decay_steps\": 15, "
    "\"alpha\": 0.1, \"name\": \"CosineDecay\", \"warmup_target\": 0.1, \"warmup_steps\": 5}, "
    "\"registered_name\": null}}";
/* clipnorm per variable, a piecewise-constant schedule (Keras 2's form) */
static const char *const opt_pervar =
    "{\"name\": \"sgd\", \"clipnorm\": 0.05, \"learning_rate\": {\"class_name\": "
    "\"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [5, 12], \"values\": [0.2, 0.1, "
    "0.02]}}}";

/* Runs one psworker (--no-ps, or against SHARDS fresh psd shards) for 20 steps with
 * the model spec spec_head + opt; returns its saved parameters (*n floats). */
static float *run(const char *dir, const char *opt, int no_ps, const char *tag, size_t *n) {
    char model[700], save[700], log[700], text[2048];
    snprintf(model, sizeof model, "%s/%s.json", dir, tag);
    snprintf(save, sizeof save, "%s/%s.pstf", dir, tag);
    snprintf(log, sizeof log, "%s/%s.log", dir, tag);
    int len = snprintf(text, sizeof text, "%s%s}", spec_head, opt);
    ck_assert_int_eq(ps_test_write_file(model, text, (size_t)len), 0);
    ps_test_psd psd[SHARDS];
    char eps[SHARDS * 40] = "", nbuf[8], sbuf[SHARDS][8];
    snprintf(nbuf, sizeof nbuf, "%d", SHARDS);
    for (int i = 0; !no_ps && i < SHARDS; i++) {
        snprintf(sbuf[i], sizeof sbuf[i], "%d", i);
        const char *args[] = {"--shard", sbuf[i], "--num-shards", nbuf, "--workers", "1",
                              "--mode",  "sync",  NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[i], args, 10000), 0);
        snprintf(eps + strlen(eps), sizeof eps - strlen(eps), "%s%s", i ? "," : "",
                 psd[i].endpoint);
    }
    const char *argv[40] = {getenv("PSWORKER"), "--model", model,     "--epochs",   "1",
                            "--max-train",      "3000",  "--max-test", "200",       "--max-steps",
                            "20",               "--batch", "32",       "--progress", "none",
                            "--timeout",        "60",    "--save",     save,        NULL};
    int k = 19;
    if (no_ps) {
        argv[k++] = "--no-ps";
        argv[k++] = "yes";
    } else {
        argv[k++] = "--ps";
        argv[k++] = eps;
    }
    argv[k] = NULL;
    int st = ps_test_wait(ps_test_spawn(argv, log), 120000);
    if (st != 0) ps_test_dump(log);
    for (int i = 0; !no_ps && i < SHARDS; i++)
        ck_assert_int_eq(ps_test_psd_stop(&psd[i], 5000), 0);
    ck_assert_msg(st == 0, "%s: psworker failed", tag);
    return ps_test_read_saved(save, n);
}

static double max_abs_diff(const float *x, const float *y, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)x[i] - (double)y[i]));
    return d;
}

/* psd (2 shards) against --no-ps with opt; with `unclipped`, also that opt without
 * its clipping ends elsewhere. */
static void check(const char *opt, const char *unclipped, const char *tag) {
    char *dir = ps_test_mkdtemp();
    char t1[64], t2[64], t3[64];
    snprintf(t1, sizeof t1, "%s-psd", tag);
    snprintf(t2, sizeof t2, "%s-local", tag);
    snprintf(t3, sizeof t3, "%s-unclipped", tag);
    size_t n1 = 0, n2 = 0, n3 = 0;
    float *ps = run(dir, opt, 0, t1, &n1);
    float *local = run(dir, opt, 1, t2, &n2);
    ck_assert_uint_eq(n1, 784 * 256 + 256 + 256 * 10 + 10);
    ck_assert_uint_eq(n1, n2);
    double d = max_abs_diff(ps, local, n1);
    ck_assert_msg(d <= 1e-6, "%s: max |psd - --no-ps| = %g > 1e-6", tag, d);
    if (unclipped) {
        float *free_run = run(dir, unclipped, 1, t3, &n3);
        ck_assert_uint_eq(n3, n1);
        double u = max_abs_diff(free_run, local, n1);
        ck_assert_msg(u > 1e-4, "%s: the clipping changed nothing (%g)", tag, u);
        free(free_run);
    }
    free(ps);
    free(local);
    ps_test_rmdir(dir);
    free(dir);
}

START_TEST(global_clipnorm_cosine_warmup_psd_equals_local) {
    check(opt_global, opt_global_unclipped, "global");
}
END_TEST

START_TEST(clipnorm_piecewise_psd_equals_local) {
    check(opt_pervar, NULL, "pervar");
}
END_TEST

static void setup(void) {
    ps_test_children_die_with_me(); /* in the test's own process (Check forks) */
}

int main(void) {
    if (!getenv("PSWORKER") || !getenv("PSD")) {
        fprintf(stderr, "needs $PSWORKER and $PSD (run through meson test)\n");
        return 1;
    }
    Suite *s = suite_create("optim_schedule");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, global_clipnorm_cosine_warmup_psd_equals_local);
    tcase_add_test(tc, clipnorm_piecewise_psd_equals_local);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
