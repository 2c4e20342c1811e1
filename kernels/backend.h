/* Internal to kernels/: the device struct and the per-backend entry points
 * that kernels.c dispatches to (cpu.c always, cuda.cu under PS_HAVE_CUDA). */
#ifndef PS_KERNELS_BACKEND_H
#define PS_KERNELS_BACKEND_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps__cuda_ctx ps__cuda_ctx; /* defined in cuda_common.cuh */

struct ps_k_dev {
    ps_k_kind kind;
    int ordinal;        /* CUDA device number; 0 for the CPU */
    char name[24];      /* "cpu", "cuda:N" */
    int err;            /* first asynchronous error since the last ps_k_sync */
    ps__cuda_ctx *cuda; /* CUDA state (handle, stream, scratch); NULL on the CPU */
};

/* Records rc (not PS_OK) as d's pending error, returned and cleared by the
 * next ps_k_sync (the first one wins); safe from several threads on the CPU. */
void ps__dev_fail(ps_k_dev *d, int rc);

/* CPU backend (cpu.c): host pointers, synchronous, infallible. Each mirrors
 * the ps_k_* function of the same name in kernels.h; a bool acc selects the
 * _acc (+=) behaviour over _overwrite (=), a bool squares ps_k_sumsq over
 * ps_k_sum. Dropout is one function for both directions (the mask is the same
 * and so is the scaling). conv2d itself is backend-neutral (conv.c: im2col,
 * GEMM, bias, col2im through the dispatching calls). */
void ps__cpu_gemm(bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
                  const float *A, const float *B, float beta, float *C);
void ps__cpu_bias_add_rows_acc(float *x, const float *bias, size_t rows, size_t cols);
void ps__cpu_col_sum(float *out, const float *x, size_t rows, size_t cols, bool acc);
void ps__cpu_act_forward_overwrite(ps_k_act act, float *y, const float *x, size_t n);
void ps__cpu_act_backward(ps_k_act act, float *dx, const float *dy, const float *x, const float *y,
                          size_t n, bool acc);
void ps__cpu_softmax_rows_overwrite(float *probs, const float *logits, size_t rows, size_t cols);
int ps__cpu_softmax_ce_overwrite(float *dlogits, const float *logits, const int32_t *labels,
                                 size_t rows, size_t cols, float *loss);
int ps__cpu_argmax_correct(const float *logits, const int32_t *labels, size_t rows, size_t cols,
                           size_t *correct);
int ps__cpu_gemm_ex(ps_k_prec prec, bool trans_a, bool trans_b, size_t M, size_t N, size_t K,
                    float alpha, const float *A, const float *B, float beta, float *C);
void ps__cpu_round(ps_k_prec prec, float *x, size_t n);
void ps__cpu_scale(float *x, float alpha, size_t n);
int ps__cpu_bce_overwrite(float *dlogits, const float *logits, const float *targets, size_t rows,
                          size_t cols, float *loss);
int ps__cpu_mse_overwrite(float *dpred, const float *pred, const float *targets, size_t rows,
                          size_t cols, float *loss);
void ps__cpu_onehot_overwrite(float *out, const int32_t *labels, size_t rows, size_t cols);
int ps__cpu_binary_correct(const float *logits, const int32_t *labels, size_t rows,
                           size_t *correct);
int ps__cpu_sum(const float *x, size_t n, bool squares, double *out);
void ps__cpu_dropout(float *y, const float *x, size_t n, size_t group, float rate,
                     uint64_t seed);
void ps__cpu_im2col_overwrite(const ps_k_conv *p, float *cols, const float *x, size_t n);
void ps__cpu_col2im_overwrite(const ps_k_conv *p, float *dx, const float *cols, size_t n);
void ps__cpu_maxpool_forward_overwrite(const ps_k_pool *p, float *y, int32_t *arg, const float *x);
void ps__cpu_maxpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy,
                                        const int32_t *arg);
void ps__cpu_avgpool_forward_overwrite(const ps_k_pool *p, float *y, const float *x);
void ps__cpu_avgpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy);
/* cpu_bn.c */
void ps__cpu_bn_forward_train_overwrite(float *y, float *mean, float *var, const float *x,
                                        const float *gamma, const float *beta, size_t rows,
                                        size_t c, float eps);
void ps__cpu_bn_forward_infer_overwrite(float *y, const float *x, const float *mean,
                                        const float *var, const float *gamma, const float *beta,
                                        size_t rows, size_t c, float eps);
void ps__cpu_bn_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                   const float *x, const float *mean, const float *var,
                                   const float *gamma, size_t rows, size_t c, float eps);
/* cpu_dwconv.c */
void ps__cpu_dwconv2d_forward_overwrite(const ps_k_conv *p, float *y, const float *x,
                                        const float *w, const float *b);
void ps__cpu_dwconv2d_backward_overwrite(const ps_k_conv *p, float *dx, float *dw, float *db,
                                         const float *dy, const float *x, const float *w);
