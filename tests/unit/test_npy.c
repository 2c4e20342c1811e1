/* .npy reading: files NumPy wrote (tests/fixtures/npy/, generator beside them)
 * read back to the values it was given, every dtype converted; the forms that
 * are refused (Fortran order, big-endian, an object array) refused with a
 * reason; and hostile variants of a real file: a header whose shape lies
 * about the data's size, a header length past the end, a shape that
 * overflows, a broken dict, truncation anywhere. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "ps_error.h"
#include "testutil.h"

static const char *fixture(const char *name) {
    static char p[4096];
    snprintf(p, sizeof p, "%s/tests/fixtures/npy/%s", getenv("PS_SOURCE_ROOT"), name);
    return p;
}

static void open_ok(const char *name, ps_npy *a) {
    char err[256] = "";
    int rc = ps_npy_open(fixture(name), a, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", name, err);
}

START_TEST(numpy_written) {
    ps_npy a;
    open_ok("f4_2x3.npy", &a);
    ck_assert(a.dtype == PS_NPY_F4 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3);
    const double f4[] = {0.5, -1.0, 2.25, 3.0, (float)1e-3, -7.5};
    for (size_t i = 0; i < 6; i++)
        ck_assert_double_eq(ps_npy_get(&a, i), f4[i]);
    ck_assert(!ps_npy_is_integer(&a));
    ps_npy_close(&a);

    open_ok("u1_5.npy", &a);
    const double u1[] = {0, 1, 127, 128, 255};
    ck_assert(a.dtype == PS_NPY_U1 && a.count == 5 && ps_npy_is_integer(&a));
    for (size_t i = 0; i < 5; i++)
        ck_assert_double_eq(ps_npy_get(&a, i), u1[i]);
    ps_npy_close(&a);

    open_ok("i8_3.npy", &a);
    ck_assert_double_eq(ps_npy_get(&a, 0), -1);
    ck_assert_double_eq(ps_npy_get(&a, 1), 1099511627776.0);
    ck_assert_double_eq(ps_npy_get(&a, 2), 7);
    ps_npy_close(&a);

    open_ok("f2_3.npy", &a);
    ck_assert_double_eq(ps_npy_get(&a, 0), 1.5);
    ck_assert_double_eq(ps_npy_get(&a, 1), -0.25);
    ck_assert_double_eq(ps_npy_get(&a, 2), 65504);
    ps_npy_close(&a);

    open_ok("b1_3.npy", &a);
    ck_assert(a.dtype == PS_NPY_BOOL && ps_npy_get(&a, 0) == 1 && ps_npy_get(&a, 1) == 0);
    ps_npy_close(&a);

    open_ok("f8_scalar.npy", &a);
    ck_assert(a.ndim == 0 && a.count == 1 && ps_npy_get(&a, 0) == 3.25);
    ps_npy_close(&a);

    open_ok("f4_empty.npy", &a);
    ck_assert(a.ndim == 2 && a.shape[0] == 0 && a.shape[1] == 4 && a.count == 0);
    ps_npy_close(&a);

    open_ok("v2_u1.npy", &a); /* format version 2.0: a 4-byte header length */
    ck_assert(a.count == 6 && a.shape[0] == 2 && ps_npy_get(&a, 5) == 5);
    ps_npy_close(&a);
}
END_TEST

static void open_fails(const char *name, const char *want) {
    ps_npy a;
    char err[256] = "";
    ck_assert_int_eq(ps_npy_open(fixture(name), &a, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_null(a.map);
    ck_assert_msg(strstr(err, name) && strstr(err, want), "want \"%s\" in \"%s\"", want, err);
}

START_TEST(refused_forms) {
    open_fails("fortran.npy", "Fortran order");
    open_fails("big_endian.npy", "big-endian");
    open_fails("object.npy", "pickle");
    ps_npy a;
    char err[256];
    ck_assert_int_eq(ps_npy_open(fixture("absent.npy"), &a, err, sizeof err), PS_EIO);
    ck_assert_msg(strstr(err, "No such file"), "%s", err);
}
END_TEST

/* The bytes of a fixture, and a copy with its header text replaced by `header`
 * (padded with spaces to the same length, as numpy pads). */
static uint8_t *load(const char *name, size_t *len) {
    FILE *f = fopen(fixture(name), "rb");
    ck_assert_ptr_nonnull(f);
    uint8_t *b = malloc(4096);
    *len = fread(b, 1, 4096, f);
    fclose(f);
    return b;
}

static void header_fails(const char *header, const char *want) {
    size_t len;
    uint8_t *b = load("f4_2x3.npy", &len); /* version 1.0: header at 10, 24 data bytes */
    size_t hlen = (size_t)b[8] | (size_t)b[9] << 8;
    ck_assert_uint_le(strlen(header), hlen - 1);
    memset(b + 10, ' ', hlen - 1);
    memcpy(b + 10, header, strlen(header));
    ps_npy a;
    char err[256] = "";
    ck_assert_int_eq(ps_npy_parse(b, len, &a, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, want), "%s: want \"%s\" in \"%s\"", header, want, err);
    free(b);
}

START_TEST(lying_headers) {
    header_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }",
                 "8 elements of 4 bytes, the file holds 24 bytes");
    header_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", "holds 24 bytes");
    header_fails("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", "holds 24");
    header_fails("{'descr': '<f4', 'fortran_order': False, 'shape': "
                 "(4294967296, 4294967296, 4294967296), }",
                 "too large");
    header_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
                 "not a dict");
    header_fails("{'descr': '<f4', 'fortran_order': False}", "lacks 'shape'");
    header_fails("{'descr': '<f4', 'shape': (2, 3), 'shape': (2, 3)}", "repeated key 'shape'");
    header_fails("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3)}", "not a dict");
    header_fails("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}",
                 "structured");
    header_fails("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", "not supported");
    header_fails("['descr', '<f4']", "not a dict");
    header_fails("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}",
                 "unexpected");
}
END_TEST

START_TEST(truncated_anywhere) {
    size_t len;
    uint8_t *b = load("f4_2x3.npy", &len);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *c = malloc(cut ? cut : 1); /* exactly cut bytes, for ASan */
        memcpy(c, b, cut);
        ps_npy a;
        char err[256] = "";
        ck_assert_msg(ps_npy_parse(c, cut, &a, err, sizeof err) == PS_EFORMAT, "cut %zu", cut);
        free(c);
    }
    b[8] = 0xff, b[9] = 0xff; /* a header length past the end */
    ps_npy a;
    char err[256] = "";
    ck_assert_int_eq(ps_npy_parse(b, len, &a, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "runs past the end"), "%s", err);
    b[6] = 4; /* version 4.0 */
    ck_assert_int_eq(ps_npy_parse(b, len, &a, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "version 4.0"), "%s", err);
    ck_assert_int_eq(ps_npy_parse((const uint8_t *)"PK\3\4 not npy", 13, &a, err, sizeof err),
                     PS_EFORMAT);
    ck_assert_msg(strstr(err, "magic"), "%s", err);
    free(b);
}
END_TEST

static Suite *npy_suite(void) {
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("npy");
    tcase_add_test(tc, numpy_written);
    tcase_add_test(tc, refused_forms);
    tcase_add_test(tc, lying_headers);
    tcase_add_test(tc, truncated_anywhere);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(npy_suite());
}
