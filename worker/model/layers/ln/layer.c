/* LayerNormalization over the channels (the last axis) of each position:
 * gamma (scale) and beta (center), epsilon (default 1e-3, Keras'). The mean
 * and 1/sqrt(variance + epsilon) of each row are kept for the backward. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"axis", "epsilon", "center", "scale", NULL};
static const ps_layer_class classes[] = {{"LayerNormalization", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    int rc;
    if ((rc = ps_layer_parse_channel_axis(b, l, o->image)) ||
        (rc = ps_layer_parse_float(b, l, "epsilon", 1e-12, 1.0, 1e-3f, &o->eps)) ||
        (rc = ps_layer_parse_bool(b, l, "center", true, &o->center)) ||
        (rc = ps_layer_parse_bool(b, l, "scale", true, &o->has_gamma)))
        return rc;
    o->kind = OP_LN;
    return PS_OK;
}

static int vars(ps_model *m, ps_op *o, size_t li) {
    const char *k = "layer_normalization";
    int rc = PS_OK;
    if (o->has_gamma) {
        o->kernel_var = m->nvars;
        rc = ps_layer_add_var(m, o, k, li, "gamma", o->in.c, 0, 0, 0, INIT_ONES, true);
    }
    if (rc == PS_OK && o->center) {
        o->bias_var = m->nvars;
        rc = ps_layer_add_var(m, o, k, li, "beta", o->in.c, 0, 0, 0, INIT_ZEROS, true);
    }
    return rc;
}

static double nparams(const ps_op *o) {
    return 2 * (double)o->in.c;
}

/* aux: the rows' means, then their 1/sqrt(variance + eps), cap rows each */
static int alloc(ps_model *m, ps_op *o, size_t rows, size_t *ws_floats, size_t *max_stat_c) {
    (void)ws_floats;
    (void)max_stat_c;
    return ps_layer_alloc(m, 2 * rows * o->in.h * o->in.w, &o->aux);
}

static float *rstd_of(const ps_model *m, const ps_op *o) {
    return o->aux + m->cap * o->in.h * o->in.w;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_model *m = p->m;
    ps_k_ln_forward_overwrite(m->dev, o->y, o->aux, rstd_of(m, o), in,
                              ps_layer_param(m, o->kernel_var), ps_layer_param(m, o->bias_var),
                              p->rows * o->in.h * o->in.w, o->in.c, o->eps);
    return PS_OK;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    ps_model *m = p->m;
    size_t s = o->in_t[0];
    bool acc;
    float *din = ps_layer_din(m, s, &acc);
    /* the kernel always writes dx: the scratch buffer takes it for the input */
    ps_k_ln_backward_overwrite(m->dev, din ? din : ps_layer_scratch(m),
                               ps_layer_grad(m, o->kernel_var), ps_layer_grad(m, o->bias_var),
                               dout, in, o->aux, rstd_of(m, o), ps_layer_param(m, o->kernel_var),
                               p->rows * o->in.h * o->in.w, o->in.c);
    ps_layer_grads_final(m, o);
    if (din) ps_layer_din_done(m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_ln = {
    .kind = OP_LN,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .vars = vars,
    .nparams = nparams,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
};
