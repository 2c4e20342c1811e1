/* The model spec: the project's Keras-like JSON ("layers" as a stack) and the
 * graph builder both it and Keras' own files (model_keras.c) go through,
 * with every shape worked out and every mistake reported as one line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "model_impl.h"
#include "ps_error.h"

#define MAX_UNITS (1u << 24) /* sanity bounds on sizes read from a spec */
#define MAX_BATCH (1u << 20)
#define MAX_PARAMS (1u << 30)
#define MAX_FILE (16u << 20)

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

int ps_build_fail(ps_build *b, int code, const char *fmt, ...) {
    if (b->err && b->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->errlen, fmt, ap);
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

static bool key_in(const char *key, const char *const *keys) {
    for (; *keys; keys++)
        if (strcmp(key, *keys) == 0) return true;
    return false;
}

static const cJSON *item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

int ps_model_read_file(const char *path, char **out, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err) snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return PS_EIO;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    int rc = PS_OK;
    do {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = cap <= MAX_FILE ? realloc(buf, cap) : NULL;
            if (!nb) {
                rc = cap > MAX_FILE ? PS_EFORMAT : PS_ENOMEM;
                break;
            }
            buf = nb;
        }
        n = fread(buf + len, 1, 4096, f);
        len += n;
    } while (n == 4096);
    if (rc == PS_OK && ferror(f)) rc = PS_EIO;
    fclose(f);
    if (rc != PS_OK) {
        if (err) snprintf(err, errlen, "%s: %s", path, ps_strerror(rc));
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    return PS_OK;
}

/* ---- the graph builder ---------------------------------------------------- */

/* Appends o (inputs from b) and returns its output tensor in *t. */
static int push_op(ps_build *b, ps_op o, size_t *t) {
    ps_model *m = b->m;
    if (m->nops == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 8;
        ps_op *p = realloc(m->ops, nc * sizeof *p);
        if (!p) return ps_build_fail(b, PS_ENOMEM, "out of memory");
        m->ops = p;
        b->cap = nc;
    }
    o.nin = b->nin;
    memcpy(o.in_t, b->in_t, sizeof o.in_t);
    o.kernel_var = o.bias_var = o.mean_var = o.mvar_var = o.kernel2_var = o.count_var = PS_NO_VAR;
    snprintf(o.prefix, sizeof o.prefix, "%s", b->prefix ? b->prefix : "");
    m->ops[m->nops++] = o;
    *t = m->nops;
    return PS_OK;
}

/* An id input read by the layer being added: as Embedding's one input, or a
 * mistake. On success b reads no tensor and *ids is the id input. */
static int take_ids(ps_build *b, const ps_layer *ly, const char *cls, size_t *ids) {
    bool any = false;
    for (size_t i = 0; i < b->nin; i++)
        any = any || ps_is_ids_ref(b->in_t[i]);
    if (ly->ids && (b->nin != 1 || !any))
        return ps_build_fail(b, PS_EFORMAT, "%s: %s reads one id input (its input must be one)",
                             b->where, cls);
    if (!ly->ids && any)
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: %s cannot read an id input (only an Embedding can)", b->where,
                             cls);
    if (ly->ids) {
        *ids = b->in_t[0] - PS_IDS_REF_BASE;
        b->nin = 0;
        b->in_t[0] = 0;
    }
    return PS_OK;
}

