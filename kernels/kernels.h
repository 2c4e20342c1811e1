/* The backend-neutral compute API: devices, device and pinned host buffers,
 * and the kernels the layers need: GEMM (fp32, or fp16/bf16 inputs), bias,
 * activations, losses, conv2d (im2col + GEMM), pooling, dropout, reductions,
 * and those of the Keras applications networks (products, rescaling,
 * cropping, layer normalization). */
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
 * - One device is used by one thread at a time (the CPU device may be shared).
 * - Images are NHWC (channels last, as Keras): x[n][h][w][c]. Conv kernels are
 *   [kh][kw][c_in][c_out] (Keras layout), i.e. a [kh*kw*c_in, c_out] matrix. */

typedef enum { PS_K_CPU = 0, PS_K_CUDA = 1 } ps_k_kind;

/* Element-wise activations (softmax is row-wise: see ps_k_softmax_*). */
typedef enum {
    PS_K_ACT_LINEAR = 0,
    PS_K_ACT_RELU = 1,
    PS_K_ACT_SIGMOID = 2,
    PS_K_ACT_TANH = 3,
    PS_K_ACT_GELU = 4,         /* exact: 0.5 x (1 + erf(x / sqrt 2)), as Keras' default */
    PS_K_ACT_RELU6 = 5,        /* min(max(x, 0), 6): Keras' relu6, ReLU(max_value=6) */
    PS_K_ACT_SWISH = 6,        /* x * sigmoid(x): Keras' swish and silu */
    PS_K_ACT_HARD_SIGMOID = 7, /* relu6(x + 3) / 6: Keras 3's hard_sigmoid */
    PS_K_ACT_HARD_SWISH = 8    /* x * relu6(x + 3) / 6: Keras' hard_silu / hard_swish */
} ps_k_act;

/* Input precision of a GEMM: products are always accumulated in fp32. */
typedef enum { PS_K_PREC_F32 = 0, PS_K_PREC_F16 = 1, PS_K_PREC_BF16 = 2 } ps_k_prec;

/* ps_k_conv_plan picks the images per im2col pass so that the workspace
 * holds at most this many floats (1 MiB, about an L2 cache: measured with
 * bench/kernels, a 32 MiB bound made the heavy conv layers 20-40% slower),
 * unless one image needs more. */
#define PS_K_CONV_WS_MAX_FLOATS ((size_t)256 << 10)

/* Geometry of a 2-D convolution over NHWC input, filled by ps_k_conv_plan. */
typedef struct {
    size_t n, h, w, c;        /* input [n, h, w, c] */
    size_t kh, kw, cout;      /* kernel [kh, kw, c, cout] */
    size_t sh, sw;            /* strides */
    size_t pad_top, pad_left; /* implicit zero padding before row 0 / column 0 */
    size_t oh, ow;            /* output [n, oh, ow, cout] */
    size_t chunk;             /* images per im2col pass (bounds the workspace); a
                               * caller (tests) may lower or raise it to any value in
                               * [1, n] after planning: ps_k_conv_workspace follows */
    ps_k_prec prec;           /* conv2d's GEMMs (ps_k_gemm_ex); the plan sets F32, a
                               * caller may set F16 / BF16 after planning. A failure of
                               * the reduced-precision GEMM (out of memory for its
                               * scratch) is reported by the next ps_k_sync. */
} ps_k_conv;

/* Geometry of a 2-D pooling over NHWC input, filled by ps_k_pool_plan. */
typedef struct {
    size_t n, h, w, c;        /* input [n, h, w, c] */
    size_t ph, pw;            /* window */
    size_t sh, sw;            /* strides */
    size_t pad_top, pad_left; /* padding; padded cells never count (max or mean) */
    size_t oh, ow;            /* output [n, oh, ow, c] */
} ps_k_pool;

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
 * ps_k_sync (PS_EINTERNAL for a failed launch; on the CPU, only a failed
 * reduced-precision conv2d GEMM, see ps_k_conv.prec), then clears it. */
