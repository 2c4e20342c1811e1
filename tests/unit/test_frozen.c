/* Frozen layers (trainable: false) in the model: their variables lie after
 * the others (the prefix an exchange covers) and get no gradient; the
 * gradients of the layers still training are those of the unfrozen model, bit
 * for bit; a frozen BatchNormalization runs in inference mode (its backward
 * checked against finite differences); Keras' trainable flags on layers and
 * nested models, a spec wrapper's "trainable" overrides (Keras' setter, in
 * order) and "head" (the graph cut after a layer, a new stack on it). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "ps_error.h"
#include "testutil.h"

enum { B = 4 };

static ps_model *build(const char *spec) {
    ps_model *m = NULL;
    char err[256];
    int rc = ps_model_from_json(spec, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", spec, err);
    ps_model_init_params(m, 77);
    return m;
}

static void refused(const char *spec, const char *want) {
    ps_model *m = NULL;
    char err[256] = "";
    ck_assert_int_eq(ps_model_from_json(spec, &m, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, want), "error '%s' lacks '%s'", err, want);
}

static const ps_model_var *var_named(const ps_model *m, const char *name) {
    for (size_t i = 0; i < ps_model_num_vars(m); i++)
        if (!strcmp(ps_model_var_at(m, i)->name, name)) return ps_model_var_at(m, i);
    ck_abort_msg("no variable %s", name);
    return NULL;
}

#define LAYERS(first_trainable)                                                                  \
    "{\"input_shape\": [6, 6, 2], \"layers\": ["                                                 \
    "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 3, \"activation\": \"relu\""     \
    first_trainable "},"                                                                         \
    "{\"type\": \"Conv2D\", \"filters\": 4, \"kernel_size\": 3, \"activation\": \"tanh\"},"      \
    "{\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 3}], \"optimizer\": \"sgd\"}"

START_TEST(frozen_variables_last_and_no_gradient) {
    ps_model *u = build(LAYERS("")), *f = build(LAYERS(", \"trainable\": false"));
    ck_assert_uint_eq(ps_model_num_params(u), ps_model_num_params(f));
    ck_assert_uint_eq(ps_model_num_updated_params(u), ps_model_num_params(u));
    size_t frozen = 3 * 3 * 2 * 3 + 3;
    ck_assert_uint_eq(ps_model_num_updated_params(f), ps_model_num_params(f) - frozen);
    const ps_model_var *k = var_named(f, "conv2d_0/kernel");
    ck_assert(k->frozen && !k->trainable);
    ck_assert_uint_ge(k->offset, ps_model_num_updated_params(f));
    ck_assert(!var_named(f, "conv2d_1/kernel")->frozen);
    /* the same values, by name */
    for (size_t i = 0; i < ps_model_num_vars(u); i++) {
        const ps_model_var *a = ps_model_var_at(u, i), *b = var_named(f, a->name);
        memcpy(ps_model_params(f) + b->offset, ps_model_params(u) + a->offset,
               a->numel * sizeof(float));
    }
    float x[B * 72], lu, lf;
    int32_t y[B] = {0, 2, 1, 1};
    size_t cu, cf;
    ps_test_fill_uniform(x, B * 72, 3, -1, 1);
    ck_assert_int_eq(ps_model_train_step(u, x, y, B, &lu, &cu), PS_OK);
    ck_assert_int_eq(ps_model_train_step(f, x, y, B, &lf, &cf), PS_OK);
    ck_assert_float_eq(lu, lf);
    for (size_t i = 0; i < ps_model_num_vars(u); i++) {
        const ps_model_var *a = ps_model_var_at(u, i), *b = var_named(f, a->name);
        const float *ga = ps_model_grads(u) + a->offset, *gb = ps_model_grads(f) + b->offset;
        for (size_t j = 0; j < a->numel; j++) {
            if (b->frozen)
                ck_assert_msg(gb[j] == 0.0f, "%s[%zu]: a frozen variable got %g", b->name, j,
                              gb[j]);
            else
                ck_assert_msg(ga[j] == gb[j], "%s[%zu]: %.9g, unfrozen %.9g", b->name, j, gb[j],
                              ga[j]);
        }
    }
    ps_model_free(u);
    ps_model_free(f);
}
END_TEST

