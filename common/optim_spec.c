/* The optimizer spec's codec: one table of its fields drives the defaults,
 * validation, comparison and description, and the conversions to and from
 * the checkpoint attribute and the JSON model spec (and, through
 * optim_spec_fields.h, ps.proto's Optimizer: wire/optim_spec_proto.c). */
#include "optim_spec.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "optim_spec_fields.h"
#include "errf.h"
#include "ps_error.h"

#define NAME_(k, name, slots) name,
static const char *names[PS_OPT_COUNT] = {PS_OPT_KINDS(NAME_)};
#undef NAME_

/* ---- the field table ------------------------------------------------------ */

typedef enum { F_FLOAT, F_BOOL } ftype;

typedef struct {
    const char *name; /* in ps_opt_spec, ps.proto and ps_opt_spec_describe */
    const char *key;  /* in the JSON model spec (Keras's argument name) */
    ftype type;       /* float, or bool (protobuf_c_boolean on the wire, u32 0/1 in a checkpoint) */
    size_t off;       /* in ps_opt_spec */
    unsigned attr_off;       /* in the checkpoint attribute's optimizer part (after the u32 kind) */
    unsigned kinds;          /* bit mask of the kinds whose update reads it */
    float def[PS_OPT_COUNT]; /* default per kind (Keras's) */
    float lo, hi;            /* bounds (floats only), checked for every kind */
    bool lo_open, hi_open;   /* lo < v rather than lo <= v; v < hi rather than v <= hi */
    bool optional;           /* 0 is "none": JSON null reads as 0 (where the kind's default
                              * is 0), and ps_opt_spec_describe leaves out a 0 there */
} field;

#define K(k) (1u << (k))
#define ALL(v)                                                                                     \
    { v, v, v, v, v, v }
_Static_assert(PS_OPT_COUNT == 6, "ALL() lists one default per kind");
#define F(n) offsetof(ps_opt_spec, n)
#define POSITIVE 0, INFINITY, true, false /* (0, inf) */
#define UNIT 0, 1, false, true            /* [0, 1) */
#define NONNEG 0, INFINITY, false, false  /* [0, inf) */
#define NOBOUNDS 0, 0, false, false       /* a bool */
#define ADAMS (K(PS_OPT_ADAM) | K(PS_OPT_ADAMW))
#define OPTIONAL true

/* The order is validation's and ps_opt_spec_describe's. */
// clang-format off
static const field fields[] = {
    /* name, JSON key, type, offset in the spec, attribute offset, kinds, defaults, bounds */
    {"lr", "learning_rate", F_FLOAT, F(lr), 4, ~0u,
     {[PS_OPT_SGD] = 0.01f, [PS_OPT_MOMENTUM] = 0.01f, [PS_OPT_ADAGRAD] = 1e-3f,
      [PS_OPT_RMSPROP] = 1e-3f, [PS_OPT_ADAM] = 1e-3f, [PS_OPT_ADAMW] = 1e-3f}, POSITIVE},
    {"momentum", "momentum", F_FLOAT, F(momentum), 8, K(PS_OPT_MOMENTUM),
     {[PS_OPT_MOMENTUM] = 0.9f}, UNIT},
    {"nesterov", "nesterov", F_BOOL, F(nesterov), 12, K(PS_OPT_MOMENTUM),
     ALL(0), NOBOUNDS},
    {"beta1", "beta_1", F_FLOAT, F(beta1), 16, ADAMS, ALL(0.9f), UNIT},
    {"beta2", "beta_2", F_FLOAT, F(beta2), 20, ADAMS, ALL(0.999f), UNIT},
    {"epsilon", "epsilon", F_FLOAT, F(epsilon), 24,
     K(PS_OPT_ADAGRAD) | K(PS_OPT_RMSPROP) | ADAMS, ALL(1e-7f), NONNEG},
    {"rho", "rho", F_FLOAT, F(rho), 28, K(PS_OPT_RMSPROP), ALL(0.9f), UNIT},
    {"weight_decay", "weight_decay", F_FLOAT, F(weight_decay), 32, ~0u,
     {[PS_OPT_ADAMW] = 0.004f}, NONNEG, OPTIONAL},
    {"initial_accumulator", "initial_accumulator_value", F_FLOAT,
     F(initial_accumulator), 36, K(PS_OPT_ADAGRAD), ALL(0.1f), NONNEG},
    /* attribute version 2 from here; not in ps.proto (the workers clip) */
    {"clipnorm", "clipnorm", F_FLOAT, F(clipnorm), 40, ~0u, ALL(0), NONNEG, OPTIONAL},
    {"clipvalue", "clipvalue", F_FLOAT, F(clipvalue), 44, ~0u, ALL(0), NONNEG, OPTIONAL},
    {"global_clipnorm", "global_clipnorm", F_FLOAT, F(global_clipnorm), 48, ~0u, ALL(0), NONNEG,
     OPTIONAL},
};
// clang-format on
#define NFIELDS (sizeof fields / sizeof fields[0])

