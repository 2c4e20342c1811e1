/* Server-side optimizers (Keras formulas, see optim.h): in-place updates of a
 * variable and its slot arrays.
 *
 * The element math is float, as in TensorFlow's training kernels (they compute
 * in the variable's type). Each loop is written for the vectorizer: scalar
 * constants are hoisted and converted to float once, the arrays are restrict
 * (a variable, its gradient and its slots never overlap), there is no branch in
 * a loop body (nesterov and AdamW's decay get their own loops), and sqrtf needs
 * no errno (-fno-math-errno, common/meson.build).
 *
 * Same bits everywhere: every operation is a single IEEE float add, multiply,
 * divide or sqrt, each correctly rounded, in source order (common/meson.build
 * sets -ffp-contract=off so no clone fuses a multiply-add). So the SSE2, AVX2
 * and AVX-512 versions below, and a loop's vector body and scalar tail, give
 * identical results: psd and a worker's --no-ps mode agree on any x86-64. */
#include "optim.h"

#include <math.h>

/* On x86-64 with GCC or clang each loop is compiled three times, chosen once at
 * load time by the CPU (an ifunc): 16 and 8 floats per instruction instead of
 * SSE2's 4, which is what the square root and division loops need to keep up
 * with memory (docs/PERFORMANCE.md, "Optimizer apply"). Elsewhere: one version. */
#if defined(__x86_64__) && defined(__has_attribute) && defined(__linux__)
#if __has_attribute(target_clones)
#define PS_OPTIM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef PS_OPTIM_CLONES
#define PS_OPTIM_CLONES
#endif

/* Returns the slot count for kind from PS_OPT_KINDS (0 for an unknown kind). */
int ps_optim_num_slots(ps_opt_kind kind) {
#define SLOTS_(k, name, slots) slots,
    static const int slots[PS_OPT_COUNT] = {PS_OPT_KINDS(SLOTS_)};
#undef SLOTS_
    return (unsigned)kind < PS_OPT_COUNT ? slots[kind] : 0;
}

/* Returns the initial value for every element of slot `slot`. */
float ps_optim_slot_init(const ps_opt_spec *spec, int slot) {
    if (spec->kind == PS_OPT_ADAGRAD && slot == 0) return spec->initial_accumulator;
    return 0.0f;
}

/* w -= lr*g */
PS_OPTIM_CLONES
static void sgd(float lr, float *restrict w, const float *restrict g, size_t n) {
    for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

/* v = mu*v - lr*g; w += v */
PS_OPTIM_CLONES
static void momentum(float lr, float mu, float *restrict w, const float *restrict g,
                     float *restrict v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float vi = mu * v[i] - lr * g[i];
        v[i] = vi;
        w[i] += vi;
    }
}

/* v = mu*v - lr*g; w += mu*v - lr*g (with the new v) */
PS_OPTIM_CLONES
static void nesterov(float lr, float mu, float *restrict w, const float *restrict g,
                     float *restrict v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float lg = lr * g[i];
        float vi = mu * v[i] - lg;
        v[i] = vi;
        w[i] += mu * vi - lg;
    }
}

/* a += g*g; w -= lr*g/(sqrt(a)+eps) */
PS_OPTIM_CLONES
static void adagrad(float lr, float eps, float *restrict w, const float *restrict g,
                    float *restrict a, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float ai = a[i] + g[i] * g[i];
        a[i] = ai;
        w[i] -= lr * g[i] / (sqrtf(ai) + eps);
    }
}

/* s = rho*s + (1-rho)*g*g; w -= lr*g/(sqrt(s)+eps) */
PS_OPTIM_CLONES
static void rmsprop(float lr, float eps, float rho, float *restrict w, const float *restrict g,
                    float *restrict ms, size_t n) {
    const float one_rho = 1.0f - rho;
    for (size_t i = 0; i < n; i++) {
        float si = rho * ms[i] + one_rho * g[i] * g[i];
        ms[i] = si;
        w[i] -= lr * g[i] / (sqrtf(si) + eps);
    }
}

/* Adam's constants for one call: the betas, their complements and the
 * bias-corrected step size. */
typedef struct {
    float b1, b2, one_b1, one_b2, lr_t, eps;
} adam_consts;

static adam_consts adam_setup(const ps_opt_spec *s, uint64_t t) {
    /* lr_t is one scalar per call: computed in double, then rounded once. */
    double td = (double)(t ? t : 1); /* t is 1-based; treat a stray 0 as the first step */
    double lr_t = s->lr * sqrt(1.0 - pow(s->beta2, td)) / (1.0 - pow(s->beta1, td));
    return (adam_consts){.b1 = s->beta1,
                         .b2 = s->beta2,
                         .one_b1 = 1.0f - s->beta1,
                         .one_b2 = 1.0f - s->beta2,
                         .lr_t = (float)lr_t,
                         .eps = s->epsilon};
}

/* m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; w -= lr_t*m/(sqrt(v)+eps) */
PS_OPTIM_CLONES
static void adam(adam_consts c, float *restrict w, const float *restrict g, float *restrict m,
                 float *restrict v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float mi = c.b1 * m[i] + c.one_b1 * g[i];
        float vi = c.b2 * v[i] + c.one_b2 * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        w[i] -= c.lr_t * mi / (sqrtf(vi) + c.eps);
    }
}

/* AdamW: w -= decay*w, then the Adam step, in one pass over the arrays (the
 * decayed w is rounded to float first, exactly as two passes would). */
PS_OPTIM_CLONES
static void adamw(adam_consts c, float decay, float *restrict w, const float *restrict g,
                  float *restrict m, float *restrict v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float wi = w[i] - decay * w[i];
        float mi = c.b1 * m[i] + c.one_b1 * g[i];
        float vi = c.b2 * v[i] + c.one_b2 * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - c.lr_t * mi / (sqrtf(vi) + c.eps);
    }
}

/* Updates w and the caller-owned slots in place; g is only read. An unknown kind
 * is a no-op; t == 0 is treated as 1. */
void ps_optim_apply(const ps_opt_spec *spec, float *w, const float *g, float *const *slots,
                    size_t n, uint64_t t) {
    const ps_opt_spec *s = spec;
    switch (s->kind) {
    case PS_OPT_SGD:
        sgd(s->lr, w, g, n);
        break;
    case PS_OPT_MOMENTUM:
        if (s->nesterov)
            nesterov(s->lr, s->momentum, w, g, slots[0], n);
        else
            momentum(s->lr, s->momentum, w, g, slots[0], n);
        break;
    case PS_OPT_ADAGRAD:
        adagrad(s->lr, s->epsilon, w, g, slots[0], n);
        break;
    case PS_OPT_RMSPROP:
        rmsprop(s->lr, s->epsilon, s->rho, w, g, slots[0], n);
        break;
    case PS_OPT_ADAM:
        adam(adam_setup(s, t), w, g, slots[0], slots[1], n);
        break;
    case PS_OPT_ADAMW:
        /* the decay factor lr*wd in double, rounded once, as before */
        adamw(adam_setup(s, t), (float)((double)s->lr * s->weight_decay), w, g, slots[0], slots[1],
              n);
        break;
    default:
        break;
    }
}