/* cpu_shape.c */
void ps__cpu_gap_forward_overwrite(float *y, const float *x, size_t n, size_t hw, size_t c);
void ps__cpu_gap_backward_overwrite(float *dx, const float *dy, size_t n, size_t hw, size_t c);
void ps__cpu_pad2d_forward_overwrite(float *y, const float *x, size_t n, size_t h, size_t w,
                                     size_t c, size_t top, size_t bottom, size_t left,
                                     size_t right);
void ps__cpu_pad2d_backward_overwrite(float *dx, const float *dy, size_t n, size_t h, size_t w,
                                      size_t c, size_t top, size_t bottom, size_t left,
                                      size_t right);
void ps__cpu_add_overwrite(float *y, const float *a, const float *b, size_t n);
void ps__cpu_add_acc(float *y, const float *x, size_t n);
void ps__cpu_concat_cols_overwrite(float *y, const float *x, size_t rows, size_t c_total,
                                   size_t c_off, size_t c_x);
void ps__cpu_split_cols_overwrite(float *dx, const float *dy, size_t rows, size_t c_total,
                                  size_t c_off, size_t c_x);
/* cpu_mul.c (the crop is pad2d's two directions swapped: kernels.c) */
void ps__cpu_mul_forward_overwrite(float *y, const float *a, const float *b, size_t n);
void ps__cpu_mul_backward_overwrite(float *da, float *db, const float *dy, const float *a,
                                    const float *b, size_t n);
void ps__cpu_mul_channels_forward_overwrite(float *y, const float *x, const float *s, size_t n,
                                            size_t hw, size_t c);
void ps__cpu_mul_channels_backward_overwrite(float *dx, float *ds, const float *dy, const float *x,
                                             const float *s, size_t n, size_t hw, size_t c);
/* y = x * scale + offset; also the backward (offset 0). */
void ps__cpu_rescale(float *y, const float *x, float scale, float offset, size_t n);
/* y = (x - mean) / max(sqrt(var), eps) per channel (mean NULL: 0, the backward). */
void ps__cpu_norm(float *y, const float *x, const float *mean, const float *var, size_t n,
                  size_t c, float eps);
/* cpu_rows.c */
void ps__cpu_gather_rows_overwrite(float *y, const float *rows, const uint32_t *where,
                                   size_t batch, size_t dim);
void ps__cpu_scatter_rows_overwrite(float *drows, const float *dy, const uint32_t *order,
                                    const uint32_t *offs, size_t n, size_t dim);
/* cpu_ln.c */
void ps__cpu_ln_forward_overwrite(float *y, float *mean, float *rstd, const float *x,
                                  const float *gamma, const float *beta, size_t rows, size_t c,
                                  float eps);
void ps__cpu_ln_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                   const float *x, const float *mean, const float *rstd,
                                   const float *gamma, size_t rows, size_t c);

#ifdef PS_HAVE_CUDA
/* CUDA backend (cuda.cu): the same contracts on device pointers of d. Errors
 * are recorded in d->err (reported by ps__cuda_sync) unless the function
 * returns an int; ps__cuda_open fills d->cuda, ps__cuda_close frees it. */
int ps__cuda_device_count(void);
int ps__cuda_open(ps_k_dev *d, int ordinal, char *err, size_t errlen);
void ps__cuda_close(ps_k_dev *d);
int ps__cuda_sync(ps_k_dev *d);
int ps__cuda_malloc(ps_k_dev *d, size_t bytes, void **out);
void ps__cuda_free(ps_k_dev *d, void *p);
int ps__cuda_copy(ps_k_dev *d, void *dst, const void *src, size_t bytes, bool to_dev);
int ps__cuda_zero(ps_k_dev *d, void *p, size_t bytes);
void ps__cuda_gemm(ps_k_dev *d, bool trans_a, bool trans_b, size_t M, size_t N, size_t K,
                   float alpha, const float *A, const float *B, float beta, float *C);
void ps__cuda_bias_add_rows_acc(ps_k_dev *d, float *x, const float *bias, size_t rows, size_t cols);
void ps__cuda_col_sum(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols, bool acc);
void ps__cuda_act_forward_overwrite(ps_k_dev *d, ps_k_act act, float *y, const float *x, size_t n);
void ps__cuda_act_backward(ps_k_dev *d, ps_k_act act, float *dx, const float *dy, const float *x,
                           const float *y, size_t n, bool acc);
void ps__cuda_softmax_rows_overwrite(ps_k_dev *d, float *probs, const float *logits, size_t rows,
                                     size_t cols);
int ps__cuda_softmax_ce_overwrite(ps_k_dev *d, float *dlogits, const float *logits,
                                  const int32_t *labels, size_t rows, size_t cols, float *loss);
int ps__cuda_argmax_correct(ps_k_dev *d, const float *logits, const int32_t *labels, size_t rows,
                            size_t cols, size_t *correct);
int ps__cuda_host_alloc(ps_k_dev *d, size_t bytes, void **out);
void ps__cuda_host_free(ps_k_dev *d, void *p);
int ps__cuda_gemm_ex(ps_k_dev *d, ps_k_prec prec, bool trans_a, bool trans_b, size_t M, size_t N,
                     size_t K, float alpha, const float *A, const float *B, float beta, float *C);