/* The schedule's scalar fields (ps_lr_schedule), named as Keras' config keys. */
#define LK(k) (1u << (PS_LR_##k))
#define S(n) offsetof(ps_lr_schedule, n)
#define FRACTION 0, 1, false, false /* [0, 1] */
typedef struct {
    const char *name; /* in ps_lr_schedule, ps.proto's LrSchedule, Keras' config */
    ftype type;
    size_t off;        /* in ps_lr_schedule */
    unsigned attr_off; /* in the attribute's optimizer part */
    unsigned kinds;    /* bit mask of the schedules that read it */
    bool required;     /* Keras' constructor has no default for it */
    float lo, hi;      /* bounds (floats only) */
    bool lo_open, hi_open;
} sfield;
// clang-format off
static const sfield sfields[] = {
    {"decay_steps", F_FLOAT, S(decay_steps), 56, LK(EXPONENTIAL) | LK(COSINE) | LK(INVERSE_TIME),
     true, POSITIVE},
    {"decay_rate", F_FLOAT, S(decay_rate), 60, LK(EXPONENTIAL) | LK(INVERSE_TIME), true, NONNEG},
    {"staircase", F_BOOL, S(staircase), 64, LK(EXPONENTIAL) | LK(INVERSE_TIME), false, NOBOUNDS},
    {"alpha", F_FLOAT, S(alpha), 68, LK(COSINE), false, FRACTION},
    {"warmup_target", F_FLOAT, S(warmup_target), 72, LK(COSINE), false, NONNEG},
    {"warmup_steps", F_FLOAT, S(warmup_steps), 76, LK(COSINE), false, NONNEG},
};
// clang-format on
#define NSFIELDS (sizeof sfields / sizeof sfields[0])
#define ATTR_SCHED_KIND 52u
#define ATTR_N_BOUNDARIES 80u
#define ATTR_BOUNDARIES 84u
#define ATTR_VALUES (ATTR_BOUNDARIES + 4 * PS_LR_MAX_BOUNDARIES)
_Static_assert(4 + 4 * NFIELDS == ATTR_SCHED_KIND, "the attribute holds the kind and each field");
_Static_assert(ATTR_SCHED_KIND + 4 + 4 * NSFIELDS == ATTR_N_BOUNDARIES,
               "then the schedule's kind and fields");
_Static_assert(ATTR_VALUES + 4 * PS_LR_MAX_BOUNDARIES == PS_OPT_ATTR_BYTES,
               "then its boundaries and values");

#define LR_NAME_(k, name) name,
static const char *lr_names[PS_LR_COUNT] = {PS_LR_KINDS(LR_NAME_)};
#undef LR_NAME_

static const char *lr_name(ps_lr_kind k) {
    return (unsigned)k < PS_LR_COUNT ? lr_names[k] : "unknown schedule";
}

static float *fp(ps_opt_spec *s, const field *f) {
    return (float *)((char *)s + f->off);
}
static bool *bp(ps_opt_spec *s, const field *f) {
    return (bool *)((char *)s + f->off);
}
static float fget(const ps_opt_spec *s, const field *f) {
    return *(const float *)((const char *)s + f->off);
}
static bool bget(const ps_opt_spec *s, const field *f) {
    return *(const bool *)((const char *)s + f->off);
}

/* Whether the JSON spec may set f for kind: the fields kind's update reads, and
 * for sgd also momentum's (Keras's SGD takes momentum and nesterov; sgd with
 * momentum > 0 becomes momentum). */
static bool json_applies(const field *f, ps_opt_kind kind) {
    return (f->kinds & K(kind)) || (kind == PS_OPT_SGD && (f->kinds & K(PS_OPT_MOMENTUM)));
}


