/* Reference kernels (see ref.h): the obvious loops, in double, written
 * independently of ew.h so that the tests check the shared formulas too (only
 * the fp16/bf16 rounding and the dropout mask come from ew.h: they define them). */
#include "ref.h"

#include <math.h>
#include <stdlib.h>

#include "ew.h" /* only ps_ew_round_* and ps_ew_dropout_keep: definitions */
#include "ps_error.h"

void ps_ref_gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
                 const float *A, const float *B, float beta, float *C) {
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (size_t k = 0; k < K; k++) {
                double a = trans_a ? A[k * M + i] : A[i * K + k];
                double b = trans_b ? B[j * K + k] : B[k * N + j];
                acc += a * b;
            }
            double c = beta == 0.0f ? 0.0 : (double)beta * C[i * N + j];
            C[i * N + j] = (float)(alpha * acc + c);
        }
    }
}

void ps_ref_bias_add_rows_acc(float *x, const float *bias, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            x[r * cols + c] += bias[c];
}

void ps_ref_col_sum_overwrite(float *out, const float *x, size_t rows, size_t cols) {
    for (size_t c = 0; c < cols; c++) {
        double s = 0.0;
        for (size_t r = 0; r < rows; r++)
            s += x[r * cols + c];
        out[c] = (float)s;
    }
}

void ps_ref_col_sum_acc(float *out, const float *x, size_t rows, size_t cols) {
    for (size_t c = 0; c < cols; c++) {
        double s = out[c];
        for (size_t r = 0; r < rows; r++)
            s += x[r * cols + c];
        out[c] = (float)s;
    }
}

static double act_f(ps_k_act act, double x) {
    switch (act) {
    case PS_K_ACT_RELU:
        return x > 0 ? x : 0;
    case PS_K_ACT_RELU6:
        return x <= 0 ? 0 : x >= 6 ? 6 : x;
    case PS_K_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case PS_K_ACT_TANH:
        return tanh(x);
    case PS_K_ACT_GELU:
        return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case PS_K_ACT_SWISH:
        return x / (1.0 + exp(-x));
    case PS_K_ACT_HARD_SIGMOID: /* Keras 3: 0 for x <= -3, 1 for x >= 3, x/6 + 1/2 between */
        return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5;
    case PS_K_ACT_HARD_SWISH:
        return x <= -3 ? 0 : x >= 3 ? x : x * (x / 6 + 0.5);
    default:
        return x;
    }
}

/* f'(x), from the input. */
static double act_df(ps_k_act act, double x) {
    switch (act) {
    case PS_K_ACT_RELU:
        return x > 0 ? 1 : 0;
    case PS_K_ACT_RELU6:
        return x > 0 && x < 6 ? 1 : 0;
    case PS_K_ACT_SIGMOID: {
        double s = 1.0 / (1.0 + exp(-x));
        return s * (1 - s);
    }
    case PS_K_ACT_TANH: {
        double t = tanh(x);
        return 1 - t * t;
    }
    case PS_K_ACT_GELU: /* Phi(x) + x phi(x) */
        return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * acos(-1.0));
    case PS_K_ACT_SWISH: { /* s + x s (1 - s) */
        double s = 1.0 / (1.0 + exp(-x));
        return s + x * s * (1 - s);
    }
    /* At the kinks -3 and 3, TensorFlow's convention (relu6' = 0 at 0 and 6):
     * hard_sigmoid' = 0 at both; hard_swish' = hard_sigmoid + x hard_sigmoid',
     * 0 at -3 and 1 at 3. */
    case PS_K_ACT_HARD_SIGMOID:
        return x > -3 && x < 3 ? 1.0 / 6 : 0;
    case PS_K_ACT_HARD_SWISH:
        return x <= -3 ? 0 : x >= 3 ? 1 : (2 * x + 3) / 6;
    default:
        return 1;
    }
}

void ps_ref_act_forward_overwrite(ps_k_act act, float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)act_f(act, x[i]);
}

