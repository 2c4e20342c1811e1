/* Images of another size: when the model's input (h, w, c) differs from the
 * data's images, each image is adapted once, when the dataset is loaded:
 * zero padding around it (centred) or a bilinear resize, and 1 channel
 * repeated to c (or, when asked, RGB to one luminance channel). Anything
 * else is refused with the reason. */
#ifndef PS_ADAPT_H
#define PS_ADAPT_H

#include <stdbool.h>
#include <stddef.h>

#include "data.h"

/* psworker --input-adapt, in its order. */
typedef enum {
    PS_ADAPT_PAD = 0, /* smaller images: zero padding around them, centred (the default) */
    PS_ADAPT_RESIZE,  /* any size: bilinear resize (half-pixel centres, no antialiasing) */
    PS_ADAPT_REFUSE   /* any difference is an error */
} ps_adapt_mode;

typedef struct {
    size_t in_h, in_w, in_c;    /* the data's images */
    size_t out_h, out_w, out_c; /* the model's input */
    bool identity;              /* nothing to do: same shape, or the same number of values */
    bool resize;                /* bilinear; else zero padding at (top, left) */
    bool gray;                  /* 3 channels -> 1: 0.2989 R + 0.5870 G + 0.1140 B */
    size_t top, left;           /* padding: floor of half the difference, as TF's
                                   resize_with_crop_or_pad (the odd row/column at the end) */
} ps_adapt_plan;

/* The data's per-sample shape: (h, w, c) when the loader knew it (h*w*c ==
 * dim), else a flat 1 x 1 x dim. */
void ps_adapt_data_shape(const ps_dataset *d, size_t *h, size_t *w, size_t *c);

/* Works out how samples of shape (h, w, c) become the model's (mh, mw, mc);
 * a flat model input is 1 x 1 x n. A flat model or flat data only takes the
 * same number of values (as before images could be adapted). Otherwise:
 * channels equal, 1 -> mc (repeated), or 3 -> 1 with rgb_to_gray; sizes equal,
 * smaller (PS_ADAPT_PAD), or any (PS_ADAPT_RESIZE). Returns PS_OK, or PS_EINVAL
 * with a one-line reason naming the option that would allow it. */
int ps_adapt_plan_make(size_t h, size_t w, size_t c, size_t mh, size_t mw, size_t mc,
                       ps_adapt_mode mode, bool rgb_to_gray, ps_adapt_plan *p, char *err,
                       size_t errlen);

/* Adapts one image: in [in_h][in_w][in_c] -> out [out_h][out_w][out_c];
 * scratch holds in_h * in_w * out_c floats. */
void ps_adapt_image(const ps_adapt_plan *p, const float *in, float *out, float *scratch);

/* Adapts every sample of d in place (d->x is reallocated to n x out values:
 * the peak is the larger of the two sizes plus one image, not both) and sets
 * dim, h, w, c. Returns PS_OK, or PS_ENOMEM with the size in err (d is then
 * unchanged). */
int ps_adapt_dataset(const ps_adapt_plan *p, ps_dataset *d, char *err, size_t errlen);

/* What the plan does, for the log: "zero padding 2 px top, 2 bottom, ...". */
void ps_adapt_describe(const ps_adapt_plan *p, char *out, size_t outlen);

#endif
