/* The image and dropout kernels of kernels.h (conv2d and its plan, im2col,
 * col2im, max and average pooling, dropout) against the direct definitions in
 * kernels/ref.c, plus a finite-difference check of the conv2d gradient; odd
 * shapes, strides 1 to 3, same and valid padding, non-square kernels, c = 1
 * and 3, forced and natural workspace chunking. The same checks run on a CUDA
 * device if present. */
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

static void *dev_from(ps_k_dev *d, const void *src, size_t bytes) {
    void *p;
    ck_assert_int_eq(ps_k_malloc(d, bytes ? bytes : 4, &p), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_dev(d, p, src, bytes), PS_OK);
    return p;
}

/* Syncs, then copies n floats (or int32s) of device buffer p into out. */
static void dev_get(ps_k_dev *d, void *out, const void *p, size_t n) {
    ck_assert_int_eq(ps_k_sync(d), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_host(d, out, p, n * 4), PS_OK);
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         float atol, float rtol) {
    long i = ps_test_first_mismatch(got, want, n, atol, rtol);
    ck_assert_msg(i < 0, "%s: element %ld of %zu: got %.9g want %.9g", what, i, n,
                  i < 0 ? 0.0 : got[i], i < 0 ? 0.0 : want[i]);
}

/* ---- geometry ------------------------------------------------------------ */

typedef struct {
    size_t n, h, w, c, kh, kw, cout, sh, sw;
    bool same;
} conv_case;

static const conv_case convs[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, false}, /* the smallest */
    {2, 7, 5, 3, 3, 3, 4, 1, 1, true},  {2, 7, 5, 3, 3, 3, 4, 2, 2, true},
    {3, 8, 9, 1, 2, 3, 2, 2, 1, false}, /* non-square kernel, mixed strides */
    {2, 9, 7, 3, 3, 2, 5, 2, 2, false}, {1, 6, 6, 3, 5, 5, 1, 3, 3, true},
    {2, 5, 4, 1, 1, 1, 7, 2, 2, true},  {1, 4, 4, 2, 4, 4, 3, 1, 1, false}, /* kernel = input */
    {2, 3, 3, 1, 5, 5, 2, 1, 1, true},  /* kernel larger than a same input */
    {1, 9, 9, 2, 2, 2, 3, 3, 3, false}, /* stride > kernel: cells no window reads */
    {1, 33, 1, 3, 7, 1, 2, 1, 1, true}, {3, 6, 7, 3, 4, 2, 2, 2, 1, true},
    {3, 5, 6, 4, 1, 1, 7, 1, 1, false}, {2, 4, 3, 9, 1, 1, 5, 1, 1, true}, /* 1x1: no im2col */
    {2, 6, 5, 8, 3, 3, 4, 1, 1, true},  {1, 7, 7, 6, 3, 3, 5, 2, 2, false}, /* kernel rows of 16+ */
};
#define NCONVS (sizeof convs / sizeof convs[0])

static void plan_case(ps_k_conv *p, const conv_case *k) {
    ck_assert_int_eq(
        ps_k_conv_plan(p, k->n, k->h, k->w, k->c, k->kh, k->kw, k->cout, k->sh, k->sw, k->same),
        PS_OK);
}

static const char *describe(char *buf, size_t len, const char *what, const ps_k_conv *p) {
    snprintf(buf, len,
             "%s n=%zu h=%zu w=%zu c=%zu k=%zux%zu cout=%zu s=%zu,%zu pad=%zu,%zu chunk=%zu", what,
             p->n, p->h, p->w, p->c, p->kh, p->kw, p->cout, p->sh, p->sw, p->pad_top, p->pad_left,
             p->chunk);
    return buf;
}

/* ---- im2col / col2im ------------------------------------------------------ */

/* Both on all images and on fewer than p->n; outputs pre-filled with NaN. */
static void check_im2col(ps_k_dev *d) {
    char what[160];
    for (size_t ci = 0; ci < NCONVS; ci++) {
        ps_k_conv p;
        plan_case(&p, &convs[ci]);
        size_t K = p.kh * p.kw * p.c, nx = p.n * p.h * p.w * p.c;
        size_t images[2] = {p.n, 1};
        for (int pass = 0; pass < 2; pass++) {
            size_t nimg = images[pass], ncols = nimg * p.oh * p.ow * K,
                   nin = nimg * p.h * p.w * p.c;
            float *x = host(nx, 100 + ci, -1, 1), *cols = garbage(ncols), *want = garbage(ncols);
            ps_ref_im2col_overwrite(&p, want, x, nimg);
            void *dx = dev_from(d, x, nx * 4), *dc = dev_from(d, cols, ncols * 4);
            ps_k_im2col_overwrite(d, &p, dc, dx, nimg);
            dev_get(d, cols, dc, ncols);
            expect_close(describe(what, sizeof what, "im2col", &p), cols, want, ncols, 0, 0);

            float *g = host(ncols, 200 + ci, -1, 1), *dxh = garbage(nin), *wdx = garbage(nin);
            ps_ref_col2im_overwrite(&p, wdx, g, nimg);
            void *dg = dev_from(d, g, ncols * 4), *ddx = dev_from(d, dxh, nin * 4);
            ps_k_col2im_overwrite(d, &p, ddx, dg, nimg);
            dev_get(d, dxh, ddx, nin);
            expect_close(describe(what, sizeof what, "col2im", &p), dxh, wdx, nin, 1e-5f, 1e-5f);
            ps_k_free(d, dx), ps_k_free(d, dc), ps_k_free(d, dg), ps_k_free(d, ddx);
            free(x), free(cols), free(want), free(g), free(dxh), free(wdx);
        }
    }
}

