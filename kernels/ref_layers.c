/* Reference kernels (see ref.h) for batch normalization, depthwise
 * convolution and the shape ops: the definitions as naive loops in double,
 * written independently of ew.h and of the CPU backend's rearranged formulas. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

static double *dzeros(size_t n) {
    double *a = calloc(n ? n : 1, sizeof *a);
    if (!a) abort(); /* test-only code */
    return a;
}

/* ---- batch normalization ---------------------------------------------------- */

void ps_ref_bn_forward_train_overwrite(float *y, float *mean, float *var, const float *x,
                                       const float *gamma, const float *beta, size_t rows, size_t c,
                                       float eps) {
    for (size_t j = 0; j < c; j++) {
        double mu = 0, v = 0;
        for (size_t r = 0; r < rows; r++)
            mu += x[r * c + j];
        mu /= (double)rows;
        for (size_t r = 0; r < rows; r++)
            v += (x[r * c + j] - mu) * (x[r * c + j] - mu);
        v /= (double)rows; /* biased: divided by N */
        double g = gamma ? gamma[j] : 1.0, b = beta ? beta[j] : 0.0;
        for (size_t r = 0; r < rows; r++)
            y[r * c + j] = (float)(g * (x[r * c + j] - mu) / sqrt(v + eps) + b);
        mean[j] = (float)mu;
        var[j] = (float)v;
    }
}

void ps_ref_bn_forward_infer_overwrite(float *y, const float *x, const float *mean,
                                       const float *var, const float *gamma, const float *beta,
                                       size_t rows, size_t c, float eps) {
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < c; j++) {
            double g = gamma ? gamma[j] : 1.0, b = beta ? beta[j] : 0.0;
            y[r * c + j] =
                (float)(g * ((double)x[r * c + j] - mean[j]) / sqrt((double)var[j] + eps) + b);
        }
}

/* The chain rule as in Ioffe and Szegedy (2015), per channel:
 * dxhat = dy gamma; dvar = sum dxhat (x - mu) (-1/2) (var + eps)^(-3/2);
 * dmu = -sum dxhat / sqrt(var + eps) + dvar sum (-2 (x - mu)) / N;
 * dx = dxhat / sqrt(var + eps) + dvar 2 (x - mu) / N + dmu / N. */
void ps_ref_bn_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                  const float *x, const float *mean, const float *var,
                                  const float *gamma, size_t rows, size_t c, float eps) {
    double N = (double)rows;
    for (size_t j = 0; j < c; j++) {
        double mu = mean[j], ve = (double)var[j] + eps, sd = sqrt(ve), g = gamma ? gamma[j] : 1.0;
        double dvar = 0, dmu = 0, sxm = 0, dg = 0, db = 0;
        for (size_t r = 0; r < rows; r++) {
            double xm = x[r * c + j] - mu, gy = dy[r * c + j];
            dvar += gy * g * xm * -0.5 * pow(ve, -1.5);
            dmu += -gy * g / sd;
            sxm += -2.0 * xm;
            dg += gy * xm / sd;
            db += gy;
        }
        dmu += dvar * sxm / N;
        for (size_t r = 0; r < rows; r++) {
            double xm = x[r * c + j] - mu, gy = dy[r * c + j];
            dx[r * c + j] = (float)(gy * g / sd + dvar * 2.0 * xm / N + dmu / N);
        }
        if (dgamma) dgamma[j] = (float)dg;
        if (dbeta) dbeta[j] = (float)db;
    }
}

/* ---- depthwise convolution ----------------------------------------------------- */

/* The input row (column) of output o and tap k, possibly in the padding. */
static long tap(size_t o, size_t s, size_t k, size_t pad) {
    return (long)(o * s + k) - (long)pad;
}

/* Index of x[img, iy, ix, ci], or -1 in the padding. */
static long cell(const ps_k_conv *p, size_t img, long iy, long ix, size_t ci) {
    if (iy < 0 || ix < 0 || iy >= (long)p->h || ix >= (long)p->w) return -1;
    return (long)(((img * p->h + (size_t)iy) * p->w + (size_t)ix) * p->c + ci);
}

/* Calls body(o, i, k) for every output index o, input index i (>= 0) and
 * kernel index k that meet in a product of the depthwise sum. */
