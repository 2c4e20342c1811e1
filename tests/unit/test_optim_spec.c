/* The optimizer spec's codec (optim_spec.c): spec -> ps.proto Optimizer -> spec,
 * spec -> checkpoint attribute -> spec (both against the byte layouts written
 * out by hand, so the wire and checkpoint formats stay as they were; an attribute
 * of version 1 still reads), and the JSON "optimizer" for every kind, the Keras
 * learning-rate schedules (as Keras 3 and Keras 2 write them), the clipping, an
 * unknown key and values of the wrong type. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_spec.h"
#include "optim_spec_proto.h"
#include "ps.pb-c.h"
#include "ps_error.h"
#include "testutil.h"

/* Every field of a spec, used by its kind or not, set apart from the defaults. */
static ps_opt_spec odd_spec(ps_opt_kind k) {
    ps_opt_spec s = ps_opt_spec_default(k);
    s.lr = 0.0123f + (float)k;
    s.momentum = 0.55f;
    s.nesterov = true;
    s.beta1 = 0.81f;
    s.beta2 = 0.97f;
    s.epsilon = 3e-6f;
    s.rho = 0.66f;
    s.weight_decay = 0.02f;
    s.initial_accumulator = 0.3f;
    return s;
}

/* odd_spec with clipping and a schedule (kind k mod the schedules) of odd values. */
static ps_opt_spec odd_full_spec(ps_opt_kind k) {
    ps_opt_spec s = odd_spec(k);
    s.clipnorm = 1.25f;
    s.clipvalue = 0.75f;
    s.global_clipnorm = 2.5f;
    ps_lr_schedule *c = &s.schedule;
    c->kind = (ps_lr_kind)(1 + (int)k % (PS_LR_COUNT - 1));
    c->decay_steps = 1000.0f + (float)k;
    c->decay_rate = 0.96f;
    c->staircase = true;
    c->alpha = 0.1f;
    c->warmup_target = 0.2f;
    c->warmup_steps = 50.0f;
    c->n_boundaries = 3;
    for (uint32_t i = 0; i < PS_LR_MAX_BOUNDARIES; i++) {
        c->boundaries[i] = i < 3 ? 100 * (i + 1) : 0;
        c->values[i] = i < 3 ? 0.01f / (float)(i + 1) : 0;
    }
    return s;
}

/* All fields equal, bit for bit (unlike ps_opt_spec_same, which skips unused ones). */
static void assert_identical(const ps_opt_spec *a, const ps_opt_spec *b, const char *what) {
    ck_assert_msg(a->kind == b->kind, "%s: kind %d vs %d", what, a->kind, b->kind);
    ck_assert_msg(a->nesterov == b->nesterov, "%s: nesterov", what);
    const float fa[] = {a->lr,      a->momentum, a->beta1,        a->beta2,
                        a->epsilon, a->rho,      a->weight_decay, a->initial_accumulator};
    const float fb[] = {b->lr,      b->momentum, b->beta1,        b->beta2,
                        b->epsilon, b->rho,      b->weight_decay, b->initial_accumulator};
    for (size_t i = 0; i < sizeof fa / sizeof fa[0]; i++)
        ck_assert_msg(memcmp(&fa[i], &fb[i], sizeof(float)) == 0, "%s: float field %zu: %g vs %g",
                      what, i, (double)fa[i], (double)fb[i]);
    const float ca[] = {a->clipnorm, a->clipvalue, a->global_clipnorm};
    const float cb[] = {b->clipnorm, b->clipvalue, b->global_clipnorm};
    ck_assert_msg(memcmp(ca, cb, sizeof ca) == 0, "%s: clipping differs", what);
    const ps_lr_schedule *x = &a->schedule, *y = &b->schedule;
    ck_assert_msg(x->kind == y->kind, "%s: schedule kind %d vs %d", what, x->kind, y->kind);
    ck_assert_msg(x->staircase == y->staircase, "%s: staircase", what);
    const float sa[] = {x->decay_steps, x->decay_rate, x->alpha, x->warmup_target, x->warmup_steps};
    const float sb[] = {y->decay_steps, y->decay_rate, y->alpha, y->warmup_target, y->warmup_steps};
    ck_assert_msg(memcmp(sa, sb, sizeof sa) == 0, "%s: schedule fields differ", what);
    ck_assert_msg(x->n_boundaries == y->n_boundaries, "%s: n_boundaries", what);
    ck_assert_msg(memcmp(x->boundaries, y->boundaries, sizeof x->boundaries) == 0 &&
                      memcmp(x->values, y->values, sizeof x->values) == 0,
                  "%s: boundaries or values differ", what);
}

