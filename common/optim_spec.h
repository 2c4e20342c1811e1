/* Optimizer kinds and hyperparameters, shared by the worker (which reads them
 * from the model spec) and psd (which applies them per variable). */
#ifndef PS_OPTIM_SPEC_H
#define PS_OPTIM_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON; /* cjson/cJSON.h */

/* The optimizer kinds, one row each: enum suffix, name, number of slot arrays
 * (each numel floats of optimizer state). The one place a kind's slot count is
 * written; the enum, ps_opt_kind_name, ps_optim_num_slots and PS_OPT_MAX_SLOTS
 * come from it. The order is the wire's (ps.proto OptKind) and the checkpoints'. */
#define PS_OPT_KINDS(X)                                                                            \
    X(SGD, "sgd", 0)                                                                               \
    X(MOMENTUM, "momentum", 1) /* velocity */                                                      \
    X(ADAGRAD, "adagrad", 1)   /* accumulator */                                                   \
    X(RMSPROP, "rmsprop", 1)   /* mean square */                                                   \
    X(ADAM, "adam", 2)         /* m, v */                                                          \
    X(ADAMW, "adamw", 2)       /* m, v */

#define PS_OPT_ENUM_(k, name, slots) PS_OPT_##k,
typedef enum { PS_OPT_KINDS(PS_OPT_ENUM_) PS_OPT_COUNT } ps_opt_kind;
#undef PS_OPT_ENUM_

/* The most slot arrays any kind needs: the size of a union with one member of
 * slots+1 bytes per kind, minus one. */
#define PS_OPT_SLOTS_MEMBER_(k, name, slots) char k[(slots) + 1];
enum { PS_OPT_MAX_SLOTS = (int)sizeof(union {PS_OPT_KINDS(PS_OPT_SLOTS_MEMBER_)}) - 1 };
#undef PS_OPT_SLOTS_MEMBER_

/* The learning-rate schedules, Keras' keras.optimizers.schedules classes, one row
 * each: enum suffix, Keras class name. The order is the wire's (ps.proto LrKind) and
 * the checkpoints'. CONSTANT is no schedule: the rate is the spec's lr. */
#define PS_LR_KINDS(X)                                                                             \
    X(CONSTANT, "constant")                                                                        \
    X(EXPONENTIAL, "ExponentialDecay")                                                             \
    X(PIECEWISE, "PiecewiseConstantDecay")                                                         \
    X(COSINE, "CosineDecay")                                                                       \
    X(INVERSE_TIME, "InverseTimeDecay")

#define PS_LR_ENUM_(k, name) PS_LR_##k,
typedef enum { PS_LR_KINDS(PS_LR_ENUM_) PS_LR_COUNT } ps_lr_kind;
#undef PS_LR_ENUM_

/* The most boundaries a PiecewiseConstantDecay may have. */
#define PS_LR_MAX_BOUNDARIES 16

/* A learning-rate schedule: the rate as a function of the step (updates applied
 * before this one), Keras' formulas (common/optim.h, ps_optim_lr). The initial rate
 * (Keras' initial_learning_rate, or values[0] of a PiecewiseConstantDecay) is the
 * spec's lr. A field a kind does not use is 0. */
typedef struct {
    ps_lr_kind kind;
    float decay_steps;   /* exponential, cosine, inverse_time: > 0 */
    float decay_rate;    /* exponential, inverse_time */
    bool staircase;      /* exponential, inverse_time: whole periods of decay_steps */
    float alpha;         /* cosine: the final rate as a fraction of the decayed-from rate */
    float warmup_target; /* cosine: the rate reached after the warm-up (no warm-up: lr) */
    float warmup_steps;  /* cosine: steps of linear warm-up from lr to warmup_target */
    uint32_t n_boundaries;                     /* piecewise: 1..PS_LR_MAX_BOUNDARIES */
    uint32_t boundaries[PS_LR_MAX_BOUNDARIES]; /* piecewise: increasing steps */
    /* piecewise: values[i] is the rate once the step is past boundaries[i] (Keras'
     * values[i + 1]; before boundaries[0] the rate is lr, Keras' values[0]) */
    float values[PS_LR_MAX_BOUNDARIES];
} ps_lr_schedule;

typedef struct {
    ps_opt_kind kind;
    float lr;
    float momentum;            /* momentum (and RMSProp momentum, unused: 0) */
    bool nesterov;             /* momentum only */
    float beta1, beta2;        /* adam, adamw */
    float epsilon;             /* adagrad, rmsprop, adam, adamw */
    float rho;                 /* rmsprop decay */
    float weight_decay;        /* every kind: w -= lr*weight_decay*w before the update */
    float initial_accumulator; /* adagrad */
    /* Gradient clipping, Keras' arguments (0: none; at most one of them). Applied
     * by whoever holds whole gradients (the worker, common/clip.h), never by psd:
     * they are not on the wire. */
    float clipnorm;        /* each variable's gradient to this L2 norm */
    float clipvalue;       /* each element to [-clipvalue, clipvalue] */
    float global_clipnorm; /* all trainable gradients together to this L2 norm */
    ps_lr_schedule schedule;
} ps_opt_spec;

