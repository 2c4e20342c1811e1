/* The Keras-like JSON model spec: parsed into the op list of model_impl.h,
 * with every shape worked out and every mistake reported as one line. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"
#include "ps_error.h"

#define MAX_UNITS (1u << 24) /* sanity bounds on sizes read from a spec */
#define MAX_BATCH (1u << 20)
#define MAX_PARAMS (1u << 30)
#define MAX_KERNEL 64 /* conv kernel / pooling window side, stride */

typedef struct {
    char *err;
    size_t errlen;
} perr;

static int fail(perr *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(perr *e, int code, const char *fmt, ...) {
    if (e->err && e->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->err, e->errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Reads a whole number in [lo, hi] from item; false if not numeric/integral/in range. */
static bool get_size(const cJSON *item, double lo, double hi, size_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < lo || v > hi) return false;
    *out = (size_t)v;
    return true;
}

/* A Keras size pair: an integer n (meaning n x n) or [a, b]. */
static bool get_pair(const cJSON *item, size_t *a, size_t *b) {
    if (cJSON_IsNumber(item)) {
        if (!get_size(item, 1, MAX_KERNEL, a)) return false;
        *b = *a;
        return true;
    }
    return cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2 &&
           get_size(cJSON_GetArrayItem(item, 0), 1, MAX_KERNEL, a) &&
           get_size(cJSON_GetArrayItem(item, 1), 1, MAX_KERNEL, b);
}

static bool key_in(const char *key, const char *const *keys) {
    for (; *keys; keys++)
        if (strcmp(key, *keys) == 0) return true;
    return false;
}

/* Activation name -> ps_k_act or PS_ACT_SOFTMAX; false for an unknown name. */
static bool parse_act(const char *s, int *act) {
    static const struct {
        const char *name;
        int act;
    } acts[] = {{"linear", PS_K_ACT_LINEAR}, {"relu", PS_K_ACT_RELU}, {"sigmoid", PS_K_ACT_SIGMOID},
                {"tanh", PS_K_ACT_TANH},     {"gelu", PS_K_ACT_GELU}, {"softmax", PS_ACT_SOFTMAX}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(s, acts[i].name) == 0) {
            *act = acts[i].act;
            return true;
        }
    }
    return false;
}

/* ---- layers ------------------------------------------------------------ */

typedef enum { L_DENSE, L_CONV, L_MAXPOOL, L_AVGPOOL, L_FLATTEN, L_DROPOUT, L_ACT } layer_type;

static const struct {
    const char *name;
    layer_type type;
    const char *const keys[8];
} layer_types[] = {
    {"Dense", L_DENSE, {"type", "units", "activation", "use_bias", NULL}},
    {"Conv2D",
     L_CONV,
     {"type", "filters", "kernel_size", "strides", "padding", "activation", "use_bias", NULL}},
    {"MaxPooling2D", L_MAXPOOL, {"type", "pool_size", "strides", "padding", NULL}},
    {"MaxPool2D", L_MAXPOOL, {"type", "pool_size", "strides", "padding", NULL}},
    {"AveragePooling2D", L_AVGPOOL, {"type", "pool_size", "strides", "padding", NULL}},
    {"AvgPool2D", L_AVGPOOL, {"type", "pool_size", "strides", "padding", NULL}},
    {"Flatten", L_FLATTEN, {"type", NULL}},
    {"Dropout", L_DROPOUT, {"type", "rate", NULL}},
    {"Activation", L_ACT, {"type", "activation", NULL}},
};
#define N_LAYER_TYPES (sizeof layer_types / sizeof layer_types[0])

typedef struct {
    ps_model *m;
    size_t cap; /* of m->ops */
    size_t index;
    bool image; /* the current output is an image (not flattened yet) */
    const char *tname;
    perr *e;
} lctx;

static int push_op(lctx *L, ps_op o) {
    ps_model *m = L->m;
    if (m->nops == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 8;
        ps_op *p = realloc(m->ops, nc * sizeof *p);
        if (!p) return fail(L->e, PS_ENOMEM, "out of memory");
        m->ops = p;
        L->cap = nc;
    }
    o.kernel_var = o.bias_var = PS_NO_VAR;
    m->ops[m->nops++] = o;
    return PS_OK;
}

static ps_shape cur_shape(const lctx *L) {
    return L->m->nops ? L->m->ops[L->m->nops - 1].out : L->m->input;
}

static int parse_padding(lctx *L, const cJSON *l, bool *same) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(l, "padding");
    *same = false;
    if (!p) return PS_OK;
    if (cJSON_IsString(p) && strcmp(p->valuestring, "valid") == 0) return PS_OK;
    if (cJSON_IsString(p) && strcmp(p->valuestring, "same") == 0) {
        *same = true;
        return PS_OK;
    }
    return fail(L->e, PS_EFORMAT, "layer %zu (%s): 'padding' must be \"valid\" or \"same\"",
                L->index, L->tname);
}

