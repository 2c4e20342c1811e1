/* Preprocessing and augmentation (worker/data/augment.c): the bilinear resize
 * against hand-worked values and a small reference written the way
 * TensorFlow's resize_bilinear computes its weights, crops picking the right
 * window, random crops and flips the same for a seed and spread over seeds,
 * the evaluation form, rescale and normalize arithmetic, a chained plan equal
 * to its parts, every malformed spec and every shape refused with a reason. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "augment.h"
#include "ps_error.h"
#include "testutil.h"

#define ck_assert_has(hay, needle)                                                                 \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' lacks '%s'", (hay), (needle))

static char err[512];

static ps_aug_plan parse(const char *json) {
    cJSON *j = cJSON_Parse(json);
    ck_assert_msg(j != NULL, "bad JSON in the test: %s", json);
    ps_aug_plan p;
    err[0] = '\0';
    int rc = ps_aug_plan_parse(j, &p, err, sizeof err);
    cJSON_Delete(j);
    ck_assert_msg(rc == PS_OK, "%s: %s", json, err);
    return p;
}

/* The plan's output for in [h][w][c] into a malloc'd image (shape in *oh, *ow,
 * *oc), with scratch of exactly the size asked for (so ASan sees any overrun). */
static float *apply(const ps_aug_plan *p, const float *in, size_t h, size_t w, size_t c,
                    uint64_t seed, bool training, size_t *oh, size_t *ow, size_t *oc) {
    size_t a, b, d;
    err[0] = '\0';
    int rc = ps_aug_plan_shape(p, h, w, c, &a, &b, &d, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "shape: %s", err);
    size_t ns = ps_aug_scratch_floats(p, h, w, c);
    float *scratch = ns ? malloc(ns * sizeof *scratch) : NULL;
    float *out = malloc(a * b * d * sizeof *out);
    ps_aug_apply(p, in, h, w, c, out, scratch, seed, training);
    free(scratch);
    if (oh) *oh = a, *ow = b, *oc = d;
    return out;
}

/* An image whose value at (y, x, k) is 1000 k + w y + x: a pixel names its place. */
static float *indexed(size_t h, size_t w, size_t c) {
    float *im = malloc(h * w * c * sizeof *im);
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++)
            for (size_t k = 0; k < c; k++)
                im[(y * w + x) * c + k] = (float)(1000 * k + w * y + x);
    return im;
}

static void assert_close(const float *got, const float *want, size_t n, float atol) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= atol, "[%zu] %.9g != %.9g", i, (double)got[i],
                      (double)want[i]);
}

/* tf.image.resize(bilinear, antialias=False) as TensorFlow's kernel writes it
 * (resize_bilinear_op.cc): in = (o + 0.5) * scale - 0.5 in float, lower =
 * max(floor(in), 0), upper = min(ceil(in), n - 1), lerp = in - floor(in). */
static void reference_resize(const float *in, size_t h, size_t w, size_t c, float *out, size_t oh,
                             size_t ow) {
    float sy = (float)h / (float)oh, sx = (float)w / (float)ow;
    for (size_t y = 0; y < oh; y++) {
        float iy = ((float)y + 0.5f) * sy - 0.5f, fy = floorf(iy);
        long ylo = fy < 0 ? 0 : (long)fy, yhi = (long)ceilf(iy);
        if (yhi > (long)h - 1) yhi = (long)h - 1;
        if (yhi < 0) yhi = 0;
        float ly = iy - fy;
        for (size_t x = 0; x < ow; x++) {
            float ix = ((float)x + 0.5f) * sx - 0.5f, fx = floorf(ix);
            long xlo = fx < 0 ? 0 : (long)fx, xhi = (long)ceilf(ix);
            if (xhi > (long)w - 1) xhi = (long)w - 1;
            if (xhi < 0) xhi = 0;
            float lx = ix - fx;
            for (size_t k = 0; k < c; k++) {
                float tl = in[((size_t)ylo * w + (size_t)xlo) * c + k];
                float tr = in[((size_t)ylo * w + (size_t)xhi) * c + k];
                float bl = in[((size_t)yhi * w + (size_t)xlo) * c + k];
                float br = in[((size_t)yhi * w + (size_t)xhi) * c + k];
                float top = tl + (tr - tl) * lx, bot = bl + (br - bl) * lx;
                out[(y * ow + x) * c + k] = top + (bot - top) * ly;
            }
        }
    }
}

