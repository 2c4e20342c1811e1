/* Finite-difference gradient checks through whole graphs (Keras Functional
 * files): a residual Add whose input fans out to three readers, Concatenate
 * (of the model's input too), BatchNormalization in training mode,
 * DepthwiseConv2D, ZeroPadding2D, GlobalAveragePooling2D, Reshape, and an
 * Add of a tensor with itself. The moving statistics are not gradients and
 * are skipped; a BN model's moving statistics take the documented update in
 * one step (exactly), and its evaluation uses them. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "local_opt.h"
#include "model.h"
#include "model_impl.h"
#include "ps_error.h"
#include "testutil.h"

enum { B = 4 };

/* Keras 3 form: a keras tensor naming its layer; a layer called on args. */
#define T(name)                                                                                    \
    "{\"class_name\": \"__keras_tensor__\", \"config\": {\"keras_history\": [\"" name "\", 0, "    \
                                                                                      "0]}}"
#define L(cls, name, cfg, args)                                                                    \
    "{\"class_name\": \"" cls "\", \"name\": \"" name "\", \"config\": {\"name\": \"" name         \
    "\"" cfg "}, \"inbound_nodes\": [{\"args\": [" args "], \"kwargs\": {}}]}"
#define INPUT(shape)                                                                               \
    "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_shape\": "            \
    "[null, " shape "], \"name\": \"in\"}, \"inbound_nodes\": []}"
#define MODEL(layers, out)                                                                         \
    "{\"keras\": {\"class_name\": \"Functional\", \"config\": {\"name\": \"g\", \"layers\": "      \
    "[" layers "], \"input_layers\": [\"in\", 0, 0], \"output_layers\": [\"" out "\", 0, 0]}}, "   \
    "\"loss\": \"sparse_categorical_crossentropy\", \"optimizer\": \"sgd\"}"

static ps_model *build(const char *spec) {
    ps_model *m = NULL;
    char err[512];
    int rc = ps_model_from_json(spec, &m, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", spec, err);
    ps_model_init_params(m, 77);
    float *p = ps_model_params(m);
    for (size_t i = 0; i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->rank == 1 && v->trainable)
            ps_test_fill_uniform(p + v->offset, v->numel, 100 + i, 0.5f, 1.2f);
    }
    return m;
}

/* Every trainable parameter's gradient against central differences. */
static void check_model(const char *what, const char *spec, float h, double atol, double rtol) {
    static const int32_t labels[B] = {0, 2, 1, 2};
    ps_model *m = build(spec);
    size_t n = ps_model_num_params(m), in = ps_model_input_dim(m);
    float *x = malloc(B * in * sizeof *x), *p = ps_model_params(m), loss, l0;
    double *num = calloc(n, sizeof *num);
    bool *train = calloc(n, sizeof *train);
    for (size_t i = 0; i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        for (size_t k = 0; k < v->numel; k++)
            train[v->offset + k] = v->trainable;
    }
    ps_test_fill_uniform(x, B * in, 5, -1, 1);
    ck_assert_int_eq(ps_model_train_loss(m, x, labels, B, &l0), PS_OK);
    for (size_t i = 0; i < n; i++) {
        if (!train[i]) continue;
        float v = p[i], lp, lm;
        p[i] = v + h;
        ck_assert_int_eq(ps_model_train_loss(m, x, labels, B, &lp), PS_OK);
        p[i] = v - h;
        ck_assert_int_eq(ps_model_train_loss(m, x, labels, B, &lm), PS_OK);
        p[i] = v;
        num[i] = ((double)lp - (double)lm) / (2.0 * (double)h);
    }
    size_t correct;
    ck_assert_int_eq(ps_model_train_step(m, x, labels, B, &loss, &correct), PS_OK);
    ck_assert_msg(fabsf(loss - l0) <= 1e-6f * (1 + fabsf(l0)), "%s: step loss %g != %g", what, loss,
                  l0);
    const float *ana = ps_model_grads(m);
    double worst = 0;
    size_t checked = 0;
    for (size_t i = 0; i < n; i++) {
        if (!train[i]) continue;
        double a = ana[i], nu = num[i];
        double scale = fabs(a) > fabs(nu) ? fabs(a) : fabs(nu);
        ck_assert_msg(fabs(a - nu) <= atol + rtol * scale,
                      "%s: d[%zu]: analytic %.7g, numeric %.7g", what, i, a, nu);
        if (fabs(a) > worst) worst = fabs(a);
        checked++;
    }
    ck_assert_msg(worst > 1e-3, "%s: all gradients are ~0: the check would prove nothing", what);
    ck_assert_uint_gt(checked, 10);
    free(x);
    free(num);
    free(train);
    ps_model_free(m);
}

