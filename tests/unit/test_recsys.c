/* Recommendation models trained end to end on the model side, with their
 * tables in this process (emb_local.h) as a job without psd would hold them:
 * a matrix factorisation (user and item embeddings, Dot, user and item biases
 * of dim 1 added) from the project's spec (tests/fixtures/recsys/mf.json) and
 * from Keras' to_json() form (mf_k3.json: Keras 3's layout), fitted to a
 * synthetic rating matrix of rank 2, reaches a low training RMSE, the two
 * identically; a neural recommender (concatenated embeddings, Dense, Dense(1);
 * ncf_k2.json: tf.keras 2's layout) builds and trains. The two to_json() files
 * were written by hand in the form Keras writes (no TensorFlow on the build
 * hosts). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emb_local.h"
#include "model.h"
#include "ps_error.h"
#include "testutil.h"

enum { U = 30, I = 20, RANK = 2, BATCH = 32, MAXE = 8 };

/* The observed (user, item, rating) triples of a rank-2 matrix plus biases. */
typedef struct {
    size_t n;
    uint64_t user[U * I], item[U * I];
    float rating[U * I];
} ratings;

static void make_ratings(ratings *r) {
    ps_test_rng g;
    ps_test_rng_seed(&g, 42);
    float p[U][RANK], q[I][RANK], bu[U], bi[I];
    for (size_t u = 0; u < U; u++) {
        for (size_t k = 0; k < RANK; k++)
            p[u][k] = ps_test_rng_uniform(&g, -1.2f, 1.2f);
        bu[u] = ps_test_rng_uniform(&g, -0.5f, 0.5f);
    }
    for (size_t i = 0; i < I; i++) {
        for (size_t k = 0; k < RANK; k++)
            q[i][k] = ps_test_rng_uniform(&g, -1.2f, 1.2f);
        bi[i] = ps_test_rng_uniform(&g, -0.5f, 0.5f);
    }
    r->n = 0;
    for (size_t u = 0; u < U; u++) {
        for (size_t i = 0; i < I; i++) {
            if (ps_test_rng_uniform(&g, 0, 1) > 0.7f) continue; /* 70% observed */
            float v = bu[u] + bi[i];
            for (size_t k = 0; k < RANK; k++)
                v += p[u][k] * q[i][k];
            r->user[r->n] = u;
            r->item[r->n] = i;
            r->rating[r->n++] = v;
        }
    }
}

static ps_model *load(const char *file, const char *loss) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/recsys/%s", ps_test_source_root(), file);
    ps_model_overrides ov = {.loss = loss, .from_logits = -1};
    ps_model *m = NULL;
    int rc = ps_model_load_with(path, loss ? &ov : NULL, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    ps_model_init_params(m, 11);
    return m;
}

/* A model and one local table per embedding layer. */
typedef struct {
    ps_model *m;
    ps_emb_local *t[MAXE];
    size_t ne;
    bool is_user[MAXE]; /* read by the "user" id input, else by "item" */
} rec;

static void rec_open(rec *r, ps_model *m, const ps_row_opt *opt) {
    r->m = m;
    r->ne = ps_model_num_embeddings(m);
    ck_assert_uint_le(r->ne, MAXE);
    ck_assert_uint_eq(ps_model_num_id_inputs(m), 2);
    for (size_t e = 0; e < r->ne; e++) {
        ck_assert_int_eq(ps_emb_local_for(m, e, 5, opt, &r->t[e]), PS_OK);
        const char *in = ps_model_id_input_name(m, ps_model_embedding_at(m, e)->ids_input);
        r->is_user[e] = !strcmp(in, "user");
    }
}

static void rec_close(rec *r) {
    for (size_t e = 0; e < r->ne; e++)
        ps_emb_local_free(r->t[e]);
    ps_model_free(r->m);
}

static void rec_feed(rec *r, const uint64_t *users, const uint64_t *items, size_t n) {
    for (size_t e = 0; e < r->ne; e++)
        ck_assert_int_eq(ps_emb_local_feed(r->t[e], r->m, e, r->is_user[e] ? users : items, n),
                         PS_OK);
}

static double rmse(rec *r, const ratings *d) {
    float loss;
    double sq;
    rec_feed(r, d->user, d->item, d->n);
    ck_assert_int_eq(ps_model_evaluate_targets(r->m, NULL, d->rating, d->n, &loss, &sq, NULL),
                     PS_OK);
    ck_assert_msg(fabs(sq / (double)d->n - loss) < 1e-4 * (1 + loss), "mse %g vs %g",
                  sq / (double)d->n, loss);
    return sqrt(sq / (double)d->n);
}

/* Epochs of shuffled batches: the rows by their tables' optimizer, the dense
 * variables by SGD with rate lr. Returns the last epoch's mean loss. */
