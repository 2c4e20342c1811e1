/* The ROC AUC of a binary classifier over an evaluation set: the scores and
 * 0/1 labels gathered batch by batch, the exact figure at the end (every
 * positive-negative pair counted, tied scores half), as Keras' AUC reaches
 * with many thresholds and scikit-learn's roc_auc_score computes. */
#ifndef PS_AUC_H
#define PS_AUC_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float *score;
    unsigned char *label;
    size_t n, cap;
} ps_auc;

/* Adds n scores with their labels (label != 0: positive); PS_ENOMEM. */
int ps_auc_add(ps_auc *a, const float *score, const int32_t *label, size_t n);
/* The same with labels as floats (0 or 1, as float targets carry them): above 0.5 positive. */
int ps_auc_add_f(ps_auc *a, const float *score, const float *label, size_t n);
/* The AUC of what was added: the probability that a random positive scores above a
 * random negative (ties 1/2). -1 when either class is absent; PS_ENOMEM leaves -2. */
double ps_auc_value(const ps_auc *a);
void ps_auc_free(ps_auc *a);

#endif
