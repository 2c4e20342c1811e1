/* CUDA backend of kernels/: cuBLAS for GEMM, small kernels over the shared
 * formulas in ew.h for the rest. Compiled by nvcc; never run on the build hosts. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "ew.h"
#include "ps_error.h"

struct ps__cuda_ctx {
    cublasHandle_t blas;
    cudaStream_t stream;
    size_t scratch_rows; /* capacity of the per-row scratch buffers */
    float *row_loss;     /* device: per-row loss */
    int *row_int;        /* device: per-row hit / bad-label flags */
    float *host_loss;    /* host copies of the above */
    int *host_int;
};

static const unsigned kThreads = 256;

static unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    if (b > 65535) b = 65535; /* the kernels below are grid-stride loops */
    return b ? (unsigned)b : 1u;
}

/* Remembers the first failure on the device; ps_k_sync reports it. */
static void record(ps_k_dev *d, bool failed) {
    if (failed && d->err == PS_OK) d->err = PS_EINTERNAL;
}

static void check_launch(ps_k_dev *d) {
    record(d, cudaGetLastError() != cudaSuccess);
}

static void use(ps_k_dev *d) {
    record(d, cudaSetDevice(d->ordinal) != cudaSuccess);
}

/* ---- kernels ----------------------------------------------------------- */

__global__ void bias_add_rows_acc_kernel(float *x, const float *bias, size_t rows, size_t cols) {
    size_t n = rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += bias[i % cols];
}

/* One thread per column: consecutive threads read consecutive addresses. */
__global__ void col_sum_kernel(float *out, const float *x, size_t rows, size_t cols, bool acc) {
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < cols;
         c += (size_t)gridDim.x * blockDim.x) {
        float s = acc ? out[c] : 0.0f;
        for (size_t r = 0; r < rows; r++)
            s += x[r * cols + c];
        out[c] = s;
    }
}

__global__ void act_forward_kernel(int act, float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = ps_ew_act_fwd(act, x[i]);
}

__global__ void act_backward_kernel(int act, float *dx, const float *dy, const float *y, size_t n,
                                    bool acc) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = ps_ew_act_bwd(act, y[i], dy[i]);
        dx[i] = acc ? dx[i] + g : g;
    }
}

/* One thread per row: the class count of an MLP head is small. */
__global__ void softmax_rows_kernel(float *probs, const float *logits, size_t rows, int cols) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows;
         r += (size_t)gridDim.x * blockDim.x)
        ps_ew_softmax_row(probs + r * cols, logits + r * cols, cols);
}

__global__ void softmax_ce_kernel(float *dlogits, float *row_loss, int *row_bad,
                                  const float *logits, const int32_t *labels, size_t rows, int cols,
                                  float scale) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows;
         r += (size_t)gridDim.x * blockDim.x) {
        int label = labels[r];
        row_bad[r] = label < 0 || label >= cols;
        if (row_bad[r]) {
            row_loss[r] = 0.0f;
            continue;
        }
        row_loss[r] = ps_ew_softmax_ce_row(dlogits ? dlogits + r * cols : NULL, logits + r * cols,
                                           label, cols, scale);
    }
}

__global__ void argmax_hits_kernel(int *row_hit, const float *logits, const int32_t *labels,
                                   size_t rows, int cols) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows;
         r += (size_t)gridDim.x * blockDim.x)
        row_hit[r] = ps_ew_argmax_row(logits + r * cols, cols) == labels[r];
}

/* ---- device, memory ---------------------------------------------------- */

extern "C" int ps__cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not sticky for us */
        return 0;
    }
    return n;
}

