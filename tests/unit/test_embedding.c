/* Embedding tables on the model side: finite-difference checks of the rows'
 * gradients an Embedding hands back (duplicate ids in a batch summed, a row
 * no sample reads zero), of Dot and of Concatenate over embeddings, with
 * float targets (mse, binary cross-entropy); the row interface's refusals;
 * the id inputs and embeddings of spec and Keras graphs; evaluation in
 * chunks against float targets; the gather and scatter kernels. Each model's
 * analytic gradients (ps_model_train_step_targets, ps_model_embedding_grads)
 * are compared with central differences of its loss
 * (ps_model_train_loss_targets) over every row value and parameter. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emb_local.h"
#include "export.h"
#include "kernels.h"
#include "model.h"
#include "ps_error.h"
#include "testutil.h"

enum { B = 6, MAXE = 6 };

/* Sample i of every id input reads row where[i] (rows 0..2, row 0 three
 * times, row 1 twice); row 3 is given but read by no sample. */
static const uint32_t where_dup[B] = {0, 1, 0, 2, 1, 0};
static const uint32_t where_all[B] = {2, 0, 1, 1, 3, 0};
enum { NU = 4, W = 3 };
/* An id input of shape [W]: sample i's ids read rows where_wide[i * W ..];
 * a row twice within one sample (samples 0 and 3), row 3 by sample 4 only. */
static const uint32_t where_wide[B * W] = {0, 1, 0, 2, 1, 2, 1, 1, 1, 0, 2, 0, 3, 2, 1, 2, 2, 2};

static ps_model *build(const char *spec) {
    ps_model *m = NULL;
    char err[256];
    int rc = ps_model_from_json(spec, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", spec, err);
    ps_model_init_params(m, 77);
    float *p = ps_model_params(m);
    for (size_t i = 0; i < ps_model_num_vars(m); i++) { /* biases away from 0 */
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->rank == 1) ps_test_fill_uniform(p + v->offset, v->numel, 100 + i, -0.3f, 0.3f);
    }
    return m;
}

/* Every embedding's rows: [NU, dim] of values in [-0.5, 0.5], where by its id
 * input (input 0: where_dup, the others where_all). */
typedef struct {
    size_t n;
    float *rows[MAXE];
} rowset;

static void rows_make(ps_model *m, rowset *rs) {
    rs->n = ps_model_num_embeddings(m);
    ck_assert_uint_le(rs->n, MAXE);
    for (size_t e = 0; e < rs->n; e++) {
        size_t dim = ps_model_embedding_at(m, e)->dim;
        rs->rows[e] = malloc(NU * dim * sizeof(float));
        ps_test_fill_uniform(rs->rows[e], NU * dim, 300 + e, -0.5f, 0.5f);
    }
}

static void rows_give(ps_model *m, const rowset *rs) {
    for (size_t e = 0; e < rs->n; e++) {
        const ps_model_embedding *me = ps_model_embedding_at(m, e);
        const uint32_t *w = me->width == W ? where_wide : me->ids_input == 0 ? where_dup : where_all;
        ck_assert_int_eq(ps_model_set_embedding_rows(m, e, rs->rows[e], NU, w, B), PS_OK);
    }
}

static void rows_free(rowset *rs) {
    for (size_t e = 0; e < rs->n; e++)
        free(rs->rows[e]);
}

static void check_close(const char *what, double a, double nu, double atol, double rtol) {
    double scale = fabs(a) > fabs(nu) ? fabs(a) : fabs(nu);
    ck_assert_msg(fabs(a - nu) <= atol + rtol * scale, "%s: analytic %.7g, numeric %.7g", what, a,
                  nu);
}

/* Central differences of the loss over every row value and every parameter,
 * against the step's row gradients and parameter gradients. */
