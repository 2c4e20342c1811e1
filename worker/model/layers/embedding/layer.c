/* Embedding: each sample's rows of a table, for the ids an id input gives it
 * (one, or n for an input of shape [n]: the output is [n, dim]).
 * The table is not the model's: the caller gives the step's rows (model.h,
 * model_rows.c), the forward pass gathers them, the backward pass sums the
 * output's gradient into one gradient per row given (duplicates summed),
 * never a gradient of the whole table. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "layer.h"
#include "ps_error.h"

#define MAX_DIM 65536
#define MAX_ROWS 1e15 /* Keras' input_dim; the ids themselves are uint64 */

static const char *const spec_keys[] = {"input_dim", "output_dim", "embeddings_initializer",
                                        "table", NULL};
static const char *const keras_keys[] = {
    "input_dim",         "output_dim", "embeddings_initializer", "input_length", "mask_zero",
    "batch_input_shape", NULL};
static const ps_layer_class classes[] = {{"Embedding", NULL, true, spec_keys, keras_keys}};

/* Keras' RandomUniform (its "uniform" default: -0.05, 0.05), by name or as a
 * config with a null seed: the one distribution a table's rows start from. */
static int parse_init(ps_build *b, const cJSON *l, ps_op *o) {
    const cJSON *v = ps_layer_item(l, "embeddings_initializer"), *k;
    o->init_lo = -0.05f;
    o->init_hi = 0.05f;
    if (!v || (cJSON_IsString(v) &&
               (!strcmp(v->valuestring, "uniform") || !strcmp(v->valuestring, "random_uniform") ||
                !strcmp(v->valuestring, "RandomUniform"))))
        return PS_OK;
    const cJSON *c = ps_layer_item(v, "class_name"), *cfg = ps_layer_item(v, "config");
    bool ok = cJSON_IsString(c) && (!strcmp(c->valuestring, "RandomUniform") ||
                                    !strcmp(c->valuestring, "random_uniform"));
    double lo = -0.05, hi = 0.05;
    cJSON_ArrayForEach(k, cfg) {
        if (!ok) break;
        if (!strcmp(k->string, "minval") && cJSON_IsNumber(k))
            lo = k->valuedouble;
        else if (!strcmp(k->string, "maxval") && cJSON_IsNumber(k))
            hi = k->valuedouble;
        else if (!strcmp(k->string, "seed") || !strcmp(k->string, "dtype"))
            ok = cJSON_IsNull(k) || (cJSON_IsString(k) && !strcmp(k->valuestring, "float32"));
        else
            ok = false;
    }
    if (!ok || !(lo < hi) || !isfinite(lo) || !isfinite(hi))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: option 'embeddings_initializer' is not supported (only "
                             "RandomUniform, Keras' \"uniform\", with minval < maxval and a null "
                             "seed: a table's new rows are drawn uniform)",
                             b->where);
    o->init_lo = (float)lo;
    o->init_hi = (float)hi;
    return PS_OK;
}

/* A dynamic table's options (the spec's "table": {"min_count": N, "ttl_steps": N,
 * "max_rows": N, "when_full": "evict" | "refuse"}), for input_dim 0 only. */
