/* Conv2D and DepthwiseConv2D in the exports: ONNX Conv (OIHW kernels; a
 * depthwise kernel [kh, kw, c, mult] as a grouped Conv's [c*mult, 1, kh, kw]);
 * PyTorch Conv2d weights in the same layouts, groups = c for depthwise. */
#include <cjson/cJSON.h>

#include "layer_export.h"
#include "ps_error.h"

typedef struct {
    size_t kh, kw, cin, cout, mult;
} kshape;

/* OIHW element i <- Keras [kh, kw, c_in, c_out] element. */
static size_t conv_perm(const void *ctx, size_t i) {
    const kshape *k = ctx;
    size_t x = i % k->kw, y = i / k->kw % k->kh, ci = i / (k->kw * k->kh) % k->cin,
           o = i / (k->kw * k->kh * k->cin);
    return ((y * k->kw + x) * k->cin + ci) * k->cout + o;
}

/* [c*mult, 1, kh, kw] element i <- Keras [kh, kw, c, mult] element. */
static size_t dw_perm(const void *ctx, size_t i) {
    const kshape *k = ctx;
    size_t x = i % k->kw, y = i / k->kw % k->kh, oc = i / (k->kw * k->kh);
    size_t ci = oc / k->mult, mm = oc % k->mult;
    return ((y * k->kw + x) * k->cin + ci) * k->mult + mm;
}

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    bool dw = o->kind == OP_DWCONV;
    ps_k_conv p;
    if (dw)
        ps_k_dwconv_plan(&p, 1, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->mult, o->sh, o->sw,
                         o->same);
    else
        ps_k_conv_plan(&p, 1, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->out.c, o->sh, o->sw,
                       o->same);
    kshape ks = {o->kh, o->kw, o->in.c, o->out.c, o->mult};
    int64_t dims[4] = {(int64_t)o->out.c, dw ? 1 : (int64_t)o->in.c, (int64_t)o->kh,
                       (int64_t)o->kw};
    const char *w = ps_onnx_var_name(b, o->kernel_var);
    ps_onnx_init_f32(b, w, 4, dims, ps_onnx_var_values(b, o->kernel_var),
                     o->out.c * (size_t)dims[1] * o->kh * o->kw, dw ? dw_perm : conv_perm, &ks);
    const char *ins[3] = {in, w, NULL};
    size_t nin = 2;
    if (o->bias_var != PS_NO_VAR) {
        int64_t bd[1] = {(int64_t)o->out.c};
        ins[nin++] = ps_onnx_var_name(b, o->bias_var);
        ps_onnx_init_f32(b, ins[2], 1, bd, ps_onnx_var_values(b, o->bias_var), o->out.c, NULL,
                         NULL);
    }
    Onnx__NodeProto *n = ps_onnx_node(b, "Conv", *out, nin, ins);
    ps_onnx_window_attrs(b, n, o, p.oh, p.ow, p.pad_top, p.pad_left);
    if (dw) ps_onnx_attr_int(b, n, "group", (int64_t)o->in.c);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    if (o->kind == OP_CONV) cJSON_AddNumberToObject(e, "filters", (double)o->out.c);
    if (o->kind == OP_DWCONV) {
        cJSON_AddNumberToObject(e, "depth_multiplier", (double)o->mult);
        cJSON_AddNumberToObject(e, "groups", (double)o->in.c);
    }
    ps_describe_window(e, o, "kernel_size");
    cJSON_AddBoolToObject(e, "use_bias", o->use_bias);
}

/* Conv2D: [kh, kw, c_in, c_out] -> (c_out, c_in, kh, kw). DepthwiseConv2D:
 * [kh, kw, c, mult] -> (c * mult, 1, kh, kw), torch's groups = c. */
static int torch(ps_torch_b *b, size_t j, const char *module) {
    const ps_op *o = &ps_torch_b_model(b)->ops[j];
    bool dw = o->kind == OP_DWCONV;
    size_t cin = o->in.c, kh = o->kh, kw = o->kw;
    size_t cols = dw ? o->mult : o->out.c; /* the variable's second axis */
    size_t shape[4] = {o->out.c, dw ? 1 : cin, kh, kw};
    ps_torch_tensor *e =
        ps_torch_b_add(b, j, module, "weight", o->kernel_var,
                       dw ? "(kh, kw, c, multiplier) -> (c * multiplier, 1, kh, kw)"
                          : "(kh, kw, c_in, c_out) -> (c_out, c_in, kh, kw)",
                       4, shape);
    if (!e) return PS_ENOMEM;
    const float *k = ps_torch_b_values(b, o->kernel_var);
    size_t q = 0;
    for (size_t oc = 0; oc < o->out.c; oc++)
        for (size_t i = 0; i < shape[1]; i++)
            for (size_t y = 0; y < kh; y++)
                for (size_t x = 0; x < kw; x++) {
                    /* depthwise: output channel oc = c * mult + m reads input channel c */
                    size_t row = (y * kw + x) * cin + (dw ? oc / o->mult : i);
                    size_t col = dw ? oc % o->mult : oc;
                    e->f32[q++] = k[row * cols + col];
                }
    if (o->bias_var != PS_NO_VAR)
        return ps_torch_b_add_vector(b, j, module, "bias", o->bias_var, o->out.c, NULL, 0);
    return PS_OK;
}

static const char *keras(cJSON *c, const ps_op *o) {
    size_t one[2] = {1, 1};
    if (o->kind == OP_CONV) cJSON_AddNumberToObject(c, "filters", (double)o->out.c);
    ps_keras_window(c, o, "kernel_size");
    if (o->kind == OP_DWCONV) cJSON_AddNumberToObject(c, "depth_multiplier", (double)o->mult);
    cJSON_AddItemToObject(c, "dilation_rate", ps_keras_ints(one, 2));
    if (o->kind == OP_CONV) cJSON_AddNumberToObject(c, "groups", 1);
    return o->kind == OP_CONV ? "Conv2D" : "DepthwiseConv2D";
}

/* Keras' kernel: [kh, kw, c_in, filters] or, depthwise, [kh, kw, c_in, multiplier]. */
static int keras_dims(const ps_op *o, size_t var, size_t d[4]) {
    if (var != o->kernel_var) return 0;
    d[0] = o->kh;
    d[1] = o->kw;
    d[2] = o->in.c;
    d[3] = o->kind == OP_CONV ? o->out.c : o->mult;
    return 4;
}

const ps_layer_export ps_layer_export_conv = {
    .kind = OP_CONV,
    .onnx_name = "conv2d",
    .onnx = onnx,
    .class_name = "Conv2D",
    .describe = describe,
    .torch = torch,
    .keras = keras,
    .keras_act = true,
    .keras_dims = keras_dims,
};

const ps_layer_export ps_layer_export_dwconv = {
    .kind = OP_DWCONV,
    .onnx_name = "depthwise_conv2d",
    .onnx = onnx,
    .class_name = "DepthwiseConv2D",
    .describe = describe,
    .torch = torch,
    .keras = keras,
    .keras_act = true,
    .keras_dims = keras_dims,
};
