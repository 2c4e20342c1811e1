/* Preprocessing and augmentation from the data spec's "preprocess" list (see
 * augment.h): parsing, shapes, applying a plan to one image, describing it. */
#include "augment.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errf.h"
#include "ps_error.h"
#include "resize.h"

#define OPS_LIST "resize, center_crop, random_crop, random_flip, rescale, normalize or log1p"

/* ---- parsing ---- */

/* A whole number in [1, PS_AUG_MAX_SIDE]. */
static bool side(const cJSON *v, size_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < 1 || d > PS_AUG_MAX_SIDE) return false;
    *out = (size_t)d;
    return true;
}

/* A number that is finite as a float. */
static bool finite_float(const cJSON *v, float *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return false;
    float f = (float)v->valuedouble;
    if (!isfinite(f)) return false;
    *out = f;
    return true;
}

static int parse_size(const cJSON *v, size_t i, const char *name, ps_aug_op *op, char *err,
                      size_t errlen) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ||
        !side(cJSON_GetArrayItem(v, 0), &op->h) || !side(cJSON_GetArrayItem(v, 1), &op->w))
        return ps_errf(
            PS_EINVAL, err, errlen,
            "preprocess[%zu]: %s expects [height, width], two whole numbers from 1 to %d", i, name,
            PS_AUG_MAX_SIDE);
    return PS_OK;
}

static int parse_flip(const cJSON *v, size_t i, char *err, size_t errlen) {
    if (!cJSON_IsString(v))
        return ps_errf(PS_EINVAL, err, errlen,
                       "preprocess[%zu]: random_flip expects the string \"horizontal\"", i);
    if (strcmp(v->valuestring, "horizontal") != 0)
        return ps_errf(PS_EINVAL, err, errlen,
                       "preprocess[%zu]: random_flip \"%.64s\": only \"horizontal\" is supported "
                       "for now",
                       i, v->valuestring);
    return PS_OK;
}

static int parse_rescale(const cJSON *v, size_t i, ps_aug_op *op, char *err, size_t errlen) {
    op->scale = 1, op->offset = 0;
    if (cJSON_IsNumber(v)) {
        if (!finite_float(v, &op->scale))
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: rescale: the scale is not a finite number", i);
        return PS_OK;
    }
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "mobilenet_v2") != 0)
            return ps_errf(
                PS_EINVAL, err, errlen,
                "preprocess[%zu]: rescale \"%.64s\": the only preset is \"mobilenet_v2\" "
                "(x / 127.5 - 1)",
                i, v->valuestring);
        op->scale = (float)(1.0 / 127.5), op->offset = -1;
        return PS_OK;
    }
    if (!cJSON_IsObject(v))
        return ps_errf(PS_EINVAL, err, errlen,
                       "preprocess[%zu]: rescale expects a number (the scale), {\"scale\": S, "
                       "\"offset\": O} or \"mobilenet_v2\"",
                       i);
    bool have_scale = false;
    const cJSON *k;
    cJSON_ArrayForEach(k, v) {
        float *dst;
        if (strcmp(k->string, "scale") == 0)
            dst = &op->scale, have_scale = true;
        else if (strcmp(k->string, "offset") == 0)
            dst = &op->offset;
        else
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: rescale: unknown key \"%.64s\" (expected scale and "
                           "offset)",
                           i, k->string);
        if (!finite_float(k, dst))
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: rescale: %s is not a finite number", i, k->string);
    }
    if (!have_scale)
        return ps_errf(PS_EINVAL, err, errlen, "preprocess[%zu]: rescale: \"scale\" is missing", i);
    return PS_OK;
}

/* mean or std: 1 to PS_AUG_MAX_CH finite numbers (std: above 0) into vals; *n their count. */
static int parse_values(const cJSON *v, size_t i, const char *name, bool positive, float *vals,
                        size_t *n, char *err, size_t errlen) {
    int len = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (len < 1 || len > PS_AUG_MAX_CH)
        return ps_errf(PS_EINVAL, err, errlen,
                       "preprocess[%zu]: normalize: %s expects a list of 1 (every channel) to %d "
                       "numbers (one per channel)",
                       i, name, PS_AUG_MAX_CH);
    for (int j = 0; j < len; j++) {
        if (!finite_float(cJSON_GetArrayItem(v, j), &vals[j]))
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: normalize: %s[%d] is not a finite number", i, name, j);
        if (positive && !(vals[j] > 0))
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: normalize: %s[%d] is %g, it must be above 0", i, name,
                           j, (double)vals[j]);
    }
    *n = (size_t)len;
    return PS_OK;
}

