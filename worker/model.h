/* A model built from a Keras-like JSON spec: a stack of layers whose
 * parameters live in one allocation (and gradients in another), so one call
 * sends, pulls or zeroes them all. Forward/backward run through kernels/. */
#ifndef PS_MODEL_H
#define PS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "optim_spec.h"

typedef struct ps_model ps_model;

/* One trainable variable: a view into the params/grads allocations. */
typedef struct {
    char name[64];     /* e.g. "dense_0/kernel", "dense_0/bias"; unique in the model */
    int rank;          /* 1 (bias) or 2 (kernel, Keras layout [in, out]) */
    size_t shape[2];   /* shape[0] is the row count used for row-splitting */
    size_t numel;
    size_t offset;     /* in floats from the start of ps_model_params()/ps_model_grads() */
} ps_model_var;

/* Parses a spec (JSON text). On success *out owns a new model (free with
 * ps_model_free) and PS_OK is returned; on failure a negative ps_err and a
 * one-line reason in err. */
int ps_model_from_json(const char *json, ps_model **out, char *err, size_t errlen);
/* Same, reading the spec from a file. */
int ps_model_load(const char *path, ps_model **out, char *err, size_t errlen);
/* The built-in default: 784-128(relu)-10, sparse CE from logits, Adam 1e-3, batch 64. */
const char *ps_model_default_spec(void);
void ps_model_free(ps_model *m);

size_t ps_model_input_dim(const ps_model *m);   /* features per sample, e.g. 784 */
size_t ps_model_num_classes(const ps_model *m); /* outputs of the last layer */
size_t ps_model_num_vars(const ps_model *m);
const ps_model_var *ps_model_var_at(const ps_model *m, size_t i);
size_t ps_model_num_params(const ps_model *m);  /* total floats over all vars */
float *ps_model_params(ps_model *m);            /* owned by the model */
float *ps_model_grads(ps_model *m);             /* owned by the model */
const ps_opt_spec *ps_model_optimizer(const ps_model *m);
size_t ps_model_batch_size(const ps_model *m);  /* spec "batch_size", default 64 */
const char *ps_model_name(const ps_model *m);

/* Keras default initializers: glorot_uniform kernels, zero biases; seeded. */
void ps_model_init_params(ps_model *m, uint64_t seed);

/* Forward + backward on a batch. Overwrites the grads with d(mean loss)/d(params);
 * *loss = mean loss over the batch; *correct = number of argmax hits.
 * Returns PS_OK, or PS_EINVAL for a label out of range / batch of 0. */
int ps_model_train_step(ps_model *m, const float *x, const int32_t *y, size_t batch, float *loss,
                        size_t *correct);
/* Forward only over n samples (in chunks); *loss = mean loss, *correct = hits. */
int ps_model_evaluate(ps_model *m, const float *x, const int32_t *y, size_t n, float *loss,
                      size_t *correct);

#endif
