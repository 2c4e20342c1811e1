/* Tabular records (CSV / TSV with id columns and float labels): 64-bit ids
 * parsed as decimals (the whole range, nothing else) or hashed (the stated
 * hash, pinned by its values; salted by the column's place; an empty field the
 * column's missing id); the CSV source's records carry them and a float
 * target, and every bad table is an error naming the file, line and column;
 * the data spec's keys and their errors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataspec.h"
#include "ids.h"
#include "ps_error.h"
#include "source.h"
#include "testutil.h"

static char *dir;

static void setup(void) {
    dir = ps_test_mkdtemp();
}

static void teardown(void) {
    ps_test_rmdir(dir);
    free(dir);
}

/* Writes text to dir/rel; its path in p (4096 bytes). */
static void put(const char *rel, const char *text, char *p) {
    snprintf(p, 4096, "%s/%s", dir, rel);
    ck_assert_int_eq(ps_test_write_file(p, text, strlen(text)), 0);
}

/* ---- ids ---- */

START_TEST(decimal_ids) {
    uint64_t v = 1;
    ck_assert_int_eq(ps_id_parse("0", 0, &v), PS_OK);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(ps_id_parse(" 42 ", 0, &v), PS_OK);
    ck_assert_uint_eq(v, 42);
    ck_assert_int_eq(ps_id_parse("18446744073709551615", 0, &v), PS_OK);
    ck_assert(v == UINT64_MAX);
    ck_assert_int_eq(ps_id_parse("", 3, &v), PS_OK);
    ck_assert(v == ps_id_missing(3));
    ck_assert_int_eq(ps_id_parse("   ", 3, &v), PS_OK);
    ck_assert(v == ps_id_missing(3));
    const char *bad[] = {"18446744073709551616", "99999999999999999999", "-1", "+1", "1e3",
                         "0x10", "4.0", "12a", "1 2", "abc"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(ps_id_parse(bad[i], 0, &v) == PS_EFORMAT, "\"%s\" taken", bad[i]);
}
END_TEST

START_TEST(hashed_ids) {
    /* the stated hash (ids.h), pinned: FNV-1a 64 from a basis salted by the
     * position, splitmix64's finalizer (values from an independent script) */
    ck_assert(ps_id_missing(0) == 0xe9d327596b869820ull);
    ck_assert(ps_id_missing(1) == 0xd5829c41b3e705f7ull);
    ck_assert(ps_id_hash("68fd1e64", 8, 0) == 0x099eee7535e58ed2ull);
    ck_assert(ps_id_hash("68fd1e64", 8, 1) == 0x50198c6836be9f4full);
    ck_assert(ps_id_hash("a", 1, 0) == 0xd1eca9cdc0066f33ull);
    uint64_t v;
    ck_assert_int_eq(ps_id_of(" 68fd1e64 ", 1, 1, &v), PS_OK); /* spaces around: not the id */
    ck_assert(v == 0x50198c6836be9f4full);
    ck_assert_int_eq(ps_id_of("", 1, 1, &v), PS_OK);
    ck_assert(v == ps_id_missing(1));
    ck_assert_int_eq(ps_id_of("12", 0, 1, &v), PS_OK); /* hashed, not read as a number */
    ck_assert(v != 12 && v == ps_id_hash("12", 2, 0));
    /* the same text in 64 columns: 64 ids */
    uint64_t seen[64];
    for (size_t c = 0; c < 64; c++) {
        seen[c] = ps_id_hash("x", 1, c);
        for (size_t k = 0; k < c; k++) ck_assert(seen[k] != seen[c]);
    }
}
END_TEST

/* ---- the CSV source ---- */

static ps_source *open_csv(const char *p, const ps_source_opts *o) {
    ps_source *s = NULL;
    char err[512];
    const char *paths[1] = {p};
    int rc = ps_source_csv(paths, 1, o, &s, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    return s;
}

START_TEST(csv_ids_and_float_label) {
    char p[4096], err[512];
    /* MovieLens' layout: ids, a rating, a timestamp nobody reads; any file name */
    put("r.inter", "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                   "196\t242\t3\t881250949\n"
                   "18446744073709551615\t1\t4.5\tnot a number\n",
        p);
    const char *ids[2] = {"user_id:token", "item_id:token"};
    const char *none[1] = {NULL};
    ps_source_opts o = {.id_columns = ids, .n_id_columns = 2, .label_column = "rating:float",
                        .float_label = true, .columns = none, .n_columns = 0,
                        .delimiter = '\t'};
    ps_source *s = open_csv(p, &o);
    ck_assert_uint_eq(s->n, 2);
    ck_assert_uint_eq(s->n_ids, 2);
    ck_assert(s->float_target);
    ck_assert_int_eq(s->num_classes, 0);
    ck_assert(s->target_min == 3.0 && s->target_max == 4.5);
    ck_assert_uint_eq(s->c, 0);
    ck_assert_ptr_nonnull(strstr(s->desc, "(2 rows, 0 features, 2 ids, float label"));
    ps_sample smp = {0};
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_OK);
    ck_assert_uint_eq(smp.n_ids, 2);
    ck_assert(smp.ids[0] == UINT64_MAX && smp.ids[1] == 1);
    ck_assert(smp.target == 4.5f && smp.label == 0 && smp.c == 0);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.ids[0] == 196 && smp.ids[1] == 242 && smp.target == 3.0f);
    ps_source_close(s);

    /* hashed: any text, an empty field the column's missing id; the same text in
     * two columns two ids; numeric features beside; a class label */
    put("c.csv", "label,i1,c1,c2\n1,0.5,68fd1e64,68fd1e64\n0,-2,,\"a,b\"\n", p);
    const char *cids[2] = {"c1", "c2"};
    ps_source_opts h = {.id_columns = cids, .n_id_columns = 2, .hash_ids = true};
    s = open_csv(p, &h);
    ck_assert_uint_eq(s->c, 1); /* every other column: i1 */
    ck_assert_int_eq(s->num_classes, 2);
    ck_assert(!s->float_target);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.x[0] == 0.5f && smp.label == 1 && smp.target == 1.0f);
    ck_assert(smp.ids[0] == 0x099eee7535e58ed2ull && smp.ids[1] == 0x50198c6836be9f4full);
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.x[0] == -2.0f && smp.label == 0);
    ck_assert(smp.ids[0] == ps_id_missing(0) && smp.ids[1] == ps_id_hash("a,b", 3, 1));
    ps_source_close(s);
    ps_sample_free(&smp);
}
END_TEST