/* ---- conv2d ---------------------------------------------------------------- */

/* Forward (with and without bias), backward overwrite (dx, dw, db; also with
 * dx and db NULL) and backward acc, against the direct convolution, for the
 * planned p->chunk (whatever p says). */
/* The tolerance of a float sum of `terms` products of values in [-1, 1] (dw,
 * db: one term per output pixel of the batch) against the reference: rounding
 * errors grow like sqrt(terms), and the order of the sum depends on the BLAS
 * kernel the machine picks, so a fixed 1e-4 fails some machines at n = 305. */
static float sum_tol(size_t terms) {
    double s = sqrt((double)terms / 10000.0);
    return 1e-4f * (float)(s > 1 ? s : 1);
}

static void conv2d_vs_ref(ps_k_dev *d, const ps_k_conv *p, uint64_t seed) {
    char what[160];
    size_t nx = p->n * p->h * p->w * p->c, ny = p->n * p->oh * p->ow * p->cout;
    size_t nw = p->kh * p->kw * p->c * p->cout, nb = p->cout, nws = ps_k_conv_workspace(p);
    const float tw = sum_tol(p->n * p->oh * p->ow); /* dw and db sum over every output pixel */
    float *x = host(nx, seed, -1, 1), *w = host(nw, seed + 1, -1, 1),
          *b = host(nb, seed + 2, -1, 1);
    float *dy = host(ny, seed + 3, -1, 1), *y = garbage(ny), *want = garbage(ny);
    void *dx_ = dev_from(d, x, nx * 4), *dw_ = dev_from(d, w, nw * 4),
         *db_ = dev_from(d, b, nb * 4);
    void *ddy = dev_from(d, dy, ny * 4), *dout = dev_from(d, y, ny * 4), *ws;
    ck_assert_int_eq(ps_k_malloc(d, nws * 4, &ws), PS_OK);
    for (int with_b = 0; with_b < 2; with_b++) {
        ps_ref_conv2d_forward_overwrite(p, want, x, w, with_b ? b : NULL);
        ck_assert_int_eq(ps_k_copy_to_dev(d, dout, y, ny * 4), PS_OK); /* NaN again */
        ps_k_conv2d_forward_overwrite(d, p, dout, dx_, dw_, with_b ? db_ : NULL, ws);
        float *got = garbage(ny);
        dev_get(d, got, dout, ny);
        expect_close(describe(what, sizeof what, with_b ? "conv fwd" : "conv fwd, no bias", p), got,
                     want, ny, 1e-4f, 1e-4f);
        free(got);
    }

    /* gradients: overwrite from NaN, accumulate onto random values */
    float *gx = garbage(nx), *gw = garbage(nw), *gb = garbage(nb);
    float *wx = garbage(nx), *ww = garbage(nw), *wb = garbage(nb);
    void *dgx = dev_from(d, gx, nx * 4), *dgw = dev_from(d, gw, nw * 4),
         *dgb = dev_from(d, gb, nb * 4);
    ps_ref_conv2d_backward_overwrite(p, wx, ww, wb, dy, x, w);
    ps_k_conv2d_backward_overwrite(d, p, dgx, dgw, dgb, ddy, dx_, dw_, ws);
    dev_get(d, gx, dgx, nx), dev_get(d, gw, dgw, nw), dev_get(d, gb, dgb, nb);
    expect_close(describe(what, sizeof what, "conv bwd dx", p), gx, wx, nx, 1e-4f, 1e-4f);
    expect_close(describe(what, sizeof what, "conv bwd dw", p), gw, ww, nw, tw, tw);
    expect_close(describe(what, sizeof what, "conv bwd db", p), gb, wb, nb, tw, tw);

    float *nan_w = garbage(nw);
    ck_assert_int_eq(ps_k_copy_to_dev(d, dgw, nan_w, nw * 4), PS_OK);
    ps_k_conv2d_backward_overwrite(d, p, NULL, dgw, NULL, ddy, dx_, dw_, ws);
    dev_get(d, gw, dgw, nw);
    expect_close(describe(what, sizeof what, "conv bwd dw only", p), gw, ww, nw, tw, tw);

    float *w0 = host(nw, seed + 4, -1, 1), *b0 = host(nb, seed + 5, -1, 1), *nan_x = garbage(nx);
    memcpy(ww, w0, nw * 4), memcpy(wb, b0, nb * 4);
    ps_ref_conv2d_backward_acc(p, wx, ww, wb, dy, x, w);
    ck_assert_int_eq(ps_k_copy_to_dev(d, dgw, w0, nw * 4), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_dev(d, dgb, b0, nb * 4), PS_OK);
    ck_assert_int_eq(ps_k_copy_to_dev(d, dgx, nan_x, nx * 4), PS_OK);
    ps_k_conv2d_backward_acc(d, p, dgx, dgw, dgb, ddy, dx_, dw_, ws);
    dev_get(d, gx, dgx, nx), dev_get(d, gw, dgw, nw), dev_get(d, gb, dgb, nb);
    expect_close(describe(what, sizeof what, "conv bwd_acc dx (overwritten)", p), gx, wx, nx, 1e-4f,
                 1e-4f);
    expect_close(describe(what, sizeof what, "conv bwd_acc dw", p), gw, ww, nw, tw, tw);
    expect_close(describe(what, sizeof what, "conv bwd_acc db", p), gb, wb, nb, tw, tw);

    ps_k_free(d, dx_), ps_k_free(d, dw_), ps_k_free(d, db_), ps_k_free(d, ddy);
    ps_k_free(d, dout), ps_k_free(d, ws), ps_k_free(d, dgx), ps_k_free(d, dgw), ps_k_free(d, dgb);
    free(x), free(w), free(b), free(dy), free(y), free(want), free(gx), free(gw), free(gb);
    free(wx), free(ww), free(wb), free(nan_w), free(w0), free(b0), free(nan_x);
}