int ps_build_layer(ps_build *b, const char *cls, const cJSON *l, bool keras, size_t *out) {
    const ps_layer *ly = ps_layer_for_class(cls, NULL);
    if (!ly) return ps_build_fail(b, PS_EFORMAT, "%s: unknown layer class '%s'", b->where, cls);
    size_t ids = 0;
    int act = PS_K_ACT_LINEAR, rc = take_ids(b, ly, cls, &ids);
    if (rc != PS_OK) return rc;
    ps_op o = {.in = ps_tensor_shape(b->m, b->in_t[0])};
    o.out = o.in;
    o.image = ps_tensor_image(b->m, b->in_t[0]);
    o.seq = b->in_t[0] ? b->m->ops[b->in_t[0] - 1].seq : false;
    o.use_bias = true;
    if (ly->ids) {
        o.ids = ids;
        o.in = (ps_shape){1, 1, 1};
        o.image = false;
        o.seq = b->m->ids[ids].seq;
    }
    if (!ly->multi_input && !ly->ids && b->nin != 1)
        return ps_build_fail(b, PS_EFORMAT, "%s: takes one input, got %zu", b->where, b->nin);
    for (size_t i = 0; ly->kind != OP_FLATTEN && i < b->nin; i++) {
        const ps_op *src = b->in_t[i] ? &b->m->ops[b->in_t[i] - 1] : NULL;
        if (src && src->kind == OP_EMBEDDING && src->out.w > 1) /* Keras' [n, dim] */
            return ps_build_fail(b, PS_EFORMAT,
                                 "%s: its input gives [%zu, %zu] per sample (an Embedding over "
                                 "%zu ids): put a Flatten (or Reshape) between them",
                                 b->where, src->out.w, src->out.c, src->out.w);
    }
    if ((rc = ly->parse(b, cls, l, keras, &o, &act))) return rc;
    if (ps_shape_numel(o.out) > MAX_UNITS)
        return ps_build_fail(b, PS_EFORMAT, "%s: output of %zu values per sample exceeds %u",
                             b->where, ps_shape_numel(o.out), MAX_UNITS);
    size_t t;
    if ((rc = push_op(b, o, &t))) return rc;
    if (act != PS_K_ACT_LINEAR) { /* the layer's own activation, as an op after it */
        ps_shape s = ps_tensor_shape(b->m, t);
        b->nin = 1;
        b->in_t[0] = t;
        rc = push_op(b,
                     (ps_op){.kind = OP_ACT,
                             .act = act,
                             .in = s,
                             .out = s,
                             .image = ps_tensor_image(b->m, t),
                             .seq = b->m->ops[t - 1].seq},
                     &t);
    }
    *out = t;
    return rc;
}

/* Counts each tensor's consumers (input_consumers for tensor 0). */
static void count_consumers(ps_model *m) {
    m->input_consumers = 0;
    for (size_t j = 0; j < m->nops; j++)
        m->ops[j].consumers = 0;
    for (size_t j = 0; j < m->nops; j++) {
        for (size_t i = 0; i < m->ops[j].nin; i++) {
            size_t t = m->ops[j].in_t[i];
            if (t)
                m->ops[t - 1].consumers++;
            else
                m->input_consumers++;
        }
    }
}

int ps_build_finish(ps_build *b) {
    ps_model *m = b->m;
    size_t nweights = 0; /* ops with variables */
    double nparams = 0;
    bool used[PS_MAX_ID_INPUTS] = {false};
    if (m->nops == 0) return ps_build_fail(b, PS_EFORMAT, "the model has no layers");
    count_consumers(m);
    for (size_t j = 0; j < m->nops; j++) {
        const ps_op *o = &m->ops[j];
        const ps_layer *ly = ps_layer_of(o->kind);
        if (ly->vars || ly->ids) nweights++;
        if (ly->ids) used[o->ids] = true;
        if (o->kind == OP_ACT && o->act == PS_ACT_SOFTMAX && j + 1 != m->nops)
            return ps_build_fail(b, PS_EFORMAT, "softmax is only allowed as the final activation");
        if (j + 1 != m->nops && o->consumers == 0)
            return ps_build_fail(b, PS_EFORMAT,
                                 "op %zu (of layer '%s') does not lead to the model's output", j,
                                 o->prefix);
        if (ly->nparams) nparams += ly->nparams(o);
    }
    for (size_t k = 0; k < m->nids; k++)
        if (!used[k])
            return ps_build_fail(b, PS_EFORMAT, "the id input '%s' is read by no Embedding",
                                 m->ids[k].name);
    if (nweights == 0)
        return ps_build_fail(b, PS_EFORMAT,
                             "the model needs at least one layer with weights (Dense, a "
                             "convolution or an Embedding)");
    const ps_op *last = &m->ops[m->nops - 1];
    if (last->out.h * last->out.w != 1)
        return ps_build_fail(b, PS_EFORMAT,
                             "the last layer must give a flat output: end with Dense");
    if (nparams > MAX_PARAMS)
        return ps_build_fail(b, PS_EFORMAT, "the model has %.0f parameters, more than the limit %u",
                             nparams, MAX_PARAMS);
    return PS_OK;
}

/* ---- the project's spec: "layers" as a stack ----------------------------- */

/* The names a spec layer's "inputs" may give: the model's inputs and the
 * named layers before it, each with its tensor (or id input reference). */