static float sget(const ps_lr_schedule *c, const sfield *f) {
    return *(const float *)((const char *)c + f->off);
}
static bool sbget(const ps_lr_schedule *c, const sfield *f) {
    return *(const bool *)((const char *)c + f->off);
}
static float *sfp(ps_lr_schedule *c, const sfield *f) {
    return (float *)((char *)c + f->off);
}
static bool *sbp(ps_lr_schedule *c, const sfield *f) {
    return (bool *)((char *)c + f->off);
}
static bool s_applies(const sfield *f, ps_lr_kind k) {
    return (unsigned)k < PS_LR_COUNT && (f->kinds & (1u << k));
}

/* v within [lo, hi] as the flags say. */
static bool in_bounds(float v, float lo, float hi, bool lo_open, bool hi_open) {
    return isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

/* "must be > 0" or "must be in [0, 1)" into buf. */
static const char *bounds_text(float lo, float hi, bool lo_open, bool hi_open, char *buf,
                               size_t len) {
    if (isinf(hi))
        snprintf(buf, len, "must be %s %g", lo_open ? ">" : ">=", (double)lo);
    else
        snprintf(buf, len, "must be in %c%g, %g%c", lo_open ? '(' : '[', (double)lo, (double)hi,
                 hi_open ? ')' : ']');
    return buf;
}


/* ---- kinds, defaults, validation, comparison ------------------------------- */

ps_opt_spec ps_opt_spec_default(ps_opt_kind kind) {
    ps_opt_spec s = {.kind = kind};
    if ((unsigned)kind >= PS_OPT_COUNT) return s;
    for (size_t i = 0; i < NFIELDS; i++) {
        if (fields[i].type == F_BOOL)
            *bp(&s, &fields[i]) = fields[i].def[kind] != 0;
        else
            *fp(&s, &fields[i]) = fields[i].def[kind];
    }
    return s;
}

const char *ps_opt_kind_name(ps_opt_kind kind) {
    return (unsigned)kind < PS_OPT_COUNT ? names[kind] : "unknown";
}

int ps_opt_kind_parse(const char *name, ps_opt_kind *out) {
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        if (strcasecmp(name, names[k]) == 0) {
            *out = (ps_opt_kind)k;
            return PS_OK;
        }
    }
    return PS_EINVAL;
}

/* The schedule's fields, boundaries and values (lr was checked: >= 0). */
static int schedule_validate(const ps_opt_spec *s, char *err, size_t errlen) {
    const ps_lr_schedule *c = &s->schedule;
    const char *kn = ps_opt_kind_name(s->kind), *sn = lr_name(c->kind);
    char b[64];
    for (size_t i = 0; i < NSFIELDS; i++) {
        const sfield *f = &sfields[i];
        if (f->type != F_FLOAT || !s_applies(f, c->kind)) continue;
        if (!in_bounds(sget(c, f), f->lo, f->hi, f->lo_open, f->hi_open))
            return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: %s: %s %s", kn, sn, f->name,
                           bounds_text(f->lo, f->hi, f->lo_open, f->hi_open, b, sizeof b));
    }
    if (c->kind != PS_LR_PIECEWISE) return PS_OK;
    if (c->n_boundaries < 1 || c->n_boundaries > PS_LR_MAX_BOUNDARIES)
        return ps_errf(PS_EINVAL, err, errlen,
                       "%s optimizer: %s: want 1 to %d boundaries, and one value more", kn, sn,
                       PS_LR_MAX_BOUNDARIES);
    for (uint32_t i = 0; i < c->n_boundaries; i++) {
        if (i > 0 && c->boundaries[i] <= c->boundaries[i - 1])
            return ps_errf(PS_EINVAL, err, errlen,
                           "%s optimizer: %s: boundaries must increase (boundaries[%u] = %u "
                           "after %u)",
                           kn, sn, i, c->boundaries[i], c->boundaries[i - 1]);
        if (!in_bounds(c->values[i], NONNEG))
            return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: %s: values[%u] must be >= 0",
                           kn, sn, i + 1);
    }
    return PS_OK;
}

