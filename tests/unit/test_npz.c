/* .npz reading: archives NumPy wrote (tests/fixtures/npy/, make_npz.py beside
 * them) read back to the values it was given, the ZIP64 form included; a
 * compressed archive refused with a message that says what to do; hostile
 * archives (truncated, a central directory or a member past the end, lying
 * counts, names, methods and ZIP64 records) refused with a reason; truncation
 * at every length and every byte overwritten never read out of bounds. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npz.h"
#include "ps_error.h"
#include "testutil.h"

static const char *fixture(const char *name) {
    static char p[4096];
    snprintf(p, sizeof p, "%s/tests/fixtures/npy/%s", getenv("PS_SOURCE_ROOT"), name);
    return p;
}

/* A fixture's bytes in a buffer of exactly its size (so ASan sees overreads). */
static uint8_t *load(const char *name, size_t *len) {
    char *text = ps_test_slurp(fixture(name), len);
    ck_assert_msg(text != NULL, "%s", fixture(name));
    uint8_t *b = malloc(*len);
    memcpy(b, text, *len);
    free(text);
    return b;
}

/* The offset of the last occurrence of the 4-byte signature sig. */
static size_t last_sig(const uint8_t *b, size_t len, const char *sig) {
    for (size_t i = len - 4;; i--) {
        if (memcmp(b + i, sig, 4) == 0) return i;
        ck_assert_uint_gt(i, 0);
    }
}