/* Hand-computed: 3x3 ramp, 2x2 (valid) and 3x3 (same) kernels of ones, two
 * output channels (the second kernel is twice the first) and a bias. */
static void check_conv2d_known(ps_k_dev *d) {
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[18], b[2] = {0.5f, -1}, y[18], ws_host[81];
    for (int i = 0; i < 9; i++)
        w[2 * i] = 1, w[2 * i + 1] = 2;
    for (int same = 0; same < 2; same++) {
        ps_k_conv p;
        size_t k = same ? 3 : 2;
        ck_assert_int_eq(ps_k_conv_plan(&p, 1, 3, 3, 1, k, k, 2, 1, 1, same), PS_OK);
        ck_assert_uint_le(ps_k_conv_workspace(&p), 81);
        void *dx = dev_from(d, x, sizeof x), *dw = dev_from(d, w, sizeof w);
        void *db = dev_from(d, b, sizeof b), *dy = dev_from(d, y, sizeof y);
        void *ws = dev_from(d, ws_host, sizeof ws_host);
        ps_k_conv2d_forward_overwrite(d, &p, dy, dx, dw, db, ws);
        size_t ny = p.oh * p.ow * 2;
        dev_get(d, y, dy, ny);
        const float valid[4] = {12, 16, 24, 28};                    /* 2x2 window sums */
        const float sums[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28}; /* 3x3, padded */
        float want[18];
        for (size_t i = 0; i < ny / 2; i++) {
            float s = same ? sums[i] : valid[i];
            want[2 * i] = s + 0.5f, want[2 * i + 1] = 2 * s - 1;
        }
        expect_close(same ? "conv known, same" : "conv known, valid", y, want, ny, 1e-6f, 1e-6f);
        ps_k_free(d, dx), ps_k_free(d, dw), ps_k_free(d, db), ps_k_free(d, dy), ps_k_free(d, ws);
    }
}

/* Every case with the planned chunk, one image per pass, and (n > 2) two
 * images per pass, which leaves a short last chunk. */
static void check_conv2d(ps_k_dev *d) {
    for (size_t ci = 0; ci < NCONVS; ci++) {
        ps_k_conv p;
        plan_case(&p, &convs[ci]);
        ck_assert_uint_eq(p.chunk, p.n); /* small: one pass */
        conv2d_vs_ref(d, &p, 300 + ci * 10);
        p.chunk = 1;
        conv2d_vs_ref(d, &p, 400 + ci * 10);
        if (p.n > 2) {
            p.chunk = 2;
            conv2d_vs_ref(d, &p, 500 + ci * 10);
        }
    }
}

/* A batch whose im2col exceeds the workspace bound: the plan splits it. */
static void check_conv2d_natural_chunks(ps_k_dev *d) {
    ps_k_conv p;
    ck_assert_int_eq(ps_k_conv_plan(&p, 305, 32, 32, 3, 3, 3, 2, 1, 1, true), PS_OK);
    ck_assert_uint_eq(p.chunk, PS_K_CONV_WS_MAX_FLOATS / (32 * 32 * 27)); /* 9 images */
    ck_assert_uint_lt(p.chunk, p.n);
    ck_assert_uint_ne(p.n % p.chunk, 0); /* a short last pass too */
    ck_assert_uint_le(ps_k_conv_workspace(&p), PS_K_CONV_WS_MAX_FLOATS);
    ck_assert_uint_eq(ps_k_conv_workspace(&p), p.chunk * 32 * 32 * 27);
    conv2d_vs_ref(d, &p, 600);
}

/* L = sum(conv(x, w) + b) * g: its gradient from backward (with dy = g)
 * against central differences of the device forward (exact up to rounding,
 * as L is linear in each of x, w and b). */
