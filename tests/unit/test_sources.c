/* Record sources and --data's resolution: each format read back equal to
 * what was written (PNG exactly, JPEG within the codec's error), from files
 * made here with the project's own writers (and NumPy's .npz fixture); the
 * sources' errors name the file and the record; detection tells the formats
 * apart and a data spec's paths are relative to it; the pipeline prepares
 * images of any size into the model's shape. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "crc32c.h"
#include "dataspec.h"
#include "encode.h"
#include "example.h"
#include "npy.h"
#include "npz.h"
#include "order.h"
#include "pipeline.h"
#include "prepare.h"
#include "ps_error.h"
#include "source.h"
#include "testutil.h"
#include "tfrecord.h"

static char *dir;

static void setup(void) {
    dir = ps_test_mkdtemp();
}

static void teardown(void) {
    ps_test_rmdir(dir);
    free(dir);
}

static void put(const char *rel, const void *buf, size_t len) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static void mk(const char *rel) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    ck_assert_int_eq(mkdir(p, 0755), 0);
}

/* Image k: h x w x c bytes, (k * 37 + i * 11) mod 256 (smooth enough for JPEG
 * when k is small). */
static void pixels(uint8_t *px, size_t h, size_t w, size_t c, int k) {
    for (size_t i = 0; i < h * w * c; i++) px[i] = (uint8_t)((k * 37 + (i / c) * 2 + i % c) & 0xff);
}

static void put_png(const char *rel, size_t h, size_t w, size_t c, int k) {
    uint8_t px[64 * 64 * 3], *buf;
    size_t len;
    char err[256];
    pixels(px, h, w, c, k);
    ck_assert_int_eq(ps_image_encode_png(px, h, w, c, &buf, &len, err, sizeof err), PS_OK);
    put(rel, buf, len);
    free(buf);
}

