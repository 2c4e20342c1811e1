/* Max and average pooling in the exports: ONNX MaxPool / AveragePool with the
 * kernels' padding (padding never counts in an average, as TensorFlow's). */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    ps_k_pool p;
    ps_k_pool_plan(&p, 1, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->sh, o->sw, o->same);
    bool avg = o->kind == OP_AVGPOOL;
    Onnx__NodeProto *n = ps_onnx_node(b, avg ? "AveragePool" : "MaxPool", *out, 1, &in);
    ps_onnx_window_attrs(b, n, o, p.oh, p.ow, p.pad_top, p.pad_left);
    if (avg) ps_onnx_attr_int(b, n, "count_include_pad", 0);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    ps_describe_window(e, o, "pool_size");
}

static const char *keras(cJSON *c, const ps_op *o) {
    ps_keras_window(c, o, "pool_size");
    return o->kind == OP_MAXPOOL ? "MaxPooling2D" : "AveragePooling2D";
}

const ps_layer_export ps_layer_export_maxpool = {
    .kind = OP_MAXPOOL,
    .onnx_name = "max_pooling2d",
    .onnx = onnx,
    .class_name = "MaxPooling2D",
    .describe = describe,
    .keras = keras,
};

const ps_layer_export ps_layer_export_avgpool = {
    .kind = OP_AVGPOOL,
    .onnx_name = "average_pooling2d",
    .onnx = onnx,
    .class_name = "AveragePooling2D",
    .describe = describe,
    .keras = keras,
};
