/* All-reduce equivalence: W workers combining gradients over the ring
 * (exchange_collective.c) with batch b reach the parameters of 1 worker with
 * the same optimizer in-process (--no-ps's exchange) and batch W*b, on the same
 * data (within 1e-5 after 20 steps), for W = 2 and 3 (a ring of odd size); the
 * non-chief workers start from other seeds, so the chief's broadcast is proved
 * too. And, through real psworker processes on the same data shards: 2 and 3
 * workers mirrored end with the parameters (--save) of as many workers
 * through psd in sync mode (SGD with momentum: a wrong mean would show). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "saved.h"
#include "data.h"
#include "exchange.h"
#include "model.h"
#include "proc.h"
#include "ps_error.h"
#include "testutil.h"
#include "train.h"

#define STEPS 20
#define B 16
#define MAXW 3

static ps_dataset data;

/* Plain SGD: the update is proportional to the gradient, so a wrong mean (a
 * sum, a wrong divisor) shows; Adam would hide most of it (m / sqrt(v)). */
static const char *const sgd_spec =
    "{\"input_shape\": [784], \"layers\": [{\"type\": \"Dense\", \"units\": 128, "
    "\"activation\": \"relu\"}, {\"type\": \"Dense\", \"units\": 10}], \"loss\": "
    "\"sparse_categorical_crossentropy\", \"from_logits\": true, \"optimizer\": {\"name\": "
    "\"sgd\", \"learning_rate\": 0.1}}";

typedef struct {
    unsigned index, workers;
    size_t batch, stride; /* samples per worker and per step (all workers) */
    const char *const *peers;
    int local; /* 1: the in-process optimizer alone (no ring) */
    const char *spec; /* the model */
    float *final;
    size_t nparams;
    int rc;
    char err[512];
} run_arg;

static void hook(void *ex, const float *b, const float *e) {
    ps_exchange_grads_ready(ex, b, e);
}

/* One worker's loop over the exchange: step t uses samples
 * [t*W*B + index*batch, + batch). */
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
        .job_id = "equiv",
        .worker_timeout_ms = 60000,
        .ring_connect_timeout_ms = 60000,
        .bucket_bytes = 64 * 1024, /* several buckets for the MLP */
        .check_every = 5,
    };
    a->rc = ps_model_from_json(a->spec, &m, a->err, sizeof a->err);
    if (a->rc != PS_OK) return NULL;
    /* only the chief's initial values count: the broadcast replaces the others' */
    ps_model_init_params(m, a->index == 0 ? 7 : 1000 + a->index);
    a->rc = a->local ? ps_exchange_local_open(m, 0, &ex, a->err, sizeof a->err)
                     : ps_exchange_collective_open(&cfg, m, &ex, a->err, sizeof a->err);
    ps_exchange_job job = {.total_steps = STEPS};
    if (a->rc == PS_OK) {
        ps_model_set_grad_hook(m, hook, &ex);
        a->rc = ps_exchange_join(&ex, &job, a->err, sizeof a->err);
    }
    size_t total_batch = a->stride;
    for (uint64_t t = 0; a->rc == PS_OK && t < STEPS; t++) {
        size_t first = t * total_batch + a->index * a->batch;
        float loss;
        size_t correct;
        a->rc = ps_exchange_step_begin(&ex, t, a->err, sizeof a->err);
        if (a->rc == PS_OK)
            a->rc = ps_model_train_step(m, data.x + first * data.dim, data.y + first, a->batch,
                                        &loss, &correct);
        if (a->rc == PS_OK) a->rc = ps_exchange_step_end(&ex, a->err, sizeof a->err);
    }
    if (a->rc == PS_OK) {
        ps_exchange_finish(&ex);
        a->nparams = ps_model_num_params(m);
        a->final = malloc(a->nparams * sizeof(float));
        memcpy(a->final, ps_model_params(m), a->nparams * sizeof(float));
    }
    ps_exchange_free(&ex);
    ps_model_free(m);
    return NULL;
}

/* Runs W workers over a ring on free ports, or one local worker with batch W*B;
 * returns every worker's final parameters (out[w], malloc'd). */
