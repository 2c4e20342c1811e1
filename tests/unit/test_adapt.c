/* Image adaptation (worker/data/adapt.c): zero padding and channel repetition to
 * exact values, bilinear resizing against hand-computed cases (the same
 * numbers as PyTorch's interpolate(mode="bilinear", align_corners=False)),
 * RGB to luminance, whole datasets converted in place (growing and
 * shrinking), and every refusal. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "ps_error.h"
#include "testutil.h"

#define ck_assert_has(hay, needle)                                                                 \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' lacks '%s'", (hay), (needle))

static char err[512];

static ps_adapt_plan plan(size_t h, size_t w, size_t c, size_t mh, size_t mw, size_t mc,
                          ps_adapt_mode mode, bool gray) {
    ps_adapt_plan p;
    err[0] = '\0';
    ck_assert_msg(ps_adapt_plan_make(h, w, c, mh, mw, mc, mode, gray, &p, err, sizeof err) == PS_OK,
                  "%s", err);
    return p;
}

static int refused(size_t h, size_t w, size_t c, size_t mh, size_t mw, size_t mc,
                   ps_adapt_mode mode, bool gray) {
    ps_adapt_plan p;
    err[0] = '\0';
    return ps_adapt_plan_make(h, w, c, mh, mw, mc, mode, gray, &p, err, sizeof err) == PS_EINVAL;
}

START_TEST(pad_and_repeat_exact) {
    /* 2x2x1 (values 1..4) into 4x4x3: one zero row/column on every side, each
     * pixel three times */
    ps_adapt_plan p = plan(2, 2, 1, 4, 4, 3, PS_ADAPT_PAD, false);
    ck_assert(!p.identity && !p.resize && !p.gray);
    ck_assert_uint_eq(p.top, 1);
    ck_assert_uint_eq(p.left, 1);
    const float in[4] = {1, 2, 3, 4};
    float out[48], scratch[12];
    memset(out, 0x7f, sizeof out); /* garbage the padding must overwrite */
    ps_adapt_image(&p, in, out, scratch);
    for (size_t y = 0; y < 4; y++)
        for (size_t x = 0; x < 4; x++)
            for (size_t k = 0; k < 3; k++) {
                float want = y >= 1 && y <= 2 && x >= 1 && x <= 2 ? in[(y - 1) * 2 + (x - 1)] : 0;
                ck_assert_msg(out[(y * 4 + x) * 3 + k] == want, "(%zu,%zu,%zu) %g != %g", y, x, k,
                              (double)out[(y * 4 + x) * 3 + k], (double)want);
            }
    char how[256];
    ps_adapt_describe(&p, how, sizeof how);
    ck_assert_str_eq(how,
                     "zero padding 1 px top, 1 bottom, 1 left, 1 right, the channel repeated 3 "
                     "times");
}
END_TEST

START_TEST(pad_odd_difference) {
    /* 2x2x2 into 5x4x2: 3 more rows (1 on top, 2 below), 2 more columns (1 and 1) */
    ps_adapt_plan p = plan(2, 2, 2, 5, 4, 2, PS_ADAPT_PAD, false);
    ck_assert_uint_eq(p.top, 1);
    ck_assert_uint_eq(p.left, 1);
    const float in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float out[40], scratch[8];
    ps_adapt_image(&p, in, out, scratch);
    for (size_t y = 0; y < 5; y++)
        for (size_t x = 0; x < 4; x++)
            for (size_t k = 0; k < 2; k++) {
                int inside = y >= 1 && y <= 2 && x >= 1 && x <= 2;
                float want = inside ? in[((y - 1) * 2 + (x - 1)) * 2 + k] : 0;
                ck_assert(out[(y * 4 + x) * 2 + k] == want);
            }
    /* 28x28 into 32x32: 2 on each side */
    p = plan(28, 28, 1, 32, 32, 3, PS_ADAPT_PAD, false);
    ck_assert_uint_eq(p.top, 2);
    ck_assert_uint_eq(p.left, 2);
}
END_TEST

