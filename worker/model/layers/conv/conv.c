/* Conv2D: kernel [kh*kw*c_in, filters] (Keras' [kh, kw, c_in, filters] as
 * rows), stride, "same" or "valid" padding, im2col and GEMM (kernels/). */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"filters", "kernel_size", "strides", "padding",
                                   "activation", "use_bias", "kernel_initializer", NULL};
static const ps_layer_class classes[] = {{"Conv2D", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    const cJSON *f = ps_layer_item(l, "filters");
    size_t filters;
    int rc;
    if (!f) return ps_build_fail(b, PS_EFORMAT, "%s: missing key 'filters'", b->where);
    if (!ps_layer_get_size(f, 1, 65536, &filters))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'filters' must be an integer in [1, 65536]",
                             b->where);
    if ((rc = ps_layer_parse_window(b, l, "kernel_size", true, o)) ||
        (rc = ps_layer_parse_activation(b, l, act)) ||
        (rc = ps_layer_parse_bool(b, l, "use_bias", true, &o->use_bias)) ||
        (rc = ps_layer_parse_init(b, l, "kernel_initializer", &o->kinit)))
        return rc;
    o->kind = OP_CONV;
    o->out.c = filters;
    return PS_OK;
}

static int vars(ps_model *m, ps_op *o, size_t li) {
    size_t area = o->kh * o->kw;
    o->kernel_var = m->nvars;
    int rc = ps_layer_add_kernel(m, o, "conv2d", li, "kernel", area * o->in.c, o->out.c,
                                 area * o->in.c, area * o->out.c, &o->kinit);
    if (rc == PS_OK && o->use_bias) {
        o->bias_var = m->nvars;
        rc = ps_layer_add_var(m, o, "conv2d", li, "bias", o->out.c, 0, 0, 0, INIT_ZEROS, true);
    }
    return rc;
}

static double nparams(const ps_op *o) {
    return ((double)(o->kh * o->kw) * (double)o->in.c + 1) * (double)o->out.c;
}

static ps_k_conv plan(const ps_op *o, size_t rows) {
    ps_k_conv p;
    ps_k_conv_plan(&p, rows, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->out.c, o->sh, o->sw,
                   o->same); /* cannot fail: the parser checked these sizes */
    p.prec = o->prec;
    return p;
}

static int alloc(ps_model *m, ps_op *o, size_t rows, size_t *ws_floats, size_t *max_stat_c) {
    (void)m;
    (void)max_stat_c;
    ps_k_conv p = plan(o, rows);
    size_t need = ps_k_conv_workspace(&p);
    if (need > *ws_floats) *ws_floats = need;
    return PS_OK;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_conv c = plan(o, p->rows);
    ps_k_conv2d_forward_overwrite(p->m->dev, &c, o->y, in, ps_layer_param(p->m, o->kernel_var),
                                  ps_layer_param(p->m, o->bias_var), p->m->ws);
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    ps_model *m = p->m;
    size_t s = o->in_t[0];
    ps_k_conv c = plan(o, p->rows);
    bool acc;
    float *din = ps_layer_din(m, s, &acc);
    ps_k_conv2d_backward_overwrite(m->dev, &c, din, ps_layer_grad(m, o->kernel_var),
                                   ps_layer_grad(m, o->bias_var), dout, in,
                                   ps_layer_param(m, o->kernel_var), m->ws);
    ps_layer_grads_final(m, o);
    if (din) ps_layer_din_done(m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_conv = {
    .kind = OP_CONV,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .vars = vars,
    .nparams = nparams,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
};