/* Output size along one axis (as ps_k_conv_plan / ps_k_pool_plan). */
static size_t out_size(size_t in, size_t k, size_t s, bool same) {
    return same ? (in + s - 1) / s : (in - k) / s + 1;
}

/* Conv2D and the pooling layers: window, strides, padding, output shape. */
static int parse_window(lctx *L, const cJSON *l, layer_type t, ps_op *o) {
    ps_shape in = cur_shape(L);
    if (!L->image)
        return fail(L->e, PS_EFORMAT,
                    "layer %zu (%s): needs an image input: give 'input_shape' as [height, "
                    "width, channels] and put no Flatten or Dense before it",
                    L->index, L->tname);
    const char *wkey = t == L_CONV ? "kernel_size" : "pool_size";
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(l, wkey);
    if (t == L_CONV && !k)
        return fail(L->e, PS_EFORMAT, "layer %zu (Conv2D): missing key 'kernel_size'", L->index);
    o->kh = o->kw = 2;
    if (k && !get_pair(k, &o->kh, &o->kw))
        return fail(L->e, PS_EFORMAT,
                    "layer %zu (%s): '%s' must be an integer or a pair of integers in [1, %d]",
                    L->index, L->tname, wkey, MAX_KERNEL);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(l, "strides");
    o->sh = t == L_CONV ? 1 : o->kh;
    o->sw = t == L_CONV ? 1 : o->kw;
    if (s && !get_pair(s, &o->sh, &o->sw))
        return fail(L->e, PS_EFORMAT,
                    "layer %zu (%s): 'strides' must be an integer or a pair of integers in [1, %d]",
                    L->index, L->tname, MAX_KERNEL);
    int rc = parse_padding(L, l, &o->same);
    if (rc != PS_OK) return rc;
    if (!o->same && (o->kh > in.h || o->kw > in.w))
        return fail(L->e, PS_EFORMAT,
                    "layer %zu (%s): window %zux%zu is larger than its input %zux%zu (use "
                    "\"padding\": \"same\" or a smaller window)",
                    L->index, L->tname, o->kh, o->kw, in.h, in.w);
    o->in = in;
    o->out.h = out_size(in.h, o->kh, o->sh, o->same);
    o->out.w = out_size(in.w, o->kw, o->sw, o->same);
    o->out.c = in.c;
    return PS_OK;
}

static int parse_activation_key(lctx *L, const cJSON *l, int *act) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(l, "activation");
    *act = PS_K_ACT_LINEAR;
    if (!a) return PS_OK;
    if (!cJSON_IsString(a))
        return fail(L->e, PS_EFORMAT, "layer %zu (%s): 'activation' must be a string", L->index,
                    L->tname);
    if (!parse_act(a->valuestring, act))
        return fail(L->e, PS_EFORMAT,
                    "layer %zu (%s): unknown activation '%s' (want relu, sigmoid, tanh, gelu, "
                    "softmax or linear)",
                    L->index, L->tname, a->valuestring);
    return PS_OK;
}