static int parse_normalize(const cJSON *v, size_t i, ps_aug_op *op, char *err, size_t errlen) {
    if (!cJSON_IsObject(v))
        return ps_errf(PS_EINVAL, err, errlen,
                       "preprocess[%zu]: normalize expects {\"mean\": [..], \"std\": [..]}", i);
    const cJSON *k, *mean = NULL, *std = NULL;
    cJSON_ArrayForEach(k, v) {
        if (strcmp(k->string, "mean") == 0)
            mean = k;
        else if (strcmp(k->string, "std") == 0)
            std = k;
        else
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: normalize: unknown key \"%.64s\" (expected mean and "
                           "std)",
                           i, k->string);
    }
    if (!mean || !std)
        return ps_errf(PS_EINVAL, err, errlen, "preprocess[%zu]: normalize: \"%s\" is missing", i,
                       mean ? "std" : "mean");
    size_t nm, ns;
    int rc = parse_values(mean, i, "mean", false, op->mean, &nm, err, errlen);
    if (rc == PS_OK) rc = parse_values(std, i, "std", true, op->std, &ns, err, errlen);
    if (rc != PS_OK) return rc;
    if (nm != 1 && ns != 1 && nm != ns)
        return ps_errf(PS_EINVAL, err, errlen,
                       "preprocess[%zu]: normalize: mean has %zu values, std %zu (give 1 or one "
                       "per channel)",
                       i, nm, ns);
    op->n_ch = nm > ns ? nm : ns;
    for (size_t k2 = 1; k2 < op->n_ch; k2++) { /* a single value stands for every channel */
        if (nm == 1) op->mean[k2] = op->mean[0];
        if (ns == 1) op->std[k2] = op->std[0];
    }
    return PS_OK;
}

static int parse_op(const cJSON *o, size_t i, ps_aug_op *op, char *err, size_t errlen) {
    if (!cJSON_IsObject(o) || cJSON_GetArraySize(o) != 1)
        return ps_errf(PS_EINVAL, err, errlen,
                       "preprocess[%zu]: expected an object with exactly one key (" OPS_LIST ")",
                       i);
    const cJSON *v = o->child;
    const char *key = v->string;
    if (strcmp(key, "resize") == 0) {
        op->kind = PS_AUG_RESIZE;
        return parse_size(v, i, key, op, err, errlen);
    }
    if (strcmp(key, "center_crop") == 0) {
        op->kind = PS_AUG_CENTER_CROP;
        return parse_size(v, i, key, op, err, errlen);
    }
    if (strcmp(key, "random_crop") == 0) {
        op->kind = PS_AUG_RANDOM_CROP;
        return parse_size(v, i, key, op, err, errlen);
    }
    if (strcmp(key, "random_flip") == 0) {
        op->kind = PS_AUG_RANDOM_FLIP;
        return parse_flip(v, i, err, errlen);
    }
    if (strcmp(key, "rescale") == 0) {
        op->kind = PS_AUG_RESCALE;
        return parse_rescale(v, i, op, err, errlen);
    }
    if (strcmp(key, "normalize") == 0) {
        op->kind = PS_AUG_NORMALIZE;
        return parse_normalize(v, i, op, err, errlen);
    }
    if (strcmp(key, "log1p") == 0) {
        op->kind = PS_AUG_LOG1P;
        if (!cJSON_IsTrue(v))
            return ps_errf(PS_EINVAL, err, errlen, "preprocess[%zu]: log1p expects true", i);
        return PS_OK;
    }
    return ps_errf(PS_EINVAL, err, errlen,
                   "preprocess[%zu]: unknown operation \"%.64s\" (expected " OPS_LIST ")", i, key);
}

int ps_aug_plan_parse(const cJSON *arr, ps_aug_plan *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (!arr) return PS_OK;
    if (!cJSON_IsArray(arr))
        return ps_errf(
            PS_EINVAL, err, errlen,
            "preprocess: expected a list of operations, e.g. [{\"resize\": [224, 224]}]");
    int n = cJSON_GetArraySize(arr);
    if (n > PS_AUG_MAX_OPS)
        return ps_errf(PS_EINVAL, err, errlen, "preprocess: %d operations, at most %d", n,
                       PS_AUG_MAX_OPS);
    const cJSON *o;
    size_t i = 0;
    cJSON_ArrayForEach(o, arr) {
        int rc = parse_op(o, i, &p->ops[i], err, errlen);
        if (rc != PS_OK) {
            memset(p, 0, sizeof *p);
            return rc;
        }
        i++;
    }
    p->n = i;
    return PS_OK;
}