static void check_model(const char *what, const char *spec, const float *targets) {
    const float h = 1e-3f;
    const double atol = 5e-4, rtol = 2e-2;
    ps_model *m = build(spec);
    size_t in = ps_model_input_dim(m), n = ps_model_num_params(m);
    float *x = in ? malloc(B * in * sizeof *x) : NULL, *p = ps_model_params(m), l0, lp, lm, loss;
    if (x) ps_test_fill_uniform(x, B * in, 5, -1, 1);
    rowset rs;
    rows_make(m, &rs);
    rows_give(m, &rs);
    ck_assert_int_eq(ps_model_train_loss_targets(m, x, targets, B, &l0), PS_OK);
    double *num = calloc(n + 1, sizeof *num), *rnum[MAXE];
    for (size_t i = 0; i < n; i++) {
        float v = p[i];
        p[i] = v + h;
        ck_assert_int_eq(ps_model_train_loss_targets(m, x, targets, B, &lp), PS_OK);
        p[i] = v - h;
        ck_assert_int_eq(ps_model_train_loss_targets(m, x, targets, B, &lm), PS_OK);
        p[i] = v;
        num[i] = ((double)lp - (double)lm) / (2.0 * h);
    }
    for (size_t e = 0; e < rs.n; e++) {
        size_t cnt = NU * ps_model_embedding_at(m, e)->dim;
        rnum[e] = malloc(cnt * sizeof **rnum);
        for (size_t i = 0; i < cnt; i++) {
            float v = rs.rows[e][i];
            rs.rows[e][i] = v + h;
            rows_give(m, &rs);
            ck_assert_int_eq(ps_model_train_loss_targets(m, x, targets, B, &lp), PS_OK);
            rs.rows[e][i] = v - h;
            rows_give(m, &rs);
            ck_assert_int_eq(ps_model_train_loss_targets(m, x, targets, B, &lm), PS_OK);
            rs.rows[e][i] = v;
            rnum[e][i] = ((double)lp - (double)lm) / (2.0 * h);
        }
    }
    rows_give(m, &rs);
    ck_assert_int_eq(ps_model_train_step_targets(m, x, targets, B, &loss), PS_OK);
    ck_assert_msg(fabsf(loss - l0) <= 1e-6f * (1 + fabsf(l0)), "%s: loss %g != %g", what, loss, l0);
    const float *g = ps_model_grads(m);
    char label[128];
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(label, sizeof label, "%s: param %zu", what, i);
        check_close(label, g[i], num[i], atol, rtol);
    }
    for (size_t e = 0; e < rs.n; e++) {
        size_t nu = 0, dim = ps_model_embedding_at(m, e)->dim;
        const float *rg = ps_model_embedding_grads(m, e, &nu);
        ck_assert_ptr_nonnull(rg);
        ck_assert_uint_eq(nu, NU);
        for (size_t i = 0; i < NU * dim; i++) {
            snprintf(label, sizeof label, "%s: embedding %zu row %zu [%zu]", what, e, i / dim,
                     i % dim);
            check_close(label, rg[i], rnum[e][i], atol, rtol);
            if (fabs(rg[i]) > worst) worst = fabs(rg[i]);
        }
        if (ps_model_embedding_at(m, e)->ids_input == 0 &&
            ps_model_embedding_at(m, e)->width == 1) /* where_dup: row 3 unread */
            for (size_t c = 0; c < dim; c++)
                ck_assert_msg(rg[3 * dim + c] == 0.0f, "%s: an unread row's gradient %g", what,
                              rg[3 * dim + c]);
        free(rnum[e]);
    }
    ck_assert_msg(worst > 1e-3, "%s: all row gradients are ~0: the check would prove nothing",
                  what);
    rows_free(&rs);
    free(num);
    free(x);
    ps_model_free(m);
}

static const float ratings[B] = {1.0f, -0.5f, 0.25f, 2.0f, -1.5f, 0.75f};
static const float clicks[B] = {1, 0, 0, 1, 1, 0};

#define IDS2                                                                                       \
    "\"inputs\": [{\"name\": \"user\", \"ids\": true}, {\"name\": \"item\", \"ids\": true}], "

START_TEST(embedding_rows_dense) {
    /* one id input, duplicates in the batch, an unread row; Flatten, Dense */
    check_model("embedding -> dense",
                "{\"inputs\": [{\"name\": \"user\", \"ids\": true, \"shape\": [1]}], \"layers\": ["
                "{\"type\": \"Embedding\", \"inputs\": \"user\", \"input_dim\": 10,"
                " \"output_dim\": 3},"
                "{\"type\": \"Flatten\"},"
                "{\"type\": \"Dense\", \"units\": 4, \"activation\": \"tanh\"},"
                "{\"type\": \"Dense\", \"units\": 1}], \"loss\": \"mse\"}",
                ratings);
}
END_TEST

