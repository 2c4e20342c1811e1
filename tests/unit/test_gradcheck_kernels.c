/* Finite-difference checks of the backward kernels of the MobileNet-style
 * layers: batch normalization (training mode, through the batch mean and
 * variance: the loss is a function of x through them too), depthwise
 * convolution (strides 1 and 2, same and valid, multipliers 1 and 2, no bias),
 * global average pooling, zero padding, channel split (the adjoint of concat)
 * and the relu6 activation; and of the Keras applications layers: swish, hard
 * sigmoid and hard swish, the element-wise and per-channel products,
 * rescaling, cropping, layer normalization (through the row statistics,
 * with and without gamma and beta) and Keras' Normalization (in x: its
 * statistics are constants). For each, L = sum(g * forward(inputs)) with a fixed
 * random g; backward with dy = g must match central differences of L in every
 * input element (a sample of them for the larger tensors). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "ps_error.h"
#include "testutil.h"

#define MAX_IN 3

/* A layer under test: forward writes y from the inputs, backward writes the
 * gradient of sum(g * y) in each input (grad[t] NULL: not wanted). */
typedef struct gc_op gc_op;
struct gc_op {
    const char *name;
    int nin;
    float *in[MAX_IN];
    size_t n[MAX_IN], ny;
    void (*fwd)(const gc_op *op, float *y);
    void (*bwd)(const gc_op *op, const float *g, float **grad);
    const void *ctx; /* the op's parameters */
};

