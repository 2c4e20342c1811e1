/* Label mappings (worker/data/labels.c): the flags' and the model spec's syntax,
 * every refusal against the data's classes and the model's outputs, the
 * relabelling itself and the log lines; and the spec's "labels" and "epochs"
 * as the model reports them. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "labels.h"
#include "model.h"
#include "ps_error.h"
#include "testutil.h"

#define ck_assert_has(hay, needle)                                                                 \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' lacks '%s'", (hay), (needle))

static char err[512];

START_TEST(positive_parses) {
    ps_label_spec s;
    ck_assert_int_eq(ps_labels_parse_positive("5,7,9", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(s.kind, PS_LABELS_POSITIVE);
    ck_assert_int_eq(s.n_named, 3);
    for (int c = 0; c < 10; c++)
        ck_assert_int_eq(s.to[c], c == 5 || c == 7 || c == 9);
    ck_assert_int_eq(ps_labels_parse_positive("255", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(s.to[255], 1);
}
END_TEST

START_TEST(positive_refuses_bad_syntax) {
    static const char *const bad[] = {"",     ",",    "5,", ",5",  "5,,7", "-1",  "256",
                                      "1000", "5 ,7", "a",  "5;7", "5:1",  "0x5", "5.0"};
    ps_label_spec s;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(ps_labels_parse_positive(bad[i], &s, err, sizeof err) == PS_EINVAL, "'%s'",
                      bad[i]);
        ck_assert_has(err, "--positive-classes");
    }
    ck_assert_int_eq(ps_labels_parse_positive("5,7,5", &s, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "class 5 is listed twice");
}
END_TEST

START_TEST(map_parses_and_refuses) {
    ps_label_spec s;
    ck_assert_int_eq(ps_labels_parse_map("0:1,2:0,1:1", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(s.kind, PS_LABELS_MAP);
    ck_assert_int_eq(s.n_named, 3);
    ck_assert_int_eq(s.to[0], 1);
    ck_assert_int_eq(s.to[1], 1);
    ck_assert_int_eq(s.to[2], 0);
    ck_assert_int_eq(s.to[3], -1);
    static const char *const bad[] = {"",      "0",     "0:",    ":0",   "0:1,", "0:1,,1:0", "0-1",
                                      "0:256", "256:0", "0:1:2", "0:-1", "a:b",  "0:1 ,1:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(ps_labels_parse_map(bad[i], &s, err, sizeof err) == PS_EINVAL, "'%s'",
                      bad[i]);
        ck_assert_has(err, "CLASS:LABEL");
    }
    ck_assert_int_eq(ps_labels_parse_map("0:0,1:1,0:1", &s, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "class 0 is mapped twice");
}
END_TEST

/* Parses text as JSON and hands it to ps_labels_from_json. */
static int from_json(const char *text, ps_label_spec *s) {
    cJSON *j = cJSON_Parse(text);
    ck_assert_ptr_nonnull(j);
    err[0] = '\0';
    int rc = ps_labels_from_json(j, s, err, sizeof err);
    cJSON_Delete(j);
    return rc;
}

START_TEST(json_parses_and_refuses) {
    ps_label_spec s;
    ck_assert_int_eq(from_json("{\"positive\": [5, 7, 9]}", &s), PS_OK);
    ck_assert_int_eq(s.kind, PS_LABELS_POSITIVE);
    ck_assert_int_eq(s.to[7], 1);
    ck_assert_int_eq(s.to[6], 0);
    ck_assert_int_eq(from_json("{\"map\": {\"0\": 1, \"1\": 0}}", &s), PS_OK);
    ck_assert_int_eq(s.kind, PS_LABELS_MAP);
    ck_assert_int_eq(s.to[0], 1);
    ck_assert_int_eq(s.to[1], 0);
    ck_assert_int_eq(s.to[2], -1);
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"[5, 7]", "one key"},
        {"{}", "one key"},
        {"{\"positive\": [5], \"map\": {\"0\": 0}}", "one key"},
        {"{\"negative\": [5]}", "unknown key 'negative'"},
        {"{\"positive\": []}", "non-empty array"},
        {"{\"positive\": 5}", "non-empty array"},
        {"{\"positive\": [5.5]}", "whole numbers"},
        {"{\"positive\": [-1]}", "whole numbers"},
        {"{\"positive\": [\"5\"]}", "whole numbers"},
        {"{\"positive\": [5, 5]}", "class 5 twice"},
        {"{\"map\": {}}", "non-empty object"},
        {"{\"map\": [0, 1]}", "non-empty object"},
        {"{\"map\": {\"x\": 0}}", "key 'x'"},
        {"{\"map\": {\"0\": \"1\"}}", "class 0 a label"},
        {"{\"map\": {\"0\": 256}}", "class 0 a label"},
        {"{\"map\": {\"3\": 0, \"3\": 1}}", "class 3 twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(from_json(bad[i].json, &s) == PS_EFORMAT, "%s", bad[i].json);
        ck_assert_has(err, bad[i].msg);
        ck_assert_has(err, "'labels'");
    }
}
END_TEST