START_TEST(ids_per_sample) {
    /* an id input of W ids a sample (Keras' Input(shape=(W,)), a click log's fields
     * in one table): [W, dim] flattened, concatenated with a float input */
    const char *spec =
        "{\"inputs\": [{\"name\": \"cats\", \"ids\": true, \"shape\": [3]},"
        " {\"name\": \"num\", \"shape\": [2]}], \"layers\": ["
        "{\"type\": \"Embedding\", \"name\": \"e\", \"inputs\": \"cats\", \"input_dim\": 0,"
        " \"output_dim\": 2},"
        "{\"type\": \"Flatten\", \"name\": \"f\"},"
        "{\"type\": \"Concatenate\", \"inputs\": [\"f\", \"num\"]},"
        "{\"type\": \"Dense\", \"units\": 4, \"activation\": \"tanh\"},"
        "{\"type\": \"Dense\", \"units\": 1, \"activation\": \"sigmoid\"}],"
        " \"loss\": \"binary_crossentropy\", \"from_logits\": false}";
    check_model("ids per sample -> flatten -> dense", spec, clicks);
    ps_model *m = build(spec);
    ck_assert_uint_eq(ps_model_num_id_inputs(m), 1);
    ck_assert_uint_eq(ps_model_id_input_width(m, 0), W);
    ck_assert_uint_eq(ps_model_id_columns(m), W);
    ck_assert_uint_eq(ps_model_embedding_at(m, 0)->width, W);
    /* the forward pass reads sample i's W rows in order: with a Dense of one unit
     * whose kernel picks value c of id j, the output is row where_wide[i*W+j][c] */
    rowset rs;
    rows_make(m, &rs);
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 0, rs.rows[0], NU, where_wide, B), PS_OK);
    /* where[B * W] is checked whole: an out-of-range entry past the first B */
    uint32_t bad[B * W];
    memcpy(bad, where_wide, sizeof bad);
    bad[B * W - 1] = NU;
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 0, rs.rows[0], NU, bad, B), PS_EINVAL);
    rows_free(&rs);
    ps_model_free(m);
    /* the layout, over more samples than one evaluation pass (EVAL_CHUNK) and through
     * a whole local table (ps_emb_local_feed reads W ids a sample): Embedding [3, 2] ->
     * Flatten -> Dense(1, linear) with a one-hot kernel gives id j's value c */
    m = build("{\"inputs\": [{\"name\": \"cats\", \"ids\": true, \"shape\": [3]}],"
              " \"layers\": [{\"type\": \"Embedding\", \"inputs\": \"cats\", \"input_dim\": 7,"
              " \"output_dim\": 2}, {\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 1}],"
              " \"loss\": \"mse\"}");
    enum { N = 600 };
    ps_row_opt sgd = ps_row_opt_default(PS_ROW_SGD, 0.1f);
    ps_emb_local *t;
    ck_assert_int_eq(ps_emb_local_for(m, 0, 5, &sgd, &t), PS_OK);
    uint64_t *ids = malloc(N * W * sizeof *ids);
    float *tg = calloc(N, sizeof *tg), *out = malloc(N * sizeof *out), loss;
    for (size_t i = 0; i < N * W; i++)
        ids[i] = (i * 5 + i / 11) % 7;
    for (size_t pick = 0; pick < W * 2; pick++) {
        float *p = ps_model_params(m);
        memset(p, 0, ps_model_num_params(m) * sizeof *p);
        const ps_model_var *kv = ps_model_var_at(m, 0);
        ck_assert_uint_eq(kv->numel, W * 2);
        p[kv->offset + pick] = 1;
        ck_assert_int_eq(ps_emb_local_feed(t, m, 0, ids, N), PS_OK);
        ck_assert_int_eq(ps_model_evaluate_targets(m, NULL, tg, N, &loss, NULL, out), PS_OK);
        for (size_t i = 0; i < N; i++) {
            float want = ps_emb_local_row(t, ids[i * W + pick / 2])[pick % 2];
            ck_assert_msg(out[i] == want, "sample %zu, value %zu: %g, want %g", i, pick,
                          out[i], want);
        }
    }
    free(ids), free(tg), free(out);
    ps_emb_local_free(t);
    ps_model_free(m);
}
END_TEST

START_TEST(matrix_factorisation_dot) {
    /* user . item + user bias + item bias: no dense variables at all */
    check_model("dot and biases",
                "{" IDS2 "\"layers\": ["
                "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
                " \"input_dim\": 10, \"output_dim\": 3},"
                "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\","
                " \"input_dim\": 0, \"output_dim\": 3},"
                "{\"type\": \"Dot\", \"name\": \"uv\", \"inputs\": [\"u\", \"v\"], \"axes\": 1},"
                "{\"type\": \"Embedding\", \"name\": \"bu\", \"inputs\": \"user\","
                " \"input_dim\": 10, \"output_dim\": 1},"
                "{\"type\": \"Embedding\", \"name\": \"bi\", \"inputs\": \"item\","
                " \"input_dim\": 0, \"output_dim\": 1},"
                "{\"type\": \"Add\", \"inputs\": [\"uv\", \"bu\", \"bi\"]}],"
                " \"loss\": \"mse\"}",
                ratings);
}
END_TEST

START_TEST(dot_of_itself) {
    /* |u|^2: one tensor read twice by one Dot (the second gradient added in) */
    check_model("dot of a vector with itself",
                "{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
                "{\"type\": \"Embedding\", \"name\": \"u\", \"input_dim\": 10,"
                " \"output_dim\": 4, \"inputs\": \"user\"},"
                "{\"type\": \"Dot\", \"inputs\": [\"u\", \"u\"], \"axes\": -1},"
                "{\"type\": \"Dense\", \"units\": 1}], \"loss\": \"mse\"}",
                ratings);
}
END_TEST

START_TEST(concatenate_embeddings_and_features) {
    /* a neural recommender: embeddings and a float input concatenated */
    check_model("concatenate -> dense, binary cross-entropy",
                "{" IDS2 "\"input_shape\": [2], \"layers\": ["
                "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
                " \"input_dim\": 10, \"output_dim\": 3},"
                "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\","
                " \"input_dim\": 10, \"output_dim\": 2},"
                "{\"type\": \"Concatenate\", \"inputs\": [\"u\", \"input\", \"v\"]},"
                "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"tanh\"},"
                "{\"type\": \"Dense\", \"units\": 1}], \"loss\": \"binary_crossentropy\"}",
                clicks);
}
END_TEST