typedef struct {
    char (*name)[48];
    size_t *t;
    size_t n;
} spec_names;

static int find_name(const spec_names *sn, const ps_model *m, const char *name, size_t *t) {
    for (size_t i = 0; i < sn->n; i++) {
        if (!strcmp(sn->name[i], name)) {
            *t = sn->t[i];
            return PS_OK;
        }
    }
    for (size_t k = 0; k < m->nids; k++) {
        if (!strcmp(m->ids[k].name, name)) {
            *t = PS_IDS_REF_BASE + k;
            return PS_OK;
        }
    }
    if (m->input_name[0] && !strcmp(m->input_name, name)) {
        *t = 0;
        return PS_OK;
    }
    return PS_EFORMAT;
}

/* A spec layer's inputs into b: its "inputs" (a name or a list of names of
 * the model's inputs and earlier layers), else the tensor cur (a stack). */
static int spec_inputs(ps_build *b, const spec_names *sn, const cJSON *l, size_t cur, perr *e) {
    const cJSON *in = item(l, "inputs"), *x;
    b->nin = 0;
    if (!in) {
        b->nin = 1;
        b->in_t[0] = cur;
    } else if (cJSON_IsString(in)) {
        if (find_name(sn, b->m, in->valuestring, &b->in_t[0]) != PS_OK)
            return fail(e, PS_EFORMAT, "%s: input '%s' is no input of the model nor a layer named "
                        "before it", b->where, in->valuestring);
        b->nin = 1;
    } else if (cJSON_IsArray(in) && cJSON_GetArraySize(in) >= 1 &&
               cJSON_GetArraySize(in) <= PS_OP_MAX_IN) {
        cJSON_ArrayForEach(x, in) {
            if (!cJSON_IsString(x) ||
                find_name(sn, b->m, x->valuestring, &b->in_t[b->nin]) != PS_OK)
                return fail(e, PS_EFORMAT,
                            "%s: input %s is no input of the model nor a layer named before it",
                            b->where, cJSON_IsString(x) ? x->valuestring : "(not a name)");
            b->nin++;
        }
    } else {
        return fail(e, PS_EFORMAT, "%s: 'inputs' must be a name or a list of 1 to %d names",
                    b->where, PS_OP_MAX_IN);
    }
    for (size_t i = 0; i < b->nin; i++)
        if (b->in_t[i] == 0 && ps_shape_numel(b->m->input) == 0)
            return fail(e, PS_EFORMAT,
                        "%s: the model has no float input: name the layer's 'inputs'", b->where);
    return PS_OK;
}

/* Adds spec layer `index` (l) over its inputs; *cur gets its output. */
static int spec_layer(ps_build *b, spec_names *sn, const cJSON *l, const char *stem, size_t index,
                      size_t *cur, perr *e) {
    ps_model *m = b->m;
    if (!cJSON_IsObject(l)) return fail(e, PS_EFORMAT, "layer %zu: not an object", index);
    const cJSON *type = item(l, "type");
    if (!cJSON_IsString(type))
        return fail(e, PS_EFORMAT, "layer %zu: missing string key 'type'", index);
    const ps_layer_class *cls = NULL;
    if (!ps_layer_for_class(type->valuestring, &cls) || !cls->in_spec) {
        char list[512];
        ps_layer_class_list(true, list, sizeof list);
        return fail(e, PS_EFORMAT, "layer %zu: unknown type '%s' (want one of %s)", index,
                    type->valuestring, list);
    }
    snprintf(b->where, sizeof b->where, "layer %zu (%s)", index, cls->name);
    const cJSON *k;
    cJSON_ArrayForEach(k, l) {
        if (strcmp(k->string, "type") != 0 && strcmp(k->string, "trainable") != 0 &&
            strcmp(k->string, "name") != 0 && strcmp(k->string, "inputs") != 0 &&
            !key_in(k->string, cls->spec_keys))
            return fail(e, PS_EFORMAT, "%s: unknown key '%s'", b->where, k->string);
    }
    const cJSON *tr = item(l, "trainable"), *nm = item(l, "name");
    if (tr && !cJSON_IsBool(tr))
        return fail(e, PS_EFORMAT, "%s: 'trainable' must be true or false", b->where);
    char *name = sn->name[sn->n];
    if (nm && (!cJSON_IsString(nm) || !nm->valuestring[0] ||
               strlen(nm->valuestring) >= sizeof sn->name[0]))
        return fail(e, PS_EFORMAT, "%s: 'name' must be a string of 1 to %zu characters",
                    b->where, sizeof sn->name[0] - 1);
    snprintf(name, sizeof sn->name[0], "%s", nm ? nm->valuestring : "");
    if (stem && !nm) snprintf(name, sizeof sn->name[0], "%s_%zu", stem, index);
    size_t t;
    if (name[0] && find_name(sn, m, name, &t) == PS_OK)
        return fail(e, PS_EFORMAT, "%s: a second layer or input named '%s'", b->where, name);
    int rc = spec_inputs(b, sn, l, *cur, e);
    if (rc != PS_OK) return rc;
    b->prefix = name[0] ? name : NULL;
    size_t first_op = m->nops;
    rc = ps_build_layer(b, cls->name, l, false, cur);
    b->prefix = NULL;
    if (rc != PS_OK) return rc;
    for (size_t j = first_op; j < m->nops; j++)
        m->ops[j].frozen = cJSON_IsFalse(tr);
    if (name[0]) sn->t[sn->n++] = *cur;
    return PS_OK;
}

