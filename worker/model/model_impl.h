/* Internal to the model: the graph a spec is parsed into (model_spec.c, and
 * model_keras.c for Keras' own files) and run by model.c. Not for other files
 * but the exporters (export_*.c), which read the graph.
 *
 * The graph is a list of ops in topological order. Tensor 0 is the model's
 * float input (0 values wide when it has none); tensor j + 1 is the output of
 * op j. Each op names its input tensors; the last op's output is the model's
 * output. The id inputs (one uint64 id per sample each) are no tensors: an
 * Embedding op reads one (ps_op.ids) through the rows its caller gives each
 * step (model_rows.c). */
#ifndef PS_MODEL_IMPL_H
#define PS_MODEL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "model.h"

#define PS_ACT_SOFTMAX (-1) /* row-wise; only as the final op, folded into the loss */
#define PS_NO_VAR ((size_t)-1)
#define PS_OP_MAX_IN 64 /* inputs of one Add / Concatenate (a click model concatenates 27) */
#define PS_OP_MAX_VARS 4 /* variables of one op */

/* The op kinds; each is a layer of worker/model/layers/ (layer.h). */
typedef enum {
    OP_DENSE,
    OP_CONV,
    OP_MAXPOOL,
    OP_AVGPOOL,
    OP_FLATTEN, /* also Reshape: a view with another shape */
    OP_DROPOUT,
    OP_ACT,
    OP_DWCONV, /* DepthwiseConv2D */
    OP_BN,     /* BatchNormalization over the channels */
    OP_GAP,    /* GlobalAveragePooling2D */
    OP_PAD,    /* ZeroPadding2D */
    OP_ADD,
    OP_CONCAT, /* along the channels */
    OP_SEPCONV, /* SeparableConv2D: depthwise, then pointwise (1x1) */
    OP_MUL,     /* Multiply: element-wise, or by a 1x1 image per channel */
    OP_RESCALE, /* Rescaling: x * scale + offset */
    OP_CROP,    /* Cropping2D */
    OP_LN,      /* LayerNormalization over the channels */
    OP_NORM,    /* Normalization: Keras' adapted statistics over the channels */
    OP_EMBEDDING, /* Embedding: the rows of an id input, from a table outside the model */
    OP_DOT,       /* Dot: the inner product of two vectors per sample */
    OP_N_KINDS /* the number of kinds, not a kind */
} ps_op_kind;
typedef enum { LOSS_SPARSE_CE, LOSS_BCE, LOSS_MSE } ps_loss_kind;
/* How a variable is initialised by ps_model_init_params: Glorot uniform,
 * zeros, ones, or Keras' VarianceScaling with the variable's ps_vscale. */
typedef enum { INIT_GLOROT, INIT_ZEROS, INIT_ONES, INIT_VSCALE } ps_init_kind;
typedef enum { PS_FAN_IN, PS_FAN_OUT, PS_FAN_AVG } ps_fan_mode;
typedef enum { PS_DIST_UNIFORM, PS_DIST_TRUNCATED_NORMAL, PS_DIST_NORMAL } ps_init_dist;
/* Keras' VarianceScaling (HeNormal: 2, fan_in, truncated normal; GlorotUniform:
 * 1, fan_avg, uniform). scale 0: the default, Glorot uniform. */
typedef struct {
    float scale;
    ps_fan_mode mode;
    ps_init_dist dist;
} ps_vscale;

/* A per-sample tensor shape, channels last; a flat vector is 1 x 1 x width. */
typedef struct {
    size_t h, w, c;
} ps_shape;

static inline size_t ps_shape_numel(ps_shape s) {
    return s.h * s.w * s.c;
}

