/* The backend-neutral compute API: devices, device buffers, and the kernels a
 * Dense MLP needs (GEMM, bias, activations, softmax cross-entropy, reductions). */
#ifndef PS_KERNELS_H
#define PS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Conventions
 * - Every pointer a kernel takes is a buffer on the device d: host memory for
 *   the CPU device, memory from ps_k_malloc(d) for a CUDA device.
 * - Matrices are dense and row-major; [rows, cols] means cols is contiguous.
 * - A name ending in _overwrite writes its output (=), one ending in _acc adds
 *   to it (+=). ps_k_gemm follows BLAS: beta = 0 overwrites C (C is not read),
 *   beta = 1 accumulates.
 * - Kernels that return nothing may run asynchronously on a CUDA device; a
 *   launch or library failure there is remembered by the device and returned
 *   by the next ps_k_sync. On the CPU they are synchronous and cannot fail.
 * - One device is used by one thread at a time (the CPU device may be shared). */

typedef enum { PS_K_CPU = 0, PS_K_CUDA = 1 } ps_k_kind;

/* Element-wise activations (softmax is row-wise: see ps_k_softmax_*). */
typedef enum {
    PS_K_ACT_LINEAR = 0,
    PS_K_ACT_RELU = 1,
    PS_K_ACT_SIGMOID = 2,
    PS_K_ACT_TANH = 3
} ps_k_act;

typedef struct ps_k_dev ps_k_dev;

/* ---- devices ---------------------------------------------------------- */

/* The CPU device: a static singleton, never freed (ps_k_dev_close ignores it). */
ps_k_dev *ps_k_cpu(void);
/* True when the CUDA backend was compiled in (PS_HAVE_CUDA). */
bool ps_k_cuda_built(void);
/* Number of usable CUDA devices; 0 when none, no driver, or not built. */
int ps_k_cuda_device_count(void);
/* Opens a device from a spec: "cpu" (or NULL), "cuda" (= "cuda:0"), "cuda:N",
 * or "auto" (cuda:0 when a GPU is present, else cpu). *out is the CPU singleton or a new
 * device the caller closes with ps_k_dev_close. Returns PS_OK, PS_EINVAL (bad
 * spec, CUDA not built, no such device) with a reason in err, or PS_ENOMEM. */
int ps_k_dev_open(const char *spec, ps_k_dev **out, char *err, size_t errlen);
/* Releases a device from ps_k_dev_open (NULL and the CPU device are ignored). */
void ps_k_dev_close(ps_k_dev *d);
ps_k_kind ps_k_dev_kind(const ps_k_dev *d);
/* "cpu" or "cuda:N"; owned by the device. */
const char *ps_k_dev_name(const ps_k_dev *d);
/* Waits for queued work; returns PS_OK or the first error since the last
 * ps_k_sync (PS_EINTERNAL for a failed launch), then clears it. */
int ps_k_sync(ps_k_dev *d);
/* Sets the number of OpenBLAS threads for the CPU backend (n < 1 means 1).
 * Process-wide; workers run with 1 by default and parallelise across processes. */
void ps_k_set_threads(int n);

/* ---- device memory ---------------------------------------------------- */

/* Allocates bytes (at least 1) on d, 64-byte aligned on the CPU; *out is owned
 * by the caller (ps_k_free). Returns PS_OK or PS_ENOMEM. */
int ps_k_malloc(ps_k_dev *d, size_t bytes, void **out);
/* Frees a buffer from ps_k_malloc on the same device; NULL is ignored. */
void ps_k_free(ps_k_dev *d, void *p);
/* Copies host -> device, device -> host, and zero-fills; synchronous.
 * Return PS_OK or PS_EINTERNAL. */
int ps_k_copy_to_dev(ps_k_dev *d, void *dst, const void *src, size_t bytes);
int ps_k_copy_to_host(ps_k_dev *d, void *dst, const void *src, size_t bytes);
int ps_k_zero(ps_k_dev *d, void *p, size_t bytes);

/* ---- compute ---------------------------------------------------------- */

/* C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major. op(A) is [M,K]: A is
 * stored [M,K], or [K,M] when trans_a. op(B) is [K,N]: B is stored [K,N], or
 * [N,K] when trans_b. Each of M, N, K must be <= INT_MAX; K = 0 scales C. */
void ps_k_gemm(ps_k_dev *d, bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
               const float *A, const float *B, float beta, float *C);
/* x[r, c] += bias[c] for every row r of x[rows, cols]. */
void ps_k_bias_add_rows_acc(ps_k_dev *d, float *x, const float *bias, size_t rows, size_t cols);
/* out[c] = sum over r of x[r, c]  (column sums of x[rows, cols]). */
void ps_k_col_sum_overwrite(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols);
/* out[c] += sum over r of x[r, c]. */
void ps_k_col_sum_acc(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols);
/* y[i] = f(x[i]) for i < n; y may equal x (in place). */
void ps_k_act_forward_overwrite(ps_k_dev *d, ps_k_act act, float *y, const float *x, size_t n);
/* dx[i] = f'(x[i]) * dy[i], computed from the forward OUTPUT y; dx may equal dy. */
void ps_k_act_backward_overwrite(ps_k_dev *d, ps_k_act act, float *dx, const float *dy,
                                 const float *y, size_t n);
/* dx[i] += f'(x[i]) * dy[i], from the forward output y. */
void ps_k_act_backward_acc(ps_k_dev *d, ps_k_act act, float *dx, const float *dy, const float *y,
                           size_t n);
/* probs[r, :] = softmax(logits[r, :]) for each of rows rows; probs may equal logits. */
void ps_k_softmax_rows_overwrite(ps_k_dev *d, float *probs, const float *logits, size_t rows,
                                 size_t cols);
/* Sparse softmax cross-entropy from logits[rows, cols] and labels[rows] (int32,
 * on the device). *loss (host) = mean over rows of -log softmax(logits)[label].
 * If dlogits is not NULL it is overwritten with (softmax - onehot) / rows, the
 * gradient of the mean loss. Synchronous. Returns PS_OK, PS_EINVAL (rows or
 * cols 0, or a label outside [0, cols); dlogits is then unspecified), or a
 * device error. */
int ps_k_softmax_ce_overwrite(ps_k_dev *d, float *dlogits, const float *logits,
                              const int32_t *labels, size_t rows, size_t cols, float *loss);
/* *correct (host) = number of rows whose argmax (first on ties) equals the
 * label. Synchronous. Returns PS_OK, PS_EINVAL (cols 0), or a device error. */
int ps_k_argmax_correct(ps_k_dev *d, const float *logits, const int32_t *labels, size_t rows,
                        size_t cols, size_t *correct);

/* Bias gradient of x @ W + b: db[c] = sum over rows of dout[r, c]. */
static inline void ps_k_bias_grad_overwrite(ps_k_dev *d, float *dbias, const float *dout,
                                            size_t rows, size_t cols) {
    ps_k_col_sum_overwrite(d, dbias, dout, rows, cols);
}
/* db[c] += sum over rows of dout[r, c] (gradient accumulation across micro-batches). */
static inline void ps_k_bias_grad_acc(ps_k_dev *d, float *dbias, const float *dout, size_t rows,
                                      size_t cols) {
    ps_k_col_sum_acc(d, dbias, dout, rows, cols);
}

#ifdef __cplusplus
}
#endif

#endif
