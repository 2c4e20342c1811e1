/* What each layer kind gives the exporters: its ONNX nodes, its entry in a
 * safetensors file's model description, its PyTorch parameters. Each layer's
 * part is the export.c beside its layer.c (worker/model/layers/<kind>/), in
 * this library; worker/model/layers/table.c's list has the same entries. The
 * builders' helpers the layers call are below; export_onnx.c,
 * export_safetensors.c and export_torch.c hold the rest. Internal to export/. */
#ifndef PS_LAYER_EXPORT_H
#define PS_LAYER_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "export_torch.h"
#include "model_impl.h"
#include "onnx.pb-c.h"

struct cJSON;
typedef struct ps_onnx ps_onnx;           /* export_onnx.c's graph builder */
typedef struct ps_torch_b ps_torch_b;     /* export_torch.c's tensor list builder */

typedef struct {
    ps_op_kind kind;
    const char *onnx_name; /* the ONNX value names of its ops: "dense:3", "<layer>/dense:3" */
    /* Emits op j's nodes, reading value in (its first input's); *out is preset
     * to a fresh value name for its output, which an op that is the identity
     * in inference (Dropout) sets to in. PS_OK or PS_EINVAL with err. */
    int (*onnx)(ps_onnx *b, size_t j, const ps_op *o, const char *in, const char **out);
    /* safetensors: the class name in the model description (class_of, when
     * set, chooses by the op) and its settings (NULL: none beyond the shapes). */
    const char *class_name;
    const char *(*class_of)(const ps_op *o);
    void (*describe)(struct cJSON *e, const ps_model *m, size_t j, const ps_op *o);
    /* Keras 3 (config.json): fills cfg with the layer's config and returns its
     * class; keras_act: it takes the activation op that follows it (Dense and
     * the convolutions carry an "activation" option). */
    const char *(*keras)(struct cJSON *cfg, const ps_op *o);
    bool keras_act;
    /* Keras 3: the shape of variable var of o in Keras' files (a kernel's 4-D
     * one) into d, returning its rank; 0 (or NULL): the variable's own. */
    int (*keras_dims)(const ps_op *o, size_t var, size_t d[4]);
    /* Keras 3: variable var of o is an integer scalar in Keras' files (shape
     * (), written as int64; read from any integer type): Normalization's count.
     * NULL: none is. */
    bool (*keras_int_scalar)(const ps_op *o, size_t var);
    /* PyTorch: op j's parameters under module (NULL: none). */
    int (*torch)(ps_torch_b *b, size_t j, const char *module);
    /* PyTorch: a flat output keeps its input's flatten order (Flatten,
     * Dropout, activations, BatchNormalization). */
    bool torch_keeps_order;
} ps_layer_export;

const ps_layer_export *ps_layer_export_of(ps_op_kind kind);

/* ---- ONNX (export_onnx.c) ---- */

extern const int64_t PS_ONNX_TO_NCHW[4], PS_ONNX_TO_NHWC[4];
const ps_model *ps_onnx_model(const ps_onnx *b);
/* The ONNX value of model tensor t (0: the input, NCHW for an image). */
const char *ps_onnx_value(const ps_onnx *b, size_t t);
/* A node op_type(inputs) -> out; its name is out's. NULL when out of memory
 * (the builder remembers; the attribute setters accept NULL). */
Onnx__NodeProto *ps_onnx_node(ps_onnx *b, const char *op_type, const char *out, size_t nin,
                              const char *const *in);
/* A fresh value name for an op's helper nodes: "<base>/<what>_<n>". */
const char *ps_onnx_helper(ps_onnx *b, const char *base, const char *what);
void ps_onnx_attr_int(ps_onnx *b, Onnx__NodeProto *n, const char *name, int64_t v);
void ps_onnx_attr_float(ps_onnx *b, Onnx__NodeProto *n, const char *name, float v);
void ps_onnx_attr_ints(ps_onnx *b, Onnx__NodeProto *n, const char *name, size_t k,
                       const int64_t *v);
/* A float32 initializer of values (perm, may be NULL: element i is
 * values[perm(ctx, i)]), an int64 one. */
void ps_onnx_init_f32(ps_onnx *b, const char *name, size_t ndims, const int64_t *dims,
                      const float *values, size_t numel, size_t (*perm)(const void *, size_t),
                      const void *ctx);
void ps_onnx_init_i64(ps_onnx *b, const char *name, size_t k, const int64_t *v);
const float *ps_onnx_var_values(const ps_onnx *b, size_t var);
const char *ps_onnx_var_name(const ps_onnx *b, size_t var);
/* Initializers: c copies of v; a scalar. Return name. */
const char *ps_onnx_const_vec(ps_onnx *b, const char *name, size_t c, float v);
const char *ps_onnx_const_scalar(ps_onnx *b, const char *name, float v);
/* relu6's Clip bounds, made once per graph. */
void ps_onnx_relu6_bounds(ps_onnx *b, const char **lo, const char **hi);
const char *ps_onnx_transpose(ps_onnx *b, const char *in, const int64_t perm[4],
                              const char *out);
/* Tensor t as [N, numel] in the model's (NHWC) order. */
const char *ps_onnx_flat_nhwc(ps_onnx *b, size_t t, const char *base);
/* Conv / pooling window attributes with the kernels' own padding plan. */
void ps_onnx_window_attrs(ps_onnx *b, Onnx__NodeProto *n, const ps_op *o, size_t oh, size_t ow,
                          size_t top, size_t left);

/* ---- safetensors' model description (export_safetensors.c) ---- */

/* window, strides, padding and the pads ("same": TensorFlow's, the odd cell
 * after) of a conv or pooling op under key. */
void ps_describe_window(struct cJSON *e, const ps_op *o, const char *key);
struct cJSON *ps_describe_sizes(const size_t *v, size_t n);
const char *ps_describe_act_name(int act);

/* ---- Keras' config.json (keras_config.c) ---- */

struct cJSON *ps_keras_ints(const size_t *v, size_t n);
/* kkey (kernel_size or pool_size), strides, padding, data_format. */
void ps_keras_window(struct cJSON *c, const ps_op *o, const char *kkey);

/* ---- PyTorch (export_torch.c) ---- */

const ps_model *ps_torch_b_model(const ps_torch_b *b);
/* Appends <module>.<param> of the given shape, values left to fill (F32);
 * project: var's name (PS_NO_VAR: none). NULL when out of memory. */
ps_torch_tensor *ps_torch_b_add(ps_torch_b *b, size_t j, const char *module, const char *param,
                                size_t var, const char *layout, int rank, const size_t *shape);
/* A vector: var's values gathered by perm (NULL: as they are), or fill when
 * var is PS_NO_VAR. */
int ps_torch_b_add_vector(ps_torch_b *b, size_t j, const char *module, const char *param,
                          size_t var, size_t n, const size_t *perm, float fill);
const float *ps_torch_b_values(const ps_torch_b *b, size_t var);
/* perm[p] = the model's flat index of torch's flat position p in tensor t
 * (torch holds images NCHW); whether perm is the identity. */
int ps_torch_b_order(ps_torch_b *b, size_t t, size_t *perm);
bool ps_torch_is_identity(const size_t *perm, size_t n);

#endif
