/* A Keras-like JSON spec parsed into a stack of Dense/activation ops with all
 * parameters in one allocation; forward/backward run on the CPU via layers.h. */
#include "model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "ps_error.h"

#define MAX_UNITS (1u << 24) /* sanity bounds on sizes read from a spec */
#define MAX_BATCH (1u << 20)
#define MAX_PARAMS (1u << 30)
#define EVAL_CHUNK 1000
#define ACT_SOFTMAX (-1) /* row-wise; only as the final op */

enum op_kind { OP_DENSE, OP_ACT };

typedef struct {
    enum op_kind kind;
    int act;                     /* OP_ACT: a ps_k_act or ACT_SOFTMAX */
    size_t in, out;              /* widths */
    size_t kernel_var, bias_var; /* OP_DENSE: indices into vars */
    float *y;                    /* output buffer [cap, out] */
} op;

struct ps_model {
    char name[64];
    size_t input_dim;
    op *ops;
    size_t nops, nrun; /* nrun: ops executed (a final softmax is folded into the loss) */
    ps_model_var *vars;
    size_t nvars, nparams;
    float *params, *grads;
    ps_opt_spec opt;
    size_t batch_size;
    bool from_logits;
    size_t cap;     /* rows the activation buffers hold */
    size_t maxw;    /* widest op output */
    float *g0, *g1; /* gradient ping-pong buffers [cap, maxw] */
    ps_k_dev *dev;
};

static const char default_spec[] =
    "{\n"
    "  \"name\": \"mlp\",\n"
    "  \"input_shape\": [784],\n"
    "  \"layers\": [\n"
    "    {\"type\": \"Dense\", \"units\": 128, \"activation\": \"relu\"},\n"
    "    {\"type\": \"Dense\", \"units\": 10}\n"
    "  ],\n"
    "  \"loss\": \"sparse_categorical_crossentropy\",\n"
    "  \"from_logits\": true,\n"
    "  \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.001},\n"
    "  \"batch_size\": 64\n"
    "}\n";

const char *ps_model_default_spec(void) {
    return default_spec;
}

/* ---- parsing ----------------------------------------------------------- */

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

static bool key_in(const char *key, const char *const *keys) {
    for (; *keys; keys++)
        if (strcmp(key, *keys) == 0) return true;
    return false;
}

/* Activation name -> ps_k_act or ACT_SOFTMAX; false for an unknown name. */
static bool parse_act(const char *s, int *act) {
    static const struct {
        const char *name;
        int act;
    } acts[] = {{"linear", PS_K_ACT_LINEAR},
                {"relu", PS_K_ACT_RELU},
                {"sigmoid", PS_K_ACT_SIGMOID},
                {"tanh", PS_K_ACT_TANH},
                {"softmax", ACT_SOFTMAX}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(s, acts[i].name) == 0) {
            *act = acts[i].act;
            return true;
        }
    }
    return false;
}

static int push_op(ps_model *m, op o, size_t *cap) {
    if (m->nops == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        op *p = realloc(m->ops, nc * sizeof *p);
        if (!p) return PS_ENOMEM;
        m->ops = p;
        *cap = nc;
    }
    m->ops[m->nops++] = o;
    return PS_OK;
}

static int add_var(ps_model *m, const char *name, int rank, size_t rows, size_t cols) {
    ps_model_var *v = &m->vars[m->nvars++];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->rank = rank;
    v->shape[0] = rows;
    v->shape[1] = rank == 2 ? cols : 0;
    v->numel = rank == 2 ? rows * cols : rows;
    v->offset = m->nparams;
    m->nparams += v->numel;
    return (int)(m->nvars - 1);
}

