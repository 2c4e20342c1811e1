/* Rescaling: y = x * scale + offset (scalars), as Keras' preprocessing layer
 * (1/255; 1/127.5 and -1 for [-1, 1]). */
#include <cjson/cJSON.h>
#include <math.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"scale", "offset", NULL};
static const ps_layer_class classes[] = {{"Rescaling", NULL, true, keys, keys}};

static int number(ps_build *b, const cJSON *l, const char *key, float dflt, float *out) {
    const cJSON *v = ps_layer_item(l, key);
    *out = dflt;
    if (!v) return PS_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: '%s' must be a number (one for every channel is not supported)",
                             b->where, key);
    *out = (float)v->valuedouble;
    return PS_OK;
}

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    int rc;
    if (!ps_layer_item(l, "scale"))
        return ps_build_fail(b, PS_EFORMAT, "%s: missing key 'scale'", b->where);
    if ((rc = number(b, l, "scale", 1.0f, &o->scale)) ||
        (rc = number(b, l, "offset", 0.0f, &o->offset)))
        return rc;
    o->kind = OP_RESCALE;
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_rescale_forward_overwrite(p->m->dev, o->y, in, o->scale, o->offset,
                                   p->rows * ps_shape_numel(o->out));
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    (void)in;
    size_t s = o->in_t[0], n = p->rows * ps_shape_numel(o->out);
    bool acc;
    float *din = ps_layer_din(p->m, s, &acc);
    if (!din) return PS_OK;
    ps_k_rescale_backward_overwrite(p->m->dev, din, dout, o->scale, n);
    ps_layer_din_done(p->m, s, acc, n);
    return PS_OK;
}

const ps_layer ps_layer_rescale = {
    .kind = OP_RESCALE,
    .classes = classes,
    .nclasses = 1,
    .grad_in_place = true,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
