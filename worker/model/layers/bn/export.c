/* BatchNormalization in the exports (inference: the moving statistics): ONNX
 * BatchNormalization, ones / zeros for an absent gamma / beta; PyTorch
 * BatchNorm's weight, bias, running_mean, running_var, num_batches_tracked
 * (its momentum is 1 - Keras'). */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "layer_export.h"
#include "ps_error.h"

static int onnx(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out) {
    (void)j;
    size_t c = o->in.c;
    int64_t d[1] = {(int64_t)c};
    const char *ins[5] = {in};
    ins[1] = o->kernel_var != PS_NO_VAR
                 ? ps_onnx_var_name(b, o->kernel_var)
                 : ps_onnx_const_vec(b, ps_onnx_helper(b, *out, "gamma_ones"), c, 1.0f);
    ins[2] = o->bias_var != PS_NO_VAR
                 ? ps_onnx_var_name(b, o->bias_var)
                 : ps_onnx_const_vec(b, ps_onnx_helper(b, *out, "beta_zeros"), c, 0.0f);
    ins[3] = ps_onnx_var_name(b, o->mean_var);
    ins[4] = ps_onnx_var_name(b, o->mvar_var);
    size_t vars[4] = {o->kernel_var, o->bias_var, o->mean_var, o->mvar_var};
    for (int i = 0; i < 4; i++)
        if (vars[i] != PS_NO_VAR)
            ps_onnx_init_f32(b, ins[i + 1], 1, d, ps_onnx_var_values(b, vars[i]), c, NULL, NULL);
    Onnx__NodeProto *n = ps_onnx_node(b, "BatchNormalization", *out, 5, ins);
    ps_onnx_attr_float(b, n, "epsilon", o->eps);
    return PS_OK;
}

static void describe(cJSON *e, const ps_model *m, size_t j, const ps_op *o) {
    (void)m;
    (void)j;
    cJSON_AddNumberToObject(e, "epsilon", o->eps);
    cJSON_AddNumberToObject(e, "momentum", o->momentum);
    cJSON_AddNumberToObject(e, "torch_momentum", 1.0 - (double)o->momentum);
}

static int torch(ps_torch_b *b, size_t j, const char *module) {
    const ps_op *o = &ps_torch_b_model(b)->ops[j];
    size_t c = o->in.c, *perm = NULL;
    int rc = PS_OK;
    if (o->in.h * o->in.w == 1) { /* on a vector: torch's BatchNorm1d over its flatten order */
        perm = malloc(c * sizeof *perm);
        if (!perm) return PS_ENOMEM;
        rc = ps_torch_b_order(b, o->in_t[0], perm);
        if (rc == PS_OK && ps_torch_is_identity(perm, c)) {
            free(perm);
            perm = NULL;
        }
    }
    if (rc == PS_OK) rc = ps_torch_b_add_vector(b, j, module, "weight", o->kernel_var, c, perm, 1);
    if (rc == PS_OK) rc = ps_torch_b_add_vector(b, j, module, "bias", o->bias_var, c, perm, 0);
    if (rc == PS_OK)
        rc = ps_torch_b_add_vector(b, j, module, "running_mean", o->mean_var, c, perm, 0);
    if (rc == PS_OK)
        rc = ps_torch_b_add_vector(b, j, module, "running_var", o->mvar_var, c, perm, 1);
    free(perm);
    ps_torch_tensor *e =
        rc == PS_OK ? ps_torch_b_add(b, j, module, "num_batches_tracked", PS_NO_VAR,
                                     "torch's counter: 0 (unused with a momentum)", 0, NULL)
                    : NULL;
    if (rc == PS_OK && !e) rc = PS_ENOMEM;
    if (e) {
        e->i64 = true;
        e->i64v = 0;
    }
    return rc;
}

static const char *keras(cJSON *c, const ps_op *o) {
    cJSON_AddNumberToObject(c, "axis", -1);
    cJSON_AddNumberToObject(c, "momentum", o->momentum);
    cJSON_AddNumberToObject(c, "epsilon", o->eps);
    cJSON_AddBoolToObject(c, "center", o->center);
    cJSON_AddBoolToObject(c, "scale", o->has_gamma);
    return "BatchNormalization";
}

const ps_layer_export ps_layer_export_bn = {
    .kind = OP_BN,
    .onnx_name = "batch_normalization",
    .onnx = onnx,
    .class_name = "BatchNormalization",
    .describe = describe,
    .torch = torch,
    .torch_keeps_order = true,
    .keras = keras,
};
