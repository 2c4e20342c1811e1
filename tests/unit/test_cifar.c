/* CIFAR-10 binary reader tests: files written here in the real format (3073-byte
 * records, planar RGB) checked for exact NHWC values, batch order, max_n, gzip,
 * and each malformed or incomplete layout giving a clear error. */
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "cifar.h"
#include "ps_error.h"
#include "testutil.h"

static char *tmpdir; /* one per test case, made and removed in the parent process */

static void tmp_setup(void) {
    tmpdir = ps_test_mkdtemp();
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void tmp_teardown(void) {
    if (tmpdir) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* tests make subdirs */
    free(tmpdir);
    tmpdir = NULL;
}

/* Makes a fresh directory tmpdir/name (each test gets its own); returns it malloc'd. */
static char *test_dir(const char *name) {
    ck_assert_ptr_nonnull(tmpdir);
    size_t n = strlen(tmpdir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", tmpdir, name);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    return p;
}

/* The byte of record r (global sample number), channel c, pixel p = row*32 + col:
 * distinct enough across r, c and p that a layout mix-up shows. */
static uint8_t pattern(size_t r, size_t c, size_t p) {
    return (uint8_t)(r * 31 + c * 85 + p * 7 + p / 32);
}

static int32_t label_of(size_t r) {
    return (int32_t)((r * 3 + 1) % 10);
}

/* Builds n records for samples first..first+n-1 in the file format; *len gets the size. */
static uint8_t *make_records(size_t first, size_t n, size_t *len) {
    *len = n * PS_CIFAR_RECORD;
    uint8_t *b = malloc(*len ? *len : 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t *rec = b + i * PS_CIFAR_RECORD;
        rec[0] = (uint8_t)label_of(first + i);
        for (size_t c = 0; c < 3; c++)
            for (size_t p = 0; p < 1024; p++)
                rec[1 + c * 1024 + p] = pattern(first + i, c, p);
    }
    return b;
}

static void write_gz(const char *path, const void *data, size_t n) {
    gzFile f = gzopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (n) ck_assert_int_eq(gzwrite(f, data, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(f), Z_OK);
}

/* Writes dir/name (gzip when the name ends in .gz) holding bytes. */
static void write_named(const char *dir, const char *name, const void *data, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t k = strlen(name);
    if (k > 3 && strcmp(name + k - 3, ".gz") == 0)
        write_gz(path, data, len);
    else
        ck_assert_int_eq(ps_test_write_file(path, data, len), 0);
}

/* Writes dir/name with the records of samples first..first+n-1. */
static void write_batch(const char *dir, const char *name, size_t first, size_t n) {
    size_t len;
    uint8_t *b = make_records(first, n, &len);
    write_named(dir, name, b, len);
    free(b);
}

/* Checks d holds samples first..first+n-1 exactly, channels last. */
static void check_samples(const ps_dataset *d, size_t first, size_t n) {
    ck_assert_uint_eq(d->n, n);
    ck_assert_uint_eq(d->dim, 3072);
    ck_assert_int_eq(d->num_classes, 10);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(d->y[i], label_of(first + i));
        const float *x = d->x + i * 3072;
        for (size_t row = 0; row < 32; row++)
            for (size_t col = 0; col < 32; col++)
                for (size_t c = 0; c < 3; c++) {
                    size_t p = row * 32 + col;
                    float want = (float)pattern(first + i, c, p) / 255.0f;
                    float got = x[(row * 32 + col) * 3 + c];
                    ck_assert_msg(got == want,
                                  "sample %zu (row %zu, col %zu, channel %zu): got %g, want %g",
                                  first + i, row, col, c, (double)got, (double)want);
                }
    }
}

/* ---- parsing a buffer ----------------------------------------------------- */

START_TEST(parse_nhwc_exact) {
    size_t len;
    uint8_t *b = make_records(0, 3, &len);
    ps_dataset d = {0};
    char err[256] = "";
    ck_assert_msg(ps_cifar_parse(b, len, "mem", 0, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 0, 3);
    ps_dataset_free(&d);
    free(b);
}
END_TEST

START_TEST(parse_solid_planes) {
    /* R plane all 255, G plane all 0, B plane all 51: every pixel is (1, 0, 0.2). One
     * off pixel in the blue plane: (row 1, col 2) blue = 255, at NHWC (1*32+2)*3+2. */
    uint8_t rec[PS_CIFAR_RECORD];
    rec[0] = 9;
    memset(rec + 1, 255, 1024);
    memset(rec + 1 + 1024, 0, 1024);
    memset(rec + 1 + 2048, 51, 1024);
    rec[1 + 2048 + 34] = 255;
    ps_dataset d = {0};
    char err[256] = "";
    ck_assert_msg(ps_cifar_parse(rec, sizeof rec, "mem", 0, &d, err, sizeof err) == PS_OK, "%s",
                  err);
    ck_assert_int_eq(d.y[0], 9);
    for (size_t p = 0; p < 1024; p++) {
        ck_assert_float_eq(d.x[p * 3 + 0], 1.0f);
        ck_assert_float_eq(d.x[p * 3 + 1], 0.0f);
        ck_assert_float_eq(d.x[p * 3 + 2], p == 34 ? 1.0f : 51.0f / 255.0f);
    }
    ps_dataset_free(&d);
}
END_TEST

START_TEST(parse_appends_and_max_add) {
    size_t la, lb;
    uint8_t *a = make_records(0, 2, &la), *b = make_records(2, 3, &lb);
    ps_dataset d = {0};
    char err[256] = "";
    ck_assert_int_eq(ps_cifar_parse(a, la, "a", 0, &d, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_cifar_parse(b, lb, "b", 2, &d, err, sizeof err), PS_OK);
    check_samples(&d, 0, 4); /* 2 + the first 2 of b */
    ps_dataset_free(&d);
    /* max_add still checks the records it does not keep */
    b[2 * PS_CIFAR_RECORD] = 200;
    ck_assert_int_eq(ps_cifar_parse(b, lb, "b", 1, &d, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_null(d.x);
    free(a);
    free(b);
}
END_TEST

/* Checks a parse into a fresh dataset fails with PS_EFORMAT naming every needle. */
static void expect_parse_error(const uint8_t *b, size_t len, const char *n1, const char *n2) {
    ps_dataset d = {0};
    char err[256] = "";
    int rc = ps_cifar_parse(b, len, "cifar/data_batch_7.bin", 0, &d, err, sizeof err);
    ck_assert_msg(rc == PS_EFORMAT, "want EFORMAT, got %s (%s)", ps_errname(rc), err);
    ck_assert_msg(strstr(err, "cifar/data_batch_7.bin") != NULL, "no file name: %s", err);
    ck_assert_msg(strstr(err, n1) != NULL, "message '%s' lacks '%s'", err, n1);
    ck_assert_msg(!n2 || strstr(err, n2) != NULL, "message '%s' lacks '%s'", err, n2);
    ck_assert_ptr_null(d.x);
    ck_assert_uint_eq(d.n, 0);
}

START_TEST(parse_truncated_record) {
    size_t len;
    uint8_t *b = make_records(0, 3, &len);
    expect_parse_error(b, len - 1, "truncated", "record 2 has only 3072 bytes");
    expect_parse_error(b, PS_CIFAR_RECORD + 1, "truncated", "record 1 has only 1 bytes");
    expect_parse_error(b, 100, "record 0 has only 100 bytes", NULL);
    free(b);
}
END_TEST

START_TEST(parse_bad_label) {
    size_t len;
    uint8_t *b = make_records(0, 4, &len);
    b[2 * PS_CIFAR_RECORD] = 10;
    expect_parse_error(b, len, "record 2 (byte offset 6146)", "label 10 is not in 0..9");
    b[2 * PS_CIFAR_RECORD] = 255;
    expect_parse_error(b, len, "record 2", "label 255");
    free(b);
}
END_TEST

START_TEST(parse_empty) {
    const uint8_t none[1] = {0};
    expect_parse_error(none, 0, "empty file", NULL);
}
END_TEST

START_TEST(parse_refuses_other_dataset) {
    float x[4] = {0};
    int32_t y[2] = {0};
    ps_dataset other = {.x = x, .y = y, .n = 2, .dim = 2, .num_classes = 2};
    size_t len;
    uint8_t *b = make_records(0, 1, &len);
    char err[256] = "";
    ck_assert_int_eq(ps_cifar_parse(b, len, "mem", 0, &other, err, sizeof err), PS_EINVAL);
    ck_assert_msg(strstr(err, "dim 2") != NULL, "message: %s", err);
    ck_assert_uint_eq(other.n, 2);
    free(b);
}
END_TEST

/* ---- loading a directory -------------------------------------------------- */

static int load(const char *dir, int train, size_t max_n, ps_dataset *d, char *err, size_t errlen) {
    return ps_dataset_load_cifar10_dir(dir, train, max_n, d, err, errlen);
}

START_TEST(load_train_batches_in_order) {
    char *dir = test_dir("order");
    /* a mix of raw and gzip; sizes differ so a wrong order shows */
    write_batch(dir, "data_batch_1.bin", 0, 2);
    write_batch(dir, "data_batch_2.bin.gz", 2, 3);
    write_batch(dir, "data_batch_3.bin", 5, 1);
    ps_dataset d;
    char err[512] = "";
    ck_assert_msg(load(dir, 1, 0, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 0, 6);
    ps_dataset_free(&d);
    free(dir);
}
END_TEST

START_TEST(load_all_five_batches) {
    char *dir = test_dir("five");
    for (int b = 1; b <= 5; b++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        write_batch(dir, name, (size_t)(b - 1) * 2, 2);
    }
    write_batch(dir, "data_batch_6.bin", 100, 1); /* not part of CIFAR-10: ignored */
    ps_dataset d;
    char err[512] = "";
    ck_assert_msg(load(dir, 1, 0, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 0, 10);
    ps_dataset_free(&d);
    free(dir);
}
END_TEST

START_TEST(load_max_n) {
    char *dir = test_dir("maxn");
    write_batch(dir, "data_batch_1.bin", 0, 2);
    write_batch(dir, "data_batch_2.bin", 2, 3);
    ps_dataset d;
    char err[512] = "";
    ck_assert_msg(load(dir, 1, 1, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 0, 1);
    ps_dataset_free(&d);
    ck_assert_msg(load(dir, 1, 4, &d, err, sizeof err) == PS_OK, "%s", err); /* spans files */
    check_samples(&d, 0, 4);
    ps_dataset_free(&d);
    ck_assert_msg(load(dir, 1, 99, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 0, 5);
    ps_dataset_free(&d);
    /* a file past max_n is not read (but must still be there: no gap) */
    write_named(dir, "data_batch_3.bin", "junk", 4);
    ck_assert_msg(load(dir, 1, 2, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 0, 2);
    ps_dataset_free(&d);
    ck_assert_int_eq(load(dir, 1, 0, &d, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "data_batch_3.bin") != NULL, "message: %s", err);
    free(dir);
}
END_TEST

START_TEST(load_test_batch_gz) {
    char *dir = test_dir("test");
    write_batch(dir, "test_batch.bin.gz", 40, 3);
    write_named(dir, "test_batch.bin", "junk", 4); /* the .gz wins, as for IDX */
    write_batch(dir, "data_batch_1.bin", 0, 1);
    ps_dataset d;
    char err[512] = "";
    ck_assert_msg(load(dir, 0, 0, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 40, 3);
    ps_dataset_free(&d);
    ck_assert_msg(load(dir, 0, 2, &d, err, sizeof err) == PS_OK, "%s", err);
    check_samples(&d, 40, 2);
    ps_dataset_free(&d);
    free(dir);
}
END_TEST

/* Checks loading dir fails with want, *d zeroed, and a message holding both needles. */
static void expect_load_error(const char *dir, int train, int want, const char *n1,
                              const char *n2) {
    ps_dataset d;
    char err[1024] = "";
    int rc = load(dir, train, 0, &d, err, sizeof err);
    ck_assert_msg(rc == want, "want %s, got %s (%s)", ps_errname(want), ps_errname(rc), err);
    ck_assert_msg(strstr(err, n1) != NULL, "message '%s' lacks '%s'", err, n1);
    ck_assert_msg(!n2 || strstr(err, n2) != NULL, "message '%s' lacks '%s'", err, n2);
    ck_assert_ptr_null(d.x);
    ck_assert_ptr_null(d.y);
    ck_assert_uint_eq(d.n, 0);
}

START_TEST(load_truncated_record) {
    char *dir = test_dir("trunc");
    write_batch(dir, "data_batch_1.bin", 0, 2);
    size_t len;
    uint8_t *b = make_records(2, 3, &len);
    write_named(dir, "data_batch_2.bin.gz", b, len - 10);
    free(b);
    expect_load_error(dir, 1, PS_EFORMAT, "data_batch_2.bin.gz: truncated",
                      "record 2 has only 3063 bytes");
    free(dir);
}
END_TEST

START_TEST(load_bad_label) {
    char *dir = test_dir("label");
    size_t len;
    uint8_t *b = make_records(0, 3, &len);
    b[PS_CIFAR_RECORD] = 10;
    write_named(dir, "test_batch.bin", b, len);
    free(b);
    expect_load_error(dir, 0, PS_EFORMAT, "test_batch.bin: record 1", "label 10");
    free(dir);
}
END_TEST

START_TEST(load_missing_batch_1) {
    char *dir = test_dir("none");
    expect_load_error(dir, 1, PS_EIO, "no data_batch_1.bin(.gz)", "needs at least data_batch_1");
    expect_load_error(dir, 0, PS_EIO, "no test_batch.bin(.gz)", dir);
    write_batch(dir, "data_batch_2.bin", 0, 1);
    write_batch(dir, "test_batch.bin", 0, 1); /* not a training batch */
    expect_load_error(dir, 1, PS_EIO, "no data_batch_1.bin(.gz)", "data_batch_2.bin exists");
    free(dir);
}
END_TEST

START_TEST(load_gap) {
    char *dir = test_dir("gap");
    write_batch(dir, "data_batch_1.bin", 0, 1);
    write_batch(dir, "data_batch_3.bin.gz", 1, 1);
    expect_load_error(dir, 1, PS_EFORMAT, "data_batch_3.bin.gz",
                      "data_batch_2.bin(.gz) is missing");
    free(dir);
}
END_TEST

START_TEST(load_empty_file) {
    char *dir = test_dir("empty");
    write_batch(dir, "data_batch_1.bin", 0, 1);
    write_named(dir, "data_batch_2.bin", "", 0);
    expect_load_error(dir, 1, PS_EFORMAT, "data_batch_2.bin: empty file", NULL);
    write_named(dir, "test_batch.bin.gz", "", 0); /* a valid gzip of nothing */
    expect_load_error(dir, 0, PS_EFORMAT, "test_batch.bin.gz: empty file", NULL);
    free(dir);
}
END_TEST

START_TEST(detect) {
    char *dir = test_dir("detect");
    ck_assert(!ps_cifar10_dir_detect(dir));
    write_batch(dir, "data_batch_2.bin", 0, 1); /* not enough on its own */
    ck_assert(!ps_cifar10_dir_detect(dir));
    write_batch(dir, "test_batch.bin.gz", 0, 1);
    ck_assert(ps_cifar10_dir_detect(dir));
    free(dir);
    dir = test_dir("detect_train");
    write_batch(dir, "data_batch_1.bin", 0, 1);
    ck_assert(ps_cifar10_dir_detect(dir));
    free(dir);
    dir = test_dir("detect_idx");
    write_named(dir, "train-images-idx3-ubyte.gz", "x", 1);
    ck_assert(!ps_cifar10_dir_detect(dir));
    free(dir);
    ck_assert(!ps_cifar10_dir_detect("/nonexistent/dir"));
}
END_TEST

static Suite *cifar_suite(void) {
    Suite *s = suite_create("cifar");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, parse_nhwc_exact);
    tcase_add_test(tc, parse_solid_planes);
    tcase_add_test(tc, parse_appends_and_max_add);
    tcase_add_test(tc, parse_truncated_record);
    tcase_add_test(tc, parse_bad_label);
    tcase_add_test(tc, parse_empty);
    tcase_add_test(tc, parse_refuses_other_dataset);
    suite_add_tcase(s, tc);

    tc = tcase_create("load_dir");
    tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, load_train_batches_in_order);
    tcase_add_test(tc, load_all_five_batches);
    tcase_add_test(tc, load_max_n);
    tcase_add_test(tc, load_test_batch_gz);
    tcase_add_test(tc, load_truncated_record);
    tcase_add_test(tc, load_bad_label);
    tcase_add_test(tc, load_missing_batch_1);
    tcase_add_test(tc, load_gap);
    tcase_add_test(tc, load_empty_file);
    tcase_add_test(tc, detect);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(cifar_suite());
}
