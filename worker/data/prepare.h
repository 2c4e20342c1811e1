/* The input pipeline's prepare step (pipeline.h): a decoded record made into
 * the model's input. With the data spec's "preprocess" list (augment.h) the
 * list runs and its result must have the model's shape; without one, a
 * record of the model's shape (or as many values, when either is flat) is
 * taken as it is, and an image of another size or channel count is resized
 * (bilinear, as tf.image.resize) and its channels repeated or reduced, as
 * Keras' image_dataset_from_directory resizes to its image_size. */
#ifndef PS_PREPARE_H
#define PS_PREPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "source.h"

typedef struct ps_prep ps_prep;
struct cJSON;

/* A step making out_h x out_w x out_c inputs; preprocess may be NULL.
 * rgb_to_gray: without a list, 3 channels may become 1 (luminance). Returns
 * PS_OK, PS_EINVAL (a bad list: err says which element) or PS_ENOMEM. */
int ps_prep_new(const struct cJSON *preprocess, size_t out_h, size_t out_w, size_t out_c,
                int rgb_to_gray, ps_prep **out, char *err, size_t errlen);
void ps_prep_free(ps_prep *p);

/* What it does, for the log. */
void ps_prep_describe(const ps_prep *p, char *out, size_t outlen);

/* The shape a record of h x w x c comes out as: the model's, or an error
 * saying why not (a crop larger than the image). For psctl data, which has
 * no model: with out_h 0 the list's own output is taken. */
int ps_prep_shape(const ps_prep *p, size_t h, size_t w, size_t c, size_t *oh, size_t *ow,
                  size_t *oc, char *err, size_t errlen);

/* The pipeline's prepare function (ps_pipeline_prepare_fn); ctx is a ps_prep. */
int ps_prep_run(void *ctx, const ps_sample *s, float *out, float **scratch, size_t *cap,
                uint64_t seed, bool training, char *err, size_t errlen);

#endif