typedef struct {
    ps_op_kind kind;
    size_t nin;                /* input tensors (1, or 2+ for Add / Concatenate) */
    size_t in_t[PS_OP_MAX_IN]; /* tensor indices, each < this op's index + 1 */
    ps_shape in, out;          /* in: the shape of the first input */
    bool image;                /* the output is an image (Conv2D and pooling may follow) */
    char prefix[48];           /* variable name prefix (a Keras layer name); "" = dense_<i>... */
    int act;                   /* OP_ACT: a ps_k_act or PS_ACT_SOFTMAX */
    size_t kh, kw;             /* OP_CONV / OP_DWCONV kernel, pooling window */
    size_t sh, sw;             /* strides */
    bool same;                 /* padding "same" (else "valid") */
    size_t mult;               /* OP_DWCONV depth multiplier */
    size_t pad[4];             /* OP_PAD, OP_CROP top, bottom, left, right */
    float rate;                /* OP_DROPOUT */
    bool per_sample;           /* OP_DROPOUT: Keras' noise_shape (None, 1, ...): one decision
                                * per sample (drop connect) */
    float momentum, eps;       /* OP_BN, OP_LN and OP_NORM (eps) */
    float stat_rate;           /* OP_BN: 1 - momentum, taken in double from the spec's
                                * number and rounded once, as Keras' (1.0 - momentum)
                                * (1 - 0.999f in float is 1.3e-5 relative off 0.001) */
    float scale, offset;       /* OP_RESCALE */
    size_t bcast;              /* OP_MUL: 0 same shapes; 1 + i: input i holds one value per
                                * channel (a 1x1 image), broadcast over the other's */
    bool use_bias;             /* OP_DENSE, OP_CONV, OP_DWCONV */
    bool center, has_gamma;    /* OP_BN, OP_LN: beta, gamma present */
    bool frozen;               /* trainable false (Keras): its variables never change and get
                                * no gradient; BatchNormalization runs in inference mode */
    bool seq;                  /* Keras sees the per-sample tensor as [1, c], not [c]: an
                                * Embedding's output over an id input of shape (1,), and what
                                * keeps its shape after it (Flatten drops it) */
    size_t ids;                /* OP_EMBEDDING: the id input it reads */
    size_t emb;                /* OP_EMBEDDING: its index among the model's embeddings */
    size_t table_rows;         /* OP_EMBEDDING: Keras' input_dim; 0: ids of any value */
    float init_lo, init_hi;    /* OP_EMBEDDING: its table's RandomUniform(lo, hi) */
    uint32_t table_min_count;  /* OP_EMBEDDING, a dynamic table (the spec's "table"): */
    uint64_t table_ttl_steps, table_max_rows; /* pushes before a row is stored, TTL, cap */
    bool table_refuse;                        /* at the cap: refuse (else evict LRU) */
    size_t kernel_var;         /* OP_DENSE, OP_CONV, OP_DWCONV kernel; OP_BN gamma */
    size_t bias_var;           /* bias; OP_BN beta; PS_NO_VAR when absent */
    size_t mean_var, mvar_var; /* OP_BN moving mean / variance, OP_NORM mean / variance
                                * (non-trainable) */
    size_t count_var;          /* OP_NORM count (non-trainable) */
    size_t kernel2_var;        /* OP_SEPCONV pointwise kernel (kernel_var: the depthwise) */
    ps_vscale kinit, kinit2;   /* the kernels' initializers (scale 0: Glorot uniform) */
    ps_k_prec prec;            /* compute precision (dtype policy): F32, or F16 / BF16 for
                                * the GEMMs, the output and the gradient into this op */
    /* run-time state (model.c) */
    size_t gslot;      /* gradient buffer of the output tensor (index into g[]) */
    size_t consumers;  /* ops reading the output */
    float *y;          /* owned device buffer [cap, out]; NULL for views */
    int32_t *arg;      /* OP_MAXPOOL: winners [cap, out] */
    float *stat;       /* OP_BN: the batch's mean and variance [2, c] */
    float *aux, *daux; /* owned: an inner tensor [cap, ...] and its gradient (OP_SEPCONV's
                        * depthwise output) */
    const float *outp; /* output of the last forward: y, or the input for views */
} ps_op;

#define PS_MAX_GSLOTS 64 /* gradient buffers alive at once (a chain needs 2) */
#define PS_MAX_ID_INPUTS 64
#define PS_MAX_ID_WIDTH 4096 /* ids per sample of one id input */

/* An id input: its name, its ids per sample (Keras' shape (n,): an Embedding
 * over it gives [n, dim]), and whether Keras sees it as a shape (n,) rather
 * than () (one id, [dim]). */
typedef struct {
    char name[48];
    bool seq;
    size_t width;
} ps_id_input;

typedef struct ps_emb_state ps_emb_state; /* model_rows.c: one embedding's rows of the step */

