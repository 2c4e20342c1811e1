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
#include "layer_export.h"
#include "model_impl.h"
#include "onnx.pb-c.h"
#include "ps_error.h"

#define ONNX_OPSET 13
#define ONNX_IR_VERSION 7 /* the IR version of opset 13 (ONNX 1.8) */
/* protobuf's limit on one message; larger models would need ONNX's external data */
#define ONNX_MAX_BYTES ((size_t)2000 << 20)

struct ps_onnx {
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
};

static bool push_ptr(ps_onnx *b, void ***arr, size_t *n, size_t *cap, void *p) {
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
static void *ar(ps_onnx *b, size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || !push_ptr(b, &b->mem, &b->nmem, &b->capmem, p)) {
        free(p);
        b->oom = true;
        return NULL;
    }
    return p;
}

static char *str(ps_onnx *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *str(ps_onnx *b, const char *fmt, ...) {
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
Onnx__NodeProto *ps_onnx_node(ps_onnx *b, const char *op_type, const char *out, size_t nin,
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
const char *ps_onnx_helper(ps_onnx *b, const char *base, const char *what) {
    return str(b, "%s/%s_%zu", base, what, b->seq++);
}

static Onnx__AttributeProto *attr(ps_onnx *b, Onnx__NodeProto *n, const char *name,
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

void ps_onnx_attr_int(ps_onnx *b, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->i = v;
}

void ps_onnx_attr_float(ps_onnx *b, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) a->f = v;
}

void ps_onnx_attr_ints(ps_onnx *b, Onnx__NodeProto *n, const char *name, size_t k, const int64_t *v) {
    Onnx__AttributeProto *a = attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *c = ar(b, k * sizeof *c);
    if (!a || !c) return;
    memcpy(c, v, k * sizeof *c);
    a->n_ints = k;
    a->ints = c;
}

static Onnx__TensorProto *tensor(ps_onnx *b, const char *name, int32_t type, size_t ndims,
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
void ps_onnx_init_f32(ps_onnx *b, const char *name, size_t ndims, const int64_t *dims,
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

void ps_onnx_init_i64(ps_onnx *b, const char *name, size_t k, const int64_t *v) {
    int64_t dims[1] = {(int64_t)k};
    Onnx__TensorProto *t = tensor(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims);
    int64_t *c = ar(b, k * sizeof *c);
    if (!t || !c) return;
    memcpy(c, v, k * sizeof *c);
    t->n_int64_data = k;
    t->int64_data = c;
}

const float *ps_onnx_var_values(const ps_onnx *b, size_t var) {
    return b->m->params + b->m->vars[var].offset;
}

const char *ps_onnx_var_name(const ps_onnx *b, size_t var) {
    return b->m->vars[var].name;
}

/* A 1-D float initializer of c copies of v (BN without gamma / beta). */
const char *ps_onnx_const_vec(ps_onnx *b, const char *name, size_t c, float v) {
    float *vals = ar(b, c * sizeof *vals);
    if (!vals) return "";
    for (size_t i = 0; i < c; i++)
        vals[i] = v;
    int64_t d[1] = {(int64_t)c};
    ps_onnx_init_f32(b, name, 1, d, vals, c, NULL, NULL);
    return name;
}

const char *ps_onnx_const_scalar(ps_onnx *b, const char *name, float v) {
    ps_onnx_init_f32(b, name, 0, NULL, &v, 1, NULL, NULL);
    return name;
}

const ps_model *ps_onnx_model(const ps_onnx *b) {
    return b->m;
}

const char *ps_onnx_value(const ps_onnx *b, size_t t) {
    return b->tname[t];
}

void ps_onnx_relu6_bounds(ps_onnx *b, const char **lo, const char **hi) {
    if (!b->clip_min) {
        b->clip_min = ps_onnx_const_scalar(b, "relu6/min", 0.0f);
        b->clip_max = ps_onnx_const_scalar(b, "relu6/max", 6.0f);
    }
    *lo = b->clip_min;
    *hi = b->clip_max;
}

/* ---- layout ---------------------------------------------------------------- */

const int64_t PS_ONNX_TO_NCHW[4] = {0, 3, 1, 2}, PS_ONNX_TO_NHWC[4] = {0, 2, 3, 1};

const char *ps_onnx_transpose(ps_onnx *b, const char *in, const int64_t perm[4], const char *out) {
    Onnx__NodeProto *n = ps_onnx_node(b, "Transpose", out, 1, &in);
    ps_onnx_attr_ints(b, n, "perm", 4, perm);
    return out;
}

/* Tensor t as [N, numel] in the model's (NHWC) order: image tensors go back
 * to NHWC before they are flattened. */
const char *ps_onnx_flat_nhwc(ps_onnx *b, size_t t, const char *base) {
    const char *v = b->tname[t];
    if (!ps_tensor_image(b->m, t)) return v;
    v = ps_onnx_transpose(b, v, PS_ONNX_TO_NHWC, ps_onnx_helper(b, base, "to_nhwc"));
    Onnx__NodeProto *n = ps_onnx_node(b, "Flatten", ps_onnx_helper(b, base, "flat"), 1, &v);
    ps_onnx_attr_int(b, n, "axis", 1);
    return n ? n->output[0] : "";
}

/* ---- ops ---------------------------------------------------------------------- */

/* Conv / pooling window attributes; pads from the kernels' own plan (TensorFlow's
 * "same": the odd cell after). */
void ps_onnx_window_attrs(ps_onnx *b, Onnx__NodeProto *n, const ps_op *o, size_t oh, size_t ow,
                         size_t top, size_t left) {
    long bottom = (long)((oh - 1) * o->sh + o->kh) - (long)(o->in.h + top);
    long right = (long)((ow - 1) * o->sw + o->kw) - (long)(o->in.w + left);
    int64_t k[2] = {(int64_t)o->kh, (int64_t)o->kw}, s[2] = {(int64_t)o->sh, (int64_t)o->sw};
    int64_t pads[4] = {(int64_t)top, (int64_t)left, bottom > 0 ? bottom : 0, right > 0 ? right : 0};
    ps_onnx_attr_ints(b, n, "kernel_shape", 2, k);
    ps_onnx_attr_ints(b, n, "strides", 2, s);
    ps_onnx_attr_ints(b, n, "pads", 4, pads);
}

/* The op's output value name: its layer's name when it has one. */
static const char *op_value(ps_onnx *b, const ps_op *o, size_t j) {
    const char *kind = ps_layer_export_of(o->kind)->onnx_name;
    return o->prefix[0] ? str(b, "%s/%s:%zu", o->prefix, kind, j) : str(b, "%s:%zu", kind, j);
}

static int emit_op(ps_onnx *b, size_t j, char *err, size_t errlen) {
    const ps_op *o = &b->m->ops[j];
    const ps_layer_export *le = ps_layer_export_of(o->kind);
    if (!le || !le->onnx) {
        snprintf(err, errlen, "layer '%s': op kind %d has no ONNX mapping", o->prefix,
                 (int)o->kind);
        return PS_EINVAL;
    }
    const char *out = op_value(b, o, j);
    int rc = le->onnx(b, j, o, b->tname[o->in_t[0]], &out);
    if (rc != PS_OK) return rc;
    b->tname[j + 1] = out;
    return PS_OK;
}

/* ---- the model ----------------------------------------------------------------- */

static Onnx__ValueInfoProto *value_info(ps_onnx *b, const char *name, size_t rank,
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

static int build_graph(ps_onnx *b, Onnx__GraphProto *g, char *err, size_t errlen) {
    const ps_model *m = b->m;
    b->tname = ar(b, (m->nops + 1) * sizeof *b->tname);
    if (!b->tname) return PS_ENOMEM;
    int64_t in_dims[3] = {(int64_t)m->input.h, (int64_t)m->input.w, (int64_t)m->input.c};
    size_t in_rank = m->input_image ? 3 : 1;
    if (!m->input_image) in_dims[0] = (int64_t)ps_shape_numel(m->input);
    b->tname[0] = m->input_image ? ps_onnx_transpose(b, "input", PS_ONNX_TO_NCHW, "input/nchw") : "input";
    for (size_t j = 0; j < m->nops; j++) {
        int rc = emit_op(b, j, err, errlen);
        if (rc != PS_OK) return rc;
    }
    int64_t out_dims[1] = {(int64_t)m->ops[m->nops - 1].out.c};
    const char *last = b->tname[m->nops];
    ps_onnx_node(b, "Identity", "output", 1, &last);
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
    if (ps_export_check_layers(m, path, err, errlen) != PS_OK) return PS_EINVAL;
    if ((double)m->nparams * 4.0 > (double)ONNX_MAX_BYTES) {
        snprintf(err, errlen,
                 "--export %s: %zu parameters (%.1f GB) do not fit one ONNX file (protobuf's "
                 "2 GB limit; ONNX's external data is not written)",
                 path, m->nparams, (double)m->nparams * 4.0 / 1e9);
        return PS_EINVAL;
    }
    ps_onnx b = {.m = m};
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
