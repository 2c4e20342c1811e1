/* CPU backend of kernels/: the element-wise products of the Keras
 * applications networks (Multiply, the squeeze-and-excitation channel
 * product), Rescaling and Normalization, as loops over contiguous channel rows. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "simd.h"

PS_SIMD_CLONES
void ps__cpu_mul_forward_overwrite(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

/* Each element is read before either output is written: da or db may be dy. */
PS_SIMD_CLONES
void ps__cpu_mul_backward_overwrite(float *da, float *db, const float *dy, const float *a,
                                    const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = dy[i], ai = a[i], bi = b[i];
        if (da) da[i] = g * bi;
        if (db) db[i] = g * ai;
    }
}

PS_SIMD_CLONES
void ps__cpu_mul_channels_forward_overwrite(float *y, const float *x, const float *s, size_t n,
                                            size_t hw, size_t c) {
    for (size_t img = 0; img < n; img++) {
        const float *restrict si = s + img * c;
        for (size_t p = 0; p < hw; p++) {
            size_t o = (img * hw + p) * c;
            for (size_t j = 0; j < c; j++)
                y[o + j] = x[o + j] * si[j];
        }
    }
}

/* ds first (it reads dy), then dx, so that dx may be dy. */
PS_SIMD_CLONES
void ps__cpu_mul_channels_backward_overwrite(float *dx, float *ds, const float *dy, const float *x,
                                             const float *s, size_t n, size_t hw, size_t c) {
    for (size_t img = 0; img < n && ds; img++) {
        float *restrict d = ds + img * c;
        memset(d, 0, c * sizeof *d);
        for (size_t p = 0; p < hw; p++) {
            const float *restrict g = dy + (img * hw + p) * c, *restrict xr =
                                                                   x + (img * hw + p) * c;
            for (size_t j = 0; j < c; j++)
                d[j] += g[j] * xr[j];
        }
    }
    if (dx) ps__cpu_mul_channels_forward_overwrite(dx, dy, s, n, hw, c);
}

PS_SIMD_CLONES
void ps__cpu_rescale(float *y, const float *x, float scale, float offset, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * scale + offset;
}

/* The divisor of a channel, max(sqrt(var), eps), NaN kept (numpy's maximum). */
static PS_INLINE float norm_div(float var, float eps) {
    float s = sqrtf(var);
    return s < eps ? eps : s;
}

PS_SIMD_CLONES
void ps__cpu_norm(float *y, const float *x, const float *mean, const float *var, size_t n,
                  size_t c, float eps) {
    for (size_t r = 0; r < n; r++)
        for (size_t j = 0; j < c; j++)
            y[r * c + j] = (x[r * c + j] - (mean ? mean[j] : 0.0f)) / norm_div(var[j], eps);
}
