/* Wire framing tests: tensor checks against their frames, and send/receive of multipart
 * zero-copy messages over an inproc socket pair (ps_frame_floats included). */
#include <check.h>
#include <math.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ps_error.h"
#include "testutil.h"
#include "utf8.h"
#include "wire.h"
#include "wire_helpers.h"

/* ---- helpers ---- */

/* A meta built by hand, for the checks that need inconsistent fields. */
typedef struct {
    Ps__TensorMeta m;
    uint64_t shape[16];
} meta_buf;

static Ps__TensorMeta *meta_set(meta_buf *b, const char *name, const uint64_t *shape, size_t rank,
                                uint64_t nbytes) {
    ps__tensor_meta__init(&b->m);
    b->m.name = (char *)name;
    b->m.dtype = PS__DTYPE__DT_F32;
    if (rank) memcpy(b->shape, shape, rank * sizeof *shape);
    b->m.shape = b->shape;
    b->m.n_shape = rank;
    b->m.nbytes = nbytes;
    return &b->m;
}

static void frames_init(zmq_msg_t *frames, const size_t *lens, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(zmq_msg_init_size(&frames[i], lens[i]), 0);
        memset(zmq_msg_data(&frames[i]), 0, lens[i]);
    }
}

static void frames_fini(zmq_msg_t *frames, size_t n) {
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
}

/* Runs ps_tensors_check on one meta and a frame of frame_len bytes. */
static int check_one(Ps__TensorMeta *m, size_t frame_len, char *err, size_t errlen) {
    zmq_msg_t f;
    frames_init(&f, &frame_len, 1);
    Ps__TensorMeta *metas[1] = {m};
    err[0] = 0;
    int rc = ps_tensors_check(metas, 1, &f, 1, err, errlen);
    frames_fini(&f, 1);
    return rc;
}

#define EXPECT_CHECK(meta, frame_len, want)                                                        \
    do {                                                                                           \
        char err_[256];                                                                            \
        int rc_ = check_one((meta), (frame_len), err_, sizeof err_);                               \
        ck_assert_msg(rc_ == (want), "got %s, want %s (%s)", ps_errname(rc_), ps_errname(want),    \
                      err_);                                                                       \
        if ((want) != PS_OK) ck_assert_msg(err_[0] != 0, "no reason given");                       \
    } while (0)

/* Counts calls of the zero-copy free function; ZeroMQ may call it from its I/O thread. */
static atomic_int freed;
static atomic_int freed_bad_hint;

static void count_free(void *data, void *hint) {
    (void)data;
    if (hint != (void *)&freed) atomic_fetch_add(&freed_bad_hint, 1);
    atomic_fetch_add(&freed, 1);
}

/* A connected inproc DEALER -> ROUTER pair in its own context. */
typedef struct {
    void *ctx, *dealer, *router;
} sock_pair;

