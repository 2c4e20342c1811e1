/* ZeroPadding2D in the exports: ONNX Pad over NCHW. */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    /* NCHW: [n, c, top, left] before, [n, c, bottom, right] after */
    int64_t pads[8] = {0, 0, (int64_t)o->pad[0], (int64_t)o->pad[2],
                       0, 0, (int64_t)o->pad[1], (int64_t)o->pad[3]};
    const char *pn = ps_onnx_helper(b, *out, "pads");
    ps_onnx_init_i64(b, pn, 8, pads);
    const char *ins[2] = {in, pn};
    ps_onnx_node(b, "Pad", *out, 2, ins);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddItemToObject(e, "pads", ps_describe_sizes(o->pad, 4));
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON *p = cJSON_AddArrayToObject(c, "padding");
    cJSON_AddItemToArray(p, ps_keras_ints(o->pad, 2));
    cJSON_AddItemToArray(p, ps_keras_ints(o->pad + 2, 2));
    cJSON_AddStringToObject(c, "data_format", "channels_last");
    return "ZeroPadding2D";
}

const ps_layer_export ps_layer_export_pad = {
    .kind = OP_PAD,
    .onnx_name = "zero_padding2d",
    .onnx = onnx,
    .class_name = "ZeroPadding2D",
    .describe = describe,
    .keras = keras,
};