/* ---- shapes ---- */

/* The shape after op i, in place; PS_EINVAL with the reason when it does not apply. */
static int op_shape(const ps_aug_op *op, size_t i, size_t *h, size_t *w, size_t *c, char *err,
                    size_t errlen) {
    switch (op->kind) {
    case PS_AUG_RESIZE:
        *h = op->h, *w = op->w;
        return PS_OK;
    case PS_AUG_CENTER_CROP:
    case PS_AUG_RANDOM_CROP:
        if (op->h > *h || op->w > *w)
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: %s %zux%zu is larger than the image there (%zux%zu)",
                           i, op->kind == PS_AUG_CENTER_CROP ? "center_crop" : "random_crop", op->h,
                           op->w, *h, *w);
        *h = op->h, *w = op->w;
        return PS_OK;
    case PS_AUG_NORMALIZE:
        if (op->n_ch != 1 && op->n_ch != *c)
            return ps_errf(PS_EINVAL, err, errlen,
                           "preprocess[%zu]: normalize gives %zu means/stds, the image has %zu "
                           "channel%s (give 1 value or %zu)",
                           i, op->n_ch, *c, *c == 1 ? "" : "s", *c);
        return PS_OK;
    case PS_AUG_RANDOM_FLIP:
    case PS_AUG_RESCALE:
    case PS_AUG_LOG1P:
        return PS_OK;
    }
    return ps_errf(PS_EINVAL, err, errlen, "preprocess[%zu]: unknown operation kind %d", i,
                   (int)op->kind);
}

int ps_aug_plan_shape(const ps_aug_plan *p, size_t h, size_t w, size_t c, size_t *oh, size_t *ow,
                      size_t *oc, char *err, size_t errlen) {
    if (h == 0 || w == 0 || c == 0)
        return ps_errf(PS_EINVAL, err, errlen, "preprocess: an empty image (%zux%zux%zu)", h, w, c);
    for (size_t i = 0; i < p->n; i++) {
        int rc = op_shape(&p->ops[i], i, &h, &w, &c, err, errlen);
        if (rc != PS_OK) return rc;
    }
    *oh = h, *ow = w, *oc = c;
    return PS_OK;
}

size_t ps_aug_scratch_floats(const ps_aug_plan *p, size_t h, size_t w, size_t c) {
    size_t most = 0;
    for (size_t i = 0; i + 1 < p->n; i++) { /* the last op writes out */
        if (op_shape(&p->ops[i], i, &h, &w, &c, NULL, 0) != PS_OK) break;
        if (h * w * c > most) most = h * w * c;
    }
    return 2 * most; /* two images: each op reads one and writes the other */
}

/* ---- applying ---- */

/* splitmix64: small, and the same numbers on every platform. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n < 2^32 (the high 32 bits scaled: bias below n / 2^32). */
static size_t below(uint64_t *s, size_t n) {
    return (size_t)(((next_u64(s) >> 32) * (uint64_t)n) >> 32);
}

static void crop(const float *src, size_t w, size_t c, size_t top, size_t left, float *dst,
                 size_t oh, size_t ow) {
    for (size_t y = 0; y < oh; y++)
        memcpy(dst + y * ow * c, src + ((top + y) * w + left) * c, ow * c * sizeof *dst);
}

static void flip_lr(const float *src, size_t h, size_t w, size_t c, float *dst) {
    for (size_t y = 0; y < h; y++) {
        const float *row = src + y * w * c;
        float *o = dst + y * w * c;
        for (size_t x = 0; x < w; x++)
            for (size_t k = 0; k < c; k++)
                o[x * c + k] = row[(w - 1 - x) * c + k];
    }
}

static void rescale(const float *src, size_t n, float scale, float offset, float *dst) {
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i] * scale + offset;
}

static void log1p_counts(const float *src, size_t n, float *dst) {
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i] > 0 ? log1pf(src[i]) : 0.0f; /* NaN and negatives: 0 */
}

static void normalize(const ps_aug_op *op, const float *src, size_t n, size_t c, float *dst) {
    if (op->n_ch == 1) {
        for (size_t i = 0; i < n; i++)
            dst[i] = (src[i] - op->mean[0]) / op->std[0];
        return;
    }
    for (size_t i = 0; i < n; i += c)
        for (size_t k = 0; k < c; k++)
            dst[i + k] = (src[i + k] - op->mean[k]) / op->std[k];
}

