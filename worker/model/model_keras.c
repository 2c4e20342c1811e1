/* Keras' own model files: what model.to_json() writes, Sequential or
 * Functional, in Keras 3 form (inbound_nodes of {"args": [keras tensors],
 * "kwargs": {}}, "batch_shape", dtype policies) and Keras 2 / tf.keras form
 * (inbound_nodes of [["layer", 0, 0, {}]], "batch_input_shape"). Each layer
 * goes through the graph builder of model_spec.c; every option is either
 * understood, equal to Keras' default, or an error naming the layer and the
 * option. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "model_impl.h"
#include "ps_error.h"

#define MAX_LAYERS 4096

typedef struct {
    char *err;
    size_t errlen;
} kerr;

static int fail(kerr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(kerr *e, const char *fmt, ...) {
    if (e->err && e->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->err, e->errlen, fmt, ap);
        va_end(ap);
    }
    return PS_EFORMAT;
}

static const cJSON *item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static bool key_in(const char *key, const char *const *keys) {
    for (; *keys; keys++)
        if (strcmp(key, *keys) == 0) return true;
    return false;
}

/* Options accepted only at Keras' default value, and that value. */
typedef enum {
    D_NULL,
    D_TRUE,
    D_FALSE,
    D_ONE,
    D_CHANNELS_LAST,
    D_FLOAT32,
    D_ZEROS,
    D_ONES,
    D_099
} dflt;
static const struct {
    const char *key;
    dflt want;
} defaults[] = {
    {"data_format", D_CHANNELS_LAST},
    {"dilation_rate", D_ONE},
    {"groups", D_ONE},
    {"bias_initializer", D_ZEROS},
    {"beta_initializer", D_ZEROS},
    {"gamma_initializer", D_ONES},
    {"moving_mean_initializer", D_ZEROS},
    {"moving_variance_initializer", D_ONES},
    {"kernel_regularizer", D_NULL},
    {"bias_regularizer", D_NULL},
    {"depthwise_regularizer", D_NULL},
    {"pointwise_regularizer", D_NULL},
    {"beta_regularizer", D_NULL},
    {"gamma_regularizer", D_NULL},
    {"activity_regularizer", D_NULL},
    {"kernel_constraint", D_NULL},
    {"bias_constraint", D_NULL},
    {"depthwise_constraint", D_NULL},
    {"pointwise_constraint", D_NULL},
    {"beta_constraint", D_NULL},
    {"gamma_constraint", D_NULL},
    {"seed", D_NULL},
    {"lora_rank", D_NULL},
    {"lora_alpha", D_NULL},
    {"quantization_config", D_NULL},
    {"synchronized", D_FALSE},
    {"renorm", D_FALSE},
    {"rms_scaling", D_FALSE},
    {"renorm_clipping", D_NULL},
    {"renorm_momentum", D_099},
    {"embeddings_regularizer", D_NULL},
    {"embeddings_constraint", D_NULL},
};
#define N_DEFAULTS (sizeof defaults / sizeof defaults[0])

/* An initializer as Keras 3 ({"module", "class_name", "config": {"seed": null}})
 * or Keras 2 ({"class_name", "config"}) or a plain name writes it. */
static bool is_init(const cJSON *v, const char *cls, const char *name) {
    if (cJSON_IsString(v)) return strcmp(v->valuestring, name) == 0;
    const cJSON *c = item(v, "class_name"), *cfg = item(v, "config"), *k;
    if (!cJSON_IsString(c) || (strcmp(c->valuestring, cls) && strcmp(c->valuestring, name)))
        return false;
    static const char *const nullable[] = {"seed", "input_axes", "output_axes", NULL};
    cJSON_ArrayForEach(k, cfg) {
        if (!(key_in(k->string, nullable) && cJSON_IsNull(k))) return false;
    }
    return true;
}

static bool is_float32(const cJSON *v) {
    if (cJSON_IsNull(v)) return true;
    if (cJSON_IsString(v)) return strcmp(v->valuestring, "float32") == 0;
    const cJSON *c = item(v, "class_name"), *n = item(item(v, "config"), "name");
    return cJSON_IsString(c) && strcmp(c->valuestring, "DTypePolicy") == 0 && cJSON_IsString(n) &&
           strcmp(n->valuestring, "float32") == 0;
}

/* A layer's dtype policy as Keras writes it: null or a name ("float32",
 * "mixed_float16", "mixed_bfloat16"), Keras 3's {"module": "keras",
 * "class_name": "DTypePolicy" (3.4-3.6: "FloatDTypePolicy"), "config": {"name":
 * ...}} or Keras 2's {"class_name": "Policy", "config": {"name": ...}}.
 * Returns false for anything else (another dtype, a quantized policy). */
static bool policy_of(const cJSON *v, ps_dtype_policy *out) {
    *out = PS_POLICY_FLOAT32;
    if (!v || cJSON_IsNull(v)) return true;
    const char *name = NULL;
    if (cJSON_IsString(v)) {
        name = v->valuestring;
    } else {
        const cJSON *c = item(v, "class_name"), *n = item(item(v, "config"), "name");
        if (!cJSON_IsString(c) || !cJSON_IsString(n)) return false;
        if (strcmp(c->valuestring, "DTypePolicy") && strcmp(c->valuestring, "FloatDTypePolicy") &&
            strcmp(c->valuestring, "Policy"))
            return false;
        name = n->valuestring;
    }
    return ps_dtype_policy_parse(name, out, NULL, 0) == PS_OK;
}

