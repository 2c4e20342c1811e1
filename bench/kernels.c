/* bench/kernels: the CPU backend of kernels/ on the layer shapes of the example
 * models, against OpenBLAS called directly on the same GEMMs in the same run.
 *
 * - Dense layers: the three GEMMs of a training step (forward x @ W, dW = x^T @
 *   dy, dx = dy @ W^T) through ps_k_gemm and through cblas_sgemm.
 * - Conv2D layers: ps_k_conv2d_forward_overwrite (im2col + GEMM + bias) and
 *   ps_k_conv2d_backward_overwrite (bias sum, im2col + dW GEMM, dcols GEMM +
 *   col2im), against cblas_sgemm alone on the GEMMs those calls make (same
 *   chunks, same shapes, same workspace), so the ratio is the GEMM share of the
 *   layer; then im2col and col2im alone, and a memcpy of the same size.
 * - Depthwise conv and batch norm (--only layers): ps_k_dwconv2d_* and ps_k_bn_*
 *   on MobileNetV2-like shapes (alpha 0.35, 32x32 input, batch 64), GF/s and the
 *   bytes each pass must move per second, against a memcpy moving as many.
 *
 * Each measurement is a warm-up, a calibration (a rep repeats the call until it
 * lasts at least --min-ms), then --reps reps; the two contestants of a row are
 * interleaved (A B, B A, ...) so machine noise hits both alike. Reported: the
 * median time of each, and the median over reps of the paired ratio.
 * Built by meson, never run by the tests. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "kernels.h"

#ifndef PS_BENCH_EXAMPLES
#define PS_BENCH_EXAMPLES "examples"
#endif

#define MAX_MODELS 16
#define MAX_LAYERS 64
#define MAX_REPS 101
#define GOAL 0.90 /* the target: >= 90% of OpenBLAS on GEMM-bound layers */

/* ---- options ----------------------------------------------------------- */

typedef struct {
    int threads, reps;
    long chunk; /* images per im2col pass; 0 = the planner's */
    double min_s;
    bool models_on, layers_on; /* --only */
    const char *models[MAX_MODELS];
    int nmodels;
} opts;

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s [--model FILE]... [--reps N] [--threads N] [--min-ms MS] [--chunk N]\n"
            "          [--only models|layers]\n"
            "Times the CPU backend of kernels/ (ps_k_gemm, ps_k_conv2d_*, im2col, col2im)\n"
            "on the Dense and Conv2D layer shapes of model JSON files, against\n"
            "cblas_sgemm on the same GEMMs in the same run.\n"
            "  --model FILE  a model JSON (repeatable); default: %s/{mlp,fashion_cnn,\n"
            "                cifar10_cnn}.json\n"
            "  --reps N      timed reps per measurement, the median is reported (default 7)\n"
            "  --threads N   OpenBLAS threads (default 1, as the workers run)\n"
            "  --min-ms MS   least duration of one rep, the call is repeated inside (default "
            "50)\n"
            "  --chunk N     images per im2col pass of the conv layers (default: the one\n"
            "                ps_k_conv_plan picks, as the worker runs)\n"
            "  --only WHAT   models: the Dense/Conv2D layers of the model files only; layers:\n"
            "                the depthwise conv and batch norm kernels on MobileNetV2-like\n"
            "                shapes only (GF/s and GB/s against a memcpy of the same bytes)\n"
            "  --help        this text\n",
            argv0, PS_BENCH_EXAMPLES);
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static int parse_opts(int argc, char **argv, opts *o) {
    *o = (opts){.threads = 1, .reps = 7, .min_s = 0.050, .models_on = true, .layers_on = true};
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
        if (strcmp(a, "--model") == 0) {
            if (o->nmodels == MAX_MODELS) {
                fprintf(stderr, "%s: at most %d --model\n", argv[0], MAX_MODELS);
                return -1;
            }
            o->models[o->nmodels++] = val;
        } else if (strcmp(a, "--reps") == 0 && parse_int(val, 1, MAX_REPS, &v)) {
            o->reps = (int)v;
        } else if (strcmp(a, "--threads") == 0 && parse_int(val, 1, 1024, &v)) {
            o->threads = (int)v;
        } else if (strcmp(a, "--chunk") == 0 && parse_int(val, 1, 1 << 20, &v)) {
            o->chunk = v;
        } else if (strcmp(a, "--only") == 0 &&
                   (strcmp(val, "models") == 0 || strcmp(val, "layers") == 0)) {
            o->models_on = strcmp(val, "models") == 0;
            o->layers_on = !o->models_on;
        } else if (strcmp(a, "--min-ms") == 0 && parse_int(val, 1, 60000, &v)) {
            o->min_s = (double)v / 1000.0;
        } else {
            fprintf(stderr, "%s: bad option or value: %s %s\n", argv[0], a, val);
            return -1;
        }
    }
    if (o->nmodels == 0) {
        static const char *const defaults[] = {PS_BENCH_EXAMPLES "/mlp.json",
                                               PS_BENCH_EXAMPLES "/fashion_cnn.json",
                                               PS_BENCH_EXAMPLES "/cifar10_cnn.json"};
        for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
            o->models[o->nmodels++] = defaults[i];
    }
    return 0;
}

