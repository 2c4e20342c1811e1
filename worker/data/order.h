/* The order in which a worker reads records, as tf.data gives it: a share of
 * the records per worker, then each epoch's order drawn from the seed. Only
 * record numbers are handled here, never the records, so the order of any
 * epoch is known without reading anything: a restarted worker computes it and
 * starts at the step where the job is.
 *
 * Sharding: with at least as many files as workers, worker i gets files i,
 * i + count, ... (tf.data's shard on the file list); else records i,
 * i + count, ... of the whole list. Every worker then uses the same number
 * of records per epoch, the smallest share (a sync barrier needs that): the
 * rest of a larger share is left out of that epoch, a different part each
 * epoch once shuffled.
 *
 * Shuffling, per epoch, from (seed, epoch, worker index):
 *   full (shuffle_buffer 0): a uniform permutation of the share, as Keras
 *     shuffles arrays;
 *   a buffer of N records (N >= 1): the share's files in a shuffled order,
 *     each file's records in their order, through tf.data's shuffle buffer
 *     of N (N = 1: no shuffling at all, the files' order);
 *   none (PS_ORDER_IN_ORDER): the share as it is, every time (evaluation). */
#ifndef PS_ORDER_H
#define PS_ORDER_H

#include <stddef.h>
#include <stdint.h>

#define PS_ORDER_IN_ORDER ((size_t)-1) /* shuffle_buffer: no shuffling, files in order */

typedef struct {
    size_t *share;     /* owned: this worker's records, files in order */
    size_t share_n;
    size_t *file_start; /* owned: share_files + 1 offsets into share (one per file) */
    size_t share_files;
    size_t epoch_n;    /* records per epoch: the smallest share */
    size_t shuffle_buffer; /* 0: full */
    uint64_t seed;
    unsigned index, count;
} ps_order;

/* Sets up worker `index` of `count` over records: `records` (n of them, the
 * records to use, ascending; NULL: 0..n-1) that lie in files whose first
 * records are file_start[0..n_files] (record numbers; n_files + 1 entries,
 * the last the end; NULL or n_files <= 1: one file). Returns PS_OK, PS_EINVAL
 * (count 0, index >= count, fewer records than workers) or PS_ENOMEM. */
int ps_order_init(ps_order *o, const size_t *records, size_t n, const size_t *file_start,
                  size_t n_files, unsigned index, unsigned count, size_t shuffle_buffer,
                  uint64_t seed);
void ps_order_free(ps_order *o);

/* Writes epoch `epoch`'s order (o->epoch_n record numbers) into out. */
int ps_order_epoch(const ps_order *o, unsigned epoch, size_t *out);

/* True when the share went by file (else by record). */
int ps_order_by_file(const ps_order *o);

/* The file holding record r: the last f with file_start[f] <= r (binary search). */
size_t ps_order_file_of(const size_t *file_start, size_t n_files, size_t r);

/* A generator for the pipeline's and the order's draws (splitmix64). */
uint64_t ps_order_rand(uint64_t *state);
/* Uniform in [0, bound), bound > 0, without modulo bias. */
uint64_t ps_order_below(uint64_t *state, uint64_t bound);
/* The state for (seed, epoch, index), as every shuffle here seeds its draws. */
uint64_t ps_order_seed(uint64_t seed, unsigned epoch, unsigned index);

#endif
