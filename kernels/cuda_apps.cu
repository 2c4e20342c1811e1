/* CUDA backend of kernels/, part 4: the kernels of the Keras applications
 * networks: element-wise and per-channel products, rescaling, Keras'
 * Normalization and layer normalization. One thread per output element, one
 * block per row (layer norm statistics, dx) or per channel (dgamma, dbeta):
 * gathers, no atomics.
 * Compiled by nvcc; not run on the build hosts (no GPU). */
#include "cuda_common.cuh"
#include "ew.h"

/* ---- products and rescaling --------------------------------------------------- */

__global__ void mul_kernel(float *y, const float *a, const float *b, size_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = a[i] * b[i];
}

__global__ void mul_backward_kernel(float *da, float *db, const float *dy, const float *a,
                                    const float *b, size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        float g = dy[i], ai = a[i], bi = b[i];
        if (da) da[i] = g * bi;
        if (db) db[i] = g * ai;
    }
}

__global__ void mul_channels_kernel(float *y, const float *x, const float *s, size_t n, size_t hw,
                                    size_t c) {
    GRID_STRIDE_LOOP(i, n * hw * c) y[i] = x[i] * s[(i / (hw * c)) * c + i % c];
}

/* One thread per (sample, channel): consecutive threads read consecutive channels. */
__global__ void mul_channels_ds_kernel(float *ds, const float *dy, const float *x, size_t n,
                                       size_t hw, size_t c) {
    GRID_STRIDE_LOOP(o, n * c) {
        size_t img = o / c, ch = o % c;
        float acc = 0.0f;
        for (size_t p = 0; p < hw; p++) {
            size_t i = (img * hw + p) * c + ch;
            acc += dy[i] * x[i];
        }
        ds[o] = acc;
    }
}

__global__ void rescale_kernel(float *y, const float *x, float scale, float offset, size_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = x[i] * scale + offset;
}

extern "C" void ps__cuda_mul_forward_overwrite(ps_k_dev *d, float *y, const float *a,
                                               const float *b, size_t n) {
    launch(d, mul_kernel, n, y, a, b, n);
}

extern "C" void ps__cuda_mul_backward_overwrite(ps_k_dev *d, float *da, float *db, const float *dy,
                                                const float *a, const float *b, size_t n) {
    launch(d, mul_backward_kernel, n, da, db, dy, a, b, n);
}

extern "C" void ps__cuda_mul_channels_forward_overwrite(ps_k_dev *d, float *y, const float *x,
                                                        const float *s, size_t n, size_t hw,
                                                        size_t c) {
    launch(d, mul_channels_kernel, n * hw * c, y, x, s, n, hw, c);
}

/* ds before dx on the one stream: dx may be dy. */
extern "C" void ps__cuda_mul_channels_backward_overwrite(ps_k_dev *d, float *dx, float *ds,
                                                         const float *dy, const float *x,
                                                         const float *s, size_t n, size_t hw,
                                                         size_t c) {
    if (ds) launch(d, mul_channels_ds_kernel, n * c, ds, dy, x, n, hw, c);
    if (dx) launch(d, mul_channels_kernel, n * hw * c, dx, dy, s, n, hw, c);
}

extern "C" void ps__cuda_rescale(ps_k_dev *d, float *y, const float *x, float scale, float offset,
                                 size_t n) {
    launch(d, rescale_kernel, n, y, x, scale, offset, n);
}

/* ---- Keras' Normalization --------------------------------------------------------- */

/* y = (x - mean) / max(sqrt(var), eps) per channel (mean NULL: 0, the
 * backward); NaN kept as numpy's maximum keeps it. IEEE sqrt and division
 * (nvcc's defaults), as the CPU's. */
__global__ void norm_kernel(float *y, const float *x, const float *mean, const float *var,
                            size_t n, size_t c, float eps) {
    GRID_STRIDE_LOOP(i, n * c) {
        size_t j = i % c;
        float s = sqrtf(var[j]);
        y[i] = (x[i] - (mean ? mean[j] : 0.0f)) / (s < eps ? eps : s);
    }
}

extern "C" void ps__cuda_norm(ps_k_dev *d, float *y, const float *x, const float *mean,
                              const float *var, size_t n, size_t c, float eps) {
    launch(d, norm_kernel, n * c, y, x, mean, var, n, c, eps);
}