void ps_ref_act_backward_overwrite(ps_k_act act, float *dx, const float *dy, const float *x,
                                   const float *y, size_t n) {
    (void)y;
    for (size_t i = 0; i < n; i++)
        dx[i] = (float)(act_df(act, x[i]) * dy[i]);
}

void ps_ref_act_backward_acc(ps_k_act act, float *dx, const float *dy, const float *x,
                             const float *y, size_t n) {
    (void)y;
    for (size_t i = 0; i < n; i++)
        dx[i] = (float)(dx[i] + act_df(act, x[i]) * dy[i]);
}

void ps_ref_softmax_rows_overwrite(float *probs, const float *logits, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * cols;
        double mx = x[0], sum = 0.0;
        for (size_t c = 1; c < cols; c++)
            mx = x[c] > mx ? x[c] : mx;
        for (size_t c = 0; c < cols; c++)
            sum += exp(x[c] - mx);
        for (size_t c = 0; c < cols; c++)
            probs[r * cols + c] = (float)(exp(x[c] - mx) / sum);
    }
}

int ps_ref_softmax_ce_overwrite(float *dlogits, const float *logits, const int32_t *labels,
                                size_t rows, size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    for (size_t r = 0; r < rows; r++)
        if (labels[r] < 0 || (size_t)labels[r] >= cols) return PS_EINVAL;
    double total = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * cols;
        double mx = x[0], sum = 0.0;
        for (size_t c = 1; c < cols; c++)
            mx = x[c] > mx ? x[c] : mx;
        for (size_t c = 0; c < cols; c++)
            sum += exp(x[c] - mx);
        total += mx + log(sum) - x[labels[r]];
        if (dlogits) {
            for (size_t c = 0; c < cols; c++) {
                double p = exp(x[c] - mx) / sum;
                dlogits[r * cols + c] = (float)((p - ((int32_t)c == labels[r])) / (double)rows);
            }
        }
    }
    *loss = (float)(total / (double)rows);
    return PS_OK;
}

int ps_ref_argmax_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols,
                          size_t *correct) {
    if (cols == 0) return PS_EINVAL;
    size_t hits = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t best = 0;
        for (size_t c = 1; c < cols; c++)
            if (logits[r * cols + c] > logits[r * cols + best] || isnan(logits[r * cols + best]))
                best = c; /* NaN only wins an all-NaN row */
        hits += (int32_t)best == labels[r];
    }
    *correct = hits;
    return PS_OK;
}

/* A rounded to prec, as a double. */
static double rounded(ps_k_prec prec, float x) {
    if (prec == PS_K_PREC_F16) return ps_ew_round_f16(x);
    if (prec == PS_K_PREC_BF16) return ps_ew_round_bf16(x);
    return x;
}

int ps_ref_gemm_ex(ps_k_prec prec, bool trans_a, bool trans_b, size_t M, size_t N, size_t K,
                   float alpha, const float *A, const float *B, float beta, float *C) {
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (size_t k = 0; k < K; k++) {
                double a = rounded(prec, trans_a ? A[k * M + i] : A[i * K + k]);
                double b = rounded(prec, trans_b ? B[j * K + k] : B[k * N + j]);
                acc += a * b;
            }
            double c = beta == 0.0f ? 0.0 : (double)beta * C[i * N + j];
            C[i * N + j] = (float)(alpha * acc + c);
        }
    }
    return PS_OK;
}

int ps_ref_bce_overwrite(float *dlogits, const float *logits, const float *targets, size_t rows,
                         size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    size_t n = rows * cols;
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = logits[i], t = targets[i];
        /* log sigmoid(x) = -log(1 + e^-x), log(1 - sigmoid(x)) = -log(1 + e^x) */
        total += t * log1p(exp(-x)) + (1 - t) * log1p(exp(x));
        if (dlogits) dlogits[i] = (float)((1.0 / (1.0 + exp(-x)) - t) / (double)n);
    }
    *loss = (float)(total / (double)n);
    return PS_OK;
}

int ps_ref_mse_overwrite(float *dpred, const float *pred, const float *targets, size_t rows,
                         size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    size_t n = rows * cols;
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)pred[i] - targets[i];
        total += e * e;
        if (dpred) dpred[i] = (float)(2 * e / (double)n);
    }
    *loss = (float)(total / (double)n);
    return PS_OK;
}

