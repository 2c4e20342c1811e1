/* Normalization in the exports. ONNX: (x - mean) / Max(Sqrt(variance), eps)
 * with mean and variance as [C, 1, 1] (image, NCHW) or [C] initializers, so
 * they broadcast over the channel axis; count an INT64 [1] initializer no node
 * reads (every variable is in the graph). safetensors / PyTorch: mean and
 * variance as vectors, count as an I64 scalar (buffers of a module torch does
 * not have). Keras 3: count written back as an int64 scalar. */
#include <cjson/cJSON.h>
#include <math.h>

#include "layer_export.h"
#include "ps_error.h"

/* A statistic as an initializer shaped to broadcast over the channels. */
static const char *channels(ps_onnx *b, const ps_op *o, size_t var) {
    int64_t dims[3] = {(int64_t)o->in.c, 1, 1};
    const char *n = ps_onnx_var_name(b, var);
    ps_onnx_init_f32(b, n, o->image ? 3 : 1, dims, ps_onnx_var_values(b, var), o->in.c, NULL, NULL);
    return n;
}

/* count, a float in the model, as the integer it stands for. */
static int64_t count_value(const float *v) {
    return isfinite(*v) && *v > 0 ? (int64_t)llroundf(*v) : 0;
}

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    const char *y = *out;
    int64_t count = count_value(ps_onnx_var_values(b, o->count_var));
    ps_onnx_init_i64(b, ps_onnx_var_name(b, o->count_var), 1, &count);
    const char *mean = channels(b, o, o->mean_var), *var = channels(b, o, o->mvar_var);
    const char *eps = ps_onnx_const_scalar(b, ps_onnx_helper(b, y, "eps"), o->eps);
    const char *d = ps_onnx_helper(b, y, "centred"), *sd = ps_onnx_helper(b, y, "std");
    const char *div = ps_onnx_helper(b, y, "divisor");
    const char *sub[2] = {in, mean}, *mx[2] = {sd, eps}, *q[2] = {d, div};
    ps_onnx_node(b, "Sub", d, 2, sub);
    ps_onnx_node(b, "Sqrt", sd, 1, &var);
    ps_onnx_node(b, "Max", div, 2, mx);
    ps_onnx_node(b, "Div", y, 2, q);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddNumberToObject(e, "epsilon", o->eps);
}

static int torch(ps_torch_b *b, size_t j, const char *module) {
    const ps_op *o = &ps_torch_b_model(b)->ops[j];
    size_t c = o->in.c;
    int rc = ps_torch_b_add_vector(b, j, module, "mean", o->mean_var, c, NULL, 0);
    if (rc == PS_OK) rc = ps_torch_b_add_vector(b, j, module, "variance", o->mvar_var, c, NULL, 1);
    if (rc != PS_OK) return rc;
    ps_torch_tensor *e = ps_torch_b_add(b, j, module, "count", o->count_var,
                                        "Keras' integer count, as an I64 scalar", 0, NULL);
    if (!e) return PS_ENOMEM;
    e->i64 = true;
    e->i64v = count_value(ps_torch_b_values(b, o->count_var));
    return PS_OK;
}

static const char *keras(cJSON *c, const ps_op *o) {
    (void)o;
    cJSON *axis = cJSON_AddArrayToObject(c, "axis");
    cJSON_AddItemToArray(axis, cJSON_CreateNumber(-1));
    cJSON_AddBoolToObject(c, "invert", false);
    cJSON_AddNullToObject(c, "mean");
    cJSON_AddNullToObject(c, "variance");
    return "Normalization";
}

static bool keras_int_scalar(const ps_op *o, size_t var) {
    return var == o->count_var;
}

const ps_layer_export ps_layer_export_norm = {
    .kind = OP_NORM,
    .onnx_name = "normalization",
    .onnx = onnx,
    .class_name = "Normalization",
    .describe = describe,
    .torch = torch,
    .torch_keeps_order = true,
    .keras = keras,
    .keras_int_scalar = keras_int_scalar,
};