static void put16(uint8_t *p, unsigned v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static const double y_values[5] = {-3, 0, 7, 1099511627776.0, -8589934592.0};

static void check_xy(const ps_npz *z) {
    ck_assert_uint_eq(z->n, 2);
    ck_assert_str_eq(z->members[0].name, "x");
    ck_assert_str_eq(z->members[1].name, "y");
    const ps_npy *x = ps_npz_get(z, "x"), *y = ps_npz_get(z, "y");
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert(x->dtype == PS_NPY_U1 && x->ndim == 3 && x->count == 80);
    ck_assert(x->shape[0] == 5 && x->shape[1] == 4 && x->shape[2] == 4);
    for (size_t i = 0; i < 80; i++)
        ck_assert_double_eq(ps_npy_get(x, i), (double)(3 * i));
    ck_assert(y->dtype == PS_NPY_I8 && y->ndim == 1 && y->shape[0] == 5);
    for (size_t i = 0; i < 5; i++)
        ck_assert_double_eq(ps_npy_get(y, i), y_values[i]);
    ck_assert_ptr_null(x->map); /* views: only the archive's mapping is unmapped */
    ck_assert_ptr_null(y->map);
    ck_assert_ptr_null(ps_npz_get(z, "z"));
    ck_assert_ptr_null(ps_npz_get(z, "x.npy"));
    ck_assert_ptr_null(ps_npz_get(z, ""));
}

START_TEST(numpy_written) {
    const char *files[] = {"xy.npz", "xy_zip64.npz"};
    for (int f = 0; f < 2; f++) {
        ps_npz z;
        char err[512] = "";
        int rc = ps_npz_open(fixture(files[f]), &z, err, sizeof err);
        ck_assert_msg(rc == PS_OK, "%s: %s", files[f], err);
        ck_assert_ptr_nonnull(z.map);
        check_xy(&z);
        /* the views point into the one mapping */
        const uint8_t *lo = z.map, *hi = lo + z.map_len;
        ck_assert(z.members[1].arr.data > lo && z.members[1].arr.data + 40 <= hi);
        ps_npz_close(&z);
        ck_assert_ptr_null(z.members);
        ck_assert_ptr_null(z.map);
    }
}
END_TEST

START_TEST(parsed_in_memory) {
    size_t len;
    uint8_t *b = load("xy.npz", &len);
    ps_npz z;
    char err[512] = "";
    ck_assert_int_eq(ps_npz_parse(b, len, &z, err, sizeof err), PS_OK);
    ck_assert_ptr_null(z.map);
    check_xy(&z);
    ck_assert(z.members[0].arr.data > b && z.members[0].arr.data < b + len); /* no copy */
    ps_npz_close(&z);
    free(b);

    /* an empty archive (np.savez with no arrays): just an end record */
    uint8_t empty[22] = {'P', 'K', 5, 6};
    ck_assert_int_eq(ps_npz_parse(empty, sizeof empty, &z, err, sizeof err), PS_OK);
    ck_assert_uint_eq(z.n, 0);
    ck_assert_ptr_null(ps_npz_get(&z, "x"));
    ps_npz_close(&z);
    ps_npz_close(&z); /* safe on a zeroed one */
}
END_TEST

static void open_fails(const char *name, int want_rc, const char *want1, const char *want2) {
    ps_npz z;
    char err[512] = "";
    ck_assert_int_eq(ps_npz_open(fixture(name), &z, err, sizeof err), want_rc);
    ck_assert_ptr_null(z.members);
    ck_assert_ptr_null(z.map);
    ck_assert_msg(strstr(err, name), "want the file name in \"%s\"", err);
    ck_assert_msg(strstr(err, want1), "%s: want \"%s\" in \"%s\"", name, want1, err);
    ck_assert_msg(!want2 || strstr(err, want2), "%s: want \"%s\" in \"%s\"", name, want2, err);
}

START_TEST(compressed_refused) {
    open_fails("xy_compressed.npz", PS_EFORMAT,
               "member 'x.npy' is compressed (deflate): a compressed archive "
               "(np.savez_compressed) cannot be memory-mapped",
               "save it with np.savez");
}
END_TEST

START_TEST(hostile_files) {
    open_fails("truncated.npz", PS_EFORMAT, "no zip end of central directory", NULL);
    open_fails("cd_past_end.npz", PS_EFORMAT, "central directory", "runs past the end");
    open_fails("member_past_end.npz", PS_EFORMAT, "member 'x.npy'", "run past the end");
    open_fails("absent.npz", PS_EIO, "No such file", NULL);
    open_fails("f4_2x3.npy", PS_EFORMAT, "no zip end of central directory", NULL);
}
END_TEST

static void parse_fails(const uint8_t *b, size_t len, const char *what, const char *want) {
    ps_npz z;
    char err[512] = "";
    ck_assert_msg(ps_npz_parse(b, len, &z, err, sizeof err) == PS_EFORMAT, "%s: parsed", what);
    ck_assert_ptr_null(z.members);
    ck_assert_msg(strstr(err, want), "%s: want \"%s\" in \"%s\"", what, want, err);
}

/* xy.npz with one change: its central directory's entries and end record. */
START_TEST(lying_directory) {
    size_t len;
    uint8_t *orig = load("xy.npz", &len), *b = malloc(len);
    size_t eocd = last_sig(orig, len, "PK\5\6");
    size_t cd = orig[eocd + 16] | (size_t)orig[eocd + 17] << 8; /* a small archive */
    size_t cd_y = last_sig(orig, len, "PK\1\2");                /* y.npy's entry */
    ck_assert_uint_gt(cd_y, cd);

#define FRESH() memcpy(b, orig, len)
    FRESH(), put16(b + eocd + 8, 4000), put16(b + eocd + 10, 4000);
    parse_fails(b, len, "count", "cannot hold the 4000 members");
    FRESH(), put16(b + eocd + 10, 1);
    parse_fails(b, len, "disk count", "split");
    FRESH(), b[cd_y + 3] = 9;
    parse_fails(b, len, "signature", "entry 2 of 2 is truncated or has no signature");
    FRESH(), put16(b + cd + 8, 1);
    parse_fails(b, len, "flags", "member 'x.npy' is encrypted");
    FRESH(), put16(b + cd + 10, 12);
    parse_fails(b, len, "method", "member 'x.npy' uses compression method 12");
    FRESH(), put32(b + cd + 20, 10);
    parse_fails(b, len, "sizes", "says 10 bytes stored but 208 uncompressed");
    FRESH(), memcpy(b + cd + 46, "x.npz", 5);
    parse_fails(b, len, "name", "member 'x.npz' is not named <name>.npy");
    FRESH(), memcpy(b + cd_y + 46, "x.npy", 5);
    parse_fails(b, len, "twice", "member 'x.npy' appears twice");
    FRESH(), put32(b + cd_y + 42, (uint32_t)len - 10);
    parse_fails(b, len, "offset", "member 'y.npy': no local header");
    FRESH(), put32(b + cd_y + 42, 0xfffffff0);
    parse_fails(b, len, "offset", "member 'y.npy': no local header");
    FRESH(), put16(b + cd_y + 30, 0xffff);
    parse_fails(b, len, "extra length", "entry 2 of 2 runs past the directory");
    FRESH(), put32(b + cd + 20, 0xffffffff), put32(b + cd + 24, 0xffffffff);
    parse_fails(b, len, "ZIP64 sizes without the extra", "run past the end");
    /* a member whose local header's extra field runs past the end */
    FRESH(), put16(b + 28, 0xffff);
    parse_fails(b, len, "local extra", "member 'x.npy': its 208 bytes");
    /* a member that is not a valid .npy image */
    FRESH(), memcpy(b + 30 + 5 + 20, "\x93NUMPX", 6); /* x.npy's magic */
    parse_fails(b, len, "npy", "member 'x.npy': not a .npy file");
#undef FRESH
    free(b);
    free(orig);
}
END_TEST

/* xy_zip64.npz with one change in its ZIP64 records or extra fields. */
START_TEST(lying_zip64) {
    size_t len;
    uint8_t *orig = load("xy_zip64.npz", &len), *b = malloc(len);
    size_t rec = last_sig(orig, len, "PK\6\6"), loc = last_sig(orig, len, "PK\6\7");
    size_t cd_x = last_sig(orig, rec, "PK\1\2");
    cd_x = last_sig(orig, cd_x, "PK\1\2"); /* the first entry, x.npy's */
    ck_assert_uint_eq(loc, rec + 56);

#define FRESH() memcpy(b, orig, len)
    FRESH(), put64(b + rec + 24, 70000), put64(b + rec + 32, 70000);
    parse_fails(b, len, "count", "declares 70000 members, over the limit of 65536");
    FRESH(), put64(b + rec + 24, 1000), put64(b + rec + 32, 1000);
    parse_fails(b, len, "count", "cannot hold the 1000 members");
    FRESH(), put64(b + rec + 40, (uint64_t)1 << 62);
    parse_fails(b, len, "size", "runs past the end");
    FRESH(), put64(b + rec + 48, UINT64_MAX - 10);
    parse_fails(b, len, "offset", "runs past the end");
    FRESH(), put64(b + loc + 8, len);
    parse_fails(b, len, "locator", "does not fit before its locator");
    FRESH(), put64(b + loc + 8, UINT64_MAX);
    parse_fails(b, len, "locator", "does not fit before its locator");
    FRESH(), put64(b + loc + 8, rec - 1);
    parse_fails(b, len, "locator", "no ZIP64 end of central directory record at offset");
    FRESH(), put32(b + loc + 16, 2);
    parse_fails(b, len, "disks", "split");
    /* x's extra field: id 1, 24 bytes: usize, csize, offset */
    size_t xf = cd_x + 46 + 5;
    ck_assert_uint_eq(orig[xf], 1);
    FRESH(), put16(b + xf + 2, 16); /* the offset left out */
    parse_fails(b, len, "short extra", "member 'x.npy': malformed extra field");
    FRESH(), put16(b + xf + 2, 200);
    parse_fails(b, len, "long extra", "member 'x.npy': malformed extra field");
    FRESH(), put64(b + xf + 20, len - 20);
    parse_fails(b, len, "offset", "member 'x.npy': no local header");
    FRESH(), put64(b + xf + 4, UINT64_MAX), put64(b + xf + 12, UINT64_MAX);
    parse_fails(b, len, "sizes", "run past the end");
    FRESH(), put16(b + xf, 0x5455); /* another extra field: no ZIP64 values */
    parse_fails(b, len, "no ZIP64 field", "no local header at offset 4294967295");
#undef FRESH
    free(b);
    free(orig);
}
END_TEST

START_TEST(truncated_anywhere) {
    const char *files[] = {"xy.npz", "xy_zip64.npz"};
    for (int f = 0; f < 2; f++) {
        size_t len;
        uint8_t *b = load(files[f], &len);
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *c = malloc(cut ? cut : 1); /* exactly cut bytes, for ASan */
            memcpy(c, b, cut);
            ps_npz z;
            char err[512] = "";
            ck_assert_msg(ps_npz_parse(c, cut, &z, err, sizeof err) == PS_EFORMAT, "%s cut at %zu",
                          files[f], cut);
            free(c);
        }
        free(b);
    }
}
END_TEST

