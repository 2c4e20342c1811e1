/* The optimizer spec's field table (optim_spec.c) as the codecs outside that file
 * see it: wire/optim_spec_proto.c converts to and from ps.proto's Optimizer with it,
 * so the fields are listed once. Internal: not installed with libps. */
#ifndef PS_OPTIM_SPEC_FIELDS_H
#define PS_OPTIM_SPEC_FIELDS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *name; /* the ps_opt_spec member's name, which is ps.proto's field name */
    bool is_bool;     /* a bool, else a float */
    size_t off;       /* in ps_opt_spec */
} ps_opt_field_info;

/* Field i of the table (in its order) into *out: 1, or 0 past the last field. */
int ps__opt_spec_field(size_t i, ps_opt_field_info *out);
/* The same for the schedule's scalar fields (off is in ps_lr_schedule; ps.proto's
 * LrSchedule has the same names); its kind, boundaries and values are not listed. */
int ps__lr_schedule_field(size_t i, ps_opt_field_info *out);

#endif