START_TEST(resize_hand_worked) {
    /* 2x2 [[0, 1], [2, 3]] to 4x4: source coordinates (o + 0.5) / 2 - 0.5,
     * clamped at 0 -> 0, 0.25, 0.75, 1 on each axis */
    ps_aug_plan p = parse("[{\"resize\": [4, 4]}]");
    const float in[4] = {0, 1, 2, 3};
    static const float up[16] = {0.0f, 0.25f, 0.75f, 1.0f, 0.5f, 0.75f, 1.25f, 1.5f,
                                 1.5f, 1.75f, 2.25f, 2.5f, 2.0f, 2.25f, 2.75f, 3.0f};
    size_t oh, ow, oc;
    float *out = apply(&p, in, 2, 2, 1, 0, true, &oh, &ow, &oc);
    ck_assert(oh == 4 && ow == 4 && oc == 1);
    assert_close(out, up, 16, 1e-6f);
    free(out);

    /* 4x4 of 4 y + x to 3x3: coordinates (o + 0.5) * 4/3 - 0.5 = 1/6, 3/2, 17/6;
     * a linear image stays linear */
    p = parse("[{\"resize\": [3, 3]}]");
    float *lin = indexed(4, 4, 1);
    out = apply(&p, lin, 4, 4, 1, 0, true, &oh, &ow, &oc);
    static const double at[3] = {1.0 / 6, 1.5, 17.0 / 6};
    float down[9];
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 3; x++)
            down[y * 3 + x] = (float)(4 * at[y] + at[x]);
    assert_close(out, down, 9, 1e-5f);
    free(out), free(lin);

    /* not linear: a row [0, 6, 3] to 2 samples at 0.25 and 1.75 -> 1.5, 3.75;
     * a row [0, 8] to 5 at -0.3 (clamped), 0.1, 0.5, 0.9, 1.3 (clamped) */
    p = parse("[{\"resize\": [1, 2]}]");
    const float row3[3] = {0, 6, 3}, want2[2] = {1.5f, 3.75f};
    out = apply(&p, row3, 1, 3, 1, 0, true, NULL, NULL, NULL);
    assert_close(out, want2, 2, 1e-6f);
    free(out);
    p = parse("[{\"resize\": [1, 5]}]");
    const float row2[2] = {0, 8}, want5[5] = {0, 0.8f, 4, 7.2f, 8};
    out = apply(&p, row2, 1, 2, 1, 0, true, NULL, NULL, NULL);
    assert_close(out, want5, 5, 1e-5f);
    free(out);
}
END_TEST

START_TEST(resize_matches_reference) {
    static const size_t cases[][5] = {
        {7, 5, 3, 13, 11}, {13, 11, 3, 4, 6}, {32, 32, 1, 224, 224},
        {9, 1, 2, 3, 4},   {6, 6, 3, 6, 6},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const size_t *q = cases[t];
        size_t n = q[0] * q[1] * q[2], m = q[3] * q[4] * q[2];
        float *in = malloc(n * sizeof *in), *want = malloc(m * sizeof *want);
        ps_test_fill_uniform(in, n, 100 + t, 0, 255);
        reference_resize(in, q[0], q[1], q[2], want, q[3], q[4]);
        char spec[64];
        snprintf(spec, sizeof spec, "[{\"resize\": [%zu, %zu]}]", q[3], q[4]);
        ps_aug_plan p = parse(spec);
        float *out = apply(&p, in, q[0], q[1], q[2], 0, true, NULL, NULL, NULL);
        long bad = ps_test_first_mismatch(out, want, m, 1e-3f, 1e-5f);
        ck_assert_msg(bad < 0, "case %zu [%ld]: %g != %g", t, bad, (double)out[bad],
                      (double)want[bad]);
        if (q[0] == q[3] && q[1] == q[4])
            ck_assert(memcmp(out, in, n * sizeof *in) == 0); /* the same size: the same values */
        free(out), free(want), free(in);
    }
}
END_TEST

