/* The dense kernels of kernels.h (GEMM, fp16/bf16 GEMM, bias, activations and
 * the kinks of hard sigmoid / hard swish,
 * softmax, losses, reductions) against the naive reference in kernels/ref.c,
 * on seeded random inputs of odd sizes; overwrite variants must overwrite and
 * accumulate variants accumulate. The same checks run on a CUDA device if
 * present. Convolution, pooling and dropout are in test_kernels_conv.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ew.h"
#include "kernels.h"
#include "ps_error.h"
#include "ref.h"
#include "testutil.h"

static const size_t sizes[] = {1, 7, 33, 129};
#define NSIZES (sizeof sizes / sizeof sizes[0])
static const ps_k_act acts[] = {PS_K_ACT_LINEAR, PS_K_ACT_RELU,         PS_K_ACT_SIGMOID,
                                PS_K_ACT_TANH,   PS_K_ACT_GELU,         PS_K_ACT_RELU6,
                                PS_K_ACT_SWISH,  PS_K_ACT_HARD_SIGMOID, PS_K_ACT_HARD_SWISH};
#define NACTS (sizeof acts / sizeof acts[0])

static float *host(size_t n, uint64_t seed, float lo, float hi) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    ps_test_fill_uniform(p, n, seed, lo, hi);
    return p;
}

static float *hcopy(const float *src, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    memcpy(p, src, n * sizeof *p);
    return p;
}

/* A device copy of n floats (or int32s) from the host. */
static void *dev_from(ps_k_dev *d, const void *src, size_t bytes) {
    void *p;
    ck_assert_int_eq(ps_k_malloc(d, bytes, &p), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_dev(d, p, src, bytes), PS_OK);
    return p;
}

/* Copies a device result back into host buffer out and frees it. */
static void dev_take(ps_k_dev *d, float *out, void *p, size_t n) {
    ck_assert_int_eq(ps_k_sync(d), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_host(d, out, p, n * sizeof(float)), PS_OK);
    ps_k_free(d, p);
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         float atol, float rtol) {
    long i = ps_test_first_mismatch(got, want, n, atol, rtol);
    ck_assert_msg(i < 0, "%s: element %ld: got %.9g want %.9g", what, i, i < 0 ? 0.0 : got[i],
                  i < 0 ? 0.0 : want[i]);
}

/* ---- the checks, for any device ---------------------------------------- */

static void check_gemm(ps_k_dev *d) {
    const float alphas[] = {1.0f, 0.5f, 1.0f}, betas[] = {0.0f, 1.0f, -2.0f};
    uint64_t seed = 1;
    for (size_t mi = 0; mi < NSIZES; mi++)
        for (size_t ni = 0; ni < NSIZES; ni++)
            for (size_t ki = 0; ki < NSIZES; ki++)
                for (int t = 0; t < 4; t++) {
                    size_t M = sizes[mi], N = sizes[ni], K = sizes[ki];
                    bool ta = t & 1, tb = t & 2;
                    int ab = (int)(seed % 3);
                    float *A = host(M * K, seed++, -1, 1), *B = host(K * N, seed++, -1, 1);
                    float *C = host(M * N, seed++, -1, 1), *want = hcopy(C, M * N);
                    if (betas[ab] == 0.0f) /* beta 0 must not read C */
                        for (size_t i = 0; i < M * N; i++)
                            C[i] = NAN;
                    ps_ref_gemm(ta, tb, M, N, K, alphas[ab], A, B, betas[ab], want);
                    void *dA = dev_from(d, A, M * K * 4), *dB = dev_from(d, B, K * N * 4);
                    void *dC = dev_from(d, C, M * N * 4);
                    ps_k_gemm(d, ta, tb, M, N, K, alphas[ab], dA, dB, betas[ab], dC);
                    dev_take(d, C, dC, M * N);
                    char what[96];
                    snprintf(what, sizeof what, "gemm M=%zu N=%zu K=%zu ta=%d tb=%d beta=%g", M, N,
                             K, ta, tb, betas[ab]);
                    expect_close(what, C, want, M * N, 1e-5f, 1e-4f);
                    ps_k_free(d, dA);
                    ps_k_free(d, dB);
                    free(A), free(B), free(C), free(want);
                }
    /* K = 0: C = beta * C */
    float c[6] = {1, 2, 3, 4, 5, 6}, want[6] = {2, 4, 6, 8, 10, 12}, dummy = 0;
    void *dC = dev_from(d, c, sizeof c), *dx = dev_from(d, &dummy, 4);
    ps_k_gemm(d, false, false, 2, 3, 0, 1.0f, dx, dx, 2.0f, dC);
    dev_take(d, c, dC, 6);
    expect_close("gemm K=0", c, want, 6, 0, 0);
    ps_k_free(d, dx);
}

