/* CPU backend of kernels/: depthwise 2-D convolution, a direct kernel (no
 * im2col). Loops run oy, ox, then the window's real taps, then the channels
 * innermost: in NHWC one tap of one output pixel is a contiguous run of input
 * channels times a contiguous row of the kernel. With multiplier 1 the
 * channels go in 8-wide vector blocks whose sums stay in registers across the
 * taps, two interior pixels share each kernel load, and the hot functions are
 * compiled for AVX2+FMA too (simd.h). Backward, per image: one sweep over dy
 * adds into dw (two pixels per update) and db, then dx is a gather, each input
 * cell summing dy * w over the windows that read it (the forward's loop).
 * Other multipliers take plain loops. Same sums as ps_ew_dwconv_*_at up to
 * order. */
#include <string.h>

#include "backend.h"
#include "ew.h"
#include "simd.h"

/* y[j] += a[j] * b[j] */
static PS_INLINE void madd(float *restrict y, const float *restrict a, const float *restrict b,
                           size_t n) {
    for (size_t j = 0; j < n; j++)
        y[j] += a[j] * b[j];
}

/* y[j] += a[j] */
static PS_INLINE void madd_scalar(float *restrict y, const float *restrict a, size_t n) {
    for (size_t j = 0; j < n; j++)
        y[j] += a[j];
}

