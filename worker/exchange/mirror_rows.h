/* The rows of mirrored embedding tables as they travel between all-reduce
 * ranks (mirror_tables.h does the I/O): one rank's step encoded as a block,
 * and every rank's blocks, in rank order, checked and summed by id. No I/O.
 *
 * A block, per table in the model's order: u64 n (rows), n u64 ids, n * dim
 * float32 gradients, the floats padded with zeros to a multiple of 8 bytes
 * (every field stays aligned); host byte order, as the dense all-reduce's
 * floats. Its size grows with the rows a step touched, never with a table. */
#ifndef PS_MIRROR_ROWS_H
#define PS_MIRROR_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "row_sum.h"

typedef struct {
    const char *name; /* for messages (borrowed) */
    size_t input_dim; /* ids are in [0, input_dim) */
    size_t dim;       /* floats per row */
} ps_mirror_shape;

/* Bytes of a block carrying n[e] rows of table e (SIZE_MAX on overflow). */
size_t ps_mirror_rows_bytes(const ps_mirror_shape *tabs, size_t n_tables, const size_t *n);

/* The most bytes a valid block can have: every table's every row. A rank
 * announcing more is faulty (SIZE_MAX on overflow). */
size_t ps_mirror_rows_max_bytes(const ps_mirror_shape *tabs, size_t n_tables);

/* Writes the block of ids[e][0..n[e]) and grads[e][n[e] * dim] into out
 * (ps_mirror_rows_bytes of them). */
void ps_mirror_rows_encode(const ps_mirror_shape *tabs, size_t n_tables, const size_t *n,
                           const uint64_t *const *ids, const float *const *grads,
                           unsigned char *out);

/* Sums every rank's rows by id: blocks all (back to back, lens[r] bytes for
 * rank r, r = 0 .. n_ranks-1), added in rank order, each rank's rows in its
 * order, into sums[e] (one per table, with dim of table e; cleared first),
 * then multiplied by 1.0f / n_ranks (the dense all-reduce's mean), so every
 * rank computes the same bits. all must be 8-byte aligned. PS_OK; PS_EPROTO
 * with *bad_rank and the reason in err (a block of the wrong size, a count or
 * id out of a table's range); PS_ENOMEM. */
int ps_mirror_rows_sum(const ps_mirror_shape *tabs, size_t n_tables, const unsigned char *all,
                       const size_t *lens, unsigned n_ranks, ps_row_sum *sums, unsigned *bad_rank,
                       char *err, size_t errlen);

#endif