static void run_job(unsigned workers, int local, const char *spec, float **out, size_t *nparams) {
    char eps[MAXW][32];
    const char *peers[MAXW];
    for (unsigned w = 0; w < workers; w++) {
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
        peers[w] = eps[w];
    }
    unsigned n = local ? 1 : workers;
    run_arg a[MAXW];
    pthread_t th[MAXW];
    for (unsigned w = 0; w < n; w++) {
        a[w] = (run_arg){.index = w,
                         .workers = local ? 1 : workers,
                         .batch = local ? B * (size_t)workers : B,
                         .stride = B * (size_t)workers,
                         .peers = peers,
                         .local = local,
                         .spec = spec};
        pthread_create(&th[w], NULL, run_worker, &a[w]);
    }
    for (unsigned w = 0; w < n; w++)
        pthread_join(th[w], NULL);
    for (unsigned w = 0; w < n; w++) {
        ck_assert_msg(a[w].rc == PS_OK, "worker %u of %u: %s (%s)", w, n, ps_strerror(a[w].rc),
                      a[w].err);
        out[w] = a[w].final;
        *nparams = a[w].nparams;
    }
}

static double max_abs_diff(const float *x, const float *y, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i] - (double)y[i]) > d) d = fabs((double)x[i] - (double)y[i]);
    return d;
}

static void check_equivalent(unsigned workers, const char *spec) {
    float *ring[MAXW] = {0}, *alone[1] = {0};
    size_t n_ring = 0, n_alone = 0;
    run_job(workers, 1, spec, alone, &n_alone);
    run_job(workers, 0, spec, ring, &n_ring);
    ck_assert_uint_eq(n_ring, n_alone);
    ps_model *m;
    char err[256];
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_OK);
    ps_model_init_params(m, 7);
    double moved = max_abs_diff(alone[0], ps_model_params(m), n_alone);
    ps_model_free(m);
    ck_assert_msg(moved > 1e-3, "parameters barely moved (%g)", moved);
    for (unsigned w = 0; w < workers; w++) {
        /* the replicas are bit-identical; the sum order differs from one big batch */
        ck_assert_msg(memcmp(ring[w], ring[0], n_ring * sizeof(float)) == 0,
                      "worker %u's parameters differ from the chief's", w);
        double d = max_abs_diff(ring[w], alone[0], n_ring);
        ck_assert_msg(d <= 1e-5, "%u workers: max |ring - 1 worker x %u| = %g > 1e-5", workers,
                      workers * B, d);
    }
    for (unsigned w = 0; w < workers; w++)
        free(ring[w]);
    free(alone[0]);
}

/* BatchNormalization over the ring: every replica applies the averaged
 * moving-statistic updates with SGD rate 1, so they stay bit-identical (and
 * the --check-every comparison inside holds); the statistics did move. */
START_TEST(batchnorm_replicas_identical) {
    static const char *const bn_spec =
        "{\"input_shape\": [784], \"layers\": [{\"type\": \"Dense\", \"units\": 16}, "
        "{\"type\": \"BatchNormalization\", \"momentum\": 0.9}, {\"type\": \"ReLU\"}, "
        "{\"type\": \"Dense\", \"units\": 10}], \"optimizer\": {\"name\": \"sgd\", "
        "\"learning_rate\": 0.1}}";
    float *ring[MAXW] = {0};
    size_t n = 0;
    run_job(2, 0, bn_spec, ring, &n);
    ck_assert_msg(memcmp(ring[1], ring[0], n * sizeof(float)) == 0,
                  "worker 1's variables differ from the chief's");
    ps_model *m;
    char err[256];
    ck_assert_int_eq(ps_model_from_json(bn_spec, &m, err, sizeof err), PS_OK);
    ps_model_init_params(m, 7);
    const ps_model_var *mm = ps_model_var_at(m, 4);
    ck_assert_str_eq(mm->name, "batch_normalization_0/moving_mean");
    ck_assert(!mm->trainable);
    double moved = max_abs_diff(ring[0] + mm->offset, ps_model_params(m) + mm->offset, mm->numel);
    ck_assert_msg(moved > 1e-3, "the moving mean barely moved (%g)", moved);
    ps_model_free(m);
    free(ring[0]);
    free(ring[1]);
}
END_TEST

START_TEST(two_workers_equal_one_double_batch) {
    check_equivalent(2, sgd_spec);
    check_equivalent(2, ps_model_default_spec()); /* adam: its slots broadcast and kept equal */
}
END_TEST

START_TEST(three_workers_equal_one_triple_batch) {
    check_equivalent(3, sgd_spec);
}
END_TEST

/* ---- psworker processes: mirrored against psd sync ---- */

/* Runs `workers` psworker processes (extra args per job) for STEPS steps of
 * one epoch on 3000 samples; returns the chief's saved parameters. */
