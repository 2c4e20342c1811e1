/* The Keras 3 config.json of a model (see keras_config.h): the source
 * archive's own when the model came from one, else a Functional model made
 * from the op graph (one Keras layer per layer, an activation that follows a
 * Dense / Conv2D / DepthwiseConv2D folded into it, a Flatten before a Dense on
 * an image), with the layer groups the weights file needs in the same order,
 * so the config and the weights cannot disagree. */
#include "keras_config.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras_file.h"
#include "layer_export.h"
#include "model_impl.h"
#include "ps_error.h"

typedef struct {
    const ps_model *m;
    cJSON *layers;      /* the config's layer list */
    ps_keras_layer *ls; /* group and name per layer, model.layers order */
    size_t n, cap;
    const char **tname; /* per tensor: the Keras layer whose output it is */
    char (*names)[64];  /* the names, owned here (tname points into them) */
    const char **cls;   /* per layer: its class (a string constant of this file) */
    ps_shape flat;      /* a Flatten put before a Dense on an image: its output (tensor nops+1) */
    bool frozen;        /* the layer being added has trainable: false */
    bool oom;
} kb;

/* Keras' to_snake_case of a class name: "ReLU" -> "re_lu", "Conv2D" -> "conv2d". */
static void snake_case(const char *cls, char *out, size_t n) {
    char a[128];
    size_t k = 0, len = strlen(cls);
    /* (.)([A-Z][a-z]+) -> \1_\2, left to right, matches not overlapping */
    for (size_t i = 0; i < len && k + 2 < sizeof a;) {
        a[k++] = cls[i];
        if (i + 2 < len + 1 && isupper((unsigned char)cls[i + 1]) &&
            islower((unsigned char)cls[i + 2])) {
            a[k++] = '_';
            size_t j = i + 1;
            a[k++] = cls[j++];
            while (j < len && islower((unsigned char)cls[j]) && k + 1 < sizeof a)
                a[k++] = cls[j++];
            i = j;
        } else {
            i++;
        }
    }
    a[k] = 0;
    /* ([a-z])([A-Z]) -> \1_\2, then lower case */
    k = 0;
    for (size_t i = 0; a[i] && k + 3 < n; i++) {
        out[k++] = (char)tolower((unsigned char)a[i]);
        if (islower((unsigned char)a[i]) && isupper((unsigned char)a[i + 1])) {
            out[k++] = '_';
            out[k++] = (char)tolower((unsigned char)a[++i]);
        }
    }
    out[k] = 0;
}

cJSON *ps_keras_ints(const size_t *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

/* [null, h, w, c] or [null, n]: a tensor's Keras shape. */
static cJSON *batch_shape(ps_shape s, bool image) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    cJSON_AddItemToArray(a, cJSON_CreateNull());
    size_t d[3] = {s.h, s.w, s.c}, flat = ps_shape_numel(s);
    for (size_t i = 0; i < (image ? 3u : 1u); i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)(image ? d[i] : flat)));
    return a;
}

static cJSON *policy(const ps_model *m) {
    cJSON *p = cJSON_CreateObject(), *c = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "module", "keras");
    cJSON_AddStringToObject(p, "class_name", "DTypePolicy");
    cJSON_AddStringToObject(c, "name", ps_dtype_policy_name(ps_model_dtype_policy(m)));
    cJSON_AddItemToObject(p, "config", c);
    cJSON_AddNullToObject(p, "registered_name");
    return p;
}

/* A name no layer has yet: want, else want_<k>. */
static void unique_name(kb *b, const char *want, char out[64]) {
    snprintf(out, 64, "%.60s", want);
    for (size_t k = 1;; k++) {
        bool used = false;
        for (size_t i = 0; i < b->n && !used; i++)
            used = !strcmp(b->ls[i].name, out);
        if (!used) return;
        snprintf(out, 64, "%.48s_%zu", want, k);
    }
}