/* The analytic gradient of the variables that train (ps_model_train_step)
 * against central differences of the training loss; the frozen ones get 0. */
static void fd_check(ps_model *m, const float *x, const int32_t *y) {
    float *p = ps_model_params(m), l0, loss;
    size_t n = ps_model_num_updated_params(m), all = ps_model_num_params(m), correct;
    double *num = malloc(n * sizeof *num);
    ck_assert_ptr_nonnull(num);
    ck_assert_int_eq(ps_model_train_loss(m, x, y, B, &l0), PS_OK);
    const float h = 1e-2f;
    for (size_t i = 0; i < n; i++) {
        float v = p[i], lp, lm;
        p[i] = v + h;
        ck_assert_int_eq(ps_model_train_loss(m, x, y, B, &lp), PS_OK);
        p[i] = v - h;
        ck_assert_int_eq(ps_model_train_loss(m, x, y, B, &lm), PS_OK);
        p[i] = v;
        num[i] = ((double)lp - (double)lm) / (2.0 * (double)h);
    }
    ck_assert_int_eq(ps_model_train_step(m, x, y, B, &loss, &correct), PS_OK);
    ck_assert_float_eq(loss, l0);
    const float *g = ps_model_grads(m);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double a = g[i], d = fabs(a - num[i]);
        ck_assert_msg(d <= 2e-3 + 2e-2 * fabs(num[i]), "d[%zu]: analytic %.6g, numeric %.6g", i,
                      a, num[i]);
        if (fabs(a) > worst) worst = fabs(a);
    }
    for (size_t i = n; i < all; i++)
        ck_assert_msg(g[i] == 0.0f, "frozen d[%zu] = %g", i, g[i]);
    ck_assert_msg(worst > 1e-3, "all gradients ~0: the check proves nothing");
    free(num);
}

/* A trainable first and last layer around frozen ones of every kind with
 * variables: the gradient crosses them without their own being computed. */
START_TEST(gradient_through_frozen_layers) {
    ps_model *m = build(
        "{\"input_shape\": [6, 6, 2], \"layers\": ["
        "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 2, \"activation\": \"tanh\"},"
        "{\"type\": \"DepthwiseConv2D\", \"kernel_size\": 2, \"trainable\": false},"
        "{\"type\": \"DepthwiseConv2D\", \"kernel_size\": 2, \"depth_multiplier\": 2,"
        " \"trainable\": false},"
        "{\"type\": \"SeparableConv2D\", \"filters\": 4, \"kernel_size\": 2,"
        " \"activation\": \"tanh\", \"trainable\": false},"
        "{\"type\": \"LayerNormalization\", \"trainable\": false},"
        "{\"type\": \"Flatten\"},"
        "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"tanh\", \"trainable\": false},"
        "{\"type\": \"Dense\", \"units\": 3}], \"optimizer\": \"sgd\"}");
    float *p = ps_model_params(m);
    for (size_t i = 0; i < ps_model_num_vars(m); i++) { /* biases, beta: not zero */
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->rank == 1) ps_test_fill_uniform(p + v->offset, v->numel, 30 + i, -0.3f, 0.3f);
    }
    ck_assert_uint_eq(ps_model_num_updated_params(m), 2 * 2 * 2 * 3 + 3 + 5 * 3 + 3);
    float x[B * 72];
    int32_t y[B] = {1, 0, 2, 2};
    ps_test_fill_uniform(x, B * 72, 8, -1, 1);
    fd_check(m, x, y);
    ps_model_free(m);
}
END_TEST

/* conv (trains) -> BatchNormalization (frozen) -> dense: the frozen layer
 * normalizes with its moving statistics in training too, and passes the
 * gradient dy gamma / sqrt(moving variance + eps) on. */
