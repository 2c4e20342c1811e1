/* psd against real requests on 127.0.0.1: malformed and invalid requests built by hand on a
 * raw DEALER each get an Error reply and leave the shard serving; sync/async semantics. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "testutil.h"
#include "client.h"
#include "proc.h"
#include "ps_error.h"
#include "raw.h"
#include "wire.h"

#define LR 0.1f
#define NW 6 /* "w" is [2, 3] */
#define NB 4 /* "b" is [4] */
#define REPLY_MS 5000

static const float W0[NW] = {1.0f, -2.0f, 0.5f, 4.0f, 0.0f, -1.0f};
static const float B0[NB] = {0.25f, 0.5f, -0.75f, 2.0f};

static ps_test_psd psd;

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One plain-SGD update as psd computes it (common/optim.c: float arithmetic). */
static float sgd(float w, float g) {
    return w - LR * g;
}

/* ---- a well-behaved worker (the client library) ---- */

typedef struct {
    ps_client *c;
    float w[NW], dw[NW], b[NB], db[NB];
} good_client;

static good_client good; /* worker 0 of the bad_requests fixture */

/* Opens a client for worker `index` of `workers`, registers "w" and "b" (SGD, LR) and says
 * Hello; with `create` also creates them with W0 and B0. */
static void good_open(good_client *g, unsigned index, unsigned workers, int create) {
    memset(g, 0, sizeof *g);
    memcpy(g->w, W0, sizeof W0);
    memcpy(g->b, B0, sizeof B0);
    const char *eps[1] = {psd.endpoint};
    char err[256];
    int rc = ps_client_open(&g->c, eps, 1, index, workers, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "open: %s", err);
    ps_client_set_timeout(g->c, REPLY_MS);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = LR;
    ps_client_tensor t = {.name = "w", .shard = 0, .rank = 2, .shape = {2, 3}, .opt = opt};
    t.param = g->w;
    t.grad = g->dw;
    ck_assert_int_eq(ps_client_add(g->c, &t), PS_OK);
    ps_client_tensor tb = {.name = "b", .shard = 0, .rank = 1, .shape = {NB}, .opt = opt};
    tb.param = g->b;
    tb.grad = g->db;
    ck_assert_int_eq(ps_client_add(g->c, &tb), PS_OK);
    int async = -1;
    rc = ps_client_hello(g->c, &async, NULL);
    ck_assert_msg(rc == PS_OK, "hello: %s", ps_client_error(g->c));
    if (create) {
        size_t created = 0;
        rc = ps_client_create_vars(g->c, &created);
        ck_assert_msg(rc == PS_OK, "create: %s", ps_client_error(g->c));
        ck_assert_uint_eq(created, 2);
    }
}

static void good_close(good_client *g) {
    ps_client_close(g->c);
    g->c = NULL;
}

/* Pulls (min_version 0) and checks the values are exactly w and b; returns the version. */
static uint64_t expect_values(good_client *g, const float *w, const float *b) {
    memset(g->w, 0xff, sizeof g->w); /* NaN: a pull that writes nothing cannot pass */
    memset(g->b, 0xff, sizeof g->b);
    uint64_t version = UINT64_MAX;
    int rc = ps_client_pull(g->c, 0, &version);
    ck_assert_msg(rc == PS_OK, "pull: %s", ps_client_error(g->c));
    for (int i = 0; i < NW; i++)
        ck_assert_msg(g->w[i] == w[i], "w[%d] = %.9g, want %.9g", i, g->w[i], w[i]);
    for (int i = 0; i < NB; i++)
        ck_assert_msg(g->b[i] == b[i], "b[%d] = %.9g, want %.9g", i, g->b[i], b[i]);
    return version;
}

/* The shard still serves the good client, with the initial values at version 0. */
static void expect_unchanged(void) {
    ck_assert_uint_eq(expect_values(&good, W0, B0), 0);
}

/* Asks for stats; the caller frees the header. */
static Ps__StatsReply *get_stats(good_client *g, Ps__Header **hold) {
    int rc = ps_client_stats(g->c, 0, hold);
    ck_assert_msg(rc == PS_OK, "stats: %s", ps_client_error(g->c));
    ck_assert_int_eq((*hold)->body_case, PS__HEADER__BODY_STATS_REPLY);
    return (*hold)->stats_reply;
}

