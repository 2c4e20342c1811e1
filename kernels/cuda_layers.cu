/* CUDA backend of kernels/, part 3: batch normalization, depthwise
 * convolution and the shape ops. Simple kernels: one thread per output
 * element (a gather, no atomics), and one block per channel (or per weight)
 * for the reductions. Compiled by nvcc; not run on the build hosts (no GPU). */
#include "cuda_common.cuh"
#include "ew.h"

/* ---- batch normalization ---------------------------------------------------- */

/* One block per channel: the mean, then the biased variance (two reductions,
 * in float per thread and double across the block), then y. */
__global__ void bn_train_kernel(float *y, float *mean, float *var, const float *x,
                                const float *gamma, const float *beta, size_t rows, size_t c,
                                float eps) {
    BLOCK_STRIDE_LOOP(ch, c) {
        float s = 0.0f;
        THREAD_STRIDE_LOOP(r, rows) s += x[r * c + ch];
        float mu = (float)(block_sum(s) / (double)rows);
        float q = 0.0f;
        THREAD_STRIDE_LOOP(r, rows) {
            float dv = x[r * c + ch] - mu;
            q += dv * dv;
        }
        float v = (float)(block_sum(q) / (double)rows);
        if (threadIdx.x == 0) mean[ch] = mu, var[ch] = v;
        float a = (gamma ? gamma[ch] : 1.0f) * rsqrtf(v + eps), b = beta ? beta[ch] : 0.0f;
        THREAD_STRIDE_LOOP(r, rows) y[r * c + ch] = (x[r * c + ch] - mu) * a + b;
    }
}

__global__ void bn_infer_kernel(float *y, const float *x, const float *mean, const float *var,
                                const float *gamma, const float *beta, size_t rows, size_t c,
                                float eps) {
    GRID_STRIDE_LOOP(i, rows * c) {
        size_t ch = i % c;
        float a = (gamma ? gamma[ch] : 1.0f) * rsqrtf(var[ch] + eps);
        y[i] = (x[i] - mean[ch]) * a + (beta ? beta[ch] : 0.0f);
    }
}

/* One block per channel: sum dy and sum dy (x - mean), then dx (as the CPU's
 * cpu_bn.c: dx = k1 dy + k2 (x - mean) + k3). */
__global__ void bn_backward_kernel(float *dx, float *dgamma, float *dbeta, const float *dy,
                                   const float *x, const float *mean, const float *var,
                                   const float *gamma, size_t rows, size_t c, float eps) {
    BLOCK_STRIDE_LOOP(ch, c) {
        float mu = mean[ch], s = rsqrtf(var[ch] + eps), g = gamma ? gamma[ch] : 1.0f;
        float a = 0.0f, b = 0.0f;
        THREAD_STRIDE_LOOP(r, rows) {
            float gy = dy[r * c + ch];
            a += gy;
            b += gy * (x[r * c + ch] - mu);
        }
        float sdy = (float)block_sum(a), dg = (float)block_sum(b) * s, n = (float)rows;
        if (threadIdx.x == 0) {
            if (dgamma) dgamma[ch] = dg;
            if (dbeta) dbeta[ch] = sdy;
        }
        float k1 = g * s, k2 = -g * s * s * dg / n, k3 = -g * s * sdy / n;
        if (!dx) continue;
        THREAD_STRIDE_LOOP(r, rows) {
            size_t i = r * c + ch;
            dx[i] = k1 * dy[i] + k2 * (x[i] - mu) + k3;
        }
    }
}

extern "C" void ps__cuda_bn_forward_train_overwrite(ps_k_dev *d, float *y, float *mean, float *var,
                                                    const float *x, const float *gamma,
                                                    const float *beta, size_t rows, size_t c,
                                                    float eps) {
    if (rows == 0) { /* as the CPU: zero statistics */
        use(d);
        record(d, cudaMemsetAsync(mean, 0, c * sizeof(float), d->cuda->stream) != cudaSuccess);
        record(d, cudaMemsetAsync(var, 0, c * sizeof(float), d->cuda->stream) != cudaSuccess);
        return;
    }
    launch_blocks(d, bn_train_kernel, c, y, mean, var, x, gamma, beta, rows, c, eps);
}