static void check_bias_and_colsum(ps_k_dev *d) {
    for (size_t ri = 0; ri < NSIZES; ri++)
        for (size_t ci = 0; ci < NSIZES; ci++) {
            size_t R = sizes[ri], C = sizes[ci];
            float *x = host(R * C, 10 + ri, -2, 2), *b = host(C, 20 + ci, -1, 1);
            float *want = hcopy(x, R * C), *got = hcopy(x, R * C);
            ps_ref_bias_add_rows_acc(want, b, R, C);
            void *dx = dev_from(d, x, R * C * 4), *db = dev_from(d, b, C * 4);
            ps_k_bias_add_rows_acc(d, dx, db, R, C);
            dev_take(d, got, dx, R * C);
            expect_close("bias_add_rows_acc", got, want, R * C, 1e-6f, 1e-6f);

            /* col sums: overwrite ignores the old contents, acc adds to them */
            float *out = host(C, 30 + ci, -5, 5), *wacc = hcopy(out, C), *wover = hcopy(out, C);
            ps_ref_col_sum_overwrite(wover, x, R, C);
            ps_ref_col_sum_acc(wacc, x, R, C);
            for (int acc = 0; acc < 2; acc++) {
                float *o = hcopy(out, C);
                if (!acc)
                    for (size_t i = 0; i < C; i++)
                        o[i] = 1e30f;
                void *dx2 = dev_from(d, x, R * C * 4), *dout = dev_from(d, o, C * 4);
                if (acc)
                    ps_k_col_sum_acc(d, dout, dx2, R, C);
                else
                    ps_k_bias_grad_overwrite(d, dout, dx2, R, C);
                dev_take(d, o, dout, C);
                expect_close(acc ? "col_sum_acc" : "col_sum_overwrite", o, acc ? wacc : wover, C,
                             1e-4f, 1e-5f);
                ps_k_free(d, dx2);
                free(o);
            }
            ps_k_free(d, db);
            free(x), free(b), free(want), free(got), free(out), free(wacc), free(wover);
        }
}

/* Backward gets only what the contract says the activation reads (x for GELU,
 * swish and hard swish, y for the others; the other is NULL). */
static void check_activations(ps_k_dev *d) {
    for (size_t ai = 0; ai < NACTS; ai++)
        for (size_t si = 0; si < NSIZES; si++) {
            size_t n = sizes[si] * 3;
            ps_k_act act = acts[ai];
            float *x = host(n, 40 + si, -6, 6), *y = host(n, 1, 0, 1), *want = host(n, 1, 0, 1);
            x[0] = 0.0f;                            /* relu at 0 */
            if (n > 2) x[1] = -30.0f, x[2] = 30.0f; /* sigmoid/tanh saturation */
            ps_ref_act_forward_overwrite(act, want, x, n);
            void *dx = dev_from(d, x, n * 4), *dy = dev_from(d, y, n * 4);
            ps_k_act_forward_overwrite(d, act, dy, dx, n);
            dev_take(d, y, dy, n);
            expect_close("act_forward", y, want, n, 1e-6f, 1e-5f);
            ps_k_act_forward_overwrite(d, act, dx, dx, n); /* in place */
            float *inplace = hcopy(x, n);
            dev_take(d, inplace, dx, n);
            expect_close("act_forward in place", inplace, y, n, 0, 0);
            free(inplace);

            bool by_x = act == PS_K_ACT_GELU || act == PS_K_ACT_SWISH || act == PS_K_ACT_HARD_SWISH;
            float *g = host(n, 50 + si, -1, 1), *old = host(n, 60 + si, -1, 1);
            float *wover = hcopy(old, n), *wacc = hcopy(old, n);
            ps_ref_act_backward_overwrite(act, wover, g, x, NULL, n);
            ps_ref_act_backward_acc(act, wacc, g, x, NULL, n);
            for (int acc = 0; acc < 2; acc++) {
                float *o = hcopy(old, n);
                void *dg = dev_from(d, g, n * 4), *din = dev_from(d, by_x ? x : y, n * 4);
                void *dold = dev_from(d, o, n * 4);
                const float *xin = by_x ? din : NULL, *yin = by_x ? NULL : din;
                if (acc)
                    ps_k_act_backward_acc(d, act, dold, dg, xin, yin, n);
                else
                    ps_k_act_backward_overwrite(d, act, dold, dg, xin, yin, n);
                dev_take(d, o, dold, n);
                char what[64];
                snprintf(what, sizeof what, "act %d backward_%s", (int)act,
                         acc ? "acc" : "overwrite");
                expect_close(what, o, acc ? wacc : wover, n, 1e-6f, 1e-5f);
                ps_k_act_backward_overwrite(d, act, dg, dg, xin, yin, n); /* in place */
                dev_take(d, o, dg, n);
                expect_close("act_backward in place", o, wover, n, 1e-6f, 1e-5f);
                ps_k_free(d, din);
                free(o);
            }
            free(x), free(y), free(want), free(g), free(old), free(wover), free(wacc);
        }
}

/* Hand-computed values of hard sigmoid and hard swish at and around their
 * kinks x = -3 and 3, with TensorFlow's derivative there (0 for hard sigmoid
 * at both; hard swish 0 at -3, 1 at 3), and of swish at 0 and +-1. */
