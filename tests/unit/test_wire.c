/* Wire framing tests: header encode/decode for every body type, decode and tensor-check
 * failures, and send/receive of multipart zero-copy messages over an inproc socket pair. */
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

/* ---- helpers ---- */

/* Packs h and decodes it again with ps_header_decode; asserts PS_OK. The caller frees. */
static Ps__Header *roundtrip(const Ps__Header *h) {
    size_t len = ps__header__get_packed_size(h);
    uint8_t *buf = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(ps__header__pack(h, buf), len);
    Ps__Header *out = NULL;
    char err[256] = "";
    int rc = ps_header_decode(buf, len, &out, err, sizeof err);
    free(buf);
    ck_assert_msg(rc == PS_OK, "decode: %s (%s)", ps_errname(rc), err);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(out->protocol_version, PS_PROTOCOL_VERSION);
    ck_assert_uint_eq(out->request_id, h->request_id);
    ck_assert_int_eq(out->body_case, h->body_case);
    return out;
}

static Ps__Header header(uint64_t request_id) {
    Ps__Header h = PS__HEADER__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = request_id;
    return h;
}

static void check_meta(const Ps__TensorMeta *m, const char *name, const uint64_t *shape,
                       size_t rank) {
    ck_assert_str_eq(m->name, name);
    ck_assert_int_eq(m->dtype, PS__DTYPE__DT_F32);
    ck_assert_uint_eq(m->n_shape, rank);
    uint64_t bytes = 4;
    for (size_t d = 0; d < rank; d++) {
        ck_assert_uint_eq(m->shape[d], shape[d]);
        bytes *= shape[d];
    }
    ck_assert_uint_eq(m->nbytes, bytes);
}

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

static Ps__Header hello_header(uint64_t request_id) {
    static Ps__Hello hello = PS__HELLO__INIT;
    hello.worker_index = 1;
    hello.num_workers = 2;
    Ps__Header h = header(request_id);
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    return h;
}

/* ---- header round trips ---- */

START_TEST(job_id_validity) {
    ck_assert(ps_job_id_valid("default"));
    ck_assert(ps_job_id_valid("mnist-run.3_A"));
    char longest[PS_WIRE_MAX_JOB_ID + 2];
    memset(longest, 'a', sizeof longest);
    longest[PS_WIRE_MAX_JOB_ID] = '\0';
    ck_assert(ps_job_id_valid(longest));
    longest[PS_WIRE_MAX_JOB_ID] = 'a';
    longest[PS_WIRE_MAX_JOB_ID + 1] = '\0';
    ck_assert(!ps_job_id_valid(longest)); /* one byte too long */
    ck_assert(!ps_job_id_valid(""));
    ck_assert(!ps_job_id_valid(NULL));
    ck_assert(!ps_job_id_valid("a b"));
    ck_assert(!ps_job_id_valid("a/b"));
    ck_assert(!ps_job_id_valid("caf\xc3\xa9"));
}
END_TEST

