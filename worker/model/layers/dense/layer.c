/* Dense: out[B, units] = in[B, n] @ kernel[n, units] + bias (Keras' kernel
 * layout [in, out]); the input is read flattened. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "layers.h"
#include "ps_error.h"

static const char *const keys[] = {"units", "activation", "use_bias", "kernel_initializer", NULL};
static const ps_layer_class classes[] = {{"Dense", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    const cJSON *u = ps_layer_item(l, "units");
    size_t units;
    int rc;
    if (!u) return ps_build_fail(b, PS_EFORMAT, "%s: missing key 'units'", b->where);
    if (!ps_layer_get_size(u, 1, PS_LAYER_MAX_UNITS, &units))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'units' must be an integer in [1, %u]", b->where,
                             PS_LAYER_MAX_UNITS);
    if (keras && o->in.h * o->in.w != 1)
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: a Dense layer on a %zux%zux%zu input (Keras applies it to "
                             "the last axis) is not supported: put Flatten or "
                             "GlobalAveragePooling2D before it",
                             b->where, o->in.h, o->in.w, o->in.c);
    if ((rc = ps_layer_parse_activation(b, l, act)) ||
        (rc = ps_layer_parse_bool(b, l, "use_bias", true, &o->use_bias)) ||
        (rc = ps_layer_parse_init(b, l, "kernel_initializer", &o->kinit)))
        return rc;
    o->kind = OP_DENSE;
    o->out = (ps_shape){1, 1, units};
    o->image = false; /* Dense reads its input flattened */
    return PS_OK;
}

static int vars(ps_model *m, ps_op *o, size_t li) {
    size_t in = ps_shape_numel(o->in);
    o->kernel_var = m->nvars;
    int rc = ps_layer_add_kernel(m, o, "dense", li, "kernel", in, o->out.c, in, o->out.c,
                                 &o->kinit);
    if (rc == PS_OK && o->use_bias) {
        o->bias_var = m->nvars;
        rc = ps_layer_add_var(m, o, "dense", li, "bias", o->out.c, 0, 0, 0, INIT_ZEROS, true);
    }
    return rc;
}

static double nparams(const ps_op *o) {
    return ((double)ps_shape_numel(o->in) + 1) * (double)o->out.c;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    const float *w = ps_layer_param(p->m, o->kernel_var), *bias = ps_layer_param(p->m, o->bias_var);
    size_t n = ps_shape_numel(o->in);
    if (o->prec == PS_K_PREC_F32) {
        ps_dense_forward(p->m->dev, o->y, in, w, bias, p->rows, n, o->out.c);
        return PS_OK;
    }
    return ps_dense_forward_ex(p->m->dev, o->prec, o->y, in, w, bias, p->rows, n, o->out.c);
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    ps_model *m = p->m;
    size_t s = o->in_t[0], n = ps_shape_numel(o->in);
    bool acc;
    float *din = ps_layer_din(m, s, &acc);
    float *dw = ps_layer_grad(m, o->kernel_var), *db = ps_layer_grad(m, o->bias_var);
    const float *w = ps_layer_param(m, o->kernel_var);
    int rc = PS_OK;
    if (o->prec == PS_K_PREC_F32)
        ps_dense_backward_overwrite(m->dev, din, dw, db, dout, in, w, p->rows, n, o->out.c);
    else
        rc = ps_dense_backward_overwrite_ex(m->dev, o->prec, din, dw, db, dout, in, w, p->rows, n,
                                            o->out.c);
    ps_layer_grads_final(m, o);
    if (din) ps_layer_din_done(m, s, acc, p->rows * n);
    return rc;
}

const ps_layer ps_layer_dense = {
    .kind = OP_DENSE,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .vars = vars,
    .nparams = nparams,
    .forward = forward,
    .backward = backward,
};
