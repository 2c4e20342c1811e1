/* The optimizer inside the worker, for --no-ps: the same formulas psd
 * applies (common/optim.h), on the model's own parameters, one update per
 * step. The floor against which the system's overhead is measured. */
#ifndef PS_LOCAL_OPT_H
#define PS_LOCAL_OPT_H

#include <stddef.h>
#include <stdint.h>

#include "clip.h"
#include "model.h"
#include "worker_state.h"

typedef struct ps_local_opt ps_local_opt;

/* Slots for every variable of m (borrowed: must outlive the optimizer).
 * Returns PS_OK or PS_ENOMEM. */
int ps_local_opt_new(ps_model *m, ps_local_opt **out);
void ps_local_opt_free(ps_local_opt *o);
/* Applies the model's gradients to its parameters (each variable with its
 * optimizer spec, ps_model_var_optimizer), in Keras' order: the clipping the
 * model's optimizer asks for (common/clip.h, over the trainable variables'
 * gradients, which it changes in place), then weight decay and the update
 * (ps_optim_apply). */
void ps_local_opt_step(ps_local_opt *o);

/* The trainable variables' gradient ranges in ps_model_grads (what clipping
 * covers; the moving statistics are left out). On PS_OK *out (caller frees) holds
 * *n ranges in variable order (may be 0: *out is then still freeable). PS_ENOMEM. */
int ps_trainable_ranges(const ps_model *m, ps_clip_range **out, size_t *n);

/* The optimizer's state, for checkpoints and the all-reduce broadcast: slot k
 * (0 .. ps_optim_num_slots - 1) of variable i, numel floats owned by o; NULL
 * when the kind has no such slot. */
float *ps_local_opt_slot(ps_local_opt *o, size_t var, int k);
/* Updates applied so far (Adam's t), and setting it when resuming. */
uint64_t ps_local_opt_updates(const ps_local_opt *o);
void ps_local_opt_set_updates(ps_local_opt *o, uint64_t t);
/* Adds the optimizer's state to s (worker_state.h): "<prefix>/updates" (no values,
 * the update count) and "<prefix>/<variable>/slot<k>" for each slot. PS_OK or
 * PS_ENOMEM. */
int ps_local_opt_state(ps_local_opt *o, const char *prefix, ps_wstate *s);

#endif