START_TEST(bilinear_up) {
    /* 2x2 [[0, 1], [2, 3]] to 4x4, worked by hand: source coordinate
     * (o + 0.5) / 2 - 0.5 clamped at 0 -> 0, 0.25, 0.75, 1 on each axis */
    ps_adapt_plan p = plan(2, 2, 1, 4, 4, 1, PS_ADAPT_RESIZE, false);
    ck_assert(p.resize);
    const float in[4] = {0, 1, 2, 3};
    static const float want[16] = {0.0f, 0.25f, 0.75f, 1.0f, 0.5f, 0.75f, 1.25f, 1.5f,
                                   1.5f, 1.75f, 2.25f, 2.5f, 2.0f, 2.25f, 2.75f, 3.0f};
    float out[16], scratch[4];
    ps_adapt_image(&p, in, out, scratch);
    for (int i = 0; i < 16; i++)
        ck_assert_msg(fabsf(out[i] - want[i]) < 1e-6f, "[%d] %g != %g", i, (double)out[i],
                      (double)want[i]);
}
END_TEST

START_TEST(bilinear_down_and_channels) {
    /* 3x4 image of v = 4 row + col (two channels: v and 100 - v) to 2x3: a
     * linear image stays linear. Rows 0.25, 1.75; columns 1/6, 1.5, 17/6. */
    ps_adapt_plan p = plan(3, 4, 2, 2, 3, 2, PS_ADAPT_RESIZE, false);
    float in[24], out[12], scratch[24];
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) {
            in[(y * 4 + x) * 2] = (float)(4 * y + x);
            in[(y * 4 + x) * 2 + 1] = 100.0f - (float)(4 * y + x);
        }
    ps_adapt_image(&p, in, out, scratch);
    static const double rows[2] = {0.25, 1.75}, cols[3] = {1.0 / 6, 1.5, 17.0 / 6};
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++) {
            double v = 4 * rows[y] + cols[x];
            ck_assert(fabs(out[(y * 3 + x) * 2] - v) < 1e-5);
            ck_assert(fabs(out[(y * 3 + x) * 2 + 1] - (100 - v)) < 1e-5);
        }
    /* RGB to gray, same size: 1x2x3 */
    p = plan(1, 2, 3, 1, 2, 1, PS_ADAPT_PAD, true);
    ck_assert(p.gray && !p.resize);
    const float rgb[6] = {1.0f, 0.5f, 0.25f, 0, 1, 0};
    ps_adapt_image(&p, rgb, out, scratch);
    ck_assert(fabsf(out[0] - (0.2989f + 0.5870f * 0.5f + 0.1140f * 0.25f)) < 1e-6f);
    ck_assert(fabsf(out[1] - 0.5870f) < 1e-6f);
}
END_TEST

START_TEST(identity_cases) {
    /* the same shape; a flat model on 28x28x1 (784 values); an image model on flat data */
    ck_assert(plan(28, 28, 1, 28, 28, 1, PS_ADAPT_REFUSE, false).identity);
    ck_assert(plan(28, 28, 1, 1, 1, 784, PS_ADAPT_PAD, false).identity);
    ck_assert(plan(1, 1, 784, 28, 28, 1, PS_ADAPT_PAD, false).identity);
    ck_assert(plan(32, 32, 3, 32, 32, 3, PS_ADAPT_RESIZE, false).identity);
}
END_TEST

