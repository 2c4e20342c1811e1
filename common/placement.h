/* Deterministic placement of variables on parameter-server shards: big variables split by
 * rows (like TensorFlow's MinSizePartitioner), then pieces balanced greedily by size. */
#ifndef PS_PLACEMENT_H
#define PS_PLACEMENT_H

#include <stddef.h>

typedef struct {
    const char *name;
    size_t rows;
    size_t row_numel;
} ps_place_var; /* numel = rows*row_numel floats */

typedef struct {
    size_t var;                /* index into the input array */
    unsigned part, num_parts;  /* num_parts == 1: the whole variable */
    size_t row_begin, row_end; /* rows [row_begin, row_end) of the variable */
    unsigned shard;
    char name[96]; /* the variable name, or "<name>/part_<k>" when split */
} ps_place_piece;

typedef struct {
    ps_place_piece *pieces;
    size_t n;
} ps_placement; /* pieces owned */

#define PS_PLACE_MIN_SLICE_BYTES (256u * 1024u)

/* Deterministic placement of variables on num_shards shards (the same inputs give the same
 * placement on every worker):
 * a variable of B bytes (4-byte floats) is split by rows into
 * k = min(num_shards, rows, ceil(B / min_slice_bytes)) parts when k > 1 (like TensorFlow's
 * MinSizePartitioner with max_partitions = num_shards), rows divided as evenly as possible
 * (first parts get the extra rows);
 * then all pieces are assigned greedily, largest first (ties: input order, then part), each to
 * the currently least-loaded shard in bytes (ties: lowest shard index). Pieces are returned in
 * input order (var, then part).
 * Variable names must be non-empty, unique, and at most 79 bytes (room for "/part_<k>" with any
 * k), and no piece name may equal another (e.g. a variable literally named "a/part_0" next to a
 * split "a"). n == 0 gives an empty placement.
 * Returns PS_OK, PS_EINVAL (num_shards 0, min_slice_bytes 0, NULL vars with n > 0, NULL/empty/
 * duplicate names, zero-size var, byte size overflowing size_t, name too long), PS_ENOMEM.
 * *out is always initialised; on success the caller owns out->pieces and frees them with
 * ps_placement_free; on error *out is empty. */
int ps_place(const ps_place_var *vars, size_t n, unsigned num_shards, size_t min_slice_bytes,
             ps_placement *out);

/* Frees the pieces of p and leaves it empty; NULL and repeated calls are safe. */
void ps_placement_free(ps_placement *p);

#endif