START_TEST(resolve_binary) {
    ps_label_spec s;
    int32_t t[PS_LABELS_MAX];
    ck_assert_int_eq(ps_labels_parse_positive("9,5,7", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "--positive-classes", 10, 2, t, err, sizeof err), PS_OK);
    for (int c = 0; c < 10; c++)
        ck_assert_int_eq(t[c], c == 5 || c == 7 || c == 9);
    /* a class the data does not have */
    ck_assert_int_eq(ps_labels_parse_positive("5,7,12", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "--positive-classes", 10, 2, t, err, sizeof err),
                     PS_EINVAL);
    ck_assert_has(err, "--positive-classes names class 12, but the data has classes 0..9");
    /* a binary map on a 10-way softmax model */
    ck_assert_int_eq(ps_labels_parse_positive("5,7,9", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "X", 10, 10, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "X makes a binary task, but the model outputs 10 classes");
    /* nothing negative */
    ck_assert_int_eq(ps_labels_parse_positive("0,1,2", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "X", 3, 2, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "every one of the 3 classes positive");
}
END_TEST

START_TEST(resolve_map) {
    ps_label_spec s;
    int32_t t[PS_LABELS_MAX];
    ck_assert_int_eq(ps_labels_parse_map("0:2,1:0,2:1,3:0", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "--label-map", 4, 3, t, err, sizeof err), PS_OK);
    ck_assert_int_eq(t[0], 2);
    ck_assert_int_eq(t[1], 0);
    ck_assert_int_eq(t[2], 1);
    ck_assert_int_eq(t[3], 0);
    /* does not cover class 3 */
    ck_assert_int_eq(ps_labels_parse_map("0:0,1:1,2:1", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "--label-map", 4, 2, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "--label-map gives class 3 no label: the map must cover all 4 classes");
    /* a class beyond the data */
    ck_assert_int_eq(ps_labels_parse_map("0:0,1:1,4:1", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "M", 2, 2, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "M names class 4, but the data has classes 0..1");
    /* a label beyond the model */
    ck_assert_int_eq(ps_labels_parse_map("0:0,1:2", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "M", 2, 2, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "M maps class 1 to label 2, but the model's labels are 0..1");
    /* an output no class reaches */
    ck_assert_int_eq(ps_labels_parse_map("0:0,1:2,2:2", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "M", 3, 3, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "M maps no class to label 1");
}
END_TEST

START_TEST(resolve_none) {
    ps_label_spec s = {.kind = PS_LABELS_NONE};
    int32_t t[PS_LABELS_MAX];
    ck_assert_int_eq(ps_labels_resolve(&s, "-", 10, 10, t, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "-", 2, 2, t, err, sizeof err), PS_OK);
    for (int c = 0; c < 10; c++)
        ck_assert_int_eq(t[c], c);
    ck_assert_int_eq(ps_labels_resolve(&s, "-", 10, 2, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "the model has a binary output: say which classes are positive");
    ck_assert_int_eq(ps_labels_resolve(&s, "-", 10, 5, t, err, sizeof err), PS_EINVAL);
    ck_assert_has(err, "the data has 10 classes, the model outputs 5");
}
END_TEST

START_TEST(apply_describe_balance) {
    int32_t y[8] = {0, 5, 7, 9, 1, 5, 2, 3};
    ps_dataset d = {.y = y, .n = 8, .num_classes = 10};
    ps_label_spec s;
    int32_t t[PS_LABELS_MAX];
    ck_assert_int_eq(ps_labels_parse_positive("5,7,9", &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_labels_resolve(&s, "-", 10, 2, t, err, sizeof err), PS_OK);
    ps_labels_apply(&d, t, 2);
    static const int32_t want[8] = {0, 1, 1, 1, 0, 1, 0, 0};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(y[i], want[i]);
    ck_assert_int_eq(d.num_classes, 2);
    char line[256];
    ps_labels_describe(&s, 10, line, sizeof line);
    ck_assert_str_eq(line, "binary: classes 5,7,9 -> 1, the other 7 -> 0");
    ps_labels_balance(&d, 1, line, sizeof line);
    ck_assert_str_eq(line, "4 of 8 positive (50.0%)");
    ps_labels_balance(&d, 0, line, sizeof line);
    ck_assert_str_eq(line, "label 0: 4, label 1: 4");
    ck_assert_int_eq(ps_labels_parse_map("1:0,0:1", &s, err, sizeof err), PS_OK);
    ps_labels_describe(&s, 2, line, sizeof line);
    ck_assert_str_eq(line, "map 0:1,1:0");
}
END_TEST

/* The spec's "labels" and "epochs" through the model parser. */
static const char *spec(const char *extra, char *buf, size_t size) {
    snprintf(buf, size,
             "{\"input_shape\": [28, 28, 1], \"layers\": [{\"type\": \"Flatten\"}, {\"type\": "
             "\"Dense\", \"units\": 1}], \"loss\": \"binary_crossentropy\"%s}",
             extra);
    return buf;
}

START_TEST(model_spec_keys) {
    char buf[1024];
    ps_model *m = NULL;
    ck_assert_int_eq(ps_model_from_json(spec("", buf, sizeof buf), &m, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_model_labels(m)->kind, PS_LABELS_NONE);
    ck_assert_uint_eq(ps_model_epochs(m), 0);
    size_t h, w, c;
    ps_model_input_shape(m, &h, &w, &c);
    ck_assert_uint_eq(h, 28);
    ck_assert_uint_eq(w, 28);
    ck_assert_uint_eq(c, 1);
    ps_model_free(m);
    ck_assert_int_eq(ps_model_from_json(
                         spec(", \"labels\": {\"positive\": [3]}, \"epochs\": 4", buf, sizeof buf),
                         &m, err, sizeof err),
                     PS_OK);
    ck_assert_int_eq(ps_model_labels(m)->kind, PS_LABELS_POSITIVE);
    ck_assert_int_eq(ps_model_labels(m)->to[3], 1);
    ck_assert_uint_eq(ps_model_epochs(m), 4);
    ps_model_free(m);
    m = NULL;
    ck_assert_int_eq(
        ps_model_from_json(spec(", \"labels\": {\"positive\": [3, 3]}", buf, sizeof buf), &m, err,
                           sizeof err),
        PS_EFORMAT);
    ck_assert_has(err, "'labels': 'positive' lists class 3 twice");
    ck_assert_ptr_null(m);
    ck_assert_int_eq(
        ps_model_from_json(spec(", \"epochs\": 0", buf, sizeof buf), &m, err, sizeof err),
        PS_EFORMAT);
    ck_assert_has(err, "'epochs' must be a positive integer");
    /* a flat input is 1 x 1 x n */
    ck_assert_int_eq(ps_model_from_json(ps_model_default_spec(), &m, err, sizeof err), PS_OK);
    ps_model_input_shape(m, &h, &w, &c);
    ck_assert_uint_eq(h * 1000000 + w * 1000 + c, 1001784);
    ps_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("labels");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, positive_parses);
    tcase_add_test(tc, positive_refuses_bad_syntax);
    tcase_add_test(tc, map_parses_and_refuses);
    tcase_add_test(tc, json_parses_and_refuses);
    tcase_add_test(tc, resolve_binary);
    tcase_add_test(tc, resolve_map);
    tcase_add_test(tc, resolve_none);
    tcase_add_test(tc, apply_describe_balance);
    tcase_add_test(tc, model_spec_keys);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
