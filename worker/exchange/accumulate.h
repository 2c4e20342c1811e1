/* Gradient accumulation (psworker --accumulate-steps N): a step runs the
 * forward/backward pass on up to N micro-batches and exchanges once; the
 * step's gradient is the sample-weighted mean of the micro-batches' gradients
 * (the mean of the N when they are all full), so N micro-batches of b give the
 * gradient of one batch of N x b (exactly, up to float rounding, for a model
 * without batch-dependent layers: BatchNormalization normalises each
 * micro-batch with its own statistics). The model's backward pass overwrites
 * its gradients, so the earlier micro-batches' are summed into a buffer here;
 * during the last micro-batch's backward pass each range the model reports
 * final is summed and scaled in place and only then handed to the exchange
 * (exchange.h grads_ready), so pushes and all-reduces still overlap the
 * backward pass. */
#ifndef PS_ACCUMULATE_H
#define PS_ACCUMULATE_H

#include <stddef.h>
#include <stdint.h>

#include "exchange.h"
#include "model.h"

typedef struct ps_accum ps_accum;

/* An accumulator over m's gradients, passing the final ranges to ex (both
 * borrowed: they must outlive it). It sets m's gradient hook to itself.
 * Returns PS_OK or PS_ENOMEM (*out NULL). */
int ps_accum_new(ps_model *m, ps_exchange *ex, ps_accum **out);
/* Frees a; the model's hook is left pointing nowhere useful: clear or reset it
 * before the next training step. NULL is a no-op. */
void ps_accum_free(ps_accum *a);

/* One micro-batch of nb samples: forward/backward (ps_model_train_step; *loss
 * and *correct are this micro-batch's). first: the step's first (the sums
 * start over); last: its last (the step's gradient is made and reaches the
 * exchange; first and last together: a step of one micro-batch, passed
 * through unchanged). Returns ps_model_train_step's result. */
int ps_accum_micro_step(ps_accum *a, const float *x, const int32_t *y, size_t nb, int first,
                        int last, float *loss, size_t *correct);

#endif