/* Parses "layers" into m->ops (vars are laid out afterwards). */
static int parse_layers(ps_model *m, const cJSON *layers, perr *e) {
    static const char *const dense_keys[] = {"type", "units", "activation", NULL};
    static const char *const act_keys[] = {"type", "activation", NULL};
    static const char *const flat_keys[] = {"type", NULL};
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0)
        return fail(e, PS_EFORMAT, "'layers' must be a non-empty array");
    size_t cap = 0, width = m->input_dim, i = 0;
    const cJSON *l;
    cJSON_ArrayForEach(l, layers) {
        if (!cJSON_IsObject(l)) return fail(e, PS_EFORMAT, "layer %zu: not an object", i);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(l, "type");
        if (!cJSON_IsString(type))
            return fail(e, PS_EFORMAT, "layer %zu: missing string key 'type'", i);
        const char *t = type->valuestring;
        const char *const *keys;
        if (strcmp(t, "Dense") == 0)
            keys = dense_keys;
        else if (strcmp(t, "Activation") == 0)
            keys = act_keys;
        else if (strcmp(t, "Flatten") == 0)
            keys = flat_keys;
        else
            return fail(e, PS_EFORMAT,
                        "layer %zu: unknown type '%s' (want Dense, Activation or Flatten)", i, t);
        const cJSON *k;
        cJSON_ArrayForEach(k, l) {
            if (!key_in(k->string, keys))
                return fail(e, PS_EFORMAT, "layer %zu (%s): unknown key '%s'", i, t, k->string);
        }
        int act = PS_K_ACT_LINEAR;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(l, "activation");
        if (keys != flat_keys) {
            if (!a && keys == act_keys)
                return fail(e, PS_EFORMAT, "layer %zu (%s): missing key 'activation'", i, t);
            if (a && !cJSON_IsString(a))
                return fail(e, PS_EFORMAT, "layer %zu (%s): 'activation' must be a string", i, t);
            if (a && !parse_act(a->valuestring, &act))
                return fail(e, PS_EFORMAT,
                            "layer %zu (%s): unknown activation '%s' (want relu, sigmoid, tanh, "
                            "softmax or linear)",
                            i, t, a->valuestring);
        }
        int rc = PS_OK;
        if (keys == dense_keys) {
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(l, "units");
            size_t units;
            if (!u) return fail(e, PS_EFORMAT, "layer %zu (Dense): missing key 'units'", i);
            if (!get_size(u, 1, MAX_UNITS, &units))
                return fail(e, PS_EFORMAT,
                            "layer %zu (Dense): 'units' must be an integer in [1, %u]", i,
                            MAX_UNITS);
            rc = push_op(m, (op){.kind = OP_DENSE, .in = width, .out = units}, &cap);
            width = units;
        }
        if (rc == PS_OK && keys != flat_keys && (keys == act_keys || act != PS_K_ACT_LINEAR))
            rc = push_op(m, (op){.kind = OP_ACT, .act = act, .in = width, .out = width}, &cap);
        if (rc != PS_OK) return fail(e, rc, "out of memory");
        i++;
    }
    size_t ndense = 0;
    for (size_t j = 0; j < m->nops; j++) {
        if (m->ops[j].kind == OP_DENSE) ndense++;
        if (m->ops[j].kind == OP_ACT && m->ops[j].act == ACT_SOFTMAX && j + 1 != m->nops)
            return fail(e, PS_EFORMAT, "softmax is only allowed as the final activation");
    }
    if (ndense == 0) return fail(e, PS_EFORMAT, "the model needs at least one Dense layer");
    double nparams = 0;
    for (size_t j = 0; j < m->nops; j++)
        if (m->ops[j].kind == OP_DENSE) nparams += ((double)m->ops[j].in + 1) * m->ops[j].out;
    if (nparams > MAX_PARAMS)
        return fail(e, PS_EFORMAT, "the model has %.0f parameters, more than the limit %u", nparams,
                    MAX_PARAMS);
    return PS_OK;
}

/* Numeric optimizer fields: Keras key, which kinds it applies to, where it goes. */
typedef struct {
    const char *key;
    unsigned kinds; /* bit mask of ps_opt_kind */
    size_t off;
} opt_field;