START_TEST(residual_fan_out) {
    /* c1 feeds c2, the depthwise conv and the Add: three gradients summed */
    check_model(
        "residual",
        MODEL(
            INPUT("5, 5, 2") ", " L(
                "Conv2D", "c1",
                ", \"filters\": 3, \"kernel_size\": 3, \"padding\": "
                "\"same\", \"activation\": \"tanh\"",
                T("in")) ", " L("Conv2D", "c2",
                                ", \"filters\": 3, \"kernel_size\": 3, \"padding\": "
                                "\"same\", \"activation\": \"gelu\"",
                                T("c1")) ", " L("DepthwiseConv2D", "d",
                                                ", \"kernel_size\": 3, \"padding\": \"same\", "
                                                "\"activation\": \"tanh\"",
                                                T("c1")) ", " L("Add", "sum", "",
                                                                "[" T("c1") ", " T("c2") ", " T(
                                                                    "d") "]") ", " L("ZeroPadding2"
                                                                                     "D",
                                                                                     "pad",
                                                                                     ", "
                                                                                     "\"padding\": "
                                                                                     "[[0, 1], [1, "
                                                                                     "0]]",
                                                                                     T("sum")) ","
                                                                                               " " L("DepthwiseConv2D",
                                                                                                     "d2",
                                                                                                     ", \"kernel_size\": 2, \"strides\": 2, "
                                                                                                     "\"depth_multiplier\": 2",
                                                                                                     T("pad")) ", " L("GlobalAveragePooling2D",
                                                                                                                      "gap",
                                                                                                                      "",
                                                                                                                      T("d2")) ", " L("Dense",
                                                                                                                                      "out",
                                                                                                                                      ", \"units\": 3",
                                                                                                                                      T("gap")),
            "out"),
        1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(concat_batchnorm) {
    /* c1 feeds the BN and the Concatenate; the input feeds c1 and the Concatenate */
    check_model(
        "concat + batch norm",
        MODEL(
            INPUT("4, 4, 3") ", " L(
                "Conv2D", "c1",
                ", \"filters\": 4, \"kernel_size\": 1, \"activation\": "
                "\"sigmoid\"",
                T("in")) ", " L("BatchNormalization", "bn", ", \"momentum\": 0.9",
                                T("c1")) ", " L("Activation", "act", ", \"activation\": \"tanh\"",
                                                T("bn")) ", " L("Concatenate", "cat",
                                                                ", \"axis\": -1",
                                                                "[" T("act") ", " T("c1") ", " T(
                                                                    "in") "]") ", " L("Conv2D",
                                                                                      "c3",
                                                                                      ", "
                                                                                      "\"filters\":"
                                                                                      " 2, "
                                                                                      "\"kernel_"
                                                                                      "size\": 3",
                                                                                      T("cat")) ","
                                                                                                " " L("Flatten",
                                                                                                      "flat",
                                                                                                      "",
                                                                                                      T("c3")) ", " L("Dense",
                                                                                                                      "out",
                                                                                                                      ", \"units\": 3",
                                                                                                                      T("flat")),
            "out"),
        1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(self_add_reshape) {
    /* Add([h, h]) (one tensor twice), a Reshape view, Dense after BN on a vector */
    check_model(
        "self add + reshape",
        MODEL(
            INPUT("12") ", " L("Dense", "h", ", \"units\": 8, \"activation\": \"tanh\"", T("in")) ", " L(
                "Add", "twice", "",
                "[" T("h") ", " T(
                    "h") "]") ", " L("Reshape", "r", ", \"target_shape\": [2, 2, 2]",
                                     T("twice")) ", " L("Conv2D", "c",
                                                        ", \"filters\": 3, \"kernel_size\": 1",
                                                        T("r")) ", " L("Flatten", "f", "",
                                                                       T("c")) ", " L("BatchNormali"
                                                                                      "zation",
                                                                                      "bn", "",
                                                                                      T("f")) ","
                                                                                              " " L("Dense",
                                                                                                    "out",
                                                                                                    ", \"units\": 3",
                                                                                                    T("bn")),
            "out"),
        1e-3f, 5e-4, 2e-2);
}
END_TEST

/* Momentum 0.999 (MobileNetV2's): the slots' rate is Keras' (1.0 - momentum)
 * taken in double and rounded once, 0.001f; 1 - 0.999f in float would be
 * 0.00099998713, 1.3e-5 relative off (docs/PERFORMANCE.md, "Parity with Keras,
 * step by step"). */
START_TEST(batchnorm_rate_as_keras) {
    static const int32_t labels[B] = {0, 1, 1, 0};
    const char *spec =
        MODEL(INPUT("3") ", " L("BatchNormalization", "bn", ", \"momentum\": 0.999",
                                T("in")) ", " L("Dense", "out", ", \"units\": 2", T("bn")),
              "out");
    ps_model *m = build(spec);
    const ps_model_var *mm = ps_model_var_at(m, 2), *mv = ps_model_var_at(m, 3);
    float *p = ps_model_params(m), x[B * 3], loss, old[6];
    ps_test_fill_uniform(x, B * 3, 12, -2, 3);
    memcpy(old, p + mm->offset, 3 * sizeof(float));
    memcpy(old + 3, p + mv->offset, 3 * sizeof(float));
    size_t correct;
    ck_assert_int_eq(ps_model_train_step(m, x, labels, B, &loss, &correct), PS_OK);
    const float *g = ps_model_grads(m), *stat = m->ops[0].stat;
    const float k = (float)(1.0 - 0.999);
    ck_assert_float_eq(k, 0.001f);
    for (size_t c = 0; c < 3; c++) {
        ck_assert_float_eq(g[mm->offset + c], k * (old[c] - stat[c]));
        ck_assert_float_eq(g[mv->offset + c], k * (old[3 + c] - stat[3 + c]));
    }
    ps_model_free(m);
}
END_TEST

/* Input -> BatchNormalization -> Dense: the moving statistics after one step
 * are exactly the documented rule, and evaluation uses them. */
START_TEST(batchnorm_moving_stats) {
    static const int32_t labels[B] = {0, 1, 1, 0};
    const char *spec =
        MODEL(INPUT("3") ", " L("BatchNormalization", "bn", ", \"momentum\": 0.75",
                                T("in")) ", " L("Dense", "out", ", \"units\": 2", T("bn")),
              "out");
    ps_model *m = build(spec);
    ck_assert_uint_eq(ps_model_num_vars(m), 6);
    const ps_model_var *mm = ps_model_var_at(m, 2), *mv = ps_model_var_at(m, 3);
    ck_assert_str_eq(mm->name, "bn/moving_mean");
    ck_assert_str_eq(mv->name, "bn/moving_variance");
    float *p = ps_model_params(m), x[B * 3], loss, e0, e1;
    for (size_t i = 0; i < 3; i++)
        ck_assert_float_eq(p[mv->offset + i], 1.0f); /* Ones */
    ps_test_fill_uniform(p + mm->offset, 3, 9, -0.5f, 0.5f);
    ps_test_fill_uniform(p + mv->offset, 3, 10, 0.5f, 1.5f);
    ps_test_fill_uniform(x, B * 3, 11, -2, 3);
    float old[6];
    memcpy(old, p + mm->offset, 3 * sizeof(float));
    memcpy(old + 3, p + mv->offset, 3 * sizeof(float));
    size_t correct;
    ck_assert_int_eq(ps_model_evaluate(m, x, labels, B, &e0, &correct), PS_OK);
    ck_assert_int_eq(ps_model_train_step(m, x, labels, B, &loss, &correct), PS_OK);
    /* the batch's statistics, in double, from x */
    double mean[3] = {0}, var[3] = {0};
    for (size_t r = 0; r < B; r++)
        for (size_t c = 0; c < 3; c++)
            mean[c] += x[r * 3 + c] / (double)B;
    for (size_t r = 0; r < B; r++)
        for (size_t c = 0; c < 3; c++)
            var[c] += (x[r * 3 + c] - mean[c]) * (x[r * 3 + c] - mean[c]) / (double)B;
    /* the slot holds exactly (1 - momentum) * (moving - batch statistic), with
     * the statistics the kernel computed */
    const float *g = ps_model_grads(m), *stat = m->ops[0].stat;
    for (size_t c = 0; c < 3; c++) {
        ck_assert_float_eq(g[mm->offset + c], (1.0f - 0.75f) * (old[c] - stat[c]));
        ck_assert_float_eq(g[mv->offset + c], (1.0f - 0.75f) * (old[3 + c] - stat[3 + c]));
        ck_assert_msg(fabs(stat[c] - mean[c]) < 1e-6 && fabs(stat[3 + c] - var[c]) < 1e-5,
                      "batch statistics %g %g, want %g %g", stat[c], stat[3 + c], mean[c], var[c]);
    }
    /* SGD with rate 1 (their optimizer) gives Keras' moving average */
    ps_local_opt *o = NULL;
    ck_assert_int_eq(ps_local_opt_new(m, &o), PS_OK);
    float gm[6];
    for (size_t c = 0; c < 3; c++) {
        gm[c] = g[mm->offset + c];
        gm[3 + c] = g[mv->offset + c];
    }
    ps_local_opt_step(o);
    for (size_t c = 0; c < 3; c++) {
        ck_assert_float_eq(p[mm->offset + c], old[c] - gm[c]);
        ck_assert_float_eq(p[mv->offset + c], old[3 + c] - gm[3 + c]);
        ck_assert(fabs(p[mm->offset + c] - (0.75 * old[c] + 0.25 * mean[c])) < 1e-6);
        ck_assert(fabs(p[mv->offset + c] - (0.75 * old[3 + c] + 0.25 * var[c])) < 1e-5);
    }
    ps_local_opt_free(o);
    /* evaluation reads the moving statistics: moving them changes its loss */
    ck_assert_int_eq(ps_model_evaluate(m, x, labels, B, &e0, &correct), PS_OK);
    for (size_t c = 0; c < 3; c++)
        p[mm->offset + c] += 1.0f;
    ck_assert_int_eq(ps_model_evaluate(m, x, labels, B, &e1, &correct), PS_OK);
    ck_assert_msg(fabsf(e1 - e0) > 1e-4f, "eval loss %g did not move (%g)", e1, e0);
    /* ... and training does not (batch statistics) */
    float t0, t1;
    ck_assert_int_eq(ps_model_train_loss(m, x, labels, B, &t0), PS_OK);
    for (size_t c = 0; c < 3; c++)
        p[mm->offset + c] -= 3.0f;
    ck_assert_int_eq(ps_model_train_loss(m, x, labels, B, &t1), PS_OK);
    ck_assert_float_eq(t0, t1);
    ps_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gradcheck_graph");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, residual_fan_out);
    tcase_add_test(tc, concat_batchnorm);
    tcase_add_test(tc, self_add_reshape);
    tcase_add_test(tc, batchnorm_moving_stats);
    tcase_add_test(tc, batchnorm_rate_as_keras);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
