/* DepthwiseConv2D: each input channel convolved with its own depth_multiplier
 * filters; kernel [kh*kw*c_in, multiplier] (Keras' [kh, kw, c_in, multiplier]). */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"kernel_size",      "strides",    "padding",
                                   "depth_multiplier", "activation", "use_bias",
                                   "depthwise_initializer", NULL};
static const ps_layer_class classes[] = {{"DepthwiseConv2D", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    const cJSON *dm = ps_layer_item(l, "depth_multiplier");
    int rc;
    o->mult = 1;
    if (dm && !ps_layer_get_size(dm, 1, 4096, &o->mult))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: 'depth_multiplier' must be an integer in [1, 4096]", b->where);
    if ((rc = ps_layer_parse_window(b, l, "kernel_size", true, o)) ||
        (rc = ps_layer_parse_activation(b, l, act)) ||
        (rc = ps_layer_parse_bool(b, l, "use_bias", true, &o->use_bias)) ||
        (rc = ps_layer_parse_init(b, l, "depthwise_initializer", &o->kinit)))
        return rc;
    o->kind = OP_DWCONV;
    o->out.c = o->in.c * o->mult;
    return PS_OK;
}

static int vars(ps_model *m, ps_op *o, size_t li) {
    size_t area = o->kh * o->kw;
    o->kernel_var = m->nvars;
    /* Keras 3 calls it "kernel", Keras 2 and the project's specs "depthwise_kernel" */
    const char *what = m->keras && !m->keras2 ? "kernel" : "depthwise_kernel";
    int rc = ps_layer_add_kernel(m, o, "depthwise_conv2d", li, what, area * o->in.c, o->mult,
                                 area * o->in.c, area * o->mult, &o->kinit);
    if (rc == PS_OK && o->use_bias) {
        o->bias_var = m->nvars;
        rc = ps_layer_add_var(m, o, "depthwise_conv2d", li, "bias", o->out.c, 0, 0, 0, INIT_ZEROS,
                              true);
    }
    return rc;
}

static double nparams(const ps_op *o) {
    return ((double)(o->kh * o->kw) + 1) * (double)o->out.c;
}

static ps_k_conv plan(const ps_op *o, size_t rows) {
    ps_k_conv p;
    ps_k_dwconv_plan(&p, rows, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->mult, o->sh, o->sw,
                     o->same); /* cannot fail: the parser checked these sizes */
    return p;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_conv c = plan(o, p->rows);
    ps_k_dwconv2d_forward_overwrite(p->m->dev, &c, o->y, in, ps_layer_param(p->m, o->kernel_var),
                                    ps_layer_param(p->m, o->bias_var));
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    ps_model *m = p->m;
    size_t s = o->in_t[0];
    ps_k_conv c = plan(o, p->rows);
    bool acc;
    float *din = ps_layer_din(m, s, &acc);
    ps_k_dwconv2d_backward_overwrite(m->dev, &c, din, ps_layer_grad(m, o->kernel_var),
                                     ps_layer_grad(m, o->bias_var), dout, in,
                                     ps_layer_param(m, o->kernel_var));
    ps_layer_grads_final(m, o);
    if (din) ps_layer_din_done(m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_dwconv = {
    .kind = OP_DWCONV,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .vars = vars,
    .nparams = nparams,
    .forward = forward,
    .backward = backward,
};