#define DW_FOR_EACH(p, body)                                                                       \
    do {                                                                                           \
        size_t mult_ = (p)->cout / (p)->c;                                                         \
        for (size_t img = 0; img < (p)->n; img++)                                                  \
            for (size_t oy = 0; oy < (p)->oh; oy++)                                                \
                for (size_t ox = 0; ox < (p)->ow; ox++)                                            \
                    for (size_t ci = 0; ci < (p)->c; ci++)                                         \
                        for (size_t m = 0; m < mult_; m++)                                         \
                            for (size_t ky = 0; ky < (p)->kh; ky++)                                \
                                for (size_t kx = 0; kx < (p)->kw; kx++) {                          \
                                    size_t co = ci * mult_ + m;                                    \
                                    size_t o =                                                     \
                                        ((img * (p)->oh + oy) * (p)->ow + ox) * (p)->cout + co;    \
                                    long i = cell(p, img, tap(oy, (p)->sh, ky, (p)->pad_top),      \
                                                  tap(ox, (p)->sw, kx, (p)->pad_left), ci);        \
                                    size_t k = ((ky * (p)->kw + kx) * (p)->c + ci) * mult_ + m;    \
                                    if (i >= 0) body;                                              \
                                }                                                                  \
    } while (0)

void ps_ref_dwconv2d_forward_overwrite(const ps_k_conv *p, float *y, const float *x, const float *w,
                                       const float *b) {
    size_t ny = p->n * p->oh * p->ow * p->cout;
    double *acc = dzeros(ny);
    for (size_t o = 0; o < ny; o++)
        acc[o] = b ? b[o % p->cout] : 0.0;
    DW_FOR_EACH(p, acc[o] += (double)x[i] * w[k]);
    for (size_t o = 0; o < ny; o++)
        y[o] = (float)acc[o];
    free(acc);
}

void ps_ref_dwconv2d_backward_overwrite(const ps_k_conv *p, float *dx, float *dw, float *db,
                                        const float *dy, const float *x, const float *w) {
    size_t nx = p->n * p->h * p->w * p->c, nw = p->kh * p->kw * p->cout;
    size_t ny = p->n * p->oh * p->ow * p->cout;
    double *gx = dzeros(nx), *gw = dzeros(nw), *gb = dzeros(p->cout);
    DW_FOR_EACH(p, (gx[i] += (double)dy[o] * w[k], gw[k] += (double)dy[o] * x[i]));
    for (size_t o = 0; o < ny; o++)
        gb[o % p->cout] += dy[o];
    for (size_t i = 0; i < nw; i++)
        dw[i] = (float)gw[i];
    if (db)
        for (size_t i = 0; i < p->cout; i++)
            db[i] = (float)gb[i];
    if (dx)
        for (size_t i = 0; i < nx; i++)
            dx[i] = (float)gx[i];
    free(gx), free(gw), free(gb);
}

/* ---- shape ops ------------------------------------------------------------- */

void ps_ref_gap_forward_overwrite(float *y, const float *x, size_t n, size_t hw, size_t c) {
    for (size_t img = 0; img < n; img++)
        for (size_t j = 0; j < c; j++) {
            double s = 0;
            for (size_t i = 0; i < hw; i++)
                s += x[(img * hw + i) * c + j];
            y[img * c + j] = (float)(s / (double)hw);
        }
}

void ps_ref_gap_backward_overwrite(float *dx, const float *dy, size_t n, size_t hw, size_t c) {
    for (size_t img = 0; img < n; img++)
        for (size_t i = 0; i < hw; i++)
            for (size_t j = 0; j < c; j++)
                dx[(img * hw + i) * c + j] = (float)((double)dy[img * c + j] / (double)hw);
}

/* Whether padded cell (py, px) holds an input cell, and which. */
static bool unpadded(size_t py, size_t px, size_t h, size_t w, size_t top, size_t left, size_t *iy,
                     size_t *ix) {
    if (py < top || px < left || py - top >= h || px - left >= w) return false;
    *iy = py - top, *ix = px - left;
    return true;
}

void ps_ref_pad2d_forward_overwrite(float *y, const float *x, size_t n, size_t h, size_t w,
                                    size_t c, size_t top, size_t bottom, size_t left,
                                    size_t right) {
    size_t ph = h + top + bottom, pw = w + left + right, iy, ix;
    for (size_t img = 0; img < n; img++)
        for (size_t py = 0; py < ph; py++)
            for (size_t px = 0; px < pw; px++)
                for (size_t j = 0; j < c; j++)
                    y[((img * ph + py) * pw + px) * c + j] =
                        unpadded(py, px, h, w, top, left, &iy, &ix)
                            ? x[((img * h + iy) * w + ix) * c + j]
                            : 0.0f;
}

