/* Bilinear resizing with half-pixel centres (see resize.h). */
#include "resize.h"

#include <assert.h>
#include <math.h>

/* Source coordinate of output index o along an axis (half-pixel centres),
 * split into the two neighbours and the weight of the second. */
static void bilinear_axis(size_t o, size_t in, size_t out, size_t *a, size_t *b, float *f) {
    double s = ((double)o + 0.5) * (double)in / (double)out - 0.5;
    if (s < 0) s = 0;
    size_t lo = (size_t)floor(s);
    if (lo >= in - 1) {
        *a = *b = in - 1;
        *f = 0;
        return;
    }
    *a = lo;
    *b = lo + 1;
    *f = (float)(s - (double)lo);
}

/* Columns whose neighbours and weights are worked out at once, then used on
 * every row. */
#define CHUNK 256
#define MAX_C 4 /* channels the row cache below takes; more go pixel by pixel */

/* One input row's run of n columns interpolated horizontally: TensorFlow's
 * "top" (or "bottom") values, top_left + (top_right - top_left) * x_lerp. */
static inline __attribute__((always_inline)) void hrow(const float *r, size_t c,
                                                       const size_t *xa, const size_t *xb,
                                                       const float *fx, size_t n, float *o) {
    for (size_t i = 0; i < n; i++) {
        const float *p0 = r + xa[i] * c, *p1 = r + xb[i] * c;
        for (size_t k = 0; k < c; k++) o[i * c + k] = p0[k] + (p1[k] - p0[k]) * fx[i];
    }
}

/* Input row y horizontally interpolated, from the two-row cache or made in the
 * slot that does not hold `keep`. */
static const float *cached_row(const float *in, size_t w, size_t c, size_t y, size_t keep,
                               float rows[2][CHUNK * MAX_C], size_t id[2], const size_t *xa,
                               const size_t *xb, const float *fx, size_t n) {
    for (int s = 0; s < 2; s++)
        if (id[s] == y) return rows[s];
    int s = id[0] == keep ? 1 : 0;
    if (c == 3) /* the channel loop known to the compiler in the common cases */
        hrow(in + y * w * 3, 3, xa, xb, fx, n, rows[s]);
    else if (c == 1)
        hrow(in + y * w, 1, xa, xb, fx, n, rows[s]);
    else
        hrow(in + y * w * c, c, xa, xb, fx, n, rows[s]);
    id[s] = y;
    return rows[s];
}

/* The pixel-by-pixel form, for many channels. */
static void resize_pixels(const float *in, size_t h, size_t w, size_t c, float *out, size_t oh,
                          size_t ow) {
    for (size_t y = 0; y < oh; y++) {
        size_t y0, y1;
        float fy;
        bilinear_axis(y, h, oh, &y0, &y1, &fy);
        for (size_t x = 0; x < ow; x++) {
            size_t x0, x1;
            float fx;
            bilinear_axis(x, w, ow, &x0, &x1, &fx);
            for (size_t k = 0; k < c; k++) {
                float v00 = in[(y0 * w + x0) * c + k], v01 = in[(y0 * w + x1) * c + k];
                float v10 = in[(y1 * w + x0) * c + k], v11 = in[(y1 * w + x1) * c + k];
                float top = v00 + (v01 - v00) * fx, bot = v10 + (v11 - v10) * fx;
                out[(y * ow + x) * c + k] = top + (bot - top) * fy;
            }
        }
    }
}

/* Rows first: each input row a chunk needs is interpolated horizontally once
 * (consecutive output rows share them), then each output row is a contiguous
 * blend of two such rows, top + (bottom - top) * y_lerp: the same arithmetic as
 * TensorFlow's per pixel, so the same values. */
void ps_resize_bilinear(const float *in, size_t h, size_t w, size_t c, float *out, size_t oh,
                        size_t ow) {
    if (c > MAX_C) {
        resize_pixels(in, h, w, c, out, oh, ow);
        return;
    }
    size_t xa[CHUNK], xb[CHUNK];
    float fx[CHUNK];
    static_assert(sizeof(float[2][CHUNK * MAX_C]) <= 8192, "two cached rows on the stack");
    float rows[2][CHUNK * MAX_C];
    for (size_t x0 = 0; x0 < ow; x0 += CHUNK) {
        size_t n = ow - x0 < CHUNK ? ow - x0 : CHUNK, id[2] = {(size_t)-1, (size_t)-1};
        for (size_t i = 0; i < n; i++) bilinear_axis(x0 + i, w, ow, &xa[i], &xb[i], &fx[i]);
        for (size_t y = 0; y < oh; y++) {
            size_t y0, y1;
            float fy;
            bilinear_axis(y, h, oh, &y0, &y1, &fy);
            const float *top = cached_row(in, w, c, y0, y1, rows, id, xa, xb, fx, n);
            const float *bot = cached_row(in, w, c, y1, y0, rows, id, xa, xb, fx, n);
            float *o = out + (y * ow + x0) * c;
            for (size_t j = 0; j < n * c; j++) o[j] = top[j] + (bot[j] - top[j]) * fy;
        }
    }
}