int ps_k_sync(ps_k_dev *d);
/* Sets the number of OpenBLAS threads for the CPU backend (n < 1 means 1).
 * Process-wide; workers run with 1 by default and parallelise across processes. */
void ps_k_set_threads(int n);

/* The CPU backend's GEMM kernels: core is OpenBLAS's name for the set it chose at load
 * ("Haswell", "SkylakeX", "Prescott", ...; owned by OpenBLAS), cpu_isa what the CPU offers
 * ("AVX-512", "AVX2", ...; static), better the name of a faster set this CPU runs
 * (OPENBLAS_CORETYPE=better selects it at the next start) or NULL when core is not one of
 * the sets without AVX2 or AVX-512 (an OpenBLAS older than the CPU falls back to them). */
typedef struct {
    const char *core, *cpu_isa, *better;
} ps_k_blas_kernels;
ps_k_blas_kernels ps_k_cpu_blas_kernels(void);
/* The rule behind .better: a set faster than core for a CPU with AVX2 and FMA (avx2_fma)
 * or AVX-512 F, BW, DQ and VL (avx512), or NULL. */
const char *ps_k_blas_better_core(const char *core, int avx2_fma, int avx512);

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
/* Host memory for transfers to and from d: page-locked (cudaMallocHost) for a
 * CUDA device, 64-byte aligned heap memory for the CPU. Returns PS_OK or
 * PS_ENOMEM; free with ps_k_host_free on the same device (NULL is ignored). */
int ps_k_host_alloc(ps_k_dev *d, size_t bytes, void **out);
void ps_k_host_free(ps_k_dev *d, void *p);

/* ---- compute ---------------------------------------------------------- */

/* C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major. op(A) is [M,K]: A is
 * stored [M,K], or [K,M] when trans_a. op(B) is [K,N]: B is stored [K,N], or
 * [N,K] when trans_b. Each of M, N, K must be <= INT_MAX; K = 0 scales C. */
void ps_k_gemm(ps_k_dev *d, bool trans_a, bool trans_b, size_t M, size_t N, size_t K, float alpha,
               const float *A, const float *B, float beta, float *C);
/* ps_k_gemm with A and B rounded to prec (round to nearest even) before the
 * products, accumulated in fp32: cublasGemmEx with tensor-op math on CUDA, an
 * emulation (rounded copies, then sgemm) on the CPU. PS_K_PREC_F32 is ps_k_gemm.
 * Returns PS_OK, PS_ENOMEM (conversion scratch) or, on CUDA, a device error. */
int ps_k_gemm_ex(ps_k_dev *d, ps_k_prec prec, bool trans_a, bool trans_b, size_t M, size_t N,
                 size_t K, float alpha, const float *A, const float *B, float beta, float *C);
/* x[i] = x[i] rounded to prec (ps_ew_round_f16 / _bf16: round to nearest even,
 * fp16 beyond 65504 to infinity) for i < n, in place; PS_K_PREC_F32 does nothing.
 * Mixed precision: a layer's output and the gradients between layers. */
void ps_k_round(ps_k_dev *d, ps_k_prec prec, float *x, size_t n);
/* x[i] *= alpha for i < n, in place (loss scaling). */
void ps_k_scale(ps_k_dev *d, float *x, float alpha, size_t n);
/* x[r, c] += bias[c] for every row r of x[rows, cols]. */
void ps_k_bias_add_rows_acc(ps_k_dev *d, float *x, const float *bias, size_t rows, size_t cols);
/* out[c] = sum over r of x[r, c]  (column sums of x[rows, cols]). */
void ps_k_col_sum_overwrite(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols);
/* out[c] += sum over r of x[r, c]. */
void ps_k_col_sum_acc(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols);
/* y[i] = f(x[i]) for i < n; y may equal x (in place) except for GELU, swish
 * and hard swish, whose backward needs x. */
