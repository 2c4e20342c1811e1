/* Image decoding (image.h): libjpeg-turbo through the libjpeg API with an
 * error manager that returns instead of exiting and counts warnings (a
 * truncated JPEG is only a warning to libjpeg, which pads it with gray), and
 * libpng's simplified API read as RGBA and reduced here. */
#include "image.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "ps_error.h"

ps_image_format ps_image_sniff(const uint8_t *buf, size_t len) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff) return PS_IMAGE_JPEG;
    if (len >= 8 && memcmp(buf, png_sig, 8) == 0) return PS_IMAGE_PNG;
    return PS_IMAGE_UNKNOWN;
}

void ps_image_free(ps_image *im) {
    free(im->pixels);
    memset(im, 0, sizeof *im);
}

static int too_large(size_t w, size_t h, size_t max_pixels, const char *what, char *err,
                     size_t errlen) {
    if (w == 0 || h == 0) {
        snprintf(err, errlen, "%s declares %zux%zu pixels", what, w, h);
        return 1;
    }
    if (w > max_pixels / h) {
        snprintf(err, errlen, "%s declares %zux%zu pixels, over the limit of %zu", what, w, h,
                 max_pixels);
        return 1;
    }
    return 0;
}

/* ---- JPEG ---------------------------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_fail(j_common_ptr ci) {
    jpeg_err *e = (jpeg_err *)ci->err;
    ci->err->format_message(ci, e->msg);
    longjmp(e->jump, 1);
}

static void jpeg_note(j_common_ptr ci, int level) {
    jpeg_err *e = (jpeg_err *)ci->err;
    if (level < 0 && e->mgr.num_warnings++ == 0) /* keep the first warning's text */
        ci->err->format_message(ci, e->msg);
}

/* Makes room for n bytes at im->pixels, keeping what it holds. */
static int reserve(ps_image *im, size_t n) {
    if (im->pixels && im->cap >= n) return PS_OK;
    uint8_t *p = realloc(im->pixels, n ? n : 1);
    if (!p) return PS_ENOMEM;
    im->pixels = p, im->cap = n ? n : 1;
    return PS_OK;
}

static int decode_jpeg(const uint8_t *buf, size_t len, int channels, size_t max_pixels, unsigned flags,
                       ps_image *out, char *err, size_t errlen) {
    struct jpeg_decompress_struct ci;
    jpeg_err je;
    memset(&je, 0, sizeof je);
    ci.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_fail;
    je.mgr.emit_message = jpeg_note;
    if (setjmp(je.jump)) {
        snprintf(err, errlen, "corrupt JPEG: %s", je.msg);
        jpeg_destroy_decompress(&ci);
        return PS_EFORMAT;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    if (too_large(ci.image_width, ci.image_height, max_pixels, "JPEG", err, errlen)) {
        jpeg_destroy_decompress(&ci);
        return PS_EFORMAT;
    }
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        snprintf(err, errlen, "CMYK JPEG (%ux%u): only gray and color JPEGs are read",
                 ci.image_width, ci.image_height);
        jpeg_destroy_decompress(&ci);
        return PS_EFORMAT;
    }
    int c = channels ? channels : (ci.num_components == 1 ? 1 : 3);
    ci.out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    /* tf.io.decode_jpeg's defaults (dct_method "" = INTEGER_FAST, fancy upsampling), so
     * the pixels are TensorFlow's */
    ci.dct_method = flags & PS_IMAGE_DCT_ACCURATE ? JDCT_ISLOW : JDCT_IFAST;
    ci.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&ci);
    size_t w = ci.output_width, h = ci.output_height, row = w * (size_t)c;
    if (reserve(out, h * row) != PS_OK) {
        jpeg_destroy_decompress(&ci);
        return PS_ENOMEM;
    }
    uint8_t *pixels = out->pixels;
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW r = pixels + (size_t)ci.output_scanline * row;
        jpeg_read_scanlines(&ci, &r, 1);
    }
    jpeg_finish_decompress(&ci);
    long warnings = je.mgr.num_warnings;
    jpeg_destroy_decompress(&ci);
    if (warnings) {
        snprintf(err, errlen, "corrupt or truncated JPEG (%zux%zu): %s", w, h, je.msg);
        return PS_EFORMAT;
    }
    out->h = h, out->w = w, out->c = (size_t)c;
    return PS_OK;
}

/* ---- PNG ----------------------------------------------------------------------- */

static int decode_png(const uint8_t *buf, size_t len, int channels, size_t max_pixels,
                      ps_image *out, char *err, size_t errlen) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, buf, len)) {
        snprintf(err, errlen, "corrupt PNG: %s", im.message);
        png_image_free(&im);
        return PS_EFORMAT;
    }
    if (too_large(im.width, im.height, max_pixels, "PNG", err, errlen)) {
        png_image_free(&im);
        return PS_EFORMAT;
    }
    int gray = !(im.format & PNG_FORMAT_FLAG_COLOR);
    size_t w = im.width, h = im.height, n = w * h;
    im.format = PNG_FORMAT_RGBA; /* 8-bit sRGB samples, alpha kept to be dropped below */
    int c = channels ? channels : (gray ? 1 : 3);
    /* the RGBA rows after the n * c output bytes, converted forwards into them */
    if (reserve(out, n * (size_t)c + n * 4) != PS_OK) {
        png_image_free(&im);
        return PS_ENOMEM;
    }
    uint8_t *px = out->pixels, *rgba = px + n * (size_t)c;
    if (!png_image_finish_read(&im, NULL, rgba, 0, NULL)) {
        snprintf(err, errlen, "corrupt or truncated PNG (%zux%zu): %s", w, h, im.message);
        png_image_free(&im);
        return PS_EFORMAT;
    }
    png_image_free(&im);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = rgba + 4 * i;
        if (c == 3) {
            px[3 * i] = s[0], px[3 * i + 1] = s[1], px[3 * i + 2] = s[2];
        } else { /* a gray file has R = G = B: this gives it back exactly */
            px[i] = (uint8_t)(0.299f * s[0] + 0.587f * s[1] + 0.114f * s[2] + 0.5f);
        }
    }
    out->h = h, out->w = w, out->c = (size_t)c;
    return PS_OK;
}

int ps_image_decode(const uint8_t *buf, size_t len, int channels, size_t max_pixels,
                    unsigned flags, ps_image *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int rc = ps_image_decode_into(buf, len, channels, max_pixels, flags, out, err, errlen);
    if (rc != PS_OK) ps_image_free(out);
    return rc;
}

int ps_image_decode_into(const uint8_t *buf, size_t len, int channels, size_t max_pixels,
                         unsigned flags, ps_image *out, char *err, size_t errlen) {
    out->h = out->w = out->c = 0;
    if (channels != 0 && channels != 1 && channels != 3) {
        snprintf(err, errlen, "channels must be 0, 1 or 3, not %d", channels);
        return PS_EINVAL;
    }
    if (!max_pixels) max_pixels = PS_IMAGE_MAX_PIXELS_DEFAULT;
    switch (ps_image_sniff(buf, len)) {
    case PS_IMAGE_JPEG:
        return decode_jpeg(buf, len, channels, max_pixels, flags, out, err, errlen);
    case PS_IMAGE_PNG:
        return decode_png(buf, len, channels, max_pixels, out, err, errlen);
    default:
        snprintf(err, errlen, "neither a JPEG nor a PNG file");
        return PS_EFORMAT;
    }
}