/* ---- a raw DEALER (raw.h): requests built byte by byte ---- */

static Ps__Header req_header(uint64_t request_id) {
    Ps__Header h = PS__HEADER__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = request_id;
    return h;
}

/* A Push request over the given metas (payloads are sent separately). */
typedef struct {
    Ps__Header h;
    Ps__Push push;
} push_req;

static void push_req_init(push_req *q, uint64_t request_id, Ps__TensorMeta **metas, size_t n,
                          uint64_t step, uint32_t worker) {
    q->h = req_header(request_id);
    ps__push__init(&q->push);
    q->push.grads = metas;
    q->push.n_grads = n;
    q->push.step = step;
    q->push.worker_index = worker;
    q->h.body_case = PS__HEADER__BODY_PUSH;
    q->h.push = &q->push;
}

/* Sends a Pull of the given names. */
static void raw_pull(raw_conn *r, uint64_t request_id, char **names, size_t n, uint64_t min_version,
                     const void *const *pl, const size_t *pl_lens, size_t n_pl) {
    Ps__Header h = req_header(request_id);
    Ps__Pull p = PS__PULL__INIT;
    p.names = names;
    p.n_names = n;
    p.min_version = min_version;
    h.body_case = PS__HEADER__BODY_PULL;
    h.pull = &p;
    raw_send_hdr(r, &h, pl, pl_lens, n_pl);
}

/* ---- fixtures ---- */

/* A failed assertion exits the test process without running the teardown: stop psd and
 * remove its directory anyway (a no-op after a normal teardown). */
static void cleanup_at_exit(void) {
    ps_test_psd_stop(&psd, 2000);
}

static void start_psd(const char *workers, const char *mode) {
    atexit(cleanup_at_exit);
    /* and should this process be killed, psd goes with it */
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("PS_PARENT_PID", pid, 1);
    const char *args[] = {"--workers", workers, "--mode", mode, NULL};
    ck_assert_msg(ps_test_psd_start(&psd, args, 10000) == 0, "psd did not start");
}

static void setup_sync1(void) {
    start_psd("1", "sync");
    good_open(&good, 0, 1, 1);
    ck_assert_uint_eq(expect_values(&good, W0, B0), 0);
}

static void setup_sync2(void) {
    start_psd("2", "sync");
}

static void setup_async2(void) {
    start_psd("2", "async");
}

/* Stops psd with SIGTERM and checks it exits 0 (unless a test already reaped it). */
static void teardown_psd(void) {
    if (good.c) good_close(&good);
    if (psd.pid > 0) {
        kill(psd.pid, SIGTERM);
        int st = ps_test_wait(psd.pid, 5000);
        if (st != 0) ps_test_dump(psd.log);
        psd.pid = 0;
        ps_test_psd_stop(&psd, 0); /* removes the temp dir */
        ck_assert_msg(st == 0, "psd exited with status %d after SIGTERM", st);
    } else {
        ps_test_psd_stop(&psd, 0);
    }
}

/* ---- bad requests: each gets an Error reply, and the shard keeps serving ---- */