void ps_k_act_forward_overwrite(ps_k_dev *d, ps_k_act act, float *y, const float *x, size_t n);
/* dx[i] = f'(x[i]) * dy[i], from the forward input x and output y = f(x):
 * relu, relu6, sigmoid, tanh and hard sigmoid read only y, gelu, swish and
 * hard swish only x (the other may be NULL); dx may equal dy. At the kinks
 * (relu6 at 0 and 6, hard sigmoid and hard swish at x = -3 and 3) the
 * derivative is TensorFlow's: relu6' = 0 there, so hard_sigmoid' = 0 at -3
 * and 3, and hard_swish' = 0 at -3 and 1 at 3 (see ew.h). */
void ps_k_act_backward_overwrite(ps_k_dev *d, ps_k_act act, float *dx, const float *dy,
                                 const float *x, const float *y, size_t n);
/* dx[i] += f'(x[i]) * dy[i], same arguments. */
void ps_k_act_backward_acc(ps_k_dev *d, ps_k_act act, float *dx, const float *dy, const float *x,
                           const float *y, size_t n);
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

/* Binary cross-entropy from logits x[rows, cols] against targets t in [0, 1]
 * (same shape, on the device): *loss (host) = mean over all rows*cols of
 * max(x,0) - x t + log(1 + exp(-|x|)). If dlogits is not NULL it is
 * overwritten with (sigmoid(x) - t) / (rows*cols). Synchronous. Returns PS_OK,
 * PS_EINVAL (rows or cols 0) or a device error. */
int ps_k_bce_overwrite(ps_k_dev *d, float *dlogits, const float *logits, const float *targets,
                       size_t rows, size_t cols, float *loss);
/* Mean squared error of pred[rows, cols] against targets: *loss (host) = mean
 * of (p - t)^2; dpred (if not NULL) = 2 (p - t) / (rows*cols). Synchronous.
 * Returns PS_OK, PS_EINVAL (rows or cols 0) or a device error. */
int ps_k_mse_overwrite(ps_k_dev *d, float *dpred, const float *pred, const float *targets,
                       size_t rows, size_t cols, float *loss);
/* out[rows, cols] = one-hot of labels[rows] (int32 on the device); a label
 * outside [0, cols) gives a zero row. With cols == 1, out[r] = labels[r]
 * (binary targets). */
void ps_k_onehot_overwrite(ps_k_dev *d, float *out, const int32_t *labels, size_t rows,
                           size_t cols);
/* *correct (host) = rows whose single logit x[r] has (x > 0) == (label != 0):
 * the accuracy of a one-unit sigmoid/BCE head. Synchronous. */
int ps_k_binary_correct(ps_k_dev *d, const float *logits, const int32_t *labels, size_t rows,
                        size_t *correct);
/* *out (host) = sum of x[0..n), and of x[i]^2, accumulated in double on the
 * CPU (in fp32 per thread, then double, on CUDA). Synchronous. */
int ps_k_sum(ps_k_dev *d, const float *x, size_t n, double *out);
int ps_k_sumsq(ps_k_dev *d, const float *x, size_t n, double *out);

/* ---- dropout ------------------------------------------------------------ */

/* Inverted dropout without a stored mask: element i is kept when
 * ps_ew_dropout_keep(seed, i, rate) (ew.h: a counter-based hash, the same on
 * every backend), and then scaled by 1 / (1 - rate). rate in [0, 1);
 * y may equal x, dx may equal dy. Backward uses the same seed as forward. */
void ps_k_dropout_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, float rate,
                                    uint64_t seed);
void ps_k_dropout_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, float rate,
                                     uint64_t seed);
/* The same with one decision per group of `group` consecutive elements (element
 * i follows ps_ew_dropout_keep(seed, i / group, rate)): Keras' noise_shape
 * (None, 1, 1, 1), a whole sample dropped (drop connect). group 1: the above. */
void ps_k_dropout_group_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n,
                                          size_t group, float rate, uint64_t seed);
void ps_k_dropout_group_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n,
                                           size_t group, float rate, uint64_t seed);

/* ---- convolution ---------------------------------------------------------- */

/* Fills *p for input [n, h, w, c], kernel [kh, kw, c, cout], strides sh, sw
 * and Keras padding: valid (oh = ceil((h - kh + 1) / sh)) or same (oh =
 * ceil(h / sh), padding split with the extra cell after, as TensorFlow).
 * Returns PS_OK, or PS_EINVAL for a zero size, a kernel larger than a valid
 * input, or sizes whose products overflow. */
