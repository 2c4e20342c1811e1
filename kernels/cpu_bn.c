/* CPU backend of kernels/: batch normalization over x[rows, c] (NHWC images
 * flattened to rows = n*h*w). Each direction reads the data twice: once for
 * the per-channel sums, once to write the output. The loops run rows outer,
 * channels inner (the contiguous dimension), so the channel loops vectorise;
 * channels go in blocks of CB so that the per-channel constants and
 * accumulators live on the stack (the backend cannot fail). */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "simd.h"

#define CB 256 /* channels per block */

/* Rows summed in float before their partial sums go into the double totals:
 * a float sum over all the rows (2^16 and more in a MobileNet's first layers)
 * drifted by ~1e-5 relative and more (1.5e-3 on the variance over 2^20 rows),
 * which training amplifies; blocks keep the inner loops in float vectors. */
#define ROW_BLOCK 32

/* Per-channel sums over the rows of x[:, c0 .. c0+cb) (row stride ld) of
 * x - shift (the batch's first row: sums of values near the mean keep the
 * variance from cancelling) and of its square: float within blocks of
 * ROW_BLOCK rows, double across them. */
static PS_INLINE void shifted_sums(const float *restrict x, size_t rows, size_t ld, size_t cb,
                                   const float *restrict shift, double *restrict s1,
                                   double *restrict s2) {
    float t1[CB], t2[CB];
    memset(s1, 0, cb * sizeof *s1);
    memset(s2, 0, cb * sizeof *s2);
    for (size_t r0 = 0; r0 < rows; r0 += ROW_BLOCK) {
        size_t r1 = rows - r0 < ROW_BLOCK ? rows : r0 + ROW_BLOCK;
        memset(t1, 0, cb * sizeof *t1);
        memset(t2, 0, cb * sizeof *t2);
        for (size_t r = r0; r < r1; r++) {
            const float *restrict xr = x + r * ld;
            for (size_t j = 0; j < cb; j++) {
                float v = xr[j] - shift[j];
                t1[j] += v;
                t2[j] += v * v;
            }
        }
        for (size_t j = 0; j < cb; j++) {
            s1[j] += t1[j];
            s2[j] += t2[j];
        }
    }
}

/* y = (x - mean) * a + b per channel, over rows of a channel block. */
static PS_INLINE void normalize(float *y, const float *x, size_t rows, size_t ld, size_t cb,
                                const float *restrict mean, const float *restrict a,
                                const float *restrict b) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        float *yr = y + r * ld;
        for (size_t j = 0; j < cb; j++)
            yr[j] = (xr[j] - mean[j]) * a[j] + b[j];
    }
}

/* a = gamma / sqrt(var + eps), b = beta (gamma 1 and beta 0 when NULL). */
static PS_INLINE void scale_shift(size_t cb, const float *var, const float *gamma,
                                  const float *beta, float eps, float *a, float *b) {
    for (size_t j = 0; j < cb; j++) {
        a[j] = (gamma ? gamma[j] : 1.0f) / sqrtf(var[j] + eps);
        b[j] = beta ? beta[j] : 0.0f;
    }
}

PS_SIMD_CLONES
void ps__cpu_bn_forward_train_overwrite(float *y, float *mean, float *var, const float *x,
                                        const float *gamma, const float *beta, size_t rows,
                                        size_t c, float eps) {
    double s1[CB], s2[CB];
    float a[CB], b[CB];
    double n = (double)rows;
    if (rows == 0) { /* no statistics: report 0 (and write nothing else) */
        memset(mean, 0, c * sizeof *mean);
        memset(var, 0, c * sizeof *var);
        return;
    }
    for (size_t c0 = 0; c0 < c; c0 += CB) {
        size_t cb = c - c0 < CB ? c - c0 : CB;
        float *m = mean + c0, *v = var + c0;
        memcpy(m, x + c0, cb * sizeof *m); /* the shift, then the mean */
        shifted_sums(x + c0, rows, c, cb, m, s1, s2);
        for (size_t j = 0; j < cb; j++) {
            double d = s1[j] / n; /* mean - shift */
            double vj = s2[j] / n - d * d;
            m[j] = (float)(m[j] + d);
            v[j] = vj > 0.0 ? (float)vj : 0.0f;
        }
        scale_shift(cb, v, gamma ? gamma + c0 : NULL, beta ? beta + c0 : NULL, eps, a, b);
        normalize(y + c0, x + c0, rows, c, cb, m, a, b);
    }
}