START_TEST(pull_unknown_variable) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    char *names[2] = {"nope", "w"};
    raw_pull(&r, 101, names, 1, 0, NULL, NULL, 0);
    raw_expect_error(&r, 101, PS_ENOENT, REPLY_MS);
    raw_pull(&r, 102, (char *[]){"w", "nope"}, 2, 0, NULL, NULL, 0); /* known, then unknown */
    raw_expect_error(&r, 102, PS_ENOENT, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(push_unknown_variable) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "nope", (const size_t[]){2, 3}, 2, sb);
    Ps__TensorMeta *mp[1] = {&m};
    push_req q;
    push_req_init(&q, 103, mp, 1, 0, 0);
    float g[NW] = {1, 1, 1, 1, 1, 1};
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 103, PS_ENOENT, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(push_wrong_shape) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float g[NW] = {1, 1, 1, 1, 1, 1};
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    Ps__TensorMeta *mp[1] = {&m};
    push_req q;
    /* same number of elements, transposed */
    ps_tensor_meta_f32(&m, "w", (const size_t[]){3, 2}, 2, sb);
    push_req_init(&q, 104, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 104, PS_ESHAPE, REPLY_MS);
    /* flattened */
    ps_tensor_meta_f32(&m, "w", (const size_t[]){6}, 1, sb);
    push_req_init(&q, 105, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 105, PS_ESHAPE, REPLY_MS);
    /* fewer elements */
    ps_tensor_meta_f32(&m, "w", (const size_t[]){2, 2}, 2, sb);
    push_req_init(&q, 106, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){16}, 1);
    raw_expect_error(&r, 106, PS_ESHAPE, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(push_wrong_dtype) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float g[NW] = {1, 1, 1, 1, 1, 1};
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "w", (const size_t[]){2, 3}, 2, sb);
    m.dtype = PS__DTYPE__DT_INVALID;
    Ps__TensorMeta *mp[1] = {&m};
    push_req q;
    push_req_init(&q, 107, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 107, PS_ESHAPE, REPLY_MS);
    m.dtype = (Ps__DType)2; /* not a dtype psd knows */
    push_req_init(&q, 108, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 108, PS_ESHAPE, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(push_frame_count_mismatch) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float g[NW] = {1, 1, 1, 1, 1, 1}, gb[NB] = {1, 1, 1, 1};
    Ps__TensorMeta m[2];
    uint64_t sb[2][PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m[0], "w", (const size_t[]){2, 3}, 2, sb[0]);
    ps_tensor_meta_f32(&m[1], "b", (const size_t[]){NB}, 1, sb[1]);
    Ps__TensorMeta *mp[2] = {&m[0], &m[1]};
    push_req q;
    /* two metas, three frames */
    push_req_init(&q, 109, mp, 2, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g, gb, gb},
                 (const size_t[]){sizeof g, sizeof gb, sizeof gb}, 3);
    raw_expect_error(&r, 109, PS_EPROTO, REPLY_MS);
    /* two metas, one frame */
    push_req_init(&q, 110, mp, 2, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 110, PS_EPROTO, REPLY_MS);
    /* two metas, no frames at all */
    push_req_init(&q, 111, mp, 2, 0, 0);
    raw_send_hdr(&r, &q.h, NULL, NULL, 0);
    raw_expect_error(&r, 111, PS_EPROTO, REPLY_MS);
    /* no metas, one frame */
    push_req_init(&q, 136, mp, 0, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 136, PS_EPROTO, REPLY_MS);
    /* an empty push: nothing to apply */
    push_req_init(&q, 137, mp, 0, 0, 0);
    raw_send_hdr(&r, &q.h, NULL, NULL, 0);
    raw_expect_error(&r, 137, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(push_nbytes_mismatch) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float g[NW] = {1, 1, 1, 1, 1, 1};
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "w", (const size_t[]){2, 3}, 2, sb);
    Ps__TensorMeta *mp[1] = {&m};
    push_req q;
    /* nbytes disagrees with the shape (the frame agrees with nbytes) */
    m.nbytes = 20;
    push_req_init(&q, 112, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){20}, 1);
    raw_expect_error(&r, 112, PS_EPROTO, REPLY_MS);
    /* nbytes disagrees with the shape and the frame (which agree) */
    push_req_init(&q, 135, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 135, PS_EPROTO, REPLY_MS);
    /* nbytes right, the frame is short */
    m.nbytes = sizeof g;
    push_req_init(&q, 113, mp, 1, 0, 0);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g - 1}, 1);
    raw_expect_error(&r, 113, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(wrong_protocol_version) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    Ps__Header h = req_header(114);
    h.protocol_version = PS_PROTOCOL_VERSION + 1;
    Ps__Hello hello = PS__HELLO__INIT;
    hello.num_workers = 1;
    h.body_case = PS__HEADER__BODY_HELLO;
    h.hello = &hello;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error(&r, 114, PS_EVERSION, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(garbage_header) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    const unsigned char junk[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    raw_send(&r, (const void *[]){junk}, (const size_t[]){sizeof junk}, 1);
    raw_expect_error(&r, 0, PS_EPROTO, REPLY_MS); /* nothing decoded: request id 0 */
    const char http[] = "GET / HTTP/1.1\r\nHost: psd\r\n\r\n";
    raw_send(&r, (const void *[]){http, "trailing"}, (const size_t[]){sizeof http - 1, 8}, 2);
    raw_expect_error(&r, 0, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(empty_header_frame) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_send(&r, (const void *[]){""}, (const size_t[]){0}, 1);
    raw_expect_error(&r, 0, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(header_without_body) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    Ps__Header h = req_header(115);
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error(&r, 115, PS_EPROTO, REPLY_MS); /* the header decoded: its id is echoed */
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(reply_type_as_request) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    Ps__Header h = req_header(116);
    Ps__Welcome w = PS__WELCOME__INIT;
    h.body_case = PS__HEADER__BODY_WELCOME;
    h.welcome = &w;
    raw_send_hdr(&r, &h, NULL, NULL, 0);
    raw_expect_error(&r, 116, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(pull_with_payload_frames) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float junk[NW] = {0};
    raw_pull(&r, 117, (char *[]){"w"}, 1, 0, (const void *[]){junk}, (const size_t[]){sizeof junk},
             1);
    raw_expect_error(&r, 117, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

START_TEST(pull_future_version) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    /* sync defers only the next version; two ahead can never be answered in
     * order: ESTALE tells the client its idea of the shard is out of date */
    raw_pull(&r, 118, (char *[]){"w"}, 1, 2, NULL, NULL, 0);
    raw_expect_error(&r, 118, PS_ESTALE, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
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
    raw_conn r;
    raw_open(&r, psd.endpoint);
    char *names[PS_WIRE_MAX_FRAMES + 1];
    for (size_t i = 0; i <= PS_WIRE_MAX_FRAMES; i++)
        names[i] = "w";
    raw_pull(&r, 133, names, PS_WIRE_MAX_FRAMES + 1, 0, NULL, NULL, 0);
    raw_expect_error(&r, 133, PS_EPROTO, REPLY_MS);
    raw_pull(&r, 134, names, 0, 0, NULL, NULL, 0); /* and none at all */
    raw_expect_error(&r, 134, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
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

START_TEST(push_worker_index_out_of_range) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float g[NW] = {1, 1, 1, 1, 1, 1};
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "w", (const size_t[]){2, 3}, 2, sb);
    Ps__TensorMeta *mp[1] = {&m};
    push_req q;
    push_req_init(&q, 122, mp, 1, 0, 1); /* the job has one worker: index 0 */
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 122, PS_EINVAL, REPLY_MS);
    push_req_init(&q, 123, mp, 1, 0, UINT32_MAX);
    raw_send_hdr(&r, &q.h, (const void *[]){g}, (const size_t[]){sizeof g}, 1);
    raw_expect_error(&r, 123, PS_EINVAL, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

/* Sends CreateVars for one var with SGD and the given initial values. */
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
    raw_conn r;
    raw_open(&r, psd.endpoint);
    float init[2] = {7, 8};
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "fresh", (const size_t[]){2}, 1, sb);
    Ps__TensorMeta *mp[1] = {&m};
    Ps__Optimizer o;
    ps__optimizer__init(&o);
    o.kind = (Ps__OptKind)99;
    o.lr = LR;
    Ps__Optimizer *op[1] = {&o};
    Ps__CreateVars cv = PS__CREATE_VARS__INIT;
    cv.vars = mp;
    cv.n_vars = 1;
    cv.optimizers = op;
    cv.n_optimizers = 1;
    Ps__Header h = req_header(128);
    h.body_case = PS__HEADER__BODY_CREATE_VARS;
    h.create_vars = &cv;
    raw_send_hdr(&r, &h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
    raw_expect_error(&r, 128, PS_EINVAL, REPLY_MS);
    /* optimizers missing */
    cv.n_optimizers = 0;
    h.request_id = 129;
    raw_send_hdr(&r, &h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
    raw_expect_error(&r, 129, PS_EPROTO, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}
END_TEST

/* ---- names are valid UTF-8 without NUL; values are finite; one optimizer per variable ---- */

/* Waits for an Error reply with code and a message containing want; asserts. */
static void expect_error_text(raw_conn *r, uint64_t request_id, int code, const char *want) {
    Ps__Header *h = raw_recv(r, REPLY_MS, NULL);
    ck_assert_msg(h != NULL, "no reply to %llu", (unsigned long long)request_id);
    ck_assert_msg(h->body_case == PS__HEADER__BODY_ERROR, "request %llu: body %d, want %s",
                  (unsigned long long)request_id, (int)h->body_case, ps_errname(code));
    ck_assert_uint_eq(h->request_id, request_id);
    ck_assert_msg(h->error->code == code, "request %llu: %s (%s), want %s",
                  (unsigned long long)request_id, h->error->code_name, h->error->message,
                  ps_errname(code));
    ck_assert_msg(strstr(h->error->message, want) != NULL, "no '%s' in: %s", want,
                  h->error->message);
    ps__header__free_unpacked(h, NULL);
}

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
        expect_error_text(&r, id, PS_EPROTO, "create_vars.vars[0].name");
        raw_pb pull = {.n = 0};
        raw_pb_bytes(&pull, 1, "w", 1);
        raw_pb_bytes(&pull, 1, name, len);
        raw_send_body(&r, ++id, 14, &pull, 0, NULL);
        expect_error_text(&r, id, PS_EPROTO, "pull.names[1]");
        raw_pb meta = raw_pb_meta2(name, len), push = {.n = 0};
        raw_pb_bytes(&push, 1, meta.b, meta.n);
        raw_send_body(&r, ++id, 16, &push, 1, g);
        expect_error_text(&r, id, PS_EPROTO, "push.grads[0].name");
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
    Ps__Header *hold;
    Ps__StatsReply *st = get_stats(&good, &hold);
    ck_assert_uint_eq(st->n_vars, 3);
    ck_assert_str_eq(st->vars[2]->name, wide);
    ps__header__free_unpacked(hold, NULL);
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
    expect_error_text(&r, 320, PS_EINVAL, "variable 'fresh': initial value 1 is NaN");
    bad[0] = -INFINITY;
    raw_create(&r, 321, mp, 2, (const void *[]){ok, bad}, (const size_t[]){sizeof ok, sizeof bad});
    expect_error_text(&r, 321, PS_EINVAL, "variable 'fresh': initial value 0 is infinite");
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
    Ps__TensorMeta m;
    uint64_t sb[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "w", (const size_t[]){2, 3}, 2, sb);
    Ps__TensorMeta *mp[1] = {&m};
    Ps__Optimizer o;
    Ps__Optimizer *op[1] = {&o};
    Ps__CreateVars cv = PS__CREATE_VARS__INIT;
    cv.vars = mp;
    cv.n_vars = 1;
    cv.optimizers = op;
    cv.n_optimizers = 1;
    Ps__Header h = req_header(330);
    h.body_case = PS__HEADER__BODY_CREATE_VARS;
    h.create_vars = &cv;
    ps__optimizer__init(&o);
    o.kind = PS__OPT_KIND__OPT_SGD;
    o.lr = 0.25f;
    raw_send_hdr(&r, &h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
    expect_error_text(&r, 330, PS_EEXIST,
                      "variable 'w' exists with optimizer sgd lr=0.1, the request says sgd "
                      "lr=0.25");
    o.kind = PS__OPT_KIND__OPT_ADAM;
    o.lr = LR;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.epsilon = 1e-7f;
    h.request_id = 331;
    raw_send_hdr(&r, &h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
    expect_error_text(&r, 331, PS_EEXIST,
                      "exists with optimizer sgd lr=0.1, the request says adam lr=0.1 beta1=0.9 "
                      "beta2=0.999 epsilon=1e-07");
    /* fields SGD does not use do not count: the same optimizer, idempotent */
    o.kind = PS__OPT_KIND__OPT_SGD;
    h.request_id = 332;
    raw_send_hdr(&r, &h, (const void *[]){init}, (const size_t[]){sizeof init}, 1);
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
    Ps__Header *hold;
    Ps__StatsReply *st = get_stats(&good, &hold);
    /* hello, create, pull (setup), 2 bad ones, this stats */
    ck_assert_uint_eq(st->requests, 6);
    ck_assert_uint_eq(st->errors, 2);
    ck_assert_uint_eq(st->version, 0);
    ck_assert_uint_eq(st->pushes_applied, 0);
    ck_assert_uint_eq(st->stale_pushes, 0);
    ck_assert_uint_eq(st->pending_pulls, 0);
    ck_assert_uint_eq(st->num_workers, 1);
    ck_assert_int_eq(st->mode, PS__MODE__MODE_SYNC);
    ck_assert_uint_eq(st->n_vars, 2);
    ck_assert_str_eq(st->vars[0]->name, "w");
    ck_assert_uint_eq(st->vars[0]->numel, NW);
    ck_assert_str_eq(st->vars[0]->optimizer, "sgd");
    ck_assert_str_eq(st->vars[1]->name, "b");
    ck_assert_uint_eq(st->vars[1]->numel, NB);
    ck_assert_uint_ge(st->bytes_in, sizeof W0 + sizeof B0);  /* the initial values */
    ck_assert_uint_ge(st->bytes_out, sizeof W0 + sizeof B0); /* one pull */
    ck_assert(st->uptime_seconds > 0 && st->uptime_seconds < 60);
    ps__header__free_unpacked(hold, NULL);
}
END_TEST

/* ---- sync semantics: two workers ---- */

START_TEST(sync_two_workers) {
    good_client c0, c1;
    good_open(&c0, 0, 2, 1);
    good_open(&c1, 1, 2, 0);
    float g0w[NW], g1w[NW], g0b[NB], g1b[NB], want_w[NW], want_b[NB];
    for (int i = 0; i < NW; i++) {
        g0w[i] = (float)i - 2.0f;
        g1w[i] = 3.0f * (float)i + 0.5f;
        want_w[i] = sgd(W0[i], (0.0f + g0w[i] + g1w[i]) * 0.5f);
    }
    for (int i = 0; i < NB; i++) {
        g0b[i] = 1.0f;
        g1b[i] = -2.0f * (float)i;
        want_b[i] = sgd(B0[i], (0.0f + g0b[i] + g1b[i]) * 0.5f);
    }
    memcpy(c0.dw, g0w, sizeof g0w);
    memcpy(c0.db, g0b, sizeof g0b);
    memcpy(c1.dw, g1w, sizeof g1w);
    memcpy(c1.db, g1b, sizeof g1b);

    /* step 0: worker 0 pushes; the step stays open */
    int applied = -1;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_uint_eq(expect_values(&c1, W0, B0), 0);
    /* a second push from the same worker for the same step (a retry) is
     * dropped: answered, counted, not applied */
    applied = -1;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);

    /* a pull for version 1 waits for worker 1 */
    ps_client_set_timeout(c0.c, 300);
    long long t0 = now_ms();
    ck_assert_int_eq(ps_client_pull(c0.c, 1, NULL), PS_ETIMEDOUT);
    ck_assert_int_ge(now_ms() - t0, 250);
    Ps__Header *hold;
    Ps__StatsReply *st = get_stats(&c1, &hold);
    ck_assert_uint_eq(st->pending_pulls, 1);
    ck_assert_uint_eq(st->version, 0);
    ck_assert_uint_eq(st->pushes_applied, 1);
    ck_assert_uint_eq(st->updates_applied, 0);
    ps__header__free_unpacked(hold, NULL);

    /* worker 1 pushes: the step completes with the mean of both gradients */
    ck_assert_int_eq(ps_client_push(c1.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ps_client_set_timeout(c0.c, REPLY_MS);
    t0 = now_ms();
    uint64_t version = 0;
    ck_assert_msg(ps_client_pull(c0.c, 1, &version) == PS_OK, "%s", ps_client_error(c0.c));
    ck_assert_int_lt(now_ms() - t0, 2000);
    ck_assert_uint_eq(version, 1);
    for (int i = 0; i < NW; i++)
        ck_assert_float_eq(c0.w[i], want_w[i]);
    for (int i = 0; i < NB; i++)
        ck_assert_float_eq(c0.b[i], want_b[i]);
    ck_assert_uint_eq(expect_values(&c1, want_w, want_b), 1);

    /* a late push for step 0 (its step closed) is dropped and changes nothing */
    applied = -1;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_uint_eq(expect_values(&c0, want_w, want_b), 1);

    st = get_stats(&c1, &hold);
    ck_assert_uint_eq(st->version, 1);
    ck_assert_uint_eq(st->stale_pushes, 2); /* the double push and the late one */
    ck_assert_uint_eq(st->dropped_pushes, 2);
    ck_assert_uint_eq(st->pushes_applied, 2);
    ck_assert_uint_eq(st->updates_applied, 1);
    ck_assert_uint_eq(st->pending_pulls, 0);
    ck_assert_uint_eq(st->errors, 0);
    /* hello x2, create, push, pull, double push, timed-out pull, stats, push, pull x2,
     * stale push, pull, this stats */
    ck_assert_uint_eq(st->requests, 14);
    ck_assert_uint_eq(st->num_workers, 2);
    ck_assert_int_eq(st->mode, PS__MODE__MODE_SYNC);
    ck_assert_uint_ge(st->bytes_in, 4 * (sizeof W0 + sizeof B0));  /* create + 3 pushes */
    ck_assert_uint_ge(st->bytes_out, 5 * (sizeof W0 + sizeof B0)); /* 5 pull replies */
    ps__header__free_unpacked(hold, NULL);

    /* step 1 works the same way from the new values */
    float want2_w[NW], want2_b[NB];
    for (int i = 0; i < NW; i++)
        want2_w[i] = sgd(want_w[i], (0.0f + g0w[i] + g1w[i]) * 0.5f);
    for (int i = 0; i < NB; i++)
        want2_b[i] = sgd(want_b[i], (0.0f + g0b[i] + g1b[i]) * 0.5f);
    memcpy(c0.dw, g0w, sizeof g0w);
    memcpy(c0.db, g0b, sizeof g0b);
    ck_assert_int_eq(ps_client_push(c1.c, 1, &applied), PS_OK);
    ck_assert_int_eq(applied, 0);
    ck_assert_int_eq(ps_client_push(c0.c, 1, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(expect_values(&c0, want2_w, want2_b), 2);
    good_close(&c0);
    good_close(&c1);
}
END_TEST

/* A deferred pull, seen on the wire: no reply until the step completes, then the new values. */
START_TEST(sync_deferred_pull_raw) {
    good_client c0, c1;
    good_open(&c0, 0, 2, 1);
    good_open(&c1, 1, 2, 0);
    for (int i = 0; i < NW; i++)
        c0.dw[i] = c1.dw[i] = 1.0f;
    for (int i = 0; i < NB; i++)
        c0.db[i] = c1.db[i] = 2.0f;
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_pull(&r, 140, (char *[]){"b"}, 1, 1, NULL, NULL, 0);
    ck_assert_int_eq(ps_client_push(c0.c, 0, NULL), PS_OK);
    Ps__Header *h = raw_recv(&r, 300, NULL);
    ck_assert_msg(h == NULL, "the pull was answered before the step completed");
    ck_assert_int_eq(ps_client_push(c1.c, 0, NULL), PS_OK);
    ps_frames f;
    h = raw_recv(&r, REPLY_MS, &f);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_PULL_REPLY);
    ck_assert_uint_eq(h->request_id, 140);
    ck_assert_uint_eq(h->pull_reply->version, 1);
    ck_assert_uint_eq(h->pull_reply->n_tensors, 1);
    ck_assert_str_eq(h->pull_reply->tensors[0]->name, "b");
    ck_assert_uint_eq(f.n, 2);
    ck_assert_uint_eq(zmq_msg_size(&f.frames[1]), sizeof B0);
    float got[NB];
    memcpy(got, zmq_msg_data(&f.frames[1]), sizeof got);
    for (int i = 0; i < NB; i++)
        ck_assert_float_eq(got[i], sgd(B0[i], 2.0f));
    ps_frames_close(&f);
    ps__header__free_unpacked(h, NULL);
    raw_close(&r);
    good_close(&c0);
    good_close(&c1);
}
END_TEST

/* ---- async semantics ---- */

START_TEST(async_each_push_applies) {
    good_client c0, c1;
    good_open(&c0, 0, 2, 1);
    good_open(&c1, 1, 2, 0);
    float want_w[NW], want_b[NB];
    for (int i = 0; i < NW; i++) {
        c0.dw[i] = (float)i;
        c1.dw[i] = -0.5f;
        want_w[i] = sgd(W0[i], c0.dw[i]);
    }
    for (int i = 0; i < NB; i++) {
        c0.db[i] = 1.0f;
        c1.db[i] = (float)i * 4.0f;
        want_b[i] = sgd(B0[i], c0.db[i]);
    }

    int applied = 0;
    ck_assert_int_eq(ps_client_push(c0.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(expect_values(&c1, want_w, want_b), 1);

    /* worker 1 pushes for the same step: applied on arrival, on top */
    for (int i = 0; i < NW; i++)
        want_w[i] = sgd(want_w[i], c1.dw[i]);
    for (int i = 0; i < NB; i++)
        want_b[i] = sgd(want_b[i], c1.db[i]);
    ck_assert_int_eq(ps_client_push(c1.c, 0, &applied), PS_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(expect_values(&c0, want_w, want_b), 2);

    /* a pull for a future version waits for the pushes that reach it */
    ps_client_set_timeout(c0.c, 300);
    long long t0 = now_ms();
    ck_assert_int_eq(ps_client_pull(c0.c, 3, NULL), PS_ETIMEDOUT);
    ck_assert_int_ge(now_ms() - t0, 250);
    ps_client_set_timeout(c0.c, REPLY_MS);
    for (int i = 0; i < NW; i++)
        want_w[i] = sgd(want_w[i], c1.dw[i]);
    for (int i = 0; i < NB; i++)
        want_b[i] = sgd(want_b[i], c1.db[i]);
    ck_assert_int_eq(ps_client_push(c1.c, 7, &applied), PS_OK); /* async ignores the step */
    ck_assert_int_eq(applied, 1);
    t0 = now_ms();
    uint64_t version = 0;
    ck_assert_msg(ps_client_pull(c0.c, 3, &version) == PS_OK, "%s", ps_client_error(c0.c));
    ck_assert_int_lt(now_ms() - t0, 2000);
    ck_assert_uint_eq(version, 3);
    for (int i = 0; i < NW; i++)
        ck_assert_float_eq(c0.w[i], want_w[i]);
    for (int i = 0; i < NB; i++)
        ck_assert_float_eq(c0.b[i], want_b[i]);

    Ps__Header *hold;
    Ps__StatsReply *st = get_stats(&c0, &hold);
    ck_assert_int_eq(st->mode, PS__MODE__MODE_ASYNC);
    ck_assert_uint_eq(st->version, 3);
    ck_assert_uint_eq(st->pushes_applied, 3);
    ck_assert_uint_eq(st->updates_applied, 3);
    ck_assert_uint_eq(st->stale_pushes, 0);
    ck_assert_uint_eq(st->errors, 0);
    ck_assert_uint_eq(st->pending_pulls, 0);
    ps__header__free_unpacked(hold, NULL);
    good_close(&c0);
    good_close(&c1);
}
END_TEST

/* ---- shutdown ---- */

START_TEST(shutdown_request) {
    good_client c0;
    good_open(&c0, 0, 2, 1);
    /* a pull waiting for version 1 is told the shard is going away */
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_pull(&r, 150, (char *[]){"w"}, 1, 1, NULL, NULL, 0);
    ck_assert_ptr_null(raw_recv(&r, 200, NULL));
    ck_assert_msg(ps_client_shutdown(c0.c, 0) == PS_OK, "%s", ps_client_error(c0.c));
    raw_expect_error(&r, 150, PS_ESHUTDOWN, REPLY_MS);
    raw_close(&r);
    good_close(&c0);
    int st = ps_test_wait(psd.pid, 5000);
    if (st != 0) ps_test_dump(psd.log);
    psd.pid = 0;
    ck_assert_int_eq(st, 0);
}
END_TEST

static Suite *requests_suite(void) {
    Suite *s = suite_create("psd_requests");
    TCase *tc = tcase_create("bad_requests");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_sync1, teardown_psd);
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
    tcase_add_test(tc, create_vars_same_shape_idempotent);
    tcase_add_test(tc, create_vars_different_shape);
    tcase_add_test(tc, create_vars_bad_optimizer);
    tcase_add_test(tc, hello_wrong_num_workers);
    tcase_add_test(tc, stats_count_errors);
    tcase_add_test(tc, names_must_be_utf8_without_nul);
    tcase_add_test(tc, create_vars_non_finite_init);
    tcase_add_test(tc, create_vars_other_optimizer);
    suite_add_tcase(s, tc);

    tc = tcase_create("sync");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_sync2, teardown_psd);
    tcase_add_test(tc, sync_two_workers);
    tcase_add_test(tc, sync_deferred_pull_raw);
    tcase_add_test(tc, shutdown_request);
    suite_add_tcase(s, tc);

    tc = tcase_create("async");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_async2, teardown_psd);
    tcase_add_test(tc, async_each_push_applies);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    if (!getenv("PSD")) {
        fprintf(stderr, "PSD is not set\n");
        return 77;
    }
    return ps_test_run_suite(requests_suite());
}