/* ---- ps.proto ---- */

START_TEST(proto_round_trip_every_kind) {
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        ps_opt_spec s = odd_full_spec((ps_opt_kind)k);
        ps_opt_proto op;
        ps_opt_spec_to_proto(&s, &op);
        const Ps__Optimizer o = op.msg;
        /* the message as client.c filled it by hand before the codec */
        Ps__Optimizer want = PS__OPTIMIZER__INIT;
        want.kind = (Ps__OptKind)k;
        want.lr = s.lr;
        want.momentum = s.momentum;
        want.nesterov = s.nesterov;
        want.beta1 = s.beta1;
        want.beta2 = s.beta2;
        want.epsilon = s.epsilon;
        want.rho = s.rho;
        want.weight_decay = s.weight_decay;
        want.initial_accumulator = s.initial_accumulator;
        Ps__LrSchedule ws = PS__LR_SCHEDULE__INIT;
        ws.kind = (Ps__LrKind)s.schedule.kind;
        ws.decay_steps = s.schedule.decay_steps;
        ws.decay_rate = s.schedule.decay_rate;
        ws.staircase = s.schedule.staircase;
        ws.alpha = s.schedule.alpha;
        ws.warmup_target = s.schedule.warmup_target;
        ws.warmup_steps = s.schedule.warmup_steps;
        if (s.schedule.kind == PS_LR_PIECEWISE) {
            ws.n_boundaries = ws.n_values = 3;
            ws.boundaries = s.schedule.boundaries;
            ws.values = s.schedule.values;
        }
        want.schedule = &ws;
        uint8_t got_b[256], want_b[256];
        size_t n = ps__optimizer__get_packed_size(&o);
        ck_assert_uint_le(n, sizeof got_b);
        ck_assert_uint_eq(n, ps__optimizer__get_packed_size(&want));
        ps__optimizer__pack(&o, got_b);
        ps__optimizer__pack(&want, want_b);
        ck_assert_msg(memcmp(got_b, want_b, n) == 0, "%s: wire bytes differ", ps_opt_kind_name(k));
        Ps__Optimizer *back = ps__optimizer__unpack(NULL, n, got_b);
        ck_assert_ptr_nonnull(back);
        ps_opt_spec r = ps_opt_spec_from_proto(back);
        ps__optimizer__free_unpacked(back, NULL);
        /* everything crosses but the clipping (the workers clip); a piecewise
         * schedule's boundaries and values cross only for that kind */
        ps_opt_spec e = s;
        e.clipnorm = e.clipvalue = e.global_clipnorm = 0;
        if (s.schedule.kind != PS_LR_PIECEWISE) {
            e.schedule.n_boundaries = 0;
            memset(e.schedule.boundaries, 0, sizeof e.schedule.boundaries);
            memset(e.schedule.values, 0, sizeof e.schedule.values);
        }
        assert_identical(&e, &r, ps_opt_kind_name(k));
    }
    /* a constant rate sends no schedule: the bytes of before schedules existed */
    ps_opt_spec c = ps_opt_spec_default(PS_OPT_ADAM);
    ps_opt_proto op;
    ps_opt_spec_to_proto(&c, &op);
    ck_assert_ptr_null(op.msg.schedule);
}
END_TEST

/* Boundary and value counts that do not fit or differ come through as a count
 * validation refuses, not an overflow. */
START_TEST(proto_bad_piecewise_fails_validation) {
    uint32_t b[PS_LR_MAX_BOUNDARIES + 1];
    float v[PS_LR_MAX_BOUNDARIES + 1];
    for (int i = 0; i <= PS_LR_MAX_BOUNDARIES; i++)
        b[i] = (uint32_t)i + 1, v[i] = 0.1f;
    size_t counts[][2] = {{PS_LR_MAX_BOUNDARIES + 1, PS_LR_MAX_BOUNDARIES + 1}, {2, 3}};
    for (size_t i = 0; i < 2; i++) {
        Ps__Optimizer o = PS__OPTIMIZER__INIT;
        Ps__LrSchedule m = PS__LR_SCHEDULE__INIT;
        o.kind = PS__OPT_KIND__OPT_SGD;
        o.lr = 0.1f;
        m.kind = PS__LR_KIND__LR_PIECEWISE;
        m.n_boundaries = counts[i][0];
        m.n_values = counts[i][1];
        m.boundaries = b;
        m.values = v;
        o.schedule = &m;
        ps_opt_spec s = ps_opt_spec_from_proto(&o);
        char err[200];
        ck_assert_int_eq(ps_opt_spec_validate(&s, err, sizeof err), PS_EINVAL);
        ck_assert_str_eq(err, "sgd optimizer: PiecewiseConstantDecay: want 1 to 16 boundaries, "
                              "and one value more");
    }
}
END_TEST

