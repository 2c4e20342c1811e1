/* The optimizer spec's codec (optim_spec.c): spec -> ps.proto Optimizer -> spec,
 * spec -> checkpoint attribute -> spec (both against the byte layouts written
 * out by hand, so the wire and checkpoint formats stay as they were), and the
 * JSON "optimizer" for every kind, an unknown key and values of the wrong type. */
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
}

/* ---- ps.proto ---- */

START_TEST(proto_round_trip_every_kind) {
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        ps_opt_spec s = odd_spec((ps_opt_kind)k);
        Ps__Optimizer o;
        ps_opt_spec_to_proto(&s, &o);
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
        uint8_t got_b[128], want_b[128];
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
        assert_identical(&s, &r, ps_opt_kind_name(k));
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
    ck_assert_uint_eq(PS_OPT_ATTR_BYTES, 40);
    for (int k = 0; k < PS_OPT_COUNT; k++) {
        ps_opt_spec s = odd_spec((ps_opt_kind)k);
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
        ck_assert_msg(memcmp(got, want, sizeof got) == 0, "%s: attribute bytes differ",
                      ps_opt_kind_name(k));
        ps_opt_spec r;
        char err[160] = "";
        ck_assert_int_eq(ps_opt_spec_from_attr(got, &r, err, sizeof err), PS_OK);
        assert_identical(&s, &r, ps_opt_kind_name(k));
    }
}
END_TEST

START_TEST(attr_rejects_bad_kind_bool_and_range) {
    ps_opt_spec s = ps_opt_spec_default(PS_OPT_MOMENTUM), r = ps_opt_spec_default(PS_OPT_SGD);
    const ps_opt_spec before = r;
    uint8_t a[PS_OPT_ATTR_BYTES];
    char err[160];
    ps_opt_spec_to_attr(&s, a);
    put32(a, PS_OPT_COUNT);
    ck_assert_int_eq(ps_opt_spec_from_attr(a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "kind 6"));
    ps_opt_spec_to_attr(&s, a);
    put32(a + 12, 2);
    ck_assert_int_eq(ps_opt_spec_from_attr(a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "nesterov 2"));
    ps_opt_spec_to_attr(&s, a);
    putf(a + 8, 1.0f); /* momentum must be < 1 */
    ck_assert_int_eq(ps_opt_spec_from_attr(a, &r, err, sizeof err), PS_EFORMAT);
    ck_assert_str_eq(err, "momentum optimizer: momentum must be in [0, 1)");
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
         "optimizer: 'learning_rate' must be a number"},
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

static Suite *optim_spec_suite(void) {
    Suite *s = suite_create("optim_spec");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, proto_round_trip_every_kind);
    tcase_add_test(tc, proto_unknown_kind_fails_validation);
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
