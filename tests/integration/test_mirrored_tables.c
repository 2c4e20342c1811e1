/* Embedding tables under the all-reduce strategies (exchange_collective.c with
 * mirror_tables.c), workers as threads over a real ring on 127.0.0.1:
 * - 2 workers mirrored with batch B end with the dense variables and every
 *   table row of 1 worker (--no-ps's exchange) with batch 2B on the
 *   concatenated data, within 1e-6, for a model with tables and Dense layers
 *   (Adam: lazy Adam for the rows) and one of tables only (Adagrad);
 * - the replicas' tables (and variables) are bit-identical, though the
 *   non-chief workers were given another --seed (the chief's is taken);
 * - 6 steps, the chief's checkpoint (tables, their slots and update counts
 *   with it), then 6 more resumed from it end bit-identical to 12 in one go;
 * - a table over --max-mirrored-table-mb, and a dynamic table, are refused at
 *   open, naming the table, its size, the bound and --strategy
 *   parameter_server;
 * - the bytes a step puts on the ring grow with the rows it touches, not with
 *   the table (a table 100 times bigger costs the same);
 * - a worker killed (SIGKILL) or frozen (SIGSTOP) mid row-exchange (a model of
 *   tables only: the rows are the step's one ring operation) is named by the
 *   other within the --worker-timeout bound; nothing hangs.
 * The blocks alone (no ring): tests/unit/test_mirror_rows.c. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emb_feed.h"
#include "exchange.h"
#include "model.h"
#include "ps_error.h"
#include "testutil.h"
#include "train.h"

#define STEPS 12
#define B 16
#define MAXW 2
#define MAXT 4
#define SEED 5
enum { U = 40, I = 25, N_SAMPLES = STEPS * B * MAXW };

/* Tables and Dense layers, Adam (lazy Adam for the rows). */
static const char *const dense_spec =
    "{\"inputs\": [{\"name\": \"user\", \"ids\": true}, {\"name\": \"item\", \"ids\": true}],"
    " \"layers\": ["
    "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\", \"input_dim\": 40,"
    " \"output_dim\": 4},"
    "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\", \"input_dim\": 25,"
    " \"output_dim\": 4},"
    "{\"type\": \"Embedding\", \"name\": \"ub\", \"inputs\": \"user\", \"input_dim\": 40,"
    " \"output_dim\": 1},"
    "{\"type\": \"Concatenate\", \"inputs\": [\"u\", \"v\", \"ub\"]},"
    "{\"type\": \"Dense\", \"units\": 8, \"activation\": \"relu\"},"
    "{\"type\": \"Dense\", \"units\": 1}],"
    " \"loss\": \"mse\", \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.02}}";

/* Matrix factorisation: tables only (Dot, Add), Adagrad. */
static const char *const mf_spec =
    "{\"inputs\": [{\"name\": \"user\", \"ids\": true}, {\"name\": \"item\", \"ids\": true}],"
    " \"layers\": ["
    "{\"type\": \"Embedding\", \"name\": \"user_embedding\", \"inputs\": \"user\","
    " \"input_dim\": %zu, \"output_dim\": 4},"
    "{\"type\": \"Embedding\", \"name\": \"item_embedding\", \"inputs\": \"item\","
    " \"input_dim\": 25, \"output_dim\": 4},"
    "{\"type\": \"Embedding\", \"name\": \"user_bias\", \"inputs\": \"user\", \"input_dim\": 40,"
    " \"output_dim\": 1},"
    "{\"type\": \"Dot\", \"name\": \"dot\", \"inputs\": [\"user_embedding\","
    " \"item_embedding\"], \"axes\": 1},"
    "{\"type\": \"Add\", \"inputs\": [\"dot\", \"user_bias\"]}],"
    " \"loss\": \"mse\", \"optimizer\": {\"name\": \"adagrad\", \"learning_rate\": 0.1}}";

/* The samples: (user, item) ids and a rating, the same for every run. */
static uint64_t ids[N_SAMPLES * 2];
static float rating[N_SAMPLES];

static void make_data(void) {
    ps_test_rng g;
    ps_test_rng_seed(&g, 42);
    for (size_t i = 0; i < N_SAMPLES; i++) {
        uint64_t u = (uint64_t)ps_test_rng_uniform(&g, 0, U - 0.01f);
        uint64_t it = (uint64_t)ps_test_rng_uniform(&g, 0, I - 0.01f);
        ids[2 * i] = u;
        ids[2 * i + 1] = it;
        rating[i] = 1.0f + (float)((u * 7 + it * 3) % 5) + ps_test_rng_uniform(&g, -0.3f, 0.3f);
    }
}