static bool is_one(const cJSON *v) {
    if (cJSON_IsNumber(v)) return v->valuedouble == 1;
    if (!cJSON_IsArray(v)) return false;
    const cJSON *k;
    cJSON_ArrayForEach(k, v) {
        if (!cJSON_IsNumber(k) || k->valuedouble != 1) return false;
    }
    return true;
}

static bool default_ok(const cJSON *v, dflt want) {
    switch (want) {
    case D_NULL:
        return cJSON_IsNull(v);
    case D_TRUE:
        return cJSON_IsTrue(v);
    case D_FALSE:
        return cJSON_IsFalse(v);
    case D_ONE:
        return is_one(v);
    case D_CHANNELS_LAST:
        return cJSON_IsNull(v) || (cJSON_IsString(v) && !strcmp(v->valuestring, "channels_last"));
    case D_FLOAT32:
        return is_float32(v);
    case D_ZEROS:
        return is_init(v, "Zeros", "zeros");
    case D_ONES:
        return is_init(v, "Ones", "ones");
    case D_099:
        return cJSON_IsNumber(v) && v->valuedouble == 0.99;
    }
    return false;
}

static const char *default_name(dflt want) {
    static const char *const names[] = {
        "null",    "true",          "false", "1",    "\"channels_last\"",
        "float32", "Zeros", "Ones", "0.99"};
    return names[want];
}

/* A short rendering of a JSON value for a message. */
static void show(const cJSON *v, char *out, size_t n) {
    char *s = cJSON_PrintUnformatted(v);
    snprintf(out, n, "%s", s ? s : "?");
    if (s && strlen(s) >= n && n > 4) strcpy(out + n - 4, "...");
    free(s);
}

/* Checks every option of a layer's config: understood by the builder, or
 * at Keras' default. first: the first layer of a Sequential (may carry the
 * input shape). */
static int check_options(kerr *e, const char *where, const ps_layer_class *lc, const cJSON *cfg,
                         bool first) {
    const cJSON *k;
    cJSON_ArrayForEach(k, cfg) {
        const char *key = k->string;
        if (!strcmp(key, "name") || !strcmp(key, "dtype") || key_in(key, lc->keras_keys))
            continue; /* dtype: the layer's policy, read by parse_one */
        if (!strcmp(key, "trainable")) {
            if (!cJSON_IsBool(k)) return fail(e, "%s: 'trainable' must be true or false", where);
            continue; /* read by parse_one */
        }
        if (first && (!strcmp(key, "batch_input_shape") || !strcmp(key, "batch_shape"))) continue;
        size_t d = 0;
        while (d < N_DEFAULTS && strcmp(defaults[d].key, key))
            d++;
        char val[96];
        show(k, val, sizeof val);
        if (d == N_DEFAULTS) {
            char list[256] = "";
            for (const char *const *s = lc->keras_keys; *s; s++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         list[0] ? ", " : "", *s);
            return fail(e,
                        "%s: option '%s' is not supported (%s understands: %s; other options only "
                        "at Keras' defaults)",
                        where, key, lc->name, list[0] ? list : "none");
        }
        if (!default_ok(k, defaults[d].want))
            return fail(e, "%s: option '%s' = %s is not supported (only %s)", where, key, val,
                        default_name(defaults[d].want));
    }
    return PS_OK;
}

/* ---- the input ------------------------------------------------------------ */

static int parse_input_layer(ps_model *m, kerr *e, const char *where, const cJSON *cfg) {
    static const char *const keys[] = {
        "batch_shape", "batch_input_shape", "dtype", "sparse", "ragged", "name", "optional", NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, cfg) {
        if (!key_in(k->string, keys))
            return fail(e,
                        "%s: option '%s' is not supported (InputLayer understands: "
                        "batch_shape, batch_input_shape, dtype)",
                        where, k->string);
        if ((!strcmp(k->string, "sparse") || !strcmp(k->string, "ragged") ||
             !strcmp(k->string, "optional")) &&
            !cJSON_IsFalse(k))
            return fail(e, "%s: option '%s' is not supported (only false)", where, k->string);
        ps_dtype_policy pol;
        if (!strcmp(k->string, "dtype") && !policy_of(k, &pol))
            return fail(e,
                        "%s: option 'dtype' is not supported (only float32 or a mixed_float16 / "
                        "mixed_bfloat16 policy)",
                        where);
    }
    const cJSON *bs = item(cfg, "batch_shape");
    if (!bs) bs = item(cfg, "batch_input_shape");
    int rank = cJSON_IsArray(bs) ? cJSON_GetArraySize(bs) - 1 : -1;
    if (rank != 1 && rank != 3)
        return fail(e, "%s: the input shape must be [null, n] or [null, height, width, channels]",
                    where);
    size_t d[3] = {1, 1, 1}, prod = 1;
    for (int i = 0; i < rank; i++) {
        const cJSON *v = cJSON_GetArrayItem(bs, i + 1);
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 24) ||
            v->valuedouble != (double)(size_t)v->valuedouble)
            return fail(e, "%s: the input shape must hold positive integers after the batch axis",
                        where);
        d[i] = (size_t)v->valuedouble;
        prod *= d[i];
    }
    if (prod > (1u << 24)) return fail(e, "%s: the input is too large", where);
    m->input_image = rank == 3;
    m->input = rank == 3 ? (ps_shape){d[0], d[1], d[2]} : (ps_shape){1, 1, d[0]};
    return PS_OK;
}