static void check_activation_kinks(ps_k_dev *d) {
    const float x[] = {-3.0f, 3.0f, -3.5f, -2.5f, 0.0f, 2.5f, 3.5f, -1.0f, 1.0f};
    enum { N = sizeof x / sizeof x[0] };
    const float s1 = 0.7310585786300049f; /* sigmoid(1) */
    const struct {
        ps_k_act act;
        float y[N], dy[N];
    } want[] = {
        {PS_K_ACT_HARD_SIGMOID,
         {0, 1, 0, 1.0f / 12, 0.5f, 11.0f / 12, 1, 1.0f / 3, 2.0f / 3},
         {0, 0, 0, 1.0f / 6, 1.0f / 6, 1.0f / 6, 0, 1.0f / 6, 1.0f / 6}},
        {PS_K_ACT_HARD_SWISH,
         {0, 3, 0, -2.5f / 12, 0, 2.5f * 11 / 12, 3.5f, -1.0f / 3, 2.0f / 3},
         {0, 1, 0, -2.0f / 6, 0.5f, 8.0f / 6, 1, 1.0f / 6, 5.0f / 6}},
        {PS_K_ACT_SWISH,
         {-3.0f / (1 + expf(3)), 3.0f / (1 + expf(-3)), -3.5f / (1 + expf(3.5f)),
          -2.5f / (1 + expf(2.5f)), 0, 2.5f / (1 + expf(-2.5f)), 3.5f / (1 + expf(-3.5f)),
          -(1 - s1), s1},
         {NAN, NAN, NAN, NAN, 0.5f, NAN, NAN, (1 - s1) - (1 - s1) * s1, s1 + s1 * (1 - s1)}},
    };
    float ones[N], y[N], g[N];
    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        void *dx = dev_from(d, x, sizeof x), *dy = dev_from(d, x, sizeof x);
        void *dg = dev_from(d, ones, sizeof ones);
        ps_k_act_forward_overwrite(d, want[k].act, dy, dx, N);
        ps_k_act_backward_overwrite(d, want[k].act, dg, dg, dx, dy, N);
        ck_assert_int_eq(ps_k_sync(d), PS_OK);
        ck_assert_int_eq(ps_k_copy_to_host(d, y, dy, sizeof y), PS_OK);
        dev_take(d, g, dg, N);
        ps_k_free(d, dx), ps_k_free(d, dy);
        for (int i = 0; i < N; i++) {
            ck_assert_msg(fabsf(y[i] - want[k].y[i]) <= 1e-6f, "act %d f(%g) = %.9g, want %.9g",
                          (int)want[k].act, x[i], y[i], want[k].y[i]);
            if (isnan(want[k].dy[i])) continue;
            ck_assert_msg(fabsf(g[i] - want[k].dy[i]) <= 1e-6f, "act %d f'(%g) = %.9g, want %.9g",
                          (int)want[k].act, x[i], g[i], want[k].dy[i]);
        }
    }
}

static int32_t *labels_for(size_t rows, size_t cols, uint64_t seed) {
    int32_t *y = malloc(rows * sizeof *y);
    ps_test_rng r;
    ps_test_rng_seed(&r, seed);
    for (size_t i = 0; i < rows; i++) {
        y[i] = (int32_t)ps_test_rng_uniform(&r, 0, (float)cols);
        if ((size_t)y[i] >= cols) y[i] = (int32_t)cols - 1;
    }
    return y;
}

static void check_softmax_ce(ps_k_dev *d) {
    for (size_t ri = 0; ri < NSIZES; ri++)
        for (size_t ci = 0; ci < NSIZES; ci++) {
            size_t R = sizes[ri], C = sizes[ci];
            float *z = host(R * C, 70 + ri * 7 + ci, -8, 8), *p = host(R * C, 1, 0, 1);
            float *wp = host(R * C, 1, 0, 1), *g = host(R * C, 2, 0, 1), *wg = host(R * C, 3, 0, 1);
            if (R * C > 1) z[1] = 80.0f; /* large logit: must stay finite */
            int32_t *y = labels_for(R, C, 80 + ri);
            ps_ref_softmax_rows_overwrite(wp, z, R, C);
            void *dz = dev_from(d, z, R * C * 4), *dp = dev_from(d, p, R * C * 4);
            ps_k_softmax_rows_overwrite(d, dp, dz, R, C);
            dev_take(d, p, dp, R * C);
            expect_close("softmax_rows_overwrite", p, wp, R * C, 1e-6f, 1e-5f);

            float loss = -1, wloss = -2, loss2 = -3;
            ck_assert_int_eq(ps_ref_softmax_ce_overwrite(wg, z, y, R, C, &wloss), PS_OK);
            void *dy = dev_from(d, y, R * 4), *dg = dev_from(d, g, R * C * 4);
            ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, dg, dz, dy, R, C, &loss), PS_OK);
            ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, NULL, dz, dy, R, C, &loss2), PS_OK);
            dev_take(d, g, dg, R * C);
            ck_assert(isfinite(loss));
            expect_close("softmax_ce loss", &loss, &wloss, 1, 1e-5f, 1e-5f);
            expect_close("softmax_ce loss, no dlogits", &loss2, &wloss, 1, 1e-5f, 1e-5f);
            expect_close("softmax_ce dlogits", g, wg, R * C, 1e-6f, 1e-4f);

            size_t hits = 99, whits = 98;
            ck_assert_int_eq(ps_ref_argmax_correct(z, y, R, C, &whits), PS_OK);
            ck_assert_int_eq(ps_k_argmax_correct(d, dz, dy, R, C, &hits), PS_OK);
            ck_assert_uint_eq(hits, whits);
            ps_k_free(d, dz);
            ps_k_free(d, dy);
            free(z), free(p), free(wp), free(g), free(wg), free(y);
        }
}