extern "C" void ps__cuda_bn_forward_infer_overwrite(ps_k_dev *d, float *y, const float *x,
                                                    const float *mean, const float *var,
                                                    const float *gamma, const float *beta,
                                                    size_t rows, size_t c, float eps) {
    launch(d, bn_infer_kernel, rows * c, y, x, mean, var, gamma, beta, rows, c, eps);
}

extern "C" void ps__cuda_bn_backward_overwrite(ps_k_dev *d, float *dx, float *dgamma, float *dbeta,
                                               const float *dy, const float *x, const float *mean,
                                               const float *var, const float *gamma, size_t rows,
                                               size_t c, float eps) {
    launch_blocks(d, bn_backward_kernel, c, dx, dgamma, dbeta, dy, x, mean, var, gamma, rows, c,
                  eps);
}

/* ---- depthwise convolution ------------------------------------------------- */

__global__ void dwconv_forward_kernel(ps_k_conv p, float *y, const float *x, const float *w,
                                      const float *b, size_t cells) {
    GRID_STRIDE_LOOP(o, cells) y[o] = ps_ew_dwconv_at(&p, x, w, b, o);
}

__global__ void dwconv_dx_kernel(ps_k_conv p, float *dx, const float *dy, const float *w,
                                 size_t cells) {
    GRID_STRIDE_LOOP(e, cells) dx[e] = ps_ew_dwconv_dx_at(&p, dy, w, e);
}

/* One block per weight (tap k, channel co): the sum over every output pixel. */
__global__ void dwconv_dw_kernel(ps_k_conv p, float *dw, const float *dy, const float *x,
                                 size_t weights) {
    size_t pixels = p.n * p.oh * p.ow;
    BLOCK_STRIDE_LOOP(i, weights) {
        size_t k = i / p.cout, co = i % p.cout;
        float s = 0.0f;
        THREAD_STRIDE_LOOP(r, pixels) s += ps_ew_dwconv_dw_term(&p, dy, x, k, co, r);
        float total = (float)block_sum(s);
        if (threadIdx.x == 0) dw[i] = total;
    }
}

extern "C" void ps__cuda_dwconv2d_forward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *y,
                                                    const float *x, const float *w,
                                                    const float *b) {
    size_t cells = p->n * p->oh * p->ow * p->cout;
    launch(d, dwconv_forward_kernel, cells, *p, y, x, w, b, cells);
}

extern "C" void ps__cuda_dwconv2d_backward_overwrite(ps_k_dev *d, const ps_k_conv *p, float *dx,
                                                     float *dw, float *db, const float *dy,
                                                     const float *x, const float *w) {
    size_t cells = p->n * p->h * p->w * p->c, weights = p->kh * p->kw * p->cout;
    if (dx) launch(d, dwconv_dx_kernel, cells, *p, dx, dy, w, cells);
    if (dw) launch_blocks(d, dwconv_dw_kernel, weights, *p, dw, dy, x, weights);
    if (db) ps__cuda_col_sum(d, db, dy, p->n * p->oh * p->ow, p->cout, false);
}

/* ---- shape ops ----------------------------------------------------------------- */

__global__ void gap_forward_kernel(float *y, const float *x, size_t n, size_t hw, size_t c) {
    GRID_STRIDE_LOOP(o, n * c) {
        size_t img = o / c, ch = o % c;
        float s = 0.0f;
        for (size_t i = 0; i < hw; i++)
            s += x[(img * hw + i) * c + ch];
        y[o] = s / (float)hw;
    }
}

__global__ void gap_backward_kernel(float *dx, const float *dy, size_t n, size_t hw, size_t c) {
    GRID_STRIDE_LOOP(e, n * hw * c) dx[e] = dy[(e / (hw * c)) * c + e % c] / (float)hw;
}

/* One thread per cell of the padded tensor (forward: zero or a copy) or of
 * the small one (backward: a copy from inside the padded one). */
