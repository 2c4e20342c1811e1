/* Gradient clipping (common/clip.c): clipnorm bounds each variable's norm and
 * leaves the small ones alone, global_clipnorm bounds the norm of all of them
 * together and leaves a small total alone, clipvalue bounds each element; none
 * touches what lies outside the ranges (the moving statistics' slots). */
#include <check.h>
#include <math.h>
#include <string.h>

#include "clip.h"
#include "testutil.h"

/* Three variables [0,2) [2,5) [6,8); element 5 and 8 are outside every range. */
static const ps_clip_range R[3] = {{0, 2}, {2, 3}, {6, 2}};
#define NG 9

static double norm_of(const float *g, ps_clip_range r) {
    double s = 0;
    for (size_t i = 0; i < r.len; i++)
        s += (double)g[r.off + i] * g[r.off + i];
    return sqrt(s);
}

START_TEST(clipnorm_bounds_each_variable) {
    /* norms 5, 13 and 0.5 */
    float g[NG] = {3, 4, 3, 4, 12, 99, 0.3f, 0.4f, -99};
    float before[NG];
    memcpy(before, g, sizeof g);
    ps_clip_by_norm(g, R, 3, 2.0f);
    ck_assert_double_le(fabs(norm_of(g, R[0]) - 2.0), 1e-6);
    ck_assert_double_le(fabs(norm_of(g, R[1]) - 2.0), 1e-6);
    /* the direction is kept */
    ck_assert_double_le(fabs(g[0] / g[1] - 0.75), 1e-6);
    ck_assert_double_le(fabs(g[4] / g[2] - 4.0), 1e-6);
    /* a small one and the elements outside the ranges: exactly as they were */
    ck_assert(g[6] == before[6] && g[7] == before[7]);
    ck_assert(g[5] == 99 && g[8] == -99);
}
END_TEST

START_TEST(global_clipnorm_bounds_the_total) {
    /* total norm sqrt(25 + 169 + 0.25) */
    float g[NG] = {3, 4, 3, 4, 12, 99, 0.3f, 0.4f, -99};
    float before[NG];
    memcpy(before, g, sizeof g);
    double total = sqrt(25 + 169 + 0.25);
    double n = ps_clip_by_global_norm(g, R, 3, 6.0f);
    ck_assert_double_le(fabs(n - total), 1e-5);
    ck_assert_double_le(fabs(ps_clip_global_norm(g, R, 3) - 6.0), 1e-5);
    /* every variable scaled by the same factor */
    for (int i = 0; i < NG; i++)
        if (i != 5 && i != 8)
            ck_assert_double_le(fabs(g[i] / before[i] - 6.0 / total), 1e-6);
    ck_assert(g[5] == 99 && g[8] == -99);
    /* a total under the bound: nothing changes, bit for bit */
    memcpy(before, g, sizeof g);
    ps_clip_by_global_norm(g, R, 3, 6.5f);
    ck_assert(memcmp(g, before, sizeof g) == 0);
}
END_TEST

START_TEST(clipvalue_bounds_each_element) {
    float g[NG] = {3, -4, 0.25f, -0.5f, 12, 99, 0.3f, -0.75f, -99};
    ps_clip_by_value(g, R, 3, 0.5f);
    const float want[NG] = {0.5f, -0.5f, 0.25f, -0.5f, 0.5f, 99, 0.3f, -0.5f, -99};
    ck_assert(memcmp(g, want, sizeof g) == 0);
}
END_TEST

/* ps_clip_apply does what the spec asks; a NaN gradient is left to show itself. */
START_TEST(apply_follows_the_spec) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_SGD);
    ck_assert_int_eq(ps_clip_needed(&s), 0);
    float g[NG] = {3, 4, 3, 4, 12, 99, 0.3f, 0.4f, -99}, h[NG];
    memcpy(h, g, sizeof g);
    ps_clip_apply(&s, g, R, 3);
    ck_assert(memcmp(g, h, sizeof g) == 0);
    s.clipnorm = 1;
    ck_assert_int_eq(ps_clip_needed(&s), 1);
    ps_clip_apply(&s, g, R, 3);
    ck_assert_double_le(fabs(norm_of(g, R[1]) - 1.0), 1e-6);
    s.clipnorm = 0;
    s.global_clipnorm = 1;
    ck_assert_int_eq(ps_clip_needed(&s), 2);
    memcpy(g, h, sizeof g);
    ps_clip_apply(&s, g, R, 3);
    ck_assert_double_le(fabs(ps_clip_global_norm(g, R, 3) - 1.0), 1e-6);
    s.global_clipnorm = 0;
    s.clipvalue = 1;
    ck_assert_int_eq(ps_clip_needed(&s), 1);
    memcpy(g, h, sizeof g);
    ps_clip_apply(&s, g, R, 3);
    ck_assert(g[4] == 1.0f && g[6] == 0.3f);
    s.clipvalue = 0;
    s.global_clipnorm = 1;
    memcpy(g, h, sizeof g);
    g[2] = NAN;
    ps_clip_apply(&s, g, R, 3);
    ck_assert(g[0] == 3 && isnan(g[2]));
}
END_TEST

static Suite *clip_suite(void) {
    Suite *s = suite_create("clip");
    TCase *tc = tcase_create("clip");
    tcase_add_test(tc, clipnorm_bounds_each_variable);
    tcase_add_test(tc, global_clipnorm_bounds_the_total);
    tcase_add_test(tc, clipvalue_bounds_each_element);
    tcase_add_test(tc, apply_follows_the_spec);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(clip_suite());
}