PS_SIMD_CLONES
void ps__cpu_bn_forward_infer_overwrite(float *y, const float *x, const float *mean,
                                        const float *var, const float *gamma, const float *beta,
                                        size_t rows, size_t c, float eps) {
    float a[CB], b[CB];
    for (size_t c0 = 0; c0 < c; c0 += CB) {
        size_t cb = c - c0 < CB ? c - c0 : CB;
        scale_shift(cb, var + c0, gamma ? gamma + c0 : NULL, beta ? beta + c0 : NULL, eps, a, b);
        normalize(y + c0, x + c0, rows, c, cb, mean + c0, a, b);
    }
}

/* Sums over the rows of a channel block of dy and of dy (x - mean): float
 * within blocks of ROW_BLOCK rows, double across them. */
static PS_INLINE void grad_sums(const float *restrict dy, const float *restrict x, size_t rows,
                                size_t ld, size_t cb, const float *restrict mean,
                                double *restrict sdy, double *restrict sdyx) {
    float t1[CB], t2[CB];
    memset(sdy, 0, cb * sizeof *sdy);
    memset(sdyx, 0, cb * sizeof *sdyx);
    for (size_t r0 = 0; r0 < rows; r0 += ROW_BLOCK) {
        size_t r1 = rows - r0 < ROW_BLOCK ? rows : r0 + ROW_BLOCK;
        memset(t1, 0, cb * sizeof *t1);
        memset(t2, 0, cb * sizeof *t2);
        for (size_t r = r0; r < r1; r++) {
            const float *restrict g = dy + r * ld, *restrict xr = x + r * ld;
            for (size_t j = 0; j < cb; j++) {
                t1[j] += g[j];
                t2[j] += g[j] * (xr[j] - mean[j]);
            }
        }
        for (size_t j = 0; j < cb; j++) {
            sdy[j] += t1[j];
            sdyx[j] += t2[j];
        }
    }
}

/* With xhat = (x - mean) s, s = 1 / sqrt(var + eps), N = rows:
 *   dbeta = sum dy, dgamma = sum dy xhat,
 *   dx = gamma s (dy - dbeta / N - xhat dgamma / N)
 *      = k1 dy + k2 (x - mean) + k3,
 * k1 = gamma s, k2 = -gamma s^2 dgamma / N, k3 = -gamma s dbeta / N. */
PS_SIMD_CLONES
void ps__cpu_bn_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                   const float *x, const float *mean, const float *var,
                                   const float *gamma, size_t rows, size_t c, float eps) {
    double sdy[CB], sdyx[CB];
    float k1[CB], k2[CB], k3[CB];
    float n = (float)rows;
    for (size_t c0 = 0; c0 < c; c0 += CB) {
        size_t cb = c - c0 < CB ? c - c0 : CB;
        const float *m = mean + c0;
        grad_sums(dy + c0, x + c0, rows, c, cb, m, sdy, sdyx);
        for (size_t j = 0; j < cb; j++) {
            float s = 1.0f / sqrtf(var[c0 + j] + eps), g = gamma ? gamma[c0 + j] : 1.0f;
            float dg = (float)(sdyx[j] * s);
            if (dgamma) dgamma[c0 + j] = dg;
            if (dbeta) dbeta[c0 + j] = (float)sdy[j];
            k1[j] = g * s;
            k2[j] = -g * s * s * dg / n;
            k3[j] = (float)(-g * s * sdy[j] / n);
        }
        if (!dx) continue;
        for (size_t r = 0; r < rows; r++) {
            const float *restrict gr = dy + r * c + c0, *restrict xr = x + r * c + c0;
            float *restrict dr = dx + r * c + c0;
            for (size_t j = 0; j < cb; j++)
                dr[j] = k1[j] * gr[j] + k2[j] * (xr[j] - m[j]) + k3[j];
        }
    }
}
