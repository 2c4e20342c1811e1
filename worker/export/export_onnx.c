/* --export FILE.onnx (see export.h): the model's graph and its current values
 * as an ONNX ModelProto (proto/onnx.proto, the subset of ONNX's messages this
 * writes), opset 13, IR version 7. docs/FORMATS.md ("ONNX export") has the
 * layout and the op mapping.
 *
 * Layout: the graph input is channels last like psworker's data ([N, H, W, C],
 * or [N, features] for a flat input); image tensors inside the graph are NCHW,
 * ONNX Conv's layout (a Transpose after the input), and every op that reads
 * an image as a flat vector (Flatten, Reshape, Dense on an image) goes back to
 * NHWC first, so the flat order is the model's and Dense kernels are used as
 * they are. Conv kernels [kh, kw, c_in, c_out] become OIHW, depthwise kernels
 * [kh, kw, c, mult] a grouped Conv's [c*mult, 1, kh, kw]; each initializer
 * keeps its variable's name. Inference mode: batch normalization with the
 * moving statistics, Dropout left out. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export.h"
#include "kernels.h"
#include "model_impl.h"
#include "onnx.pb-c.h"
#include "ps_error.h"

#define ONNX_OPSET 13
#define ONNX_IR_VERSION 7 /* the IR version of opset 13 (ONNX 1.8) */
/* protobuf's limit on one message; larger models would need ONNX's external data */
#define ONNX_MAX_BYTES ((size_t)2000 << 20)

typedef struct {
    const ps_model *m;
    void **mem; /* every allocation, freed together */
    size_t nmem, capmem;
    bool oom;
    Onnx__NodeProto **nodes;
    size_t nnodes, capnodes;
    Onnx__TensorProto **inits;
    size_t ninits, capinits;
    const char **tname;              /* the ONNX value of each model tensor (0: the input) */
    size_t seq;                      /* numbers helper values */
    const char *clip_min, *clip_max; /* relu6's bounds, made once */
} onnx_b;

static bool push_ptr(onnx_b *b, void ***arr, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        void **na = realloc(*arr, nc * sizeof *na);
        if (!na) {
            b->oom = true;
            return false;
        }
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return true;
}

/* Zeroed memory owned by b (NULL and b->oom on failure). */
static void *ar(onnx_b *b, size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || !push_ptr(b, &b->mem, &b->nmem, &b->capmem, p)) {
        free(p);
        b->oom = true;
        return NULL;
    }
    return p;
}