int ps_k_conv_plan(ps_k_conv *p, size_t n, size_t h, size_t w, size_t c, size_t kh, size_t kw,
                   size_t cout, size_t sh, size_t sw, bool same);
/* Floats of workspace the conv2d calls need (im2col of p->chunk images). */
size_t ps_k_conv_workspace(const ps_k_conv *p);
/* cols[n*oh*ow, kh*kw*c] = the input patches of images [0, n) (padding reads
 * as 0): row (img, oy, ox), column (ky, kx, ci). n <= p->n. */
void ps_k_im2col_overwrite(ps_k_dev *d, const ps_k_conv *p, float *cols, const float *x, size_t n);
/* The adjoint of im2col: dx[n, h, w, c] = sum of the cols entries that read
 * each input cell (a gather: deterministic, no atomics). n <= p->n. */
void ps_k_col2im_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, const float *cols, size_t n);
/* y[n, oh, ow, cout] = conv(x, w) + b (b may be NULL); ws holds
 * ps_k_conv_workspace(p) floats on d. */
void ps_k_conv2d_forward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *y, const float *x,
                                   const float *w, const float *b, float *ws);
/* From dy[n, oh, ow, cout]: dw[kh,kw,c,cout] and db[cout] (each may be NULL:
 * skipped) are overwritten (_overwrite) or added to (_acc); dx[n,h,w,c] (may
 * be NULL) is always overwritten. */
void ps_k_conv2d_backward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw,
                                    float *db, const float *dy, const float *x, const float *w,
                                    float *ws);
void ps_k_conv2d_backward_acc(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw, float *db,
                              const float *dy, const float *x, const float *w, float *ws);

/* ---- pooling -------------------------------------------------------------- */

/* Fills *p for input [n, h, w, c], window ph x pw, strides sh, sw, valid or
 * same padding (as ps_k_conv_plan). Returns PS_OK or PS_EINVAL. */
int ps_k_pool_plan(ps_k_pool *p, size_t n, size_t h, size_t w, size_t c, size_t ph, size_t pw,
                   size_t sh, size_t sw, bool same);
/* y[n, oh, ow, c] = max over each window's real cells; arg (same shape,
 * int32) = the winner's position y*w + x in its image (the first on ties). */
void ps_k_maxpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y, int32_t *arg,
                                    const float *x);
/* dx[n, h, w, c] = sum of dy over the windows whose winner is that cell. */
void ps_k_maxpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx, const float *dy,
                                     const int32_t *arg);
/* y = mean over each window's real cells (padding not counted, as TensorFlow). */
void ps_k_avgpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y, const float *x);
/* dx = sum over the windows holding the cell of dy / (that window's cell count). */
void ps_k_avgpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx, const float *dy);

/* ---- batch normalization (NHWC: x is [rows, c], rows = n*h*w) ---------------- */

/* Training: mean[c], var[c] = the batch's mean and biased variance over the rows
 * (what Keras uses, also for the moving variance); y = gamma (x - mean) /
 * sqrt(var + eps) + beta. gamma NULL means 1 (scale=False), beta NULL 0
 * (center=False). mean and var (length c, on d) are overwritten: the backward
 * pass reads them. y may not alias x. */
void ps_k_bn_forward_train_overwrite(ps_k_dev *d, float *y, float *mean, float *var,
                                     const float *x, const float *gamma, const float *beta,
                                     size_t rows, size_t c, float eps);
/* Inference: the same with given statistics (the moving ones). y may equal x. */
void ps_k_bn_forward_infer_overwrite(ps_k_dev *d, float *y, const float *x, const float *mean,
                                     const float *var, const float *gamma, const float *beta,
                                     size_t rows, size_t c, float eps);
/* Backward of the training forward (batch statistics, which depend on x):
 * dx[rows, c] is overwritten (may not alias dy); dgamma[c], dbeta[c] are
 * overwritten, each skipped when NULL. gamma NULL means 1. */