/* ps_source_csv on text fails with PS_EFORMAT and an error holding want. */
static void csv_fails(const char *name, const char *text, const ps_source_opts *o,
                      const char *want) {
    char p[4096], err[512] = "";
    put(name, text, p);
    ps_source *s = NULL;
    const char *paths[1] = {p};
    int rc = ps_source_csv(paths, 1, o, &s, err, sizeof err);
    ck_assert_msg(rc == PS_EFORMAT, "%s: rc %d (%s)", text, rc, err);
    ck_assert_msg(strstr(err, p) && strstr(err, want), "want \"%s\" in \"%s\"", want, err);
}

START_TEST(csv_errors) {
    const char *ids[2] = {"u", "i"};
    ps_source_opts o = {.id_columns = ids, .n_id_columns = 2, .float_label = true,
                        .label_column = "r"};
    csv_fails("a.csv", "u,i,r\n1,2,3\n1,x2,3\n", &o,
              ":3: column 2 (i): not an unsigned 64-bit decimal id: \"x2\"");
    csv_fails("b.csv", "u,i,r\n18446744073709551616,2,3\n", &o,
              ":2: column 1 (u): not an unsigned 64-bit decimal id");
    csv_fails("c.csv", "u,i,r\n-1,2,3\n", &o, ":2: column 1 (u): not an unsigned");
    csv_fails("d.csv", "u,i,r\n1,2,3\n1,2,inf\n", &o,
              ":3: column 3 (r): the label inf is not a finite float");
    csv_fails("e.csv", "u,i,r\n1,2,nan\n", &o, ":2: column 3 (r): the label nan is not");
    csv_fails("f.csv", "u,i,r\n1,2,1e39\n", &o, "the label 1e+39 is not a finite float");
    csv_fails("g.csv", "u,r\n1,2\n", &o, "no id column \"i\"");
    csv_fails("h.csv", "u,i,r\n1,2,x\n", &o, ":2: column 3 (r): not a number");
    const char *twice[2] = {"u", "u"};
    ps_source_opts t = {.id_columns = twice, .n_id_columns = 2, .label_column = "r"};
    csv_fails("i.csv", "u,i,r\n1,2,3\n", &t, "column \"u\" is named twice in \"id_columns\"");
    const char *lab[1] = {"r"};
    ps_source_opts l = {.id_columns = lab, .n_id_columns = 1, .label_column = "r"};
    csv_fails("j.csv", "u,i,r\n1,2,3\n", &l, "column \"r\" is both the label and an id column");
    const char *feat[1] = {"u"};
    ps_source_opts f = {.id_columns = ids, .n_id_columns = 2, .label_column = "r",
                        .columns = feat, .n_columns = 1};
    csv_fails("k.csv", "u,i,r\n1,2,3\n", &f, "column \"u\" is both a feature and an id column");
    const char *none[1] = {NULL};
    ps_source_opts n = {.columns = none, .n_columns = 0};
    csv_fails("l.csv", "a,label\n1,0\n", &n, "no feature columns");
    /* a class label stays a class number */
    ps_source_opts c = {.id_columns = ids, .n_id_columns = 2, .label_column = "r"};
    csv_fails("m.csv", "u,i,r\n1,2,3.5\n", &c, ":2: the label 3.5 is not a class number");
}
END_TEST