/* Depth multiplier mult: y[ci*mult + m] += x[ci] * w[ci*mult + m]. */
static PS_INLINE void madd_mult(float *restrict y, const float *restrict x, const float *restrict w,
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
static PS_INLINE void madd_mult_t(float *restrict dx, const float *restrict dy,
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

/* Multiplier 1 works on 8 channels at a time in GCC/clang vector types (one
 * AVX register; two SSE registers in the baseline clone), 4 of them (32
 * channels) per block, so that a block's sums stay in registers across the
 * window's taps. MAX_TAPS bounds the per-pixel tap list; larger kernels take
 * the plain loops. */
typedef float v8 __attribute__((vector_size(32)));
/* The same, at any float's alignment and allowed to alias float data. */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define VL 8
#define MAX_TAPS 64

#define LD(p) (*(const v8u *)(p))
#define ST(p, v) (*(v8u *)(p) = (v))

/* The real taps of one output pixel: x offsets (cell * c, within the image)
 * and kernel offsets ((ky * kw + kx) * c); returns their number. */
static PS_INLINE size_t pixel_taps(const ps_k_conv *p, size_t oy, size_t ox, size_t *xo,
                                   size_t *wo) {
    size_t ky0, ky1, kx0, kx1, n = 0;
    ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
    ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
    for (size_t ky = ky0; ky < ky1; ky++)
        for (size_t kx = kx0; kx < kx1; kx++) {
            size_t iy = oy * p->sh + ky - p->pad_top, ix = ox * p->sw + kx - p->pad_left;
            xo[n] = (iy * p->w + ix) * p->c;
            wo[n++] = (ky * p->kw + kx) * p->c;
        }
    return n;
}

/* The tap lists of the whole window, relative to the input cell of tap
 * (0, 0): what every interior pixel (no tap in the padding) reads. */
static size_t window_taps(const ps_k_conv *p, size_t *xo, size_t *wo) {
    size_t n = 0;
    for (size_t ky = 0; ky < p->kh; ky++)
        for (size_t kx = 0; kx < p->kw; kx++) {
            xo[n] = (ky * p->w + kx) * p->c;
            wo[n++] = (ky * p->kw + kx) * p->c;
        }
    return n;
}

/* The x base and tap lists of output pixel (oy, ox): the window's lists when
 * no tap falls in the padding, else its own (into xo_own, wo_own). */
typedef struct {
    const float *xb;
    const size_t *xo, *wo;
    size_t nt;
} taps;

static PS_INLINE taps pixel(const ps_k_conv *p, const float *xi, size_t oy, size_t ox,
                            const size_t *xo_win, const size_t *wo_win, size_t *xo_own,
                            size_t *wo_own) {
    bool in_y = oy * p->sh >= p->pad_top && oy * p->sh - p->pad_top + p->kh <= p->h;
    bool in_x = ox * p->sw >= p->pad_left && ox * p->sw - p->pad_left + p->kw <= p->w;
    if (in_y && in_x) {
        size_t cell = (oy * p->sh - p->pad_top) * p->w + ox * p->sw - p->pad_left;
        return (taps){xi + cell * p->c, xo_win, wo_win, p->kh * p->kw};
    }
    return (taps){xi, xo_own, wo_own, pixel_taps(p, oy, ox, xo_own, wo_own)};
}

/* Whether no tap of output column ox falls in the padding. */
static PS_INLINE bool interior_x(const ps_k_conv *p, size_t ox) {
    return ox * p->sw >= p->pad_left && ox * p->sw - p->pad_left + p->kw <= p->w;
}

/* Multiplier 1, one output pixel: yo = b + sum over the taps of x * w, in
 * blocks of 4, 2 and 1 vectors, then single channels. */
static PS_INLINE void dw_pixel(float *restrict yo, const float *restrict xb,
                               const float *restrict w, const float *restrict b, size_t C,
                               const size_t *xo, const size_t *wo, size_t nt) {
    size_t c0 = 0;
    for (; c0 + 4 * VL <= C; c0 += 4 * VL) {
        v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        if (b)
            a0 = LD(b + c0), a1 = LD(b + c0 + VL), a2 = LD(b + c0 + 2 * VL),
            a3 = LD(b + c0 + 3 * VL);
        for (size_t t = 0; t < nt; t++) {
            const float *xr = xb + xo[t] + c0, *wr = w + wo[t] + c0;
            a0 += LD(xr) * LD(wr);
            a1 += LD(xr + VL) * LD(wr + VL);
            a2 += LD(xr + 2 * VL) * LD(wr + 2 * VL);
            a3 += LD(xr + 3 * VL) * LD(wr + 3 * VL);
        }
        ST(yo + c0, a0), ST(yo + c0 + VL, a1), ST(yo + c0 + 2 * VL, a2), ST(yo + c0 + 3 * VL, a3);
    }
    if (c0 + 2 * VL <= C) {
        v8 a0 = {0}, a1 = {0};
        if (b) a0 = LD(b + c0), a1 = LD(b + c0 + VL);
        for (size_t t = 0; t < nt; t++) {
            const float *xr = xb + xo[t] + c0, *wr = w + wo[t] + c0;
            a0 += LD(xr) * LD(wr);
            a1 += LD(xr + VL) * LD(wr + VL);
        }
        ST(yo + c0, a0), ST(yo + c0 + VL, a1);
        c0 += 2 * VL;
    }
    if (c0 + VL <= C) {
        v8 a = {0};
        if (b) a = LD(b + c0);
        for (size_t t = 0; t < nt; t++)
            a += LD(xb + xo[t] + c0) * LD(w + wo[t] + c0);
        ST(yo + c0, a);
        c0 += VL;
    }
    for (; c0 < C; c0++) {
        float a = b ? b[c0] : 0.0f;
        for (size_t t = 0; t < nt; t++)
            a += xb[xo[t] + c0] * w[wo[t] + c0];
        yo[c0] = a;
    }
}

/* Multiplier 1, two interior output pixels side by side (outputs yo and
 * yo + C; the second's input is `step` floats after the first's): each kernel
 * load serves both, in blocks of 2 vectors and 1 vector per pixel. */
static PS_INLINE void dw_pair(float *restrict yo, const float *restrict xb, size_t step,
                              const float *restrict w, const float *restrict b, size_t C,
                              const size_t *xo, const size_t *wo, size_t nt) {
    size_t c0 = 0;
    for (; c0 + 2 * VL <= C; c0 += 2 * VL) {
        v8 a0 = {0}, a1 = {0}, e0 = {0}, e1 = {0};
        if (b) a0 = e0 = LD(b + c0), a1 = e1 = LD(b + c0 + VL);
        for (size_t t = 0; t < nt; t++) {
            const float *xr = xb + xo[t] + c0, *wr = w + wo[t] + c0;
            v8 w0 = LD(wr), w1 = LD(wr + VL);
            a0 += LD(xr) * w0;
            a1 += LD(xr + VL) * w1;
            e0 += LD(xr + step) * w0;
            e1 += LD(xr + step + VL) * w1;
        }
        ST(yo + c0, a0), ST(yo + c0 + VL, a1), ST(yo + C + c0, e0), ST(yo + C + c0 + VL, e1);
    }
    if (c0 < C) { /* the last < 2 vectors of channels: one pixel at a time */
        dw_pixel(yo + c0, xb + c0, w + c0, b ? b + c0 : NULL, C - c0, xo, wo, nt);
        dw_pixel(yo + C + c0, xb + step + c0, w + c0, b ? b + c0 : NULL, C - c0, xo, wo, nt);
    }
}

/* Multiplier 1, one output pixel's gradient g: for each tap, dw += g * x and
 * (dxb not NULL) dx += g * w; dxb is dx at the same offset as xb. */
static PS_INLINE void dw_pixel_backward(float *restrict dxb, float *restrict dw,
                                        const float *restrict g, const float *restrict xb,
                                        const float *restrict w, size_t C, const size_t *xo,
                                        const size_t *wo, size_t nt) {
    size_t cv = C / VL * VL; /* channels in whole vectors */
    for (size_t t = 0; t < nt; t++) {
        const float *xr = xb + xo[t];
        float *dwr = dw + wo[t];
        for (size_t c0 = 0; c0 < cv; c0 += VL)
            ST(dwr + c0, LD(dwr + c0) + LD(g + c0) * LD(xr + c0));
        for (size_t c0 = cv; c0 < C; c0++)
            dwr[c0] += g[c0] * xr[c0];
    }
    if (!dxb) return;
    for (size_t t = 0; t < nt; t++) {
        const float *wr = w + wo[t];
        float *dxr = dxb + xo[t];
        for (size_t c0 = 0; c0 < cv; c0 += VL)
            ST(dxr + c0, LD(dxr + c0) + LD(g + c0) * LD(wr + c0));
        for (size_t c0 = cv; c0 < C; c0++)
            dxr[c0] += g[c0] * wr[c0];
    }
}

/* Multiplier 1, two interior output pixels side by side (gradients g0, g1;
 * the second's input is `step` floats after the first's): dw += g0 * x0 +
 * g1 * x1 per tap, one load and store of dw for both. */
static PS_INLINE void dw_pair_backward(float *restrict dw, const float *restrict g0,
                                       const float *restrict g1, const float *restrict xb,
                                       size_t step, size_t C, const size_t *xo, const size_t *wo,
                                       size_t nt) {
    size_t cv = C / VL * VL;
    for (size_t t = 0; t < nt; t++) {
        const float *x0 = xb + xo[t], *x1 = x0 + step;
        float *dwr = dw + wo[t];
        for (size_t c0 = 0; c0 < cv; c0 += VL)
            ST(dwr + c0, LD(dwr + c0) + LD(g0 + c0) * LD(x0 + c0) + LD(g1 + c0) * LD(x1 + c0));
        for (size_t c0 = cv; c0 < C; c0++)
            dwr[c0] += g0[c0] * x0[c0] + g1[c0] * x1[c0];
    }
}

/* Stride 1: the taps of an input cell that all kh*kw windows read, as offsets
 * from the dy pixel of its last window (tap (kh-1, kw-1)). */
static size_t window_taps_t(const ps_k_conv *p, size_t *go, size_t *wo) {
    size_t n = 0;
    for (size_t ky = 0; ky < p->kh; ky++)
        for (size_t kx = 0; kx < p->kw; kx++) {
            go[n] = ((p->kh - 1 - ky) * p->ow + (p->kw - 1 - kx)) * p->c;
            wo[n++] = (ky * p->kw + kx) * p->c;
        }
    return n;
}

/* The output pixels whose windows read input cell (iy, ix): offsets into the
 * image's dy (pixel * c) and the kernel's taps ((ky * kw + kx) * c). */
static PS_INLINE size_t covering_taps(const ps_k_conv *p, size_t iy, size_t ix, size_t *go,
                                      size_t *wo) {
    size_t y0, y1, x0, x1, n = 0;
    ps_ew_windows_covering(iy, p->kh, p->sh, p->pad_top, p->oh, &y0, &y1);
    ps_ew_windows_covering(ix, p->kw, p->sw, p->pad_left, p->ow, &x0, &x1);
    for (size_t oy = y0; oy < y1; oy++)
        for (size_t ox = x0; ox < x1; ox++) {
            size_t ky = iy + p->pad_top - oy * p->sh, kx = ix + p->pad_left - ox * p->sw;
            go[n] = (oy * p->ow + ox) * p->c;
            wo[n++] = (ky * p->kw + kx) * p->c;
        }
    return n;
}

/* Multiplier > 1 (or a huge kernel), one output pixel: the taps in place. */
static PS_INLINE void dw_pixel_mult(const ps_k_conv *p, float *yo, const float *xi, const float *w,
                                    const float *b, size_t oy, size_t ox) {
    size_t C = p->c, CO = p->cout, ky0, ky1, kx0, kx1;
    ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
    ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
    if (b)
        memcpy(yo, b, CO * sizeof *yo);
    else
        memset(yo, 0, CO * sizeof *yo);
    for (size_t ky = ky0; ky < ky1; ky++)
        for (size_t kx = kx0; kx < kx1; kx++) {
            size_t iy = oy * p->sh + ky - p->pad_top, ix = ox * p->sw + kx - p->pad_left;
            madd_mult(yo, xi + (iy * p->w + ix) * C, w + (ky * p->kw + kx) * CO, C, CO / C);
        }
}

static PS_INLINE void dw_pixel_mult_backward(const ps_k_conv *p, float *dxi, float *dw,
                                             const float *g, const float *xi, const float *w,
                                             size_t oy, size_t ox) {
    size_t C = p->c, CO = p->cout, ky0, ky1, kx0, kx1;
    ps_ew_valid_taps(oy, p->sh, p->pad_top, p->kh, p->h, &ky0, &ky1);
    ps_ew_valid_taps(ox, p->sw, p->pad_left, p->kw, p->w, &kx0, &kx1);
    for (size_t ky = ky0; ky < ky1; ky++)
        for (size_t kx = kx0; kx < kx1; kx++) {
            size_t iy = oy * p->sh + ky - p->pad_top, ix = ox * p->sw + kx - p->pad_left;
            size_t cell = (iy * p->w + ix) * C, k = (ky * p->kw + kx) * CO;
            if (dw) madd_mult(dw + k, xi + cell, g, C, CO / C); /* dw += x * dy */
            if (dxi) madd_mult_t(dxi + cell, g, w + k, C, CO / C);
        }
}

PS_SIMD_CLONES
void ps__cpu_dwconv2d_forward_overwrite(const ps_k_conv *p, float *y, const float *x,
                                        const float *w, const float *b) {
    size_t C = p->c, CO = p->cout;
    bool listed = CO == C && p->kh * p->kw <= MAX_TAPS;
    size_t xw[MAX_TAPS], ww[MAX_TAPS], xo[MAX_TAPS], wo[MAX_TAPS];
    if (listed) window_taps(p, xw, ww);
    for (size_t img = 0; img < p->n; img++) {
        const float *xi = x + img * p->h * p->w * C;
        for (size_t oy = 0; oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++) {
                float *yo = y + ((img * p->oh + oy) * p->ow + ox) * CO;
                if (!listed) {
                    dw_pixel_mult(p, yo, xi, w, b, oy, ox);
                    continue;
                }
                taps t = pixel(p, xi, oy, ox, xw, ww, xo, wo);
                if (t.xo == xw && ox + 1 < p->ow && interior_x(p, ox + 1)) {
                    dw_pair(yo, t.xb, p->sw * C, w, b, C, xw, ww, t.nt);
                    ox++;
                    continue;
                }
                dw_pixel(yo, t.xb, w, b, C, t.xo, t.wo, t.nt);
            }
    }
}

PS_SIMD_CLONES
void ps__cpu_dwconv2d_backward_overwrite(const ps_k_conv *p, float *dx, float *dw, float *db,
                                         const float *dy, const float *x, const float *w) {
    size_t C = p->c, CO = p->cout;
    bool listed = CO == C && p->kh * p->kw <= MAX_TAPS;
    size_t xw[MAX_TAPS], ww[MAX_TAPS], xo[MAX_TAPS], wo[MAX_TAPS];
    if (listed) window_taps(p, xw, ww);
    size_t gt[MAX_TAPS], wt[MAX_TAPS];
    bool unit = p->sh == 1 && p->sw == 1; /* stride 1: interior cells share one tap list */
    if (listed && unit) window_taps_t(p, gt, wt);
    if (dw) memset(dw, 0, p->kh * p->kw * CO * sizeof *dw);
    if (db) memset(db, 0, CO * sizeof *db);
    bool walk = dw || db || !listed; /* the dy pass: dw, db, and dx when not listed */
    if (dx && !listed) memset(dx, 0, p->n * p->h * p->w * C * sizeof *dx);
    for (size_t img = 0; img < p->n; img++) {
        const float *xi = x + img * p->h * p->w * C, *gi = dy + img * p->oh * p->ow * CO;
        float *dxi = dx ? dx + img * p->h * p->w * C : NULL;
        for (size_t oy = 0; walk && oy < p->oh; oy++)
            for (size_t ox = 0; ox < p->ow; ox++) {
                const float *g = gi + (oy * p->ow + ox) * CO;
                if (db) madd_scalar(db, g, CO);
                if (!listed) {
                    dw_pixel_mult_backward(p, dxi, dw, g, xi, w, oy, ox);
                    continue;
                }
                if (!dw) continue;
                taps t = pixel(p, xi, oy, ox, xw, ww, xo, wo);
                if (t.xo == xw && ox + 1 < p->ow && interior_x(p, ox + 1)) {
                    if (db) madd_scalar(db, g + CO, CO);
                    dw_pair_backward(dw, g, g + CO, t.xb, p->sw * C, C, xw, ww, t.nt);
                    ox++;
                    continue;
                }
                dw_pixel_backward(NULL, dw, g, t.xb, w, C, t.xo, t.wo, t.nt);
            }
        if (!listed || !dxi) continue;
        /* dx of this image as a gather (while its dy is in cache): each input
         * cell sums dy * w over the windows that read it, in registers */
        for (size_t iy = 0; iy < p->h; iy++)
            for (size_t ix = 0; ix < p->w; ix++) {
                float *d = dxi + (iy * p->w + ix) * C;
                bool full = unit && iy + p->pad_top + 1 >= p->kh && iy + p->pad_top < p->oh &&
                            ix + p->pad_left + 1 >= p->kw && ix + p->pad_left < p->ow;
                if (full) { /* dy pixel of the last window (tap kh-1, kw-1) */
                    size_t last =
                        (iy + p->pad_top + 1 - p->kh) * p->ow + ix + p->pad_left + 1 - p->kw;
                    dw_pixel(d, gi + last * C, w, NULL, C, gt, wt, p->kh * p->kw);
                    continue;
                }
                size_t nt = covering_taps(p, iy, ix, xo, wo);
                dw_pixel(d, gi, w, NULL, C, xo, wo, nt);
            }
    }
}
