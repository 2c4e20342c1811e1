/* psd against malformed and invalid requests built by hand on a raw DEALER (unknown
 * variables, wrong shapes, dtypes and frame counts, bad headers): each gets an Error reply
 * and the shard keeps serving. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "ps_error.h"
#include "psd_requests_common.h"
#include "stats.h"
#include "testutil.h"

/* ---- bad requests: each gets an Error reply, and the shard keeps serving ---- */

START_TEST(pull_unknown_variable) {
    pull_req q;
    pull_req_init(&q, 101, (char *[]){"nope", "w"}, 1, 0);
    expect_bad_request(&q.h, NULL, NULL, 0, PS_ENOENT, "no variable named 'nope' on shard 0");
    pull_req_init(&q, 102, (char *[]){"w", "nope"}, 2, 0); /* known, then unknown */
    expect_bad_request(&q.h, NULL, NULL, 0, PS_ENOENT, "no variable named 'nope' on shard 0");
}
END_TEST

/* "w" [2, 3] and "b" [4] as the shard holds them, and the frames a good push sends. */
#define W_23                                                                                       \
    {                                                                                              \
        "w", 2, {                                                                                  \
            2, 3                                                                                   \
        }                                                                                          \
    }
#define B_4                                                                                        \
    {                                                                                              \
        "b", 1, {                                                                                  \
            NB                                                                                     \
        }                                                                                          \
    }
#define GW (NW * sizeof(float))
#define GB (NB * sizeof(float))

