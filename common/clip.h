/* Gradient clipping, Keras' optimizer arguments clipnorm, clipvalue and
 * global_clipnorm: pure functions over a gradient buffer and the ranges of its
 * variables (each variable's gradient is g[off .. off+len)). Run by whoever holds
 * whole gradients: the worker (worker/exchange/local_opt.c on the combined gradient,
 * worker/exchange/exchange_ps.c on its own before pushing), never psd. */
#ifndef PS_CLIP_H
#define PS_CLIP_H

#include <stddef.h>

#include "optim_spec.h"

/* One variable's gradient: off and len in floats from the buffer's start. */
typedef struct {
    size_t off, len;
} ps_clip_range;

/* The L2 norm of the gradients of the n ranges together (sum of squares in double). */
double ps_clip_global_norm(const float *g, const ps_clip_range *r, size_t n);
/* clipnorm: each range whose L2 norm exceeds max_norm is scaled by max_norm/norm
 * (one float factor); the others are left exactly as they are. */
void ps_clip_by_norm(float *g, const ps_clip_range *r, size_t n, float max_norm);
/* global_clipnorm: when the norm of all n ranges together exceeds max_norm, each is
 * scaled by max_norm/norm; otherwise nothing changes. A norm that is not finite (a
 * NaN or infinite gradient) leaves them as they are. Returns the norm before. */
double ps_clip_by_global_norm(float *g, const ps_clip_range *r, size_t n, float max_norm);
/* clipvalue: each element to [-v, v] (a NaN stays NaN). */
void ps_clip_by_value(float *g, const ps_clip_range *r, size_t n, float v);

/* 1 when s asks for any clipping; 2 when it needs all the gradients at once
 * (global_clipnorm), 1 when each variable's alone will do. */
int ps_clip_needed(const ps_opt_spec *s);
/* The clipping s asks for (at most one, ps_opt_spec_validate) on the ranges. */
void ps_clip_apply(const ps_opt_spec *s, float *g, const ps_clip_range *r, size_t n);

#endif
