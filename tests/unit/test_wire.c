/* Wire header tests: encode/decode round trips for every body type, decode failures, and
 * string fields (valid UTF-8 without NUL) checked at decode. */
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

static Suite *wire_suite(void) {
    Suite *s = suite_create("wire");
    TCase *tc;
    tc = tcase_create("header");
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
    return s;
}

int main(void) {
    return ps_test_run_suite(wire_suite());
}