/* The tables below are laid out by hand: one case, one or two lines. */
/* clang-format off */
START_TEST(push_unknown_variable) {
    static const bad_push cases[] = {
        {.id = 103, .n_metas = 1, .meta = {{"nope", 2, {2, 3}}}, .n_frames = 1, .frame_len = {GW},
         .code = PS_ENOENT, .text = "no variable named 'nope' on shard 0"},
    };
    expect_bad_pushes(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(push_wrong_shape) {
    static const bad_push cases[] = {
        /* same number of elements, transposed */
        {.id = 104, .n_metas = 1, .meta = {{"w", 2, {3, 2}}}, .n_frames = 1, .frame_len = {GW},
         .code = PS_ESHAPE, .text = "gradient for 'w' has the wrong shape"},
        /* flattened */
        {.id = 105, .n_metas = 1, .meta = {{"w", 1, {NW}}}, .n_frames = 1, .frame_len = {GW},
         .code = PS_ESHAPE, .text = "gradient for 'w' has the wrong shape"},
        /* fewer elements */
        {.id = 106, .n_metas = 1, .meta = {{"w", 2, {2, 2}}}, .n_frames = 1, .frame_len = {16},
         .code = PS_ESHAPE, .text = "gradient for 'w' has the wrong shape"},
    };
    expect_bad_pushes(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(push_wrong_dtype) {
    static const bad_push cases[] = {
        {.id = 107, .n_metas = 1, .meta = {W_23}, .has_dtype = 1, .dtype = PS__DTYPE__DT_INVALID,
         .n_frames = 1, .frame_len = {GW},
         .code = PS_ESHAPE,
         .text = "tensor 'w': dtype 0 not supported (float32, float16, bfloat16 or top-k)"},
        /* not a dtype psd knows */
        {.id = 108, .n_metas = 1, .meta = {W_23}, .has_dtype = 1, .dtype = 9,
         .n_frames = 1, .frame_len = {GW},
         .code = PS_ESHAPE, .text = "tensor 'w': dtype 9 not supported"},
        /* float16 (--compression fp16) takes 2 bytes a value, not 4 */
        {.id = 1108, .n_metas = 1, .meta = {W_23}, .has_dtype = 1, .dtype = PS__DTYPE__DT_F16,
         .n_frames = 1, .frame_len = {GW},
         .code = PS_EPROTO, .text = "tensor 'w': shape gives 12 bytes but nbytes says 24"},
        /* top-k with no pairs (nnz 0) */
        {.id = 1109, .n_metas = 1, .meta = {W_23}, .has_dtype = 1,
         .dtype = PS__DTYPE__DT_TOPK_F32, .n_frames = 1, .frame_len = {GW},
         .code = PS_EPROTO, .text = "tensor 'w': top-k of 0 entries out of 6"},
    };
    expect_bad_pushes(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(push_frame_count_mismatch) {
    static const bad_push cases[] = {
        /* two metas, three frames */
        {.id = 109, .n_metas = 2, .meta = {W_23, B_4}, .n_frames = 3, .frame_len = {GW, GB, GB},
         .code = PS_EPROTO, .text = "header lists 2 tensors but 3 payload frames followed"},
        /* two metas, one frame */
        {.id = 110, .n_metas = 2, .meta = {W_23, B_4}, .n_frames = 1, .frame_len = {GW},
         .code = PS_EPROTO, .text = "header lists 2 tensors but 1 payload frames followed"},
        /* two metas, no frames at all */
        {.id = 111, .n_metas = 2, .meta = {W_23, B_4},
         .code = PS_EPROTO, .text = "header lists 2 tensors but 0 payload frames followed"},
        /* no metas, one frame */
        {.id = 136, .n_frames = 1, .frame_len = {GW},
         .code = PS_EPROTO, .text = "header lists 0 tensors but 1 payload frames followed"},
        /* an empty push: nothing to apply */
        {.id = 137, .code = PS_EPROTO, .text = "push carries no gradients"},
    };
    expect_bad_pushes(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(push_nbytes_mismatch) {
    static const bad_push cases[] = {
        /* nbytes disagrees with the shape (the frame agrees with nbytes) */
        {.id = 112, .n_metas = 1, .meta = {W_23}, .nbytes = 20, .n_frames = 1, .frame_len = {20},
         .code = PS_EPROTO, .text = "tensor 'w': shape gives 24 bytes but nbytes says 20"},
        /* nbytes disagrees with the shape and the frame (which agree) */
        {.id = 135, .n_metas = 1, .meta = {W_23}, .nbytes = 20, .n_frames = 1, .frame_len = {GW},
         .code = PS_EPROTO, .text = "tensor 'w': shape gives 24 bytes but nbytes says 20"},
        /* nbytes right, the frame is short */
        {.id = 113, .n_metas = 1, .meta = {W_23}, .n_frames = 1, .frame_len = {GW - 1},
         .code = PS_EPROTO, .text = "tensor 'w': frame has 23 bytes, header says 24"},
    };
    expect_bad_pushes(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(push_worker_index_out_of_range) {
    static const bad_push cases[] = {
        /* the job has one worker: index 0 */
        {.id = 122, .n_metas = 1, .meta = {W_23}, .worker = 1, .n_frames = 1, .frame_len = {GW},
         .code = PS_EINVAL, .text = "worker index 1 out of range (job has 1 workers)"},
        {.id = 123, .n_metas = 1, .meta = {W_23}, .worker = UINT32_MAX, .n_frames = 1,
         .frame_len = {GW}, .code = PS_EINVAL, .text = "worker index 4294967295 out of range"},
    };
    expect_bad_pushes(cases, sizeof cases / sizeof cases[0]);
}
END_TEST
/* clang-format on */

START_TEST(wrong_protocol_version) {
    Ps__Header h = req_header(114);
    h.protocol_version = PS_PROTOCOL_VERSION + 1;
    Ps__Hello hello = PS__HELLO__INIT;
    hello.num_workers = 1;
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    expect_bad_request(&h, NULL, NULL, 0, PS_EVERSION, "not supported (this side speaks");
}
END_TEST

START_TEST(garbage_header) {
    const unsigned char junk[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    /* nothing decoded: request id 0 */
    expect_bad_frames((const void *[]){junk}, (const size_t[]){sizeof junk}, 1, PS_EPROTO,
                      "header frame is not a valid protobuf Header");
    const char http[] = "GET / HTTP/1.1\r\nHost: psd\r\n\r\n";
    expect_bad_frames((const void *[]){http, "trailing"}, (const size_t[]){sizeof http - 1, 8}, 2,
                      PS_EPROTO, "header frame is not a valid protobuf Header");
}
END_TEST

START_TEST(empty_header_frame) {
    expect_bad_frames((const void *[]){""}, (const size_t[]){0}, 1, PS_EPROTO,
                      "header frame of 0 bytes");
}
END_TEST

START_TEST(header_without_body) {
    Ps__Header h = req_header(115); /* the header decodes: its id is echoed */
    expect_bad_request(&h, NULL, NULL, 0, PS_EPROTO, "header has no body");
}
END_TEST

START_TEST(reply_type_as_request) {
    Ps__Header h = req_header(116);
    Ps__Welcome w = PS__WELCOME__INIT;
    h.body_case = PS__HEADER__BODY_WELCOME;
    h.welcome = &w;
    expect_bad_request(&h, NULL, NULL, 0, PS_EPROTO, "is not something psd serves");
}
END_TEST

START_TEST(pull_with_payload_frames) {
    float junk[NW] = {0};
    pull_req q;
    pull_req_init(&q, 117, (char *[]){"w"}, 1, 0);
    expect_bad_request(&q.h, (const void *[]){junk}, (const size_t[]){sizeof junk}, 1, PS_EPROTO,
                       "Pull takes no payload frames but 1 followed");
}
END_TEST

START_TEST(pull_future_version) {
    /* sync defers only the next version; two ahead can never be answered in
     * order: ESTALE tells the client its idea of the shard is out of date */
    pull_req q;
    pull_req_init(&q, 118, (char *[]){"w"}, 1, 2);
    expect_bad_request(&q.h, NULL, NULL, 0, PS_ESTALE,
                       "pull asks for version 2 but the shard is at 0");
}
END_TEST

/* Regression test for a bug found while writing it (fixed in ps-server/dispatch.c): a message
 * with more than PS_WIRE_MAX_FRAMES payload frames was rejected before its header was decoded,
 * so the Error reply carried request_id 0; ps_client drops replies to ids it did not ask for,
 * so a worker with more than 1024 tensors on one shard saw ETIMEDOUT after the full timeout
 * instead of EPROTO. */
START_TEST(too_many_frames) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    size_t n = PS_WIRE_MAX_FRAMES + 10;
    const void **pl = calloc(n, sizeof *pl);
    size_t *lens = calloc(n, sizeof *lens);
    ck_assert_ptr_nonnull(pl);
    ck_assert_ptr_nonnull(lens);
    static const float one = 1.0f;
    for (size_t i = 0; i < n; i++) {
        pl[i] = &one;
        lens[i] = sizeof one;
    }
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "w", (const size_t[]){2, 3}, 2, sb);
    Ps__TensorMeta *mp[1] = {&m};
    push_req q;
    push_req_init(&q, 119, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, pl, lens, n);
    free(pl);
    free(lens);
    ps_frames f;
    Ps__Header *h = raw_recv(&r, REPLY_MS, &f);
    ck_assert_msg(h != NULL, "no reply to a message of %zu frames", n + 1);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_ERROR);
    ck_assert_int_eq(h->error->code, PS_EPROTO);
    ck_assert_msg(h->request_id == 119, "request_id %llu echoed, want 119",
                  (unsigned long long)h->request_id);
    ps_frames_close(&f);
    ps__header__free_unpacked(h, NULL);
    raw_close(&r);
    expect_unchanged();

    /* what a worker sees: the error, not a timeout */
    ps_client *c;
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, 2000);
    static float p[PS_WIRE_MAX_FRAMES + 1], g[PS_WIRE_MAX_FRAMES + 1];
    for (size_t i = 0; i <= PS_WIRE_MAX_FRAMES; i++) {
        ps_client_tensor t = {.shard = 0, .rank = 1, .shape = {1}, .param = &p[i], .grad = &g[i]};
        snprintf(t.name, sizeof t.name, "t%zu", i);
        t.opt = ps_opt_spec_default(PS_OPT_SGD);
        ck_assert_int_eq(ps_client_add(c, &t), PS_OK);
    }
    int rc = ps_client_create_vars(c, NULL);
    ck_assert_msg(rc == PS_EPROTO, "create_vars of %u tensors: %s (%s), want EPROTO",
                  PS_WIRE_MAX_FRAMES + 1, ps_errname(rc), ps_client_error(c));
    ps_client_close(c);
}
END_TEST

START_TEST(pull_too_many_names) {
    char *names[PS_WIRE_MAX_FRAMES + 1];
    for (size_t i = 0; i <= PS_WIRE_MAX_FRAMES; i++)
        names[i] = "w";
    pull_req q;
    pull_req_init(&q, 133, names, PS_WIRE_MAX_FRAMES + 1, 0);
    expect_bad_request(&q.h, NULL, NULL, 0, PS_EPROTO, "pull of 1025 names (allowed 1..1024)");
    pull_req_init(&q, 134, names, 0, 0); /* and none at all */
    expect_bad_request(&q.h, NULL, NULL, 0, PS_EPROTO, "pull of 0 names (allowed 1..1024)");
}
END_TEST

/* A NaN or Inf anywhere in a push rejects all of it: nothing is accumulated, the worker has
 * not pushed for the step, and its next good push completes the step normally. */
START_TEST(nan_gradient_rejected) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float gw[NW] = {100, 100, 100, 100, 100, 100}, gb[NB] = {1, 2, NAN, 4};
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m[0], "w", (const size_t[]){2, 3}, 2, sb[0]);
    ps_tensor_meta_f32(&m[1], "b", (const size_t[]){NB}, 1, sb[1]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    push_req q;
    push_req_init(&q, 120, mp, 2, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){gw, gb}, (const size_t[]){sizeof gw, sizeof gb}, 2);
    raw_expect_error(&r, 120, PS_EINVAL, REPLY_MS);
    gb[2] = 3;
    gw[5] = INFINITY;
    push_req_init(&q, 121, mp, 2, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){gw, gb}, (const size_t[]){sizeof gw, sizeof gb}, 2);
    raw_expect_error(&r, 121, PS_EINVAL, REPLY_MS);
    raw_close(&r);
    ck_assert_uint_eq(expect_values(&good, W0, B0), 0);

    /* the one worker's good push now closes step 0 with exactly its gradient */
    float want_w[NW], want_b[NB];
    for (int i = 0; i < NW; i++) {
        good.dw[i] = 0.5f * (float)(i + 1);
        want_w[i] = sgd(W0[i], good.dw[i]);
    }
    for (int i = 0; i < NB; i++) {
        good.db[i] = -1.0f * (float)i;
        want_b[i] = sgd(B0[i], good.db[i]);
    }
    int applied = 0;
    ck_assert_msg(ps_client_push(good.c, 0, &applied) == PS_OK, "push: %s",
                  ps_client_error(good.c));
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(expect_values(&good, want_w, want_b), 1);
}
END_TEST

static Suite *requests_suite(void) {
    Suite *s = suite_create("psd_requests");
    TCase *tc = requests_tcase(s, "bad_requests", setup_sync1);
    tcase_add_test(tc, pull_unknown_variable);
    tcase_add_test(tc, push_unknown_variable);
    tcase_add_test(tc, push_wrong_shape);
    tcase_add_test(tc, push_wrong_dtype);
    tcase_add_test(tc, push_frame_count_mismatch);
    tcase_add_test(tc, push_nbytes_mismatch);
    tcase_add_test(tc, wrong_protocol_version);
    tcase_add_test(tc, garbage_header);
    tcase_add_test(tc, empty_header_frame);
    tcase_add_test(tc, header_without_body);
    tcase_add_test(tc, reply_type_as_request);
    tcase_add_test(tc, pull_with_payload_frames);
    tcase_add_test(tc, pull_future_version);
    tcase_add_test(tc, too_many_frames);
    tcase_add_test(tc, pull_too_many_names);
    tcase_add_test(tc, nan_gradient_rejected);
    tcase_add_test(tc, push_worker_index_out_of_range);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", requests_suite);
}
