/* PNG and JPEG encoding, checked by decoding with ps_image_decode: a PNG gives
 * back exactly the pixels it was given (a gradient, seeded noise, one pixel),
 * a JPEG at quality 95 a smooth gradient within a small error, gray and RGB;
 * a noisy JPEG at quality 100 outgrows the first output buffer; bad
 * arguments are refused before anything is written. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode.h"
#include "image.h"
#include "ps_error.h"
#include "testutil.h"

/* A smooth gradient: x * 3 + y * 2 + 20 k (at most 243 for 48 x 32). */
static uint8_t *gradient(size_t h, size_t w, size_t c) {
    uint8_t *p = malloc(h * w * c);
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++)
            for (size_t k = 0; k < c; k++)
                p[(y * w + x) * c + k] = (uint8_t)(x * 3 + y * 2 + 20 * k + (c == 1 ? 10 : 0));
    return p;
}

static uint8_t *noise(size_t h, size_t w, size_t c, uint64_t seed) {
    ps_test_rng r;
    ps_test_rng_seed(&r, seed);
    uint8_t *p = malloc(h * w * c);
    for (size_t i = 0; i < h * w * c; i++)
        p[i] = (uint8_t)ps_test_rng_uniform(&r, 0, 256);
    return p;
}

static void decode(const uint8_t *buf, size_t len, size_t h, size_t w, size_t c, ps_image *im) {
    char err[256] = "";
    int rc = ps_image_decode(buf, len, (int)c, 0, PS_IMAGE_DCT_ACCURATE, im, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "decode: %s", err);
    ck_assert_uint_eq(im->h, h);
    ck_assert_uint_eq(im->w, w);
    ck_assert_uint_eq(im->c, c);
}

