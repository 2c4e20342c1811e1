/* psd's checkpoints: the whole store (values, optimizer slots and specs, update
 * counts) and the embedding tables (spec, rows, slots, last steps, counts,
 * update count) plus the shard's version and the job id in one tensor file
 * (kind PS_TF_CHECKPOINT, docs/FORMATS.md), written atomically; the newest
 * `keep` are kept. */
#ifndef PS_CHECKPOINT_H
#define PS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_file.h" /* the file layout, ps_ckpt_meta */
#include "store.h"
#include "tables.h"

/* What a checkpoint saves, taken at one moment on psd's loop, to be written
 * then or later (by any thread). */
typedef struct ps_ckpt_snapshot ps_ckpt_snapshot;

/* Takes st and ts (may be NULL: no tables) with the meta m. The tables' rows
 * are always copied (in LRU order, for the file). With copy set the
 * variables are too, so that st may change while the snapshot is written:
 * their values are shared copy-on-write (ps_var_share: no copy now, a copy by
 * the first update that follows), their slots copied; with copy 0 they are
 * borrowed, and st must not change until the snapshot is freed. The copies
 * are the loop's pause. Sync-mode open steps (gradient accumulators, row sums)
 * are not saved: take it between steps. PS_OK or PS_ENOMEM. */
int ps_ckpt_snapshot_take(const ps_store *st, const ps_tables *ts, const ps_ckpt_meta *m, int copy,
                          ps_ckpt_snapshot **out);
/* Writes the snapshot to dir as ps_ckpt_save does; touches nothing but the
 * snapshot and the directory. */
int ps_ckpt_snapshot_write(const ps_ckpt_snapshot *s, const char *dir, int keep, char *path_out,
                           size_t path_len, uint64_t *bytes, char *err, size_t errlen);
/* Bytes the snapshot copied (the tables' rows, and with copy the slots). */
uint64_t ps_ckpt_snapshot_bytes(const ps_ckpt_snapshot *s);
void ps_ckpt_snapshot_free(ps_ckpt_snapshot *s);

/* Writes dir/ckpt-<version %020>-<unix_ms %013>.pstf atomically (creating dir
 * if it is missing, one level), then deletes all but `keep` (>= 1) checkpoint
 * files of the directory: the one just written and the newest others (by
 * version, then time), plus leftover temp files of crashed writers. ts may be
 * NULL (no tables). Sync-mode gradient accumulators are not saved: save
 * between steps. Not to be called concurrently on one directory. path_out
 * (may be NULL) gets the file written, *bytes (may be NULL) its size. Returns
 * PS_OK, PS_EINVAL, PS_ENOMEM or PS_EIO (reason in err); a failed save leaves
 * the older checkpoints as they were. */
int ps_ckpt_save(const char *dir, int keep, const ps_store *st, const ps_tables *ts,
                 const ps_ckpt_meta *m, char *path_out, size_t path_len, uint64_t *bytes, char *err,
                 size_t errlen);

/* Tries the checkpoint files of dir newest first (by version, then time) and
 * loads the first valid one into st and ts, which must be empty (freshly
 * initialised; ts with the job's worker count): variables with values, slots,
 * optimizer specs and update counts; tables with their spec, rows, slots,
 * last steps, counts and update count. ts may be NULL: the file's tables are
 * checked, not kept. Logs every skipped file with its reason (PS_WARN);
 * logging the one loaded is left to the caller (it gets path_out). The file is
 * loaded into a separate store and registry that replace *st and *ts only once
 * complete, so neither is ever half-loaded. Returns PS_OK (with *m and
 * path_out, each may be NULL, filled), PS_ENOENT when dir is missing or holds
 * no valid checkpoint, PS_EIO when none was valid and at least one could not
 * be read (do not start afresh then), PS_EINVAL (st or ts not empty) or
 * PS_ENOMEM. The caller checks the meta (shard, num_shards) against its
 * configuration. */
int ps_ckpt_restore(const char *dir, ps_store *st, ps_tables *ts, ps_ckpt_meta *m, char *path_out,
                    size_t path_len, char *err, size_t errlen);

#endif