void ps_ref_pad2d_backward_overwrite(float *dx, const float *dy, size_t n, size_t h, size_t w,
                                     size_t c, size_t top, size_t bottom, size_t left,
                                     size_t right) {
    size_t ph = h + top + bottom, pw = w + left + right, iy, ix;
    for (size_t img = 0; img < n; img++)
        for (size_t py = 0; py < ph; py++)
            for (size_t px = 0; px < pw; px++)
                for (size_t j = 0; j < c; j++)
                    if (unpadded(py, px, h, w, top, left, &iy, &ix))
                        dx[((img * h + iy) * w + ix) * c + j] =
                            dy[((img * ph + py) * pw + px) * c + j];
}

void ps_ref_add_overwrite(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)a[i] + b[i]);
}

void ps_ref_add_acc(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)y[i] + x[i]);
}

void ps_ref_concat_cols_overwrite(float *y, const float *x, size_t rows, size_t c_total,
                                  size_t c_off, size_t c_x) {
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < c_x; j++)
            y[r * c_total + c_off + j] = x[r * c_x + j];
}

void ps_ref_split_cols_overwrite(float *dx, const float *dy, size_t rows, size_t c_total,
                                 size_t c_off, size_t c_x) {
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < c_x; j++)
            dx[r * c_x + j] = dy[r * c_total + c_off + j];
}

/* ---- Keras applications layers ---------------------------------------------- */

void ps_ref_mul_forward_overwrite(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)a[i] * b[i]);
}

void ps_ref_mul_backward_overwrite(float *da, float *db, const float *dy, const float *a,
                                   const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = dy[i], ai = a[i], bi = b[i];
        if (da) da[i] = (float)(g * bi);
        if (db) db[i] = (float)(g * ai);
    }
}

void ps_ref_mul_channels_forward_overwrite(float *y, const float *x, const float *s, size_t n,
                                           size_t hw, size_t c) {
    for (size_t img = 0; img < n; img++)
        for (size_t p = 0; p < hw; p++)
            for (size_t j = 0; j < c; j++) {
                size_t i = (img * hw + p) * c + j;
                y[i] = (float)((double)x[i] * s[img * c + j]);
            }
}

void ps_ref_mul_channels_backward_overwrite(float *dx, float *ds, const float *dy, const float *x,
                                            const float *s, size_t n, size_t hw, size_t c) {
    for (size_t img = 0; img < n; img++)
        for (size_t j = 0; j < c; j++) {
            double acc = 0;
            for (size_t p = 0; p < hw; p++) {
                size_t i = (img * hw + p) * c + j;
                acc += (double)dy[i] * x[i];
                if (dx) dx[i] = (float)((double)dy[i] * s[img * c + j]);
            }
            if (ds) ds[img * c + j] = (float)acc;
        }
}

void ps_ref_rescale_forward_overwrite(float *y, const float *x, float scale, float offset,
                                      size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = (float)((double)x[i] * scale + offset);
}

void ps_ref_rescale_backward_overwrite(float *dx, const float *dy, float scale, size_t n) {
    for (size_t i = 0; i < n; i++)
        dx[i] = (float)((double)dy[i] * scale);
}

/* Keras computes the divisor in float32: sqrt(var) rounded to float, then the
 * maximum with eps. */
static double norm_divisor(float var, float eps) {
    float s = (float)sqrt((double)var);
    return isnan(s) || s >= eps ? (double)s : (double)eps;
}

void ps_ref_norm_forward_overwrite(float *y, const float *x, const float *mean, const float *var,
                                   size_t n, size_t c, float eps) {
    for (size_t r = 0; r < n; r++)
        for (size_t j = 0; j < c; j++)
            y[r * c + j] = (float)(((double)x[r * c + j] - mean[j]) / norm_divisor(var[j], eps));
}

void ps_ref_norm_backward_overwrite(float *dx, const float *dy, const float *var, size_t n,
                                    size_t c, float eps) {
    for (size_t r = 0; r < n; r++)
        for (size_t j = 0; j < c; j++)
            dx[r * c + j] = (float)((double)dy[r * c + j] / norm_divisor(var[j], eps));
}

