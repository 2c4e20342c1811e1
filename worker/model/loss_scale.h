/* Dynamic loss scaling for mixed_float16, as Keras' LossScaleOptimizer: the
 * loss (so every gradient) is multiplied by the scale before the backward
 * pass and the gradients divided by it after; a step whose gradients hold an
 * inf or NaN is skipped and halves the scale; after `period` good steps in a
 * row the scale doubles. A pure state machine (no I/O). */
#ifndef PS_LOSS_SCALE_H
#define PS_LOSS_SCALE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PS_LOSS_SCALE_INITIAL 32768.0f /* 2^15, Keras' initial_scale */
#define PS_LOSS_SCALE_PERIOD 2000      /* Keras' dynamic_growth_steps */

typedef struct {
    float scale;         /* the current loss scale (a power of two) */
    uint32_t good_steps; /* finite steps since the last change */
    uint32_t period;     /* good steps before the scale doubles */
    uint64_t skipped;    /* steps skipped so far (non-finite gradients) */
} ps_loss_scale;

/* Keras' defaults: scale 2^15, doubling after 2000 good steps. */
void ps_loss_scale_init(ps_loss_scale *s);
/* The outcome of one step: finite gradients count towards a doubling (the
 * counter restarts when it doubles; never to infinity); non-finite ones halve
 * the scale (not below 2^-126, the smallest normal float) and restart the
 * counter. Returns true when the step's update must be skipped (!finite). */
bool ps_loss_scale_update(ps_loss_scale *s, bool finite);
/* g[0..n) /= scale (times 1/scale: exact, a power of two); returns true when
 * every value of g is finite afterwards (checked on all n). */
bool ps_loss_scale_unscale(const ps_loss_scale *s, float *g, size_t n);
/* True when every value of g[0..n) is finite. */
bool ps_all_finite(const float *g, size_t n);

#endif
