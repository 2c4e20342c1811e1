/* CPU backend of kernels/ for images: im2col and col2im as row-wise copies
 * (the training hot path), pooling as loops over each window's contiguous
 * channel rows; the results are those of the per-cell formulas of ew.h. In
 * the SIMD-cloned library (simd.h): the channel loops vectorise. */
#include <string.h>

#include "backend.h"
#include "ew.h"
#include "simd.h"

/* Same result as ps_ew_im2col_at for every (r, k): per output cell and kernel
 * row ky, the kw*c column entries are one contiguous run of the input row
 * (cells kx in [kx0, kx1)) with zeros on either side. */
void ps__cpu_im2col_overwrite(const ps_k_conv *p, float *cols, const float *x, size_t n) {
    size_t c = p->c, K = p->kh * p->kw * c, rowlen = p->kw * c;
    for (size_t img = 0; img < n; img++) {
        const float *xi = x + img * p->h * p->w * c;
        for (size_t oy = 0; oy < p->oh; oy++) {
            size_t ky0, ky1;
            ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
            for (size_t ox = 0; ox < p->ow; ox++) {
                float *dst = cols + ((img * p->oh + oy) * p->ow + ox) * K;
                size_t kx0, kx1;
                ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
                for (size_t ky = 0; ky < p->kh; ky++) {
                    float *d = dst + ky * rowlen;
                    if (ky < ky0 || ky >= ky1 || kx0 == kx1) {
                        memset(d, 0, rowlen * sizeof *d);
                        continue;
                    }
                    size_t iy = oy * p->sh + ky - p->pad_top;
                    size_t ix0 = ox * p->sw + kx0 - p->pad_left;
                    if (kx0) memset(d, 0, kx0 * c * sizeof *d);
                    memcpy(d + kx0 * c, xi + (iy * p->w + ix0) * c, (kx1 - kx0) * c * sizeof *d);
                    if (kx1 < p->kw) memset(d + kx1 * c, 0, (p->kw - kx1) * c * sizeof *d);
                }
            }
        }
    }
}

/* The adjoint of im2col as a scatter-add over the same runs (the sum of
 * ps_ew_col2im_at up to the order of the float additions). */
PS_SIMD_CLONES
void ps__cpu_col2im_overwrite(const ps_k_conv *p, float *dx, const float *cols, size_t n) {
    size_t c = p->c, K = p->kh * p->kw * c, rowlen = p->kw * c;
    memset(dx, 0, n * p->h * p->w * c * sizeof *dx);
    for (size_t img = 0; img < n; img++) {
        float *xi = dx + img * p->h * p->w * c;
        for (size_t oy = 0; oy < p->oh; oy++) {
            size_t ky0, ky1;
            ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
            for (size_t ox = 0; ox < p->ow; ox++) {
                const float *src = cols + ((img * p->oh + oy) * p->ow + ox) * K;
                size_t kx0, kx1;
                ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
                size_t run = (kx1 - kx0) * c;
                for (size_t ky = ky0; ky < ky1; ky++) {
                    size_t iy = oy * p->sh + ky - p->pad_top;
                    size_t ix0 = ox * p->sw + kx0 - p->pad_left;
                    float *d = xi + (iy * p->w + ix0) * c;
                    const float *s = src + ky * rowlen + kx0 * c;
                    for (size_t j = 0; j < run; j++)
                        d[j] += s[j];
                }
            }
        }
    }
}

/* Pooling walks each window with plain loops over contiguous channel rows
 * (no per-cell index division); forward results are those of the ew.h
 * per-cell formulas (same comparisons, same order). Backward passes scatter
 * into dx: one CPU thread needs no atomics, and it touches each dy once. */
PS_SIMD_CLONES
void ps__cpu_maxpool_forward_overwrite(const ps_k_pool *p, float *y, int32_t *arg, const float *x) {
    size_t C = p->c;
    for (size_t img = 0; img < p->n; img++) {
        const float *xi = x + img * p->h * p->w * C;
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++) {
                size_t y0, y1, x0, x1, o = ((img * p->oh + oy) * p->ow + ox) * C;
                ps_ew_pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
                float *restrict yo = y + o;
                int32_t *restrict ao = arg + o;
                int32_t first = (int32_t)(y0 * p->w + x0);
                memcpy(yo, xi + (size_t)first * C, C * sizeof *yo);
                for (size_t ci = 0; ci < C; ci++)
                    ao[ci] = first;
                for (size_t iy = y0; iy < y1; iy++)
                    for (size_t ix = x0; ix < x1; ix++) {
                        int32_t cell = (int32_t)(iy * p->w + ix);
                        const float *restrict xc = xi + (size_t)cell * C;
                        /* as ps_ew_maxpool_at, without a branch: both stores
                         * unconditional, so the loop vectorises to blends */
                        for (size_t ci = 0; ci < C; ci++) {
                            float v = xc[ci], m = yo[ci];
                            bool take = v > m || m != m;
                            yo[ci] = take ? v : m;
                            ao[ci] = take ? cell : ao[ci];
                        }
                    }
            }
    }
}