__global__ void pad2d_kernel(float *out, const float *in, size_t n, size_t h, size_t w, size_t c,
                             size_t top, size_t bottom, size_t left, size_t right, bool backward) {
    size_t ph = h + top + bottom, pw = w + left + right;
    if (backward) {
        GRID_STRIDE_LOOP(e, n * h * w * c) {
            size_t ch = e % c, ix = (e / c) % w, iy = (e / (c * w)) % h, img = e / (c * w * h);
            out[e] = in[((img * ph + iy + top) * pw + ix + left) * c + ch];
        }
    } else {
        GRID_STRIDE_LOOP(o, n * ph * pw * c) {
            size_t ch = o % c, px = (o / c) % pw, py = (o / (c * pw)) % ph, img = o / (c * pw * ph);
            bool inside = py >= top && px >= left && py - top < h && px - left < w;
            out[o] = inside ? in[((img * h + py - top) * w + px - left) * c + ch] : 0.0f;
        }
    }
}

__global__ void add_kernel(float *y, const float *a, const float *b, size_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = a[i] + b[i];
}

__global__ void add_acc_kernel(float *y, const float *x, size_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] += x[i];
}

/* One thread per element of the narrow [rows, c_x] matrix. */
__global__ void concat_kernel(float *out, const float *in, size_t rows, size_t c_total,
                              size_t c_off, size_t c_x, bool split) {
    GRID_STRIDE_LOOP(i, rows * c_x) {
        size_t wide = (i / c_x) * c_total + c_off + i % c_x;
        if (split)
            out[i] = in[wide];
        else
            out[wide] = in[i];
    }
}

extern "C" void ps__cuda_gap_forward_overwrite(ps_k_dev *d, float *y, const float *x, size_t n,
                                               size_t hw, size_t c) {
    launch(d, gap_forward_kernel, n * c, y, x, n, hw, c);
}

extern "C" void ps__cuda_gap_backward_overwrite(ps_k_dev *d, float *dx, const float *dy, size_t n,
                                                size_t hw, size_t c) {
    launch(d, gap_backward_kernel, n * hw * c, dx, dy, n, hw, c);
}

extern "C" void ps__cuda_pad2d(ps_k_dev *d, float *out, const float *in, size_t n, size_t h,
                               size_t w, size_t c, size_t top, size_t bottom, size_t left,
                               size_t right, bool backward) {
    size_t cells = backward ? n * h * w * c : n * (h + top + bottom) * (w + left + right) * c;
    launch(d, pad2d_kernel, cells, out, in, n, h, w, c, top, bottom, left, right, backward);
}

extern "C" void ps__cuda_add_overwrite(ps_k_dev *d, float *y, const float *a, const float *b,
                                       size_t n) {
    launch(d, add_kernel, n, y, a, b, n);
}

extern "C" void ps__cuda_add_acc(ps_k_dev *d, float *y, const float *x, size_t n) {
    launch(d, add_acc_kernel, n, y, x, n);
}

extern "C" void ps__cuda_concat_cols(ps_k_dev *d, float *out, const float *in, size_t rows,
                                     size_t c_total, size_t c_off, size_t c_x, bool split) {
    launch(d, concat_kernel, rows * c_x, out, in, rows, c_total, c_off, c_x, split);
}

/* ---- mixed precision -------------------------------------------------------- */

/* The same rounding as the CPU (ew.h), so both backends emulate fp16 / bf16
 * storage identically; overflow to infinity as a conversion would. */
__global__ void round_kernel(int prec, float *x, size_t n) {
    GRID_STRIDE_LOOP(i, n)
    x[i] = prec == PS_K_PREC_BF16 ? ps_ew_round_bf16(x[i]) : ps_ew_round_f16(x[i]);
}

__global__ void scale_kernel(float *x, float alpha, size_t n) {
    GRID_STRIDE_LOOP(i, n) x[i] *= alpha;
}

extern "C" void ps__cuda_round(ps_k_dev *d, ps_k_prec prec, float *x, size_t n) {
    launch(d, round_kernel, n, (int)prec, x, n);
}

extern "C" void ps__cuda_scale(ps_k_dev *d, float *x, float alpha, size_t n) {
    launch(d, scale_kernel, n, x, alpha, n);
}