/* An unknown kind on the wire comes through as it is, for validation to refuse. */
START_TEST(proto_unknown_kind_fails_validation) {
    Ps__Optimizer o = PS__OPTIMIZER__INIT;
    o.kind = (Ps__OptKind)PS_OPT_COUNT;
    o.lr = 0.1f;
    ps_opt_spec s = ps_opt_spec_from_proto(&o);
    char err[160];
    ck_assert_int_eq(ps_opt_spec_validate(&s, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "unknown optimizer kind"));
}
END_TEST

/* ---- checkpoint attribute ---- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void putf(uint8_t *p, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put32(p, u);
}

START_TEST(attr_round_trip_every_kind) {
    ck_assert_uint_eq(PS_OPT_ATTR_BYTES, 212);
    ck_assert_uint_eq(PS_OPT_ATTR_V1_BYTES, 40);
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        ps_opt_spec s = odd_full_spec((ps_opt_kind)k);
        s.clipvalue = 0; /* one clipping at most (validation) */
        s.global_clipnorm = 0;
        uint8_t got[PS_OPT_ATTR_BYTES], want[PS_OPT_ATTR_BYTES];
        memset(got, 0xAA, sizeof got);
        ps_opt_spec_to_attr(&s, got);
        /* docs/FORMATS.md's layout, less the 4-byte version in front */
        put32(want + 0, (uint32_t)k);
        putf(want + 4, s.lr);
        putf(want + 8, s.momentum);
        put32(want + 12, 1);
        putf(want + 16, s.beta1);
        putf(want + 20, s.beta2);
        putf(want + 24, s.epsilon);
        putf(want + 28, s.rho);
        putf(want + 32, s.weight_decay);
        putf(want + 36, s.initial_accumulator);
        putf(want + 40, s.clipnorm);
        putf(want + 44, s.clipvalue);
        putf(want + 48, s.global_clipnorm);
        put32(want + 52, (uint32_t)s.schedule.kind);
        putf(want + 56, s.schedule.decay_steps);
        putf(want + 60, s.schedule.decay_rate);
        put32(want + 64, 1);
        putf(want + 68, s.schedule.alpha);
        putf(want + 72, s.schedule.warmup_target);
        putf(want + 76, s.schedule.warmup_steps);
        put32(want + 80, 3);
        for (int i = 0; i < PS_LR_MAX_BOUNDARIES; i++) {
            put32(want + 84 + 4 * i, s.schedule.boundaries[i]);
            putf(want + 148 + 4 * i, s.schedule.values[i]);
        }
        ck_assert_msg(memcmp(got, want, sizeof got) == 0, "%s: attribute bytes differ",
                      ps_opt_kind_name(k));
        ps_opt_spec r;
        char err[160] = "";
        ck_assert_msg(ps_opt_spec_from_attr(got, sizeof got, &r, err, sizeof err) == PS_OK, "%s",
                      err);
        assert_identical(&s, &r, ps_opt_kind_name(k));
    }
}
END_TEST

/* An attribute of version 1 (40 bytes of spec, written before schedules, clipping
 * and weight decay for every kind) still reads: no schedule, no clipping, and the
 * weight decay it held only for adamw. */