static float *buf(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *rnd(size_t n, uint64_t seed, float lo, float hi) {
    float *p = buf(n);
    ps_test_fill_uniform(p, n, seed, lo, hi);
    return p;
}

static double loss(const gc_op *op, const float *g, float *y) {
    op->fwd(op, y);
    double l = 0;
    for (size_t j = 0; j < op->ny; j++)
        l += (double)g[j] * y[j];
    return l;
}

/* Central differences with step h against the backward pass, for at most
 * about 60 elements of each input; |analytic - numeric| <= atol + rtol*scale. */
static void gradcheck(const gc_op *op, float h, double atol, double rtol) {
    float *g = rnd(op->ny, 77, -1, 1), *y = buf(op->ny), *grad[MAX_IN];
    for (int t = 0; t < op->nin; t++) {
        grad[t] = buf(op->n[t]);
        for (size_t i = 0; i < op->n[t]; i++)
            grad[t][i] = NAN;
    }
    op->bwd(op, g, grad);
    double largest = 0;
    for (int t = 0; t < op->nin; t++)
        for (size_t i = 0; i < op->n[t]; i += op->n[t] / 60 + 1) {
            float v = op->in[t][i];
            op->in[t][i] = v + h;
            double lp = loss(op, g, y);
            op->in[t][i] = v - h;
            double lm = loss(op, g, y);
            op->in[t][i] = v;
            double num = (lp - lm) / (2.0 * (double)h), ana = grad[t][i];
            double scale = fabs(num) > fabs(ana) ? fabs(num) : fabs(ana);
            ck_assert_msg(fabs(ana - num) <= atol + rtol * scale,
                          "%s: input %d element %zu: backward %.7g, finite difference %.7g",
                          op->name, t, i, ana, num);
            if (scale > largest) largest = scale;
        }
    ck_assert_msg(largest > 1e-2, "%s: every gradient is ~0: the check would prove nothing",
                  op->name);
    for (int t = 0; t < op->nin; t++)
        free(grad[t]);
    free(g), free(y);
}

static void free_inputs(gc_op *op) {
    for (int t = 0; t < op->nin; t++)
        free(op->in[t]);
}

/* ---- batch normalization ---------------------------------------------------- */

/* Keras' Normalization: x [n, c] by fixed per-channel statistics. */
typedef struct {
    size_t n, c;
    const float *mean, *var;
} norm_ctx;

static void norm_fwd(const gc_op *op, float *y) {
    const norm_ctx *k = op->ctx;
    ps_k_norm_forward_overwrite(ps_k_cpu(), y, op->in[0], k->mean, k->var, k->n, k->c, 1e-7f);
}

static void norm_bwd(const gc_op *op, const float *g, float **grad) {
    const norm_ctx *k = op->ctx;
    ps_k_norm_backward_overwrite(ps_k_cpu(), grad[0], g, k->var, k->n, k->c, 1e-7f);
}

/* Channel variances from small to large (the eps floor, a divisor of 1e-7, is
 * checked against the reference in test_kernels_layers.c: its 1e7 slope is
 * beyond a float finite difference). */
START_TEST(keras_normalization) {
    const float mean[4] = {0.5f, -1, 0, 2}, var[4] = {0.04f, 1, 9, 2.25f};
    norm_ctx k = {5, 4, mean, var};
    gc_op op = {.name = "normalization",
                .nin = 1,
                .fwd = norm_fwd,
                .bwd = norm_bwd,
                .ctx = &k,
                .n = {5 * 4},
                .ny = 5 * 4};
    op.in[0] = rnd(op.n[0], 46, -2, 2);
    gradcheck(&op, 1e-2f, 1e-4, 1e-3);
    free_inputs(&op);
}
END_TEST

typedef struct {
    size_t rows, c;
    bool affine; /* gamma and beta are inputs 1 and 2; else both NULL */
    float eps;
    float *mean, *var;
} bn_ctx;

static void bn_fwd(const gc_op *op, float *y) {
    const bn_ctx *k = op->ctx;
    ps_k_bn_forward_train_overwrite(ps_k_cpu(), y, k->mean, k->var, op->in[0],
                                    k->affine ? op->in[1] : NULL, k->affine ? op->in[2] : NULL,
                                    k->rows, k->c, k->eps);
}

/* Backward from the statistics of a forward at the same point (as a layer runs). */
static void bn_bwd(const gc_op *op, const float *g, float **grad) {
    const bn_ctx *k = op->ctx;
    float *y = buf(op->ny);
    bn_fwd(op, y);
    ps_k_bn_backward_overwrite(ps_k_cpu(), grad[0], k->affine ? grad[1] : NULL,
                               k->affine ? grad[2] : NULL, g, op->in[0], k->mean, k->var,
                               k->affine ? op->in[1] : NULL, k->rows, k->c, k->eps);
    free(y);
}

static void check_bn(size_t rows, size_t c, bool affine, float lo, float hi, float eps) {
    bn_ctx k = {rows, c, affine, eps, buf(c), buf(c)};
    gc_op op = {.name = "batch norm",
                .nin = affine ? 3 : 1,
                .ny = rows * c,
                .fwd = bn_fwd,
                .bwd = bn_bwd,
                .ctx = &k};
    op.in[0] = rnd(rows * c, rows + c, lo, hi), op.n[0] = rows * c;
    if (affine) {
        op.in[1] = rnd(c, 5, 0.5f, 2), op.n[1] = c;
        op.in[2] = rnd(c, 6, -1, 1), op.n[2] = c;
    }
    gradcheck(&op, 1e-2f * (hi - lo) / 2, 2e-3, 2e-2);
    free_inputs(&op);
    free(k.mean), free(k.var);
}

START_TEST(bn_through_batch_statistics) {
    check_bn(12, 5, true, -1, 1, 1e-3f);  /* rows = 3 images of 2x2 */
    check_bn(7, 3, false, 1, 3, 1e-3f);   /* no gamma, no beta; mean far from 0 */
    check_bn(40, 2, true, -2, 2, 1e-5f);  /* small eps */
    check_bn(5, 300, true, -1, 1, 1e-3f); /* channels in more than one block */
}
END_TEST

/* ---- depthwise convolution ------------------------------------------------- */

typedef struct {
    ps_k_conv p;
    bool bias; /* input 2 */
} dw_ctx;

static void dw_fwd(const gc_op *op, float *y) {
    const dw_ctx *k = op->ctx;
    ps_k_dwconv2d_forward_overwrite(ps_k_cpu(), &k->p, y, op->in[0], op->in[1],
                                    k->bias ? op->in[2] : NULL);
}

static void dw_bwd(const gc_op *op, const float *g, float **grad) {
    const dw_ctx *k = op->ctx;
    ps_k_dwconv2d_backward_overwrite(ps_k_cpu(), &k->p, grad[0], grad[1], k->bias ? grad[2] : NULL,
                                     g, op->in[0], op->in[1]);
}

static void check_dw(size_t n, size_t h, size_t w, size_t c, size_t kh, size_t kw, size_t mult,
                     size_t s, bool same, bool bias) {
    dw_ctx k = {.bias = bias};
    ck_assert_int_eq(ps_k_dwconv_plan(&k.p, n, h, w, c, kh, kw, mult, s, s, same), PS_OK);
    gc_op op = {
        .name = "depthwise conv", .nin = bias ? 3 : 2, .fwd = dw_fwd, .bwd = dw_bwd, .ctx = &k};
    op.ny = n * k.p.oh * k.p.ow * k.p.cout;
    op.n[0] = n * h * w * c, op.n[1] = kh * kw * k.p.cout, op.n[2] = k.p.cout;
    for (int t = 0; t < op.nin; t++)
        op.in[t] = rnd(op.n[t], 20 + t, -1, 1);
    gradcheck(&op, 1e-2f, 1e-3, 1e-3); /* linear in each input: rounding only */
    free_inputs(&op);
}

START_TEST(dwconv) {
    check_dw(2, 5, 4, 3, 3, 3, 1, 1, true, true);
    check_dw(2, 5, 4, 3, 3, 3, 2, 2, true, true);
    check_dw(1, 7, 6, 2, 3, 2, 2, 2, false, false);
    check_dw(2, 6, 6, 4, 3, 3, 1, 2, false, true);
}
END_TEST

/* ---- shape ops and relu6 ------------------------------------------------------ */

typedef struct {
    size_t n, h, w, c, top, bottom, left, right;
} shape_ctx;

static void gap_fwd(const gc_op *op, float *y) {
    const shape_ctx *k = op->ctx;
    ps_k_gap_forward_overwrite(ps_k_cpu(), y, op->in[0], k->n, k->h * k->w, k->c);
}

static void gap_bwd(const gc_op *op, const float *g, float **grad) {
    const shape_ctx *k = op->ctx;
    ps_k_gap_backward_overwrite(ps_k_cpu(), grad[0], g, k->n, k->h * k->w, k->c);
}

static void pad_fwd(const gc_op *op, float *y) {
    const shape_ctx *k = op->ctx;
    ps_k_pad2d_forward_overwrite(ps_k_cpu(), y, op->in[0], k->n, k->h, k->w, k->c, k->top,
                                 k->bottom, k->left, k->right);
}

static void pad_bwd(const gc_op *op, const float *g, float **grad) {
    const shape_ctx *k = op->ctx;
    ps_k_pad2d_backward_overwrite(ps_k_cpu(), grad[0], g, k->n, k->h, k->w, k->c, k->top, k->bottom,
                                  k->left, k->right);
}

/* x [rows = n, c] concatenated at column `top` of a zero [rows, w] matrix. */
static void concat_fwd(const gc_op *op, float *y) {
    const shape_ctx *k = op->ctx;
    memset(y, 0, op->ny * sizeof *y);
    ps_k_concat_cols_overwrite(ps_k_cpu(), y, op->in[0], k->n, k->w, k->top, k->c);
}

static void concat_bwd(const gc_op *op, const float *g, float **grad) {
    const shape_ctx *k = op->ctx;
    ps_k_split_cols_overwrite(ps_k_cpu(), grad[0], g, k->n, k->w, k->top, k->c);
}

static void relu6_fwd(const gc_op *op, float *y) {
    ps_k_act_forward_overwrite(ps_k_cpu(), PS_K_ACT_RELU6, y, op->in[0], op->n[0]);
}

static void relu6_bwd(const gc_op *op, const float *g, float **grad) {
    float *y = buf(op->n[0]);
    relu6_fwd(op, y);
    ps_k_act_backward_overwrite(ps_k_cpu(), PS_K_ACT_RELU6, grad[0], g, NULL, y, op->n[0]);
    free(y);
}

START_TEST(shape_ops) {
    shape_ctx k = {3, 4, 5, 6, 0, 0, 0, 0};
    gc_op gap = {.name = "global average pooling",
                 .nin = 1,
                 .fwd = gap_fwd,
                 .bwd = gap_bwd,
                 .ctx = &k,
                 .n = {3 * 4 * 5 * 6},
                 .ny = 3 * 6};
    gap.in[0] = rnd(gap.n[0], 30, -1, 1);
    gradcheck(&gap, 1e-2f, 1e-4, 1e-3);
    free_inputs(&gap);

    shape_ctx kp = {2, 3, 4, 5, 1, 0, 2, 1};
    gc_op pad = {.name = "zero padding",
                 .nin = 1,
                 .fwd = pad_fwd,
                 .bwd = pad_bwd,
                 .ctx = &kp,
                 .n = {2 * 3 * 4 * 5},
                 .ny = 2 * 4 * 7 * 5};
    pad.in[0] = rnd(pad.n[0], 31, -1, 1);
    gradcheck(&pad, 1e-2f, 1e-4, 1e-3);
    free_inputs(&pad);

    shape_ctx kc = {.n = 7, .c = 3, .w = 8, .top = 4}; /* columns [4, 7) of 8 */
    gc_op cat = {.name = "concat / split",
                 .nin = 1,
                 .fwd = concat_fwd,
                 .bwd = concat_bwd,
                 .ctx = &kc,
                 .n = {7 * 3},
                 .ny = 7 * 8};
    cat.in[0] = rnd(cat.n[0], 32, -1, 1);
    gradcheck(&cat, 1e-2f, 1e-4, 1e-3);
    free_inputs(&cat);

    /* relu6 on both sides of its kinks, no input within the step of 0 or 6 */
    gc_op r6 = {
        .name = "relu6", .nin = 1, .fwd = relu6_fwd, .bwd = relu6_bwd, .n = {200}, .ny = 200};
    r6.in[0] = rnd(200, 33, -3, 9);
    for (size_t i = 0; i < 200; i++) {
        float *v = &r6.in[0][i];
        if (fabsf(*v) < 0.05f || fabsf(*v - 6) < 0.05f) *v += 0.1f;
    }
    gradcheck(&r6, 1e-2f, 1e-4, 1e-3);
    free_inputs(&r6);
}
END_TEST

/* ---- Keras applications layers ------------------------------------------------ */

typedef struct {
    ps_k_act act;
    bool by_x; /* the backward reads x (else y) */
} act_ctx;

static void act_fwd(const gc_op *op, float *y) {
    const act_ctx *k = op->ctx;
    ps_k_act_forward_overwrite(ps_k_cpu(), k->act, y, op->in[0], op->n[0]);
}

static void act_bwd(const gc_op *op, const float *g, float **grad) {
    const act_ctx *k = op->ctx;
    float *y = buf(op->n[0]);
    act_fwd(op, y);
    ps_k_act_backward_overwrite(ps_k_cpu(), k->act, grad[0], g, k->by_x ? op->in[0] : NULL,
                                k->by_x ? NULL : y, op->n[0]);
    free(y);
}

/* x in [-6, 6], none within the step of a kink at -3 or 3. */
static void check_act(const char *name, ps_k_act act, bool by_x) {
    act_ctx k = {act, by_x};
    gc_op op = {.name = name, .nin = 1, .fwd = act_fwd, .bwd = act_bwd, .ctx = &k};
    op.n[0] = op.ny = 200;
    op.in[0] = rnd(200, 34, -6, 6);
    for (size_t i = 0; i < 200; i++) {
        float *v = &op.in[0][i];
        if (fabsf(fabsf(*v) - 3) < 0.05f) *v += 0.1f;
    }
    gradcheck(&op, 1e-2f, 1e-4, 1e-3);
    free_inputs(&op);
}

START_TEST(activations) {
    check_act("swish", PS_K_ACT_SWISH, true);
    check_act("hard sigmoid", PS_K_ACT_HARD_SIGMOID, false);
    check_act("hard swish", PS_K_ACT_HARD_SWISH, true);
}
END_TEST

typedef struct {
    size_t n, hw, c;
    float scale, offset;
} prod_ctx;

static void mul_fwd(const gc_op *op, float *y) {
    ps_k_mul_forward_overwrite(ps_k_cpu(), y, op->in[0], op->in[1], op->ny);
}

static void mul_bwd(const gc_op *op, const float *g, float **grad) {
    ps_k_mul_backward_overwrite(ps_k_cpu(), grad[0], grad[1], g, op->in[0], op->in[1], op->ny);
}

static void mulc_fwd(const gc_op *op, float *y) {
    const prod_ctx *k = op->ctx;
    ps_k_mul_channels_forward_overwrite(ps_k_cpu(), y, op->in[0], op->in[1], k->n, k->hw, k->c);
}

static void mulc_bwd(const gc_op *op, const float *g, float **grad) {
    const prod_ctx *k = op->ctx;
    ps_k_mul_channels_backward_overwrite(ps_k_cpu(), grad[0], grad[1], g, op->in[0], op->in[1],
                                         k->n, k->hw, k->c);
}

static void rescale_fwd(const gc_op *op, float *y) {
    const prod_ctx *k = op->ctx;
    ps_k_rescale_forward_overwrite(ps_k_cpu(), y, op->in[0], k->scale, k->offset, op->ny);
}

static void rescale_bwd(const gc_op *op, const float *g, float **grad) {
    const prod_ctx *k = op->ctx;
    ps_k_rescale_backward_overwrite(ps_k_cpu(), grad[0], g, k->scale, op->ny);
}

static void crop_fwd(const gc_op *op, float *y) {
    const shape_ctx *k = op->ctx;
    ps_k_crop2d_forward_overwrite(ps_k_cpu(), y, op->in[0], k->n, k->h, k->w, k->c, k->top,
                                  k->bottom, k->left, k->right);
}

static void crop_bwd(const gc_op *op, const float *g, float **grad) {
    const shape_ctx *k = op->ctx;
    ps_k_crop2d_backward_overwrite(ps_k_cpu(), grad[0], g, k->n, k->h, k->w, k->c, k->top,
                                   k->bottom, k->left, k->right);
}

START_TEST(products_rescale_crop) {
    gc_op mul = {.name = "multiply", .nin = 2, .fwd = mul_fwd, .bwd = mul_bwd, .n = {90, 90}};
    mul.ny = 90;
    mul.in[0] = rnd(90, 40, -2, 2), mul.in[1] = rnd(90, 41, -2, 2);
    gradcheck(&mul, 1e-2f, 1e-4, 1e-3);
    free_inputs(&mul);

    prod_ctx kc = {.n = 3, .hw = 10, .c = 7};
    gc_op se = {.name = "channel multiply (squeeze-and-excitation)",
                .nin = 2,
                .fwd = mulc_fwd,
                .bwd = mulc_bwd,
                .ctx = &kc,
                .n = {3 * 10 * 7, 3 * 7},
                .ny = 3 * 10 * 7};
    se.in[0] = rnd(se.n[0], 42, -2, 2), se.in[1] = rnd(se.n[1], 43, 0, 1);
    gradcheck(&se, 1e-2f, 1e-3, 1e-3);
    free_inputs(&se);

    prod_ctx kr = {.scale = -2.5f, .offset = 0.5f}; /* a gradient large enough to see */
    gc_op rs = {.name = "rescaling",
                .nin = 1,
                .fwd = rescale_fwd,
                .bwd = rescale_bwd,
                .ctx = &kr,
                .n = {100},
                .ny = 100};
    rs.in[0] = rnd(100, 44, -2, 2);
    gradcheck(&rs, 1e-2f, 1e-4, 1e-3);
    free_inputs(&rs);

    shape_ctx kp = {2, 6, 5, 3, 1, 2, 0, 1}; /* 6x5 cropped to 3x4 */
    gc_op crop = {.name = "cropping",
                  .nin = 1,
                  .fwd = crop_fwd,
                  .bwd = crop_bwd,
                  .ctx = &kp,
                  .n = {2 * 6 * 5 * 3},
                  .ny = 2 * 3 * 4 * 3};
    crop.in[0] = rnd(crop.n[0], 45, -1, 1);
    gradcheck(&crop, 1e-2f, 1e-4, 1e-3);
    free_inputs(&crop);
}
END_TEST

typedef struct {
    size_t rows, c;
    bool affine; /* gamma and beta are inputs 1 and 2; else both NULL */
    float eps;
    float *mean, *rstd;
} ln_ctx;

static void ln_fwd(const gc_op *op, float *y) {
    const ln_ctx *k = op->ctx;
    ps_k_ln_forward_overwrite(ps_k_cpu(), y, k->mean, k->rstd, op->in[0],
                              k->affine ? op->in[1] : NULL, k->affine ? op->in[2] : NULL, k->rows,
                              k->c, k->eps);
}

/* Backward from the statistics of a forward at the same point (as a layer runs). */
static void ln_bwd(const gc_op *op, const float *g, float **grad) {
    const ln_ctx *k = op->ctx;
    float *y = buf(op->ny);
    ln_fwd(op, y);
    ps_k_ln_backward_overwrite(ps_k_cpu(), grad[0], k->affine ? grad[1] : NULL,
                               k->affine ? grad[2] : NULL, g, op->in[0], k->mean, k->rstd,
                               k->affine ? op->in[1] : NULL, k->rows, k->c);
    free(y);
}

/* Step h: a row of few channels can have a small spread, over which the
 * normalization bends sharply (rows of 3 at h = 1e-2 came within 0.9 of the
 * tolerance from the curvature alone); such cases take a smaller step. */
static void check_ln(size_t rows, size_t c, bool affine, float lo, float hi, float eps, float h) {
    ln_ctx k = {rows, c, affine, eps, buf(rows), buf(rows)};
    gc_op op = {.name = "layer norm",
                .nin = affine ? 3 : 1,
                .ny = rows * c,
                .fwd = ln_fwd,
                .bwd = ln_bwd,
                .ctx = &k};
    op.in[0] = rnd(rows * c, rows + c + 50, lo, hi), op.n[0] = rows * c;
    if (affine) {
        op.in[1] = rnd(c, 7, 0.5f, 2), op.n[1] = c;
        op.in[2] = rnd(c, 8, -1, 1), op.n[2] = c;
    }
    gradcheck(&op, h, 2e-3, 2e-2);
    free_inputs(&op);
    free(k.mean), free(k.rstd);
}

START_TEST(layer_norm_through_row_statistics) {
    check_ln(6, 5, true, -1, 1, 1e-3f, 1e-2f);  /* Keras' default eps */
    check_ln(4, 7, false, 1, 3, 1e-3f, 1e-2f);  /* no gamma, no beta; mean far from 0 */
    check_ln(3, 40, true, -2, 2, 1e-5f, 2e-2f); /* small eps, wider rows */
    check_ln(20, 3, true, -1, 1, 1e-3f, 2e-3f); /* many rows: dgamma and dbeta sum over them */
}
END_TEST

int main(void) {
    Suite *s = suite_create("gradcheck_kernels");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, bn_through_batch_statistics);
    tcase_add_test(tc, dwconv);
    tcase_add_test(tc, shape_ops);
    tcase_add_test(tc, activations);
    tcase_add_test(tc, products_rescale_crop);
    tcase_add_test(tc, layer_norm_through_row_statistics);
    tcase_add_test(tc, keras_normalization);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
