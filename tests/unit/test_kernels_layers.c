/* The layer kernels of kernels.h added for MobileNet-style models (batch
 * normalization, depthwise convolution and its plan, global average pooling,
 * zero padding, add, channel concatenation and split) and for the Keras
 * applications networks (element-wise and per-channel products, rescaling,
 * cropping, layer normalization) against the double
 * definitions in kernels/ref_layers.c: seeded random inputs, outputs
 * pre-filled with NaN (they must be overwritten), odd sizes, strides 1 and 2,
 * same and valid padding, depth multipliers 1 to 3, batch norm with and
 * without gamma and beta and at rows = 64*32*32. The same checks run on a
 * CUDA device if present. Gradients are checked by finite differences in
 * test_gradcheck_kernels.c. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "ps_error.h"
#include "ref.h"
#include "testutil.h"

static float *host(size_t n, uint64_t seed, float lo, float hi) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    ps_test_fill_uniform(p, n, seed, lo, hi);
    return p;
}

/* n floats of NaN: an output that must be overwritten, never read. */
static float *garbage(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static float *dev_from(ps_k_dev *d, const float *src, size_t n) {
    void *p;
    ck_assert_int_eq(ps_k_malloc(d, n ? n * 4 : 4, &p), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_dev(d, p, src, n * 4), PS_OK);
    return p;
}

/* Syncs, then copies n floats of device buffer p into out. */
static void dev_get(ps_k_dev *d, float *out, const float *p, size_t n) {
    ck_assert_int_eq(ps_k_sync(d), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_host(d, out, p, n * 4), PS_OK);
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         float atol, float rtol) {
    long i = ps_test_first_mismatch(got, want, n, atol, rtol);
    ck_assert_msg(i < 0, "%s: element %ld of %zu: got %.9g want %.9g", what, i, n,
                  i < 0 ? 0.0 : got[i], i < 0 ? 0.0 : want[i]);
}

/* Tolerance of a float sum of `terms` terms of size ~1 against the double
 * reference: rounding errors grow like sqrt(terms). */
static float sum_tol(size_t terms) {
    double s = sqrt((double)terms / 1000.0);
    return 1e-5f * (float)(s > 1 ? s : 1);
}

/* ---- batch normalization ---------------------------------------------------- */

typedef struct {
    size_t rows, c;
    float lo, hi; /* x range: an offset mean tests the variance's cancellation */
} bn_case;

static const bn_case bns[] = {
    {1, 1, -1, 1}, /* one row: variance 0 */
    {7, 3, -1, 1},
    {33, 5, 2, 4},
    {2 * 5 * 5, 17, -3, 1},
    {3 * 7 * 7, 48, 0, 6},
    {257, 300, -1, 1},         /* more channels than one block of cpu_bn.c */
    {64 * 32 * 32, 16, -1, 3}, /* the largest batch a model makes: float sums over 65536 rows */
};
#define NBNS (sizeof bns / sizeof bns[0])

static void check_bn_case(ps_k_dev *d, const bn_case *k, int affine, uint64_t seed) {
    char what[160];
    size_t rows = k->rows, c = k->c, n = rows * c;
    const float eps = 1e-3f;
    float *x = host(n, seed, k->lo, k->hi), *dy = host(n, seed + 1, -1, 1);
    float *gamma = host(c, seed + 2, 0.5f, 2), *beta = host(c, seed + 3, -1, 1);
    const float *g = affine & 1 ? gamma : NULL, *b = affine & 2 ? beta : NULL;
    float *wy = garbage(n), *wm = garbage(c), *wv = garbage(c), *y = garbage(n);
    float *m = garbage(c), *v = garbage(c);
    ps_ref_bn_forward_train_overwrite(wy, wm, wv, x, g, b, rows, c, eps);

    float *dx_ = dev_from(d, x, n), *dg_ = dev_from(d, gamma, c), *db_ = dev_from(d, beta, c);
    float *dyo = dev_from(d, y, n), *dm = dev_from(d, m, c), *dv = dev_from(d, v, c);
    const float *gd = g ? dg_ : NULL, *bd = b ? db_ : NULL;
    ps_k_bn_forward_train_overwrite(d, dyo, dm, dv, dx_, gd, bd, rows, c, eps);
    dev_get(d, y, dyo, n), dev_get(d, m, dm, c), dev_get(d, v, dv, c);
    snprintf(what, sizeof what, "bn train rows=%zu c=%zu gamma=%d beta=%d", rows, c, !!g, !!b);
    float tol = sum_tol(rows);
    expect_close(what, m, wm, c, tol, tol);
    expect_close(what, v, wv, c, tol, tol);
    expect_close(what, y, wy, n, 1e-4f, 1e-4f);

    /* inference with the batch's statistics is the training forward */
    float *wi = garbage(n);
    ps_ref_bn_forward_infer_overwrite(wi, x, wm, wv, g, b, rows, c, eps);
    expect_close("bn infer ref vs train ref", wi, wy, n, 1e-5f, 1e-5f);
    float *dwm = dev_from(d, wm, c), *dwv = dev_from(d, wv, c), *nan_y = garbage(n);
    ck_assert_int_eq(ps_k_copy_to_dev(d, dyo, nan_y, n * 4), PS_OK);
    ps_k_bn_forward_infer_overwrite(d, dyo, dx_, dwm, dwv, gd, bd, rows, c, eps);
    dev_get(d, y, dyo, n);
    expect_close("bn infer", y, wi, n, 1e-5f, 1e-5f);
    float *inplace = dev_from(d, x, n);
    ps_k_bn_forward_infer_overwrite(d, inplace, inplace, dwm, dwv, gd, bd, rows, c, eps);
    dev_get(d, y, inplace, n);
    expect_close("bn infer in place", y, wi, n, 1e-5f, 1e-5f);

    /* backward from the reference's statistics, each optional output on and off */
    float *wdx = garbage(n), *wdg = garbage(c), *wdb = garbage(c);
    ps_ref_bn_backward_overwrite(wdx, wdg, wdb, dy, x, wm, wv, g, rows, c, eps);
    float *ddy = dev_from(d, dy, n), *gx = garbage(n), *gg = garbage(c), *gb = garbage(c);
    for (int outs = 0; outs < 4; outs++) {
        float *dgx = dev_from(d, gx, n), *dgg = dev_from(d, gg, c), *dgb = dev_from(d, gb, c);
        ps_k_bn_backward_overwrite(d, dgx, outs & 1 ? dgg : NULL, outs & 2 ? dgb : NULL, ddy, dx_,
                                   dwm, dwv, gd, rows, c, eps);
        float *ox = garbage(n), *og = garbage(c), *ob = garbage(c);
        dev_get(d, ox, dgx, n), dev_get(d, og, dgg, c), dev_get(d, ob, dgb, c);
        snprintf(what, sizeof what, "bn backward rows=%zu c=%zu gamma=%d outs=%d", rows, c, !!g,
                 outs);
        expect_close(what, ox, wdx, n, 1e-4f, 1e-3f);
        if (outs & 1) expect_close(what, og, wdg, c, tol * 10, tol);
        if (outs & 2) expect_close(what, ob, wdb, c, tol * 10, tol);
        for (size_t j = 0; j < c; j++) /* the skipped ones are untouched */
            ck_assert(((outs & 1) || isnan(og[j])) && ((outs & 2) || isnan(ob[j])));
        ps_k_free(d, dgx), ps_k_free(d, dgg), ps_k_free(d, dgb);
        free(ox), free(og), free(ob);
    }
    float *bufs[] = {dx_, dg_, db_, dyo, dm, dv, dwm, dwv, inplace, ddy};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ps_k_free(d, bufs[i]);
    float *hb[] = {x, dy, gamma, beta, wy, wm, wv, y, m, v, wi, nan_y, wdx, wdg, wdb, gx, gg, gb};
    for (size_t i = 0; i < sizeof hb / sizeof *hb; i++)
        free(hb[i]);
}

static void check_bn(ps_k_dev *d) {
    for (size_t i = 0; i < NBNS; i++)
        for (int affine = 0; affine < 4; affine++) {
            if (bns[i].rows > 10000 && affine % 3) continue; /* big: none and both */
            check_bn_case(d, &bns[i], affine, 100 + 10 * i + affine);
        }
}

/* Hand-computed: one channel 1, 2, 3, 4 (mean 2.5, variance 1.25), eps 0. */
static void check_bn_known(ps_k_dev *d) {
    float x[4] = {1, 2, 3, 4}, y[4], m, v;
    float *dx = dev_from(d, x, 4), *dy = dev_from(d, x, 4), *dm = dev_from(d, x, 1);
    float *dv = dev_from(d, x, 1);
    ps_k_bn_forward_train_overwrite(d, dy, dm, dv, dx, NULL, NULL, 4, 1, 0.0f);
    dev_get(d, y, dy, 4), dev_get(d, &m, dm, 1), dev_get(d, &v, dv, 1);
    ck_assert_float_eq_tol(m, 2.5f, 1e-6f);
    ck_assert_float_eq_tol(v, 1.25f, 1e-6f);
    float s = 1.0f / sqrtf(1.25f), want[4] = {-1.5f * s, -0.5f * s, 0.5f * s, 1.5f * s};
    expect_close("bn known", y, want, 4, 1e-6f, 1e-6f);
    ps_k_free(d, dx), ps_k_free(d, dy), ps_k_free(d, dm), ps_k_free(d, dv);
}

/* ---- depthwise convolution ------------------------------------------------- */

typedef struct {
    size_t n, h, w, c, kh, kw, mult, sh, sw;
    bool same;
} dw_case;

static const dw_case dws[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, false}, /* the smallest */
    {2, 7, 5, 3, 3, 3, 1, 1, 1, true},    {2, 7, 5, 3, 3, 3, 1, 2, 2, true},
    {2, 7, 5, 3, 3, 3, 2, 1, 1, true},    {2, 7, 5, 3, 3, 3, 2, 2, 2, true},
    {3, 9, 7, 5, 3, 3, 1, 1, 1, false},   {3, 9, 7, 5, 3, 3, 2, 2, 2, false},
    {2, 8, 9, 4, 3, 2, 3, 2, 1, false}, /* non-square kernel, mixed strides, mult 3 */
    {1, 6, 6, 7, 5, 5, 1, 2, 2, true},    {2, 3, 3, 2, 5, 5, 2, 1, 1, true}, /* kernel > input */
    {1, 4, 4, 9, 4, 4, 1, 1, 1, false},                                      /* kernel = input */
    {2, 16, 16, 48, 3, 3, 1, 2, 2, true},                                    /* MobileNetV2-like */
    {2, 8, 8, 96, 3, 3, 1, 1, 1, true},   {1, 5, 5, 1, 3, 3, 1, 1, 1, true},
};
#define NDWS (sizeof dws / sizeof dws[0])

