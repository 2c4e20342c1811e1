/* fp16 / bf16 conversions and top-k selection (see half.h). */
#include "half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t ps_f32_to_f16(float x, int *saturated) {
    uint32_t u = bits_of(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u); /* NaN */
    /* 65520 and above round to infinity in binary16: saturate instead */
    if (a >= 0x477FF000u) {
        if (saturated) *saturated = 1;
        return (uint16_t)(sign | 0x7BFFu);
    }
    if (a < 0x38800000u) { /* below 2^-14: subnormal half (or zero), step 2^-24 */
        if (a < 0x33000000u) return sign; /* below 2^-25: rounds to zero (tie at 2^-25 too) */
        uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* 14 .. 24: the bits below the half's last */
        uint32_t h = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    /* normal: rebias the exponent (127 -> 15), keep 10 mantissa bits, round the 13 below */
    uint32_t h = ((a >> 13) - (112u << 10));
    uint32_t rest = a & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* a carry bumps the exponent */
    return (uint16_t)(sign | h);
}

float ps_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return float_of(sign | 0x7F800000u | (m << 13)); /* inf, NaN */
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t ps_f32_to_bf16(float x, int *saturated) {
    uint32_t u = bits_of(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    if ((u & 0x7FFFFFFFu) == 0x7F800000u) return (uint16_t)(u >> 16);          /* infinity */
    uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
    if ((r & 0x7F800000u) == 0x7F800000u) { /* a finite value rounded up to infinity */
        if (saturated) *saturated = 1;
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7F7Fu);
    }
    return (uint16_t)(r >> 16);
}

float ps_bf16_to_f32(uint16_t h) {
    return float_of((uint32_t)h << 16);
}

/* ---- fp16 with F16C (x86-64): 8 values per instruction, checked once per process ---- */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define PS_HALF_F16C 1

/* 1 when the CPU has AVX and F16C and the OS saves the YMM registers. */
static int have_f16c(void) {
    static int cached = -1;
    if (cached >= 0) return cached;
    unsigned a, b, c, d;
    int ok = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) /* OSXSAVE */ &&
             (c & (1u << 28)) /* AVX */ && (c & (1u << 29)) /* F16C */;
    if (ok) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        ok = (lo & 6u) == 6u; /* XMM and YMM state */
    }
    cached = ok;
    return ok;
}

/* Saturates like ps_f32_to_f16: |x| >= 65520 (and infinity) becomes +-65504 by clamping
 * before the conversion (which rounds to nearest even); a block of 8 holding a NaN goes
 * through the scalar function (its NaN encoding). */
__attribute__((target("avx,f16c"))) static size_t encode_f16c(const float *x, size_t n,
                                                               uint16_t *out) {
    const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
    const __m256 edge = _mm256_set1_ps(65520.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    size_t sat = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (size_t k = i; k < i + 8; k++) {
                int s = 0;
                out[k] = ps_f32_to_f16(x[k], &s);
                sat += (size_t)s;
            }
            continue;
        }
        int big = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), edge, _CMP_GE_OQ));
        sat += (size_t)__builtin_popcount((unsigned)big);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        _mm_storeu_si128((__m128i *)(void *)(out + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) {
        int s = 0;
        out[i] = ps_f32_to_f16(x[i], &s);
        sat += (size_t)s;
    }
    return sat;
}

__attribute__((target("avx,f16c"))) static void decode_f16c(const unsigned char *in, size_t n,
                                                             float *out, int add) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i)));
        if (add) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        float v = ps_f16_to_f32(h);
        out[i] = add ? out[i] + v : v;
    }
}

/* bf16, 8 at a time (AVX2): a block holding a NaN, an infinity or a value that rounds
 * beyond bf16's range goes through the scalar function; the others round to nearest
 * even by the same integer arithmetic. */
__attribute__((target("avx2"))) static size_t encode_bf16_avx2(const float *x, size_t n,
                                                                uint16_t *out) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), edge = _mm256_set1_epi32(0x7F7F7FFF);
    const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
    size_t sat = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
        __m256i special = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), edge);
        if (!_mm256_testz_si256(special, special)) {
            for (size_t k = i; k < i + 8; k++) {
                int s = 0;
                out[k] = ps_f32_to_bf16(x[k], &s);
                sat += (size_t)s;
            }
            continue;
        }
        __m256i r = _mm256_add_epi32(
            u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        __m256i h = _mm256_srli_epi32(r, 16);
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
        _mm_storeu_si128((__m128i *)(void *)(out + i), _mm256_castsi256_si128(packed));
    }
    for (; i < n; i++) {
        int s = 0;
        out[i] = ps_f32_to_bf16(x[i], &s);
        sat += (size_t)s;
    }
    return sat;
}

