/* Adapting the data's images to the model's input shape (see adapt.h). */
#include "adapt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "ps_error.h"
#include "resize.h"


void ps_adapt_data_shape(const ps_dataset *d, size_t *h, size_t *w, size_t *c) {
    if (d->h && d->w && d->c && d->h * d->w * d->c == d->dim) {
        *h = d->h, *w = d->w, *c = d->c;
    } else {
        *h = 1, *w = 1, *c = d->dim;
    }
}

int ps_adapt_plan_make(size_t h, size_t w, size_t c, size_t mh, size_t mw, size_t mc,
                       ps_adapt_mode mode, bool rgb_to_gray, ps_adapt_plan *p, char *err,
                       size_t errlen) {
    *p = (ps_adapt_plan){h, w, c, mh, mw, mc};
    size_t n = h * w * c, mn = mh * mw * mc;
    bool model_flat = mh == 1 && mw == 1, data_flat = h == 1 && w == 1;
    if (h == mh && w == mw && c == mc) {
        p->identity = true;
        return PS_OK;
    }
    if (model_flat || data_flat) {
        if (n == mn) {
            p->identity = true; /* the same values, read flat or as an image */
            return PS_OK;
        }
        if (model_flat)
            return ps_errf(PS_EINVAL, err, errlen,
                        "the data has %zu values per sample (%zux%zux%zu), the model's flat input "
                        "takes %zu (only an image input, [height, width, channels], is adapted)",
                        n, h, w, c, mn);
        return ps_errf(PS_EINVAL, err, errlen,
                    "the data's samples are flat vectors of %zu values, the model expects "
                    "%zux%zux%zu images",
                    n, mh, mw, mc);
    }
    if (mode == PS_ADAPT_REFUSE)
        return ps_errf(PS_EINVAL, err, errlen,
                    "the data's images are %zux%zux%zu, the model's input is %zux%zux%zu "
                    "(--input-adapt refuse)",
                    h, w, c, mh, mw, mc);
    if (c != mc) {
        if (c == 3 && mc == 1 && !rgb_to_gray)
            return ps_errf(PS_EINVAL, err, errlen,
                        "the data's images have 3 channels, the model's input 1: give "
                        "--rgb-to-gray yes to feed it their luminance");
        if (!(c == 1 || (c == 3 && mc == 1)))
            return ps_errf(PS_EINVAL, err, errlen,
                        "the data's images have %zu channels, the model's input %zu: only 1 "
                        "channel can be repeated (and 3 made gray with --rgb-to-gray yes)",
                        c, mc);
        p->gray = c == 3;
    }
    if (h != mh || w != mw) {
        if (mode == PS_ADAPT_RESIZE) {
            p->resize = true;
        } else if (h <= mh && w <= mw) {
            p->top = (mh - h) / 2;
            p->left = (mw - w) / 2;
        } else {
            return ps_errf(PS_EINVAL, err, errlen,
                        "the data's images (%zux%zu) are larger than the model's input "
                        "(%zux%zu): padding cannot shrink them (--input-adapt resize scales "
                        "them)",
                        h, w, mh, mw);
        }
    }
    return PS_OK;
}

/* Channels first: in [h][w][in_c] -> s [h][w][out_c]. */
static void map_channels(const ps_adapt_plan *p, const float *in, float *s) {
    size_t px = p->in_h * p->in_w;
    for (size_t i = 0; i < px; i++) {
        if (p->gray) {
            const float *q = in + i * 3;
            s[i] = 0.2989f * q[0] + 0.5870f * q[1] + 0.1140f * q[2];
        } else if (p->in_c == p->out_c) {
            memcpy(s + i * p->out_c, in + i * p->in_c, p->out_c * sizeof *s);
        } else { /* one channel repeated */
            for (size_t k = 0; k < p->out_c; k++)
                s[i * p->out_c + k] = in[i];
        }
    }
}

void ps_adapt_image(const ps_adapt_plan *p, const float *in, float *out, float *scratch) {
    size_t c = p->out_c, ow = p->out_w;
    map_channels(p, in, scratch);
    if (p->resize) {
        ps_resize_bilinear(scratch, p->in_h, p->in_w, c, out, p->out_h, ow);
        return;
    }
    memset(out, 0, p->out_h * ow * c * sizeof *out);
    for (size_t y = 0; y < p->in_h; y++)
        memcpy(out + ((y + p->top) * ow + p->left) * c, scratch + y * p->in_w * c,
               p->in_w * c * sizeof *out);
}

int ps_adapt_dataset(const ps_adapt_plan *p, ps_dataset *d, char *err, size_t errlen) {
    size_t din = p->in_h * p->in_w * p->in_c, dout = p->out_h * p->out_w * p->out_c;
    if (p->identity || d->n == 0) return PS_OK;
    size_t total, bytes;
    if (__builtin_mul_overflow(d->n, dout, &total) ||
        __builtin_mul_overflow(total, sizeof(float), &bytes)) {
        snprintf(err, errlen, "adapting %zu images to %zu values each: too large", d->n, dout);
        return PS_ENOMEM;
    }
    float *scratch = malloc((din + p->in_h * p->in_w * p->out_c) * sizeof *scratch);
    if (!scratch) {
        snprintf(err, errlen, "out of memory adapting images");
        return PS_ENOMEM;
    }
    float *src = scratch, *tmp = scratch + din;
    if (dout > din) {
        /* grow first, then last sample first: sample i's output [i*dout, (i+1)*dout)
         * starts after every earlier sample's input, which ends by i*din <= i*dout */
        float *x = realloc(d->x, bytes);
        if (!x) {
            free(scratch);
            snprintf(err, errlen, "out of memory adapting %zu images: %.0f MB needed", d->n,
                     (double)bytes / 1e6);
            return PS_ENOMEM;
        }
        d->x = x;
        for (size_t i = d->n; i-- > 0;) {
            memcpy(src, d->x + i * din, din * sizeof *src);
            ps_adapt_image(p, src, d->x + i * dout, tmp);
        }
    } else {
        /* first sample first: output i ends by (i+1)*dout <= (i+1)*din, where input i+1 starts */
        for (size_t i = 0; i < d->n; i++) {
            memcpy(src, d->x + i * din, din * sizeof *src);
            ps_adapt_image(p, src, d->x + i * dout, tmp);
        }
        float *x = realloc(d->x, bytes);
        if (x) d->x = x; /* shrinking: on failure the old block is still fine */
    }
    free(scratch);
    d->dim = dout;
    d->h = p->out_h;
    d->w = p->out_w;
    d->c = p->out_c;
    return PS_OK;
}

void ps_adapt_describe(const ps_adapt_plan *p, char *out, size_t outlen) {
    char sp[128] = "", ch[96] = "";
    if (p->resize)
        snprintf(sp, sizeof sp, "bilinear resize");
    else if (p->in_h != p->out_h || p->in_w != p->out_w)
        snprintf(sp, sizeof sp, "zero padding %zu px top, %zu bottom, %zu left, %zu right", p->top,
                 p->out_h - p->in_h - p->top, p->left, p->out_w - p->in_w - p->left);
    if (p->gray)
        snprintf(ch, sizeof ch, "RGB to luminance");
    else if (p->in_c != p->out_c)
        snprintf(ch, sizeof ch, "the channel repeated %zu times", p->out_c);
    snprintf(out, outlen, "%s%s%s", sp, sp[0] && ch[0] ? ", " : "", ch);
}
