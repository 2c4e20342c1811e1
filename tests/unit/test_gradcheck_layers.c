/* Finite-difference gradient checks for every layer type and loss of the
 * model spec: Conv2D (valid/same, strides, non-square kernels, no bias),
 * MaxPooling2D, AveragePooling2D, Flatten, Dropout, GELU, and the sparse
 * categorical, binary cross-entropy and MSE losses. Each small model's
 * analytic gradients (ps_model_train_step) are compared with central
 * differences of its training-mode loss (ps_model_train_loss, which uses the
 * same dropout masks as the next step). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
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
    /* biases start at zero: give them values so their gradients are general;
     * statistics (non-trainable: Normalization's) positive, as variances are */
    float *p = ps_model_params(m);
    for (size_t i = 0; i < ps_model_num_vars(m); i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        if (v->rank == 1)
            ps_test_fill_uniform(p + v->offset, v->numel, 100 + i, v->trainable ? -0.3f : 0.5f,
                                 v->trainable ? 0.3f : 2.0f);
    }
    return m;
}

/* The variable holding parameter i. */
static const ps_model_var *var_at(const ps_model *m, size_t i) {
    for (size_t k = 0; k < ps_model_num_vars(m); k++) {
        const ps_model_var *v = ps_model_var_at(m, k);
        if (i >= v->offset && i < v->offset + v->numel) return v;
    }
    ck_abort_msg("parameter %zu is in no variable", i);
    return NULL;
}

static bool trainable_at(const ps_model *m, size_t i) {
    return var_at(m, i)->trainable;
}

/* A non-trainable slot holds no gradient of the loss: BatchNormalization's the
 * moving statistics' update, Normalization's (mean, variance, count) 0. */
static bool slot_must_be_zero(const ps_model *m, size_t i) {
    const char *s = strrchr(var_at(m, i)->name, '/');
    return s && (!strcmp(s, "/mean") || !strcmp(s, "/variance") || !strcmp(s, "/count"));
}