static void plan_dw(ps_k_conv *p, const dw_case *k) {
    ck_assert_int_eq(
        ps_k_dwconv_plan(p, k->n, k->h, k->w, k->c, k->kh, k->kw, k->mult, k->sh, k->sw, k->same),
        PS_OK);
}

static void check_dwconv_case(ps_k_dev *d, const ps_k_conv *p, uint64_t seed) {
    char what[200];
    snprintf(what, sizeof what, "dwconv n=%zu h=%zu w=%zu c=%zu k=%zux%zu mult=%zu s=%zu,%zu", p->n,
             p->h, p->w, p->c, p->kh, p->kw, p->cout / p->c, p->sh, p->sw);
    size_t nx = p->n * p->h * p->w * p->c, ny = p->n * p->oh * p->ow * p->cout;
    size_t nw = p->kh * p->kw * p->cout, nb = p->cout;
    float *x = host(nx, seed, -1, 1), *w = host(nw, seed + 1, -1, 1),
          *b = host(nb, seed + 2, -1, 1);
    float *dy = host(ny, seed + 3, -1, 1), *want = garbage(ny), *got = garbage(ny);
    float *dx_ = dev_from(d, x, nx), *dw_ = dev_from(d, w, nw), *db_ = dev_from(d, b, nb);
    float *ddy = dev_from(d, dy, ny);
    for (int with_b = 0; with_b < 2; with_b++) {
        ps_ref_dwconv2d_forward_overwrite(p, want, x, w, with_b ? b : NULL);
        float *dout = dev_from(d, got, ny); /* NaN */
        ps_k_dwconv2d_forward_overwrite(d, p, dout, dx_, dw_, with_b ? db_ : NULL);
        float *out = garbage(ny);
        dev_get(d, out, dout, ny);
        expect_close(what, out, want, ny, 1e-5f, 1e-5f);
        ps_k_free(d, dout), free(out);
    }
    float *wx = garbage(nx), *ww = garbage(nw), *wb = garbage(nb);
    ps_ref_dwconv2d_backward_overwrite(p, wx, ww, wb, dy, x, w);
    float tw = sum_tol(p->n * p->oh * p->ow);
    for (int outs = 0; outs < 3; outs++) { /* all; dw only; dw and dx */
        float *gx = garbage(nx), *gw = garbage(nw), *gb = garbage(nb);
        float *dgx = dev_from(d, gx, nx), *dgw = dev_from(d, gw, nw), *dgb = dev_from(d, gb, nb);
        ps_k_dwconv2d_backward_overwrite(d, p, outs == 1 ? NULL : dgx, dgw, outs ? NULL : dgb, ddy,
                                         dx_, dw_);
        dev_get(d, gx, dgx, nx), dev_get(d, gw, dgw, nw), dev_get(d, gb, dgb, nb);
        expect_close(what, gw, ww, nw, tw, tw);
        if (outs != 1) expect_close(what, gx, wx, nx, 1e-5f, 1e-5f);
        if (!outs) expect_close(what, gb, wb, nb, tw, tw);
        ps_k_free(d, dgx), ps_k_free(d, dgw), ps_k_free(d, dgb);
        free(gx), free(gw), free(gb);
    }
    ps_k_free(d, dx_), ps_k_free(d, dw_), ps_k_free(d, db_), ps_k_free(d, ddy);
    free(x), free(w), free(b), free(dy), free(want), free(got), free(wx), free(ww), free(wb);
}

