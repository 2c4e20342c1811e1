/* A whole embedding table in this process, for tests and for a job without a
 * parameter server: the host table [input_dim, dim] (each row's initial
 * values those a psd table of the same name and seed gives it: common/rows.h),
 * a batch's ids deduplicated into the rows and where[] that
 * ps_model_set_embedding_rows takes, and a sparse optimizer (common/
 * optim_rows.h: SGD, Adagrad, ...) applied to the rows' gradients the model
 * hands back. Not for big tables: the model never holds one. */
#ifndef PS_EMB_LOCAL_H
#define PS_EMB_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim_rows.h"

typedef struct ps_emb_local ps_emb_local;

/* A table of input_dim rows of dim values, row id starting at
 * ps_rows_initial(seed, key of name, id, lo, hi), updated by opt. PS_EINVAL
 * for a size of 0, PS_ENOMEM. */
int ps_emb_local_new(const char *name, size_t input_dim, size_t dim, float lo, float hi,
                     uint64_t seed, const ps_row_opt *opt, ps_emb_local **out);
/* The table for embedding e of m (its name, input_dim, dim and initial range). */
int ps_emb_local_for(const ps_model *m, size_t e, uint64_t seed, const ps_row_opt *opt,
                     ps_emb_local **out);
void ps_emb_local_free(ps_emb_local *t);

/* Row id (NULL past the end). */
const float *ps_emb_local_row(const ps_emb_local *t, uint64_t id);
float *ps_emb_local_row_mut(ps_emb_local *t, uint64_t id);

/* Deduplicates ids[batch] (first appearance first) and gathers their rows:
 * *rows [*n_uniq, dim] and *where [batch], owned by t until the next lookup.
 * PS_EINVAL for an id >= input_dim or a batch of 0; PS_ENOMEM. */
int ps_emb_local_lookup(ps_emb_local *t, const uint64_t *ids, size_t batch, const float **rows,
                        size_t *n_uniq, const uint32_t **where);
/* Looks up ids[batch * width] (embedding e's ids per sample) and gives the rows to embedding e of m. */
int ps_emb_local_feed(ps_emb_local *t, ps_model *m, size_t e, const uint64_t *ids, size_t batch);
/* Applies the optimizer to the rows of the last lookup from their gradients
 * grads [n_uniq, dim] (n_uniq that lookup's). PS_EINVAL on another count. */
int ps_emb_local_apply(ps_emb_local *t, const float *grads, size_t n_uniq);
/* Applies the optimizer to the rows ids[n] (distinct, each < input_dim) from
 * their gradients grads [n, dim], as one update of the table (lazy Adam's
 * step count). PS_EINVAL for an id out of range (nothing applied). */
int ps_emb_local_apply_ids(ps_emb_local *t, const uint64_t *ids, const float *grads, size_t n);
/* Bytes a table of input_dim rows of dim values takes with opt's slots
 * (SIZE_MAX when that overflows), before it is made. */
size_t ps_emb_local_bytes(size_t input_dim, size_t dim, const ps_row_opt *opt);
/* The table's values [input_dim, dim] and optimizer slots (*n_slots floats,
 * maybe 0), borrowed: for checksums of replicas. */
const float *ps_emb_local_values(const ps_emb_local *t, size_t *n_values, const float **slots,
                                 size_t *n_slots);
/* The same, writable, with the update count (a checkpoint restored, or the
 * chief's tables received). */
float *ps_emb_local_values_mut(ps_emb_local *t, size_t *n_values, float **slots, size_t *n_slots);
uint64_t ps_emb_local_updates(const ps_emb_local *t);
void ps_emb_local_set_updates(ps_emb_local *t, uint64_t updates);
/* Applies embedding e's row gradients from m's last train step. PS_EINVAL
 * when it left none. */
int ps_emb_local_apply_model(ps_emb_local *t, const ps_model *m, size_t e);

#endif