/* A keras tensor reference to tensor t. */
static cJSON *tensor_ref(kb *b, size_t t) {
    cJSON *r = cJSON_CreateObject(), *c = cJSON_CreateObject(), *h = cJSON_CreateArray();
    cJSON_AddStringToObject(r, "class_name", "__keras_tensor__");
    if (t > b->m->nops)
        cJSON_AddItemToObject(c, "shape", batch_shape(b->flat, false));
    else
        cJSON_AddItemToObject(c, "shape",
                              batch_shape(ps_tensor_shape(b->m, t), ps_tensor_image(b->m, t)));
    cJSON_AddStringToObject(c, "dtype", "float32");
    cJSON_AddItemToArray(h, cJSON_CreateString(b->tname[t]));
    cJSON_AddItemToArray(h, cJSON_CreateNumber(0));
    cJSON_AddItemToArray(h, cJSON_CreateNumber(0));
    cJSON_AddItemToObject(c, "keras_history", h);
    cJSON_AddItemToObject(r, "config", c);
    return r;
}

/* Appends a layer of class cls named name (config cfg, consumed) reading
 * tensors in[0..nin); its output becomes tensor out's name. */
static cJSON *add_layer(kb *b, const char *cls, const char *name, cJSON *cfg, const size_t *in,
                        size_t nin, size_t out) {
    if (b->n == b->cap) {
        b->oom = true;
        cJSON_Delete(cfg);
        return NULL;
    }
    ps_keras_layer *l = &b->ls[b->n];
    snprintf(l->name, sizeof l->name, "%s", name);
    size_t same = 0;
    for (size_t i = 0; i < b->n; i++)
        same += !strcmp(b->cls[i], cls);
    b->cls[b->n] = cls;
    char sn[40]; /* a group name leaves room for "_<n>" */
    snake_case(cls, sn, sizeof sn);
    if (same)
        snprintf(l->group, sizeof l->group, "%s_%zu", sn, same);
    else
        snprintf(l->group, sizeof l->group, "%s", sn);
    snprintf(b->names[b->n], 64, "%s", name);
    b->tname[out] = b->names[b->n];
    b->n++;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "module", "keras.layers");
    cJSON_AddStringToObject(j, "class_name", cls);
    cJSON_AddStringToObject(cfg, "name", name);
    if (strcmp(cls, "InputLayer")) {
        cJSON_AddBoolToObject(cfg, "trainable", !b->frozen);
        cJSON_AddItemToObject(cfg, "dtype", policy(b->m));
    }
    cJSON_AddItemToObject(j, "config", cfg);
    cJSON_AddNullToObject(j, "registered_name");
    cJSON_AddStringToObject(j, "name", name);
    cJSON *nodes = cJSON_AddArrayToObject(j, "inbound_nodes");
    if (nin) {
        cJSON *node = cJSON_CreateObject(), *args = cJSON_CreateArray();
        cJSON *list = nin > 1 ? cJSON_CreateArray() : args;
        for (size_t i = 0; i < nin; i++)
            cJSON_AddItemToArray(list, tensor_ref(b, in[i]));
        if (nin > 1) cJSON_AddItemToArray(args, list);
        cJSON_AddItemToObject(node, "args", args);
        cJSON_AddItemToObject(node, "kwargs", cJSON_CreateObject());
        cJSON_AddItemToArray(nodes, node);
    }
    cJSON_AddItemToArray(b->layers, j);
    return cfg;
}

void ps_keras_window(cJSON *c, const ps_op *o, const char *kkey) {
    size_t k[2] = {o->kh, o->kw}, s[2] = {o->sh, o->sw};
    cJSON_AddItemToObject(c, kkey, ps_keras_ints(k, 2));
    cJSON_AddItemToObject(c, "strides", ps_keras_ints(s, 2));
    cJSON_AddStringToObject(c, "padding", o->same ? "same" : "valid");
    cJSON_AddStringToObject(c, "data_format", "channels_last");
}

/* The layer name of a weighted op: its variables' (before the '/'). */
static void var_layer(const ps_model *m, size_t var, char out[64]) {
    const char *n = m->vars[var].name, *slash = strrchr(n, '/');
    snprintf(out, 64, "%.*s", slash ? (int)(slash - n) : 63, n);
}

