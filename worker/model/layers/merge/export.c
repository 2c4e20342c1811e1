/* Add and Concatenate in ONNX: Add (Sum for three or more), Concat along the
 * channels (axis 1 in NCHW and in [N, C]). */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    (void)in;
    const char *ins[PS_OP_MAX_IN];
    for (size_t i = 0; i < o->nin; i++)
        ins[i] = ps_onnx_value(b, o->in_t[i]);
    const char *op = o->kind == OP_CONCAT ? "Concat" : o->nin == 2 ? "Add" : "Sum";
    Onnx__NodeProto *n = ps_onnx_node(b, op, *out, o->nin, ins);
    if (o->kind == OP_CONCAT) ps_onnx_attr_int(b, n, "axis", 1);
    return PS_OK;
}

static const char *keras(cJSON *c, const ps_op *o) {
    if (o->kind == OP_ADD) return "Add";
    cJSON_AddNumberToObject(c, "axis", -1);
    return "Concatenate";
}

const ps_layer_export ps_layer_export_add = {
    .kind = OP_ADD,
    .onnx_name = "add",
    .onnx = onnx,
    .class_name = "Add",
    .keras = keras,
};

const ps_layer_export ps_layer_export_concat = {
    .kind = OP_CONCAT,
    .onnx_name = "concatenate",
    .onnx = onnx,
    .class_name = "Concatenate",
    .keras = keras,
};