START_TEST(row_interface_refusals) {
    ps_model *m = build("{" IDS2 "\"layers\": ["
                        "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
                        " \"input_dim\": 10, \"output_dim\": 2},"
                        "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\","
                        " \"input_dim\": 7, \"output_dim\": 2,"
                        " \"embeddings_initializer\": {\"class_name\": \"RandomUniform\","
                        " \"config\": {\"minval\": -0.1, \"maxval\": 0.2, \"seed\": null}}},"
                        "{\"type\": \"Dot\", \"inputs\": [\"u\", \"v\"], \"axes\": 1}],"
                        " \"loss\": \"mse\"}");
    ck_assert_uint_eq(ps_model_input_dim(m), 0);
    ck_assert_uint_eq(ps_model_num_id_inputs(m), 2);
    ck_assert_str_eq(ps_model_id_input_name(m, 1), "item");
    ck_assert_ptr_null(ps_model_id_input_name(m, 2));
    ck_assert_uint_eq(ps_model_num_embeddings(m), 2);
    const ps_model_embedding *v = ps_model_embedding_at(m, 1);
    ck_assert_str_eq(v->name, "v");
    ck_assert_uint_eq(v->input_dim, 7);
    ck_assert_uint_eq(v->dim, 2);
    ck_assert_uint_eq(v->ids_input, 1);
    ck_assert_float_eq(v->init_lo, -0.1f);
    ck_assert_float_eq(v->init_hi, 0.2f);
    ck_assert(v->trainable);
    ck_assert_ptr_null(ps_model_embedding_at(m, 2));
    ck_assert_uint_eq(ps_model_num_params(m), 0); /* the tables are not the model's */
    float loss, rows[NU * 2] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    int32_t labels[B] = {0};
    /* no rows yet: refused */
    ck_assert_int_eq(ps_model_train_step_targets(m, NULL, ratings, B, &loss), PS_EINVAL);
    const uint32_t bad[B] = {0, 1, 4, 0, 0, 0};
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 0, rows, NU, bad, B), PS_EINVAL);
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 2, rows, NU, where_dup, B), PS_EINVAL);
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 0, rows, 0, where_dup, B), PS_EINVAL);
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 0, rows, NU, where_dup, B), PS_OK);
    /* one embedding given, not the other */
    ck_assert_int_eq(ps_model_train_step_targets(m, NULL, ratings, B, &loss), PS_EINVAL);
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 1, rows, NU, where_all, B), PS_OK);
    /* another batch size than the rows' */
    ck_assert_int_eq(ps_model_train_step_targets(m, NULL, ratings, B - 1, &loss), PS_EINVAL);
    /* labels need a classifier's loss; sparse CE takes no targets (below) */
    ck_assert_ptr_null(ps_model_embedding_grads(m, 0, NULL));
    ck_assert_int_eq(ps_model_train_step_targets(m, NULL, ratings, B, &loss), PS_OK);
    size_t nu = 0;
    ck_assert_ptr_nonnull(ps_model_embedding_grads(m, 0, &nu));
    ck_assert_uint_eq(nu, NU);
    /* the rows were consumed: the next step needs them again */
    ck_assert_int_eq(ps_model_train_step_targets(m, NULL, ratings, B, &loss), PS_EINVAL);
    /* evaluation does not consume them */
    double sq;
    ck_assert_int_eq(ps_model_evaluate_targets(m, NULL, ratings, B, &loss, &sq, NULL), PS_OK);
    ck_assert_int_eq(ps_model_evaluate_targets(m, NULL, ratings, B, &loss, &sq, NULL), PS_OK);
    (void)labels;
    ps_model_free(m);

    m = build("{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
              "{\"type\": \"Embedding\", \"inputs\": \"user\", \"input_dim\": 10,"
              " \"output_dim\": 2}, {\"type\": \"Dense\", \"units\": 3}]}");
    ck_assert_int_eq(ps_model_set_embedding_rows(m, 0, rows, NU, where_dup, B), PS_OK);
    ck_assert_int_eq(ps_model_train_step_targets(m, NULL, ratings, B, &loss), PS_EINVAL);
    size_t correct;
    ck_assert_int_eq(ps_model_train_step(m, NULL, labels, B, &loss, &correct), PS_OK);
    ck_assert_ptr_nonnull(ps_model_embedding_grads(m, 0, NULL));
    ps_model_free(m);
}
END_TEST

static void refused(const char *spec, const char *needle) {
    ps_model *m = NULL;
    char err[512] = "";
    int rc = ps_model_from_json(spec, &m, err, sizeof err);
    ck_assert_msg(rc != PS_OK, "accepted: %s", spec);
    ck_assert_msg(strstr(err, needle) != NULL, "'%s' lacks '%s'", err, needle);
}