/* ---- model shapes ------------------------------------------------------ */

typedef struct {
    bool conv;   /* Conv2D, else Dense */
    bool first;  /* first weighted layer: the worker computes no input gradient */
    size_t idx;  /* index in the model's "layers" */
    size_t in;   /* Dense: input features */
    size_t out;  /* Dense: units */
    ps_k_conv p; /* Conv2D geometry (batch = the model's batch size) */
} layer;

typedef struct {
    char name[64];
    size_t batch;
    layer l[MAX_LAYERS];
    size_t nl;
} model;

static bool get_size(const cJSON *j, size_t *out) {
    if (!cJSON_IsNumber(j) || j->valuedouble < 1 || j->valuedouble > 1e8 ||
        j->valuedouble != floor(j->valuedouble))
        return false;
    *out = (size_t)j->valuedouble;
    return true;
}

/* An integer or a pair [a, b]; *a = *b = def when absent. */
static bool get_pair(const cJSON *j, size_t def, size_t *a, size_t *b) {
    if (!j) {
        *a = *b = def;
        return true;
    }
    if (cJSON_IsNumber(j)) {
        if (!get_size(j, a)) return false;
        *b = *a;
        return true;
    }
    return cJSON_IsArray(j) && cJSON_GetArraySize(j) == 2 &&
           get_size(cJSON_GetArrayItem(j, 0), a) && get_size(cJSON_GetArrayItem(j, 1), b);
}

static bool get_same(const cJSON *l) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(l, "padding");
    return cJSON_IsString(p) && strcmp(p->valuestring, "same") == 0;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 14, len = 0;
    char *s = malloc(cap);
    for (size_t got; s && (got = fread(s + len, 1, cap - len - 1, f)) > 0;) {
        len += got;
        if (len + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) free(s);
            s = t;
        }
    }
    fclose(f);
    if (s) s[len] = 0;
    return s;
}

/* Shapes of the Dense and Conv2D layers of a Keras-style model JSON (the
 * subset worker/model/model_spec.c reads; the worker validates, this only walks). */