static int parse_use_bias(lctx *L, const cJSON *l, bool *use_bias) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(l, "use_bias");
    *use_bias = true;
    if (!b) return PS_OK;
    if (!cJSON_IsBool(b))
        return fail(L->e, PS_EFORMAT, "layer %zu (%s): 'use_bias' must be true or false", L->index,
                    L->tname);
    *use_bias = cJSON_IsTrue(b);
    return PS_OK;
}

/* Adds the op(s) for one layer object. */
static int parse_layer(lctx *L, const cJSON *l, layer_type t) {
    ps_op o = {.in = cur_shape(L)};
    int act = PS_K_ACT_LINEAR, rc = PS_OK;
    bool use_bias = true;
    o.out = o.in;
    switch (t) {
    case L_DENSE: {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(l, "units");
        size_t units;
        if (!u) return fail(L->e, PS_EFORMAT, "layer %zu (Dense): missing key 'units'", L->index);
        if (!get_size(u, 1, MAX_UNITS, &units))
            return fail(L->e, PS_EFORMAT,
                        "layer %zu (Dense): 'units' must be an integer in [1, %u]", L->index,
                        MAX_UNITS);
        if ((rc = parse_activation_key(L, l, &act)) || (rc = parse_use_bias(L, l, &use_bias)))
            return rc;
        o.kind = OP_DENSE;
        o.out = (ps_shape){1, 1, units};
        L->image = false; /* Dense reads its input flattened */
        break;
    }
    case L_CONV: {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(l, "filters");
        size_t filters;
        if (!f)
            return fail(L->e, PS_EFORMAT, "layer %zu (Conv2D): missing key 'filters'", L->index);
        if (!get_size(f, 1, 65536, &filters))
            return fail(L->e, PS_EFORMAT,
                        "layer %zu (Conv2D): 'filters' must be an integer in [1, 65536]", L->index);
        if ((rc = parse_window(L, l, t, &o)) || (rc = parse_activation_key(L, l, &act)) ||
            (rc = parse_use_bias(L, l, &use_bias)))
            return rc;
        o.kind = OP_CONV;
        o.out.c = filters;
        break;
    }
    case L_MAXPOOL:
    case L_AVGPOOL:
        if ((rc = parse_window(L, l, t, &o))) return rc;
        o.kind = t == L_MAXPOOL ? OP_MAXPOOL : OP_AVGPOOL;
        break;
    case L_FLATTEN:
        o.kind = OP_FLATTEN;
        o.out = (ps_shape){1, 1, ps_shape_numel(o.in)};
        L->image = false;
        break;
    case L_DROPOUT: {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(l, "rate");
        if (!cJSON_IsNumber(r) || !(r->valuedouble >= 0.0 && r->valuedouble < 1.0))
            return fail(L->e, PS_EFORMAT, "layer %zu (Dropout): 'rate' must be a number in [0, 1)",
                        L->index);
        o.kind = OP_DROPOUT;
        o.rate = (float)r->valuedouble;
        break;
    }
    case L_ACT:
        if (!cJSON_GetObjectItemCaseSensitive(l, "activation"))
            return fail(L->e, PS_EFORMAT, "layer %zu (Activation): missing key 'activation'",
                        L->index);
        if ((rc = parse_activation_key(L, l, &act))) return rc;
        break;
    }
    if (ps_shape_numel(o.out) > MAX_UNITS)
        return fail(L->e, PS_EFORMAT, "layer %zu (%s): output of %zu values per sample exceeds %u",
                    L->index, L->tname, ps_shape_numel(o.out), MAX_UNITS);
    o.use_bias = use_bias;
    if (t != L_ACT && (rc = push_op(L, o))) return rc;
    if (t == L_ACT || act != PS_K_ACT_LINEAR) {
        ps_shape s = cur_shape(L);
        rc = push_op(L, (ps_op){.kind = OP_ACT, .act = act, .in = s, .out = s});
    }
    return rc;
}