START_TEST(spec_refusals) {
    refused("{\"inputs\": [{\"name\": \"cats\", \"ids\": true, \"shape\": [3]}], \"layers\": ["
            "{\"type\": \"Embedding\", \"inputs\": \"cats\", \"input_dim\": 5, \"output_dim\": 2},"
            "{\"type\": \"Dense\", \"units\": 1}], \"loss\": \"mse\"}",
            "its input gives [3, 2] per sample (an Embedding over 3 ids): put a Flatten");
    refused("{\"inputs\": [{\"name\": \"cats\", \"ids\": true, \"shape\": [0]}], \"layers\": ["
            "{\"type\": \"Embedding\", \"inputs\": \"cats\", \"input_dim\": 5, \"output_dim\": 2},"
            "{\"type\": \"Flatten\"}], \"loss\": \"mse\"}",
            "'shape' must be [] (one id per sample) or [n] (n ids, 1 to 4096)");
    refused("{" IDS2 "\"layers\": ["
            "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\", \"input_dim\": 5,"
            " \"output_dim\": 2},"
            "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\", \"input_dim\": 5,"
            " \"output_dim\": 2},"
            "{\"type\": \"Dot\", \"inputs\": [\"u\", \"v\"], \"axes\": 1,"
            " \"normalize\": true}], \"loss\": \"mse\"}",
            "'normalize' = true");
    refused("{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
            "{\"type\": \"Dense\", \"units\": 2, \"inputs\": \"user\"}]}",
            "only an Embedding can");
    refused("{\"input_shape\": [3], \"layers\": ["
            "{\"type\": \"Embedding\", \"input_dim\": 5, \"output_dim\": 2}]}",
            "reads one id input");
    refused("{" IDS2 "\"layers\": ["
            "{\"type\": \"Embedding\", \"inputs\": \"user\", \"input_dim\": 5,"
            " \"output_dim\": 2}, {\"type\": \"Dense\", \"units\": 1}]}",
            "the id input 'item' is read by no Embedding");
    refused("{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
            "{\"type\": \"Embedding\", \"input_dim\": 5, \"output_dim\": 2}]}",
            "no float input");
    refused("{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
            "{\"type\": \"Embedding\", \"inputs\": \"nobody\", \"input_dim\": 5,"
            " \"output_dim\": 2}]}",
            "input 'nobody'");
    refused("{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
            "{\"type\": \"Embedding\", \"inputs\": \"user\", \"input_dim\": 5,"
            " \"output_dim\": 2, \"embeddings_initializer\": \"glorot_uniform\"},"
            "{\"type\": \"Dense\", \"units\": 1}]}",
            "RandomUniform");
    /* Keras' [1, dim] beside a vector: Flatten first */
    refused("{\"inputs\": [{\"name\": \"user\", \"ids\": true, \"shape\": [1]},"
            " {\"name\": \"item\", \"ids\": true}], \"layers\": ["
            "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\", \"input_dim\": 5,"
            " \"output_dim\": 2},"
            "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\", \"input_dim\": 5,"
            " \"output_dim\": 2},"
            "{\"type\": \"Concatenate\", \"inputs\": [\"u\", \"v\"]},"
            "{\"type\": \"Dense\", \"units\": 1}]}",
            "Flatten the Embedding outputs");
    /* Dot(axes=1) on [1, dim] would contract the length-1 axis */
    refused("{\"inputs\": [{\"name\": \"user\", \"ids\": true, \"shape\": [1]},"
            " {\"name\": \"item\", \"ids\": true, \"shape\": [1]}], \"layers\": ["
            "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\", \"input_dim\": 5,"
            " \"output_dim\": 2},"
            "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\", \"input_dim\": 5,"
            " \"output_dim\": 2},"
            "{\"type\": \"Dot\", \"inputs\": [\"u\", \"v\"], \"axes\": 1}], \"loss\": \"mse\"}",
            "option 'axes'");
    /* an export cannot hold the tables: refused, naming the layer */
    ps_model *x =
        build("{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
              "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
              " \"input_dim\": 10, \"output_dim\": 2}, {\"type\": \"Dense\", \"units\": 1}],"
              " \"loss\": \"mse\"}");
    char err[512] = "";
    ck_assert_int_eq(ps_export_model(x, "/nonexistent/m.onnx", err, sizeof err), PS_EINVAL);
    ck_assert_msg(strstr(err, "layer 'u' (Embedding)") && strstr(err, "outside the model"), "%s",
                  err);
    ck_assert_int_eq(ps_export_model(x, "/nonexistent/m.keras", err, sizeof err), PS_EINVAL);
    ps_model_free(x);
    /* float targets need mse or binary cross-entropy */
    ps_model *m = build("{\"inputs\": [{\"name\": \"user\", \"ids\": true}], \"layers\": ["
                        "{\"type\": \"Embedding\", \"inputs\": \"user\", \"input_dim\": 10,"
                        " \"output_dim\": 2}, {\"type\": \"Dense\", \"units\": 1}],"
                        " \"loss\": \"binary_crossentropy\"}");
    float loss;
    ck_assert_int_eq(ps_model_train_step_targets(m, NULL, NULL, B, &loss), PS_EINVAL);
    ps_model_free(m);
}
END_TEST

/* The kernels: gather, and the grouped sums in the caller's order. */
/* A dynamic table's options from the spec's "table" reach the embedding's
 * description (what the exchange creates the table with); a fixed table, an
 * unknown option or a bad value is refused. */
START_TEST(dynamic_table_options) {
    ps_model *m = build("{" IDS2 "\"layers\": ["
                        "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
                        " \"input_dim\": 0, \"output_dim\": 2, \"table\": {\"min_count\": 3,"
                        " \"ttl_steps\": 1000, \"max_rows\": 50000, \"when_full\": \"refuse\"}},"
                        "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\","
                        " \"input_dim\": 0, \"output_dim\": 2},"
                        "{\"type\": \"Dot\", \"inputs\": [\"u\", \"v\"], \"axes\": 1}],"
                        " \"loss\": \"mse\"}");
    const ps_model_embedding *u = ps_model_embedding_at(m, 0), *v = ps_model_embedding_at(m, 1);
    ck_assert_uint_eq(u->min_count, 3);
    ck_assert_uint_eq(u->ttl_steps, 1000);
    ck_assert_uint_eq(u->max_rows, 50000);
    ck_assert(u->refuse_when_full);
    ck_assert_uint_eq(v->min_count, 0);
    ck_assert_uint_eq(v->max_rows, 0);
    ck_assert(!v->refuse_when_full);
    ps_model_free(m);
    const char *head = "{" IDS2 "\"layers\": [{\"type\": \"Embedding\", \"name\": \"u\","
                       " \"inputs\": \"user\", \"output_dim\": 2, ";
    const char *tail = "}, {\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\","
                       " \"input_dim\": 4, \"output_dim\": 2}, {\"type\": \"Dot\", \"inputs\":"
                       " [\"u\", \"v\"], \"axes\": 1}], \"loss\": \"mse\"}";
    char spec[1024];
    snprintf(spec, sizeof spec, "%s\"input_dim\": 4, \"table\": {\"max_rows\": 2}%s", head, tail);
    refused(spec, "is for a dynamic table");
    snprintf(spec, sizeof spec, "%s\"input_dim\": 0, \"table\": {\"ttl\": 2}%s", head, tail);
    refused(spec, "table option 'ttl'");
    snprintf(spec, sizeof spec, "%s\"input_dim\": 0, \"table\": {\"when_full\": \"drop\"}%s",
             head, tail);
    refused(spec, "table option 'when_full'");
}
END_TEST