static int load_model(const char *path, model *m) {
    char *text = read_text(path);
    if (!text) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) {
        fprintf(stderr, "%s: not valid JSON\n", path);
        return -1;
    }
    int rc = -1;
    memset(m, 0, sizeof *m);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    snprintf(m->name, sizeof m->name, "%s", cJSON_IsString(name) ? name->valuestring : path);
    m->batch = 64;
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "batch_size");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "input_shape");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    int rank = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : 0;
    size_t h = 1, w = 1, c = 1, dims[3];
    if ((bs && !get_size(bs, &m->batch)) || rank < 1 || rank > 3 || !cJSON_IsArray(layers)) {
        fprintf(stderr, "%s: needs input_shape, layers and an integer batch_size\n", path);
        goto out;
    }
    for (int i = 0; i < rank; i++)
        if (!get_size(cJSON_GetArrayItem(shape, i), &dims[i])) {
            fprintf(stderr, "%s: bad input_shape\n", path);
            goto out;
        }
    bool image = rank == 3;
    if (image) {
        h = dims[0], w = dims[1], c = dims[2];
    } else {
        c = dims[0] * (rank > 1 ? dims[1] : 1);
    }
    size_t idx = 0;
    const cJSON *l;
    cJSON_ArrayForEach(l, layers) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(l, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        layer L = {.idx = idx, .first = m->nl == 0};
        bool pool = strcmp(t, "MaxPooling2D") == 0 || strcmp(t, "MaxPool2D") == 0 ||
                    strcmp(t, "AveragePooling2D") == 0 || strcmp(t, "AvgPool2D") == 0;
        if (strcmp(t, "Dense") == 0) {
            if (!get_size(cJSON_GetObjectItemCaseSensitive(l, "units"), &L.out)) goto bad;
            L.in = h * w * c;
            h = w = 1, c = L.out, image = false;
        } else if (strcmp(t, "Conv2D") == 0 || pool) {
            size_t kh, kw, sh, sw, filters = 0;
            if (!image) goto bad;
            if (!get_pair(cJSON_GetObjectItemCaseSensitive(l, pool ? "pool_size" : "kernel_size"),
                          2, &kh, &kw))
                goto bad;
            if (!get_pair(cJSON_GetObjectItemCaseSensitive(l, "strides"), pool ? kh : 1, &sh, &sw))
                goto bad;
            if (!pool && !get_size(cJSON_GetObjectItemCaseSensitive(l, "filters"), &filters))
                goto bad;
            ps_k_conv p;
            if (ps_k_conv_plan(&p, m->batch, h, w, c, kh, kw, pool ? c : filters, sh, sw,
                               get_same(l)) != 0)
                goto bad;
            h = p.oh, w = p.ow, c = p.cout;
            if (pool) goto next;
            L.conv = true;
            L.p = p;
        } else if (strcmp(t, "Flatten") == 0) {
            c = h * w * c, h = w = 1, image = false;
            goto next;
        } else if (strcmp(t, "Dropout") == 0 || strcmp(t, "Activation") == 0) {
            goto next;
        } else {
            goto bad;
        }
        if (m->nl == MAX_LAYERS) goto bad;
        m->l[m->nl++] = L;
    next:
        idx++;
        continue;
    bad:
        fprintf(stderr, "%s: layer %zu (%s): unsupported or malformed\n", path, idx, t);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* ---- timing ------------------------------------------------------------ */

typedef void (*job_fn)(const void *ctx);
typedef struct {
    job_fn fn;
    const void *ctx;
    size_t iters; /* calls per rep, from calibrate */
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per call over j->iters calls. */
static double run(const job *j) {
    double t0 = now();
    for (size_t i = 0; i < j->iters; i++)
        j->fn(j->ctx);
    return (now() - t0) / (double)j->iters;
}

/* Warm-up, then the number of calls that makes one rep last >= min_s. */
static void calibrate(job *j, double min_s) {
    j->iters = 1;
    run(j); /* warm-up: page faults, OpenBLAS buffers, caches */
    for (;;) {
        double t = run(j) * (double)j->iters;
        if (t >= min_s) return;
        double want = t > 0 ? 1.25 * min_s / t * (double)j->iters : 2.0 * (double)j->iters;
        size_t next = (size_t)ceil(want);
        j->iters = next > 2 * j->iters ? next : 2 * j->iters;
        if (j->iters > ((size_t)1 << 40)) return;
    }
}

typedef struct {
    double ta, tb; /* median seconds per call */
    double ratio;  /* median over reps of tb / ta: a's throughput relative to b's */
} pair_res;

/* Times a and b interleaved (a b, b a, a b, ...). */
static pair_res time_pair(job a, job b, const opts *o) {
    calibrate(&a, o->min_s);
    calibrate(&b, o->min_s);
    double ta[MAX_REPS], tb[MAX_REPS], r[MAX_REPS];
    for (int i = 0; i < o->reps; i++) {
        if (i % 2 == 0) {
            ta[i] = run(&a);
            tb[i] = run(&b);
        } else {
            tb[i] = run(&b);
            ta[i] = run(&a);
        }
        r[i] = tb[i] / ta[i];
    }
    return (pair_res){ps_bench_median(ta, o->reps), ps_bench_median(tb, o->reps),
                      ps_bench_median(r, o->reps)};
}

static double time_one(job a, const opts *o) {
    calibrate(&a, o->min_s);
    double t[MAX_REPS];
    for (int i = 0; i < o->reps; i++)
        t[i] = run(&a);
    return ps_bench_median(t, o->reps);
}

/* ---- contestants ------------------------------------------------------- */

static void fill(float *p, size_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f; /* [-1, 1) */
    }
}

static float *alloc_floats(size_t n, uint32_t seed) {
    void *p = NULL;
    if (ps_k_malloc(ps_k_cpu(), (n ? n : 1) * sizeof(float), &p) != 0) {
        fprintf(stderr, "out of memory (%zu floats)\n", n);
        exit(1);
    }
    fill(p, n, seed);
    return p;
}

typedef struct {
    bool ta, tb;
    size_t M, N, K;
    const float *A, *B;
    float *C;
} gemm_ctx;

static void gemm_psk(const void *v) {
    const gemm_ctx *g = v;
    ps_k_gemm(ps_k_cpu(), g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->B, 0.0f, g->C);
}

static void blas_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, const float *A,
                      const float *B, float beta, float *C) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0f, A, (int)(ta ? M : K), B, (int)(tb ? K : N), beta, C,
                (int)N);
}

static void gemm_blas(const void *v) {
    const gemm_ctx *g = v;
    blas_gemm(g->ta, g->tb, g->M, g->N, g->K, g->A, g->B, 0.0f, g->C);
}

typedef struct {
    ps_k_conv p;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db, *ws, *ws2;
} conv_ctx;

