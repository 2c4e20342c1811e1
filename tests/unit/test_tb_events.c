/* Check tests for TensorBoard event files (worker/tb_events.c): TFRecord framing
 * and its masked CRC-32C against a bit-by-bit CRC written here, a record built
 * by hand byte by byte, and a whole event file read back (names, file_version
 * first, scalar and histogram events). */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "ps_error.h"
#include "tb.pb-c.h"
#include "tb_events.h"
#include "testutil.h"
#include "train_log.h"

/* CRC-32C one bit at a time (reflected polynomial 0x82F63B78), independent of common/. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

START_TEST(crc_known_vector) {
    ck_assert_uint_eq(crc_bitwise((const uint8_t *)"123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(ps_crc32c("123456789", 9), 0xE3069283u);
}
END_TEST

START_TEST(mask_is_tensorflows) {
    /* rotate right by 15, add the constant (TensorFlow's crc32c::Mask) */
    ck_assert_uint_eq(ps_tfrecord_mask_crc(0), 0xa282ead8u);
    ck_assert_uint_eq(ps_tfrecord_mask_crc(0xE3069283u),
                      (uint32_t)(((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u));
    ck_assert_uint_eq(ps_tfrecord_mask_crc(0x00008000u), 1u + 0xa282ead8u);
    ck_assert_uint_eq(ps_tfrecord_mask_crc(1u), (1u << 17) + 0xa282ead8u);
}
END_TEST

START_TEST(record_by_hand) {
    const char *data = "123456789";
    uint8_t rec[9 + PS_TFRECORD_OVERHEAD];
    ps_tfrecord_frame(data, 9, rec);
    const uint8_t len[8] = {9, 0, 0, 0, 0, 0, 0, 0};
    ck_assert_mem_eq(rec, len, 8);
    uint32_t c = crc_bitwise(len, 8);
    ck_assert_uint_eq(le32(rec + 8), ((c >> 15) | (c << 17)) + 0xa282ead8u);
    ck_assert_mem_eq(rec + 12, data, 9);
    ck_assert_uint_eq(le32(rec + 21), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
    /* an empty record: length, its CRC, the CRC of nothing (0, masked) */
    uint8_t empty[PS_TFRECORD_OVERHEAD];
    ps_tfrecord_frame(NULL, 0, empty);
    ck_assert_uint_eq(le32(empty + 12), 0xa282ead8u);
}
END_TEST

/* Reads the records of path; checks each record's two CRCs; returns the count
 * and the bodies (malloc'd, concatenated) with their lengths. */
static size_t read_records(const char *path, uint8_t **bodies, size_t *lens, size_t max) {
    size_t n = 0, at = 0;
    uint8_t *buf = (uint8_t *)ps_test_slurp(path, &n);
    ck_assert_ptr_nonnull(buf);
    size_t k = 0;
    while (at < n) {
        ck_assert_uint_ge(n - at, PS_TFRECORD_OVERHEAD);
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | buf[at + (size_t)i];
        ck_assert_uint_le(len, n - at - PS_TFRECORD_OVERHEAD);
        ck_assert_uint_eq(le32(buf + at + 8), ps_tfrecord_mask_crc(crc_bitwise(buf + at, 8)));
        ck_assert_uint_eq(le32(buf + at + 12 + len),
                          ps_tfrecord_mask_crc(crc_bitwise(buf + at + 12, len)));
        ck_assert_uint_lt(k, max);
        bodies[k] = malloc(len ? len : 1);
        memcpy(bodies[k], buf + at + 12, len);
        lens[k++] = len;
        at += len + PS_TFRECORD_OVERHEAD;
    }
    free(buf);
    return k;
}

START_TEST(event_file_reads_back) {
    char *dir = ps_test_mkdtemp();
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/run/train", dir); /* the parent is made too */
    ps_tb_file t;
    char err[256] = "";
    ck_assert_int_eq(ps_tb_open(&t, sub, err, sizeof err), PS_OK);
    ck_assert_ptr_nonnull(strstr(t.path, "/events.out.tfevents."));
    const char *tags[] = {"a"};
    double one = 1.0;
    ck_assert_int_eq(ps_tb_scalars(&t, 5, 1.0, tags, &one, 1), PS_OK);
    float h[] = {0, 1, 2, 3};
    ck_assert_int_eq(ps_tb_histogram(&t, 2, 3.0, "w/histogram", h, 4, 2), PS_OK);
    ck_assert_int_eq(ps_tb_close(&t), PS_OK);

    uint8_t *body[8];
    size_t len[8];
    ck_assert_uint_eq(read_records(t.path, body, len, 8), 3);
    Tb__Event *ev = tb__event__unpack(NULL, len[0], body[0]);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(ev->what_case, TB__EVENT__WHAT_FILE_VERSION);
    ck_assert_str_eq(ev->file_version, "brain.Event:2");
    ck_assert(ev->wall_time > 1.5e9);
    tb__event__free_unpacked(ev, NULL);
    /* Event{wall_time 1.0, step 5, summary{value{tag "a", simple_value 1.0f}}}, by hand */
    const uint8_t want[] = {0x09, 0,    0,   0,    0,   0, 0, 0xf0, 0x3f, /* 1: double 1.0 */
                            0x10, 0x05,                                   /* 2: varint 5 */
                            0x2a, 10,                                     /* 5: Summary, 10 bytes */
                            0x0a, 8,                                      /* 1: Value, 8 bytes */
                            0x0a, 1,    'a',                              /* tag */
                            0x15, 0,    0,   0x80, 0x3f};                 /* 2: float 1.0 */
    ck_assert_uint_eq(len[1], sizeof want);
    ck_assert_mem_eq(body[1], want, sizeof want);
    ev = tb__event__unpack(NULL, len[2], body[2]);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(ev->step, 2);
    ck_assert_uint_eq(ev->summary->n_value, 1);
    Tb__HistogramProto *hp = ev->summary->value[0]->histo;
    ck_assert_ptr_nonnull(hp);
    ck_assert(hp->min == 0 && hp->max == 3 && hp->num == 4 && hp->sum == 6 &&
              hp->sum_squares == 14);
    ck_assert_uint_eq(hp->n_bucket, 2);
    ck_assert(hp->bucket_limit[0] == 1.5 && hp->bucket_limit[1] == 3);
    ck_assert(hp->bucket[0] == 2 && hp->bucket[1] == 2);
    tb__event__free_unpacked(ev, NULL);
    for (int i = 0; i < 3; i++)
        free(body[i]);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(open_fails_clearly) {
    ps_tb_file t;
    char err[256] = "";
    ck_assert_int_eq(ps_tb_open(&t, "/proc/no/such/dir", err, sizeof err), PS_EIO);
    ck_assert_ptr_nonnull(strstr(err, "/proc/no/such/dir"));
}
END_TEST

/* batch_gradient_global_norm's sum: the trainable variables' gradients only (not
 * BatchNormalization's moving statistics), the same over any split into ranges. */
START_TEST(grad_sumsq_trainable_only) {
    const char *spec = "{\"input_shape\": [3], \"layers\": [{\"type\": \"Dense\", \"units\": 4},"
                       " {\"type\": \"BatchNormalization\"}, {\"type\": \"Dense\", \"units\": 2}],"
                       " \"loss\": \"sparse_categorical_crossentropy\", \"from_logits\": true}";
    ps_model *m = NULL;
    char err[256] = "";
    ck_assert_msg(ps_model_from_json(spec, &m, err, sizeof err) == PS_OK, "%s", err);
    float *g = ps_model_grads(m);
    size_t n = ps_model_num_params(m);
    double want = 0;
    size_t untrainable = 0;
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(i % 7) - 2.5f;
    for (size_t v = 0; v < ps_model_num_vars(m); v++) {
        const ps_model_var *var = ps_model_var_at(m, v);
        for (size_t k = 0; k < var->numel; k++) {
            double x = g[var->offset + k];
            if (var->trainable)
                want += x * x;
            else
                untrainable++;
        }
    }
    ck_assert_uint_gt(untrainable, 0); /* the moving statistics are in the buffer */
    ck_assert(fabs(ps_train_log_grad_sumsq(m, g, g + n) - want) < 1e-9);
    for (size_t cut = 1; cut < n; cut += 5) {
        double parts =
            ps_train_log_grad_sumsq(m, g, g + cut) + ps_train_log_grad_sumsq(m, g + cut, g + n);
        ck_assert(fabs(parts - want) < 1e-9);
    }
    ps_model_free(m);
}
END_TEST

/* One epoch into a History file (no event files). */
static void history_epoch(ps_train_log *l, unsigned epoch, double loss) {
    ps_log_epoch e = {.epoch = epoch, .loss = loss, .accuracy = 0.5, .has_val = 1,
                      .val_loss = loss + 1, .val_accuracy = 0.25, .val_auc = -1};
    char err[256] = "";
    ck_assert_msg(ps_train_log_epoch(l, &e, NULL, err, sizeof err) == PS_OK, "%s", err);
}

/* A job resumed at epoch E continues the History file: the first E entries of each
 * list stay, those of the run that stopped later go; a file holding fewer epochs
 * starts again ({} until an epoch ends, as for a fresh job). */
START_TEST(history_continues_after_a_resume) {
    char *dir = ps_test_mkdtemp();
    char path[600], err[256] = "";
    snprintf(path, sizeof path, "%s/history.json", dir);
    ps_train_log *l = NULL;
    ck_assert_int_eq(ps_train_log_open(NULL, path, 0, &l, err, sizeof err), PS_OK);
    for (unsigned e = 0; e < 3; e++)
        history_epoch(l, e, 1.0 + e); /* 3 epochs written, then a stop */
    ck_assert_int_eq(ps_train_log_close(l), PS_OK);
    ck_assert_int_eq(ps_train_log_open(NULL, path, 2, &l, err, sizeof err), PS_OK);
    history_epoch(l, 2, 7.0); /* resumed at epoch 3 (0-based 2): it is done again */
    ck_assert_int_eq(ps_train_log_close(l), PS_OK);
    char *text = ps_test_slurp(path, NULL);
    cJSON *h = cJSON_Parse(text);
    ck_assert_ptr_nonnull(h);
    const char *lists[] = {"loss", "accuracy", "val_loss", "val_accuracy"};
    for (size_t i = 0; i < 4; i++)
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(h, lists[i])), 3);
    cJSON *loss = cJSON_GetObjectItem(h, "loss");
    ck_assert(cJSON_GetArrayItem(loss, 0)->valuedouble == 1.0);
    ck_assert(cJSON_GetArrayItem(loss, 1)->valuedouble == 2.0);
    ck_assert(cJSON_GetArrayItem(loss, 2)->valuedouble == 7.0);
    cJSON_Delete(h);
    free(text);
    /* resumed at epoch 5: the file holds 3, so it starts again */
    ck_assert_int_eq(ps_train_log_open(NULL, path, 4, &l, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_train_log_close(l), PS_OK);
    text = ps_test_slurp(path, NULL);
    h = cJSON_Parse(text);
    ck_assert(cJSON_IsObject(h) && h->child == NULL);
    cJSON_Delete(h);
    free(text);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static Suite *tb_suite(void) {
    Suite *s = suite_create("tb_events");
    TCase *tc = tcase_create("tb_events");
    tcase_add_test(tc, crc_known_vector);
    tcase_add_test(tc, mask_is_tensorflows);
    tcase_add_test(tc, record_by_hand);
    tcase_add_test(tc, event_file_reads_back);
    tcase_add_test(tc, open_fails_clearly);
    tcase_add_test(tc, grad_sumsq_trainable_only);
    tcase_add_test(tc, history_continues_after_a_resume);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(tb_suite());
}
