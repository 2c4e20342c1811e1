/* psd's limits against a real process: a message over --max-message-mb
 * drops the sender's connection, a tensor over --max-tensor-mb and a
 * variable count over --max-vars get error replies, and throughout a good
 * client keeps being served with unchanged state. (Garbage, truncated
 * headers, wrong protocol versions, frame-count mismatches, huge or
 * overflowing shapes and NaN gradients are covered by test_psd_requests.c.) */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"
#include "wire.h"

static ps_test_psd psd;

typedef struct {
    ps_client *c;
    float *v[3], *g[3];
    size_t n[3];
    size_t count;
} client;

/* A 1-worker client with `count` variables v0.. of n[i] floats. */
static int client_open(client *k, size_t count, const size_t *n, int create) {
    memset(k, 0, sizeof *k);
    const char *eps[1] = {psd.endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(&k->c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(k->c, 5000);
    k->count = count;
    for (size_t i = 0; i < count; i++) {
        k->n[i] = n[i];
        k->v[i] = calloc(n[i], sizeof(float));
        k->g[i] = calloc(n[i], sizeof(float));
        ps_client_tensor t = {
            .shard = 0, .rank = 1, .shape = {n[i]}, .opt = ps_opt_spec_default(PS_OPT_SGD)};
        snprintf(t.name, sizeof t.name, "v%zu", i);
        t.param = k->v[i];
        t.grad = k->g[i];
        ck_assert_int_eq(ps_client_add(k->c, &t), PS_OK);
    }
    ck_assert_msg(ps_client_hello(k->c, NULL, NULL) == PS_OK, "%s", ps_client_error(k->c));
    return create ? ps_client_create_vars(k->c, NULL) : PS_OK;
}

static void client_close(client *k) {
    ps_client_close(k->c);
    for (size_t i = 0; i < k->count; i++) {
        free(k->v[i]);
        free(k->g[i]);
    }
}

/* The good client pushes one step and pulls it back: served, and the values
 * are what SGD on its own gradients gives (nothing else changed them). */
static void good_step(client *k, uint64_t step) {
    for (size_t i = 0; i < k->n[0]; i++)
        k->g[0][i] = 1.0f;
    ck_assert_msg(ps_client_push(k->c, step, NULL) == PS_OK, "%s", ps_client_error(k->c));
    uint64_t v = 0;
    ck_assert_msg(ps_client_pull(k->c, step + 1, &v) == PS_OK, "%s", ps_client_error(k->c));
    ck_assert_uint_eq(v, step + 1);
    float want = -0.01f * (float)(step + 1); /* SGD lr 0.01 from 0, gradient 1 */
    ck_assert_float_eq_tol(k->v[0][0], want, 1e-6f);
}

static ps_stats *stats(client *k, ps_stats *hold) {
    ck_assert_int_eq(ps_client_stats(k->c, 0, hold), PS_OK);
    return hold;
}

START_TEST(limits_hold_and_good_client_is_served) {
    const char *args[] = {
        "--workers", "1", "--max-message-mb", "4", "--max-tensor-mb", "1", "--max-vars", "3", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd, args, 10000), 0);
    client good;
    const size_t small[2] = {1000, 10};
    ck_assert_int_eq(client_open(&good, 2, small, 1), PS_OK);
    good_step(&good, 0);

    /* 1. a 5 MiB frame (> 4): the connection is dropped, nothing is answered */
    void *ctx = zmq_ctx_new(), *raw = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
    char ep[300];
    snprintf(ep, sizeof ep, "tcp://%s", psd.endpoint);
    ck_assert_int_eq(zmq_connect(raw, ep), 0);
    size_t big = 5u << 20;
    char *junk = calloc(1, big);
    ck_assert_int_eq(zmq_send(raw, "x", 1, ZMQ_SNDMORE), 1);
    ck_assert_int_eq(zmq_send(raw, junk, big, 0), (int)big);
    free(junk);
    zmq_pollitem_t it = {raw, 0, ZMQ_POLLIN, 0};
    ck_assert_int_eq(zmq_poll(&it, 1, 500), 0);
    zmq_close(raw);
    zmq_ctx_term(ctx);
    good_step(&good, 1);

    /* 2. a tensor over --max-tensor-mb: refused, nothing created */
    client abuser;
    const size_t huge[1] = {(1u << 20) / 4 + 1}; /* 1 MiB + 4 bytes */
    ck_assert_int_eq(client_open(&abuser, 1, huge, 1), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(ps_client_error(abuser.c), "--max-tensor-mb"));
    client_close(&abuser);
    good_step(&good, 2);

    /* 3. more variables than --max-vars: refused as a whole (all or nothing) */
    const size_t three[3] = {4, 4, 4}; /* v0 and v1 exist (other sizes!), v2 is new */
    ck_assert_int_eq(client_open(&abuser, 3, three, 1), PS_EEXIST); /* shapes differ */
    client_close(&abuser);
    client many;
    const size_t ok3[3] = {1000, 10, 5};
    ck_assert_int_eq(client_open(&many, 3, ok3, 1), PS_OK); /* 3 = the limit: fine */
    client_close(&many);
    ps_stats h;
    ck_assert_uint_eq(stats(&good, &h)->n_vars, 3);
    ps_stats_free(&h);
    /* a fourth variable from another client */
    client fourth;
    const size_t one[1] = {7};
    ps_client_open(&fourth.c, (const char *[]){psd.endpoint}, 1, 0, 1, (char[256]){0}, 256);
    ps_client_set_timeout(fourth.c, 5000);
    float v[7] = {0}, g[7] = {0};
    ps_client_tensor t = {.name = "extra",
                          .shard = 0,
                          .rank = 1,
                          .shape = {one[0]},
                          .opt = ps_opt_spec_default(PS_OPT_SGD)};
    t.param = v;
    t.grad = g;
    ck_assert_int_eq(ps_client_add(fourth.c, &t), PS_OK);
    ck_assert_int_eq(ps_client_hello(fourth.c, NULL, NULL), PS_OK);
    ck_assert_int_eq(ps_client_create_vars(fourth.c, NULL), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(ps_client_error(fourth.c), "--max-vars"));
    ps_client_close(fourth.c);
    good_step(&good, 3);

    ps_stats *st = stats(&good, &h);
    ck_assert_uint_eq(st->n_vars, 3);
    ck_assert_uint_eq(st->version, 4);
    ck_assert_uint_ge(st->errors, 3); /* tensor size, the shape clash, the var count */
    ps_stats_free(&h);
    client_close(&good);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("psd_limits");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, limits_hold_and_good_client_is_served);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
