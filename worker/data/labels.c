/* Label mappings (see labels.h): strict parsing of the flags and of the spec's
 * "labels" key, checks against the data and the model, relabelling. */
#include "labels.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "ps_error.h"


static void spec_init(ps_label_spec *s, ps_labels_kind kind) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    for (size_t i = 0; i < PS_LABELS_MAX; i++)
        s->to[i] = kind == PS_LABELS_MAP ? -1 : 0;
}

/* Reads a decimal number 0..PS_LABELS_MAX-1 at *p (digits only); advances *p. */
static int read_num(const char **p, int *v) {
    const char *s = *p;
    int n = 0, digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 4) {
        n = n * 10 + (*s++ - '0');
        digits++;
    }
    if (digits == 0 || (*s >= '0' && *s <= '9') || n >= PS_LABELS_MAX) return -1;
    *p = s;
    *v = n;
    return 0;
}

int ps_labels_parse_positive(const char *text, ps_label_spec *out, char *err, size_t errlen) {
    spec_init(out, PS_LABELS_POSITIVE);
    const char *p = text;
    for (;;) {
        int c;
        if (read_num(&p, &c) != 0 || (*p != ',' && *p != '\0'))
            return ps_errf(PS_EINVAL, err, errlen,
                        "--positive-classes '%s': want distinct class numbers 0..%d separated by "
                        "commas, like 5,7,9",
                        text, PS_LABELS_MAX - 1);
        if (out->to[c])
            return ps_errf(PS_EINVAL, err, errlen, "--positive-classes '%s': class %d is listed twice",
                        text, c);
        out->to[c] = 1;
        out->n_named++;
        if (*p == '\0') return PS_OK;
        p++;
    }
}

int ps_labels_parse_map(const char *text, ps_label_spec *out, char *err, size_t errlen) {
    spec_init(out, PS_LABELS_MAP);
    const char *p = text;
    for (;;) {
        int c, l;
        if (read_num(&p, &c) != 0 || *p++ != ':' || read_num(&p, &l) != 0 ||
            (*p != ',' && *p != '\0'))
            return ps_errf(PS_EINVAL, err, errlen,
                        "--label-map '%s': want CLASS:LABEL pairs (numbers 0..%d) separated by "
                        "commas, like 0:0,1:0,2:1",
                        text, PS_LABELS_MAX - 1);
        if (out->to[c] >= 0)
            return ps_errf(PS_EINVAL, err, errlen, "--label-map '%s': class %d is mapped twice", text,
                        c);
        out->to[c] = (int16_t)l;
        out->n_named++;
        if (*p == '\0') return PS_OK;
        p++;
    }
}

/* A JSON number that is a whole number in 0..PS_LABELS_MAX-1. */
static int json_num(const cJSON *item, int *v) {
    if (!cJSON_IsNumber(item)) return -1;
    double d = item->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < 0 || d >= PS_LABELS_MAX) return -1;
    *v = (int)d;
    return 0;
}

/* {"positive": [5, 7, 9]} */
static int json_positive(const cJSON *arr, ps_label_spec *out, char *err, size_t errlen) {
    spec_init(out, PS_LABELS_POSITIVE);
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0)
        return ps_errf(PS_EFORMAT, err, errlen,
                    "'labels': 'positive' must be a non-empty array of class numbers");
    const cJSON *k;
    cJSON_ArrayForEach(k, arr) {
        int c;
        if (json_num(k, &c) != 0)
            return ps_errf(PS_EFORMAT, err, errlen,
                        "'labels': 'positive' must hold whole numbers 0..%d", PS_LABELS_MAX - 1);
        if (out->to[c])
            return ps_errf(PS_EFORMAT, err, errlen, "'labels': 'positive' lists class %d twice", c);
        out->to[c] = 1;
        out->n_named++;
    }
    return PS_OK;
}

