/* Rescaling in the exports: ONNX Mul by the scale, then Add of the offset. */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    const char *k[2] = {ps_onnx_const_scalar(b, ps_onnx_helper(b, *out, "scale"), o->scale),
                        ps_onnx_const_scalar(b, ps_onnx_helper(b, *out, "offset"), o->offset)};
    const char *scaled = ps_onnx_helper(b, *out, "scaled"), *m[2] = {in, k[0]}, *a[2] = {scaled, k[1]};
    ps_onnx_node(b, "Mul", scaled, 2, m);
    ps_onnx_node(b, "Add", *out, 2, a);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddNumberToObject(e, "scale", o->scale);
    cJSON_AddNumberToObject(e, "offset", o->offset);
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON_AddNumberToObject(c, "scale", o->scale);
    cJSON_AddNumberToObject(c, "offset", o->offset);
    return "Rescaling";
}

const ps_layer_export ps_layer_export_rescale = {
    .kind = OP_RESCALE,
    .onnx_name = "rescaling",
    .onnx = onnx,
    .class_name = "Rescaling",
    .describe = describe,
    .torch_keeps_order = true,
    .keras = keras,
};
