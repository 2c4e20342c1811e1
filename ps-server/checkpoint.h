/* psd's checkpoints: the whole store (values, optimizer slots and specs, update
 * counts) plus the shard's version and the job id in one tensor file (kind
 * PS_TF_CHECKPOINT, docs/FORMATS.md), written atomically; the newest `keep` are kept. */
#ifndef PS_CHECKPOINT_H
#define PS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_file.h" /* the file layout, ps_ckpt_meta */
#include "store.h"

/* Writes dir/ckpt-<version %020>-<unix_ms %013>.pstf atomically (creating dir
 * if it is missing, one level), then deletes all but `keep` (>= 1) checkpoint
 * files of the directory: the one just written and the newest others (by
 * version, then time), plus leftover temp files of crashed writers. Sync-mode
 * gradient accumulators are not saved: save between steps. Not to be called
 * concurrently on one directory. path_out (may be NULL) gets the file written,
 * *bytes (may be NULL) its size. Returns PS_OK, PS_EINVAL, PS_ENOMEM or PS_EIO
 * (reason in err); a failed save leaves the older checkpoints as they were. */
int ps_ckpt_save(const char *dir, int keep, const ps_store *st, const ps_ckpt_meta *m,
                 char *path_out, size_t path_len, uint64_t *bytes, char *err, size_t errlen);

/* Tries the checkpoint files of dir newest first (by version, then time) and
 * loads the first valid one into st, which must be empty (freshly initialised):
 * variables with values, slots, optimizer specs and update counts. Logs every
 * skipped file with its reason (PS_WARN); logging the one loaded is left to
 * the caller (it gets path_out). The file is loaded into a separate store that
 * replaces *st only once complete, so st is never half-loaded. Returns PS_OK (with *m and path_out,
 * each may be NULL, filled), PS_ENOENT when dir is missing or holds no valid checkpoint, PS_EIO
 * when none was valid and at least one could not be read (do not start afresh
 * then), PS_EINVAL (st not empty) or PS_ENOMEM. The caller checks the meta
 * (shard, num_shards) against its configuration. */
int ps_ckpt_restore(const char *dir, ps_store *st, ps_ckpt_meta *m, char *path_out, size_t path_len,
                    char *err, size_t errlen);

#endif
