/* One home per layer kind. Each op kind of the graph (model_impl.h's
 * ps_op_kind) is a file in layers/ that gives everything about it: the class
 * names it is built from (in the project's specs and in Keras' files) and the
 * options each takes, its shape inference from those options, its variables,
 * its buffers, and its forward and backward passes. layers/table.c lists them;
 * the spec and Keras readers (model_spec.c, model_keras.c) and the runner
 * (model.c) know no layer by name. Internal to the model. */
#ifndef PS_LAYER_H
#define PS_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_impl.h"

struct cJSON;

/* A class name a layer is built from, and the options it reads. */
typedef struct {
    const char *name;                /* "Dense", "MaxPooling2D", ... */
    const char *canon;               /* the class Keras folds it to (MaxPool2D:
                                      * MaxPooling2D), or NULL */
    bool in_spec;                    /* also a "type" of the project's specs */
    const char *const *spec_keys;    /* the keys a spec layer may give ("type" implied) */
    const char *const *keras_keys;   /* the options read from a Keras config (the others
                                      * only at Keras' defaults) */
} ps_layer_class;

/* A forward or backward pass in progress (model.c). */
typedef struct {
    ps_model *m;
    const float *x; /* the input batch, on the device */
    size_t rows;
    size_t row0;   /* the first row's index among the samples the rows were given for
                    * (an evaluation runs in chunks) */
    bool training; /* forward: dropout on, batch normalization on the batch's statistics */
    bool stats;    /* forward: also write the moving statistics' updates */
} ps_pass;

typedef struct {
    ps_op_kind kind;
    const ps_layer_class *classes; /* the classes that build this kind */
    size_t nclasses;
    bool multi_input; /* takes two or more inputs (Add, Concatenate) */
    bool view;        /* the output is the input's memory (no buffer of its own) */
    bool grad_in_place; /* input 0's gradient may live in the output gradient's buffer
                         * when the input has no other reader */
    bool ids;           /* reads an id input, not tensors (Embedding): trains, but its
                         * weights are a table outside the model (no variables) */
    /* Reads cls's settings from cfg (Keras key names) into o, whose in, out and
     * image are preset to the first input's; sets o->kind; *act: an activation
     * fused into the layer (applied by an OP_ACT after it). keras: Keras'
     * semantics where they differ. PS_EFORMAT with a reason (ps_build_fail). */
    int (*parse)(ps_build *b, const char *cls, const struct cJSON *cfg, bool keras, ps_op *o,
                 int *act);
    /* Declares o's variables (ps_layer_add_var), li: this kind's index among
     * the model's ops (the default names, "dense_<li>/kernel"). NULL: none. */
    int (*vars)(ps_model *m, ps_op *o, size_t li);
    /* Parameters o will have, for the bound checked before any allocation. */
    double (*nparams)(const ps_op *o);
    /* Buffers beyond the output (o->y) for rows rows; *ws_floats: raised to the
     * convolution workspace o needs; *max_stat_c: raised to the channels whose
     * statistics are copied to the host. NULL: none. */
    int (*alloc)(ps_model *m, ps_op *o, size_t rows, size_t *ws_floats, size_t *max_stat_c);
    /* Runs op j over its inputs; *out is preset to o->y, a view sets it to its input. */
    int (*forward)(const ps_pass *p, size_t j, ps_op *o, const float *in, const float **out);
    /* Op j's backward from its output's gradient dout: its variables' gradients
     * and its inputs' (ps_layer_din / ps_layer_pass_grad). */
    int (*backward)(const ps_pass *p, size_t j, ps_op *o, const float *in, const float *dout);
} ps_layer;

/* The layer of an op kind; the layer building class cls (NULL: unknown) and
 * its class entry in *c. */
const ps_layer *ps_layer_of(ps_op_kind kind);
const ps_layer *ps_layer_for_class(const char *cls, const ps_layer_class **c);
/* "Dense, Conv2D, ..." into out[n], for messages: the spec's types (spec) or
 * the Keras classes (aliases folded). */
void ps_layer_class_list(bool spec, char *out, size_t n);

/* ---- for the layers: parsing (layer_parse.c) ---- */

#define PS_LAYER_MAX_UNITS (1u << 24)
#define PS_LAYER_MAX_KERNEL 64 /* conv kernel / pooling window side, stride */
#define PS_LAYER_MAX_PAD 1024