void ps_ref_onehot_overwrite(float *out, const int32_t *labels, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            out[r * cols + c] = cols == 1 ? (float)labels[r] : (labels[r] == (int64_t)c);
}

int ps_ref_binary_correct(const float *logits, const int32_t *labels, size_t rows,
                          size_t *correct) {
    size_t hits = 0;
    for (size_t r = 0; r < rows; r++) {
        int predicted = logits[r] > 0, actual = labels[r] != 0;
        hits += predicted == actual;
    }
    *correct = hits;
    return PS_OK;
}

int ps_ref_sum(const float *x, size_t n, double *out) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    *out = s;
    return PS_OK;
}

int ps_ref_sumsq(const float *x, size_t n, double *out) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    *out = s;
    return PS_OK;
}

void ps_ref_dropout_forward_overwrite(float *y, const float *x, size_t n, float rate,
                                      uint64_t seed) {
    double scale = 1.0 / (1.0 - (double)rate);
    for (size_t i = 0; i < n; i++)
        y[i] = ps_ew_dropout_keep(seed, i, rate) ? (float)(x[i] * scale) : 0.0f;
}

void ps_ref_dropout_backward_overwrite(float *dx, const float *dy, size_t n, float rate,
                                       uint64_t seed) {
    ps_ref_dropout_forward_overwrite(dx, dy, n, rate, seed);
}

void ps_ref_dropout_group_forward_overwrite(float *y, const float *x, size_t n, size_t group,
                                            float rate, uint64_t seed) {
    double scale = 1.0 / (1.0 - (double)rate);
    for (size_t i = 0; i < n; i++)
        y[i] = ps_ew_dropout_keep(seed, i / group, rate) ? (float)(x[i] * scale) : 0.0f;
}

/* ---- convolution: from the definition ------------------------------------ */

/* Input row (or column) read by output index o and kernel tap k; may be
 * outside [0, len), i.e. in the padding. */
static long tap(size_t o, size_t s, size_t k, size_t pad) {
    return (long)(o * s + k) - (long)pad;
}

static bool inside(long i, size_t len) {
    return i >= 0 && i < (long)len;
}

/* x[img, iy, ix, ci], 0 in the padding. */
static double at(const ps_k_conv *p, const float *x, size_t img, long iy, long ix, size_t ci) {
    if (!inside(iy, p->h) || !inside(ix, p->w)) return 0.0;
    return x[((img * p->h + (size_t)iy) * p->w + (size_t)ix) * p->c + ci];
}

void ps_ref_im2col_overwrite(const ps_k_conv *p, float *cols, const float *x, size_t n) {
    size_t K = p->kh * p->kw * p->c;
    for (size_t img = 0; img < n; img++)
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++)
                for (size_t ky = 0; ky < p->kh; ky++)
                    for (size_t kx = 0; kx < p->kw; kx++)
                        for (size_t ci = 0; ci < p->c; ci++) {
                            size_t r = (img * p->oh + oy) * p->ow + ox;
                            size_t k = (ky * p->kw + kx) * p->c + ci;
                            cols[r * K + k] = (float)at(p, x, img, tap(oy, p->sh, ky, p->pad_top),
                                                        tap(ox, p->sw, kx, p->pad_left), ci);
                        }
}

/* Adds v to acc[img, iy, ix, ci] unless that cell is padding. */
static void scatter(const ps_k_conv *p, double *acc, size_t img, long iy, long ix, size_t ci,
                    double v) {
    if (inside(iy, p->h) && inside(ix, p->w))
        acc[((img * p->h + (size_t)iy) * p->w + (size_t)ix) * p->c + ci] += v;
}

static double *dzeros(size_t n) {
    double *a = calloc(n ? n : 1, sizeof *a);
    if (!a) abort(); /* test-only code */
    return a;
}