/* Whether cell (iy, ix) of the uncropped image is inside the kept window. */
static bool kept(size_t iy, size_t ix, size_t h, size_t w, size_t top, size_t bottom, size_t left,
                 size_t right) {
    return iy >= top && iy < h - bottom && ix >= left && ix < w - right;
}

void ps_ref_crop2d_forward_overwrite(float *y, const float *x, size_t n, size_t h, size_t w,
                                     size_t c, size_t top, size_t bottom, size_t left,
                                     size_t right) {
    size_t oh = h - top - bottom, ow = w - left - right;
    for (size_t img = 0; img < n; img++)
        for (size_t iy = 0; iy < h; iy++)
            for (size_t ix = 0; ix < w; ix++)
                for (size_t j = 0; j < c; j++)
                    if (kept(iy, ix, h, w, top, bottom, left, right))
                        y[((img * oh + iy - top) * ow + ix - left) * c + j] =
                            x[((img * h + iy) * w + ix) * c + j];
}

void ps_ref_crop2d_backward_overwrite(float *dx, const float *dy, size_t n, size_t h, size_t w,
                                      size_t c, size_t top, size_t bottom, size_t left,
                                      size_t right) {
    size_t oh = h - top - bottom, ow = w - left - right;
    for (size_t img = 0; img < n; img++)
        for (size_t iy = 0; iy < h; iy++)
            for (size_t ix = 0; ix < w; ix++)
                for (size_t j = 0; j < c; j++)
                    dx[((img * h + iy) * w + ix) * c + j] =
                        kept(iy, ix, h, w, top, bottom, left, right)
                            ? dy[((img * oh + iy - top) * ow + ix - left) * c + j]
                            : 0.0f;
}

void ps_ref_ln_forward_overwrite(float *y, float *mean, float *rstd, const float *x,
                                 const float *gamma, const float *beta, size_t rows, size_t c,
                                 float eps) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * c;
        double mu = 0, v = 0;
        for (size_t j = 0; j < c; j++)
            mu += xr[j];
        mu /= (double)c;
        for (size_t j = 0; j < c; j++)
            v += (xr[j] - mu) * (xr[j] - mu);
        v /= (double)c; /* biased */
        double rs = 1.0 / sqrt(v + eps);
        for (size_t j = 0; j < c; j++)
            y[r * c + j] =
                (float)((xr[j] - mu) * rs * (gamma ? gamma[j] : 1.0) + (beta ? beta[j] : 0.0));
        mean[r] = (float)mu;
        rstd[r] = (float)rs;
    }
}

/* The chain rule through the row's mean and variance, written as for batch
 * norm (ps_ref_bn_backward_overwrite) with the roles of rows and channels
 * swapped: dxhat = dy gamma; dvar = sum dxhat (x - mu) (-1/2) rstd^3;
 * dmu = -sum dxhat rstd + dvar sum (-2 (x - mu)) / C;
 * dx = dxhat rstd + dvar 2 (x - mu) / C + dmu / C. */
void ps_ref_ln_backward_overwrite(float *dx, float *dgamma, float *dbeta, const float *dy,
                                  const float *x, const float *mean, const float *rstd,
                                  const float *gamma, size_t rows, size_t c) {
    double C = (double)c, *dg = dzeros(c), *db = dzeros(c);
    for (size_t r = 0; r < rows; r++) {
        double mu = mean[r], rs = rstd[r], dvar = 0, dmu = 0, sxm = 0;
        for (size_t j = 0; j < c; j++) {
            double xm = x[r * c + j] - mu, gy = dy[r * c + j], gx = gy * (gamma ? gamma[j] : 1.0);
            dvar += gx * xm * -0.5 * rs * rs * rs;
            dmu += -gx * rs;
            sxm += -2.0 * xm;
            dg[j] += gy * xm * rs;
            db[j] += gy;
        }
        dmu += dvar * sxm / C;
        for (size_t j = 0; j < c; j++) {
            double xm = x[r * c + j] - mu, gx = dy[r * c + j] * (gamma ? gamma[j] : 1.0);
            dx[r * c + j] = (float)(gx * rs + dvar * 2.0 * xm / C + dmu / C);
        }
    }
    for (size_t j = 0; j < c; j++) {
        if (dgamma) dgamma[j] = (float)dg[j];
        if (dbeta) dbeta[j] = (float)db[j];
    }
    free(dg), free(db);
}