static void check_ce_errors_and_ties(ps_k_dev *d) {
    float z[6] = {1, 3, 3, 2, 2, 0}, loss = 0;
    int32_t bad[2] = {0, 3}, neg[2] = {-1, 0}, y[2] = {1, 0};
    void *dz = dev_from(d, z, sizeof z), *dbad = dev_from(d, bad, 8), *dneg = dev_from(d, neg, 8);
    void *dy = dev_from(d, y, 8);
    ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, NULL, dz, dbad, 2, 3, &loss), PS_EINVAL);
    ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, NULL, dz, dneg, 2, 3, &loss), PS_EINVAL);
    ck_assert_int_eq(ps_k_softmax_ce_overwrite(d, NULL, dz, dy, 0, 3, &loss), PS_EINVAL);
    size_t hits = 7;
    ck_assert_int_eq(ps_k_argmax_correct(d, dz, dy, 2, 3, &hits), PS_OK);
    ck_assert_uint_eq(hits, 2); /* ties go to the first index: row 0 -> 1, row 1 -> 0 */
    ck_assert_int_eq(ps_k_argmax_correct(d, dz, dy, 0, 3, &hits), PS_OK);
    ck_assert_uint_eq(hits, 0);
    /* NaN never wins over a number, even in front */
    float zn[6] = {NAN, 1, 2, 0, NAN, -1};
    int32_t yn[2] = {2, 0};
    void *dzn = dev_from(d, zn, sizeof zn), *dyn = dev_from(d, yn, sizeof yn);
    ck_assert_int_eq(ps_k_argmax_correct(d, dzn, dyn, 2, 3, &hits), PS_OK);
    ck_assert_uint_eq(hits, 2);
    ps_k_free(d, dzn), ps_k_free(d, dyn);
    ps_k_free(d, dz), ps_k_free(d, dbad), ps_k_free(d, dneg), ps_k_free(d, dy);
}

/* fp16/bf16 GEMM against the reference on rounded inputs; F32 must be ps_k_gemm. */
static void check_gemm_ex(ps_k_dev *d) {
    const ps_k_prec precs[] = {PS_K_PREC_F32, PS_K_PREC_F16, PS_K_PREC_BF16};
    const size_t dims[] = {1, 7, 33};
    uint64_t seed = 500;
    for (size_t pi = 0; pi < 3; pi++)
        for (size_t mi = 0; mi < 3; mi++)
            for (size_t ni = 0; ni < 3; ni++)
                for (size_t ki = 0; ki < 3; ki++)
                    for (int t = 0; t < 4; t++) {
                        size_t M = dims[mi], N = dims[ni], K = dims[ki];
                        bool ta = t & 1, tb = t & 2;
                        float beta = (seed & 1) ? 1.0f : 0.0f, alpha = 0.75f;
                        float *A = host(M * K, seed++, -2, 2), *B = host(K * N, seed++, -2, 2);
                        float *C = host(M * N, seed++, -1, 1), *want = hcopy(C, M * N);
                        if (beta == 0.0f)
                            for (size_t i = 0; i < M * N; i++)
                                C[i] = NAN;
                        ck_assert_int_eq(
                            ps_ref_gemm_ex(precs[pi], ta, tb, M, N, K, alpha, A, B, beta, want),
                            PS_OK);
                        void *dA = dev_from(d, A, M * K * 4), *dB = dev_from(d, B, K * N * 4);
                        void *dC = dev_from(d, C, M * N * 4);
                        ck_assert_int_eq(
                            ps_k_gemm_ex(d, precs[pi], ta, tb, M, N, K, alpha, dA, dB, beta, dC),
                            PS_OK);
                        dev_take(d, C, dC, M * N);
                        char what[96];
                        snprintf(what, sizeof what, "gemm_ex prec=%d M=%zu N=%zu K=%zu ta=%d tb=%d",
                                 (int)precs[pi], M, N, K, ta, tb);
                        expect_close(what, C, want, M * N, 1e-5f, 1e-4f);
                        ps_k_free(d, dA), ps_k_free(d, dB);
                        free(A), free(B), free(C), free(want);
                    }
    /* the rounding is really applied: 1 + 2^-9 is exact in fp16, 1 in bf16 */
    float a[2] = {1.0f + 0x1p-9f, 1.0f}, b[2] = {1.0f, 0x1p-12f}, c = 0, want;
    for (size_t pi = 0; pi < 3; pi++) {
        void *dA = dev_from(d, a, 8), *dB = dev_from(d, b, 8), *dC = dev_from(d, &c, 4);
        ck_assert_int_eq(ps_k_gemm_ex(d, precs[pi], false, false, 1, 1, 2, 1.0f, dA, dB, 0.0f, dC),
                         PS_OK);
        dev_take(d, &c, dC, 1);
        want = precs[pi] == PS_K_PREC_BF16 ? 1.0f + 0x1p-12f : 1.0f + 0x1p-9f + 0x1p-12f;
        ck_assert_msg(c == want, "gemm_ex prec %d: got %.9g want %.9g", (int)precs[pi], c, want);
        ps_k_free(d, dA), ps_k_free(d, dB);
    }
}

