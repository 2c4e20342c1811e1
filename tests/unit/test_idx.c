/* IDX/dataset tests: parsing good and malformed files (raw and gzip), loading
 * Fashion-MNIST when installed, and the per-worker batcher's shards and shuffles. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data.h"
#include "ps_error.h"
#include "testutil.h"

static char *tmpdir; /* one per test case, made and removed in the parent process */

static void tmp_setup(void) {
    tmpdir = ps_test_mkdtemp();
}

static void tmp_teardown(void) {
    if (tmpdir) ps_test_rmdir(tmpdir);
    free(tmpdir);
    tmpdir = NULL;
}

/* Returns a malloc'd path tmpdir/name. */
static char *tmp_path(const char *name) {
    ck_assert_ptr_nonnull(tmpdir);
    size_t n = strlen(tmpdir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", tmpdir, name);
    return p;
}

/* Builds an IDX buffer: 00 00 dtype ndim, big-endian dims, then ndata bytes of data.
 * Returns a malloc'd buffer; its length goes to *len. */
static uint8_t *make_idx(uint8_t dtype, int ndim, const uint32_t *dims, const uint8_t *data,
                         size_t ndata, size_t *len) {
    *len = 4 + 4 * (size_t)ndim + ndata;
    uint8_t *b = malloc(*len);
    b[0] = 0;
    b[1] = 0;
    b[2] = dtype;
    b[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        b[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        b[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        b[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        b[7 + 4 * i] = (uint8_t)dims[i];
    }
    if (ndata) memcpy(b + 4 + 4 * ndim, data, ndata);
    return b;
}

static void write_gz(const char *path, const void *data, size_t n) {
    gzFile f = gzopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(gzwrite(f, data, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(f), Z_OK);
}

/* Writes an IDX file (gzip when gz) to tmpdir/name; returns the malloc'd path. */
static char *write_idx(const char *name, int gz, int ndim, const uint32_t *dims,
                       const uint8_t *data, size_t ndata) {
    size_t len;
    uint8_t *b = make_idx(0x08, ndim, dims, data, ndata, &len);
    char *path = tmp_path(name);
    if (gz)
        write_gz(path, b, len);
    else
        ck_assert_int_eq(ps_test_write_file(path, b, len), 0);
    free(b);
    return path;
}

/* Three 2x3 images whose bytes are 0, 15, 30, ..., 240, 255; labels 2, 0, 7. */
#define NIMG 3
#define ROWS 2
#define COLS 3
static uint8_t pixels[NIMG * ROWS * COLS];
static const uint8_t labels[NIMG] = {2, 0, 7};

static void fill_pixels(void) {
    for (int k = 0; k < NIMG * ROWS * COLS; k++)
        pixels[k] = (uint8_t)(k * 15);
    pixels[NIMG * ROWS * COLS - 1] = 255;
}

/* Checks a parse fails with PS_EFORMAT and a message containing `needle`. */
static void expect_parse_error(const uint8_t *b, size_t len, const char *needle) {
    ps_idx idx;
    char err[256] = "";
    int rc = ps_idx_parse(b, len, &idx, err, sizeof err);
    ck_assert_msg(rc == PS_EFORMAT, "want EFORMAT for '%s', got %s", needle, ps_errname(rc));
    ck_assert_msg(err[0] != '\0', "empty message for '%s'", needle);
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
}

START_TEST(parse_good_3d) {
    fill_pixels();
    const uint32_t dims[3] = {NIMG, ROWS, COLS};
    size_t len;
    uint8_t *b = make_idx(0x08, 3, dims, pixels, sizeof pixels, &len);
    ps_idx idx;
    char err[128] = "";
    ck_assert_int_eq(ps_idx_parse(b, len, &idx, err, sizeof err), PS_OK);
    ck_assert_int_eq(idx.dtype, 0x08);
    ck_assert_int_eq(idx.ndim, 3);
    ck_assert_uint_eq(idx.dims[0], NIMG);
    ck_assert_uint_eq(idx.dims[1], ROWS);
    ck_assert_uint_eq(idx.dims[2], COLS);
    ck_assert_uint_eq(idx.count, sizeof pixels);
    ck_assert_ptr_eq(idx.data, b + 16);
    free(b);
}
END_TEST

START_TEST(parse_bad_magic) {
    const uint32_t dims[1] = {2};
    const uint8_t data[2] = {1, 2};
    size_t len;
    uint8_t *b = make_idx(0x08, 1, dims, data, 2, &len);
    b[0] = 0x01;
    expect_parse_error(b, len, "magic");
    b[0] = 0;
    b[1] = 0x20;
    expect_parse_error(b, len, "magic");
    free(b);
}
END_TEST

START_TEST(parse_unsupported_dtype) {
    const uint32_t dims[1] = {2};
    const uint8_t data[8] = {0};
    size_t len;
    uint8_t *b = make_idx(0x0D, 1, dims, data, 8, &len); /* 0x0D = float32 */
    expect_parse_error(b, len, "unsupported IDX type 0x0d");
    free(b);
}
END_TEST

START_TEST(parse_bad_ndim) {
    const uint32_t dims[5] = {1, 1, 1, 1, 1};
    const uint8_t data[1] = {7};
    size_t len;
    uint8_t *b = make_idx(0x08, 0, dims, data, 1, &len);
    expect_parse_error(b, len, "dimension");
    free(b);
    b = make_idx(0x08, 5, dims, data, 1, &len);
    expect_parse_error(b, len, "dimension");
    free(b);
}
END_TEST

START_TEST(parse_truncated_data) {
    fill_pixels();
    const uint32_t dims[3] = {NIMG, ROWS, COLS};
    size_t len;
    uint8_t *b = make_idx(0x08, 3, dims, pixels, sizeof pixels, &len);
    expect_parse_error(b, len - 1, "truncated: expected 34 bytes, got 33");
    expect_parse_error(b, 16, "truncated");
    /* header itself cut inside the dims */
    expect_parse_error(b, 10, "truncated");
    free(b);
}
END_TEST

START_TEST(parse_trailing_bytes) {
    const uint32_t dims[1] = {2};
    const uint8_t data[3] = {1, 2, 3}; /* one byte too many */
    size_t len;
    uint8_t *b = make_idx(0x08, 1, dims, data, 3, &len);
    expect_parse_error(b, len, "trailing");
    free(b);
}
END_TEST

START_TEST(parse_short_header) {
    const uint8_t b[3] = {0, 0, 8};
    expect_parse_error(b, 3, "too short");
    expect_parse_error(b, 0, "too short");
}
END_TEST

START_TEST(parse_dims_overflow) {
    /* 4 dims of 2^32-1: the product does not fit in 64 bits */
    const uint32_t dims[4] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    size_t len;
    uint8_t *b = make_idx(0x08, 4, dims, NULL, 0, &len);
    expect_parse_error(b, len, "overflow");
    free(b);
    /* 3 dims: 2^96 also overflows */
    const uint32_t d3[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    b = make_idx(0x08, 3, d3, NULL, 0, &len);
    expect_parse_error(b, len, "overflow");
    free(b);
}
END_TEST

static void check_good_dataset(const ps_dataset *d) {
    ck_assert_uint_eq(d->n, NIMG);
    ck_assert_uint_eq(d->dim, ROWS * COLS);
    ck_assert_int_eq(d->num_classes, 8);
    for (size_t k = 0; k < sizeof pixels; k++)
        ck_assert_float_eq_tol(d->x[k], (float)pixels[k] / 255.0f, 1e-7f);
    ck_assert_float_eq(d->x[0], 0.0f);
    ck_assert_float_eq(d->x[sizeof pixels - 1], 1.0f);
    for (int i = 0; i < NIMG; i++)
        ck_assert_int_eq(d->y[i], labels[i]);
}

START_TEST(load_good_raw_and_gz) {
    fill_pixels();
    const uint32_t idims[3] = {NIMG, ROWS, COLS}, ldims[1] = {NIMG};
    for (int gz = 0; gz <= 1; gz++) {
        char *ip = write_idx(gz ? "img.gz" : "img", gz, 3, idims, pixels, sizeof pixels);
        char *lp = write_idx(gz ? "lab.gz" : "lab", gz, 1, ldims, labels, NIMG);
        ps_dataset d;
        char err[256] = "";
        int rc = ps_dataset_load_idx(ip, lp, &d, err, sizeof err);
        ck_assert_msg(rc == PS_OK, "gz=%d: %s", gz, err);
        check_good_dataset(&d);
        ps_dataset_free(&d);
        ck_assert_ptr_null(d.x);
        free(ip);
        free(lp);
    }
}
END_TEST

START_TEST(load_2d_images) {
    fill_pixels();
    const uint32_t idims[2] = {NIMG, ROWS * COLS}, ldims[1] = {NIMG};
    char *ip = write_idx("img2d", 0, 2, idims, pixels, sizeof pixels);
    char *lp = write_idx("lab2d.gz", 1, 1, ldims, labels, NIMG);
    ps_dataset d;
    char err[256] = "";
    ck_assert_msg(ps_dataset_load_idx(ip, lp, &d, err, sizeof err) == PS_OK, "%s", err);
    check_good_dataset(&d);
    ps_dataset_free(&d);
    free(ip);
    free(lp);
}
END_TEST

START_TEST(load_multi_member_gz) {
    /* gzip files may hold several members back to back (e.g. `cat a.gz b.gz`) */
    fill_pixels();
    const uint32_t idims[3] = {NIMG, ROWS, COLS};
    size_t len;
    uint8_t *b = make_idx(0x08, 3, idims, pixels, sizeof pixels, &len);
    char *a = tmp_path("part_a.gz"), *c = tmp_path("part_b.gz"), *all = tmp_path("all.gz");
    write_gz(a, b, 10);
    write_gz(c, b + 10, len - 10);
    FILE *out = fopen(all, "wb");
    const char *parts[2] = {a, c};
    for (int i = 0; i < 2; i++) {
        FILE *in = fopen(parts[i], "rb");
        int ch;
        while ((ch = fgetc(in)) != EOF)
            fputc(ch, out);
        fclose(in);
    }
    fclose(out);
    uint8_t *got;
    size_t glen;
    char err[256] = "";
    ck_assert_msg(ps_read_maybe_gz(all, &got, &glen, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(glen, len);
    ck_assert_mem_eq(got, b, len);
    free(got);
    free(b);
    free(a);
    free(c);
    free(all);
}
END_TEST

static void expect_load_error(const char *ip, const char *lp, int want, const char *needle) {
    ps_dataset d;
    char err[512] = "";
    int rc = ps_dataset_load_idx(ip, lp, &d, err, sizeof err);
    ck_assert_msg(rc == want, "want %s, got %s (%s)", ps_errname(want), ps_errname(rc), err);
    ck_assert_msg(err[0] != '\0', "empty message");
    ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
    ck_assert_ptr_null(d.x);
    ck_assert_uint_eq(d.n, 0);
}

START_TEST(load_count_mismatch) {
    fill_pixels();
    const uint32_t idims[3] = {NIMG, ROWS, COLS}, ldims[1] = {NIMG - 1};
    char *ip = write_idx("img", 0, 3, idims, pixels, sizeof pixels);
    char *lp = write_idx("lab", 0, 1, ldims, labels, NIMG - 1);
    expect_load_error(ip, lp, PS_EFORMAT, "labels");
    free(ip);
    free(lp);
}
END_TEST

START_TEST(load_wrong_rank) {
    fill_pixels();
    const uint32_t i1[1] = {sizeof pixels}, l2[2] = {NIMG, 1}, i3[3] = {NIMG, ROWS, COLS},
                   l1[1] = {NIMG};
    char *bad_img = write_idx("img1d", 0, 1, i1, pixels, sizeof pixels);
    char *bad_lab = write_idx("lab2d", 0, 2, l2, labels, NIMG);
    char *img = write_idx("img", 0, 3, i3, pixels, sizeof pixels);
    char *lab = write_idx("lab", 0, 1, l1, labels, NIMG);
    expect_load_error(bad_img, lab, PS_EFORMAT, "images must be");
    expect_load_error(img, bad_lab, PS_EFORMAT, "labels must be");
    free(bad_img);
    free(bad_lab);
    free(img);
    free(lab);
}
END_TEST

START_TEST(load_bad_idx_names_file) {
    fill_pixels();
    const uint32_t idims[3] = {NIMG, ROWS, COLS}, ldims[1] = {NIMG};
    size_t len;
    uint8_t *b = make_idx(0x08, 3, idims, pixels, sizeof pixels, &len);
    char *ip = tmp_path("short.gz");
    write_gz(ip, b, len - 5);
    char *lp = write_idx("lab", 0, 1, ldims, labels, NIMG);
    expect_load_error(ip, lp, PS_EFORMAT, "truncated: expected 34 bytes, got 29");
    expect_load_error(ip, lp, PS_EFORMAT, ip);
    free(b);
    free(ip);
    free(lp);
}
END_TEST

START_TEST(corrupt_gzip) {
    /* a valid 10-byte gzip header, then bytes that are not a deflate stream */
    uint8_t b[64] = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03};
    memset(b + 10, 0xff, sizeof b - 10);
    char *p = tmp_path("corrupt.gz");
    ck_assert_int_eq(ps_test_write_file(p, b, sizeof b), 0);
    uint8_t *got = (uint8_t *)1;
    size_t len = 1;
    char err[256] = "";
    ck_assert_int_eq(ps_read_maybe_gz(p, &got, &len, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "corrupt gzip") != NULL, "message: %s", err);
    ck_assert_ptr_null(got);
    char *lp = tmp_path("nolabels");
    expect_load_error(p, lp, PS_EFORMAT, "corrupt gzip");
    free(p);
    free(lp);
}
END_TEST

START_TEST(truncated_gzip) {
    fill_pixels();
    const uint32_t idims[3] = {NIMG, ROWS, COLS};
    char *p = write_idx("whole.gz", 1, 3, idims, pixels, sizeof pixels);
    FILE *f = fopen(p, "rb");
    uint8_t b[256];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    ck_assert_uint_gt(n, 20);
    char *q = tmp_path("cut.gz");
    ck_assert_int_eq(ps_test_write_file(q, b, n - 6), 0); /* lose part of the trailer */
    uint8_t *got;
    size_t len;
    char err[256] = "";
    ck_assert_int_eq(ps_read_maybe_gz(q, &got, &len, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(strstr(err, "truncated gzip") != NULL, "message: %s", err);
    /* garbage after a complete member is not silently ignored either */
    memset(b + n, 0xAB, 8);
    ck_assert_int_eq(ps_test_write_file(q, b, n + 8), 0);
    ck_assert_int_eq(ps_read_maybe_gz(q, &got, &len, err, sizeof err), PS_EFORMAT);
    ck_assert_msg(err[0] != '\0', "empty message");
    free(p);
    free(q);
}
END_TEST

START_TEST(missing_file) {
    char *p = tmp_path("does-not-exist");
    uint8_t *got;
    size_t len;
    char err[512] = "";
    ck_assert_int_eq(ps_read_maybe_gz(p, &got, &len, err, sizeof err), PS_EIO);
    ck_assert_msg(strstr(err, p) != NULL, "message lacks path: %s", err);
    ck_assert_msg(strstr(err, "No such file") != NULL, "message lacks strerror: %s", err);
    expect_load_error(p, p, PS_EIO, p);
    ps_dataset d;
    ck_assert_int_eq(ps_dataset_load_dir(tmpdir, 1, 0, &d, err, sizeof err), PS_EIO);
    ck_assert_msg(strstr(err, "train-images-idx3-ubyte") != NULL, "message: %s", err);
    free(p);
}
END_TEST

START_TEST(raw_file_passes_through) {
    const uint8_t b[5] = {'h', 'e', 'l', 'l', 'o'};
    char *p = tmp_path("raw.bin");
    ck_assert_int_eq(ps_test_write_file(p, b, 5), 0);
    uint8_t *got;
    size_t len;
    char err[256] = "";
    ck_assert_int_eq(ps_read_maybe_gz(p, &got, &len, err, sizeof err), PS_OK);
    ck_assert_uint_eq(len, 5);
    ck_assert_mem_eq(got, b, 5);
    free(got);
    ck_assert_int_eq(ps_test_write_file(p, b, 0), 0); /* empty file: OK, 0 bytes */
    ck_assert_int_eq(ps_read_maybe_gz(p, &got, &len, err, sizeof err), PS_OK);
    ck_assert_uint_eq(len, 0);
    free(got);
    free(p);
}
END_TEST

START_TEST(load_dir_prefers_gz_and_truncates) {
    fill_pixels();
    const uint32_t idims[3] = {NIMG, ROWS, COLS}, ldims[1] = {NIMG};
    char *paths[4] = {
        write_idx("train-images-idx3-ubyte.gz", 1, 3, idims, pixels, sizeof pixels),
        write_idx("train-labels-idx1-ubyte", 0, 1, ldims, labels, NIMG),
        /* a broken raw twin of the images: must not be read, the .gz wins */
        tmp_path("train-images-idx3-ubyte"),
        write_idx("t10k-images-idx3-ubyte", 0, 3, idims, pixels, sizeof pixels),
    };
    ck_assert_int_eq(ps_test_write_file(paths[2], "junk", 4), 0);
    ps_dataset d;
    char err[512] = "";
    ck_assert_msg(ps_dataset_load_dir(tmpdir, 1, 0, &d, err, sizeof err) == PS_OK, "%s", err);
    check_good_dataset(&d);
    ps_dataset_free(&d);
    ck_assert_msg(ps_dataset_load_dir(tmpdir, 1, 2, &d, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(d.n, 2);
    ck_assert_int_eq(d.y[1], labels[1]);
    ck_assert_int_eq(d.num_classes, 8); /* from the whole file */
    ps_dataset_free(&d);
    /* t10k labels missing */
    ck_assert_int_eq(ps_dataset_load_dir(tmpdir, 0, 0, &d, err, sizeof err), PS_EIO);
    ck_assert_msg(strstr(err, "t10k-labels-idx1-ubyte") != NULL, "message: %s", err);
    for (int i = 0; i < 4; i++)
        free(paths[i]);
}
END_TEST

static void check_fashion(int train, size_t want_n) {
    const char *dir = ps_test_data_dir();
    ps_dataset d;
    char err[512] = "";
    int rc = ps_dataset_load_dir(dir, train, 0, &d, err, sizeof err);
    ck_assert_msg(rc == PS_OK,
                  "cannot load Fashion-MNIST from %s (%s): install the Debian package "
                  "dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or set "
                  "PS_DATA_DIR; CI installs it",
                  dir, err);
    ck_assert_uint_eq(d.n, want_n);
    ck_assert_uint_eq(d.dim, 784);
    ck_assert_int_eq(d.num_classes, 10);
    float lo = 1, hi = 0;
    for (size_t i = 0; i < d.n * d.dim; i++) {
        if (d.x[i] < lo) lo = d.x[i];
        if (d.x[i] > hi) hi = d.x[i];
    }
    ck_assert_float_eq(lo, 0.0f);
    ck_assert_float_eq(hi, 1.0f);
    size_t per_class[10] = {0};
    for (size_t i = 0; i < d.n; i++) {
        ck_assert_int_ge(d.y[i], 0);
        ck_assert_int_le(d.y[i], 9);
        per_class[d.y[i]]++;
    }
    for (int c = 0; c < 10; c++)
        ck_assert_uint_eq(per_class[c], want_n / 10); /* balanced */
    ps_dataset_free(&d);
}

START_TEST(fashion_mnist_train) {
    check_fashion(1, 60000);
}
END_TEST

START_TEST(fashion_mnist_t10k) {
    check_fashion(0, 10000);
}
END_TEST

/* A dataset whose row i is {i, i + 0.5} with label i. */
static ps_dataset make_rows(size_t n) {
    ps_dataset d = {.n = n, .dim = 2, .num_classes = (int)n};
    d.x = malloc(n * 2 * sizeof *d.x);
    d.y = malloc(n * sizeof *d.y);
    for (size_t i = 0; i < n; i++) {
        d.x[2 * i] = (float)i;
        d.x[2 * i + 1] = (float)i + 0.5f;
        d.y[i] = (int32_t)i;
    }
    return d;
}

/* Runs one epoch, checking each row matches its label; writes the sample order to
 * order[0..shard) and returns how many samples came out. */
static size_t drain(ps_batcher *b, size_t *order) {
    size_t bs = b->batch, total = 0, k;
    float *x = malloc(bs * 2 * sizeof *x);
    int32_t *y = malloc(bs * sizeof *y);
    while ((k = ps_batcher_next(b, x, y)) > 0) {
        ck_assert_uint_le(k, bs);
        for (size_t r = 0; r < k; r++) {
            ck_assert_float_eq(x[2 * r], (float)y[r]);
            ck_assert_float_eq(x[2 * r + 1], (float)y[r] + 0.5f);
            order[total++] = (size_t)y[r];
        }
    }
    ck_assert_uint_eq(ps_batcher_next(b, x, y), 0); /* stays at the end */
    free(x);
    free(y);
    return total;
}

START_TEST(batcher_shards_disjoint_and_cover) {
    ps_dataset d = make_rows(101);
    ps_batcher b[2];
    size_t order[2][60];
    int seen[101] = {0};
    for (unsigned w = 0; w < 2; w++) {
        ck_assert_int_eq(ps_batcher_init(&b[w], &d, w, 2, 8, 42), PS_OK);
        ck_assert_uint_eq(ps_batcher_shard_size(&b[w]), 50);
        ck_assert_uint_eq(ps_batcher_steps_per_epoch(&b[w]), 7); /* ceil(50/8) */
        ck_assert_uint_eq(drain(&b[w], order[w]), 50);
        for (size_t k = 0; k < 50; k++) {
            ck_assert_uint_eq(order[w][k] % 2, w); /* index, index+count, ... */
            seen[order[w][k]]++;
        }
        ps_batcher_free(&b[w]);
        ck_assert_ptr_null(b[w].order);
    }
    for (int i = 0; i < 100; i++)
        ck_assert_msg(seen[i] == 1, "sample %d seen %d times", i, seen[i]);
    ck_assert_int_eq(seen[100], 0); /* beyond 2*floor(n/2) */
    ps_dataset_free(&d);
}
END_TEST

START_TEST(batcher_batch_sizes) {
    ps_dataset d = make_rows(10);
    ps_batcher b;
    ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 1, 4, 7), PS_OK);
    ck_assert_uint_eq(ps_batcher_steps_per_epoch(&b), 3);
    float x[8];
    int32_t y[4];
    ck_assert_uint_eq(ps_batcher_next(&b, x, y), 4);
    ck_assert_uint_eq(ps_batcher_next(&b, x, y), 4);
    ck_assert_uint_eq(ps_batcher_next(&b, x, y), 2); /* the short last batch */
    ck_assert_uint_eq(ps_batcher_next(&b, x, y), 0);
    ps_batcher_start_epoch(&b, 1); /* rewinds */
    ck_assert_uint_eq(ps_batcher_next(&b, x, y), 4);
    ps_batcher_free(&b);
    const size_t cases[][2] = {{1, 10}, {5, 2}, {10, 1}, {11, 1}, {3, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 1, cases[i][0], 7), PS_OK);
        ck_assert_uint_eq(ps_batcher_steps_per_epoch(&b), cases[i][1]);
        ps_batcher_free(&b);
    }
    ps_dataset_free(&d);
}
END_TEST

START_TEST(batcher_same_seed_same_order) {
    ps_dataset d = make_rows(200);
    ps_batcher a, b;
    size_t oa[100], ob[100], oc[100];
    ck_assert_int_eq(ps_batcher_init(&a, &d, 1, 2, 16, 1234), PS_OK);
    ck_assert_int_eq(ps_batcher_init(&b, &d, 1, 2, 16, 1234), PS_OK);
    /* b has been through other epochs first: the order depends only on (seed, epoch, index) */
    ps_batcher_start_epoch(&b, 5);
    drain(&b, ob);
    ps_batcher_start_epoch(&a, 3);
    ps_batcher_start_epoch(&b, 3);
    drain(&a, oa);
    drain(&b, ob);
    ck_assert_mem_eq(oa, ob, sizeof oa);
    /* the order is actually shuffled */
    size_t in_place = 0;
    for (size_t k = 0; k < 100; k++)
        in_place += oa[k] == 1 + 2 * k;
    ck_assert_uint_lt(in_place, 10);
    /* another epoch gives another order */
    ps_batcher_start_epoch(&b, 4);
    drain(&b, oc);
    ck_assert_msg(memcmp(oa, oc, sizeof oa) != 0, "epochs 3 and 4 gave the same order");
    /* another seed too */
    ps_batcher c;
    ck_assert_int_eq(ps_batcher_init(&c, &d, 1, 2, 16, 1235), PS_OK);
    ps_batcher_start_epoch(&c, 3);
    drain(&c, oc);
    ck_assert_msg(memcmp(oa, oc, sizeof oa) != 0, "seeds 1234 and 1235 gave the same order");
    ps_batcher_free(&a);
    ps_batcher_free(&b);
    ps_batcher_free(&c);
    ps_dataset_free(&d);
}
END_TEST

START_TEST(batcher_order_is_pinned) {
    /* The shuffle must be the same on every machine and build: this pins it. If you
     * change the generator on purpose, update the expected order here. */
    ps_dataset d = make_rows(20);
    ps_batcher b;
    ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 2, 4, 2024), PS_OK);
    ps_batcher_start_epoch(&b, 1);
    size_t got[10];
    ck_assert_uint_eq(drain(&b, got), 10);
    const size_t want[10] = {0, 8, 12, 14, 16, 18, 6, 4, 2, 10};
    for (int k = 0; k < 10; k++)
        ck_assert_msg(got[k] == want[k], "order[%d] = %zu, want %zu", k, got[k], want[k]);
    ps_batcher_free(&b);
    ps_dataset_free(&d);
}
END_TEST

START_TEST(batcher_seven_by_two) {
    ps_dataset d = make_rows(7);
    for (unsigned w = 0; w < 2; w++) {
        ps_batcher b;
        ck_assert_int_eq(ps_batcher_init(&b, &d, w, 2, 2, 9), PS_OK);
        ck_assert_uint_eq(ps_batcher_shard_size(&b), 3);
        ck_assert_uint_eq(ps_batcher_steps_per_epoch(&b), 2);
        size_t order[3];
        ck_assert_uint_eq(drain(&b, order), 3);
        int seen[7] = {0};
        for (int k = 0; k < 3; k++)
            seen[order[k]]++;
        for (int i = 0; i < 6; i++)
            ck_assert_int_eq(seen[i], (unsigned)i % 2 == w);
        ck_assert_int_eq(seen[6], 0); /* dropped so both workers take 2 steps */
        ps_batcher_free(&b);
    }
    ps_dataset_free(&d);
}
END_TEST

START_TEST(batcher_bad_args) {
    ps_dataset d = make_rows(3);
    ps_batcher b;
    ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 0, 1, 1), PS_EINVAL);
    ck_assert_int_eq(ps_batcher_init(&b, &d, 2, 2, 1, 1), PS_EINVAL);
    ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 1, 0, 1), PS_EINVAL);
    ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 4, 1, 1), PS_EINVAL); /* 3 samples, 4 workers */
    ck_assert_int_eq(ps_batcher_init(&b, NULL, 0, 1, 1, 1), PS_EINVAL);
    ps_batcher_free(&b); /* safe after a failed init */
    ps_dataset_free(&d);
}
END_TEST