/* An id input: an InputLayer of integers per sample (batch shape [null] or
 * [null, n]), of an integer dtype or read only by Embeddings. */
static int parse_id_input(ps_model *m, kerr *e, const char *where, const char *name,
                          const cJSON *cfg, size_t *t) {
    static const char *const keys[] = {
        "batch_shape", "batch_input_shape", "dtype", "sparse", "ragged", "name", "optional", NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, cfg) {
        if (!key_in(k->string, keys))
            return fail(e, "%s: option '%s' is not supported (an id input understands: "
                           "batch_shape, batch_input_shape, dtype)",
                        where, k->string);
        if ((!strcmp(k->string, "sparse") || !strcmp(k->string, "ragged") ||
             !strcmp(k->string, "optional")) &&
            !cJSON_IsFalse(k))
            return fail(e, "%s: option '%s' is not supported (only false)", where, k->string);
    }
    const cJSON *bs = item(cfg, "batch_shape");
    if (!bs) bs = item(cfg, "batch_input_shape");
    int rank = cJSON_IsArray(bs) ? cJSON_GetArraySize(bs) - 1 : -1;
    const cJSON *n = rank == 1 ? cJSON_GetArrayItem(bs, 1) : NULL;
    if (rank != 0 && !(rank == 1 && cJSON_IsNumber(n) && n->valuedouble >= 1 &&
                       n->valuedouble <= PS_MAX_ID_WIDTH && n->valuedouble == (int)n->valuedouble))
        return fail(e,
                    "%s: an id input's shape must be [null] or [null, n] (n ids per sample, 1 to "
                    "%d)",
                    where, PS_MAX_ID_WIDTH);
    size_t k_id;
    char why[160];
    if (ps_model_add_id_input(m, name, rank == 1, rank == 1 ? (size_t)n->valuedouble : 1, &k_id,
                              why, sizeof why) != PS_OK)
        return fail(e, "%s: %s", where, why);
    *t = PS_IDS_REF_BASE + k_id;
    return PS_OK;
}

/* Whether the JSON value v holds a reference to layer name: Keras 2's
 * [name, node, tensor(, kwargs)] or Keras 3's keras_history [name, node, tensor]. */
static bool refers_to(const cJSON *v, const char *name) {
    const cJSON *x, *first = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, 0) : NULL;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (cJSON_IsString(first) && (n == 3 || n == 4) && !strcmp(first->valuestring, name))
        return true;
    cJSON_ArrayForEach(x, v) {
        if (refers_to(x, name)) return true;
    }
    return false;
}

/* An InputLayer at index of layers read as an id input: an integer dtype, or
 * (Keras casts a float input to the ids an Embedding needs) every layer that
 * reads it an Embedding: in a Sequential, the layer after it. */
static bool is_id_input(const cJSON *layers, int index, const cJSON *cfg, const char *name,
                        bool functional) {
    const cJSON *dt = item(cfg, "dtype");
    if (cJSON_IsString(dt) &&
        (!strncmp(dt->valuestring, "int", 3) || !strncmp(dt->valuestring, "uint", 4)))
        return true;
    if (!functional) {
        const cJSON *next = cJSON_GetArrayItem(layers, index + 1), *c = item(next, "class_name");
        return cJSON_IsString(c) && !strcmp(c->valuestring, "Embedding");
    }
    size_t readers = 0;
    const cJSON *l;
    cJSON_ArrayForEach(l, layers) {
        if (!refers_to(item(l, "inbound_nodes"), name)) continue;
        const cJSON *c = item(l, "class_name");
        if (!cJSON_IsString(c) || strcmp(c->valuestring, "Embedding")) return false;
        readers++;
    }
    return readers > 0;
}

/* ---- the layers ------------------------------------------------------------ */

typedef struct {
    ps_model *m;
    kerr *e;
    ps_build b;
    const cJSON *layers; /* the model's "layers" */
    bool have_float;     /* the float input (tensor 0) was read */
    const char **names; /* layer names, in the order met */
    size_t *tensor;     /* each one's output tensor */
    size_t n;
    bool have_input;
    /* a model nested as a layer: its InputLayer is tensor in_t of the model
     * around it (bound: the outer model had its input already), depth its level */
    bool nested, bound;
    size_t in_t;
    int depth;
    /* the call being read: a number after the tensor (Keras 3 writes x + 3.0 and
     * x * (1 / 6) as Add / Multiply layers called with it), training=False */
    bool has_const, training_false;
    double konst;
    bool frozen; /* this model or one around it has trainable: false */
} kctx;

static int find_layer(kctx *K, const char *name, const char *where, size_t *t) {
    for (size_t i = 0; i < K->n; i++) {
        if (strcmp(K->names[i], name) == 0) {
            *t = K->tensor[i];
            return PS_OK;
        }
    }
    return fail(K->e, "%s: input '%s' is not a layer defined before it", where, name);
}

