/* Checkpoint files (docs/FORMATS.md, "Checkpoints"): a set of variables, each
 * with its optimizer spec, slots and update count, plus a few numbers and the
 * job id, in one tensor file (kind PS_TF_CHECKPOINT) named
 * ckpt-<version>-<unix_ms>.pstf in a directory, written atomically, the newest
 * `keep` kept. psd saves its store with it (ps-server/checkpoint.c), the chief
 * of an all-reduce job its model (worker/exchange/exchange_collective.c). */
#ifndef PS_CKPT_FILE_H
#define PS_CKPT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "optim_spec.h"
#include "tensorfile.h"
#include "job_id.h"
#include "var_limits.h"

#define PS_CKPT_LAYOUT_VERSION 1u /* header meta[7]: how variables map to tensors */
#define PS_CKPT_LAYOUT_JOB 2u     /* the same, plus a last tensor "@job" naming the job */
/* variables, "@job" (its job id may be empty), the embedding tables' tensors, and a
 * last tensor "@tables" counting the tables */
#define PS_CKPT_LAYOUT_TABLES 3u
#define PS_CKPT_JOB_TENSOR "@job"
#define PS_CKPT_TABLES_TENSOR "@tables"
#define PS_CKPT_TABLE_TENSORS 5u /* tensors per table (their meaning: ps-server/ckpt_tables.h) */

/* Numbers saved with a checkpoint (header meta[0..6]); the writer gives them meaning. */
typedef struct {
    uint64_t version;         /* psd: the shard's version; a worker: steps done */
    uint64_t updates_applied; /* optimizer applies so far */
    uint64_t shard, num_shards;
    uint64_t mode;        /* sync/async, as psd encodes it (0 sync) */
    uint64_t incarnation; /* which run of the writer wrote it */
    uint64_t unix_ms;     /* wall-clock time of the save; 0 = now */
    /* the job the variables belong to, NUL-terminated ("": none; then the file has
     * layout 1); sized so that the struct has no padding */
    char job_id[PS_WIRE_MAX_JOB_ID + 8];
} ps_ckpt_meta;

/* One variable to save; everything borrowed for the call. */
typedef struct {
    const char *name; /* <= PS_WIRE_MAX_NAME bytes */
    size_t rank;      /* 1..PS_WIRE_MAX_RANK */
    const uint64_t *shape;
    size_t numel;
    const float *w;             /* values */
    const float *const *slots;  /* ps_optim_num_slots(opt.kind) arrays of numel */
    ps_opt_spec opt;
    uint64_t updates;           /* optimizer applies to this variable (Adam's t) */
} ps_ckpt_var;

/* Writes dir/ckpt-<version %020>-<unix_ms %013>.pstf atomically (creating dir
 * if it is missing, one level), then deletes all but `keep` (>= 1) checkpoint
 * files of the directory: the one just written and the newest others (by
 * version, then time), plus leftover temp files of crashed writers. Not to be
 * called concurrently on one directory. tables: n_tables * PS_CKPT_TABLE_TENSORS
 * tensors written after "@job" as they are (layout 3; none: layout 1 or 2, as
 * before tables existed). path_out (may be NULL) gets the file written, *bytes
 * (may be NULL) its size. Returns PS_OK, PS_EINVAL, PS_ENOMEM or PS_EIO (reason in
 * err); a failed save leaves the older checkpoints as they were. Touches nothing
 * but its arguments and the directory: it may run on any thread. */
int ps_ckpt_write(const char *dir, int keep, const ps_ckpt_var *vars, size_t n,
                  const ps_tf_tensor *tables, size_t n_tables, const ps_ckpt_meta *m,
                  char *path_out, size_t path_len, uint64_t *bytes, char *err, size_t errlen);

/* A variable of a file being loaded: checked (spec, slot count and names, shape,
 * UTF-8 name) and pointing into the file's tensors: its values are f->t[tensor],
 * its slots f->t[tensor + 1 + k]. */
typedef struct {
    const char *name;
    uint32_t rank;
    const uint64_t *shape;
    size_t numel;
    size_t tensor;
    uint32_t nslots;
    ps_opt_spec opt;
    uint64_t updates;
} ps_ckpt_loaded_var;

/* The reader's use of a checked file: returns PS_OK to take it, PS_EFORMAT (reason
 * in why) to skip it and try the next older one, any other error to stop there
 * with it. It may take (and NULL) the data pointers of f's tensors. */
typedef int (*ps_ckpt_accept_fn)(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars,
                                 size_t n, const ps_ckpt_meta *m, char *why, size_t whylen);

/* The tables of a file the reader checked: f->t[*first ..] holds *n_tables groups
 * of PS_CKPT_TABLE_TENSORS tensors (none before layout 3; their contents are for
 * the caller to check). PS_OK, or PS_EFORMAT with the reason when the file's
 * layout is not one this build reads. */
int ps_ckpt_tables_of(const ps_tf_file *f, size_t *first, size_t *n_tables, char *err,
                      size_t errlen);

/* Tries the checkpoint files of dir newest first (by version, then time); the
 * first that reads cleanly, describes variables (kind 1, layout 1, 2 or 3, valid
 * attributes and slots; layout 3's tables placed as it says) and is accepted
 * wins. Logs every skipped file with its reason (PS_WARN). Returns PS_OK (with
 * *m and path_out, each may be NULL, filled), PS_ENOENT when dir is missing or
 * holds no valid checkpoint, PS_EIO when none was valid and at least one could
 * not be read (do not start afresh then), PS_ENOMEM, or the error accept
 * stopped with; reason in err. Files are never modified. */
int ps_ckpt_read_newest(const char *dir, ps_ckpt_accept_fn accept, void *user, ps_ckpt_meta *m,
                        char *path_out, size_t path_len, char *err, size_t errlen);

#endif
