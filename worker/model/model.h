/* A model built from a Keras-like JSON spec (a stack of layers, or a graph of
 * named layers) or from a Keras model file (Sequential or Functional: a graph
 * of layers, with residual Add and Concatenate), whose parameters live in one host
 * allocation (and gradients in another), so one call sends, pulls or zeroes
 * them all. Forward/backward run through kernels/ on the model's device; on a
 * CUDA device the parameters are copied in before and the gradients out after
 * each step, through pinned host buffers. */
#ifndef PS_MODEL_H
#define PS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "labels.h"
#include "optim_spec.h"

typedef struct ps_model ps_model;

/* Keras' dtype policies: float32, or mixed precision (variables float32,
 * layers computing in float16 / bfloat16; see docs/ARCHITECTURE.md). */
typedef enum {
    PS_POLICY_FLOAT32 = 0,
    PS_POLICY_MIXED_FLOAT16 = 1,
    PS_POLICY_MIXED_BFLOAT16 = 2
} ps_dtype_policy;

/* One variable: a view into the params/grads allocations. */
typedef struct {
    char name[64];   /* e.g. "dense_0/kernel", "conv2d_0/bias"; a Keras model's own
                      * ("conv1/kernel", "bn_Conv1/moving_mean"); unique in the model */
    int rank;        /* 1 (bias, BN vectors) or 2 (kernel: Dense [in, out], Conv2D
                      * [kh*kw*c_in, filters], DepthwiseConv2D [kh*kw*c_in, multiplier]) */
    size_t shape[2]; /* shape[0] is the row count used for row-splitting */
    size_t numel;
    size_t offset;          /* in floats from the start of ps_model_params()/ps_model_grads() */
    size_t fan_in, fan_out; /* for glorot_uniform, as Keras counts them (0 for biases) */
    /* false for BatchNormalization's moving mean and variance: their "gradient"
     * slot holds (1 - momentum) * (moving - batch statistic) after a training
     * step, and their optimizer (ps_model_var_optimizer) is SGD with learning
     * rate 1, so applying it gives Keras' moving average. */
    bool trainable;
    /* true for a frozen layer's variables (Keras' trainable: false, on the layer or
     * a model around it): constants of the job, never updated, exchanged or
     * given optimizer slots (trainable is false too). They lie after every other
     * variable in the params / grads allocations: see ps_model_num_updated_params. */
    bool frozen;
} ps_model_var;

/* Settings a bare Keras model file does not carry (to_json() has no loss);
 * ignored for the project's own specs and {"keras": ...} wrappers, which give
 * them themselves. */
typedef struct {
    const char *loss; /* "sparse_categorical_crossentropy", ...; NULL: none (an error) */
    int from_logits;  /* 1, 0, or -1: from the model (false when it ends in softmax/sigmoid) */
} ps_model_overrides;

/* Parses a spec (JSON text). On success *out owns a new model (free with
 * ps_model_free) and PS_OK is returned; on failure a negative ps_err and a
 * one-line reason in err. */
int ps_model_from_json(const char *json, ps_model **out, char *err, size_t errlen);
/* Same, reading the spec from a file (a {"keras": "file"} wrapper names a
 * file relative to it). */
int ps_model_load(const char *path, ps_model **out, char *err, size_t errlen);
/* Same, with the settings a bare Keras file lacks (ov may be NULL). */
int ps_model_load_with(const char *path, const ps_model_overrides *ov, ps_model **out, char *err,
                       size_t errlen);
/* Moves the model's buffers to device d (borrowed: must outlive the model or
 * be replaced); parameter values are kept. The CPU device is the default.
 * Returns PS_OK or PS_ENOMEM / a device error, with a reason in err. */
int ps_model_set_device(ps_model *m, ps_k_dev *d, char *err, size_t errlen);
/* The device the model computes on (borrowed; the CPU device by default). */
ps_k_dev *ps_model_device(const ps_model *m);
/* The built-in default: 784-128(relu)-10, sparse CE from logits, Adam 1e-3, batch 64. */
const char *ps_model_default_spec(void);
void ps_model_free(ps_model *m);

size_t ps_model_input_dim(const ps_model *m); /* features per sample, e.g. 784; 0: only ids */
/* The input shape, channels last: [h, w, c] for an image input_shape; a flat
 * one ([n], or [h, w]) is 1 x 1 x n. */
void ps_model_input_shape(const ps_model *m, size_t *h, size_t *w, size_t *c);
/* The spec's "epochs" (0 when it has none). */
size_t ps_model_epochs(const ps_model *m);
/* The spec's "labels" mapping (kind PS_LABELS_NONE when it has none). */
const ps_label_spec *ps_model_labels(const ps_model *m);
/* Classes the labels may take: the last layer's width, or 2 for a one-unit
 * binary head (binary_crossentropy or mse with labels 0 and 1). */
