/* Flatten and Reshape: a view of the input with another shape (NHWC rows are
 * already flat), no buffer of its own; the gradient passes through. */
#include <cjson/cJSON.h>
#include <string.h>

#include "layer.h"
#include "ps_error.h"

static const char *const no_keys[] = {NULL};
static const char *const reshape_keys[] = {"target_shape", NULL};
static const ps_layer_class classes[] = {
    {"Flatten", NULL, true, no_keys, no_keys},
    {"Reshape", NULL, true, reshape_keys, reshape_keys},
};

static int parse_reshape(ps_build *b, const cJSON *l, ps_op *o) {
    const cJSON *ts = ps_layer_item(l, "target_shape");
    int rank = cJSON_IsArray(ts) ? cJSON_GetArraySize(ts) : 0;
    size_t d[3] = {1, 1, 1}, prod = 1;
    bool ok = rank == 1 || rank == 3;
    for (int i = 0; ok && i < rank; i++) {
        ok = ps_layer_get_size(cJSON_GetArrayItem(ts, i), 1, PS_LAYER_MAX_UNITS, &d[i]);
        prod *= ok ? d[i] : 1;
    }
    if (!ok)
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: 'target_shape' must be [n] or [height, width, channels] of "
                             "positive integers",
                             b->where);
    if (prod != ps_shape_numel(o->in))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'target_shape' holds %zu values, the input %zu",
                             b->where, prod, ps_shape_numel(o->in));
    o->image = rank == 3;
    o->out = rank == 3 ? (ps_shape){d[0], d[1], d[2]} : (ps_shape){1, 1, d[0]};
    return PS_OK;
}

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)keras;
    (void)act;
    o->kind = OP_FLATTEN;
    o->seq = false; /* Keras' [1, dim] of an Embedding becomes [dim] */
    if (!strcmp(cls, "Reshape")) return parse_reshape(b, l, o);
    o->out = (ps_shape){1, 1, ps_shape_numel(o->in)};
    o->image = false;
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)p;
    (void)j;
    (void)o;
    *out = in; /* the same memory */
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    (void)in;
    ps_layer_pass_grad(p->m, o->in_t[0], dout, p->rows * ps_shape_numel(o->out));
    return PS_OK;
}

const ps_layer ps_layer_reshape = {
    .kind = OP_FLATTEN,
    .classes = classes,
    .nclasses = 2,
    .view = true,
    .grad_in_place = true,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
