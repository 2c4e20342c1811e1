/* Reference implementations of every kernel in kernels.h: naive loops in
 * double precision with the textbook formulas, for tests to compare against. */
#ifndef PS_KERNELS_REF_H
#define PS_KERNELS_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Each mirrors the ps_k_* function of the same suffix on host buffers (same
 * shapes, same overwrite/accumulate contract); see kernels.h. */
void ps_ref_gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
                 const float *A, const float *B, float beta, float *C);
void ps_ref_bias_add_rows_acc(float *x, const float *bias, size_t rows, size_t cols);
void ps_ref_col_sum_overwrite(float *out, const float *x, size_t rows, size_t cols);
void ps_ref_col_sum_acc(float *out, const float *x, size_t rows, size_t cols);
void ps_ref_act_forward_overwrite(ps_k_act act, float *y, const float *x, size_t n);
void ps_ref_act_backward_overwrite(ps_k_act act, float *dx, const float *dy, const float *y,
                                   size_t n);
void ps_ref_act_backward_acc(ps_k_act act, float *dx, const float *dy, const float *y, size_t n);
void ps_ref_softmax_rows_overwrite(float *probs, const float *logits, size_t rows, size_t cols);
/* Returns PS_OK or PS_EINVAL, like ps_k_softmax_ce_overwrite. */
int ps_ref_softmax_ce_overwrite(float *dlogits, const float *logits, const int32_t *labels,
                                size_t rows, size_t cols, float *loss);
/* Returns PS_OK or PS_EINVAL, like ps_k_argmax_correct. */
int ps_ref_argmax_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols,
                          size_t *correct);

#endif