static void pair_open(sock_pair *p) {
    p->ctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(p->ctx);
    p->router = zmq_socket(p->ctx, ZMQ_ROUTER);
    p->dealer = zmq_socket(p->ctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(p->router);
    ck_assert_ptr_nonnull(p->dealer);
    int zero = 0, one = 1, tmo = 5000;
    zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(p->dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(p->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(p->router, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(p->dealer, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    ck_assert_int_eq(zmq_bind(p->router, "inproc://wire-test"), 0);
    ck_assert_int_eq(zmq_connect(p->dealer, "inproc://wire-test"), 0);
}

/* Closes both sockets and terminates the context: every zero-copy frame is released after. */
static void pair_close(sock_pair *p) {
    ck_assert_int_eq(zmq_close(p->dealer), 0);
    ck_assert_int_eq(zmq_close(p->router), 0);
    ck_assert_int_eq(zmq_ctx_term(p->ctx), 0);
}

/* ---- ps_tensors_check ---- */

START_TEST(tensors_good) {
    Ps__TensorMeta m[3];
    uint64_t sb[3][PS_WIRE_MAX_RANK];
    const size_t s0[2] = {2, 3}, s1[1] = {4}, s2[8] = {1, 2, 1, 2, 1, 2, 1, 2};
    ps_tensor_meta_f32(&m[0], "a", s0, 2, sb[0]);
    ps_tensor_meta_f32(&m[1], "b", s1, 1, sb[1]);
    ps_tensor_meta_f32(&m[2], "rank8", s2, 8, sb[2]);
    Ps__TensorMeta *mp[3] = {&m[0], &m[1], &m[2]};
    zmq_msg_t f[3];
    frames_init(f, (const size_t[]){24, 16, 64}, 3);
    char err[256] = "";
    int rc = ps_tensors_check(mp, 3, f, 3, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s: %s", ps_errname(rc), err);
    ck_assert_uint_eq(ps_tensor_numel(&m[0]), 6);
    ck_assert_uint_eq(ps_tensor_numel(&m[1]), 4);
    ck_assert_uint_eq(ps_tensor_numel(&m[2]), 16);
    /* no tensors and no frames is consistent too */
    ck_assert_int_eq(ps_tensors_check(NULL, 0, NULL, 0, err, sizeof err), PS_OK);
    frames_fini(f, 3);
}
END_TEST

START_TEST(tensors_count_mismatch) {
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    const size_t s[1] = {4};
    ps_tensor_meta_f32(&m[0], "a", s, 1, sb[0]);
    ps_tensor_meta_f32(&m[1], "b", s, 1, sb[1]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    zmq_msg_t f[3];
    frames_init(f, (const size_t[]){16, 16, 16}, 3);
    char err[256] = "";
    ck_assert_int_eq(ps_tensors_check(mp, 2, f, 3, err, sizeof err), PS_EPROTO); /* more */
    ck_assert_msg(err[0], "no reason given");
    ck_assert_int_eq(ps_tensors_check(mp, 2, f, 1, err, sizeof err), PS_EPROTO); /* fewer */
    ck_assert_int_eq(ps_tensors_check(mp, 2, f, 0, err, sizeof err), PS_EPROTO); /* none */
    ck_assert_int_eq(ps_tensors_check(mp, 2, f, 2, err, sizeof err), PS_OK);
    frames_fini(f, 3);
}
END_TEST

START_TEST(tensors_bad_dtype) {
    meta_buf b;
    Ps__TensorMeta *m = meta_set(&b, "x", (const uint64_t[]){4}, 1, 16);
    EXPECT_CHECK(m, 16, PS_OK);
    m->dtype = PS__DTYPE__DT_INVALID;
    EXPECT_CHECK(m, 16, PS_ESHAPE);
    m->dtype = (Ps__DType)7; /* a value this side does not know */
    EXPECT_CHECK(m, 16, PS_ESHAPE);
}
END_TEST

START_TEST(tensors_bad_rank) {
    meta_buf b;
    EXPECT_CHECK(meta_set(&b, "scalar", NULL, 0, 4), 4, PS_ESHAPE);
    const uint64_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_CHECK(meta_set(&b, "rank9", ones, 9, 4), 4, PS_ESHAPE);
    EXPECT_CHECK(meta_set(&b, "rank8", ones, 8, 4), 4, PS_OK);
}
END_TEST

START_TEST(tensors_zero_dim) {
    meta_buf b;
    EXPECT_CHECK(meta_set(&b, "z", (const uint64_t[]){3, 0}, 2, 0), 0, PS_ESHAPE);
    EXPECT_CHECK(meta_set(&b, "z", (const uint64_t[]){0}, 1, 0), 0, PS_ESHAPE);
}
END_TEST

START_TEST(tensors_nbytes_mismatch) {
    meta_buf b;
    /* frame matches nbytes, but nbytes does not match the shape */
    EXPECT_CHECK(meta_set(&b, "n", (const uint64_t[]){2, 3}, 2, 20), 20, PS_EPROTO);
    EXPECT_CHECK(meta_set(&b, "n", (const uint64_t[]){2, 3}, 2, 6), 6, PS_EPROTO);
    EXPECT_CHECK(meta_set(&b, "n", (const uint64_t[]){2, 3}, 2, 0), 0, PS_EPROTO);
    /* frame matches the shape, nbytes does not */
    EXPECT_CHECK(meta_set(&b, "n", (const uint64_t[]){2, 3}, 2, 20), 24, PS_EPROTO);
    EXPECT_CHECK(meta_set(&b, "n", (const uint64_t[]){2, 3}, 2, 0), 24, PS_EPROTO);
}
END_TEST

START_TEST(tensors_frame_length_mismatch) {
    meta_buf b;
    Ps__TensorMeta *m = meta_set(&b, "f", (const uint64_t[]){2, 3}, 2, 24);
    EXPECT_CHECK(m, 24, PS_OK);
    EXPECT_CHECK(m, 23, PS_EPROTO);
    EXPECT_CHECK(m, 25, PS_EPROTO);
    EXPECT_CHECK(m, 0, PS_EPROTO);
}
END_TEST

START_TEST(tensors_size_overflow) {
    meta_buf b;
    const uint64_t t40 = 1ull << 40;
    /* 4 * 2^80 wraps to 0 in 64 bits: must not pass as nbytes 0 */
    EXPECT_CHECK(meta_set(&b, "o", (const uint64_t[]){t40, t40}, 2, 0), 0, PS_ESHAPE);
    /* 4 * 2^62 wraps to exactly 0 as well */
    EXPECT_CHECK(meta_set(&b, "o", (const uint64_t[]){1ull << 62}, 1, 0), 0, PS_ESHAPE);
    EXPECT_CHECK(meta_set(&b, "o", (const uint64_t[]){UINT64_MAX, 2}, 2, 0), 0, PS_ESHAPE);
    /* 2^33 * 2^31 * 4 = 2^66 wraps to 0 */
    EXPECT_CHECK(meta_set(&b, "o", (const uint64_t[]){1ull << 33, 1ull << 31}, 2, 0), 0, PS_ESHAPE);
}
END_TEST

START_TEST(tensors_bad_name) {
    meta_buf b;
    EXPECT_CHECK(meta_set(&b, "", (const uint64_t[]){1}, 1, 4), 4, PS_EPROTO);
    char name[301];
    memset(name, 'n', 300);
    name[300] = 0;
    EXPECT_CHECK(meta_set(&b, name, (const uint64_t[]){1}, 1, 4), 4, PS_EPROTO);
    name[PS_WIRE_MAX_NAME + 1] = 0; /* one too long */
    EXPECT_CHECK(meta_set(&b, name, (const uint64_t[]){1}, 1, 4), 4, PS_EPROTO);
    name[PS_WIRE_MAX_NAME] = 0; /* longest allowed */
    EXPECT_CHECK(meta_set(&b, name, (const uint64_t[]){1}, 1, 4), 4, PS_OK);
}
END_TEST

/* The second tensor is the bad one: the check must look past the first. */
START_TEST(tensors_second_bad) {
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    const size_t s[1] = {4};
    ps_tensor_meta_f32(&m[0], "a", s, 1, sb[0]);
    ps_tensor_meta_f32(&m[1], "b", s, 1, sb[1]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    zmq_msg_t f[2];
    frames_init(f, (const size_t[]){16, 12}, 2);
    char err[256] = "";
    ck_assert_int_eq(ps_tensors_check(mp, 2, f, 2, err, sizeof err), PS_EPROTO);
    ck_assert_msg(strstr(err, "'b'") != NULL, "reason names the tensor: %s", err);
    frames_fini(f, 2);
}
END_TEST

START_TEST(tensor_meta_f32_fills) {
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    const size_t s[3] = {5, 1, 3};
    ps_tensor_meta_f32(&m, "name", s, 3, sb);
    check_meta(&m, "name", (const uint64_t[]){5, 1, 3}, 3);
    ck_assert_ptr_eq(m.shape, sb);
    ck_assert_uint_eq(ps_tensor_numel(&m), 15);
}
END_TEST

/* ---- send and receive ---- */

START_TEST(send_recv_multipart_intact) {
    sock_pair p;
    pair_open(&p);
    atomic_store(&freed, 0);
    atomic_store(&freed_bad_hint, 0);

    float *a = malloc(6 * sizeof *a), *big = malloc(10000 * sizeof *big);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(big);
    for (int i = 0; i < 6; i++)
        a[i] = (float)i + 0.5f;
    ps_test_fill_uniform(big, 10000, 1, -1, 1);
    static const float borrowed[3] = {1, 2, 3};
    float big_copy[10000];
    memcpy(big_copy, big, sizeof big_copy);

    ps_payload pl[4] = {
        {a, 6 * sizeof *a, count_free, &freed},
        {borrowed, sizeof borrowed, NULL, NULL},
        {"", 0, count_free, &freed}, /* an empty frame is still a frame */
        {big, 10000 * sizeof *big, count_free, &freed},
    };
    Ps__Header h = hello_header(31);
    ck_assert_int_eq(ps_wire_send(p.dealer, NULL, 0, &h, pl, 4, 0), PS_OK);

    ps_frames f;
    ck_assert_int_eq(ps_frames_recv(p.router, 0, &f), PS_OK);
    ck_assert_uint_eq(f.n, 6); /* identity, header, 4 payloads */
    ck_assert(!f.truncated);
    Ps__Header *d = NULL;
    char err[256];
    ck_assert_int_eq(ps_header_decode(zmq_msg_data(&f.frames[1]), zmq_msg_size(&f.frames[1]), &d,
                                      err, sizeof err),
                     PS_OK);
    ck_assert_uint_eq(d->request_id, 31);
    ck_assert_int_eq(d->body_case, PS__HEADER__BODY_HELLO);
    ps__header__free_unpacked(d, NULL);
    size_t total = zmq_msg_size(&f.frames[0]) + zmq_msg_size(&f.frames[1]);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(zmq_msg_size(&f.frames[i + 2]), pl[i].len);
        ck_assert_int_eq(memcmp(zmq_msg_data(&f.frames[i + 2]),
                                i == 3 ? (const void *)big_copy : pl[i].data, pl[i].len),
                         0);
        total += pl[i].len;
    }
    ck_assert_uint_eq(f.bytes, total);

    /* answer through the ROUTER with the identity just received */
    size_t id_len = zmq_msg_size(&f.frames[0]);
    unsigned char id[256];
    memcpy(id, zmq_msg_data(&f.frames[0]), id_len);
    ps_frames_close(&f);
    ck_assert_ptr_null(f.frames);
    ck_assert_uint_eq(f.n, 0);

    Ps__Header r = hello_header(32);
    ps_payload back[2] = {{borrowed, sizeof borrowed, NULL, NULL}, {borrowed, 4, NULL, NULL}};
    ck_assert_int_eq(ps_wire_send(p.router, id, id_len, &r, back, 2, 0), PS_OK);
    ck_assert_int_eq(ps_frames_recv(p.dealer, 0, &f), PS_OK);
    ck_assert_uint_eq(f.n, 3); /* no identity on the DEALER side */
    ck_assert_uint_eq(zmq_msg_size(&f.frames[1]), sizeof borrowed);
    ck_assert_uint_eq(zmq_msg_size(&f.frames[2]), 4);
    ck_assert_int_eq(memcmp(zmq_msg_data(&f.frames[2]), borrowed, 4), 0);
    ps_frames_close(&f);

    /* a header-only message */
    ck_assert_int_eq(ps_wire_send(p.dealer, NULL, 0, &h, NULL, 0, 0), PS_OK);
    ck_assert_int_eq(ps_frames_recv(p.router, 0, &f), PS_OK);
    ck_assert_uint_eq(f.n, 2);
    ps_frames_close(&f);

    /* nothing left: a non-blocking receive times out */
    ck_assert_int_eq(ps_frames_recv(p.router, ZMQ_DONTWAIT, &f), PS_ETIMEDOUT);
    ck_assert_uint_eq(f.n, 0);

    pair_close(&p);
    /* the three payloads with a free_fn were released exactly once, with their hint */
    ck_assert_int_eq(atomic_load(&freed), 3);
    ck_assert_int_eq(atomic_load(&freed_bad_hint), 0);
    /* count_free does not free: do it here */
    free(a);
    free(big);
}
END_TEST

START_TEST(send_failure_frees_payloads) {
    void *ctx = zmq_ctx_new();
    void *dealer = zmq_socket(ctx, ZMQ_DEALER); /* never connected: nowhere to send */
    int zero = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
    atomic_store(&freed, 0);
    atomic_store(&freed_bad_hint, 0);
    static float buf[4];
    ps_payload pl[3] = {{buf, sizeof buf, count_free, &freed},
                        {buf, sizeof buf, NULL, NULL},
                        {buf, 8, count_free, &freed}};
    Ps__Header h = hello_header(1);
    ck_assert_int_eq(ps_wire_send(dealer, NULL, 0, &h, pl, 3, ZMQ_DONTWAIT), PS_EIO);
    ck_assert_int_eq(atomic_load(&freed), 2);

    /* ROUTER_MANDATORY to an unknown peer fails on the identity frame */
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int one = 1;
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    ck_assert_int_eq(zmq_bind(router, "inproc://nobody"), 0);
    ck_assert_int_eq(ps_wire_send(router, "ghost", 5, &h, pl, 3, ZMQ_DONTWAIT), PS_EIO);
    ck_assert_int_eq(atomic_load(&freed), 4);
    ck_assert_int_eq(atomic_load(&freed_bad_hint), 0);

    zmq_close(router);
    zmq_close(dealer);
    ck_assert_int_eq(zmq_ctx_term(ctx), 0);
    ck_assert_int_eq(atomic_load(&freed), 4); /* and never a second time */
}
END_TEST

/* Sends header + n_payloads empty frames from the DEALER. */
static void send_many(sock_pair *p, size_t n_payloads, uint64_t request_id) {
    ps_payload *pl = calloc(n_payloads, sizeof *pl);
    ck_assert_ptr_nonnull(pl);
    for (size_t i = 0; i < n_payloads; i++)
        pl[i] = (ps_payload){"x", 1, NULL, NULL};
    Ps__Header h = hello_header(request_id);
    ck_assert_int_eq(ps_wire_send(p->dealer, NULL, 0, &h, pl, n_payloads, 0), PS_OK);
    free(pl);
}

START_TEST(recv_too_many_frames_truncated) {
    sock_pair p;
    pair_open(&p);
    ps_frames f;

    /* at the limit: identity + header + PS_WIRE_MAX_FRAMES payloads all kept */
    send_many(&p, PS_WIRE_MAX_FRAMES, 1);
    ck_assert_int_eq(ps_frames_recv(p.router, 0, &f), PS_OK);
    ck_assert(!f.truncated);
    ck_assert_uint_eq(f.n, PS_WIRE_MAX_FRAMES + 2);
    ps_frames_close(&f);

    /* one over: truncated, the kept frames bounded, the rest read and dropped */
    send_many(&p, PS_WIRE_MAX_FRAMES + 1, 2);
    ck_assert_int_eq(ps_frames_recv(p.router, 0, &f), PS_OK);
    ck_assert(f.truncated);
    ck_assert_uint_le(f.n, PS_WIRE_MAX_FRAMES + 2);
    ps_frames_close(&f);

    /* far over */
    send_many(&p, 3 * PS_WIRE_MAX_FRAMES, 3);
    ck_assert_int_eq(ps_frames_recv(p.router, 0, &f), PS_OK);
    ck_assert(f.truncated);
    ck_assert_uint_le(f.n, PS_WIRE_MAX_FRAMES + 2);
    ps_frames_close(&f);

    /* the dropped frames did not leak into the next message */
    send_many(&p, 1, 4);
    ck_assert_int_eq(ps_frames_recv(p.router, 0, &f), PS_OK);
    ck_assert(!f.truncated);
    ck_assert_uint_eq(f.n, 3);
    Ps__Header *d = NULL;
    char err[256];
    ck_assert_int_eq(ps_header_decode(zmq_msg_data(&f.frames[1]), zmq_msg_size(&f.frames[1]), &d,
                                      err, sizeof err),
                     PS_OK);
    ck_assert_uint_eq(d->request_id, 4);
    ps__header__free_unpacked(d, NULL);
    ps_frames_close(&f);
    pair_close(&p);
}
END_TEST

/* ---- ps_frame_floats ---- */

START_TEST(frame_floats_aligned_in_place) {
    static float vals[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f};
    zmq_msg_t m;
    ck_assert_int_eq(zmq_msg_init_data(&m, vals, sizeof vals, NULL, NULL), 0);
    float *scratch = NULL;
    size_t cap = 0;
    const float *p = ps_frame_floats(&m, &scratch, &cap);
    ck_assert_ptr_eq(p, vals); /* read in place, no copy */
    ck_assert_ptr_null(scratch);
    ck_assert_uint_eq(cap, 0);
    zmq_msg_close(&m);
}
END_TEST

START_TEST(frame_floats_misaligned_copied) {
    const float vals[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f};
    alignas(16) unsigned char buf[sizeof vals + 4];
    memcpy(buf + 1, vals, sizeof vals);
    zmq_msg_t m;
    ck_assert_int_eq(zmq_msg_init_data(&m, buf + 1, sizeof vals, NULL, NULL), 0);
    float *scratch = NULL;
    size_t cap = 0;
    const float *p = ps_frame_floats(&m, &scratch, &cap);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_ne(p, (const void *)(buf + 1));
    ck_assert_ptr_eq(p, scratch);
    ck_assert_uint_eq((uintptr_t)p % alignof(float), 0);
    ck_assert_uint_ge(cap, sizeof vals);
    for (int i = 0; i < 5; i++)
        ck_assert_float_eq(p[i], vals[i]);
    zmq_msg_close(&m);

    /* a smaller misaligned frame reuses the scratch buffer */
    float *first = scratch;
    ck_assert_int_eq(zmq_msg_init_data(&m, buf + 3, 2 * sizeof(float), NULL, NULL), 0);
    memcpy(buf + 3, vals + 2, 2 * sizeof(float));
    p = ps_frame_floats(&m, &scratch, &cap);
    ck_assert_ptr_eq(p, first);
    ck_assert_float_eq(p[0], vals[2]);
    ck_assert_float_eq(p[1], vals[3]);
    zmq_msg_close(&m);

    /* a bigger one grows it */
    size_t n = 1000;
    unsigned char *big = malloc(n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(big);
    float *src = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(src);
    ps_test_fill_uniform(src, n, 9, -5, 5);
    memcpy(big + 1, src, n * sizeof(float));
    ck_assert_int_eq(zmq_msg_init_data(&m, big + 1, n * sizeof(float), NULL, NULL), 0);
    p = ps_frame_floats(&m, &scratch, &cap);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_ge(cap, n * sizeof(float));
    ck_assert_int_eq(memcmp(p, src, n * sizeof(float)), 0);
    zmq_msg_close(&m);
    free(big);
    free(src);
    free(scratch);
}
END_TEST

/* ---- ps_grads_check and ps_grad_decode: encoded gradients (--compression) ---- */

static int grads_check_one(Ps__TensorMeta *m, size_t frame_len, char *err, size_t errlen) {
    zmq_msg_t f;
    frames_init(&f, &frame_len, 1);
    Ps__TensorMeta *metas[1] = {m};
    err[0] = 0;
    int rc = ps_grads_check(metas, 1, &f, 1, err, errlen);
    frames_fini(&f, 1);
    return rc;
}

#define EXPECT_GRADS(meta, frame_len, want)                                                        \
    do {                                                                                           \
        char err_[256];                                                                            \
        int rc_ = grads_check_one((meta), (frame_len), err_, sizeof err_);                         \
        ck_assert_msg(rc_ == (want), "got %s, want %s (%s)", ps_errname(rc_), ps_errname(want),    \
                      err_);                                                                       \
        if ((want) != PS_OK) ck_assert_msg(err_[0] != 0, "no reason given");                       \
    } while (0)

START_TEST(grads_encoded_lengths) {
    meta_buf b;
    Ps__TensorMeta *m = meta_set(&b, "w", (const uint64_t[]){3, 5}, 2, 60);
    EXPECT_GRADS(m, 60, PS_OK); /* float32 as before */
    m->dtype = PS__DTYPE__DT_F16;
    EXPECT_CHECK(m, 60, PS_ESHAPE); /* pulls and creates stay float32 */
    EXPECT_GRADS(m, 60, PS_EPROTO); /* nbytes must be numel * 2 */
    m->nbytes = 30;
    EXPECT_GRADS(m, 30, PS_OK);
    EXPECT_GRADS(m, 29, PS_EPROTO); /* frame length */
    EXPECT_GRADS(m, 60, PS_EPROTO);
    m->dtype = PS__DTYPE__DT_BF16;
    EXPECT_GRADS(m, 30, PS_OK);
    m->nnz = 1; /* nnz on a dense tensor */
    EXPECT_GRADS(m, 30, PS_EPROTO);
    m->dtype = PS__DTYPE__DT_TOPK_F32;
    m->nnz = 4;
    m->nbytes = 32;
    EXPECT_GRADS(m, 32, PS_OK);
    EXPECT_GRADS(m, 31, PS_EPROTO);
    m->nbytes = 31;
    EXPECT_GRADS(m, 31, PS_EPROTO); /* nbytes != nnz * 8 */
    m->nnz = 0;
    m->nbytes = 0;
    EXPECT_GRADS(m, 0, PS_EPROTO); /* nnz 0 */
    m->nnz = 16; /* > numel (15) */
    m->nbytes = 128;
    EXPECT_GRADS(m, 128, PS_EPROTO);
    m->nnz = 15;
    m->nbytes = 120;
    EXPECT_GRADS(m, 120, PS_OK);
    m->nnz = UINT64_MAX; /* nnz * 8 would overflow */
    m->nbytes = 0;
    EXPECT_GRADS(m, 0, PS_EPROTO);
    m->dtype = (Ps__DType)9;
    m->nnz = 0;
    m->nbytes = 60;
    EXPECT_GRADS(m, 60, PS_ESHAPE);
}
END_TEST

static void put_pair(unsigned char *p, size_t i, uint32_t idx, float v) {
    memcpy(p + 8 * i, &idx, 4);
    memcpy(p + 8 * i + 4, &v, 4);
}

START_TEST(grads_decode) {
    meta_buf b;
    Ps__TensorMeta *m = meta_set(&b, "w", (const uint64_t[]){6}, 1, 12);
    m->dtype = PS__DTYPE__DT_F16;
    zmq_msg_t f;
    ck_assert_int_eq(zmq_msg_init_size(&f, 12), 0);
    const uint16_t h[6] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8000, 0x3555};
    memcpy(zmq_msg_data(&f), h, 12);
    float out[6];
    char err[256] = "";
    ck_assert_int_eq(ps_grad_decode(m, &f, out, err, sizeof err), PS_OK);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -2.0f);
    ck_assert_float_eq(out[2], 0x1p-24f);
    ck_assert_float_eq(out[3], 65504.0f);
    ck_assert_float_eq(out[5], 0.333251953125f);
    m->dtype = PS__DTYPE__DT_BF16;
    ck_assert_int_eq(ps_grad_decode(m, &f, out, err, sizeof err), PS_OK);
    ck_assert_float_eq(out[0], 0x1p-7f); /* 0x3C00 as bfloat16: 0x3C000000 as float */
    ck_assert_float_eq(out[1], -2.0f); /* 0xC000: 0xC0000000 */
    zmq_msg_close(&f);
    /* top-k: 3 pairs into 6 values; then bad indices refused */
    m->dtype = PS__DTYPE__DT_TOPK_F32;
    m->nnz = 3;
    m->nbytes = 24;
    ck_assert_int_eq(zmq_msg_init_size(&f, 24), 0);
    unsigned char *p = zmq_msg_data(&f);
    put_pair(p, 0, 0, 1.5f);
    put_pair(p, 1, 2, -3.0f);
    put_pair(p, 2, 5, 7.0f);
    for (int i = 0; i < 6; i++)
        out[i] = 99;
    ck_assert_int_eq(ps_grad_decode(m, &f, out, err, sizeof err), PS_OK);
    const float want[6] = {1.5f, 0, -3.0f, 0, 0, 7.0f};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(out[i], want[i]);
    put_pair(p, 2, 6, 7.0f); /* index == numel */
    ck_assert_int_eq(ps_grad_decode(m, &f, out, err, sizeof err), PS_EPROTO);
    ck_assert_msg(strstr(err, "index 6"), "%s", err);
    put_pair(p, 2, 2, 7.0f); /* repeated */
    ck_assert_int_eq(ps_grad_decode(m, &f, out, err, sizeof err), PS_EPROTO);
    put_pair(p, 2, 1, 7.0f); /* decreasing */
    ck_assert_int_eq(ps_grad_decode(m, &f, out, err, sizeof err), PS_EPROTO);
    put_pair(p, 2, UINT32_MAX, 7.0f);
    ck_assert_int_eq(ps_grad_decode(m, &f, out, err, sizeof err), PS_EPROTO);
    zmq_msg_close(&f);
}
END_TEST

static Suite *wire_frames_suite(void) {
    Suite *s = suite_create("wire");
    TCase *tc;
    tc = tcase_create("tensors_check");
    tcase_add_test(tc, tensors_good);
    tcase_add_test(tc, tensors_count_mismatch);
    tcase_add_test(tc, tensors_bad_dtype);
    tcase_add_test(tc, grads_encoded_lengths);
    tcase_add_test(tc, grads_decode);
    tcase_add_test(tc, tensors_bad_rank);
    tcase_add_test(tc, tensors_zero_dim);
    tcase_add_test(tc, tensors_nbytes_mismatch);
    tcase_add_test(tc, tensors_frame_length_mismatch);
    tcase_add_test(tc, tensors_size_overflow);
    tcase_add_test(tc, tensors_bad_name);
    tcase_add_test(tc, tensors_second_bad);
    tcase_add_test(tc, tensor_meta_f32_fills);
    suite_add_tcase(s, tc);

    tc = tcase_create("send_recv");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, send_recv_multipart_intact);
    tcase_add_test(tc, send_failure_frees_payloads);
    tcase_add_test(tc, recv_too_many_frames_truncated);
    tcase_add_test(tc, frame_floats_aligned_in_place);
    tcase_add_test(tc, frame_floats_misaligned_copied);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(wire_frames_suite());
}
