/* Deferred pulls are bounded and released, against a real async psd: pulls over
 * --max-pending-per-peer, --max-pending-pulls or --max-pending-mb get EBUSY naming the
 * flag; a padded request is not kept whole; the pulls of a connection that closes are
 * freed; a pull waiting past --max-pull-wait-ms gets ETIMEDOUT; a pull of a worker
 * removed after --worker-timeout gets EREJOIN. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "raw.h"
#include "testutil.h"
#include "wire.h"

static ps_test_psd psd;

/* Starts an async psd with extra flags and creates the variable "v" (4 floats) through
 * a client (worker 0 of `workers`, heartbeating), which stays open for Stats (*out). */
static void start(const char *const *flags, unsigned workers, ps_client **out) {
    const char *args[32] = {"--mode", "async"};
    int n = 2;
    for (int i = 0; flags[i]; i++)
        args[n++] = flags[i];
    args[n] = NULL;
    ck_assert_int_eq(ps_test_psd_start(&psd, args, 10000), 0);
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(out, eps, 1, 0, workers, err, sizeof err), PS_OK);
    ps_client_set_timeout(*out, 5000);
    static float v[4], g[4];
    ps_client_tensor t = {
        .name = "v", .shard = 0, .rank = 1, .shape = {4}, .opt = ps_opt_spec_default(PS_OPT_SGD)};
    t.param = v;
    t.grad = g;
    ck_assert_int_eq(ps_client_add(*out, &t), PS_OK);
    ck_assert_msg(ps_client_hello(*out, NULL, NULL) == PS_OK, "%s", ps_client_error(*out));
    ck_assert_msg(ps_client_create_vars(*out, NULL) == PS_OK, "%s", ps_client_error(*out));
}

static void stop(ps_client *c) {
    ps_client_close(c);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 10000), 0);
}

/* Sends a Pull of `n_names` times "v" for a version far ahead; `pad` bytes of an unknown
 * field make the request that much bigger. */
static void far_pull(raw_conn *r, uint64_t id, size_t n_names, size_t pad, int worker) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Pull p = PS__PULL__INIT;
    char **names = calloc(n_names, sizeof *names);
    for (size_t i = 0; i < n_names; i++)
        names[i] = "v";
    p.names = names;
    p.n_names = n_names;
    p.min_version = 1000000;
    if (worker >= 0) {
        p.has_worker = 1;
        p.worker_index = (uint32_t)worker;
    }
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = id;
    h.body_case = PS__HEADER__BODY_PULL;
    h.pull = &p;
    size_t len = ps__header__get_packed_size(&h);
    /* field 1000, length-delimited: tag varint (1000 << 3 | 2), length varint, bytes */
    unsigned char *buf = malloc(len + pad + 16);
    ps__header__pack(&h, buf);
    size_t k = len;
    if (pad) {
        unsigned tag = 1000u << 3 | 2u;
        for (; tag >= 0x80; tag >>= 7)
            buf[k++] = (unsigned char)(tag | 0x80);
        buf[k++] = (unsigned char)tag;
        size_t l = pad;
        for (; l >= 0x80; l >>= 7)
            buf[k++] = (unsigned char)(l | 0x80);
        buf[k++] = (unsigned char)l;
        memset(buf + k, 'x', pad);
        k += pad;
    }
    const void *d[1] = {buf};
    size_t lens[1] = {k};
    raw_send(r, d, lens, 1);
    free(buf);
    free(names);
}

/* Sends a PushPull of worker 0 (the stats client's index) with a gradient for "v". */
static void push_pull(raw_conn *r, uint64_t id) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__PushPull pp = PS__PUSH_PULL__INIT;
    Ps__Push p = PS__PUSH__INIT;
    Ps__TensorMeta m;
    Ps__TensorMeta *mp = &m;
    size_t shape[1] = {4};
    uint64_t shape64[PS_WIRE_MAX_RANK];
    ps_tensor_meta_f32(&m, "v", shape, 1, shape64);
    p.grads = &mp;
    p.n_grads = 1;
    pp.push = &p;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = id;
    h.body_case = PS__HEADER__BODY_PUSH_PULL;
    h.push_pull = &pp;
    float g[4] = {1, 1, 1, 1};
    const void *pl[1] = {g};
    size_t lens[1] = {sizeof g};
    raw_send_hdr(r, &h, pl, lens, 1);
}

