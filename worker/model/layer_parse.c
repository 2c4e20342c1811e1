/* The option readers the layers share (layer.h): sizes, windows, padding,
 * activations, flags, numbers and axes, each mistake one line naming the
 * layer and the option. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "ps_error.h"

const cJSON *ps_layer_item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

bool ps_layer_get_size(const cJSON *item, double lo, double hi, size_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < lo || v > hi) return false;
    *out = (size_t)v;
    return true;
}

bool ps_layer_get_pair(const cJSON *item, size_t lo, size_t hi, size_t *a, size_t *b) {
    if (cJSON_IsNumber(item)) {
        if (!ps_layer_get_size(item, (double)lo, (double)hi, a)) return false;
        *b = *a;
        return true;
    }
    return cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2 &&
           ps_layer_get_size(cJSON_GetArrayItem(item, 0), (double)lo, (double)hi, a) &&
           ps_layer_get_size(cJSON_GetArrayItem(item, 1), (double)lo, (double)hi, b);
}

static bool get_kernel_pair(const cJSON *item, size_t *a, size_t *b) {
    return ps_layer_get_pair(item, 1, PS_LAYER_MAX_KERNEL, a, b);
}

/* Activation name -> ps_k_act or PS_ACT_SOFTMAX; false for an unknown name. */
static bool parse_act(const char *s, int *act) {
    static const struct {
        const char *name;
        int act;
    } acts[] = {{"linear", PS_K_ACT_LINEAR},
                {"relu", PS_K_ACT_RELU},
                {"relu6", PS_K_ACT_RELU6},
                {"sigmoid", PS_K_ACT_SIGMOID},
                {"tanh", PS_K_ACT_TANH},
                {"gelu", PS_K_ACT_GELU},
                {"swish", PS_K_ACT_SWISH},
                {"silu", PS_K_ACT_SWISH},
                {"hard_sigmoid", PS_K_ACT_HARD_SIGMOID},
                {"hard_swish", PS_K_ACT_HARD_SWISH},
                {"hard_silu", PS_K_ACT_HARD_SWISH},
                {"softmax", PS_ACT_SOFTMAX}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(s, acts[i].name) == 0) {
            *act = acts[i].act;
            return true;
        }
    }
    return false;
}

static int parse_padding(ps_build *b, const cJSON *l, bool *same) {
    const cJSON *p = ps_layer_item(l, "padding");
    *same = false;
    if (!p) return PS_OK;
    if (cJSON_IsString(p) && strcmp(p->valuestring, "valid") == 0) return PS_OK;
    if (cJSON_IsString(p) && strcmp(p->valuestring, "same") == 0) {
        *same = true;
        return PS_OK;
    }
    return ps_build_fail(b, PS_EFORMAT, "%s: 'padding' must be \"valid\" or \"same\"", b->where);
}

/* Output size along one axis (as ps_k_conv_plan / ps_k_pool_plan). */
static size_t out_size(size_t in, size_t k, size_t s, bool same) {
    return same ? (in + s - 1) / s : (in - k) / s + 1;
}

int ps_layer_need_image(ps_build *b) {
    if (ps_tensor_image(b->m, b->in_t[0])) return PS_OK;
    return ps_build_fail(b, PS_EFORMAT,
                         "%s: needs an image input: give 'input_shape' as [height, width, "
                         "channels] and put no Flatten or Dense before it",
                         b->where);
}

int ps_layer_parse_window(ps_build *b, const cJSON *l, const char *wkey, bool conv, ps_op *o) {
    int rc = ps_layer_need_image(b);
    if (rc != PS_OK) return rc;
    ps_shape in = o->in;
    const cJSON *k = ps_layer_item(l, wkey);
    if (conv && !k) return ps_build_fail(b, PS_EFORMAT, "%s: missing key '%s'", b->where, wkey);
    o->kh = o->kw = 2;
    if (k && !get_kernel_pair(k, &o->kh, &o->kw))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: '%s' must be an integer or a pair of integers in [1, %d]",
                             b->where, wkey, PS_LAYER_MAX_KERNEL);
    const cJSON *s = ps_layer_item(l, "strides");
    o->sh = conv ? 1 : o->kh;
    o->sw = conv ? 1 : o->kw;
    if (s && !(cJSON_IsNull(s) && !conv) && !get_kernel_pair(s, &o->sh, &o->sw))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: 'strides' must be an integer or a pair of integers in [1, %d]",
                             b->where, PS_LAYER_MAX_KERNEL);
    if ((rc = parse_padding(b, l, &o->same))) return rc;
    if (!o->same && (o->kh > in.h || o->kw > in.w))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: window %zux%zu is larger than its input %zux%zu (use "
                             "\"padding\": \"same\" or a smaller window)",
                             b->where, o->kh, o->kw, in.h, in.w);
    o->out.h = out_size(in.h, o->kh, o->sh, o->same);
    o->out.w = out_size(in.w, o->kw, o->sw, o->same);
    o->out.c = in.c;
    return PS_OK;
}

