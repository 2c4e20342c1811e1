/* The shard's embedding tables (issue 27): each a ps_table (table.h) with what
 * the step protocol adds: sync mode's open step (the workers' row gradients
 * summed, who pushed), async mode's update count. No I/O and no wire types:
 * the handlers (rows_handlers.c) adapt the protocol to it. */
#ifndef PS_TABLES_H
#define PS_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "row_sum.h"
#include "table.h"
#include "var_limits.h"

typedef struct ps_table_entry {
    char name[PS_WIRE_MAX_NAME + 1];
    uint64_t num_rows; /* a fixed table: ids < num_rows; 0: dynamic */
    ps_table_cfg cfg;
    ps_table *t;
    uint64_t updates;       /* async: pushes applied (the table's step) */
    ps_row_sum step_sum;    /* sync: the open step's row gradients */
    uint32_t step_pushes;   /* sync: row pushes in the open step (empty ones too) */
    unsigned char *pushed;  /* sync: [workers], worker w row-pushed in the open step */
    uint32_t workers;
} ps_table_entry;

typedef struct {
    ps_table_entry **v; /* owned, in creation order */
    size_t n, cap;
    uint32_t workers;
    uint64_t max_bytes; /* each table's rows on this shard at most this much (0: unbounded) */
} ps_tables;

/* psd's memory bound per table (--max-table-mb, in bytes; 0: none): applied
 * to the tables there are and to every one created after, as a row limit
 * (ps_table_bound) reached with the table's own policy. */
void ps_tables_set_bound(ps_tables *ts, uint64_t max_bytes);

void ps_tables_init(ps_tables *ts, uint32_t workers);
void ps_tables_free(ps_tables *ts);
ps_table_entry *ps_tables_find(const ps_tables *ts, const char *name);
/* PS_OK when a table of num_rows rows (0: dynamic) may have this config (the
 * checks CreateTable and a checkpoint's reader make: dim, the optimizer's
 * kind and values, the initializer, the cap, the options only dynamic tables
 * take); else PS_EINVAL and the reason in why. The key is not checked. */
int ps_table_entry_cfg_check(uint64_t num_rows, const ps_table_cfg *c, char *why, size_t whylen);
/* A new table (the caller checked the name is free and the config valid).
 * PS_OK, PS_EINVAL (dim) or PS_ENOMEM. */
int ps_tables_create(ps_tables *ts, const char *name, uint64_t num_rows, const ps_table_cfg *cfg,
                     ps_table_entry **out);
/* 1 when e was created with exactly this spec. */
int ps_table_entry_same(const ps_table_entry *e, uint64_t num_rows, const ps_table_cfg *cfg);

/* The first id out of range for a fixed table, as an index, or n when none. */
size_t ps_table_entry_bad_id(const ps_table_entry *e, const uint64_t *ids, size_t n);

/* Sync: adds worker w's row gradients to the open step. Returns PS_OK,
 * PS_EEXIST when w already row-pushed this table in the step (nothing added),
 * or PS_ENOMEM (the step's rows of this table are dropped). */
int ps_table_entry_step_add(ps_table_entry *e, uint32_t w, const uint64_t *ids, size_t n,
                            const float *grads);
/* Sync: the step `step` (1-based: the shard's version after it) closes: every
 * table applies the mean of its summed rows (divided by its row pushes),
 * expires rows past their TTL, and opens the next step. PS_OK or PS_ENOMEM
 * (logged by the caller; the rows are dropped). */
int ps_tables_close_step(ps_tables *ts, uint64_t step);

/* Async: applies one push (duplicate ids summed first) as the table's next
 * update, then expires rows past the TTL. *dropped: row gradients not applied
 * (not admitted yet, or refused at the cap). PS_OK or PS_ENOMEM. */
int ps_table_entry_apply(ps_table_entry *e, const uint64_t *ids, size_t n, const float *grads,
                         uint64_t *dropped);

/* Bytes the tables hold (rows, state, index, open steps). */
uint64_t ps_tables_bytes(const ps_tables *ts);

#endif
