/* Element-wise and per-row formulas, written once and shared by the CPU loops
 * (cpu.c) and the CUDA kernels (cuda.cu): PS_HD marks them host+device. */
#ifndef PS_KERNELS_EW_H
#define PS_KERNELS_EW_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h" /* ps_k_conv, ps_k_pool */

#ifdef __CUDACC__
#define PS_HD __host__ __device__
#else
#define PS_HD
#endif

/* Activation codes; the same numbers as ps_k_act in kernels.h. */
enum {
    PS_EW_LINEAR = 0,
    PS_EW_RELU = 1,
    PS_EW_SIGMOID = 2,
    PS_EW_TANH = 3,
    PS_EW_GELU = 4,
    PS_EW_RELU6 = 5,
    PS_EW_SWISH = 6,
    PS_EW_HARD_SIGMOID = 7,
    PS_EW_HARD_SWISH = 8
};

static inline PS_HD float ps_ew_relu_fwd(float x) {
    return x > 0.0f ? x : 0.0f;
}

/* Derivatives are written in terms of the activation's OUTPUT y, so a forward
 * pass may run in place and keep only y. */
static inline PS_HD float ps_ew_relu_bwd(float y, float dy) {
    return y > 0.0f ? dy : 0.0f;
}

/* Numerically stable logistic: never evaluates exp of a large positive value. */
static inline PS_HD float ps_ew_sigmoid_fwd(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* min(max(x, 0), 6); the derivative is 1 strictly inside (0, 6), 0 elsewhere
 * (as TensorFlow's Relu6Grad), which the output y tells as well as x. */
static inline PS_HD float ps_ew_relu6_fwd(float x) {
    return x > 0.0f ? (x < 6.0f ? x : 6.0f) : 0.0f;
}

static inline PS_HD float ps_ew_relu6_bwd(float y, float dy) {
    return y > 0.0f && y < 6.0f ? dy : 0.0f;
}

static inline PS_HD float ps_ew_sigmoid_bwd(float y, float dy) {
    return dy * y * (1.0f - y);
}

static inline PS_HD float ps_ew_tanh_fwd(float x) {
    return tanhf(x);
}

static inline PS_HD float ps_ew_tanh_bwd(float y, float dy) {
    return dy * (1.0f - y * y);
}

/* Exact GELU, x * Phi(x); its derivative needs the input x, not y. */
static inline PS_HD float ps_ew_gelu_fwd(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

static inline PS_HD float ps_ew_gelu_bwd(float x, float dy) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
}

/* Swish / SiLU, x * sigmoid(x) (Keras' swish and silu); its derivative
 * s (1 + x (1 - s)) with s = sigmoid(x) needs the input x. */
static inline PS_HD float ps_ew_swish_fwd(float x) {
    return x * ps_ew_sigmoid_fwd(x);
}

static inline PS_HD float ps_ew_swish_bwd(float x, float dy) {
    float s = ps_ew_sigmoid_fwd(x);
    return dy * s * (1.0f + x * (1.0f - s));
}

/* Keras 3's hard_sigmoid, relu6(x + 3) / 6 (0 for x <= -3, 1 for x >= 3,
 * x/6 + 1/2 between). Its derivative is 1/6 strictly inside (-3, 3) and 0
 * elsewhere, at the kinks x = -3 and x = 3 too: TensorFlow differentiates it
 * through relu6, whose gradient (Relu6Grad) is 0 at 0 and at 6. y in (0, 1)
 * exactly when x + 3 is in (0, 6), so the output y tells it. */
static inline PS_HD float ps_ew_hard_sigmoid_fwd(float x) {
    return ps_ew_relu6_fwd(x + 3.0f) / 6.0f;
}

static inline PS_HD float ps_ew_hard_sigmoid_bwd(float y, float dy) {
    return y > 0.0f && y < 1.0f ? dy / 6.0f : 0.0f;
}

/* hard_swish / hard_silu, x * hard_sigmoid(x) (Keras' hard_silu). Its
 * derivative, hard_sigmoid(x) + x hard_sigmoid'(x) by the product rule with
 * the convention above, is 0 for x <= -3 (also at the kink x = -3), 1 for
 * x >= 3 (also at x = 3) and (2x + 3) / 6 between; it needs the input x. */
static inline PS_HD float ps_ew_hard_swish_fwd(float x) {
    return x * ps_ew_hard_sigmoid_fwd(x);
}

static inline PS_HD float ps_ew_hard_swish_bwd(float x, float dy) {
    float t = x + 3.0f;
    if (t <= 0.0f) return 0.0f;
    if (t >= 6.0f) return dy;
    return dy * (t / 6.0f + x / 6.0f);
}

/* y = f(x) for activation code act (unknown codes act as linear). */
static inline PS_HD float ps_ew_act_fwd(int act, float x) {
    switch (act) {
    case PS_EW_GELU:
        return ps_ew_gelu_fwd(x);
    case PS_EW_RELU:
        return ps_ew_relu_fwd(x);
    case PS_EW_RELU6:
        return ps_ew_relu6_fwd(x);
    case PS_EW_SIGMOID:
        return ps_ew_sigmoid_fwd(x);
    case PS_EW_TANH:
        return ps_ew_tanh_fwd(x);
    case PS_EW_SWISH:
        return ps_ew_swish_fwd(x);
    case PS_EW_HARD_SIGMOID:
        return ps_ew_hard_sigmoid_fwd(x);
    case PS_EW_HARD_SWISH:
        return ps_ew_hard_swish_fwd(x);
    default:
        return x;
    }
}

/* dx = f'(x) * dy, given the input x and y = f(x) (each op reads one). */
static inline PS_HD float ps_ew_act_bwd(int act, float x, float y, float dy) {
    switch (act) {
    case PS_EW_GELU:
        return ps_ew_gelu_bwd(x, dy);
    case PS_EW_RELU:
        return ps_ew_relu_bwd(y, dy);
    case PS_EW_RELU6:
        return ps_ew_relu6_bwd(y, dy);
    case PS_EW_SIGMOID:
        return ps_ew_sigmoid_bwd(y, dy);
    case PS_EW_TANH:
        return ps_ew_tanh_bwd(y, dy);
    case PS_EW_SWISH:
        return ps_ew_swish_bwd(x, dy);
    case PS_EW_HARD_SIGMOID:
        return ps_ew_hard_sigmoid_bwd(y, dy);
    case PS_EW_HARD_SWISH:
        return ps_ew_hard_swish_bwd(x, dy);
    default:
        return dy;
    }
}

/* Index of the largest of x[0..n) (the first one on ties; NaN never wins
 * unless the row is all NaN: a NaN in front is replaced by any later value). */
static inline PS_HD int ps_ew_argmax_row(const float *x, int n) {
    int best = 0;
    for (int j = 1; j < n; j++)
        if (x[j] > x[best] || x[best] != x[best]) best = j;
    return best;
}

/* probs[0..n) = softmax(x[0..n)), shifted by the row max for stability. */
static inline PS_HD void ps_ew_softmax_row(float *probs, const float *x, int n) {
    float mx = x[ps_ew_argmax_row(x, n)];
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        probs[j] = expf(x[j] - mx);
        sum += probs[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++)
        probs[j] *= inv;
}

/* Cross-entropy of softmax(logits) against label for one row:
 * returns -log softmax(logits)[label] = logsumexp(logits) - logits[label].
 * If dlogits is not NULL it is overwritten with scale * (softmax - onehot). */
static inline PS_HD float ps_ew_softmax_ce_row(float *dlogits, const float *logits, int label,
                                               int n, float scale) {
    float mx = logits[ps_ew_argmax_row(logits, n)];
    float sum = 0.0f;
    for (int j = 0; j < n; j++)
        sum += expf(logits[j] - mx);
    float lse = mx + logf(sum);
    if (dlogits) {
        float inv = 1.0f / sum;
        for (int j = 0; j < n; j++) {
            float p = expf(logits[j] - mx) * inv;
            dlogits[j] = scale * (p - (j == label ? 1.0f : 0.0f));
        }
    }
    return lse - logits[label];
}

/* ---- losses (per element) ---------------------------------------------- */

/* Binary cross-entropy of sigmoid(x) against target t, written to stay finite
 * for any x: max(x, 0) - x t + log(1 + exp(-|x|)). Its gradient in x is
 * sigmoid(x) - t. */
static inline PS_HD float ps_ew_bce(float x, float t) {
    return fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
}

static inline PS_HD float ps_ew_bce_grad(float x, float t) {
    return ps_ew_sigmoid_fwd(x) - t;
}

static inline PS_HD float ps_ew_mse(float p, float t) {
    return (p - t) * (p - t);
}

static inline PS_HD float ps_ew_mse_grad(float p, float t) {
    return 2.0f * (p - t);
}

/* ---- dropout ------------------------------------------------------------- */

/* A counter-based generator: the same bits for (seed, i) on every backend and
 * in any order, so no mask is stored and the GPU needs no RNG state. */
static inline PS_HD uint64_t ps_ew_hash64(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Keeps element i when a uniform draw in [0, 1) (24 bits) is >= rate. */
static inline PS_HD int ps_ew_dropout_keep(uint64_t seed, uint64_t i, float rate) {
    float u = (float)(ps_ew_hash64(seed, i) >> 40) * (1.0f / 16777216.0f);
    return u >= rate;
}

/* ---- reduced precision ---------------------------------------------------- */

/* The float nearest to x among bfloat16 values (round to nearest even);
 * NaN stays NaN, overflow goes to infinity. */
static inline PS_HD float ps_ew_round_bf16(float x) {
    union {
        float f;
        uint32_t u;
    } v = {x};
    if ((v.u & 0x7F800000u) == 0x7F800000u) return x; /* inf, NaN */
    v.u += 0x7FFFu + ((v.u >> 16) & 1u);
    v.u &= 0xFFFF0000u;
    return v.f;
}

/* The float nearest to x among IEEE binary16 values (round to nearest even,
 * subnormals kept, beyond 65504 rounding to infinity as a conversion would). */
static inline PS_HD float ps_ew_round_f16(float x) {
    union {
        float f;
        uint32_t u;
    } v = {x};
    uint32_t sign = v.u & 0x80000000u, a = v.u & 0x7FFFFFFFu;
    if (a >= 0x477FF000u) return a > 0x7F800000u ? x : copysignf(INFINITY, x); /* >= 65520; NaN */
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, step 2^-24 */
        float q = fabsf(x) * 16777216.0f; /* exact */
        return copysignf(rintf(q) * 5.9604644775390625e-08f, x);
    }
    /* a normal half: 11 significant bits, so the float's low 13 mantissa bits
     * go, rounding to nearest even (a carry moves the exponent up, as it should).
     * The same values as rintf(a / 2^(e-11)) * 2^(e-11) for every float (checked
     * over all 2^32), without frexpf/ldexpf and a division. */
    a += 0xFFFu + ((a >> 13) & 1u);
    v.u = sign | (a & 0xFFFFE000u);
    return v.f;
}

/* ---- convolution and pooling: one output (or input) cell each ------------- */

/* im2col entry for row r = (img, oy, ox) and column k = (ky, kx, ci). */
static inline PS_HD float ps_ew_im2col_at(const ps_k_conv *p, const float *x, size_t r, size_t k) {
    size_t ci = k % p->c, kx = (k / p->c) % p->kw, ky = k / (p->c * p->kw);
    size_t ox = r % p->ow, oy = (r / p->ow) % p->oh, img = r / (p->ow * p->oh);
    long iy = (long)(oy * p->sh + ky) - (long)p->pad_top;
    long ix = (long)(ox * p->sw + kx) - (long)p->pad_left;
    if (iy < 0 || ix < 0 || iy >= (long)p->h || ix >= (long)p->w) return 0.0f;
    return x[((img * p->h + (size_t)iy) * p->w + (size_t)ix) * p->c + ci];
}

/* First and one-past-last output index whose window (size k, stride s,
 * padding pad) covers input index i along one axis. */
static inline PS_HD void ps_ew_windows_covering(size_t i, size_t k, size_t s, size_t pad,
                                                size_t out, size_t *lo, size_t *hi) {
    long a = (long)i + (long)pad - (long)k + 1; /* o * s >= a */
    long first = a <= 0 ? 0 : (a + (long)s - 1) / (long)s;
    long last = ((long)i + (long)pad) / (long)s; /* o * s <= i + pad */
    if (last >= (long)out) last = (long)out - 1;
    *lo = (size_t)first;
    *hi = last < first ? (size_t)first : (size_t)last + 1;
}

/* col2im for input cell e = (img, iy, ix, ci): the sum of every cols entry
 * that im2col copied from it (a gather over the windows covering the cell). */
static inline PS_HD float ps_ew_col2im_at(const ps_k_conv *p, const float *cols, size_t e) {
    size_t ci = e % p->c, ix = (e / p->c) % p->w, iy = (e / (p->c * p->w)) % p->h;
    size_t img = e / (p->c * p->w * p->h), K = p->kh * p->kw * p->c;
    size_t y0, y1, x0, x1;
    ps_ew_windows_covering(iy, p->kh, p->sh, p->pad_top, p->oh, &y0, &y1);
    ps_ew_windows_covering(ix, p->kw, p->sw, p->pad_left, p->ow, &x0, &x1);
    float s = 0.0f;
    for (size_t oy = y0; oy < y1; oy++) {
        size_t ky = iy + p->pad_top - oy * p->sh;
        for (size_t ox = x0; ox < x1; ox++) {
            size_t kx = ix + p->pad_left - ox * p->sw;
            size_t r = (img * p->oh + oy) * p->ow + ox;
            s += cols[r * K + (ky * p->kw + kx) * p->c + ci];
        }
    }
    return s;
}

/* The kernel taps [*k0, *k1) of output index o whose input index o*s + k - pad
 * lies inside [0, len) along one axis (window k, stride s). */
static inline PS_HD void ps_ew_valid_taps(size_t o, size_t s, size_t pad, size_t k, size_t len,
                                          size_t *k0, size_t *k1) {
    size_t start = o * s; /* input index of tap k is start + k - pad */
    *k0 = start >= pad ? 0 : pad - start;
    size_t end = len + pad > start ? len + pad - start : 0; /* taps below end are < len */
    *k1 = end < k ? end : k;
    if (*k1 < *k0) *k1 = *k0;
}

/* ---- depthwise convolution: one output (or input, or weight) cell each ---- */
/* Kernel w[kh, kw, c, mult] = [kh*kw, cout] with cout = c*mult: output
 * channel co = ci*mult + m reads input channel ci = co / mult. */

/* Output cell o = (img, oy, ox, co) of x with w, plus b[co] (b may be NULL). */
static inline PS_HD float ps_ew_dwconv_at(const ps_k_conv *p, const float *x, const float *w,
                                          const float *b, size_t o) {
    size_t co = o % p->cout, ox = (o / p->cout) % p->ow, oy = (o / (p->cout * p->ow)) % p->oh;
    size_t img = o / (p->cout * p->ow * p->oh), ci = co / (p->cout / p->c);
    size_t ky0, ky1, kx0, kx1;
    ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
    ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
    float s = b ? b[co] : 0.0f;
    for (size_t ky = ky0; ky < ky1; ky++)
        for (size_t kx = kx0; kx < kx1; kx++) {
            size_t iy = oy * p->sh + ky - p->pad_top, ix = ox * p->sw + kx - p->pad_left;
            s += x[((img * p->h + iy) * p->w + ix) * p->c + ci] *
                 w[(ky * p->kw + kx) * p->cout + co];
        }
    return s;
}

/* Input gradient at cell e = (img, iy, ix, ci): over the windows covering it
 * and the mult output channels of ci, the sum of dy * w. */
static inline PS_HD float ps_ew_dwconv_dx_at(const ps_k_conv *p, const float *dy, const float *w,
                                             size_t e) {
    size_t ci = e % p->c, ix = (e / p->c) % p->w, iy = (e / (p->c * p->w)) % p->h;
    size_t img = e / (p->c * p->w * p->h), mult = p->cout / p->c, y0, y1, x0, x1;
    ps_ew_windows_covering(iy, p->kh, p->sh, p->pad_top, p->oh, &y0, &y1);
    ps_ew_windows_covering(ix, p->kw, p->sw, p->pad_left, p->ow, &x0, &x1);
    float s = 0.0f;
    for (size_t oy = y0; oy < y1; oy++) {
        size_t ky = iy + p->pad_top - oy * p->sh;
        for (size_t ox = x0; ox < x1; ox++) {
            size_t kx = ix + p->pad_left - ox * p->sw;
            const float *g = dy + ((img * p->oh + oy) * p->ow + ox) * p->cout + ci * mult;
            const float *wk = w + (ky * p->kw + kx) * p->cout + ci * mult;
            for (size_t m = 0; m < mult; m++)
                s += g[m] * wk[m];
        }
    }
    return s;
}

/* One term of the weight gradient at (tap k = ky*kw + kx, channel co): the
 * product dy * x of output pixel r = (img, oy, ox), 0 where the tap reads padding. */
static inline PS_HD float ps_ew_dwconv_dw_term(const ps_k_conv *p, const float *dy, const float *x,
                                               size_t k, size_t co, size_t r) {
    size_t ox = r % p->ow, oy = (r / p->ow) % p->oh, img = r / (p->ow * p->oh);
    size_t kx = k % p->kw, ky = k / p->kw, ci = co / (p->cout / p->c);
    long iy = (long)(oy * p->sh + ky) - (long)p->pad_top;
    long ix = (long)(ox * p->sw + kx) - (long)p->pad_left;
    if (iy < 0 || ix < 0 || iy >= (long)p->h || ix >= (long)p->w) return 0.0f;
    return dy[r * p->cout + co] * x[((img * p->h + (size_t)iy) * p->w + (size_t)ix) * p->c + ci];
}

/* The real (unpadded) input rows [*y0, *y1) and columns [*x0, *x1) of the
 * pooling window of output cell (oy, ox). */
static inline PS_HD void ps_ew_pool_window(const ps_k_pool *p, size_t oy, size_t ox, size_t *y0,
                                           size_t *y1, size_t *x0, size_t *x1) {
    long ys = (long)(oy * p->sh) - (long)p->pad_top, xs = (long)(ox * p->sw) - (long)p->pad_left;
    long ye = ys + (long)p->ph, xe = xs + (long)p->pw;
    *y0 = ys < 0 ? 0 : (size_t)ys;
    *x0 = xs < 0 ? 0 : (size_t)xs;
    *y1 = ye > (long)p->h ? p->h : (size_t)ye;
    *x1 = xe > (long)p->w ? p->w : (size_t)xe;
}

/* Max pooling of output cell o = (img, oy, ox, ci); *arg = the winner's
 * iy * w + ix (the first on ties, row-major; NaN never wins unless the whole
 * window is NaN). */
static inline PS_HD float ps_ew_maxpool_at(const ps_k_pool *p, const float *x, size_t o,
                                           int32_t *arg) {
    size_t ci = o % p->c, ox = (o / p->c) % p->ow, oy = (o / (p->c * p->ow)) % p->oh;
    size_t img = o / (p->c * p->ow * p->oh), y0, y1, x0, x1;
    ps_ew_pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
    const float *base = x + img * p->h * p->w * p->c + ci;
    size_t best = y0 * p->w + x0;
    float m = base[best * p->c];
    for (size_t iy = y0; iy < y1; iy++)
        for (size_t ix = x0; ix < x1; ix++) {
            float v = base[(iy * p->w + ix) * p->c];
            if (v > m || m != m) {
                m = v;
                best = iy * p->w + ix;
            }
        }
    *arg = (int32_t)best;
    return m;
}

/* Max pooling backward for input cell e = (img, iy, ix, ci): the sum of dy
 * over the windows that chose it. */
static inline PS_HD float ps_ew_maxpool_bwd_at(const ps_k_pool *p, const float *dy,
                                               const int32_t *arg, size_t e) {
    size_t ci = e % p->c, ix = (e / p->c) % p->w, iy = (e / (p->c * p->w)) % p->h;
    size_t img = e / (p->c * p->w * p->h), y0, y1, x0, x1;
    ps_ew_windows_covering(iy, p->ph, p->sh, p->pad_top, p->oh, &y0, &y1);
    ps_ew_windows_covering(ix, p->pw, p->sw, p->pad_left, p->ow, &x0, &x1);
    int32_t me = (int32_t)(iy * p->w + ix);
    float s = 0.0f;
    for (size_t oy = y0; oy < y1; oy++)
        for (size_t ox = x0; ox < x1; ox++) {
            size_t o = ((img * p->oh + oy) * p->ow + ox) * p->c + ci;
            if (arg[o] == me) s += dy[o];
        }
    return s;
}

/* Average pooling of output cell o: the mean of the window's real cells. */
static inline PS_HD float ps_ew_avgpool_at(const ps_k_pool *p, const float *x, size_t o) {
    size_t ci = o % p->c, ox = (o / p->c) % p->ow, oy = (o / (p->c * p->ow)) % p->oh;
    size_t img = o / (p->c * p->ow * p->oh), y0, y1, x0, x1;
    ps_ew_pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
    const float *base = x + img * p->h * p->w * p->c + ci;
    float s = 0.0f;
    for (size_t iy = y0; iy < y1; iy++)
        for (size_t ix = x0; ix < x1; ix++)
            s += base[(iy * p->w + ix) * p->c];
    return s / (float)((y1 - y0) * (x1 - x0));
}

/* Average pooling backward for input cell e: sum over the windows holding it
 * of dy / (that window's real cell count). */
static inline PS_HD float ps_ew_avgpool_bwd_at(const ps_k_pool *p, const float *dy, size_t e) {
    size_t ci = e % p->c, ix = (e / p->c) % p->w, iy = (e / (p->c * p->w)) % p->h;
    size_t img = e / (p->c * p->w * p->h), y0, y1, x0, x1;
    ps_ew_windows_covering(iy, p->ph, p->sh, p->pad_top, p->oh, &y0, &y1);
    ps_ew_windows_covering(ix, p->pw, p->sw, p->pad_left, p->ow, &x0, &x1);
    float s = 0.0f;
    for (size_t oy = y0; oy < y1; oy++)
        for (size_t ox = x0; ox < x1; ox++) {
            size_t wy0, wy1, wx0, wx1;
            ps_ew_pool_window(p, oy, ox, &wy0, &wy1, &wx0, &wx1);
            size_t o = ((img * p->oh + oy) * p->ow + ox) * p->c + ci;
            s += dy[o] / (float)((wy1 - wy0) * (wx1 - wx0));
        }
    return s;
}

#endif