void ps_ref_col2im_overwrite(const ps_k_conv *p, float *dx, const float *cols, size_t n) {
    size_t K = p->kh * p->kw * p->c, total = n * p->h * p->w * p->c;
    double *acc = dzeros(total);
    for (size_t img = 0; img < n; img++)
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++)
                for (size_t ky = 0; ky < p->kh; ky++)
                    for (size_t kx = 0; kx < p->kw; kx++)
                        for (size_t ci = 0; ci < p->c; ci++) {
                            size_t r = (img * p->oh + oy) * p->ow + ox;
                            size_t k = (ky * p->kw + kx) * p->c + ci;
                            scatter(p, acc, img, tap(oy, p->sh, ky, p->pad_top),
                                    tap(ox, p->sw, kx, p->pad_left), ci, cols[r * K + k]);
                        }
    for (size_t i = 0; i < total; i++)
        dx[i] = (float)acc[i];
    free(acc);
}

/* w[ky, kx, ci, co] */
static double wat(const ps_k_conv *p, const float *w, size_t ky, size_t kx, size_t ci, size_t co) {
    return w[((ky * p->kw + kx) * p->c + ci) * p->cout + co];
}

void ps_ref_conv2d_forward_overwrite(const ps_k_conv *p, float *y, const float *x, const float *w,
                                     const float *b) {
    for (size_t img = 0; img < p->n; img++)
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++)
                for (size_t co = 0; co < p->cout; co++) {
                    double s = b ? b[co] : 0.0;
                    for (size_t ky = 0; ky < p->kh; ky++)
                        for (size_t kx = 0; kx < p->kw; kx++)
                            for (size_t ci = 0; ci < p->c; ci++)
                                s += at(p, x, img, tap(oy, p->sh, ky, p->pad_top),
                                        tap(ox, p->sw, kx, p->pad_left), ci) *
                                     wat(p, w, ky, kx, ci, co);
                    y[((img * p->oh + oy) * p->ow + ox) * p->cout + co] = (float)s;
                }
}

/* The analytic gradient of the direct convolution: dy[o] * w for dx,
 * dy[o] * x for dw, dy summed for db. */
static void conv2d_backward(const ps_k_conv *p, float *dx, float *dw, float *db, const float *dy,
                            const float *x, const float *w, bool acc) {
    size_t nw = p->kh * p->kw * p->c * p->cout, nx = p->n * p->h * p->w * p->c;
    double *gw = dzeros(nw), *gx = dzeros(nx), *gb = dzeros(p->cout);
    for (size_t img = 0; img < p->n; img++)
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++)
                for (size_t co = 0; co < p->cout; co++) {
                    double g = dy[((img * p->oh + oy) * p->ow + ox) * p->cout + co];
                    gb[co] += g;
                    for (size_t ky = 0; ky < p->kh; ky++)
                        for (size_t kx = 0; kx < p->kw; kx++)
                            for (size_t ci = 0; ci < p->c; ci++) {
                                long iy = tap(oy, p->sh, ky, p->pad_top);
                                long ix = tap(ox, p->sw, kx, p->pad_left);
                                gw[((ky * p->kw + kx) * p->c + ci) * p->cout + co] +=
                                    g * at(p, x, img, iy, ix, ci);
                                scatter(p, gx, img, iy, ix, ci, g * wat(p, w, ky, kx, ci, co));
                            }
                }
    for (size_t i = 0; i < nw; i++)
        dw[i] = (float)(acc ? dw[i] + gw[i] : gw[i]);
    if (db)
        for (size_t i = 0; i < p->cout; i++)
            db[i] = (float)(acc ? db[i] + gb[i] : gb[i]);
    if (dx)
        for (size_t i = 0; i < nx; i++)
            dx[i] = (float)gx[i];
    free(gw), free(gx), free(gb);
}

void ps_ref_conv2d_backward_overwrite(const ps_k_conv *p, float *dx, float *dw, float *db,
                                      const float *dy, const float *x, const float *w) {
    conv2d_backward(p, dx, dw, db, dy, x, w, false);
}

void ps_ref_conv2d_backward_acc(const ps_k_conv *p, float *dx, float *dw, float *db,
                                const float *dy, const float *x, const float *w) {
    conv2d_backward(p, dx, dw, db, dy, x, w, true);
}