#define K(k) (1u << (k))
static const opt_field opt_fields[] = {
    {"learning_rate", ~0u, offsetof(ps_opt_spec, lr)},
    {"momentum", K(PS_OPT_SGD) | K(PS_OPT_MOMENTUM), offsetof(ps_opt_spec, momentum)},
    {"beta_1", K(PS_OPT_ADAM) | K(PS_OPT_ADAMW), offsetof(ps_opt_spec, beta1)},
    {"beta_2", K(PS_OPT_ADAM) | K(PS_OPT_ADAMW), offsetof(ps_opt_spec, beta2)},
    {"epsilon", K(PS_OPT_ADAGRAD) | K(PS_OPT_RMSPROP) | K(PS_OPT_ADAM) | K(PS_OPT_ADAMW),
     offsetof(ps_opt_spec, epsilon)},
    {"rho", K(PS_OPT_RMSPROP), offsetof(ps_opt_spec, rho)},
    {"weight_decay", K(PS_OPT_ADAMW), offsetof(ps_opt_spec, weight_decay)},
    {"initial_accumulator_value", K(PS_OPT_ADAGRAD), offsetof(ps_opt_spec, initial_accumulator)},
};

static int parse_optimizer(ps_model *m, const cJSON *o, perr *e) {
    ps_opt_kind kind = PS_OPT_ADAM;
    const cJSON *name = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "name") : o;
    if (!o) {
        m->opt = ps_opt_spec_default(kind);
        return PS_OK;
    }
    if (!cJSON_IsString(name))
        return fail(e, PS_EFORMAT,
                    "'optimizer' must be a name or an object with a string key 'name'");
    if (ps_opt_kind_parse(name->valuestring, &kind) != PS_OK)
        return fail(e, PS_EFORMAT,
                    "optimizer: unknown name '%s' (want sgd, adagrad, rmsprop, adam or adamw)",
                    name->valuestring);
    ps_opt_spec s = ps_opt_spec_default(kind);
    const cJSON *k;
    if (cJSON_IsObject(o)) {
        cJSON_ArrayForEach(k, o) {
            if (strcmp(k->string, "name") == 0) continue;
            if (strcmp(k->string, "nesterov") == 0) {
                if (!cJSON_IsBool(k))
                    return fail(e, PS_EFORMAT, "optimizer: 'nesterov' must be true or false");
                if (kind != PS_OPT_SGD && kind != PS_OPT_MOMENTUM)
                    return fail(e, PS_EFORMAT, "optimizer %s: 'nesterov' does not apply",
                                ps_opt_kind_name(kind));
                s.nesterov = cJSON_IsTrue(k);
                continue;
            }
            const opt_field *f = NULL;
            for (size_t i = 0; i < sizeof opt_fields / sizeof opt_fields[0]; i++)
                if (strcmp(k->string, opt_fields[i].key) == 0) f = &opt_fields[i];
            if (!f) return fail(e, PS_EFORMAT, "optimizer: unknown key '%s'", k->string);
            if (!(f->kinds & K(kind)))
                return fail(e, PS_EFORMAT, "optimizer %s: '%s' does not apply",
                            ps_opt_kind_name(kind), f->key);
            if (!cJSON_IsNumber(k))
                return fail(e, PS_EFORMAT, "optimizer: '%s' must be a number", f->key);
            *(float *)((char *)&s + f->off) = (float)k->valuedouble;
        }
    }
    if (s.kind == PS_OPT_SGD && s.momentum > 0) s.kind = PS_OPT_MOMENTUM;
    char why[160];
    if (ps_opt_spec_validate(&s, why, sizeof why) != PS_OK) return fail(e, PS_EINVAL, "%s", why);
    m->opt = s;
    return PS_OK;
}
#undef K

