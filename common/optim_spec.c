/* Defaults, names and validation of optimizer hyperparameters. */
#include "optim_spec.h"

#include <math.h>
#include <stdio.h>
#include <strings.h>

#include "ps_error.h"

static const char *names[PS_OPT_COUNT] = {"sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"};

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
