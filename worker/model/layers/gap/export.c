/* GlobalAveragePooling2D in ONNX: GlobalAveragePool ([N, C, 1, 1]), then
 * Flatten unless keepdims (a 1x1 image, NCHW like the others). */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    if (o->image) {
        ps_onnx_node(b, "GlobalAveragePool", *out, 1, &in);
        return PS_OK;
    }
    const char *g = ps_onnx_helper(b, *out, "pooled");
    ps_onnx_node(b, "GlobalAveragePool", g, 1, &in);
    Onnx__NodeProto *n = ps_onnx_node(b, "Flatten", *out, 1, &g);
    ps_onnx_attr_int(b, n, "axis", 1);
    return PS_OK;
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON_AddStringToObject(c, "data_format", "channels_last");
    cJSON_AddBoolToObject(c, "keepdims", o->image);
    return "GlobalAveragePooling2D";
}

const ps_layer_export ps_layer_export_gap = {
    .kind = OP_GAP,
    .onnx_name = "global_average_pooling2d",
    .onnx = onnx,
    .class_name = "GlobalAveragePooling2D",
    .keras = keras,
};