/* The first variable of op o (its layer's name), or PS_NO_VAR. */
static size_t first_var(const ps_op *o) {
    size_t vs[5] = {o->kernel_var, o->kernel2_var, o->bias_var, o->mean_var, o->mvar_var};
    for (int k = 0; k < 5; k++)
        if (vs[k] != PS_NO_VAR) return vs[k];
    return PS_NO_VAR;
}

/* How many ops read tensor t. */
static size_t readers(const ps_model *m, size_t t) {
    size_t c = 0;
    for (size_t j = 0; j < m->nops; j++)
        for (size_t i = 0; i < m->ops[j].nin; i++)
            c += m->ops[j].in_t[i] == t;
    return c;
}

/* Op j (and the activation after it, *skip = 1) as one Keras layer. */
static int add_op(kb *b, size_t j, size_t *skip, char *err, size_t errlen) {
    const ps_model *m = b->m;
    const ps_op *o = &m->ops[j];
    *skip = 0;
    char name[64], want[64];
    size_t in[PS_OP_MAX_IN];
    memcpy(in, o->in_t, sizeof in);
    const ps_layer_export *le = ps_layer_export_of(o->kind);
    bool fuses = le->keras_act;
    int act = PS_K_ACT_LINEAR;
    if (fuses && j + 1 < m->nops && m->ops[j + 1].kind == OP_ACT && m->ops[j + 1].nin == 1 &&
        m->ops[j + 1].in_t[0] == j + 1 && readers(m, j + 1) == 1 &&
        !strcmp(m->ops[j + 1].prefix, o->prefix)) {
        act = m->ops[j + 1].act;
        *skip = 1;
    }
    size_t var = first_var(o);
    if (o->kind == OP_DENSE && ps_tensor_image(m, in[0])) {
        /* the project's Dense reads an image as its flat NHWC vector: Keras' Flatten */
        var_layer(m, var, want);
        strcat(want, "_flatten");
        unique_name(b, want, name);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "data_format", "channels_last");
        if (b->n + 2 > b->cap) return PS_ENOMEM;
        /* a tensor index past the graph's for the flattened image */
        b->flat = (ps_shape){1, 1, ps_shape_numel(ps_tensor_shape(m, in[0]))};
        add_layer(b, "Flatten", name, c, in, 1, m->nops + 1);
        in[0] = m->nops + 1;
    }
    cJSON *c = cJSON_CreateObject();
    const char *cls = le->keras ? le->keras(c, o) : NULL;
    if (!cls) {
        cJSON_Delete(c);
        snprintf(err, errlen, "op %zu has no Keras layer", j);
        return PS_EINVAL;
    }
    if (fuses) {
        cJSON_AddStringToObject(c, "activation", ps_describe_act_name(act));
        cJSON_AddBoolToObject(c, "use_bias", o->use_bias);
    }
    /* a weighted layer is named as its variables are (the weights file's "name") */
    if (var != PS_NO_VAR) {
        var_layer(m, var, name);
    } else {
        snake_case(cls, want, sizeof want);
        if (o->prefix[0]) snprintf(want, sizeof want, "%s", o->prefix);
        unique_name(b, want, name);
    }
    b->frozen = o->frozen;
    add_layer(b, cls, name, c, in, o->nin, j + 1 + *skip);
    b->frozen = false;
    if (*skip) b->tname[j + 1] = b->tname[j + 2];
    return b->oom ? PS_ENOMEM : PS_OK;
}

/* The Keras 3 Functional model of m: *model (config.json's object, without
 * compile_config) and its layers (*ls, n; malloc'd). */
