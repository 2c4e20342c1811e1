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

/* The schedules (optim.h): scalar math in double, once per call. */
static double cosine_decay(double step, double d, double from, double alpha) {
    double cosine = 0.5 * (1.0 + cos(M_PI * (step / d)));
    return from * ((1.0 - alpha) * cosine + alpha);
}

float ps_optim_lr(const ps_opt_spec *spec, uint64_t step) {
    const ps_lr_schedule *c = &spec->schedule;
    double lr = spec->lr, x = (double)step, p;
    switch (c->kind) {
    case PS_LR_EXPONENTIAL:
        p = x / c->decay_steps;
        if (c->staircase) p = floor(p);
        return (float)(lr * pow(c->decay_rate, p));
    case PS_LR_INVERSE_TIME:
        p = x / c->decay_steps;
        if (c->staircase) p = floor(p);
        return (float)(lr / (1.0 + c->decay_rate * p));
    case PS_LR_PIECEWISE: {
        float r = spec->lr;
        for (uint32_t i = 0; i < c->n_boundaries && i < PS_LR_MAX_BOUNDARIES; i++)
            if (step > c->boundaries[i]) r = c->values[i];
        return r;
    }
    case PS_LR_COSINE: {
        double w = c->warmup_steps, d = c->decay_steps;
        x = fmin(x, d + w);
        if (x < w) return (float)(lr + ((double)c->warmup_target - lr) * (x / w));
        return (float)cosine_decay(x - w, d, c->warmup_target, c->alpha);
    }
    default:
        return spec->lr;
    }
}

/* w -= decay*w (Keras 3's weight decay, for the kinds other than adamw) */
PS_OPTIM_CLONES
static void decay(float decay, float *restrict w, size_t n) {
    for (size_t i = 0; i < n; i++)
        w[i] -= decay * w[i];
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

static adam_consts adam_setup(const ps_opt_spec *s, float lr, uint64_t t) {
    /* lr_t is one scalar per call: computed in double, then rounded once. */
    double td = (double)(t ? t : 1); /* t is 1-based; treat a stray 0 as the first step */
    double lr_t = lr * sqrt(1.0 - pow(s->beta2, td)) / (1.0 - pow(s->beta1, td));
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
    if (t == 0) t = 1;
    /* the step's rate: the schedule's at the updates done before this one */
    const float lr = s->schedule.kind == PS_LR_CONSTANT ? s->lr : ps_optim_lr(s, t - 1);
    /* the decay factor lr*wd in double, rounded once (adamw's, as before) */
    const float wd = (float)((double)lr * s->weight_decay);
    if (s->weight_decay != 0 && s->kind != PS_OPT_ADAMW && (unsigned)s->kind < PS_OPT_COUNT)
        decay(wd, w, n);
    switch (s->kind) {
    case PS_OPT_SGD:
        sgd(lr, w, g, n);
        break;
    case PS_OPT_MOMENTUM:
        if (s->nesterov)
            nesterov(lr, s->momentum, w, g, slots[0], n);
        else
            momentum(lr, s->momentum, w, g, slots[0], n);
        break;
    case PS_OPT_ADAGRAD:
        adagrad(lr, s->epsilon, w, g, slots[0], n);
        break;
    case PS_OPT_RMSPROP:
        rmsprop(lr, s->epsilon, s->rho, w, g, slots[0], n);
        break;
    case PS_OPT_ADAM:
        adam(adam_setup(s, lr, t), w, g, slots[0], slots[1], n);
        break;
    case PS_OPT_ADAMW:
        adamw(adam_setup(s, lr, t), wd, w, g, slots[0], slots[1], n);
        break;
    default:
        break;
    }
}