static int parse_layers(ps_model *m, const cJSON *layers, perr *e) {
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0)
        return fail(e, PS_EFORMAT, "'layers' must be a non-empty array");
    lctx L = {.m = m, .e = e, .image = m->input_image};
    const cJSON *l;
    cJSON_ArrayForEach(l, layers) {
        if (!cJSON_IsObject(l)) return fail(e, PS_EFORMAT, "layer %zu: not an object", L.index);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(l, "type");
        if (!cJSON_IsString(type))
            return fail(e, PS_EFORMAT, "layer %zu: missing string key 'type'", L.index);
        size_t ti = 0;
        while (ti < N_LAYER_TYPES && strcmp(type->valuestring, layer_types[ti].name) != 0)
            ti++;
        if (ti == N_LAYER_TYPES)
            return fail(e, PS_EFORMAT,
                        "layer %zu: unknown type '%s' (want Dense, Conv2D, MaxPooling2D, "
                        "AveragePooling2D, Flatten, Dropout or Activation)",
                        L.index, type->valuestring);
        L.tname = layer_types[ti].name;
        const cJSON *k;
        cJSON_ArrayForEach(k, l) {
            if (!key_in(k->string, layer_types[ti].keys))
                return fail(e, PS_EFORMAT, "layer %zu (%s): unknown key '%s'", L.index, L.tname,
                            k->string);
        }
        int rc = parse_layer(&L, l, layer_types[ti].type);
        if (rc != PS_OK) return rc;
        L.index++;
    }
    size_t ndense = 0;
    double nparams = 0;
    for (size_t j = 0; j < m->nops; j++) {
        const ps_op *o = &m->ops[j];
        if (o->kind == OP_DENSE) ndense++;
        if (o->kind == OP_ACT && o->act == PS_ACT_SOFTMAX && j + 1 != m->nops)
            return fail(e, PS_EFORMAT, "softmax is only allowed as the final activation");
        if (o->kind == OP_DENSE) nparams += ((double)ps_shape_numel(o->in) + 1) * (double)o->out.c;
        if (o->kind == OP_CONV)
            nparams += ((double)o->kh * (double)o->kw * (double)o->in.c + 1) * (double)o->out.c;
    }
    if (ndense == 0) return fail(e, PS_EFORMAT, "the model needs at least one Dense layer");
    if (m->ops[m->nops - 1].out.h * m->ops[m->nops - 1].out.w != 1)
        return fail(e, PS_EFORMAT, "the last layer must give a flat output: end with Dense");
    if (nparams > MAX_PARAMS)
        return fail(e, PS_EFORMAT, "the model has %.0f parameters, more than the limit %u", nparams,
                    MAX_PARAMS);
    return PS_OK;
}

/* ---- optimizer ----------------------------------------------------------- */

static int parse_optimizer(ps_model *m, const cJSON *o, perr *e) {
    return ps_opt_spec_from_json(o, &m->opt, e->err, e->errlen);
}

/* ---- top level ------------------------------------------------------------ */

static int parse_input_shape(ps_model *m, const cJSON *shape, perr *e) {
    int rank = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : 0;
    if (rank < 1 || rank > 3)
        return fail(e, PS_EFORMAT, "'input_shape' must be an array of 1 to 3 positive integers");
    size_t dims[3], prod = 1;
    for (int i = 0; i < rank; i++) {
        if (!get_size(cJSON_GetArrayItem(shape, i), 1, MAX_UNITS, &dims[i]) ||
            prod * dims[i] > MAX_UNITS)
            return fail(e, PS_EFORMAT,
                        "'input_shape' must hold positive integers with a product <= %u",
                        MAX_UNITS);
        prod *= dims[i];
    }
    /* [h, w, c] is an image (channels last); [n] and [h, w] are flat vectors. */
    m->input_image = rank == 3;
    m->input = rank == 3 ? (ps_shape){dims[0], dims[1], dims[2]} : (ps_shape){1, 1, prod};
    return PS_OK;
}