/* {"map": {"0": 0, "1": 0, ...}} */
static int json_map(const cJSON *obj, ps_label_spec *out, char *err, size_t errlen) {
    spec_init(out, PS_LABELS_MAP);
    if (!cJSON_IsObject(obj) || !obj->child)
        return ps_errf(PS_EFORMAT, err, errlen,
                    "'labels': 'map' must be a non-empty object {\"CLASS\": LABEL, ...}");
    const cJSON *k;
    cJSON_ArrayForEach(k, obj) {
        const char *p = k->string;
        int c, l;
        if (read_num(&p, &c) != 0 || *p != '\0')
            return ps_errf(PS_EFORMAT, err, errlen,
                        "'labels': 'map' key '%s' is not a class number 0..%d", k->string,
                        PS_LABELS_MAX - 1);
        if (json_num(k, &l) != 0)
            return ps_errf(PS_EFORMAT, err, errlen,
                        "'labels': 'map' gives class %d a label that is not a whole number "
                        "0..%d",
                        c, PS_LABELS_MAX - 1);
        if (out->to[c] >= 0)
            return ps_errf(PS_EFORMAT, err, errlen, "'labels': 'map' maps class %d twice", c);
        out->to[c] = (int16_t)l;
        out->n_named++;
    }
    return PS_OK;
}

int ps_labels_from_json(const cJSON *item, ps_label_spec *out, char *err, size_t errlen) {
    spec_init(out, PS_LABELS_NONE);
    if (!cJSON_IsObject(item) || cJSON_GetArraySize(item) != 1)
        return ps_errf(PS_EFORMAT, err, errlen,
                    "'labels' must be an object with one key: {\"positive\": [5, 7, 9]} or "
                    "{\"map\": {\"0\": 0, \"1\": 1, ...}}");
    const cJSON *k = item->child;
    if (strcmp(k->string, "positive") == 0) return json_positive(k, out, err, errlen);
    if (strcmp(k->string, "map") == 0) return json_map(k, out, err, errlen);
    return ps_errf(PS_EFORMAT, err, errlen, "'labels': unknown key '%s' (want positive or map)",
                k->string);
}

/* The largest class spec names, or -1. */
static int max_named(const ps_label_spec *s) {
    for (int c = PS_LABELS_MAX - 1; c >= 0; c--)
        if (s->kind == PS_LABELS_MAP ? s->to[c] >= 0 : s->to[c] != 0) return c;
    return -1;
}

int ps_labels_resolve(const ps_label_spec *spec, const char *what, int data_classes,
                      size_t model_classes, int32_t table[PS_LABELS_MAX], char *err,
                      size_t errlen) {
    if (data_classes < 1 || data_classes > PS_LABELS_MAX)
        return ps_errf(PS_EINVAL, err, errlen, "the data has %d classes: at most %d can be mapped",
                    data_classes, PS_LABELS_MAX);
    for (int c = 0; c < PS_LABELS_MAX; c++)
        table[c] = c;
    if (spec->kind == PS_LABELS_NONE) {
        if ((size_t)data_classes <= model_classes) return PS_OK;
        if (model_classes == 2)
            return ps_errf(PS_EINVAL, err, errlen,
                        "the data has %d classes, the model has a binary output: say which "
                        "classes are positive (--positive-classes 5,7,9, or \"labels\": "
                        "{\"positive\": [...]} in the model spec)",
                        data_classes);
        return ps_errf(PS_EINVAL, err, errlen,
                    "the data has %d classes, the model outputs %zu (map them with "
                    "--label-map or the model spec's \"labels\")",
                    data_classes, model_classes);
    }
    int top = max_named(spec);
    if (top >= data_classes)
        return ps_errf(PS_EINVAL, err, errlen, "%s names class %d, but the data has classes 0..%d",
                    what, top, data_classes - 1);
    if (spec->kind == PS_LABELS_POSITIVE) {
        if (model_classes != 2)
            return ps_errf(PS_EINVAL, err, errlen,
                        "%s makes a binary task, but the model outputs %zu classes (a binary "
                        "model ends with Dense 1 and binary_crossentropy, or Dense 2)",
                        what, model_classes);
        if (spec->n_named >= data_classes)
            return ps_errf(PS_EINVAL, err, errlen,
                        "%s makes every one of the %d classes positive: nothing is left to tell "
                        "apart",
                        what, data_classes);
        for (int c = 0; c < data_classes; c++)
            table[c] = spec->to[c];
        return PS_OK;
    }
    int used[PS_LABELS_MAX] = {0};
    for (int c = 0; c < data_classes; c++) {
        if (spec->to[c] < 0)
            return ps_errf(PS_EINVAL, err, errlen,
                        "%s gives class %d no label: the map must cover all %d classes of the "
                        "data",
                        what, c, data_classes);
        if ((size_t)spec->to[c] >= model_classes)
            return ps_errf(PS_EINVAL, err, errlen,
                        "%s maps class %d to label %d, but the model's labels are 0..%zu", what, c,
                        spec->to[c], model_classes - 1);
        table[c] = spec->to[c];
        used[spec->to[c]] = 1;
    }
    for (size_t l = 0; l < model_classes; l++)
        if (!used[l])
            return ps_errf(PS_EINVAL, err, errlen,
                        "%s maps no class to label %zu: that output of the model would never "
                        "be trained",
                        what, l);
    return PS_OK;
}