/* Windows that tile the input (stride = window, no padding before, the last
 * row and column of windows reaching the edge): every input cell is in
 * exactly one window, so dx is written once, without zeroing it first. */
static bool pool_tiles(const ps_k_pool *p) {
    return p->sh == p->ph && p->sw == p->pw && p->pad_top == 0 && p->pad_left == 0 &&
           p->oh * p->ph >= p->h && p->ow * p->pw >= p->w;
}

PS_SIMD_CLONES
static void maxpool_backward_tiled(const ps_k_pool *p, float *dx, const float *dy,
                                   const int32_t *arg) {
    size_t C = p->c;
    for (size_t img = 0; img < p->n; img++) {
        float *dxi = dx + img * p->h * p->w * C;
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++) {
                size_t y0, y1, x0, x1, o = ((img * p->oh + oy) * p->ow + ox) * C;
                ps_ew_pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
                const float *restrict g = dy + o;
                const int32_t *restrict a = arg + o;
                for (size_t iy = y0; iy < y1; iy++)
                    for (size_t ix = x0; ix < x1; ix++) {
                        int32_t cell = (int32_t)(iy * p->w + ix);
                        float *restrict dc = dxi + (size_t)cell * C;
                        for (size_t ci = 0; ci < C; ci++)
                            dc[ci] = a[ci] == cell ? g[ci] : 0.0f;
                    }
            }
    }
}

PS_SIMD_CLONES
void ps__cpu_maxpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy,
                                        const int32_t *arg) {
    if (pool_tiles(p)) {
        maxpool_backward_tiled(p, dx, dy, arg);
        return;
    }
    size_t C = p->c, per_out = p->oh * p->ow * C;
    memset(dx, 0, p->n * p->h * p->w * C * sizeof *dx);
    for (size_t img = 0; img < p->n; img++) {
        float *dxi = dx + img * p->h * p->w * C;
        const float *dyi = dy + img * per_out;
        const int32_t *ai = arg + img * per_out;
        for (size_t o = 0; o < per_out; o += C)
            for (size_t ci = 0; ci < C; ci++)
                dxi[(size_t)ai[o + ci] * C + ci] += dyi[o + ci];
    }
}

PS_SIMD_CLONES
void ps__cpu_avgpool_forward_overwrite(const ps_k_pool *p, float *y, const float *x) {
    size_t C = p->c;
    for (size_t img = 0; img < p->n; img++) {
        const float *xi = x + img * p->h * p->w * C;
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++) {
                size_t y0, y1, x0, x1;
                ps_ew_pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
                float *yo = y + ((img * p->oh + oy) * p->ow + ox) * C;
                memset(yo, 0, C * sizeof *yo);
                for (size_t iy = y0; iy < y1; iy++)
                    for (size_t ix = x0; ix < x1; ix++) {
                        const float *xc = xi + (iy * p->w + ix) * C;
                        for (size_t ci = 0; ci < C; ci++)
                            yo[ci] += xc[ci];
                    }
                float inv = (float)((y1 - y0) * (x1 - x0));
                for (size_t ci = 0; ci < C; ci++)
                    yo[ci] /= inv;
            }
    }
}

PS_SIMD_CLONES
void ps__cpu_avgpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy) {
    size_t C = p->c;
    memset(dx, 0, p->n * p->h * p->w * C * sizeof *dx);
    for (size_t img = 0; img < p->n; img++) {
        float *dxi = dx + img * p->h * p->w * C;
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++) {
                size_t y0, y1, x0, x1;
                ps_ew_pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
                const float *g = dy + ((img * p->oh + oy) * p->ow + ox) * C;
                float cnt = (float)((y1 - y0) * (x1 - x0));
                for (size_t iy = y0; iy < y1; iy++)
                    for (size_t ix = x0; ix < x1; ix++) {
                        float *dc = dxi + (iy * p->w + ix) * C;
                        for (size_t ci = 0; ci < C; ci++)
                            dc[ci] += g[ci] / cnt;
                    }
            }
    }
}
