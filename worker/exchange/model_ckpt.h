/* The all-reduce chief's checkpoints: the model's variables with the local
 * optimizer's slots and update count, the steps done and the job id, in psd's
 * checkpoint file format (common/ckpt_file.h, docs/FORMATS.md). */
#ifndef PS_MODEL_CKPT_H
#define PS_MODEL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_file.h"
#include "local_opt.h"
#include "loss_scale.h"
#include "model.h"

/* The loss scaler's entry in a checkpoint (mixed_float16): after the model's
 * variables, [scale, good_steps] as floats, SGD. */
#define PS_MODEL_CKPT_LOSS_SCALE "__loss_scale__"

/* Entries of a checkpoint after the model's variables and the loss scaler's
 * (the all-reduce strategies' mirrored embedding tables, mirror_tables.h):
 * saved as given; on load, `load` gets the file's entries past the model's
 * (vars[0..n), their tensors in f) and returns PS_OK to take them, or
 * PS_EFORMAT with the reason to skip the file as not this model's. */
typedef struct {
    const ps_ckpt_var *vars; /* save: entries appended (borrowed) */
    size_t n;
    int (*load)(void *user, ps_tf_file *f, const ps_ckpt_loaded_var *vars, size_t n, char *why,
                size_t whylen);
    void *user;
} ps_model_ckpt_extra;

/* Writes one checkpoint of m and o after `clock` steps of job job_id into dir
 * (created if missing; temp file + rename), keeping the newest `keep` files.
 * path_out (may be NULL) gets the file. Returns PS_OK or an error with a reason
 * in err (PS_EIO, PS_EINVAL, PS_ENOMEM). */
int ps_model_ckpt_save(const char *dir, unsigned keep, ps_model *m, ps_local_opt *o,
                       uint64_t clock, const char *job_id, char *path_out, size_t path_len,
                       char *err, size_t errlen);
/* Same, with the loss scaler's state (ls may be NULL: none written) and the
 * extra entries (NULL: none). */
int ps_model_ckpt_save_scaled(const char *dir, unsigned keep, ps_model *m, ps_local_opt *o,
                              const ps_loss_scale *ls, const ps_model_ckpt_extra *extra,
                              uint64_t clock, const char *job_id, char *path_out,
                              size_t path_len, char *err, size_t errlen);

/* Loads the newest valid checkpoint of dir into m's parameters and o's slots and
 * update count, and *clock (steps done). A file whose variables do not match
 * the model (names, sizes, optimizer) is skipped as invalid. Returns PS_OK
 * (path_out filled), PS_ENOENT (no dir or no valid checkpoint: start afresh),
 * PS_EEXIST (the newest valid one belongs to another job: refused, naming both),
 * PS_EIO (some could not be read), PS_ENOMEM; reason in err. */
int ps_model_ckpt_load(const char *dir, ps_model *m, ps_local_opt *o, const char *job_id,
                       uint64_t *clock, char *path_out, size_t path_len, char *err,
                       size_t errlen);
/* Same; a checkpoint's loss scaler entry restores *ls (ls may be NULL: ignored;
 * a checkpoint without one leaves *ls as it is); the entries after them go to
 * extra->load (extra NULL, or its load NULL: a file with any is skipped as
 * not this model's). */
int ps_model_ckpt_load_scaled(const char *dir, ps_model *m, ps_local_opt *o, ps_loss_scale *ls,
                              const ps_model_ckpt_extra *extra, const char *job_id,
                              uint64_t *clock, char *path_out, size_t path_len, char *err,
                              size_t errlen);

#endif
