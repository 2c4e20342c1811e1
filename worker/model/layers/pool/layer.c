/* MaxPooling2D and AveragePooling2D (and their aliases MaxPool2D, AvgPool2D):
 * a window (default 2x2) with strides (default the window), "valid" or
 * "same" padding; max pooling keeps each window's winner for the backward. */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"pool_size", "strides", "padding", NULL};
static const ps_layer_class max_classes[] = {
    {"MaxPooling2D", NULL, true, keys, keys},
    {"MaxPool2D", "MaxPooling2D", true, keys, keys},
};
static const ps_layer_class avg_classes[] = {
    {"AveragePooling2D", NULL, true, keys, keys},
    {"AvgPool2D", "AveragePooling2D", true, keys, keys},
};

static int parse(ps_build *b, const ps_op_kind kind, const cJSON *l, ps_op *o) {
    int rc = ps_layer_parse_window(b, l, "pool_size", false, o);
    o->kind = kind;
    return rc;
}

static int parse_max(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o,
                     int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    return parse(b, OP_MAXPOOL, l, o);
}

static int parse_avg(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o,
                     int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    return parse(b, OP_AVGPOOL, l, o);
}

static ps_k_pool plan(const ps_op *o, size_t rows) {
    ps_k_pool p;
    ps_k_pool_plan(&p, rows, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->sh, o->sw, o->same);
    return p;
}

static int alloc_max(ps_model *m, ps_op *o, size_t rows, size_t *ws_floats, size_t *max_stat_c) {
    (void)ws_floats;
    (void)max_stat_c;
    return ps_layer_alloc(m, rows * ps_shape_numel(o->out), &o->arg); /* the winners */
}

static int forward_max(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_pool c = plan(o, p->rows);
    ps_k_maxpool_forward_overwrite(p->m->dev, &c, o->y, o->arg, in);
    return PS_OK;
}

static int forward_avg(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_pool c = plan(o, p->rows);
    ps_k_avgpool_forward_overwrite(p->m->dev, &c, o->y, in);
    return PS_OK;
}

static int backward_max(const ps_pass *p, size_t j, ps_op *o, const float *in,
                        const float *dout) {
    (void)j;
    (void)in;
    size_t s = o->in_t[0];
    ps_k_pool c = plan(o, p->rows);
    bool acc;
    float *din = ps_layer_din(p->m, s, &acc);
    if (!din) return PS_OK;
    ps_k_maxpool_backward_overwrite(p->m->dev, &c, din, dout, o->arg);
    ps_layer_din_done(p->m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

static int backward_avg(const ps_pass *p, size_t j, ps_op *o, const float *in,
                        const float *dout) {
    (void)j;
    (void)in;
    size_t s = o->in_t[0];
    ps_k_pool c = plan(o, p->rows);
    bool acc;
    float *din = ps_layer_din(p->m, s, &acc);
    if (!din) return PS_OK;
    ps_k_avgpool_backward_overwrite(p->m->dev, &c, din, dout);
    ps_layer_din_done(p->m, s, acc, p->rows * ps_shape_numel(o->in));
    return PS_OK;
}

const ps_layer ps_layer_maxpool = {
    .kind = OP_MAXPOOL,
    .classes = max_classes,
    .nclasses = 2,
    .parse = parse_max,
    .alloc = alloc_max,
    .forward = forward_max,
    .backward = backward_max,
};

const ps_layer ps_layer_avgpool = {
    .kind = OP_AVGPOOL,
    .classes = avg_classes,
    .nclasses = 2,
    .parse = parse_avg,
    .forward = forward_avg,
    .backward = backward_avg,
};