START_TEST(attr_version_1_still_reads) {
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        uint8_t a[PS_OPT_ATTR_V1_BYTES];
        put32(a + 0, (uint32_t)k);
        putf(a + 4, 0.25f);
        putf(a + 8, 0.5f);
        put32(a + 12, 1);
        putf(a + 16, 0.8f);
        putf(a + 20, 0.99f);
        putf(a + 24, 1e-6f);
        putf(a + 28, 0.7f);
        putf(a + 32, 0.01f); /* weight decay: unused then but by adamw */
        putf(a + 36, 0.2f);
        ps_opt_spec r;
        char err[160] = "";
        ck_assert_msg(ps_opt_spec_from_attr(a, sizeof a, &r, err, sizeof err) == PS_OK, "%s", err);
        ps_opt_spec want = {.kind = (ps_opt_kind)k, .lr = 0.25f, .momentum = 0.5f,
                            .nesterov = true, .beta1 = 0.8f, .beta2 = 0.99f, .epsilon = 1e-6f,
                            .rho = 0.7f, .weight_decay = k == PS_OPT_ADAMW ? 0.01f : 0,
                            .initial_accumulator = 0.2f};
        assert_identical(&want, &r, ps_opt_kind_name(k));
    }
    uint8_t a[PS_OPT_ATTR_BYTES] = {0};
    ps_opt_spec r;
    char err[160];
    ck_assert_int_eq(ps_opt_spec_from_attr(a, 44, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_str_eq(err, "optimizer spec of 44 bytes (want 40 or 212)");
}
END_TEST

START_TEST(attr_rejects_bad_kind_bool_and_range) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_MOMENTUM), r = ps_opt_spec_default(PS_OPT_SGD);
    const ps_opt_spec before = r;
    uint8_t a[PS_OPT_ATTR_BYTES];
    char err[160];
    ps_opt_spec_to_attr(&s, a);
    ck_assert_int_eq(ps_opt_spec_from_attr(a, sizeof a, &r, err, sizeof err), PS_OK);
    r = before;
    put32(a, PS_OPT_COUNT);
    ck_assert_int_eq(ps_opt_spec_from_attr(a, sizeof a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "kind 6"));
    ps_opt_spec_to_attr(&s, a);
    put32(a + 12, 2);
    ck_assert_int_eq(ps_opt_spec_from_attr(a, sizeof a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "nesterov 2"));
    ps_opt_spec_to_attr(&s, a);
    putf(a + 8, 1.0f); /* momentum must be < 1 */
    ck_assert_int_eq(ps_opt_spec_from_attr(a, sizeof a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_str_eq(err, "momentum optimizer: momentum must be in [0, 1)");
    ps_opt_spec_to_attr(&s, a);
    put32(a + 52, PS_LR_COUNT);
    ck_assert_int_eq(ps_opt_spec_from_attr(a, sizeof a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_str_eq(err, "bad learning-rate schedule 5");
    ps_opt_spec_to_attr(&s, a);
    put32(a + 64, 3);
    ck_assert_int_eq(ps_opt_spec_from_attr(a, sizeof a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_str_eq(err, "bad staircase 3 (want 0 or 1)");
    assert_identical(&r, &before, "untouched on error");
}
END_TEST

/* ---- JSON ---- */

/* Parses text as the "optimizer" value; returns the codec's code, err filled. */
static int from_json(const char *text, ps_opt_spec *out, char *err, size_t errlen) {
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "bad test JSON %s", text);
    int rc = ps_opt_spec_from_json(j, out, err, errlen);
    cJSON_Delete(j);
    return rc;
}

START_TEST(json_every_kind) {
    ps_opt_spec s;
    char err[200] = "";
    ck_assert_int_eq(ps_opt_spec_from_json(NULL, &s, err, sizeof err), PS_OK);
    ps_opt_spec adam = ps_opt_spec_default(PS_OPT_ADAM);
    assert_identical(&s, &adam, "no optimizer");
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        const char *name = ps_opt_kind_name((ps_opt_kind)k);
        ps_opt_spec def = ps_opt_spec_default((ps_opt_kind)k);
        char text[400];
        /* a bare name, in any case, and an object with only the name: the defaults */
        snprintf(text, sizeof text, "\"%s\"", name);
        ck_assert_int_eq(from_json(text, &s, err, sizeof err), PS_OK);
        assert_identical(&s, &def, text);
        snprintf(text, sizeof text, "{\"name\": \"%c%s\"}", name[0] - 'a' + 'A', name + 1);
        ck_assert_int_eq(from_json(text, &s, err, sizeof err), PS_OK);
        assert_identical(&s, &def, text);
    }
    /* each kind with every key it takes */
    static const struct {
        const char *json;
        ps_opt_spec want;
    } cases[] = {
        {"{\"name\": \"sgd\", \"learning_rate\": 0.5}", {.kind = PS_OPT_SGD, .lr = 0.5f}},
        {"{\"name\": \"sgd\", \"learning_rate\": 0.5, \"momentum\": 0.8, \"nesterov\": true}",
         {.kind = PS_OPT_MOMENTUM, .lr = 0.5f, .momentum = 0.8f, .nesterov = true}},
        {"{\"name\": \"momentum\", \"learning_rate\": 0.2, \"momentum\": 0.7, \"nesterov\": false}",
         {.kind = PS_OPT_MOMENTUM, .lr = 0.2f, .momentum = 0.7f}},
        {"{\"name\": \"adagrad\", \"learning_rate\": 0.2, \"epsilon\": 1e-6, "
         "\"initial_accumulator_value\": 0.5}",
         {.kind = PS_OPT_ADAGRAD, .lr = 0.2f, .epsilon = 1e-6f, .initial_accumulator = 0.5f}},
        {"{\"name\": \"rmsprop\", \"learning_rate\": 0.2, \"epsilon\": 1e-6, \"rho\": 0.8}",
         {.kind = PS_OPT_RMSPROP, .lr = 0.2f, .epsilon = 1e-6f, .rho = 0.8f}},
        {"{\"name\": \"adam\", \"learning_rate\": 0.2, \"beta_1\": 0.8, \"beta_2\": 0.99, "
         "\"epsilon\": 1e-6}",
         {.kind = PS_OPT_ADAM, .lr = 0.2f, .beta1 = 0.8f, .beta2 = 0.99f, .epsilon = 1e-6f}},
        {"{\"name\": \"adamw\", \"learning_rate\": 0.2, \"beta_1\": 0.8, \"beta_2\": 0.99, "
         "\"epsilon\": 1e-6, \"weight_decay\": 0.01}",
         {.kind = PS_OPT_ADAMW,
          .lr = 0.2f,
          .beta1 = 0.8f,
          .beta2 = 0.99f,
          .epsilon = 1e-6f,
          .weight_decay = 0.01f}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(from_json(cases[i].json, &s, err, sizeof err) == PS_OK, "%s: %s",
                      cases[i].json, err);
        ck_assert_msg(ps_opt_spec_same(&s, &cases[i].want), "%s: got %s", cases[i].json,
                      ps_opt_spec_describe(&s, err, sizeof err));
    }
}
END_TEST

START_TEST(json_errors_name_the_key) {
    static const struct {
        const char *json;
        int rc;
        const char *msg; /* the whole message */
    } cases[] = {
        {"{\"name\": \"adam\", \"learning_rat\": 0.1}", PS_EFORMAT,
         "optimizer: unknown key 'learning_rat'"},
        {"{\"name\": \"adam\", \"learning_rate\": \"fast\"}", PS_EFORMAT,
         "optimizer: 'learning_rate' must be a number or a Keras learning-rate schedule object"},
        {"{\"name\": \"sgd\", \"nesterov\": 1}", PS_EFORMAT,
         "optimizer: 'nesterov' must be true or false"},
        {"{\"name\": \"sgd\", \"momentum\": true}", PS_EFORMAT,
         "optimizer: 'momentum' must be a number"},
        {"{\"name\": \"sgd\", \"beta_1\": 0.9}", PS_EFORMAT,
         "optimizer sgd: 'beta_1' does not apply"},
        {"{\"name\": \"adam\", \"nesterov\": true}", PS_EFORMAT,
         "optimizer adam: 'nesterov' does not apply"},
        {"{\"name\": \"rmsprop\", \"initial_accumulator_value\": 0.1}", PS_EFORMAT,
         "optimizer rmsprop: 'initial_accumulator_value' does not apply"},
        {"\"adamax\"", PS_EFORMAT,
         "optimizer: unknown name 'adamax' (want sgd, momentum, adagrad, rmsprop, adam or adamw)"},
        {"{\"learning_rate\": 0.1}", PS_EFORMAT,
         "'optimizer' must be a name or an object with a string key 'name'"},
        {"3", PS_EFORMAT, "'optimizer' must be a name or an object with a string key 'name'"},
        {"{\"name\": \"adam\", \"learning_rate\": 0}", PS_EINVAL,
         "adam optimizer: learning_rate must be > 0"},
        {"{\"name\": \"adam\", \"beta_2\": 1}", PS_EINVAL,
         "adam optimizer: beta_2 must be in [0, 1)"},
        {"{\"name\": \"adamw\", \"weight_decay\": -1}", PS_EINVAL,
         "adamw optimizer: weight_decay must be >= 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ps_opt_spec s = ps_opt_spec_default(PS_OPT_RMSPROP);
        const ps_opt_spec before = s;
        char err[200] = "";
        int rc = from_json(cases[i].json, &s, err, sizeof err);
        ck_assert_msg(rc == cases[i].rc, "%s: got %s, want %s (%s)", cases[i].json, ps_errname(rc),
                      ps_errname(cases[i].rc), err);
        ck_assert_str_eq(err, cases[i].msg);
        assert_identical(&s, &before, "untouched on error");
    }
}
END_TEST

/* Each schedule as Keras 3 serializes it (module, registered_name) and as Keras 2
 * does (class_name, config), with every config key, to the same spec. */
START_TEST(json_schedules_keras_3_and_2) {
    static const struct {
        const char *cls, *config;
        ps_lr_schedule want;
        float lr;
    } cases[] = {
        {"ExponentialDecay",
         "{\"initial_learning_rate\": 0.1, \"decay_steps\": 100, \"decay_rate\": 0.5, "
         "\"staircase\": true, \"name\": \"ExponentialDecay\"}",
         {.kind = PS_LR_EXPONENTIAL, .decay_steps = 100, .decay_rate = 0.5f, .staircase = true},
         0.1f},
        {"InverseTimeDecay",
         "{\"initial_learning_rate\": 0.2, \"decay_steps\": 10, \"decay_rate\": 2.0, "
         "\"staircase\": false, \"name\": \"InverseTimeDecay\"}",
         {.kind = PS_LR_INVERSE_TIME, .decay_steps = 10, .decay_rate = 2.0f}, 0.2f},
        {"CosineDecay",
         "{\"initial_learning_rate\": 0.0, \"decay_steps\": 1000, \"alpha\": 0.1, \"name\": "
         "\"CosineDecay\", \"warmup_target\": 0.05, \"warmup_steps\": 100}",
         {.kind = PS_LR_COSINE, .decay_steps = 1000, .alpha = 0.1f, .warmup_target = 0.05f,
          .warmup_steps = 100},
         0.0f},
        /* Keras' warmup_target None: no warm-up, which is a warm-up to lr in 0 steps */
        {"CosineDecay",
         "{\"initial_learning_rate\": 0.3, \"decay_steps\": 50, \"alpha\": 0.0, \"name\": "
         "\"CosineDecay\", \"warmup_target\": null, \"warmup_steps\": 0}",
         {.kind = PS_LR_COSINE, .decay_steps = 50, .warmup_target = 0.3f}, 0.3f},
        {"PiecewiseConstantDecay",
         "{\"boundaries\": [100, 250], \"values\": [0.1, 0.01, 0.001], \"name\": "
         "\"PiecewiseConstantDecay\"}",
         {.kind = PS_LR_PIECEWISE, .n_boundaries = 2, .boundaries = {100, 250},
          .values = {0.01f, 0.001f}},
         0.1f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int form = 0; form < 2; form++) {
            char text[1000], err[200] = "";
            snprintf(text, sizeof text,
                     form == 0 ? "{\"name\": \"sgd\", \"learning_rate\": {\"module\": "
                                 "\"keras.optimizers.schedules\", \"class_name\": \"%s\", "
                                 "\"config\": %s, \"registered_name\": null}}"
                               : "{\"name\": \"sgd\", \"learning_rate\": {\"class_name\": "
                                 "\"%s\", \"config\": %s}}",
                     cases[i].cls, cases[i].config);
            ps_opt_spec s;
            ck_assert_msg(from_json(text, &s, err, sizeof err) == PS_OK, "%s: %s", text, err);
            ps_opt_spec want = ps_opt_spec_default(PS_OPT_SGD);
            want.lr = cases[i].lr;
            want.schedule = cases[i].want;
            assert_identical(&s, &want, text);
            ck_assert(ps_opt_spec_same(&s, &want));
        }
    }
}
END_TEST

/* weight_decay and the clipping for every kind (null: none, as Keras writes it). */
START_TEST(json_weight_decay_and_clipping_every_kind) {
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        const char *name = ps_opt_kind_name((ps_opt_kind)k);
        char text[400], err[200] = "";
        ps_opt_spec s;
        snprintf(text, sizeof text,
                 "{\"name\": \"%s\", \"weight_decay\": 0.125, \"clipnorm\": 1.5, "
                 "\"clipvalue\": null, \"global_clipnorm\": null}",
                 name);
        ck_assert_msg(from_json(text, &s, err, sizeof err) == PS_OK, "%s: %s", text, err);
        ck_assert_float_eq(s.weight_decay, 0.125f);
        ck_assert_float_eq(s.clipnorm, 1.5f);
        ck_assert_float_eq(s.clipvalue, 0);
        snprintf(text, sizeof text, "{\"name\": \"%s\", \"global_clipnorm\": 2}", name);
        ck_assert_msg(from_json(text, &s, err, sizeof err) == PS_OK, "%s: %s", text, err);
        ck_assert_float_eq(s.global_clipnorm, 2.0f);
        ps_opt_spec d = ps_opt_spec_default((ps_opt_kind)k);
        ck_assert(!ps_opt_spec_same(&s, &d)); /* the clipping counts */
        snprintf(text, sizeof text, "{\"name\": \"%s\", \"clipvalue\": 0.5}", name);
        ck_assert_msg(from_json(text, &s, err, sizeof err) == PS_OK, "%s: %s", text, err);
        ck_assert_float_eq(s.clipvalue, 0.5f);
    }
    char buf[300];
    ps_opt_spec s;
    ck_assert_int_eq(from_json("{\"name\": \"sgd\", \"weight_decay\": 0.01, \"clipnorm\": 1}", &s,
                               buf, sizeof buf),
                     PS_OK);
    ck_assert_str_eq(ps_opt_spec_describe(&s, buf, sizeof buf),
                     "sgd lr=0.01 weight_decay=0.01 clipnorm=1");
    ck_assert_int_eq(
        from_json("{\"name\": \"adam\", \"learning_rate\": {\"class_name\": \"PiecewiseConstantDecay\", "
                  "\"config\": {\"boundaries\": [10, 20], \"values\": [0.1, 0.05, 0.01]}}}",
                  &s, buf, sizeof buf),
        PS_OK);
    ck_assert_str_eq(ps_opt_spec_describe(&s, buf, sizeof buf),
                     "adam lr=0.1 beta1=0.9 beta2=0.999 epsilon=1e-07 "
                     "schedule=PiecewiseConstantDecay(boundaries=[10,20] values=[0.1,0.05,0.01])");
}
END_TEST

START_TEST(json_schedule_errors_name_the_key) {
#define SGD_LR(x) "{\"name\": \"sgd\", \"learning_rate\": " x "}"
#define EXP(cfg) SGD_LR("{\"class_name\": \"ExponentialDecay\", \"config\": " cfg "}")
    static const struct {
        const char *json;
        int rc;
        const char *msg;
    } cases[] = {
        {SGD_LR("{\"class_name\": \"LinearDecay\", \"config\": {}}"), PS_EFORMAT,
         "optimizer: learning_rate: unknown schedule class 'LinearDecay' (want ExponentialDecay, "
         "PiecewiseConstantDecay, CosineDecay or InverseTimeDecay)"},
        {SGD_LR("{\"class_name\": \"ExponentialDecay\", \"config\": {}, \"extra\": 1}"),
         PS_EFORMAT,
         "optimizer: learning_rate: unknown key 'extra' (a schedule has module, class_name, "
         "config, registered_name)"},
        {SGD_LR("{\"module\": \"keras.layers\", \"class_name\": \"ExponentialDecay\", \"config\": {}}"),
         PS_EFORMAT, "optimizer: learning_rate: 'module' must be \"keras.optimizers.schedules\""},
        {SGD_LR("{\"class_name\": \"ExponentialDecay\"}"), PS_EFORMAT,
         "optimizer: learning_rate ExponentialDecay: a schedule needs an object 'config'"},
        {SGD_LR("{\"config\": {}}"), PS_EFORMAT,
         "optimizer: learning_rate: a schedule needs a string 'class_name'"},
        {SGD_LR("{\"class_name\": \"ExponentialDecay\", \"config\": {}, \"registered_name\": \"X\"}"),
         PS_EFORMAT, "optimizer: learning_rate: 'registered_name' must be null (a built-in schedule)"},
        {EXP("{\"initial_learning_rate\": 0.1, \"decay_steps\": 10}"), PS_EFORMAT,
         "optimizer: learning_rate ExponentialDecay: 'decay_rate' is missing"},
        {EXP("{\"decay_steps\": 10, \"decay_rate\": 0.5}"), PS_EFORMAT,
         "optimizer: learning_rate ExponentialDecay: 'initial_learning_rate' is missing"},
        {EXP("{\"initial_learning_rate\": 0.1, \"decay_steps\": 10, \"decay_rate\": 0.5, "
             "\"decay_step\": 3}"),
         PS_EFORMAT, "optimizer: learning_rate ExponentialDecay: unknown key 'decay_step'"},
        {EXP("{\"initial_learning_rate\": 0.1, \"decay_steps\": 10, \"decay_rate\": 0.5, "
             "\"alpha\": 0.1}"),
         PS_EFORMAT, "optimizer: learning_rate ExponentialDecay: inapplicable key 'alpha'"},
        {EXP("{\"initial_learning_rate\": 0.1, \"decay_steps\": \"10\", \"decay_rate\": 0.5}"),
         PS_EFORMAT, "optimizer: learning_rate ExponentialDecay: 'decay_steps' must be a number"},
        {EXP("{\"initial_learning_rate\": 0.1, \"decay_steps\": 10, \"decay_rate\": 0.5, "
             "\"staircase\": 1}"),
         PS_EFORMAT, "optimizer: learning_rate ExponentialDecay: 'staircase' must be true or false"},
        {EXP("{\"initial_learning_rate\": 0.1, \"decay_steps\": 0, \"decay_rate\": 0.5}"),
         PS_EINVAL, "sgd optimizer: ExponentialDecay: decay_steps must be > 0"},
        {EXP("{\"initial_learning_rate\": -0.1, \"decay_steps\": 5, \"decay_rate\": 0.5}"),
         PS_EINVAL, "sgd optimizer: ExponentialDecay: initial_learning_rate must be >= 0"},
        {SGD_LR("{\"class_name\": \"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
                "\"decay_steps\": 10, \"warmup_steps\": 5}}"),
         PS_EFORMAT,
         "optimizer: learning_rate CosineDecay: 'warmup_steps' needs a 'warmup_target' (Keras "
         "ignores it without one)"},
        {SGD_LR("{\"class_name\": \"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
                "\"decay_steps\": 10, \"alpha\": 2}}"),
         PS_EINVAL, "sgd optimizer: CosineDecay: alpha must be in [0, 1]"},
        {SGD_LR("{\"class_name\": \"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [1, "
                "2], \"values\": [0.1, 0.2]}}"),
         PS_EFORMAT,
         "optimizer: learning_rate PiecewiseConstantDecay: 'values' must be a list of 3 rates "
         "(one more than boundaries)"},
        {SGD_LR("{\"class_name\": \"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [1.5], "
                "\"values\": [0.1, 0.2]}}"),
         PS_EFORMAT,
         "optimizer: learning_rate PiecewiseConstantDecay: boundaries[0] must be a whole number "
         "of steps in [0, 4294967295]"},
        {SGD_LR("{\"class_name\": \"PiecewiseConstantDecay\", \"config\": {\"boundaries\": "
                "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17], \"values\": [0.1]}}"),
         PS_EFORMAT,
         "optimizer: learning_rate PiecewiseConstantDecay: 17 boundaries, at most 16 are "
         "supported"},
        {SGD_LR("{\"class_name\": \"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [5, 5], "
                "\"values\": [0.1, 0.2, 0.3]}}"),
         PS_EINVAL,
         "sgd optimizer: PiecewiseConstantDecay: boundaries must increase (boundaries[1] = 5 "
         "after 5)"},
        {SGD_LR("{\"class_name\": \"PiecewiseConstantDecay\", \"config\": {\"values\": [0.1]}}"),
         PS_EFORMAT, "optimizer: learning_rate PiecewiseConstantDecay: 'boundaries' is missing"},
        {"{\"name\": \"sgd\", \"clipnorm\": 1, \"global_clipnorm\": 1}", PS_EINVAL,
         "sgd optimizer: clipnorm and global_clipnorm cannot both be set (Keras refuses it too)"},
        {"{\"name\": \"adam\", \"clipvalue\": 1, \"global_clipnorm\": 1}", PS_EINVAL,
         "adam optimizer: clipvalue with global_clipnorm: Keras would apply only "
         "global_clipnorm; set one"},
        {"{\"name\": \"adam\", \"clipnorm\": -1}", PS_EINVAL,
         "adam optimizer: clipnorm must be >= 0"},
        {"{\"name\": \"adam\", \"clipvalue\": \"big\"}", PS_EFORMAT,
         "optimizer: 'clipvalue' must be a number"},
        {"{\"name\": \"adamw\", \"weight_decay\": null}", PS_EFORMAT,
         "optimizer: 'weight_decay' must be a number"},
    };
#undef EXP
#undef SGD_LR
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ps_opt_spec s = ps_opt_spec_default(PS_OPT_RMSPROP);
        const ps_opt_spec before = s;
        char err[300] = "";
        int rc = from_json(cases[i].json, &s, err, sizeof err);
        ck_assert_msg(rc == cases[i].rc, "%s: got %s, want %s (%s)", cases[i].json, ps_errname(rc),
                      ps_errname(cases[i].rc), err);
        ck_assert_str_eq(err, cases[i].msg);
        assert_identical(&s, &before, "untouched on error");
    }
}
END_TEST

static Suite *optim_spec_suite(void) {
    Suite *s = suite_create("optim_spec");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, proto_round_trip_every_kind);
    tcase_add_test(tc, proto_unknown_kind_fails_validation);
    tcase_add_test(tc, proto_bad_piecewise_fails_validation);
    tcase_add_test(tc, attr_version_1_still_reads);
    tcase_add_test(tc, json_schedules_keras_3_and_2);
    tcase_add_test(tc, json_weight_decay_and_clipping_every_kind);
    tcase_add_test(tc, json_schedule_errors_name_the_key);
    tcase_add_test(tc, attr_round_trip_every_kind);
    tcase_add_test(tc, attr_rejects_bad_kind_bool_and_range);
    tcase_add_test(tc, json_every_kind);
    tcase_add_test(tc, json_errors_name_the_key);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(optim_spec_suite());
}
