/* Element-wise and per-row formulas, written once and shared by the CPU loops
 * (cpu.c) and the CUDA kernels (cuda.cu): PS_HD marks them host+device. */
#ifndef PS_KERNELS_EW_H
#define PS_KERNELS_EW_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PS_HD __host__ __device__
#else
#define PS_HD
#endif

/* Activation codes; the same numbers as ps_k_act in kernels.h. */
enum { PS_EW_LINEAR = 0, PS_EW_RELU = 1, PS_EW_SIGMOID = 2, PS_EW_TANH = 3 };

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

static inline PS_HD float ps_ew_sigmoid_bwd(float y, float dy) {
    return dy * y * (1.0f - y);
}

static inline PS_HD float ps_ew_tanh_fwd(float x) {
    return tanhf(x);
}

static inline PS_HD float ps_ew_tanh_bwd(float y, float dy) {
    return dy * (1.0f - y * y);
}

/* y = f(x) for activation code act (unknown codes act as linear). */
static inline PS_HD float ps_ew_act_fwd(int act, float x) {
    switch (act) {
    case PS_EW_RELU:
        return ps_ew_relu_fwd(x);
    case PS_EW_SIGMOID:
        return ps_ew_sigmoid_fwd(x);
    case PS_EW_TANH:
        return ps_ew_tanh_fwd(x);
    default:
        return x;
    }
}

/* dx = f'(x) * dy, given y = f(x). */
static inline PS_HD float ps_ew_act_bwd(int act, float y, float dy) {
    switch (act) {
    case PS_EW_RELU:
        return ps_ew_relu_bwd(y, dy);
    case PS_EW_SIGMOID:
        return ps_ew_sigmoid_bwd(y, dy);
    case PS_EW_TANH:
        return ps_ew_tanh_bwd(y, dy);
    default:
        return dy;
    }
}

/* Index of the largest of x[0..n) (the first one on ties; NaN never wins). */
static inline PS_HD int ps_ew_argmax_row(const float *x, int n) {
    int best = 0;
    for (int j = 1; j < n; j++)
        if (x[j] > x[best]) best = j;
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

#endif
