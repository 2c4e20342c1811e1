/* CUDA backend of kernels/, part 2: every kernel other than GEMM, each a
 * grid-stride loop over the shared formulas of ew.h (one thread per output
 * element), plus device reductions for the synchronous losses and counts.
 * Compiled by nvcc; not run on the build hosts (they have no GPU). */
#include "cuda_common.cuh"
#include "ew.h"

/* ---- dense layers ------------------------------------------------------ */

__global__ void bias_add_rows_acc_kernel(float *x, const float *bias, size_t rows, size_t cols) {
    GRID_STRIDE_LOOP(i, rows * cols) x[i] += bias[i % cols];
}

/* One thread per column: consecutive threads read consecutive addresses. */
__global__ void col_sum_kernel(float *out, const float *x, size_t rows, size_t cols, bool acc) {
    GRID_STRIDE_LOOP(c, cols) {
        float s = acc ? out[c] : 0.0f;
        for (size_t r = 0; r < rows; r++)
            s += x[r * cols + c];
        out[c] = s;
    }
}

__global__ void act_forward_kernel(int act, float *y, const float *x, size_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = ps_ew_act_fwd(act, x[i]);
}

/* x or y may be NULL when act does not read it (see ps_k_act_backward_overwrite). */
__global__ void act_backward_kernel(int act, float *dx, const float *dy, const float *x,
                                    const float *y, size_t n, bool acc) {
    GRID_STRIDE_LOOP(i, n) {
        float g = ps_ew_act_bwd(act, x ? x[i] : 0.0f, y ? y[i] : 0.0f, dy[i]);
        dx[i] = acc ? dx[i] + g : g;
    }
}

/* One thread per row: the class count of a classifier head is small. */
__global__ void softmax_rows_kernel(float *probs, const float *logits, size_t rows, int cols) {
    GRID_STRIDE_LOOP(r, rows) ps_ew_softmax_row(probs + r * cols, logits + r * cols, cols);
}

extern "C" void ps__cuda_bias_add_rows_acc(ps_k_dev *d, float *x, const float *bias, size_t rows,
                                           size_t cols) {
    launch(d, bias_add_rows_acc_kernel, rows * cols, x, bias, rows, cols);
}

extern "C" void ps__cuda_col_sum(ps_k_dev *d, float *out, const float *x, size_t rows, size_t cols,
                                 bool acc) {
    launch(d, col_sum_kernel, cols, out, x, rows, cols, acc);
}

extern "C" void ps__cuda_act_forward_overwrite(ps_k_dev *d, ps_k_act act, float *y, const float *x,
                                               size_t n) {
    launch(d, act_forward_kernel, n, (int)act, y, x, n);
}

extern "C" void ps__cuda_act_backward(ps_k_dev *d, ps_k_act act, float *dx, const float *dy,
                                      const float *x, const float *y, size_t n, bool acc) {
    launch(d, act_backward_kernel, n, (int)act, dx, dy, x, y, n, acc);
}

extern "C" void ps__cuda_softmax_rows_overwrite(ps_k_dev *d, float *probs, const float *logits,
                                                size_t rows, size_t cols) {
    if (cols == 0) return;
    launch(d, softmax_rows_kernel, rows, probs, logits, rows, (int)cols);
}

/* ---- per-row results: softmax CE, argmax ------------------------------- */

__global__ void softmax_ce_kernel(float *dlogits, float *row_loss, int *row_bad,
                                  const float *logits, const int32_t *labels, size_t rows, int cols,
                                  float scale) {
    GRID_STRIDE_LOOP(r, rows) {
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
    GRID_STRIDE_LOOP(r, rows) row_hit[r] = ps_ew_argmax_row(logits + r * cols, cols) == labels[r];
}

/* Copies a per-row kernel's results to the host and waits; returns PS_OK or
 * the device's pending error. */
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
    return take_error(d);
}

