/* psd against bad CreateVars, Hello and names (UTF-8 without NUL, finite values, one
 * optimizer per variable), and the error counts in Stats; each bad request gets an
 * Error reply and the shard keeps serving. */
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

static void raw_create(raw_conn *r, uint64_t request_id, Ps__TensorMeta **metas, size_t n,
                       const void *const *init, const size_t *lens) {
    Ps__Optimizer o[4];
    Ps__Optimizer *op[4];
    ck_assert_uint_le(n, 4);
    for (size_t i = 0; i < n; i++) {
        ps__optimizer__init(&o[i]);
        o[i].kind = PS__OPT_KIND__OPT_SGD;
        o[i].lr = LR;
        op[i] = &o[i];
    }
    Ps__CreateVars cv = PS__CREATE_VARS__INIT;
    cv.vars = metas;
    cv.n_vars = n;
    cv.optimizers = op;
    cv.n_optimizers = n;
    Ps__Header h = req_header(request_id);
    h.body_case = PS__HEADER__BODY_CREATE_VARS;
    h.create_vars = &cv;
    raw_send_hdr(r, &h, init, lens, n);
}

START_TEST(create_vars_same_shape_idempotent) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float other[NW] = {9, 9, 9, 9, 9, 9};
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "w", (const size_t[]){2, 3}, 2, sb);
    Ps__TensorMeta *mp[1] = {&m};
    raw_create(&r, 124, mp, 1, (const void *[]){other}, (const size_t[]){sizeof other});
    Ps__Header *h = raw_recv(&r, REPLY_MS, NULL);
    ck_assert_ptr_nonnull(h);
    ck_assert_msg(h->body_case == PS__HEADER__BODY_CREATE_VARS_REPLY, "body %d%s%s",
                  (int)h->body_case, h->body_case == PS__HEADER__BODY_ERROR ? ": " : "",
                  h->body_case == PS__HEADER__BODY_ERROR ? h->error->message : "");
    ck_assert_uint_eq(h->request_id, 124);
    ck_assert_uint_eq(h->create_vars_reply->n_created, 1);
    ck_assert(!h->create_vars_reply->created[0]);
    ck_assert_uint_eq(h->create_vars_reply->version, 0);
    ps__header__free_unpacked(h, NULL);
    raw_close(&r);
    expect_unchanged(); /* the 9s were not taken */

    /* the client library sees the same: nothing new */
    size_t created = 99;
    ck_assert_int_eq(ps_client_create_vars(good.c, &created), PS_OK);
    ck_assert_uint_eq(created, 0);
    expect_unchanged();
}
END_TEST