/* One inbound reference: [layer, node_index, tensor_index]. */
static int add_ref(kctx *K, const char *where, const cJSON *name, const cJSON *node,
                   const cJSON *tidx) {
    if (!cJSON_IsString(name) || !cJSON_IsNumber(node) || !cJSON_IsNumber(tidx))
        return fail(K->e, "%s: malformed inbound node", where);
    if (node->valuedouble != 0 || tidx->valuedouble != 0)
        return fail(K->e,
                    "%s: input '%s' [node %g, tensor %g]: shared layers (called more than once) "
                    "and layers with several outputs are not supported",
                    where, name->valuestring, node->valuedouble, tidx->valuedouble);
    if (K->b.nin == PS_OP_MAX_IN) return fail(K->e, "%s: more than %d inputs", where, PS_OP_MAX_IN);
    return find_layer(K, name->valuestring, where, &K->b.in_t[K->b.nin++]);
}

/* Keras 3: the keras tensors inside a call's args (nested lists allowed). */
static int collect_tensors(kctx *K, const char *where, const cJSON *a) {
    if (cJSON_IsArray(a)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, a) {
            int rc = collect_tensors(K, where, x);
            if (rc != PS_OK) return rc;
        }
        return PS_OK;
    }
    const cJSON *c = item(a, "class_name"), *h = item(item(a, "config"), "keras_history");
    if (!cJSON_IsString(c) || strcmp(c->valuestring, "__keras_tensor__") || !cJSON_IsArray(h) ||
        cJSON_GetArraySize(h) != 3)
        return fail(K->e, "%s: a call argument that is not a Keras tensor is not supported", where);
    return add_ref(K, where, cJSON_GetArrayItem(h, 0), cJSON_GetArrayItem(h, 1),
                   cJSON_GetArrayItem(h, 2));
}

/* The layer's inputs from "inbound_nodes" (exactly one node). */
static int parse_inbound(kctx *K, const char *where, const cJSON *nodes) {
    K->b.nin = 0;
    if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) != 1)
        return fail(K->e,
                    "%s: 'inbound_nodes' must hold exactly one call (shared layers are not "
                    "supported)",
                    where);
    const cJSON *node = cJSON_GetArrayItem(nodes, 0), *x;
    K->has_const = K->training_false = false;
    if (cJSON_IsObject(node)) { /* Keras 3 */
        const cJSON *args = item(node, "args"), *kw = item(node, "kwargs");
        int nargs = cJSON_IsArray(args) ? cJSON_GetArraySize(args) : 0;
        const cJSON *second = nargs == 2 ? cJSON_GetArrayItem(args, 1) : NULL;
        if (nargs == 2 && cJSON_IsNumber(second)) { /* tensor (op) number */
            K->has_const = true;
            K->konst = second->valuedouble;
        } else if (nargs != 1) {
            return fail(K->e, "%s: the call must have one positional argument", where);
        }
        cJSON_ArrayForEach(x, kw) {
            if (!strcmp(x->string, "training") && cJSON_IsFalse(x))
                K->training_false = true;
            else if (!cJSON_IsNull(x))
                return fail(K->e, "%s: call argument '%s' is not supported", where, x->string);
        }
        return collect_tensors(K, where, cJSON_GetArrayItem(args, 0));
    }
    if (!cJSON_IsArray(node)) return fail(K->e, "%s: malformed inbound node", where);
    cJSON_ArrayForEach(x, node) { /* Keras 2: [name, node_index, tensor_index, kwargs] */
        int n = cJSON_GetArraySize(x);
        if (!cJSON_IsArray(x) || n < 3 || n > 4)
            return fail(K->e, "%s: malformed inbound node", where);
        const cJSON *kw = cJSON_GetArrayItem(x, 3), *a;
        cJSON_ArrayForEach(a, kw) {
            if (!cJSON_IsNull(a))
                return fail(K->e, "%s: call argument '%s' is not supported", where, a->string);
        }
        int rc = add_ref(K, where, cJSON_GetArrayItem(x, 0), cJSON_GetArrayItem(x, 1),
                         cJSON_GetArrayItem(x, 2));
        if (rc != PS_OK) return rc;
    }
    return PS_OK;
}


/* Builds the layer of class c from cfg over K->b's inputs, with what its call
 * added: Add / Multiply of a tensor and a number is a Rescaling (x + c, x * c).
 * Keras 3 records training=False on every Dropout call of a functional model
 * and still drops when the model trains: read as a plain Dropout. */
static int build_call(kctx *K, const char *where, const char *c, const cJSON *cfg, size_t *t) {
    if (K->training_false && strcmp(c, "Dropout"))
        return fail(K->e, "%s: call argument 'training' = false is only supported for Dropout",
                    where);
    if (!K->has_const) return ps_build_layer(&K->b, c, cfg, true, t);
    bool add = !strcmp(c, "Add"), mul = !strcmp(c, "Multiply");
    if (!add && !mul)
        return fail(K->e, "%s: a number as a call argument is only supported for Add and Multiply",
                    where);
    cJSON *syn = cJSON_CreateObject();
    bool ok = syn != NULL && cJSON_AddNumberToObject(syn, "scale", add ? 1.0 : K->konst) &&
              cJSON_AddNumberToObject(syn, "offset", add ? K->konst : 0.0);
    int rc = ok ? ps_build_layer(&K->b, "Rescaling", syn, true, t) : fail(K->e, "out of memory");
    cJSON_Delete(syn);
    return rc;
}

