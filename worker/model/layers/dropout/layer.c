/* Dropout: in training, each value zeroed with probability rate and the
 * others scaled by 1 / (1 - rate), the mask drawn from (seed, step, op); the
 * input itself otherwise. Keras' noise_shape (None, 1, 1, 1) (or (None, 1) on a
 * flat tensor) drops whole samples: EfficientNet's drop connect. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"rate", NULL};
static const char *const keras_keys[] = {"rate", "noise_shape", NULL};

/* null, or a batch axis (null) then ones: one decision per sample */
static bool per_sample(const cJSON *ns, bool image) {
    if (!cJSON_IsArray(ns) || cJSON_GetArraySize(ns) != (image ? 4 : 2)) return false;
    const cJSON *v;
    int k = 0;
    cJSON_ArrayForEach(v, ns) {
        if (k++ == 0 ? !cJSON_IsNull(v) : !(cJSON_IsNumber(v) && v->valuedouble == 1)) return false;
    }
    return true;
}
static const ps_layer_class classes[] = {{"Dropout", NULL, true, keys, keras_keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    const cJSON *r = ps_layer_item(l, "rate");
    if (!cJSON_IsNumber(r) || !(r->valuedouble >= 0.0 && r->valuedouble < 1.0))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'rate' must be a number in [0, 1)", b->where);
    const cJSON *ns = ps_layer_item(l, "noise_shape");
    o->per_sample = ns && !cJSON_IsNull(ns);
    if (o->per_sample && !per_sample(ns, o->image))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: option 'noise_shape' is not supported (only null, or [null, 1, "
                             "1, 1] on an image / [null, 1] on a vector: whole samples)",
                             b->where);
    o->kind = OP_DROPOUT;
    o->rate = (float)r->valuedouble;
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    if (!p->training || o->rate <= 0.0f) {
        *out = in;
        return PS_OK;
    }
    size_t group = o->per_sample ? ps_shape_numel(o->out) : 1;
    ps_k_dropout_group_forward_overwrite(p->m->dev, o->y, in, p->rows * ps_shape_numel(o->out),
                                         group, o->rate, ps_layer_dropout_seed(p->m, j));
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    size_t s = o->in_t[0], n = p->rows * ps_shape_numel(o->out);
    if (o->outp == in) {
        ps_layer_pass_grad(p->m, s, dout, n);
        return PS_OK;
    }
    bool acc;
    float *din = ps_layer_din(p->m, s, &acc);
    if (!din) return PS_OK;
    ps_k_dropout_group_backward_overwrite(p->m->dev, din, dout, n,
                                          o->per_sample ? ps_shape_numel(o->out) : 1, o->rate,
                                          ps_layer_dropout_seed(p->m, j));
    ps_layer_din_done(p->m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_dropout = {
    .kind = OP_DROPOUT,
    .classes = classes,
    .nclasses = 1,
    .grad_in_place = true,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