/* 1 when out [oh][ow][c] is in's window at (top, left). */
static int is_window(const float *out, const float *in, size_t w, size_t c, size_t top, size_t left,
                     size_t oh, size_t ow) {
    for (size_t y = 0; y < oh; y++)
        if (memcmp(out + y * ow * c, in + ((top + y) * w + left) * c, ow * c * sizeof *out) != 0)
            return 0;
    return 1;
}

START_TEST(center_crop_window) {
    /* 5x6 to 2x3: offsets floor(3/2) = 1, floor(3/2) = 1; 4x4 to 3x3: 0, 0;
     * 7x8 to 7x2: 0, 3 */
    static const size_t cases[][6] = {
        {5, 6, 2, 3, 1, 1}, {4, 4, 3, 3, 0, 0}, {7, 8, 7, 2, 0, 3}, {3, 3, 3, 3, 0, 0}};
    for (size_t t = 0; t < 4; t++) {
        const size_t *q = cases[t];
        float *in = indexed(q[0], q[1], 2);
        char spec[64];
        snprintf(spec, sizeof spec, "[{\"center_crop\": [%zu, %zu]}]", q[2], q[3]);
        ps_aug_plan p = parse(spec);
        for (int training = 0; training < 2; training++) {
            size_t oh, ow, oc;
            float *out = apply(&p, in, q[0], q[1], 2, 7, training, &oh, &ow, &oc);
            ck_assert(oh == q[2] && ow == q[3] && oc == 2);
            ck_assert_msg(is_window(out, in, q[1], 2, q[4], q[5], q[2], q[3]), "case %zu", t);
            free(out);
        }
        free(in);
    }
}
END_TEST

START_TEST(random_crop_per_seed) {
    /* 10x9 to 6x6: 5 x 4 = 20 windows. The top-left value (w y + x) names the window. */
    const size_t h = 10, w = 9, c = 3, ch = 6, cw = 6;
    float *in = indexed(h, w, c);
    ps_aug_plan p = parse("[{\"random_crop\": [6, 6]}]");
    int seen[5][4] = {{0}};
    for (uint64_t seed = 0; seed < 1000; seed++) {
        float *a = apply(&p, in, h, w, c, seed, true, NULL, NULL, NULL);
        float *b = apply(&p, in, h, w, c, seed, true, NULL, NULL, NULL);
        ck_assert_msg(memcmp(a, b, ch * cw * c * sizeof *a) == 0, "seed %llu differs",
                      (unsigned long long)seed);
        size_t top = (size_t)a[0] / w, left = (size_t)a[0] % w;
        ck_assert_msg(top <= h - ch && left <= w - cw, "window (%zu, %zu) out of range", top, left);
        ck_assert(is_window(a, in, w, c, top, left, ch, cw));
        seen[top][left]++;
        free(a), free(b);
    }
    /* every window drawn, none far from 1000 / 20 = 50 (a binomial's sd is 6.9) */
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 4; x++)
            ck_assert_msg(seen[y][x] >= 20 && seen[y][x] <= 85, "window (%d, %d): %d of 1000", y, x,
                          seen[y][x]);
    /* evaluation: the center crop of that size, whatever the seed */
    for (uint64_t seed = 0; seed < 20; seed++) {
        float *e = apply(&p, in, h, w, c, seed * 7919, false, NULL, NULL, NULL);
        ck_assert(is_window(e, in, w, c, 2, 1, ch, cw));
        free(e);
    }
    /* a crop of the whole image is the image */
    p = parse("[{\"random_crop\": [10, 9]}]");
    float *all = apply(&p, in, h, w, c, 3, true, NULL, NULL, NULL);
    ck_assert(memcmp(all, in, h * w * c * sizeof *in) == 0);
    free(all), free(in);
}
END_TEST