static int parse_model(kctx *K, const cJSON *root, bool top, size_t *out);
static int parse_nested(kctx *K, const cJSON *l, const char *where, const cJSON *cfg,
                        bool functional, size_t cur, size_t *t);

static bool is_model_class(const char *c) {
    return !strcmp(c, "Functional") || !strcmp(c, "Model") || !strcmp(c, "Sequential");
}

/* A nested model's InputLayer: its shape must be that of the tensor feeding it
 * (null sizes match any); *t is that tensor. */
static int bind_input(kctx *K, const char *where, const cJSON *cfg, size_t *t) {
    const cJSON *bs = item(cfg, "batch_shape");
    if (!bs) bs = item(cfg, "batch_input_shape");
    ps_shape s = ps_tensor_shape(K->m, K->in_t);
    bool image = ps_tensor_image(K->m, K->in_t);
    int rank = cJSON_IsArray(bs) ? cJSON_GetArraySize(bs) - 1 : -1;
    size_t want[3] = {s.h, s.w, s.c};
    bool ok = rank == (image ? 3 : 1);
    for (int i = 0; ok && i < rank; i++) {
        const cJSON *v = cJSON_GetArrayItem(bs, i + 1);
        size_t w = image ? want[i] : s.c;
        ok = cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == (double)w);
    }
    if (!ok)
        return fail(K->e, "%s: the nested model's input shape differs from its input %zux%zux%zu",
                    where, s.h, s.w, s.c);
    *t = K->in_t;
    return PS_OK;
}

static int parse_one(kctx *K, const cJSON *l, size_t index, bool functional, size_t *cur) {
    static const char *const entry_keys[] = {
        "module",       "class_name", "config",        "registered_name",
        "build_config", "name",       "inbound_nodes", "compile_config", NULL};
    kerr *e = K->e;
    const cJSON *cls = item(l, "class_name"), *cfg = item(l, "config"), *k;
    const cJSON *name = item(l, "name");
    if (!name) name = item(cfg, "name");
    if (!cJSON_IsString(cls) || !cJSON_IsObject(cfg) || !cJSON_IsString(name))
        return fail(e, "layer %zu: needs 'class_name', a 'config' object and a name", index);
    char where[96];
    snprintf(where, sizeof where, "layer '%.40s' (%.40s)", name->valuestring, cls->valuestring);
    cJSON_ArrayForEach(k, l) {
        if (!key_in(k->string, entry_keys))
            return fail(e, "%s: key '%s' is not supported", where, k->string);
    }
    if (strlen(name->valuestring) >= sizeof K->m->ops[0].prefix)
        return fail(e, "%s: the name is longer than %zu characters", where,
                    sizeof K->m->ops[0].prefix - 1);
    for (size_t i = 0; i < K->n; i++)
        if (!strcmp(K->names[i], name->valuestring))
            return fail(e, "%s: a second layer with this name", where);
    const ps_layer_class *lc = NULL;
    const char *c = cls->valuestring;
    if (ps_layer_for_class(c, &lc) && lc->canon) /* Keras' aliases folded */
        ps_layer_for_class(c = lc->canon, &lc);
    size_t t = 0;
    if (!strcmp(c, "InputLayer")) {
        int rc;
        if (K->bound) {
            if (K->have_input)
                return fail(e, "%s: a second input: nested models with several inputs are not "
                               "supported",
                            where);
            if ((rc = bind_input(K, where, cfg, &t)) != PS_OK) return rc;
        } else if (is_id_input(K->layers, (int)index, cfg, name->valuestring, functional)) {
            if (!functional && K->have_input)
                return fail(e, "%s: a Sequential model has one input", where);
            rc = parse_id_input(K->m, e, where, name->valuestring, cfg, &t);
            if (rc != PS_OK) return rc;
        } else {
            if (K->have_float)
                return fail(e,
                            "%s: a second float input: a model takes one float input and any "
                            "number of id inputs (InputLayers of an integer dtype, or read only "
                            "by Embeddings)",
                            where);
            if (!functional && K->m->nops) return fail(e, "%s: the input must come first", where);
            if ((rc = parse_input_layer(K->m, e, where, cfg)) != PS_OK) return rc;
            if (strlen(name->valuestring) < sizeof K->m->input_name)
                snprintf(K->m->input_name, sizeof K->m->input_name, "%s", name->valuestring);
            K->have_float = true;
        }
        K->have_input = true;
    } else if (is_model_class(c)) {
        int rc = parse_nested(K, l, where, cfg, functional, *cur, &t);
        if (rc != PS_OK) return rc;
    } else {
        if (!lc) {
            char list[512];
            ps_layer_class_list(false, list, sizeof list);
            return fail(e, "%s: layer class '%s' is not supported (supported: InputLayer, %s)",
                        where, cls->valuestring, list);
        }
        bool first = !functional && !K->have_input && !K->bound;
        if (first) { /* a Keras 2 Sequential's first layer may carry the input shape */
            const cJSON *bis = item(cfg, "batch_input_shape");
            if (!bis) bis = item(cfg, "batch_shape");
            if (!bis)
                return fail(e,
                            "%s: the model has no input shape (no InputLayer, no "
                            "batch_input_shape)",
                            where);
            cJSON *holder = cJSON_CreateObject();
            if (!holder) return fail(e, "out of memory");
            cJSON_AddItemReferenceToObject(holder, "batch_shape", (cJSON *)bis);
            int rc = parse_input_layer(K->m, e, where, holder);
            cJSON_Delete(holder);
            if (rc != PS_OK) return rc;
            K->have_input = true;
        }
        if (!K->have_input && K->bound) { /* a nested Sequential without an InputLayer */
            K->have_input = true;
            *cur = K->in_t;
        }
        if (!K->have_input) return fail(e, "%s: comes before the model's InputLayer", where);
        int rc = check_options(e, where, lc, cfg, first);
        if (rc != PS_OK) return rc;
        ps_dtype_policy pol;
        if (!policy_of(item(cfg, "dtype"), &pol)) {
            char val[96];
            show(item(cfg, "dtype"), val, sizeof val);
            return fail(e,
                        "%s: option 'dtype' = %s is not supported (float32, mixed_float16 or "
                        "mixed_bfloat16)",
                        where, val);
        }
        if (pol != PS_POLICY_FLOAT32 && K->m->policy != PS_POLICY_FLOAT32 && pol != K->m->policy)
            return fail(e,
                        "%s: dtype policy %s, but an earlier layer's is %s (one mixed policy per "
                        "model)",
                        where, ps_dtype_policy_name(pol), ps_dtype_policy_name(K->m->policy));
        if (pol != PS_POLICY_FLOAT32) K->m->policy = pol;
        size_t first_op = K->m->nops;
        if (functional) {
            if ((rc = parse_inbound(K, where, item(l, "inbound_nodes")))) return rc;
        } else {
            K->b.nin = 1;
            K->b.in_t[0] = *cur;
        }
        if (K->b.nin == 0) return fail(e, "%s: has no input", where);
        snprintf(K->b.where, sizeof K->b.where, "%s", where);
        K->b.prefix = name->valuestring;
        if ((rc = build_call(K, where, c, cfg, &t))) return rc;
        /* the layer's ops compute in its policy; trainable: false on it or on a
         * model around it freezes them (Keras: a layer trains only when it and
         * every model around it are trainable) */
        bool frozen = K->frozen || cJSON_IsFalse(item(cfg, "trainable"));
        for (size_t j = first_op; j < K->m->nops; j++) {
            K->m->ops[j].prec = ps_dtype_policy_prec(pol);
            K->m->ops[j].frozen = frozen;
        }
    }
    if (functional && !strcmp(c, "InputLayer")) {
        const cJSON *in = item(l, "inbound_nodes");
        if (in && !(cJSON_IsArray(in) && cJSON_GetArraySize(in) == 0))
            return fail(e, "%s: an InputLayer with inbound nodes", where);
    }
    K->names[K->n] = name->valuestring;
    K->tensor[K->n++] = t;
    *cur = t;
    return PS_OK;
}