static char *str(onnx_b *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *str(onnx_b *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? ar(b, (size_t)n + 1) : NULL;
    if (!s) return (char *)"";
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* A node op_type(inputs) -> out; its name is out's. */
static Onnx__NodeProto *node(onnx_b *b, const char *op_type, const char *out, size_t nin,
                             const char *const *in) {
    Onnx__NodeProto *n = ar(b, sizeof *n);
    char **ins = ar(b, (nin ? nin : 1) * sizeof *ins);
    char **outs = ar(b, sizeof *outs);
    if (!n || !ins || !outs) return NULL;
    onnx__node_proto__init(n);
    for (size_t i = 0; i < nin; i++)
        ins[i] = (char *)in[i];
    outs[0] = (char *)out;
    n->n_input = nin;
    n->input = ins;
    n->n_output = 1;
    n->output = outs;
    n->name = (char *)out;
    n->op_type = (char *)op_type;
    if (!push_ptr(b, (void ***)&b->nodes, &b->nnodes, &b->capnodes, n)) return NULL;
    return n;
}

/* A fresh value name for op j's helper nodes: "<base>/<what>". */
static const char *helper(onnx_b *b, const char *base, const char *what) {
    return str(b, "%s/%s_%zu", base, what, b->seq++);
}

static Onnx__AttributeProto *attr(onnx_b *b, Onnx__NodeProto *n, const char *name,
                                  Onnx__AttributeProto__AttributeType type) {
    if (!n) return NULL;
    Onnx__AttributeProto *a = ar(b, sizeof *a);
    Onnx__AttributeProto **na =
        ar(b, (n->n_attribute + 1) * sizeof *na); /* small lists: copied on each add */
    if (!a || !na) return NULL;
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->type = type;
    if (n->n_attribute) memcpy(na, n->attribute, n->n_attribute * sizeof *na);
    na[n->n_attribute++] = a;
    n->attribute = na;
    return a;
}

static void attr_int(onnx_b *b, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->i = v;
}

static void attr_float(onnx_b *b, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) a->f = v;
}

static void attr_ints(onnx_b *b, Onnx__NodeProto *n, const char *name, size_t k, const int64_t *v) {
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *c = ar(b, k * sizeof *c);
    if (!a || !c) return;
    memcpy(c, v, k * sizeof *c);
    a->n_ints = k;
    a->ints = c;
}

static Onnx__TensorProto *tensor(onnx_b *b, const char *name, int32_t type, size_t ndims,
                                 const int64_t *dims) {
    Onnx__TensorProto *t = ar(b, sizeof *t);
    int64_t *d = ar(b, (ndims ? ndims : 1) * sizeof *d);
    if (!t || !d) return NULL;
    onnx__tensor_proto__init(t);
    if (ndims) memcpy(d, dims, ndims * sizeof *d); /* a scalar: no dims */
    t->n_dims = ndims;
    t->dims = d;
    t->data_type = type;
    t->name = (char *)name;
    if (!push_ptr(b, (void ***)&b->inits, &b->ninits, &b->capinits, t)) return NULL;
    return t;
}

/* A float32 initializer; values[i] for i < numel, written little-endian in raw_data.
 * perm (may be NULL): element i of the initializer is values[perm(i)]. */
static void init_f32(onnx_b *b, const char *name, size_t ndims, const int64_t *dims,
                     const float *values, size_t numel, size_t (*perm)(const void *, size_t),
                     const void *ctx) {
    Onnx__TensorProto *t = tensor(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndims, dims);
    uint8_t *raw = ar(b, numel * 4);
    if (!t || !raw) return;
    for (size_t i = 0; i < numel; i++) {
        float v = values[perm ? perm(ctx, i) : i];
        uint32_t u;
        memcpy(&u, &v, 4);
        raw[4 * i] = (uint8_t)u;
        raw[4 * i + 1] = (uint8_t)(u >> 8);
        raw[4 * i + 2] = (uint8_t)(u >> 16);
        raw[4 * i + 3] = (uint8_t)(u >> 24);
    }
    t->raw_data.len = numel * 4;
    t->raw_data.data = raw;
}

static void init_i64(onnx_b *b, const char *name, size_t k, const int64_t *v) {
    int64_t dims[1] = {(int64_t)k};
    Onnx__TensorProto *t = tensor(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims);
    int64_t *c = ar(b, k * sizeof *c);
    if (!t || !c) return;
    memcpy(c, v, k * sizeof *c);
    t->n_int64_data = k;
    t->int64_data = c;
}

static const float *var_values(const onnx_b *b, size_t var) {
    return b->m->params + b->m->vars[var].offset;
}

static const char *var_name(const onnx_b *b, size_t var) {
    return b->m->vars[var].name;
}

/* A 1-D float initializer of c copies of v (BN without gamma / beta). */
static const char *const_vec(onnx_b *b, const char *name, size_t c, float v) {
    float *vals = ar(b, c * sizeof *vals);
    if (!vals) return "";
    for (size_t i = 0; i < c; i++)
        vals[i] = v;
    int64_t d[1] = {(int64_t)c};
    init_f32(b, name, 1, d, vals, c, NULL, NULL);
    return name;
}

static const char *const_scalar(onnx_b *b, const char *name, float v) {
    init_f32(b, name, 0, NULL, &v, 1, NULL, NULL);
    return name;
}

/* ---- layout ---------------------------------------------------------------- */

static const int64_t TO_NCHW[4] = {0, 3, 1, 2}, TO_NHWC[4] = {0, 2, 3, 1};

static const char *transpose(onnx_b *b, const char *in, const int64_t perm[4], const char *out) {
    Onnx__NodeProto *n = node(b, "Transpose", out, 1, &in);
    attr_ints(b, n, "perm", 4, perm);
    return out;
}

/* Tensor t as [N, numel] in the model's (NHWC) order: image tensors go back
 * to NHWC before they are flattened. */
static const char *flat_nhwc(onnx_b *b, size_t t, const char *base) {
    const char *v = b->tname[t];
    if (!ps_tensor_image(b->m, t)) return v;
    v = transpose(b, v, TO_NHWC, helper(b, base, "to_nhwc"));
    Onnx__NodeProto *n = node(b, "Flatten", helper(b, base, "flat"), 1, &v);
    attr_int(b, n, "axis", 1);
    return n ? n->output[0] : "";
}

/* ---- kernels' layouts -------------------------------------------------------- */

typedef struct {
    size_t kh, kw, cin, cout, mult;
} kshape;

/* OIHW element i <- Keras [kh, kw, c_in, c_out] element. */
static size_t conv_perm(const void *ctx, size_t i) {
    const kshape *k = ctx;
    size_t x = i % k->kw, y = i / k->kw % k->kh, ci = i / (k->kw * k->kh) % k->cin,
           o = i / (k->kw * k->kh * k->cin);
    return ((y * k->kw + x) * k->cin + ci) * k->cout + o;
}

/* [c*mult, 1, kh, kw] element i <- Keras [kh, kw, c, mult] element. */
static size_t dw_perm(const void *ctx, size_t i) {
    const kshape *k = ctx;
    size_t x = i % k->kw, y = i / k->kw % k->kh, oc = i / (k->kw * k->kh);
    size_t ci = oc / k->mult, mm = oc % k->mult;
    return ((y * k->kw + x) * k->cin + ci) * k->mult + mm;
}

/* ---- ops ---------------------------------------------------------------------- */

/* Conv / pooling window attributes; pads from the kernels' own plan (TensorFlow's
 * "same": the odd cell after). */
static void window_attrs(onnx_b *b, Onnx__NodeProto *n, const ps_op *o, size_t oh, size_t ow,
                         size_t top, size_t left) {
    long bottom = (long)((oh - 1) * o->sh + o->kh) - (long)(o->in.h + top);
    long right = (long)((ow - 1) * o->sw + o->kw) - (long)(o->in.w + left);
    int64_t k[2] = {(int64_t)o->kh, (int64_t)o->kw}, s[2] = {(int64_t)o->sh, (int64_t)o->sw};
    int64_t pads[4] = {(int64_t)top, (int64_t)left, bottom > 0 ? bottom : 0, right > 0 ? right : 0};
    attr_ints(b, n, "kernel_shape", 2, k);
    attr_ints(b, n, "strides", 2, s);
    attr_ints(b, n, "pads", 4, pads);
}

static void emit_conv(onnx_b *b, const ps_op *o, const char *in, const char *out) {
    bool dw = o->kind == OP_DWCONV;
    ps_k_conv p;
    if (dw)
        ps_k_dwconv_plan(&p, 1, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->mult, o->sh, o->sw,
                         o->same);
    else
        ps_k_conv_plan(&p, 1, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->out.c, o->sh, o->sw,
                       o->same);
    kshape ks = {o->kh, o->kw, o->in.c, o->out.c, o->mult};
    int64_t dims[4] = {(int64_t)o->out.c, dw ? 1 : (int64_t)o->in.c, (int64_t)o->kh,
                       (int64_t)o->kw};
    const char *w = var_name(b, o->kernel_var);
    init_f32(b, w, 4, dims, var_values(b, o->kernel_var),
             o->out.c * (size_t)dims[1] * o->kh * o->kw, dw ? dw_perm : conv_perm, &ks);
    const char *ins[3] = {in, w, NULL};
    size_t nin = 2;
    if (o->bias_var != PS_NO_VAR) {
        int64_t bd[1] = {(int64_t)o->out.c};
        ins[nin++] = var_name(b, o->bias_var);
        init_f32(b, ins[2], 1, bd, var_values(b, o->bias_var), o->out.c, NULL, NULL);
    }
    Onnx__NodeProto *n = node(b, "Conv", out, nin, ins);
    window_attrs(b, n, o, p.oh, p.ow, p.pad_top, p.pad_left);
    if (dw) attr_int(b, n, "group", (int64_t)o->in.c);
}

static void emit_pool(onnx_b *b, const ps_op *o, const char *in, const char *out) {
    ps_k_pool p;
    ps_k_pool_plan(&p, 1, o->in.h, o->in.w, o->in.c, o->kh, o->kw, o->sh, o->sw, o->same);
    bool avg = o->kind == OP_AVGPOOL;
    Onnx__NodeProto *n = node(b, avg ? "AveragePool" : "MaxPool", out, 1, &in);
    window_attrs(b, n, o, p.oh, p.ow, p.pad_top, p.pad_left);
    if (avg) attr_int(b, n, "count_include_pad", 0); /* TensorFlow's: padding never counts */
}

static void emit_dense(onnx_b *b, const ps_op *o, size_t in_t, const char *out) {
    size_t in = ps_shape_numel(o->in);
    int64_t dims[2] = {(int64_t)in, (int64_t)o->out.c};
    const char *ins[3] = {flat_nhwc(b, in_t, out), var_name(b, o->kernel_var), NULL};
    init_f32(b, ins[1], 2, dims, var_values(b, o->kernel_var), in * o->out.c, NULL, NULL);
    size_t nin = 2;
    if (o->bias_var != PS_NO_VAR) {
        ins[nin++] = var_name(b, o->bias_var);
        init_f32(b, ins[2], 1, dims + 1, var_values(b, o->bias_var), o->out.c, NULL, NULL);
    }
    node(b, "Gemm", out, nin, ins);
}

static void emit_bn(onnx_b *b, const ps_op *o, const char *in, const char *out) {
    size_t c = o->in.c;
    int64_t d[1] = {(int64_t)c};
    const char *ins[5] = {in};
    ins[1] = o->kernel_var != PS_NO_VAR ? var_name(b, o->kernel_var)
                                        : const_vec(b, helper(b, out, "gamma_ones"), c, 1.0f);
    ins[2] = o->bias_var != PS_NO_VAR ? var_name(b, o->bias_var)
                                      : const_vec(b, helper(b, out, "beta_zeros"), c, 0.0f);
    ins[3] = var_name(b, o->mean_var);
    ins[4] = var_name(b, o->mvar_var);
    size_t vars[4] = {o->kernel_var, o->bias_var, o->mean_var, o->mvar_var};
    for (int i = 0; i < 4; i++)
        if (vars[i] != PS_NO_VAR)
            init_f32(b, ins[i + 1], 1, d, var_values(b, vars[i]), c, NULL, NULL);
    Onnx__NodeProto *n = node(b, "BatchNormalization", out, 5, ins);
    attr_float(b, n, "epsilon", o->eps);
}

static void emit_act(onnx_b *b, int act, const char *in, const char *out) {
    switch (act) {
    case PS_K_ACT_RELU:
        node(b, "Relu", out, 1, &in);
        break;
    case PS_K_ACT_RELU6: {
        if (!b->clip_min) {
            b->clip_min = const_scalar(b, "relu6/min", 0.0f);
            b->clip_max = const_scalar(b, "relu6/max", 6.0f);
        }
        const char *ins[3] = {in, b->clip_min, b->clip_max};
        node(b, "Clip", out, 3, ins);
        break;
    }
    case PS_K_ACT_SIGMOID:
        node(b, "Sigmoid", out, 1, &in);
        break;
    case PS_K_ACT_TANH:
        node(b, "Tanh", out, 1, &in);
        break;
    case PS_K_ACT_GELU: { /* exact: 0.5 x (1 + erf(x / sqrt 2)); Gelu is opset 20 */
        const char *c[3] = {const_scalar(b, helper(b, out, "inv_sqrt2"), 0.70710678118654752f),
                            const_scalar(b, helper(b, out, "one"), 1.0f),
                            const_scalar(b, helper(b, out, "half"), 0.5f)};
        const char *s1[2] = {in, c[0]};
        const char *v = helper(b, out, "scaled");
        node(b, "Mul", v, 2, s1);
        const char *e = helper(b, out, "erf");
        node(b, "Erf", e, 1, &v);
        const char *s2[2] = {e, c[1]}, *p = helper(b, out, "one_plus");
        node(b, "Add", p, 2, s2);
        const char *s3[2] = {in, p}, *q = helper(b, out, "x_times");
        node(b, "Mul", q, 2, s3);
        const char *s4[2] = {q, c[2]};
        node(b, "Mul", out, 2, s4);
        break;
    }
    case PS_ACT_SOFTMAX: {
        Onnx__NodeProto *n = node(b, "Softmax", out, 1, &in);
        attr_int(b, n, "axis", -1);
        break;
    }
    default: /* linear */
        node(b, "Identity", out, 1, &in);
        break;
    }
}

/* Flatten, and Reshape (to [n] or to [h, w, c]). */
static void emit_reshape(onnx_b *b, const ps_op *o, size_t in_t, const char *out) {
    const char *flat = flat_nhwc(b, in_t, out);
    if (!o->image) {
        node(b, "Identity", out, 1, &flat);
        return;
    }
    int64_t shape[4] = {0, (int64_t)o->out.h, (int64_t)o->out.w, (int64_t)o->out.c};
    const char *sname = helper(b, out, "shape"), *nhwc = helper(b, out, "nhwc");
    init_i64(b, sname, 4, shape);
    const char *ins[2] = {flat, sname};
    node(b, "Reshape", nhwc, 2, ins);
    transpose(b, nhwc, TO_NCHW, out);
}

/* The op's output value name: its layer's name when it has one. */
static const char *op_value(onnx_b *b, const ps_op *o, size_t j) {
    static const char *const kinds[] = {"dense",
                                        "conv2d",
                                        "max_pooling2d",
                                        "average_pooling2d",
                                        "flatten",
                                        "dropout",
                                        "activation",
                                        "depthwise_conv2d",
                                        "batch_normalization",
                                        "global_average_pooling2d",
                                        "zero_padding2d",
                                        "add",
                                        "concatenate"};
    return o->prefix[0] ? str(b, "%s/%s:%zu", o->prefix, kinds[o->kind], j)
                        : str(b, "%s:%zu", kinds[o->kind], j);
}

static int emit_op(onnx_b *b, size_t j, char *err, size_t errlen) {
    const ps_op *o = &b->m->ops[j];
    const char *in = b->tname[o->in_t[0]], *out = op_value(b, o, j);
    switch (o->kind) {
    case OP_DENSE:
        emit_dense(b, o, o->in_t[0], out);
        break;
    case OP_CONV:
    case OP_DWCONV:
        emit_conv(b, o, in, out);
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
        emit_pool(b, o, in, out);
        break;
    case OP_FLATTEN:
        emit_reshape(b, o, o->in_t[0], out);
        break;
    case OP_DROPOUT: /* inference: the identity */
        out = in;
        break;
    case OP_ACT:
        emit_act(b, o->act, in, out);
        break;
    case OP_BN:
        emit_bn(b, o, in, out);
        break;
    case OP_GAP: {
        const char *g = helper(b, out, "pooled");
        node(b, "GlobalAveragePool", g, 1, &in);
        Onnx__NodeProto *n = node(b, "Flatten", out, 1, &g);
        attr_int(b, n, "axis", 1);
        break;
    }
    case OP_PAD: { /* NCHW: [n, c, top, left] before, [n, c, bottom, right] after */
        int64_t pads[8] = {0, 0, (int64_t)o->pad[0], (int64_t)o->pad[2],
                           0, 0, (int64_t)o->pad[1], (int64_t)o->pad[3]};
        const char *pn = helper(b, out, "pads");
        init_i64(b, pn, 8, pads);
        const char *ins[2] = {in, pn};
        node(b, "Pad", out, 2, ins);
        break;
    }
    case OP_ADD:
    case OP_CONCAT: {
        const char *ins[PS_OP_MAX_IN];
        for (size_t i = 0; i < o->nin; i++)
            ins[i] = b->tname[o->in_t[i]];
        const char *op = o->kind == OP_CONCAT ? "Concat" : o->nin == 2 ? "Add" : "Sum";
        Onnx__NodeProto *n = node(b, op, out, o->nin, ins);
        if (o->kind == OP_CONCAT) attr_int(b, n, "axis", 1); /* channels: NCHW or [N, C] */
        break;
    }
    default:
        snprintf(err, errlen, "layer '%s': op kind %d has no ONNX mapping", o->prefix,
                 (int)o->kind);
        return PS_EINVAL;
    }
    b->tname[j + 1] = out;
    return PS_OK;
}

/* ---- the model ----------------------------------------------------------------- */

static Onnx__ValueInfoProto *value_info(onnx_b *b, const char *name, size_t rank,
                                        const int64_t *dims) {
    Onnx__ValueInfoProto *v = ar(b, sizeof *v);
    Onnx__TypeProto *t = ar(b, sizeof *t);
    Onnx__TypeProto__Tensor *tt = ar(b, sizeof *tt);
    Onnx__TensorShapeProto *s = ar(b, sizeof *s);
    Onnx__TensorShapeProto__Dimension **d = ar(b, (rank + 1) * sizeof *d);
    if (!v || !t || !tt || !s || !d) return NULL;
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(t);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(s);
    for (size_t i = 0; i < rank + 1; i++) {
        d[i] = ar(b, sizeof *d[i]);
        if (!d[i]) return NULL;
        onnx__tensor_shape_proto__dimension__init(d[i]);
        if (i == 0) { /* the batch: any size */
            d[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d[i]->dim_param = (char *)"N";
        } else {
            d[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d[i]->dim_value = dims[i - 1];
        }
    }
    s->n_dim = rank + 1;
    s->dim = d;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = s;
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->name = (char *)name;
    v->type = t;
    return v;
}

static int build_graph(onnx_b *b, Onnx__GraphProto *g, char *err, size_t errlen) {
    const ps_model *m = b->m;
    b->tname = ar(b, (m->nops + 1) * sizeof *b->tname);
    if (!b->tname) return PS_ENOMEM;
    int64_t in_dims[3] = {(int64_t)m->input.h, (int64_t)m->input.w, (int64_t)m->input.c};
    size_t in_rank = m->input_image ? 3 : 1;
    if (!m->input_image) in_dims[0] = (int64_t)ps_shape_numel(m->input);
    b->tname[0] = m->input_image ? transpose(b, "input", TO_NCHW, "input/nchw") : "input";
    for (size_t j = 0; j < m->nops; j++) {
        int rc = emit_op(b, j, err, errlen);
        if (rc != PS_OK) return rc;
    }
    int64_t out_dims[1] = {(int64_t)m->ops[m->nops - 1].out.c};
    const char *last = b->tname[m->nops];
    node(b, "Identity", "output", 1, &last);
    Onnx__ValueInfoProto **ios = ar(b, 2 * sizeof *ios);
    if (!ios) return PS_ENOMEM;
    ios[0] = value_info(b, "input", in_rank, in_dims);
    ios[1] = value_info(b, "output", 1, out_dims);
    g->name = (char *)m->name;
    g->n_input = 1;
    g->input = &ios[0];
    g->n_output = 1;
    g->output = &ios[1];
    g->n_node = b->nnodes;
    g->node = b->nodes;
    g->n_initializer = b->ninits;
    g->initializer = b->inits;
    return b->oom ? PS_ENOMEM : PS_OK;
}

/* Writes len bytes to path through path.tmp.<pid>, renamed over path. */
static int write_file(const char *path, const uint8_t *buf, size_t len, char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        if (f) remove(tmp);
        snprintf(err, errlen, "--export %s: %s", path, strerror(e));
        return PS_EIO;
    }
    return PS_OK;
}

int ps_export_onnx(const ps_model *m, const char *path, char *err, size_t errlen) {
    if ((double)m->nparams * 4.0 > (double)ONNX_MAX_BYTES) {
        snprintf(err, errlen,
                 "--export %s: %zu parameters (%.1f GB) do not fit one ONNX file (protobuf's "
                 "2 GB limit; ONNX's external data is not written)",
                 path, m->nparams, (double)m->nparams * 4.0 / 1e9);
        return PS_EINVAL;
    }
    onnx_b b = {.m = m};
    Onnx__GraphProto g;
    onnx__graph_proto__init(&g);
    Onnx__OperatorSetIdProto opset;
    onnx__operator_set_id_proto__init(&opset);
    opset.version = ONNX_OPSET; /* domain "": the default ONNX operator set */
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    Onnx__ModelProto model;
    onnx__model_proto__init(&model);
    model.ir_version = ONNX_IR_VERSION;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = (char *)"psworker";
    model.doc_string = (char *)"input: channels last (NHWC) float32 as psworker feeds it "
                               "(pixels / 255); output: the model's last layer";
    model.graph = &g;
    char why[256] = "";
    int rc = build_graph(&b, &g, why, sizeof why);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (rc == PS_OK) {
        len = onnx__model_proto__get_packed_size(&model);
        buf = len <= ONNX_MAX_BYTES ? malloc(len ? len : 1) : NULL;
        if (!buf) rc = PS_ENOMEM;
    }
    if (rc == PS_OK && onnx__model_proto__pack(&model, buf) != len) rc = PS_EINTERNAL;
    if (rc == PS_OK)
        rc = write_file(path, buf, len, err, errlen);
    else
        snprintf(err, errlen, "--export %s: %s", path, why[0] ? why : ps_strerror(rc));
    free(buf);
    for (size_t i = 0; i < b.nmem; i++)
        free(b.mem[i]);
    free(b.mem);
    free(b.nodes);
    free(b.inits);
    return rc;
}
