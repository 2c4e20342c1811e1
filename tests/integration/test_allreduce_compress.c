/* The all-reduce with --compression (exchange_collective.c over collective/ring.c):
 * 2 and 3 workers (threads, each its own ring rank) train 20 SGD steps with
 * none, fp16, bf16 and topk:0.05. Every encoding keeps the replicas
 * bit-identical (the --check-every comparison runs inside, and the final
 * parameters are compared here); fp16 / bf16 stay close to the float32 run's
 * parameters; top-k moves them the same way (positive correlation of the
 * updates); and the ring's byte counters show fp16 / bf16 at about half of
 * float32 and top-k far below. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "exchange.h"
#include "half.h"
#include "model.h"
#include "ps_error.h"
#include "testutil.h"
#include "train.h"

#define STEPS 20
#define B 16
#define MAXW 3

static ps_dataset data;

static const char *const sgd_spec =
    "{\"input_shape\": [784], \"layers\": [{\"type\": \"Dense\", \"units\": 64, "
    "\"activation\": \"relu\"}, {\"type\": \"Dense\", \"units\": 10}], \"loss\": "
    "\"sparse_categorical_crossentropy\", \"from_logits\": true, \"optimizer\": {\"name\": "
    "\"sgd\", \"learning_rate\": 0.1}}";

typedef struct {
    unsigned index, workers;
    const char *const *peers;
    int compression;
    float ratio;
    float *final;
    size_t nparams;
    uint64_t bytes; /* gradient bytes this rank sent over the steps */
    int rc;
    char err[512];
} run_arg;

static void hook(void *ex, const float *b, const float *e) {
    ps_exchange_grads_ready(ex, b, e);
}

static void *run_worker(void *p) {
    run_arg *a = p;
    ps_model *m = NULL;
    ps_exchange ex = {0};
    ps_train_config cfg = {
        .index = a->index,
        .workers = a->workers,
        .strategy = PS_STRATEGY_MIRRORED,
        .peers = a->peers,
        .n_peers = a->workers,
        .job_id = "compress",
        .worker_timeout_ms = 60000,
        .ring_connect_timeout_ms = 60000,
        .bucket_bytes = 32 * 1024, /* several buckets */
        .check_every = 5,
        .compression = a->compression,
        .topk_ratio = a->ratio,
    };
    a->rc = ps_model_from_json(sgd_spec, &m, a->err, sizeof a->err);
    if (a->rc != PS_OK) return NULL;
    ps_model_init_params(m, 7);
    a->rc = ps_exchange_collective_open(&cfg, m, &ex, a->err, sizeof a->err);
    ps_exchange_job job = {.total_steps = STEPS};
    if (a->rc == PS_OK) {
        ps_model_set_grad_hook(m, hook, &ex);
        a->rc = ps_exchange_join(&ex, &job, a->err, sizeof a->err);
    }
    for (uint64_t t = 0; a->rc == PS_OK && t < STEPS; t++) {
        size_t first = (t * a->workers + a->index) * B;
        float loss;
        size_t correct;
        a->rc = ps_exchange_step_begin(&ex, t, a->err, sizeof a->err);
        if (a->rc == PS_OK)
            a->rc = ps_model_train_step(m, data.x + first * data.dim, data.y + first, B, &loss,
                                        &correct);
        if (a->rc == PS_OK) a->rc = ps_exchange_step_end(&ex, a->err, sizeof a->err);
    }
    if (a->rc == PS_OK) {
        a->bytes = ex.ops->bytes_sent(ex.self);
        ps_exchange_finish(&ex);
        a->nparams = ps_model_num_params(m);
        a->final = malloc(a->nparams * sizeof(float));
        memcpy(a->final, ps_model_params(m), a->nparams * sizeof(float));
    }
    ps_exchange_free(&ex);
    ps_model_free(m);
    return NULL;
}