/* [name, 0, 0] or [[name, 0, 0]]: the one input or output layer's name. */
static const char *single_ref(const cJSON *v) {
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsArray(cJSON_GetArrayItem(v, 0)))
        v = cJSON_GetArrayItem(v, 0);
    const cJSON *n = cJSON_GetArrayItem(v, 0);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3 || !cJSON_IsString(n)) return NULL;
    const cJSON *a = cJSON_GetArrayItem(v, 1), *b = cJSON_GetArrayItem(v, 2);
    if (!cJSON_IsNumber(a) || a->valuedouble != 0 || !cJSON_IsNumber(b) || b->valuedouble != 0)
        return NULL;
    return n->valuestring;
}

/* The top model's "input_layers": one reference or a list of them, naming
 * each of its inputs (the float one and the id inputs) once. */
static int check_input_layers(kctx *K, const cJSON *v, const char *mname) {
    const char *one = single_ref(v);
    size_t want = K->m->nids + (K->have_float ? 1 : 0), n = 0, t = 0;
    const cJSON *x;
    if (one) {
        if (find_layer(K, one, "'input_layers'", &t) != PS_OK) return PS_EFORMAT;
        if (t != 0 && !ps_is_ids_ref(t))
            return fail(K->e, "'input_layers' of '%s' names '%s', not an InputLayer", mname, one);
        n = 1;
    } else if (cJSON_IsArray(v)) {
        cJSON_ArrayForEach(x, v) {
            const char *in = single_ref(x);
            if (!in) return fail(K->e, "'input_layers' of '%s': a malformed reference", mname);
            if (find_layer(K, in, "'input_layers'", &t) != PS_OK) return PS_EFORMAT;
            if (t != 0 && !ps_is_ids_ref(t))
                return fail(K->e, "'input_layers' of '%s' names '%s', not an InputLayer", mname,
                            in);
            n++;
        }
    }
    if (n != want)
        return fail(K->e, "'input_layers' of '%s' names %zu inputs; the model has %zu InputLayers",
                    mname, n, want);
    return PS_OK;
}