START_TEST(row_kernels) {
    ps_k_dev *d = ps_k_cpu();
    const float rows[3 * 2] = {1, 2, 3, 4, 5, 6};
    const uint32_t where[4] = {2, 0, 2, 1};
    float y[8];
    ps_k_gather_rows_overwrite(d, y, rows, where, 4, 2);
    const float want[8] = {5, 6, 1, 2, 5, 6, 3, 4};
    ck_assert_mem_eq(y, want, sizeof want);
    const float dy[8] = {1, 10, 2, 20, 3, 30, 4, 40};
    const uint32_t order[4] = {1, 3, 0, 2}, offs[5] = {0, 1, 2, 4, 4};
    float dr[4 * 2];
    memset(dr, 0x7f, sizeof dr);
    ps_k_scatter_rows_overwrite(d, dr, dy, order, offs, 4, 2);
    const float dwant[8] = {2, 20, 4, 40, 1 + 3, 10 + 30, 0, 0};
    ck_assert_mem_eq(dr, dwant, sizeof dwant);
}
END_TEST

/* A matrix factorisation's outputs by hand, over more samples than one
 * evaluation chunk (each chunk reads its own part of where). */
START_TEST(evaluate_in_chunks) {
    enum { N = 700, U = 9, I = 11, D = 3 };
    ps_model *m = build("{" IDS2 "\"layers\": ["
                        "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
                        " \"input_dim\": 9, \"output_dim\": 3},"
                        "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\","
                        " \"input_dim\": 11, \"output_dim\": 3},"
                        "{\"type\": \"Dot\", \"inputs\": [\"u\", \"v\"], \"axes\": 1}],"
                        " \"loss\": \"mse\"}");
    ps_row_opt sgd = ps_row_opt_default(PS_ROW_SGD, 0.1f);
    ps_emb_local *tu, *ti;
    ck_assert_int_eq(ps_emb_local_for(m, 0, 3, &sgd, &tu), PS_OK);
    ck_assert_int_eq(ps_emb_local_for(m, 1, 3, &sgd, &ti), PS_OK);
    uint64_t *users = malloc(N * sizeof *users), *items = malloc(N * sizeof *items);
    float *t = malloc(N * sizeof *t), *out = malloc(N * sizeof *out);
    for (size_t i = 0; i < N; i++) {
        users[i] = (i * 7) % U;
        items[i] = (i * 5 + i / 13) % I;
        t[i] = (float)(i % 5) * 0.01f;
    }
    ck_assert_int_eq(ps_emb_local_feed(tu, m, 0, users, N), PS_OK);
    ck_assert_int_eq(ps_emb_local_feed(ti, m, 1, items, N), PS_OK);
    float loss;
    double sq = 0, want = 0;
    ck_assert_int_eq(ps_model_evaluate_targets(m, NULL, t, N, &loss, &sq, out), PS_OK);
    for (size_t i = 0; i < N; i++) {
        const float *a = ps_emb_local_row(tu, users[i]), *b = ps_emb_local_row(ti, items[i]);
        double dot = 0;
        for (size_t c = 0; c < D; c++)
            dot += (double)a[c] * b[c];
        ck_assert_msg(fabs(dot - out[i]) < 1e-6, "sample %zu: %g, by hand %g", i, out[i], dot);
        want += (dot - t[i]) * (dot - t[i]);
    }
    ck_assert_msg(fabs(sq - want) < 1e-6 * (1 + want), "squared errors %g, by hand %g", sq, want);
    ck_assert_msg(fabs(loss - want / N) < 1e-5 * (1 + want / N), "loss %g, mse %g", loss, want / N);
    free(users);
    free(items);
    free(t);
    free(out);
    ps_emb_local_free(tu);
    ps_emb_local_free(ti);
    ps_model_free(m);
}
END_TEST

/* The local table: its rows start where psd's would, a lookup deduplicates,
 * SGD moves only the rows looked up, by their summed gradient. */