/* ---- the data spec ---- */

static int resolve(const char *json, ps_data_spec *s, char *err, size_t errlen) {
    char p[4096];
    put("spec.json", json, p);
    return ps_data_spec_resolve(p, s, err, errlen);
}

static void spec_fails(const char *json, const char *want) {
    ps_data_spec s;
    char err[1024] = "";
    int rc = resolve(json, &s, err, sizeof err);
    ck_assert_msg(rc == PS_EFORMAT, "%s: rc %d", json, rc);
    ck_assert_msg(strstr(err, want), "want \"%s\" in \"%s\"", want, err);
}

START_TEST(spec_keys) {
    char p[4096], err[1024];
    put("m.inter", "user\titem\trating\tts\n1\t2\t3.5\t9\n4\t5\t1\t9\n", p);
    put("h.csv", "label,n1,c1\n1,0.5,ab\n0,1,\n", p);
    ps_data_spec s;
    int rc = resolve("{\"format\": \"csv\", \"path\": \"m.inter\", \"delimiter\": \"\\t\", "
                     "\"id_columns\": [\"user\", \"item\"], \"columns\": [], \"label\": \"rating\", "
                     "\"label_type\": \"float\", \"validation\": \"m.inter\"}",
                     &s, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    ck_assert_int_eq(s.format, PS_DATA_CSV);
    ck_assert_uint_eq(s.opts.n_id_columns, 2);
    ck_assert(s.opts.float_label && !s.opts.hash_ids && s.opts.delimiter == '\t');
    ck_assert_ptr_nonnull(s.opts.columns);
    ck_assert_uint_eq(s.opts.n_columns, 0);
    /* a validation path is read the same way */
    ck_assert_uint_eq(s.validation->opts.n_id_columns, 2);
    ck_assert(s.validation->opts.float_label && s.validation->opts.delimiter == '\t');
    ck_assert_ptr_nonnull(s.validation->opts.columns);
    ps_source *src;
    ck_assert_msg(ps_data_spec_open(&s, &src, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(src->n, 2);
    ck_assert_uint_eq(src->n_ids, 2);
    ck_assert_uint_eq(src->c, 0);
    ck_assert(src->float_target && src->target_min == 1.0 && src->target_max == 3.5);
    ps_source_close(src);
    ck_assert_msg(ps_data_spec_open(s.validation, &src, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(src->n_ids, 2);
    ps_source_close(src);
    ps_data_spec_free(&s);
    rc = resolve("{\"path\": \"h.csv\", \"id_columns\": [\"c1\"], \"hash_ids\": true, "
                 "\"label_type\": \"class\"}",
                 &s, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    ck_assert(s.opts.hash_ids && !s.opts.float_label);
    ck_assert_msg(ps_data_spec_open(&s, &src, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(src->c, 1);
    ck_assert_int_eq(src->num_classes, 2);
    ps_source_close(src);
    ps_data_spec_free(&s);

    spec_fails("{\"path\": \"h.csv\", \"hash_ids\": true}", "\"hash_ids\" must be given with");
    spec_fails("{\"path\": \"h.csv\", \"hash_ids\": 1, \"id_columns\": [\"c1\"]}",
               "\"hash_ids\" must be true or false");
    spec_fails("{\"path\": \"h.csv\", \"id_columns\": []}", "\"id_columns\" must be a list");
    spec_fails("{\"path\": \"h.csv\", \"id_columns\": [\"c1\", 2]}", "\"id_columns\" must be");
    spec_fails("{\"path\": \"h.csv\", \"id_columns\": [\"c1\", \"c1\"]}",
               "\"id_columns\" names \"c1\" twice");
    spec_fails("{\"path\": \"h.csv\", \"label_type\": \"real\"}",
               "\"label_type\" must be \"class\" or \"float\"");
    spec_fails("{\"path\": \"h.csv\", \"delimiter\": \";\"}", "\"delimiter\" must be");
    spec_fails("{\"path\": \"h.csv\", \"columns\": []}", "empty only with \"id_columns\"");
    spec_fails("{\"format\": \"npy\", \"x\": \"x.npy\", \"y\": \"y.npy\", \"id_columns\": [\"a\"]}",
               "\"id_columns\" is for CSV / TSV tables, not npy data");
    spec_fails("{\"path\": \"m.inter\"}", "not a format the name or the first bytes tell");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("tabular");
    TCase *tc = tcase_create("tabular");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, decimal_ids);
    tcase_add_test(tc, hashed_ids);
    tcase_add_test(tc, csv_ids_and_float_label);
    tcase_add_test(tc, csv_errors);
    tcase_add_test(tc, spec_keys);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