void ps__cuda_round(ps_k_dev *d, ps_k_prec prec, float *x, size_t n);
void ps__cuda_scale(ps_k_dev *d, float *x, float alpha, size_t n);
int ps__cuda_bce_overwrite(ps_k_dev *d, float *dlogits, const float *logits, const float *targets,
                           size_t rows, size_t cols, float *loss);
int ps__cuda_mse_overwrite(ps_k_dev *d, float *dpred, const float *pred, const float *targets,
                           size_t rows, size_t cols, float *loss);
void ps__cuda_onehot_overwrite(ps_k_dev *d, float *out, const int32_t *labels, size_t rows,
                               size_t cols);
int ps__cuda_binary_correct(ps_k_dev *d, const float *logits, const int32_t *labels, size_t rows,
                            size_t *correct);
int ps__cuda_sum(ps_k_dev *d, const float *x, size_t n, bool squares, double *out);
void ps__cuda_dropout(ps_k_dev *d, float *y, const float *x, size_t n, size_t group, float rate,
                      uint64_t seed);
void ps__cuda_im2col_overwrite(ps_k_dev *d, const ps_k_conv *p, float *cols, const float *x,
                               size_t n);
void ps__cuda_col2im_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, const float *cols,
                               size_t n);
void ps__cuda_maxpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y, int32_t *arg,
                                        const float *x);
void ps__cuda_maxpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx,
                                         const float *dy, const int32_t *arg);
void ps__cuda_avgpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y, const float *x);
void ps__cuda_avgpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx,
                                         const float *dy);
/* cuda_layers.cu: batch normalization, depthwise convolution, shape ops */
void ps__cuda_bn_forward_train_overwrite(ps_k_dev *d, float *y, float *mean, float *var,
                                         const float *x, const float *gamma, const float *beta,
                                         size_t rows, size_t c, float eps);
void ps__cuda_bn_forward_infer_overwrite(ps_k_dev *d, float *y, const float *x, const float *mean,
                                         const float *var, const float *gamma, const float *beta,
                                         size_t rows, size_t c, float eps);
void ps__cuda_bn_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                    const float *dy, const float *x, const float *mean,
                                    const float *var, const float *gamma, size_t rows, size_t c,
                                    float eps);
void ps__cuda_dwconv2d_forward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *y, const float *x,
                                         const float *w, const float *b);
void ps__cuda_dwconv2d_backward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw,
                                          float *db, const float *dy, const float *x,
                                          const float *w);
void ps__cuda_gap_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, size_t hw,
                                    size_t c);
void ps__cuda_gap_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, size_t hw,
                                     size_t c);
void ps__cuda_pad2d(ps_k_dev *d, float *out, const float *in, size_t n, size_t h, size_t w,
                    size_t c, size_t top, size_t bottom, size_t left, size_t right, bool backward);
void ps__cuda_add_overwrite(ps_k_dev *d, float *y, const float *a, const float *b, size_t n);
void ps__cuda_add_acc(ps_k_dev *d, float *y, const float *x, size_t n);
void ps__cuda_concat_cols(ps_k_dev *d, float *out, const float *in, size_t rows, size_t c_total,
                          size_t c_off, size_t c_x, bool split);
/* cuda_apps.cu: products, rescaling and layer normalization */
void ps__cuda_mul_forward_overwrite(ps_k_dev *d, float *y, const float *a, const float *b,
                                    size_t n);
void ps__cuda_mul_backward_overwrite(ps_k_dev *d, float *da, float *db, const float *dy,
                                     const float *a, const float *b, size_t n);
void ps__cuda_mul_channels_forward_overwrite(ps_k_dev *d, float *y, const float *x, const float *s,
                                             size_t n, size_t hw, size_t c);
void ps__cuda_mul_channels_backward_overwrite(ps_k_dev *d, float *dx, float *ds, const float *dy,
                                              const float *x, const float *s, size_t n, size_t hw,
                                              size_t c);
void ps__cuda_rescale(ps_k_dev *d, float *y, const float *x, float scale, float offset, size_t n);
void ps__cuda_norm(ps_k_dev *d, float *y, const float *x, const float *mean, const float *var,
                   size_t n, size_t c, float eps);
void ps__cuda_ln_forward_overwrite(ps_k_dev *d, float *y, float *mean, float *rstd, const float *x,
                                   const float *gamma, const float *beta, size_t rows, size_t c,
                                   float eps);
void ps__cuda_ln_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                    const float *dy, const float *x, const float *mean,
                                    const float *rstd, const float *gamma, size_t rows, size_t c);
/* cuda_rows.cu: embedding rows */
void ps__cuda_gather_rows_overwrite(ps_k_dev *d, float *y, const float *rows,
                                    const uint32_t *where, size_t batch, size_t dim);
void ps__cuda_scatter_rows_overwrite(ps_k_dev *d, float *drows, const float *dy,
                                     const uint32_t *order, const uint32_t *offs, size_t n,
                                     size_t dim);
#endif

#ifdef __cplusplus
}
#endif

#endif