static float *run_processes(unsigned workers, int mirrored, const char *dir, size_t *n) {
    ps_test_psd psd;
    char wn[16], save[700], logs[MAXW][700], eps[MAXW][32], tf[MAXW][512], idx[MAXW][16];
    snprintf(wn, sizeof wn, "%u", workers);
    snprintf(save, sizeof save, "%s/%s-%u.pstf", dir, mirrored ? "mirrored" : "psd", workers);
    if (!mirrored) {
        const char *pa[] = {"--workers", wn, "--mode", "sync", NULL};
        ck_assert_int_eq(ps_test_psd_start(&psd, pa, 10000), 0);
    }
    for (unsigned w = 0; w < workers; w++)
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
    pid_t pid[MAXW];
    for (unsigned w = 0; w < workers; w++) {
        snprintf(logs[w], sizeof logs[w], "%s/%s-%u-%u.log", dir, mirrored ? "m" : "p", workers,
                 w);
        snprintf(idx[w], sizeof idx[w], "%u", w);
        char model[600];
        snprintf(model, sizeof model, "%s/examples/mlp_momentum.json", ps_test_source_root());
        const char *argv[40] = {getenv("PSWORKER"), "--model", model, "--epochs", "1", "--max-train", "3000",
                                "--max-test", "500", "--max-steps", "20", "--batch", "16",
                                "--progress", "none", "--timeout", "60", NULL};
        int k = 17;
        if (w == 0) argv[k++] = "--save", argv[k++] = save;
        if (mirrored) {
            int len = snprintf(tf[w], sizeof tf[w], "{\"cluster\": {\"worker\": [");
            for (unsigned j = 0; j < workers; j++)
                len += snprintf(tf[w] + len, sizeof tf[w] - (size_t)len, "%s\"%s\"", j ? ", " : "",
                                eps[j]);
            snprintf(tf[w] + len, sizeof tf[w] - (size_t)len,
                     "]}, \"task\": {\"type\": \"worker\", \"index\": %u}}", w);
            argv[k++] = "--strategy", argv[k++] = "mirrored";
            argv[k++] = "--bucket-kb", argv[k++] = "64";
            setenv("TF_CONFIG", tf[w], 1);
        } else {
            argv[k++] = "--ps", argv[k++] = psd.endpoint;
            argv[k++] = "--index", argv[k++] = idx[w];
            argv[k++] = "--workers", argv[k++] = wn;
        }
        argv[k] = NULL;
        pid[w] = ps_test_spawn(argv, logs[w]);
        unsetenv("TF_CONFIG");
    }
    int bad = 0;
    for (unsigned w = 0; w < workers; w++) {
        int st = ps_test_wait(pid[w], 240000);
        if (st != 0) ps_test_dump(logs[w]), bad = 1;
    }
    if (!mirrored) ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);
    ck_assert_msg(!bad, "a worker failed");
    return ps_test_read_saved(save, n);
}

static void check_processes(unsigned workers) {
    char *dir = ps_test_mkdtemp();
    size_t n1 = 0, n2 = 0;
    float *ps = run_processes(workers, 0, dir, &n1);
    float *ring = run_processes(workers, 1, dir, &n2);
    ck_assert_uint_eq(n1, n2);
    double d = max_abs_diff(ps, ring, n1);
    ck_assert_msg(d <= 1e-5, "%u workers: max |psd sync - mirrored| = %g > 1e-5", workers, d);
    free(ps);
    free(ring);
    ps_test_rmdir(dir);
    free(dir);
}

START_TEST(mirrored_processes_equal_psd_sync) {
    check_processes(2);
    check_processes(3);
}
END_TEST

static void setup(void) {
    ps_test_children_die_with_me(); /* in the test's own process (Check forks) */
}

int main(void) {
    char err[256];
    if (ps_dataset_load_dir(ps_test_data_dir(), 1, STEPS * MAXW * B, &data, err, sizeof err) !=
        PS_OK) {
        fprintf(stderr, "cannot load Fashion-MNIST (install dataset-fashion-mnist): %s\n", err);
        return 1;
    }
    Suite *s = suite_create("allreduce_equiv");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, two_workers_equal_one_double_batch);
    tcase_add_test(tc, batchnorm_replicas_identical);
    tcase_add_test(tc, three_workers_equal_one_triple_batch);
    if (getenv("PSWORKER") && getenv("PSD")) tcase_add_test(tc, mirrored_processes_equal_psd_sync);
    suite_add_tcase(s, tc);
    int rc = ps_test_run_suite(s);
    ps_dataset_free(&data);
    return rc;
}
