/* ps_opt_spec <-> ps.proto's Optimizer (see optim_spec_proto.h), driven by the spec's
 * field tables (common/optim_spec_fields.h): each field is found in the Optimizer (or
 * its LrSchedule) by its name through protobuf-c's descriptor, so no second list of
 * fields exists; a field without one there (the clipping) does not travel.
 * test_optim_spec's proto round trip checks which fields cross. */
#include "optim_spec_proto.h"

#include <string.h>

#include "optim_spec_fields.h"

#define WIRE_(k, name, slots)                                                                      \
    _Static_assert((int)PS_OPT_##k == (int)PS__OPT_KIND__OPT_##k,                                  \
                   "ps_opt_kind is ps.proto's OptKind");
PS_OPT_KINDS(WIRE_)
#undef WIRE_
#define LR_WIRE_(k, name)                                                                          \
    _Static_assert((int)PS_LR_##k == (int)PS__LR_KIND__LR_##k, "ps_lr_kind is ps.proto's LrKind");
PS_LR_KINDS(LR_WIRE_)
#undef LR_WIRE_

/* Where f lives in a message of descriptor md: its field of f's name and type (a
 * plain scalar), or NULL when there is none. */
static const ProtobufCFieldDescriptor *pb_field(const ProtobufCMessageDescriptor *md,
                                                const ps_opt_field_info *f) {
    const ProtobufCFieldDescriptor *d = protobuf_c_message_descriptor_get_field_by_name(md, f->name);
    if (!d || d->label != PROTOBUF_C_LABEL_NONE ||
        d->type != (f->is_bool ? PROTOBUF_C_TYPE_BOOL : PROTOBUF_C_TYPE_FLOAT))
        return NULL;
    return d;
}

/* Copies the table's fields between a message (msg) and a struct (st), either way. */
static void copy_fields(int (*table)(size_t, ps_opt_field_info *), const ProtobufCMessageDescriptor *md,
                        void *msg, void *st, int to_msg) {
    ps_opt_field_info f;
    for (size_t i = 0; table(i, &f); i++) {
        const ProtobufCFieldDescriptor *d = pb_field(md, &f);
        if (!d) continue;
        char *p = (char *)msg + d->offset, *v = (char *)st + f.off;
        if (f.is_bool && to_msg)
            *(protobuf_c_boolean *)p = *(const bool *)v;
        else if (f.is_bool)
            *(bool *)v = *(const protobuf_c_boolean *)p != 0;
        else if (to_msg)
            memcpy(p, v, sizeof(float));
        else
            memcpy(v, p, sizeof(float));
    }
}

void ps_opt_spec_to_proto(const ps_opt_spec *s, ps_opt_proto *out) {
    ps__optimizer__init(&out->msg);
    ps__lr_schedule__init(&out->schedule);
    out->msg.kind = (Ps__OptKind)s->kind;
    copy_fields(ps__opt_spec_field, &ps__optimizer__descriptor, &out->msg, (void *)s, 1);
    const ps_lr_schedule *c = &s->schedule;
    if (c->kind == PS_LR_CONSTANT) return;
    Ps__LrSchedule *m = &out->schedule;
    m->kind = (Ps__LrKind)c->kind;
    copy_fields(ps__lr_schedule_field, &ps__lr_schedule__descriptor, m, (void *)c, 1);
    if (c->kind == PS_LR_PIECEWISE) {
        size_t n = c->n_boundaries <= PS_LR_MAX_BOUNDARIES ? c->n_boundaries : PS_LR_MAX_BOUNDARIES;
        m->n_boundaries = m->n_values = n;
        m->boundaries = (uint32_t *)c->boundaries;
        m->values = (float *)c->values;
    }
    out->msg.schedule = m;
}

ps_opt_spec ps_opt_spec_from_proto(const Ps__Optimizer *o) {
    ps_opt_spec s = {.kind = (ps_opt_kind)o->kind};
    copy_fields(ps__opt_spec_field, &ps__optimizer__descriptor, (void *)o, &s, 0);
    const Ps__LrSchedule *m = o->schedule;
    if (!m) return s;
    ps_lr_schedule *c = &s.schedule;
    c->kind = (ps_lr_kind)m->kind;
    copy_fields(ps__lr_schedule_field, &ps__lr_schedule__descriptor, (void *)m, c, 0);
    if (m->n_boundaries != m->n_values || m->n_boundaries > PS_LR_MAX_BOUNDARIES) {
        c->n_boundaries = PS_LR_MAX_BOUNDARIES + 1; /* refused by validation */
        return s;
    }
    c->n_boundaries = (uint32_t)m->n_boundaries;
    for (size_t i = 0; i < m->n_boundaries; i++) {
        c->boundaries[i] = m->boundaries[i];
        c->values[i] = m->values[i];
    }
    return s;
}