void ps_labels_apply(ps_dataset *d, const int32_t table[PS_LABELS_MAX], int new_classes) {
    for (size_t i = 0; i < d->n; i++)
        d->y[i] = table[d->y[i]];
    d->num_classes = new_classes;
}

/* Appends printf output to out at *used, never past outlen. */
static void add(char *out, size_t outlen, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(char *out, size_t outlen, size_t *used, const char *fmt, ...) {
    if (*used >= outlen) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out + *used, outlen - *used, fmt, ap);
    va_end(ap);
    if (k > 0) *used += (size_t)k;
}

void ps_labels_describe(const ps_label_spec *spec, int data_classes, char *out, size_t outlen) {
    size_t used = 0;
    if (outlen) out[0] = '\0';
    if (spec->kind == PS_LABELS_NONE) {
        add(out, outlen, &used, "the data's own");
    } else if (spec->kind == PS_LABELS_POSITIVE) {
        add(out, outlen, &used, "binary: class%s ", spec->n_named > 1 ? "es" : "");
        for (int c = 0, k = 0; c < PS_LABELS_MAX; c++)
            if (spec->to[c]) add(out, outlen, &used, "%s%d", k++ ? "," : "", c);
        add(out, outlen, &used, " -> 1, the other %d -> 0", data_classes - spec->n_named);
    } else {
        add(out, outlen, &used, "map ");
        for (int c = 0, k = 0; c < PS_LABELS_MAX; c++)
            if (spec->to[c] >= 0)
                add(out, outlen, &used, "%s%d:%d", k++ ? "," : "", c, spec->to[c]);
    }
}

void ps_labels_balance(const ps_dataset *d, int binary, char *out, size_t outlen) {
    size_t counts[PS_LABELS_MAX] = {0}, used = 0;
    if (outlen) out[0] = '\0';
    for (size_t i = 0; i < d->n; i++)
        if (d->y[i] >= 0 && d->y[i] < PS_LABELS_MAX) counts[d->y[i]]++;
    if (binary) {
        add(out, outlen, &used, "%zu of %zu positive (%.1f%%)", counts[1], d->n,
            d->n ? 100.0 * (double)counts[1] / (double)d->n : 0.0);
        return;
    }
    for (int l = 0; l < d->num_classes && l < PS_LABELS_MAX; l++)
        add(out, outlen, &used, "%slabel %d: %zu", l ? ", " : "", l, counts[l]);
}