static void check_dwconv(ps_k_dev *d) {
    for (size_t i = 0; i < NDWS; i++) {
        ps_k_conv p;
        plan_dw(&p, &dws[i]);
        check_dwconv_case(d, &p, 1000 + 10 * i);
    }
}

/* Hand-computed: a 3x3 ramp, 3x3 kernel of ones on channel 0 and twos on
 * channel 1 (mult 2 of one channel), same padding, bias 0.5 and -1. */
static void check_dwconv_known(ps_k_dev *d) {
    ps_k_conv p;
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 1, 3, 3, 1, 3, 3, 2, 1, 1, true), PS_OK);
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[18], b[2] = {0.5f, -1}, y[18];
    for (int i = 0; i < 9; i++)
        w[2 * i] = 1, w[2 * i + 1] = 2;
    float *dx = dev_from(d, x, 9), *dw = dev_from(d, w, 18), *db = dev_from(d, b, 2);
    float *dy = dev_from(d, y, 18);
    ps_k_dwconv2d_forward_overwrite(d, &p, dy, dx, dw, db);
    dev_get(d, y, dy, 18);
    const float sums[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28}; /* 3x3 window sums, padded */
    for (int i = 0; i < 9; i++) {
        ck_assert_float_eq_tol(y[2 * i], sums[i] + 0.5f, 1e-5f);
        ck_assert_float_eq_tol(y[2 * i + 1], 2 * sums[i] - 1, 1e-5f);
    }
    ps_k_free(d, dx), ps_k_free(d, dw), ps_k_free(d, db), ps_k_free(d, dy);
}

/* ---- shape ops ------------------------------------------------------------- */

static void check_gap(ps_k_dev *d) {
    const size_t shapes[][3] = {{1, 1, 1}, {2, 9, 3}, {3, 49, 17}, {64, 16, 112}};
    for (size_t s = 0; s < 4; s++) {
        size_t n = shapes[s][0], hw = shapes[s][1], c = shapes[s][2];
        float *x = host(n * hw * c, 300 + s, -1, 2), *y = garbage(n * c), *wy = garbage(n * c);
        float *dy = host(n * c, 310 + s, -1, 1), *dx = garbage(n * hw * c);
        float *wdx = garbage(n * hw * c);
        ps_ref_gap_forward_overwrite(wy, x, n, hw, c);
        ps_ref_gap_backward_overwrite(wdx, dy, n, hw, c);
        float *dx_ = dev_from(d, x, n * hw * c), *dyo = dev_from(d, y, n * c);
        float *ddy = dev_from(d, dy, n * c), *ddx = dev_from(d, dx, n * hw * c);
        ps_k_gap_forward_overwrite(d, dyo, dx_, n, hw, c);
        ps_k_gap_backward_overwrite(d, ddx, ddy, n, hw, c);
        dev_get(d, y, dyo, n * c), dev_get(d, dx, ddx, n * hw * c);
        expect_close("gap forward", y, wy, n * c, 1e-6f, 1e-5f);
        expect_close("gap backward", dx, wdx, n * hw * c, 0, 1e-6f);
        ps_k_free(d, dx_), ps_k_free(d, dyo), ps_k_free(d, ddy), ps_k_free(d, ddx);
        free(x), free(y), free(wy), free(dy), free(dx), free(wdx);
    }
}

