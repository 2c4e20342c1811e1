/* Gradient encodings (common/half.c): fp16 and bf16 against the kernels' own
 * rounding (kernels/ew.h, written independently, by value not by bits), every
 * half value round-trips, saturation; top-k against a brute-force selection,
 * error feedback (every coordinate goes out eventually; sent + residual equals
 * the gradients' sum), the index checks and the --compression parser. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ew.h"
#include "half.h"
#include "testutil.h"

static uint64_t rng = 0x1234567887654321ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

START_TEST(f16_matches_reference_rounding) {
    size_t checked = 0;
    for (int i = 0; i < 400000; i++) {
        /* exponents from far below the subnormals to above the range */
        uint32_t u = next_u32();
        uint32_t e = 90u + (u % 60u); /* 2^-37 .. 2^22 */
        float x = bits_float((next_u32() & 0x807FFFFFu) | (e << 23));
        float want = ps_ew_round_f16(x);
        if (!isfinite(want)) continue; /* beyond the range: the saturation test's */
        float got = ps_f16_to_f32(ps_f32_to_f16(x, NULL));
        ck_assert_msg(float_bits(got) == float_bits(want) || (got == 0 && want == 0),
                      "x=%a: got %a want %a", (double)x, (double)got, (double)want);
        checked++;
    }
    ck_assert_uint_gt(checked, 300000);
    /* ties to even, by hand: 1 + 2^-11 lies between 1 and 1 + 2^-10 */
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(1.0f + 0x1p-11f, NULL)), 1.0f);
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(1.0f + 3 * 0x1p-11f, NULL)), 1.0f + 0x1p-9f);
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(0x1p-25f, NULL)), 0.0f); /* tie to 0 */
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(0x1.8p-24f, NULL)), 0x1p-23f);
    ck_assert_uint_eq(ps_f32_to_f16(1.0f, NULL), 0x3C00u);
    ck_assert_uint_eq(ps_f32_to_f16(-2.0f, NULL), 0xC000u);
}
END_TEST

START_TEST(every_half_round_trips) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ps_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (isinf(f)) continue; /* an infinity never comes out of the encoder */
        ck_assert_msg(ps_f32_to_f16(f, NULL) == h, "half %04x -> %a -> %04x", h, (double)f,
                      ps_f32_to_f16(f, NULL));
        float b = ps_bf16_to_f32((uint16_t)h);
        if (!isnan(b) && !isinf(b)) ck_assert_uint_eq(ps_f32_to_bf16(b, NULL), h);
    }
}
END_TEST

/* The array encoders and decoders (which use the CPU's conversion instructions when
 * it has them) give the scalar functions' bits: random bit patterns (NaN, infinity,
 * subnormals, all exponents), ties, the saturation edge; a length that is not a
 * multiple of 8; a decode from an odd address and one that adds. */