/* Keras defaults for the given kind (e.g. adam: lr 1e-3, beta1 .9, beta2 .999, eps 1e-7). */
ps_opt_spec ps_opt_spec_default(ps_opt_kind kind);
/* Lower-case name ("sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"). */
const char *ps_opt_kind_name(ps_opt_kind kind);
/* Parses a name (case-insensitive; "sgd" with momentum>0 is still sgd here).
 * Returns PS_OK or PS_EINVAL. */
int ps_opt_kind_parse(const char *name, ps_opt_kind *out);
/* Checks the hyperparameters are finite and in range, the schedule's too (lr > 0
 * without one, >= 0 with one), and at most one clipping; writes a reason to err.
 * Returns PS_OK or PS_EINVAL. */
int ps_opt_spec_validate(const ps_opt_spec *spec, char *err, size_t errlen);

/* 1 when a and b update alike: same kind and equal values of the hyperparameters
 * that kind uses (sgd: lr; momentum: lr, momentum, nesterov; adagrad: lr, epsilon,
 * initial_accumulator; rmsprop: lr, epsilon, rho; adam: lr, beta1, beta2, epsilon;
 * adamw: the same), and for every kind weight_decay, the clipping and the schedule
 * (its kind and the fields that kind uses). Unused fields do not count. */
int ps_opt_spec_same(const ps_opt_spec *a, const ps_opt_spec *b);
/* Writes the kind and the hyperparameters it uses into buf, e.g.
 * "adam lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-07"; weight_decay and the
 * clipping only when set (adamw: always weight_decay), then a schedule as
 * " schedule=CosineDecay(decay_steps=1000 alpha=0 ...)". Returns buf. */
char *ps_opt_spec_describe(const ps_opt_spec *s, char *buf, size_t len);

/* ---- the codec (optim_spec.c): one table of the fields above drives all of these,
 * and ps.proto's Optimizer too (wire/optim_spec_proto.h) */

/* Bytes of a spec in a checkpoint's variable attribute (docs/FORMATS.md, at
 * offset 4), little-endian: u32 kind, then lr, momentum, nesterov (u32 0/1), beta1,
 * beta2, epsilon, rho, weight_decay, initial_accumulator (f32) -- the whole of
 * attribute version 1 (PS_OPT_ATTR_V1_BYTES) -- then clipnorm, clipvalue,
 * global_clipnorm (f32), the schedule: u32 kind, decay_steps, decay_rate (f32),
 * staircase (u32 0/1), alpha, warmup_target, warmup_steps (f32), u32 n_boundaries,
 * u32 boundaries[PS_LR_MAX_BOUNDARIES], f32 values[PS_LR_MAX_BOUNDARIES]. */
#define PS_OPT_ATTR_BYTES 212u
#define PS_OPT_ATTR_V1_BYTES 40u
/* Writes s into out[0..PS_OPT_ATTR_BYTES). */
void ps_opt_spec_to_attr(const ps_opt_spec *s, uint8_t out[PS_OPT_ATTR_BYTES]);
/* Reads a spec written by ps_opt_spec_to_attr (len PS_OPT_ATTR_BYTES), or by attribute
 * version 1 (len PS_OPT_ATTR_V1_BYTES: no clipping, no schedule, and weight_decay,
 * unused then, 0 but for adamw) into *out (untouched on error). Returns PS_OK, or
 * PS_EFORMAT with the reason in err (another length, a bad kind, a bool that is not
 * 0 or 1, a value ps_opt_spec_validate rejects). */
int ps_opt_spec_from_attr(const uint8_t *in, size_t len, ps_opt_spec *out, char *err,
                          size_t errlen);

/* Reads the model spec's "optimizer": NULL (adam's defaults), a name, or an object
 * {"name": ..., Keras's keys: learning_rate, momentum, nesterov, beta_1, beta_2,
 * epsilon, rho, weight_decay, initial_accumulator_value, clipnorm, clipvalue,
 * global_clipnorm}; the kind's defaults fill the rest, and sgd with momentum > 0
 * becomes momentum. weight_decay and the clipping apply to every kind (null: none,
 * as Keras writes it). learning_rate is a number or a Keras schedule as Keras
 * serializes it: {"module": "keras.optimizers.schedules", "class_name":
 * "CosineDecay", "config": {...}, "registered_name": null} (Keras 3) or
 * {"class_name": ..., "config": {...}} (Keras 2), with the class's config keys.
 * Writes *out on success only; borrows o. Returns PS_OK, PS_EFORMAT (no name, an
 * unknown name, class or key, a key the kind does not use, a value of the wrong
 * type: err names it) or PS_EINVAL (a value out of range). */
int ps_opt_spec_from_json(const struct cJSON *o, ps_opt_spec *out, char *err, size_t errlen);

#endif