static void check_conv2d_finite_diff(ps_k_dev *d) {
    ps_k_conv p;
    ck_assert_int_eq(ps_k_conv_plan(&p, 2, 5, 4, 2, 3, 2, 3, 2, 1, true), PS_OK);
    size_t n[3] = {p.n * p.h * p.w * p.c, p.kh * p.kw * p.c * p.cout, p.cout};
    size_t ny = p.n * p.oh * p.ow * p.cout;
    float *v[3] = {host(n[0], 700, -1, 1), host(n[1], 701, -1, 1), host(n[2], 702, -1, 1)};
    float *g = host(ny, 703, -1, 1), *y = garbage(ny), *grad[3];
    void *dv[3], *dg = dev_from(d, g, ny * 4), *dy, *ws, *dgrad[3];
    ck_assert_int_eq(ps_k_malloc(d, ny * 4, &dy), PS_OK);
    ck_assert_int_eq(ps_k_malloc(d, ps_k_conv_workspace(&p) * 4, &ws), PS_OK);
    for (int t = 0; t < 3; t++) {
        dv[t] = dev_from(d, v[t], n[t] * 4);
        grad[t] = garbage(n[t]);
        dgrad[t] = dev_from(d, grad[t], n[t] * 4);
    }
    ps_k_conv2d_backward_overwrite(d, &p, dgrad[0], dgrad[1], dgrad[2], dg, dv[0], dv[1], ws);
    for (int t = 0; t < 3; t++)
        dev_get(d, grad[t], dgrad[t], n[t]);
    const char *names[3] = {"dx", "dw", "db"};
    const float eps = 1e-2f;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < n[t]; i += n[t] / 17 + 1) {
            double L[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                float save = v[t][i];
                v[t][i] += sgn ? -eps : eps;
                ck_assert_int_eq(ps_k_copy_to_dev(d, dv[t], v[t], n[t] * 4), PS_OK);
                v[t][i] = save;
                ps_k_conv2d_forward_overwrite(d, &p, dy, dv[0], dv[1], dv[2], ws);
                dev_get(d, y, dy, ny);
                L[sgn] = 0;
                for (size_t j = 0; j < ny; j++)
                    L[sgn] += (double)y[j] * g[j];
            }
            ck_assert_int_eq(ps_k_copy_to_dev(d, dv[t], v[t], n[t] * 4), PS_OK);
            double fd = (L[0] - L[1]) / (2 * eps);
            ck_assert_msg(fabs(fd - grad[t][i]) <= 1e-3 + 1e-3 * fabs(fd),
                          "conv finite difference %s[%zu]: backward %.7g, difference %.7g",
                          names[t], i, grad[t][i], fd);
        }
    for (int t = 0; t < 3; t++)
        ps_k_free(d, dv[t]), ps_k_free(d, dgrad[t]), free(v[t]), free(grad[t]);
    ps_k_free(d, dg), ps_k_free(d, dy), ps_k_free(d, ws);
    free(g), free(y);
}

/* ---- plans (host code, backend-neutral) ------------------------------------ */

typedef struct {
    size_t len, k, s;
    bool same;
    size_t out, pad;
} axis_case;

static const axis_case axes[] = {
    {7, 3, 2, false, 3, 0}, {7, 3, 1, false, 5, 0}, {7, 7, 1, false, 1, 0}, {10, 5, 3, false, 2, 0},
    {1, 1, 1, false, 1, 0}, {7, 3, 2, true, 4, 1},  {8, 3, 2, true, 4, 0},  {6, 4, 1, true, 6, 1},
    {5, 1, 3, true, 2, 0},  {3, 5, 1, true, 3, 2},  {4, 2, 2, true, 2, 0},  {5, 2, 2, true, 3, 0},
    {9, 4, 2, true, 5, 1},  {1, 3, 1, true, 1, 1},  {2, 2, 1, true, 2, 0},
};