static int describe(const ps_model *m, cJSON **model, ps_keras_layer **ls, size_t *n, char *err,
                    size_t errlen) {
    kb b = {.m = m, .cap = 2 * m->nops + 2};
    b.ls = calloc(b.cap, sizeof *b.ls);
    b.names = calloc(b.cap, sizeof *b.names);
    b.cls = calloc(b.cap, sizeof *b.cls);
    b.tname = calloc(m->nops + 2, sizeof *b.tname);
    cJSON *root = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
    b.layers = cJSON_CreateArray();
    int rc = b.ls && b.names && b.cls && b.tname && root && cfg && b.layers ? PS_OK : PS_ENOMEM;
    if (rc == PS_OK) {
        cJSON *in = cJSON_CreateObject();
        cJSON_AddItemToObject(in, "batch_shape", batch_shape(m->input, m->input_image));
        cJSON_AddStringToObject(in, "dtype", "float32");
        cJSON_AddBoolToObject(in, "sparse", false);
        cJSON_AddBoolToObject(in, "ragged", false);
        cJSON_AddBoolToObject(in, "optional", false);
        add_layer(&b, "InputLayer", "input", in, NULL, 0, 0);
    }
    for (size_t j = 0; rc == PS_OK && j < m->nops; j++) {
        size_t skip = 0;
        rc = add_op(&b, j, &skip, err, errlen);
        j += skip;
    }
    if (rc == PS_OK && b.oom) rc = PS_ENOMEM;
    if (rc == PS_OK) {
        cJSON_AddStringToObject(root, "module", "keras.src.models.functional");
        cJSON_AddStringToObject(root, "class_name", "Functional");
        cJSON_AddStringToObject(cfg, "name", m->name);
        cJSON_AddBoolToObject(cfg, "trainable", true);
        cJSON_AddItemToObject(cfg, "layers", b.layers);
        b.layers = NULL;
        cJSON *io = cJSON_AddArrayToObject(cfg, "input_layers");
        cJSON_AddItemToArray(io, cJSON_CreateString("input"));
        cJSON_AddItemToArray(io, cJSON_CreateNumber(0));
        cJSON_AddItemToArray(io, cJSON_CreateNumber(0));
        io = cJSON_AddArrayToObject(cfg, "output_layers");
        cJSON_AddItemToArray(io, cJSON_CreateString(b.tname[m->nops]));
        cJSON_AddItemToArray(io, cJSON_CreateNumber(0));
        cJSON_AddItemToArray(io, cJSON_CreateNumber(0));
        cJSON_AddItemToObject(root, "config", cfg);
        cfg = NULL;
        cJSON_AddStringToObject(root, "registered_name", "Functional");
        cJSON *bc = cJSON_AddObjectToObject(root, "build_config");
        cJSON_AddNullToObject(bc, "input_shape");
    }
    if (rc == PS_ENOMEM) snprintf(err, errlen, "out of memory");
    cJSON_Delete(b.layers);
    cJSON_Delete(cfg);
    free(b.names);
    free(b.cls);
    free(b.tname);
    if (rc != PS_OK) {
        cJSON_Delete(root);
        free(b.ls);
        return rc;
    }
    *model = root;
    *ls = b.ls;
    *n = b.n;
    return PS_OK;
}

/* The layers of the Keras 3 model config root as the weights file lists them
 * (model.layers: a Sequential's without its InputLayer), when they name every
 * variable's layer of m; else PS_EFORMAT (the caller describes m instead). */