START_TEST(random_flip_rate) {
    const size_t h = 3, w = 5, c = 2;
    float *in = indexed(h, w, c), mirror[30];
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x++)
            for (size_t k = 0; k < c; k++)
                mirror[(y * w + x) * c + k] = in[(y * w + (w - 1 - x)) * c + k];
    ps_aug_plan p = parse("[{\"random_flip\": \"horizontal\"}]");
    int flips = 0;
    for (uint64_t seed = 0; seed < 1000; seed++) {
        float *a = apply(&p, in, h, w, c, seed, true, NULL, NULL, NULL);
        float *b = apply(&p, in, h, w, c, seed, true, NULL, NULL, NULL);
        ck_assert(memcmp(a, b, sizeof mirror) == 0);
        int flipped = memcmp(a, mirror, sizeof mirror) == 0;
        ck_assert(flipped || memcmp(a, in, sizeof mirror) == 0);
        flips += flipped;
        free(a), free(b);
        float *e = apply(&p, in, h, w, c, seed, false, NULL, NULL, NULL);
        ck_assert(memcmp(e, in, sizeof mirror) == 0); /* evaluation: never flipped */
        free(e);
    }
    /* 500 expected, sd 15.8 */
    ck_assert_msg(flips >= 440 && flips <= 560, "%d flips in 1000", flips);
    free(in);
}
END_TEST

START_TEST(crop_and_flip_independent) {
    /* in one plan, the flip's draw follows the crop's two: every (window,
     * flip) pair occurs */
    const size_t h = 4, w = 4;
    float *in = indexed(h, w, 1);
    ps_aug_plan p = parse("[{\"random_crop\": [3, 3]}, {\"random_flip\": \"horizontal\"}]");
    int seen[2][2][2] = {{{0}}};
    for (uint64_t seed = 0; seed < 400; seed++) {
        float *a = apply(&p, in, h, w, 1, seed, true, NULL, NULL, NULL);
        /* unflipped: a[0] < a[2] (the row rises left to right) */
        int flipped = a[0] > a[2];
        size_t left = (size_t)(flipped ? a[2] : a[0]) % w, top = (size_t)a[0] / w;
        seen[top][left][flipped]++;
        free(a);
    }
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 2; x++)
            for (int f = 0; f < 2; f++)
                ck_assert_msg(seen[y][x][f] >= 20, "(%d, %d, flip %d): %d of 400", y, x, f,
                              seen[y][x][f]);
    free(in);
}
END_TEST

START_TEST(rescale_arithmetic) {
    const float in[4] = {0, 127.5f, 255, 51};
    ps_aug_plan p = parse("[{\"rescale\": \"mobilenet_v2\"}]");
    float *out = apply(&p, in, 1, 4, 1, 0, true, NULL, NULL, NULL);
    const float mn[4] = {-1, 0, 1, -0.6f};
    assert_close(out, mn, 4, 1e-6f);
    free(out);
    p = parse("[{\"rescale\": {\"scale\": 2, \"offset\": 0.5}}]");
    out = apply(&p, in, 2, 2, 1, 0, true, NULL, NULL, NULL);
    const float so[4] = {0.5f, 255.5f, 510.5f, 102.5f};
    assert_close(out, so, 4, 0);
    free(out);
    p = parse("[{\"rescale\": 0.00392156862745098}]"); /* 1/255, no offset */
    ck_assert(p.ops[0].offset == 0);
    out = apply(&p, in, 4, 1, 1, 0, false, NULL, NULL, NULL);
    const float unit[4] = {0, 0.5f, 1, 0.2f};
    assert_close(out, unit, 4, 1e-6f);
    free(out);
    p = parse("[{\"rescale\": {\"scale\": -1}}]");
    out = apply(&p, in, 4, 1, 1, 0, false, NULL, NULL, NULL);
    ck_assert(out[2] == -255);
    free(out);
}
END_TEST