int ps_layer_parse_activation(ps_build *b, const cJSON *l, int *act) {
    const cJSON *a = ps_layer_item(l, "activation");
    *act = PS_K_ACT_LINEAR;
    if (!a) return PS_OK;
    if (!cJSON_IsString(a))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'activation' must be a string", b->where);
    if (!parse_act(a->valuestring, act))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: unknown activation '%s' (want relu, relu6, sigmoid, tanh, gelu, "
                             "swish/silu, hard_sigmoid, hard_swish/hard_silu, softmax or linear)",
                             b->where, a->valuestring);
    return PS_OK;
}

int ps_layer_parse_bool(ps_build *b, const cJSON *l, const char *key, bool dflt, bool *out) {
    const cJSON *v = ps_layer_item(l, key);
    *out = dflt;
    if (!v) return PS_OK;
    if (!cJSON_IsBool(v))
        return ps_build_fail(b, PS_EFORMAT, "%s: '%s' must be true or false", b->where, key);
    *out = cJSON_IsTrue(v);
    return PS_OK;
}

int ps_layer_parse_float(ps_build *b, const cJSON *l, const char *key, double lo, double hi,
                         float dflt, float *out) {
    const cJSON *v = ps_layer_item(l, key);
    *out = dflt;
    if (!v) return PS_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return ps_build_fail(b, PS_EFORMAT, "%s: '%s' must be a number in [%g, %g]", b->where, key,
                             lo, hi);
    *out = (float)v->valuedouble;
    return PS_OK;
}

int ps_layer_parse_channel_axis(ps_build *b, const cJSON *l, bool image) {
    const cJSON *a = ps_layer_item(l, "axis");
    if (!a) return PS_OK;
    const cJSON *v = a;
    if (cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1) v = cJSON_GetArrayItem(a, 0);
    if (cJSON_IsNumber(v) && (v->valuedouble == -1 || v->valuedouble == (image ? 3 : 1)))
        return PS_OK;
    return ps_build_fail(b, PS_EFORMAT,
                         "%s: option 'axis' is not supported: only the channel axis (-1 or %d)",
                         b->where, image ? 3 : 1);
}

/* Keras' named variance-scaling initializers. */
static bool named_init(const char *name, ps_vscale *v) {
    static const struct {
        const char *cls, *fn;
        ps_vscale v;
    } inits[] = {
        {"GlorotUniform", "glorot_uniform", {1.0f, PS_FAN_AVG, PS_DIST_UNIFORM}},
        {"GlorotNormal", "glorot_normal", {1.0f, PS_FAN_AVG, PS_DIST_TRUNCATED_NORMAL}},
        {"HeUniform", "he_uniform", {2.0f, PS_FAN_IN, PS_DIST_UNIFORM}},
        {"HeNormal", "he_normal", {2.0f, PS_FAN_IN, PS_DIST_TRUNCATED_NORMAL}},
        {"LecunUniform", "lecun_uniform", {1.0f, PS_FAN_IN, PS_DIST_UNIFORM}},
        {"LecunNormal", "lecun_normal", {1.0f, PS_FAN_IN, PS_DIST_TRUNCATED_NORMAL}},
    };
    for (size_t i = 0; i < sizeof inits / sizeof inits[0]; i++)
        if (!strcmp(name, inits[i].cls) || !strcmp(name, inits[i].fn)) {
            *v = inits[i].v;
            return true;
        }
    return false;
}