static int parse_spec(ps_model *m, const cJSON *root, perr *e) {
    static const char *const top_keys[] = {"name",        "input_shape", "layers",     "loss",
                                           "from_logits", "optimizer",   "batch_size", "metrics",
                                           "epochs",      NULL};
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

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "input_shape");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) < 1 || cJSON_GetArraySize(shape) > 4)
        return fail(e, PS_EFORMAT, "'input_shape' must be an array of 1 to 4 positive integers");
    m->input_dim = 1;
    cJSON_ArrayForEach(k, shape) {
        size_t dim;
        if (!get_size(k, 1, MAX_UNITS, &dim) || m->input_dim * dim > MAX_UNITS)
            return fail(e, PS_EFORMAT,
                        "'input_shape' must hold positive integers with a product <= %u",
                        MAX_UNITS);
        m->input_dim *= dim;
    }

    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");
    if (loss && (!cJSON_IsString(loss) ||
                 strcmp(loss->valuestring, "sparse_categorical_crossentropy") != 0))
        return fail(e, PS_EFORMAT, "'loss': only \"sparse_categorical_crossentropy\" is supported");
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(root, "from_logits");
    if (fl && !cJSON_IsBool(fl)) return fail(e, PS_EFORMAT, "'from_logits' must be true or false");
    m->from_logits = !fl || cJSON_IsTrue(fl);

    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "batch_size");
    m->batch_size = 64;
    if (bs && !get_size(bs, 1, MAX_BATCH, &m->batch_size))
        return fail(e, PS_EFORMAT, "'batch_size' must be an integer in [1, %u]", MAX_BATCH);
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(root, "epochs");
    size_t epochs;
    if (ep && !get_size(ep, 1, 1e9, &epochs))
        return fail(e, PS_EFORMAT, "'epochs' must be a positive integer");
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

    int rc = parse_layers(m, cJSON_GetObjectItemCaseSensitive(root, "layers"), e);
    if (rc != PS_OK) return rc;
    bool last_softmax =
        m->ops[m->nops - 1].kind == OP_ACT && m->ops[m->nops - 1].act == ACT_SOFTMAX;
    if (m->from_logits && last_softmax)
        return fail(e, PS_EFORMAT,
                    "final softmax with from_logits=true would apply softmax twice: set "
                    "\"from_logits\": false or drop the softmax");
    if (!m->from_logits && !last_softmax)
        return fail(e, PS_EFORMAT,
                    "from_logits=false needs a softmax activation on the last layer");
    m->nrun = last_softmax ? m->nops - 1 : m->nops;
    return parse_optimizer(m, cJSON_GetObjectItemCaseSensitive(root, "optimizer"), e);
}

/* Lays out variables in op order, then allocates params and grads. */
static int layout_vars(ps_model *m) {
    size_t ndense = 0;
    for (size_t j = 0; j < m->nops; j++)
        ndense += m->ops[j].kind == OP_DENSE;
    m->vars = calloc(2 * ndense, sizeof *m->vars);
    if (!m->vars) return PS_ENOMEM;
    size_t i = 0;
    for (size_t j = 0; j < m->nops; j++) {
        op *o = &m->ops[j];
        if (o->out > m->maxw) m->maxw = o->out;
        if (o->kind != OP_DENSE) continue;
        char name[64];
        snprintf(name, sizeof name, "dense_%zu/kernel", i);
        o->kernel_var = (size_t)add_var(m, name, 2, o->in, o->out);
        snprintf(name, sizeof name, "dense_%zu/bias", i);
        o->bias_var = (size_t)add_var(m, name, 1, o->out, 0);
        i++;
    }
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    return m->params && m->grads ? PS_OK : PS_ENOMEM;
}

