/* CUDA backend of kernels/, part 1: device contexts, device and pinned host
 * memory, the scratch buffers, and GEMM through cuBLAS (fp32 sgemm; fp16/bf16
 * inputs through cublasGemmEx). The other kernels are in cuda_ops.cu.
 * Compiled by nvcc; not run on the build hosts (they have no GPU). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_common.cuh"

/* ---- device ------------------------------------------------------------ */

extern "C" int ps__cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not sticky for us */
        return 0;
    }
    return n;
}

static void free_row_scratch(ps__cuda_ctx *c) {
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

/* Frees whatever part of c was set up (ps__cuda_open may fail half-way). */
static void destroy_ctx(ps__cuda_ctx *c) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    free_row_scratch(c);
    cudaFree(c->partials);
    free(c->host_partials);
    cudaFree(c->lowp);
    if (c->blas) cublasDestroy(c->blas);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" int ps__cuda_open(ps_k_dev *d, int ordinal, char *err, size_t errlen) {
    ps__cuda_ctx *c = (ps__cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return PS_ENOMEM;
    cudaError_t ce = cudaSetDevice(ordinal);
    if (ce == cudaSuccess) ce = cudaStreamCreate(&c->stream);
    if (ce != cudaSuccess) {
        if (err) snprintf(err, errlen, "cuda:%d: %s", ordinal, cudaGetErrorString(ce));
        destroy_ctx(c);
        return PS_EINVAL;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        if (err) snprintf(err, errlen, "cuda:%d: cuBLAS initialisation failed", ordinal);
        destroy_ctx(c);
        return PS_EINVAL;
    }
    /* The reduction partials are small and fixed: allocate them once here. */
    if (cudaMalloc((void **)&c->partials, kReduceBlocks * sizeof(double)) != cudaSuccess ||
        !(c->host_partials = (double *)malloc(kReduceBlocks * sizeof(double)))) {
        (void)cudaGetLastError();
        destroy_ctx(c);
        return PS_ENOMEM;
    }
    d->cuda = c;
    return PS_OK;
}

extern "C" void ps__cuda_close(ps_k_dev *d) {
    if (!d->cuda) return;
    use(d);
    destroy_ctx(d->cuda);
    d->cuda = NULL;
}

extern "C" int ps__cuda_sync(ps_k_dev *d) {
    use(d);
    record(d, cudaStreamSynchronize(d->cuda->stream) != cudaSuccess);
    check_launch(d);
    return take_error(d);
}

/* ---- memory ------------------------------------------------------------ */

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

/* Page-locked memory: copies from and to it run by DMA, without staging. */
extern "C" int ps__cuda_host_alloc(ps_k_dev *d, size_t bytes, void **out) {
    use(d);
    *out = NULL;
    if (cudaMallocHost(out, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return PS_ENOMEM;
    }
    return PS_OK;
}

extern "C" void ps__cuda_host_free(ps_k_dev *d, void *p) {
    if (!p) return;
    use(d);
    record(d, cudaFreeHost(p) != cudaSuccess);
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

/* ---- scratch ----------------------------------------------------------- */

int ps__cuda_ensure_rows(ps__cuda_ctx *c, size_t rows) {
    if (rows <= c->scratch_rows) return PS_OK;
    cudaStreamSynchronize(c->stream); /* queued kernels may still use the old buffers */
    free_row_scratch(c);
    if (cudaMalloc((void **)&c->row_loss, rows * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&c->row_int, rows * sizeof(int)) != cudaSuccess ||
        !(c->host_loss = (float *)malloc(rows * sizeof(float))) ||
        !(c->host_int = (int *)malloc(rows * sizeof(int)))) {
        (void)cudaGetLastError();
        free_row_scratch(c);
        return PS_ENOMEM;
    }
    c->scratch_rows = rows;
    return PS_OK;
}

/* Grows the fp16/bf16 operand scratch to at least bytes; PS_OK or PS_ENOMEM. */
static int ensure_lowp(ps__cuda_ctx *c, size_t bytes) {
    if (bytes <= c->lowp_bytes) return PS_OK;
    cudaStreamSynchronize(c->stream); /* a queued GEMM may still read the old copy */
    cudaFree(c->lowp);
    c->lowp = NULL;
    c->lowp_bytes = 0;
    if (cudaMalloc(&c->lowp, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        c->lowp = NULL;
        return PS_ENOMEM;
    }
    c->lowp_bytes = bytes;
    return PS_OK;
}

/* ---- GEMM -------------------------------------------------------------- */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets
 * B as its first operand and A as its second, with M and N swapped. A stored
 * row-major matrix is its transpose in column-major, with its row length
 * (the stored column count) as leading dimension. */
struct GemmShape {
    cublasOperation_t op_b, op_a;
    int m, n, k;  /* cuBLAS' dimensions: N, M, K */
    int ldb, lda; /* >= 1, as cuBLAS requires even when K = 0 */
};

static GemmShape gemm_shape(bool trans_a, bool trans_b, size_t M, size_t N, size_t K) {
    int lda = (int)(trans_a ? M : K), ldb = (int)(trans_b ? K : N);
    return GemmShape{trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                     (int)N,
                     (int)M,
                     (int)K,
                     ldb > 0 ? ldb : 1,
                     lda > 0 ? lda : 1};
}

static cublasStatus_t sgemm(ps__cuda_ctx *c, bool trans_a, bool trans_b, size_t M, size_t N,
                            size_t K, float alpha, const float *A, const float *B, float beta,
                            float *C) {
    GemmShape s = gemm_shape(trans_a, trans_b, M, N, K);
    return cublasSgemm(c->blas, s.op_b, s.op_a, s.m, s.n, s.k, &alpha, B, s.ldb, A, s.lda, &beta, C,
                       s.m);
}

extern "C" void ps__cuda_gemm(ps_k_dev *d, bool trans_a, bool trans_b, size_t M, size_t N, size_t K,
                              float alpha, const float *A, const float *B, float beta, float *C) {
    if (M == 0 || N == 0) return;
    use(d);
    cublasStatus_t st = sgemm(d->cuda, trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
    record(d, st != CUBLAS_STATUS_SUCCESS);
}

/* Round to nearest even, as ps_ew_round_f16 / _bf16; overflow gives infinity. */
template <typename T> __device__ T to_lowp(float x);
template <> __device__ __half to_lowp<__half>(float x) {
    return __float2half_rn(x);
}
template <> __device__ __nv_bfloat16 to_lowp<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

template <typename T> __global__ void to_lowp_kernel(T *dst, const float *src, size_t n) {
    GRID_STRIDE_LOOP(i, n) dst[i] = to_lowp<T>(src[i]);
}

template <typename T>
static void to_lowp_async(ps__cuda_ctx *c, T *dst, const float *src, size_t n) {
    if (n) to_lowp_kernel<T><<<blocks_for(n), kThreads, 0, c->stream>>>(dst, src, n);
}

/* Converts A and B into the scratch (B 256-byte aligned after A, as tensor-op
 * kernels prefer) and multiplies them with fp32 accumulation and output. */
template <typename T>
static int gemm_lowp(ps_k_dev *d, cudaDataType type, bool trans_a, bool trans_b, size_t M, size_t N,
                     size_t K, float alpha, const float *A, const float *B, float beta, float *C) {
    ps__cuda_ctx *c = d->cuda;
    size_t na = M * K, nb = K * N; /* each <= INT_MAX^2: no overflow below */
    size_t b_off = (na + 127) / 128 * 128;
    int rc = ensure_lowp(c, (b_off + nb) * sizeof(T));
    if (rc != PS_OK) return rc;
    T *a16 = (T *)c->lowp, *b16 = a16 + b_off;
    to_lowp_async(c, a16, A, na);
    to_lowp_async(c, b16, B, nb);
    if (cudaGetLastError() != cudaSuccess) return PS_EINTERNAL;
    GemmShape s = gemm_shape(trans_a, trans_b, M, N, K);
    cublasStatus_t st = cublasGemmEx(c->blas, s.op_b, s.op_a, s.m, s.n, s.k, &alpha, b16, type,
                                     s.ldb, a16, type, s.lda, &beta, C, CUDA_R_32F, s.m,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    return st == CUBLAS_STATUS_SUCCESS ? PS_OK : PS_EINTERNAL;
}

extern "C" int ps__cuda_gemm_ex(ps_k_dev *d, ps_k_prec prec, bool trans_a, bool trans_b, size_t M,
                                size_t N, size_t K, float alpha, const float *A, const float *B,
                                float beta, float *C) {
    if (M == 0 || N == 0) return PS_OK;
    use(d);
    if (K == 0) prec = PS_K_PREC_F32; /* no products: C = beta C in any precision */
    switch (prec) {
    case PS_K_PREC_F32:
        return sgemm(d->cuda, trans_a, trans_b, M, N, K, alpha, A, B, beta, C) ==
                       CUBLAS_STATUS_SUCCESS
                   ? PS_OK
                   : PS_EINTERNAL;
    case PS_K_PREC_F16:
        return gemm_lowp<__half>(d, CUDA_R_16F, trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
    case PS_K_PREC_BF16:
        return gemm_lowp<__nv_bfloat16>(d, CUDA_R_16BF, trans_a, trans_b, M, N, K, alpha, A, B,
                                        beta, C);
    }
    return PS_EINVAL;
}