extern "C" int ps__cuda_open(ps_k_dev *d, int ordinal, char *err, size_t errlen) {
    ps__cuda_ctx *c = (ps__cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return PS_ENOMEM;
    cudaError_t ce = cudaSetDevice(ordinal);
    if (ce == cudaSuccess) ce = cudaStreamCreate(&c->stream);
    if (ce != cudaSuccess) {
        if (err) snprintf(err, errlen, "cuda:%d: %s", ordinal, cudaGetErrorString(ce));
        free(c);
        return PS_EINVAL;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        if (err) snprintf(err, errlen, "cuda:%d: cuBLAS initialisation failed", ordinal);
        cudaStreamDestroy(c->stream);
        free(c);
        return PS_EINVAL;
    }
    d->cuda = c;
    return PS_OK;
}

static void free_scratch(ps__cuda_ctx *c) {
    cudaFree(c->row_loss);
    cudaFree(c->row_int);
    free(c->host_loss);
    free(c->host_int);
    c->row_loss = NULL;
    c->row_int = NULL;
    c->host_loss = NULL;
    c->host_int = NULL;
    c->scratch_rows = 0;
}

extern "C" void ps__cuda_close(ps_k_dev *d) {
    ps__cuda_ctx *c = d->cuda;
    if (!c) return;
    use(d);
    cudaStreamSynchronize(c->stream);
    free_scratch(c);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->stream);
    free(c);
    d->cuda = NULL;
}

extern "C" int ps__cuda_sync(ps_k_dev *d) {
    use(d);
    record(d, cudaStreamSynchronize(d->cuda->stream) != cudaSuccess);
    check_launch(d);
    int rc = d->err;
    d->err = PS_OK;
    return rc;
}

