/* Cropping2D in the exports: ONNX Slice of the NCHW image's rows and columns. */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    int64_t starts[2] = {(int64_t)o->pad[0], (int64_t)o->pad[2]};
    int64_t ends[2] = {(int64_t)(o->in.h - o->pad[1]), (int64_t)(o->in.w - o->pad[3])};
    int64_t axes[2] = {2, 3};
    const char *ins[4] = {in, ps_onnx_helper(b, *out, "starts"), ps_onnx_helper(b, *out, "ends"),
                          ps_onnx_helper(b, *out, "axes")};
    ps_onnx_init_i64(b, ins[1], 2, starts);
    ps_onnx_init_i64(b, ins[2], 2, ends);
    ps_onnx_init_i64(b, ins[3], 2, axes);
    ps_onnx_node(b, "Slice", *out, 4, ins);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddItemToObject(e, "cropping", ps_describe_sizes(o->pad, 4));
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON *p = cJSON_AddArrayToObject(c, "cropping");
    cJSON_AddItemToArray(p, ps_keras_ints(o->pad, 2));
    cJSON_AddItemToArray(p, ps_keras_ints(o->pad + 2, 2));
    cJSON_AddStringToObject(c, "data_format", "channels_last");
    return "Cropping2D";
}

const ps_layer_export ps_layer_export_crop = {
    .kind = OP_CROP,
    .onnx_name = "cropping2d",
    .onnx = onnx,
    .class_name = "Cropping2D",
    .describe = describe,
    .keras = keras,
};
