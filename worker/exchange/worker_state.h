/* A worker's own state for an exact resume: what lives in this worker's process
 * only and what a job resumed from its checkpoints needs to continue as if it
 * had never stopped (a loss scaler the worker keeps for itself, top-k
 * residuals, local SGD's optimizer). psd's checkpoints and the all-reduce
 * chief's hold the variables; this is the rest.
 *
 * Each worker writes its own file, DIR/worker-<index>-step-<20 digits>.pstf
 * (a tensor file of kind 3, docs/FORMATS.md), at the steps the loop chooses; a
 * resumed worker loads the file of the step the job resumes at. A file written
 * by another worker count, another job or a model with other entries is not
 * loaded: the caller says so and the state starts afresh. */
#ifndef PS_WORKER_STATE_H
#define PS_WORKER_STATE_H

#include <stddef.h>
#include <stdint.h>

/* One entry: a live buffer (borrowed) and an optional counter saved with it. */
typedef struct {
    char *name;      /* owned */
    float *data;     /* numel floats, borrowed: read on save, written on load */
    size_t numel;
    uint64_t *count; /* NULL: none */
} ps_wstate_entry;

/* The entries, in a fixed order (save and load list them the same way). */
typedef struct {
    ps_wstate_entry *e;
    size_t n, cap;
} ps_wstate;

/* Where the files go and whose they are. */
typedef struct {
    const char *dir;    /* created if missing */
    unsigned index;     /* this worker */
    unsigned workers;   /* the job's worker count */
    const char *job_id; /* NULL: none */
    unsigned keep;      /* newest files of this worker kept (0: 1) */
} ps_wstate_where;

/* Appends an entry (name copied). PS_OK or PS_ENOMEM. */
int ps_wstate_add(ps_wstate *s, const char *name, float *data, size_t numel, uint64_t *count);
/* Frees the list (not the buffers); s is empty after. */
void ps_wstate_free(ps_wstate *s);

/* Writes s after `steps` steps (temp file + rename), removes this worker's
 * files of later steps (an abandoned run's) and keeps the newest w->keep.
 * path_out (may be NULL) gets the file. PS_OK or PS_EIO / PS_ENOMEM / PS_EINVAL
 * with a reason in err. */
int ps_wstate_save(const ps_wstate *s, const ps_wstate_where *w, uint64_t steps, char *path_out,
                   size_t path_len, char *err, size_t errlen);
/* Loads this worker's file of step `steps` into s's buffers, all or nothing.
 * PS_OK (path_out filled); PS_ENOENT (no file of that step); PS_ESHAPE (written
 * with another worker count, for another job, or with other entries) or
 * PS_EFORMAT / PS_EIO (unreadable): nothing restored, the reason in why. */
int ps_wstate_load(const ps_wstate *s, const ps_wstate_where *w, uint64_t steps, char *path_out,
                   size_t path_len, char *why, size_t whylen);

#endif