int ps_opt_spec_validate(const ps_opt_spec *s, char *err, size_t errlen) {
    if ((unsigned)s->kind >= PS_OPT_COUNT)
        return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: unknown optimizer kind",
                    ps_opt_kind_name(s->kind));
    const char *kn = ps_opt_kind_name(s->kind);
    bool scheduled = s->schedule.kind != PS_LR_CONSTANT;
    if ((unsigned)s->schedule.kind >= PS_LR_COUNT)
        return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: unknown learning-rate schedule %u",
                       kn, (unsigned)s->schedule.kind);
    if (scheduled && !in_bounds(s->lr, NONNEG)) /* a warm-up may start from 0 */
        return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: %s: %s must be >= 0", kn,
                       lr_name(s->schedule.kind),
                       s->schedule.kind == PS_LR_PIECEWISE ? "values[0]" : "initial_learning_rate");
    char b[64];
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->type != F_FLOAT || (scheduled && f->off == F(lr))) continue;
        if (!in_bounds(fget(s, f), f->lo, f->hi, f->lo_open, f->hi_open))
            return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: %s %s", kn, f->key,
                           bounds_text(f->lo, f->hi, f->lo_open, f->hi_open, b, sizeof b));
    }
    if (s->clipnorm > 0 && s->global_clipnorm > 0)
        return ps_errf(PS_EINVAL, err, errlen,
                       "%s optimizer: clipnorm and global_clipnorm cannot both be set (Keras "
                       "refuses it too)",
                       kn);
    if (s->clipvalue > 0 && (s->clipnorm > 0 || s->global_clipnorm > 0))
        return ps_errf(PS_EINVAL, err, errlen,
                       "%s optimizer: clipvalue with %s: Keras would apply only %s; set one", kn,
                       s->clipnorm > 0 ? "clipnorm" : "global_clipnorm",
                       s->clipnorm > 0 ? "clipnorm" : "global_clipnorm");
    return scheduled ? schedule_validate(s, err, errlen) : PS_OK;
}

/* The fields kind's update reads (all of them for an unknown kind). */
static unsigned used(ps_opt_kind kind) {
    return (unsigned)kind < PS_OPT_COUNT ? K(kind) : ~0u;
}

static int schedule_same(const ps_lr_schedule *a, const ps_lr_schedule *b) {
    if (a->kind != b->kind) return 0;
    for (size_t i = 0; i < NSFIELDS; i++) {
        const sfield *f = &sfields[i];
        if (!s_applies(f, a->kind)) continue;
        if (f->type == F_BOOL ? sbget(a, f) != sbget(b, f) : sget(a, f) != sget(b, f)) return 0;
    }
    if (a->kind != PS_LR_PIECEWISE) return 1;
    if (a->n_boundaries != b->n_boundaries) return 0;
    for (uint32_t i = 0; i < a->n_boundaries && i < PS_LR_MAX_BOUNDARIES; i++)
        if (a->boundaries[i] != b->boundaries[i] || a->values[i] != b->values[i]) return 0;
    return 1;
}

int ps_opt_spec_same(const ps_opt_spec *a, const ps_opt_spec *b) {
    if (a->kind != b->kind) return 0;
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (!(f->kinds & used(a->kind))) continue;
        if (f->type == F_BOOL ? bget(a, f) != bget(b, f) : fget(a, f) != fget(b, f)) return 0;
    }
    return schedule_same(&a->schedule, &b->schedule);
}

/* The shortest %g form of v that reads back as the same float. */
static const char *short_float(float v, char *buf, size_t len) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

/* Appends printf output at *o (counting what did not fit, so later calls add nothing). */
static void add(char *buf, size_t len, size_t *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *o, *o < len ? len - *o : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *o += (size_t)n;
}

/* " schedule=CosineDecay(decay_steps=1000 alpha=0 ...)" */
static void describe_schedule(const ps_opt_spec *s, char *buf, size_t len, size_t *o) {
    const ps_lr_schedule *c = &s->schedule;
    char v[32];
    add(buf, len, o, " schedule=%s(", lr_name(c->kind));
    const char *sep = "";
    for (size_t i = 0; i < NSFIELDS; i++) {
        const sfield *f = &sfields[i];
        if (!s_applies(f, c->kind)) continue;
        add(buf, len, o, "%s%s=%s", sep, f->name,
            f->type == F_BOOL ? (sbget(c, f) ? "true" : "false")
                              : short_float(sget(c, f), v, sizeof v));
        sep = " ";
    }
    if (c->kind == PS_LR_PIECEWISE) {
        uint32_t n = c->n_boundaries <= PS_LR_MAX_BOUNDARIES ? c->n_boundaries : 0;
        add(buf, len, o, "boundaries=[");
        for (uint32_t i = 0; i < n; i++)
            add(buf, len, o, "%s%u", i ? "," : "", c->boundaries[i]);
        add(buf, len, o, "] values=[%s", short_float(s->lr, v, sizeof v));
        for (uint32_t i = 0; i < n; i++)
            add(buf, len, o, ",%s", short_float(c->values[i], v, sizeof v));
        add(buf, len, o, "]");
    }
    add(buf, len, o, ")");
}