/* Keys Keras writes into an initializer's config that must be null. */
static bool nullable(const cJSON *k) {
    return cJSON_IsNull(k) && (!strcmp(k->string, "seed") || !strcmp(k->string, "input_axes") ||
                               !strcmp(k->string, "output_axes"));
}

static bool vscale_config(const cJSON *cfg, ps_vscale *v) {
    const cJSON *k;
    *v = (ps_vscale){1.0f, PS_FAN_IN, PS_DIST_TRUNCATED_NORMAL}; /* Keras' defaults */
    cJSON_ArrayForEach(k, cfg) {
        if (nullable(k)) continue;
        if (!strcmp(k->string, "scale") && cJSON_IsNumber(k) && k->valuedouble > 0 &&
            isfinite(k->valuedouble)) {
            v->scale = (float)k->valuedouble;
            continue;
        }
        const char *s = cJSON_IsString(k) ? k->valuestring : "";
        if (!strcmp(k->string, "mode") && (!strcmp(s, "fan_in") || !strcmp(s, "fan_out") ||
                                           !strcmp(s, "fan_avg"))) {
            v->mode = !strcmp(s, "fan_in") ? PS_FAN_IN : !strcmp(s, "fan_out") ? PS_FAN_OUT
                                                                                : PS_FAN_AVG;
            continue;
        }
        if (!strcmp(k->string, "distribution") &&
            (!strcmp(s, "truncated_normal") || !strcmp(s, "untruncated_normal") ||
             !strcmp(s, "normal") || !strcmp(s, "uniform"))) {
            v->dist = !strcmp(s, "uniform")              ? PS_DIST_UNIFORM
                      : !strcmp(s, "untruncated_normal") ? PS_DIST_NORMAL
                                                         : PS_DIST_TRUNCATED_NORMAL;
            continue;
        }
        return false;
    }
    return true;
}

int ps_layer_parse_init(ps_build *b, const cJSON *l, const char *key, ps_vscale *out) {
    const cJSON *v = ps_layer_item(l, key);
    *out = (ps_vscale){0};
    if (!v) return PS_OK;
    bool ok;
    if (cJSON_IsString(v)) {
        ok = named_init(v->valuestring, out);
    } else {
        const cJSON *c = ps_layer_item(v, "class_name"), *cfg = ps_layer_item(v, "config"), *k;
        ok = cJSON_IsString(c);
        if (ok && !strcmp(c->valuestring, "VarianceScaling")) {
            ok = vscale_config(cfg, out);
        } else if (ok && (ok = named_init(c->valuestring, out))) {
            cJSON_ArrayForEach(k, cfg) { /* only a null seed */
                if (!nullable(k)) ok = false;
            }
        }
    }
    if (ok) return PS_OK;
    char *s = cJSON_PrintUnformatted(v);
    int rc = ps_build_fail(b, PS_EFORMAT,
                           "%s: option '%s' = %.120s is not supported (GlorotUniform, GlorotNormal, "
                           "HeUniform, HeNormal, LecunUniform, LecunNormal or VarianceScaling, "
                           "seed null)",
                           b->where, key, s ? s : "?");
    cJSON_free(s);
    return rc;
}

int ps_layer_parse_edges(ps_build *b, const cJSON *l, const char *key, size_t dflt, size_t e[4]) {
    const cJSON *p = ps_layer_item(l, key);
    e[0] = e[1] = e[2] = e[3] = dflt;
    if (!p) return PS_OK;
    if (ps_layer_get_pair(p, 0, PS_LAYER_MAX_PAD, &e[0], &e[2])) {
        e[1] = e[0];
        e[3] = e[2];
        return PS_OK;
    }
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 2 && cJSON_IsArray(cJSON_GetArrayItem(p, 0)) &&
        ps_layer_get_pair(cJSON_GetArrayItem(p, 0), 0, PS_LAYER_MAX_PAD, &e[0], &e[1]) &&
        cJSON_IsArray(cJSON_GetArrayItem(p, 1)) &&
        ps_layer_get_pair(cJSON_GetArrayItem(p, 1), 0, PS_LAYER_MAX_PAD, &e[2], &e[3]))
        return PS_OK;
    return ps_build_fail(b, PS_EFORMAT,
                         "%s: '%s' must be an integer, a pair, or a pair of pairs in [0, %d]",
                         b->where, key, PS_LAYER_MAX_PAD);
}
