/* Preprocessing and augmentation of one decoded image, channels last, as the
 * data spec's "preprocess" list asks: resize, center and random crops, a
 * random horizontal flip, rescaling and per-channel normalization, in the
 * list's order. Pure and thread-safe (no globals, no allocation, nothing
 * printed); the random ops draw from a generator seeded by the record's own
 * seed, so the same seed always gives the same image. */
#ifndef PS_AUGMENT_H
#define PS_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    PS_AUG_RESIZE = 0,  /* bilinear to h x w (resize.h: tf.image.resize, antialias=False) */
    PS_AUG_CENTER_CROP, /* the h x w window at floor of half the difference (Keras CenterCrop) */
    PS_AUG_RANDOM_CROP, /* an h x w window anywhere inside (tf.image.random_crop) */
    PS_AUG_RANDOM_FLIP, /* left-right, with probability 1/2 (Keras RandomFlip("horizontal")) */
    PS_AUG_RESCALE,     /* x * scale + offset (Keras Rescaling) */
    PS_AUG_NORMALIZE,   /* (x - mean[k]) / std[k] per channel k */
    PS_AUG_LOG1P        /* log(1 + max(x, 0)): counts (Criteo's numeric fields, as DLRM) */
} ps_aug_kind;

#define PS_AUG_MAX_OPS 16     /* operations in one plan */
#define PS_AUG_MAX_CH 4       /* channels normalize can name one by one */
#define PS_AUG_MAX_SIDE 65536 /* largest height or width a resize or crop can ask for */

typedef struct {
    ps_aug_kind kind;
    size_t h, w;         /* RESIZE, CENTER_CROP, RANDOM_CROP: the output's size */
    float scale, offset; /* RESCALE */
    size_t n_ch;         /* NORMALIZE: 1 (every channel alike) or the image's channels */
    float mean[PS_AUG_MAX_CH], std[PS_AUG_MAX_CH]; /* NORMALIZE: std > 0 */
} ps_aug_op;

typedef struct {
    ps_aug_op ops[PS_AUG_MAX_OPS];
    size_t n; /* 0: the image passes unchanged */
} ps_aug_plan;

struct cJSON;

/* Parses the data spec's "preprocess" array into *p (NULL, for a spec
 * without the key, gives the empty plan). Each element is an object with
 * exactly one key:
 *   {"resize": [H, W]}       {"center_crop": [H, W]}      {"random_crop": [H, W]}
 *   {"random_flip": "horizontal"}
 *   {"rescale": X}  {"rescale": {"scale": S, "offset": O}} (offset optional, 0)
 *   {"rescale": "mobilenet_v2"} (scale 1/127.5, offset -1: tf.keras.applications'
 *                                mobilenet_v2.preprocess_input)
 *   {"normalize": {"mean": [..], "std": [..]}} (1 value for every channel, or
 *                                1 to PS_AUG_MAX_CH values, one per channel)
 *   {"log1p": true}              (log(1 + x), negative values taken as 0)
 * with sizes whole numbers from 1 to PS_AUG_MAX_SIDE. Returns PS_OK, or
 * PS_EINVAL with a one-line reason naming the element ("preprocess[2]: ...")
 * and what was expected: not an array, too many elements, an unknown or
 * extra key, a wrong type, a zero size, a std not above 0. */
int ps_aug_plan_parse(const struct cJSON *arr, ps_aug_plan *p, char *err, size_t errlen);

/* The output shape (*oh, *ow, *oc) of the plan for input images of h x w x c.
 * Returns PS_OK, or PS_EINVAL with a reason naming the element when the
 * image is empty, a crop is larger than the image at that point, or
 * normalize names a number of channels other than 1 or the image's. */
int ps_aug_plan_shape(const ps_aug_plan *p, size_t h, size_t w, size_t c, size_t *oh, size_t *ow,
                      size_t *oc, char *err, size_t errlen);

/* How many floats of scratch ps_aug_apply needs for h x w x c input images
 * (a shape ps_aug_plan_shape accepts): room for the intermediate images; 0
 * for a plan of at most one operation. */
size_t ps_aug_scratch_floats(const ps_aug_plan *p, size_t h, size_t w, size_t c);

/* Applies the plan to one image: in [h][w][c] -> out [oh][ow][oc] (the shape
 * ps_aug_plan_shape gave, which must have accepted h x w x c; out
 * overwritten, not overlapping in). scratch holds ps_aug_scratch_floats(p,
 * h, w, c) floats (NULL when that is 0). training: the random ops draw from
 * splitmix64 seeded with seed (the caller derives one per record, from the
 * job's seed, the epoch and the record), a random crop two draws, a flip one,
 * whatever the outcome; false: the deterministic form Keras' layers take at
 * inference, a random crop becomes the center crop of its size and a flip
 * does nothing (seed unused). */
void ps_aug_apply(const ps_aug_plan *p, const float *in, size_t h, size_t w, size_t c, float *out,
                  float *scratch, uint64_t seed, bool training);

/* One line describing the plan for the log, e.g. "resize 224x224 (bilinear),
 * random crop 200x200, random horizontal flip, rescale x0.00784314 -1"
 * ("none" for the empty plan); truncated to outlen. */
void ps_aug_describe(const ps_aug_plan *p, char *out, size_t outlen);

#endif