char *ps_opt_spec_describe(const ps_opt_spec *s, char *buf, size_t len) {
    size_t o = 0;
    if (len) buf[0] = '\0';
    add(buf, len, &o, "%s", ps_opt_kind_name(s->kind));
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (!(f->kinds & used(s->kind))) continue;
        if (f->optional && fget(s, f) == 0 &&
            ((unsigned)s->kind >= PS_OPT_COUNT || f->def[s->kind] == 0))
            continue;
        char v[32];
        add(buf, len, &o, " %s=%s", f->name,
            f->type == F_BOOL ? (bget(s, f) ? "true" : "false")
                              : short_float(fget(s, f), v, sizeof v));
    }
    if (s->schedule.kind != PS_LR_CONSTANT) describe_schedule(s, buf, len, &o);
    return buf;
}

/* ---- the tables for the codecs outside this file (optim_spec_fields.h) ----------- */

int ps__opt_spec_field(size_t i, ps_opt_field_info *out) {
    if (i >= NFIELDS) return 0;
    *out = (ps_opt_field_info){fields[i].name, fields[i].type == F_BOOL, fields[i].off};
    return 1;
}

int ps__lr_schedule_field(size_t i, ps_opt_field_info *out) {
    if (i >= NSFIELDS) return 0;
    *out = (ps_opt_field_info){sfields[i].name, sfields[i].type == F_BOOL, sfields[i].off};
    return 1;
}

/* ---- the checkpoint attribute ----------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void putf(uint8_t *p, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put32(p, u);
}

static float getf(const uint8_t *p) {
    uint32_t u = get32(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

void ps_opt_spec_to_attr(const ps_opt_spec *s, uint8_t out[PS_OPT_ATTR_BYTES]) {
    put32(out, (uint32_t)s->kind);
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->type == F_FLOAT)
            putf(out + f->attr_off, fget(s, f));
        else
            put32(out + f->attr_off, bget(s, f) ? 1u : 0u);
    }
    const ps_lr_schedule *c = &s->schedule;
    put32(out + ATTR_SCHED_KIND, (uint32_t)c->kind);
    for (size_t i = 0; i < NSFIELDS; i++) {
        const sfield *f = &sfields[i];
        if (f->type == F_FLOAT)
            putf(out + f->attr_off, sget(c, f));
        else
            put32(out + f->attr_off, sbget(c, f) ? 1u : 0u);
    }
    put32(out + ATTR_N_BOUNDARIES, c->n_boundaries);
    for (int i = 0; i < PS_LR_MAX_BOUNDARIES; i++) {
        put32(out + ATTR_BOUNDARIES + 4 * i, c->boundaries[i]);
        putf(out + ATTR_VALUES + 4 * i, c->values[i]);
    }
}

/* A u32 that must be 0 or 1 into *out. */
static int get_bool(const uint8_t *p, const char *name, bool *out, char *err, size_t errlen) {
    uint32_t u = get32(p);
    if (u > 1) return ps_errf(PS_EFORMAT, err, errlen, "bad %s %u (want 0 or 1)", name, u);
    *out = u == 1;
    return PS_OK;
}

