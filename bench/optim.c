/* bench/optim: the throughput of psd's optimizer apply (ps_optim_apply, what
 * ps_var_apply calls on every push), in GB/s of memory touched, against a
 * STREAM-style triad (a[i] = b[i] + s*c[i]) measured in the same run.
 *
 * Bytes per element, read + written, from common/optim.c (floats, 4 B):
 *   sgd       w, g -> w                              12 B
 *   momentum  w, g, v -> v, w                        20 B
 *   adagrad   w, g, a -> a, w                        20 B
 *   rmsprop   w, g, s -> s, w                        20 B
 *   adam      w, g, m, v -> m, v, w                  28 B
 *   adamw     as adam, the decay fused into its pass 28 B
 *   triad     b, c -> a                              12 B (STREAM's count)
 *
 * Each measurement is a warm-up, a calibration (a rep repeats the call until it
 * lasts at least --min-ms), then --reps reps; the optimizer and the triad of a
 * row are interleaved (A B, B A, ...) so machine noise hits both alike.
 * Reported: the median GB/s of each and the median over reps of the paired
 * ratio GB/s(optimizer) / GB/s(triad). Built by meson, never run by the tests. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "optim.h"
#include "optim_spec.h"

#define MAX_REPS 101
#define MAX_SIZES 16
#define GOAL 0.60 /* the target: optimizer apply >= 60% of the triad's bandwidth */

static const int bytes_per_elem[PS_OPT_COUNT] = {
    [PS_OPT_SGD] = 12,     [PS_OPT_MOMENTUM] = 20, [PS_OPT_ADAGRAD] = 20,
    [PS_OPT_RMSPROP] = 20, [PS_OPT_ADAM] = 28,     [PS_OPT_ADAMW] = 28,
};
#define TRIAD_BYTES 12

/* ---- options ----------------------------------------------------------- */

typedef struct {
    int reps;
    double min_s;
    size_t sizes[MAX_SIZES];
    int nsizes;
    bool only[PS_OPT_COUNT];
    bool any_only;
} opts;

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s [--sizes N,N,...] [--opt NAME]... [--reps N] [--min-ms MS]\n"
            "Times psd's optimizer apply (ps_optim_apply) in GB/s of memory touched,\n"
            "against a STREAM-style triad a[i] = b[i] + s*c[i] in the same run.\n"
            "  --sizes LIST  floats per variable, comma-separated, with an optional Ki or Mi\n"
            "                suffix (default 64Ki,1Mi,16Mi,64Mi; 64Ki..64Mi)\n"
            "  --opt NAME    only this optimizer (repeatable): sgd, momentum, adagrad,\n"
            "                rmsprop, adam, adamw (default all)\n"
            "  --reps N      timed reps per measurement, the median is reported (default 7)\n"
            "  --min-ms MS   least duration of one rep, the call is repeated inside (default "
            "50)\n"
            "  --help        this text\n",
            argv0);
}

/* "65536", "64Ki", "16Mi" -> floats; bounded to [64Ki, 64Mi]. */
static bool parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return false;
    if (strncmp(end, "Ki", 2) == 0) {
        v <<= 10;
        end += 2;
    } else if (strncmp(end, "Mi", 2) == 0) {
        v <<= 20;
        end += 2;
    }
    if (*end && *end != ',') return false;
    if (v < (1ull << 16) || v > (1ull << 26)) return false;
    *out = (size_t)v;
    return true;
}

static int parse_opts(int argc, char **argv, opts *o) {
    *o = (opts){.reps = 7, .min_s = 0.050};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, argv[0]);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: unknown option or missing value: %s\n", argv[0], a);
            return -1;
        }
        const char *val = argv[++i];
        if (strcmp(a, "--sizes") == 0) {
            o->nsizes = 0;
            for (const char *p = val; *p;) {
                if (o->nsizes == MAX_SIZES || !parse_size(p, &o->sizes[o->nsizes])) {
                    fprintf(stderr, "%s: bad --sizes (at most %d of 64Ki..64Mi): %s\n", argv[0],
                            MAX_SIZES, val);
                    return -1;
                }
                o->nsizes++;
                p = strchr(p, ',');
                if (!p) break;
                p++;
            }
        } else if (strcmp(a, "--opt") == 0) {
            ps_opt_kind k;
            if (ps_opt_kind_parse(val, &k) != 0) {
                fprintf(stderr, "%s: unknown optimizer: %s\n", argv[0], val);
                return -1;
            }
            o->only[k] = true;
            o->any_only = true;
        } else if (strcmp(a, "--reps") == 0 && ps_bench_parse_long(val, 1, MAX_REPS, &v)) {
            o->reps = (int)v;
        } else if (strcmp(a, "--min-ms") == 0 && ps_bench_parse_long(val, 1, 60000, &v)) {
            o->min_s = (double)v / 1000.0;
        } else {
            fprintf(stderr, "%s: bad option or value: %s %s\n", argv[0], a, val);
            return -1;
        }
    }
    if (o->nsizes == 0) {
        static const size_t defaults[] = {64u << 10, 1u << 20, 16u << 20, 64u << 20};
        for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
            o->sizes[o->nsizes++] = defaults[i];
    }
    if (!o->any_only)
        for (int k = 0; k < PS_OPT_COUNT; k++)
            o->only[k] = true;
    return 0;
}

