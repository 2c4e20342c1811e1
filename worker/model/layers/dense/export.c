/* Dense in the exports: ONNX Gemm over the input flattened in the model's
 * order; PyTorch Linear, weight (out, in), its in axis in torch's NCHW
 * flatten order when the input comes from an image. */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    (void)in;
    size_t n = ps_shape_numel(o->in);
    int64_t dims[2] = {(int64_t)n, (int64_t)o->out.c};
    const char *ins[3] = {ps_onnx_flat_nhwc(b, o->in_t[0], *out),
                          ps_onnx_var_name(b, o->kernel_var), NULL};
    ps_onnx_init_f32(b, ins[1], 2, dims, ps_onnx_var_values(b, o->kernel_var), n * o->out.c,
                     NULL, NULL);
    size_t nin = 2;
    if (o->bias_var != PS_NO_VAR) {
        ins[nin++] = ps_onnx_var_name(b, o->bias_var);
        ps_onnx_init_f32(b, ins[2], 1, dims + 1, ps_onnx_var_values(b, o->bias_var), o->out.c,
                         NULL, NULL);
    }
    ps_onnx_node(b, "Gemm", *out, nin, ins);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    cJSON_AddNumberToObject(e, "units", (double)o->out.c);
    cJSON_AddBoolToObject(e, "use_bias", o->use_bias);
    cJSON_AddBoolToObject(e, "in_nchw_order", ps_torch_dense_permuted(m, j));
}

static int torch(ps_torch_b *b, size_t j, const char *module) {
    const ps_op *o = &ps_torch_b_model(b)->ops[j];
    size_t in = ps_shape_numel(o->in), out = o->out.c, shape[2] = {out, in};
    size_t *perm = malloc(in * sizeof *perm);
    if (!perm) return PS_ENOMEM;
    int rc = ps_torch_b_order(b, o->in_t[0], perm);
    bool permuted = rc == PS_OK && !ps_torch_is_identity(perm, in);
    ps_torch_tensor *e =
        rc == PS_OK ? ps_torch_b_add(b, j, module, "weight", o->kernel_var,
                                     permuted ? "transposed to (out, in); the in axis in torch's "
                                                "NCHW flatten order"
                                              : "transposed to (out, in)",
                                     2, shape)
                    : NULL;
    if (rc == PS_OK && !e) rc = PS_ENOMEM;
    if (rc == PS_OK) {
        const float *k = ps_torch_b_values(b, o->kernel_var); /* [in, out] */
        for (size_t r = 0; r < out; r++)
            for (size_t p = 0; p < in; p++)
                e->f32[r * in + p] = k[perm[p] * out + r];
    }
    free(perm);
    if (rc == PS_OK && o->bias_var != PS_NO_VAR)
        rc = ps_torch_b_add_vector(b, j, module, "bias", o->bias_var, out, NULL, 0);
    return rc;
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON_AddNumberToObject(c, "units", (double)o->out.c);
    return "Dense";
}

const ps_layer_export ps_layer_export_dense = {
    .kind = OP_DENSE,
    .onnx_name = "dense",
    .onnx = onnx,
    .class_name = "Dense",
    .describe = describe,
    .torch = torch,
    .keras = keras,
    .keras_act = true,
};