int ps_model_from_json(const char *json, ps_model **out, char *err, size_t errlen) {
    perr e = {err, errlen};
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    if (!json) return fail(&e, PS_EINVAL, "no spec text");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, true);
    if (!root)
        return fail(&e, PS_EFORMAT, "JSON syntax error at offset %zu",
                    end ? (size_t)(end - json) : (size_t)0);
    ps_model *m = calloc(1, sizeof *m);
    if (!m) {
        cJSON_Delete(root);
        return fail(&e, PS_ENOMEM, "out of memory");
    }
    m->dev = ps_k_cpu();
    int rc = parse_spec(m, root, &e);
    cJSON_Delete(root);
    if (rc == PS_OK && (rc = layout_vars(m)) != PS_OK) fail(&e, rc, "out of memory");
    if (rc != PS_OK) {
        ps_model_free(m);
        return rc;
    }
    *out = m;
    return PS_OK;
}

int ps_model_load(const char *path, ps_model **out, char *err, size_t errlen) {
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
            char *nb = cap <= (16u << 20) ? realloc(buf, cap) : NULL;
            if (!nb) {
                rc = cap > (16u << 20) ? PS_EFORMAT : PS_ENOMEM;
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
    char why[256];
    rc = ps_model_from_json(buf, out, why, sizeof why);
    free(buf);
    if (rc != PS_OK && err) snprintf(err, errlen, "%s: %s", path, why);
    return rc;
}

void ps_model_free(ps_model *m) {
    if (!m) return;
    for (size_t j = 0; j < m->nops; j++)
        free(m->ops[j].y);
    free(m->ops);
    free(m->vars);
    free(m->params);
    free(m->grads);
    free(m->g0);
    free(m->g1);
    free(m);
}

/* ---- accessors --------------------------------------------------------- */

size_t ps_model_input_dim(const ps_model *m) {
    return m->input_dim;
}
size_t ps_model_num_classes(const ps_model *m) {
    return m->ops[m->nops - 1].out;
}
size_t ps_model_num_vars(const ps_model *m) {
    return m->nvars;
}
const ps_model_var *ps_model_var_at(const ps_model *m, size_t i) {
    return i < m->nvars ? &m->vars[i] : NULL;
}
size_t ps_model_num_params(const ps_model *m) {
    return m->nparams;
}
float *ps_model_params(ps_model *m) {
    return m->params;
}
float *ps_model_grads(ps_model *m) {
    return m->grads;
}
const ps_opt_spec *ps_model_optimizer(const ps_model *m) {
    return &m->opt;
}
size_t ps_model_batch_size(const ps_model *m) {
    return m->batch_size;
}
const char *ps_model_name(const ps_model *m) {
    return m->name;
}

/* ---- init, forward, backward ------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void ps_model_init_params(ps_model *m, uint64_t seed) {
    for (size_t i = 0; i < m->nvars; i++) {
        const ps_model_var *v = &m->vars[i];
        float *p = m->params + v->offset;
        if (v->rank == 1) {
            memset(p, 0, v->numel * sizeof *p);
            continue;
        }
        /* One stream per variable, so a variable's values depend only on
         * (seed, its index), not on the sizes of the layers before it. */
        uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (i + 1));
        float limit = (float)sqrt(6.0 / (double)(v->shape[0] + v->shape[1]));
        for (size_t j = 0; j < v->numel; j++) {
            float u = (float)(splitmix64(&s) >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
            p[j] = limit * (2.0f * u - 1.0f);
        }
    }
}

/* Grows the activation and gradient buffers to hold rows rows. */
static int ensure_cap(ps_model *m, size_t rows) {
    if (rows <= m->cap) return PS_OK;
    for (size_t j = 0; j < m->nops; j++) {
        float *p = realloc(m->ops[j].y, rows * m->ops[j].out * sizeof(float));
        if (!p) return PS_ENOMEM;
        m->ops[j].y = p;
    }
    float *a = realloc(m->g0, rows * m->maxw * sizeof(float));
    if (a) m->g0 = a;
    float *b = a ? realloc(m->g1, rows * m->maxw * sizeof(float)) : NULL;
    if (b) m->g1 = b;
    if (!a || !b) return PS_ENOMEM;
    m->cap = rows;
    return PS_OK;
}