/* ---- timing -------------------------------------------------------------- */

/* The reference: STREAM's triad, in float, compiled here at the build's -O,
 * with the same per-CPU versions as the optimizer loops (common/optim.c), so
 * both run at the same vector width. Never inlined: a multiversioned
 * function is called through its resolver (clang refuses noinline on it). */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TRIAD_ATTRS __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef TRIAD_ATTRS
#define TRIAD_ATTRS __attribute__((noinline))
#endif
TRIAD_ATTRS static void triad(float *restrict a, const float *restrict b, const float *restrict c,
                              float s, size_t n) {
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

typedef struct {
    float *a, *b, *c;       /* triad */
    float *w, *g, *s0, *s1; /* optimizer: values, gradient, slots */
    size_t n;
    ps_opt_spec spec;
    uint64_t t; /* the optimizer's update count, as ps_var_apply keeps it */
} arrays;

/* One call of contestant `which` (0 triad, 1 optimizer). */
static void run_once(arrays *x, int which) {
    if (which == 0) {
        triad(x->a, x->b, x->c, 0.5f, x->n);
    } else {
        float *slots[2] = {x->s0, x->s1};
        x->t++;
        ps_optim_apply(&x->spec, x->w, x->g, slots, x->n, x->t);
    }
}

/* Seconds per call of `which`, averaged over `iters` calls. */
static double time_calls(arrays *x, int which, long iters) {
    double t0 = ps_bench_now_s();
    for (long i = 0; i < iters; i++)
        run_once(x, which);
    return (ps_bench_now_s() - t0) / (double)iters;
}

/* Calls per rep so a rep lasts at least min_s. */
static long calibrate(arrays *x, int which, double min_s) {
    run_once(x, which); /* warm-up */
    double t = time_calls(x, which, 1);
    long iters = 1;
    while (t * (double)iters < min_s && iters < (1L << 30))
        iters *= 2;
    return iters;
}

typedef struct {
    double opt_gbs, triad_gbs, ratio, opt_ms;
} row_result;

static row_result measure(arrays *x, int bpe, const opts *o) {
    long it[2] = {calibrate(x, 0, o->min_s), calibrate(x, 1, o->min_s)};
    double gbs[2][MAX_REPS], ratio[MAX_REPS], ms[MAX_REPS];
    double bytes[2] = {(double)TRIAD_BYTES * (double)x->n, (double)bpe * (double)x->n};
    for (int r = 0; r < o->reps; r++) {
        double sec[2];
        for (int k = 0; k < 2; k++) {
            int which = (r % 2) ? 1 - k : k; /* A B, B A, ... */
            sec[which] = time_calls(x, which, it[which]);
        }
        gbs[0][r] = bytes[0] / sec[0] * 1e-9;
        gbs[1][r] = bytes[1] / sec[1] * 1e-9;
        ratio[r] = gbs[1][r] / gbs[0][r];
        ms[r] = sec[1] * 1e3;
    }
    row_result res;
    res.triad_gbs = ps_bench_median(gbs[0], o->reps);
    res.opt_gbs = ps_bench_median(gbs[1], o->reps);
    res.ratio = ps_bench_median(ratio, o->reps);
    res.opt_ms = ps_bench_median(ms, o->reps);
    return res;
}

static float *alloc_floats(size_t n, float value) {
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n * sizeof(float)) != 0) return NULL;
    for (size_t i = 0; i < n; i++) /* first touch: the pages exist before timing */
        p[i] = value;
    return p;
}