static size_t chunk_of(const ps_k_conv *p, size_t i0) {
    return p->n - i0 < p->chunk ? p->n - i0 : p->chunk;
}

static void conv_fwd_psk(const void *v) {
    const conv_ctx *c = v;
    ps_k_conv2d_forward_overwrite(ps_k_cpu(), &c->p, c->y, c->x, c->w, c->b, c->ws);
}

/* The GEMMs of ps_k_conv2d_forward_overwrite alone, on the same chunks and
 * workspace (which holds an im2col made once, before timing). */
static void conv_fwd_blas(const void *v) {
    const conv_ctx *c = v;
    const ps_k_conv *p = &c->p;
    size_t pix = p->oh * p->ow, K = p->kh * p->kw * p->c;
    for (size_t i0 = 0; i0 < p->n; i0 += p->chunk)
        blas_gemm(false, false, chunk_of(p, i0) * pix, p->cout, K, c->ws, c->w, 0.0f,
                  c->y + i0 * pix * p->cout);
}

static void conv_bwd_psk(const void *v) {
    const conv_ctx *c = v;
    ps_k_conv2d_backward_overwrite(ps_k_cpu(), &c->p, c->dx, c->dw, c->db, c->dy, c->x, c->w,
                                   c->ws);
}

/* The GEMMs of ps_k_conv2d_backward_overwrite alone: dW (+)= cols^T @ dy and
 * dcols = dy @ W^T per chunk, into the same workspace. */
static void conv_bwd_blas(const void *v) {
    const conv_ctx *c = v;
    const ps_k_conv *p = &c->p;
    size_t pix = p->oh * p->ow, K = p->kh * p->kw * p->c;
    for (size_t i0 = 0; i0 < p->n; i0 += p->chunk) {
        size_t rows = chunk_of(p, i0) * pix;
        const float *dyc = c->dy + i0 * pix * p->cout;
        blas_gemm(true, false, K, p->cout, rows, c->ws, dyc, i0 ? 1.0f : 0.0f, c->dw);
        blas_gemm(false, true, rows, K, p->cout, dyc, c->w, 0.0f, c->ws);
    }
}

static void im2col_all(const void *v) {
    const conv_ctx *c = v;
    const ps_k_conv *p = &c->p;
    for (size_t i0 = 0; i0 < p->n; i0 += p->chunk)
        ps_k_im2col_overwrite(ps_k_cpu(), p, c->ws, c->x + i0 * p->h * p->w * p->c,
                              chunk_of(p, i0));
}

static void col2im_all(const void *v) {
    const conv_ctx *c = v;
    const ps_k_conv *p = &c->p;
    for (size_t i0 = 0; i0 < p->n; i0 += p->chunk)
        ps_k_col2im_overwrite(ps_k_cpu(), p, c->dx + i0 * p->h * p->w * p->c, c->ws,
                              chunk_of(p, i0));
}

static void bias_add(const void *v) {
    const conv_ctx *c = v;
    const ps_k_conv *p = &c->p;
    ps_k_bias_add_rows_acc(ps_k_cpu(), c->y, c->b, p->n * p->oh * p->ow, p->cout);
}

static void bias_grad(const void *v) {
    const conv_ctx *c = v;
    const ps_k_conv *p = &c->p;
    ps_k_bias_grad_overwrite(ps_k_cpu(), c->db, c->dy, p->n * p->oh * p->ow, p->cout);
}

/* Reference for im2col and col2im: a plain copy of each chunk's im2col matrix. */
static void copy_all(const void *v) {
    const conv_ctx *c = v;
    const ps_k_conv *p = &c->p;
    size_t per_img = p->oh * p->ow * p->kh * p->kw * p->c;
    for (size_t i0 = 0; i0 < p->n; i0 += p->chunk)
        memcpy(c->ws2, c->ws, chunk_of(p, i0) * per_img * sizeof(float));
}

/* ---- report ------------------------------------------------------------ */

typedef struct {
    double t_psk, t_blas; /* sums of median times */
    double log_ratio;     /* sum of log(ratio) */
    double min_ratio;
    int n, n_goal;
} summary;

static void add(summary *s, const pair_res *r) {
    if (s->n == 0 || r->ratio < s->min_ratio) s->min_ratio = r->ratio;
    s->t_psk += r->ta;
    s->t_blas += r->tb;
    s->log_ratio += log(r->ratio);
    s->n++;
    s->n_goal += r->ratio >= GOAL;
}

static void print_summary(const char *what, const summary *s) {
    if (!s->n) return;
    printf("%-34s time-weighted %.3f  geomean %.3f  min %.3f  rows >= %.2f: %d/%d\n", what,
           s->t_blas / s->t_psk, exp(s->log_ratio / s->n), s->min_ratio, GOAL, s->n_goal, s->n);
}

