/* Sync equivalence: 2 workers with batch b each, in sync mode, reach the same
 * parameters as 1 worker with batch 2b on the same data order (within 1e-5
 * after 20 steps), through real psd processes on 127.0.0.1. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"
#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"
#include "train.h"

#define STEPS 20
#define B 16
#define SHARDS 2

static ps_dataset data;

typedef struct {
    const char *eps[SHARDS];
    unsigned index, workers;
    size_t batch;
    float *final; /* chief: parameters after the last step (malloc'd) */
    size_t nparams;
    int rc;
    char err[512];
} run_arg;

/* A client pulling until the chief has created the variables (ps_test_wait_until's
 * context): rc is the last pull's outcome. */
typedef struct {
    ps_client *c;
    int rc;
} created_wait;

static int variables_created(void *ctx) {
    created_wait *w = ctx;
    w->rc = ps_client_pull(w->c, 0, NULL);
    return w->rc != PS_ENOENT;
}

/* One worker: step t uses samples [t*2B + index*batch, ... + batch). */
static void *run_worker(void *p) {
    run_arg *a = p;
    ps_model *m = NULL;
    ps_client *c = NULL;
    a->rc = ps_model_from_json(ps_model_default_spec(), &m, a->err, sizeof a->err);
    if (a->rc == PS_OK) {
        ps_model_init_params(m, 7);
        a->rc = ps_client_open(&c, a->eps, SHARDS, a->index, a->workers, a->err, sizeof a->err);
    }
    if (a->rc == PS_OK) {
        ps_client_set_timeout(c, 20000);
        a->rc = ps_train_register_vars(m, c, SHARDS, a->err, sizeof a->err);
    }
    int async = 1;
    if (a->rc == PS_OK) a->rc = ps_client_hello(c, &async, NULL);
    if (a->rc == PS_OK && async) {
        a->rc = PS_EINVAL;
        snprintf(a->err, sizeof a->err, "psd is not in sync mode");
    }
    if (a->rc == PS_OK && a->index == 0) a->rc = ps_client_create_vars(c, NULL);
    if (a->rc == PS_OK && a->index != 0) { /* pulls until the chief has created them */
        created_wait w = {c, PS_ENOENT};
        ps_test_wait_until(variables_created, &w, 20000, 20);
        a->rc = w.rc;
    }
    for (uint64_t t = 0; a->rc == PS_OK && t < STEPS; t++) {
        size_t first = t * 2 * B + a->index * a->batch;
        float loss;
        size_t correct;
        a->rc = ps_client_pull(c, t, NULL);
        if (a->rc == PS_OK)
            a->rc = ps_model_train_step(m, data.x + first * data.dim, data.y + first, a->batch,
                                        &loss, &correct);
        if (a->rc == PS_OK) a->rc = ps_client_push(c, t, NULL);
    }
    if (a->rc == PS_OK && a->index == 0) a->rc = ps_client_pull(c, STEPS, NULL);
    if (a->rc == PS_OK && a->index == 0) {
        a->nparams = ps_model_num_params(m);
        a->final = malloc(a->nparams * sizeof(float));
        memcpy(a->final, ps_model_params(m), a->nparams * sizeof(float));
    }
    if (a->rc != PS_OK && c && !a->err[0])
        snprintf(a->err, sizeof a->err, "%s", ps_client_error(c));
    ps_client_close(c);
    ps_model_free(m);
    return NULL;
}

/* Runs a job with `workers` workers of batch 2B/workers on fresh shards. */
static float *run_job(unsigned workers, size_t *nparams) {
    ps_test_psd psd[SHARDS];
    char wbuf[16], nbuf[16], sbuf[SHARDS][16];
    snprintf(wbuf, sizeof wbuf, "%u", workers);
    snprintf(nbuf, sizeof nbuf, "%d", SHARDS);
    for (int i = 0; i < SHARDS; i++) {
        snprintf(sbuf[i], sizeof sbuf[i], "%d", i);
        const char *args[] = {"--shard", sbuf[i],  "--num-shards", nbuf, "--workers",
                              wbuf,      "--mode", "sync",         NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd[i], args, 10000), 0);
    }
    run_arg a[2];
    pthread_t th[2];
    for (unsigned w = 0; w < workers; w++) {
        memset(&a[w], 0, sizeof a[w]);
        for (int i = 0; i < SHARDS; i++)
            a[w].eps[i] = psd[i].endpoint;
        a[w].index = w;
        a[w].workers = workers;
        a[w].batch = 2 * B / workers;
        pthread_create(&th[w], NULL, run_worker, &a[w]);
    }
    for (unsigned w = 0; w < workers; w++)
        pthread_join(th[w], NULL);
    for (int i = 0; i < SHARDS; i++)
        ck_assert_int_eq(ps_test_psd_stop(&psd[i], 5000), 0);
    for (unsigned w = 0; w < workers; w++)
        ck_assert_msg(a[w].rc == PS_OK, "worker %u: %s (%s)", w, ps_strerror(a[w].rc), a[w].err);
    *nparams = a[0].nparams;
    return a[0].final;
}

START_TEST(two_workers_equal_one_double_batch) {
    size_t n1 = 0, n2 = 0;
    float *one = run_job(1, &n1);
    float *two = run_job(2, &n2);
    ck_assert_uint_eq(n1, 101770);
    ck_assert_uint_eq(n1, n2);
    double max_diff = 0, max_moved = 0;
    ps_model *m;
    char err[256];
    ck_assert_int_eq(ps_model_from_json(ps_model_default_spec(), &m, err, sizeof err), PS_OK);
    ps_model_init_params(m, 7);
    const float *init = ps_model_params(m);
    for (size_t i = 0; i < n1; i++) {
        double d = fabs((double)one[i] - (double)two[i]);
        if (d > max_diff) max_diff = d;
        double mv = fabs((double)one[i] - (double)init[i]);
        if (mv > max_moved) max_moved = mv;
    }
    ps_model_free(m);
    /* training really moved the parameters, and both jobs moved them the same way */
    ck_assert_msg(max_moved > 1e-3, "parameters barely moved (%g)", max_moved);
    ck_assert_msg(max_diff <= 1e-5, "max |1 worker - 2 workers| = %g > 1e-5", max_diff);
    free(one);
    free(two);
}
END_TEST

int main(void) {
    char err[256];
    if (ps_dataset_load_dir(ps_test_data_dir(), 1, STEPS * 2 * B, &data, err, sizeof err) !=
        PS_OK) {
        fprintf(stderr, "cannot load Fashion-MNIST (install dataset-fashion-mnist): %s\n", err);
        return 1;
    }
    Suite *s = suite_create("sync_equivalence");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, two_workers_equal_one_double_batch);
    suite_add_tcase(s, tc);
    int rc = ps_test_run_suite(s);
    ps_dataset_free(&data);
    return rc;
}
