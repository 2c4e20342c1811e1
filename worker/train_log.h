/* What the chief logs about training, as Keras' callbacks do: TensorBoard event
 * files (--tensorboard DIR: DIR/train and DIR/validation, the tags of Keras 3's
 * TensorBoard callback) and the History file (--history FILE: Keras'
 * History.history as JSON). Every epoch's values come through
 * ps_train_log_epoch alone, so what feeds it (this worker's values, or the
 * job's combined ones) is chosen in one place, by its caller. */
#ifndef PS_TRAIN_LOG_H
#define PS_TRAIN_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* One epoch, as Keras' logs at on_epoch_end. */
typedef struct {
    unsigned epoch;        /* 0-based: TensorBoard's step for the epoch_ tags */
    double loss, accuracy; /* training, over the epoch */
    const char *metric;    /* accuracy's name: "accuracy", or "rmse" (float targets); NULL:
                            * accuracy */
    int has_val;           /* the test set was evaluated (val_ metrics) */
    double val_loss, val_accuracy;
    double val_auc;        /* the model's metrics name "auc": val_auc; < 0: none */
    double learning_rate; /* the optimizer's rate after the epoch */
} ps_log_epoch;

/* One training step, as Keras' logs at on_train_batch_end. */
typedef struct {
    uint64_t step;          /* global steps done, this one included (1-based) */
    double loss, accuracy;  /* this step's batch */
    double learning_rate;   /* the rate this step's update used */
    double samples_per_sec; /* job-wide, since the last logged step */
    double grad_norm;       /* this worker's gradient's L2 norm (trainable); < 0: unknown */
} ps_batch_metrics;

typedef struct ps_train_log ps_train_log;

/* tb_dir (NULL: no event files), history (NULL: no file). A job resumed at
 * epoch first_epoch (0-based; 0: a fresh job) continues the History file: the
 * first first_epoch entries of each of its lists are kept, later ones (of the
 * run that stopped) dropped; a file that cannot be read or holds fewer epochs
 * is started afresh with a warning. The event files go on with the steps and
 * epochs the loop gives (a new file beside the old ones). Returns PS_OK (*out
 * NULL when both are NULL) or an error with a reason in err. */
int ps_train_log_open(const char *tb_dir, const char *history, unsigned first_epoch,
                      ps_train_log **out, char *err, size_t errlen);
/* The batch_ tags in DIR/train. */
int ps_train_log_batch(ps_train_log *l, const ps_batch_metrics *b, char *err, size_t errlen);
/* The epoch_ tags in DIR/train and DIR/validation, the variables' histograms from m
 * (NULL: none) in DIR/train, the History file rewritten; both flushed. */
int ps_train_log_epoch(ps_train_log *l, const ps_log_epoch *e, ps_model *m, char *err,
                       size_t errlen);
/* Flushes and closes everything; NULL is a no-op. Returns PS_EIO if a write failed. */
int ps_train_log_close(ps_train_log *l);

/* Sum of squares of the trainable variables' gradients in [begin, end), a range
 * of m's gradient buffer (the global norm is the root of the sum over a step). */
double ps_train_log_grad_sumsq(const ps_model *m, const float *begin, const float *end);

#endif
