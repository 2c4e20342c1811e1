/* Dot: the inner product of two vectors of each sample (Keras' Dot with axes
 * over the values, normalize false), out[b] = sum over c of a[b, c] x[b, c];
 * a matrix factorisation's score. On Embedding outputs of Keras' shape
 * [1, dim] the value axis is 2 (or -1). */
#include <cjson/cJSON.h>

#include "layer.h"
#include "ps_error.h"

static const char *const keys[] = {"axes", "normalize", NULL};
static const ps_layer_class classes[] = {{"Dot", NULL, true, keys, keys}};

/* "axes": n or [n, n], the value axis of both inputs (1 or -1 on vectors, 2 or
 * -1 on Keras' [1, dim]). */
static int parse_axes(ps_build *b, const cJSON *l, bool seq) {
    const cJSON *a = ps_layer_item(l, "axes");
    int want = seq ? 2 : 1;
    if (!a)
        return ps_build_fail(b, PS_EFORMAT, "%s: missing key 'axes' (%d or -1)", b->where, want);
    bool ok = true;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 1;
    for (int i = 0; i < n && ok; i++) {
        const cJSON *v = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, i) : a;
        ok = cJSON_IsNumber(v) && (v->valuedouble == -1 || v->valuedouble == want);
    }
    if (ok && (n == 1 || n == 2)) return PS_OK;
    return ps_build_fail(
        b, PS_EFORMAT, "%s: option 'axes' is not supported: only the values' axis (%d or -1)%s",
        b->where, want, seq ? " of Embedding outputs [1, dim]" : " of vectors [dim]");
}

static int parse(ps_build *b, const char *cls, const cJSON *l, bool keras, ps_op *o, int *act) {
    (void)cls;
    (void)keras;
    (void)act;
    if (b->nin != 2)
        return ps_build_fail(b, PS_EFORMAT, "%s: takes two inputs, got %zu", b->where, b->nin);
    const cJSON *norm = ps_layer_item(l, "normalize");
    if (norm && !cJSON_IsFalse(norm))
        return ps_build_fail(b, PS_EFORMAT,
                             "%s: option 'normalize' = true (the cosine similarity) is not "
                             "supported (only false: the plain inner product)",
                             b->where);
    for (size_t i = 0; i < 2; i++) {
        size_t t = b->in_t[i];
        ps_shape s = ps_tensor_shape(b->m, t);
        bool seq = t ? b->m->ops[t - 1].seq : false;
        if (ps_tensor_image(b->m, t) || s.h * s.w != 1 || s.c != o->in.c || seq != o->seq)
            return ps_build_fail(b, PS_EFORMAT,
                                 "%s: input %zu has shape %zux%zux%zu; Dot takes two vectors of "
                                 "one length (%zu)",
                                 b->where, i, s.h, s.w, s.c, o->in.c);
    }
    int rc = parse_axes(b, l, o->seq);
    if (rc != PS_OK) return rc;
    o->kind = OP_DOT;
    o->out = (ps_shape){1, 1, 1};
    return PS_OK;
}

/* The per-sample sums are the squeeze-and-excitation product's ds with one
 * channel: ds[b] = sum over the dim "cells" p of a[b, p] x[b, p]. */
static int forward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out) {
    (void)j;
    (void)out;
    ps_k_mul_channels_backward_overwrite(p->m->dev, NULL, o->y, in, ps_layer_tensor(p, o->in_t[1]),
                                         NULL, p->rows, o->in.c, 1);
    return PS_OK;
}

/* da[b, c] = dout[b] x[b, c], dx[b, c] = dout[b] a[b, c]: each input times a
 * per-sample scalar (the channel product with one channel). */
static int backward(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout) {
    (void)j;
    const float *v[2] = {in, ps_layer_tensor(p, o->in_t[1])};
    for (size_t i = 0; i < 2; i++) {
        bool acc;
        float *d = ps_layer_din(p->m, o->in_t[i], &acc);
        if (!d) continue;
        ps_k_mul_channels_forward_overwrite(p->m->dev, d, v[1 - i], dout, p->rows, o->in.c, 1);
        ps_layer_din_done(p->m, o->in_t[i], acc, p->rows * o->in.c);
    }
    return PS_OK;
}

const ps_layer ps_layer_dot = {
    .kind = OP_DOT,
    .classes = classes,
    .nclasses = 1,
    .multi_input = true,
    .parse = parse,
    .forward = forward,
    .backward = backward,
};
