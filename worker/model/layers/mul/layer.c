/* Multiply: two inputs of one shape, element-wise; or an image by a 1x1 image
 * of its channels (squeeze-and-excitation), broadcast over the positions. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const no_keys[] = {NULL};
static const ps_layer_class classes[] = {{"Multiply", NULL, false, no_keys, no_keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)l;
    (void)keras;
    (void)act;
    if (b->nin != 2)
        return ps_build_fail(b, PS_EFORMAT, "%s: takes two inputs, got %zu", b->where, b->nin);
    ps_shape s[2] = {ps_tensor_shape(b->m, b->in_t[0]), ps_tensor_shape(b->m, b->in_t[1])};
    bool img[2] = {ps_tensor_image(b->m, b->in_t[0]), ps_tensor_image(b->m, b->in_t[1])};
    o->kind = OP_MUL;
    o->bcast = 0;
    if (s[0].h == s[1].h && s[0].w == s[1].w && s[0].c == s[1].c && img[0] == img[1])
        return PS_OK;
    for (size_t i = 0; i < 2; i++) { /* input i per channel, the other an image */
        ps_shape full = s[1 - i];
        if (s[i].h == 1 && s[i].w == 1 && s[i].c == full.c && img[1 - i]) {
            o->bcast = 1 + i;
            o->in = full;
            o->out = full;
            o->image = true;
            return PS_OK;
        }
    }
    return ps_build_fail(b, PS_EFORMAT,
                         "%s: inputs of shapes %zux%zux%zu and %zux%zux%zu (want one shape, or "
                         "an image and a 1x1 image of its channels)",
                         b->where, s[0].h, s[0].w, s[0].c, s[1].h, s[1].w, s[1].c);
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)in;
    (void)out;
    const float *a = ps_layer_tensor(p, o->in_t[0]), *b = ps_layer_tensor(p, o->in_t[1]);
    if (o->bcast == 0)
        ps_k_mul_forward_overwrite(p->m->dev, o->y, a, b, p->rows * ps_shape_numel(o->out));
    else /* x: the image, s: the channels */
        ps_k_mul_channels_forward_overwrite(p->m->dev, o->y, o->bcast == 2 ? a : b,
                                            o->bcast == 2 ? b : a, p->rows,
                                            o->out.h * o->out.w, o->out.c);
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    (void)in;
    ps_model *m = p->m;
    size_t t[2] = {o->in_t[0], o->in_t[1]}, n = p->rows * ps_shape_numel(o->out);
    const float *v[2] = {ps_layer_tensor(p, t[0]), ps_layer_tensor(p, t[1])};
    bool acc[2];
    float *d[2];
    for (int i = 0; i < 2; i++) /* both first: x * x gets its second part in the scratch */
        d[i] = ps_layer_din(m, t[i], &acc[i]);
    if (o->bcast == 0) {
        ps_k_mul_backward_overwrite(m->dev, d[0], d[1], dout, v[0], v[1], n);
    } else {
        int x = o->bcast == 2 ? 0 : 1, s = 1 - x; /* x: the image input, s: the channels */
        ps_k_mul_channels_backward_overwrite(m->dev, d[x], d[s], dout, v[x], v[s], p->rows,
                                             o->out.h * o->out.w, o->out.c);
    }
    for (int i = 0; i < 2; i++)
        if (d[i]) ps_layer_din_done(m, t[i], acc[i], p->rows * ps_shape_numel(ps_tensor_shape(m, t[i])));
    return PS_OK;
}

const ps_layer ps_layer_mul = {
    .kind = OP_MUL,
    .classes = classes,
    .nclasses = 1,
    .multi_input = true,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