int ps_opt_spec_from_attr(const uint8_t *in, size_t len, ps_opt_spec *out, char *err,
                          size_t errlen) {
    if (len != PS_OPT_ATTR_BYTES && len != PS_OPT_ATTR_V1_BYTES)
        return ps_errf(PS_EFORMAT, err, errlen, "optimizer spec of %zu bytes (want %u or %u)", len,
                       PS_OPT_ATTR_V1_BYTES, PS_OPT_ATTR_BYTES);
    uint32_t kind = get32(in);
    if (kind >= PS_OPT_COUNT) return ps_errf(PS_EFORMAT, err, errlen, "bad optimizer kind %u", kind);
    ps_opt_spec s = {.kind = (ps_opt_kind)kind};
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->attr_off + 4 > len) continue; /* version 1: not there, none */
        if (f->type == F_FLOAT)
            *fp(&s, f) = getf(in + f->attr_off);
        else if (get_bool(in + f->attr_off, f->name, bp(&s, f), err, errlen) != PS_OK)
            return PS_EFORMAT;
    }
    if (len == PS_OPT_ATTR_V1_BYTES) {
        /* version 1 applied weight_decay for adamw only; whatever else it held was unused */
        if (s.kind != PS_OPT_ADAMW) s.weight_decay = 0;
    } else {
        ps_lr_schedule *c = &s.schedule;
        uint32_t sk = get32(in + ATTR_SCHED_KIND);
        if (sk >= PS_LR_COUNT)
            return ps_errf(PS_EFORMAT, err, errlen, "bad learning-rate schedule %u", sk);
        c->kind = (ps_lr_kind)sk;
        for (size_t i = 0; i < NSFIELDS; i++) {
            const sfield *f = &sfields[i];
            if (f->type == F_FLOAT)
                *sfp(c, f) = getf(in + f->attr_off);
            else if (get_bool(in + f->attr_off, f->name, sbp(c, f), err, errlen) != PS_OK)
                return PS_EFORMAT;
        }
        c->n_boundaries = get32(in + ATTR_N_BOUNDARIES);
        for (int i = 0; i < PS_LR_MAX_BOUNDARIES; i++) {
            c->boundaries[i] = get32(in + ATTR_BOUNDARIES + 4 * i);
            c->values[i] = getf(in + ATTR_VALUES + 4 * i);
        }
    }
    int rc = ps_opt_spec_validate(&s, err, errlen);
    if (rc != PS_OK) return PS_EFORMAT;
    *out = s;
    return PS_OK;
}

/* ---- the JSON model spec ------------------------------------------------------ */

static const field *field_by_key(const char *key) {
    for (size_t i = 0; i < NFIELDS; i++)
        if (strcmp(key, fields[i].key) == 0) return &fields[i];
    return NULL;
}

/* "sgd, momentum, ... or adamw" into buf. */
static const char *kind_list(char *buf, size_t len) {
    size_t o = 0;
    if (len) buf[0] = '\0';
    for (int k = 0; k < PS_OPT_COUNT; k++)
        add(buf, len, &o, "%s%s", k == 0 ? "" : k == PS_OPT_COUNT - 1 ? " or " : ", ", names[k]);
    return buf;
}

#define SCHED_MODULE "keras.optimizers.schedules"

/* A schedule's "boundaries": whole step counts into c. */
static int boundaries_from_json(const cJSON *a, const char *sn, ps_lr_schedule *c, char *err,
                                size_t errlen) {
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n < 1)
        return ps_errf(PS_EFORMAT, err, errlen,
                       "optimizer: learning_rate %s: 'boundaries' must be a list of steps", sn);
    if (n > PS_LR_MAX_BOUNDARIES)
        return ps_errf(PS_EFORMAT, err, errlen,
                       "optimizer: learning_rate %s: %d boundaries, at most %d are supported", sn,
                       n, PS_LR_MAX_BOUNDARIES);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 0 && d <= UINT32_MAX && d == floor(d)))
            return ps_errf(PS_EFORMAT, err, errlen,
                           "optimizer: learning_rate %s: boundaries[%d] must be a whole number "
                           "of steps in [0, %u]",
                           sn, i, UINT32_MAX);
        c->boundaries[i++] = (uint32_t)d;
    }
    c->n_boundaries = (uint32_t)n;
    return PS_OK;
}

/* A schedule's "values": one rate more than boundaries; the first is the spec's lr. */
static int values_from_json(const cJSON *a, const char *sn, ps_opt_spec *s, char *err,
                            size_t errlen) {
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n != (int)s->schedule.n_boundaries + 1)
        return ps_errf(PS_EFORMAT, err, errlen,
                       "optimizer: learning_rate %s: 'values' must be a list of %u rates (one "
                       "more than boundaries)",
                       sn, s->schedule.n_boundaries + 1);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsNumber(e))
            return ps_errf(PS_EFORMAT, err, errlen,
                           "optimizer: learning_rate %s: values[%d] must be a number", sn, i);
        if (i == 0)
            s->lr = (float)e->valuedouble;
        else
            s->schedule.values[i - 1] = (float)e->valuedouble;
        i++;
    }
    return PS_OK;
}

