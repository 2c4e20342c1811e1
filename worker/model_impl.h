/* Internal to the model: the op list a spec is parsed into (model_spec.c) and
 * run by model.c. Not for other files. */
#ifndef PS_MODEL_IMPL_H
#define PS_MODEL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "model.h"

#define PS_ACT_SOFTMAX (-1) /* row-wise; only as the final op, folded into the loss */
#define PS_NO_VAR ((size_t)-1)

typedef enum {
    OP_DENSE,
    OP_CONV,
    OP_MAXPOOL,
    OP_AVGPOOL,
    OP_FLATTEN,
    OP_DROPOUT,
    OP_ACT
} ps_op_kind;
typedef enum { LOSS_SPARSE_CE, LOSS_BCE, LOSS_MSE } ps_loss_kind;

/* A per-sample tensor shape, channels last; a flat vector is 1 x 1 x width. */
typedef struct {
    size_t h, w, c;
} ps_shape;

static inline size_t ps_shape_numel(ps_shape s) {
    return s.h * s.w * s.c;
}

typedef struct {
    ps_op_kind kind;
    ps_shape in, out;
    int act;           /* OP_ACT: a ps_k_act or PS_ACT_SOFTMAX */
    size_t kh, kw;     /* OP_CONV kernel, pooling window */
    size_t sh, sw;     /* strides */
    bool same;         /* padding "same" (else "valid") */
    float rate;        /* OP_DROPOUT */
    bool use_bias;     /* OP_DENSE, OP_CONV */
    size_t kernel_var; /* OP_DENSE, OP_CONV: index into vars */
    size_t bias_var;   /* or PS_NO_VAR without a bias */
    /* run-time state (model.c) */
    float *y;          /* owned device buffer [cap, out]; NULL for views */
    int32_t *arg;      /* OP_MAXPOOL: winners [cap, out] */
    const float *outp; /* output of the last forward: y, or the input for views */
} ps_op;

struct ps_model {
    char name[64];
    ps_shape input;
    bool input_image; /* input_shape had rank 3 */
    ps_op *ops;
    size_t nops, nrun; /* nrun: ops executed (a final softmax/sigmoid is folded into the loss) */
    ps_model_var *vars;
    size_t nvars, nparams;
    ps_opt_spec opt;
    size_t batch_size;
    size_t epochs;        /* spec "epochs", 0 when absent */
    ps_label_spec labels; /* spec "labels", PS_LABELS_NONE when absent */
    ps_loss_kind loss;
    bool from_logits;
    /* run-time state (model.c) */
    ps_k_dev *dev;
    float *params, *grads;     /* host (pinned for CUDA): what the client sends and fills */
    float *d_params, *d_grads; /* on dev; the same pointers as params/grads on the CPU */
    size_t cap;                /* rows the activation buffers hold */
    size_t maxw;               /* widest per-sample tensor over all ops */
    float *g0, *g1;            /* gradient ping-pong buffers [cap, maxw] */
    float *ws;                 /* conv workspace */
    size_t ws_floats;
    float *d_x, *d_t; /* CUDA: input batch, float targets [cap, classes] */
    int32_t *d_y;     /* CUDA: labels */
    float *h_out;     /* host copy of a one-column output (MSE accuracy) */
    uint64_t dropout_seed, step;
    ps_model_grad_hook grad_hook; /* CPU: told as each layer's gradients are final */
    void *grad_hook_ctx;
};

/* Parses the JSON spec into m (ops, vars with offsets, nparams, optimizer,
 * loss...); allocates no buffers. Returns PS_OK or an error with a reason. */
int ps_model_parse(ps_model *m, const char *json, char *err, size_t errlen);

#endif