static double train(rec *r, const ratings *d, int epochs, float lr) {
    uint64_t us[BATCH], is[BATCH];
    float t[BATCH];
    size_t *order = malloc(d->n * sizeof *order);
    ps_test_rng g;
    ps_test_rng_seed(&g, 7);
    double last = 0;
    for (size_t i = 0; i < d->n; i++)
        order[i] = i;
    for (int ep = 0; ep < epochs; ep++) {
        for (size_t i = d->n; i > 1; i--) {
            size_t j = (size_t)ps_test_rng_uniform(&g, 0, (float)i) % i, k = order[i - 1];
            order[i - 1] = order[j];
            order[j] = k;
        }
        double sum = 0;
        size_t steps = 0;
        for (size_t b = 0; b + BATCH <= d->n; b += BATCH) {
            for (size_t i = 0; i < BATCH; i++) {
                us[i] = d->user[order[b + i]];
                is[i] = d->item[order[b + i]];
                t[i] = d->rating[order[b + i]];
            }
            rec_feed(r, us, is, BATCH);
            float loss;
            ck_assert_int_eq(ps_model_train_step_targets(r->m, NULL, t, BATCH, &loss), PS_OK);
            for (size_t e = 0; e < r->ne; e++)
                ck_assert_int_eq(ps_emb_local_apply_model(r->t[e], r->m, e), PS_OK);
            float *p = ps_model_params(r->m);
            const float *gr = ps_model_grads(r->m);
            for (size_t i = 0; i < ps_model_num_updated_params(r->m); i++)
                p[i] -= lr * gr[i];
            sum += loss;
            steps++;
        }
        last = sum / (double)steps;
    }
    free(order);
    return last;
}

static ps_row_opt adagrad(void) {
    return ps_row_opt_default(PS_ROW_ADAGRAD, 0.1f);
}

START_TEST(matrix_factorisation_spec_and_keras) {
    ratings *d = malloc(sizeof *d);
    make_ratings(d);
    ck_assert_uint_gt(d->n, 300);
    ps_row_opt opt = adagrad();
    rec a, k;
    rec_open(&a, load("mf.json", NULL), &opt);
    rec_open(&k, load("mf_k3.json", "mse"), &opt);
    ck_assert_uint_eq(a.ne, 4);
    ck_assert_uint_eq(k.ne, 4);
    ck_assert_uint_eq(ps_model_num_params(a.m), 0);
    ck_assert_uint_eq(ps_model_embedding_at(k.m, 2)->dim, 1); /* user_bias */
    double r0 = rmse(&a, d);
    ck_assert_msg(fabs(r0 - rmse(&k, d)) < 1e-6, "the spec and Keras' file differ before training");
    train(&a, d, 150, 0);
    train(&k, d, 150, 0);
    double ra = rmse(&a, d), rk = rmse(&k, d);
    fprintf(stderr, "matrix factorisation: training RMSE %.4f -> %.4f (spec), %.4f (Keras)\n", r0,
            ra, rk);
    ck_assert_msg(r0 > 0.5, "the ratings' RMSE at the start %g: too easy", r0);
    ck_assert_msg(ra < 0.1, "training RMSE %g (from %g): not fitted", ra, r0);
    ck_assert_msg(fabs(ra - rk) < 1e-6, "the spec (%g) and Keras' file (%g) trained apart", ra, rk);
    rec_close(&a);
    rec_close(&k);
    free(d);
}
END_TEST

START_TEST(neural_recommender_keras) {
    ratings *d = malloc(sizeof *d);
    make_ratings(d);
    ps_row_opt opt = adagrad();
    rec r;
    rec_open(&r, load("ncf_k2.json", "mse"), &opt);
    ck_assert_uint_eq(r.ne, 2);
    ck_assert_str_eq(ps_model_embedding_at(r.m, 0)->name, "user_embedding");
    ck_assert_uint_eq(ps_model_embedding_at(r.m, 1)->input_dim, 20);
    ck_assert_uint_eq(ps_model_embedding_at(r.m, 1)->dim, 8);
    /* hidden 16 x 32 + 32, rating 32 + 1 */
    ck_assert_uint_eq(ps_model_num_params(r.m), 16 * 32 + 32 + 32 + 1);
    double r0 = rmse(&r, d);
    train(&r, d, 100, 0.05f);
    double r1 = rmse(&r, d);
    fprintf(stderr, "neural recommender: training RMSE %.4f -> %.4f\n", r0, r1);
    ck_assert_msg(r1 < 0.5 * r0, "training RMSE %g from %g: not learning", r1, r0);
    rec_close(&r);
    free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("recsys");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, matrix_factorisation_spec_and_keras);
    tcase_add_test(tc, neural_recommender_keras);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