START_TEST(normalize_arithmetic) {
    /* 1x2x3 */
    const float in[6] = {1, 2, 3, 5, 10, 4};
    ps_aug_plan p = parse("[{\"normalize\": {\"mean\": [1, 2, 3], \"std\": [2, 4, 0.5]}}]");
    float *out = apply(&p, in, 1, 2, 3, 0, true, NULL, NULL, NULL);
    const float per[6] = {0, 0, 0, 2, 2, 2};
    assert_close(out, per, 6, 0);
    free(out);
    /* one value for every channel, and one list broadcast against a single value */
    p = parse("[{\"normalize\": {\"mean\": [1], \"std\": [2]}}]");
    ck_assert_uint_eq(p.ops[0].n_ch, 1);
    out = apply(&p, in, 1, 2, 3, 0, true, NULL, NULL, NULL);
    const float one[6] = {0, 0.5f, 1, 2, 4.5f, 1.5f};
    assert_close(out, one, 6, 0);
    free(out);
    p = parse("[{\"normalize\": {\"std\": [4], \"mean\": [1, 2, 0]}}]");
    ck_assert_uint_eq(p.ops[0].n_ch, 3);
    out = apply(&p, in, 2, 1, 3, 0, true, NULL, NULL, NULL);
    const float mix[6] = {0, 0, 0.75f, 1, 2, 1};
    assert_close(out, mix, 6, 0);
    free(out);
}
END_TEST

START_TEST(log1p_counts) {
    /* counts as a click log's numeric fields: log(1 + x); negative and NaN read as 0 */
    const float in[6] = {0, 1, 1000, -3, NAN, 1e30f};
    ps_aug_plan p = parse("[{\"log1p\": true}]");
    float *out = apply(&p, in, 1, 1, 6, 0, true, NULL, NULL, NULL);
    const float want[6] = {0, 0.69314718f, 6.9087548f, 0, 0, 69.077553f};
    assert_close(out, want, 6, 1e-5f);
    free(out);
    /* chained: log1p, then normalize */
    p = parse("[{\"log1p\": true}, {\"normalize\": {\"mean\": [1], \"std\": [2]}}]");
    out = apply(&p, in, 1, 1, 6, 0, false, NULL, NULL, NULL);
    ck_assert(fabsf(out[1] - (0.69314718f - 1) / 2) < 1e-6f);
    free(out);
}
END_TEST