START_TEST(frozen_batch_norm_inference_mode) {
    ps_model *m = build(
        "{\"input_shape\": [5, 5, 2], \"layers\": ["
        "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 2},"
        "{\"type\": \"BatchNormalization\", \"trainable\": false},"
        "{\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 3}], \"optimizer\": \"sgd\"}");
    float *p = ps_model_params(m);
    const char *bn[] = {"batch_normalization_0/gamma", "batch_normalization_0/beta",
                        "batch_normalization_0/moving_mean",
                        "batch_normalization_0/moving_variance"};
    const float lo[] = {0.5f, -0.5f, -0.3f, 0.2f}, hi[] = {1.5f, 0.5f, 0.3f, 2.0f};
    for (int i = 0; i < 4; i++) {
        const ps_model_var *v = var_named(m, bn[i]);
        ck_assert(v->frozen);
        ps_test_fill_uniform(p + v->offset, v->numel, 10 + (unsigned)i, lo[i], hi[i]);
    }
    size_t in = ps_model_input_dim(m), correct;
    float x[B * 50], l0, le;
    int32_t y[B] = {2, 0, 1, 0};
    ps_test_fill_uniform(x, B * in, 4, -1, 1);
    /* training and evaluation agree: no batch statistics anywhere */
    ck_assert_int_eq(ps_model_train_loss(m, x, y, B, &l0), PS_OK);
    ck_assert_int_eq(ps_model_evaluate(m, x, y, B, &le, &correct), PS_OK);
    ck_assert_msg(fabsf(l0 - le) <= 1e-6f * (1 + fabsf(l0)), "train loss %g, evaluate %g", l0,
                  le);
    float before[16];
    const ps_model_var *mv = var_named(m, "batch_normalization_0/moving_mean");
    memcpy(before, p + mv->offset, mv->numel * sizeof(float));
    fd_check(m, x, y); /* and one training step */
    ck_assert_msg(memcmp(before, p + mv->offset, mv->numel * sizeof(float)) == 0,
                  "a training step changed the frozen moving mean");
    ps_model_free(m);
}
END_TEST

START_TEST(nothing_but_frozen_is_still_a_model) {
    /* parsing accepts it (--evaluate, --export); psworker refuses to train it */
    ps_model *m = build("{\"input_shape\": [4], \"layers\": [{\"type\": \"Dense\", \"units\": 2,"
                        " \"trainable\": false}]}");
    ck_assert_uint_eq(ps_model_num_updated_params(m), 0);
    ck_assert_uint_eq(ps_model_num_trainable_params(m), 0);
    ps_model_free(m);
    refused("{\"input_shape\": [4], \"layers\": [{\"type\": \"Dense\", \"units\": 2,"
            " \"trainable\": 0}]}",
            "'trainable' must be true or false");
}
END_TEST

/* A Keras Functional model: conv_a, a nested Sequential "base" (conv_b, bn_b),
 * a Dense head; the file's own flags given by the caller. */
static char *keras_model(const char *conv_a, const char *base, const char *conv_b) {
    char *s = malloc(4096);
    ck_assert_ptr_nonnull(s);
    snprintf(
        s, 4096,
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"trainable\": true,"
        " \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"name\": \"in\","
        "  \"batch_shape\": [null, 6, 6, 1]}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Conv2D\", \"name\": \"conv_a\", \"config\": {\"name\": \"conv_a\","
        "  \"trainable\": %s, \"filters\": 2, \"kernel_size\": [3, 3]},"
        "  \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
        "{\"class_name\": \"Sequential\", \"name\": \"base\", \"config\": {\"name\": \"base\","
        "  \"trainable\": %s, \"layers\": ["
        "  {\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv_b\", \"trainable\": %s,"
        "   \"filters\": 2, \"kernel_size\": [3, 3]}},"
        "  {\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn_b\","
        "   \"trainable\": true}}]},"
        "  \"inbound_nodes\": [[[\"conv_a\", 0, 0, {}]]]},"
        "{\"class_name\": \"Flatten\", \"name\": \"flat\", \"config\": {\"name\": \"flat\"},"
        "  \"inbound_nodes\": [[[\"base\", 0, 0, {}]]]},"
        "{\"class_name\": \"Dense\", \"name\": \"out\", \"config\": {\"name\": \"out\","
        "  \"units\": 3}, \"inbound_nodes\": [[[\"flat\", 0, 0, {}]]]}],"
        " \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}",
        conv_a, base, conv_b);
    return s;
}