struct ps_model {
    char name[64];
    ps_shape input;   /* 1 x 1 x 0 when the model has only id inputs */
    bool input_image; /* input_shape had rank 3 */
    char input_name[48]; /* the float input's name ("" when unnamed) */
    ps_id_input ids[PS_MAX_ID_INPUTS];
    size_t nids;
    ps_emb_state *embs; /* per OP_EMBEDDING op, in op order (model_rows.c) */
    size_t nembs;
    size_t input_consumers;
    ps_op *ops;
    size_t nops, nrun; /* nrun: ops executed (a final softmax/sigmoid is folded into the loss) */
    ps_model_var *vars;
    ps_init_kind *inits; /* per variable */
    ps_vscale *vscale;   /* per variable: INIT_VSCALE's parameters */
    size_t nvars, nparams;
    size_t nupdated;      /* params [0, nupdated) may change in training; the frozen
                           * variables lie after them */
    ps_opt_spec opt;
    ps_opt_spec stat_opt; /* the moving statistics': SGD, learning rate 1 */
    size_t batch_size;
    size_t epochs;        /* spec "epochs", 0 when absent */
    ps_label_spec labels; /* spec "labels", PS_LABELS_NONE when absent */
    ps_loss_kind loss;
    bool from_logits;
    bool metric_auc; /* spec "metrics" names "auc": evaluation reports the ROC AUC */
    ps_dtype_policy policy; /* the layers' mixed policy (float32: every op computes in F32) */
    bool keras;  /* came from a Keras model file (Keras' variable names) */
    bool keras2; /* ... written by Keras 2 (tf.keras): "depthwise_kernel", not "kernel" */
    /* run-time state (model.c) */
    ps_k_dev *dev;
    float *params, *grads;     /* host (pinned for CUDA): what the client sends and fills */
    float *d_params, *d_grads; /* on dev; the same pointers as params/grads on the CPU */
    size_t cap;                /* rows the activation buffers hold */
    size_t maxw;               /* widest per-sample tensor over all ops */
    size_t ngslots;            /* gradient buffers [cap, maxw] */
    float *g[PS_MAX_GSLOTS];
    float *gscr; /* scratch for a gradient added into a fanned-out tensor's */
    bool *ginit; /* per tensor: its gradient buffer holds a value (backward) */
    bool *tgrad; /* per tensor: its gradient is needed (a trainable op reads it, directly
                  * or through others); false for the input */
    float *ws;   /* conv workspace */
    size_t ws_floats;
    float *h_stat;    /* host copy of one BN layer's batch statistics [2, c] */
    float *d_x, *d_t; /* CUDA: input batch, float targets [cap, classes] */
    int32_t *d_y;     /* CUDA: labels */
    float *h_out;     /* host copy of a one-column output (MSE accuracy) */
    uint64_t dropout_seed, step;
    float loss_scale; /* > 0: the loss gradient is multiplied by it, the hook deferred */
    ps_model_grad_hook grad_hook; /* CPU: told as each layer's gradients are final */
    void *grad_hook_ctx;
};

/* A builder's reference to id input k (ps_build.in_t, a Keras layer's input),
 * never an op's in_t: ps_build_layer turns it into ps_op.ids. */
#define PS_IDS_REF_BASE ((size_t)1 << 48)
static inline bool ps_is_ids_ref(size_t t) {
    return t >= PS_IDS_REF_BASE;
}

/* The shape and image flag of tensor t. */
static inline ps_shape ps_tensor_shape(const ps_model *m, size_t t) {
    return t ? m->ops[t - 1].out : m->input;
}
static inline bool ps_tensor_image(const ps_model *m, size_t t) {
    return t ? m->ops[t - 1].image : m->input_image;
}

/* Parses the JSON spec into m (ops, vars with offsets, nparams, optimizer,
 * loss...); allocates no buffers. base_dir (may be NULL) is where a file named
 * by a {"keras": "file"} wrapper is looked for; ov (may be NULL) gives the
 * settings a bare Keras file lacks. Returns PS_OK or an error with a reason. */
int ps_model_parse(ps_model *m, const char *json, const char *base_dir,
                   const ps_model_overrides *ov, char *err, size_t errlen);

/* Reads a whole text file (at most 16 MiB) into *out (malloc'd, NUL-ended). */
int ps_model_read_file(const char *path, char **out, char *err, size_t errlen);

/* ---- the graph builder shared by the two front ends (model_spec.c) ---- */

struct cJSON;

typedef struct {
    ps_model *m;
    size_t cap; /* of m->ops */
    char *err;
    size_t errlen;
    char where[96];     /* "layer 3 (Conv2D)" or "layer 'conv1' (Conv2D)", for messages */
    const char *prefix; /* variable name prefix (Keras layer name) or NULL */
    size_t nin;         /* inputs of the layer being added */
    size_t in_t[PS_OP_MAX_IN]; /* tensors, or PS_IDS_REF_BASE + k for id input k */
} ps_build;

