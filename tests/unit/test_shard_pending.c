/* A shard's deferred pulls (ps-server/shard/pending.c) with simulated time and
 * no sockets: each limit refuses with its flag named, deadlines expire in
 * arrival order and not a nanosecond early, a removed worker's pulls are
 * answered EREJOIN and only those, a closed connection's are dropped unanswered,
 * and the byte count returns to zero. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "pending.h"
#include "ps_error.h"
#include "testutil.h"

#define MS 1000000ull

static ps_pending_limits limits(size_t pulls, size_t per_peer, size_t bytes) {
    return (ps_pending_limits){pulls, per_peer, bytes, 100 * MS};
}

/* Records the answers the list gives through its callback. */
typedef struct {
    uint64_t ids[16];
    int codes[16];
    int n;
} answers;

static void record(void *ctx, ps_pending_pull *p, int code, const char *msg) {
    answers *a = ctx;
    (void)msg;
    a->ids[a->n] = p->request_id;
    a->codes[a->n++] = code;
}

static int add(ps_pending *q, const char *peer, int fd, uint64_t req, uint32_t worker,
               uint64_t now) {
    ps_pending_info info = {.request_id = req, .min_version = 1, .has_worker = 1, .worker = worker};
    char err[200];
    return ps_pending_add(q, peer, strlen(peer), fd, NULL, 0, &info, now, err, sizeof err);
}

START_TEST(each_limit_refuses_with_its_flag) {
    ps_pending q;
    ps_pending_limits l = limits(3, 2, 1 << 20);
    ps_pending_init(&q, &l);
    char err[200];
    ck_assert_int_eq(add(&q, "a", 5, 1, 0, 0), PS_OK);
    ck_assert_int_eq(add(&q, "a", 5, 2, 0, 0), PS_OK);
    ck_assert_int_eq(ps_pending_room(&q, "a", 1, 1, err, sizeof err), PS_EBUSY);
    ck_assert_ptr_nonnull(strstr(err, "--max-pending-per-peer 2"));
    ck_assert_int_eq(add(&q, "b", 6, 3, 1, 0), PS_OK);
    ck_assert_int_eq(ps_pending_room(&q, "c", 1, 1, err, sizeof err), PS_EBUSY);
    ck_assert_ptr_nonnull(strstr(err, "--max-pending-pulls 3"));
    ck_assert_uint_eq(q.refused, 2);
    ck_assert_uint_eq(q.n, 3);
    ck_assert_uint_eq(q.n_peers, 2);
    ps_pending_free(&q);
    ck_assert_uint_eq(q.bytes, 0);
    /* bytes: one pull and its peer fit in 1 KiB, a pull of 1000 variables does not */
    l = limits(100, 100, 1024);
    ps_pending_init(&q, &l);
    ck_assert_int_eq(ps_pending_room(&q, "a", 1, 1, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_pending_room(&q, "a", 1, 1000, err, sizeof err), PS_EBUSY);
    ck_assert_ptr_nonnull(strstr(err, "--max-pending-mb"));
    ps_pending_free(&q);
}
END_TEST

START_TEST(deadlines_expire_in_arrival_order) {
    ps_pending q;
    ps_pending_limits l = limits(100, 100, 1 << 20);
    ps_pending_init(&q, &l);
    answers a = {0};
    ck_assert_int_eq(add(&q, "a", 5, 1, 0, 0), PS_OK);
    ck_assert_int_eq(add(&q, "b", 6, 2, 1, 10 * MS), PS_OK);
    ps_pending_expire(&q, 100 * MS - 1, record, &a);
    ck_assert_int_eq(a.n, 0);
    ps_pending_expire(&q, 100 * MS, record, &a); /* the first one's deadline */
    ck_assert_int_eq(a.n, 1);
    ck_assert_uint_eq(a.ids[0], 1);
    ck_assert_int_eq(a.codes[0], PS_ETIMEDOUT);
    ps_pending_expire(&q, 200 * MS, record, &a);
    ck_assert_int_eq(a.n, 2);
    ck_assert_uint_eq(a.ids[1], 2);
    ck_assert_uint_eq(q.timed_out, 2);
    ck_assert_uint_eq(q.n, 0);
    ck_assert_uint_eq(q.bytes, 0);
    ps_pending_free(&q);
}
END_TEST

START_TEST(a_removed_workers_pulls_are_answered_rejoin) {
    ps_pending q;
    ps_pending_limits l = limits(100, 100, 1 << 20);
    ps_pending_init(&q, &l);
    answers a = {0};
    ck_assert_int_eq(add(&q, "a", 5, 1, 0, 0), PS_OK);
    ck_assert_int_eq(add(&q, "b", 6, 2, 1, 0), PS_OK);
    ck_assert_int_eq(add(&q, "a", 5, 3, 0, 0), PS_OK);
    ps_pending_drop_worker(&q, 0, record, &a);
    ck_assert_int_eq(a.n, 2);
    ck_assert_uint_eq(a.ids[0], 1);
    ck_assert_uint_eq(a.ids[1], 3);
    ck_assert_int_eq(a.codes[0], PS_EREJOIN);
    ck_assert_uint_eq(q.n, 1);
    ck_assert_uint_eq(q.head->request_id, 2);
    ck_assert_uint_eq(q.released, 2);
    ps_pending_free(&q);
}
END_TEST

START_TEST(a_closed_connection_drops_its_pulls_unanswered) {
    ps_pending q;
    ps_pending_limits l = limits(100, 100, 1 << 20);
    ps_pending_init(&q, &l);
    ck_assert_int_eq(add(&q, "a", 5, 1, 0, 0), PS_OK);
    ck_assert_int_eq(add(&q, "b", 6, 2, 1, 0), PS_OK);
    ck_assert_int_eq(add(&q, "a", 5, 3, 0, 0), PS_OK);
    ck_assert_uint_eq(ps_pending_release_fd(&q, 5), 2);
    ck_assert_uint_eq(ps_pending_release_fd(&q, 5), 0);
    ck_assert_uint_eq(q.n, 1);
    ck_assert_uint_eq(q.n_peers, 1);
    ck_assert_uint_eq(ps_pending_release_fd(&q, 6), 1);
    ck_assert_uint_eq(q.bytes, 0);
    ck_assert_ptr_null(q.head);
    ps_pending_free(&q);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("shard_pending");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, each_limit_refuses_with_its_flag);
    tcase_add_test(tc, deadlines_expire_in_arrival_order);
    tcase_add_test(tc, a_removed_workers_pulls_are_answered_rejoin);
    tcase_add_test(tc, a_closed_connection_drops_its_pulls_unanswered);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(make_suite());
}
