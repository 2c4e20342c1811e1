/* Activations in the exports: ONNX Relu, Clip (relu6), Sigmoid, Tanh, GELU
 * as its exact formula (Gelu is opset 20), swish as x * Sigmoid(x),
 * HardSigmoid (alpha 1/6, beta 1/2: Keras 3's), hard swish as x times it
 * (HardSwish is opset 14), Softmax, Identity. */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    const char *y = *out;
    switch (o->act) {
    case PS_K_ACT_RELU:
        ps_onnx_node(b, "Relu", y, 1, &in);
        break;
    case PS_K_ACT_RELU6: {
        const char *ins[3] = {in};
        ps_onnx_relu6_bounds(b, &ins[1], &ins[2]);
        ps_onnx_node(b, "Clip", y, 3, ins);
        break;
    }
    case PS_K_ACT_SIGMOID:
        ps_onnx_node(b, "Sigmoid", y, 1, &in);
        break;
    case PS_K_ACT_TANH:
        ps_onnx_node(b, "Tanh", y, 1, &in);
        break;
    case PS_K_ACT_GELU: { /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
        const char *c[3] = {
            ps_onnx_const_scalar(b, ps_onnx_helper(b, y, "inv_sqrt2"), 0.70710678118654752f),
            ps_onnx_const_scalar(b, ps_onnx_helper(b, y, "one"), 1.0f),
            ps_onnx_const_scalar(b, ps_onnx_helper(b, y, "half"), 0.5f)};
        const char *s1[2] = {in, c[0]};
        const char *v = ps_onnx_helper(b, y, "scaled");
        ps_onnx_node(b, "Mul", v, 2, s1);
        const char *e = ps_onnx_helper(b, y, "erf");
        ps_onnx_node(b, "Erf", e, 1, &v);
        const char *s2[2] = {e, c[1]}, *p = ps_onnx_helper(b, y, "one_plus");
        ps_onnx_node(b, "Add", p, 2, s2);
        const char *s3[2] = {in, p}, *q = ps_onnx_helper(b, y, "x_times");
        ps_onnx_node(b, "Mul", q, 2, s3);
        const char *s4[2] = {q, c[2]};
        ps_onnx_node(b, "Mul", y, 2, s4);
        break;
    }
    case PS_K_ACT_SWISH: { /* x * sigmoid(x) */
        const char *sg = ps_onnx_helper(b, y, "sigmoid"), *ins[2] = {in, sg};
        ps_onnx_node(b, "Sigmoid", sg, 1, &in);
        ps_onnx_node(b, "Mul", y, 2, ins);
        break;
    }
    case PS_K_ACT_HARD_SIGMOID:
    case PS_K_ACT_HARD_SWISH: { /* relu6(x + 3) / 6 = clip(x / 6 + 1/2, 0, 1); times x */
        const char *hs = o->act == PS_K_ACT_HARD_SIGMOID ? y : ps_onnx_helper(b, y, "hard_sigmoid");
        Onnx__NodeProto *n = ps_onnx_node(b, "HardSigmoid", hs, 1, &in);
        ps_onnx_attr_float(b, n, "alpha", 1.0f / 6.0f);
        ps_onnx_attr_float(b, n, "beta", 0.5f);
        if (o->act == PS_K_ACT_HARD_SWISH) {
            const char *ins[2] = {in, hs};
            ps_onnx_node(b, "Mul", y, 2, ins);
        }
        break;
    }
    case PS_ACT_SOFTMAX: {
        Onnx__NodeProto *n = ps_onnx_node(b, "Softmax", y, 1, &in);
        ps_onnx_attr_int(b, n, "axis", -1);
        break;
    }
    default: /* linear */
        ps_onnx_node(b, "Identity", y, 1, &in);
        break;
    }
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddStringToObject(e, "activation", ps_describe_act_name(o->act));
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON_AddStringToObject(c, "activation", ps_describe_act_name(o->act));
    return "Activation";
}

const ps_layer_export ps_layer_export_activation = {
    .kind = OP_ACT,
    .onnx_name = "activation",
    .onnx = onnx,
    .class_name = "Activation",
    .describe = describe,
    .torch_keeps_order = true,
    .keras = keras,
};