static int parse_loss(ps_model *m, const cJSON *root, perr *e) {
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");
    m->loss = LOSS_SPARSE_CE;
    if (loss) {
        const char *s = cJSON_IsString(loss) ? loss->valuestring : "";
        if (strcmp(s, "sparse_categorical_crossentropy") == 0)
            m->loss = LOSS_SPARSE_CE;
        else if (strcmp(s, "binary_crossentropy") == 0)
            m->loss = LOSS_BCE;
        else if (strcmp(s, "mse") == 0 || strcmp(s, "mean_squared_error") == 0)
            m->loss = LOSS_MSE;
        else
            return fail(e, PS_EFORMAT,
                        "'loss' must be \"sparse_categorical_crossentropy\", "
                        "\"binary_crossentropy\" or \"mse\"");
    }
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(root, "from_logits");
    if (fl && !cJSON_IsBool(fl)) return fail(e, PS_EFORMAT, "'from_logits' must be true or false");
    if (fl && m->loss == LOSS_MSE)
        return fail(e, PS_EFORMAT, "'from_logits' does not apply to the mse loss");
    m->from_logits = !fl || cJSON_IsTrue(fl);
    const ps_op *last = &m->ops[m->nops - 1];
    int last_act = last->kind == OP_ACT ? last->act : PS_K_ACT_LINEAR;
    m->nrun = m->nops;
    if (m->loss == LOSS_MSE) {
        if (last_act == PS_ACT_SOFTMAX)
            return fail(e, PS_EFORMAT,
                        "a final softmax is only supported with a cross-entropy loss");
        return PS_OK;
    }
    int fold = m->loss == LOSS_SPARSE_CE ? PS_ACT_SOFTMAX : PS_K_ACT_SIGMOID;
    const char *fname = m->loss == LOSS_SPARSE_CE ? "softmax" : "sigmoid";
    if (m->loss == LOSS_BCE && last_act == PS_ACT_SOFTMAX)
        return fail(e, PS_EFORMAT, "binary_crossentropy needs a sigmoid (or no) final activation");
    if (m->from_logits && last_act == fold)
        return fail(e, PS_EFORMAT,
                    "final %s with from_logits=true would apply %s twice: set \"from_logits\": "
                    "false or drop the %s",
                    fname, fname, fname);
    if (!m->from_logits && last_act != fold)
        return fail(e, PS_EFORMAT, "from_logits=false needs a %s activation on the last layer",
                    fname);
    if (!m->from_logits) m->nrun = m->nops - 1; /* the loss applies it, stably */
    return PS_OK;
}

static int parse_spec(ps_model *m, const cJSON *root, perr *e) {
    static const char *const top_keys[] = {"name",        "input_shape", "layers",     "loss",
                                           "from_logits", "optimizer",   "batch_size", "metrics",
                                           "epochs",      "labels",      NULL};
    if (!cJSON_IsObject(root)) return fail(e, PS_EFORMAT, "the spec must be a JSON object");
    const cJSON *k;
    cJSON_ArrayForEach(k, root) {
        if (!key_in(k->string, top_keys))
            return fail(e, PS_EFORMAT, "unknown top-level key '%s'", k->string);
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name && (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof m->name))
        return fail(e, PS_EFORMAT, "'name' must be a string of at most %zu characters",
                    sizeof m->name - 1);
    snprintf(m->name, sizeof m->name, "%s", name ? name->valuestring : "model");
    int rc = parse_input_shape(m, cJSON_GetObjectItemCaseSensitive(root, "input_shape"), e);
    if (rc != PS_OK) return rc;

    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "batch_size");
    m->batch_size = 64;
    if (bs && !get_size(bs, 1, MAX_BATCH, &m->batch_size))
        return fail(e, PS_EFORMAT, "'batch_size' must be an integer in [1, %u]", MAX_BATCH);
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(root, "epochs");
    if (ep && !get_size(ep, 1, 1e9, &m->epochs))
        return fail(e, PS_EFORMAT, "'epochs' must be a positive integer");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "labels");
    if (lb && (rc = ps_labels_from_json(lb, &m->labels, e->err, e->errlen)) != PS_OK) return rc;
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(root, "metrics");
    if (metrics) {
        if (!cJSON_IsArray(metrics))
            return fail(e, PS_EFORMAT, "'metrics' must be an array of names");
        cJSON_ArrayForEach(k, metrics) {
            if (!cJSON_IsString(k) || (strcmp(k->valuestring, "accuracy") != 0 &&
                                       strcmp(k->valuestring, "sparse_categorical_accuracy") != 0))
                return fail(e, PS_EFORMAT, "'metrics': only \"accuracy\" is supported");
        }
    }
    rc = parse_layers(m, cJSON_GetObjectItemCaseSensitive(root, "layers"), e);
    if (rc == PS_OK) rc = parse_loss(m, root, e);
    if (rc == PS_OK)
        rc = parse_optimizer(m, cJSON_GetObjectItemCaseSensitive(root, "optimizer"), e);
    return rc;
}

