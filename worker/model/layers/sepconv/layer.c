/* SeparableConv2D: a depthwise convolution (kernel_size, strides, padding,
 * depth_multiplier; no bias) into an inner tensor, then a pointwise 1x1
 * convolution to `filters` with the bias. Keras' variables, in its order:
 * depthwise_kernel [kh*kw*c_in, multiplier], pointwise_kernel
 * [c_in*multiplier, filters], bias. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"filters",          "kernel_size", "strides",  "padding",
                                   "depth_multiplier", "activation",  "use_bias",
                                   "depthwise_initializer", "pointwise_initializer", NULL};
static const ps_layer_class classes[] = {{"SeparableConv2D", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    const cJSON *f = ps_layer_item(l, "filters"), *dm = ps_layer_item(l, "depth_multiplier");
    size_t filters;
    int rc;
    if (!f) return ps_build_fail(b, PS_EFORMAT, "%s: missing key 'filters'", b->where);
    if (!ps_layer_get_size(f, 1, 65536, &filters))
        return ps_build_fail(b, PS_EFORMAT, "%s: 'filters' must be an integer in [1, 65536]",
                             b->where);
    o->mult = 1;
    if (dm && !ps_layer_get_size(dm, 1, 4096, &o->mult))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: 'depth_multiplier' must be an integer in [1, 4096]", b->where);
    if ((rc = ps_layer_parse_window(b, l, "kernel_size", true, o)) ||
        (rc = ps_layer_parse_activation(b, l, act)) ||
        (rc = ps_layer_parse_bool(b, l, "use_bias", true, &o->use_bias)) ||
        (rc = ps_layer_parse_init(b, l, "depthwise_initializer", &o->kinit)) ||
        (rc = ps_layer_parse_init(b, l, "pointwise_initializer", &o->kinit2)))
        return rc;
    o->kind = OP_SEPCONV;
    o->out.c = filters;
    return PS_OK;
}

static size_t inner_c(const ps_op *o) {
    return o->in.c * o->mult;
}

static int vars(ps_model *m, ps_op *o, size_t li) {
    const char *k = "separable_conv2d";
    size_t area = o->kh * o->kw, mid = inner_c(o);
    o->kernel_var = m->nvars;
    int rc = ps_layer_add_kernel(m, o, k, li, "depthwise_kernel", area * o->in.c, o->mult,
                                 area * o->in.c, area * o->mult, &o->kinit);
    o->kernel2_var = m->nvars;
    if (rc == PS_OK)
        rc = ps_layer_add_kernel(m, o, k, li, "pointwise_kernel", mid, o->out.c, mid, o->out.c,
                                 &o->kinit2);
    if (rc == PS_OK && o->use_bias) {
        o->bias_var = m->nvars;
        rc = ps_layer_add_var(m, o, k, li, "bias", o->out.c, 0, 0, 0, INIT_ZEROS, true);
    }
    return rc;
}

static double nparams(const ps_op *o) {
    double mid = (double)inner_c(o);
    return (double)(o->kh * o->kw) * mid + (mid + 1) * (double)o->out.c;
}

static ps_k_conv dw_plan(const ps_op *o, size_t rows) {
    ps_k_conv p;
    ps_k_dwconv_plan(&p, rows, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->mult, o->sh, o->sw,
                     o->same); /* cannot fail: the parser checked these sizes */
    return p;
}

static ps_k_conv pw_plan(const ps_op *o, size_t rows) {
    ps_k_conv p;
    ps_k_conv_plan(&p, rows, o->out.h, o->out.w, inner_c(o), 1, 1, o->out.c, 1, 1, false);
    p.prec = o->prec;
    return p;
}

static int alloc(ps_model *m, ps_op *o, size_t rows, size_t *ws_floats, size_t *max_stat_c) {
    (void)max_stat_c;
    ps_k_conv p = pw_plan(o, rows);
    size_t need = ps_k_conv_workspace(&p), n = rows * o->out.h * o->out.w * inner_c(o);
    if (need > *ws_floats) *ws_floats = need;
    int rc = ps_layer_alloc(m, n, &o->aux);
    return rc == PS_OK ? ps_layer_alloc(m, n, &o->daux) : rc;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_model *m = p->m;
    ps_k_conv dw = dw_plan(o, p->rows), pw = pw_plan(o, p->rows);
    ps_k_dwconv2d_forward_overwrite(m->dev, &dw, o->aux, in, ps_layer_param(m, o->kernel_var),
                                    NULL);
    ps_k_conv2d_forward_overwrite(m->dev, &pw, o->y, o->aux, ps_layer_param(m, o->kernel2_var),
                                  ps_layer_param(m, o->bias_var), m->ws);
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    ps_model *m = p->m;
    size_t s = o->in_t[0];
    ps_k_conv dw = dw_plan(o, p->rows), pw = pw_plan(o, p->rows);
    ps_k_conv2d_backward_overwrite(m->dev, &pw, o->daux, ps_layer_grad(m, o->kernel2_var),
                                   ps_layer_grad(m, o->bias_var), dout, o->aux,
                                   ps_layer_param(m, o->kernel2_var), m->ws);
    bool acc;
    float *din = ps_layer_din(m, s, &acc);
    ps_k_dwconv2d_backward_overwrite(m->dev, &dw, din, ps_layer_grad(m, o->kernel_var), NULL,
                                     o->daux, in, ps_layer_param(m, o->kernel_var));
    ps_layer_grads_final(m, o);
    if (din) ps_layer_din_done(m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_sepconv = {
    .kind = OP_SEPCONV,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .vars = vars,
    .nparams = nparams,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
};
