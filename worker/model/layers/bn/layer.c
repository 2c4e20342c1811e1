/* BatchNormalization over the channels: gamma, beta (scale, center), and the
 * moving mean and variance, non-trainable, updated as Keras does through
 * their own optimizer (SGD, learning rate 1: see stat_grads). A frozen one
 * (trainable: false) runs in inference mode, as Keras 3 does: the moving
 * statistics normalize, nothing is updated. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"axis", "momentum", "epsilon", "center", "scale", NULL};
static const ps_layer_class classes[] = {{"BatchNormalization", NULL, true, keys, keys}};

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    int rc;
    if ((rc = ps_layer_parse_channel_axis(b, l, o->image)) ||
        (rc = ps_layer_parse_float(b, l, "momentum", 0.0, 1.0, 0.99f, &o->momentum)) ||
        (rc = ps_layer_parse_float(b, l, "epsilon", 1e-12, 1.0, 1e-3f, &o->eps)) ||
        (rc = ps_layer_parse_bool(b, l, "center", true, &o->center)) ||
        (rc = ps_layer_parse_bool(b, l, "scale", true, &o->has_gamma)))
        return rc;
    const cJSON *mom = ps_layer_item(l, "momentum");
    o->stat_rate = (float)(1.0 - (mom ? mom->valuedouble : 0.99));
    o->kind = OP_BN;
    return PS_OK;
}

static int vars(ps_model *m, ps_op *o, size_t li) {
    const char *bn = "batch_normalization";
    size_t c = o->in.c;
    int rc = PS_OK;
    if (o->has_gamma) {
        o->kernel_var = m->nvars;
        rc = ps_layer_add_var(m, o, bn, li, "gamma", c, 0, 0, 0, INIT_ONES, true);
    }
    if (rc == PS_OK && o->center) {
        o->bias_var = m->nvars;
        rc = ps_layer_add_var(m, o, bn, li, "beta", c, 0, 0, 0, INIT_ZEROS, true);
    }
    o->mean_var = m->nvars;
    if (rc == PS_OK) rc = ps_layer_add_var(m, o, bn, li, "moving_mean", c, 0, 0, 0, INIT_ZEROS, false);
    o->mvar_var = m->nvars;
    if (rc == PS_OK)
        rc = ps_layer_add_var(m, o, bn, li, "moving_variance", c, 0, 0, 0, INIT_ONES, false);
    return rc;
}

static double nparams(const ps_op *o) {
    return 4 * (double)o->in.c;
}

static int alloc(ps_model *m, ps_op *o, size_t rows, size_t *ws_floats, size_t *max_stat_c) {
    (void)rows;
    (void)ws_floats;
    if (o->in.c > *max_stat_c) *max_stat_c = o->in.c;
    return ps_layer_alloc(m, 2 * o->in.c, &o->stat);
}

/* After a training forward: the moving statistics' slots in the gradients get
 * (1 - momentum) * (moving - batch statistic), so that SGD with learning rate
 * 1 (their optimizer) makes moving <- momentum * moving + (1 - momentum) *
 * batch statistic, Keras' update. */
static int stat_grads(ps_model *m, const ps_op *o) {
    size_t c = o->in.c;
    int rc = ps_k_copy_to_host(m->dev, m->h_stat, o->stat, 2 * c * sizeof(float));
    float k = o->stat_rate;
    size_t vs[2] = {o->mean_var, o->mvar_var};
    for (int s = 0; s < 2 && rc == PS_OK; s++) {
        size_t off = m->vars[vs[s]].offset;
        const float *p = m->params + off, *b = m->h_stat + (size_t)s * c;
        float *g = m->grads + off;
        for (size_t i = 0; i < c; i++)
            g[i] = k * (p[i] - b[i]);
        if (ps_k_dev_kind(m->dev) != PS_K_CPU)
            rc = ps_k_copy_to_dev(m->dev, m->d_grads + off, g, c * sizeof(float));
    }
    return rc;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_model *m = p->m;
    size_t n = p->rows * o->in.h * o->in.w;
    const float *gamma = ps_layer_param(m, o->kernel_var), *beta = ps_layer_param(m, o->bias_var);
    if (!p->training || o->frozen) {
        ps_k_bn_forward_infer_overwrite(m->dev, o->y, in, ps_layer_param(m, o->mean_var),
                                        ps_layer_param(m, o->mvar_var), gamma, beta, n, o->in.c,
                                        o->eps);
        return PS_OK;
    }
    ps_k_bn_forward_train_overwrite(m->dev, o->y, o->stat, o->stat + o->in.c, in, gamma, beta, n,
                                    o->in.c, o->eps);
    return p->stats ? stat_grads(m, o) : PS_OK;
}

/* Frozen (inference mode): y = gamma (x - moving mean) / sqrt(moving var + eps)
 * + beta is affine in x, so dx = dy gamma / sqrt(moving var + eps): the same
 * kernel over dy with a zero mean and no beta. */
static void backward_frozen(const ps_pass *p, ps_op *o, float *din, const float *dout) {
    ps_model *m = p->m;
    ps_k_zero(m->dev, o->stat, o->in.c * sizeof(float)); /* unused by a frozen forward */
    ps_k_bn_forward_infer_overwrite(m->dev, din, dout, o->stat, ps_layer_param(m, o->mvar_var),
                                    ps_layer_param(m, o->kernel_var), NULL,
                                    p->rows * o->in.h * o->in.w, o->in.c, o->eps);
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    ps_model *m = p->m;
    size_t s = o->in_t[0];
    bool acc;
    float *din = ps_layer_din(m, s, &acc);
    if (o->frozen) { /* din: not NULL, else the backward pass skips this op */
        backward_frozen(p, o, din, dout);
        ps_layer_din_done(m, s, acc, p->rows * ps_shape_numel(o->in));
        return PS_OK;
    }
    /* the kernel always writes dx: the scratch buffer takes it for the input */
    ps_k_bn_backward_overwrite(m->dev, din ? din : ps_layer_scratch(m),
                               ps_layer_grad(m, o->kernel_var), ps_layer_grad(m, o->bias_var),
                               dout, in, o->stat, o->stat + o->in.c,
                               ps_layer_param(m, o->kernel_var), p->rows * o->in.h * o->in.w,
                               o->in.c, o->eps);
    ps_layer_grads_final(m, o);
    if (din) ps_layer_din_done(m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_bn = {
    .kind = OP_BN,
    .classes = classes,
    .nclasses = 1,
    .parse = parse,
    .vars = vars,
    .nparams = nparams,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
};
