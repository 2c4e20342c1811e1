/* The optimizers, applied by psd (and by a worker running with --no-ps):
 * update a variable in place from its gradient and its slot arrays (the
 * optimizer's state). Pure functions over floats. */
#ifndef PS_OPTIM_H
#define PS_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "optim_spec.h"

/* Number of slot arrays (each numel floats) the kind needs:
 * sgd 0, momentum 1 (velocity), adagrad 1 (accumulator), rmsprop 1 (mean square),
 * adam/adamw 2 (m, v). */
int ps_optim_num_slots(ps_opt_kind kind);

/* Initial value of slot `slot` (adagrad's accumulator starts at initial_accumulator;
 * everything else 0). */
float ps_optim_slot_init(const ps_opt_spec *spec, int slot);

/* The learning rate after `step` updates (the rate the next update uses), as
 * Keras' schedules compute it (in double here, rounded once to float), with
 * lr the initial rate and d = decay_steps:
 *   constant:               lr (exactly)
 *   ExponentialDecay:       lr * decay_rate^(step/d)           (staircase: floor(step/d))
 *   InverseTimeDecay:       lr / (1 + decay_rate * step/d)     (staircase: floor(step/d))
 *   PiecewiseConstantDecay: lr until step > boundaries[0], then values[0], ...
 *   CosineDecay:            warm-up (warmup_steps w, target T): for step < w,
 *                           lr + (T - lr) * step/w; then with s = min(step - w, d),
 *                           T * ((1 - alpha) * (1 + cos(pi * s/d))/2 + alpha)
 *                           (no warm-up: w = 0, T = lr) */
float ps_optim_lr(const ps_opt_spec *spec, uint64_t step);

/* Applies one update: w[i] changes from g[i]; slots[0..num_slots) are updated.
 * w, g and the slots must not overlap. `t` is the 1-based count of updates
 * applied to this variable including this one (Adam's bias correction uses it;
 * the learning rate is ps_optim_lr(spec, t - 1), as Keras evaluates its schedule
 * at the updates done before this one).
 * Element math in float (as TensorFlow's kernels), the same bits on any x86-64
 * CPU (optim.c). Formulas (Keras):
 *   sgd:      w -= lr*g
 *   momentum: v = mu*v - lr*g;  w += v             (nesterov: w += mu*v - lr*g)
 *   adagrad:  a += g*g;         w -= lr*g/(sqrt(a)+eps)
 *   rmsprop:  s = rho*s + (1-rho)*g*g; w -= lr*g/(sqrt(s)+eps)
 *   adam:     m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
 *             lr_t = lr*sqrt(1-b2^t)/(1-b1^t); w -= lr_t*m/(sqrt(v)+eps)
 *   adamw:    w -= lr*wd*w, then adam
 * and for every other kind with weight_decay wd > 0, w -= lr*wd*w first (Keras 3's
 * weight decay; lr*wd is one float, as adamw's). Clipping is not done here
 * (common/clip.h: it needs whole variables, or all of them). */
void ps_optim_apply(const ps_opt_spec *spec, float *w, const float *g, float *const *slots,
                    size_t n, uint64_t t);

#endif
