/* Image encoding (encode.h): libpng's simplified API into a buffer of its
 * documented upper bound, and libjpeg-turbo with a destination that grows a
 * malloc'd buffer and an error manager that longjmps back instead of exiting
 * and never prints. */
#include "encode.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include <jerror.h> /* after jpeglib.h: ERREXIT1, JERR_OUT_OF_MEMORY */

#include "ps_error.h"

#define PNG_MAX_SIDE 0x7fffffffu /* PNG's limit on width and height */

static int check_args(const uint8_t *pixels, size_t h, size_t w, size_t c, uint8_t **buf,
                      size_t *len, size_t max_side, char *err, size_t errlen) {
    if (buf) *buf = NULL;
    if (len) *len = 0;
    if (!pixels || !buf || !len) {
        snprintf(err, errlen, "NULL %s", !pixels ? "pixels" : "output");
        return PS_EINVAL;
    }
    if (c != 1 && c != 3) {
        snprintf(err, errlen, "%zu channels: only 1 (gray) and 3 (RGB) are encoded", c);
        return PS_EINVAL;
    }
    if (h == 0 || w == 0 || h > max_side || w > max_side) {
        snprintf(err, errlen, "%zux%zu pixels: each side must be 1 to %zu", w, h, max_side);
        return PS_EINVAL;
    }
    return PS_OK;
}

/* ---- PNG ----------------------------------------------------------------------- */

int ps_image_encode_png(const uint8_t *pixels, size_t h, size_t w, size_t c, uint8_t **buf,
                        size_t *len, char *err, size_t errlen) {
    int rc = check_args(pixels, h, w, c, buf, len, PNG_MAX_SIDE, err, errlen);
    if (rc != PS_OK) return rc;
    if (w * c > PNG_MAX_SIDE || h > SIZE_MAX / 2 / (w * c)) {
        snprintf(err, errlen, "%zux%zu pixels of %zu channels: too large for a PNG in memory", w, h,
                 c);
        return PS_EINVAL;
    }
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    /* an upper bound on the file whatever zlib achieves, then shrunk to what
     * was written: libpng's PNG_IMAGE_PNG_SIZE_MAX, whose product is 32-bit
     * (it wraps past 4 GiB of pixels), here in size_t with room for the
     * small chunks libpng writes (IHDR, sRGB or gAMA + cHRM, IEND) */
    size_t data = h * (w * c) + h; /* a filter byte starts each row */
    size_t idat = data + (data + 7) / 8 + (data + 63) / 64 + 11;
    png_alloc_size_t cap = idat + 12 * (idat / 0x7fffffff + 1) + 1024, n = cap;
    uint8_t *out = malloc(cap);
    if (!out) {
        snprintf(err, errlen, "out of memory for a PNG of up to %zu bytes", (size_t)cap);
        return PS_ENOMEM;
    }
    if (!png_image_write_to_memory(&im, out, &n, 0, pixels, (png_int_32)(w * c), NULL)) {
        int nomem = strstr(im.message, "memory") != NULL;
        snprintf(err, errlen, "PNG encoder (%zux%zu, %zu channels): %s", w, h, c,
                 n > cap ? "wrote past its own upper bound" : im.message);
        png_image_free(&im);
        free(out);
        return nomem ? PS_ENOMEM : PS_EINTERNAL;
    }
    uint8_t *shrunk = realloc(out, n);
    *buf = shrunk ? shrunk : out;
    *len = n;
    return PS_OK;
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

static void jpeg_quiet(j_common_ptr ci) {
    (void)ci; /* libjpeg's default prints warnings to stderr */
}

/* A destination that doubles a malloc'd buffer as libjpeg fills it. */
typedef struct {
    struct jpeg_destination_mgr pub;
    uint8_t *buf;
    size_t cap;
} grow_dest;

static void dest_init(j_compress_ptr ci) {
    grow_dest *d = (grow_dest *)ci->dest;
    d->pub.next_output_byte = d->buf;
    d->pub.free_in_buffer = d->cap;
}

static boolean dest_full(j_compress_ptr ci) {
    grow_dest *d = (grow_dest *)ci->dest;
    uint8_t *b = d->cap <= SIZE_MAX / 2 ? realloc(d->buf, d->cap * 2) : NULL;
    if (!b) ERREXIT1(ci, JERR_OUT_OF_MEMORY, 0);
    d->buf = b;
    d->pub.next_output_byte = b + d->cap; /* all of the old buffer is written */
    d->pub.free_in_buffer = d->cap;
    d->cap *= 2;
    return TRUE;
}

static void dest_term(j_compress_ptr ci) {
    (void)ci; /* the length is cap - free_in_buffer */
}

int ps_image_encode_jpeg(const uint8_t *pixels, size_t h, size_t w, size_t c, int quality,
                         uint8_t **buf, size_t *len, char *err, size_t errlen) {
    int rc = check_args(pixels, h, w, c, buf, len, JPEG_MAX_DIMENSION, err, errlen);
    if (rc != PS_OK) return rc;
    if (quality < 1 || quality > 100) {
        snprintf(err, errlen, "JPEG quality %d is not in 1..100", quality);
        return PS_EINVAL;
    }
    /* on the heap, set before setjmp: what the error path reads is not an
     * automatic variable changed after setjmp */
    grow_dest *d = calloc(1, sizeof *d);
    if (d) d->cap = 4096 + h * w * c / 8;
    if (d) d->buf = malloc(d->cap);
    if (!d || !d->buf) {
        free(d);
        snprintf(err, errlen, "out of memory for a JPEG of %zux%zu", w, h);
        return PS_ENOMEM;
    }
    d->pub.init_destination = dest_init;
    d->pub.empty_output_buffer = dest_full;
    d->pub.term_destination = dest_term;

    struct jpeg_compress_struct ci;
    jpeg_err je;
    memset(&je, 0, sizeof je);
    ci.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_fail;
    je.mgr.output_message = jpeg_quiet;
    if (setjmp(je.jump)) {
        int nomem = je.mgr.msg_code == JERR_OUT_OF_MEMORY;
        snprintf(err, errlen, "JPEG encoder (%zux%zu, %zu channels): %s", w, h, c, je.msg);
        jpeg_destroy_compress(&ci);
        free(d->buf);
        free(d);
        return nomem ? PS_ENOMEM : PS_EINTERNAL;
    }
    jpeg_create_compress(&ci);
    ci.dest = &d->pub;
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = (int)c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    size_t stride = w * c;
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)ci.next_scanline * stride);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    size_t n = d->cap - d->pub.free_in_buffer;
    jpeg_destroy_compress(&ci);
    uint8_t *shrunk = realloc(d->buf, n);
    *buf = shrunk ? shrunk : d->buf;
    *len = n;
    free(d);
    return PS_OK;
}