int ps_spec_add_layers(ps_build *b, const cJSON *layers, const char *stem, size_t *cur) {
    perr pe = {b->err, b->errlen}, *e = &pe;
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0)
        return fail(e, PS_EFORMAT, "'layers' must be a non-empty array");
    size_t index = 0, count = (size_t)cJSON_GetArraySize(layers);
    spec_names sn = {malloc(count * sizeof *sn.name), malloc(count * sizeof *sn.t), 0};
    int rc = sn.name && sn.t ? PS_OK : fail(e, PS_ENOMEM, "out of memory");
    const cJSON *l;
    cJSON_ArrayForEach(l, layers) {
        if (rc != PS_OK) break;
        rc = spec_layer(b, &sn, l, stem, index++, cur, e);
    }
    free(sn.name);
    free(sn.t);
    b->prefix = NULL; /* it pointed at a name */
    return rc;
}

static int parse_layers(ps_model *m, const cJSON *layers, perr *e) {
    ps_build b = {.m = m, .err = e->err, .errlen = e->errlen, .nin = 1};
    size_t cur = 0;
    int rc = ps_spec_add_layers(&b, layers, NULL, &cur);
    return rc == PS_OK ? ps_build_finish(&b) : rc;
}

/* ---- training settings ----------------------------------------------------- */

static int parse_loss(ps_model *m, const cJSON *root, perr *e) {
    const cJSON *loss = item(root, "loss");
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
    const ps_op *last = &m->ops[m->nops - 1];
    int last_act = last->kind == OP_ACT ? last->act : PS_K_ACT_LINEAR;
    int fold = m->loss == LOSS_SPARSE_CE ? PS_ACT_SOFTMAX : PS_K_ACT_SIGMOID;
    const cJSON *fl = item(root, "from_logits");
    if (fl && !cJSON_IsBool(fl)) return fail(e, PS_EFORMAT, "'from_logits' must be true or false");
    if (fl && m->loss == LOSS_MSE)
        return fail(e, PS_EFORMAT, "'from_logits' does not apply to the mse loss");
    /* a Keras model says itself whether it ends in probabilities */
    m->from_logits = fl ? cJSON_IsTrue(fl) : !(m->keras && last_act == fold);
    m->nrun = m->nops;
    if (m->loss == LOSS_MSE) {
        if (last_act == PS_ACT_SOFTMAX)
            return fail(e, PS_EFORMAT,
                        "a final softmax is only supported with a cross-entropy loss");
        return PS_OK;
    }
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

int ps_dtype_policy_parse(const char *name, ps_dtype_policy *out, char *err, size_t errlen) {
    static const ps_dtype_policy all[] = {PS_POLICY_FLOAT32, PS_POLICY_MIXED_FLOAT16,
                                          PS_POLICY_MIXED_BFLOAT16};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(name, ps_dtype_policy_name(all[i])) == 0) {
            *out = all[i];
            return PS_OK;
        }
    }
    if (err && errlen)
        snprintf(err, errlen,
                 "dtype policy '%.64s' is not supported (float32, mixed_float16 or mixed_bfloat16)",
                 name ? name : "");
    return PS_EFORMAT;
}

