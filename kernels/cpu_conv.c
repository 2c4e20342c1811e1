/* CPU backend of kernels/ for images: im2col and col2im as row-wise copies
 * (the training hot path), pooling one output or input cell at a time with
 * the shared per-cell formulas of ew.h. */
#include <string.h>

#include "backend.h"
#include "ew.h"

/* The kernel columns [*k0, *k1) whose input index o*s + k - pad lies inside
 * [0, len) along one axis. */
static void valid_taps(size_t o, size_t s, size_t pad, size_t k, size_t len, size_t *k0,
                       size_t *k1) {
    size_t start = o * s; /* input index of tap k is start + k - pad */
    *k0 = start >= pad ? 0 : pad - start;
    size_t end = len + pad > start ? len + pad - start : 0; /* taps below end are < len */
    *k1 = end < k ? end : k;
    if (*k1 < *k0) *k1 = *k0;
}

/* Same result as ps_ew_im2col_at for every (r, k): per output cell and kernel
 * row ky, the kw*c column entries are one contiguous run of the input row
 * (cells kx in [kx0, kx1)) with zeros on either side. */
void ps__cpu_im2col_overwrite(const ps_k_conv *p, float *cols, const float *x, size_t n) {
    size_t c = p->c, K = p->kh * p->kw * c, rowlen = p->kw * c;
    for (size_t img = 0; img < n; img++) {
        const float *xi = x + img * p->h * p->w * c;
        for (size_t oy = 0; oy < p->oh; oy++) {
            size_t ky0, ky1;
            valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
            for (size_t ox = 0; ox < p->ow; ox++) {
                float *dst = cols + ((img * p->oh + oy) * p->ow + ox) * K;
                size_t kx0, kx1;
                valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
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
void ps__cpu_col2im_overwrite(const ps_k_conv *p, float *dx, const float *cols, size_t n) {
    size_t c = p->c, K = p->kh * p->kw * c, rowlen = p->kw * c;
    memset(dx, 0, n * p->h * p->w * c * sizeof *dx);
    for (size_t img = 0; img < n; img++) {
        float *xi = dx + img * p->h * p->w * c;
        for (size_t oy = 0; oy < p->oh; oy++) {
            size_t ky0, ky1;
            valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
            for (size_t ox = 0; ox < p->ow; ox++) {
                const float *src = cols + ((img * p->oh + oy) * p->ow + ox) * K;
                size_t kx0, kx1;
                valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
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

void ps__cpu_maxpool_forward_overwrite(const ps_k_pool *p, float *y, int32_t *arg, const float *x) {
    size_t total = p->n * p->oh * p->ow * p->c;
    for (size_t o = 0; o < total; o++)
        y[o] = ps_ew_maxpool_at(p, x, o, &arg[o]);
}

void ps__cpu_maxpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy,
                                        const int32_t *arg) {
    size_t total = p->n * p->h * p->w * p->c;
    for (size_t e = 0; e < total; e++)
        dx[e] = ps_ew_maxpool_bwd_at(p, dy, arg, e);
}

void ps__cpu_avgpool_forward_overwrite(const ps_k_pool *p, float *y, const float *x) {
    size_t total = p->n * p->oh * p->ow * p->c;
    for (size_t o = 0; o < total; o++)
        y[o] = ps_ew_avgpool_at(p, x, o);
}

void ps__cpu_avgpool_backward_overwrite(const ps_k_pool *p, float *dx, const float *dy) {
    size_t total = p->n * p->h * p->w * p->c;
    for (size_t e = 0; e < total; e++)
        dx[e] = ps_ew_avgpool_bwd_at(p, dy, e);
}
