/* The optimizer spec on the wire: ps_opt_spec (common/optim_spec.h) to and from
 * ps.proto's Optimizer, the CreateVars request's. */
#ifndef PS_OPTIM_SPEC_PROTO_H
#define PS_OPTIM_SPEC_PROTO_H

#include "optim_spec.h"
#include "ps.pb-c.h"

/* An Optimizer message with room for its schedule. */
typedef struct {
    Ps__Optimizer msg;
    Ps__LrSchedule schedule;
} ps_opt_proto;

/* Fills *out (initialized here) from s, field for field: out->msg is the CreateVars
 * request's Optimizer; it points into out and, for a PiecewiseConstantDecay's
 * boundaries and values, into s (both must outlive the packing). No schedule
 * message for a constant rate. The clipping is not sent (ps.proto). */
void ps_opt_spec_to_proto(const ps_opt_spec *s, ps_opt_proto *out);
/* Returns the spec in o, unchecked (the kind may be out of range, and a schedule
 * with more than PS_LR_MAX_BOUNDARIES boundaries or a values count that differs
 * comes back with n_boundaries PS_LR_MAX_BOUNDARIES + 1): callers run
 * ps_opt_spec_validate. Borrows o. */
ps_opt_spec ps_opt_spec_from_proto(const Ps__Optimizer *o);

#endif