/* One job; returns the chief's parameters (every replica checked equal to them). */
static float *run_job(unsigned workers, int compression, float ratio, size_t *n, uint64_t *bytes) {
    char eps[MAXW][32];
    const char *peers[MAXW];
    for (unsigned w = 0; w < workers; w++) {
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
        peers[w] = eps[w];
    }
    run_arg a[MAXW];
    pthread_t th[MAXW];
    for (unsigned w = 0; w < workers; w++) {
        a[w] = (run_arg){.index = w, .workers = workers, .peers = peers,
                         .compression = compression, .ratio = ratio};
        pthread_create(&th[w], NULL, run_worker, &a[w]);
    }
    for (unsigned w = 0; w < workers; w++)
        pthread_join(th[w], NULL);
    for (unsigned w = 0; w < workers; w++)
        ck_assert_msg(a[w].rc == PS_OK, "%s, worker %u of %u: %s (%s)",
                      ps_compression_name(compression), w, workers, ps_strerror(a[w].rc),
                      a[w].err);
    for (unsigned w = 1; w < workers; w++) {
        ck_assert_msg(memcmp(a[w].final, a[0].final, a[0].nparams * sizeof(float)) == 0,
                      "%s: worker %u's parameters differ from the chief's",
                      ps_compression_name(compression), w);
        free(a[w].final);
    }
    *n = a[0].nparams;
    *bytes = a[0].bytes;
    return a[0].final;
}

static void check_encodings(unsigned workers) {
    ps_model *m;
    char err[256];
    ck_assert_int_eq(ps_model_from_json(sgd_spec, &m, err, sizeof err), PS_OK);
    ps_model_init_params(m, 7);
    const float *init = ps_model_params(m);
    size_t n = 0, n2 = 0;
    uint64_t b32 = 0, b16 = 0, bb16 = 0, btk = 0;
    float *f32 = run_job(workers, PS_COMPRESSION_NONE, 0, &n, &b32);
    float *h = run_job(workers, PS_COMPRESSION_F16, 0, &n2, &b16);
    float *bf = run_job(workers, PS_COMPRESSION_BF16, 0, &n2, &bb16);
    float *tk = run_job(workers, PS_COMPRESSION_TOPK, 0.05f, &n2, &btk);
    ck_assert_uint_eq(n, n2);
    double moved = 0, d16 = 0, dbf = 0, dot = 0, nf = 0, nt = 0;
    for (size_t i = 0; i < n; i++) {
        double u = (double)f32[i] - init[i], v = (double)tk[i] - init[i];
        moved = fmax(moved, fabs(u));
        d16 = fmax(d16, fabs((double)h[i] - f32[i]));
        dbf = fmax(dbf, fabs((double)bf[i] - f32[i]));
        dot += u * v;
        nf += u * u;
        nt += v * v;
        ck_assert(isfinite(tk[i]));
    }
    double cosine = dot / sqrt(nf * nt);
    fprintf(stderr,
            "%u workers: moved %.4g; max |fp16 - f32| %.3g, |bf16 - f32| %.3g; top-k update "
            "cosine %.3f; bytes sent per step: f32 %llu, fp16 %llu, bf16 %llu, topk %llu\n",
            workers, moved, d16, dbf, cosine, (unsigned long long)b32 / STEPS,
            (unsigned long long)b16 / STEPS, (unsigned long long)bb16 / STEPS,
            (unsigned long long)btk / STEPS);
    ck_assert_msg(moved > 1e-2, "parameters barely moved (%g)", moved);
    ck_assert_msg(d16 > 0 && d16 < 0.02 * moved, "fp16 off by %g (moved %g)", d16, moved);
    ck_assert_msg(dbf > 0 && dbf < 0.1 * moved, "bf16 off by %g (moved %g)", dbf, moved);
    ck_assert_msg(cosine > 0.5, "top-k updates point elsewhere (cosine %g)", cosine);
    /* 2 bytes a value instead of 4, plus the same frame headers */
    ck_assert_msg(b16 * 100 >= b32 * 49 && b16 * 100 <= b32 * 52, "fp16 %llu bytes, f32 %llu",
                  (unsigned long long)b16, (unsigned long long)b32);
    ck_assert_uint_eq(bb16, b16);
    ck_assert_msg(btk * 4 < b32, "top-k 5%% sent %llu bytes, f32 %llu", (unsigned long long)btk,
                  (unsigned long long)b32);
    free(f32);
    free(h);
    free(bf);
    free(tk);
    ps_model_free(m);
}

START_TEST(two_workers) {
    check_encodings(2);
}
END_TEST

START_TEST(three_workers) {
    check_encodings(3);
}
END_TEST

int main(void) {
    char err[256];
    if (ps_dataset_load_dir(ps_test_data_dir(), 1, STEPS * MAXW * B, &data, err, sizeof err) !=
        PS_OK) {
        fprintf(stderr, "cannot load Fashion-MNIST (install dataset-fashion-mnist): %s\n", err);
        return 1;
    }
    Suite *s = suite_create("allreduce_compress");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, two_workers);
    tcase_add_test(tc, three_workers);
    suite_add_tcase(s, tc);
    int rc = ps_test_run_suite(s);
    ps_dataset_free(&data);
    return rc;
}
