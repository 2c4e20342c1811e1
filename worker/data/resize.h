/* The one bilinear resize of the data pipeline, shared by input adaptation
 * (adapt.c) and augmentation (augment.c): the numbers of
 * tf.image.resize(method="bilinear", antialias=False), i.e. half-pixel
 * centres, edges clamped. */
#ifndef PS_RESIZE_H
#define PS_RESIZE_H

#include <stddef.h>

/* Resizes in [h][w][c] to out [oh][ow][c] (overwritten; the two must not
 * overlap). Output pixel (y, x) samples the source at ((y + 0.5) * h / oh -
 * 0.5, (x + 0.5) * w / ow - 0.5), clamped to the image, and blends its four
 * neighbours: first along x, then along y. Every size must be at least 1;
 * the same size gives back the same values. */
void ps_resize_bilinear(const float *in, size_t h, size_t w, size_t c, float *out, size_t oh,
                        size_t ow);

#endif
