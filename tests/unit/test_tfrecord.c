/* TFRecord framing and tf.train.Example: a file TensorFlow wrote (the fixture
 * and its generator in tests/fixtures/tfrecord/) read back exactly; the
 * project's writer read back; and every damaged or hostile framing (a flipped
 * byte in either checksum's range, truncation anywhere, a length of 2^63 with
 * a valid checksum, a length past the end of the file) refused with a message
 * naming the file, the record and its offset, without allocating for it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "example.h"
#include "ps_error.h"
#include "testutil.h"
#include "tfrecord.h"

static char *tmpdir;
static char path[4096];

static void tmp_setup(void) {
    tmpdir = ps_test_mkdtemp();
    snprintf(path, sizeof path, "%s/r.tfrecord", tmpdir);
}

static void tmp_teardown(void) {
    unlink(path);
    rmdir(tmpdir);
    free(tmpdir);
}

/* Writes the given records with the project's writer. */
static void write_records(const char *const *recs, const size_t *lens, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(ps_tfrecord_write(f, recs[i], lens[i]), PS_OK);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_bytes(const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static long file_bytes(uint8_t *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

/* Reads every record of path; the first error's code and message. */
static int read_all(size_t max_len, size_t *count, char *err, size_t errlen) {
    ps_tfrecord_reader r;
    int rc = ps_tfrecord_open(&r, path, max_len, err, errlen);
    if (rc != PS_OK) return rc;
    const uint8_t *d;
    size_t len;
    *count = 0;
    while ((rc = ps_tfrecord_next(&r, &d, &len, err, errlen)) == PS_OK)
        (*count)++;
    ps_tfrecord_close(&r);
    return rc == PS_ENOENT ? PS_OK : rc;
}

START_TEST(mask_matches_tensorflow) {
    /* the first record of the fixture: its length (0x3a) and TensorFlow's stored masked CRC */
    uint8_t len[8] = {0x3a, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_uint_eq(ps_tfrecord_mask(ps_crc32c(len, 8)), 0xe2ea9512u);
}
END_TEST

START_TEST(reads_tensorflow_file) {
    char fx[4096], err[256];
    snprintf(fx, sizeof fx, "%s/tests/fixtures/tfrecord/tf_written.tfrecord", getenv("PS_SOURCE_ROOT"));
    ps_tfrecord_reader r;
    ck_assert_int_eq(ps_tfrecord_open(&r, fx, 0, err, sizeof err), PS_OK);
    for (int i = 0; i < 3; i++) {
        const uint8_t *d;
        size_t len;
        ck_assert_msg(ps_tfrecord_next(&r, &d, &len, err, sizeof err) == PS_OK, "%s", err);
        ps_example *e;
        ck_assert_msg(ps_example_parse(d, len, &e, err, sizeof err) == PS_OK, "%s", err);
        ps_feature img = ps_example_feature(e, "image");
        ck_assert_int_eq(img.kind, PS_FEATURE_BYTES);
        ck_assert_uint_eq(img.n, 1);
        const uint8_t *b;
        size_t blen;
        ps_feature_bytes(&img, 0, &b, &blen);
        ck_assert_uint_eq(blen, (size_t)i + 1);
        for (int k = 0; k <= i; k++)
            ck_assert_uint_eq(b[k], (unsigned)(10 * i + k));
        ps_feature lab = ps_example_feature(e, "label");
        ck_assert_int_eq(lab.kind, PS_FEATURE_INT64);
        ck_assert_uint_eq(lab.n, 2);
        ck_assert_int_eq(lab.int64s[0], i);
        ck_assert_int_eq(lab.int64s[1], -(int64_t)i * 1000000000000);
        ps_feature x = ps_example_feature(e, "x");
        ck_assert_int_eq(x.kind, PS_FEATURE_FLOAT);
        ck_assert_uint_eq(x.n, 3);
        ck_assert_float_eq(x.floats[0], (float)i + 0.5f);
        ck_assert_float_eq(x.floats[1], (float)-i);
        ck_assert_float_eq(x.floats[2], (float)(1e-3 * i));
        ps_feature empty = ps_example_feature(e, "empty");
        ck_assert_int_eq(empty.kind, i == 2 ? PS_FEATURE_FLOAT : PS_FEATURE_NONE);
        ck_assert_uint_eq(empty.n, 0);
        ck_assert_int_eq(ps_example_feature(e, "missing").kind, PS_FEATURE_NONE);
        ps_example_free(e);
    }
    const uint8_t *d;
    size_t len;
    ck_assert_int_eq(ps_tfrecord_next(&r, &d, &len, err, sizeof err), PS_ENOENT);
    ps_tfrecord_close(&r);
}
END_TEST

START_TEST(writer_round_trip) {
    static char big[70000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7);
    const char *recs[] = {"", "a", big, "tail"};
    size_t lens[] = {0, 1, sizeof big, 4};
    write_records(recs, lens, 4);
    ps_tfrecord_reader r;
    char err[256];
    ck_assert_int_eq(ps_tfrecord_open(&r, path, 0, err, sizeof err), PS_OK);
    for (int i = 0; i < 4; i++) {
        const uint8_t *d;
        size_t len;
        ck_assert_msg(ps_tfrecord_next(&r, &d, &len, err, sizeof err) == PS_OK, "%s", err);
        ck_assert_uint_eq(len, lens[i]);
        ck_assert(memcmp(d, recs[i], len) == 0);
    }
    const uint8_t *d;
    size_t len;
    ck_assert_int_eq(ps_tfrecord_next(&r, &d, &len, err, sizeof err), PS_ENOENT);
    ps_tfrecord_close(&r);
}
END_TEST

/* Two records of 10 bytes; byte `at` of the file flipped: the error names
 * record `rec` and the check that caught it. */
static void flipped(size_t at, int rec, const char *want) {
    const char *recs[] = {"0123456789", "abcdefghij"};
    size_t lens[] = {10, 10};
    write_records(recs, lens, 2);
    uint8_t b[64];
    long n = file_bytes(b, sizeof b);
    ck_assert_int_eq(n, 52);
    b[at] ^= 0x04;
    write_bytes(b, (size_t)n);
    size_t count;
    char err[256] = "";
    ck_assert_int_eq(read_all(0, &count, err, sizeof err), PS_EFORMAT);
    ck_assert_uint_eq(count, (size_t)rec);
    char rec_at[64];
    snprintf(rec_at, sizeof rec_at, "record %d at byte %d", rec, rec * 26);
    ck_assert_msg(strstr(err, path) && strstr(err, rec_at) && strstr(err, want), "%s", err);
}

START_TEST(flipped_bytes) {
    flipped(0, 0, "length's checksum");  /* the length */
    flipped(9, 0, "length's checksum");  /* its CRC */
    flipped(15, 0, "data's checksum");   /* the data */
    flipped(23, 0, "data's checksum");   /* its CRC */
    flipped(26 + 3, 1, "length's checksum");
    flipped(26 + 12, 1, "data's checksum");
}
END_TEST

START_TEST(truncated_anywhere) {
    const char *recs[] = {"0123456789", "abcdefghij"};
    size_t lens[] = {10, 10};
    write_records(recs, lens, 2);
    uint8_t whole[64];
    long n = file_bytes(whole, sizeof whole);
    for (long cut = 1; cut < n; cut++) {
        if (cut == 26) continue; /* a whole first record: a valid file */
        write_bytes(whole, (size_t)cut);
        size_t count;
        char err[256] = "";
        ck_assert_int_eq(read_all(0, &count, err, sizeof err), PS_EFORMAT);
        ck_assert_uint_eq(count, cut < 26 ? 0 : 1);
        ck_assert_msg(strstr(err, "truncated") || strstr(err, "past the end"), "cut %ld: %s", cut,
                      err);
    }
}
END_TEST

/* A header declaring `len` bytes, with a valid length checksum, and then
 * `have` bytes of data. */
static void header_only(uint64_t len, size_t have) {
    uint8_t b[12 + 64] = {0};
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(len >> (8 * i));
    uint32_t m = ps_tfrecord_mask(ps_crc32c(b, 8));
    for (int i = 0; i < 4; i++)
        b[8 + i] = (uint8_t)(m >> (8 * i));
    write_bytes(b, 12 + have);
}

START_TEST(hostile_lengths) {
    size_t count;
    char err[256] = "";
    header_only((uint64_t)1 << 63, 64);
    ck_assert_int_eq(read_all(0, &count, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "length 9223372036854775808 over the limit"), "%s", err);
    header_only(UINT64_MAX, 0);
    ck_assert_int_eq(read_all(0, &count, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "over the limit"), "%s", err);
    header_only(1000, 64); /* under the limit, past the end */
    ck_assert_int_eq(read_all(0, &count, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "length 1000 runs past the end of the file (76 bytes)"), "%s", err);
    header_only(62, 64); /* 62 bytes there but no room for the data's CRC */
    ck_assert_int_eq(read_all(0, &count, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "past the end"), "%s", err);
    header_only(40, 64); /* a limit of the reader's own */
    ck_assert_int_eq(read_all(32, &count, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "length 40 over the limit of 32"), "%s", err);
}
END_TEST

START_TEST(not_a_file) {
    ps_tfrecord_reader r;
    char err[256];
    ck_assert_int_eq(ps_tfrecord_open(&r, tmpdir, 0, err, sizeof err), PS_EIO);
    ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
    unlink(path);
    ck_assert_int_eq(ps_tfrecord_open(&r, path, 0, err, sizeof err), PS_EIO); /* absent */
    ck_assert_msg(strstr(err, path) && strstr(err, "No such file"), "%s", err);
    write_bytes("", 0); /* empty: no records */
    size_t count = 7;
    ck_assert_int_eq(read_all(0, &count, err, sizeof err), PS_OK);
    ck_assert_uint_eq(count, 0);
}
END_TEST

START_TEST(example_round_trip) {
    ps_example_builder *b = ps_example_builder_new();
    ck_assert_ptr_nonnull(b);
    const float xs[] = {1.5f, -2.0f, 3.25f};
    const int64_t ys[] = {7, -1, INT64_MAX};
    ck_assert_int_eq(ps_example_add_bytes(b, "image", "\x00\x01\xff", 3), PS_OK);
    ck_assert_int_eq(ps_example_add_floats(b, "x", xs, 3), PS_OK);
    ck_assert_int_eq(ps_example_add_int64s(b, "label", ys, 3), PS_OK);
    ck_assert_int_eq(ps_example_add_floats(b, "x", xs, 1), PS_EINVAL); /* a key once */
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(ps_example_serialize(b, &buf, &len), PS_OK);
    ps_example_builder_free(b);
    ps_example *e;
    char err[256];
    ck_assert_int_eq(ps_example_parse(buf, len, &e, err, sizeof err), PS_OK);
    ps_feature f = ps_example_feature(e, "image");
    const uint8_t *d;
    size_t dl;
    ck_assert_int_eq(f.kind, PS_FEATURE_BYTES);
    ps_feature_bytes(&f, 0, &d, &dl);
    ck_assert_uint_eq(dl, 3);
    ck_assert(memcmp(d, "\x00\x01\xff", 3) == 0);
    f = ps_example_feature(e, "x");
    ck_assert_int_eq(f.kind, PS_FEATURE_FLOAT);
    ck_assert(f.n == 3 && memcmp(f.floats, xs, sizeof xs) == 0);
    f = ps_example_feature(e, "label");
    ck_assert_int_eq(f.kind, PS_FEATURE_INT64);
    ck_assert(f.n == 3 && memcmp(f.int64s, ys, sizeof ys) == 0);
    ps_example_free(e);

    /* two serialised Examples back to back merge: the same key twice is refused */
    uint8_t *two = malloc(2 * len);
    memcpy(two, buf, len);
    memcpy(two + len, buf, len);
    ck_assert_int_eq(ps_example_parse(two, 2 * len, &e, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "\"image\" is given twice"), "%s", err);
    /* garbage and a truncated message */
    ck_assert_int_eq(ps_example_parse((const uint8_t *)"\xff\xff\xff", 3, &e, err, sizeof err),
                     PS_EFORMAT);
    ck_assert_msg(strstr(err, "not a tf.train.Example"), "%s", err);
    ck_assert_int_eq(ps_example_parse(buf, len - 1, &e, err, sizeof err), PS_EFORMAT);
    free(two);
    free(buf);
}
END_TEST

static Suite *tfrecord_suite(void) {
    Suite *s = suite_create("tfrecord");
    TCase *tc = tcase_create("framing");
    tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, mask_matches_tensorflow);
    tcase_add_test(tc, reads_tensorflow_file);
    tcase_add_test(tc, writer_round_trip);
    tcase_add_test(tc, flipped_bytes);
    tcase_add_test(tc, truncated_anywhere);
    tcase_add_test(tc, hostile_lengths);
    tcase_add_test(tc, not_a_file);
    suite_add_tcase(s, tc);
    tc = tcase_create("example");
    tcase_add_test(tc, example_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(tfrecord_suite());
}