/* ---- layer normalization ------------------------------------------------------- */

/* One block per row: the mean, then the biased variance (two reductions, in
 * float per thread and double across the block), then y. */
__global__ void ln_forward_kernel(float *y, float *mean, float *rstd, const float *x,
                                  const float *gamma, const float *beta, size_t rows, size_t c,
                                  float eps) {
    BLOCK_STRIDE_LOOP(r, rows) {
        const float *xr = x + r * c;
        float s = 0.0f;
        THREAD_STRIDE_LOOP(j, c) s += xr[j];
        float mu = (float)(block_sum(s) / (double)c);
        float q = 0.0f;
        THREAD_STRIDE_LOOP(j, c) q += (xr[j] - mu) * (xr[j] - mu);
        float rs = 1.0f / sqrtf((float)(block_sum(q) / (double)c) + eps);
        if (threadIdx.x == 0) mean[r] = mu, rstd[r] = rs;
        THREAD_STRIDE_LOOP(j, c)
        y[r * c + j] = (xr[j] - mu) * rs * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
    }
}

/* One block per row: a = mean of g = dy gamma, b = mean of g xhat, then
 * dx = rstd (g - a - xhat b), as cpu_ln.c. */
__global__ void ln_dx_kernel(float *dx, const float *dy, const float *x, const float *mean,
                             const float *rstd, const float *gamma, size_t rows, size_t c) {
    BLOCK_STRIDE_LOOP(r, rows) {
        const float *g = dy + r * c, *xr = x + r * c;
        float mu = mean[r], rs = rstd[r], a = 0.0f, b = 0.0f;
        THREAD_STRIDE_LOOP(j, c) {
            float gj = g[j] * (gamma ? gamma[j] : 1.0f);
            a += gj;
            b += gj * (xr[j] - mu) * rs;
        }
        float ma = (float)(block_sum(a) / (double)c), mb = (float)(block_sum(b) / (double)c);
        THREAD_STRIDE_LOOP(j, c) {
            float xh = (xr[j] - mu) * rs;
            dx[r * c + j] = rs * (g[j] * (gamma ? gamma[j] : 1.0f) - ma - xh * mb);
        }
    }
}

/* One block per channel: dgamma = sum of dy xhat, dbeta = sum of dy over the rows. */
__global__ void ln_dparams_kernel(float *dgamma, float *dbeta, const float *dy, const float *x,
                                  const float *mean, const float *rstd, size_t rows, size_t c) {
    BLOCK_STRIDE_LOOP(ch, c) {
        float sg = 0.0f, sb = 0.0f;
        THREAD_STRIDE_LOOP(r, rows) {
            float gy = dy[r * c + ch];
            sg += gy * (x[r * c + ch] - mean[r]) * rstd[r];
            sb += gy;
        }
        float tg = (float)block_sum(sg), tb = (float)block_sum(sb);
        if (threadIdx.x == 0) {
            if (dgamma) dgamma[ch] = tg;
            if (dbeta) dbeta[ch] = tb;
        }
    }
}

extern "C" void ps__cuda_ln_forward_overwrite(ps_k_dev *d, float *y, float *mean, float *rstd,
                                              const float *x, const float *gamma, const float *beta,
                                              size_t rows, size_t c, float eps) {
    if (c == 0) return;
    launch_blocks(d, ln_forward_kernel, rows, y, mean, rstd, x, gamma, beta, rows, c, eps);
}

extern "C" void ps__cuda_ln_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                               const float *dy, const float *x, const float *mean,
                                               const float *rstd, const float *gamma, size_t rows,
                                               size_t c) {
    if (c == 0) return;
    if (rows == 0) { /* as the CPU: zero sums */
        use(d);
        if (dgamma)
            record(d,
                   cudaMemsetAsync(dgamma, 0, c * sizeof(float), d->cuda->stream) != cudaSuccess);
        if (dbeta)
            record(d, cudaMemsetAsync(dbeta, 0, c * sizeof(float), d->cuda->stream) != cudaSuccess);
        return;
    }
    launch_blocks(d, ln_dx_kernel, rows, dx, dy, x, mean, rstd, gamma, rows, c);
    if (dgamma || dbeta)
        launch_blocks(d, ln_dparams_kernel, c, dgamma, dbeta, dy, x, mean, rstd, rows, c);
}