/* Every byte overwritten with each of a few values: parsed or refused, and
 * what parses reads inside the buffer (ASan checks the suite). */
START_TEST(every_byte_overwritten) {
    const char *files[] = {"xy.npz", "xy_zip64.npz"};
    const uint8_t values[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    size_t parsed = 0, refused = 0;
    for (int f = 0; f < 2; f++) {
        size_t len;
        uint8_t *b = load(files[f], &len);
        for (size_t i = 0; i < len; i++)
            for (size_t v = 0; v < sizeof values; v++) {
                uint8_t keep = b[i];
                b[i] = values[v];
                ps_npz z;
                char err[512] = "";
                int rc = ps_npz_parse(b, len, &z, err, sizeof err);
                ck_assert_msg(rc == PS_OK || rc == PS_EFORMAT, "%s[%zu] = %u: %d", files[f], i,
                              values[v], rc);
                if (rc == PS_OK) {
                    for (size_t m = 0; m < z.n; m++)
                        for (size_t k = 0; k < z.members[m].arr.count; k++)
                            (void)ps_npy_get(&z.members[m].arr, k);
                    parsed++;
                } else {
                    ck_assert_msg(err[0] != '\0', "%s[%zu]: no reason", files[f], i);
                    refused++;
                }
                ps_npz_close(&z);
                b[i] = keep;
            }
        free(b);
    }
    ck_assert_uint_gt(parsed, 0); /* data bytes and timestamps change nothing */
    ck_assert_uint_gt(refused, 0);
}
END_TEST

static Suite *npz_suite(void) {
    Suite *s = suite_create("npz");
    TCase *tc = tcase_create("npz");
    tcase_add_test(tc, numpy_written);
    tcase_add_test(tc, parsed_in_memory);
    tcase_add_test(tc, compressed_refused);
    tcase_add_test(tc, hostile_files);
    tcase_add_test(tc, lying_directory);
    tcase_add_test(tc, lying_zip64);
    tcase_add_test(tc, truncated_anywhere);
    tcase_add_test(tc, every_byte_overwritten);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(npz_suite());
}
