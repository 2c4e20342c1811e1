/* Optimizer kinds and hyperparameters, shared by the worker (which reads them
 * from the model spec) and psd (which applies them per variable). */
#ifndef PS_OPTIM_SPEC_H
#define PS_OPTIM_SPEC_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    PS_OPT_SGD = 0,
    PS_OPT_MOMENTUM,
    PS_OPT_ADAGRAD,
    PS_OPT_RMSPROP,
    PS_OPT_ADAM,
    PS_OPT_ADAMW,
    PS_OPT_COUNT
} ps_opt_kind;

typedef struct {
    ps_opt_kind kind;
    float lr;
    float momentum;            /* momentum (and RMSProp momentum, unused: 0) */
    bool nesterov;             /* momentum only */
    float beta1, beta2;        /* adam, adamw */
    float epsilon;             /* adagrad, rmsprop, adam, adamw */
    float rho;                 /* rmsprop decay */
    float weight_decay;        /* adamw, decoupled */
    float initial_accumulator; /* adagrad */
} ps_opt_spec;

/* Keras defaults for the given kind (e.g. adam: lr 1e-3, beta1 .9, beta2 .999, eps 1e-7). */
ps_opt_spec ps_opt_spec_default(ps_opt_kind kind);
/* Lower-case name ("sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"). */
const char *ps_opt_kind_name(ps_opt_kind kind);
/* Parses a name (case-insensitive; "sgd" with momentum>0 is still sgd here).
 * Returns PS_OK or PS_EINVAL. */
int ps_opt_kind_parse(const char *name, ps_opt_kind *out);
/* Checks the hyperparameters are finite and in range; writes a reason to err.
 * Returns PS_OK or PS_EINVAL. */
int ps_opt_spec_validate(const ps_opt_spec *spec, char *err, size_t errlen);

#endif