__attribute__((target("avx2"))) static void decode_bf16_avx2(const unsigned char *in, size_t n,
                                                              float *out, int add) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i)));
        __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        if (add) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        float v = ps_bf16_to_f32(h);
        out[i] = add ? out[i] + v : v;
    }
}

static int have_avx2(void) {
    static int cached = -1;
    if (cached < 0) cached = have_f16c() && __builtin_cpu_supports("avx2");
    return cached;
}
#endif

/* bf16 without branches (the compiler vectorizes it): the bits of ps_f32_to_bf16. */
static size_t encode_bf16(const float *x, size_t n, uint16_t *out) {
    size_t sat = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = bits_of(x[i]), a = u & 0x7FFFFFFFu;
        uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
        uint32_t nan = a > 0x7F800000u, inf = a == 0x7F800000u;
        uint32_t over = ((r & 0x7F800000u) == 0x7F800000u) & !nan & !inf;
        uint32_t h = nan ? ((u >> 16) | 0x40u) : inf ? (u >> 16) : over ? (((u >> 16) & 0x8000u) | 0x7F7Fu) : (r >> 16);
        out[i] = (uint16_t)h;
        sat += over;
    }
    return sat;
}

size_t ps_half_encode(ps_half_kind kind, const float *x, size_t n, uint16_t *out) {
#ifdef PS_HALF_F16C
    if (kind == PS_HALF_F16 && have_f16c()) return encode_f16c(x, n, out);
#endif
#ifdef PS_HALF_F16C
    if (kind == PS_HALF_BF16 && have_avx2()) return encode_bf16_avx2(x, n, out);
#endif
    if (kind == PS_HALF_BF16) return encode_bf16(x, n, out);
    size_t sat = 0;
    for (size_t i = 0; i < n; i++) {
        int s = 0;
        out[i] = kind == PS_HALF_F16 ? ps_f32_to_f16(x[i], &s) : ps_f32_to_bf16(x[i], &s);
        sat += (size_t)s;
    }
    return sat;
}

void ps_half_decode(ps_half_kind kind, const void *in, size_t n, float *out, int add) {
    const unsigned char *b = in;
#ifdef PS_HALF_F16C
    if (kind == PS_HALF_F16 && have_f16c()) {
        decode_f16c(b, n, out, add);
        return;
    }
    if (kind == PS_HALF_BF16 && have_avx2()) {
        decode_bf16_avx2(b, n, out, add);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        float v = kind == PS_HALF_F16 ? ps_f16_to_f32(h) : ps_bf16_to_f32(h);
        out[i] = add ? out[i] + v : v;
    }
}

void ps_half_round(ps_half_kind kind, float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = kind == PS_HALF_F16 ? ps_f16_to_f32(ps_f32_to_f16(x[i], NULL))
                                   : ps_bf16_to_f32(ps_f32_to_bf16(x[i], NULL));
}

/* ---- top-k ---- */

size_t ps_topk_k(size_t numel, float ratio) {
    if (numel == 0) return 0;
    double k = ceil((double)ratio * (double)numel);
    if (!(k >= 1.0)) return 1;
    return k >= (double)numel ? numel : (size_t)k;
}

static float magnitude(float v) {
    float a = fabsf(v);
    return a != a ? INFINITY : a; /* a NaN goes out (and the receiver refuses it) */
}

/* A magnitude's bits: for floats >= 0 (and +inf) the order of the bits as
 * unsigned integers is the order of the values. */
static uint32_t magnitude_bits(float v) {
    float a = magnitude(v);
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    return u;
}

/* From the largest digit down: the bucket of hist[0..=top] that holds rank *want
 * (1-based, of the entries counted), and *want becomes the rank within it. */
static uint32_t bucket_of_rank(const size_t *hist, uint32_t top, size_t *want) {
    uint32_t b = top;
    for (; b > 0 && hist[b] < *want; b--)
        *want -= hist[b];
    return b;
}

