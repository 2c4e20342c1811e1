/* SeparableConv2D in the exports: ONNX, its depthwise part as a grouped Conv
 * then its pointwise part as a 1x1 Conv (the Conv2D / DepthwiseConv2D
 * mappings, on the two halves); PyTorch, modules <name>.depthwise (groups =
 * c_in, no bias) and <name>.pointwise. */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "layer_export.h"
#include "ps_error.h"

extern const ps_layer_export ps_layer_export_conv, ps_layer_export_dwconv;

/* The two halves as ops of their own kinds. */
static void halves(const ps_op *o, ps_op *dw, ps_op *pw) {
    *dw = *o;
    dw->kind = OP_DWCONV;
    dw->out.c = o->in.c * o->mult;
    dw->bias_var = PS_NO_VAR;
    *pw = *o;
    pw->kind = OP_CONV;
    pw->in = (ps_shape){o->out.h, o->out.w, o->in.c * o->mult};
    pw->kh = pw->kw = pw->sh = pw->sw = 1;
    pw->same = false;
    pw->kernel_var = o->kernel2_var;
}

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    ps_op dw, pw;
    halves(o, &dw, &pw);
    const char *mid = ps_onnx_helper(b, *out, "depthwise");
    int rc = ps_layer_export_dwconv.onnx(b, j, &dw, in, &mid);
    return rc == PS_OK ? ps_layer_export_conv.onnx(b, j, &pw, mid, out) : rc;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddNumberToObject(e, "filters", (double)o->out.c);
    cJSON_AddNumberToObject(e, "depth_multiplier", (double)o->mult);
    ps_describe_window(e, o, "kernel_size");
    cJSON_AddBoolToObject(e, "use_bias", o->use_bias);
}

static int torch(ps_torch_b *b, size_t j, const char *module) {
    const ps_op *o = &ps_torch_b_model(b)->ops[j];
    size_t cin = o->in.c, mult = o->mult, mid = cin * mult, kh = o->kh, kw = o->kw;
    char name[96];
    snprintf(name, sizeof name, "%s.depthwise", module);
    size_t dshape[4] = {mid, 1, kh, kw}, pshape[4] = {o->out.c, mid, 1, 1};
    ps_torch_tensor *e = ps_torch_b_add(b, j, name, "weight", o->kernel_var,
                                        "(kh, kw, c, multiplier) -> (c * multiplier, 1, kh, kw)",
                                        4, dshape);
    if (!e) return PS_ENOMEM;
    const float *k = ps_torch_b_values(b, o->kernel_var);
    size_t q = 0;
    for (size_t oc = 0; oc < mid; oc++) /* output channel oc = c * mult + m reads channel c */
        for (size_t y = 0; y < kh; y++)
            for (size_t x = 0; x < kw; x++)
                e->f32[q++] = k[((y * kw + x) * cin + oc / mult) * mult + oc % mult];
    snprintf(name, sizeof name, "%s.pointwise", module);
    e = ps_torch_b_add(b, j, name, "weight", o->kernel2_var, "(c_in, c_out) -> (c_out, c_in, 1, 1)",
                       4, pshape);
    if (!e) return PS_ENOMEM;
    k = ps_torch_b_values(b, o->kernel2_var);
    for (size_t oc = 0, q2 = 0; oc < o->out.c; oc++)
        for (size_t i = 0; i < mid; i++)
            e->f32[q2++] = k[i * o->out.c + oc];
    if (o->bias_var != PS_NO_VAR)
        return ps_torch_b_add_vector(b, j, name, "bias", o->bias_var, o->out.c, NULL, 0);
    return PS_OK;
}

static const char *keras(cJSON *c, const ps_op *o) {
    size_t one[2] = {1, 1};
    cJSON_AddNumberToObject(c, "filters", (double)o->out.c);
    ps_keras_window(c, o, "kernel_size");
    cJSON_AddNumberToObject(c, "depth_multiplier", (double)o->mult);
    cJSON_AddItemToObject(c, "dilation_rate", ps_keras_ints(one, 2));
    return "SeparableConv2D";
}

/* Keras' kernels: depthwise [kh, kw, c_in, multiplier], pointwise [1, 1, c_in *
 * multiplier, filters]. */
static int keras_dims(const ps_op *o, size_t var, size_t d[4]) {
    if (var == o->kernel_var) {
        d[0] = o->kh;
        d[1] = o->kw;
        d[2] = o->in.c;
        d[3] = o->mult;
        return 4;
    }
    if (var != o->kernel2_var) return 0;
    d[0] = d[1] = 1;
    d[2] = o->in.c * o->mult;
    d[3] = o->out.c;
    return 4;
}

const ps_layer_export ps_layer_export_sepconv = {
    .kind = OP_SEPCONV,
    .onnx_name = "separable_conv2d",
    .onnx = onnx,
    .class_name = "SeparableConv2D",
    .describe = describe,
    .torch = torch,
    .keras = keras,
    .keras_act = true,
    .keras_dims = keras_dims,
};