const struct cJSON *ps_layer_item(const struct cJSON *o, const char *key);
/* A whole number in [lo, hi]; false if not numeric, integral or in range. */
bool ps_layer_get_size(const struct cJSON *item, double lo, double hi, size_t *out);
/* A Keras size pair: an integer n (n x n) or [a, b], each in [lo, hi]. */
bool ps_layer_get_pair(const struct cJSON *item, size_t lo, size_t hi, size_t *a, size_t *b);
int ps_layer_need_image(ps_build *b);
/* Conv2D, DepthwiseConv2D and pooling: window (wkey: "kernel_size", required
 * for conv, or "pool_size", default 2), strides, padding, output shape. */
int ps_layer_parse_window(ps_build *b, const struct cJSON *l, const char *wkey, bool conv,
                          ps_op *o);
/* The "activation" key (default linear): a ps_k_act or PS_ACT_SOFTMAX. */
int ps_layer_parse_activation(ps_build *b, const struct cJSON *l, int *act);
int ps_layer_parse_bool(ps_build *b, const struct cJSON *l, const char *key, bool dflt,
                        bool *out);
int ps_layer_parse_float(ps_build *b, const struct cJSON *l, const char *key, double lo,
                         double hi, float dflt, float *out);
/* A kernel initializer under key (absent: Glorot uniform, scale 0): Keras'
 * GlorotUniform/Normal, HeUniform/Normal, LecunUniform/Normal or
 * VarianceScaling, by name or as a config with a null seed. */
int ps_layer_parse_init(ps_build *b, const struct cJSON *l, const char *key, ps_vscale *out);
/* ZeroPadding2D's padding, Cropping2D's cropping under key: n, [rows, cols] or
 * [[top, bottom], [left, right]] in [0, PS_LAYER_MAX_PAD], into e (top, bottom,
 * left, right); absent: dflt on every edge. */
int ps_layer_parse_edges(ps_build *b, const struct cJSON *l, const char *key, size_t dflt,
                         size_t e[4]);
/* The channel axis of BatchNormalization or Concatenate: -1 or the last. */
int ps_layer_parse_channel_axis(ps_build *b, const struct cJSON *l, bool image);

/* ---- for the layers: variables and running (model.c, model_spec.c) ---- */

/* Appends a variable to m (name "<o's prefix>/<what>", or "<kind>_<li>/<what>"
 * without one), rows x cols (cols 0: a vector), initialised by init. */
int ps_layer_add_var(ps_model *m, const ps_op *o, const char *kind, size_t li, const char *what,
                     size_t rows, size_t cols, size_t fan_in, size_t fan_out, ps_init_kind init,
                     bool trainable);
/* A kernel: ps_layer_add_var with Glorot uniform, or vs when its scale is set. */
int ps_layer_add_kernel(ps_model *m, const ps_op *o, const char *kind, size_t li,
                        const char *what, size_t rows, size_t cols, size_t fan_in, size_t fan_out,
                        const ps_vscale *vs);
/* A variable's values / gradient on the device; NULL for PS_NO_VAR. */
const float *ps_layer_param(const ps_model *m, size_t var);
float *ps_layer_grad(const ps_model *m, size_t var);
/* Tensor t's values from the last forward (the input batch for t = 0). */
const float *ps_layer_tensor(const ps_pass *p, size_t t);
/* The dropout seed of op j at the current step. */
uint64_t ps_layer_dropout_seed(const ps_model *m, size_t j);
/* Where to write the gradient of input tensor t: its own buffer the first
 * time, else a scratch buffer that ps_layer_din_done adds in (t fans out);
 * NULL for the model's input (no gradient needed). n: floats written. */
float *ps_layer_din(ps_model *m, size_t t, bool *acc);
void ps_layer_din_done(ps_model *m, size_t t, bool acc, size_t n);
/* The scratch gradient buffer (for a kernel that always writes its dx). */
float *ps_layer_scratch(ps_model *m);
/* Input t's gradient is dout itself (views, Add): shared when aliased, else
 * copied or added in. */
void ps_layer_pass_grad(ps_model *m, size_t t, const float *dout, size_t n);
/* Tells the gradient hook that o's variables' gradients are final. */
void ps_layer_grads_final(const ps_model *m, const ps_op *o);
/* A buffer of floats on m's device. */
int ps_layer_alloc(ps_model *m, size_t floats, void *out);

#endif
