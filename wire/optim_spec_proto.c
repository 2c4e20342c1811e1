/* ps_opt_spec <-> ps.proto's Optimizer (see optim_spec_proto.h), driven by the spec's
 * one field table (common/optim_spec_fields.h): each field is found in the Optimizer
 * by its name through protobuf-c's descriptor, so no second list of fields exists.
 * test_optim_spec's proto round trip checks every field crosses. */
#include "optim_spec_proto.h"

#include "optim_spec_fields.h"

#define WIRE_(k, name, slots)                                                                      \
    _Static_assert((int)PS_OPT_##k == (int)PS__OPT_KIND__OPT_##k,                                  \
                   "ps_opt_kind is ps.proto's OptKind");
PS_OPT_KINDS(WIRE_)
#undef WIRE_

/* Where f lives in a Ps__Optimizer: ps.proto's field of f's name and type (a plain
 * scalar), or NULL when there is none. */
static const ProtobufCFieldDescriptor *pb_field(const ps_opt_field_info *f) {
    const ProtobufCFieldDescriptor *d =
        protobuf_c_message_descriptor_get_field_by_name(&ps__optimizer__descriptor, f->name);
    if (!d || d->label != PROTOBUF_C_LABEL_NONE ||
        d->type != (f->is_bool ? PROTOBUF_C_TYPE_BOOL : PROTOBUF_C_TYPE_FLOAT))
        return NULL;
    return d;
}

void ps_opt_spec_to_proto(const ps_opt_spec *s, Ps__Optimizer *out) {
    ps__optimizer__init(out);
    out->kind = (Ps__OptKind)s->kind;
    ps_opt_field_info f;
    for (size_t i = 0; ps__opt_spec_field(i, &f); i++) {
        const ProtobufCFieldDescriptor *d = pb_field(&f);
        if (!d) continue;
        char *p = (char *)out + d->offset;
        const char *v = (const char *)s + f.off;
        if (f.is_bool)
            *(protobuf_c_boolean *)p = *(const bool *)v;
        else
            *(float *)p = *(const float *)v;
    }
}

ps_opt_spec ps_opt_spec_from_proto(const Ps__Optimizer *o) {
    ps_opt_spec s = {.kind = (ps_opt_kind)o->kind};
    ps_opt_field_info f;
    for (size_t i = 0; ps__opt_spec_field(i, &f); i++) {
        const ProtobufCFieldDescriptor *d = pb_field(&f);
        if (!d) continue;
        const char *p = (const char *)o + d->offset;
        char *v = (char *)&s + f.off;
        if (f.is_bool)
            *(bool *)v = *(const protobuf_c_boolean *)p != 0;
        else
            *(float *)v = *(const float *)p;
    }
    return s;
}
