/* GlobalAveragePooling2D: each channel's mean over the image; the output is
 * flat, or with keepdims a 1x1 image (the same values: squeeze-and-excitation
 * blocks and MobileNet's head convolve it). */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"keepdims", NULL};
static const ps_layer_class classes[] = {{"GlobalAveragePooling2D", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    bool keep;
    int rc;
    if ((rc = ps_layer_need_image(b)) || (rc = ps_layer_parse_bool(b, l, "keepdims", false, &keep)))
        return rc;
    o->kind = OP_GAP;
    o->out = (ps_shape){1, 1, o->in.c};
    o->image = keep;
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_gap_forward_overwrite(p->m->dev, o->y, in, p->rows, o->in.h * o->in.w, o->in.c);
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    (void)in;
    size_t s = o->in_t[0];
    bool acc;
    float *din = ps_layer_din(p->m, s, &acc);
    if (!din) return PS_OK;
    ps_k_gap_backward_overwrite(p->m->dev, din, dout, p->rows, o->in.h * o->in.w, o->in.c);
    ps_layer_din_done(p->m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_gap = {
    .kind = OP_GAP,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