static int parse_table(ps_build *b, const cJSON *l, size_t rows, ps_op *o) {
    const cJSON *t = ps_layer_item(l, "table"), *k;
    if (!t) return PS_OK;
    if (!cJSON_IsObject(t) || rows)
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: 'table' must be an object, and is for a dynamic table "
                             "(input_dim 0: ids of any value)",
                             b->where);
    cJSON_ArrayForEach(k, t) {
        size_t v = 0;
        if (!strcmp(k->string, "min_count") && ps_layer_get_size(k, 0, 65535, &v))
            o->table_min_count = (uint32_t)v;
        else if (!strcmp(k->string, "ttl_steps") && ps_layer_get_size(k, 0, 1e15, &v))
            o->table_ttl_steps = v;
        else if (!strcmp(k->string, "max_rows") && ps_layer_get_size(k, 0, 4294967294.0, &v))
            o->table_max_rows = v;
        else if (!strcmp(k->string, "when_full") && cJSON_IsString(k) &&
                 (!strcmp(k->valuestring, "evict") || !strcmp(k->valuestring, "refuse")))
            o->table_refuse = !strcmp(k->valuestring, "refuse");
        else
            return ps_build_fail(b, PS_EFORMAT,
                                 "%s: table option '%s' (want min_count 0..65535, ttl_steps, "
                                 "max_rows below 2^32, when_full \"evict\" or \"refuse\")",
                                 b->where, k->string);
    }
    return PS_OK;
}

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)act;
    const cJSON *in = ps_layer_item(l, "input_dim"), *out = ps_layer_item(l, "output_dim");
    const cJSON *len = ps_layer_item(l, "input_length"), *mz = ps_layer_item(l, "mask_zero");
    size_t rows = 0, dim = 0, one = 0;
    if (!out || !ps_layer_get_size(out, 1, MAX_DIM, &dim))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'output_dim' must be an integer in [1, %d]",
                             b->where, MAX_DIM);
    /* Keras needs input_dim; a spec may give 0: ids of any value (a hashed table) */
    if (!in || !ps_layer_get_size(in, keras ? 1 : 0, MAX_ROWS, &rows))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'input_dim' must be an integer in [%d, %.0e]",
                             b->where, keras ? 1 : 0, MAX_ROWS);
    size_t width = b->m->ids[o->ids].width;
    if (len && !cJSON_IsNull(len) && !(ps_layer_get_size(len, 1, 1e9, &one) && one == width))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: option 'input_length' must be null or %zu (the ids per sample "
                             "of its input)",
                             b->where, width);
    /* Keras 2 writes the input shape of Embedding(..., input_length=n) */
    const cJSON *bis = ps_layer_item(l, "batch_input_shape");
    int r = cJSON_IsArray(bis) ? cJSON_GetArraySize(bis) : 0;
    if (bis && !((r == 1 || r == 2) && cJSON_IsNull(cJSON_GetArrayItem(bis, 0)) &&
                 (r == 1 || (ps_layer_get_size(cJSON_GetArrayItem(bis, 1), 1, 1e9, &one) &&
                             one == width))))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: option 'batch_input_shape' must be [null] or [null, %zu] (the "
                             "ids per sample of its input)",
                             b->where, width);
    if (mz && !cJSON_IsFalse(mz))
        return ps_build_fail(b, PS_EFORMAT, "%s: option 'mask_zero' is not supported (only false)",
                             b->where);
    int rc = parse_init(b, l, o);
    if (rc == PS_OK && !keras) rc = parse_table(b, l, rows, o);
    if (rc != PS_OK) return rc;
    o->kind = OP_EMBEDDING;
    o->table_rows = rows;
    o->out = (ps_shape){1, b->m->ids[o->ids].width, dim}; /* [width, dim] per sample */
    o->image = false;
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)in;
    (void)out;
    size_t w = o->out.w; /* ids per sample: rows*w rows gathered, w per sample */
    ps_k_gather_rows_overwrite(p->m->dev, o->y, ps_rows_values(p->m, o->emb),
                               ps_rows_where(p->m, o->emb) + p->row0 * w, p->rows * w, o->out.c);
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    (void)in;
    const uint32_t *order, *offs;
    size_t n;
    ps_rows_groups(p->m, o->emb, &order, &offs, &n);
    ps_k_scatter_rows_overwrite(p->m->dev, ps_rows_grads_dev(p->m, o->emb), dout, order, offs, n,
                                o->out.c);
    return PS_OK;
}

const ps_layer ps_layer_embedding = {
    .kind = OP_EMBEDDING,
    .classes = classes,
    .nclasses = 1,
    .ids = true,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