/* Compares every parameter gradient with central differences; h is the step. */
static void check_model(const char *what, const char *spec, const int32_t *labels, float h,
                        double atol, double rtol) {
    ps_model *m = build(spec);
    size_t n = ps_model_num_params(m), in = ps_model_input_dim(m);
    float *x = malloc(B * in * sizeof *x), *p = ps_model_params(m), loss, l0;
    double *num = malloc(n * sizeof *num);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(num);
    ps_test_fill_uniform(x, B * in, 5, -1, 1);
    ck_assert_int_eq(ps_model_train_loss(m, x, labels, B, &l0), PS_OK);
    for (size_t i = 0; i < n; i++) {
        if (!trainable_at(m, i)) continue;
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
    for (size_t i = 0; i < n; i++) {
        if (!trainable_at(m, i)) {
            ck_assert_msg(!slot_must_be_zero(m, i) || ana[i] == 0.0f,
                          "%s: statistic d[%zu] = %g, not 0", what, i, ana[i]);
            continue;
        }
        double a = ana[i], nu = num[i];
        double scale = fabs(a) > fabs(nu) ? fabs(a) : fabs(nu);
        ck_assert_msg(fabs(a - nu) <= atol + rtol * scale,
                      "%s: d[%zu]: analytic %.7g, numeric %.7g", what, i, a, nu);
        if (fabs(a) > worst) worst = fabs(a);
    }
    ck_assert_msg(worst > 1e-3, "%s: all gradients are ~0: the check would prove nothing", what);
    free(x);
    free(num);
    ps_model_free(m);
}

static const int32_t y3[B] = {0, 2, 1, 2}; /* three classes */
static const int32_t y2[B] = {1, 0, 0, 1}; /* binary */

#define IMG "\"input_shape\": [7, 6, 2], "
#define SGD ", \"optimizer\": \"sgd\"}"

START_TEST(conv_valid_maxpool) {
    check_model(
        "conv valid + maxpool",
        "{" IMG "\"layers\": ["
        "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 3, \"activation\": \"tanh\"},"
        "{\"type\": \"MaxPooling2D\", \"pool_size\": 2},"
        "{\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 3}]" SGD,
        y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(conv_same_strided_avgpool) {
    check_model("conv same strided + avgpool same",
                "{" IMG "\"layers\": ["
                "{\"type\": \"Conv2D\", \"filters\": 4, \"kernel_size\": [3, 2], \"strides\": 2,"
                " \"padding\": \"same\", \"activation\": \"gelu\"},"
                "{\"type\": \"AveragePooling2D\", \"pool_size\": 2, \"strides\": 1,"
                " \"padding\": \"same\"},"
                "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 2, \"strides\": [1, 2],"
                " \"use_bias\": false},"
                "{\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 3}]" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(maxpool_overlapping_same) {
    /* overlapping windows (stride 1 < pool 3) and same padding */
    check_model(
        "maxpool 3x3 stride 1 same",
        "{" IMG "\"layers\": ["
        "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 1, \"activation\": \"sigmoid\"},"
        "{\"type\": \"MaxPool2D\", \"pool_size\": 3, \"strides\": 1, \"padding\": \"same\"},"
        "{\"type\": \"AvgPool2D\", \"pool_size\": [2, 3]},"
        "{\"type\": \"Dense\", \"units\": 3}]" SGD,
        y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(dropout_layers) {
    check_model(
        "dropout",
        "{" IMG "\"layers\": ["
        "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 2, \"activation\": \"tanh\"},"
        "{\"type\": \"Dropout\", \"rate\": 0.3}, {\"type\": \"Flatten\"},"
        "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"tanh\"},"
        "{\"type\": \"Dropout\", \"rate\": 0.5}, {\"type\": \"Dense\", \"units\": 3}]" SGD,
        y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(separable_conv) {
    check_model("separable conv: strided same, multiplier 2; valid without bias",
                "{" IMG "\"layers\": ["
                "{\"type\": \"SeparableConv2D\", \"filters\": 3, \"kernel_size\": 3,"
                " \"strides\": 2, \"padding\": \"same\", \"depth_multiplier\": 2,"
                " \"activation\": \"tanh\"},"
                "{\"type\": \"SeparableConv2D\", \"filters\": 2, \"kernel_size\": [2, 1],"
                " \"use_bias\": false},"
                "{\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 3}]" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(gap_keepdims_then_conv) {
    /* squeeze-and-excitation's shape: a 1x1 image that a 1x1 Conv2D reads */
    check_model("global average pooling keepdims + 1x1 conv",
                "{" IMG "\"layers\": ["
                "{\"type\": \"Conv2D\", \"filters\": 4, \"kernel_size\": 2,"
                " \"activation\": \"tanh\"},"
                "{\"type\": \"GlobalAveragePooling2D\", \"keepdims\": true},"
                "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 1},"
                "{\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 3}]" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(applications_layers) {
    /* the layers keras.applications' newer networks add, in a stack */
    check_model("swish, hard swish / sigmoid, rescaling, cropping, layer normalization",
                "{" IMG "\"layers\": ["
                "{\"type\": \"Rescaling\", \"scale\": 0.5, \"offset\": 0.25},"
                "{\"type\": \"Conv2D\", \"filters\": 4, \"kernel_size\": 2,"
                " \"activation\": \"swish\"},"
                "{\"type\": \"Activation\", \"activation\": \"hard_swish\"},"
                "{\"type\": \"Cropping2D\", \"cropping\": [[1, 0], [2, 1]]},"
                "{\"type\": \"LayerNormalization\", \"epsilon\": 0.01},"
                "{\"type\": \"Flatten\"},"
                "{\"type\": \"Dense\", \"units\": 6, \"activation\": \"hard_sigmoid\"},"
                "{\"type\": \"LayerNormalization\", \"center\": false},"
                "{\"type\": \"Dense\", \"units\": 3}]" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(keras_normalization_layer) {
    /* through Normalization into the Conv2D before it (its statistics fixed) */
    check_model("normalization after a conv, before a conv",
                "{" IMG "\"layers\": ["
                "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 2,"
                " \"activation\": \"tanh\"},"
                "{\"type\": \"Normalization\"},"
                "{\"type\": \"Conv2D\", \"filters\": 2, \"kernel_size\": 2},"
                "{\"type\": \"Flatten\"}, {\"type\": \"Normalization\", \"axis\": -1},"
                "{\"type\": \"Dense\", \"units\": 3}]" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

/* A Keras 3 functional model (tests/fixtures/keras/make_apps_fixtures.py) with
 * squeeze-and-excitation's Multiply of an image by a 1x1 image of its channels. */
static char *keras_fixture_spec(const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/keras/%s", ps_test_source_root(), file);
    char *k = ps_test_slurp(path, NULL);
    ck_assert_msg(k, "cannot read %s", path);
    size_t n = strlen(k) + 128;
    char *spec = malloc(n);
    ck_assert_ptr_nonnull(spec);
    snprintf(spec, n, "{\"keras\": %s, \"loss\": \"sparse_categorical_crossentropy\"" SGD, k);
    free(k);
    return spec;
}

START_TEST(keras_se_block) {
    char *spec = keras_fixture_spec("apps_block_k3.json");
    ps_model *m = build(spec);
    ck_assert_uint_eq(ps_model_num_params(m), 597); /* Keras' count_params() */
    ps_model_free(m);
    static const int32_t y5[B] = {4, 0, 2, 1};
    check_model("Keras apps block (Rescaling, SE with Multiply, Cropping2D, LN, SeparableConv2D)",
                spec, y5, 1e-3f, 5e-4, 2e-2);
    free(spec);
}
END_TEST

/* EfficientNet's layers (make_apps_fixtures.py): Rescaling, Normalization,
 * stem, BatchNormalization, swish, depthwise, squeeze-and-excitation through
 * Reshape, the skip Add; Keras' parameter count. */
START_TEST(keras_effnet_block) {
    char *spec = keras_fixture_spec("effnet_block_k3.json");
    ps_model *m = build(spec);
    ck_assert_uint_eq(ps_model_num_params(m), 533); /* Keras' count_params() */
    ps_model_free(m);
    check_model("Keras EfficientNet-style block (Normalization, SE with Reshape, Add)", spec, y3,
                1e-3f, 5e-4, 2e-2);
    free(spec);
}
END_TEST

/* Keras 3's operators on tensors (x + 3.0, x * (1 / 6): Add and Multiply called with a
 * number, read as Rescaling) and a Dropout called with training=False, as Keras 3 records
 * every Dropout call, with noise_shape (None, 1, 1, 1): it drops whole samples in training,
 * as Keras does (drop connect). */
START_TEST(keras_operators_and_training_false) {
    char *spec = keras_fixture_spec("ops_block_k3.json");
    ps_model *m = build(spec);
    ck_assert_uint_eq(ps_model_num_params(m), 127); /* Keras' count_params() */
    size_t in = ps_model_input_dim(m);
    float *x = malloc(B * in * sizeof *x), l1, l2;
    ck_assert_ptr_nonnull(x);
    ps_test_fill_uniform(x, B * in, 3, -1, 1);
    ps_model_set_dropout_seed(m, 1);
    ck_assert_int_eq(ps_model_train_loss(m, x, y3, B, &l1), PS_OK);
    ps_model_set_dropout_seed(m, 2);
    ck_assert_int_eq(ps_model_train_loss(m, x, y3, B, &l2), PS_OK);
    ck_assert_msg(l1 != l2, "the drop-connect Dropout did not drop: %g with both seeds", l1);
    free(x);
    ps_model_free(m);
    check_model("Keras operators (Add/Multiply with a number), Dropout(training=False)", spec, y3,
                1e-3f, 5e-4, 2e-2);
    free(spec);
}
END_TEST

START_TEST(dense_gelu_softmax_output) {
    check_model("dense gelu, final softmax",
                "{\"input_shape\": [9], \"layers\": ["
                "{\"type\": \"Dense\", \"units\": 6, \"activation\": \"gelu\"},"
                "{\"type\": \"Dense\", \"units\": 3, \"activation\": \"softmax\"}],"
                "\"from_logits\": false" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(bce_losses) {
    check_model("bce, one logit",
                "{\"input_shape\": [9], \"layers\": ["
                "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"tanh\"},"
                "{\"type\": \"Dense\", \"units\": 1}],"
                "\"loss\": \"binary_crossentropy\"" SGD,
                y2, 1e-2f, 5e-4, 2e-2);
    check_model("bce, sigmoid outputs (one-hot targets)",
                "{\"input_shape\": [9], \"layers\": ["
                "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"relu\"},"
                "{\"type\": \"Dense\", \"units\": 3, \"activation\": \"sigmoid\"}],"
                "\"loss\": \"binary_crossentropy\", \"from_logits\": false" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

START_TEST(mse_losses) {
    check_model("mse, one sigmoid output",
                "{\"input_shape\": [9], \"layers\": ["
                "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"tanh\"},"
                "{\"type\": \"Dense\", \"units\": 1, \"activation\": \"sigmoid\"}],"
                "\"loss\": \"mse\"" SGD,
                y2, 1e-2f, 5e-4, 2e-2);
    check_model("mse, linear outputs (one-hot targets)",
                "{\"input_shape\": [9], \"layers\": ["
                "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"gelu\"},"
                "{\"type\": \"Dense\", \"units\": 3}],"
                "\"loss\": \"mean_squared_error\"" SGD,
                y3, 1e-3f, 5e-4, 2e-2);
}
END_TEST

/* The loss kernels on their own, against their textbook definitions. */
START_TEST(loss_kernels) {
    enum { R = 5, C = 3 };
    float x[R * C], t[R * C], g[R * C], loss;
    double num[R * C];
    ps_test_fill_uniform(x, R * C, 41, -4, 4);
    ps_test_fill_uniform(t, R * C, 42, 0, 1);
    ps_k_dev *d = ps_k_cpu();
    for (int k = 0; k < 2; k++) {
        int (*f)(ps_k_dev *, float *, const float *, const float *, size_t, size_t, float *) =
            k ? ps_k_mse_overwrite : ps_k_bce_overwrite;
        ck_assert_int_eq(f(d, g, x, t, R, C, &loss), PS_OK);
        double want = 0;
        for (size_t i = 0; i < R * C; i++) {
            double xv = x[i], tv = t[i], s = 1 / (1 + exp(-xv));
            want += k ? (xv - tv) * (xv - tv) : -(tv * log(s) + (1 - tv) * log(1 - s));
        }
        want /= R * C;
        ck_assert_double_eq_tol(loss, want, 1e-5 * (1 + fabs(want)));
        const float h = 1e-2f;
        for (size_t i = 0; i < R * C; i++) {
            float v = x[i], lp, lm;
            x[i] = v + h;
            ck_assert_int_eq(f(d, NULL, x, t, R, C, &lp), PS_OK);
            x[i] = v - h;
            ck_assert_int_eq(f(d, NULL, x, t, R, C, &lm), PS_OK);
            x[i] = v;
            num[i] = ((double)lp - (double)lm) / (2.0 * (double)h);
            ck_assert_msg(fabs(g[i] - num[i]) <= 1e-4 + 1e-2 * fabs(num[i]),
                          "%s d[%zu]: analytic %g numeric %g", k ? "mse" : "bce", i, g[i], num[i]);
        }
        ck_assert_int_eq(f(d, g, x, t, 0, C, &loss), PS_EINVAL);
    }
}
END_TEST

/* The same model on a CUDA device computes the CPU's loss and gradients
 * (within float tolerance). Runs only where a GPU is present: the build hosts
 * have none, so there this test prints a skip line and passes; tests/gpu_checks.sh
 * runs it where there is a GPU. CUDA starts inside the test (Check forks). */
static void cuda_matches_cpu(const char *what, const char *spec) {
    if (ps_k_cuda_device_count() == 0) {
        printf("%s: no CUDA device (built: %s); skipped\n", what,
               ps_k_cuda_built() ? "yes" : "no");
        return;
    }
    ps_model *cpu = build(spec), *gpu = build(spec);
    ps_k_dev *d = NULL;
    char err[256];
    ck_assert_msg(ps_k_dev_open("cuda:0", &d, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_msg(ps_model_set_device(gpu, d, err, sizeof err) == PS_OK, "%s", err);
    size_t n = ps_model_num_params(cpu), in = ps_model_input_dim(cpu), c1, c2;
    float *x = malloc(B * in * sizeof *x), l1, l2;
    ck_assert_ptr_nonnull(x);
    ps_test_fill_uniform(x, B * in, 9, -1, 1);
    ck_assert_int_eq(ps_model_train_step(cpu, x, y3, B, &l1, &c1), PS_OK);
    ck_assert_int_eq(ps_model_train_step(gpu, x, y3, B, &l2, &c2), PS_OK);
    free(x);
    ck_assert_float_eq_tol(l1, l2, 1e-4f * (1 + fabsf(l1)));
    ck_assert_uint_eq(c1, c2);
    long bad = ps_test_first_mismatch(ps_model_grads(gpu), ps_model_grads(cpu), n, 1e-5f, 1e-3f);
    ck_assert_msg(bad < 0, "gradient %ld differs: cuda %g, cpu %g", bad,
                  bad < 0 ? 0.0 : ps_model_grads(gpu)[bad],
                  bad < 0 ? 0.0 : ps_model_grads(cpu)[bad]);
    ps_model_free(gpu);
    ps_model_free(cpu);
    ps_k_dev_close(d);
}

START_TEST(cuda_model_matches_cpu) {
    cuda_matches_cpu("cuda_model_matches_cpu",
                     "{" IMG "\"layers\": ["
                     "{\"type\": \"Conv2D\", \"filters\": 4, \"kernel_size\": 3,"
                     " \"padding\": \"same\", \"activation\": \"relu\"},"
                     "{\"type\": \"MaxPooling2D\"}, {\"type\": \"Dropout\", \"rate\": 0.2},"
                     "{\"type\": \"AveragePooling2D\", \"pool_size\": 1}, {\"type\": \"Flatten\"},"
                     "{\"type\": \"Dense\", \"units\": 5, \"activation\": \"gelu\"},"
                     "{\"type\": \"Dense\", \"units\": 3}]" SGD);
}
END_TEST

START_TEST(cuda_keras_se_block_matches_cpu) {
    char *spec = keras_fixture_spec("apps_block_k3.json");
    cuda_matches_cpu("cuda_keras_se_block_matches_cpu", spec);
    free(spec);
}
END_TEST

START_TEST(cuda_keras_effnet_block_matches_cpu) {
    char *spec = keras_fixture_spec("effnet_block_k3.json");
    cuda_matches_cpu("cuda_keras_effnet_block_matches_cpu", spec);
    free(spec);
}
END_TEST

START_TEST(cuda_separable_keepdims_match_cpu) {
    cuda_matches_cpu("cuda_separable_keepdims_match_cpu",
                     "{" IMG "\"layers\": ["
                     "{\"type\": \"SeparableConv2D\", \"filters\": 4, \"kernel_size\": 3,"
                     " \"strides\": 2, \"padding\": \"same\", \"depth_multiplier\": 2,"
                     " \"activation\": \"relu\"},"
                     "{\"type\": \"GlobalAveragePooling2D\", \"keepdims\": true},"
                     "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 1},"
                     "{\"type\": \"Flatten\"}, {\"type\": \"Dense\", \"units\": 3}]" SGD);
}
END_TEST

/* frozen layers: no weight gradients (NULL dw in the kernels), BN in inference mode */
START_TEST(cuda_frozen_layers_match_cpu) {
    cuda_matches_cpu("cuda_frozen_layers_match_cpu",
                     "{" IMG "\"layers\": ["
                     "{\"type\": \"Conv2D\", \"filters\": 3, \"kernel_size\": 2},"
                     "{\"type\": \"BatchNormalization\", \"trainable\": false},"
                     "{\"type\": \"Conv2D\", \"filters\": 4, \"kernel_size\": 2,"
                     " \"trainable\": false},"
                     "{\"type\": \"DepthwiseConv2D\", \"kernel_size\": 2, \"trainable\": false},"
                     "{\"type\": \"SeparableConv2D\", \"filters\": 3, \"kernel_size\": 2,"
                     " \"trainable\": false},"
                     "{\"type\": \"Flatten\"},"
                     "{\"type\": \"Dense\", \"units\": 5, \"trainable\": false},"
                     "{\"type\": \"Dense\", \"units\": 3}]" SGD);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gradcheck_layers");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, conv_valid_maxpool);
    tcase_add_test(tc, conv_same_strided_avgpool);
    tcase_add_test(tc, maxpool_overlapping_same);
    tcase_add_test(tc, dropout_layers);
    tcase_add_test(tc, dense_gelu_softmax_output);
    tcase_add_test(tc, bce_losses);
    tcase_add_test(tc, mse_losses);
    tcase_add_test(tc, loss_kernels);
    tcase_add_test(tc, separable_conv);
    tcase_add_test(tc, gap_keepdims_then_conv);
    tcase_add_test(tc, applications_layers);
    tcase_add_test(tc, keras_normalization_layer);
    tcase_add_test(tc, keras_se_block);
    tcase_add_test(tc, keras_effnet_block);
    tcase_add_test(tc, keras_operators_and_training_false);
    tcase_add_test(tc, cuda_model_matches_cpu);
    tcase_add_test(tc, cuda_separable_keepdims_match_cpu);
    tcase_add_test(tc, cuda_keras_se_block_matches_cpu);
    tcase_add_test(tc, cuda_frozen_layers_match_cpu);
    tcase_add_test(tc, cuda_keras_effnet_block_matches_cpu);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