typedef struct {
    unsigned index, workers;
    const char *const *peers;
    int local; /* 1: --no-ps's exchange, batch workers * B */
    const char *spec;
    size_t table_mb; /* --max-mirrored-table-mb (0: 1) */
    uint64_t die_at; /* forked rank: after this step's rows are kept, signal itself */
    int die_sig;
    unsigned timeout_ms;  /* --worker-timeout (0: 60000) */
    const char *ckpt_dir; /* --checkpoint-dir (NULL: none) */
    uint64_t steps;       /* the job's steps (0: STEPS) */
    /* out */
    float *params;
    size_t nparams;
    float *tables[MAXT]; /* every row of each table */
    size_t table_floats[MAXT], n_tables;
    uint64_t bytes; /* ring bytes sent while training */
    int rc, peer_failed;
    char err[1024];
} run_arg;

static void hook(void *ex, const float *b, const float *e) {
    ps_exchange_grads_ready(ex, b, e);
}

static ps_train_config config(const run_arg *a) {
    return (ps_train_config){
        .index = a->index,
        .workers = a->workers,
        .strategy = PS_STRATEGY_MIRRORED,
        .peers = a->peers,
        .n_peers = a->workers,
        .job_id = "mirrored-tables",
        .seed = SEED + 100 * a->index, /* the chief's counts: the others take its seed */
        .worker_timeout_ms = a->timeout_ms ? a->timeout_ms : 60000,
        .ring_connect_timeout_ms = 60000,
        .bucket_bytes = 64 * 1024,
        .check_every = 4,
        .max_mirrored_table_bytes = (a->table_mb ? a->table_mb : 1) << 20,
        .checkpoint_dir = a->ckpt_dir,
        .keep_checkpoints = 2,
    };
}

/* Every row of every table, through the exchange's rows_pull. */
static int read_tables(run_arg *a, ps_model *m, ps_exchange *ex) {
    a->n_tables = ps_model_num_embeddings(m);
    for (size_t e = 0; e < a->n_tables; e++) {
        const ps_model_embedding *me = ps_model_embedding_at(m, e);
        uint64_t *all = malloc(me->input_dim * sizeof *all);
        for (size_t i = 0; i < me->input_dim; i++)
            all[i] = i;
        a->table_floats[e] = me->input_dim * me->dim;
        a->tables[e] = malloc(a->table_floats[e] * sizeof(float));
        int rc =
            ps_exchange_rows_pull(ex, e, all, me->input_dim, a->tables[e], a->err, sizeof a->err);
        free(all);
        if (rc != PS_OK) return rc;
    }
    return PS_OK;
}

/* One worker's loop: step t trains on samples [t*W*B + index*batch, + batch). */
static void *run_worker(void *p) {
    run_arg *a = p;
    ps_model *m = NULL;
    ps_exchange ex = {0};
    ps_emb_feed *feed = NULL;
    ps_train_config cfg = config(a);
    size_t batch = a->local ? B * (size_t)MAXW : B;
    a->rc = ps_model_from_json(a->spec, &m, a->err, sizeof a->err);
    if (a->rc != PS_OK) return NULL;
    ps_model_init_params(m, a->index == 0 ? 7 : 1000 + a->index); /* the chief's count */
    a->rc = a->local ? ps_exchange_local_open(m, SEED, &ex, a->err, sizeof a->err)
                     : ps_exchange_collective_open(&cfg, m, &ex, a->err, sizeof a->err);
    uint64_t steps = a->steps ? a->steps : STEPS;
    ps_exchange_job job = {.total_steps = steps};
    if (a->rc == PS_OK) {
        ps_model_set_grad_hook(m, hook, &ex);
        a->rc = ps_exchange_join(&ex, &job, a->err, sizeof a->err);
    }
    if (a->rc == PS_OK) a->rc = ps_emb_feed_new(m, 2, &feed, a->err, sizeof a->err);
    uint64_t bytes0 = a->rc == PS_OK && ex.ops->bytes_sent ? ex.ops->bytes_sent(ex.self) : 0;
    for (uint64_t t = job.clock; a->rc == PS_OK && t < steps; t++) {
        size_t first = t * B * MAXW + a->index * batch;
        float loss;
        a->rc = ps_exchange_step_begin(&ex, t, a->err, sizeof a->err);
        if (a->rc == PS_OK)
            a->rc = ps_emb_feed_rows(feed, m, &ex, ids + 2 * first, batch, a->err, sizeof a->err);
        if (a->rc == PS_OK)
            a->rc = ps_model_train_step_targets(m, NULL, rating + first, batch, &loss);
        if (a->rc == PS_OK) a->rc = ps_emb_feed_push(feed, m, &ex, a->err, sizeof a->err);
        if (a->rc == PS_OK && a->die_at && t == a->die_at) raise(a->die_sig);
        if (a->rc == PS_OK) a->rc = ps_exchange_step_end(&ex, a->err, sizeof a->err);
    }
    if (a->rc == PS_OK) {
        a->bytes = ex.ops->bytes_sent ? ex.ops->bytes_sent(ex.self) - bytes0 : 0;
        ps_exchange_finish(&ex);
        a->nparams = ps_model_num_params(m);
        a->params = malloc((a->nparams ? a->nparams : 1) * sizeof(float));
        memcpy(a->params, ps_model_params(m), a->nparams * sizeof(float));
        a->rc = read_tables(a, m, &ex);
    }
    a->peer_failed = ps_exchange_peer_failed(&ex);
    ps_emb_feed_free(feed);
    ps_exchange_free(&ex);
    ps_model_free(m);
    return NULL;
}

