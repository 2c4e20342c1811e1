/* Flatten and Reshape in the exports: ONNX Flatten of the model's (NHWC)
 * order, and for an image target a Reshape then NCHW again; PyTorch: the flat
 * order is its input's. */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    (void)in;
    const char *flat = ps_onnx_flat_nhwc(b, o->in_t[0], *out);
    if (!o->image) {
        ps_onnx_node(b, "Identity", *out, 1, &flat);
        return PS_OK;
    }
    int64_t shape[4] = {0, (int64_t)o->out.h, (int64_t)o->out.w, (int64_t)o->out.c};
    const char *sname = ps_onnx_helper(b, *out, "shape"), *nhwc = ps_onnx_helper(b, *out, "nhwc");
    ps_onnx_init_i64(b, sname, 4, shape);
    const char *ins[2] = {flat, sname};
    ps_onnx_node(b, "Reshape", nhwc, 2, ins);
    ps_onnx_transpose(b, nhwc, PS_ONNX_TO_NCHW, *out);
    return PS_OK;
}

static const char *class_of(const ps_op *o) {
    return o->image ? "Reshape" : "Flatten";
}

static const char *keras(cJSON *c, const ps_op *o) {
    if (!o->image) {
        cJSON_AddStringToObject(c, "data_format", "channels_last");
        return "Flatten";
    }
    size_t d[3] = {o->out.h, o->out.w, o->out.c};
    cJSON_AddItemToObject(c, "target_shape", ps_keras_ints(d, 3));
    return "Reshape";
}

const ps_layer_export ps_layer_export_reshape = {
    .kind = OP_FLATTEN,
    .onnx_name = "flatten",
    .onnx = onnx,
    .class_of = class_of,
    .torch_keeps_order = true,
    .keras = keras,
};