static ps_stats stats(ps_client *c) {
    ps_stats h;
    ck_assert_msg(ps_client_stats(c, 0, &h) == PS_OK, "%s", ps_client_error(c));
    return h;
}

/* Waits up to timeout_ms for Stats' pending_pulls to be `want`. */
static void wait_pending(ps_client *c, uint64_t want, int timeout_ms) {
    long long deadline = ps_test_now_ms() + timeout_ms;
    uint64_t got;
    for (;;) {
        ps_stats h = stats(c);
        got = h.pending_pulls;
        ps_stats_free(&h);
        if (got == want || ps_test_now_ms() > deadline) break;
    }
    if (got != want) ps_test_dump(psd.log);
    ck_assert_msg(got == want, "%llu pulls waiting after %d ms, want %llu", (unsigned long long)got,
                  timeout_ms, (unsigned long long)want);
}

/* Expects an Error with this code whose message names `flag`. */
static void expect_busy(raw_conn *r, uint64_t id, const char *flag) {
    Ps__Header *h = raw_recv(r, 5000, NULL);
    ck_assert_msg(h != NULL, "no reply to request %llu (want EBUSY)", (unsigned long long)id);
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_ERROR);
    ck_assert_msg(h->error->code == PS_EBUSY, "%s: %s", h->error->code_name, h->error->message);
    ck_assert_uint_eq(h->request_id, id);
    ck_assert_msg(strstr(h->error->message, flag), "'%s' does not name %s", h->error->message,
                  flag);
    ps__header__free_unpacked(h, NULL);
}

START_TEST(count_limits_give_ebusy) {
    const char *flags[] = {"--max-pending-per-peer", "3", "--max-pending-pulls", "5", NULL};
    ps_client *c;
    start(flags, 1, &c);
    raw_conn a, b, x;
    raw_open(&a, psd.endpoint);
    raw_open(&b, psd.endpoint);
    raw_open(&x, psd.endpoint);
    for (uint64_t i = 1; i <= 3; i++) /* a padded request: only what is needed is kept */
        far_pull(&a, i, 1, 60000, -1);
    wait_pending(c, 3, 5000);
    far_pull(&a, 4, 1, 0, -1);
    expect_busy(&a, 4, "--max-pending-per-peer 3");
    push_pull(&a, 5); /* its pull could not wait: refused before its push is applied */
    expect_busy(&a, 5, "--max-pending-per-peer 3");
    far_pull(&b, 1, 1, 0, -1);
    far_pull(&b, 2, 1, 0, -1);
    wait_pending(c, 5, 5000);
    far_pull(&x, 1, 1, 0, -1);
    expect_busy(&x, 1, "--max-pending-pulls 5");
    ps_stats h = stats(c);
    ps_stats *st = &h;
    ck_assert_uint_eq(st->pending_pulls, 5);
    ck_assert_uint_eq(st->pending_pulls_refused, 3);
    ck_assert_uint_eq(st->version, 0); /* the refused PushPull applied nothing */
    ck_assert_msg(st->pending_pull_bytes < 5 * 1024, "5 waiting pulls hold %llu bytes",
                  (unsigned long long)st->pending_pull_bytes);
    ps_stats_free(&h);
    raw_close(&a);
    raw_close(&b);
    raw_close(&x);
    stop(c);
}
END_TEST

