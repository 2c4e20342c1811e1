/* CPU backend of kernels/: depthwise 2-D convolution, a direct kernel (no
 * im2col). Loops run oy, ox, then the window's real taps ky, kx, then the
 * channels innermost: in NHWC one tap of one output pixel is a contiguous
 * run of input channels times a contiguous row of the kernel, which the
 * compiler vectorises. The backward pass is one sweep over dy that adds into
 * dx and dw (and db) at once. Same sums as ps_ew_dwconv_*_at up to order. */
#include <string.h>

#include "backend.h"
#include "ew.h"

/* y[j] += a[j] * b[j] */
static inline void madd(float *restrict y, const float *restrict a, const float *restrict b,
                        size_t n) {
    for (size_t j = 0; j < n; j++)
        y[j] += a[j] * b[j];
}

/* Depth multiplier mult: y[ci*mult + m] += x[ci] * w[ci*mult + m]. */
static inline void madd_mult(float *restrict y, const float *restrict x, const float *restrict w,
                             size_t c, size_t mult) {
    if (mult == 1) {
        madd(y, x, w, c);
        return;
    }
    for (size_t ci = 0; ci < c; ci++)
        for (size_t m = 0; m < mult; m++)
            y[ci * mult + m] += x[ci] * w[ci * mult + m];
}

/* The adjoint in x: dx[ci] += sum over m of dy[ci*mult + m] * w[ci*mult + m]. */
static inline void madd_mult_t(float *restrict dx, const float *restrict dy,
                               const float *restrict w, size_t c, size_t mult) {
    if (mult == 1) {
        madd(dx, dy, w, c);
        return;
    }
    for (size_t ci = 0; ci < c; ci++) {
        float s = 0.0f;
        for (size_t m = 0; m < mult; m++)
            s += dy[ci * mult + m] * w[ci * mult + m];
        dx[ci] += s;
    }
}

void ps__cpu_dwconv2d_forward_overwrite(const ps_k_conv *p, float *y, const float *x,
                                        const float *w, const float *b) {
    size_t C = p->c, CO = p->cout, mult = CO / C;
    for (size_t img = 0; img < p->n; img++) {
        const float *xi = x + img * p->h * p->w * C;
        for (size_t oy = 0; oy < p->oh; oy++) {
            size_t ky0, ky1;
            ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
            for (size_t ox = 0; ox < p->ow; ox++) {
                size_t kx0, kx1;
                ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
                float *yo = y + ((img * p->oh + oy) * p->ow + ox) * CO;
                if (b)
                    memcpy(yo, b, CO * sizeof *yo);
                else
                    memset(yo, 0, CO * sizeof *yo);
                for (size_t ky = ky0; ky < ky1; ky++) {
                    size_t iy = oy * p->sh + ky - p->pad_top;
                    for (size_t kx = kx0; kx < kx1; kx++) {
                        size_t ix = ox * p->sw + kx - p->pad_left;
                        madd_mult(yo, xi + (iy * p->w + ix) * C, w + (ky * p->kw + kx) * CO, C,
                                  mult);
                    }
                }
            }
        }
    }
}

void ps__cpu_dwconv2d_backward_overwrite(const ps_k_conv *p, float *dx, float *dw, float *db,
                                         const float *dy, const float *x, const float *w) {
    size_t C = p->c, CO = p->cout, mult = CO / C;
    memset(dw, 0, p->kh * p->kw * CO * sizeof *dw);
    if (db) memset(db, 0, CO * sizeof *db);
    if (dx) memset(dx, 0, p->n * p->h * p->w * C * sizeof *dx);
    for (size_t img = 0; img < p->n; img++) {
        const float *xi = x + img * p->h * p->w * C;
        float *dxi = dx ? dx + img * p->h * p->w * C : NULL;
        for (size_t oy = 0; oy < p->oh; oy++) {
            size_t ky0, ky1;
            ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
            for (size_t ox = 0; ox < p->ow; ox++) {
                size_t kx0, kx1;
                ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
                const float *g = dy + ((img * p->oh + oy) * p->ow + ox) * CO;
                if (db)
                    for (size_t j = 0; j < CO; j++)
                        db[j] += g[j];
                for (size_t ky = ky0; ky < ky1; ky++) {
                    size_t iy = oy * p->sh + ky - p->pad_top;
                    for (size_t kx = kx0; kx < kx1; kx++) {
                        size_t ix = ox * p->sw + kx - p->pad_left, cell = (iy * p->w + ix) * C;
                        size_t k = (ky * p->kw + kx) * CO;
                        madd_mult(dw + k, xi + cell, g, C, mult); /* dw += x * dy */
                        if (dxi) madd_mult_t(dxi + cell, g, w + k, C, mult);
                    }
                }
            }
        }
    }
}
