/* Server-side optimizers (Keras formulas, see optim.h): in-place updates of a
 * variable and its slot arrays. Element math is done in double, stored as float. */
#include "optim.h"

#include <math.h>

/* Returns the slot count for kind (0 for an unknown kind). */
int ps_optim_num_slots(ps_opt_kind kind) {
    switch (kind) {
    case PS_OPT_SGD:
        return 0;
    case PS_OPT_MOMENTUM:
        return 1;
    case PS_OPT_ADAGRAD:
        return 1;
    case PS_OPT_RMSPROP:
        return 1;
    case PS_OPT_ADAM:
        return 2;
    case PS_OPT_ADAMW:
        return 2;
    default:
        return 0;
    }
}

/* Returns the initial value for every element of slot `slot`. */
float ps_optim_slot_init(const ps_opt_spec *spec, int slot) {
    if (spec->kind == PS_OPT_ADAGRAD && slot == 0) return spec->initial_accumulator;
    return 0.0f;
}

static void sgd(const ps_opt_spec *s, float *w, const float *g, size_t n) {
    double lr = s->lr;
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(w[i] - lr * g[i]);
}

static void momentum(const ps_opt_spec *s, float *w, const float *g, float *v, size_t n) {
    double lr = s->lr, mu = s->momentum;
    for (size_t i = 0; i < n; i++) {
        double vi = mu * v[i] - lr * g[i];
        v[i] = (float)vi;
        double step = s->nesterov ? mu * vi - lr * g[i] : vi;
        w[i] = (float)(w[i] + step);
    }
}

static void adagrad(const ps_opt_spec *s, float *w, const float *g, float *a, size_t n) {
    double lr = s->lr, eps = s->epsilon;
    for (size_t i = 0; i < n; i++) {
        double ai = a[i] + (double)g[i] * g[i];
        a[i] = (float)ai;
        w[i] = (float)(w[i] - lr * g[i] / (sqrt(ai) + eps));
    }
}

static void rmsprop(const ps_opt_spec *s, float *w, const float *g, float *ms, size_t n) {
    double lr = s->lr, eps = s->epsilon, rho = s->rho;
    for (size_t i = 0; i < n; i++) {
        double si = rho * ms[i] + (1.0 - rho) * g[i] * g[i];
        ms[i] = (float)si;
        w[i] = (float)(w[i] - lr * g[i] / (sqrt(si) + eps));
    }
}

static void adam(const ps_opt_spec *s, float *w, const float *g, float *m, float *v, size_t n,
                 uint64_t t) {
    double b1 = s->beta1, b2 = s->beta2, eps = s->epsilon;
    double td = (double)(t ? t : 1); /* t is 1-based; treat a stray 0 as the first step */
    double lr_t = s->lr * sqrt(1.0 - pow(b2, td)) / (1.0 - pow(b1, td));
    for (size_t i = 0; i < n; i++) {
        double mi = b1 * m[i] + (1.0 - b1) * g[i];
        double vi = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        m[i] = (float)mi;
        v[i] = (float)vi;
        w[i] = (float)(w[i] - lr_t * mi / (sqrt(vi) + eps));
    }
}

/* Updates w and the caller-owned slots in place; g is only read. An unknown kind
 * is a no-op; t == 0 is treated as 1. */
void ps_optim_apply(const ps_opt_spec *spec, float *w, const float *g, float *const *slots,
                    size_t n, uint64_t t) {
    switch (spec->kind) {
    case PS_OPT_SGD:
        sgd(spec, w, g, n);
        break;
    case PS_OPT_MOMENTUM:
        momentum(spec, w, g, slots[0], n);
        break;
    case PS_OPT_ADAGRAD:
        adagrad(spec, w, g, slots[0], n);
        break;
    case PS_OPT_RMSPROP:
        rmsprop(spec, w, g, slots[0], n);
        break;
    case PS_OPT_ADAM:
        adam(spec, w, g, slots[0], slots[1], n, t);
        break;
    case PS_OPT_ADAMW: {
        double decay = (double)spec->lr * spec->weight_decay;
        for (size_t i = 0; i < n; i++)
            w[i] = (float)(w[i] - decay * w[i]);
        adam(spec, w, g, slots[0], slots[1], n, t);
        break;
    }
    default:
        break;
    }
}
