/* CPU backend of kernels/: the shape ops of NHWC tensors (global average
 * pooling, zero padding, element-wise add, channel concatenation and their
 * adjoints), as loops and copies over contiguous channel rows. */
#include <string.h>

#include "backend.h"
#include "simd.h"

PS_SIMD_CLONES
void ps__cpu_gap_forward_overwrite(float *y, const float *x, size_t n, size_t hw, size_t c) {
    float inv = 1.0f / (float)hw;
    for (size_t img = 0; img < n; img++) {
        float *restrict yo = y + img * c;
        const float *xi = x + img * hw * c;
        memset(yo, 0, c * sizeof *yo);
        for (size_t i = 0; i < hw; i++) {
            const float *restrict xr = xi + i * c;
            for (size_t j = 0; j < c; j++)
                yo[j] += xr[j];
        }
        for (size_t j = 0; j < c; j++)
            yo[j] *= inv;
    }
}

PS_SIMD_CLONES
void ps__cpu_gap_backward_overwrite(float *dx, const float *dy, size_t n, size_t hw, size_t c) {
    float inv = 1.0f / (float)hw;
    for (size_t img = 0; img < n; img++) {
        const float *restrict g = dy + img * c;
        for (size_t i = 0; i < hw; i++) {
            float *restrict d = dx + (img * hw + i) * c;
            for (size_t j = 0; j < c; j++)
                d[j] = g[j] * inv;
        }
    }
}

/* x goes into the (top, left) window of the zeroed y, one image row a copy. */
void ps__cpu_pad2d_forward_overwrite(float *y, const float *x, size_t n, size_t h, size_t w,
                                     size_t c, size_t top, size_t bottom, size_t left,
                                     size_t right) {
    size_t ph = h + top + bottom, pw = w + left + right;
    memset(y, 0, n * ph * pw * c * sizeof *y);
    for (size_t img = 0; img < n; img++)
        for (size_t iy = 0; iy < h; iy++)
            memcpy(y + ((img * ph + iy + top) * pw + left) * c, x + (img * h + iy) * w * c,
                   w * c * sizeof *y);
}

/* The crop: each image row of dx is a copy of part of a row of dy. */
void ps__cpu_pad2d_backward_overwrite(float *dx, const float *dy, size_t n, size_t h, size_t w,
                                      size_t c, size_t top, size_t bottom, size_t left,
                                      size_t right) {
    size_t ph = h + top + bottom, pw = w + left + right;
    for (size_t img = 0; img < n; img++)
        for (size_t iy = 0; iy < h; iy++)
            memcpy(dx + (img * h + iy) * w * c, dy + ((img * ph + iy + top) * pw + left) * c,
                   w * c * sizeof *dx);
}

PS_SIMD_CLONES
void ps__cpu_add_overwrite(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

PS_SIMD_CLONES
void ps__cpu_add_acc(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void ps__cpu_concat_cols_overwrite(float *y, const float *x, size_t rows, size_t c_total,
                                   size_t c_off, size_t c_x) {
    for (size_t r = 0; r < rows; r++)
        memcpy(y + r * c_total + c_off, x + r * c_x, c_x * sizeof *y);
}

void ps__cpu_split_cols_overwrite(float *dx, const float *dy, size_t rows, size_t c_total,
                                  size_t c_off, size_t c_x) {
    for (size_t r = 0; r < rows; r++)
        memcpy(dx + r * c_x, dy + r * c_total + c_off, c_x * sizeof *dx);
}