static void free_run(run_arg *a) {
    free(a->params);
    for (size_t e = 0; e < a->n_tables; e++)
        free(a->tables[e]);
}

/* Runs `workers` workers over a ring on free ports (or one local worker, batch
 * 2B) into a[], for `steps` steps (0: STEPS) with checkpoints in dir (NULL: none). */
static void run_job_ckpt(unsigned workers, int local, const char *spec, const char *dir,
                         uint64_t steps, run_arg *a) {
    static char eps[MAXW][32];
    static const char *peers[MAXW];
    for (unsigned w = 0; w < workers; w++) {
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
        peers[w] = eps[w];
    }
    unsigned n = local ? 1 : workers;
    pthread_t th[MAXW];
    for (unsigned w = 0; w < n; w++) {
        a[w] = (run_arg){.index = w,
                         .workers = n,
                         .peers = peers,
                         .local = local,
                         .spec = spec,
                         .ckpt_dir = dir,
                         .steps = steps};
        pthread_create(&th[w], NULL, run_worker, &a[w]);
    }
    for (unsigned w = 0; w < n; w++)
        pthread_join(th[w], NULL);
    for (unsigned w = 0; w < n; w++)
        ck_assert_msg(a[w].rc == PS_OK, "worker %u of %u: %s (%s)", w, n, ps_strerror(a[w].rc),
                      a[w].err);
}

static void run_job(unsigned workers, int local, const char *spec, run_arg *a) {
    run_job_ckpt(workers, local, spec, NULL, 0, a);
}

static double max_abs_diff(const float *x, const float *y, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i] - (double)y[i]) > d) d = fabs((double)x[i] - (double)y[i]);
    return d;
}

/* Initial rows: what the tables held before training (seeded as psd's). */
static void check_equivalent(const char *spec) {
    run_arg alone[1], ring[MAXW];
    run_job(1, 1, spec, alone);
    run_job(MAXW, 0, spec, ring);
    ps_model *m;
    char err[256];
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_OK);
    ps_model_init_params(m, 7);
    ck_assert_uint_eq(ring[0].nparams, alone[0].nparams);
    if (alone[0].nparams) {
        double moved = max_abs_diff(alone[0].params, ps_model_params(m), alone[0].nparams);
        ck_assert_msg(moved > 1e-3, "the dense variables barely moved (%g)", moved);
    }
    ps_model_free(m);
    ck_assert_uint_eq(ring[0].n_tables, alone[0].n_tables);
    for (unsigned w = 0; w < MAXW; w++) {
        ck_assert_msg(memcmp(ring[w].params, ring[0].params, ring[0].nparams * sizeof(float)) == 0,
                      "worker %u's variables differ from the chief's", w);
        double d = max_abs_diff(ring[w].params, alone[0].params, ring[0].nparams);
        ck_assert_msg(d <= 1e-6, "worker %u: max |variables - 1 worker x 2B| = %g > 1e-6", w, d);
        for (size_t e = 0; e < ring[0].n_tables; e++) {
            size_t nf = ring[0].table_floats[e];
            ck_assert_uint_eq(ring[w].table_floats[e], alone[0].table_floats[e]);
            ck_assert_msg(memcmp(ring[w].tables[e], ring[0].tables[e], nf * sizeof(float)) == 0,
                          "worker %u's table %zu differs from the chief's", w, e);
            d = max_abs_diff(ring[w].tables[e], alone[0].tables[e], nf);
            ck_assert_msg(d <= 1e-6, "worker %u table %zu: max |rows - 1 worker x 2B| = %g > 1e-6",
                          w, e, d);
        }
    }
    /* the rows moved: compare with a table nobody trained */
    run_arg fresh = {.local = 1, .spec = spec};
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_OK);
    ps_exchange ex = {0};
    ck_assert_int_eq(ps_exchange_local_open(m, SEED, &ex, err, sizeof err), PS_OK);
    ck_assert_int_eq(read_tables(&fresh, m, &ex), PS_OK);
    double moved = max_abs_diff(fresh.tables[0], alone[0].tables[0], fresh.table_floats[0]);
    ck_assert_msg(moved > 1e-3, "table 0 barely moved (%g)", moved);
    free_run(&fresh);
    ps_exchange_free(&ex);
    ps_model_free(m);
    free_run(&alone[0]);
    for (unsigned w = 0; w < MAXW; w++)
        free_run(&ring[w]);
}