static void add_var(ps_model *m, const char *layer, size_t li, const char *what, size_t rows,
                    size_t cols, size_t fan_in, size_t fan_out) {
    ps_model_var *v = &m->vars[m->nvars++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s_%zu/%s", layer, li, what);
    v->rank = cols ? 2 : 1;
    v->shape[0] = rows;
    v->shape[1] = cols;
    v->numel = cols ? rows * cols : rows;
    v->fan_in = fan_in;
    v->fan_out = fan_out;
    v->offset = m->nparams;
    m->nparams += v->numel;
}

/* Lays out the variables in op order: "dense_<i>/kernel" [in, out] and
 * "conv2d_<i>/kernel" [kh*kw*c_in, filters] (Keras [kh, kw, c_in, filters]
 * flattened to rows), each followed by its bias unless use_bias is false. */
static int layout_vars(ps_model *m) {
    size_t nweighted = 0, ndense = 0, nconv = 0;
    for (size_t j = 0; j < m->nops; j++)
        nweighted += m->ops[j].kind == OP_DENSE || m->ops[j].kind == OP_CONV;
    m->vars = calloc(2 * nweighted + 1, sizeof *m->vars);
    if (!m->vars) return PS_ENOMEM;
    for (size_t j = 0; j < m->nops; j++) {
        ps_op *o = &m->ops[j];
        bool bias = o->use_bias;
        if (o->kind == OP_DENSE) {
            size_t in = ps_shape_numel(o->in);
            o->kernel_var = m->nvars;
            add_var(m, "dense", ndense, "kernel", in, o->out.c, in, o->out.c);
            if (bias) {
                o->bias_var = m->nvars;
                add_var(m, "dense", ndense, "bias", o->out.c, 0, 0, 0);
            }
            ndense++;
        } else if (o->kind == OP_CONV) {
            size_t area = o->kh * o->kw;
            o->kernel_var = m->nvars;
            add_var(m, "conv2d", nconv, "kernel", area * o->in.c, o->out.c, area * o->in.c,
                    area * o->out.c);
            if (bias) {
                o->bias_var = m->nvars;
                add_var(m, "conv2d", nconv, "bias", o->out.c, 0, 0, 0);
            }
            nconv++;
        }
    }
    return PS_OK;
}

int ps_model_parse(ps_model *m, const char *json, char *err, size_t errlen) {
    perr e = {err, errlen};
    if (!json) return fail(&e, PS_EINVAL, "no spec text");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, true);
    if (!root)
        return fail(&e, PS_EFORMAT, "JSON syntax error at offset %zu",
                    end ? (size_t)(end - json) : (size_t)0);
    int rc = parse_spec(m, root, &e);
    cJSON_Delete(root);
    if (rc == PS_OK && (rc = layout_vars(m)) != PS_OK) fail(&e, rc, "out of memory");
    return rc;
}
