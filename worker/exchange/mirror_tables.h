/* Embedding tables under the all-reduce strategies (exchange_collective.c):
 * every rank holds each table whole (emb_local.h: a row starts as psd's and
 * --no-ps's would with the same seed, so the replicas start identical) and
 * reads its rows locally. A step's row gradients are kept until the step's
 * end, then every rank's go round the ring as rows (one allgatherv of
 * mirror_rows.h blocks: the bytes grow with the rows touched, never with a
 * table), are summed by id in rank order and divided by the ranks (the dense
 * path's mean: 2 workers equal 1 worker on the concatenated batch), and the
 * row optimizer (emb_tables.h) updates each rank's copy alike, so the
 * replicas stay bit-identical.
 *
 * A table is mirrored when it fits: a fixed table (input_dim > 0) whose
 * values and optimizer slots take at most the bound (psworker
 * --max-mirrored-table-mb). A dynamic table (ids of any value) is not
 * mirrored: it grows with the ids seen. Either refusal names the table, its
 * size and the bound, and says to use --strategy parameter_server. */
#ifndef PS_MIRROR_TABLES_H
#define PS_MIRROR_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_file.h"
#include "model.h"
#include "ring.h"

typedef struct ps_mirror_tables ps_mirror_tables;

/* psworker's --max-mirrored-table-mb default (and a bound of 0's meaning). */
#define PS_MIRROR_TABLE_DEFAULT_MB 1024

/* The tables of m's Embedding layers, each checked against max_bytes (values
 * + slots; 0: PS_MIRROR_TABLE_DEFAULT_MB MiB) before any is made; rows start
 * from seed. m is borrowed and must outlive the tables. Returns PS_OK with *out set (NULL when m
 * has no tables), or PS_EINVAL (a table that does not fit, a dynamic table, an optimizer the rows
 * cannot take) / PS_ENOMEM with the reason in err. */
int ps_mirror_tables_open(ps_model *m, uint64_t seed, size_t max_bytes, ps_mirror_tables **out,
                          char *err, size_t errlen);
void ps_mirror_tables_free(ps_mirror_tables *t);

/* Rows of the n distinct ids of table e into out[n * dim], from this rank's
 * copy. PS_EINVAL (an id out of range) with the reason in err. */
int ps_mirror_tables_pull(ps_mirror_tables *t, size_t e, const uint64_t *ids, size_t n, float *out,
                          char *err, size_t errlen);
/* Keeps a copy of this step's gradients of table e's rows ids[n] (distinct)
 * for ps_mirror_tables_gather. PS_ENOMEM with the reason in err. */
int ps_mirror_tables_keep(ps_mirror_tables *t, size_t e, const uint64_t *ids, size_t n,
                          const float *grads, char *err, size_t errlen);

/* Every rank, at the same point of every step: all ranks' kept rows over the
 * ring, summed by id and averaged (ready for ps_mirror_tables_apply); this
 * rank's kept rows are then dropped. PS_OK; the ring's error (its reason
 * names the rank at fault); PS_EPROTO for a rank's bad block (named in err,
 * *peer set); PS_ENOMEM. */
int ps_mirror_tables_gather(ps_mirror_tables *t, ps_ring *ring, int *peer, char *err,
                            size_t errlen);
/* 1 when every gathered sum is finite (loss scaling: else the step is skipped). */
int ps_mirror_tables_finite(const ps_mirror_tables *t);
/* Applies the gathered sums to this rank's tables with the row optimizer. */
void ps_mirror_tables_apply(ps_mirror_tables *t);

/* The tables as checkpoint entries (model_ckpt.h's extra): per table
 * "@mirrored/<name>" [input_dim, dim] with the table's update count, then
 * "@mirrored/<name>/slots" [input_dim, slot floats a row] when the row
 * optimizer has slots. *vars (owned by t, valid until the next call or the
 * free) and *n. PS_OK or PS_ENOMEM. */
int ps_mirror_tables_ckpt_vars(ps_mirror_tables *t, const ps_ckpt_var **vars, size_t *n);
/* model_ckpt's extra load (user: the tables): checks that vars[0..n) are
 * those entries with these sizes (else PS_EFORMAT with why), then copies them
 * into the tables. */
int ps_mirror_tables_ckpt_load(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n,
                               char *why, size_t whylen);
/* Every rank: root's tables (values, slots, update counts) over the ring, as
 * after a resume from the chief's checkpoint. PS_OK or the ring's error. */
int ps_mirror_tables_broadcast(ps_mirror_tables *t, ps_ring *ring, char *err, size_t errlen);

/* Every table back to its initial rows from seed (the chief's, when this
 * worker was given another). PS_OK or PS_ENOMEM with the reason in err. */
int ps_mirror_tables_reseed(ps_mirror_tables *t, ps_model *m, uint64_t seed, char *err,
                            size_t errlen);

/* CRC-32C of every table's values and slots, extending crc (replica checks). */
uint32_t ps_mirror_tables_crc(const ps_mirror_tables *t, uint32_t crc);
/* Distinct rows updated so far (summed over the steps and tables), for logs. */
uint64_t ps_mirror_tables_rows_gathered(const ps_mirror_tables *t);

#endif
