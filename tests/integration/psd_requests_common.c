/* What the test_psd_requests_* files share: one psd, a well-behaved client, raw
 * requests and the fixtures (see psd_requests_common.h). */
#include "psd_requests_common.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_error.h"
#include "testutil.h"

const float W0[NW] = {1.0f, -2.0f, 0.5f, 4.0f, 0.0f, -1.0f};
const float B0[NB] = {0.25f, 0.5f, -0.75f, 2.0f};

ps_test_psd psd;

/* One plain-SGD update as psd computes it (common/optim.c: float arithmetic). */
float sgd(float w, float g) {
    return w - LR * g;
}

/* ---- a well-behaved worker (the client library) ---- */

good_client good; /* worker 0 of the bad_requests fixture */

/* Opens a client for worker `index` of `workers`, registers "w" and "b" (SGD, LR) and says
 * Hello; with `create` also creates them with W0 and B0. */
void good_open(good_client *g, unsigned index, unsigned workers, int create) {
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

void good_close(good_client *g) {
    ps_client_close(g->c);
    g->c = NULL;
}

/* Pulls (min_version 0) and checks the values are exactly w and b; returns the version. */
uint64_t expect_values(good_client *g, const float *w, const float *b) {
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
void expect_unchanged(void) {
    ck_assert_uint_eq(expect_values(&good, W0, B0), 0);
}

/* ---- a raw DEALER (raw.h): requests built byte by byte ---- */

Ps__Header req_header(uint64_t request_id) {
    Ps__Header h = PS__HEADER__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = request_id;
    return h;
}

void push_req_init(push_req *q, uint64_t request_id, Ps__TensorMeta **metas, size_t n,
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

void expect_bad_pushes(const bad_push *cases, size_t n) {
    static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    raw_conn r;
    raw_open(&r, psd.endpoint);
    for (size_t i = 0; i < n; i++) {
        const bad_push *c = &cases[i];
        ck_assert_uint_le(c->n_metas, 2);
        ck_assert_uint_le(c->n_frames, 3);
        Ps__TensorMeta m[2], *mp[2] = {&m[0], &m[1]};
        uint64_t sb[2][PS_WIRE_MAX_RANK];
        for (size_t k = 0; k < c->n_metas; k++)
            ps_tensor_meta_f32(&m[k], c->meta[k].name, c->meta[k].shape, c->meta[k].rank, sb[k]);
        if (c->has_dtype) m[0].dtype = (Ps__DType)c->dtype;
        if (c->nbytes) m[0].nbytes = c->nbytes;
        const void *pl[3] = {ones, ones, ones};
        for (size_t k = 0; k < c->n_frames; k++)
            ck_assert_uint_le(c->frame_len[k], sizeof ones);
        push_req q;
        push_req_init(&q, c->id, mp, c->n_metas, 0, c->worker);
        raw_send_hdr(&r, &q.h, pl, c->frame_len, c->n_frames);
        raw_expect_error_text(&r, c->id, c->code, c->text, REPLY_MS);
    }
    raw_close(&r);
    expect_unchanged();
}

void expect_bad_request(const Ps__Header *h, const void *const *pl, const size_t *lens, size_t n,
                        int code, const char *text) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_send_hdr(&r, h, pl, lens, n);
    raw_expect_error_text(&r, h->request_id, code, text, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}

void expect_bad_frames(const void *const *data, const size_t *lens, size_t n, int code,
                       const char *text) {
    raw_conn r;
    raw_open(&r, psd.endpoint);
    raw_send(&r, data, lens, n);
    raw_expect_error_text(&r, 0, code, text, REPLY_MS);
    raw_close(&r);
    expect_unchanged();
}

void pull_req_init(pull_req *q, uint64_t request_id, char **names, size_t n, uint64_t min_version) {
    q->h = req_header(request_id);
    ps__pull__init(&q->pull);
    q->pull.names = names;
    q->pull.n_names = n;
    q->pull.min_version = min_version;
    q->h.body_case = PS__HEADER__BODY_PULL;
    q->h.pull = &q->pull;
}

void create_req_init(create_req *q, uint64_t request_id, const char *name, const size_t *shape,
                     size_t rank) {
    ps_tensor_meta_f32(&q->m, name, shape, rank, q->sb);
    q->mp[0] = &q->m;
    ps__optimizer__init(&q->o);
    q->o.kind = PS__OPT_KIND__OPT_SGD;
    q->o.lr = LR;
    q->op[0] = &q->o;
    ps__create_vars__init(&q->cv);
    q->cv.vars = q->mp;
    q->cv.n_vars = 1;
    q->cv.optimizers = q->op;
    q->cv.n_optimizers = 1;
    q->h = req_header(request_id);
    q->h.body_case = PS__HEADER__BODY_CREATE_VARS;
    q->h.create_vars = &q->cv;
}

/* Sends a Pull of the given names. */
void raw_pull(raw_conn *r, uint64_t request_id, char **names, size_t n, uint64_t min_version,
              const void *const *pl, const size_t *pl_lens, size_t n_pl) {
    pull_req q;
    pull_req_init(&q, request_id, names, n, min_version);
    raw_send_hdr(r, &q.h, pl, pl_lens, n_pl);
}

/* ---- fixtures ---- */

/* A failed assertion exits the test process without running the teardown: stop psd and
 * remove its directory anyway (a no-op after a normal teardown). */
static void cleanup_at_exit(void) {
    ps_test_psd_stop(&psd, 2000);
}

void start_psd_with(const char **args) {
    atexit(cleanup_at_exit);
    ps_test_children_die_with_me();
    ck_assert_msg(ps_test_psd_start(&psd, args, 10000) == 0, "psd did not start");
}

static void start_psd(const char *workers, const char *mode) {
    const char *args[] = {"--workers", workers, "--mode", mode, NULL};
    start_psd_with(args);
}

void setup_sync1(void) {
    start_psd("1", "sync");
    good_open(&good, 0, 1, 1);
    ck_assert_uint_eq(expect_values(&good, W0, B0), 0);
}

void setup_sync2(void) {
    start_psd("2", "sync");
}

void setup_async2(void) {
    start_psd("2", "async");
}

/* Stops psd with SIGTERM and checks it exits 0 (unless a test already reaped it). */
void teardown_psd(void) {
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

TCase *requests_tcase(Suite *s, const char *name, void (*setup)(void)) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup, teardown_psd);
    suite_add_tcase(s, tc);
    return tc;
}