START_TEST(two_workers_equal_one_with_tables_and_dense) {
    check_equivalent(dense_spec);
}
END_TEST

static char *mf_with_users(size_t users) {
    static char buf[4096];
    snprintf(buf, sizeof buf, mf_spec, users);
    return buf;
}

START_TEST(two_workers_equal_one_tables_only) {
    check_equivalent(mf_with_users(U));
}
END_TEST

/* The step's ring bytes grow with the rows touched: a user table 100 times
 * bigger (the batches touch the same rows) costs the same bytes. */
START_TEST(bytes_grow_with_rows_not_tables) {
    run_arg small[MAXW], big[MAXW];
    run_job(MAXW, 0, mf_with_users(U), small);
    char spec[4096];
    snprintf(spec, sizeof spec, "%s", mf_with_users(100 * U));
    run_job(MAXW, 0, spec, big);
    ck_assert_msg(small[0].bytes > 0, "no bytes counted");
    ck_assert_msg(big[0].bytes == small[0].bytes,
                  "a table 100x bigger: %llu ring bytes, against %llu",
                  (unsigned long long)big[0].bytes, (unsigned long long)small[0].bytes);
    /* and far below a dense exchange of the user table's gradients each step */
    uint64_t dense = (uint64_t)STEPS * 100 * U * 4 * sizeof(float);
    ck_assert_msg(big[0].bytes < dense / 10, "%llu ring bytes against %llu for dense tables",
                  (unsigned long long)big[0].bytes, (unsigned long long)dense);
    for (unsigned w = 0; w < MAXW; w++)
        free_run(&small[w]), free_run(&big[w]);
}
END_TEST

/* Half the steps, the chief's checkpoint, the rest resumed from it: the
 * same bits as all the steps in one go (Adam: the rows' lazy Adam moments
 * and step counts must come back too). */
START_TEST(resumed_from_checkpoint_equals_uninterrupted) {
    char *dir = ps_test_mkdtemp();
    run_arg whole[MAXW], first[MAXW], rest[MAXW];
    run_job(MAXW, 0, dense_spec, whole);
    run_job_ckpt(MAXW, 0, dense_spec, dir, STEPS / 2, first);
    run_job_ckpt(MAXW, 0, dense_spec, dir, STEPS, rest);
    for (unsigned w = 0; w < MAXW; w++) {
        ck_assert_msg(memcmp(rest[w].params, whole[w].params, whole[0].nparams * sizeof(float)) ==
                          0,
                      "worker %u: resumed variables differ", w);
        for (size_t e = 0; e < whole[0].n_tables; e++)
            ck_assert_msg(memcmp(rest[w].tables[e], whole[w].tables[e],
                                 whole[0].table_floats[e] * sizeof(float)) == 0,
                          "worker %u: resumed table %zu differs", w, e);
        /* and the first half did not already end there */
        ck_assert_msg(memcmp(first[w].tables[0], whole[w].tables[0],
                             whole[0].table_floats[0] * sizeof(float)) != 0,
                      "half the steps gave the whole job's table");
    }
    for (unsigned w = 0; w < MAXW; w++)
        free_run(&whole[w]), free_run(&first[w]), free_run(&rest[w]);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Opening the exchange refuses, with err holding every piece of want. */
static void refused(const char *spec, size_t table_mb, const char *const *want) {
    const char *peers[2] = {"127.0.0.1:1", "127.0.0.1:2"};
    run_arg a = {.index = 0, .workers = 2, .peers = peers, .table_mb = table_mb};
    ps_train_config cfg = config(&a);
    ps_model *m;
    char err[1024];
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_OK);
    ps_exchange ex = {0};
    int rc = ps_exchange_collective_open(&cfg, m, &ex, err, sizeof err);
    ck_assert_msg(rc == PS_EINVAL, "rc %d (%s)", rc, err);
    ck_assert(ex.ops == NULL);
    for (size_t i = 0; want[i]; i++)
        ck_assert_msg(strstr(err, want[i]) != NULL, "no \"%s\" in: %s", want[i], err);
    ps_model_free(m);
}