START_TEST(local_table) {
    ps_row_opt sgd = ps_row_opt_default(PS_ROW_SGD, 0.5f);
    ps_emb_local *t;
    ck_assert_int_eq(ps_emb_local_new("tab", 5, 2, -0.05f, 0.05f, 9, &sgd, &t), PS_OK);
    float before[5 * 2];
    for (uint64_t id = 0; id < 5; id++) {
        const float *r = ps_emb_local_row(t, id);
        ck_assert(r[0] >= -0.05f && r[0] < 0.05f && r[1] >= -0.05f && r[1] < 0.05f);
        memcpy(before + id * 2, r, 2 * sizeof(float));
    }
    ck_assert_ptr_null(ps_emb_local_row(t, 5));
    const uint64_t ids[5] = {3, 1, 3, 3, 0}, bad[1] = {5};
    const float *rows;
    const uint32_t *where;
    size_t n;
    ck_assert_int_eq(ps_emb_local_lookup(t, bad, 1, &rows, &n, &where), PS_EINVAL);
    ck_assert_int_eq(ps_emb_local_lookup(t, ids, 5, &rows, &n, &where), PS_OK);
    ck_assert_uint_eq(n, 3);
    const uint32_t wwant[5] = {0, 1, 0, 0, 2};
    ck_assert_mem_eq(where, wwant, sizeof wwant);
    ck_assert_mem_eq(rows, before + 3 * 2, 2 * sizeof(float));
    const float g[3 * 2] = {1, 2, 3, 4, 5, 6};
    ck_assert_int_eq(ps_emb_local_apply(t, g, 2), PS_EINVAL);
    ck_assert_int_eq(ps_emb_local_apply(t, g, 3), PS_OK);
    ck_assert_float_eq(ps_emb_local_row(t, 3)[1], before[3 * 2 + 1] - 0.5f * 2);
    ck_assert_float_eq(ps_emb_local_row(t, 0)[0], before[0] - 0.5f * 5);
    ck_assert_mem_eq(ps_emb_local_row(t, 2), before + 2 * 2, 2 * sizeof(float));
    ps_emb_local_free(t);
}
END_TEST

/* Keras' functional MF: two int InputLayers of shape (1,), Embedding,
 * Flatten, Dot(axes=1); and Dot(axes=2) straight on the [1, dim] outputs. */
static char *keras_mf(const char *dot_in_u, const char *dot_in_v, int axes, bool flatten) {
    char *s = malloc(16384);
    const char *input =
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 1], \"dtype\": "
        "\"int32\", \"sparse\": false, \"name\": \"%s\"}, \"name\": \"%s\", \"inbound_nodes\": []}";
    const char *emb =
        "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"%s\", \"trainable\": true, "
        "\"dtype\": \"float32\", \"input_dim\": %d, \"output_dim\": 4, "
        "\"embeddings_initializer\": {\"module\": \"keras.initializers\", \"class_name\": "
        "\"RandomUniform\", \"config\": {\"minval\": -0.05, \"maxval\": 0.05, \"seed\": null}, "
        "\"registered_name\": null}, \"embeddings_regularizer\": null, \"activity_regularizer\": "
        "null, \"embeddings_constraint\": null, \"mask_zero\": false}, \"name\": \"%s\", "
        "\"inbound_nodes\": [{\"args\": [{\"class_name\": \"__keras_tensor__\", \"config\": "
        "{\"shape\": [null, 1], \"dtype\": \"int32\", \"keras_history\": [\"%s\", 0, 0]}}], "
        "\"kwargs\": {}}]}";
    const char *flat =
        "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"%s\", \"trainable\": true, "
        "\"dtype\": \"float32\", \"data_format\": \"channels_last\"}, \"name\": \"%s\", "
        "\"inbound_nodes\": [[[\"%s\", 0, 0, {}]]]}";
    int n = snprintf(
        s, 16384, "{\"class_name\": \"Functional\", \"config\": {\"name\": \"mf\", \"layers\": [");
    n += snprintf(s + n, 16384 - n, input, "user", "user");
    n += snprintf(s + n, 16384 - n, ", ");
    n += snprintf(s + n, 16384 - n, input, "item", "item");
    n += snprintf(s + n, 16384 - n, ", ");
    n += snprintf(s + n, 16384 - n, emb, "ue", 10, "ue", "user");
    n += snprintf(s + n, 16384 - n, ", ");
    n += snprintf(s + n, 16384 - n, emb, "ie", 12, "ie", "item");
    if (flatten) {
        n += snprintf(s + n, 16384 - n, ", ");
        n += snprintf(s + n, 16384 - n, flat, "uf", "uf", "ue");
        n += snprintf(s + n, 16384 - n, ", ");
        n += snprintf(s + n, 16384 - n, flat, "if", "if", "ie");
    }
    n += snprintf(s + n, 16384 - n,
                  ", {\"class_name\": \"Dot\", \"config\": {\"name\": \"dot\", \"axes\": %d, "
                  "\"normalize\": false}, \"name\": \"dot\", \"inbound_nodes\": [[[\"%s\", 0, 0, "
                  "{}], [\"%s\", 0, 0, {}]]]}",
                  axes, dot_in_u, dot_in_v);
    snprintf(s + n, 16384 - n,
             "], \"input_layers\": [[\"user\", 0, 0], [\"item\", 0, 0]], \"output_layers\": "
             "[[\"dot\", 0, 0]]}, \"keras_version\": \"2.15.0\"}");
    return s;
}

static int load_keras(const char *json, ps_model **m, char *err, size_t n) {
    char path[4096];
    const char *dir = ps_test_push_tmpdir();
    snprintf(path, sizeof path, "%s/m.json", dir);
    ck_assert_int_eq(ps_test_write_file(path, json, strlen(json)), 0);
    ps_model_overrides ov = {.loss = "mse", .from_logits = -1};
    int rc = ps_model_load_with(path, &ov, m, err, n);
    ps_test_pop_tmpdir();
    return rc;
}

