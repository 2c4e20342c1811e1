/* Decoding one image file held in memory: JPEG (libjpeg-turbo) or PNG
 * (libpng), told apart by their signatures, into 8-bit pixels, channels last.
 * JPEGs are decoded with tf.io.decode_jpeg's settings (the fast integer DCT,
 * fancy upsampling), so the pixels are TensorFlow's. The declared size is
 * checked against a limit before any pixel memory is allocated; a truncated or corrupt file is an error, never a partly gray
 * image. */
#ifndef PS_IMAGE_H
#define PS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* Default limit on width * height: 8192 x 8192. */
#define PS_IMAGE_MAX_PIXELS_DEFAULT ((size_t)1 << 26)

typedef struct {
    uint8_t *pixels; /* owned: h * w * c bytes, row-major, channels last */
    size_t h, w, c;
    size_t cap; /* bytes allocated at pixels (ps_image_decode_into reuses them) */
} ps_image;

typedef enum { PS_IMAGE_UNKNOWN = 0, PS_IMAGE_JPEG, PS_IMAGE_PNG } ps_image_format;

/* The format by the first bytes (JPEG: FF D8 FF; PNG: its 8-byte signature). */
ps_image_format ps_image_sniff(const uint8_t *buf, size_t len);

/* Decodes buf into *out with `channels` channels: 1 (gray; color is reduced
 * as 0.299 R + 0.587 G + 0.114 B, JPEG's own luma), 3 (RGB; gray is repeated)
 * or 0 (the file's: 1 for gray, 3 for color). An alpha channel is dropped
 * (not composited), 16-bit PNG samples are reduced to 8 bits, palettes
 * expanded. max_pixels 0 means PS_IMAGE_MAX_PIXELS_DEFAULT; flags 0 or
 * PS_IMAGE_DCT_ACCURATE. Returns PS_OK,
 * PS_EFORMAT (not JPEG or PNG, corrupt, truncated, CMYK JPEG, or larger
 * than max_pixels: err says which, with the declared size), PS_EINVAL
 * (channels not 0, 1 or 3) or PS_ENOMEM. */
int ps_image_decode(const uint8_t *buf, size_t len, int channels, size_t max_pixels,
                    unsigned flags, ps_image *out, char *err, size_t errlen);

/* ps_image_decode's flags. */
#define PS_IMAGE_DCT_ACCURATE 1u /* JPEG: the accurate integer DCT (tf.io.decode_jpeg's
                                  * dct_method "INTEGER_ACCURATE"), not the fast one */

/* As ps_image_decode, but into im's buffer when it is large enough (im from an
 * earlier decode into it, or zeroed): a thread decoding many images allocates
 * once. im keeps its buffer on an error too; ps_image_free frees it. */
int ps_image_decode_into(const uint8_t *buf, size_t len, int channels, size_t max_pixels,
                         unsigned flags, ps_image *im, char *err, size_t errlen);

void ps_image_free(ps_image *im);

#endif