void ps_k_bn_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                const float *dy, const float *x, const float *mean,
                                const float *var, const float *gamma, size_t rows, size_t c,
                                float eps);

/* ---- depthwise convolution ------------------------------------------------ */

/* Fills *p for a depthwise convolution of input [n, h, w, c] with kernel
 * [kh, kw, c, mult] (Keras' depthwise_kernel; depth multiplier mult): output
 * [n, oh, ow, c*mult], output channel ci*mult + m from input channel ci.
 * p->cout = c*mult, padding as ps_k_conv_plan; p->chunk is unused. PS_OK or
 * PS_EINVAL. */
int ps_k_dwconv_plan(ps_k_conv *p, size_t n, size_t h, size_t w, size_t c, size_t kh, size_t kw,
                     size_t mult, size_t sh, size_t sw, bool same);
/* y = depthwise(x, w) + b (b [c*mult] may be NULL); a direct kernel (no im2col). */
void ps_k_dwconv2d_forward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *y, const float *x,
                                     const float *w, const float *b);
/* From dy: dw [kh,kw,c,mult] and db overwritten (each may be NULL: skipped);
 * dx [n,h,w,c] (may be NULL) overwritten. */
void ps_k_dwconv2d_backward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx, float *dw,
                                      float *db, const float *dy, const float *x, const float *w);

/* ---- shape ops ------------------------------------------------------------ */

/* Global average pooling: y[n, c] = mean over the hw cells of x[n, hw, c]. */
void ps_k_gap_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, size_t hw,
                                size_t c);
/* dx[n, hw, c] = dy[n, c] / hw. */
void ps_k_gap_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, size_t hw,
                                 size_t c);
/* Zero padding: y[n, h+top+bottom, w+left+right, c] = x placed at (top, left),
 * zeros around. */
void ps_k_pad2d_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, size_t h,
                                  size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                  size_t right);
/* Its adjoint: dx[n, h, w, c] = the (top, left) crop of dy. */
void ps_k_pad2d_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, size_t h,
                                   size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                   size_t right);
/* y[i] = a[i] + b[i] for i < n (y may equal a or b). */
void ps_k_add_overwrite(ps_k_dev *d, float *y, const float *a, const float *b, size_t n);
/* y[i] += x[i] (gradients summed where a tensor fans out). */
void ps_k_add_acc(ps_k_dev *d, float *y, const float *x, size_t n);
/* Concatenation along channels: y[rows, c_total] columns [c_off, c_off + c_x)
 * = x[rows, c_x] (the rest of y untouched). */
void ps_k_concat_cols_overwrite(ps_k_dev *d, float *y, const float *x, size_t rows,
                                size_t c_total, size_t c_off, size_t c_x);
/* Its adjoint: dx[rows, c_x] = columns [c_off, c_off + c_x) of dy[rows, c_total]. */
void ps_k_split_cols_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t rows,
                               size_t c_total, size_t c_off, size_t c_x);

/* ---- embedding rows -------------------------------------------------------- */

/* Embedding lookup: y[i, :] = rows[where[i], :] for i < batch, rows [n, dim]
 * with every where[i] < n (where on the device too). */
void ps_k_gather_rows_overwrite(ps_k_dev *d, float *y, const float *rows, const uint32_t *where,
                                size_t batch, size_t dim);
/* Its adjoint, the rows' gradient, computed as a gather (deterministic, no
 * atomics): drows[u, :] = the sum of dy[order[k], :] for k from offs[u] up to
 * offs[u + 1], in that order, for u < n. order lists the samples grouped by
 * the row they read, offs[n + 1] the groups' bounds (offs[0] = 0); a row no
 * sample reads gets zeros. */
void ps_k_scatter_rows_overwrite(ps_k_dev *d, float *drows, const float *dy, const uint32_t *order,
                                 const uint32_t *offs, size_t n, size_t dim);

/* ---- Keras applications layers -------------------------------------------- */

