/* Internal to the CUDA backend: the device context and the launch and error
 * helpers shared by cuda.cu (devices, memory, GEMM) and cuda_ops.cu (the other
 * kernels). Compiled by nvcc only; not run on the build hosts (no GPU there). */
#ifndef PS_KERNELS_CUDA_COMMON_CUH
#define PS_KERNELS_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend.h"
#include "ps_error.h"

struct ps__cuda_ctx {
    cublasHandle_t blas;
    cudaStream_t stream; /* every kernel, copy and cuBLAS call of the device */
    /* Per-row results of softmax CE and argmax, grown by ps__cuda_ensure_rows. */
    size_t scratch_rows;
    float *row_loss;  /* device: per-row loss */
    int *row_int;     /* device: per-row hit / bad-label flags */
    float *host_loss; /* host copies of the above */
    int *host_int;
    /* Per-block partial sums of the reductions: kReduceBlocks doubles each. */
    double *partials;
    double *host_partials;
    /* fp16/bf16 copies of the GEMM operands (cuda.cu), grown as needed. */
    void *lowp;
    size_t lowp_bytes;
};

constexpr unsigned kThreads = 256;       /* a power of two: block_sum_store halves it */
constexpr unsigned kMaxBlocks = 65535;   /* enough to fill any GPU; loops stride the rest */
constexpr unsigned kReduceBlocks = 1024; /* bounds the partial sums a reduction copies back */

/* Each thread visits i, i + gridDim*blockDim, ...: any grid covers any n. */
#define GRID_STRIDE_LOOP(i, n)                                                                     \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

static inline unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    if (b > kMaxBlocks) b = kMaxBlocks;
    return b ? (unsigned)b : 1u;
}

/* Remembers the first failure on the device; ps_k_sync reports it. */
static inline void record(ps_k_dev *d, bool failed) {
    if (failed && d->err == PS_OK) d->err = PS_EINTERNAL;
}

static inline void check_launch(ps_k_dev *d) {
    record(d, cudaGetLastError() != cudaSuccess);
}

static inline void use(ps_k_dev *d) {
    record(d, cudaSetDevice(d->ordinal) != cudaSuccess);
}

/* Returns and clears the device's pending error: synchronous calls report
 * earlier asynchronous failures too, as ps_k_sync would. */
static inline int take_error(ps_k_dev *d) {
    int rc = d->err;
    d->err = PS_OK;
    return rc;
}

/* Launches kernel over `work` output elements on the device's stream; the
 * launch error (if any) is remembered for ps_k_sync. Nothing to do, no launch. */
template <typename... Params, typename... Args>
static void launch(ps_k_dev *d, void (*kernel)(Params...), size_t work, Args... args) {
    if (work == 0) return;
    use(d);
    kernel<<<blocks_for(work), kThreads, 0, d->cuda->stream>>>(args...);
    check_launch(d);
}

/* The sum of v over the block (blockDim.x == kThreads), returned to every
 * thread; the shared buffer is free again when it returns. */
static __device__ inline double block_sum(double v) {
    __shared__ double s[kThreads];
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned h = kThreads / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    double total = s[0];
    __syncthreads();
    return total;
}

/* Launches kernel with one block per item (blocks loop over the rest). */
template <typename... Params, typename... Args>
static void launch_blocks(ps_k_dev *d, void (*kernel)(Params...), size_t items, Args... args) {
    if (items == 0) return;
    use(d);
    unsigned blocks = items < kMaxBlocks ? (unsigned)items : kMaxBlocks;
    kernel<<<blocks, kThreads, 0, d->cuda->stream>>>(args...);
    check_launch(d);
}

#define BLOCK_STRIDE_LOOP(i, n) for (size_t i = blockIdx.x; i < (n); i += gridDim.x)
#define THREAD_STRIDE_LOOP(i, n) for (size_t i = threadIdx.x; i < (n); i += blockDim.x)

/* Grows the per-row scratch of c to at least rows (cuda.cu); PS_OK or PS_ENOMEM. */
int ps__cuda_ensure_rows(ps__cuda_ctx *c, size_t rows);

#endif