ps_k_prec ps_dtype_policy_prec(ps_dtype_policy p) {
    return p == PS_POLICY_MIXED_FLOAT16    ? PS_K_PREC_F16
           : p == PS_POLICY_MIXED_BFLOAT16 ? PS_K_PREC_BF16
                                           : PS_K_PREC_F32;
}

int ps_spec_parse_training(ps_model *m, const cJSON *root, char *err, size_t errlen) {
    perr pe = {err, errlen}, *e = &pe;
    const cJSON *k, *bs = item(root, "batch_size");
    const cJSON *dp = item(root, "dtype_policy");
    if (dp) { /* every layer's, over what a Keras file's layers say */
        ps_dtype_policy pol;
        char why[160];
        if (!cJSON_IsString(dp) || ps_dtype_policy_parse(dp->valuestring, &pol, why, sizeof why))
            return fail(e, PS_EFORMAT, "'dtype_policy': %s",
                        cJSON_IsString(dp) ? why : "must be a string");
        ps_model_set_dtype_policy(m, pol);
    }
    m->batch_size = 64;
    if (bs && !get_size(bs, 1, MAX_BATCH, &m->batch_size))
        return fail(e, PS_EFORMAT, "'batch_size' must be an integer in [1, %u]", MAX_BATCH);
    const cJSON *ep = item(root, "epochs");
    m->epochs = 0;
    if (ep && !get_size(ep, 1, 1e9, &m->epochs))
        return fail(e, PS_EFORMAT, "'epochs' must be a positive integer");
    const cJSON *lb = item(root, "labels");
    if (lb) {
        int lrc = ps_labels_from_json(lb, &m->labels, err, errlen);
        if (lrc != PS_OK) return lrc;
    }
    const cJSON *metrics = item(root, "metrics");
    if (metrics) {
        if (!cJSON_IsArray(metrics))
            return fail(e, PS_EFORMAT, "'metrics' must be an array of names");
        m->metric_auc = false;
        cJSON_ArrayForEach(k, metrics) {
            bool auc = cJSON_IsString(k) &&
                       (!strcmp(k->valuestring, "auc") || !strcmp(k->valuestring, "AUC"));
            if (!auc && (!cJSON_IsString(k) ||
                         (strcmp(k->valuestring, "accuracy") != 0 &&
                          strcmp(k->valuestring, "sparse_categorical_accuracy") != 0)))
                return fail(e, PS_EFORMAT,
                            "'metrics': \"accuracy\" and \"auc\" are supported, not %s",
                            cJSON_IsString(k) ? k->valuestring : "a non-string");
            m->metric_auc = m->metric_auc || auc;
        }
    }
    int rc = parse_loss(m, root, e);
    size_t outs = m->nops ? ps_model_output_dim(m) : 0;
    if (rc == PS_OK && m->metric_auc && (m->loss != LOSS_BCE || outs != 1))
        return fail(e, PS_EFORMAT,
                    "'metrics': \"auc\" is for a binary classifier: one output and "
                    "binary_crossentropy (this model: %zu output(s), %s)",
                    outs, m->loss == LOSS_BCE ? "binary_crossentropy" : "another loss");
    if (rc == PS_OK) rc = ps_opt_spec_from_json(item(root, "optimizer"), &m->opt, err, errlen);
    return rc;
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

/* "inputs": [{"name": "user", "ids": true}, {"name": "x", "shape": [n]}, ...]:
 * id inputs (one uint64 id per sample; "shape": [n] makes Keras' (n,): n ids
 * a sample, an Embedding over it gives [n, dim]) and at most one float input,
 * besides or instead of "input_shape". */
static int parse_inputs(ps_model *m, const cJSON *root, perr *e) {
    const cJSON *ins = item(root, "inputs"), *x, *k;
    bool have_x = item(root, "input_shape") != NULL;
    if (!ins) {
        int rc = parse_input_shape(m, item(root, "input_shape"), e);
        if (rc == PS_OK) snprintf(m->input_name, sizeof m->input_name, "input");
        return rc;
    }
    if (!cJSON_IsArray(ins) || cJSON_GetArraySize(ins) < 1)
        return fail(e, PS_EFORMAT, "'inputs' must be a non-empty array of inputs");
    if (have_x && parse_input_shape(m, item(root, "input_shape"), e) != PS_OK) return PS_EFORMAT;
    if (have_x) snprintf(m->input_name, sizeof m->input_name, "input");
    cJSON_ArrayForEach(x, ins) {
        const cJSON *nm = item(x, "name"), *ids = item(x, "ids"), *shape = item(x, "shape");
        cJSON_ArrayForEach(k, x) {
            if (strcmp(k->string, "name") && strcmp(k->string, "ids") && strcmp(k->string, "shape"))
                return fail(e, PS_EFORMAT,
                            "'inputs': unknown key '%s' (an input has name, ids, shape)",
                            k->string);
        }
        if (!cJSON_IsString(nm) || (ids && !cJSON_IsBool(ids)))
            return fail(e, PS_EFORMAT,
                        "'inputs': each input needs a 'name' (and 'ids': true for an id input)");
        if (cJSON_IsTrue(ids)) {
            size_t width = 1, id_k;
            int n = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
            if (shape &&
                !(n == 0 ||
                  (n == 1 && get_size(cJSON_GetArrayItem(shape, 0), 1, PS_MAX_ID_WIDTH, &width))))
                return fail(e, PS_EFORMAT,
                            "'inputs': id input '%s': 'shape' must be [] (one id per sample) or "
                            "[n] (n ids, 1 to %d)",
                            nm->valuestring, PS_MAX_ID_WIDTH);
            int rc = ps_model_add_id_input(m, nm->valuestring, n == 1, width, &id_k, e->err,
                                           e->errlen);
            if (rc != PS_OK) return rc;
            continue;
        }
        if (have_x)
            return fail(e, PS_EFORMAT,
                        "'inputs': a second float input '%s' (one float input, any number of id "
                        "inputs)",
                        nm->valuestring);
        if (strlen(nm->valuestring) >= sizeof m->input_name)
            return fail(e, PS_EFORMAT, "'inputs': the name '%s' is too long", nm->valuestring);
        int rc = parse_input_shape(m, shape, e);
        if (rc != PS_OK) return rc;
        snprintf(m->input_name, sizeof m->input_name, "%s", nm->valuestring);
        have_x = true;
    }
    if (m->input_name[0]) {
        for (size_t i = 0; i < m->nids; i++)
            if (!strcmp(m->ids[i].name, m->input_name))
                return fail(e, PS_EFORMAT, "'inputs': two inputs named '%s'", m->input_name);
    }
    return PS_OK;
}

static int parse_name(ps_model *m, const cJSON *root, perr *e) {
    const cJSON *name = item(root, "name");
    if (name && (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof m->name))
        return fail(e, PS_EFORMAT, "'name' must be a string of at most %zu characters",
                    sizeof m->name - 1);
    if (name || !m->name[0])
        snprintf(m->name, sizeof m->name, "%s", name ? name->valuestring : "model");
    return PS_OK;
}

static int parse_spec(ps_model *m, const cJSON *root, perr *e) {
    static const char *const top_keys[] = {"name",        "input_shape", "layers",     "loss",
                                           "from_logits", "optimizer",   "batch_size", "metrics",
                                           "epochs",      "labels",      "dtype_policy",
                                           "inputs",      NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, root) {
        if (!key_in(k->string, top_keys))
            return fail(e, PS_EFORMAT, "unknown top-level key '%s'", k->string);
    }
    int rc = parse_name(m, root, e);
    if (rc == PS_OK) rc = parse_inputs(m, root, e);
    if (rc == PS_OK) rc = parse_layers(m, item(root, "layers"), e);
    if (rc == PS_OK) rc = ps_spec_parse_training(m, root, e->err, e->errlen);
    return rc;
}

/* {"keras": <to_json() object or a file name>, "loss": ..., ...}. */
static int parse_wrapper(ps_model *m, const cJSON *root, const char *base_dir, perr *e) {
    static const char *const keys[] = {"keras",        "name",      "loss",      "from_logits",
                                       "optimizer",    "batch_size", "epochs",   "metrics",
                                       "labels",       "dtype_policy", "trainable", "head",
                                       NULL};
    const cJSON *k, *kj = item(root, "keras");
    cJSON_ArrayForEach(k, root) {
        if (!key_in(k->string, keys))
            return fail(e, PS_EFORMAT, "unknown top-level key '%s' (a \"keras\" wrapper takes %s)",
                        k->string,
                        "keras, name, loss, from_logits, optimizer, batch_size, epochs, metrics, "
                        "labels, dtype_policy, trainable, head");
    }
    if (!item(root, "loss"))
        return fail(e, PS_EFORMAT, "a \"keras\" wrapper needs a 'loss' (to_json() carries none)");
    cJSON *owned = NULL;
    if (cJSON_IsString(kj)) {
        const char *f = kj->valuestring;
        if (!base_dir && f[0] != '/')
            return fail(e, PS_EFORMAT,
                        "'keras': the file name '%s' is relative to the spec file: load the spec "
                        "from a file",
                        f);
        char path[4096], *text = NULL, why[512];
        if (f[0] == '/')
            snprintf(path, sizeof path, "%s", f);
        else
            snprintf(path, sizeof path, "%s/%s", base_dir, f);
        int rc = ps_model_read_file(path, &text, why, sizeof why);
        if (rc != PS_OK) return fail(e, rc, "'keras': %s", why);
        const char *end = NULL;
        owned = cJSON_ParseWithOpts(text, &end, true);
        if (!owned)
            rc = fail(e, PS_EFORMAT, "'keras': %s: JSON syntax error at offset %zu", path,
                      end ? (size_t)(end - text) : (size_t)0);
        free(text);
        if (rc != PS_OK) return rc;
        kj = owned;
    } else if (!cJSON_IsObject(kj)) {
        return fail(e, PS_EFORMAT,
                    "'keras' must be a model's to_json() object or the name of a file holding it");
    }
    const cJSON *tr = item(root, "trainable"), *head = item(root, "head");
    const cJSON *after = item(head, "after"), *hl = item(head, "layers");
    int rc = PS_OK;
    if (head && (!cJSON_IsObject(head) || !cJSON_IsString(after) || !hl ||
                 cJSON_GetArraySize(head) != 2))
        rc = fail(e, PS_EFORMAT,
                  "'head' must be {\"after\": \"<a layer of the Keras model>\", \"layers\": "
                  "[<spec layers>]}");
    if (rc == PS_OK && tr) { /* on a copy: kj may be the caller's */
        cJSON *copy = cJSON_Duplicate(kj, true);
        cJSON_Delete(owned);
        kj = owned = copy;
        rc = copy ? ps_keras_set_trainable(copy, tr, e->err, e->errlen)
                  : fail(e, PS_ENOMEM, "out of memory");
    }
    if (rc == PS_OK)
        rc = ps_keras_parse_head(m, kj, head ? after->valuestring : NULL, hl, e->err, e->errlen);
    cJSON_Delete(owned);
    if (rc == PS_OK) rc = parse_name(m, root, e);
    if (rc == PS_OK) rc = ps_spec_parse_training(m, root, e->err, e->errlen);
    return rc;
}

/* A bare to_json() file: the loss comes from ov. */
static int parse_bare_keras(ps_model *m, const cJSON *root, const ps_model_overrides *ov, perr *e) {
    if (!ov || !ov->loss)
        return fail(e, PS_EFORMAT,
                    "a Keras model file carries no loss: give one (psworker --loss NAME) or wrap "
                    "the model: {\"keras\": \"model.json\", \"loss\": ...}");
    int rc = ps_keras_parse(m, root, e->err, e->errlen);
    if (rc != PS_OK) return rc;
    cJSON *t = cJSON_CreateObject();
    if (!t || !cJSON_AddStringToObject(t, "loss", ov->loss) ||
        (ov->from_logits >= 0 && !cJSON_AddBoolToObject(t, "from_logits", ov->from_logits))) {
        cJSON_Delete(t);
        return fail(e, PS_ENOMEM, "out of memory");
    }
    rc = ps_spec_parse_training(m, t, e->err, e->errlen);
    cJSON_Delete(t);
    return rc;
}

int ps_layer_add_var(ps_model *m, const ps_op *o, const char *kind, size_t li, const char *what,
                     size_t rows, size_t cols, size_t fan_in, size_t fan_out, ps_init_kind init,
                     bool trainable) {
    ps_model_var *v = &m->vars[m->nvars];
    memset(v, 0, sizeof *v);
    int n = o->prefix[0] ? snprintf(v->name, sizeof v->name, "%s/%s", o->prefix, what)
                         : snprintf(v->name, sizeof v->name, "%s_%zu/%s", kind, li, what);
    if (n < 0 || (size_t)n >= sizeof v->name) return PS_EFORMAT;
    v->rank = cols ? 2 : 1;
    v->shape[0] = rows;
    v->shape[1] = cols;
    v->numel = cols ? rows * cols : rows;
    v->fan_in = fan_in;
    v->fan_out = fan_out;
    v->offset = m->nparams; /* frozen ones move to the end: layout_vars */
    v->frozen = o->frozen;
    v->trainable = trainable && !o->frozen;
    m->inits[m->nvars++] = init;
    m->nparams += v->numel;
    return PS_OK;
}

int ps_layer_add_kernel(ps_model *m, const ps_op *o, const char *kind, size_t li,
                        const char *what, size_t rows, size_t cols, size_t fan_in, size_t fan_out,
                        const ps_vscale *vs) {
    bool own = vs && vs->scale > 0.0f;
    int rc = ps_layer_add_var(m, o, kind, li, what, rows, cols, fan_in, fan_out,
                              own ? INIT_VSCALE : INIT_GLOROT, true);
    if (rc == PS_OK && own) m->vscale[m->nvars - 1] = *vs;
    return rc;
}

/* Lays out the variables in op order, each layer its own (layers/): e.g.
 * "dense_<i>/kernel" [in, out] and its bias; a Keras model's layers name
 * their own ("conv1/kernel"). At most PS_OP_MAX_VARS per op. */
static int layout_vars(ps_model *m, perr *e) {
    size_t cnt[OP_N_KINDS] = {0};
    m->vars = calloc(PS_OP_MAX_VARS * m->nops + 1, sizeof *m->vars);
    m->inits = calloc(PS_OP_MAX_VARS * m->nops + 1, sizeof *m->inits);
    m->vscale = calloc(PS_OP_MAX_VARS * m->nops + 1, sizeof *m->vscale);
    if (!m->vars || !m->inits || !m->vscale) return fail(e, PS_ENOMEM, "out of memory");
    int rc = PS_OK;
    for (size_t j = 0; j < m->nops && rc == PS_OK; j++) {
        ps_op *o = &m->ops[j];
        const ps_layer *ly = ps_layer_of(o->kind);
        size_t li = cnt[o->kind]++;
        if (ly->vars) rc = ly->vars(m, o, li);
        if (rc != PS_OK)
            return fail(e, rc, "layer '%s': its variable names exceed %zu characters", o->prefix,
                        sizeof m->vars[0].name - 1);
    }
    for (size_t i = 0; i < m->nvars; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp(m->vars[i].name, m->vars[k].name) == 0)
                return fail(e, PS_EFORMAT, "two variables are named '%s': layer names must differ",
                            m->vars[i].name);
    /* the variables that may change first, in op order, then the frozen ones:
     * an exchange covers one prefix of the params and grads */
    size_t off = 0;
    for (int frozen = 0; frozen < 2; frozen++) {
        for (size_t i = 0; i < m->nvars; i++) {
            if (m->vars[i].frozen != (bool)frozen) continue;
            m->vars[i].offset = off;
            off += m->vars[i].numel;
        }
        if (!frozen) m->nupdated = off;
    }
    m->stat_opt = ps_opt_spec_default(PS_OPT_SGD);
    m->stat_opt.lr = 1.0f;
    return PS_OK;
}

int ps_model_parse(ps_model *m, const char *json, const char *base_dir,
                   const ps_model_overrides *ov, char *err, size_t errlen) {
    perr e = {err, errlen};
    if (!json) return fail(&e, PS_EINVAL, "no spec text");
    m->input = (ps_shape){1, 1, 0}; /* no float input until one is read */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, true);
    if (!root)
        return fail(&e, PS_EFORMAT, "JSON syntax error at offset %zu",
                    end ? (size_t)(end - json) : (size_t)0);
    int rc;
    if (!cJSON_IsObject(root))
        rc = fail(&e, PS_EFORMAT, "the spec must be a JSON object");
    else if (item(root, "keras"))
        rc = parse_wrapper(m, root, base_dir, &e);
    else if (item(root, "class_name"))
        rc = parse_bare_keras(m, root, ov, &e);
    else
        rc = parse_spec(m, root, &e);
    if (rc == PS_OK && ov && ov->loss && !item(root, "class_name"))
        rc = fail(&e, PS_EINVAL,
                  "--loss is for a bare Keras model file; this spec gives its own 'loss'");
    cJSON_Delete(root);
    if (rc == PS_OK) rc = layout_vars(m, &e);
    return rc;
}