/* A model's layers into K's graph (the model itself, or one nested as a layer:
 * top false); *out its output tensor. */
static int parse_model(kctx *K, const cJSON *root, bool top, size_t *out) {
    static const char *const top_keys[] = {"module",          "class_name",     "config",
                                           "registered_name", "build_config",   "keras_version",
                                           "backend",         "compile_config", NULL};
    static const char *const cfg_keys[] = {
        "name",          "trainable",         "dtype", "layers", "input_layers",
        "output_layers", "build_input_shape", NULL};
    kerr *e = K->e;
    ps_model *m = K->m;
    const cJSON *cls = item(root, "class_name"), *cfg = item(root, "config"), *k;
    if (!cJSON_IsString(cls) || !cJSON_IsObject(cfg))
        return fail(e, "a Keras model file needs 'class_name' and a 'config' object");
    bool functional = !strcmp(cls->valuestring, "Functional") || !strcmp(cls->valuestring, "Model");
    if (!functional && strcmp(cls->valuestring, "Sequential"))
        return fail(e, "model class '%s' is not supported (Sequential or Functional)",
                    cls->valuestring);
    cJSON_ArrayForEach(k, root) {
        if (top && !key_in(k->string, top_keys))
            return fail(e, "the Keras model's key '%s' is not supported", k->string);
    }
    const cJSON *name = item(cfg, "name"), *layers = item(cfg, "layers");
    const char *mname = cJSON_IsString(name) ? name->valuestring : "?";
    cJSON_ArrayForEach(k, cfg) {
        if (!key_in(k->string, cfg_keys))
            return fail(e, "the Keras model '%s': config key '%s' is not supported", mname,
                        k->string);
        if (!strcmp(k->string, "trainable") && !cJSON_IsBool(k))
            return fail(e, "the Keras model '%s': 'trainable' must be true or false", mname);
        if (!strcmp(k->string, "trainable") && cJSON_IsFalse(k)) K->frozen = true;
        ps_dtype_policy pol;
        if (!strcmp(k->string, "dtype") && !policy_of(k, &pol))
            return fail(e, "the Keras model '%s': its dtype must be float32 or a mixed policy",
                        mname);
    }
    if (top && cJSON_IsString(name)) snprintf(m->name, sizeof m->name, "%s", name->valuestring);
    int n = cJSON_IsArray(layers) ? cJSON_GetArraySize(layers) : 0;
    if (n < 1 || n > MAX_LAYERS)
        return fail(e, "the Keras model '%s': 'layers' must be an array of 1 to %d layers", mname,
                    MAX_LAYERS);
    K->names = calloc((size_t)n, sizeof *K->names);
    K->tensor = calloc((size_t)n, sizeof *K->tensor);
    int rc = K->names && K->tensor ? PS_OK : PS_ENOMEM;
    if (rc != PS_OK) fail(e, "out of memory");
    size_t cur = K->bound ? K->in_t : 0, index = 0;
    const cJSON *l;
    K->layers = layers;
    cJSON_ArrayForEach(l, layers) {
        if (rc != PS_OK) break;
        rc = parse_one(K, l, index++, functional, &cur);
    }
    if (rc == PS_OK && !K->have_input) rc = fail(e, "the model '%s' has no InputLayer", mname);
    if (rc == PS_OK && functional && !K->bound) {
        rc = check_input_layers(K, item(cfg, "input_layers"), mname);
        const char *o = single_ref(item(cfg, "output_layers"));
        size_t t = 0;
        if (rc == PS_OK && !o)
            rc = fail(e, "only models with one output are supported ('output_layers' of '%s')",
                      mname);
        if (rc == PS_OK && (rc = find_layer(K, o, "'output_layers'", &t)) == PS_OK && t != m->nops)
            rc = fail(e, "the output layer '%s' of '%s' must be its last layer", o, mname);
        cur = t;
    } else if (rc == PS_OK && functional) {
        const char *in = single_ref(item(cfg, "input_layers"));
        const char *o = single_ref(item(cfg, "output_layers"));
        size_t t = 0;
        if (!in || !o)
            rc = fail(e, "only models with one input and one output are supported "
                         "('input_layers', 'output_layers' of '%s')",
                      mname);
        else if ((rc = find_layer(K, in, "'input_layers'", &t)) == PS_OK &&
                 t != (K->bound ? K->in_t : 0))
            rc = fail(e, "'input_layers' of '%s' names '%s', not the InputLayer", mname, in);
        if (rc == PS_OK && (rc = find_layer(K, o, "'output_layers'", &t)) == PS_OK &&
            t != m->nops)
            rc = fail(e, "the output layer '%s' of '%s' must be its last layer", o, mname);
        cur = t;
    }
    *out = cur;
    free(K->names);
    free(K->tensor);
    K->names = NULL;
    K->tensor = NULL;
    return rc;
}

/* A model used as a layer (a base with a new head: the transfer-learning
 * shape): its layers go into the graph, its InputLayer bound to the tensor
 * that feeds it (or, as the first layer of a Sequential without an input, the
 * model's input); its layers' names are its own (Keras' weights file nests them
 * under the model's name). */