START_TEST(image_folder_reads_back) {
    mk("b_class");
    mk("a_class");
    mk("a_class/deeper");
    put_png("b_class/1.png", 6, 5, 1, 1);
    put_png("a_class/2.png", 6, 5, 1, 2);
    put_png("a_class/deeper/3.png", 4, 4, 1, 3);
    put("a_class/notes.txt", "x", 1);
    uint8_t px[8 * 8 * 3], *jpg;
    size_t len;
    char err[512];
    pixels(px, 8, 8, 3, 0);
    ck_assert_int_eq(ps_image_encode_jpeg(px, 8, 8, 3, 95, &jpg, &len, err, sizeof err), PS_OK);
    put("b_class/4.jpg", jpg, len);
    free(jpg);
    ps_source *s;
    ps_source_opts o = {.channels = 0};
    ck_assert_msg(ps_source_folder(dir, &o, &s, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(s->n, 4);
    ck_assert_uint_eq(s->n_classes, 2);
    ck_assert_str_eq(s->classes[0], "a_class");
    ps_sample smp = {0};
    /* a_class/2.png, a_class/deeper/3.png, b_class/1.png, b_class/4.jpg */
    int ks[4] = {2, 3, 1, 0};
    size_t hs[4] = {6, 4, 6, 8}, ws[4] = {5, 4, 5, 8}, cs[4] = {1, 1, 1, 3};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_msg(ps_source_read(s, i, &smp, err, sizeof err) == PS_OK, "%s", err);
        ck_assert_int_eq(smp.label, i < 2 ? 0 : 1);
        ck_assert_uint_eq(smp.h, hs[i]);
        ck_assert_uint_eq(smp.w, ws[i]);
        ck_assert_uint_eq(smp.c, cs[i]);
        pixels(px, hs[i], ws[i], cs[i], ks[i]);
        double worst = 0;
        for (size_t k = 0; k < hs[i] * ws[i] * cs[i]; k++)
            worst = fmax(worst, fabs(smp.x[k] - px[k]));
        ck_assert_msg(worst <= (i == 3 ? 8.0 : 0.0), "record %zu off by %g", i, worst);
    }
    /* a damaged file: an error naming it */
    put("b_class/1.png", "\x89PNG\r\n\x1a\nbroken", 14);
    ck_assert_int_eq(ps_source_read(s, 2, &smp, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "b_class/1.png"));
    ps_sample_free(&smp);
    ps_source_close(s);
    /* channels 3: gray repeated */
    o.channels = 3;
    ck_assert_int_eq(ps_source_folder(dir, &o, &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_OK);
    ck_assert_uint_eq(smp.c, 3);
    ck_assert(smp.x[0] == smp.x[1] && smp.x[1] == smp.x[2]);
    ps_sample_free(&smp);
    ps_source_close(s);
}
END_TEST

/* One Example: image bytes (or floats) and a label. */
static void write_example(FILE *f, const char *ikey, const void *img, size_t len,
                          const float *fl, size_t nf, int64_t label) {
    ps_example_builder *b = ps_example_builder_new();
    if (img) ck_assert_int_eq(ps_example_add_bytes(b, ikey, img, len), PS_OK);
    if (fl) ck_assert_int_eq(ps_example_add_floats(b, ikey, fl, nf), PS_OK);
    ck_assert_int_eq(ps_example_add_int64s(b, "label", &label, 1), PS_OK);
    uint8_t *rec;
    size_t rl;
    ck_assert_int_eq(ps_example_serialize(b, &rec, &rl), PS_OK);
    ck_assert_int_eq(ps_tfrecord_write(f, rec, rl), PS_OK);
    free(rec);
    ps_example_builder_free(b);
}

static FILE *open_in(const char *rel) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    return f;
}

START_TEST(tfrecord_reads_back) {
    char err[512], p0[4096], p1[4096];
    FILE *f = open_in("a.tfrecord");
    for (int k = 0; k < 3; k++) { /* PNG images */
        uint8_t px[20], *buf;
        size_t len;
        pixels(px, 4, 5, 1, k);
        ck_assert_int_eq(ps_image_encode_png(px, 4, 5, 1, &buf, &len, err, sizeof err), PS_OK);
        write_example(f, "image", buf, len, NULL, 0, k);
        free(buf);
    }
    fclose(f);
    f = open_in("b.tfrecord");
    float fl[6] = {0.5f, -1, 2, 3, 4, 5};
    write_example(f, "image", NULL, 0, fl, 6, 7); /* a raw float tensor */
    fclose(f);
    snprintf(p0, sizeof p0, "%s/a.tfrecord", dir);
    snprintf(p1, sizeof p1, "%s/b.tfrecord", dir);
    const char *paths[2] = {p0, p1};
    ps_source_opts o = {0};
    ps_source *s;
    ck_assert_msg(ps_source_tfrecord(paths, 2, &o, &s, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(s->n, 4);
    ck_assert_uint_eq(s->n_files, 2);
    ck_assert_uint_eq(s->file_start[1], 3);
    ps_sample smp = {0};
    for (int k = 0; k < 3; k++) {
        uint8_t px[20];
        pixels(px, 4, 5, 1, k);
        ck_assert_msg(ps_source_read(s, (size_t)k, &smp, err, sizeof err) == PS_OK, "%s", err);
        ck_assert_int_eq(smp.label, k);
        ck_assert_uint_eq(smp.h, 4);
        ck_assert_uint_eq(smp.w, 5);
        for (size_t i = 0; i < 20; i++) ck_assert(smp.x[i] == px[i]);
    }
    ck_assert_int_eq(ps_source_read(s, 3, &smp, err, sizeof err), PS_OK);
    ck_assert_int_eq(smp.label, 7);
    ck_assert_uint_eq(smp.c, 6);
    ck_assert_mem_eq(smp.x, fl, sizeof fl);
    ps_source_close(s);
    /* with a shape, the float tensor is an image; a length that does not fit fails */
    o.shape[0] = 1, o.shape[1] = 2, o.shape[2] = 3;
    ck_assert_int_eq(ps_source_tfrecord(paths + 1, 1, &o, &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_OK);
    ck_assert_uint_eq(smp.w, 2);
    ps_source_close(s);
    o.shape[2] = 4;
    ck_assert_int_eq(ps_source_tfrecord(paths + 1, 1, &o, &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "b.tfrecord: record 0"));
    ps_source_close(s);
    /* another key: the image is missing, by name */
    o = (ps_source_opts){.image_key = "pixels"};
    ck_assert_int_eq(ps_source_tfrecord(paths, 1, &o, &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "a.tfrecord: record 1 at byte"));
    ck_assert_ptr_nonnull(strstr(err, "\"pixels\" is missing"));
    ps_source_close(s);
    ps_sample_free(&smp);
}
END_TEST

/* Records TensorFlow wrote (tests/fixtures/tfrecord/make_tf_images.py), under the keys an
 * image pipeline uses: the pixels exactly as TensorFlow decodes them, JPEG too (image.c
 * decodes with tf.io.decode_jpeg's settings). */
START_TEST(tfrecord_written_by_tensorflow) {
    char err[512], p[4096], q[4096];
    snprintf(p, sizeof p, "%s/tests/fixtures/tfrecord/tf_images.tfrecord", ps_test_source_root());
    snprintf(q, sizeof q, "%s/tests/fixtures/tfrecord/tf_images_expected.npz",
             ps_test_source_root());
    const char *paths[1] = {p};
    ps_source_opts o = {.image_key = "image/encoded", .label_key = "image/class/label"};
    ps_source *s;
    ck_assert_msg(ps_source_tfrecord(paths, 1, &o, &s, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(s->n, 4);
    ps_npz want;
    ck_assert_msg(ps_npz_open(q, &want, err, sizeof err) == PS_OK, "%s", err);
    const ps_npy *labels = ps_npz_get(&want, "labels");
    ck_assert_ptr_nonnull(labels);
    ps_sample smp = {0};
    for (size_t i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "img%zu", i);
        const ps_npy *img = ps_npz_get(&want, name);
        ck_assert_ptr_nonnull(img);
        ck_assert_msg(ps_source_read(s, i, &smp, err, sizeof err) == PS_OK, "%s", err);
        ck_assert_int_eq(smp.label, (int32_t)ps_npy_get(labels, i));
        ck_assert_uint_eq(smp.h, img->shape[0]);
        ck_assert_uint_eq(smp.w, img->shape[1]);
        ck_assert_uint_eq(smp.c, img->shape[2]);
        double worst = 0;
        for (size_t k = 0; k < img->count; k++)
            worst = fmax(worst, fabs(smp.x[k] - ps_npy_get(img, k)));
        ck_assert_msg(worst <= 0.0, "record %zu: off by %g from TensorFlow's", i,
                      worst);
    }
    ps_npz_close(&want);
    ps_sample_free(&smp);
    ps_source_close(s);
}
END_TEST

START_TEST(tfrecord_hostile) {
    char err[512], p[4096];
    FILE *f = open_in("bad.tfrecord");
    write_example(f, "image", "abc", 3, NULL, 0, 1);
    write_example(f, "image", "abc", 3, NULL, 0, 1);
    long end = ftell(f);
    fclose(f);
    snprintf(p, sizeof p, "%s/bad.tfrecord", dir);
    const char *paths[1] = {p};
    ps_source *s;
    /* the second record's data checksum broken: found when it is read */
    f = fopen(p, "r+b");
    fseek(f, end - 5, SEEK_SET);
    fputc('X', f);
    fclose(f);
    ck_assert_int_eq(ps_source_tfrecord(paths, 1, NULL, &s, err, sizeof err), PS_OK);
    ps_sample smp = {0};
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "record 1 at byte"));
    ck_assert_ptr_nonnull(strstr(err, "checksum"));
    ps_source_close(s);
    ps_sample_free(&smp);
    /* a length of 2^63 with a valid header checksum: refused at open, nothing allocated */
    uint8_t head[12] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    uint32_t m = ps_tfrecord_mask(ps_crc32c(head, 8));
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(m >> (8 * i));
    put("huge.tfrecord", head, sizeof head);
    snprintf(p, sizeof p, "%s/huge.tfrecord", dir);
    ck_assert_int_eq(ps_source_tfrecord(paths, 1, NULL, &s, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "huge.tfrecord: record 0 at byte 0: length over the limit"));
    /* truncated */
    put("cut.tfrecord", head, 7);
    snprintf(p, sizeof p, "%s/cut.tfrecord", dir);
    ck_assert_int_eq(ps_source_tfrecord(paths, 1, NULL, &s, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
}
END_TEST

START_TEST(npz_and_csv_read_back) {
    char err[512], p[4096];
    snprintf(p, sizeof p, "%s/tests/fixtures/npy/xy.npz", ps_test_source_root());
    ps_source *s;
    /* xy.npz's y holds -3 and 2^40: not class labels */
    ck_assert_int_eq(ps_source_npz(p, "x", "y", NULL, &s, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "label 0 is -3"));
    ck_assert_int_eq(ps_source_npz(p, "x", "nope", NULL, &s, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "no member \"nope\""));
    snprintf(p, sizeof p, "%s/tests/fixtures/npy/dataset.npz", ps_test_source_root());
    ck_assert_msg(ps_source_npz(p, "images", "labels", NULL, &s, err, sizeof err) == PS_OK, "%s",
                  err);
    ck_assert_uint_eq(s->n, 4);
    ck_assert_uint_eq(s->h, 2);
    ck_assert_uint_eq(s->w, 3);
    ck_assert_uint_eq(s->c, 1);
    ck_assert_int_eq(s->num_classes, 4);
    ps_sample smp = {0};
    int32_t want[4] = {3, 0, 2, 1};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(ps_source_read(s, i, &smp, err, sizeof err), PS_OK);
        ck_assert_int_eq(smp.label, want[i]);
        for (size_t k = 0; k < 6; k++) ck_assert(smp.x[k] == (float)(i * 6 + k) * 0.25f);
    }
    ps_source_close(s);
    snprintf(p, sizeof p, "%s/tests/fixtures/npy/xy_compressed.npz", ps_test_source_root());
    ck_assert_int_eq(ps_source_npz(p, "x", "y", NULL, &s, err, sizeof err), PS_EFORMAT);
    /* CSV: features a, b; label in the middle */
    const char *csv = "a,label,b\n1.5,0,2\n\n-3,1,4e2\n";
    put("t.csv", csv, strlen(csv));
    snprintf(p, sizeof p, "%s/t.csv", dir);
    const char *paths[1] = {p};
    ck_assert_msg(ps_source_csv(paths, 1, NULL, &s, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(s->n, 2);
    ck_assert_int_eq(s->num_classes, 2);
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.x[0] == -3.0f && smp.x[1] == 400.0f && smp.label == 1 && smp.c == 2);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.x[0] == 1.5f && smp.x[1] == 2.0f && smp.label == 0);
    ps_source_close(s);
    const char *cols[1] = {"b"};
    ps_source_opts o = {.columns = cols, .n_columns = 1};
    ck_assert_int_eq(ps_source_csv(paths, 1, &o, &s, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.x[0] == 400.0f && smp.c == 1);
    ps_source_close(s);
    const char *ragged = "a,label\n1,0\n2\n";
    put("r.csv", ragged, strlen(ragged));
    snprintf(p, sizeof p, "%s/r.csv", dir);
    ck_assert_int_eq(ps_source_csv(paths, 1, NULL, &s, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "r.csv:3"));
    const char *words = "a,label\n1,0\nx,1\n";
    put("w.csv", words, strlen(words));
    snprintf(p, sizeof p, "%s/w.csv", dir);
    ck_assert_int_eq(ps_source_csv(paths, 1, NULL, &s, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "w.csv:3: column 1 (a): not a number"));
    const char *nolabel = "a,b\n1,0\n";
    put("n.csv", nolabel, strlen(nolabel));
    snprintf(p, sizeof p, "%s/n.csv", dir);
    ck_assert_int_eq(ps_source_csv(paths, 1, NULL, &s, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "no label column \"label\""));
    ps_sample_free(&smp);
}
END_TEST

/* x.npy uint8 [3, 2, 2] and y.npy int32 [3], as NumPy writes version 1.0. */
static void put_npy(const char *rel, const char *descr, const char *shape, const void *data,
                    size_t len) {
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    uint8_t buf[512];
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    uint16_t hl = (uint16_t)(n + pad + 1);
    buf[8] = (uint8_t)hl, buf[9] = (uint8_t)(hl >> 8);
    memcpy(buf + 10, hdr, (size_t)n);
    memset(buf + 10 + n, ' ', pad);
    buf[10 + n + pad] = '\n';
    memcpy(buf + total + pad, data, len);
    put(rel, buf, total + pad + len);
}

START_TEST(npy_pair_and_specs) {
    uint8_t x[12];
    int32_t y[3] = {2, 0, 1};
    for (int i = 0; i < 12; i++) x[i] = (uint8_t)(i * 20);
    put_npy("x.npy", "|u1", "(3, 2, 2)", x, sizeof x);
    put_npy("y.npy", "<i4", "(3,)", y, sizeof y);
    const char *spec = "{\"format\": \"npy\", \"x\": \"x.npy\", \"y\": \"y.npy\", "
                       "\"preprocess\": [{\"rescale\": 0.5}], \"shuffle_buffer\": 4}";
    put("s.json", spec, strlen(spec));
    char p[4096], err[1024];
    snprintf(p, sizeof p, "%s/s.json", dir);
    ps_data_spec ds;
    ck_assert_msg(ps_data_spec_resolve(p, &ds, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_int_eq(ds.format, PS_DATA_NPY);
    ck_assert(ds.has_shuffle_buffer && ds.shuffle_buffer == 4);
    ps_source *s;
    ck_assert_msg(ps_data_spec_open(&ds, &s, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(s->n, 3);
    ck_assert_uint_eq(s->h, 2);
    ck_assert_uint_eq(s->w, 2);
    ck_assert_uint_eq(s->c, 1);
    ck_assert_int_eq(s->num_classes, 3);
    /* through the pipeline, with the spec's preprocessing, in order */
    ps_prep *prep;
    ck_assert_int_eq(ps_prep_new(ds.preprocess, 2, 2, 1, 0, &prep, err, sizeof err), PS_OK);
    ps_pipeline_cfg pc = {.src = s, .out_h = 2, .out_w = 2, .out_c = 1, .prepare = ps_prep_run,
                          .prepare_ctx = prep, .batch = 3, .count = 1, .threads = 2,
                          .shuffle_buffer = PS_ORDER_IN_ORDER, .num_classes = 3};
    ps_pipeline *pl;
    ck_assert_int_eq(ps_pipeline_open(&pl, &pc, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_pipeline_start_epoch(pl, 0, 0), PS_OK);
    float *bx;
    int32_t *by;
    size_t nb;
    ck_assert_int_eq(ps_pipeline_next(pl, &bx, &by, &nb, err, sizeof err), PS_OK);
    ck_assert_uint_eq(nb, 3);
    for (int i = 0; i < 12; i++) ck_assert(bx[i] == (float)(i * 10));
    ck_assert_mem_eq(by, y, sizeof y);
    ps_pipeline_close(pl);
    ps_prep_free(prep);
    ps_source_close(s);
    ps_data_spec_free(&ds);
    /* a lone .npy is refused with what to do instead */
    snprintf(p, sizeof p, "%s/x.npy", dir);
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "give x and y in a data spec"));
    /* an unknown key, a wrong format */
    const char *bad = "{\"format\": \"npy\", \"x\": \"x.npy\", \"y\": \"y.npy\", \"shufle\": 1}";
    put("bad.json", bad, strlen(bad));
    snprintf(p, sizeof p, "%s/bad.json", dir);
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "unknown key \"shufle\""));
    const char *bad2 = "{\"format\": \"parquet\", \"path\": \".\"}";
    put("bad2.json", bad2, strlen(bad2));
    snprintf(p, sizeof p, "%s/bad2.json", dir);
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "\"format\" must be one of"));
}
END_TEST

START_TEST(detection) {
    char err[1024], p[4096];
    ps_data_spec ds;
    mk("folder");
    mk("folder/cat");
    mk("recs");
    put_png("folder/cat/a.png", 3, 3, 1, 0);
    FILE *f = open_in("recs/train-0.tfrecord");
    write_example(f, "image", "abc", 3, NULL, 0, 0);
    fclose(f);
    f = open_in("recs/train-1.tfrecord");
    write_example(f, "image", "abc", 3, NULL, 0, 0);
    fclose(f);
    f = open_in("recs/noext");
    write_example(f, "image", "abc", 3, NULL, 0, 0);
    fclose(f);
    snprintf(p, sizeof p, "%s/folder", dir);
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_OK);
    ck_assert_int_eq(ds.format, PS_DATA_FOLDER);
    ps_data_spec_free(&ds);
    snprintf(p, sizeof p, "%s/recs", dir);
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_OK);
    ck_assert_int_eq(ds.format, PS_DATA_TFRECORD);
    ck_assert_uint_eq(ds.n_paths, 2); /* the named ones; the directory's other file is not */
    ck_assert_ptr_nonnull(strstr(ds.paths[0], "train-0"));
    ps_data_spec_free(&ds);
    snprintf(p, sizeof p, "%s/recs/noext", dir); /* told by its first bytes */
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_OK);
    ck_assert_int_eq(ds.format, PS_DATA_TFRECORD);
    ps_data_spec_free(&ds);
    snprintf(p, sizeof p, "%s/recs/train-*.tfrecord", dir);
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_OK);
    ck_assert_uint_eq(ds.n_paths, 2);
    ps_data_spec_free(&ds);
    snprintf(p, sizeof p, "%s/recs/none-*.tfrecord", dir);
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "no file matches"));
    snprintf(p, sizeof p, "%s/folder/cat", dir); /* images, but no class subdirectories */
    ck_assert_int_eq(ps_data_spec_resolve(p, &ds, err, sizeof err), PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "class subdirectories"));
    /* a spec's paths are relative to it; its validation set read the same way */
    const char *spec = "{\"path\": \"folder\", \"channels\": 3, \"validation\": \"folder\", "
                       "\"preprocess\": [{\"resize\": [8, 8]}]}";
    put("spec.json", spec, strlen(spec));
    snprintf(p, sizeof p, "%s/spec.json", dir);
    ck_assert_msg(ps_data_spec_resolve(p, &ds, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_int_eq(ds.format, PS_DATA_FOLDER);
    ck_assert_ptr_nonnull(ds.validation);
    ck_assert_int_eq(ds.validation->opts.channels, 3);
    ck_assert_ptr_nonnull(ds.validation->preprocess);
    ps_data_spec_free(&ds);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("sources");
    TCase *tc = tcase_create("sources");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, image_folder_reads_back);
    tcase_add_test(tc, tfrecord_reads_back);
    tcase_add_test(tc, tfrecord_written_by_tensorflow);
    tcase_add_test(tc, tfrecord_hostile);
    tcase_add_test(tc, npz_and_csv_read_back);
    tcase_add_test(tc, npy_pair_and_specs);
    tcase_add_test(tc, detection);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