START_TEST(create_vars_different_shape) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float other[NW] = {9, 9, 9, 9, 9, 9}, fresh[2] = {7, 8};
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m[0], "w", (const size_t[]){3, 2}, 2, sb[0]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    raw_create(&r, 125, mp, 1, (const void *[]){other}, (const size_t[]){sizeof other});
    raw_expect_error(&r, 125, PS_EEXIST, REPLY_MS);
    /* all or nothing: a new var listed before the clash is not created either */
    ps_tensor_meta_f32(&m[0], "fresh", (const size_t[]){2}, 1, sb[0]);
    ps_tensor_meta_f32(&m[1], "w", (const size_t[]){6}, 1, sb[1]);
    raw_create(&r, 126, mp, 2, (const void *[]){fresh, other},
               (const size_t[]){sizeof fresh, sizeof other});
    raw_expect_error(&r, 126, PS_EEXIST, REPLY_MS);
    raw_pull(&r, 127, (char *[]){"fresh"}, 1, 0, NULL, NULL, 0);
    raw_expect_error(&r, 127, PS_ENOENT, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(create_vars_bad_optimizer) {
    float init[2] = {7, 8};
    create_req q;
    create_req_init(&q, 128, "fresh", (const size_t[]){2}, 1);
    q.o.kind = (Ps__OptKind)99;
    expect_bad_request(&q.h, (const void *[]){init}, (const size_t[]){sizeof init}, 1, PS_EINVAL,
                       "variable 'fresh': unknown optimizer");
    /* optimizers missing */
    q.cv.n_optimizers = 0;
    q.h.request_id = 129;
    expect_bad_request(&q.h, (const void *[]){init}, (const size_t[]){sizeof init}, 1, PS_EPROTO,
                       "1 variables but 0 optimizers");
}
END_TEST

/* ---- names are valid UTF-8 without NUL; values are finite; one optimizer per variable ---- */

/* CreateVars of one [2] variable named name[0..len), SGD lr LR. */
static void create_named(raw_conn *r, uint64_t id, const char *name, size_t len) {
    raw_pb meta = raw_pb_meta2(name, len), opt = {.n = 0}, body = {.n = 0};
    opt.b[opt.n++] = 0x15; /* lr: field 2, 32-bit */
    float lr = LR;
    memcpy(opt.b + opt.n, &lr, 4);
    opt.n += 4;
    raw_pb_bytes(&body, 1, meta.b, meta.n);
    raw_pb_bytes(&body, 2, opt.b, opt.n);
    const float init[2] = {1.5f, -2.5f};
    raw_send_body(r, id, 12, &body, 1, init);
}

static const struct {
    const char *bytes;
    size_t len;
} BAD_NAMES[] = {
    {"w\0x", 3},            /* NUL: would be stored as "w", the existing variable */
    {"b\0", 2},             /* ... or as "b" */
    {"\xc0\xaf", 2},        /* overlong '/' */
    {"\xe0\x80\xaf", 3},    /* overlong '/' in three bytes */
    {"\xed\xa0\x80", 3},    /* a surrogate (U+D800) */
    {"w\xe2\x82", 3},       /* a truncated sequence */
    {"\xf4\x90\x80\x80", 4} /* above U+10FFFF */
};

/* Each bad name in CreateVars, Pull and Push is EPROTO naming the field; a valid
 * multibyte name is created, pulled and listed; Stats still decodes. */
START_TEST(names_must_be_utf8_without_nul) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    uint64_t id = 300;
    const float g[2] = {0.5f, 0.5f};
    for (size_t i = 0; i < sizeof BAD_NAMES / sizeof BAD_NAMES[0]; i++) {
        const char *name = BAD_NAMES[i].bytes;
        size_t len = BAD_NAMES[i].len;
        create_named(&r, ++id, name, len);
        raw_expect_error_text(&r, id, PS_EPROTO, "create_vars.vars[0].name", REPLY_MS);
        raw_pb pull = {.n = 0};
        raw_pb_bytes(&pull, 1, "w", 1);
        raw_pb_bytes(&pull, 1, name, len);
        raw_send_body(&r, ++id, 14, &pull, 0, NULL);
        raw_expect_error_text(&r, id, PS_EPROTO, "pull.names[1]", REPLY_MS);
        raw_pb meta = raw_pb_meta2(name, len), push = {.n = 0};
        raw_pb_bytes(&push, 1, meta.b, meta.n);
        raw_send_body(&r, ++id, 16, &push, 1, g);
        raw_expect_error_text(&r, id, PS_EPROTO, "push.grads[0].name", REPLY_MS);
    }
    /* valid multibyte UTF-8 is a name like any other */
    const char *wide = "w\xc3\xa9ight/\xe6\x9d\x83\xf0\x9f\x98\x80";
    create_named(&r, ++id, wide, strlen(wide));
    Ps__Header *h = raw_recv(&r, REPLY_MS, NULL);
    ck_assert_ptr_nonnull(h);
    ck_assert_msg(h->body_case == PS__HEADER__BODY_CREATE_VARS_REPLY, "body %d: %s",
                  (int)h->body_case,
                  h->body_case == PS__HEADER__BODY_ERROR ? h->error->message : "");
    ck_assert(h->create_vars_reply->created[0]);
    ps__header__free_unpacked(h, NULL);
    raw_pull(&r, ++id, (char *[]){(char *)wide}, 1, 0, NULL, NULL, 0);
    ps_frames f;
    h = raw_recv(&r, REPLY_MS, &f);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_PULL_REPLY);
    ck_assert_str_eq(h->pull_reply->tensors[0]->name, wide);
    ck_assert_uint_eq(f.n, 2);
    ps_frames_close(&f);
    ps__header__free_unpacked(h, NULL);
    raw_close(&r);

    /* Stats decodes (strictly: ps_header_decode) and lists exactly w, b and the new one */
    ps_stats hold;
    ps_stats *st = ps_test_stats(good.c, &hold);
    ck_assert_uint_eq(st->n_vars, 3);
    ck_assert_str_eq(st->vars[2].name, wide);
    ps_stats_free(&hold);
    expect_unchanged();
}
END_TEST