START_TEST(roundtrip_hello) {
    Ps__Header h = header(42);
    Ps__Hello hello = PS__HELLO__INIT;
    hello.worker_index = 3;
    hello.num_workers = 4;
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    Ps__Header *d = roundtrip(&h);
    ck_assert_uint_eq(d->hello->worker_index, 3);
    ck_assert_uint_eq(d->hello->num_workers, 4);
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_welcome) {
    Ps__Header h = header(UINT64_MAX);
    Ps__Welcome w = PS__WELCOME__INIT;
    w.shard_index = 1;
    w.num_shards = 3;
    w.mode = PS__MODE__MODE_ASYNC;
    w.version = 1ull << 40;
    w.num_workers = 8;
    w.num_vars = 5;
    h.body_case = PS__HEADER__BODY_WELCOME;
    h.welcome = &w;
    Ps__Header *d = roundtrip(&h);
    ck_assert_uint_eq(d->welcome->shard_index, 1);
    ck_assert_uint_eq(d->welcome->num_shards, 3);
    ck_assert_int_eq(d->welcome->mode, PS__MODE__MODE_ASYNC);
    ck_assert_uint_eq(d->welcome->version, 1ull << 40);
    ck_assert_uint_eq(d->welcome->num_workers, 8);
    ck_assert_uint_eq(d->welcome->num_vars, 5);
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_create_vars_with_optimizers) {
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    const size_t s0[2] = {3, 5}, s1[1] = {7};
    ps_tensor_meta_f32(&m[0], "dense/kernel", s0, 2, sb[0]);
    ps_tensor_meta_f32(&m[1], "dense/bias", s1, 1, sb[1]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    Ps__Optimizer o[2];
    ps__optimizer__init(&o[0]);
    o[0].kind = PS__OPT_KIND__OPT_ADAMW;
    o[0].lr = 1e-3f;
    o[0].beta1 = 0.9f;
    o[0].beta2 = 0.999f;
    o[0].epsilon = 1e-7f;
    o[0].weight_decay = 0.004f;
    ps__optimizer__init(&o[1]);
    o[1].kind = PS__OPT_KIND__OPT_MOMENTUM;
    o[1].lr = 0.05f;
    o[1].momentum = 0.9f;
    o[1].nesterov = 1;
    Ps__Optimizer *op[2] = {&o[0], &o[1]};
    Ps__CreateVars cv = PS__CREATE_VARS__INIT;
    cv.vars = mp;
    cv.n_vars = 2;
    cv.optimizers = op;
    cv.n_optimizers = 2;
    Ps__Header h = header(7);
    h.body_case = PS__HEADER__BODY_CREATE_VARS;
    h.create_vars = &cv;
    Ps__Header *d = roundtrip(&h);
    const Ps__CreateVars *g = d->create_vars;
    ck_assert_uint_eq(g->n_vars, 2);
    ck_assert_uint_eq(g->n_optimizers, 2);
    check_meta(g->vars[0], "dense/kernel", (const uint64_t[]){3, 5}, 2);
    check_meta(g->vars[1], "dense/bias", (const uint64_t[]){7}, 1);
    ck_assert_int_eq(g->optimizers[0]->kind, PS__OPT_KIND__OPT_ADAMW);
    ck_assert_float_eq(g->optimizers[0]->lr, 1e-3f);
    ck_assert_float_eq(g->optimizers[0]->beta1, 0.9f);
    ck_assert_float_eq(g->optimizers[0]->beta2, 0.999f);
    ck_assert_float_eq(g->optimizers[0]->epsilon, 1e-7f);
    ck_assert_float_eq(g->optimizers[0]->weight_decay, 0.004f);
    ck_assert_int_eq(g->optimizers[1]->kind, PS__OPT_KIND__OPT_MOMENTUM);
    ck_assert_float_eq(g->optimizers[1]->lr, 0.05f);
    ck_assert_float_eq(g->optimizers[1]->momentum, 0.9f);
    ck_assert(g->optimizers[1]->nesterov);
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_create_vars_reply) {
    protobuf_c_boolean created[3] = {1, 0, 1};
    Ps__CreateVarsReply r = PS__CREATE_VARS_REPLY__INIT;
    r.created = created;
    r.n_created = 3;
    r.version = 12;
    Ps__Header h = header(8);
    h.body_case = PS__HEADER__BODY_CREATE_VARS_REPLY;
    h.create_vars_reply = &r;
    Ps__Header *d = roundtrip(&h);
    ck_assert_uint_eq(d->create_vars_reply->n_created, 3);
    ck_assert(d->create_vars_reply->created[0]);
    ck_assert(!d->create_vars_reply->created[1]);
    ck_assert(d->create_vars_reply->created[2]);
    ck_assert_uint_eq(d->create_vars_reply->version, 12);
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_pull) {
    char *names[2] = {"a", "layer/b"};
    Ps__Pull p = PS__PULL__INIT;
    p.names = names;
    p.n_names = 2;
    p.min_version = 9;
    Ps__Header h = header(10);
    h.body_case = PS__HEADER__BODY_PULL;
    h.pull = &p;
    Ps__Header *d = roundtrip(&h);
    ck_assert_uint_eq(d->pull->n_names, 2);
    ck_assert_str_eq(d->pull->names[0], "a");
    ck_assert_str_eq(d->pull->names[1], "layer/b");
    ck_assert_uint_eq(d->pull->min_version, 9);
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_pull_reply) {
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    const size_t s[3] = {2, 3, 4};
    ps_tensor_meta_f32(&m, "t", s, 3, sb);
    Ps__TensorMeta *mp[1] = {&m};
    Ps__PullReply r = PS__PULL_REPLY__INIT;
    r.tensors = mp;
    r.n_tensors = 1;
    r.version = 77;
    Ps__Header h = header(11);
    h.body_case = PS__HEADER__BODY_PULL_REPLY;
    h.pull_reply = &r;
    Ps__Header *d = roundtrip(&h);
    ck_assert_uint_eq(d->pull_reply->n_tensors, 1);
    check_meta(d->pull_reply->tensors[0], "t", (const uint64_t[]){2, 3, 4}, 3);
    ck_assert_uint_eq(d->pull_reply->tensors[0]->nbytes, 96);
    ck_assert_uint_eq(d->pull_reply->version, 77);
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_push_and_reply) {
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    const size_t s0[1] = {10}, s1[2] = {1, 1};
    ps_tensor_meta_f32(&m[0], "g0", s0, 1, sb[0]);
    ps_tensor_meta_f32(&m[1], "g1", s1, 2, sb[1]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    Ps__Push p = PS__PUSH__INIT;
    p.grads = mp;
    p.n_grads = 2;
    p.step = 5;
    p.worker_index = 1;
    Ps__Header h = header(12);
    h.body_case = PS__HEADER__BODY_PUSH;
    h.push = &p;
    Ps__Header *d = roundtrip(&h);
    ck_assert_uint_eq(d->push->n_grads, 2);
    check_meta(d->push->grads[0], "g0", (const uint64_t[]){10}, 1);
    check_meta(d->push->grads[1], "g1", (const uint64_t[]){1, 1}, 2);
    ck_assert_uint_eq(d->push->step, 5);
    ck_assert_uint_eq(d->push->worker_index, 1);
    ps__header__free_unpacked(d, NULL);

    Ps__PushReply r = PS__PUSH_REPLY__INIT;
    r.version = 6;
    r.applied = 1;
    h = header(13);
    h.body_case = PS__HEADER__BODY_PUSH_REPLY;
    h.push_reply = &r;
    d = roundtrip(&h);
    ck_assert_uint_eq(d->push_reply->version, 6);
    ck_assert(d->push_reply->applied);
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_stats_reply) {
    Ps__VarStats v = PS__VAR_STATS__INIT;
    v.name = "w";
    v.numel = 6;
    v.optimizer = "sgd";
    Ps__VarStats *vp[1] = {&v};
    Ps__StatsReply st = PS__STATS_REPLY__INIT;
    st.version = 3;
    st.mode = PS__MODE__MODE_SYNC;
    st.num_workers = 2;
    st.requests = 100;
    st.errors = 4;
    st.stale_pushes = 1;
    st.uptime_seconds = 1.5;
    st.vars = vp;
    st.n_vars = 1;
    st.updates_applied = 3;
    Ps__Header h = header(14);
    h.body_case = PS__HEADER__BODY_STATS_REPLY;
    h.stats_reply = &st;
    Ps__Header *d = roundtrip(&h);
    const Ps__StatsReply *g = d->stats_reply;
    ck_assert_uint_eq(g->version, 3);
    ck_assert_uint_eq(g->num_workers, 2);
    ck_assert_uint_eq(g->requests, 100);
    ck_assert_uint_eq(g->errors, 4);
    ck_assert_uint_eq(g->stale_pushes, 1);
    ck_assert_uint_eq(g->updates_applied, 3);
    ck_assert_double_eq(g->uptime_seconds, 1.5);
    ck_assert_uint_eq(g->n_vars, 1);
    ck_assert_str_eq(g->vars[0]->name, "w");
    ck_assert_uint_eq(g->vars[0]->numel, 6);
    ck_assert_str_eq(g->vars[0]->optimizer, "sgd");
    ps__header__free_unpacked(d, NULL);
}
END_TEST

START_TEST(roundtrip_error) {
    Ps__Error e = PS__ERROR__INIT;
    e.code = PS_ESTALE;
    e.code_name = (char *)ps_errname(PS_ESTALE);
    e.message = "stale push for step 0";
    Ps__Header h = header(15);
    h.body_case = PS__HEADER__BODY_ERROR;
    h.error = &e;
    Ps__Header *d = roundtrip(&h);
    ck_assert_int_eq(d->error->code, PS_ESTALE);
    ck_assert_str_eq(d->error->code_name, "ESTALE");
    ck_assert_str_eq(d->error->message, "stale push for step 0");
    ps__header__free_unpacked(d, NULL);
}
END_TEST

/* Bodies without fields must still count as "a body is set". */
START_TEST(roundtrip_empty_bodies) {
    Ps__Stats st = PS__STATS__INIT;
    Ps__Shutdown sd = PS__SHUTDOWN__INIT;
    Ps__ShutdownReply sr = PS__SHUTDOWN_REPLY__INIT;
    Ps__Header h = header(16);
    h.body_case = PS__HEADER__BODY_STATS;
    h.stats = &st;
    ps__header__free_unpacked(roundtrip(&h), NULL);
    h.body_case = PS__HEADER__BODY_SHUTDOWN;
    h.shutdown = &sd;
    ps__header__free_unpacked(roundtrip(&h), NULL);
    h.body_case = PS__HEADER__BODY_SHUTDOWN_REPLY;
    h.shutdown_reply = &sr;
    ps__header__free_unpacked(roundtrip(&h), NULL);
}
END_TEST

/* ---- header decode failures ---- */

START_TEST(decode_garbage) {
    /* a varint tag that never ends: not a protobuf message */
    const uint8_t junk[12] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                              0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    Ps__Header *out = (Ps__Header *)&out; /* must be reset */
    char err[256] = "";
    ck_assert_int_eq(ps_header_decode(junk, sizeof junk, &out, err, sizeof err), PS_EPROTO);
    ck_assert_ptr_null(out);
    ck_assert_msg(err[0], "no reason given");

    const char text[] = "GET / HTTP/1.1\r\n\r\n";
    ck_assert_int_eq(ps_header_decode(text, sizeof text - 1, &out, err, sizeof err), PS_EPROTO);
    ck_assert_ptr_null(out);
}
END_TEST

START_TEST(decode_empty) {
    Ps__Header *out = (Ps__Header *)&out;
    char err[256] = "";
    ck_assert_int_eq(ps_header_decode("", 0, &out, err, sizeof err), PS_EPROTO);
    ck_assert_ptr_null(out);
    ck_assert_msg(err[0], "no reason given");
}
END_TEST

START_TEST(decode_too_big) {
    /* the size limit is checked before any parsing */
    size_t len = PS_WIRE_MAX_HEADER + 1;
    uint8_t *buf = calloc(1, len);
    ck_assert_ptr_nonnull(buf);
    Ps__Header *out = NULL;
    char err[256] = "";
    ck_assert_int_eq(ps_header_decode(buf, len, &out, err, sizeof err), PS_EPROTO);
    ck_assert_ptr_null(out);
    free(buf);
}
END_TEST

START_TEST(decode_wrong_version_keeps_header) {
    Ps__Header h = hello_header(4242);
    h.protocol_version = PS_PROTOCOL_VERSION + 1;
    size_t len = ps__header__get_packed_size(&h);
    uint8_t buf[64];
    ck_assert_uint_le(len, sizeof buf);
    ps__header__pack(&h, buf);
    Ps__Header *out = NULL;
    char err[256] = "";
    ck_assert_int_eq(ps_header_decode(buf, len, &out, err, sizeof err), PS_EVERSION);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(out->request_id, 4242);
    ck_assert_msg(err[0], "no reason given");
    ps__header__free_unpacked(out, NULL);

    /* version 0 (field missing) is also a mismatch */
    h.protocol_version = 0;
    len = ps__header__get_packed_size(&h);
    ps__header__pack(&h, buf);
    ck_assert_int_eq(ps_header_decode(buf, len, &out, err, sizeof err), PS_EVERSION);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(out->request_id, 4242);
    ps__header__free_unpacked(out, NULL);
}
END_TEST

START_TEST(decode_no_body) {
    Ps__Header h = header(5);
    size_t len = ps__header__get_packed_size(&h);
    uint8_t buf[64];
    ps__header__pack(&h, buf);
    Ps__Header *out = NULL;
    char err[256] = "";
    ck_assert_int_eq(ps_header_decode(buf, len, &out, err, sizeof err), PS_EPROTO);
    ck_assert_msg(strstr(err, "body") != NULL, "reason: %s", err);
    if (out) ps__header__free_unpacked(out, NULL); /* set or not, it must be freeable */
}
END_TEST

/* ---- string fields: valid UTF-8 without NUL, checked at decode ---- */

/* A hand-encoded protobuf message (protobuf-c's pack stops a string at its NUL). */
typedef struct {
    uint8_t b[512];
    size_t n;
} pbuf;

static void put_byte(pbuf *p, uint8_t v) {
    ck_assert_uint_lt(p->n, sizeof p->b);
    p->b[p->n++] = v;
}

static void put_varint(pbuf *p, uint64_t v) {
    while (v >= 0x80) {
        put_byte(p, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_byte(p, (uint8_t)v);
}

/* Appends field `field` (length-delimited) holding data[0..len). */
static void put_bytes(pbuf *p, unsigned field, const void *data, size_t len) {
    put_varint(p, (uint64_t)field << 3 | 2u);
    put_varint(p, len);
    ck_assert_uint_le(p->n + len, sizeof p->b);
    memcpy(p->b + p->n, data, len);
    p->n += len;
}

/* A TensorMeta of shape [2] float32 named name[0..len). */
static pbuf meta_bytes(const char *name, size_t len) {
    pbuf m = {.n = 0};
    put_bytes(&m, 1, name, len);
    const uint8_t rest[] = {0x10, 0x01, 0x1a, 0x01, 0x02, 0x20, 0x08};
    memcpy(m.b + m.n, rest, sizeof rest);
    m.n += sizeof rest;
    return m;
}

/* A Header (version 1, request id 77) whose body field `body` holds b. */
static pbuf header_bytes(unsigned body, const pbuf *b) {
    pbuf h = {.n = 0};
    const uint8_t start[] = {0x08, 0x01, 0x10, 77};
    memcpy(h.b, start, sizeof start);
    h.n = sizeof start;
    put_bytes(&h, body, b->b, b->n);
    return h;
}

/* The three requests that carry names, each with name[0..len) second: CreateVars,
 * Pull, and PushPull (a Push inside). *field gets the path the reason must name. */
static pbuf request_with_name(int kind, const char *name, size_t len, const char **field) {
    pbuf body = {.n = 0}, inner = {.n = 0};
    pbuf good = meta_bytes("ok", 2), bad = meta_bytes(name, len);
    switch (kind) {
    case 0: /* CreateVars { vars = 1 } */
        put_bytes(&body, 1, good.b, good.n);
        put_bytes(&body, 1, bad.b, bad.n);
        *field = "create_vars.vars[1].name";
        return header_bytes(12, &body);
    case 1: /* Pull { names = 1 } */
        put_bytes(&body, 1, "ok", 2);
        put_bytes(&body, 1, name, len);
        *field = "pull.names[1]";
        return header_bytes(14, &body);
    default: /* PushPull { Push push = 1 { grads = 1 } } */
        put_bytes(&inner, 1, good.b, good.n);
        put_bytes(&inner, 1, bad.b, bad.n);
        put_bytes(&body, 1, inner.b, inner.n);
        *field = "push_pull.push.grads[1].name";
        return header_bytes(28, &body);
    }
}

static const struct {
    const char *bytes;
    size_t len;
    const char *why;
} BAD_NAMES[] = {
    {"w\0b", 3, "NUL byte"},                   /* would be stored as "w" */
    {"\0", 1, "NUL byte"},                     /* would be stored as "" */
    {"\xc0\xaf", 2, "overlong"},               /* '/' in two bytes */
    {"x\xe0\x80\xaf", 4, "overlong"},          /* '/' in three bytes */
    {"\xf0\x80\x80\xaf", 4, "overlong"},       /* '/' in four bytes */
    {"\xed\xa0\x80", 3, "surrogate"},          /* U+D800 */
    {"a\xed\xbf\xbf", 4, "surrogate"},         /* U+DFFF */
    {"w\xe2\x82", 3, "truncated"},             /* '€' without its last byte */
    {"\xe2\x82w", 3, "truncated"},             /* ... followed by ASCII */
    {"\xf0\x9f\x98", 3, "truncated"},          /* an emoji cut short */
    {"\xf4\x90\x80\x80", 4, "above U+10FFFF"}, /* U+110000 */
    {"\x80w", 2, "stray continuation"},        /* continuation without a lead */
    {"w\xff", 2, "never appears"},             /* never in UTF-8 */
};

START_TEST(decode_refuses_bad_text_in_names) {
    for (int kind = 0; kind < 3; kind++) {
        for (size_t i = 0; i < sizeof BAD_NAMES / sizeof BAD_NAMES[0]; i++) {
            const char *field;
            pbuf h = request_with_name(kind, BAD_NAMES[i].bytes, BAD_NAMES[i].len, &field);
            Ps__Header *out = NULL;
            char err[256] = "";
            int rc = ps_header_decode(h.b, h.n, &out, err, sizeof err);
            ck_assert_msg(rc == PS_EPROTO, "kind %d, name %zu: %s (%s)", kind, i, ps_errname(rc),
                          err);
            ck_assert_msg(strstr(err, field) != NULL, "kind %d, name %zu: no '%s' in: %s", kind, i,
                          field, err);
            ck_assert_msg(strstr(err, BAD_NAMES[i].why) != NULL,
                          "kind %d, name %zu: no '%s' in: %s", kind, i, BAD_NAMES[i].why, err);
            /* the header is still there to echo its request id */
            ck_assert_ptr_nonnull(out);
            ck_assert_uint_eq(out->request_id, 77);
            ps__header__free_unpacked(out, NULL);
        }
    }
}
END_TEST

START_TEST(decode_accepts_multibyte_names) {
    static const char *const good[] = {
        "w\xc3\xa9ight",                /* é: 2 bytes */
        "\xe6\x9d\x83\xe9\x87\x8d",     /* 权重: 3 bytes each */
        "\xf0\x9f\x98\x80/bias",        /* U+1F600: 4 bytes */
        "\xef\xbf\xbd\xf4\x8f\xbf\xbf", /* U+FFFD, U+10FFFF */
        "\xed\x9f\xbf\xee\x80\x80",     /* U+D7FF, U+E000 beside the surrogates */
    };
    for (int kind = 0; kind < 3; kind++) {
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            const char *field;
            pbuf h = request_with_name(kind, good[i], strlen(good[i]), &field);
            Ps__Header *out = NULL;
            char err[256] = "";
            int rc = ps_header_decode(h.b, h.n, &out, err, sizeof err);
            ck_assert_msg(rc == PS_OK, "kind %d, name %zu: %s (%s)", kind, i, ps_errname(rc), err);
            const char *got = kind == 0   ? out->create_vars->vars[1]->name
                              : kind == 1 ? out->pull->names[1]
                                          : out->push_pull->push->grads[1]->name;
            ck_assert_str_eq(got, good[i]);
            ps__header__free_unpacked(out, NULL);
        }
    }
}
END_TEST

/* Replies go through the same decode: an Error whose message is not UTF-8 is refused. */
START_TEST(decode_refuses_bad_text_in_replies) {
    pbuf body = {.n = 0};
    put_bytes(&body, 2, "EINVAL", 6);
    put_bytes(&body, 3, "bad \xc3", 5);
    pbuf h = header_bytes(22, &body);
    Ps__Header *out = NULL;
    char err[256] = "";
    ck_assert_int_eq(ps_header_decode(h.b, h.n, &out, err, sizeof err), PS_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "error.message"));
    ps__header__free_unpacked(out, NULL);
    /* StatsReply { repeated VarStats vars = 13 { name = 1 } } */
    pbuf var = {.n = 0}, stats = {.n = 0};
    put_bytes(&var, 1, "v\0", 2);
    put_bytes(&stats, 13, var.b, var.n);
    h = header_bytes(19, &stats);
    ck_assert_int_eq(ps_header_decode(h.b, h.n, &out, err, sizeof err), PS_EPROTO);
    ck_assert_msg(strstr(err, "stats_reply.vars[0].name") != NULL, "%s", err);
    ps__header__free_unpacked(out, NULL);
}
END_TEST

START_TEST(utf8_sanitize_replaces_bad_bytes) {
    char out[64];
    ck_assert_str_eq(ps_utf8_sanitize("ok \xc3\xa9", out, sizeof out), "ok \xc3\xa9");
    ck_assert_str_eq(ps_utf8_sanitize("a\xff"
                                      "b",
                                      out, sizeof out),
                     "a\xef\xbf\xbd"
                     "b");
    ck_assert_str_eq(ps_utf8_sanitize("cut \xe2\x82", out, sizeof out),
                     "cut \xef\xbf\xbd\xef\xbf\xbd");
    /* a sequence that would not fit whole is left out */
    ck_assert_str_eq(ps_utf8_sanitize("ab\xc3\xa9", out, 4), "ab");
    const char *why;
    ck_assert_uint_eq(ps_utf8_check("ab\xc3\xa9", 4, &why), 4);
    ck_assert_str_eq(why, "");
    ck_assert_uint_eq(ps_utf8_check("ab\xc3", 3, &why), 2);
    ck_assert_str_eq(why, "truncated multibyte sequence");
}
END_TEST

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

static Suite *wire_suite(void) {
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("header");
    tcase_add_test(tc, job_id_validity);
    tcase_add_test(tc, roundtrip_hello);
    tcase_add_test(tc, roundtrip_welcome);
    tcase_add_test(tc, roundtrip_create_vars_with_optimizers);
    tcase_add_test(tc, roundtrip_create_vars_reply);
    tcase_add_test(tc, roundtrip_pull);
    tcase_add_test(tc, roundtrip_pull_reply);
    tcase_add_test(tc, roundtrip_push_and_reply);
    tcase_add_test(tc, roundtrip_stats_reply);
    tcase_add_test(tc, roundtrip_error);
    tcase_add_test(tc, roundtrip_empty_bodies);
    tcase_add_test(tc, decode_garbage);
    tcase_add_test(tc, decode_empty);
    tcase_add_test(tc, decode_too_big);
    tcase_add_test(tc, decode_wrong_version_keeps_header);
    tcase_add_test(tc, decode_no_body);
    tcase_add_test(tc, decode_refuses_bad_text_in_names);
    tcase_add_test(tc, decode_accepts_multibyte_names);
    tcase_add_test(tc, decode_refuses_bad_text_in_replies);
    tcase_add_test(tc, utf8_sanitize_replaces_bad_bytes);
    suite_add_tcase(s, tc);

    tc = tcase_create("tensors_check");
    tcase_add_test(tc, tensors_good);
    tcase_add_test(tc, tensors_count_mismatch);
    tcase_add_test(tc, tensors_bad_dtype);
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
    return ps_test_run_suite(wire_suite());
}
