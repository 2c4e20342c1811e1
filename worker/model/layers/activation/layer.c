/* Activation and ReLU, and the activation fused into Dense, Conv2D and
 * DepthwiseConv2D (its own op after them): element-wise, in place when it
 * may be; a final softmax or sigmoid is folded into the loss (model_spec.c). */
#include <cjson/cJSON.h>
#include <string.h>

#include "layer.h"
#include "layers.h"
#include "ps_error.h"

static const char *const act_keys[] = {"activation", NULL};
static const char *const relu_spec_keys[] = {"max_value", NULL};
static const char *const relu_keras_keys[] = {"max_value", "negative_slope", "threshold", NULL};
static const ps_layer_class classes[] = {
    {"Activation", NULL, true, act_keys, act_keys},
    {"ReLU", NULL, true, relu_spec_keys, relu_keras_keys},
};

static int parse_relu(ps_build *b, const cJSON *l, int *act) {
    const cJSON *mv = ps_layer_item(l, "max_value"), *ns = ps_layer_item(l, "negative_slope"),
                *th = ps_layer_item(l, "threshold");
    if (ns && !(cJSON_IsNumber(ns) && ns->valuedouble == 0.0))
        return ps_build_fail(b, PS_EFORMAT, "%s: option 'negative_slope' is not supported (only 0)",
                             b->where);
    if (th && !(cJSON_IsNumber(th) && th->valuedouble == 0.0))
        return ps_build_fail(b, PS_EFORMAT, "%s: option 'threshold' is not supported (only 0)",
                             b->where);
    *act = PS_K_ACT_RELU;
    if (mv && cJSON_IsNumber(mv) && mv->valuedouble == 6.0)
        *act = PS_K_ACT_RELU6;
    else if (mv && !cJSON_IsNull(mv))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: option 'max_value' is not supported (only null or 6)", b->where);
    return PS_OK;
}

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)keras;
    int rc, a;
    if (!strcmp(cls, "ReLU")) {
        rc = parse_relu(b, l, &a);
    } else {
        if (!ps_layer_item(l, "activation"))
            return ps_build_fail(b, PS_EFORMAT, "%s: missing key 'activation'", b->where);
        rc = ps_layer_parse_activation(b, l, &a);
    }
    if (rc != PS_OK) return rc;
    o->kind = OP_ACT;
    o->act = a;
    o->use_bias = false;
    *act = PS_K_ACT_LINEAR;
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_activation_forward(p->m->dev, (ps_k_act)o->act, o->y, in,
                          p->rows * ps_shape_numel(o->out));
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    size_t s = o->in_t[0];
    bool acc;
    float *din = ps_layer_din(p->m, s, &acc);
    if (!din) return PS_OK;
    ps_k_act_backward_overwrite(p->m->dev, (ps_k_act)o->act, din, dout, in, o->outp,
                                p->rows * ps_shape_numel(o->out));
    ps_layer_din_done(p->m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_activation = {
    .kind = OP_ACT,
    .classes = classes,
    .nclasses = 2,
    .grad_in_place = true,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
