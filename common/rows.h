/* Embedding rows addressed by 64-bit id: which shard holds a row, a row's
 * initial values, and the ids of one request deduplicated and split by shard
 * (issue 27's row path). A row's place and its initial values depend only on
 * the table, the id and the seed: never on which worker touched it first, nor
 * on how many rows the table has, so adding rows moves none. */
#ifndef PS_ROWS_H
#define PS_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* A table's key for hashing: its name hashed (FNV-1a, then mixed). */
uint64_t ps_rows_table_key(const char *table);

/* The shard (0..n_shards-1) that holds row id of the table: a 64-bit mix of
 * (table key, id), reduced by Lemire's multiply-shift (no modulo bias worth
 * naming at 2^64 / n). n_shards 0 gives 0. */
uint32_t ps_rows_shard(uint64_t table_key, uint64_t id, uint32_t n_shards);

/* Row id's initial values, uniform in [lo, hi) (Keras' Embedding default:
 * RandomUniform(-0.05, 0.05)), drawn from (seed, table key, id, index): the
 * same on every process and whatever order rows are created in. */
void ps_rows_initial(uint64_t seed, uint64_t table_key, uint64_t id, float lo, float hi,
                     float *out, size_t dim);

/* The ids of one request without repeats: uniq[0..*n_uniq) in order of first
 * appearance, and where[i] the index in uniq of ids[i] (so a caller sums
 * duplicate ids' gradients, or scatters one pulled row to every place that
 * asked for it). uniq and where hold n entries. Returns PS_OK or PS_ENOMEM
 * (a hash table of about 2n entries is allocated for the call). */
int ps_rows_dedupe(const uint64_t *ids, size_t n, uint64_t *uniq, size_t *n_uniq,
                   uint32_t *where);

/* Splits n ids by shard: counts[s] (n_shards entries) the ids shard s holds,
 * order[] the ids' indices grouped shard by shard (shard 0's first, each
 * group in the ids' order), shard_of[i] the shard of ids[i] (may be NULL). */
void ps_rows_split(uint64_t table_key, const uint64_t *ids, size_t n, uint32_t n_shards,
                   uint32_t *counts, uint32_t *order, uint32_t *shard_of);

#endif