START_TEST(memory_limit_gives_ebusy) {
    const char *flags[] = {"--max-pending-per-peer", "1000", "--max-pending-mb", "1", NULL};
    ps_client *c;
    start(flags, 1, &c);
    raw_conn a;
    raw_open(&a, psd.endpoint);
    /* each holds 1024 variable references (8 KiB): 1 MiB is reached before 200 */
    uint64_t id;
    Ps__Header *h = NULL;
    for (id = 1; id <= 200; id++) {
        far_pull(&a, id, 1024, 0, -1);
        if ((h = raw_recv(&a, 0, NULL)) != NULL) break;
    }
    if (!h) h = raw_recv(&a, 5000, NULL);
    ck_assert_msg(h != NULL, "200 pulls of 8 KiB each and no EBUSY");
    ck_assert_int_eq(h->body_case, PS__HEADER__BODY_ERROR);
    ck_assert_msg(h->error->code == PS_EBUSY && strstr(h->error->message, "--max-pending-mb 1"),
                  "%s: %s", h->error->code_name, h->error->message);
    ps__header__free_unpacked(h, NULL);
    ps_stats st = stats(c);
    ck_assert_uint_le(st.pending_pull_bytes, 1u << 20);
    ck_assert_uint_ge(st.pending_pulls, 100);
    ps_stats_free(&st);
    raw_close(&a);
    stop(c);
}
END_TEST

START_TEST(closed_connection_frees_its_pulls) {
    const char *flags[] = {NULL};
    ps_client *c;
    start(flags, 1, &c);
    raw_conn a, keep;
    raw_open(&a, psd.endpoint);
    raw_open(&keep, psd.endpoint);
    for (uint64_t i = 1; i <= 3; i++)
        far_pull(&a, i, 1, 60000, -1);
    far_pull(&keep, 1, 1, 0, -1);
    wait_pending(c, 4, 5000);
    raw_close(&a);
    wait_pending(c, 1, 5000); /* only the open connection's pull is left */
    ps_stats h = stats(c);
    ck_assert_uint_eq(h.pending_pulls_released, 3);
    ps_stats_free(&h);
    raw_close(&keep);
    wait_pending(c, 0, 5000);
    stop(c);
}
END_TEST

START_TEST(pull_past_max_wait_times_out) {
    const char *flags[] = {"--max-pull-wait-ms", "300", NULL};
    ps_client *c;
    start(flags, 1, &c);
    raw_conn a;
    raw_open(&a, psd.endpoint);
    long long t0 = ps_test_now_ms();
    far_pull(&a, 7, 1, 0, -1);
    raw_expect_error(&a, 7, PS_ETIMEDOUT, 5000);
    long long waited = ps_test_now_ms() - t0;
    ck_assert_msg(waited >= 250, "answered ETIMEDOUT after %lld ms (limit 300)", waited);
    ps_stats h = stats(c);
    ck_assert_uint_eq(h.pending_pulls, 0);
    ck_assert_uint_eq(h.pending_pulls_timed_out, 1);
    ps_stats_free(&h);
    raw_close(&a);
    stop(c);
}
END_TEST

START_TEST(removed_worker_pull_gets_erejoin) {
    const char *flags[] = {"--workers", "2", "--worker-timeout", "400", NULL};
    ps_client *c;
    start(flags, 2, &c);
    raw_conn a;
    raw_open(&a, psd.endpoint);
    far_pull(&a, 9, 1, 0, 1);
    raw_expect_error(&a, 9, PS_EREJOIN, 5000);
    ps_stats h = stats(c);
    ck_assert_uint_eq(h.pending_pulls, 0);
    ck_assert_uint_ge(h.pending_pulls_released, 1);
    ps_stats_free(&h);
    raw_close(&a);
    stop(c);
}
END_TEST

int main(void) {
    Suite *s = suite_create("psd_pending");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, count_limits_give_ebusy);
    tcase_add_test(tc, memory_limit_gives_ebusy);
    tcase_add_test(tc, closed_connection_frees_its_pulls);
    tcase_add_test(tc, pull_past_max_wait_times_out);
    tcase_add_test(tc, removed_worker_pull_gets_erejoin);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