static void check_pad2d(ps_k_dev *d) {
    /* n, h, w, c, top, bottom, left, right */
    const size_t cs[][8] = {{1, 1, 1, 1, 0, 0, 0, 0},
                            {2, 5, 4, 3, 0, 1, 0, 1},
                            {1, 3, 7, 2, 1, 1, 1, 1},
                            {3, 4, 4, 5, 2, 0, 3, 1},
                            {2, 16, 16, 8, 0, 1, 0, 1}};
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        const size_t *k = cs[s];
        size_t nx = k[0] * k[1] * k[2] * k[3];
        size_t ny = k[0] * (k[1] + k[4] + k[5]) * (k[2] + k[6] + k[7]) * k[3];
        float *x = host(nx, 400 + s, -1, 1), *y = garbage(ny), *wy = garbage(ny);
        float *dy = host(ny, 410 + s, -1, 1), *dx = garbage(nx), *wdx = garbage(nx);
        ps_ref_pad2d_forward_overwrite(wy, x, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        ps_ref_pad2d_backward_overwrite(wdx, dy, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        float *dx_ = dev_from(d, x, nx), *dyo = dev_from(d, y, ny);
        float *ddy = dev_from(d, dy, ny), *ddx = dev_from(d, dx, nx);
        ps_k_pad2d_forward_overwrite(d, dyo, dx_, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        ps_k_pad2d_backward_overwrite(d, ddx, ddy, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        dev_get(d, y, dyo, ny), dev_get(d, dx, ddx, nx);
        expect_close("pad2d forward", y, wy, ny, 0, 0);
        expect_close("pad2d backward", dx, wdx, nx, 0, 0);
        ps_k_free(d, dx_), ps_k_free(d, dyo), ps_k_free(d, ddy), ps_k_free(d, ddx);
        free(x), free(y), free(wy), free(dy), free(dx), free(wdx);
    }
}

static void check_add(ps_k_dev *d) {
    const size_t ns[] = {1, 7, 1000, 65537};
    for (size_t s = 0; s < 4; s++) {
        size_t n = ns[s];
        float *a = host(n, 500 + s, -1, 1), *b = host(n, 510 + s, -1, 1), *y = garbage(n);
        float *want = garbage(n), *acc = host(n, 520 + s, -1, 1), *wacc = malloc(n * 4);
        ck_assert_ptr_nonnull(wacc);
        memcpy(wacc, acc, n * 4);
        ps_ref_add_overwrite(want, a, b, n);
        ps_ref_add_acc(wacc, a, n);
        float *da = dev_from(d, a, n), *db = dev_from(d, b, n), *dy = dev_from(d, y, n);
        float *dacc = dev_from(d, acc, n);
        ps_k_add_overwrite(d, dy, da, db, n);
        ps_k_add_acc(d, dacc, da, n);
        dev_get(d, y, dy, n), dev_get(d, acc, dacc, n);
        expect_close("add", y, want, n, 0, 0);
        expect_close("add_acc", acc, wacc, n, 0, 0);
        ps_k_add_overwrite(d, da, da, db, n); /* y = a, in place */
        dev_get(d, y, da, n);
        expect_close("add in place", y, want, n, 0, 0);
        ps_k_free(d, da), ps_k_free(d, db), ps_k_free(d, dy), ps_k_free(d, dacc);
        free(a), free(b), free(y), free(want), free(acc), free(wacc);
    }
}

/* Two pieces concatenated into a wide matrix (a third part left as it was),
 * then split back out. */
static void check_concat(ps_k_dev *d) {
    const size_t cs[][4] = {{1, 1, 1, 1}, {7, 3, 5, 2}, {64 * 8 * 8, 24, 16, 8}};
    for (size_t s = 0; s < 3; s++) {
        size_t rows = cs[s][0], c1 = cs[s][1], c2 = cs[s][2], c3 = cs[s][3];
        size_t ct = c1 + c2 + c3, nw = rows * ct;
        float *a = host(rows * c1, 600 + s, -1, 1), *b = host(rows * c2, 610 + s, -1, 1);
        float *wide = host(nw, 620 + s, -1, 1), *want = malloc(nw * 4), *got = garbage(nw);
        ck_assert_ptr_nonnull(want);
        memcpy(want, wide, nw * 4);
        ps_ref_concat_cols_overwrite(want, a, rows, ct, 0, c1);
        ps_ref_concat_cols_overwrite(want, b, rows, ct, c1, c2);
        float *da = dev_from(d, a, rows * c1), *db = dev_from(d, b, rows * c2);
        float *dw = dev_from(d, wide, nw);
        ps_k_concat_cols_overwrite(d, dw, da, rows, ct, 0, c1);
        ps_k_concat_cols_overwrite(d, dw, db, rows, ct, c1, c2);
        dev_get(d, got, dw, nw);
        expect_close("concat", got, want, nw, 0, 0);
        float *sb = garbage(rows * c2), *wsb = garbage(rows * c2);
        float *dsb = dev_from(d, sb, rows * c2);
        ps_ref_split_cols_overwrite(wsb, want, rows, ct, c1, c2);
        expect_close("split ref of concat ref", wsb, b, rows * c2, 0, 0);
        ps_k_split_cols_overwrite(d, dsb, dw, rows, ct, c1, c2);
        dev_get(d, sb, dsb, rows * c2);
        expect_close("split", sb, wsb, rows * c2, 0, 0);
        ps_k_free(d, da), ps_k_free(d, db), ps_k_free(d, dw), ps_k_free(d, dsb);
        free(a), free(b), free(wide), free(want), free(got), free(sb), free(wsb);
    }
}

/* ---- Keras applications layers --------------------------------------------- */

/* y = a * b and its backward (each gradient on and off, and in place over dy). */
static void check_mul(ps_k_dev *d) {
    const size_t ns[] = {1, 7, 1000, 65537};
    for (size_t s = 0; s < 4; s++) {
        size_t n = ns[s];
        float *a = host(n, 700 + s, -2, 2), *b = host(n, 710 + s, -2, 2);
        float *g = host(n, 720 + s, -1, 1), *want = garbage(n), *got = garbage(n);
        float *wa = garbage(n), *wb = garbage(n);
        ps_ref_mul_forward_overwrite(want, a, b, n);
        ps_ref_mul_backward_overwrite(wa, wb, g, a, b, n);
        float *da = dev_from(d, a, n), *db = dev_from(d, b, n), *dg = dev_from(d, g, n);
        float *dy = dev_from(d, got, n);
        ps_k_mul_forward_overwrite(d, dy, da, db, n);
        dev_get(d, got, dy, n);
        expect_close("mul forward", got, want, n, 0, 0);
        for (int outs = 1; outs < 4; outs++) {
            float *ga = garbage(n), *gb = garbage(n);
            float *dga = dev_from(d, ga, n), *dgb = dev_from(d, gb, n);
            ps_k_mul_backward_overwrite(d, outs & 1 ? dga : NULL, outs & 2 ? dgb : NULL, dg, da, db,
                                        n);
            dev_get(d, ga, dga, n), dev_get(d, gb, dgb, n);
            if (outs & 1) expect_close("mul backward da", ga, wa, n, 0, 0);
            if (outs & 2) expect_close("mul backward db", gb, wb, n, 0, 0);
            ck_assert((outs & 1) || isnan(ga[0]));
            ck_assert((outs & 2) || isnan(gb[0]));
            ps_k_free(d, dga), ps_k_free(d, dgb), free(ga), free(gb);
        }
        ps_k_mul_forward_overwrite(d, da, da, db, n); /* y = a, in place */
        dev_get(d, got, da, n);
        expect_close("mul forward in place", got, want, n, 0, 0);
        ps_k_mul_backward_overwrite(d, NULL, dg, dg, db, db, n); /* db = dy: dy * b */
        dev_get(d, got, dg, n);
        expect_close("mul backward in place", got, wa, n, 0, 0);
        ps_k_free(d, da), ps_k_free(d, db), ps_k_free(d, dg), ps_k_free(d, dy);
        free(a), free(b), free(g), free(want), free(got), free(wa), free(wb);
    }
}

/* Squeeze-and-excitation: x [n, hw, c] times s [n, c]. */
static void check_mul_channels(ps_k_dev *d) {
    const size_t shapes[][3] = {{1, 1, 1}, {2, 9, 3}, {3, 49, 17}, {4, 196, 96}, {2, 1, 300}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        size_t n = shapes[k][0], hw = shapes[k][1], c = shapes[k][2], nx = n * hw * c;
        char what[96];
        snprintf(what, sizeof what, "mul_channels n=%zu hw=%zu c=%zu", n, hw, c);
        float *x = host(nx, 800 + k, -2, 2), *sc = host(n * c, 810 + k, 0, 1);
        float *g = host(nx, 820 + k, -1, 1), *want = garbage(nx), *got = garbage(nx);
        float *wdx = garbage(nx), *wds = garbage(n * c), *gs = garbage(n * c);
        ps_ref_mul_channels_forward_overwrite(want, x, sc, n, hw, c);
        ps_ref_mul_channels_backward_overwrite(wdx, wds, g, x, sc, n, hw, c);
        float *dx_ = dev_from(d, x, nx), *ds_ = dev_from(d, sc, n * c), *dg = dev_from(d, g, nx);
        float *dy = dev_from(d, got, nx);
        ps_k_mul_channels_forward_overwrite(d, dy, dx_, ds_, n, hw, c);
        dev_get(d, got, dy, nx);
        expect_close(what, got, want, nx, 0, 0);
        float tol = sum_tol(hw);
        for (int outs = 1; outs < 4; outs++) {
            float *gx = garbage(nx), *gsn = garbage(n * c);
            float *dgx = dev_from(d, gx, nx), *dgs = dev_from(d, gsn, n * c);
            ps_k_mul_channels_backward_overwrite(d, outs & 1 ? dgx : NULL, outs & 2 ? dgs : NULL,
                                                 dg, dx_, ds_, n, hw, c);
            dev_get(d, gx, dgx, nx), dev_get(d, gsn, dgs, n * c);
            if (outs & 1) expect_close(what, gx, wdx, nx, 0, 0);
            if (outs & 2) expect_close(what, gsn, wds, n * c, tol, tol);
            ck_assert((outs & 1) || isnan(gx[0]));
            ck_assert((outs & 2) || isnan(gsn[0]));
            ps_k_free(d, dgx), ps_k_free(d, dgs), free(gx), free(gsn);
        }
        float *dgs = dev_from(d, gs, n * c); /* dx over dy, in place */
        ps_k_mul_channels_backward_overwrite(d, dg, dgs, dg, dx_, ds_, n, hw, c);
        dev_get(d, got, dg, nx), dev_get(d, gs, dgs, n * c);
        expect_close("mul_channels backward in place dx", got, wdx, nx, 0, 0);
        expect_close("mul_channels backward in place ds", gs, wds, n * c, tol, tol);
        ps_k_mul_channels_forward_overwrite(d, dx_, dx_, ds_, n, hw, c); /* y = x */
        dev_get(d, got, dx_, nx);
        expect_close("mul_channels forward in place", got, want, nx, 0, 0);
        ps_k_free(d, dx_), ps_k_free(d, ds_), ps_k_free(d, dg), ps_k_free(d, dy), ps_k_free(d, dgs);
        free(x), free(sc), free(g), free(want), free(got), free(wdx), free(wds), free(gs);
    }
}

/* Keras' Rescaling: the usual 1/255 and (1/127.5, -1), and others. */
static void check_rescale(ps_k_dev *d) {
    const float so[][2] = {{1.0f / 255, 0}, {1.0f / 127.5f, -1}, {-3, 0.5f}, {1, 0}};
    const size_t ns[] = {1, 33, 65537};
    for (size_t k = 0; k < 4; k++)
        for (size_t s = 0; s < 3; s++) {
            size_t n = ns[s];
            float scale = so[k][0], offset = so[k][1];
            float *x = host(n, 900 + s, 0, 255), *g = host(n, 910 + s, -1, 1);
            float *want = garbage(n), *wdx = garbage(n), *got = garbage(n);
            ps_ref_rescale_forward_overwrite(want, x, scale, offset, n);
            ps_ref_rescale_backward_overwrite(wdx, g, scale, n);
            float *dx_ = dev_from(d, x, n), *dg = dev_from(d, g, n), *dy = dev_from(d, got, n);
            float *ddx = dev_from(d, got, n);
            ps_k_rescale_forward_overwrite(d, dy, dx_, scale, offset, n);
            ps_k_rescale_backward_overwrite(d, ddx, dg, scale, n);
            dev_get(d, got, dy, n);
            expect_close("rescale forward", got, want, n, 1e-6f, 1e-6f);
            dev_get(d, got, ddx, n);
            expect_close("rescale backward", got, wdx, n, 0, 0);
            ps_k_rescale_forward_overwrite(d, dx_, dx_, scale, offset, n);
            ps_k_rescale_backward_overwrite(d, dg, dg, scale, n);
            dev_get(d, got, dx_, n);
            expect_close("rescale forward in place", got, want, n, 1e-6f, 1e-6f);
            dev_get(d, got, dg, n);
            expect_close("rescale backward in place", got, wdx, n, 0, 0);
            ps_k_free(d, dx_), ps_k_free(d, dg), ps_k_free(d, dy), ps_k_free(d, ddx);
            free(x), free(g), free(want), free(wdx), free(got);
        }
}

/* Keras' Normalization against the reference over variances small and large,
 * one under eps^2 (the divisor is eps, 1e-7) and one at 0; in place too. */
static void check_norm(ps_k_dev *d) {
    const size_t ns[] = {1, 7, 4099}, cs[] = {1, 3, 5, 32};
    for (size_t s = 0; s < 3; s++)
        for (size_t k = 0; k < 4; k++) {
            size_t n = ns[s], c = cs[k], nx = n * c;
            float *x = host(nx, 1200 + s, -3, 3), *g = host(nx, 1210 + s, -1, 1);
            float *mean = host(c, 1220 + k, -1, 1), *var = host(c, 1230 + k, 0.01f, 4);
            if (c >= 3) var[1] = 1e-15f, var[2] = 0.0f;
            float *want = garbage(nx), *wdx = garbage(nx), *got = garbage(nx);
            ps_ref_norm_forward_overwrite(want, x, mean, var, n, c, 1e-7f);
            ps_ref_norm_backward_overwrite(wdx, g, var, n, c, 1e-7f);
            float *dx_ = dev_from(d, x, nx), *dg = dev_from(d, g, nx), *dy = dev_from(d, got, nx);
            float *ddx = dev_from(d, got, nx), *dm = dev_from(d, mean, c);
            float *dv = dev_from(d, var, c);
            ps_k_norm_forward_overwrite(d, dy, dx_, dm, dv, n, c, 1e-7f);
            ps_k_norm_backward_overwrite(d, ddx, dg, dv, n, c, 1e-7f);
            dev_get(d, got, dy, nx);
            expect_close("normalization forward", got, want, nx, 1e-6f, 1e-6f);
            dev_get(d, got, ddx, nx);
            expect_close("normalization backward", got, wdx, nx, 0, 2e-7f);
            ps_k_norm_forward_overwrite(d, dx_, dx_, dm, dv, n, c, 1e-7f);
            ps_k_norm_backward_overwrite(d, dg, dg, dv, n, c, 1e-7f);
            dev_get(d, got, dx_, nx);
            expect_close("normalization forward in place", got, want, nx, 1e-6f, 1e-6f);
            dev_get(d, got, dg, nx);
            expect_close("normalization backward in place", got, wdx, nx, 0, 2e-7f);
            if (c >= 3) /* the floor: a variance of 0 divides by eps */
                ck_assert_float_eq_tol(want[2], (x[2] - mean[2]) / 1e-7f, 1e-6f * fabsf(want[2]));
            ps_k_free(d, dx_), ps_k_free(d, dg), ps_k_free(d, dy), ps_k_free(d, ddx);
            ps_k_free(d, dm), ps_k_free(d, dv);
            free(x), free(g), free(mean), free(var), free(want), free(wdx), free(got);
        }
    /* a negative variance: NaN in its channel, as Keras' sqrt and maximum give */
    const float x[4] = {1, 2, 3, 4}, mean[2] = {0, 0}, var[2] = {-1, 4};
    float y[4];
    float *dx_ = dev_from(d, x, 4), *dm = dev_from(d, mean, 2), *dv = dev_from(d, var, 2);
    float *dy = dev_from(d, x, 4);
    ps_k_norm_forward_overwrite(d, dy, dx_, dm, dv, 2, 2, 1e-7f);
    dev_get(d, y, dy, 4);
    ck_assert(isnan(y[0]) && isnan(y[2]));
    ck_assert_float_eq(y[1], 1.0f);
    ck_assert_float_eq(y[3], 2.0f);
    ps_k_free(d, dx_), ps_k_free(d, dm), ps_k_free(d, dv), ps_k_free(d, dy);
}

/* Cropping2D both ways, and crops that leave nothing (PS_EINVAL, untouched). */
static void check_crop2d(ps_k_dev *d) {
    /* n, h, w, c, top, bottom, left, right */
    const size_t cs[][8] = {{1, 1, 1, 1, 0, 0, 0, 0},
                            {2, 5, 4, 3, 0, 1, 0, 1},
                            {1, 3, 7, 2, 1, 1, 1, 1},
                            {3, 6, 5, 5, 2, 0, 3, 1},
                            {2, 17, 17, 8, 0, 1, 0, 1}};
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        const size_t *k = cs[s];
        size_t nx = k[0] * k[1] * k[2] * k[3];
        size_t ny = k[0] * (k[1] - k[4] - k[5]) * (k[2] - k[6] - k[7]) * k[3];
        float *x = host(nx, 1100 + s, -1, 1), *y = garbage(ny), *wy = garbage(ny);
        float *dy = host(ny, 1110 + s, -1, 1), *dx = garbage(nx), *wdx = garbage(nx);
        ps_ref_crop2d_forward_overwrite(wy, x, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        ps_ref_crop2d_backward_overwrite(wdx, dy, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        float *dx_ = dev_from(d, x, nx), *dyo = dev_from(d, y, ny);
        float *ddy = dev_from(d, dy, ny), *ddx = dev_from(d, dx, nx);
        ps_k_crop2d_forward_overwrite(d, dyo, dx_, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        ps_k_crop2d_backward_overwrite(d, ddx, ddy, k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]);
        dev_get(d, y, dyo, ny), dev_get(d, dx, ddx, nx);
        expect_close("crop2d forward", y, wy, ny, 0, 0);
        expect_close("crop2d backward", dx, wdx, nx, 0, 0);
        ps_k_free(d, dx_), ps_k_free(d, dyo), ps_k_free(d, ddy), ps_k_free(d, ddx);
        free(x), free(y), free(wy), free(dy), free(dx), free(wdx);
    }
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, *nan = garbage(8), out[8];
    float *dv = dev_from(d, v, 8), *dn = dev_from(d, nan, 8);
    const size_t bad[][4] = {{1, 1, 0, 0}, {2, 0, 0, 0}, {0, 0, 1, 1}, {0, 0, 0, 2}};
    for (size_t i = 0; i < 4; i++) { /* h = w = 2: nothing would be left */
        const size_t *b = bad[i];
        ps_k_crop2d_forward_overwrite(d, dn, dv, 1, 2, 2, 2, b[0], b[1], b[2], b[3]);
        ck_assert_int_eq(ps_k_sync(d), PS_EINVAL);
        ps_k_crop2d_backward_overwrite(d, dn, dv, 1, 2, 2, 2, b[0], b[1], b[2], b[3]);
        ck_assert_int_eq(ps_k_sync(d), PS_EINVAL);
    }
    ck_assert_int_eq(ps_k_sync(d), PS_OK); /* cleared */
    dev_get(d, out, dn, 8);
    for (size_t i = 0; i < 8; i++)
        ck_assert(isnan(out[i]));
    ps_k_free(d, dv), ps_k_free(d, dn), free(nan);
}

typedef struct {
    size_t rows, c;
    float lo, hi, eps;
} ln_case;

static const ln_case lns[] = {
    {1, 1, -1, 1, 1e-3f}, /* one channel: variance 0, y = beta */
    {7, 3, -1, 1, 1e-3f},
    {33, 5, 2, 4, 1e-3f}, /* mean far from 0 */
    {2 * 5 * 5, 17, -3, 1, 1e-5f},
    {8 * 7 * 7, 48, 0, 6, 1e-3f},
    {257, 300, -1, 1, 1e-6f},
    {16, 1024, -1, 3, 1e-3f},
    {3, 2000, -1, 1, 1e-3f},         /* wide rows (transformer-like) */
    {64 * 14 * 14, 8, -1, 1, 1e-3f}, /* many rows: long dgamma sums */
};
#define NLNS (sizeof lns / sizeof lns[0])

static void check_ln_case(ps_k_dev *d, const ln_case *k, int affine, uint64_t seed) {
    char what[160];
    size_t rows = k->rows, c = k->c, n = rows * c;
    float *x = host(n, seed, k->lo, k->hi), *dy = host(n, seed + 1, -1, 1);
    float *gamma = host(c, seed + 2, 0.5f, 2), *beta = host(c, seed + 3, -1, 1);
    const float *g = affine & 1 ? gamma : NULL, *b = affine & 2 ? beta : NULL;
    float *wy = garbage(n), *wm = garbage(rows), *wr = garbage(rows), *y = garbage(n);
    float *m = garbage(rows), *r = garbage(rows);
    ps_ref_ln_forward_overwrite(wy, wm, wr, x, g, b, rows, c, k->eps);
    float *dx_ = dev_from(d, x, n), *dg_ = dev_from(d, gamma, c), *db_ = dev_from(d, beta, c);
    float *dyo = dev_from(d, y, n), *dm = dev_from(d, m, rows), *dr = dev_from(d, r, rows);
    const float *gd = g ? dg_ : NULL, *bd = b ? db_ : NULL;
    ps_k_ln_forward_overwrite(d, dyo, dm, dr, dx_, gd, bd, rows, c, k->eps);
    dev_get(d, y, dyo, n), dev_get(d, m, dm, rows), dev_get(d, r, dr, rows);
    snprintf(what, sizeof what, "layer norm rows=%zu c=%zu gamma=%d beta=%d", rows, c, !!g, !!b);
    float tol = sum_tol(c);
    expect_close(what, m, wm, rows, tol, tol);
    expect_close(what, r, wr, rows, 1e-4f, 1e-4f);
    expect_close(what, y, wy, n, 1e-4f, 1e-4f);

    float *wdx = garbage(n), *wdg = garbage(c), *wdb = garbage(c);
    ps_ref_ln_backward_overwrite(wdx, wdg, wdb, dy, x, wm, wr, g, rows, c);
    float *dwm = dev_from(d, wm, rows), *dwr = dev_from(d, wr, rows), *ddy = dev_from(d, dy, n);
    float tr = sum_tol(rows);
    for (int outs = 0; outs < 4; outs++) {
        float *ox = garbage(n), *og = garbage(c), *ob = garbage(c);
        float *dgx = dev_from(d, ox, n), *dgg = dev_from(d, og, c), *dgb = dev_from(d, ob, c);
        ps_k_ln_backward_overwrite(d, dgx, outs & 1 ? dgg : NULL, outs & 2 ? dgb : NULL, ddy, dx_,
                                   dwm, dwr, gd, rows, c);
        dev_get(d, ox, dgx, n), dev_get(d, og, dgg, c), dev_get(d, ob, dgb, c);
        snprintf(what, sizeof what, "layer norm backward rows=%zu c=%zu gamma=%d outs=%d", rows, c,
                 !!g, outs);
        expect_close(what, ox, wdx, n, 1e-4f, 1e-3f);
        if (outs & 1) expect_close(what, og, wdg, c, tr * 10, tr);
        if (outs & 2) expect_close(what, ob, wdb, c, tr * 10, tr);
        for (size_t j = 0; j < c; j++) /* the skipped ones are untouched */
            ck_assert(((outs & 1) || isnan(og[j])) && ((outs & 2) || isnan(ob[j])));
        ps_k_free(d, dgx), ps_k_free(d, dgg), ps_k_free(d, dgb);
        free(ox), free(og), free(ob);
    }
    float *bufs[] = {dx_, dg_, db_, dyo, dm, dr, dwm, dwr, ddy};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ps_k_free(d, bufs[i]);
    float *hb[] = {x, dy, gamma, beta, wy, wm, wr, y, m, r, wdx, wdg, wdb};
    for (size_t i = 0; i < sizeof hb / sizeof *hb; i++)
        free(hb[i]);
}

static void check_ln(ps_k_dev *d) {
    for (size_t i = 0; i < NLNS; i++)
        for (int affine = 0; affine < 4; affine++)
            check_ln_case(d, &lns[i], affine, 1200 + 10 * i + affine);
}

/* Hand-computed: one row 1, 2, 3, 4 (mean 2.5, variance 1.25), eps 0,
 * gamma 2, beta 1 on every channel. */
static void check_ln_known(ps_k_dev *d) {
    float x[4] = {1, 2, 3, 4}, gb[8] = {2, 2, 2, 2, 1, 1, 1, 1}, y[4], m, r;
    float *dx = dev_from(d, x, 4), *dy = dev_from(d, x, 4), *dm = dev_from(d, x, 1);
    float *dr = dev_from(d, x, 1), *dgb = dev_from(d, gb, 8);
    ps_k_ln_forward_overwrite(d, dy, dm, dr, dx, dgb, dgb + 4, 1, 4, 0.0f);
    dev_get(d, y, dy, 4), dev_get(d, &m, dm, 1), dev_get(d, &r, dr, 1);
    ck_assert_float_eq_tol(m, 2.5f, 1e-6f);
    ck_assert_float_eq_tol(r, 1.0f / sqrtf(1.25f), 1e-6f);
    float s = 2.0f / sqrtf(1.25f),
          want[4] = {1 - 1.5f * s, 1 - 0.5f * s, 1 + 0.5f * s, 1 + 1.5f * s};
    expect_close("layer norm known", y, want, 4, 1e-6f, 1e-6f);
    ps_k_free(d, dx), ps_k_free(d, dy), ps_k_free(d, dm), ps_k_free(d, dr), ps_k_free(d, dgb);
}

/* ---- plans (host code) ----------------------------------------------------- */

START_TEST(dwconv_plans) {
    ps_k_conv p, q;
    for (size_t i = 0; i < NDWS; i++) { /* the geometry of a conv with c*mult outputs */
        const dw_case *k = &dws[i];
        plan_dw(&p, k);
        ck_assert_int_eq(ps_k_conv_plan(&q, k->n, k->h, k->w, k->c, k->kh, k->kw, k->c * k->mult,
                                        k->sh, k->sw, k->same),
                         PS_OK);
        ck_assert_uint_eq(p.cout, k->c * k->mult);
        ck_assert(p.oh == q.oh && p.ow == q.ow && p.pad_top == q.pad_top &&
                  p.pad_left == q.pad_left);
    }
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 64, 16, 16, 48, 3, 3, 1, 2, 2, true), PS_OK);
    ck_assert(p.oh == 8 && p.ow == 8 && p.pad_top == 0 && p.cout == 48);
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 64, 15, 15, 48, 3, 3, 1, 2, 2, true), PS_OK);
    ck_assert(p.oh == 8 && p.pad_top == 1);
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 0, 4, 4, 1, 3, 3, 1, 1, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 1, 4, 4, 0, 3, 3, 1, 1, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 1, 4, 4, 1, 3, 3, 0, 1, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 1, 4, 4, 1, 3, 3, 1, 0, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 1, 2, 4, 1, 3, 3, 1, 1, 1, false), PS_EINVAL);
    ck_assert_int_eq(ps_k_dwconv_plan(&p, 1, 1, 1, SIZE_MAX / 2 + 1, 1, 1, 2, 1, 1, true),
                     PS_EINVAL); /* c * mult overflows (to 0), every other size fits */
    ck_assert_int_eq(ps_k_dwconv_plan(&p, SIZE_MAX / 8, 1024, 1024, 1, 1, 1, 1, 1, 1, true),
                     PS_EINVAL); /* x too large */
}
END_TEST

