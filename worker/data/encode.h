/* Encoding 8-bit pixels into a PNG (libpng) or JPEG (libjpeg-turbo) file
 * held in memory: what tests, examples and converters use to write image
 * folders that ps_image_decode (image.h) and Keras read back. */
#ifndef PS_ENCODE_H
#define PS_ENCODE_H

#include <stddef.h>
#include <stdint.h>

/* Both take h * w * c bytes, row-major, channels last (ps_image's layout),
 * with c 1 (gray) or 3 (RGB), and on PS_OK set *buf to a malloc'd file of
 * *len bytes that the caller frees with free(); on error *buf is NULL, *len
 * 0, and err says why. */

/* A lossless 8-bit gray or RGB PNG (libpng's defaults, an sRGB chunk).
 * Returns PS_OK, PS_EINVAL (a NULL pointer, c not 1 or 3, h or w 0 or over
 * 2^31 - 1, a row over 2^31 - 1 bytes), PS_ENOMEM, or PS_EINTERNAL (libpng
 * failed otherwise; err has its message). */
int ps_image_encode_png(const uint8_t *pixels, size_t h, size_t w, size_t c, uint8_t **buf,
                        size_t *len, char *err, size_t errlen);

/* A baseline gray or YCbCr JPEG at quality 1..100 (libjpeg's defaults: 4:2:0
 * chroma subsampling, standard Huffman tables). Returns PS_OK, PS_EINVAL (a
 * NULL pointer, c not 1 or 3, h or w 0 or over 65500, quality outside
 * 1..100), PS_ENOMEM, or PS_EINTERNAL (libjpeg failed otherwise; err has its
 * message). */
int ps_image_encode_jpeg(const uint8_t *pixels, size_t h, size_t w, size_t c, int quality,
                         uint8_t **buf, size_t *len, char *err, size_t errlen);

#endif