START_TEST(arrays_match_the_scalar_functions) {
    enum { N = 100003 };
    static float x[N], back[N], sum[N];
    static uint16_t h[N];
    static unsigned char raw[2 * N + 1];
    for (size_t i = 0; i < N; i++) {
        uint32_t u = next_u32();
        switch (i % 5) {
        case 0: x[i] = bits_float(u); break;                              /* any bits */
        case 1: x[i] = bits_float((u & 0x8FFFFFFFu) | 0x30000000u); break; /* near half's range */
        case 2: x[i] = bits_float((float_bits(1.0f + (float)(u % 2048) / 1024.0f) & ~0x1FFFu) | 0x1000u); break; /* ties */
        case 3: x[i] = (float)((int)(u % 131072) - 65536) + 0.5f * (float)(u & 1); break; /* the edge */
        default: x[i] = bits_float(u & 0x807FFFFFu); break;              /* float subnormals */
        }
    }
    for (size_t i = 9; i < N; i += 97) /* finite values bf16 rounds beyond its range */
        x[i] = bits_float(0x7F7F8000u + (next_u32() & 0x7FFFu) + (i & 1u ? 0x80000000u : 0u));
    size_t sat = ps_half_encode(PS_HALF_F16, x, N, h), want_sat = 0;
    for (size_t i = 0; i < N; i++) {
        int s = 0;
        uint16_t ref = ps_f32_to_f16(x[i], &s);
        want_sat += (size_t)s;
        ck_assert_msg(h[i] == ref, "x[%zu] = %a (bits %08x): 0x%04x, the scalar gives 0x%04x", i,
                      (double)x[i], float_bits(x[i]), h[i], ref);
    }
    ck_assert_uint_eq(sat, want_sat);
    memcpy(raw + 1, h, sizeof h);
    ps_half_decode(PS_HALF_F16, raw + 1, N, back, 0);
    for (size_t i = 0; i < N; i++) {
        float ref = ps_f16_to_f32(h[i]);
        ck_assert_msg(float_bits(back[i]) == float_bits(ref) || (isnan(ref) && isnan(back[i])),
                      "decode 0x%04x: %a, the scalar gives %a", h[i], (double)back[i], (double)ref);
        sum[i] = 1.5f;
    }
    ps_half_decode(PS_HALF_F16, raw + 1, N, sum, 1);
    for (size_t i = 0; i < N; i++) {
        float ref = 1.5f + ps_f16_to_f32(h[i]);
        ck_assert_msg(float_bits(sum[i]) == float_bits(ref) || (isnan(ref) && isnan(sum[i])),
                      "decode-add 0x%04x", h[i]);
    }
    /* bf16: the array encoder (written without branches) against the scalar one */
    sat = ps_half_encode(PS_HALF_BF16, x, N, h), want_sat = 0;
    for (size_t i = 0; i < N; i++) {
        int s = 0;
        uint16_t ref = ps_f32_to_bf16(x[i], &s);
        want_sat += (size_t)s;
        ck_assert_msg(h[i] == ref, "bf16 x[%zu] = %a (bits %08x): 0x%04x, the scalar gives 0x%04x",
                      i, (double)x[i], float_bits(x[i]), h[i], ref);
    }
    ck_assert_uint_eq(sat, want_sat);
    memcpy(raw + 1, h, sizeof h);
    ps_half_decode(PS_HALF_BF16, raw + 1, N, back, 0);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(float_bits(back[i]) == (uint32_t)h[i] << 16, "bf16 decode 0x%04x", h[i]);
}
END_TEST

START_TEST(f16_saturates_beyond_range) {
    int sat = 0;
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(65504.0f, &sat)), 65504.0f);
    ck_assert_int_eq(sat, 0);
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(65519.0f, &sat)), 65504.0f); /* rounds down */
    ck_assert_int_eq(sat, 0);
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(65520.0f, &sat)), 65504.0f);
    ck_assert_int_eq(sat, 1);
    sat = 0;
    ck_assert_float_eq(ps_f16_to_f32(ps_f32_to_f16(-1e30f, &sat)), -65504.0f);
    ck_assert_int_eq(sat, 1);
    ck_assert(isnan(ps_f16_to_f32(ps_f32_to_f16(NAN, NULL))));
    float x[4] = {1, 7e4f, -3, -7e5f};
    uint16_t h[4];
    ck_assert_uint_eq(ps_half_encode(PS_HALF_F16, x, 4, h), 2);
    float back[4];
    ps_half_decode(PS_HALF_F16, h, 4, back, 0);
    ck_assert_float_eq(back[1], 65504.0f);
    ps_half_decode(PS_HALF_F16, h, 4, back, 1); /* summed in float */
    ck_assert_float_eq(back[0], 2.0f);
    ck_assert_float_eq(back[3], -131008.0f);
}
END_TEST

START_TEST(bf16_matches_reference_rounding) {
    for (int i = 0; i < 400000; i++) {
        float x = bits_float(next_u32() & 0xFF7FFFFFu); /* finite, below the top binade */
        if (isnan(x)) continue;
        float want = ps_ew_round_bf16(x);
        float got = ps_bf16_to_f32(ps_f32_to_bf16(x, NULL));
        if (isinf(want)) { /* rounds beyond the range: saturated at the largest bfloat16 */
            ck_assert_float_eq(fabsf(got), 0x1.fep+127f);
            continue;
        }
        ck_assert_msg(float_bits(got) == float_bits(want), "x=%a: got %a want %a", (double)x,
                      (double)got, (double)want);
    }
    int sat = 0;
    ck_assert(isfinite(ps_bf16_to_f32(ps_f32_to_bf16(3.4028235e38f, &sat)))); /* FLT_MAX */
    ck_assert_int_eq(sat, 1);
    ck_assert_uint_eq(ps_f32_to_bf16(1.0f, NULL), 0x3F80u);
    ck_assert_float_eq(ps_bf16_to_f32(ps_f32_to_bf16(1.0f + 0x1p-8f, NULL)), 1.0f); /* tie */
    ck_assert_float_eq(ps_bf16_to_f32(ps_f32_to_bf16(1.0f + 3 * 0x1p-8f, NULL)), 1.0f + 0x1p-6f);
}
END_TEST

