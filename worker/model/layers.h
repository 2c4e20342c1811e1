/* Layers as forward/backward pairs over kernels/ (llm.c style): outputs first,
 * then inputs, then sizes; gradients are named d<name>; buffers live on d. */
#ifndef PS_LAYERS_H
#define PS_LAYERS_H

#include <stddef.h>

#include "kernels.h"

/* Dense: out[B, C_out] = in[B, C_in] @ w[C_in, C_out] + b[C_out]  (Keras kernel
 * layout [in, out]). Overwrites out; b may be NULL (no bias). */
void ps_dense_forward(ps_k_dev *d, float *out, const float *in, const float *w, const float *b,
                      size_t B, size_t C_in, size_t C_out);
/* Dense backward from dout[B, C_out]: overwrites dw[C_in, C_out] = in^T @ dout
 * (skipped when dw is NULL: a frozen layer),
 * db[C_out] = column sums of dout (skipped when db is NULL), and
 * din[B, C_in] = dout @ w^T (skipped when din is NULL, e.g. for the first layer).
 * din must not alias dout. */
void ps_dense_backward_overwrite(ps_k_dev *d, float *din, float *dw, float *db, const float *dout,
                                 const float *in, const float *w, size_t B, size_t C_in,
                                 size_t C_out);
/* Same, adding into dw and db (+=; gradient accumulation over micro-batches);
 * din is still overwritten. */
void ps_dense_backward_acc(ps_k_dev *d, float *din, float *dw, float *db, const float *dout,
                           const float *in, const float *w, size_t B, size_t C_in, size_t C_out);

/* ps_dense_forward and ps_dense_backward_overwrite with the GEMMs in prec
 * (ps_k_gemm_ex: inputs rounded to fp16 / bf16, fp32 accumulation); the
 * bias and its gradient stay fp32. PS_OK or the GEMM's error (PS_ENOMEM). */
int ps_dense_forward_ex(ps_k_dev *d, ps_k_prec prec, float *out, const float *in, const float *w,
                        const float *b, size_t B, size_t C_in, size_t C_out);
int ps_dense_backward_overwrite_ex(ps_k_dev *d, ps_k_prec prec, float *din, float *dw, float *db,
                                   const float *dout, const float *in, const float *w, size_t B,
                                   size_t C_in, size_t C_out);

/* Element-wise activation over n values: out = f(in); out may equal in. */
void ps_activation_forward(ps_k_dev *d, ps_k_act act, float *out, const float *in, size_t n);
/* Activation backward from the forward OUTPUT out: overwrites din = f' * dout;
 * din may equal dout (in place). */
void ps_activation_backward_overwrite(ps_k_dev *d, ps_k_act act, float *din, const float *dout,
                                      const float *out, size_t n);

#endif
