/* The training loop's side of an exact resume (docs/TRAINING.md, "Exact
 * resume"): what the loop itself knows of where a job stopped, and this
 * worker's own state file (worker_state.h) with the loss scaler when the
 * worker keeps its own (parameter_server, local SGD) and the strategy's
 * entries (top-k residuals, local SGD's optimizer). */
#ifndef PS_RESUME_H
#define PS_RESUME_H

#include <stddef.h>
#include <stdint.h>

#include "exchange.h"
#include "loss_scale.h"
#include "train.h"
#include "worker_state.h"

typedef struct {
    ps_wstate ws;          /* the entries; none: nothing of this worker's to keep */
    ps_wstate_where where; /* where.dir NULL: no --checkpoint-dir */
    ps_loss_scale *scaler; /* saved with the state (borrowed), NULL: not this worker's own */
    float ls[3];           /* its scale, good steps and skipped steps, as saved */
    uint64_t every;        /* also every N steps (0: only at each epoch's end) */
} ps_resume;

/* Lists this worker's state after the exchange's join: scaler (NULL: none) is
 * saved when this worker keeps its own. PS_OK or PS_ENOMEM (reason in err). */
int ps_resume_open(ps_resume *r, const ps_train_config *cfg, ps_exchange *ex,
                   ps_loss_scale *scaler, char *err, size_t errlen);
/* The job resumes after `clock` steps (0: a fresh job, nothing to do): loads
 * this worker's file of that step. Never fails: a state that cannot be restored
 * (no --checkpoint-dir, no file of that step, another worker count or job)
 * starts afresh and a warning names what and why. */
void ps_resume_load(ps_resume *r, uint64_t clock);
/* After step `clock` (epoch_end: it ended an epoch): writes this worker's
 * file when one is due; a failure is logged, training goes on. */
void ps_resume_step_done(ps_resume *r, uint64_t clock, int epoch_end);
void ps_resume_free(ps_resume *r);

/* The micro-batches a worker has trained on after `clock` steps of
 * steps_per_epoch, each of `accum` micro-batches but an epoch's last (an epoch
 * has micro_per_epoch): the model's train step count (dropout masks). */
uint64_t ps_resume_micro_batches(uint64_t clock, uint64_t steps_per_epoch, uint64_t accum,
                                 uint64_t micro_per_epoch);

#endif