/* BCE and MSE against the textbook formulas, with extreme logits; bad sizes. */
static void check_losses(ps_k_dev *d) {
    for (size_t ri = 0; ri < NSIZES; ri++)
        for (size_t ci = 0; ci < 3; ci++) {
            size_t R = sizes[ri], C = sizes[ci], n = R * C;
            float *x = host(n, 600 + ri * 5 + ci, -8, 8), *t = host(n, 700 + ri, 0, 1);
            if (n > 4) x[0] = 80, x[1] = -80, t[2] = 0, t[3] = 1; /* saturation, hard targets */
            for (int mse = 0; mse < 2; mse++) {
                float *g = host(n, 1, 0, 1), *wg = host(n, 2, 0, 1), loss = -1, loss2 = -2;
                float wloss = -3;
                for (size_t i = 0; i < n; i++)
                    g[i] = NAN; /* overwritten */
                int rc = mse ? ps_ref_mse_overwrite(wg, x, t, R, C, &wloss)
                             : ps_ref_bce_overwrite(wg, x, t, R, C, &wloss);
                ck_assert_int_eq(rc, PS_OK);
                void *dx = dev_from(d, x, n * 4), *dt = dev_from(d, t, n * 4);
                void *dg = dev_from(d, g, n * 4);
                rc = mse ? ps_k_mse_overwrite(d, dg, dx, dt, R, C, &loss)
                         : ps_k_bce_overwrite(d, dg, dx, dt, R, C, &loss);
                ck_assert_int_eq(rc, PS_OK);
                rc = mse ? ps_k_mse_overwrite(d, NULL, dx, dt, R, C, &loss2)
                         : ps_k_bce_overwrite(d, NULL, dx, dt, R, C, &loss2);
                ck_assert_int_eq(rc, PS_OK);
                dev_take(d, g, dg, n);
                const char *name = mse ? "mse" : "bce";
                ck_assert_msg(isfinite(loss), "%s loss not finite", name);
                expect_close(name, &loss, &wloss, 1, 1e-6f, 1e-5f);
                expect_close(name, &loss2, &wloss, 1, 1e-6f, 1e-5f);
                expect_close(mse ? "mse grad" : "bce grad", g, wg, n, 3e-7f, 1e-5f);
                ck_assert_int_eq(mse ? ps_k_mse_overwrite(d, dg, dx, dt, 0, C, &loss)
                                     : ps_k_bce_overwrite(d, dg, dx, dt, 0, C, &loss),
                                 PS_EINVAL);
                ck_assert_int_eq(mse ? ps_k_mse_overwrite(d, NULL, dx, dt, R, 0, &loss)
                                     : ps_k_bce_overwrite(d, NULL, dx, dt, R, 0, &loss),
                                 PS_EINVAL);
                ps_k_free(d, dx), ps_k_free(d, dt);
                free(g), free(wg);
            }
            free(x), free(t);
        }
    /* known values: bce(0, t) = log 2; mse of (3 - 1)^2 = 4 */
    float x0 = 0, t0 = 0.3f, three = 3, one = 1, loss = 0;
    void *dx = dev_from(d, &x0, 4), *dt = dev_from(d, &t0, 4);
    ck_assert_int_eq(ps_k_bce_overwrite(d, NULL, dx, dt, 1, 1, &loss), PS_OK);
    ck_assert_float_eq_tol(loss, logf(2.0f), 1e-6f);
    ps_k_free(d, dx), ps_k_free(d, dt);
    dx = dev_from(d, &three, 4), dt = dev_from(d, &one, 4);
    ck_assert_int_eq(ps_k_mse_overwrite(d, NULL, dx, dt, 1, 1, &loss), PS_OK);
    ck_assert_float_eq_tol(loss, 4.0f, 1e-6f);
    ps_k_free(d, dx), ps_k_free(d, dt);
}

/* One-hot rows (out-of-range labels give zero rows, cols 1 copies the label)
 * and the binary accuracy count. */