static Suite *idx_suite(void) {
    Suite *s = suite_create("idx");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, parse_good_3d);
    tcase_add_test(tc, parse_bad_magic);
    tcase_add_test(tc, parse_unsupported_dtype);
    tcase_add_test(tc, parse_bad_ndim);
    tcase_add_test(tc, parse_truncated_data);
    tcase_add_test(tc, parse_trailing_bytes);
    tcase_add_test(tc, parse_short_header);
    tcase_add_test(tc, parse_dims_overflow);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, load_good_raw_and_gz);
    tcase_add_test(tc, load_2d_images);
    tcase_add_test(tc, load_multi_member_gz);
    tcase_add_test(tc, load_count_mismatch);
    tcase_add_test(tc, load_wrong_rank);
    tcase_add_test(tc, load_bad_idx_names_file);
    tcase_add_test(tc, corrupt_gzip);
    tcase_add_test(tc, truncated_gzip);
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, raw_file_passes_through);
    suite_add_tcase(s, tc);

    /* its own temp dir: the files above must not be there */
    tc = tcase_create("load_dir");
    tcase_add_unchecked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, load_dir_prefers_gz_and_truncates);
    suite_add_tcase(s, tc);

    tc = tcase_create("fashion_mnist");
    tcase_add_test(tc, fashion_mnist_train);
    tcase_add_test(tc, fashion_mnist_t10k);
    suite_add_tcase(s, tc);

    tc = tcase_create("batcher");
    tcase_add_test(tc, batcher_shards_disjoint_and_cover);
    tcase_add_test(tc, batcher_batch_sizes);
    tcase_add_test(tc, batcher_same_seed_same_order);
    tcase_add_test(tc, batcher_order_is_pinned);
    tcase_add_test(tc, batcher_seven_by_two);
    tcase_add_test(tc, batcher_bad_args);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(idx_suite());
}