START_TEST(refusals) {
    ck_assert(refused(32, 32, 3, 28, 28, 3, PS_ADAPT_PAD, false)); /* 32 -> 28 */
    ck_assert_has(err, "larger than the model's input (28x28)");
    ck_assert_has(err, "--input-adapt resize");
    ck_assert(refused(28, 30, 1, 30, 28, 1, PS_ADAPT_PAD, false)); /* one axis larger */
    ck_assert(refused(32, 32, 3, 32, 32, 1, PS_ADAPT_PAD, false)); /* 3 -> 1, not asked */
    ck_assert_has(err, "--rgb-to-gray yes");
    ck_assert(refused(32, 32, 3, 32, 32, 1, PS_ADAPT_RESIZE, false));
    ck_assert(refused(28, 28, 2, 32, 32, 3, PS_ADAPT_PAD, false)); /* 2 -> 3 */
    ck_assert_has(err, "2 channels, the model's input 3");
    ck_assert(refused(28, 28, 3, 28, 28, 4, PS_ADAPT_PAD, true)); /* 3 -> 4 */
    ck_assert(refused(28, 28, 1, 32, 32, 3, PS_ADAPT_REFUSE, false));
    ck_assert_has(err, "28x28x1, the model's input is 32x32x3 (--input-adapt refuse)");
    ck_assert(refused(32, 32, 3, 1, 1, 784, PS_ADAPT_RESIZE, false)); /* flat model */
    ck_assert_has(err, "the model's flat input takes 784");
    ck_assert(refused(1, 1, 700, 28, 28, 1, PS_ADAPT_RESIZE, false)); /* flat data */
    ck_assert_has(err, "flat vectors of 700 values");
    /* asked for: 32x32x3 -> 28x28x1 */
    ps_adapt_plan p = plan(32, 32, 3, 28, 28, 1, PS_ADAPT_RESIZE, true);
    ck_assert(p.resize && p.gray);
}
END_TEST

/* Fills d with n samples of shape (h, w, c), values distinct per sample and place. */
static void fill(ps_dataset *d, size_t n, size_t h, size_t w, size_t c) {
    *d = (ps_dataset){.n = n, .dim = h * w * c, .h = h, .w = w, .c = c, .num_classes = 1};
    d->x = malloc(n * d->dim * sizeof *d->x);
    d->y = calloc(n, sizeof *d->y);
    for (size_t i = 0; i < n * d->dim; i++)
        d->x[i] = (float)((i * 37) % 101) / 100.0f;
}

/* The whole dataset converted in place equals each image converted alone. */
static void check_dataset(const ps_adapt_plan *p, size_t n) {
    ps_dataset d;
    fill(&d, n, p->in_h, p->in_w, p->in_c);
    size_t din = d.dim, dout = p->out_h * p->out_w * p->out_c;
    float *orig = malloc(n * din * sizeof *orig), *want = malloc(dout * sizeof *want);
    float *scratch = malloc(p->in_h * p->in_w * p->out_c * sizeof *scratch);
    memcpy(orig, d.x, n * din * sizeof *orig);
    ck_assert_int_eq(ps_adapt_dataset(p, &d, err, sizeof err), PS_OK);
    ck_assert_uint_eq(d.dim, dout);
    ck_assert_uint_eq(d.h * 10000 + d.w * 100 + d.c, p->out_h * 10000 + p->out_w * 100 + p->out_c);
    for (size_t i = 0; i < n; i++) {
        ps_adapt_image(p, orig + i * din, want, scratch);
        ck_assert_msg(memcmp(d.x + i * dout, want, dout * sizeof *want) == 0, "sample %zu", i);
    }
    free(orig);
    free(want);
    free(scratch);
    ps_dataset_free(&d);
}

START_TEST(dataset_grow_and_shrink) {
    ps_adapt_plan p = plan(5, 5, 1, 8, 8, 3, PS_ADAPT_PAD, false); /* grows */
    check_dataset(&p, 7);
    p = plan(6, 6, 3, 3, 3, 1, PS_ADAPT_RESIZE, true); /* shrinks */
    check_dataset(&p, 7);
    p = plan(3, 3, 1, 3, 3, 2, PS_ADAPT_PAD, false); /* channels only */
    check_dataset(&p, 5);
    /* the flat shape when the loader gave none */
    ps_dataset d = {.dim = 12};
    size_t h, w, c;
    ps_adapt_data_shape(&d, &h, &w, &c);
    ck_assert_uint_eq(h * 10000 + w * 100 + c, 10112);
}
END_TEST

int main(void) {
    Suite *s = suite_create("adapt");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, pad_and_repeat_exact);
    tcase_add_test(tc, pad_odd_difference);
    tcase_add_test(tc, bilinear_up);
    tcase_add_test(tc, bilinear_down_and_channels);
    tcase_add_test(tc, identity_cases);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, dataset_grow_and_shrink);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