static void check_onehot_binary(ps_k_dev *d) {
    const size_t colss[] = {1, 2, 7, 33};
    for (size_t ri = 0; ri < NSIZES; ri++)
        for (size_t ci = 0; ci < 4; ci++) {
            size_t R = sizes[ri], C = colss[ci];
            int32_t *y = labels_for(R, C == 1 ? 2 : C, 800 + ri);
            if (R > 2 && C > 1) y[0] = -1, y[1] = (int32_t)C; /* out of range */
            float *out = host(R * C, 3, 5, 6), *want = host(R * C, 4, 0, 1);
            ps_ref_onehot_overwrite(want, y, R, C);
            void *dy = dev_from(d, y, R * 4), *dout = dev_from(d, out, R * C * 4);
            ps_k_onehot_overwrite(d, dout, dy, R, C);
            dev_take(d, out, dout, R * C);
            expect_close("onehot", out, want, R * C, 0, 0);

            float *z = host(R, 810 + ri, -1, 1);
            if (R > 1) z[0] = 0.0f; /* 0 is not > 0: predicts class 0 */
            size_t hits = 12345, whits = 54321;
            void *dz = dev_from(d, z, R * 4);
            ck_assert_int_eq(ps_ref_binary_correct(z, y, R, &whits), PS_OK);
            ck_assert_int_eq(ps_k_binary_correct(d, dz, dy, R, &hits), PS_OK);
            ck_assert_uint_eq(hits, whits);
            ps_k_free(d, dz), ps_k_free(d, dy);
            free(y), free(out), free(want), free(z);
        }
    float z[4] = {0.5f, -0.5f, 0.0f, 2.0f};
    int32_t y[4] = {1, 0, 0, 0};
    size_t hits = 0;
    void *dz = dev_from(d, z, sizeof z), *dy = dev_from(d, y, sizeof y);
    ck_assert_int_eq(ps_k_binary_correct(d, dz, dy, 4, &hits), PS_OK);
    ck_assert_uint_eq(hits, 3);
    ps_k_free(d, dz), ps_k_free(d, dy);
}

static void check_sums(ps_k_dev *d) {
    const size_t ns[] = {0, 1, 7, 33, 1000, 100003};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        size_t n = ns[i];
        float *x = host(n, 900 + i, -3, 2);
        double s = -1, q = -1, ws, wq;
        void *dx = dev_from(d, x, (n ? n : 1) * 4);
        ck_assert_int_eq(ps_ref_sum(x, n, &ws), PS_OK);
        ck_assert_int_eq(ps_ref_sumsq(x, n, &wq), PS_OK);
        ck_assert_int_eq(ps_k_sum(d, dx, n, &s), PS_OK);
        ck_assert_int_eq(ps_k_sumsq(d, dx, n, &q), PS_OK);
        double tol = 1e-6 * (double)n * 3 + 1e-9; /* fp32 partial sums on CUDA */
        ck_assert_msg(fabs(s - ws) <= tol, "sum n=%zu: got %.12g want %.12g", n, s, ws);
        ck_assert_msg(fabs(q - wq) <= tol * 3, "sumsq n=%zu: got %.12g want %.12g", n, q, wq);
        ps_k_free(d, dx);
        free(x);
    }
}

static void check_host_alloc(ps_k_dev *d) {
    float *h = NULL, back[100];
    ck_assert_int_eq(ps_k_host_alloc(d, 100 * sizeof *h, (void **)&h), PS_OK);
    ck_assert_ptr_nonnull(h);
    if (ps_k_dev_kind(d) == PS_K_CPU) ck_assert_uint_eq((uintptr_t)h % 64, 0);
    for (int i = 0; i < 100; i++)
        h[i] = (float)i;
    void *dp = dev_from(d, h, sizeof back);
    dev_take(d, back, dp, 100);
    expect_close("host_alloc round trip", back, h, 100, 0, 0);
    ps_k_host_free(d, h);
    ps_k_host_free(d, NULL);
    void *tiny = NULL;
    ck_assert_int_eq(ps_k_host_alloc(d, 0, &tiny), PS_OK);
    ps_k_host_free(d, tiny);
}

/* ---- rounding (host functions of ew.h) ------------------------------------ */

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Bit-exact comparison (tells -0 from 0 and handles infinities). */
#define ROUNDS_TO(fn, in, out)                                                                     \
    ck_assert_msg(bits(fn(in)) == bits(out), #fn "(%.10g) = %.10g, want %.10g", (double)(in),      \
                  (double)fn(in), (double)(out))

