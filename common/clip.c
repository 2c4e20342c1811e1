/* Gradient clipping (see clip.h). Norms are summed in double in element order,
 * so the same gradients give the same factor everywhere; the scaling is one
 * float multiply per element. */
#include "clip.h"

#include <math.h>

static double sum_squares(const float *g, size_t len) {
    double s = 0;
    for (size_t i = 0; i < len; i++)
        s += (double)g[i] * g[i];
    return s;
}

static void scale(float *g, size_t len, float f) {
    for (size_t i = 0; i < len; i++)
        g[i] *= f;
}

double ps_clip_global_norm(const float *g, const ps_clip_range *r, size_t n) {
    double s = 0;
    for (size_t k = 0; k < n; k++)
        s += sum_squares(g + r[k].off, r[k].len);
    return sqrt(s);
}

void ps_clip_by_norm(float *g, const ps_clip_range *r, size_t n, float max_norm) {
    for (size_t k = 0; k < n; k++) {
        double norm = sqrt(sum_squares(g + r[k].off, r[k].len));
        if (isfinite(norm) && norm > max_norm) scale(g + r[k].off, r[k].len, (float)(max_norm / norm));
    }
}

double ps_clip_by_global_norm(float *g, const ps_clip_range *r, size_t n, float max_norm) {
    double norm = ps_clip_global_norm(g, r, n);
    if (isfinite(norm) && norm > max_norm) {
        float f = (float)(max_norm / norm);
        for (size_t k = 0; k < n; k++)
            scale(g + r[k].off, r[k].len, f);
    }
    return norm;
}

void ps_clip_by_value(float *g, const ps_clip_range *r, size_t n, float v) {
    for (size_t k = 0; k < n; k++) {
        float *p = g + r[k].off;
        for (size_t i = 0; i < r[k].len; i++)
            p[i] = p[i] > v ? v : p[i] < -v ? -v : p[i];
    }
}

int ps_clip_needed(const ps_opt_spec *s) {
    if (s->global_clipnorm > 0) return 2;
    return s->clipnorm > 0 || s->clipvalue > 0;
}

void ps_clip_apply(const ps_opt_spec *s, float *g, const ps_clip_range *r, size_t n) {
    if (s->clipnorm > 0)
        ps_clip_by_norm(g, r, n, s->clipnorm);
    else if (s->global_clipnorm > 0)
        ps_clip_by_global_norm(g, r, n, s->global_clipnorm);
    else if (s->clipvalue > 0)
        ps_clip_by_value(g, r, n, s->clipvalue);
}
