/* Add and Concatenate (along the channels): two or more inputs of one shape
 * (Concatenate: but the channels). */
#include <cjson/cJSON.h>
#include <string.h>

#include "layer.h"
#include "ps_error.h"

static const char *const no_keys[] = {NULL};
static const char *const concat_keys[] = {"axis", NULL};
static const ps_layer_class add_classes[] = {{"Add", NULL, true, no_keys, no_keys}};
static const ps_layer_class concat_classes[] = {
    {"Concatenate", NULL, true, concat_keys, concat_keys}};

static int parse_merge(ps_build *b, const cJSON *l, bool concat, ps_op *o) {
    if (b->nin < 2)
        return ps_build_fail(b, PS_EFORMAT, "%s: needs at least two inputs, got %zu", b->where,
                             b->nin);
    bool image = ps_tensor_image(b->m, b->in_t[0]);
    if (concat && o->seq) { /* Embedding outputs, Keras' [1, dim]: the values' axis is 2 */
        const cJSON *a = ps_layer_item(l, "axis");
        if (a && !(cJSON_IsNumber(a) && (a->valuedouble == -1 || a->valuedouble == 2)))
            return ps_build_fail(b, PS_EFORMAT,
                                 "%s: option 'axis' is not supported: only the values' axis (-1 "
                                 "or 2) of Embedding outputs [1, dim]",
                                 b->where);
    } else if (concat) {
        int rc = ps_layer_parse_channel_axis(b, l, image);
        if (rc != PS_OK) return rc;
    }
    o->out.c = 0;
    for (size_t i = 0; i < b->nin; i++) {
        ps_shape s = ps_tensor_shape(b->m, b->in_t[i]);
        bool same = s.h == o->in.h && s.w == o->in.w && (concat || s.c == o->in.c);
        size_t t = b->in_t[i];
        bool seq = t ? b->m->ops[t - 1].seq : false;
        if (seq != o->seq)
            return ps_build_fail(b, PS_EFORMAT,
                                 "%s: input %zu is %s, input 0 %s: Flatten the Embedding outputs",
                                 b->where, i, seq ? "an Embedding's [1, dim]" : "a vector",
                                 o->seq ? "an Embedding's [1, dim]" : "a vector");
        if (!same || ps_tensor_image(b->m, b->in_t[i]) != image)
            return ps_build_fail(b, PS_EFORMAT,
                                 "%s: input %zu has shape %zux%zux%zu, input 0 %zux%zux%zu%s",
                                 b->where, i, s.h, s.w, s.c, o->in.h, o->in.w, o->in.c,
                                 concat ? " (only the channels may differ)" : "");
        o->out.c += s.c;
    }
    if (!concat) o->out.c = o->in.c;
    o->kind = concat ? OP_CONCAT : OP_ADD;
    return PS_OK;
}

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)keras;
    (void)act;
    return parse_merge(b, l, !strcmp(cls, "Concatenate"), o);
}

static int forward_add(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    size_t n = p->rows * ps_shape_numel(o->out);
    ps_k_add_overwrite(p->m->dev, o->y, in, ps_layer_tensor(p, o->in_t[1]), n);
    for (size_t i = 2; i < o->nin; i++)
        ps_k_add_acc(p->m->dev, o->y, ps_layer_tensor(p, o->in_t[i]), n);
    return PS_OK;
}

static int backward_add(const ps_pass *p, size_t j, ps_op *o, const float *in,
                        const float *dout) {
    (void)j;
    (void)in;
    for (size_t i = 0; i < o->nin; i++)
        ps_layer_pass_grad(p->m, o->in_t[i], dout, p->rows * ps_shape_numel(o->out));
    return PS_OK;
}

static int forward_concat(const ps_pass *p, size_t j, ps_op *o, const float *in,
                          const float **out) {
    (void)j;
    (void)in;
    (void)out;
    size_t hw = o->in.h * o->in.w;
    for (size_t i = 0, off = 0; i < o->nin; i++) {
        size_t c = ps_tensor_shape(p->m, o->in_t[i]).c;
        ps_k_concat_cols_overwrite(p->m->dev, o->y, ps_layer_tensor(p, o->in_t[i]), p->rows * hw,
                                   o->out.c, off, c);
        off += c;
    }
    return PS_OK;
}

static int backward_concat(const ps_pass *p, size_t j, ps_op *o, const float *in,
                           const float *dout) {
    (void)j;
    (void)in;
    size_t hw = o->in.h * o->in.w;
    for (size_t i = 0, off = 0; i < o->nin; i++) {
        size_t si = o->in_t[i], c = ps_tensor_shape(p->m, si).c;
        bool acc = false;
        float *d = ps_layer_din(p->m, si, &acc);
        if (d) {
            ps_k_split_cols_overwrite(p->m->dev, d, dout, p->rows * hw, o->out.c, off, c);
            ps_layer_din_done(p->m, si, acc, p->rows * hw * c);
        }
        off += c;
    }
    return PS_OK;
}

const ps_layer ps_layer_add = {
    .kind = OP_ADD,
    .classes = add_classes,
    .nclasses = 1,
    .multi_input = true,
    .grad_in_place = true,
    .parse = parse,
    .forward = forward_add,
    .backward = backward_add,
};

const ps_layer ps_layer_concat = {
    .kind = OP_CONCAT,
    .classes = concat_classes,
    .nclasses = 1,
    .multi_input = true,
    .parse = parse,
    .forward = forward_concat,
    .backward = backward_concat,
};
