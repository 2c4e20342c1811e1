/* CPU backend of kernels/: layer normalization over the channels of each row
 * of x[rows, c]. A row is contiguous, so the statistics are two passes over
 * it (the mean, then the squared deviations: no cancellation); the gamma and
 * beta gradients are column sums, accumulated row by row. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "simd.h"

PS_SIMD_CLONES
void ps__cpu_ln_forward_overwrite(float *y, float *mean, float *rstd, const float *x,
                                  const float *gamma, const float *beta, size_t rows, size_t c,
                                  float eps) {
    if (c == 0) return;
    for (size_t r = 0; r < rows; r++) {
        const float *restrict xr = x + r * c;
        float *restrict yr = y + r * c;
        float s = 0.0f, q = 0.0f;
        for (size_t j = 0; j < c; j++)
            s += xr[j];
        float mu = s / (float)c;
        for (size_t j = 0; j < c; j++)
            q += (xr[j] - mu) * (xr[j] - mu);
        float rs = 1.0f / sqrtf(q / (float)c + eps);
        mean[r] = mu, rstd[r] = rs;
        for (size_t j = 0; j < c; j++) {
            float v = (xr[j] - mu) * rs;
            yr[j] = v * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
        }
    }
}

/* Per row: a = mean of g = dy gamma, b = mean of g xhat, then
 * dx = rstd (g - a - xhat b); dgamma and dbeta add each row's dy xhat, dy. */
PS_SIMD_CLONES
void ps__cpu_ln_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                   const float *x, const float *mean, const float *rstd,
                                   const float *gamma, size_t rows, size_t c) {
    if (dgamma) memset(dgamma, 0, c * sizeof *dgamma);
    if (dbeta) memset(dbeta, 0, c * sizeof *dbeta);
    if (c == 0) return;
    for (size_t r = 0; r < rows; r++) {
        const float *restrict g = dy + r * c, *restrict xr = x + r * c;
        float *restrict dr = dx + r * c;
        float mu = mean[r], rs = rstd[r], a = 0.0f, b = 0.0f;
        for (size_t j = 0; j < c; j++) {
            float gj = g[j] * (gamma ? gamma[j] : 1.0f);
            a += gj;
            b += gj * (xr[j] - mu) * rs;
        }
        a /= (float)c, b /= (float)c;
        for (size_t j = 0; j < c; j++) {
            float xh = (xr[j] - mu) * rs;
            dr[j] = rs * (g[j] * (gamma ? gamma[j] : 1.0f) - a - xh * b);
        }
        if (dgamma)
            for (size_t j = 0; j < c; j++)
                dgamma[j] += g[j] * (xr[j] - mu) * rs;
        if (dbeta)
            for (size_t j = 0; j < c; j++)
                dbeta[j] += g[j];
    }
}
