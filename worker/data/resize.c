/* Bilinear resizing with half-pixel centres (see resize.h). */
#include "resize.h"

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

void ps_resize_bilinear(const float *in, size_t h, size_t w, size_t c, float *out, size_t oh,
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
                float v00 = in[(y0 * w + x0) * c + k];
                float v01 = in[(y0 * w + x1) * c + k];
                float v10 = in[(y1 * w + x0) * c + k];
                float v11 = in[(y1 * w + x1) * c + k];
                float top = v00 + (v01 - v00) * fx, bot = v10 + (v11 - v10) * fx;
                out[(y * ow + x) * c + k] = top + (bot - top) * fy;
            }
        }
    }
}