static double gflops(double flops, double t) {
    return flops / t * 1e-9;
}

static void print_header(int argc, char **argv, const opts *o) {
    printf("command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\nopenblas: %s (core %s), threads %d\n", openblas_get_config(), openblas_get_corename(),
           o->threads);
    printf("timing: per measurement a warm-up, reps of >= %.0f ms (the call repeated inside), "
           "median of %d reps;\n        ps_k and cblas interleaved; ratio = median over reps of "
           "t(cblas) / t(ps_k) (1.00 = as fast as OpenBLAS)\n",
           o->min_s * 1e3, o->reps);
}

static void bench_dense(const model *m, const layer *L, const opts *o, summary *s) {
    size_t B = m->batch, in = L->in, out = L->out;
    float *x = alloc_floats(B * in, 1), *w = alloc_floats(in * out, 2),
          *y = alloc_floats(B * out, 3), *dy = alloc_floats(B * out, 4),
          *dw = alloc_floats(in * out, 5), *dx = alloc_floats(B * in, 6);
    const struct {
        const char *name;
        gemm_ctx g;
    } g[3] = {
        {"fwd x@W", {false, false, B, out, in, x, w, y}},
        {"dW x^T@dy", {true, false, in, out, B, x, dy, dw}},
        {"dx dy@W^T", {false, true, B, in, out, dy, w, dx}},
    };
    char lname[64];
    snprintf(lname, sizeof lname, "%zu dense %zu->%zu%s", L->idx, in, out, L->first ? "*" : "");
    for (int i = 0; i < 3; i++) {
        pair_res r = time_pair((job){gemm_psk, &g[i].g, 0}, (job){gemm_blas, &g[i].g, 0}, o);
        double fl = 2.0 * (double)g[i].g.M * (double)g[i].g.N * (double)g[i].g.K;
        char shape[48];
        snprintf(shape, sizeof shape, "%zux%zux%zu", g[i].g.M, g[i].g.N, g[i].g.K);
        printf("%-12s %-22s %-10s %-15s %9.3f %9.2f %9.2f %6.3f\n", m->name, lname, g[i].name,
               shape, r.ta * 1e3, gflops(fl, r.ta), gflops(fl, r.tb), r.ratio);
        fflush(stdout);
        add(s, &r);
    }
    ps_k_dev *d = ps_k_cpu();
    ps_k_free(d, x), ps_k_free(d, w), ps_k_free(d, y), ps_k_free(d, dy), ps_k_free(d, dw),
        ps_k_free(d, dx);
}

typedef struct {
    const model *m;
    const layer *L;
    double t_fwd, t_bwd, t_im2col, t_col2im, t_copy, t_bias, t_db;
} conv_times;

static void conv_name(const layer *L, char *buf, size_t len) {
    const ps_k_conv *p = &L->p;
    snprintf(buf, len, "%zu conv %zux%zux%zu k%zu %s->%zu%s", L->idx, p->h, p->w, p->c, p->kh,
             p->oh == p->h ? "same" : "valid", p->cout, L->first ? "*" : "");
}