static char *wrapped(const char *keras, const char *extra) {
    char *s = malloc(8192);
    ck_assert_ptr_nonnull(s);
    snprintf(s, 8192, "{\"keras\": %s, \"loss\": \"sparse_categorical_crossentropy\"%s}", keras,
             extra);
    return s;
}

static bool frozen(const ps_model *m, const char *var) {
    return var_named(m, var)->frozen;
}

START_TEST(keras_trainable_flags) {
    char *k = keras_model("true", "false", "true"), *w = wrapped(k, "");
    ps_model *m = build(w);
    /* a layer trains only when it and every model around it do (Keras) */
    ck_assert(!frozen(m, "conv_a/kernel"));
    ck_assert(frozen(m, "conv_b/kernel") && frozen(m, "bn_b/gamma") &&
              frozen(m, "bn_b/moving_mean"));
    ck_assert(!frozen(m, "out/kernel"));
    ps_model_free(m);
    free(w);
    free(k);
    k = keras_model("false", "true", "false");
    w = wrapped(k, "");
    m = build(w);
    ck_assert(frozen(m, "conv_a/kernel") && frozen(m, "conv_b/bias"));
    ck_assert(!frozen(m, "bn_b/beta"));
    ps_model_free(m);
    free(w);
    /* the wrapper's overrides, in order, each as Keras' setter (recursive) */
    w = wrapped(k, ", \"trainable\": {\"base\": true, \"bn_b\": false, \"conv_a\": true}");
    m = build(w);
    ck_assert(!frozen(m, "conv_a/kernel") && !frozen(m, "conv_b/kernel"));
    ck_assert(frozen(m, "bn_b/gamma"));
    ps_model_free(m);
    free(w);
    w = wrapped(k, ", \"trainable\": false");
    m = build(w);
    ck_assert(frozen(m, "conv_a/kernel") && frozen(m, "out/kernel"));
    ck_assert_uint_eq(ps_model_num_updated_params(m), 0);
    ps_model_free(m);
    free(w);
    w = wrapped(k, ", \"trainable\": {\"nope\": true}");
    refused(w, "'trainable': the Keras model has no layer named 'nope'");
    free(w);
    w = wrapped(k, ", \"trainable\": {\"base\": 1}");
    refused(w, "'trainable': 'base' must be true or false");
    free(w);
    free(k);
}
END_TEST

START_TEST(keras_head_replaces_the_top) {
    char *k = keras_model("true", "true", "true");
    char *w = wrapped(k, ", \"trainable\": false, \"head\": {\"after\": \"flat\", \"layers\": ["
                         "{\"type\": \"Dense\", \"units\": 4, \"activation\": \"relu\"},"
                         "{\"type\": \"Dense\", \"units\": 5, \"name\": \"new_out\"}]}");
    ps_model *m = build(w);
    ck_assert_uint_eq(ps_model_output_dim(m), 5);
    ck_assert(frozen(m, "conv_a/kernel") && frozen(m, "bn_b/gamma"));
    ck_assert(!frozen(m, "head_0/kernel") && !frozen(m, "new_out/bias"));
    for (size_t i = 0; i < ps_model_num_vars(m); i++)
        ck_assert_msg(strncmp(ps_model_var_at(m, i)->name, "out/", 4),
                      "the old head is still there");
    ps_model_free(m);
    free(w);
    w = wrapped(k, ", \"head\": {\"after\": \"nope\", \"layers\": [{\"type\": \"Dense\","
                   " \"units\": 2}]}");
    refused(w, "'head': the Keras model has no layer named 'nope'");
    free(w);
    w = wrapped(k, ", \"head\": {\"layers\": []}");
    refused(w, "'head' must be");
    free(w);
    free(k);
}
END_TEST

int main(void) {
    Suite *s = suite_create("frozen");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, frozen_variables_last_and_no_gradient);
    tcase_add_test(tc, frozen_batch_norm_inference_mode);
    tcase_add_test(tc, gradient_through_frozen_layers);
    tcase_add_test(tc, nothing_but_frozen_is_still_a_model);
    tcase_add_test(tc, keras_trainable_flags);
    tcase_add_test(tc, keras_head_replaces_the_top);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
