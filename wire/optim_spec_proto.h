/* The optimizer spec on the wire: ps_opt_spec (common/optim_spec.h) to and from
 * ps.proto's Optimizer, the CreateVars request's. */
#ifndef PS_OPTIM_SPEC_PROTO_H
#define PS_OPTIM_SPEC_PROTO_H

#include "optim_spec.h"
#include "ps.pb-c.h"

/* Fills *out (initialized here; it points into nothing) from s, field for field:
 * the CreateVars request's Optimizer. */
void ps_opt_spec_to_proto(const ps_opt_spec *s, Ps__Optimizer *out);
/* Returns the spec in o, unchecked (the kind may be out of range): callers
 * run ps_opt_spec_validate. Borrows o. */
ps_opt_spec ps_opt_spec_from_proto(const Ps__Optimizer *o);

#endif