static uint32_t pair_index(const unsigned char *p, size_t i) {
    uint32_t v;
    memcpy(&v, p + i * PS_TOPK_PAIR_BYTES, 4);
    return v;
}
static float pair_value(const unsigned char *p, size_t i) {
    float v;
    memcpy(&v, p + i * PS_TOPK_PAIR_BYTES + 4, 4);
    return v;
}

START_TEST(topk_k) {
    ck_assert_uint_eq(ps_topk_k(1000, 0.01f), 10);
    ck_assert_uint_eq(ps_topk_k(1001, 0.01f), 11);
    ck_assert_uint_eq(ps_topk_k(10, 0.001f), 1);
    ck_assert_uint_eq(ps_topk_k(7, 1.0f), 7);
}
END_TEST

/* The selection equals a brute-force one: repeatedly the largest magnitude, lowest index. */
START_TEST(topk_selects_largest) {
    enum { N = 500 };
    float r[N], before[N];
    uint32_t scratch[N];
    unsigned char pairs[N * PS_TOPK_PAIR_BYTES];
    for (int round = 0; round < 200; round++) {
        size_t n = 1 + next_u32() % N, k = 1 + next_u32() % n;
        for (size_t i = 0; i < n; i++) /* few distinct values: many ties */
            r[i] = before[i] = (float)((int)(next_u32() % 21) - 10) * (round % 2 ? 0.25f : 1.3f);
        ps_topk_compress(r, NULL, n, k, pairs, scratch);
        unsigned char taken[N] = {0};
        for (size_t j = 0; j < k; j++) { /* the brute force */
            size_t best = n;
            for (size_t i = 0; i < n; i++)
                if (!taken[i] && (best == n || fabsf(before[i]) > fabsf(before[best]))) best = i;
            taken[best] = 1;
        }
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            if (!taken[i]) {
                ck_assert_float_eq(r[i], before[i]); /* kept in the residual */
                continue;
            }
            ck_assert_msg(j < k && pair_index(pairs, j) == i, "round %d: pair %zu is %u, want %zu",
                          round, j, j < k ? pair_index(pairs, j) : 0, i);
            ck_assert_float_eq(pair_value(pairs, j), before[i]);
            ck_assert_float_eq(r[i], 0.0f); /* sent: zeroed */
            j++;
        }
        ck_assert_uint_eq(j, k);
        size_t bad;
        ck_assert_int_eq(ps_topk_check(pairs, k, n, &bad), 0);
    }
}
END_TEST

START_TEST(topk_error_feedback) {
    enum { N = 300, STEPS = 400 };
    static float residual[N], g[N], dense[N];
    static uint32_t scratch[N];
    static double sum_g[N], sum_sent[N];
    static unsigned sent_count[N];
    unsigned char pairs[N * PS_TOPK_PAIR_BYTES];
    size_t k = ps_topk_k(N, 0.02f); /* 6 of 300 a step */
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < N; i++) {
            /* coordinate i's gradients are small for large i: they must still go out */
            g[i] = ((float)(next_u32() % 2001) / 1000.0f - 0.3f) / (1.0f + (float)i);
            sum_g[i] += g[i];
        }
        ps_topk_compress(residual, g, N, k, pairs, scratch);
        ps_topk_decode(pairs, k, dense, N, 0);
        for (size_t i = 0; i < N; i++) {
            sum_sent[i] += dense[i];
            sent_count[i] += dense[i] != 0.0f;
        }
    }
    for (size_t i = 0; i < N; i++) {
        ck_assert_msg(sent_count[i] > 0, "coordinate %zu never transmitted", i);
        double lhs = sum_sent[i] + residual[i];
        ck_assert_msg(fabs(lhs - sum_g[i]) <= 1e-4 * (1.0 + fabs(sum_g[i])),
                      "coordinate %zu: sent + residual %.7g, gradients %.7g", i, lhs, sum_g[i]);
    }
}
END_TEST