START_TEST(plans) {
    for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++) {
        const axis_case *a = &axes[i];
        ps_k_conv p;
        ps_k_pool q;
        /* along h (w fixed at 5, kernel width 1) and along w */
        ck_assert_int_eq(ps_k_conv_plan(&p, 2, a->len, 5, 3, a->k, 1, 4, a->s, 1, a->same), PS_OK);
        ck_assert_msg(p.oh == a->out && p.pad_top == a->pad && p.ow == 5 && p.pad_left == 0,
                      "conv h=%zu k=%zu s=%zu same=%d: oh=%zu pad=%zu, want %zu %zu", a->len, a->k,
                      a->s, a->same, p.oh, p.pad_top, a->out, a->pad);
        ck_assert_int_eq(ps_k_conv_plan(&p, 2, 5, a->len, 3, 1, a->k, 4, 1, a->s, a->same), PS_OK);
        ck_assert_msg(p.ow == a->out && p.pad_left == a->pad && p.oh == 5 && p.pad_top == 0,
                      "conv w=%zu k=%zu s=%zu same=%d: ow=%zu pad=%zu", a->len, a->k, a->s, a->same,
                      p.ow, p.pad_left);
        ck_assert_int_eq(ps_k_pool_plan(&q, 2, a->len, a->len, 3, a->k, a->k, a->s, a->s, a->same),
                         PS_OK);
        ck_assert_msg(q.oh == a->out && q.ow == a->out && q.pad_top == a->pad &&
                          q.pad_left == a->pad,
                      "pool len=%zu k=%zu s=%zu same=%d: out=%zu pad=%zu", a->len, a->k, a->s,
                      a->same, q.oh, q.pad_top);
    }
    ps_k_conv p;
    ps_k_pool q;
    ck_assert_int_eq(ps_k_conv_plan(&p, 4, 6, 7, 3, 3, 2, 5, 2, 1, false), PS_OK);
    ck_assert(p.n == 4 && p.h == 6 && p.w == 7 && p.c == 3 && p.kh == 3 && p.kw == 2 &&
              p.cout == 5 && p.sh == 2 && p.sw == 1 && p.chunk == 4);
    /* zero sizes, kernels larger than a valid input */
    size_t ok[9] = {2, 5, 5, 3, 3, 3, 4, 1, 1};
    for (int z = 0; z < 9; z++) {
        size_t a[9];
        memcpy(a, ok, sizeof a);
        a[z] = 0;
        for (int same = 0; same < 2; same++)
            ck_assert_msg(ps_k_conv_plan(&p, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                                         same) == PS_EINVAL,
                          "conv plan with argument %d = 0 accepted", z);
    }
    for (int z = 0; z < 8; z++) {
        size_t a[8] = {2, 5, 5, 3, 3, 3, 1, 1};
        a[z] = 0;
        ck_assert_int_eq(ps_k_pool_plan(&q, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], true),
                         PS_EINVAL);
    }
    ck_assert_int_eq(ps_k_conv_plan(&p, 1, 4, 4, 1, 5, 3, 1, 1, 1, false), PS_EINVAL);
    ck_assert_int_eq(ps_k_conv_plan(&p, 1, 4, 4, 1, 3, 5, 1, 1, 1, false), PS_EINVAL);
    ck_assert_int_eq(ps_k_pool_plan(&q, 1, 4, 4, 1, 5, 2, 1, 1, false), PS_EINVAL);
    ck_assert_int_eq(ps_k_pool_plan(&q, 1, 4, 4, 1, 2, 5, 1, 1, false), PS_EINVAL);
    /* overflowing sizes */
    ck_assert_int_eq(ps_k_conv_plan(&p, SIZE_MAX / 2, 4, 4, 1, 1, 1, 1, 1, 1, false), PS_EINVAL);
    ck_assert_int_eq(ps_k_conv_plan(&p, 1, 4, 4, SIZE_MAX / 4, 3, 3, 1, 1, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_conv_plan(&p, 1, 4, 4, 3, 3, 3, SIZE_MAX / 8, 1, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_conv_plan(&p, 1, 4, 4, 1, SIZE_MAX, 1, 1, 1, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_conv_plan(&p, 1, 1, 1, (size_t)1 << 31, 1, 1, 1, 1, 1, true),
                     PS_EINVAL); /* GEMM K > INT_MAX */
    ck_assert_int_eq(ps_k_pool_plan(&q, SIZE_MAX / 2, 4, 4, 1, 2, 2, 1, 1, true), PS_EINVAL);
    ck_assert_int_eq(ps_k_pool_plan(&q, 1, 1 << 16, 1 << 16, 1, 2, 2, 2, 2, true),
                     PS_EINVAL); /* arg positions beyond int32 */
    ck_assert_int_eq(ps_k_pool_plan(&q, 1, 4, 4, 1, SIZE_MAX, 1, 1, 1, true), PS_EINVAL);
    /* chunk: at most n, at least 1 even when one image's im2col is too big */
    ck_assert_int_eq(ps_k_conv_plan(&p, 3, 1024, 1024, 8, 3, 3, 4, 1, 1, true), PS_OK);
    ck_assert_uint_eq(p.chunk, 1);
    ck_assert_int_eq(ps_k_conv_plan(&p, 100, 8, 8, 3, 3, 3, 4, 1, 1, true), PS_OK);
    ck_assert_uint_eq(p.chunk, 100);
    ck_assert_uint_eq(ps_k_conv_workspace(&p), 100 * 64 * 27);
}
END_TEST

/* ---- pooling --------------------------------------------------------------- */

typedef struct {
    size_t n, h, w, c, ph, pw, sh, sw;
    bool same;
} pool_case;

static const pool_case pools[] = {
    {2, 7, 7, 3, 2, 2, 2, 2, false}, {2, 7, 7, 3, 2, 2, 2, 2, true},
    {1, 5, 6, 1, 3, 3, 2, 2, true},  {2, 4, 9, 2, 3, 2, 1, 3, false},
    {1, 1, 1, 1, 1, 1, 1, 1, false}, {1, 6, 5, 3, 3, 1, 3, 1, true},
    {1, 3, 3, 1, 5, 5, 1, 1, true},  {3, 8, 8, 1, 3, 3, 1, 1, true},
    {1, 9, 9, 2, 2, 2, 3, 3, false}, {2, 8, 6, 9, 2, 2, 2, 2, false}, /* windows that tile */
    {1, 5, 3, 2, 3, 3, 3, 3, true},
};

static void check_pool(ps_k_dev *d) {
    char what[160];
    for (size_t pi = 0; pi < sizeof pools / sizeof pools[0]; pi++)
        for (int ties = 0; ties < 3; ties++) { /* 2: NaNs among the inputs */
            const pool_case *k = &pools[pi];
            ps_k_pool p;
            ck_assert_int_eq(
                ps_k_pool_plan(&p, k->n, k->h, k->w, k->c, k->ph, k->pw, k->sh, k->sw, k->same),
                PS_OK);
            snprintf(what, sizeof what, "pool n=%zu h=%zu w=%zu c=%zu win=%zux%zu s=%zu,%zu %s%s",
                     p.n, p.h, p.w, p.c, p.ph, p.pw, p.sh, p.sw, k->same ? "same" : "valid",
                     ties == 1 ? " ties" : ties == 2 ? " NaN" : "");
            size_t nx = p.n * p.h * p.w * p.c, ny = p.n * p.oh * p.ow * p.c;
            float *x = host(nx, 800 + pi, ties ? 0 : -3, ties ? 3 : -1); /* negative: padding
                                                                             must not win */
            if (ties == 1)
                for (size_t i = 0; i < nx; i++)
                    x[i] = floorf(x[i]); /* 0, 1, 2: many ties */
            if (ties == 2) /* NaN wins a window only when the whole window is NaN */
                for (size_t i = 0; i < nx; i++)
                    if (i % 3 != 2) x[i] = NAN;
            float *y = garbage(ny), *wy = garbage(ny), *dy = host(ny, 900 + pi, -1, 1);
            int32_t *arg = malloc(ny * 4), *warg = malloc(ny * 4);
            for (size_t i = 0; i < ny; i++)
                arg[i] = -7;
            ps_ref_maxpool_forward_overwrite(&p, wy, warg, x);
            void *dx = dev_from(d, x, nx * 4), *dyo = dev_from(d, y, ny * 4);
            void *darg = dev_from(d, arg, ny * 4), *ddy = dev_from(d, dy, ny * 4);
            ps_k_maxpool_forward_overwrite(d, &p, dyo, darg, dx);
            dev_get(d, y, dyo, ny), dev_get(d, arg, darg, ny);
            if (ties == 2)
                for (size_t i = 0; i < ny; i++)
                    ck_assert_msg(isnan(y[i]) ? isnan(wy[i]) : y[i] == wy[i],
                                  "%s: y[%zu] = %g, want %g", what, i, y[i], wy[i]);
            else
                expect_close(what, y, wy, ny, 0, 0);
            for (size_t i = 0; i < ny; i++)
                ck_assert_msg(arg[i] == warg[i], "%s: arg[%zu] = %d, want %d", what, i, arg[i],
                              warg[i]);
            if (ties == 2) { /* the backward passes and average pooling: finite inputs only */
                ps_k_free(d, dx), ps_k_free(d, dyo), ps_k_free(d, darg), ps_k_free(d, ddy);
                free(x), free(y), free(wy), free(dy), free(arg), free(warg);
                continue;
            }
            float *g = garbage(nx), *wg = garbage(nx);
            void *dg = dev_from(d, g, nx * 4);
            ps_ref_maxpool_backward_overwrite(&p, wg, dy, warg);
            ps_k_maxpool_backward_overwrite(d, &p, dg, ddy, darg);
            dev_get(d, g, dg, nx);
            expect_close("maxpool backward", g, wg, nx, 1e-6f, 1e-6f);

            ps_ref_avgpool_forward_overwrite(&p, wy, x);
            float *nan_y = garbage(ny);
            ck_assert_int_eq(ps_k_copy_to_dev(d, dyo, nan_y, ny * 4), PS_OK);
            ps_k_avgpool_forward_overwrite(d, &p, dyo, dx);
            dev_get(d, y, dyo, ny);
            expect_close("avgpool forward", y, wy, ny, 1e-6f, 1e-5f);
            ps_ref_avgpool_backward_overwrite(&p, wg, dy);
            float *nan_x = garbage(nx);
            ck_assert_int_eq(ps_k_copy_to_dev(d, dg, nan_x, nx * 4), PS_OK);
            ps_k_avgpool_backward_overwrite(d, &p, dg, ddy);
            dev_get(d, g, dg, nx);
            expect_close("avgpool backward", g, wg, nx, 1e-6f, 1e-5f);
            double sdx = 0, sdy = 0; /* each window hands all of its dy to its cells */
            for (size_t i = 0; i < nx; i++)
                sdx += g[i];
            for (size_t i = 0; i < ny; i++)
                sdy += dy[i];
            ck_assert_msg(fabs(sdx - sdy) < 1e-4, "avgpool backward: sum dx %g, sum dy %g", sdx,
                          sdy);
            ps_k_free(d, dx), ps_k_free(d, dyo), ps_k_free(d, darg), ps_k_free(d, ddy);
            ps_k_free(d, dg);
            free(x), free(y), free(wy), free(dy), free(arg), free(warg), free(g), free(wg);
            free(nan_x), free(nan_y);
        }
}

/* Hand-computed cases: ties, all-negative input under same padding, and the
 * mean over real cells only. */
static void check_pool_known(ps_k_dev *d) {
    ps_k_pool p;
    float y[9];
    int32_t arg[9];
    /* ties: the first (row-major) wins */
    float tie[4] = {1, 3, 3, 2};
    ck_assert_int_eq(ps_k_pool_plan(&p, 1, 2, 2, 1, 2, 2, 2, 2, false), PS_OK);
    void *dx = dev_from(d, tie, sizeof tie), *dy, *darg;
    ck_assert_int_eq(ps_k_malloc(d, sizeof y, &dy), PS_OK);
    ck_assert_int_eq(ps_k_malloc(d, sizeof arg, &darg), PS_OK);
    ps_k_maxpool_forward_overwrite(d, &p, dy, darg, dx);
    dev_get(d, y, dy, 1), dev_get(d, arg, darg, 1);
    ck_assert(y[0] == 3 && arg[0] == 1);
    ps_k_free(d, dx);
    /* NaN loses to any number (even in front); an all-NaN window gives NaN */
    float nan_first[8] = {NAN, 1, 3, 2, NAN, NAN, NAN, NAN};
    ck_assert_int_eq(ps_k_pool_plan(&p, 2, 2, 2, 1, 2, 2, 2, 2, false), PS_OK);
    dx = dev_from(d, nan_first, sizeof nan_first);
    ps_k_maxpool_forward_overwrite(d, &p, dy, darg, dx);
    dev_get(d, y, dy, 2), dev_get(d, arg, darg, 2);
    ck_assert_msg(y[0] == 3 && arg[0] == 2, "maxpool NaN first: %g at %d", y[0], arg[0]);
    ck_assert(isnan(y[1]) && arg[1] >= 0 && arg[1] < 4);
    ps_k_free(d, dx);

    /* 3x3 of -1..-9, 2x2 windows, stride 2, same: padding after, never wins */
    float neg[9] = {-1, -2, -3, -4, -5, -6, -7, -8, -9};
    ck_assert_int_eq(ps_k_pool_plan(&p, 1, 3, 3, 1, 2, 2, 2, 2, true), PS_OK);
    ck_assert(p.oh == 2 && p.ow == 2 && p.pad_top == 0 && p.pad_left == 0);
    dx = dev_from(d, neg, sizeof neg);
    ps_k_maxpool_forward_overwrite(d, &p, dy, darg, dx);
    dev_get(d, y, dy, 4), dev_get(d, arg, darg, 4);
    float wmax[4] = {-1, -3, -7, -9};
    int32_t warg[4] = {0, 2, 6, 8};
    expect_close("maxpool same, negative", y, wmax, 4, 0, 0);
    ck_assert(memcmp(arg, warg, sizeof warg) == 0);
    ps_k_avgpool_forward_overwrite(d, &p, dy, dx);
    dev_get(d, y, dy, 4);
    float wavg[4] = {-3, -4.5f, -7.5f, -9};
    expect_close("avgpool same, stride 2", y, wavg, 4, 1e-6f, 1e-6f);
    ps_k_free(d, dx);

    /* 3x3 of 1..9, 3x3 windows, stride 1, same (one padding cell each side) */
    float ramp[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ck_assert_int_eq(ps_k_pool_plan(&p, 1, 3, 3, 1, 3, 3, 1, 1, true), PS_OK);
    ck_assert(p.pad_top == 1 && p.pad_left == 1);
    dx = dev_from(d, ramp, sizeof ramp);
    ps_k_avgpool_forward_overwrite(d, &p, dy, dx);
    dev_get(d, y, dy, 9);
    float want[9] = {3, 3.5f, 4, 4.5f, 5, 5.5f, 6, 6.5f, 7};
    expect_close("avgpool same, padding not counted", y, want, 9, 1e-6f, 1e-6f);
    ck_assert_int_eq(ps_k_copy_to_dev(d, dx, ones, sizeof ones), PS_OK);
    ps_k_avgpool_backward_overwrite(d, &p, dy, dx); /* dy := dx(ones) */
    dev_get(d, y, dy, 9);
    float corner = 1.0f / 4 + 1.0f / 6 + 1.0f / 6 + 1.0f / 9;
    ck_assert_float_eq_tol(y[0], corner, 1e-6f);
    ck_assert_float_eq_tol(y[4], 4.0f / 4 + 4.0f / 6 + 1.0f / 9,
                           1e-6f); /* corners, edges, centre */
    ps_k_free(d, dx), ps_k_free(d, dy), ps_k_free(d, darg);
}

/* ---- dropout -------------------------------------------------------------- */

static void check_dropout(ps_k_dev *d) {
    const size_t ns[] = {1, 7, 33, 1000};
    const float rates[] = {0.0f, 0.1f, 0.5f, 0.9f};
    for (size_t ni = 0; ni < 4; ni++)
        for (size_t ri = 0; ri < 4; ri++)
            for (uint64_t seed = 0; seed < 3; seed++) {
                size_t n = ns[ni];
                float rate = rates[ri];
                float *x = host(n, 1000 + ni, -2, 2), *y = garbage(n), *want = garbage(n);
                void *dx = dev_from(d, x, n * 4), *dy = dev_from(d, y, n * 4);
                ps_ref_dropout_forward_overwrite(want, x, n, rate, seed);
                ps_k_dropout_forward_overwrite(d, dy, dx, n, rate, seed);
                dev_get(d, y, dy, n);
                expect_close("dropout forward", y, want, n, 0, 1e-6f);
                if (rate == 0.0f) expect_close("dropout rate 0", y, x, n, 0, 0);
                ps_ref_dropout_backward_overwrite(want, x, n, rate, seed);
                ps_k_dropout_backward_overwrite(d, dy, dx, n, rate, seed);
                dev_get(d, y, dy, n);
                expect_close("dropout backward", y, want, n, 0, 1e-6f);
                ps_k_dropout_forward_overwrite(d, dx, dx, n, rate, seed); /* in place */
                dev_get(d, y, dx, n);
                expect_close("dropout in place", y, want, n, 0, 1e-6f);
                /* whole groups (samples) kept or dropped: a ragged last group too */
                size_t group = n > 7 ? 7 : n;
                ck_assert_int_eq(ps_k_copy_to_dev(d, dx, x, n * 4), PS_OK); /* x again */
                ps_ref_dropout_group_forward_overwrite(want, x, n, group, rate, seed);
                ps_k_dropout_group_forward_overwrite(d, dy, dx, n, group, rate, seed);
                dev_get(d, y, dy, n);
                expect_close("dropout by group", y, want, n, 0, 1e-6f);
                for (size_t g = 0; g * group < n; g++)
                    for (size_t i = g * group + 1; i < n && i < (g + 1) * group; i++)
                        ck_assert_msg((y[i] == 0.0f) == (y[g * group] == 0.0f) || x[i] == 0.0f,
                                      "dropout by group: group %zu split at %zu", g, i);
                ps_k_dropout_group_backward_overwrite(d, dy, dx, n, group, rate, seed);
                dev_get(d, y, dy, n);
                expect_close("dropout by group backward", y, want, n, 0, 1e-6f);
                ps_k_free(d, dx), ps_k_free(d, dy);
                free(x), free(y), free(want);
            }

    /* statistics over 1e5 elements of ones */
    size_t n = 100000;
    float *ones = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    void *d1 = dev_from(d, ones, n * 4), *da, *db;
    ck_assert_int_eq(ps_k_malloc(d, n * 4, &da), PS_OK);
    ck_assert_int_eq(ps_k_malloc(d, n * 4, &db), PS_OK);
    for (size_t ri = 1; ri < 4; ri++) {
        float rate = rates[ri], keep = 1.0f / (1.0f - rate);
        ps_k_dropout_forward_overwrite(d, da, d1, n, rate, 42);
        ps_k_dropout_backward_overwrite(d, db, d1, n, rate, 42);
        dev_get(d, a, da, n), dev_get(d, b, db, n);
        ck_assert_msg(memcmp(a, b, n * 4) == 0, "dropout rate %g: backward mask differs", rate);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(a[i] == 0.0f || fabsf(a[i] - keep) <= 1e-6f * keep,
                          "dropout rate %g: element %zu = %g, want 0 or %g", rate, i, a[i], keep);
            kept += a[i] != 0.0f;
        }
        double frac = (double)kept / (double)n;
        ck_assert_msg(fabs(frac - (1 - rate)) < 0.01, "dropout rate %g: kept %.4f", rate, frac);
        ps_k_dropout_forward_overwrite(d, db, d1, n, rate, 43); /* another seed */
        dev_get(d, b, db, n);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++)
            differ += (a[i] != 0.0f) != (b[i] != 0.0f);
        double expect = 2.0 * rate * (1 - rate); /* independent masks */
        ck_assert_msg(fabs((double)differ / (double)n - expect) < 0.02,
                      "dropout rate %g: seeds 42 and 43 differ on %.4f, want about %.4f", rate,
                      (double)differ / (double)n, expect);
    }
    ps_k_free(d, d1), ps_k_free(d, da), ps_k_free(d, db);
    free(ones), free(a), free(b);
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(cpu_im2col_col2im) {
    check_im2col(ps_k_cpu());
}
END_TEST

START_TEST(cpu_conv2d) {
    check_conv2d_known(ps_k_cpu());
    check_conv2d(ps_k_cpu());
}
END_TEST

START_TEST(cpu_conv2d_natural_chunks) {
    check_conv2d_natural_chunks(ps_k_cpu());
}
END_TEST

START_TEST(cpu_conv2d_finite_diff) {
    check_conv2d_finite_diff(ps_k_cpu());
}
END_TEST

START_TEST(cpu_pool) {
    check_pool(ps_k_cpu());
    check_pool_known(ps_k_cpu());
}
END_TEST

START_TEST(cpu_dropout) {
    check_dropout(ps_k_cpu());
}
END_TEST

/* The same checks on cuda:0; skipped (passes trivially) without a GPU. */
START_TEST(cuda_vs_reference) {
    if (ps_k_cuda_device_count() == 0) {
        fprintf(stderr, "kernels_conv cuda_vs_reference: no CUDA device (built: %s); skipped\n",
                ps_k_cuda_built() ? "yes" : "no");
        return;
    }
    ps_k_dev *d = NULL;
    char err[128];
    ck_assert_msg(ps_k_dev_open("cuda:0", &d, err, sizeof err) == PS_OK, "%s", err);
    check_im2col(d);
    check_conv2d_known(d);
    check_conv2d(d);
    check_conv2d_natural_chunks(d);
    check_conv2d_finite_diff(d);
    check_pool(d);
    check_pool_known(d);
    check_dropout(d);
    ck_assert_int_eq(ps_k_sync(d), PS_OK);
    ps_k_dev_close(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kernels_conv");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, plans);
    tcase_add_test(tc, cpu_im2col_col2im);
    tcase_add_test(tc, cpu_conv2d);
    tcase_add_test(tc, cpu_conv2d_natural_chunks);
    tcase_add_test(tc, cpu_conv2d_finite_diff);
    tcase_add_test(tc, cpu_pool);
    tcase_add_test(tc, cpu_dropout);
    tcase_add_test(tc, cuda_vs_reference);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