static int source_layers(const ps_model *m, const cJSON *root, ps_keras_layer **out, size_t *n) {
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(root, "class_name");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(cfg, "layers"), *l;
    if (!cJSON_IsString(cls) || !cJSON_IsArray(layers)) return PS_EFORMAT;
    bool seq = !strcmp(cls->valuestring, "Sequential");
    if (!seq && strcmp(cls->valuestring, "Functional") && strcmp(cls->valuestring, "Model"))
        return PS_EFORMAT;
    size_t cap = (size_t)cJSON_GetArraySize(layers), k = 0;
    ps_keras_layer *ls = calloc(cap ? cap : 1, sizeof *ls);
    if (!ls) return PS_ENOMEM;
    int rc = PS_OK;
    cJSON_ArrayForEach(l, layers) {
        const cJSON *lc = cJSON_GetObjectItemCaseSensitive(l, "class_name");
        const cJSON *nm =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(l, "config"), "name");
        if (!cJSON_IsString(lc) || !cJSON_IsString(nm) || strlen(nm->valuestring) >= 64 ||
            strlen(lc->valuestring) >= 60) {
            rc = PS_EFORMAT;
            break;
        }
        if (seq && !strcmp(lc->valuestring, "InputLayer")) continue;
        char base[64];
        snake_case(lc->valuestring, base, sizeof base);
        size_t same = 0;
        for (size_t i = 0; i < k; i++) {
            size_t bl = strlen(base);
            same += !strncmp(ls[i].group, base, bl) &&
                    (ls[i].group[bl] == 0 ||
                     (ls[i].group[bl] == '_' &&
                      strspn(ls[i].group + bl + 1, "0123456789") == strlen(ls[i].group + bl + 1) &&
                      ls[i].group[bl + 1]));
        }
        if (same)
            snprintf(ls[k].group, sizeof ls[k].group, "%.40s_%zu", base, same);
        else
            snprintf(ls[k].group, sizeof ls[k].group, "%s", base);
        snprintf(ls[k].name, sizeof ls[k].name, "%s", nm->valuestring);
        k++;
    }
    for (size_t v = 0; rc == PS_OK && v < m->nvars; v++) {
        char layer[64];
        var_layer(m, v, layer);
        bool found = false;
        for (size_t i = 0; i < k && !found; i++)
            found = !strcmp(ls[i].name, layer);
        if (!found) rc = PS_EFORMAT;
    }
    if (rc != PS_OK) {
        free(ls);
        return rc;
    }
    *out = ls;
    *n = k;
    return PS_OK;
}

/* compile_config: the loss as a Keras loss object (with from_logits) and the
 * optimizer's class and settings; no optimizer state goes with them. */
static void add_compile(const ps_model *m, cJSON *root) {
    static const char *const loss[][2] = {
        [LOSS_SPARSE_CE] = {"SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"},
        [LOSS_BCE] = {"BinaryCrossentropy", "binary_crossentropy"},
        [LOSS_MSE] = {"MeanSquaredError", "mean_squared_error"}};
    static const char *const opt[PS_OPT_COUNT] = {"SGD",     "SGD",  "Adagrad",
                                                  "RMSprop", "Adam", "AdamW"};
    cJSON *cc = cJSON_AddObjectToObject(root, "compile_config");
    cJSON *l = cJSON_AddObjectToObject(cc, "loss"), *lc;
    cJSON_AddStringToObject(l, "module", "keras.losses");
    cJSON_AddStringToObject(l, "class_name", loss[m->loss][0]);
    lc = cJSON_AddObjectToObject(l, "config");
    cJSON_AddStringToObject(lc, "name", loss[m->loss][1]);
    cJSON_AddStringToObject(lc, "reduction", "sum_over_batch_size");
    if (m->loss != LOSS_MSE) cJSON_AddBoolToObject(lc, "from_logits", m->from_logits);
    cJSON_AddNullToObject(l, "registered_name");
    const ps_opt_spec *s = &m->opt;
    cJSON *o = cJSON_AddObjectToObject(cc, "optimizer"), *oc;
    cJSON_AddStringToObject(o, "module", "keras.optimizers");
    cJSON_AddStringToObject(o, "class_name", opt[s->kind]);
    oc = cJSON_AddObjectToObject(o, "config");
    char lower[16];
    size_t i = 0;
    for (; opt[s->kind][i] && i + 1 < sizeof lower; i++)
        lower[i] = (char)(opt[s->kind][i] | 0x20); /* ASCII letters: the lower case */
    lower[i] = 0;
    cJSON_AddStringToObject(oc, "name", lower);
    cJSON_AddNumberToObject(oc, "learning_rate", s->lr); /* a schedule's initial rate */
    if (s->weight_decay > 0) cJSON_AddNumberToObject(oc, "weight_decay", s->weight_decay);
    if (s->clipnorm > 0) cJSON_AddNumberToObject(oc, "clipnorm", s->clipnorm);
    if (s->clipvalue > 0) cJSON_AddNumberToObject(oc, "clipvalue", s->clipvalue);
    if (s->global_clipnorm > 0) cJSON_AddNumberToObject(oc, "global_clipnorm", s->global_clipnorm);
    switch (s->kind) {
    case PS_OPT_MOMENTUM:
        cJSON_AddNumberToObject(oc, "momentum", s->momentum);
        cJSON_AddBoolToObject(oc, "nesterov", s->nesterov);
        break;
    case PS_OPT_RMSPROP:
        cJSON_AddNumberToObject(oc, "rho", s->rho);
        cJSON_AddNumberToObject(oc, "epsilon", s->epsilon);
        break;
    case PS_OPT_ADAGRAD:
        cJSON_AddNumberToObject(oc, "initial_accumulator_value", s->initial_accumulator);
        cJSON_AddNumberToObject(oc, "epsilon", s->epsilon);
        break;
    case PS_OPT_ADAM:
    case PS_OPT_ADAMW:
        cJSON_AddNumberToObject(oc, "beta_1", s->beta1);
        cJSON_AddNumberToObject(oc, "beta_2", s->beta2);
        cJSON_AddNumberToObject(oc, "epsilon", s->epsilon);
        break;
    default:
        break;
    }
    cJSON_AddNullToObject(o, "registered_name");
    cJSON *metrics = cJSON_AddArrayToObject(cc, "metrics");
    cJSON_AddItemToArray(metrics, cJSON_CreateString("accuracy"));
}

