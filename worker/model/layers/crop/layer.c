/* Cropping2D: rows and columns removed at the image's edges: n, [rows, cols]
 * or [[top, bottom], [left, right]]. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"cropping", NULL};
static const ps_layer_class classes[] = {{"Cropping2D", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    int rc;
    if ((rc = ps_layer_need_image(b)) || (rc = ps_layer_parse_edges(b, l, "cropping", 0, o->pad)))
        return rc;
    if (o->pad[0] + o->pad[1] >= o->in.h || o->pad[2] + o->pad[3] >= o->in.w)
        return ps_build_fail(b, PS_EFORMAT, "%s: cropping %zu+%zu x %zu+%zu leaves nothing of %zux%zu",
                             b->where, o->pad[0], o->pad[1], o->pad[2], o->pad[3], o->in.h,
                             o->in.w);
    o->kind = OP_CROP;
    o->out.h = o->in.h - o->pad[0] - o->pad[1];
    o->out.w = o->in.w - o->pad[2] - o->pad[3];
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_crop2d_forward_overwrite(p->m->dev, o->y, in, p->rows, o->in.h, o->in.w, o->in.c,
                                  o->pad[0], o->pad[1], o->pad[2], o->pad[3]);
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    (void)in;
    size_t s = o->in_t[0];
    bool acc;
    float *din = ps_layer_din(p->m, s, &acc);
    if (!din) return PS_OK;
    ps_k_crop2d_backward_overwrite(p->m->dev, din, dout, p->rows, o->in.h, o->in.w, o->in.c,
                                   o->pad[0], o->pad[1], o->pad[2], o->pad[3]);
    ps_layer_din_done(p->m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_crop = {
    .kind = OP_CROP,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