START_TEST(keras_functional_ids) {
    char err[512];
    ps_model *m = NULL;
    char *j = keras_mf("uf", "if", 1, true);
    ck_assert_msg(load_keras(j, &m, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(ps_model_num_id_inputs(m), 2);
    ck_assert_str_eq(ps_model_id_input_name(m, 0), "user");
    ck_assert_uint_eq(ps_model_num_embeddings(m), 2);
    ck_assert_str_eq(ps_model_embedding_at(m, 1)->name, "ie");
    ck_assert_uint_eq(ps_model_embedding_at(m, 1)->input_dim, 12);
    ck_assert_uint_eq(ps_model_embedding_at(m, 1)->ids_input, 1);
    ck_assert_uint_eq(ps_model_output_dim(m), 1);
    ps_model_free(m);
    free(j);
    j = keras_mf("ue", "ie", 2, false);
    ck_assert_msg(load_keras(j, &m, err, sizeof err) == PS_OK, "%s", err);
    ps_model_free(m);
    free(j);
    /* a Sequential: a float InputLayer before an Embedding is its id input */
    const char *seq =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 1],"
        " \"dtype\": \"float32\", \"name\": \"word\"}},"
        "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", \"input_dim\": 9,"
        " \"output_dim\": 3}},"
        "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}},"
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 1}}]}}";
    ck_assert_msg(load_keras(seq, &m, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(ps_model_num_id_inputs(m), 1);
    ck_assert_str_eq(ps_model_id_input_name(m, 0), "word");
    ck_assert_uint_eq(ps_model_input_dim(m), 0);
    ps_model_free(m);
    j = keras_mf("ue", "ie", 1, false);
    ck_assert_int_ne(load_keras(j, &m, err, sizeof err), PS_OK);
    ck_assert_msg(strstr(err, "'axes'") && strstr(err, "[1, dim]"), "%s", err);
    free(j);
}
END_TEST

/* On a GPU the same steps give the same row gradients (skipped without one). */
START_TEST(cuda_rows_match_cpu) {
    if (ps_k_cuda_device_count() == 0) return;
    const char *spec = "{" IDS2 "\"input_shape\": [2], \"layers\": ["
                       "{\"type\": \"Embedding\", \"name\": \"u\", \"inputs\": \"user\","
                       " \"input_dim\": 10, \"output_dim\": 3},"
                       "{\"type\": \"Embedding\", \"name\": \"v\", \"inputs\": \"item\","
                       " \"input_dim\": 10, \"output_dim\": 3},"
                       "{\"type\": \"Dot\", \"name\": \"d\", \"inputs\": [\"u\", \"v\"],"
                       " \"axes\": 1},"
                       "{\"type\": \"Concatenate\", \"inputs\": [\"u\", \"d\", \"input\"]},"
                       "{\"type\": \"Dense\", \"units\": 1}], \"loss\": \"mse\"}";
    ps_model *c = build(spec), *g = build(spec);
    ps_k_dev *dev;
    char err[256];
    ck_assert_int_eq(ps_k_dev_open("cuda:0", &dev, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_model_set_device(g, dev, err, sizeof err), PS_OK);
    float x[B * 2], lc, lg;
    ps_test_fill_uniform(x, B * 2, 8, -1, 1);
    rowset rs;
    rows_make(c, &rs);
    rows_give(c, &rs);
    rows_give(g, &rs);
    ck_assert_int_eq(ps_model_train_step_targets(c, x, ratings, B, &lc), PS_OK);
    ck_assert_int_eq(ps_model_train_step_targets(g, x, ratings, B, &lg), PS_OK);
    ck_assert_msg(fabsf(lc - lg) < 1e-5f, "loss cpu %g cuda %g", lc, lg);
    for (size_t e = 0; e < 2; e++) {
        size_t n;
        const float *a = ps_model_embedding_grads(c, e, &n),
                    *b = ps_model_embedding_grads(g, e, &n);
        ck_assert_int_lt(ps_test_first_mismatch(a, b, n * 3, 1e-5f, 1e-4f), 0);
    }
    ck_assert_int_lt(ps_test_first_mismatch(ps_model_grads(c), ps_model_grads(g),
                                            ps_model_num_params(c), 1e-5f, 1e-4f),
                     0);
    rows_free(&rs);
    ps_model_free(c);
    ps_model_free(g);
    ps_k_dev_close(dev);
}
END_TEST

int main(void) {
    Suite *s = suite_create("embedding");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, embedding_rows_dense);
    tcase_add_test(tc, ids_per_sample);
    tcase_add_test(tc, matrix_factorisation_dot);
    tcase_add_test(tc, dot_of_itself);
    tcase_add_test(tc, concatenate_embeddings_and_features);
    tcase_add_test(tc, row_interface_refusals);
    tcase_add_test(tc, spec_refusals);
    tcase_add_test(tc, row_kernels);
    tcase_add_test(tc, evaluate_in_chunks);
    tcase_add_test(tc, local_table);
    tcase_add_test(tc, keras_functional_ids);
    tcase_add_test(tc, cuda_rows_match_cpu);
    tcase_add_test(tc, dynamic_table_options);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