static int parse_nested(kctx *K, const cJSON *l, const char *where, const cJSON *cfg,
                        bool functional, size_t cur, size_t *t) {
    (void)cfg;
    if (K->depth >= 8) return fail(K->e, "%s: models nested deeper than 8", where);
    kctx in = {.m = K->m,
               .e = K->e,
               .b = K->b,
               .nested = true,
               .depth = K->depth + 1,
               .frozen = K->frozen};
    if (functional) {
        int rc = parse_inbound(K, where, item(l, "inbound_nodes"));
        if (rc != PS_OK) return rc;
        if (K->b.nin != 1 || K->has_const || K->training_false || ps_is_ids_ref(K->b.in_t[0]))
            return fail(K->e, "%s: a nested model takes one float input tensor", where);
        in.in_t = K->b.in_t[0];
        in.bound = true;
    } else {
        in.in_t = cur;
        in.bound = K->have_input;
    }
    int rc = parse_model(&in, l, false, t);
    K->b.cap = in.b.cap;
    if (rc == PS_OK) K->have_input = true;
    return rc;
}

/* A new head: the graph cut after the last op of layer `after` (the ops after
 * it dropped), then the spec's layers on that tensor. */
static int add_head(kctx *K, const char *after, const cJSON *layers) {
    ps_model *m = K->m;
    size_t cut = m->nops;
    for (size_t j = 0; j < m->nops; j++)
        if (!strcmp(m->ops[j].prefix, after)) cut = j;
    if (cut == m->nops)
        return fail(K->e, "'head': the Keras model has no layer named '%s' ('after')", after);
    m->nops = cut + 1;
    size_t cur = cut + 1;
    return ps_spec_add_layers(&K->b, layers, "head", &cur);
}

int ps_keras_parse_head(ps_model *m, const cJSON *root, const char *after, const cJSON *head,
                        char *err, size_t errlen) {
    kerr ke = {err, errlen};
    m->keras = true;
    const cJSON *ver = item(root, "keras_version");
    m->keras2 = cJSON_IsString(ver) && strncmp(ver->valuestring, "2.", 2) == 0;
    kctx K = {.m = m, .e = &ke, .b = {.m = m, .err = err, .errlen = errlen}};
    size_t out;
    int rc = parse_model(&K, root, true, &out);
    if (rc == PS_OK && after) rc = add_head(&K, after, head);
    if (rc == PS_OK) rc = ps_build_finish(&K.b);
    return rc;
}

int ps_keras_parse(ps_model *m, const cJSON *root, char *err, size_t errlen) {
    return ps_keras_parse_head(m, root, NULL, NULL, err, errlen);
}

/* ---- trainable overrides ---------------------------------------------------- */

/* The "layers" of a model entry (Sequential / Functional / Model), else NULL. */
static cJSON *layers_of(cJSON *l) {
    const cJSON *c = item(l, "class_name");
    if (!cJSON_IsString(c) || !is_model_class(c->valuestring)) return NULL;
    cJSON *ls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(l, "config"),
                                                 "layers");
    return cJSON_IsArray(ls) ? ls : NULL;
}

/* Sets config.trainable of entry l, and of every layer inside when l is a model
 * (as Keras' setter does). */
static bool set_trainable(cJSON *l, bool v) {
    cJSON *cfg = cJSON_GetObjectItemCaseSensitive(l, "config");
    if (!cJSON_IsObject(cfg)) return false;
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "trainable");
    if (!cJSON_AddBoolToObject(cfg, "trainable", v)) return false;
    cJSON *ls = layers_of(l), *x;
    cJSON_ArrayForEach(x, ls) {
        const cJSON *c = item(x, "class_name");
        if (cJSON_IsString(c) && !strcmp(c->valuestring, "InputLayer")) continue;
        if (!set_trainable(x, v)) return false;
    }
    return true;
}

/* The entry named name among root's layers, nested models searched too. */
static cJSON *find_entry(cJSON *root, const char *name) {
    cJSON *x;
    cJSON_ArrayForEach(x, layers_of(root)) {
        const cJSON *n = item(x, "name");
        if (!n) n = item(item(x, "config"), "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return x;
        cJSON *in = find_entry(x, name);
        if (in) return in;
    }
    return NULL;
}

int ps_keras_set_trainable(cJSON *root, const cJSON *tr, char *err, size_t errlen) {
    kerr ke = {err, errlen};
    if (cJSON_IsBool(tr))
        return set_trainable(root, cJSON_IsTrue(tr)) ? PS_OK : fail(&ke, "out of memory");
    if (!cJSON_IsObject(tr))
        return fail(&ke, "'trainable' must be true, false or an object of layer names: true/false");
    const cJSON *k;
    cJSON_ArrayForEach(k, tr) { /* in order, as a script setting them one by one */
        if (!cJSON_IsBool(k)) return fail(&ke, "'trainable': '%s' must be true or false", k->string);
        cJSON *l = find_entry(root, k->string);
        if (!l) return fail(&ke, "'trainable': the Keras model has no layer named '%s'", k->string);
        if (!set_trainable(l, cJSON_IsTrue(k))) return fail(&ke, "'trainable': out of memory");
    }
    return PS_OK;
}
