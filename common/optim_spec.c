/* Defaults, names and validation of optimizer hyperparameters. */
#include "optim_spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "ps_error.h"

#define NAME_(k, name, slots) name,
static const char *names[PS_OPT_COUNT] = {PS_OPT_KINDS(NAME_)};
#undef NAME_

ps_opt_spec ps_opt_spec_default(ps_opt_kind kind) {
    ps_opt_spec s = {.kind = kind,
                     .lr = 1e-3f,
                     .beta1 = 0.9f,
                     .beta2 = 0.999f,
                     .epsilon = 1e-7f,
                     .rho = 0.9f,
                     .initial_accumulator = 0.1f};
    switch (kind) {
    case PS_OPT_SGD:
        s.lr = 0.01f;
        break;
    case PS_OPT_MOMENTUM:
        s.lr = 0.01f;
        s.momentum = 0.9f;
        break;
    case PS_OPT_ADAMW:
        s.weight_decay = 0.004f;
        break;
    default:
        break;
    }
    return s;
}

const char *ps_opt_kind_name(ps_opt_kind kind) {
    return (unsigned)kind < PS_OPT_COUNT ? names[kind] : "unknown";
}

int ps_opt_kind_parse(const char *name, ps_opt_kind *out) {
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        if (strcasecmp(name, names[k]) == 0) {
            *out = (ps_opt_kind)k;
            return PS_OK;
        }
    }
    return PS_EINVAL;
}

int ps_opt_spec_validate(const ps_opt_spec *s, char *err, size_t errlen) {
    const char *why = NULL;
    if ((unsigned)s->kind >= PS_OPT_COUNT)
        why = "unknown optimizer kind";
    else if (!isfinite(s->lr) || s->lr <= 0)
        why = "learning_rate must be > 0";
    else if (!isfinite(s->momentum) || s->momentum < 0 || s->momentum >= 1)
        why = "momentum must be in [0, 1)";
    else if (!isfinite(s->beta1) || s->beta1 < 0 || s->beta1 >= 1)
        why = "beta_1 must be in [0, 1)";
    else if (!isfinite(s->beta2) || s->beta2 < 0 || s->beta2 >= 1)
        why = "beta_2 must be in [0, 1)";
    else if (!isfinite(s->epsilon) || s->epsilon < 0)
        why = "epsilon must be >= 0";
    else if (!isfinite(s->rho) || s->rho < 0 || s->rho >= 1)
        why = "rho must be in [0, 1)";
    else if (!isfinite(s->weight_decay) || s->weight_decay < 0)
        why = "weight_decay must be >= 0";
    else if (!isfinite(s->initial_accumulator) || s->initial_accumulator < 0)
        why = "initial_accumulator_value must be >= 0";
    if (why) {
        if (err) snprintf(err, errlen, "%s optimizer: %s", ps_opt_kind_name(s->kind), why);
        return PS_EINVAL;
    }
    return PS_OK;
}

/* Bits of the hyperparameters kind k uses. */
enum {
    U_LR = 1,
    U_MOM = 2,
    U_NEST = 4,
    U_B1 = 8,
    U_B2 = 16,
    U_EPS = 32,
    U_RHO = 64,
    U_WD = 128,
    U_ACC = 256
};

static unsigned used_fields(ps_opt_kind k) {
    switch (k) {
    case PS_OPT_SGD:
        return U_LR;
    case PS_OPT_MOMENTUM:
        return U_LR | U_MOM | U_NEST;
    case PS_OPT_ADAGRAD:
        return U_LR | U_EPS | U_ACC;
    case PS_OPT_RMSPROP:
        return U_LR | U_EPS | U_RHO;
    case PS_OPT_ADAM:
        return U_LR | U_B1 | U_B2 | U_EPS;
    case PS_OPT_ADAMW:
        return U_LR | U_B1 | U_B2 | U_EPS | U_WD;
    default:
        return ~0u;
    }
}

int ps_opt_spec_same(const ps_opt_spec *a, const ps_opt_spec *b) {
    if (a->kind != b->kind) return 0;
    unsigned u = used_fields(a->kind);
    return !((u & U_LR && a->lr != b->lr) || (u & U_MOM && a->momentum != b->momentum) ||
             (u & U_NEST && a->nesterov != b->nesterov) || (u & U_B1 && a->beta1 != b->beta1) ||
             (u & U_B2 && a->beta2 != b->beta2) || (u & U_EPS && a->epsilon != b->epsilon) ||
             (u & U_RHO && a->rho != b->rho) || (u & U_WD && a->weight_decay != b->weight_decay) ||
             (u & U_ACC && a->initial_accumulator != b->initial_accumulator));
}

/* The shortest %g form of v that reads back as the same float. */
static const char *short_float(float v, char *buf, size_t len) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

char *ps_opt_spec_describe(const ps_opt_spec *s, char *buf, size_t len) {
    unsigned u = used_fields(s->kind);
    size_t o = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(buf + o, o < len ? len - o : 0, __VA_ARGS__);                            \
        if (n_ > 0) o += (size_t)n_;                                                               \
    } while (0)
    PUT("%s", ps_opt_kind_name(s->kind));
    char f[32];
    if (u & U_LR) PUT(" lr=%s", short_float(s->lr, f, sizeof f));
    if (u & U_MOM) PUT(" momentum=%s", short_float(s->momentum, f, sizeof f));
    if (u & U_NEST) PUT(" nesterov=%s", s->nesterov ? "true" : "false");
    if (u & U_B1) PUT(" beta1=%s", short_float(s->beta1, f, sizeof f));
    if (u & U_B2) PUT(" beta2=%s", short_float(s->beta2, f, sizeof f));
    if (u & U_EPS) PUT(" epsilon=%s", short_float(s->epsilon, f, sizeof f));
    if (u & U_RHO) PUT(" rho=%s", short_float(s->rho, f, sizeof f));
    if (u & U_WD) PUT(" weight_decay=%s", short_float(s->weight_decay, f, sizeof f));
    if (u & U_ACC) PUT(" initial_accumulator=%s", short_float(s->initial_accumulator, f, sizeof f));
#undef PUT
    return buf;
}