START_TEST(chain_equals_its_parts) {
    /* resize, random crop, flip, rescale, normalize in one plan (scratch
     * ping-pong, the flip skipped when it does not fire) against the same ops
     * one plan at a time; the random ops see the same seed, so draw the same */
    const size_t h = 17, w = 23, c = 3;
    float *in = malloc(h * w * c * sizeof *in);
    ps_test_fill_uniform(in, h * w * c, 5, 0, 255);
    ps_aug_plan all = parse("[{\"resize\": [12, 14]}, {\"random_crop\": [9, 10]}, "
                            "{\"random_flip\": \"horizontal\"}, {\"rescale\": \"mobilenet_v2\"}, "
                            "{\"normalize\": {\"mean\": [0.1, 0.2, 0.3], \"std\": [0.5]}}]");
    ps_aug_plan p1 = parse("[{\"resize\": [12, 14]}]");
    ps_aug_plan p2 = parse("[{\"random_crop\": [9, 10]}, {\"random_flip\": \"horizontal\"}]");
    ps_aug_plan p3 = parse("[{\"rescale\": \"mobilenet_v2\"}]");
    ps_aug_plan p4 = parse("[{\"normalize\": {\"mean\": [0.1, 0.2, 0.3], \"std\": [0.5]}}]");
    ck_assert_uint_eq(ps_aug_scratch_floats(&all, h, w, c), 2 * 12 * 14 * 3);
    ck_assert_uint_eq(ps_aug_scratch_floats(&p1, h, w, c), 0);
    for (uint64_t seed = 0; seed < 16; seed++)
        for (int training = 0; training < 2; training++) {
            size_t oh, ow, oc;
            float *got = apply(&all, in, h, w, c, seed, training, &oh, &ow, &oc);
            ck_assert(oh == 9 && ow == 10 && oc == 3);
            float *a = apply(&p1, in, h, w, c, seed, training, NULL, NULL, NULL);
            float *b = apply(&p2, a, 12, 14, c, seed, training, NULL, NULL, NULL);
            float *d = apply(&p3, b, 9, 10, c, seed, training, NULL, NULL, NULL);
            float *e = apply(&p4, d, 9, 10, c, seed, training, NULL, NULL, NULL);
            ck_assert_msg(memcmp(got, e, 9 * 10 * 3 * sizeof *e) == 0, "seed %llu, training %d",
                          (unsigned long long)seed, training);
            free(got), free(a), free(b), free(d), free(e);
        }
    /* the empty plan copies */
    ps_aug_plan none = parse("[]");
    float *same = apply(&none, in, h, w, c, 1, true, NULL, NULL, NULL);
    ck_assert(memcmp(same, in, h * w * c * sizeof *in) == 0);
    free(same), free(in);
}
END_TEST

/* json must be refused with PS_EINVAL and a reason containing want. */
static void refused(const char *json, const char *want) {
    cJSON *j = cJSON_Parse(json);
    ck_assert_msg(j != NULL, "bad JSON in the test: %s", json);
    ps_aug_plan p;
    err[0] = '\0';
    int rc = ps_aug_plan_parse(j, &p, err, sizeof err);
    cJSON_Delete(j);
    ck_assert_msg(rc == PS_EINVAL, "%s: accepted (%d)", json, rc);
    ck_assert_msg(strstr(err, want) != NULL, "%s: '%s' lacks '%s'", json, err, want);
    ck_assert_uint_eq(p.n, 0);
}