/* ---- pooling: scan each window's real cells ------------------------------ */

void ps_ref_maxpool_forward_overwrite(const ps_k_pool *p, float *y, int32_t *arg, const float *x) {
    for (size_t img = 0; img < p->n; img++)
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++)
                for (size_t ci = 0; ci < p->c; ci++) {
                    bool found = false;
                    float best = 0.0f;
                    long where = -1;
                    for (size_t ky = 0; ky < p->ph; ky++)
                        for (size_t kx = 0; kx < p->pw; kx++) {
                            long iy = tap(oy, p->sh, ky, p->pad_top);
                            long ix = tap(ox, p->sw, kx, p->pad_left);
                            if (!inside(iy, p->h) || !inside(ix, p->w)) continue;
                            float v =
                                x[((img * p->h + (size_t)iy) * p->w + (size_t)ix) * p->c + ci];
                            if (!found || v > best ||
                                isnan(best)) { /* first wins ties, NaN loses */
                                found = true;
                                best = v;
                                where = iy * (long)p->w + ix;
                            }
                        }
                    size_t o = ((img * p->oh + oy) * p->ow + ox) * p->c + ci;
                    y[o] = best;
                    arg[o] = (int32_t)where;
                }
}

void ps_ref_maxpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy,
                                       const int32_t *arg) {
    size_t plane = p->h * p->w, total = p->n * plane * p->c;
    double *acc = dzeros(total);
    for (size_t img = 0; img < p->n; img++)
        for (size_t j = 0; j < p->oh * p->ow; j++)
            for (size_t ci = 0; ci < p->c; ci++) {
                size_t o = (img * p->oh * p->ow + j) * p->c + ci;
                acc[(img * plane + (size_t)arg[o]) * p->c + ci] += dy[o];
            }
    for (size_t i = 0; i < total; i++)
        dx[i] = (float)acc[i];
    free(acc);
}

/* Number of real (unpadded) cells in the window of output (oy, ox). */
static size_t window_cells(const ps_k_pool *p, size_t oy, size_t ox) {
    size_t cnt = 0;
    for (size_t ky = 0; ky < p->ph; ky++)
        for (size_t kx = 0; kx < p->pw; kx++)
            cnt += inside(tap(oy, p->sh, ky, p->pad_top), p->h) &&
                   inside(tap(ox, p->sw, kx, p->pad_left), p->w);
    return cnt;
}

/* Average pooling forward (y from x) or backward (dx from dy). */
static void avgpool(const ps_k_pool *p, float *out, const float *in, bool backward) {
    size_t total = p->n * p->h * p->w * p->c;
    double *acc = backward ? dzeros(total) : NULL;
    for (size_t img = 0; img < p->n; img++)
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++)
                for (size_t ci = 0; ci < p->c; ci++) {
                    size_t o = ((img * p->oh + oy) * p->ow + ox) * p->c + ci;
                    double cnt = (double)window_cells(p, oy, ox), s = 0.0;
                    for (size_t ky = 0; ky < p->ph; ky++)
                        for (size_t kx = 0; kx < p->pw; kx++) {
                            long iy = tap(oy, p->sh, ky, p->pad_top);
                            long ix = tap(ox, p->sw, kx, p->pad_left);
                            if (!inside(iy, p->h) || !inside(ix, p->w)) continue;
                            size_t e = ((img * p->h + (size_t)iy) * p->w + (size_t)ix) * p->c + ci;
                            if (backward)
                                acc[e] += in[o] / cnt;
                            else
                                s += in[e];
                        }
                    if (!backward) out[o] = (float)(s / cnt);
                }
    if (backward) {
        for (size_t i = 0; i < total; i++)
            out[i] = (float)acc[i];
        free(acc);
    }
}

void ps_ref_avgpool_forward_overwrite(const ps_k_pool *p, float *y, const float *x) {
    avgpool(p, y, x, false);
}

void ps_ref_avgpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy) {
    avgpool(p, dx, dy, true);
}