/* Element-wise product (Multiply of two same-shape tensors): y[i] = a[i] * b[i]
 * for i < n; y may equal a or b. */
void ps_k_mul_forward_overwrite(ps_k_dev *d, float *y, const float *a, const float *b, size_t n);
/* Its backward: da[i] = dy[i] * b[i], db[i] = dy[i] * a[i], each skipped when
 * NULL; da or db may equal dy. */
void ps_k_mul_backward_overwrite(ps_k_dev *d, float *da, float *db, const float *dy, const float *a,
                                 const float *b, size_t n);
/* Product with a per-channel vector of each sample (squeeze-and-excitation):
 * y[b, p, c] = x[b, p, c] * s[b, c] for x [n, hw, c] and s [n, c]; y may equal x. */
void ps_k_mul_channels_forward_overwrite(ps_k_dev *d, float *y, const float *x, const float *s,
                                         size_t n, size_t hw, size_t c);
/* Its backward: dx[b, p, c] = dy[b, p, c] * s[b, c] and ds[b, c] = sum over
 * p of dy[b, p, c] * x[b, p, c], each skipped when NULL; dx may equal dy
 * (ds is computed first). */
void ps_k_mul_channels_backward_overwrite(ps_k_dev *d, float *dx, float *ds, const float *dy,
                                          const float *x, const float *s, size_t n, size_t hw,
                                          size_t c);
/* Rescaling: y[i] = x[i] * scale + offset for i < n; y may equal x. */
void ps_k_rescale_forward_overwrite(ps_k_dev *d, float *y, const float *x, float scale,
                                    float offset, size_t n);
/* Its backward: dx[i] = dy[i] * scale; dx may equal dy. */
void ps_k_rescale_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, float scale,
                                     size_t n);
/* Keras' Normalization over the channels of x[n, c] (its adapted statistics):
 * y = (x - mean[j]) / max(sqrt(var[j]), eps), Keras' eps being its backend
 * epsilon, 1e-7; a negative variance gives NaN, as in Keras. y may equal x. */
void ps_k_norm_forward_overwrite(ps_k_dev *d, float *y, const float *x, const float *mean,
                                 const float *var, size_t n, size_t c, float eps);
/* Its backward: dx = dy / max(sqrt(var[j]), eps); dx may equal dy. */
void ps_k_norm_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, const float *var,
                                  size_t n, size_t c, float eps);
/* Cropping2D: y[n, h-top-bottom, w-left-right, c] = the window of x[n, h, w, c]
 * starting at (top, left). Requires top + bottom < h and left + right < w;
 * otherwise nothing is written and the next ps_k_sync returns PS_EINVAL. */
void ps_k_crop2d_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n, size_t h,
                                   size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                   size_t right);
/* Its adjoint: dx[n, h, w, c] = dy [n, h-top-bottom, w-left-right, c] placed
 * at (top, left), zeros around (h, w: the uncropped sizes; same requirement). */
void ps_k_crop2d_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n, size_t h,
                                    size_t w, size_t c, size_t top, size_t bottom, size_t left,
                                    size_t right);
/* LayerNormalization over the last axis of x[rows, c]: per row r, mean[r] and
 * rstd[r] = 1 / sqrt(var + eps) with the biased variance over the c values;
 * y = (x - mean) rstd gamma[c] + beta[c] (Keras' default eps is 1e-3). gamma
 * NULL means 1 (scale=False), beta NULL 0 (center=False). mean and rstd
 * (length rows, on d) are overwritten: the backward reads them. y may not
 * alias x. */
void ps_k_ln_forward_overwrite(ps_k_dev *d, float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, size_t rows, size_t c,
                               float eps);
/* Its backward, with xhat = (x - mean) rstd and g = dy gamma:
 * dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)) (may not alias dy),
 * dgamma[j] = sum over rows of dy xhat, dbeta[j] = sum over rows of dy; all
 * overwritten, dgamma and dbeta skipped when NULL. gamma NULL means 1. */
void ps_k_ln_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                const float *dy, const float *x, const float *mean,
                                const float *rstd, const float *gamma, size_t rows, size_t c);

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
