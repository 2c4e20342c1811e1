/* One shard's part of an embedding table: rows addressed by 64-bit id,
 * created on first use, updated by a sparse optimizer (optim_rows.h). No I/O
 * and no wire types: ids and floats in, rows and counts out (issue 27).
 *
 * A row not stored reads as its initial values (rows.h: from the seed, the
 * table and the id, so it does not matter which worker touches it first).
 * Admission: with min_count N > 1 a row is stored only once it has been pushed
 * N times (counted in a count-min sketch of fixed size, which may count an id
 * early, never late); until then its gradients are dropped and counted.
 * Expiry: with ttl_steps T a row not pushed for T steps is removed by
 * ps_table_expire. A cap of max_rows: when full, a new row evicts the least
 * recently pushed one (PS_TABLE_EVICT_LRU) or is refused, its gradient
 * dropped and counted (PS_TABLE_REFUSE). The cost of a pull or a push is that
 * of the rows it names: a hash lookup each, never a pass over the table. */
#ifndef PS_TABLE_H
#define PS_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "optim_rows.h"

typedef enum { PS_TABLE_EVICT_LRU = 0, PS_TABLE_REFUSE } ps_table_full;

typedef struct {
    size_t dim;           /* values per row, 1 .. PS_TABLE_MAX_DIM */
    ps_row_opt opt;
    uint64_t seed;        /* the job's: initial values */
    uint64_t key;         /* the table's (ps_rows_table_key) */
    float init_lo, init_hi; /* initial values uniform in [lo, hi) */
    uint32_t min_count;   /* pushes before a row is stored (0, 1: at once) */
    uint64_t ttl_steps;   /* rows not pushed for this many steps expire (0: never) */
    size_t max_rows;      /* cap (0: none) */
    ps_table_full full;   /* at the cap */
} ps_table_cfg;

#define PS_TABLE_MAX_DIM 65536

typedef struct {
    uint64_t rows;      /* stored now */
    uint64_t admitted;  /* rows ever stored */
    uint64_t evicted;   /* removed for the cap (LRU) */
    uint64_t expired;   /* removed for the TTL */
    uint64_t refused;   /* new rows refused at the cap */
    uint64_t dropped;   /* row gradients dropped (not admitted yet, or refused) */
    uint64_t bytes;     /* the rows, their state and the index */
} ps_table_counts;

typedef struct ps_table ps_table;

/* Returns PS_OK, PS_EINVAL (dim 0 or over the limit) or PS_ENOMEM. */
int ps_table_new(const ps_table_cfg *cfg, ps_table **out);
void ps_table_free(ps_table *t);

/* Rows ids[0..n) into out[n * dim] (initial values for rows not stored).
 * Nothing changes. */
void ps_table_pull(const ps_table *t, const uint64_t *ids, size_t n, float *out);

/* Applies grads[n * dim] to rows ids[0..n) at table step `step` (1-based,
 * the update count lazy Adam's bias correction uses, and what the TTL counts).
 * An id given twice is applied twice, in order (sum duplicates first for one
 * update). Returns PS_OK or PS_ENOMEM (the rows before the failing one are
 * applied). */
int ps_table_push(ps_table *t, const uint64_t *ids, size_t n, const float *grads, uint64_t step);

/* Removes the rows not pushed since step - ttl_steps; returns how many. */
size_t ps_table_expire(ps_table *t, uint64_t step);

/* Bytes one stored row takes (values, optimizer state, id, step, LRU links,
 * its index slots): what a memory bound divides by. */
size_t ps_table_row_bytes(const ps_table_cfg *cfg);
/* psd's own bound on the rows stored (--max-table-mb): the table keeps at
 * most min(max_rows, rows) (0: no bound beyond max_rows), reached with the
 * table's policy (evict or refuse). Rows above a lowered limit stay until
 * evicted. */
void ps_table_bound(ps_table *t, size_t rows);
/* The rows the table stores at most now (0: no limit). */
size_t ps_table_limit(const ps_table *t);

void ps_table_stats_get(const ps_table *t, ps_table_counts *s);

/* Visits every stored row (a checkpoint): id, values, optimizer state (slots
 * floats), last step pushed; from the least recently pushed row to the most
 * recently pushed (the order the cap evicts in), so restoring the rows in the
 * order visited rebuilds the same table. */
typedef void (*ps_table_visit_fn)(void *ctx, uint64_t id, const float *row, const float *slots,
                                  uint64_t last_step);
void ps_table_visit(const ps_table *t, ps_table_visit_fn fn, void *ctx);

/* Stores a row as a checkpoint holds it (restore), as the most recently
 * pushed one. Returns PS_OK, PS_EEXIST (id is stored already: nothing
 * changes), PS_EINVAL (the table is at a refusing cap) or PS_ENOMEM. */
int ps_table_restore_row(ps_table *t, uint64_t id, const float *row, const float *slots,
                         uint64_t last_step);

/* Sets the counts a checkpoint holds (admitted, evicted, expired, refused,
 * dropped; rows and bytes are the table's own and ignored), after its rows
 * are restored. */
void ps_table_restore_counts(ps_table *t, const ps_table_counts *c);

#endif
