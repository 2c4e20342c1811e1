/* Reference implementations of every kernel in kernels.h: naive loops in
 * double precision with the textbook formulas, for tests to compare against. */
#ifndef PS_KERNELS_REF_H
#define PS_KERNELS_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Each mirrors the ps_k_* function of the same suffix on host buffers (same
 * shapes, same overwrite/accumulate contract, same return codes); see
 * kernels.h. Only the differences are noted. */
void ps_ref_gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
                 const float *A, const float *B, float beta, float *C);
/* A and B are rounded to prec (ps_ew_round_*: that is the definition), the
 * products summed in double. Always returns PS_OK. */
int ps_ref_gemm_ex(ps_k_prec prec, bool trans_a, bool trans_b, size_t M, size_t N, size_t K,
                   float alpha, const float *A, const float *B, float beta, float *C);
void ps_ref_bias_add_rows_acc(float *x, const float *bias, size_t rows, size_t cols);
void ps_ref_col_sum_overwrite(float *out, const float *x, size_t rows, size_t cols);
void ps_ref_col_sum_acc(float *out, const float *x, size_t rows, size_t cols);
void ps_ref_act_forward_overwrite(ps_k_act act, float *y, const float *x, size_t n);
/* The derivative is computed from the input x alone (x is required, y is
 * ignored and may be NULL). */
void ps_ref_act_backward_overwrite(ps_k_act act, float *dx, const float *dy, const float *x,
                                   const float *y, size_t n);
void ps_ref_act_backward_acc(ps_k_act act, float *dx, const float *dy, const float *x,
                             const float *y, size_t n);
void ps_ref_softmax_rows_overwrite(float *probs, const float *logits, size_t rows, size_t cols);
int ps_ref_softmax_ce_overwrite(float *dlogits, const float *logits, const int32_t *labels,
                                size_t rows, size_t cols, float *loss);
int ps_ref_argmax_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols,
                          size_t *correct);
/* -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))), averaged. */
int ps_ref_bce_overwrite(float *dlogits, const float *logits, const float *targets, size_t rows,
                         size_t cols, float *loss);
int ps_ref_mse_overwrite(float *dpred, const float *pred, const float *targets, size_t rows,
                         size_t cols, float *loss);
void ps_ref_onehot_overwrite(float *out, const int32_t *labels, size_t rows, size_t cols);
int ps_ref_binary_correct(const float *logits, const int32_t *labels, size_t rows, size_t *correct);
int ps_ref_sum(const float *x, size_t n, double *out);
int ps_ref_sumsq(const float *x, size_t n, double *out);
/* The mask is ps_ew_dropout_keep (its definition); the scaling is done here. */
void ps_ref_dropout_forward_overwrite(float *y, const float *x, size_t n, float rate,
                                      uint64_t seed);
void ps_ref_dropout_backward_overwrite(float *dx, const float *dy, size_t n, float rate,
                                       uint64_t seed);
/* One decision per group of `group` consecutive elements (element i: i / group). */
void ps_ref_dropout_group_forward_overwrite(float *y, const float *x, size_t n, size_t group,
                                            float rate, uint64_t seed);

/* Convolution and pooling take the geometry from ps_k_conv_plan /
 * ps_k_pool_plan (p->chunk is ignored) and work from the definitions: a
 * direct convolution, its analytic gradient, windows scanned cell by cell. */
void ps_ref_im2col_overwrite(const ps_k_conv *p, float *cols, const float *x, size_t n);
void ps_ref_col2im_overwrite(const ps_k_conv *p, float *dx, const float *cols, size_t n);
void ps_ref_conv2d_forward_overwrite(const ps_k_conv *p, float *y, const float *x, const float *w,
                                     const float *b);
void ps_ref_conv2d_backward_overwrite(const ps_k_conv *p, float *dx, float *dw, float *db,
                                      const float *dy, const float *x, const float *w);
void ps_ref_conv2d_backward_acc(const ps_k_conv *p, float *dx, float *dw, float *db,
                                const float *dy, const float *x, const float *w);
void ps_ref_maxpool_forward_overwrite(const ps_k_pool *p, float *y, int32_t *arg, const float *x);
void ps_ref_maxpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy,
                                       const int32_t *arg);
void ps_ref_avgpool_forward_overwrite(const ps_k_pool *p, float *y, const float *x);
void ps_ref_avgpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy);

