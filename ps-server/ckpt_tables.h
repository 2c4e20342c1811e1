/* An embedding table in a checkpoint (docs/FORMATS.md, "Checkpoints", layout
 * 3): its PS_CKPT_TABLE_TENSORS tensors
 *   <name>@table  the spec (attribute) and the table's numbers
 *   <name>@ids    each stored row's id
 *   <name>@steps  each row's last-pushed step
 *   <name>@rows   each row's values
 *   <name>@slots  each row's optimizer state
 * with the rows from the least to the most recently pushed. Writing goes
 * through a copy of the rows taken on psd's loop (the loop's only pause for
 * tables), which may then be written from any thread; reading checks
 * everything before a table is built. No I/O here: the file is ckpt_file.c's. */
#ifndef PS_CKPT_TABLES_H
#define PS_CKPT_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_file.h"
#include "tables.h"
#include "tensorfile.h"

#define PS_CKPT_TABLE_ATTR_VERSION 1u
#define PS_CKPT_TABLE_ATTR_BYTES 92u
#define PS_CKPT_TABLE_NUMBERS 7u /* u64s in <name>@table: rows, updates, then the counts */

/* A table's spec as the checkpoint's attribute (docs/FORMATS.md; the replication
 * log carries it too), and back (the key is the name's: ps_rows_table_key). */
void ps_ckpt_table_attr_encode(uint8_t a[PS_CKPT_TABLE_ATTR_BYTES], uint64_t num_rows,
                               const ps_table_cfg *c);
void ps_ckpt_table_attr_decode(const uint8_t *a, const char *name, uint64_t *num_rows,
                               ps_table_cfg *c);

/* One table's rows as they were when taken, ready to be written. */
typedef struct {
    char names[PS_CKPT_TABLE_TENSORS][PS_WIRE_MAX_NAME + 8];
    uint8_t attr[PS_CKPT_TABLE_ATTR_BYTES];
    float numbers[2 * PS_CKPT_TABLE_NUMBERS]; /* u64s, each bit-copied into two words */
    size_t n, dim, slot_floats;
    float *ids, *steps; /* [n][2]: u64s bit-copied */
    float *rows;        /* [n][dim] */
    float *slots;       /* [n][slot_floats] */
} ps_ckpt_table_copy;

/* Copies e's spec, numbers and stored rows (in LRU order) into *c. PS_OK or
 * PS_ENOMEM (then *c holds nothing to free). */
int ps_ckpt_table_copy_take(const ps_table_entry *e, ps_ckpt_table_copy *c);
/* The copy's tensors (borrowing from it), in the file's order. */
void ps_ckpt_table_copy_tensors(const ps_ckpt_table_copy *c, ps_tf_tensor t[PS_CKPT_TABLE_TENSORS]);
void ps_ckpt_table_copy_free(ps_ckpt_table_copy *c);

/* Checks a table's tensors t[0 .. PS_CKPT_TABLE_TENSORS) of a file at shard
 * version `version` (names, spec, shapes, counts, ids in range and unique,
 * last steps within 1 .. max(version, the table's updates)) and adds the table
 * to ts with its rows, slots, last steps, counts and update count. Frees the
 * tensors' data once copied. PS_OK, PS_EFORMAT (reason in why; ts may then
 * hold a partial table: discard it) or PS_ENOMEM. */
int ps_ckpt_table_load(ps_tf_owned *t, uint64_t version, ps_tables *ts, char *why, size_t whylen);

#endif