static void bench_conv(const model *m, const layer *L, const opts *o, summary *sf, summary *sb,
                       conv_times *ct) {
    const ps_k_conv *p = &L->p;
    size_t in = p->n * p->h * p->w * p->c, out = p->n * p->oh * p->ow * p->cout;
    size_t K = p->kh * p->kw * p->c, M = p->n * p->oh * p->ow, wsz = ps_k_conv_workspace(p);
    conv_ctx c = {.p = *p,
                  .x = alloc_floats(in, 11),
                  .w = alloc_floats(K * p->cout, 12),
                  .b = alloc_floats(p->cout, 13),
                  .y = alloc_floats(out, 14),
                  .dy = alloc_floats(out, 15),
                  .dx = alloc_floats(in, 16),
                  .dw = alloc_floats(K * p->cout, 17),
                  .db = alloc_floats(p->cout, 18),
                  .ws = alloc_floats(wsz, 19),
                  .ws2 = alloc_floats(wsz, 20)};
    ps_k_im2col_overwrite(ps_k_cpu(), p, c.ws, c.x, p->chunk); /* for the cblas contestants */
    char lname[64], shape[48];
    conv_name(L, lname, sizeof lname);
    double fl = 2.0 * (double)M * (double)p->cout * (double)K;

    pair_res f = time_pair((job){conv_fwd_psk, &c, 0}, (job){conv_fwd_blas, &c, 0}, o);
    snprintf(shape, sizeof shape, "%zux%zux%zu", M, p->cout, K);
    printf("%-12s %-29s %-8s %-15s %9.3f %9.2f %9.2f %6.3f\n", m->name, lname, "fwd", shape,
           f.ta * 1e3, gflops(fl, f.ta), gflops(fl, f.tb), f.ratio);
    fflush(stdout);
    add(sf, &f);

    ps_k_im2col_overwrite(ps_k_cpu(), p, c.ws, c.x, p->chunk);
    pair_res b = time_pair((job){conv_bwd_psk, &c, 0}, (job){conv_bwd_blas, &c, 0}, o);
    snprintf(shape, sizeof shape, "2x %zux%zux%zu", K, p->cout, M);
    printf("%-12s %-29s %-8s %-15s %9.3f %9.2f %9.2f %6.3f\n", m->name, lname, "bwd dW+dx", shape,
           b.ta * 1e3, gflops(2 * fl, b.ta), gflops(2 * fl, b.tb), b.ratio);
    fflush(stdout);
    add(sb, &b);

    *ct = (conv_times){.m = m,
                       .L = L,
                       .t_fwd = f.ta,
                       .t_bwd = b.ta,
                       .t_im2col = time_one((job){im2col_all, &c, 0}, o),
                       .t_col2im = time_one((job){col2im_all, &c, 0}, o),
                       .t_copy = time_one((job){copy_all, &c, 0}, o),
                       .t_bias = time_one((job){bias_add, &c, 0}, o),
                       .t_db = time_one((job){bias_grad, &c, 0}, o)};
    ps_k_dev *d = ps_k_cpu();
    float *bufs[] = {c.x, c.w, c.b, c.y, c.dy, c.dx, c.dw, c.db, c.ws, c.ws2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ps_k_free(d, bufs[i]);
}

/* The Dense and Conv2D layers of the model files against OpenBLAS. */
static void bench_models(const model *models, const opts *o) {
    summary s_dense = {0}, s_fwd = {0}, s_bwd = {0};
    printf("\nDense layers: the three GEMMs of a training step, ps_k_gemm vs cblas_sgemm "
           "(M x N x K; * = first layer, whose dx the worker skips)\n");
    printf("%-12s %-22s %-10s %-15s %9s %9s %9s %6s\n", "model", "layer", "gemm", "MxNxK",
           "ps_k ms", "ps_k GF/s", "blas GF/s", "ratio");
    for (int i = 0; i < o->nmodels; i++)
        for (size_t j = 0; j < models[i].nl; j++)
            if (!models[i].l[j].conv) bench_dense(&models[i], &models[i].l[j], o, &s_dense);

    static conv_times ct[MAX_MODELS * MAX_LAYERS];
    size_t nct = 0;
    printf("\nConv2D layers: ps_k_conv2d_* (im2col + GEMM + bias / col2im) vs cblas_sgemm on "
           "the same GEMMs alone;\nGF/s count the GEMM flops only, so ratio = the GEMM share of "
           "the layer (* = first layer, whose dx the worker skips)\n");
    printf("%-12s %-29s %-8s %-15s %9s %9s %9s %6s\n", "model", "layer (batch = model's)", "pass",
           "GEMM MxNxK", "ps_k ms", "ps_k GF/s", "blas GF/s", "ratio");
    for (int i = 0; i < o->nmodels; i++)
        for (size_t j = 0; j < models[i].nl; j++)
            if (models[i].l[j].conv)
                bench_conv(&models[i], &models[i].l[j], o, &s_fwd, &s_bwd, &ct[nct++]);

    if (nct) {
        printf("\nThe other parts alone, over the batch: im2col and col2im (GB/s = (image + im2col "
               "matrix bytes) / time), a memcpy\nof the im2col matrix (GB/s = 2 x its bytes / "
               "time); share of its conv pass (fwd or bwd above) of im2col, bias add,\ncol2im and "
               "the bias gradient (column sums of dy); chunk = images per im2col pass\n");
        printf("%-12s %-29s %5s %7s %7s %7s %7s %7s %7s %7s %7s\n", "model", "layer", "chunk",
               "cols MB", "im2col", "col2im", "memcpy", "i2c/fwd", "b/fwd", "c2i/bwd", "db/bwd");
        for (size_t i = 0; i < nct; i++) {
            const ps_k_conv *p = &ct[i].L->p;
            double img = 4.0 * (double)(p->n * p->h * p->w * p->c);
            double cols = 4.0 * (double)(p->chunk * p->oh * p->ow * p->kh * p->kw * p->c);
            double all = 4.0 * (double)(p->n * p->oh * p->ow * p->kh * p->kw * p->c);
            char lname[64];
            conv_name(ct[i].L, lname, sizeof lname);
            printf("%-12s %-29s %5zu %7.2f %7.2f %7.2f %7.2f %6.1f%% %6.1f%% %6.1f%% %6.1f%%\n",
                   ct[i].m->name, lname, p->chunk, cols / 1e6, (img + all) / ct[i].t_im2col * 1e-9,
                   (img + all) / ct[i].t_col2im * 1e-9, 2 * all / ct[i].t_copy * 1e-9,
                   100 * ct[i].t_im2col / ct[i].t_fwd, 100 * ct[i].t_bias / ct[i].t_fwd,
                   100 * ct[i].t_col2im / ct[i].t_bwd, 100 * ct[i].t_db / ct[i].t_bwd);
        }
    }

    printf("\nSummary: ratio = throughput of the CPU backend / OpenBLAS on the same GEMMs "
           "(goal >= %.2f);\ntime-weighted = sum t(cblas) / sum t(ps_k) over the rows\n",
           GOAL);
    print_summary("Dense GEMMs (ps_k_gemm):", &s_dense);
    print_summary("Conv2D forward (GEMM share):", &s_fwd);
    print_summary("Conv2D backward (GEMM share):", &s_bwd);
}

/* ---- depthwise conv and batch norm ----------------------------------------- */

typedef struct {
    ps_k_conv p;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db;
} dw_ctx;

static void dw_fwd(const void *v) {
    const dw_ctx *c = v;
    ps_k_dwconv2d_forward_overwrite(ps_k_cpu(), &c->p, c->y, c->x, c->w, c->b);
}

static void dw_bwd(const void *v) {
    const dw_ctx *c = v;
    ps_k_dwconv2d_backward_overwrite(ps_k_cpu(), &c->p, c->dx, c->dw, c->db, c->dy, c->x, c->w);
}

typedef struct {
    size_t rows, c;
    float *x, *y, *dy, *dx, *gamma, *beta, *mean, *var, *dgamma, *dbeta;
} bn_ctx;

static void bn_train(const void *v) {
    const bn_ctx *c = v;
    ps_k_bn_forward_train_overwrite(ps_k_cpu(), c->y, c->mean, c->var, c->x, c->gamma, c->beta,
                                    c->rows, c->c, 1e-3f);
}

static void bn_infer(const void *v) {
    const bn_ctx *c = v;
    ps_k_bn_forward_infer_overwrite(ps_k_cpu(), c->y, c->x, c->mean, c->var, c->gamma, c->beta,
                                    c->rows, c->c, 1e-3f);
}

static void bn_bwd(const void *v) {
    const bn_ctx *c = v;
    ps_k_bn_backward_overwrite(ps_k_cpu(), c->dx, c->dgamma, c->dbeta, c->dy, c->x, c->mean, c->var,
                               c->gamma, c->rows, c->c, 1e-3f);
}

/* A memcpy that moves `bytes` bytes in all: bytes / 2 read, bytes / 2 written. */
typedef struct {
    float *dst, *src;
    size_t bytes;
} copy_ctx;

static void copy_half(const void *v) {
    const copy_ctx *c = v;
    memcpy(c->dst, c->src, c->bytes / 2);
}

/* Times fn against a memcpy moving the same bytes, interleaved; prints a row
 * (flops 0: no GF/s). */
static void layer_row(const char *shape, const char *pass, job fn, double flops, double bytes,
                      const opts *o) {
    size_t half = (size_t)(bytes / 2 / sizeof(float)) + 1;
    copy_ctx cc = {alloc_floats(half, 40), alloc_floats(half, 41), (size_t)bytes};
    pair_res r = time_pair(fn, (job){copy_half, &cc, 0}, o);
    char gf[16] = "-";
    if (flops > 0) snprintf(gf, sizeof gf, "%.2f", gflops(flops, r.ta));
    printf("%-28s %-10s %8.3f %7s %8.2f %8.2f %6.3f %8.2f\n", shape, pass, r.ta * 1e3, gf,
           bytes / r.ta * 1e-9, bytes / r.tb * 1e-9, r.ratio, bytes / 1e6);
    fflush(stdout);
    ps_k_free(ps_k_cpu(), cc.dst), ps_k_free(ps_k_cpu(), cc.src);
}

/* MobileNetV2 (alpha 0.35) on 32x32 inputs, batch 64: its depthwise 3x3
 * convolutions and the batch norms after them. */
static void bench_layers(const opts *o) {
    static const size_t dws[][5] = {/* n, h, w, c, stride */
                                    {64, 16, 16, 48, 1},
                                    {64, 16, 16, 48, 2},
                                    {64, 8, 8, 96, 1},
                                    {64, 8, 8, 96, 2},
                                    {64, 4, 4, 192, 1}};
    printf("\nDepthwise conv 3x3 same (ps_k_dwconv2d_*, direct) and batch norm (ps_k_bn_*):\n"
           "GB/s = the bytes a pass must read and write (fwd x, w, y; bwd dy, x, w, dx, dw;\n"
           "bn fwd x, y; bn bwd dy, x, dx) / time; memcpy = a memcpy moving as many bytes,\n"
           "interleaved; ratio = t(memcpy) / t(kernel)\n");
    printf("%-28s %-10s %8s %7s %8s %8s %6s %8s\n", "shape", "pass", "ms", "GF/s", "GB/s", "memcpy",
           "ratio", "MB");
    for (size_t i = 0; i < sizeof dws / sizeof dws[0]; i++) {
        const size_t *k = dws[i];
        dw_ctx c;
        if (ps_k_dwconv_plan(&c.p, k[0], k[1], k[2], k[3], 3, 3, 1, k[4], k[4], true) != 0) {
            fprintf(stderr, "bad depthwise shape\n");
            exit(1);
        }
        size_t nx = k[0] * k[1] * k[2] * k[3], ny = k[0] * c.p.oh * c.p.ow * c.p.cout;
        size_t nw = 9 * c.p.cout;
        c.x = alloc_floats(nx, 21), c.w = alloc_floats(nw, 22), c.b = alloc_floats(c.p.cout, 23);
        c.y = alloc_floats(ny, 24), c.dy = alloc_floats(ny, 25), c.dx = alloc_floats(nx, 26);
        c.dw = alloc_floats(nw, 27), c.db = alloc_floats(c.p.cout, 28);
        double fl = 2.0 * (double)ny * 9;
        char shape[48];
        snprintf(shape, sizeof shape, "dw [%zu,%zu,%zu,%zu] s%zu", k[0], k[1], k[2], k[3], k[4]);
        layer_row(shape, "fwd", (job){dw_fwd, &c, 0}, fl, 4.0 * (double)(nx + nw + ny), o);
        layer_row(shape, "bwd dx+dw", (job){dw_bwd, &c, 0}, 2 * fl,
                  4.0 * (double)(ny + nx + nw + nx + nw), o);
        float *bufs[] = {c.x, c.w, c.b, c.y, c.dy, c.dx, c.dw, c.db};
        for (size_t j = 0; j < sizeof bufs / sizeof *bufs; j++)
            ps_k_free(ps_k_cpu(), bufs[j]);
    }
    static const size_t bns[][2] = {
        {64 * 32 * 32, 16}, {64 * 16 * 16, 48}, {64 * 8 * 8, 96}, {64 * 4 * 4, 192}};
    for (size_t i = 0; i < sizeof bns / sizeof bns[0]; i++) {
        size_t rows = bns[i][0], C = bns[i][1], n = rows * C;
        bn_ctx c = {rows,
                    C,
                    alloc_floats(n, 31),
                    alloc_floats(n, 32),
                    alloc_floats(n, 33),
                    alloc_floats(n, 34),
                    alloc_floats(C, 35),
                    alloc_floats(C, 36),
                    alloc_floats(C, 37),
                    alloc_floats(C, 38),
                    alloc_floats(C, 39),
                    alloc_floats(C, 40)};
        bn_train(&c); /* real statistics (var >= 0) for inference and backward */
        char shape[48];
        snprintf(shape, sizeof shape, "bn [%zu,%zu]", rows, C);
        double b = 4.0 * (double)n;
        layer_row(shape, "fwd train", (job){bn_train, &c, 0}, 0, 2 * b, o);
        layer_row(shape, "fwd infer", (job){bn_infer, &c, 0}, 0, 2 * b, o);
        layer_row(shape, "bwd", (job){bn_bwd, &c, 0}, 0, 3 * b, o);
        float *bufs[] = {c.x, c.y, c.dy, c.dx, c.gamma, c.beta, c.mean, c.var, c.dgamma, c.dbeta};
        for (size_t j = 0; j < sizeof bufs / sizeof *bufs; j++)
            ps_k_free(ps_k_cpu(), bufs[j]);
    }
}

int main(int argc, char **argv) {
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        usage(stderr, argv[0]);
        return 2;
    }
    static model models[MAX_MODELS];
    for (int i = 0; i < o.nmodels && o.models_on; i++)
        if (load_model(o.models[i], &models[i]) != 0) return 1;
    for (int i = 0; i < o.nmodels && o.chunk; i++)
        for (size_t j = 0; j < models[i].nl; j++) {
            ps_k_conv *p = &models[i].l[j].p;
            p->chunk = (size_t)o.chunk < p->n ? (size_t)o.chunk : p->n;
        }
    ps_k_set_threads(o.threads);
    print_header(argc, argv, &o);

    if (o.models_on) bench_models(models, &o);
    if (o.layers_on) bench_layers(&o);
    return 0;
}
