/* CSV/TSV rows: a table written here read back to its numbers (quotes,
 * CRLF, blank lines, spaces, exponents, a TSV by its name), columns found by
 * name, and every malformed table an error naming the file, line and column:
 * ragged rows both ways, a non-number, an empty field, an unterminated quote,
 * a header without a name or with one twice, an empty file, a line over the
 * limit; a column marked as text is split but not parsed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "csv.h"
#include "ps_error.h"
#include "testutil.h"

static char *tmpdir;
static char path[4096];

static void tmp_setup(void) {
    tmpdir = ps_test_mkdtemp();
}

static void tmp_teardown(void) {
    rmdir(tmpdir);
    free(tmpdir);
}

static void write_file(const char *name, const char *text) {
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(reads_rows) {
    write_file("t.csv", "a,\"b, quoted\",c\r\n1,2.5,-3e2\r\n\r\n \"4\" , 5 ,inf\n7,8,9");
    ps_csv_reader r;
    char err[256];
    ck_assert_msg(ps_csv_open(&r, path, 0, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(r.cols, 3);
    ck_assert_int_eq(ps_csv_column(&r, "b, quoted"), 1);
    ck_assert_int_eq(ps_csv_column(&r, "c"), 2);
    ck_assert_int_eq(ps_csv_column(&r, "d"), -1);
    double v[3];
    ck_assert_msg(ps_csv_next(&r, v, err, sizeof err) == PS_OK, "%s", err);
    ck_assert(v[0] == 1 && v[1] == 2.5 && v[2] == -300);
    ck_assert_msg(ps_csv_next(&r, v, err, sizeof err) == PS_OK, "%s", err);
    ck_assert(v[0] == 4 && v[1] == 5 && v[2] > 1e308);
    ck_assert_msg(ps_csv_next(&r, v, err, sizeof err) == PS_OK, "%s", err); /* no final LF */
    ck_assert(v[0] == 7 && v[1] == 8 && v[2] == 9);
    ck_assert_int_eq(ps_csv_next(&r, v, err, sizeof err), PS_ENOENT);
    ps_csv_close(&r);
    unlink(path);

    write_file("t.tsv", "x\ty\n0.25\t\"1\"\n");
    ck_assert_msg(ps_csv_open(&r, path, 0, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(r.cols, 2);
    ck_assert_msg(ps_csv_next(&r, v, err, sizeof err) == PS_OK, "%s", err);
    ck_assert(v[0] == 0.25 && v[1] == 1);
    ps_csv_close(&r);
    unlink(path);
}
END_TEST

/* The first row error of a table: code and message. */
static void row_fails(const char *text, const char *want) {
    write_file("bad.csv", text);
    ps_csv_reader r;
    char err[256] = "";
    int rc = ps_csv_open(&r, path, 0, err, sizeof err);
    if (rc == PS_OK) {
        double v[8];
        while ((rc = ps_csv_next(&r, v, err, sizeof err)) == PS_OK)
            ;
        ps_csv_close(&r);
    }
    ck_assert_msg(rc == PS_EFORMAT, "%s: rc %d", text, rc);
    ck_assert_msg(strstr(err, path) && strstr(err, want), "want \"%s\" in \"%s\"", want, err);
    unlink(path);
}

START_TEST(malformed) {
    row_fails("a,b\n1,2\n3\n", ":3: 1 fields, the header has 2");
    row_fails("a,b\n1,2,3\n", ":2: more than 2 fields, the header has 2");
    row_fails("a,b\n1,x7\n", ":2: column 2 (b): not a number: \"x7\"");
    row_fails("a,b\n1,2\n1,\n", ":3: column 2 (b): empty field");
    row_fails("a,b\n1,2abc\n", "not a number: \"2abc\"");
    row_fails("a,b\n\"1,2\n", ":2: column 1: unterminated quote");
    row_fails("a,,b\n", ":1: column 2 has no name");
    row_fails("a,b,a\n", "the column name \"a\" is repeated");
    row_fails("", "no header row");
    row_fails("\n\n", "no header row");
}
END_TEST

START_TEST(line_over_limit) {
    snprintf(path, sizeof path, "%s/long.csv", tmpdir);
    FILE *f = fopen(path, "wb");
    fputs("a\n", f);
    for (size_t i = 0; i < PS_CSV_MAX_LINE + 10; i++)
        fputc('1', f);
    fputs("\n", f);
    fclose(f);
    ps_csv_reader r;
    char err[256];
    ck_assert_int_eq(ps_csv_open(&r, path, 0, err, sizeof err), PS_OK);
    double v[1];
    ck_assert_int_eq(ps_csv_next(&r, v, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, ":2: line over the limit"), "%s", err);
    ps_csv_close(&r);
    unlink(path);
    ck_assert_int_eq(ps_csv_open(&r, path, 0, err, sizeof err), PS_EIO);
    ck_assert_msg(strstr(err, "No such file"), "%s", err);
}
END_TEST

START_TEST(text_columns) {
    write_file("t.csv", "a,b,c\n1,x7,\"q, r\"\n2,,3\n");
    ps_csv_reader r;
    char err[256];
    ck_assert_msg(ps_csv_open(&r, path, 0, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_int_eq(ps_csv_keep_text(&r, 1), PS_OK);
    ck_assert_int_eq(ps_csv_keep_text(&r, 2), PS_OK);
    ck_assert_int_eq(ps_csv_keep_text(&r, 3), PS_EINVAL);
    double v[3];
    ck_assert_msg(ps_csv_next(&r, v, err, sizeof err) == PS_OK, "%s", err);
    ck_assert(v[0] == 1 && isnan(v[1]) && isnan(v[2]));
    ck_assert_str_eq(r.fields[1], "x7");
    ck_assert_str_eq(r.fields[2], "q, r");
    ck_assert_msg(ps_csv_next(&r, v, err, sizeof err) == PS_OK, "%s", err); /* empty: text */
    ck_assert(v[0] == 2);
    ck_assert_str_eq(r.fields[1], "");
    ck_assert_str_eq(r.fields[2], "3");
    ps_csv_close(&r);
    unlink(path);
}
END_TEST

static Suite *csv_suite(void) {
    Suite *s = suite_create("csv");
    TCase *tc = tcase_create("csv");
    tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, reads_rows);
    tcase_add_test(tc, malformed);
    tcase_add_test(tc, line_over_limit);
    tcase_add_test(tc, text_columns);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(csv_suite());
}
