/* Dynamic loss scaling (see loss_scale.h). */
#include "loss_scale.h"

#include <math.h>
#include <string.h>

#define MIN_SCALE 1.1754943508222875e-38f /* 2^-126: the smallest normal float */

void ps_loss_scale_init(ps_loss_scale *s) {
    memset(s, 0, sizeof *s);
    s->scale = PS_LOSS_SCALE_INITIAL;
    s->period = PS_LOSS_SCALE_PERIOD;
}

bool ps_loss_scale_update(ps_loss_scale *s, bool finite) {
    if (!finite) {
        s->scale = s->scale * 0.5f < MIN_SCALE ? MIN_SCALE : s->scale * 0.5f;
        s->good_steps = 0;
        s->skipped++;
        return true;
    }
    if (++s->good_steps >= s->period) {
        float up = s->scale * 2.0f;
        if (isfinite(up)) s->scale = up; /* as Keras: never to infinity */
        s->good_steps = 0;
    }
    return false;
}

bool ps_all_finite(const float *g, size_t n) {
    /* the exponent bits all ones: inf or NaN; no early exit (vectorises) */
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &g[i], sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad == 0;
}

bool ps_loss_scale_unscale(const ps_loss_scale *s, float *g, size_t n) {
    float inv = 1.0f / s->scale;
    for (size_t i = 0; i < n; i++)
        g[i] *= inv;
    return ps_all_finite(g, n);
}
