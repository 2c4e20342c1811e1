/* BatchNormalization's moving statistics through psd's sync mode: two
 * workers, one step each on their own batch; the moving mean and variance the
 * shards hold afterwards are momentum * initial + (1 - momentum) * the mean
 * over workers of their batch statistics (the documented combination), while
 * the trainable variables move by the averaged gradient. Real psd processes
 * on 127.0.0.1. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"
#include "train.h"

#define SHARDS 2
#define B 8
#define C 3
#define MOMENTUM 0.8

static const char spec[] =
    "{\"input_shape\": [3], \"layers\": [{\"type\": \"BatchNormalization\", \"momentum\": 0.8},"
    " {\"type\": \"Dense\", \"units\": 2}], \"optimizer\": {\"name\": \"sgd\", "
    "\"learning_rate\": 0.1}}";

typedef struct {
    const char *eps[SHARDS];
    unsigned index;
    float x[B * C];
    int32_t y[B];
    float *final; /* chief: the variables after the step (malloc'd) */
    int rc;
    char err[512];
} run_arg;

typedef struct {
    ps_client *c;
    int rc;
} created_wait;

static int variables_created(void *ctx) {
    created_wait *w = ctx;
    w->rc = ps_client_pull(w->c, 0, NULL);
    return w->rc != PS_ENOENT;
}

static void *run_worker(void *p) {
    run_arg *a = p;
    ps_model *m = NULL;
    ps_client *c = NULL;
    a->rc = ps_model_from_json(spec, &m, a->err, sizeof a->err);
    if (a->rc == PS_OK) {
        ps_model_init_params(m, 7);
        a->rc = ps_client_open(&c, a->eps, SHARDS, a->index, 2, a->err, sizeof a->err);
    }
    if (a->rc == PS_OK) {
        ps_client_set_timeout(c, 20000);
        a->rc = ps_train_register_vars(m, c, SHARDS, a->err, sizeof a->err);
    }
    int async = 1;
    if (a->rc == PS_OK) a->rc = ps_client_hello(c, &async, NULL);
    if (a->rc == PS_OK && a->index == 0) a->rc = ps_client_create_vars(c, NULL);
    if (a->rc == PS_OK && a->index != 0) {
        created_wait w = {c, PS_ENOENT};
        ps_test_wait_until(variables_created, &w, 20000, 20);
        a->rc = w.rc;
    }
    float loss;
    size_t correct;
    if (a->rc == PS_OK) a->rc = ps_client_pull(c, 0, NULL);
    if (a->rc == PS_OK) a->rc = ps_model_train_step(m, a->x, a->y, B, &loss, &correct);
    if (a->rc == PS_OK) a->rc = ps_client_push(c, 0, NULL);
    if (a->rc == PS_OK && a->index == 0) a->rc = ps_client_pull(c, 1, NULL);
    if (a->rc == PS_OK && a->index == 0) {
        a->final = malloc(ps_model_num_params(m) * sizeof(float));
        memcpy(a->final, ps_model_params(m), ps_model_num_params(m) * sizeof(float));
    }
    if (a->rc != PS_OK && c && !a->err[0])
        snprintf(a->err, sizeof a->err, "%s", ps_client_error(c));
    ps_client_close(c);
    ps_model_free(m);
    return NULL;
}

START_TEST(moving_stats_average_over_workers) {
    ps_test_psd psd[SHARDS];
    char sbuf[SHARDS][16];
    for (int i = 0; i < SHARDS; i++) {
        snprintf(sbuf[i], sizeof sbuf[i], "%d", i);
        const char *args[] = {"--shard", sbuf[i],  "--num-shards", "2", "--workers",
                              "2",       "--mode", "sync",         NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[i], args, 10000), 0);
    }
    run_arg a[2];
    pthread_t th[2];
    for (unsigned w = 0; w < 2; w++) {
        memset(&a[w], 0, sizeof a[w]);
        for (int i = 0; i < SHARDS; i++)
            a[w].eps[i] = psd[i].endpoint;
        a[w].index = w;
        /* different batches: worker 1's is shifted and wider */
        ps_test_fill_uniform(a[w].x, B * C, 30 + w, w ? 1.0f : -1.0f, w ? 4.0f : 1.0f);
        for (int r = 0; r < B; r++)
            a[w].y[r] = (int32_t)((r + w) % 2);
        pthread_create(&th[w], NULL, run_worker, &a[w]);
    }
    for (unsigned w = 0; w < 2; w++)
        pthread_join(th[w], NULL);
    for (int i = 0; i < SHARDS; i++)
        ck_assert_int_eq(ps_test_psd_stop(&psd[i], 5000), 0);
    for (unsigned w = 0; w < 2; w++)
        ck_assert_msg(a[w].rc == PS_OK, "worker %u: %s (%s)", w, ps_strerror(a[w].rc), a[w].err);
    /* each worker's batch mean and biased variance, then their mean */
    double mean[C] = {0}, var[C] = {0};
    for (unsigned w = 0; w < 2; w++) {
        for (int c = 0; c < C; c++) {
            double mu = 0, v = 0;
            for (int r = 0; r < B; r++)
                mu += a[w].x[r * C + c] / (double)B;
            for (int r = 0; r < B; r++)
                v += (a[w].x[r * C + c] - mu) * (a[w].x[r * C + c] - mu) / (double)B;
            mean[c] += mu / 2;
            var[c] += v / 2;
        }
    }
    ps_model *m = NULL;
    char err[256];
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_OK);
    ps_model_init_params(m, 7);
    const ps_model_var *mm = ps_model_var_at(m, 2), *mv = ps_model_var_at(m, 3);
    ck_assert_str_eq(mm->name, "batch_normalization_0/moving_mean");
    ck_assert_str_eq(mv->name, "batch_normalization_0/moving_variance");
    const float *init = ps_model_params(m), *got = a[0].final;
    for (int c = 0; c < C; c++) {
        double wm = MOMENTUM * init[mm->offset + c] + (1 - MOMENTUM) * mean[c];
        double wv = MOMENTUM * init[mv->offset + c] + (1 - MOMENTUM) * var[c];
        ck_assert_msg(fabs(got[mm->offset + c] - wm) < 1e-5, "moving_mean[%d] %g, want %g", c,
                      got[mm->offset + c], wm);
        ck_assert_msg(fabs(got[mv->offset + c] - wv) < 1e-5, "moving_variance[%d] %g, want %g", c,
                      got[mv->offset + c], wv);
    }
    /* the trainable variables moved (gamma, the Dense kernel) */
    const ps_model_var *gamma = ps_model_var_at(m, 0), *k = ps_model_var_at(m, 4);
    double moved = 0;
    for (size_t i = 0; i < gamma->numel; i++)
        moved += fabs(got[gamma->offset + i] - init[gamma->offset + i]);
    for (size_t i = 0; i < k->numel; i++)
        moved += fabs(got[k->offset + i] - init[k->offset + i]);
    ck_assert_msg(moved > 1e-4, "trainable variables did not move (%g)", moved);
    ps_model_free(m);
    free(a[0].final);
}
END_TEST

int main(void) {
    Suite *s = suite_create("bn_sync");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, moving_stats_average_over_workers);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
