/* Sparse optimizers (optim_rows.h). */
#include "optim_rows.h"

#include <math.h>
#include <string.h>

static const char *const names[] = {"sgd", "adagrad", "rowwise_adagrad", "lazy_adam", "ftrl"};

ps_row_opt ps_row_opt_default(ps_row_opt_kind kind, float lr) {
    return (ps_row_opt){.kind = kind,
                        .lr = lr,
                        .eps = 1e-7f,
                        .initial_accumulator = 0.1f,
                        .beta_1 = 0.9f,
                        .beta_2 = 0.999f,
                        .l1 = 0.0f,
                        .l2 = 0.0f,
                        .lr_power = -0.5f};
}

int ps_row_opt_parse_kind(const char *name, ps_row_opt_kind *kind) {
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strcmp(name, names[k]) == 0) {
            *kind = (ps_row_opt_kind)k;
            return 0;
        }
    return -1;
}

const char *ps_row_opt_kind_name(ps_row_opt_kind kind) {
    return (unsigned)kind < sizeof names / sizeof *names ? names[kind] : "?";
}

size_t ps_row_opt_slot_floats(ps_row_opt_kind kind, size_t dim) {
    switch (kind) {
    case PS_ROW_ADAGRAD:
        return dim;
    case PS_ROW_ROWWISE_ADAGRAD:
        return 1;
    case PS_ROW_LAZY_ADAM:
    case PS_ROW_FTRL:
        return 2 * dim;
    default:
        return 0;
    }
}

void ps_row_opt_init(const ps_row_opt *o, float *slots, size_t dim) {
    size_t n = ps_row_opt_slot_floats(o->kind, dim);
    for (size_t i = 0; i < n; i++) slots[i] = 0.0f;
    if (o->kind == PS_ROW_ADAGRAD || o->kind == PS_ROW_ROWWISE_ADAGRAD)
        for (size_t i = 0; i < n; i++) slots[i] = o->initial_accumulator;
    if (o->kind == PS_ROW_FTRL) /* z (the linear term) 0, n the accumulator */
        for (size_t i = 0; i < dim; i++) slots[dim + i] = o->initial_accumulator;
}

static void adagrad(const ps_row_opt *o, float *w, float *a, const float *g, size_t dim) {
    for (size_t i = 0; i < dim; i++) {
        a[i] += g[i] * g[i];
        w[i] -= o->lr * g[i] / (sqrtf(a[i]) + o->eps);
    }
}

static void rowwise_adagrad(const ps_row_opt *o, float *w, float *a, const float *g, size_t dim) {
    float s = 0.0f;
    for (size_t i = 0; i < dim; i++) s += g[i] * g[i];
    *a += dim ? s / (float)dim : 0.0f;
    float step = o->lr / (sqrtf(*a) + o->eps);
    for (size_t i = 0; i < dim; i++) w[i] -= step * g[i];
}

static void lazy_adam(const ps_row_opt *o, float *w, float *m, const float *g, size_t dim,
                      uint64_t t) {
    float *v = m + dim;
    double tt = (double)(t ? t : 1);
    float lr_t = (float)((double)o->lr * sqrt(1.0 - pow((double)o->beta_2, tt)) /
                         (1.0 - pow((double)o->beta_1, tt)));
    for (size_t i = 0; i < dim; i++) {
        m[i] = o->beta_1 * m[i] + (1.0f - o->beta_1) * g[i];
        v[i] = o->beta_2 * v[i] + (1.0f - o->beta_2) * g[i] * g[i];
        w[i] -= lr_t * m[i] / (sqrtf(v[i]) + o->eps);
    }
}

static void ftrl(const ps_row_opt *o, float *w, float *z, const float *g, size_t dim) {
    float *n = z + dim, p = -o->lr_power;
    for (size_t i = 0; i < dim; i++) {
        float n2 = n[i] + g[i] * g[i];
        float np2 = powf(n2, p), np = powf(n[i], p);
        z[i] += g[i] - (np2 - np) / o->lr * w[i];
        n[i] = n2;
        float quadratic = np2 / o->lr + 2.0f * o->l2;
        float clipped = z[i] < -o->l1 ? -o->l1 : z[i] > o->l1 ? o->l1 : z[i];
        w[i] = (clipped - z[i]) / quadratic;
    }
}

void ps_row_opt_apply(const ps_row_opt *o, float *w, float *slots, const float *g, size_t dim,
                      uint64_t t) {
    switch (o->kind) {
    case PS_ROW_SGD:
        for (size_t i = 0; i < dim; i++) w[i] -= o->lr * g[i];
        break;
    case PS_ROW_ADAGRAD:
        adagrad(o, w, slots, g, dim);
        break;
    case PS_ROW_ROWWISE_ADAGRAD:
        rowwise_adagrad(o, w, slots, g, dim);
        break;
    case PS_ROW_LAZY_ADAM:
        lazy_adam(o, w, slots, g, dim, t);
        break;
    case PS_ROW_FTRL:
        ftrl(o, w, slots, g, dim);
        break;
    }
}