START_TEST(table_too_big_refused) {
    /* 200000 x 4 with Adagrad (one accumulator a value): 6.1 MiB */
    const char *want[] = {"embedding 'user_embedding' [200000, 4] takes 6.1 MiB",
                          "more than --max-mirrored-table-mb 2 MiB", "--strategy parameter_server",
                          NULL};
    refused(mf_with_users(200000), 2, want);
}
END_TEST

START_TEST(dynamic_table_refused) {
    const char *spec =
        "{\"inputs\": [{\"name\": \"user\", \"ids\": true}, {\"name\": \"item\", \"ids\": true}],"
        " \"layers\": [{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
        " \"input_dim\": 0, \"output_dim\": 2, \"table\": {\"max_rows\": 1000}},"
        "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\", \"input_dim\": 5,"
        " \"output_dim\": 2},"
        "{\"type\": \"Dot\", \"inputs\": [\"u\", \"v\"], \"axes\": 1}], \"loss\": \"mse\","
        " \"optimizer\": {\"name\": \"sgd\", \"learning_rate\": 0.1}}";
    const char *want[] = {"embedding 'u' is a dynamic table", "max_rows per psd shard",
                          "--strategy parameter_server", NULL};
    refused(spec, 1, want);
}
END_TEST

/* Rank 1 (a forked process) kept its rows for step 3 and gets sig before
 * the exchange; rank 0 (here) must fail naming it within the bound. */
static void lose_worker_mid_rows(int sig, unsigned timeout_ms, const char *want) {
    static char eps[MAXW][32];
    static const char *peers[MAXW];
    for (unsigned w = 0; w < MAXW; w++) {
        snprintf(eps[w], sizeof eps[w], "127.0.0.1:%d", ps_test_free_port());
        peers[w] = eps[w];
    }
    const char *spec = mf_with_users(U); /* tables only: the rows are the step's ring operation */
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        run_arg a = {.index = 1,
                     .workers = 2,
                     .peers = peers,
                     .spec = spec,
                     .die_at = 3,
                     .die_sig = sig,
                     .timeout_ms = timeout_ms};
        run_worker(&a);
        _exit(0);
    }
    run_arg a = {.index = 0, .workers = 2, .peers = peers, .spec = spec, .timeout_ms = timeout_ms};
    long long t0 = ps_test_now_ms();
    run_worker(&a);
    long long took = ps_test_now_ms() - t0;
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    ck_assert_msg(a.rc != PS_OK, "rank 0 trained on without its peer");
    char culprit[80];
    snprintf(culprit, sizeof culprit, "rank 1 (%s)", eps[1]);
    ck_assert_msg(strstr(a.err, "exchanging the embedding rows") != NULL, "not in the rows: %s",
                  a.err);
    ck_assert_msg(strstr(a.err, culprit) != NULL, "no \"%s\" in: %s", culprit, a.err);
    ck_assert_msg(strstr(a.err, want) != NULL, "no \"%s\" in: %s", want, a.err);
    ck_assert_msg(a.peer_failed, "not reported as another worker's failure");
    ck_assert_msg(took < (long long)timeout_ms + 15000, "took %lld ms", took);
}

START_TEST(worker_killed_mid_row_exchange) {
    lose_worker_mid_rows(SIGKILL, 5000, "closed the connection");
}
END_TEST

START_TEST(worker_frozen_mid_row_exchange) {
    lose_worker_mid_rows(SIGSTOP, 1500, "sent nothing for 1500 ms");
}
END_TEST

static Suite *mirrored_tables_suite(void) {
    Suite *s = suite_create("mirrored_tables");
    TCase *tc = tcase_create("mirrored_tables");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, table_too_big_refused);
    tcase_add_test(tc, dynamic_table_refused);
    tcase_add_test(tc, two_workers_equal_one_with_tables_and_dense);
    tcase_add_test(tc, two_workers_equal_one_tables_only);
    tcase_add_test(tc, bytes_grow_with_rows_not_tables);
    tcase_add_test(tc, resumed_from_checkpoint_equals_uninterrupted);
    tcase_add_test(tc, worker_killed_mid_row_exchange);
    tcase_add_test(tc, worker_frozen_mid_row_exchange);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    make_data();
    return ps_test_run_suite(mirrored_tables_suite());
}