/* ref_layers.c. Batch normalization from the definition: the batch mean and
 * biased variance in double, then (x - mean) / sqrt(var + eps) * gamma + beta;
 * its backward is the closed form of the chain rule through mean and var. */
void ps_ref_bn_forward_train_overwrite(float *y, float *mean, float *var, const float *x,
                                       const float *gamma, const float *beta, size_t rows, size_t c,
                                       float eps);
void ps_ref_bn_forward_infer_overwrite(float *y, const float *x, const float *mean,
                                       const float *var, const float *gamma, const float *beta,
                                       size_t rows, size_t c, float eps);
void ps_ref_bn_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                  const float *x, const float *mean, const float *var,
                                  const float *gamma, size_t rows, size_t c, float eps);
/* Depthwise convolution (geometry from ps_k_dwconv_plan), the sums of the
 * definition and their analytic gradient. */
void ps_ref_dwconv2d_forward_overwrite(const ps_k_conv *p, float *y, const float *x, const float *w,
                                       const float *b);
void ps_ref_dwconv2d_backward_overwrite(const ps_k_conv *p, float *dx, float *dw, float *db,
                                        const float *dy, const float *x, const float *w);
void ps_ref_gap_forward_overwrite(float *y, const float *x, size_t n, size_t hw, size_t c);
void ps_ref_gap_backward_overwrite(float *dx, const float *dy, size_t n, size_t hw, size_t c);
void ps_ref_pad2d_forward_overwrite(float *y, const float *x, size_t n, size_t h, size_t w,
                                    size_t c, size_t top, size_t bottom, size_t left, size_t right);
void ps_ref_pad2d_backward_overwrite(float *dx, const float *dy, size_t n, size_t h, size_t w,
                                     size_t c, size_t top, size_t bottom, size_t left,
                                     size_t right);
void ps_ref_add_overwrite(float *y, const float *a, const float *b, size_t n);
void ps_ref_add_acc(float *y, const float *x, size_t n);
void ps_ref_concat_cols_overwrite(float *y, const float *x, size_t rows, size_t c_total,
                                  size_t c_off, size_t c_x);
void ps_ref_split_cols_overwrite(float *dx, const float *dy, size_t rows, size_t c_total,
                                 size_t c_off, size_t c_x);
/* The Keras applications layers: products, rescaling and the crop from
 * their definitions (the crop independently of pad2d), layer normalization
 * with its statistics in double and the chain rule through them. */
void ps_ref_mul_forward_overwrite(float *y, const float *a, const float *b, size_t n);
void ps_ref_mul_backward_overwrite(float *da, float *db, const float *dy, const float *a,
                                   const float *b, size_t n);
void ps_ref_mul_channels_forward_overwrite(float *y, const float *x, const float *s, size_t n,
                                           size_t hw, size_t c);
void ps_ref_mul_channels_backward_overwrite(float *dx, float *ds, const float *dy, const float *x,
                                            const float *s, size_t n, size_t hw, size_t c);
void ps_ref_rescale_forward_overwrite(float *y, const float *x, float scale, float offset,
                                      size_t n);
void ps_ref_rescale_backward_overwrite(float *dx, const float *dy, float scale, size_t n);
/* Keras' Normalization: (x - mean) / max(sqrt(var), eps) in double, each
 * channel's divisor as numpy's maximum gives it (NaN kept). */
void ps_ref_norm_forward_overwrite(float *y, const float *x, const float *mean, const float *var,
                                   size_t n, size_t c, float eps);
void ps_ref_norm_backward_overwrite(float *dx, const float *dy, const float *var, size_t n,
                                    size_t c, float eps);
void ps_ref_crop2d_forward_overwrite(float *y, const float *x, size_t n, size_t h, size_t w,
                                     size_t c, size_t top, size_t bottom, size_t left,
                                     size_t right);
void ps_ref_crop2d_backward_overwrite(float *dx, const float *dy, size_t n, size_t h, size_t w,
                                      size_t c, size_t top, size_t bottom, size_t left,
                                      size_t right);
void ps_ref_ln_forward_overwrite(float *y, float *mean, float *rstd, const float *x,
                                 const float *gamma, const float *beta, size_t rows, size_t c,
                                 float eps);
void ps_ref_ln_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                  const float *x, const float *mean, const float *rstd,
                                  const float *gamma, size_t rows, size_t c);

#endif
