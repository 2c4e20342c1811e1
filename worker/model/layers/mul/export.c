/* Multiply in ONNX: Mul, whose broadcasting takes [N, C, 1, 1] over [N, C, H, W]. */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    (void)in;
    const char *ins[2] = {ps_onnx_value(b, o->in_t[0]), ps_onnx_value(b, o->in_t[1])};
    ps_onnx_node(b, "Mul", *out, 2, ins);
    return PS_OK;
}

static const char *keras(cJSON *c, const ps_op *o) {
    (void)c;
    (void)o;
    return "Multiply";
}

const ps_layer_export ps_layer_export_mul = {
    .kind = OP_MUL,
    .onnx_name = "multiply",
    .onnx = onnx,
    .class_name = "Multiply",
    .keras = keras,
};
