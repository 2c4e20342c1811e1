/* LayerNormalization in the exports. ONNX (opset 13 has no
 * LayerNormalization): the mean and variance over the channel axis (1 in
 * NCHW and in [N, C]) by ReduceMean, (x - mean) / Sqrt(variance + eps), times
 * gamma plus beta shaped to broadcast over the channels. PyTorch: weight and
 * bias (ones / zeros when absent). */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

/* A per-channel variable as [C, 1, 1] (image) or [C] (vector), to broadcast. */
static const char *channels(ps_onnx *b, const ps_op *o, size_t var, float absent,
                            const char *name) {
    size_t c = o->in.c;
    int64_t dims[3] = {(int64_t)c, 1, 1};
    size_t nd = o->image ? 3 : 1;
    if (var == PS_NO_VAR) {
        const char *n = ps_onnx_const_vec(b, name, c, absent);
        if (nd == 1) return n;
        /* an image: reshape the [C] constant */
        const char *shape = ps_onnx_helper(b, name, "shape"), *out = ps_onnx_helper(b, name, "c11");
        ps_onnx_init_i64(b, shape, 3, dims);
        const char *ins[2] = {n, shape};
        ps_onnx_node(b, "Reshape", out, 2, ins);
        return out;
    }
    /* the variable's own name, shaped to broadcast */
    const char *n = ps_onnx_var_name(b, var);
    ps_onnx_init_f32(b, n, nd, dims, ps_onnx_var_values(b, var), c, NULL, NULL);
    return n;
}

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    const char *y = *out;
    int64_t axis[1] = {1};
    const char *mean = ps_onnx_helper(b, y, "mean"), *d = ps_onnx_helper(b, y, "centred");
    Onnx__NodeProto *n = ps_onnx_node(b, "ReduceMean", mean, 1, &in);
    ps_onnx_attr_ints(b, n, "axes", 1, axis);
    const char *sub[2] = {in, mean};
    ps_onnx_node(b, "Sub", d, 2, sub);
    const char *sq = ps_onnx_helper(b, y, "sq"), *var = ps_onnx_helper(b, y, "var");
    const char *dd[2] = {d, d};
    ps_onnx_node(b, "Mul", sq, 2, dd);
    n = ps_onnx_node(b, "ReduceMean", var, 1, &sq);
    ps_onnx_attr_ints(b, n, "axes", 1, axis);
    const char *eps = ps_onnx_const_scalar(b, ps_onnx_helper(b, y, "eps"), o->eps);
    const char *ve = ps_onnx_helper(b, y, "var_eps"), *sd = ps_onnx_helper(b, y, "std");
    const char *add[2] = {var, eps};
    ps_onnx_node(b, "Add", ve, 2, add);
    ps_onnx_node(b, "Sqrt", sd, 1, &ve);
    const char *norm = ps_onnx_helper(b, y, "normalised"), *div[2] = {d, sd};
    ps_onnx_node(b, "Div", norm, 2, div);
    const char *g = channels(b, o, o->kernel_var, 1.0f, ps_onnx_helper(b, y, "gamma"));
    const char *bt = channels(b, o, o->bias_var, 0.0f, ps_onnx_helper(b, y, "beta"));
    const char *scaled = ps_onnx_helper(b, y, "scaled"), *mul[2] = {norm, g};
    ps_onnx_node(b, "Mul", scaled, 2, mul);
    const char *fin[2] = {scaled, bt};
    ps_onnx_node(b, "Add", y, 2, fin);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddNumberToObject(e, "epsilon", o->eps);
}

static int torch(ps_torch_b *b, size_t j, const char *module) {
    const ps_op *o = &ps_torch_b_model(b)->ops[j];
    int rc = ps_torch_b_add_vector(b, j, module, "weight", o->kernel_var, o->in.c, NULL, 1);
    return rc == PS_OK ? ps_torch_b_add_vector(b, j, module, "bias", o->bias_var, o->in.c, NULL, 0)
                       : rc;
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON_AddNumberToObject(c, "axis", -1);
    cJSON_AddNumberToObject(c, "epsilon", o->eps);
    cJSON_AddBoolToObject(c, "center", o->center);
    cJSON_AddBoolToObject(c, "scale", o->has_gamma);
    cJSON_AddBoolToObject(c, "rms_scaling", false);
    return "LayerNormalization";
}

const ps_layer_export ps_layer_export_ln = {
    .kind = OP_LN,
    .onnx_name = "layer_normalization",
    .onnx = onnx,
    .class_name = "LayerNormalization",
    .describe = describe,
    .torch = torch,
    .keras = keras,
};