static void size_label(size_t n, char *buf, size_t len) {
    if (n % (1u << 20) == 0)
        snprintf(buf, len, "%zuMi", n >> 20);
    else if (n % (1u << 10) == 0)
        snprintf(buf, len, "%zuKi", n >> 10);
    else
        snprintf(buf, len, "%zu", n);
}

int main(int argc, char **argv) {
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        usage(stderr, argv[0]);
        return 2;
    }
    printf("command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    printf("timing: per measurement a warm-up, reps of >= %.0f ms (the call repeated inside), "
           "median of %d reps;\n"
           "        optimizer and triad interleaved; ratio = median over reps of "
           "GB/s(optimizer) / GB/s(triad)\n",
           o.min_s * 1e3, o.reps);
    printf("bytes: GB/s = (bytes read + written per element, from common/optim.c) x n / "
           "time;\n"
           "       triad a[i] = b[i] + s*c[i] counts 12 B/elem (STREAM convention, no "
           "write-allocate)\n\n");

    printf("%-8s %8s %-9s %5s %10s %9s %9s %10s %6s %s\n", "floats", "MiB/arr", "optimizer", "B/el",
           "opt ms", "opt GB/s", "opt ns/el", "triad GB/s", "ratio", "goal");
    double ratios[PS_OPT_COUNT][MAX_SIZES];
    for (int si = 0; si < o.nsizes; si++) {
        size_t n = o.sizes[si];
        arrays x = {.n = n};
        x.a = alloc_floats(n, 0.0f);
        x.b = alloc_floats(n, 1.0f);
        x.c = alloc_floats(n, 2.0f);
        x.w = alloc_floats(n, 0.5f);
        x.g = alloc_floats(n, 0.0f);
        x.s0 = alloc_floats(n, 0.0f);
        x.s1 = alloc_floats(n, 0.0f);
        if (!x.a || !x.b || !x.c || !x.w || !x.g || !x.s0 || !x.s1) {
            fprintf(stderr, "%s: out of memory at %zu floats\n", argv[0], n);
            return 1;
        }
        uint32_t seed = 12345;
        for (size_t i = 0; i < n; i++) { /* small gradients of both signs */
            seed = seed * 1664525u + 1013904223u;
            x.g[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 1e-3f;
        }
        char label[32];
        size_label(n, label, sizeof label);
        for (int k = 0; k < PS_OPT_COUNT; k++) {
            if (!o.only[k]) continue;
            x.spec = ps_opt_spec_default((ps_opt_kind)k);
            x.t = 0;
            for (int s = 0; s < ps_optim_num_slots((ps_opt_kind)k); s++) {
                float init = ps_optim_slot_init(&x.spec, s);
                float *slot = s == 0 ? x.s0 : x.s1;
                for (size_t i = 0; i < n; i++)
                    slot[i] = init;
            }
            for (size_t i = 0; i < n; i++)
                x.w[i] = 0.5f;
            row_result r = measure(&x, bytes_per_elem[k], &o);
            ratios[k][si] = r.ratio;
            printf("%-8s %8.2f %-9s %5d %10.3f %9.2f %9.3f %10.2f %6.3f %s\n", label,
                   (double)n * 4.0 / 1048576.0, ps_opt_kind_name((ps_opt_kind)k), bytes_per_elem[k],
                   r.opt_ms, r.opt_gbs, r.opt_ms * 1e6 / (double)n, r.triad_gbs, r.ratio,
                   r.ratio >= GOAL ? "ok" : "BELOW");
            fflush(stdout);
        }
        free(x.a);
        free(x.b);
        free(x.c);
        free(x.w);
        free(x.g);
        free(x.s0);
        free(x.s1);
    }

    printf("\nVerdict: ratio = GB/s of the optimizer apply / GB/s of the triad, same run "
           "(goal >= %.2f at every size)\n",
           GOAL);
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        if (!o.only[k]) continue;
        double mn = 1e9, mx = 0.0;
        int ok = 0;
        for (int si = 0; si < o.nsizes; si++) {
            double r = ratios[k][si];
            if (r < mn) mn = r;
            if (r > mx) mx = r;
            if (r >= GOAL) ok++;
        }
        printf("%-9s ratio %.3f..%.3f, sizes >= %.2f: %d/%d  %s\n",
               ps_opt_kind_name((ps_opt_kind)k), mn, mx, GOAL, ok, o.nsizes,
               ok == o.nsizes ? "MET" : "NOT MET");
    }
    return 0;
}
