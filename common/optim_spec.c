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
    {"weight_decay", "weight_decay", F_FLOAT, F(weight_decay), 32, K(PS_OPT_ADAMW),
     {[PS_OPT_ADAMW] = 0.004f}, NONNEG},
    {"initial_accumulator", "initial_accumulator_value", F_FLOAT,
     F(initial_accumulator), 36, K(PS_OPT_ADAGRAD), ALL(0.1f), NONNEG},
};
// clang-format on
#define NFIELDS (sizeof fields / sizeof fields[0])
_Static_assert(4 + 4 * NFIELDS == PS_OPT_ATTR_BYTES, "the attribute holds the kind and each field");

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

int ps_opt_spec_validate(const ps_opt_spec *s, char *err, size_t errlen) {
    if ((unsigned)s->kind >= PS_OPT_COUNT)
        return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: unknown optimizer kind",
                    ps_opt_kind_name(s->kind));
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->type != F_FLOAT) continue;
        float v = fget(s, f);
        if (isfinite(v) && (f->lo_open ? v > f->lo : v >= f->lo) &&
            (f->hi_open ? v < f->hi : v <= f->hi))
            continue;
        if (isinf(f->hi))
            return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: %s must be %s %g",
                        ps_opt_kind_name(s->kind), f->key, f->lo_open ? ">" : ">=", (double)f->lo);
        return ps_errf(PS_EINVAL, err, errlen, "%s optimizer: %s must be in %c%g, %g%c",
                    ps_opt_kind_name(s->kind), f->key, f->lo_open ? '(' : '[', (double)f->lo,
                    (double)f->hi, f->hi_open ? ')' : ']');
    }
    return PS_OK;
}

/* The fields kind's update reads (all of them for an unknown kind). */
static unsigned used(ps_opt_kind kind) {
    return (unsigned)kind < PS_OPT_COUNT ? K(kind) : ~0u;
}

int ps_opt_spec_same(const ps_opt_spec *a, const ps_opt_spec *b) {
    if (a->kind != b->kind) return 0;
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (!(f->kinds & used(a->kind))) continue;
        if (f->type == F_BOOL ? bget(a, f) != bget(b, f) : fget(a, f) != fget(b, f)) return 0;
    }
    return 1;
}

/* The shortest %g form of v that reads back as the same float. */
static const char *short_float(float v, char *buf, size_t len) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

char *ps_opt_spec_describe(const ps_opt_spec *s, char *buf, size_t len) {
    size_t o = 0;
    int n = snprintf(buf, len, "%s", ps_opt_kind_name(s->kind));
    if (n > 0) o += (size_t)n;
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (!(f->kinds & used(s->kind))) continue;
        char v[32];
        n = snprintf(buf + o, o < len ? len - o : 0, " %s=%s", f->name,
                     f->type == F_BOOL ? (bget(s, f) ? "true" : "false")
                                       : short_float(fget(s, f), v, sizeof v));
        if (n > 0) o += (size_t)n;
    }
    return buf;
}

/* ---- the table for the codecs outside this file (optim_spec_fields.h) ----------- */

int ps__opt_spec_field(size_t i, ps_opt_field_info *out) {
    if (i >= NFIELDS) return 0;
    *out = (ps_opt_field_info){fields[i].name, fields[i].type == F_BOOL, fields[i].off};
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

void ps_opt_spec_to_attr(const ps_opt_spec *s, uint8_t out[PS_OPT_ATTR_BYTES]) {
    put32(out, (uint32_t)s->kind);
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        uint32_t u;
        if (f->type == F_FLOAT) {
            float v = fget(s, f);
            memcpy(&u, &v, 4);
        } else {
            u = bget(s, f) ? 1u : 0u;
        }
        put32(out + f->attr_off, u);
    }
}

int ps_opt_spec_from_attr(const uint8_t in[PS_OPT_ATTR_BYTES], ps_opt_spec *out, char *err,
                          size_t errlen) {
    uint32_t kind = get32(in);
    if (kind >= PS_OPT_COUNT) return ps_errf(PS_EFORMAT, err, errlen, "bad optimizer kind %u", kind);
    ps_opt_spec s = {.kind = (ps_opt_kind)kind};
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        uint32_t u = get32(in + f->attr_off);
        if (f->type == F_FLOAT) {
            memcpy(fp(&s, f), &u, 4);
        } else if (u > 1) {
            return ps_errf(PS_EFORMAT, err, errlen, "bad %s %u (want 0 or 1)", f->name, u);
        } else {
            *bp(&s, f) = u == 1;
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
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        int n = snprintf(buf + o, o < len ? len - o : 0, "%s%s",
                         k == 0                  ? ""
                         : k == PS_OPT_COUNT - 1 ? " or "
                                                 : ", ",
                         names[k]);
        if (n > 0) o += (size_t)n;
    }
    return buf;
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
            if (f->type == F_BOOL) {
                if (!cJSON_IsBool(k))
                    return ps_errf(PS_EFORMAT, err, errlen, "optimizer: '%s' must be true or false",
                                f->key);
                *bp(&s, f) = cJSON_IsTrue(k);
            } else {
                if (!cJSON_IsNumber(k))
                    return ps_errf(PS_EFORMAT, err, errlen, "optimizer: '%s' must be a number",
                                f->key);
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
