/* A synthetic click log shaped like Criteo's (psctl data synth-clicks): per row a 0/1
 * label, 13 numeric fields (counts) and 26 categorical fields, drawn from a seed so that
 * the best any model can do is known.
 *
 *   categorical field f: a Zipf rank k in 1..2^40 with P(k) proportional to k^-1.1
 *     (rejection-inversion sampling, Hoermann and Derflinger 1996), made an id by a
 *     bijection of the 40-bit space keyed by the seed and f (so the frequent ids are
 *     not 0, 1, 2), written as 10 hex digits;
 *   numeric field j: floor(exp(mu_j + sigma_j g)), g standard normal, mu_j and sigma_j
 *     drawn from the seed;
 *   the label: 1 with probability p = sigmoid(z), the hidden logistic model
 *     z = intercept + sum_f w(f, id_f) + sum_j v_j (log1p(x_j) - c_j) / sigma_j,
 *     w(f, id) = 0.25 N(0, 1) from a hash of (seed, f, id), v_j from the seed,
 *     c_j = max(mu_j, 0).
 *
 * Row r depends on (seed, r) alone: the first N rows are the same whatever the count.
 * The AUC of the true p against the drawn labels is the ceiling: it is gathered in a
 * histogram of p (constant memory), its error bounded by the pairs that share a bin. */
#ifndef PSCTL_CLICKS_H
#define PSCTL_CLICKS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PS_CLICKS_CAT 26
#define PS_CLICKS_NUM 13
#define PS_CLICKS_ID_BITS 40
#define PS_CLICKS_ZIPF_EXPONENT 1.1
#define PS_CLICKS_CAT_WEIGHT_SD 0.25
#define PS_CLICKS_INTERCEPT (-1.6)
#define PS_CLICKS_AUC_BINS ((size_t)1 << 18)

typedef struct {
    uint64_t seed;
    uint64_t key[PS_CLICKS_CAT];  /* each field's id bijection */
    double mu[PS_CLICKS_NUM], sigma[PS_CLICKS_NUM], weight[PS_CLICKS_NUM];
    /* the Zipf sampler's constants */
    double n, h_x1, h_n, s_cut;
} ps_clicks;

typedef struct {
    int label;
    double p;                      /* the true click probability */
    uint64_t num[PS_CLICKS_NUM];
    uint64_t rank[PS_CLICKS_CAT];  /* 1 .. 2^40 */
    uint64_t id[PS_CLICKS_CAT];    /* 0 .. 2^40 - 1 */
} ps_clicks_row;

/* The generator for seed. */
void ps_clicks_init(ps_clicks *g, uint64_t seed);
/* Row r. */
void ps_clicks_row_make(const ps_clicks *g, uint64_t r, ps_clicks_row *out);
/* Field f's id (0 .. 2^40 - 1) of Zipf rank k (1 .. 2^40): a bijection. */
uint64_t ps_clicks_id(const ps_clicks *g, int f, uint64_t k);
/* Its inverse: the rank whose id in field f is id. */
uint64_t ps_clicks_rank_of(const ps_clicks *g, int f, uint64_t id);
/* A Zipf rank (1 .. 2^40) from the generator state *st (splitmix64). */
uint64_t ps_clicks_zipf(const ps_clicks *g, uint64_t *st);

/* The ROC AUC of scores in [0, 1] against 0/1 labels, from a histogram of bins. */
typedef struct {
    uint64_t *pos, *neg;
    size_t bins;
    uint64_t n_pos, n_neg;
} ps_auc_hist;

/* Returns 0, or -1 when out of memory. */
int ps_auc_hist_init(ps_auc_hist *h, size_t bins);
void ps_auc_hist_add(ps_auc_hist *h, double score, int label);
/* The AUC (ties and pairs within one bin counted half), *bound (may be NULL) the most it
 * can be off the exact figure: half the share of the pairs that share a bin. 0.5 when
 * either class is absent. */
double ps_auc_hist_value(const ps_auc_hist *h, double *bound);
void ps_auc_hist_free(ps_auc_hist *h);

typedef struct {
    uint64_t rows, clicks;
    double auc, auc_bound;
} ps_clicks_stats;

/* Writes the header (label, i1..i13, c1..c26; tab separated) and rows 0 .. n - 1 to f,
 * a row at a time, and the label rate and the AUC ceiling into *st. Returns 0, -1 when
 * out of memory, -2 when a write failed (errno set). */
int ps_clicks_write(const ps_clicks *g, uint64_t n, FILE *f, ps_clicks_stats *st);

/* Writes the generator's parameters and *st as a JSON object to f. Returns 0 or -2. */
int ps_clicks_write_params(const ps_clicks *g, const ps_clicks_stats *st, FILE *f);

#endif