size_t ps_model_num_classes(const ps_model *m);
/* The last layer's width: the columns of ps_model_predict's output. */
size_t ps_model_output_dim(const ps_model *m);
/* Whether its loss takes float targets (mse, binary_crossentropy), not classes. */
bool ps_model_takes_targets(const ps_model *m);
/* The spec's "metrics" names "auc" (a binary classifier: evaluation reports its ROC AUC). */
bool ps_model_wants_auc(const ps_model *m);
size_t ps_model_num_vars(const ps_model *m);
const ps_model_var *ps_model_var_at(const ps_model *m, size_t i);
size_t ps_model_num_params(const ps_model *m); /* total floats over all vars */
/* Floats of the variables a training step may change (all but the frozen
 * ones): the prefix [0, n) of ps_model_params() / ps_model_grads() that an
 * exchange sends and updates. */
size_t ps_model_num_updated_params(const ps_model *m);
float *ps_model_params(ps_model *m);           /* owned by the model */
float *ps_model_grads(ps_model *m);            /* owned by the model */
const ps_opt_spec *ps_model_optimizer(const ps_model *m);
/* The optimizer of variable i: the model's for trainable variables, SGD with
 * learning rate 1 for the moving statistics. */
const ps_opt_spec *ps_model_var_optimizer(const ps_model *m, size_t i);
/* Variables with trainable set, and their total floats. */
size_t ps_model_num_trainable_params(const ps_model *m);
size_t ps_model_batch_size(const ps_model *m); /* spec "batch_size", default 64 */
const char *ps_model_name(const ps_model *m);

/* The model's dtype policy: the spec's "dtype_policy", or the mixed policy a
 * Keras file's layers carry (PS_POLICY_FLOAT32 when none). */
ps_dtype_policy ps_model_dtype_policy(const ps_model *m);
/* "float32", "mixed_float16", "mixed_bfloat16". */
const char *ps_dtype_policy_name(ps_dtype_policy p);
/* A policy's name (the spec's "dtype_policy", --dtype-policy) into *out;
 * PS_EFORMAT with the accepted names in err (may be NULL). */
int ps_dtype_policy_parse(const char *name, ps_dtype_policy *out, char *err, size_t errlen);
/* Sets every layer's policy (psworker --dtype-policy overrides the spec's). */
void ps_model_set_dtype_policy(ps_model *m, ps_dtype_policy p);
/* Loss scaling (mixed_float16): with scale > 0 each train step multiplies the
 * loss gradient by scale, so the gradients come out scaled, and the gradient
 * hook is not called: the caller unscales, checks them for inf / NaN and
 * passes them on itself. 0 turns it off (the default). */
void ps_model_set_loss_scale(ps_model *m, float scale);
/* The loss scale set, 0: none (the gradient hook is then not called: the loop
 * unscales and checks the gradients before the exchange sees them). */
float ps_model_loss_scale(const ps_model *m);

/* Keras default initializers: glorot_uniform kernels, zero biases, BN gamma
 * and moving variance ones, beta and moving mean zeros; seeded.
 * Also seeds dropout with seed (see ps_model_set_dropout_seed). */
void ps_model_init_params(ps_model *m, uint64_t seed);
/* Dropout masks are a function of (seed, training step, layer); workers
 * should use different seeds. */
void ps_model_set_dropout_seed(ps_model *m, uint64_t seed);
/* The training steps taken (one per ps_model_train_step*, i.e. per micro-batch),
 * the count that picks the dropout masks with the seed. A job resumed after n
 * micro-batches sets n, so its masks are those the uninterrupted job draws. */
uint64_t ps_model_train_steps(const ps_model *m);
void ps_model_set_train_steps(ps_model *m, uint64_t n);

/* Called during ps_model_train_step as the gradients in [begin, end) (host
 * memory, inside ps_model_grads()) become final for the step: after each
 * weighted layer of the backward pass, last layer first, so they can be sent
 * while the earlier layers are computed. On a CUDA device the gradients reach
 * the host only at the end of the step: one call covers them all. */
typedef void (*ps_model_grad_hook)(void *ctx, const float *begin, const float *end);
/* Sets (fn NULL: clears) the hook. */
void ps_model_set_grad_hook(ps_model *m, ps_model_grad_hook fn, void *ctx);

/* ---- id inputs and embedding tables ----------------------------------------
 *
 * A model may read, besides its float input, id inputs: one uint64 id per
 * sample each ("user", "item"). Each Embedding layer reads one of them; its
 * table is not held by the model. Per step the caller gives each embedding
 * layer the batch's rows (for the ids of its id input, deduplicated: n_uniq
 * distinct rows [n_uniq, dim], and where[i] the row sample i reads), from a
 * parameter server or a local table (emb_local.h); after
 * ps_model_train_step* it takes back the rows' gradients [n_uniq, dim]
 * (duplicates summed, d(mean loss)/d(row) as the dense gradients are). */

