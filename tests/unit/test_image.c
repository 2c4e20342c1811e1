/* JPEG and PNG decoding: images encoded here with libpng and libjpeg decoded
 * back (PNG exactly, JPEG within the codec's error), the channel conversions,
 * and hostile files: truncated JPEG and PNG, a PNG and a JPEG declaring
 * 100000 x 100000 pixels (refused before any pixel memory is allocated),
 * neither format at all. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "image.h"
#include "ps_error.h"
#include "testutil.h"

/* A w x h x c image with smooth gradients (JPEG-friendly) plus a little noise. */
static uint8_t *pattern(size_t w, size_t h, size_t c, unsigned seed) {
    uint8_t *p = malloc(w * h * c);
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++)
            for (size_t k = 0; k < c; k++) {
                seed = seed * 1103515245u + 12345u;
                p[(y * w + x) * c + k] =
                    (uint8_t)((x * 200 / w + y * 40 / h + k * 30 + (seed >> 16) % 4) % 256);
            }
    return p;
}

static uint8_t *png_encode(const uint8_t *px, size_t w, size_t h, png_uint_32 format,
                           size_t *len) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w, im.height = (png_uint_32)h, im.format = format;
    png_alloc_size_t n = 0;
    ck_assert(png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL));
    uint8_t *out = malloc(n);
    ck_assert(png_image_write_to_memory(&im, out, &n, 0, px, 0, NULL));
    *len = n;
    return out;
}

static uint8_t *jpeg_encode(const uint8_t *px, size_t w, size_t h, int c, size_t *len) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr em;
    ci.err = jpeg_std_error(&em);
    jpeg_create_compress(&ci);
    unsigned char *out = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&ci, &out, &n);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 95, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)ci.next_scanline * w * (size_t)c);
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    *len = n;
    return out;
}

static void decode_ok(const uint8_t *buf, size_t len, int channels, ps_image *im) {
    char err[256] = "";
    int rc = ps_image_decode(buf, len, channels, 0, 0, im, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "decode: %d %s", rc, err);
}