/* The source's config.json text with compile_config set to ours (text as Keras
 * wrote it elsewhere: re-printing it would turn Keras' floats such as 0.0 into
 * integers, which some of its constructors refuse). NULL when it cannot be
 * spliced (a compile_config with content but no loss). */
static char *with_compile(const ps_model *m, const cJSON *root, const char *text) {
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(root, "compile_config");
    if (cJSON_IsObject(cc) && cJSON_GetObjectItemCaseSensitive(cc, "loss")) return strdup(text);
    cJSON *tmp = cJSON_CreateObject();
    add_compile(m, tmp);
    char *ours = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(tmp, "compile_config"));
    cJSON_Delete(tmp);
    if (!ours) return NULL;
    const char *empty = "\"compile_config\": {}", *at = strstr(text, empty);
    size_t tl = strlen(text), ol = strlen(ours);
    char *out = NULL;
    if (at && !strstr(at + 1, empty)) { /* Keras' empty one: replaced */
        size_t head = (size_t)(at - text) + strlen("\"compile_config\": ");
        out = malloc(tl + ol + 1);
        if (out) {
            memcpy(out, text, head);
            memcpy(out + head, ours, ol);
            strcpy(out + head + ol, at + strlen(empty));
        }
    } else if (!cc) { /* none: added before the closing brace */
        const char *end = strrchr(text, '}');
        size_t head = end ? (size_t)(end - text) : 0;
        out = end ? malloc(tl + ol + 32) : NULL;
        if (out) {
            memcpy(out, text, head);
            sprintf(out + head, ", \"compile_config\": %s%s", ours, end);
        }
    }
    free(ours);
    return out;
}

/* config.json (*config, malloc'd text) and the weights file's layers: the
 * source archive's own config when the model came from one (source: --model,
 * may be NULL) and it names every layer with variables, else m described as a
 * Functional model; compile_config ours where it has none. */
int ps__keras_config(const ps_model *m, const char *source, char **config, ps_keras_layer **ls,
                     size_t *n, char *err, size_t errlen) {
    cJSON *root = NULL;
    char why[512], *text = NULL;
    *config = NULL;
    if (source && ps_keras_kind_of(source) == PS_KERAS_ARCHIVE &&
        ps__keras_read_config(source, &root, &text, why, sizeof why) == PS_OK) {
        if (source_layers(m, root, ls, n) == PS_OK) {
            *config = with_compile(m, root, text);
            if (!*config) free(*ls);
        }
        cJSON_Delete(root);
        free(text);
        if (*config) return PS_OK;
    }
    cJSON *model = NULL;
    int rc = describe(m, &model, ls, n, err, errlen);
    if (rc != PS_OK) return rc;
    add_compile(m, model);
    *config = cJSON_PrintUnformatted(model);
    cJSON_Delete(model);
    if (!*config) {
        free(*ls);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    return PS_OK;
}
