/* Sparse optimizers: the update of one row of an embedding table from that
 * row's gradient, touching nothing else. psd applies them to the rows of a
 * push (issue 27's row-addressed variables); rows that are not pushed keep
 * their values and their slots. Pure functions over floats.
 *
 * Per row of dim values w and gradient g (formulas as Keras / TensorFlow
 * write them, element math in float):
 *   sgd:             w -= lr * g
 *   adagrad:         a += g * g;  w -= lr * g / (sqrt(a) + eps)     (a starts at
 *                    initial_accumulator, one per value)
 *   rowwise_adagrad: A += mean(g * g) over the row;  w -= lr * g / (sqrt(A) + eps)
 *                    (one accumulator per row, as FBGEMM's and TorchRec's)
 *   lazy_adam:       m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g * g;
 *                    w -= lr_t * m / (sqrt(v) + eps), lr_t = lr sqrt(1 - b2^t) / (1 - b1^t)
 *                    with t the table's update count (as tfa's LazyAdam). Dense
 *                    Adam moves every row at every step (its m decays but is not
 *                    zero, so a row keeps moving after its last gradient); here a
 *                    row and its moments change only in the steps it is pushed.
 *   ftrl:            FTRL-Proximal (McMahan et al. 2013) as Keras' Ftrl:
 *                    n' = n + g * g;  z += g - (n'^-p - n^-p) / lr * w;  n = n';
 *                    w = (clip(z, -l1, l1) - z) / (n^-p / lr + 2 * l2)
 *                    (0 when |z| <= l1), p = learning_rate_power (-0.5),
 *                    n starting at initial_accumulator (0.1). */
#ifndef PS_OPTIM_ROWS_H
#define PS_OPTIM_ROWS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PS_ROW_SGD = 0,
    PS_ROW_ADAGRAD,
    PS_ROW_ROWWISE_ADAGRAD,
    PS_ROW_LAZY_ADAM,
    PS_ROW_FTRL
} ps_row_opt_kind;

typedef struct {
    ps_row_opt_kind kind;
    float lr;
    float eps;                 /* adagrad, rowwise_adagrad, lazy_adam (Keras: 1e-7) */
    float initial_accumulator; /* adagrad, rowwise_adagrad, ftrl (Keras: 0.1) */
    float beta_1, beta_2;      /* lazy_adam (0.9, 0.999) */
    float l1, l2;              /* ftrl's regularisation strengths (0, 0) */
    float lr_power;            /* ftrl (-0.5) */
} ps_row_opt;

/* Keras' defaults for the kind, with learning rate lr. */
ps_row_opt ps_row_opt_default(ps_row_opt_kind kind, float lr);

/* The kind named as a spec names it: "sgd", "adagrad", "rowwise_adagrad",
 * "lazy_adam", "ftrl". Returns 0, or -1 for an unknown name. */
int ps_row_opt_parse_kind(const char *name, ps_row_opt_kind *kind);
const char *ps_row_opt_kind_name(ps_row_opt_kind kind);

/* Floats of state a row of dim values keeps: sgd 0, adagrad dim,
 * rowwise_adagrad 1, lazy_adam 2 * dim, ftrl 2 * dim. */
size_t ps_row_opt_slot_floats(ps_row_opt_kind kind, size_t dim);

/* A new row's state (accumulators at initial_accumulator, moments at 0). */
void ps_row_opt_init(const ps_row_opt *o, float *slots, size_t dim);

/* Applies g to the row w and its slots. t (lazy_adam) is the table's update
 * count including this one, 1-based; the others ignore it. w, g and slots must
 * not overlap. */
void ps_row_opt_apply(const ps_row_opt *o, float *w, float *slots, const float *g, size_t dim,
                      uint64_t t);

#endif