static void png_round_trip(const uint8_t *px, size_t h, size_t w, size_t c) {
    uint8_t *buf;
    size_t len;
    char err[256] = "";
    int rc = ps_image_encode_png(px, h, w, c, &buf, &len, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%zux%zux%zu: %s", h, w, c, err);
    ck_assert(ps_image_sniff(buf, len) == PS_IMAGE_PNG);
    ps_image im;
    decode(buf, len, h, w, c, &im);
    ck_assert_msg(memcmp(im.pixels, px, h * w * c) == 0, "%zux%zux%zu: pixels differ", h, w, c);
    ps_image_free(&im);
    /* the file's own kind: gray stays gray, RGB stays RGB */
    ck_assert_int_eq(ps_image_decode(buf, len, 0, 0, PS_IMAGE_DCT_ACCURATE, &im, err, sizeof err), PS_OK);
    ck_assert_uint_eq(im.c, c);
    ps_image_free(&im);
    free(buf);
}

START_TEST(png_exact) {
    for (size_t c = 1; c <= 3; c += 2) {
        uint8_t *g = gradient(32, 48, c), *n = noise(17, 23, c, 7 + c), one[3] = {0, 128, 255};
        png_round_trip(g, 32, 48, c);
        png_round_trip(n, 17, 23, c);
        png_round_trip(one, 1, 1, c);
        uint8_t *big = noise(256, 300, c, 99); /* incompressible: zlib's stored blocks */
        png_round_trip(big, 256, 300, c);
        free(big);
        free(g);
        free(n);
    }
}
END_TEST

/* Encodes px as JPEG at quality q; returns the mean absolute error of the
 * decoded pixels and puts the largest in *max_err and the file size in *size. */
static double jpeg_error(const uint8_t *px, size_t h, size_t w, size_t c, int q, int *max_err,
                         size_t *size) {
    uint8_t *buf;
    size_t len;
    char err[256] = "";
    int rc = ps_image_encode_jpeg(px, h, w, c, q, &buf, &len, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%zux%zux%zu q%d: %s", h, w, c, q, err);
    ck_assert(ps_image_sniff(buf, len) == PS_IMAGE_JPEG);
    ps_image im;
    decode(buf, len, h, w, c, &im);
    double sum = 0;
    *max_err = 0;
    for (size_t i = 0; i < h * w * c; i++) {
        int d = abs((int)im.pixels[i] - (int)px[i]);
        sum += d;
        if (d > *max_err) *max_err = d;
    }
    ps_image_free(&im);
    free(buf);
    *size = len;
    return sum / (double)(h * w * c);
}

START_TEST(jpeg_close) {
    for (size_t c = 1; c <= 3; c += 2) {
        uint8_t *g = gradient(32, 48, c);
        int max_err;
        size_t size95, size10;
        double mean = jpeg_error(g, 32, 48, c, 95, &max_err, &size95);
        /* measured (libjpeg-turbo 2.1.5): gray mean 0.06 max 1, RGB mean 0.69 max 2 */
        ck_assert_msg(mean < 1.5 && max_err <= 6, "c=%zu q95: mean %.3f max %d", c, mean, max_err);
        double mean10 = jpeg_error(g, 32, 48, c, 10, &max_err, &size10);
        ck_assert_msg(size10 < size95 && mean10 > mean,
                      "c=%zu: q10 %zu bytes (mean %.3f), "
                      "q95 %zu bytes (mean %.3f)",
                      c, size10, mean10, size95, mean);
        free(g);
    }
}
END_TEST

START_TEST(jpeg_buffer_grows) {
    /* gray noise at quality 100 compresses poorly: past twice the first
     * buffer of 4096 + h*w*c/8 bytes, so it grew at least twice */
    uint8_t *n = noise(128, 160, 1, 42);
    int max_err;
    size_t size;
    double mean = jpeg_error(n, 128, 160, 1, 100, &max_err, &size);
    ck_assert_uint_gt(size, 2 * (4096 + 128 * 160 / 8));
    ck_assert_msg(mean < 0.5 && max_err <= 4, "mean %.3f max %d", mean, max_err); /* 0.10, 1 */
    free(n);
    uint8_t one = 77;
    mean = jpeg_error(&one, 1, 1, 1, 90, &max_err, &size);
    ck_assert_int_le(max_err, 2);
}
END_TEST

START_TEST(bad_arguments) {
    uint8_t px[12] = {0}, *buf;
    size_t len;
    char err[256];
    /* each call is made with *buf and *len set, which a refusal clears */
#define REFUSED(call, want)                                                                        \
    do {                                                                                           \
        buf = px, len = 99;                                                                        \
        ck_assert_int_eq(call, PS_EINVAL);                                                         \
        ck_assert_ptr_null(buf);                                                                   \
        ck_assert_uint_eq(len, 0);                                                                 \
        ck_assert_msg(strstr(err, want), "want \"%s\" in \"%s\"", want, err);                      \
    } while (0)
#define PNG(p, h, w, c) ps_image_encode_png(p, h, w, c, &buf, &len, err, sizeof err)
#define JPG(p, h, w, c, q) ps_image_encode_jpeg(p, h, w, c, q, &buf, &len, err, sizeof err)
    REFUSED(PNG(px, 2, 2, 2), "2 channels");
    REFUSED(JPG(px, 2, 2, 2, 90), "2 channels");
    REFUSED(PNG(px, 2, 2, 4), "4 channels");
    REFUSED(JPG(px, 2, 2, 0, 90), "0 channels");
    REFUSED(PNG(px, 0, 2, 3), "2x0 pixels");
    REFUSED(JPG(px, 0, 2, 3, 90), "2x0 pixels");
    REFUSED(PNG(px, 2, 0, 1), "0x2 pixels");
    REFUSED(JPG(px, 2, 0, 1, 90), "0x2 pixels");
    REFUSED(JPG(px, 1, 70000, 1, 90), "1 to 65500");
    REFUSED(PNG(px, 1, (size_t)1 << 31, 1), "1 to 2147483647");
    REFUSED(PNG(px, 1, (size_t)1 << 30, 3), "too large");
    REFUSED(JPG(px, 2, 2, 3, 0), "quality 0");
    REFUSED(JPG(px, 2, 2, 3, 101), "quality 101");
    REFUSED(PNG(NULL, 2, 2, 3), "NULL pixels");
    REFUSED(JPG(NULL, 2, 2, 3, 90), "NULL pixels");
    /* a NULL output: nothing to clear but the other one */
    len = 99;
    ck_assert_int_eq(ps_image_encode_png(px, 2, 2, 3, NULL, &len, err, sizeof err), PS_EINVAL);
    ck_assert_uint_eq(len, 0);
    ck_assert_msg(strstr(err, "NULL output"), "%s", err);
    buf = px;
    ck_assert_int_eq(ps_image_encode_jpeg(px, 2, 2, 3, 90, &buf, NULL, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_null(buf);
    ck_assert_msg(strstr(err, "NULL output"), "%s", err);
#undef PNG
#undef JPG
#undef REFUSED
}
END_TEST

static Suite *encode_suite(void) {
    Suite *s = suite_create("encode");
    TCase *tc = tcase_create("encode");
    tcase_add_test(tc, png_exact);
    tcase_add_test(tc, jpeg_close);
    tcase_add_test(tc, jpeg_buffer_grows);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(encode_suite());
}