/* Many rows (a batch of 256 images of 64x64 in one channel block): the CPU's
 * per-channel sums are kept in double, so the statistics and the parameter
 * gradients stay within a few float roundings of the double reference (float
 * sums over 2^20 rows drifted by ~1e-5 relative, which training amplifies;
 * docs/PERFORMANCE.md, "Parity with Keras, step by step"). */
static void check_bn_many_rows(ps_k_dev *d) {
    size_t rows = (size_t)1 << 20, c = 2, n = rows * c;
    float *x = host(n, 7, 0.25f, 0.75f), *dy = host(n, 8, -1.0f, 1.0f), *y = garbage(n);
    float *dx = garbage(n), g[2] = {1.5f, 0.5f}, m[2], v[2], wm[2], wv[2];
    float dg[2], db[2], wdg[2], wdb[2];
    float *wy = garbage(n), *wdx = garbage(n);
    ps_ref_bn_forward_train_overwrite(wy, wm, wv, x, g, NULL, rows, c, 1e-3f);
    ps_k_bn_forward_train_overwrite(d, y, m, v, x, g, NULL, rows, c, 1e-3f);
    ps_ref_bn_backward_overwrite(wdx, wdg, wdb, dy, x, wm, wv, g, rows, c, 1e-3f);
    ps_k_bn_backward_overwrite(d, dx, dg, db, dy, x, wm, wv, g, rows, c, 1e-3f);
    expect_close("bn many rows: mean", m, wm, c, 0.0f, 1e-6f);
    expect_close("bn many rows: variance", v, wv, c, 0.0f, 1e-6f);
    expect_close("bn many rows: dgamma", dg, wdg, c, 0.0f, 1e-5f);
    expect_close("bn many rows: dbeta", db, wdb, c, 0.0f, 1e-5f);
    free(x), free(dy), free(y), free(dx), free(wy), free(wdx);
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(cpu_bn) {
    check_bn_known(ps_k_cpu());
    check_bn(ps_k_cpu());
    check_bn_many_rows(ps_k_cpu());
}
END_TEST

START_TEST(cpu_dwconv) {
    check_dwconv_known(ps_k_cpu());
    check_dwconv(ps_k_cpu());
}
END_TEST

START_TEST(cpu_shape_ops) {
    check_gap(ps_k_cpu());
    check_pad2d(ps_k_cpu());
    check_add(ps_k_cpu());
    check_concat(ps_k_cpu());
}
END_TEST

START_TEST(cpu_apps_ops) {
    check_mul(ps_k_cpu());
    check_mul_channels(ps_k_cpu());
    check_rescale(ps_k_cpu());
    check_norm(ps_k_cpu());
    check_crop2d(ps_k_cpu());
}
END_TEST

START_TEST(cpu_layer_norm) {
    check_ln_known(ps_k_cpu());
    check_ln(ps_k_cpu());
}
END_TEST

/* The same checks on cuda:0; skipped (passes trivially) without a GPU. */
START_TEST(cuda_vs_reference) {
    if (ps_k_cuda_device_count() == 0) {
        fprintf(stderr, "kernels_layers cuda_vs_reference: no CUDA device (built: %s); skipped\n",
                ps_k_cuda_built() ? "yes" : "no");
        return;
    }
    ps_k_dev *d = NULL;
    char err[128];
    ck_assert_msg(ps_k_dev_open("cuda:0", &d, err, sizeof err) == PS_OK, "%s", err);
    check_bn_known(d);
    check_bn(d);
    check_dwconv_known(d);
    check_dwconv(d);
    check_gap(d);
    check_pad2d(d);
    check_add(d);
    check_concat(d);
    check_mul(d);
    check_mul_channels(d);
    check_rescale(d);
    check_norm(d);
    check_crop2d(d);
    check_ln_known(d);
    check_ln(d);
    ck_assert_int_eq(ps_k_sync(d), PS_OK);
    ps_k_dev_close(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kernels_layers");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dwconv_plans);
    tcase_add_test(tc, cpu_bn);
    tcase_add_test(tc, cpu_dwconv);
    tcase_add_test(tc, cpu_shape_ops);
    tcase_add_test(tc, cpu_apps_ops);
    tcase_add_test(tc, cpu_layer_norm);
    tcase_add_test(tc, cuda_vs_reference);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