/* Formats a one-line reason into b->err and returns code. */
int ps_build_fail(ps_build *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Adds the op(s) of one layer of class cls (Dense, Conv2D, DepthwiseConv2D,
 * BatchNormalization, ReLU, Activation, MaxPooling2D, AveragePooling2D,
 * GlobalAveragePooling2D, ZeroPadding2D, Flatten, Reshape, Dropout, Add,
 * Concatenate) reading its settings from cfg (Keras key names) over the
 * inputs b->in_t; *out gets the output tensor. keras: Keras' semantics where
 * they differ (Dense needs a flat input). PS_EFORMAT with a reason. */
int ps_build_layer(ps_build *b, const char *cls, const struct cJSON *cfg, bool keras, size_t *out);
/* Checks the finished graph (a Dense, a convolution or an Embedding somewhere,
 * softmax only at the end, a flat output, every op and id input used, the
 * parameter bound). */
int ps_build_finish(ps_build *b);
/* Adds the project spec's layers (a "layers" array: {"type": ..., options,
 * "trainable"}) as a stack on tensor *cur; *cur gets the last one's output.
 * stem not NULL (a head on a Keras model): each layer may have a "name", by
 * default "<stem>_<index>". PS_EFORMAT with a reason in b->err. */
int ps_spec_add_layers(ps_build *b, const struct cJSON *layers, const char *stem, size_t *cur);
/* The top-level training settings (loss, from_logits, optimizer, batch_size,
 * epochs, metrics, name) from obj; keys not present keep their defaults. */
int ps_spec_parse_training(ps_model *m, const struct cJSON *obj, char *err, size_t errlen);

/* Adds id input `name` of width ids per sample (seq: Keras' shape (width,)
 * rather than ()) to m, its index in *k. PS_EFORMAT with a reason in err (too
 * many, a second of that name, a width of 0 or over PS_MAX_ID_WIDTH). */
int ps_model_add_id_input(ps_model *m, const char *name, bool seq, size_t width, size_t *k,
                          char *err, size_t errlen);

/* ---- the embeddings' rows (model_rows.c) ---- */

/* Creates the per-embedding state after parsing (nembs, each op's emb). */
int ps_rows_setup(ps_model *m);
/* Frees the device buffers (the rows must be given again), or everything. */
void ps_rows_release(ps_model *m);
void ps_rows_free(ps_model *m);
/* PS_OK when every embedding has rows for batch samples (train: given since
 * the last train step, for the trainable ones), else PS_EINVAL. */
int ps_rows_ready(const ps_model *m, size_t batch, bool train);
/* A train step consumed the rows (they must be given again for the next one);
 * on CUDA the row gradients are copied to the host. */
int ps_rows_step_done(ps_model *m);
/* An embedding's rows, where, and the grouping for its backward (device). */
const float *ps_rows_values(const ps_model *m, size_t e);
const uint32_t *ps_rows_where(const ps_model *m, size_t e);
void ps_rows_groups(const ps_model *m, size_t e, const uint32_t **order, const uint32_t **offs,
                    size_t *n_uniq);
float *ps_rows_grads_dev(ps_model *m, size_t e);

/* The GEMM precision of a policy (F32 for float32). */
ps_k_prec ps_dtype_policy_prec(ps_dtype_policy p);

/* model_keras.c: the graph of a Keras to_json() object (Sequential or
 * Functional, Keras 3 or 2 form) into m. */
int ps_keras_parse(ps_model *m, const struct cJSON *root, char *err, size_t errlen);
/* The same with a new head: the graph cut after layer `after` (NULL: not
 * cut), then head (a spec's "layers" array) on top of it. */
int ps_keras_parse_head(ps_model *m, const struct cJSON *root, const char *after,
                        const struct cJSON *head, char *err, size_t errlen);
/* Applies a wrapper's "trainable" to a Keras to_json() object: true / false
 * for the whole model, or {"layer or nested model name": bool, ...} in order,
 * each setting the layer and, for a model, every layer inside it (Keras'
 * setter). PS_EFORMAT with a reason (an unknown name). */
int ps_keras_set_trainable(struct cJSON *root, const struct cJSON *tr, char *err, size_t errlen);

#endif