/* A schedule's "config" into s (lr and schedule). */
static int schedule_config_from_json(const cJSON *cfg, ps_lr_kind kind, ps_opt_spec *s, char *err,
                                     size_t errlen) {
    const char *sn = lr_names[kind];
    ps_lr_schedule c = {.kind = kind};
    bool seen[NSFIELDS] = {false}, have_lr = false, have_target = false;
    const cJSON *bounds = NULL, *values = NULL, *k;
    float lr = 0;
    cJSON_ArrayForEach(k, cfg) {
        if (strcmp(k->string, "name") == 0) {
            if (!cJSON_IsString(k) && !cJSON_IsNull(k))
                return ps_errf(PS_EFORMAT, err, errlen,
                               "optimizer: learning_rate %s: 'name' must be a string", sn);
            continue;
        }
        if (kind == PS_LR_PIECEWISE && strcmp(k->string, "boundaries") == 0) {
            bounds = k;
            continue;
        }
        if (kind == PS_LR_PIECEWISE && strcmp(k->string, "values") == 0) {
            values = k;
            continue;
        }
        if (kind != PS_LR_PIECEWISE && strcmp(k->string, "initial_learning_rate") == 0) {
            if (!cJSON_IsNumber(k))
                return ps_errf(PS_EFORMAT, err, errlen,
                               "optimizer: learning_rate %s: 'initial_learning_rate' must be a "
                               "number",
                               sn);
            lr = (float)k->valuedouble;
            have_lr = true;
            continue;
        }
        size_t i = 0;
        while (i < NSFIELDS && strcmp(k->string, sfields[i].name) != 0)
            i++;
        if (i == NSFIELDS || !s_applies(&sfields[i], kind))
            return ps_errf(PS_EFORMAT, err, errlen, "optimizer: learning_rate %s: %s key '%s'", sn,
                           i == NSFIELDS ? "unknown" : "inapplicable", k->string);
        const sfield *f = &sfields[i];
        seen[i] = true;
        if (f->off == S(warmup_target) && cJSON_IsNull(k)) continue; /* Keras' None: no warm-up */
        if (f->type == F_BOOL) {
            if (!cJSON_IsBool(k))
                return ps_errf(PS_EFORMAT, err, errlen,
                               "optimizer: learning_rate %s: '%s' must be true or false", sn,
                               f->name);
            *sbp(&c, f) = cJSON_IsTrue(k);
        } else {
            if (!cJSON_IsNumber(k))
                return ps_errf(PS_EFORMAT, err, errlen,
                               "optimizer: learning_rate %s: '%s' must be a number", sn, f->name);
            *sfp(&c, f) = (float)k->valuedouble;
            if (f->off == S(warmup_target)) have_target = true;
        }
    }
    const char *missing = kind == PS_LR_PIECEWISE ? (!bounds ? "boundaries" : !values ? "values" : NULL)
                          : !have_lr             ? "initial_learning_rate"
                                                 : NULL;
    for (size_t i = 0; !missing && i < NSFIELDS; i++)
        if (sfields[i].required && s_applies(&sfields[i], kind) && !seen[i])
            missing = sfields[i].name;
    if (missing)
        return ps_errf(PS_EFORMAT, err, errlen, "optimizer: learning_rate %s: '%s' is missing", sn,
                       missing);
    ps_opt_spec t = *s;
    t.schedule = c;
    if (kind == PS_LR_PIECEWISE) {
        int rc = boundaries_from_json(bounds, sn, &t.schedule, err, errlen);
        if (rc == PS_OK) rc = values_from_json(values, sn, &t, err, errlen);
        if (rc != PS_OK) return rc;
    } else {
        t.lr = lr;
    }
    if (kind == PS_LR_COSINE && !have_target) {
        /* Keras ignores warmup_steps without a warmup_target: refuse rather than guess */
        if (t.schedule.warmup_steps != 0)
            return ps_errf(PS_EFORMAT, err, errlen,
                           "optimizer: learning_rate %s: 'warmup_steps' needs a 'warmup_target' "
                           "(Keras ignores it without one)",
                           sn);
        t.schedule.warmup_target = t.lr; /* no warm-up: the same rates */
    }
    *s = t;
    return PS_OK;
}

/* A Keras schedule object (Keras 3's {"module", "class_name", "config",
 * "registered_name"} or Keras 2's {"class_name", "config"}) into s. */
