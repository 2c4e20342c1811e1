/* Backend-neutral conv2d and the conv, depthwise conv and pool planners: im2col of a chunk of
 * images into the workspace, then GEMM, through the dispatching ps_k_* calls,
 * so every backend gets conv2d from its im2col, col2im, GEMM and column sums. */
#include <limits.h>
#include <stdint.h>

#include "backend.h"
#include "kernels.h"
#include "ps_error.h"

#define WS_MAX_FLOATS PS_K_CONV_WS_MAX_FLOATS

/* *out = a * b; returns false when it overflows. */
static bool mul(size_t a, size_t b, size_t *out) {
    if (a && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

/* Output size and leading padding along one axis for input len, window k and
 * stride s: valid (no padding, k <= len) or same (TensorFlow: the odd padding
 * cell goes after). Returns false for zero sizes or a window too large. */
static bool plan_axis(size_t len, size_t k, size_t s, bool same, size_t *out, size_t *pad) {
    if (len == 0 || k == 0 || s == 0) return false;
    if (!same) {
        if (k > len) return false;
        *out = (len - k) / s + 1; /* ceil((len - k + 1) / s) */
        *pad = 0;
        return true;
    }
    *out = (len - 1) / s + 1;     /* ceil(len / s) */
    size_t span = (*out - 1) * s; /* < len: cannot overflow */
    if (k > SIZE_MAX - span) return false;
    *pad = span + k > len ? (span + k - len) / 2 : 0;
    return true;
}

int ps_k_conv_plan(ps_k_conv *p, size_t n, size_t h, size_t w, size_t c, size_t kh, size_t kw,
                   size_t cout, size_t sh, size_t sw, bool same) {
    ps_k_conv q = {
        .n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .cout = cout, .sh = sh, .sw = sw};
    if (n == 0 || c == 0 || cout == 0) return PS_EINVAL;
    if (!plan_axis(h, kh, sh, same, &q.oh, &q.pad_top)) return PS_EINVAL;
    if (!plan_axis(w, kw, sw, same, &q.ow, &q.pad_left)) return PS_EINVAL;
    /* every buffer size and GEMM dimension must be representable */
    size_t t, kk, pix, per_img;
    if (!mul(n, h, &t) || !mul(t, w, &t) || !mul(t, c, &t)) return PS_EINVAL;              /* x */
    if (!mul(q.oh, q.ow, &pix) || !mul(n, pix, &t) || !mul(t, cout, &t)) return PS_EINVAL; /* y */
    if (!mul(kh, kw, &t) || !mul(t, c, &kk) || !mul(kk, cout, &t)) return PS_EINVAL;       /* w */
    if (!mul(pix, kk, &per_img) || !mul(n, per_img, &t)) return PS_EINVAL; /* all cols */
    if (kk > INT_MAX || cout > INT_MAX || pix > INT_MAX) return PS_EINVAL;
    q.chunk = per_img >= WS_MAX_FLOATS ? 1 : WS_MAX_FLOATS / per_img;
    if (q.chunk > n) q.chunk = n;
    if (q.chunk * pix > INT_MAX) q.chunk = INT_MAX / pix; /* GEMM rows; pix <= INT_MAX */
    *p = q;
    return PS_OK;
}

int ps_k_dwconv_plan(ps_k_conv *p, size_t n, size_t h, size_t w, size_t c, size_t kh, size_t kw,
                     size_t mult, size_t sh, size_t sw, bool same) {
    ps_k_conv q = {.n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .sh = sh, .sw = sw};
    if (n == 0 || c == 0 || mult == 0 || !mul(c, mult, &q.cout)) return PS_EINVAL;
    if (!plan_axis(h, kh, sh, same, &q.oh, &q.pad_top)) return PS_EINVAL;
    if (!plan_axis(w, kw, sw, same, &q.ow, &q.pad_left)) return PS_EINVAL;
    size_t t; /* x, y and w sizes must be representable */
    if (!mul(n, h, &t) || !mul(t, w, &t) || !mul(t, c, &t)) return PS_EINVAL;
    if (!mul(q.oh, q.ow, &t) || !mul(n, t, &t) || !mul(t, q.cout, &t)) return PS_EINVAL;
    if (!mul(kh, kw, &t) || !mul(t, q.cout, &t)) return PS_EINVAL;
    q.chunk = n; /* unused: no workspace */
    *p = q;
    return PS_OK;
}

size_t ps_k_conv_workspace(const ps_k_conv *p) {
    return p->chunk * p->oh * p->ow * p->kh * p->kw * p->c;
}

int ps_k_pool_plan(ps_k_pool *p, size_t n, size_t h, size_t w, size_t c, size_t ph, size_t pw,
                   size_t sh, size_t sw, bool same) {
    ps_k_pool q = {.n = n, .h = h, .w = w, .c = c, .ph = ph, .pw = pw, .sh = sh, .sw = sw};
    if (n == 0 || c == 0) return PS_EINVAL;
    if (!plan_axis(h, ph, sh, same, &q.oh, &q.pad_top)) return PS_EINVAL;
    if (!plan_axis(w, pw, sw, same, &q.ow, &q.pad_left)) return PS_EINVAL;
    size_t t;
    if (!mul(h, w, &t) || t > INT32_MAX) return PS_EINVAL; /* arg holds y * w + x */
    if (!mul(n, t, &t) || !mul(t, c, &t)) return PS_EINVAL;
    if (!mul(q.oh, q.ow, &t) || !mul(n, t, &t) || !mul(t, c, &t)) return PS_EINVAL;
    *p = q;
    return PS_OK;
}

/* ps_k_gemm in p->prec: a reduced-precision GEMM's failure is kept for ps_k_sync. */
static void conv_gemm(ps_k_dev *d, const ps_k_conv *p, bool ta, bool tb, size_t M, size_t N,
                      size_t K, const float *A, const float *B, float beta, float *C) {
    if (p->prec == PS_K_PREC_F32)
        ps_k_gemm(d, ta, tb, M, N, K, 1.0f, A, B, beta, C);
    else
        ps__dev_fail(d, ps_k_gemm_ex(d, p->prec, ta, tb, M, N, K, 1.0f, A, B, beta, C));
}

/* A 1x1 kernel with stride 1 (no padding then): im2col is the identity, the
 * images themselves are the GEMM's [pixels, c] operand and col2im's output. */
static bool cols_are_input(const ps_k_conv *p) {
    return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1;
}

/* The chunk's im2col: the input itself for a 1x1 kernel, else built in ws. */
static const float *chunk_cols(ps_k_dev *d, const ps_k_conv *p, float *ws, const float *x,
                               size_t nb) {
    if (cols_are_input(p)) return x;
    ps_k_im2col_overwrite(d, p, ws, x, nb);
    return ws;
}

void ps_k_conv2d_forward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *y, const float *x,
                                   const float *w, const float *b, float *ws) {
    size_t pix = p->oh * p->ow, K = p->kh * p->kw * p->c, img_in = p->h * p->w * p->c;
    for (size_t i0 = 0; i0 < p->n; i0 += p->chunk) {
        size_t nb = p->n - i0 < p->chunk ? p->n - i0 : p->chunk;
        const float *cols = chunk_cols(d, p, ws, x + i0 * img_in, nb);
        conv_gemm(d, p, false, false, nb * pix, p->cout, K, cols, w, 0.0f, y + i0 * pix * p->cout);
    }
    if (b) ps_k_bias_add_rows_acc(d, y, b, p->n * pix, p->cout);
}

/* dw and db are overwritten (acc false) or added to; dx is overwritten. The
 * workspace holds a chunk's im2col (for dw), then its column gradient (for dx). */
static void conv2d_backward(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw, float *db,
                            const float *dy, const float *x, const float *w, float *ws, bool acc) {
    size_t pix = p->oh * p->ow, K = p->kh * p->kw * p->c, img_in = p->h * p->w * p->c;
    if (db) {
        if (acc)
            ps_k_col_sum_acc(d, db, dy, p->n * pix, p->cout);
        else
            ps_k_col_sum_overwrite(d, db, dy, p->n * pix, p->cout);
    }
    for (size_t i0 = 0; i0 < p->n; i0 += p->chunk) {
        size_t nb = p->n - i0 < p->chunk ? p->n - i0 : p->chunk, rows = nb * pix;
        const float *dyc = dy + i0 * pix * p->cout;
        if (dw) { /* dw[K, cout] (+)= cols^T @ dy */
            const float *cols = chunk_cols(d, p, ws, x + i0 * img_in, nb);
            float beta = (i0 == 0 && !acc) ? 0.0f : 1.0f;
            conv_gemm(d, p, true, false, K, p->cout, rows, cols, dyc, beta, dw);
        }
        if (dx && cols_are_input(p)) { /* dx[rows, c] = dy @ w^T */
            conv_gemm(d, p, false, true, rows, K, p->cout, dyc, w, 0.0f, dx + i0 * img_in);
        } else if (dx) { /* dcols[rows, K] = dy @ w^T, then scattered back onto the images */
            conv_gemm(d, p, false, true, rows, K, p->cout, dyc, w, 0.0f, ws);
            ps_k_col2im_overwrite(d, p, dx + i0 * img_in, ws, nb);
        }
    }
}

void ps_k_conv2d_backward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw,
                                    float *db, const float *dy, const float *x, const float *w,
                                    float *ws) {
    conv2d_backward(d, p, dx, dw, db, dy, x, w, ws, false);
}

void ps_k_conv2d_backward_acc(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw, float *db,
                              const float *dy, const float *x, const float *w, float *ws) {
    conv2d_backward(d, p, dx, dw, db, dy, x, w, ws, true);
}