/* Error feedback and selection in three passes over n: (1) add the gradient,
 * take each magnitude's bits and count their top 12 bits; (2) keep the bits of
 * the entries in the bucket that holds rank k, compacted in scratch; then count
 * the next 12 and the last 8 bits of those few, which gives the k-th largest
 * magnitude's bits T exactly (a radix select: no data-dependent swaps; a
 * quickselect was 40% of a top-k worker's time); (3) send the entries above T
 * and the lowest-index ones equal to it. */
void ps_topk_compress(float *residual, const float *grad, size_t n, size_t k,
                      unsigned char *pairs, uint32_t *scratch) {
    size_t hist[4096] = {0};
    for (size_t i = 0; i < n; i++) {
        if (grad) residual[i] += grad[i];
        uint32_t u = magnitude_bits(residual[i]);
        scratch[i] = u;
        hist[u >> 20]++;
    }
    size_t want = k;
    uint32_t prefix = bucket_of_rank(hist, 4095, &want) << 20;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if ((scratch[i] >> 20) == (prefix >> 20)) scratch[m++] = scratch[i];
    memset(hist, 0, sizeof hist);
    for (size_t i = 0; i < m; i++)
        hist[(scratch[i] >> 8) & 0xFFFu]++;
    prefix |= bucket_of_rank(hist, 4095, &want) << 8;
    memset(hist, 0, 256 * sizeof *hist);
    for (size_t i = 0; i < m; i++)
        if ((scratch[i] >> 8) == (prefix >> 8)) hist[scratch[i] & 0xFFu]++;
    prefix |= bucket_of_rank(hist, 255, &want);
    /* want: how many of the entries equal to T go out (the lowest indices) */
    size_t ties = want, out = 0;
    for (size_t i = 0; i < n && out < k; i++) {
        uint32_t u = magnitude_bits(residual[i]);
        if (u < prefix || (u == prefix && ties == 0)) continue;
        if (u == prefix) ties--;
        uint32_t idx = (uint32_t)i;
        memcpy(pairs + out * PS_TOPK_PAIR_BYTES, &idx, 4);
        memcpy(pairs + out * PS_TOPK_PAIR_BYTES + 4, &residual[i], 4);
        residual[i] = 0.0f;
        out++;
    }
}

int ps_topk_check(const unsigned char *pairs, size_t nnz, size_t numel, size_t *bad) {
    uint64_t prev = 0;
    for (size_t i = 0; i < nnz; i++) {
        uint32_t idx;
        memcpy(&idx, pairs + i * PS_TOPK_PAIR_BYTES, 4);
        if ((uint64_t)idx >= numel || (i > 0 && (uint64_t)idx <= prev)) {
            if (bad) *bad = i;
            return -1;
        }
        prev = idx;
    }
    return 0;
}

void ps_topk_decode(const unsigned char *pairs, size_t nnz, float *dense, size_t numel, int add) {
    if (!add) memset(dense, 0, numel * sizeof *dense);
    for (size_t i = 0; i < nnz; i++) {
        uint32_t idx;
        float v;
        memcpy(&idx, pairs + i * PS_TOPK_PAIR_BYTES, 4);
        memcpy(&v, pairs + i * PS_TOPK_PAIR_BYTES + 4, 4);
        dense[idx] = add ? dense[idx] + v : v;
    }
}

int ps_compression_parse(const char *text, int *kind, float *ratio, char *err, size_t errlen) {
    *ratio = 0.0f;
    if (strcmp(text, "none") == 0) {
        *kind = PS_COMPRESSION_NONE;
    } else if (strcmp(text, "fp16") == 0) {
        *kind = PS_COMPRESSION_F16;
    } else if (strcmp(text, "bf16") == 0) {
        *kind = PS_COMPRESSION_BF16;
    } else if (strncmp(text, "topk:", 5) == 0) {
        char *end = NULL;
        double r = strtod(text + 5, &end);
        if (end == text + 5 || *end || !(r > 0.0 && r <= 1.0) || (float)r <= 0.0f) {
            snprintf(err, errlen, "'%.60s': the top-k ratio must be a number with 0 < RATIO <= 1",
                     text);
            return -1;
        }
        *kind = PS_COMPRESSION_TOPK;
        *ratio = (float)r;
    } else {
        snprintf(err, errlen, "'%.60s': want none, fp16, bf16 or topk:RATIO", text);
        return -1;
    }
    return 0;
}

const char *ps_compression_name(int kind) {
    static const char *const names[] = {"none", "fp16", "bf16", "topk"};
    return kind >= 0 && kind <= PS_COMPRESSION_TOPK ? names[kind] : "?";
}