static int schedule_from_json(const cJSON *o, ps_opt_spec *s, char *err, size_t errlen) {
    const cJSON *cls = NULL, *cfg = NULL, *reg = NULL, *k;
    cJSON_ArrayForEach(k, o) {
        if (strcmp(k->string, "class_name") == 0) {
            cls = k;
        } else if (strcmp(k->string, "config") == 0) {
            cfg = k;
        } else if (strcmp(k->string, "registered_name") == 0) {
            reg = k;
        } else if (strcmp(k->string, "module") == 0) {
            if (!cJSON_IsString(k) || strcmp(k->valuestring, SCHED_MODULE) != 0)
                return ps_errf(PS_EFORMAT, err, errlen,
                               "optimizer: learning_rate: 'module' must be \"" SCHED_MODULE "\"");
        } else {
            return ps_errf(PS_EFORMAT, err, errlen,
                           "optimizer: learning_rate: unknown key '%s' (a schedule has module, "
                           "class_name, config, registered_name)",
                           k->string);
        }
    }
    if (!cJSON_IsString(cls))
        return ps_errf(PS_EFORMAT, err, errlen,
                       "optimizer: learning_rate: a schedule needs a string 'class_name'");
    int kind = PS_LR_COUNT;
    for (int i = PS_LR_CONSTANT + 1; i < PS_LR_COUNT; i++)
        if (strcmp(cls->valuestring, lr_names[i]) == 0) kind = i;
    if (kind == PS_LR_COUNT)
        return ps_errf(PS_EFORMAT, err, errlen,
                       "optimizer: learning_rate: unknown schedule class '%s' (want "
                       "ExponentialDecay, PiecewiseConstantDecay, CosineDecay or InverseTimeDecay)",
                       cls->valuestring);
    if (reg && !cJSON_IsNull(reg) &&
        !(cJSON_IsString(reg) && strcmp(reg->valuestring, cls->valuestring) == 0))
        return ps_errf(PS_EFORMAT, err, errlen,
                       "optimizer: learning_rate: 'registered_name' must be null (a built-in "
                       "schedule)");
    if (!cJSON_IsObject(cfg))
        return ps_errf(PS_EFORMAT, err, errlen,
                       "optimizer: learning_rate %s: a schedule needs an object 'config'",
                       cls->valuestring);
    return schedule_config_from_json(cfg, (ps_lr_kind)kind, s, err, errlen);
}

int ps_opt_spec_from_json(const cJSON *o, ps_opt_spec *out, char *err, size_t errlen) {
    if (!o) {
        *out = ps_opt_spec_default(PS_OPT_ADAM);
        return PS_OK;
    }
    const cJSON *name = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "name") : o;
    if (!cJSON_IsString(name))
        return ps_errf(PS_EFORMAT, err, errlen,
                    "'optimizer' must be a name or an object with a string key 'name'");
    ps_opt_kind kind;
    char list[80];
    if (ps_opt_kind_parse(name->valuestring, &kind) != PS_OK)
        return ps_errf(PS_EFORMAT, err, errlen, "optimizer: unknown name '%s' (want %s)",
                    name->valuestring, kind_list(list, sizeof list));
    ps_opt_spec s = ps_opt_spec_default(kind);
    const cJSON *k;
    if (cJSON_IsObject(o)) {
        cJSON_ArrayForEach(k, o) {
            if (strcmp(k->string, "name") == 0) continue;
            const field *f = field_by_key(k->string);
            if (!f) return ps_errf(PS_EFORMAT, err, errlen, "optimizer: unknown key '%s'", k->string);
            if (!json_applies(f, kind))
                return ps_errf(PS_EFORMAT, err, errlen, "optimizer %s: '%s' does not apply",
                            ps_opt_kind_name(kind), f->key);
            if (f->off == F(lr) && cJSON_IsObject(k)) {
                int rc = schedule_from_json(k, &s, err, errlen);
                if (rc != PS_OK) return rc;
            } else if (f->type == F_BOOL) {
                if (!cJSON_IsBool(k))
                    return ps_errf(PS_EFORMAT, err, errlen, "optimizer: '%s' must be true or false",
                                f->key);
                *bp(&s, f) = cJSON_IsTrue(k);
            } else if (f->optional && f->def[kind] == 0 && cJSON_IsNull(k)) {
                *fp(&s, f) = 0; /* Keras' None */
            } else {
                if (!cJSON_IsNumber(k))
                    return ps_errf(PS_EFORMAT, err, errlen, "optimizer: '%s' must be a number%s",
                                f->key,
                                f->off == F(lr) ? " or a Keras learning-rate schedule object" : "");
                *fp(&s, f) = (float)k->valuedouble;
            }
        }
    }
    if (s.kind == PS_OPT_SGD && s.momentum > 0) s.kind = PS_OPT_MOMENTUM;
    int rc = ps_opt_spec_validate(&s, err, errlen);
    if (rc != PS_OK) return rc;
    *out = s;
    return PS_OK;
}