START_TEST(parse_errors) {
    refused("{\"resize\": [2, 2]}", "preprocess: expected a list of operations");
    refused("[3]", "preprocess[0]: expected an object with exactly one key");
    refused("[{}]", "preprocess[0]: expected an object with exactly one key");
    refused("[{\"resize\": [2, 2], \"rescale\": 1}]", "exactly one key (resize, center_crop");
    refused("[{\"resize\": [2, 2]}, {\"blur\": 1}]", "preprocess[1]: unknown operation \"blur\"");
    refused("[{\"Resize\": [2, 2]}]", "unknown operation \"Resize\"");
    refused("[{\"log1p\": 1}]", "preprocess[0]: log1p expects true");
    refused("[{\"log1p\": false}]", "preprocess[0]: log1p expects true");
    /* sizes */
    const char *sizes[] = {"[0, 4]",   "[4, 0]",  "[4]",      "[4, 4, 3]",  "\"4x4\"",    "4",
                           "[2.5, 3]", "[-1, 3]", "[1e9, 3]", "[\"4\", 4]", "{\"h\": 4}", "[]"};
    const char *ops[] = {"resize", "center_crop", "random_crop"};
    for (size_t o = 0; o < 3; o++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            char json[128], want[96];
            snprintf(json, sizeof json, "[{\"%s\": %s}]", ops[o], sizes[i]);
            snprintf(want, sizeof want, "preprocess[0]: %s expects [height, width], two whole",
                     ops[o]);
            refused(json, want);
        }
    /* flip */
    refused("[{\"random_flip\": \"vertical\"}]",
            "random_flip \"vertical\": only \"horizontal\" is supported for now");
    refused("[{\"random_flip\": \"horizontal_and_vertical\"}]", "only \"horizontal\"");
    refused("[{\"random_flip\": true}]", "random_flip expects the string \"horizontal\"");
    refused("[{\"random_flip\": null}]", "random_flip expects");
    /* rescale */
    refused("[{\"rescale\": \"inception\"}]", "the only preset is \"mobilenet_v2\"");
    refused("[{\"rescale\": [1]}]", "rescale expects a number (the scale)");
    refused("[{\"rescale\": {\"scale\": 1, \"bias\": 0}}]", "rescale: unknown key \"bias\"");
    refused("[{\"rescale\": {\"offset\": 1}}]", "rescale: \"scale\" is missing");
    refused("[{\"rescale\": {\"scale\": \"1\"}}]", "rescale: scale is not a finite number");
    refused("[{\"rescale\": {\"scale\": 1, \"offset\": 1e300}}]", "offset is not a finite");
    refused("[{\"rescale\": 1e300}]", "rescale: the scale is not a finite number");
    /* normalize */
    refused("[{\"normalize\": [0, 1]}]", "normalize expects {\"mean\"");
    refused("[{\"normalize\": {\"mean\": [0]}}]", "normalize: \"std\" is missing");
    refused("[{\"normalize\": {\"std\": [1]}}]", "normalize: \"mean\" is missing");
    refused("[{\"normalize\": {\"mean\": [0], \"std\": [1], \"eps\": 0}}]",
            "normalize: unknown key \"eps\"");
    refused("[{\"normalize\": {\"mean\": [0], \"std\": [0]}}]", "std[0] is 0, it must be above 0");
    refused("[{\"normalize\": {\"mean\": [0], \"std\": [1, -2, 1]}}]", "std[1] is -2");
    refused("[{\"normalize\": {\"mean\": 0, \"std\": [1]}}]", "mean expects a list of 1");
    refused("[{\"normalize\": {\"mean\": [], \"std\": [1]}}]", "mean expects a list of 1");
    refused("[{\"normalize\": {\"mean\": [1, 2, 3, 4, 5], \"std\": [1]}}]", "to 4 numbers");
    refused("[{\"normalize\": {\"mean\": [0, \"x\"], \"std\": [1]}}]", "mean[1] is not a finite");
    refused("[{\"normalize\": {\"mean\": [0, 0], \"std\": [1, 1, 1]}}]",
            "mean has 2 values, std 3");
    /* too many */
    char many[1024] = "[";
    for (int i = 0; i < PS_AUG_MAX_OPS + 1; i++)
        strcat(many,
               i ? ", {\"random_flip\": \"horizontal\"}" : "{\"random_flip\": \"horizontal\"}");
    strcat(many, "]");
    refused(many, "preprocess: 17 operations, at most 16");
    /* and what is accepted: no key at all, an empty list, the longest list */
    ps_aug_plan p;
    ck_assert_int_eq(ps_aug_plan_parse(NULL, &p, err, sizeof err), PS_OK);
    ck_assert_uint_eq(p.n, 0);
    strcpy(strrchr(many, ','), "]");
    ck_assert_uint_eq(parse(many).n, PS_AUG_MAX_OPS);
}
END_TEST