static void decode_fails(const uint8_t *buf, size_t len, const char *want) {
    ps_image im;
    char err[256] = "";
    ck_assert_int_eq(ps_image_decode(buf, len, 3, 0, 0, &im, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_null(im.pixels);
    ck_assert_msg(strstr(err, want), "want \"%s\" in \"%s\"", want, err);
}

START_TEST(png_exact) {
    size_t w = 13, h = 7, len;
    uint8_t *rgb = pattern(w, h, 3, 1), *gray = pattern(w, h, 1, 2), *rgba = pattern(w, h, 4, 3);
    ps_image im;
    uint8_t *f = png_encode(rgb, w, h, PNG_FORMAT_RGB, &len);
    ck_assert_int_eq(ps_image_sniff(f, len), PS_IMAGE_PNG);
    decode_ok(f, len, 0, &im);
    ck_assert(im.w == w && im.h == h && im.c == 3);
    ck_assert(memcmp(im.pixels, rgb, w * h * 3) == 0);
    ps_image_free(&im);
    decode_ok(f, len, 1, &im); /* color to gray: 0.299 R + 0.587 G + 0.114 B, rounded */
    ck_assert_uint_eq(im.c, 1);
    for (size_t i = 0; i < w * h; i++) {
        float want = 0.299f * rgb[3 * i] + 0.587f * rgb[3 * i + 1] + 0.114f * rgb[3 * i + 2];
        ck_assert_msg(abs((int)im.pixels[i] - (int)(want + 0.5f)) == 0, "%zu: %u vs %g", i,
                      im.pixels[i], want);
    }
    ps_image_free(&im);
    free(f);

    f = png_encode(gray, w, h, PNG_FORMAT_GRAY, &len);
    decode_ok(f, len, 0, &im);
    ck_assert(im.c == 1 && memcmp(im.pixels, gray, w * h) == 0);
    ps_image_free(&im);
    decode_ok(f, len, 3, &im); /* gray repeated */
    ck_assert_uint_eq(im.c, 3);
    for (size_t i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++)
            ck_assert_uint_eq(im.pixels[3 * i + k], gray[i]);
    ps_image_free(&im);
    free(f);

    f = png_encode(rgba, w, h, PNG_FORMAT_RGBA, &len); /* alpha dropped, not composited */
    decode_ok(f, len, 0, &im);
    ck_assert_uint_eq(im.c, 3);
    for (size_t i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++)
            ck_assert_uint_eq(im.pixels[3 * i + k], rgba[4 * i + k]);
    ps_image_free(&im);
    free(f);
    free(rgb), free(gray), free(rgba);
}
END_TEST

START_TEST(jpeg_within_codec_error) {
    size_t w = 40, h = 24, len;
    uint8_t *rgb = pattern(w, h, 3, 4), *gray = pattern(w, h, 1, 5);
    ps_image im;
    uint8_t *f = jpeg_encode(rgb, w, h, 3, &len);
    ck_assert_int_eq(ps_image_sniff(f, len), PS_IMAGE_JPEG);
    decode_ok(f, len, 0, &im);
    ck_assert(im.w == w && im.h == h && im.c == 3);
    double sum = 0;
    for (size_t i = 0; i < w * h * 3; i++)
        sum += abs((int)im.pixels[i] - (int)rgb[i]);
    /* the fast integer DCT tf.io.decode_jpeg uses adds to the codec's own error (4.1 here) */
    ck_assert_msg(sum / (double)(w * h * 3) < 5.0, "mean error %g", sum / (double)(w * h * 3));
    ps_image_free(&im);
    free(f);
    f = jpeg_encode(gray, w, h, 1, &len);
    decode_ok(f, len, 0, &im);
    ck_assert_uint_eq(im.c, 1);
    sum = 0;
    for (size_t i = 0; i < w * h; i++)
        sum += abs((int)im.pixels[i] - (int)gray[i]);
    ck_assert_msg(sum / (double)(w * h) < 4.0, "mean error %g", sum / (double)(w * h));
    ps_image_free(&im);
    decode_ok(f, len, 3, &im);
    ck_assert_uint_eq(im.c, 3);
    ps_image_free(&im);
    free(f);
    free(rgb), free(gray);
}
END_TEST

START_TEST(truncated) {
    size_t w = 128, h = 128, len;
    uint8_t *rgb = pattern(w, h, 3, 6);
    uint8_t *f = jpeg_encode(rgb, w, h, 3, &len);
    decode_fails(f, len / 2, "truncated JPEG");
    decode_fails(f, 40, "JPEG");
    free(f);
    f = png_encode(rgb, w, h, PNG_FORMAT_RGB, &len);
    decode_fails(f, len / 2, "PNG");
    decode_fails(f, 20, "corrupt PNG");
    free(f);
    free(rgb);
}
END_TEST

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

START_TEST(huge_declared_size) {
    /* a PNG whose IHDR (with a valid CRC) declares 100000 x 100000 RGB */
    uint8_t f[8 + 25 + 12 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t *ihdr = f + 8;
    put_be32(ihdr, 13);
    memcpy(ihdr + 4, "IHDR", 4);
    put_be32(ihdr + 8, 100000);
    put_be32(ihdr + 12, 100000);
    ihdr[16] = 8, ihdr[17] = 2, ihdr[18] = 0, ihdr[19] = 0, ihdr[20] = 0;
    put_be32(ihdr + 21, (uint32_t)crc32(0, ihdr + 4, 17));
    uint8_t *idat = f + 33; /* an empty IDAT: the header is read up to the first one */
    put_be32(idat, 0);
    memcpy(idat + 4, "IDAT", 4);
    put_be32(idat + 8, (uint32_t)crc32(0, idat + 4, 4));
    uint8_t *iend = f + 45;
    put_be32(iend, 0);
    memcpy(iend + 4, "IEND", 4);
    put_be32(iend + 8, (uint32_t)crc32(0, iend + 4, 4));
    decode_fails(f, sizeof f, "declares 100000x100000 pixels, over the limit");

    /* a JPEG whose frame header says 60000 x 60000 */
    size_t len;
    uint8_t *rgb = pattern(16, 16, 3, 7);
    uint8_t *j = jpeg_encode(rgb, 16, 16, 3, &len);
    size_t sof = 2;
    while (sof + 9 < len && !(j[sof] == 0xff && j[sof + 1] == 0xc0))
        sof += 2 + ((size_t)j[sof + 2] << 8 | j[sof + 3]);
    ck_assert_msg(sof + 9 < len, "no SOF0 marker");
    j[sof + 5] = 0xea, j[sof + 6] = 0x60; /* height 60000 */
    j[sof + 7] = 0xea, j[sof + 8] = 0x60; /* width */
    decode_fails(j, len, "declares 60000x60000 pixels, over the limit");
    /* and under a limit of the caller's own */
    ps_image im;
    char err[256];
    uint8_t *ok = jpeg_encode(rgb, 16, 16, 3, &len);
    ck_assert_int_eq(ps_image_decode(ok, len, 0, 255, 0, &im, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "16x16 pixels, over the limit of 255"), "%s", err);
    free(ok), free(j), free(rgb);
}
END_TEST

START_TEST(not_an_image) {
    decode_fails((const uint8_t *)"GIF89a......", 12, "neither a JPEG nor a PNG");
    decode_fails((const uint8_t *)"", 0, "neither");
    ps_image im;
    char err[128];
    ck_assert_int_eq(ps_image_decode((const uint8_t *)"x", 1, 2, 0, 0, &im, err, sizeof err),
                     PS_EINVAL);
}
END_TEST

static Suite *image_suite(void) {
    Suite *s = suite_create("image");
    TCase *tc = tcase_create("decode");
    tcase_add_test(tc, png_exact);
    tcase_add_test(tc, jpeg_within_codec_error);
    tcase_add_test(tc, truncated);
    tcase_add_test(tc, huge_declared_size);
    tcase_add_test(tc, not_an_image);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(image_suite());
}