void ps_aug_apply(const ps_aug_plan *p, const float *in, size_t h, size_t w, size_t c, float *out,
                  float *scratch, uint64_t seed, bool training) {
    size_t most = ps_aug_scratch_floats(p, h, w, c) / 2;
    float *a = scratch, *b = scratch ? scratch + most : NULL;
    const float *src = in;
    uint64_t rng = seed;
    for (size_t i = 0; i < p->n; i++) {
        const ps_aug_op *op = &p->ops[i];
        bool last = i + 1 == p->n;
        float *dst = last ? out : src == a ? b : a;
        size_t oh = h, ow = w;
        switch (op->kind) {
        case PS_AUG_RESIZE:
            oh = op->h, ow = op->w;
            ps_resize_bilinear(src, h, w, c, dst, oh, ow);
            break;
        case PS_AUG_CENTER_CROP:
        case PS_AUG_RANDOM_CROP: {
            oh = op->h, ow = op->w;
            size_t top = (h - oh) / 2, left = (w - ow) / 2;
            if (op->kind == PS_AUG_RANDOM_CROP && training) {
                top = below(&rng, h - oh + 1);
                left = below(&rng, w - ow + 1);
            }
            crop(src, w, c, top, left, dst, oh, ow);
            break;
        }
        case PS_AUG_RANDOM_FLIP:
            if (training && next_u64(&rng) >> 63) {
                flip_lr(src, h, w, c, dst);
            } else if (last) {
                memcpy(dst, src, h * w * c * sizeof *dst);
            } else {
                continue; /* nothing to do: the next op reads the same image */
            }
            break;
        case PS_AUG_RESCALE:
            rescale(src, h * w * c, op->scale, op->offset, dst);
            break;
        case PS_AUG_NORMALIZE:
            normalize(op, src, h * w * c, c, dst);
            break;
        case PS_AUG_LOG1P:
            log1p_counts(src, h * w * c, dst);
            break;
        }
        h = oh, w = ow;
        src = dst;
    }
    if (p->n == 0) memcpy(out, in, h * w * c * sizeof *out);
}

/* ---- describing ---- */

/* Appends to out[outlen] at *pos (stops quietly when full). */
__attribute__((format(printf, 4, 5))) static void add(char *out, size_t outlen, size_t *pos,
                                                      const char *fmt, ...) {
    if (*pos >= outlen) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *pos, outlen - *pos, fmt, ap);
    va_end(ap);
    if (n > 0) *pos += (size_t)n;
}

static void add_values(char *out, size_t outlen, size_t *pos, const float *v, size_t n) {
    add(out, outlen, pos, "[");
    for (size_t k = 0; k < n; k++)
        add(out, outlen, pos, "%s%g", k ? " " : "", (double)v[k]);
    add(out, outlen, pos, "]");
}

void ps_aug_describe(const ps_aug_plan *p, char *out, size_t outlen) {
    size_t pos = 0;
    if (outlen == 0) return;
    out[0] = '\0';
    if (p->n == 0) add(out, outlen, &pos, "none");
    for (size_t i = 0; i < p->n; i++) {
        const ps_aug_op *op = &p->ops[i];
        if (i) add(out, outlen, &pos, ", ");
        switch (op->kind) {
        case PS_AUG_RESIZE:
            add(out, outlen, &pos, "resize %zux%zu (bilinear)", op->h, op->w);
            break;
        case PS_AUG_CENTER_CROP:
            add(out, outlen, &pos, "center crop %zux%zu", op->h, op->w);
            break;
        case PS_AUG_RANDOM_CROP:
            add(out, outlen, &pos, "random crop %zux%zu", op->h, op->w);
            break;
        case PS_AUG_RANDOM_FLIP:
            add(out, outlen, &pos, "random horizontal flip");
            break;
        case PS_AUG_RESCALE:
            add(out, outlen, &pos, "rescale x%g", (double)op->scale);
            if (op->offset != 0) add(out, outlen, &pos, " %+g", (double)op->offset);
            break;
        case PS_AUG_NORMALIZE: {
            size_t n = op->n_ch;
            add(out, outlen, &pos, "normalize mean ");
            add_values(out, outlen, &pos, op->mean, n);
            add(out, outlen, &pos, " std ");
            add_values(out, outlen, &pos, op->std, n);
            break;
        }
        case PS_AUG_LOG1P:
            add(out, outlen, &pos, "log1p");
            break;
        }
    }
}