START_TEST(round_f16_known_values) {
    ROUNDS_TO(ps_ew_round_f16, 1.0f, 1.0f);
    ROUNDS_TO(ps_ew_round_f16, -2.5f, -2.5f);
    ROUNDS_TO(ps_ew_round_f16, 0.0f, 0.0f);
    ROUNDS_TO(ps_ew_round_f16, -0.0f, -0.0f);
    ROUNDS_TO(ps_ew_round_f16, 0.1f, 0.0999755859375f);
    ROUNDS_TO(ps_ew_round_f16, 65504.0f, 65504.0f); /* the largest half */
    ROUNDS_TO(ps_ew_round_f16, 65519.99f, 65504.0f);
    ROUNDS_TO(ps_ew_round_f16, 65520.0f, INFINITY); /* the tie goes to even = 2^16: overflow */
    ROUNDS_TO(ps_ew_round_f16, -65520.0f, -INFINITY);
    ROUNDS_TO(ps_ew_round_f16, 1e9f, INFINITY);
    ROUNDS_TO(ps_ew_round_f16, -INFINITY, -INFINITY);
    ck_assert(isnan(ps_ew_round_f16(NAN)));
    /* ties to even on the 2^-10 grid above 1 */
    ROUNDS_TO(ps_ew_round_f16, 1.0f + 0x1p-11f, 1.0f);
    ROUNDS_TO(ps_ew_round_f16, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-9f);
    ROUNDS_TO(ps_ew_round_f16, 1.0f + 0x1p-11f + 0x1p-20f, 1.0f + 0x1p-10f);
    ROUNDS_TO(ps_ew_round_f16, 2048.0f + 1.0f, 2048.0f); /* step 2 there */
    ROUNDS_TO(ps_ew_round_f16, 2048.0f + 3.0f, 2052.0f);
    /* normals and subnormals (step 2^-24 below 2^-14) */
    ROUNDS_TO(ps_ew_round_f16, 0x1p-14f, 0x1p-14f);
    ROUNDS_TO(ps_ew_round_f16, 0x1p-14f - 0x1p-25f, 0x1p-14f); /* tie: up to the even 2^-14 */
    ROUNDS_TO(ps_ew_round_f16, 0x1p-24f, 0x1p-24f);            /* smallest subnormal */
    ROUNDS_TO(ps_ew_round_f16, 0x1p-25f, 0.0f);                /* tie to even: 0 */
    ROUNDS_TO(ps_ew_round_f16, -0x1p-25f, -0.0f);
    ROUNDS_TO(ps_ew_round_f16, 0x1p-25f + 0x1p-40f, 0x1p-24f);
    ROUNDS_TO(ps_ew_round_f16, 3 * 0x1p-25f, 0x1p-23f); /* tie to even: 2 steps */
    ROUNDS_TO(ps_ew_round_f16, 5 * 0x1p-24f + 0x1p-26f, 5 * 0x1p-24f);
    ROUNDS_TO(ps_ew_round_f16, 1e-30f, 0.0f);
}
END_TEST

START_TEST(round_bf16_known_values) {
    ROUNDS_TO(ps_ew_round_bf16, 1.0f, 1.0f);
    ROUNDS_TO(ps_ew_round_bf16, -0.0f, -0.0f);
    ROUNDS_TO(ps_ew_round_bf16, 0.1f, from_bits(0x3DCD0000u)); /* 0.10009765625 */
    ROUNDS_TO(ps_ew_round_bf16, 1.0f + 0x1p-8f, 1.0f);         /* tie to even */
    ROUNDS_TO(ps_ew_round_bf16, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f);
    ROUNDS_TO(ps_ew_round_bf16, 1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-7f);
    ROUNDS_TO(ps_ew_round_bf16, 65504.0f, 65536.0f);
    ROUNDS_TO(ps_ew_round_bf16, from_bits(0x7F7F0000u), from_bits(0x7F7F0000u)); /* max bf16 */
    ROUNDS_TO(ps_ew_round_bf16, from_bits(0x7F7FFFFFu), INFINITY);               /* FLT_MAX */
    ROUNDS_TO(ps_ew_round_bf16, -from_bits(0x7F7FFFFFu), -INFINITY);
    ROUNDS_TO(ps_ew_round_bf16, INFINITY, INFINITY);
    ck_assert(isnan(ps_ew_round_bf16(NAN)));
    ck_assert(isnan(ps_ew_round_bf16(from_bits(0x7F800001u)))); /* a NaN that rounding would
                                                                    turn into infinity */
    /* float subnormals stay on the bf16 grid */
    ROUNDS_TO(ps_ew_round_bf16, from_bits(0x00010000u), from_bits(0x00010000u));
    ROUNDS_TO(ps_ew_round_bf16, from_bits(0x00008000u), 0.0f);
    ROUNDS_TO(ps_ew_round_bf16, from_bits(0x00018000u), from_bits(0x00020000u));
    ROUNDS_TO(ps_ew_round_bf16, from_bits(0x00008001u), from_bits(0x00010000u));
}
END_TEST

/* ---- tests -------------------------------------------------------------- */

START_TEST(cpu_gemm) {
    check_gemm(ps_k_cpu());
}
END_TEST

START_TEST(cpu_bias_colsum) {
    check_bias_and_colsum(ps_k_cpu());
}
END_TEST

START_TEST(cpu_activations) {
    check_activations(ps_k_cpu());
    check_activation_kinks(ps_k_cpu());
}
END_TEST