START_TEST(shape_errors) {
    size_t oh, ow, oc;
    ps_aug_plan p = parse("[{\"resize\": [32, 40]}, {\"random_crop\": [24, 24]}, "
                          "{\"center_crop\": [20, 30]}]");
    ck_assert_int_eq(ps_aug_plan_shape(&p, 100, 100, 3, &oh, &ow, &oc, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "preprocess[2]: center_crop 20x30 is larger than the image there (24x24)");
    p = parse("[{\"random_crop\": [28, 29]}]");
    ck_assert_int_eq(ps_aug_plan_shape(&p, 28, 28, 1, &oh, &ow, &oc, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "preprocess[0]: random_crop 28x29 is larger than the image there (28x28)");
    ck_assert_int_eq(ps_aug_plan_shape(&p, 28, 29, 1, &oh, &ow, &oc, err, sizeof err), PS_OK);
    ck_assert(oh == 28 && ow == 29 && oc == 1);
    p = parse("[{\"normalize\": {\"mean\": [0, 0, 0], \"std\": [1]}}]");
    ck_assert_int_eq(ps_aug_plan_shape(&p, 28, 28, 1, &oh, &ow, &oc, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "preprocess[0]: normalize gives 3 means/stds, the image has 1 channel");
    ck_assert_int_eq(ps_aug_plan_shape(&p, 28, 28, 3, &oh, &ow, &oc, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_aug_plan_shape(&p, 0, 28, 3, &oh, &ow, &oc, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "an empty image (0x28x3)");
    /* the resize makes a small image big enough for the crop that follows */
    p = parse("[{\"resize\": [256, 256]}, {\"random_crop\": [224, 224]}]");
    ck_assert_int_eq(ps_aug_plan_shape(&p, 28, 28, 3, &oh, &ow, &oc, err, sizeof err), PS_OK);
    ck_assert(oh == 224 && ow == 224 && oc == 3);
}
END_TEST

START_TEST(describe) {
    char how[256];
    ps_aug_plan p = parse("[{\"resize\": [224, 224]}, {\"random_crop\": [200, 200]}, "
                          "{\"random_flip\": \"horizontal\"}, {\"rescale\": \"mobilenet_v2\"}]");
    ps_aug_describe(&p, how, sizeof how);
    ck_assert_str_eq(how, "resize 224x224 (bilinear), random crop 200x200, random horizontal "
                          "flip, rescale x0.00784314 -1");
    p = parse("[{\"center_crop\": [3, 4]}, {\"rescale\": 2}, "
              "{\"normalize\": {\"mean\": [0.485, 0.456, 0.406], \"std\": [0.5]}}]");
    ps_aug_describe(&p, how, sizeof how);
    ck_assert_str_eq(how, "center crop 3x4, rescale x2, normalize mean [0.485 0.456 0.406] std "
                          "[0.5 0.5 0.5]");
    p = parse("[{\"log1p\": true}, {\"rescale\": 0.5}]");
    ps_aug_describe(&p, how, sizeof how);
    ck_assert_str_eq(how, "log1p, rescale x0.5");
    p = parse("[]");
    ps_aug_describe(&p, how, sizeof how);
    ck_assert_str_eq(how, "none");
    p = parse("[{\"resize\": [224, 224]}, {\"random_crop\": [200, 200]}]");
    ps_aug_describe(&p, how, 12); /* truncated, still terminated */
    ck_assert_str_eq(how, "resize 224x");
}
END_TEST

static Suite *augment_suite(void) {
    Suite *s = suite_create("augment");
    TCase *tc = tcase_create("apply");
    tcase_add_test(tc, resize_hand_worked);
    tcase_add_test(tc, resize_matches_reference);
    tcase_add_test(tc, center_crop_window);
    tcase_add_test(tc, random_crop_per_seed);
    tcase_add_test(tc, random_flip_rate);
    tcase_add_test(tc, crop_and_flip_independent);
    tcase_add_test(tc, rescale_arithmetic);
    tcase_add_test(tc, normalize_arithmetic);
    tcase_add_test(tc, log1p_counts);
    tcase_add_test(tc, chain_equals_its_parts);
    suite_add_tcase(s, tc);
    tc = tcase_create("spec");
    tcase_add_test(tc, parse_errors);
    tcase_add_test(tc, shape_errors);
    tcase_add_test(tc, describe);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(augment_suite());
}
