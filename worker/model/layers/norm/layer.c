/* Keras' Normalization (its adapted form): y = (x - mean) / max(sqrt(variance),
 * 1e-7) per channel, mean, variance and count being the statistics adapt()
 * left in the weights file. They are non-trainable variables that training
 * never changes: their gradient slots are held at zero, so their optimizer
 * (SGD, learning rate 1, as BatchNormalization's moving statistics) leaves
 * them as they are. count (Keras' int64 scalar) is kept as one float. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

#define NORM_EPS 1e-7f /* Keras' backend epsilon */

static const char *const keys[] = {"axis", "invert", "mean", "variance", NULL};
static const ps_layer_class classes[] = {{"Normalization", NULL, true, keys, keys}};

/* mean and variance given as config values make Keras' layer hold constants
 * instead of variables (no weights in its files): not supported. */
static int no_given_stats(ps_build *b, const cJSON *l) {
    static const char *const given[] = {"mean", "variance"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = ps_layer_item(l, given[i]);
        if (v && !cJSON_IsNull(v))
            return ps_build_fail(b, PS_EFORMAT,
                                 "%s: option '%s' given in the config is not supported (only "
                                 "null: the statistics adapt() leaves in the weights file)",
                                 b->where, given[i]);
    }
    return PS_OK;
}

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    bool invert;
    int rc;
    if ((rc = ps_layer_parse_channel_axis(b, l, o->image)) ||
        (rc = ps_layer_parse_bool(b, l, "invert", false, &invert)) || (rc = no_given_stats(b, l)))
        return rc;
    if (invert)
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: option 'invert' = true is not supported (only false)", b->where);
    o->kind = OP_NORM;
    o->eps = NORM_EPS;
    return PS_OK;
}

static int vars(ps_model *m, ps_op *o, size_t li) {
    const char *kind = "normalization";
    size_t c = o->in.c;
    o->mean_var = m->nvars;
    int rc = ps_layer_add_var(m, o, kind, li, "mean", c, 0, 0, 0, INIT_ZEROS, false);
    o->mvar_var = m->nvars;
    if (rc == PS_OK)
        rc = ps_layer_add_var(m, o, kind, li, "variance", c, 0, 0, 0, INIT_ONES, false);
    o->count_var = m->nvars;
    if (rc == PS_OK) rc = ps_layer_add_var(m, o, kind, li, "count", 1, 0, 0, 0, INIT_ZEROS, false);
    return rc;
}

static double nparams(const ps_op *o) {
    return 2 * (double)o->in.c + 1;
}

static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_model *m = p->m;
    ps_k_norm_forward_overwrite(m->dev, o->y, in, ps_layer_param(m, o->mean_var),
                                ps_layer_param(m, o->mvar_var), p->rows * o->in.h * o->in.w,
                                o->in.c, o->eps);
    return PS_OK;
}

/* The statistics' gradient slots (mean, variance, count: added one after the
 * other, so consecutive) are zeroed every step (on a CUDA device they start
 * undefined). */
static int zero_stat_grads(ps_model *m, const ps_op *o) {
    if (o->frozen) return PS_OK; /* frozen: no slots (ps_layer_grad is NULL) */
    size_t n = 2 * o->in.c + 1;
    int rc = ps_k_zero(m->dev, ps_layer_grad(m, o->mean_var), n * sizeof(float));
    ps_layer_grads_final(m, o);
    return rc;
}

static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    (void)in;
    ps_model *m = p->m;
    int rc = zero_stat_grads(m, o);
    if (rc != PS_OK) return rc;
    size_t s = o->in_t[0];
    bool acc;
    float *din = ps_layer_din(m, s, &acc);
    if (!din) return PS_OK;
    ps_k_norm_backward_overwrite(m->dev, din, dout, ps_layer_param(m, o->mvar_var),
                                 p->rows * o->in.h * o->in.w, o->in.c, o->eps);
    ps_layer_din_done(m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_norm = {
    .kind = OP_NORM,
    .classes = classes,
    .nclasses = 1,
    .grad_in_place = true,
    .parse = parse,
    .vars = vars,
    .nparams = nparams,
    .forward = forward,
    .backward = backward,
};