extern "C" int ps__cuda_softmax_ce_overwrite(ps_k_dev *d, float *dlogits, const float *logits,
                                             const int32_t *labels, size_t rows, size_t cols,
                                             float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    use(d);
    ps__cuda_ctx *c = d->cuda;
    int rc = ps__cuda_ensure_rows(c, rows);
    if (rc != PS_OK) return rc;
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
    ps__cuda_ctx *c = d->cuda;
    int rc = ps__cuda_ensure_rows(c, rows);
    if (rc != PS_OK) return rc;
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

/* ---- reductions: BCE, MSE, binary accuracy, sums ----------------------- */

/* Adds up the block's values in double (a tree in shared memory) and stores
 * the total in partials[blockIdx.x]. Needs blockDim.x == kThreads. */
__device__ void block_sum_store(double v, double *partials) {
    __shared__ double s[kThreads];
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned h = kThreads / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}

/* Each thread adds term(i) over its grid-stride slice in fp32 (ps_k_sum's
 * contract), then the block in double. term may also write per-element
 * outputs (the loss gradients) as it goes. */
template <typename Term> __global__ void reduce_kernel(Term term, size_t n, double *partials) {
    float acc = 0.0f;
    GRID_STRIDE_LOOP(i, n) acc += term(i);
    block_sum_store(acc, partials);
}

/* Runs reduce_kernel over [0, n) and adds the per-block partials in double on
 * the host. Synchronous; returns PS_OK or the device's pending error. */
template <typename Term> static int reduce(ps_k_dev *d, Term term, size_t n, double *out) {
    use(d);
    ps__cuda_ctx *c = d->cuda;
    unsigned blocks = blocks_for(n) < kReduceBlocks ? blocks_for(n) : kReduceBlocks;
    reduce_kernel<<<blocks, kThreads, 0, c->stream>>>(term, n, c->partials);
    check_launch(d);
    cudaError_t ce = cudaMemcpyAsync(c->host_partials, c->partials, blocks * sizeof(double),
                                     cudaMemcpyDeviceToHost, c->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(c->stream);
    record(d, ce != cudaSuccess);
    int rc = take_error(d);
    if (rc != PS_OK) return rc;
    double s = 0.0;
    for (unsigned b = 0; b < blocks; b++)
        s += c->host_partials[b];
    *out = s;
    return PS_OK;
}

struct SumTerm {
    const float *x;
    bool squares;
    __device__ float operator()(size_t i) const {
        return squares ? x[i] * x[i] : x[i];
    }
};

/* The BCE term of element i; its gradient (scaled for the mean) if grad is set. */
struct BceTerm {
    float *grad;
    const float *x, *t;
    float scale;
    __device__ float operator()(size_t i) const {
        if (grad) grad[i] = scale * ps_ew_bce_grad(x[i], t[i]);
        return ps_ew_bce(x[i], t[i]);
    }
};

struct MseTerm {
    float *grad;
    const float *p, *t;
    float scale;
    __device__ float operator()(size_t i) const {
        if (grad) grad[i] = scale * ps_ew_mse_grad(p[i], t[i]);
        return ps_ew_mse(p[i], t[i]);
    }
};

/* 1 for a correct row. Counted in fp32 per thread: exact below 2^24 rows per
 * thread, i.e. for any batch. */
struct BinaryHitTerm {
    const float *x;
    const int32_t *labels;
    __device__ float operator()(size_t i) const {
        return (x[i] > 0.0f) == (labels[i] != 0) ? 1.0f : 0.0f;
    }
};

/* Mean of term over rows*cols elements into *loss. */
template <typename Term>
static int mean_loss(ps_k_dev *d, Term term, size_t rows, size_t cols, float *loss) {
    if (rows == 0 || cols == 0) return PS_EINVAL;
    double total;
    int rc = reduce(d, term, rows * cols, &total);
    if (rc == PS_OK) *loss = (float)(total / (double)(rows * cols));
    return rc;
}

extern "C" int ps__cuda_bce_overwrite(ps_k_dev *d, float *dlogits, const float *logits,
                                      const float *targets, size_t rows, size_t cols, float *loss) {
    float scale = 1.0f / (float)(rows * cols);
    return mean_loss(d, BceTerm{dlogits, logits, targets, scale}, rows, cols, loss);
}

extern "C" int ps__cuda_mse_overwrite(ps_k_dev *d, float *dpred, const float *pred,
                                      const float *targets, size_t rows, size_t cols, float *loss) {
    float scale = 1.0f / (float)(rows * cols);
    return mean_loss(d, MseTerm{dpred, pred, targets, scale}, rows, cols, loss);
}

extern "C" int ps__cuda_binary_correct(ps_k_dev *d, const float *logits, const int32_t *labels,
                                       size_t rows, size_t *correct) {
    double hits = 0.0;
    int rc = reduce(d, BinaryHitTerm{logits, labels}, rows, &hits);
    *correct = rc == PS_OK ? (size_t)hits : 0;
    return rc;
}

extern "C" int ps__cuda_sum(ps_k_dev *d, const float *x, size_t n, bool squares, double *out) {
    return reduce(d, SumTerm{x, squares}, n, out);
}

/* ---- labels, dropout --------------------------------------------------- */

__global__ void onehot_kernel(float *out, const int32_t *labels, size_t rows, size_t cols) {
    GRID_STRIDE_LOOP(i, rows * cols) {
        int32_t label = labels[i / cols];
        if (cols == 1) /* binary targets: the label itself */
            out[i] = (float)label;
        else
            out[i] = label >= 0 && (size_t)label == i % cols ? 1.0f : 0.0f;
    }
}

/* The keep decision is a pure function of (seed, i): no mask, no RNG state. */
__global__ void dropout_kernel(float *y, const float *x, size_t n, size_t group, float rate,
                               float scale, uint64_t seed) {
    GRID_STRIDE_LOOP(i, n) y[i] = ps_ew_dropout_keep(seed, i / group, rate) ? x[i] * scale : 0.0f;
}

extern "C" void ps__cuda_onehot_overwrite(ps_k_dev *d, float *out, const int32_t *labels,
                                          size_t rows, size_t cols) {
    launch(d, onehot_kernel, rows * cols, out, labels, rows, cols);
}

extern "C" void ps__cuda_dropout(ps_k_dev *d, float *y, const float *x, size_t n, size_t group,
                                 float rate, uint64_t seed) {
    launch(d, dropout_kernel, n, y, x, n, group ? group : 1, rate, 1.0f / (1.0f - rate), seed);
}

/* ---- convolution and pooling ------------------------------------------- */
/* The geometry structs travel by value (kernel parameters); every kernel is
 * a gather, one thread per output element, so none needs atomics. */

__global__ void im2col_kernel(ps_k_conv p, float *cols, const float *x, size_t rows) {
    size_t k = p.kh * p.kw * p.c; /* columns of the patch matrix */
    GRID_STRIDE_LOOP(i, rows * k) cols[i] = ps_ew_im2col_at(&p, x, i / k, i % k);
}

__global__ void col2im_kernel(ps_k_conv p, float *dx, const float *cols, size_t cells) {
    GRID_STRIDE_LOOP(e, cells) dx[e] = ps_ew_col2im_at(&p, cols, e);
}

__global__ void maxpool_forward_kernel(ps_k_pool p, float *y, int32_t *arg, const float *x,
                                       size_t cells) {
    GRID_STRIDE_LOOP(o, cells) y[o] = ps_ew_maxpool_at(&p, x, o, &arg[o]);
}

__global__ void maxpool_backward_kernel(ps_k_pool p, float *dx, const float *dy, const int32_t *arg,
                                        size_t cells) {
    GRID_STRIDE_LOOP(e, cells) dx[e] = ps_ew_maxpool_bwd_at(&p, dy, arg, e);
}

__global__ void avgpool_forward_kernel(ps_k_pool p, float *y, const float *x, size_t cells) {
    GRID_STRIDE_LOOP(o, cells) y[o] = ps_ew_avgpool_at(&p, x, o);
}

__global__ void avgpool_backward_kernel(ps_k_pool p, float *dx, const float *dy, size_t cells) {
    GRID_STRIDE_LOOP(e, cells) dx[e] = ps_ew_avgpool_bwd_at(&p, dy, e);
}

extern "C" void ps__cuda_im2col_overwrite(ps_k_dev *d, const ps_k_conv *p, float *cols,
                                          const float *x, size_t n) {
    size_t rows = n * p->oh * p->ow;
    launch(d, im2col_kernel, rows * p->kh * p->kw * p->c, *p, cols, x, rows);
}

extern "C" void ps__cuda_col2im_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx,
                                          const float *cols, size_t n) {
    size_t cells = n * p->h * p->w * p->c;
    launch(d, col2im_kernel, cells, *p, dx, cols, cells);
}

extern "C" void ps__cuda_maxpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y,
                                                   int32_t *arg, const float *x) {
    size_t cells = p->n * p->oh * p->ow * p->c;
    launch(d, maxpool_forward_kernel, cells, *p, y, arg, x, cells);
}

extern "C" void ps__cuda_maxpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx,
                                                    const float *dy, const int32_t *arg) {
    size_t cells = p->n * p->h * p->w * p->c;
    launch(d, maxpool_backward_kernel, cells, *p, dx, dy, arg, cells);
}

extern "C" void ps__cuda_avgpool_forward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *y,
                                                   const float *x) {
    size_t cells = p->n * p->oh * p->ow * p->c;
    launch(d, avgpool_forward_kernel, cells, *p, y, x, cells);
}

extern "C" void ps__cuda_avgpool_backward_overwrite(ps_k_dev *d, const ps_k_pool *p, float *dx,
                                                    const float *dy) {
    size_t cells = p->n * p->h * p->w * p->c;
    launch(d, avgpool_backward_kernel, cells, *p, dx, dy, cells);
}