/* NaN or Inf initial values are EINVAL naming the variable and index, and nothing of
 * the request is created. */
START_TEST(create_vars_non_finite_init) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float ok[2] = {1, 2}, bad[2] = {3, NAN};
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m[0], "fine", (const size_t[]){2}, 1, sb[0]);
    ps_tensor_meta_f32(&m[1], "fresh", (const size_t[]){2}, 1, sb[1]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    raw_create(&r, 320, mp, 2, (const void *[]){ok, bad}, (const size_t[]){sizeof ok, sizeof bad});
    raw_expect_error_text(&r, 320, PS_EINVAL, "variable 'fresh': initial value 1 is NaN", REPLY_MS);
    bad[0] = -INFINITY;
    raw_create(&r, 321, mp, 2, (const void *[]){ok, bad}, (const size_t[]){sizeof ok, sizeof bad});
    raw_expect_error_text(&r, 321, PS_EINVAL, "variable 'fresh': initial value 0 is infinite",
                          REPLY_MS);
    raw_pull(&r, 322, (char *[]){"fine"}, 1, 0, NULL, NULL, 0);
    raw_expect_error(&r, 322, PS_ENOENT, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

/* Re-creating a variable with another optimizer (kind or a hyperparameter) is EEXIST
 * naming both; the old optimizer stays; the same optimizer is still fine. */
START_TEST(create_vars_other_optimizer) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float init[NW] = {0};
    create_req q;
    create_req_init(&q, 330, "w", (const size_t[]){2, 3}, 2);
    Ps__Header *h = &q.h;
    Ps__Optimizer *o = &q.o;
    o->lr = 0.25f;
    raw_send_hdr(&r, h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
    raw_expect_error_text(&r, 330, PS_EEXIST,
                          "variable 'w' exists with optimizer sgd lr=0.1, the request says sgd "
                          "lr=0.25",
                          REPLY_MS);
    o->kind = PS__OPT_KIND__OPT_ADAM;
    o->lr = LR;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->epsilon = 1e-7f;
    h->request_id = 331;
    raw_send_hdr(&r, h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
    raw_expect_error_text(
        &r, 331, PS_EEXIST,
        "exists with optimizer sgd lr=0.1, the request says adam lr=0.1 beta1=0.9 "
        "beta2=0.999 epsilon=1e-07",
        REPLY_MS);
    /* fields SGD does not use do not count: the same optimizer, idempotent */
    o->kind = PS__OPT_KIND__OPT_SGD;
    h->request_id = 332;
    raw_send_hdr(&r, h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
    Ps__Header *rep = raw_recv(&r, REPLY_MS, NULL);
    ck_assert_ptr_nonnull(rep);
    ck_assert_msg(rep->body_case == PS__HEADER__BODY_CREATE_VARS_REPLY, "body %d: %s",
                  (int)rep->body_case,
                  rep->body_case == PS__HEADER__BODY_ERROR ? rep->error->message : "");
    ck_assert(!rep->create_vars_reply->created[0]);
    ps__header__free_unpacked(rep, NULL);
    raw_close(&r);
    expect_unchanged();
    /* the old optimizer still applies: one push, one plain SGD step with LR */
    for (int i = 0; i < NW; i++)
        good.dw[i] = 1.0f;
    memset(good.db, 0, sizeof good.db);
    int applied = 0;
    ck_assert_msg(ps_client_push(good.c, 0, &applied) == PS_OK, "%s", ps_client_error(good.c));
    float want_w[NW];
    for (int i = 0; i < NW; i++)
        want_w[i] = sgd(W0[i], 1.0f);
    ck_assert_uint_eq(expect_values(&good, want_w, B0), 1);
}
END_TEST

START_TEST(hello_wrong_num_workers) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    Ps__Header h = req_header(130);
    Ps__Hello hello = PS__HELLO__INIT;
    hello.worker_index = 0;
    hello.num_workers = 2; /* psd serves a job of 1 */
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error(&r, 130, PS_EINVAL, REPLY_MS);
    /* right job size, index out of range */
    hello.num_workers = 1;
    hello.worker_index = 1;
    h.request_id = 131;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error(&r, 131, PS_EINVAL, REPLY_MS);
    raw_close(&r);

    /* the client library reports it too */
    ps_client *c;
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 3, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, REPLY_MS);
    ck_assert_int_eq(ps_client_hello(c, NULL, NULL), PS_EINVAL);
    ck_assert_msg(strstr(ps_client_error(c), "EINVAL") != NULL, "%s", ps_client_error(c));
    ps_client_close(c);
    expect_unchanged();
}
END_TEST

/* Errors are counted; the counters match what was sent. */
START_TEST(stats_count_errors) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_pull(&r, 132, (char *[]){"nope"}, 1, 0, NULL, NULL, 0);
    raw_expect_error(&r, 132, PS_ENOENT, REPLY_MS);
    raw_send(&r, (const void *[]){""}, (const size_t[]){0}, 1);
    raw_expect_error(&r, 0, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    ps_stats hold;
    ps_stats *st = ps_test_stats(good.c, &hold);
    /* hello, create, pull (setup), 2 bad ones, this stats */
    ck_assert_uint_eq(st->requests, 6);
    ck_assert_uint_eq(st->errors, 2);
    ck_assert_uint_eq(st->version, 0);
    ck_assert_uint_eq(st->pushes_applied, 0);
    ck_assert_uint_eq(st->stale_pushes, 0);
    ck_assert_uint_eq(st->pending_pulls, 0);
    ck_assert_uint_eq(st->num_workers, 1);
    ck_assert_int_eq(st->mode, PS_MODE_SYNC);
    ck_assert_uint_eq(st->n_vars, 2);
    ck_assert_str_eq(st->vars[0].name, "w");
    ck_assert_uint_eq(st->vars[0].numel, NW);
    ck_assert_str_eq(st->vars[0].optimizer, "sgd");
    ck_assert_str_eq(st->vars[1].name, "b");
    ck_assert_uint_eq(st->vars[1].numel, NB);
    ck_assert_uint_ge(st->bytes_in, sizeof W0 + sizeof B0);  /* the initial values */
    ck_assert_uint_ge(st->bytes_out, sizeof W0 + sizeof B0); /* one pull */
    ck_assert(st->uptime_seconds > 0 && st->uptime_seconds < 60);
    ps_stats_free(&hold);
}
END_TEST

static Suite *requests_suite(void) {
    Suite *s = suite_create("psd_requests");
    TCase *tc = requests_tcase(s, "bad_requests", setup_sync1);
    tcase_add_test(tc, create_vars_same_shape_idempotent);
    tcase_add_test(tc, create_vars_different_shape);
    tcase_add_test(tc, create_vars_bad_optimizer);
    tcase_add_test(tc, hello_wrong_num_workers);
    tcase_add_test(tc, stats_count_errors);
    tcase_add_test(tc, names_must_be_utf8_without_nul);
    tcase_add_test(tc, create_vars_non_finite_init);
    tcase_add_test(tc, create_vars_other_optimizer);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", requests_suite);
}