static int check_labels(const ps_model *m, const int32_t *y, size_t n) {
    size_t classes = ps_model_num_classes(m);
    for (size_t i = 0; i < n; i++)
        if (y[i] < 0 || (size_t)y[i] >= classes) return PS_EINVAL;
    return PS_OK;
}

/* Runs the executed ops on rows samples; returns the logits [rows, classes]. */
static const float *forward(ps_model *m, const float *x, size_t rows) {
    const float *in = x;
    for (size_t j = 0; j < m->nrun; j++) {
        op *o = &m->ops[j];
        if (o->kind == OP_DENSE)
            ps_dense_forward(m->dev, o->y, in, m->params + m->vars[o->kernel_var].offset,
                             m->params + m->vars[o->bias_var].offset, rows, o->in, o->out);
        else
            ps_activation_forward(m->dev, (ps_k_act)o->act, o->y, in, rows * o->out);
        in = o->y;
    }
    return in;
}

int ps_model_train_step(ps_model *m, const float *x, const int32_t *y, size_t batch, float *loss,
                        size_t *correct) {
    if (batch == 0 || check_labels(m, y, batch) != PS_OK) return PS_EINVAL;
    int rc = ensure_cap(m, batch);
    if (rc != PS_OK) return rc;
    const float *logits = forward(m, x, batch);
    size_t classes = ps_model_num_classes(m);
    float *dout = m->g0, *dnext = m->g1;
    rc = ps_k_softmax_ce_overwrite(m->dev, dout, logits, y, batch, classes, loss);
    if (rc == PS_OK) rc = ps_k_argmax_correct(m->dev, logits, y, batch, classes, correct);
    if (rc != PS_OK) return rc;
    for (size_t j = m->nrun; j-- > 0;) {
        op *o = &m->ops[j];
        const float *in = j ? m->ops[j - 1].y : x;
        if (o->kind == OP_DENSE) {
            const ps_model_var *kv = &m->vars[o->kernel_var], *bv = &m->vars[o->bias_var];
            ps_dense_backward_overwrite(m->dev, j ? dnext : NULL, m->grads + kv->offset,
                                        m->grads + bv->offset, dout, in, m->params + kv->offset,
                                        batch, o->in, o->out);
            float *t = dout;
            dout = dnext;
            dnext = t;
        } else if (j) {
            ps_activation_backward_overwrite(m->dev, (ps_k_act)o->act, dout, dout, o->y,
                                             batch * o->out);
        }
    }
    return ps_k_sync(m->dev);
}

int ps_model_evaluate(ps_model *m, const float *x, const int32_t *y, size_t n, float *loss,
                      size_t *correct) {
    if (n == 0 || check_labels(m, y, n) != PS_OK) return PS_EINVAL;
    size_t chunk = n < EVAL_CHUNK ? n : EVAL_CHUNK, classes = ps_model_num_classes(m);
    int rc = ensure_cap(m, chunk);
    if (rc != PS_OK) return rc;
    double sum = 0.0;
    size_t hits = 0;
    for (size_t i = 0; i < n; i += chunk) {
        size_t rows = n - i < chunk ? n - i : chunk, c = 0;
        float l = 0.0f;
        const float *logits = forward(m, x + i * m->input_dim, rows);
        rc = ps_k_softmax_ce_overwrite(m->dev, NULL, logits, y + i, rows, classes, &l);
        if (rc == PS_OK) rc = ps_k_argmax_correct(m->dev, logits, y + i, rows, classes, &c);
        if (rc != PS_OK) return rc;
        sum += (double)l * (double)rows;
        hits += c;
    }
    *loss = (float)(sum / (double)n);
    *correct = hits;
    return PS_OK;
}