extern "C" int ps__cuda_malloc(ps_k_dev *d, size_t bytes, void **out) {
    use(d);
    *out = NULL;
    if (cudaMalloc(out, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return PS_ENOMEM;
    }
    return PS_OK;
}

extern "C" void ps__cuda_free(ps_k_dev *d, void *p) {
    if (!p) return;
    use(d);
    record(d, cudaFree(p) != cudaSuccess);
}

extern "C" int ps__cuda_copy(ps_k_dev *d, void *dst, const void *src, size_t bytes, bool to_dev) {
    if (!bytes) return PS_OK;
    use(d);
    cudaError_t ce = cudaMemcpyAsync(
        dst, src, bytes, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, d->cuda->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(d->cuda->stream);
    return ce == cudaSuccess ? PS_OK : PS_EINTERNAL;
}

extern "C" int ps__cuda_zero(ps_k_dev *d, void *p, size_t bytes) {
    if (!bytes) return PS_OK;
    use(d);
    cudaError_t ce = cudaMemsetAsync(p, 0, bytes, d->cuda->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(d->cuda->stream);
    return ce == cudaSuccess ? PS_OK : PS_EINTERNAL;
}

/* Grows the per-row scratch to at least rows; returns PS_OK or PS_ENOMEM. */
static int ensure_scratch(ps__cuda_ctx *c, size_t rows) {
    if (rows <= c->scratch_rows) return PS_OK;
    cudaStreamSynchronize(c->stream);
    free_scratch(c);
    if (cudaMalloc((void **)&c->row_loss, rows * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&c->row_int, rows * sizeof(int)) != cudaSuccess ||
        !(c->host_loss = (float *)malloc(rows * sizeof(float))) ||
        !(c->host_int = (int *)malloc(rows * sizeof(int)))) {
        (void)cudaGetLastError();
        free_scratch(c);
        return PS_ENOMEM;
    }
    c->scratch_rows = rows;
    return PS_OK;
}

/* ---- compute ----------------------------------------------------------- */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: hand cuBLAS
 * B as its first operand and A as its second, with the dimensions swapped. */
extern "C" void ps__cuda_gemm(ps_k_dev *d, bool trans_a, bool trans_b, size_t M, size_t N, size_t K,
                              float alpha, const float *A, const float *B, float beta, float *C) {
    if (M == 0 || N == 0) return;
    use(d);
    int lda = (int)(trans_a ? M : K), ldb = (int)(trans_b ? K : N);
    cublasStatus_t st =
        cublasSgemm(d->cuda->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B,
                    ldb > 0 ? ldb : 1, A, lda > 0 ? lda : 1, &beta, C, (int)N);
    record(d, st != CUBLAS_STATUS_SUCCESS);
}

extern "C" void ps__cuda_bias_add_rows_acc(ps_k_dev *d, float *x, const float *bias, size_t rows,
                                           size_t cols) {
    if (rows == 0 || cols == 0) return;
    use(d);
    bias_add_rows_acc_kernel<<<blocks_for(rows * cols), kThreads, 0, d->cuda->stream>>>(x, bias,
                                                                                        rows, cols);
    check_launch(d);
}

extern "C" void ps__cuda_col_sum(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols,
                                 bool acc) {
    if (cols == 0) return;
    use(d);
    col_sum_kernel<<<blocks_for(cols), kThreads, 0, d->cuda->stream>>>(out, x, rows, cols, acc);
    check_launch(d);
}

extern "C" void ps__cuda_act_forward_overwrite(ps_k_dev *d, ps_k_act act, float *y, const float *x,
                                               size_t n) {
    if (n == 0) return;
    use(d);
    act_forward_kernel<<<blocks_for(n), kThreads, 0, d->cuda->stream>>>((int)act, y, x, n);
    check_launch(d);
}

extern "C" void ps__cuda_act_backward(ps_k_dev *d, ps_k_act act, float *dx, const float *dy,
                                      const float *y, size_t n, bool acc) {
    if (n == 0) return;
    use(d);
    act_backward_kernel<<<blocks_for(n), kThreads, 0, d->cuda->stream>>>((int)act, dx, dy, y, n,
                                                                         acc);
    check_launch(d);
}

extern "C" void ps__cuda_softmax_rows_overwrite(ps_k_dev *d, float *probs, const float *logits,
                                                size_t rows, size_t cols) {
    if (rows == 0 || cols == 0) return;
    use(d);
    softmax_rows_kernel<<<blocks_for(rows), kThreads, 0, d->cuda->stream>>>(probs, logits, rows,
                                                                            (int)cols);
    check_launch(d);
}

/* Launches a per-row kernel's results back to the host; returns PS_OK or an error. */
static int fetch_rows(ps_k_dev *d, size_t rows, bool want_loss) {
    ps__cuda_ctx *c = d->cuda;
    check_launch(d);
    cudaError_t ce = cudaSuccess;
    if (want_loss)
        ce = cudaMemcpyAsync(c->host_loss, c->row_loss, rows * sizeof(float),
                             cudaMemcpyDeviceToHost, c->stream);
    if (ce == cudaSuccess)
        ce = cudaMemcpyAsync(c->host_int, c->row_int, rows * sizeof(int), cudaMemcpyDeviceToHost,
                             c->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(c->stream);
    record(d, ce != cudaSuccess);
    int rc = d->err;
    d->err = PS_OK;
    return rc;
}

extern "C" int ps__cuda_softmax_ce_overwrite(ps_k_dev *d, float *dlogits, const float *logits,
                                             const int32_t *labels, size_t rows, size_t cols,
                                             float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    use(d);
    int rc = ensure_scratch(d->cuda, rows);
    if (rc != PS_OK) return rc;
    ps__cuda_ctx *c = d->cuda;
    softmax_ce_kernel<<<blocks_for(rows), kThreads, 0, c->stream>>>(
        dlogits, c->row_loss, c->row_int, logits, labels, rows, (int)cols, 1.0f / (float)rows);
    rc = fetch_rows(d, rows, true);
    if (rc != PS_OK) return rc;
    double sum = 0.0;
    for (size_t r = 0; r < rows; r++) {
        if (c->host_int[r]) return PS_EINVAL;
        sum += c->host_loss[r];
    }
    *loss = (float)(sum / (double)rows);
    return PS_OK;
}

extern "C" int ps__cuda_argmax_correct(ps_k_dev *d, const float *logits, const int32_t *labels,
                                       size_t rows, size_t cols, size_t *correct) {
    if (cols == 0) return PS_EINVAL;
    *correct = 0;
    if (rows == 0) return PS_OK;
    use(d);
    int rc = ensure_scratch(d->cuda, rows);
    if (rc != PS_OK) return rc;
    ps__cuda_ctx *c = d->cuda;
    argmax_hits_kernel<<<blocks_for(rows), kThreads, 0, c->stream>>>(c->row_int, logits, labels,
                                                                     rows, (int)cols);
    rc = fetch_rows(d, rows, false);
    if (rc != PS_OK) return rc;
    size_t hits = 0;
    for (size_t r = 0; r < rows; r++)
        hits += (size_t)c->host_int[r];
    *correct = hits;
    return PS_OK;
}