START_TEST(topk_check_refuses_bad_indices) {
    unsigned char p[3 * PS_TOPK_PAIR_BYTES];
    uint32_t idx[3] = {1, 5, 9};
    float one = 1;
    for (int i = 0; i < 3; i++) {
        memcpy(p + i * 8, &idx[i], 4);
        memcpy(p + i * 8 + 4, &one, 4);
    }
    size_t bad = 99;
    ck_assert_int_eq(ps_topk_check(p, 3, 10, &bad), 0);
    ck_assert_int_eq(ps_topk_check(p, 3, 9, &bad), -1); /* 9 >= numel */
    ck_assert_uint_eq(bad, 2);
    uint32_t dup = 1;
    memcpy(p + 8, &dup, 4); /* 1, 1, 9: not strictly increasing */
    ck_assert_int_eq(ps_topk_check(p, 3, 10, &bad), -1);
    ck_assert_uint_eq(bad, 1);
    uint32_t down = 0;
    memcpy(p + 8, &down, 4); /* 1, 0, 9 */
    ck_assert_int_eq(ps_topk_check(p, 3, 10, &bad), -1);
    float dense[10];
    memcpy(p + 8, &idx[1], 4);
    for (int i = 0; i < 10; i++)
        dense[i] = 7;
    ps_topk_decode(p, 3, dense, 10, 0);
    ck_assert_float_eq(dense[0], 0);
    ck_assert_float_eq(dense[5], 1);
    ps_topk_decode(p, 3, dense, 10, 1);
    ck_assert_float_eq(dense[5], 2);
}
END_TEST

START_TEST(flag_parser) {
    int kind = -1;
    float ratio = -1;
    char err[200];
    ck_assert_int_eq(ps_compression_parse("none", &kind, &ratio, err, sizeof err), 0);
    ck_assert_int_eq(kind, PS_COMPRESSION_NONE);
    ck_assert_int_eq(ps_compression_parse("fp16", &kind, &ratio, err, sizeof err), 0);
    ck_assert_int_eq(kind, PS_COMPRESSION_F16);
    ck_assert_int_eq(ps_compression_parse("bf16", &kind, &ratio, err, sizeof err), 0);
    ck_assert_int_eq(kind, PS_COMPRESSION_BF16);
    ck_assert_int_eq(ps_compression_parse("topk:0.01", &kind, &ratio, err, sizeof err), 0);
    ck_assert_int_eq(kind, PS_COMPRESSION_TOPK);
    ck_assert_float_eq(ratio, 0.01f);
    ck_assert_int_eq(ps_compression_parse("topk:1", &kind, &ratio, err, sizeof err), 0);
    const char *bad[] = {"topk", "topk:", "topk:0", "topk:1.5", "topk:-0.1", "topk:0.1x",
                         "topk:nan", "FP16", "", "int8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        ck_assert_msg(ps_compression_parse(bad[i], &kind, &ratio, err, sizeof err) == -1,
                      "'%s' accepted", bad[i]);
        ck_assert(err[0] != 0);
    }
}
END_TEST

static Suite *compress_suite(void) {
    Suite *s = suite_create("compress");
    TCase *tc = tcase_create("encodings");
    tcase_add_test(tc, f16_matches_reference_rounding);
    tcase_add_test(tc, every_half_round_trips);
    tcase_add_test(tc, f16_saturates_beyond_range);
    tcase_add_test(tc, arrays_match_the_scalar_functions);
    tcase_add_test(tc, bf16_matches_reference_rounding);
    tcase_add_test(tc, topk_k);
    tcase_add_test(tc, topk_selects_largest);
    tcase_add_test(tc, topk_error_feedback);
    tcase_add_test(tc, topk_check_refuses_bad_indices);
    tcase_add_test(tc, flag_parser);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(compress_suite());
}