START_TEST(cpu_softmax_ce) {
    check_softmax_ce(ps_k_cpu());
    check_ce_errors_and_ties(ps_k_cpu());
}
END_TEST

START_TEST(cpu_gemm_ex) {
    check_gemm_ex(ps_k_cpu());
}
END_TEST

START_TEST(cpu_losses) {
    check_losses(ps_k_cpu());
    check_onehot_binary(ps_k_cpu());
}
END_TEST

START_TEST(cpu_sums_host_alloc) {
    check_sums(ps_k_cpu());
    check_host_alloc(ps_k_cpu());
}
END_TEST

START_TEST(devices) {
    ps_k_dev *d = NULL;
    char err[128];
    ck_assert_int_eq(ps_k_dev_open("cpu", &d, err, sizeof err), PS_OK);
    ck_assert_ptr_eq(d, ps_k_cpu());
    ck_assert_str_eq(ps_k_dev_name(d), "cpu");
    ck_assert_int_eq(ps_k_dev_kind(d), PS_K_CPU);
    ps_k_dev_close(d); /* ignored for the singleton */
    ck_assert_int_ge(ps_k_cuda_device_count(), 0);
    ck_assert_int_eq(ps_k_dev_open("auto", &d, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_k_dev_kind(d), ps_k_cuda_device_count() > 0 ? PS_K_CUDA : PS_K_CPU);
    ps_k_dev_close(d);
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:99", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_int_eq(ps_k_dev_open(bad[i], &d, err, sizeof err), PS_EINVAL);
        ck_assert_msg(err[0] != '\0', "no reason for '%s'", bad[i]);
    }
    if (!ps_k_cuda_built()) ck_assert_int_eq(ps_k_cuda_device_count(), 0);
    ps_k_set_threads(1);
    void *p = NULL;
    ck_assert_int_eq(ps_k_malloc(ps_k_cpu(), 0, &p), PS_OK);
    ck_assert_ptr_nonnull(p);
    ps_k_free(ps_k_cpu(), p);
}
END_TEST

/* The same checks on cuda:0; skipped (passes trivially) without a GPU. */
START_TEST(cuda_vs_reference) {
    if (ps_k_cuda_device_count() == 0) {
        fprintf(stderr, "cuda_vs_reference: no CUDA device (built: %s); skipped\n",
                ps_k_cuda_built() ? "yes" : "no");
        return;
    }
    ps_k_dev *d = NULL;
    char err[128];
    ck_assert_msg(ps_k_dev_open("cuda:0", &d, err, sizeof err) == PS_OK, "%s", err);
    check_gemm(d);
    check_bias_and_colsum(d);
    check_activations(d);
    check_activation_kinks(d);
    check_softmax_ce(d);
    check_ce_errors_and_ties(d);
    check_gemm_ex(d);
    check_losses(d);
    check_onehot_binary(d);
    check_sums(d);
    check_host_alloc(d);
    ck_assert_int_eq(ps_k_sync(d), PS_OK);
    ps_k_dev_close(d);
}
END_TEST

/* OpenBLAS's fallback kernels on a CPU with AVX2 or AVX-512 are named with the set to use
 * instead; a set that already uses them, or a CPU without them, gets no advice. */
START_TEST(blas_better_core) {
    ck_assert_str_eq(ps_k_blas_better_core("Prescott", 1, 1), "SkylakeX");
    ck_assert_str_eq(ps_k_blas_better_core("Prescott", 1, 0), "Haswell");
    ck_assert_str_eq(ps_k_blas_better_core("sandybridge", 1, 0), "Haswell");
    ck_assert_ptr_null(ps_k_blas_better_core("Prescott", 0, 0));
    ck_assert_ptr_null(ps_k_blas_better_core("Haswell", 1, 1));
    ck_assert_ptr_null(ps_k_blas_better_core("SkylakeX", 1, 1));
    ck_assert_ptr_null(ps_k_blas_better_core("Zen", 1, 0));
    ck_assert_ptr_null(ps_k_blas_better_core(NULL, 1, 1));
    ps_k_blas_kernels k = ps_k_cpu_blas_kernels();
    ck_assert_ptr_nonnull(k.core);
    ck_assert_ptr_nonnull(k.cpu_isa);
    printf("OpenBLAS kernels: %s on a CPU with %s%s%s\n", k.core, k.cpu_isa,
           k.better ? "; faster: " : "", k.better ? k.better : "");
}
END_TEST

int main(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, blas_better_core);
    tcase_add_test(tc, cpu_gemm);
    tcase_add_test(tc, cpu_bias_colsum);
    tcase_add_test(tc, cpu_activations);
    tcase_add_test(tc, cpu_softmax_ce);
    tcase_add_test(tc, cpu_gemm_ex);
    tcase_add_test(tc, cpu_losses);
    tcase_add_test(tc, cpu_sums_host_alloc);
    tcase_add_test(tc, round_f16_known_values);
    tcase_add_test(tc, round_bf16_known_values);
    tcase_add_test(tc, devices);
    tcase_add_test(tc, cuda_vs_reference);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