/* One embedding layer, for whoever creates and serves its table. */
typedef struct {
    char name[48];       /* the layer's name ("user_embedding"; "embedding_<i>" unnamed) */
    size_t input_dim;    /* the table's rows (Keras' input_dim: ids in [0, input_dim)); 0: ids
                          * of any value (a hashed or growing table) */
    size_t dim;          /* values per row (Keras' output_dim) */
    size_t ids_input;    /* the id input that feeds it (ps_model_id_input_name) */
    size_t width;        /* ids per sample of that input (its shape [n]): rows read per sample */
    float init_lo, init_hi; /* new rows uniform in [lo, hi) (Keras' default: -0.05, 0.05) */
    /* a dynamic table's options (the spec's "table"; 0: none): pushes before a row is
     * stored, steps without a push before it expires, rows per shard, and at that cap
     * refuse new rows (else evict the least recently pushed) */
    uint32_t min_count;
    uint64_t ttl_steps, max_rows;
    bool refuse_when_full;
    bool trainable;      /* false (trainable: false): no row gradients */
} ps_model_embedding;

size_t ps_model_num_id_inputs(const ps_model *m);
/* Id input k's name (the spec's or the Keras InputLayer's); NULL past the end. */
const char *ps_model_id_input_name(const ps_model *m, size_t k);
/* Id input k's ids per sample (1 for shape [] or [1], n for [n]); 0 past the end. */
size_t ps_model_id_input_width(const ps_model *m, size_t k);
/* The ids a sample gives the model: the id inputs' widths summed, in input order
 * (the data's id columns: input k reads the next width(k) of them). */
size_t ps_model_id_columns(const ps_model *m);
size_t ps_model_num_embeddings(const ps_model *m);
const ps_model_embedding *ps_model_embedding_at(const ps_model *m, size_t e);
/* Gives embedding e the rows for the next step's (or evaluation's) batch
 * samples: rows[n_uniq, dim] (host), where[batch * width] (each < n_uniq;
 * sample i's id j reads row where[i * width + j]). Copied: the
 * caller's buffers may change once it returns. A train step consumes them:
 * every trainable embedding needs its rows again before the next train step
 * (evaluation and ps_model_train_loss* leave them). PS_EINVAL for a bad e,
 * n_uniq or batch of 0, or a where out of range; PS_ENOMEM. */
int ps_model_set_embedding_rows(ps_model *m, size_t e, const float *rows, size_t n_uniq,
                                const uint32_t *where, size_t batch);
/* After a train step: embedding e's row gradients [*n_uniq, dim] (host, owned
 * by the model, valid until its rows are set again), row u the gradient of the
 * row given as row u. NULL when it has none (not trainable, no step yet). With
 * loss scaling on they carry the scale as the dense gradients do. */
const float *ps_model_embedding_grads(const ps_model *m, size_t e, size_t *n_uniq);

/* Forward + backward on a batch. Overwrites the grads with d(mean loss)/d(params)
 * (and the moving statistics' slots with their update, see ps_model_var);
 * *loss = mean loss over the batch; *correct = number of argmax hits.
 * Returns PS_OK, or PS_EINVAL for a label out of range / batch of 0. */
int ps_model_train_step(ps_model *m, const float *x, const int32_t *y, size_t batch, float *loss,
                        size_t *correct);
/* The same against float targets[batch, ps_model_output_dim] (host) instead of
 * labels: a rating for mse (*loss the mean squared error), or a probability
 * in [0, 1] for binary_crossentropy. PS_EINVAL under
 * sparse_categorical_crossentropy, or for a batch of 0. */
int ps_model_train_step_targets(ps_model *m, const float *x, const float *targets, size_t batch,
                                float *loss);
int ps_model_train_loss_targets(ps_model *m, const float *x, const float *targets, size_t batch,
                                float *loss);
/* Forward only over n samples against float targets: *loss the mean loss,
 * *sq_err the sum over the n x output_dim values of (output - target)^2 in
 * double (the output after a folded sigmoid: a probability), so that
 * sqrt(sum / count) over a whole set is its RMSE; outputs (may be NULL) as
 * ps_model_evaluate_out. */
int ps_model_evaluate_targets(ps_model *m, const float *x, const float *targets, size_t n,
                              float *loss, double *sq_err, float *outputs);

/* The training-mode loss (dropout on, with the masks the next train step will
 * use) of a batch, without gradients: for gradient checks. */
int ps_model_train_loss(ps_model *m, const float *x, const int32_t *y, size_t batch, float *loss);
/* Forward only over n samples (in chunks, dropout off, batch normalization
 * with the moving statistics); *loss = mean loss, *correct = hits. */
int ps_model_evaluate(ps_model *m, const float *x, const int32_t *y, size_t n, float *loss,
                      size_t *correct);
/* The same, and (outputs not NULL) the model's outputs into outputs[n,
 * ps_model_output_dim] (host): the last layer's, with a final softmax /
 * sigmoid applied even where the loss folds it in (from_logits false);
 * logits when the model has none. What an ONNX export computes. */
int ps_model_evaluate_out(ps_model *m, const float *x, const int32_t *y, size_t n, float *loss,
                          size_t *correct, float *outputs);

#endif
