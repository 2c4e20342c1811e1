/* A shard's membership and sync step (ps-server/shard/members.c, step.c), with
 * simulated time: the expected set at start, joins and goodbyes, removal after
 * the timeout and not a tick before it, the owner's stall forgiven, clocks and
 * staleness; the step's admit rule, the count that closes it, and its reset. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "members.h"
#include "ps_error.h"
#include "step.h"
#include "testutil.h"

#define MS 1000000ull
#define T0 (5000 * MS) /* any start: the module has no clock of its own */

START_TEST(every_worker_is_expected_from_the_start) {
    ps_members ms;
    ck_assert_int_eq(ps_members_init(&ms, 3, 1, 100 * MS, 25 * MS, T0), PS_OK);
    ck_assert_uint_eq(ms.live, 3);
    for (uint32_t w = 0; w < 3; w++)
        ck_assert(ps_members_live(&ms, w));
    ck_assert(!ps_members_valid(&ms, 3));
    ck_assert(!ps_members_live(&ms, 3));
    ps_members_free(&ms);
}
END_TEST

START_TEST(silence_past_the_timeout_removes_a_worker) {
    ps_members ms;
    unsigned char gone[3];
    ck_assert_int_eq(ps_members_init(&ms, 3, 1, 100 * MS, 25 * MS, T0), PS_OK);
    /* ticks every 25 ms; workers 0 and 2 keep talking, worker 1 never does */
    uint64_t t = T0;
    for (int i = 0; i < 4; i++) {
        t += 25 * MS;
        ps_members_seen(&ms, 0, t);
        ps_members_seen(&ms, 2, t);
        ck_assert_uint_eq(ps_members_expire(&ms, t, gone), 0); /* 100 ms: not more than */
    }
    t += 25 * MS;
    ps_members_seen(&ms, 0, t);
    ck_assert_uint_eq(ps_members_expire(&ms, t, gone), 1);
    ck_assert(gone[1] && !gone[0] && !gone[2]);
    ck_assert_uint_eq(ms.live, 2);
    ck_assert_uint_eq(ms.removed, 1);
    ck_assert(!ps_members_live(&ms, 1));
    /* a heartbeat does not bring it back; a Hello does */
    ps_members_seen(&ms, 1, t);
    ck_assert(!ps_members_live(&ms, 1));
    ck_assert_int_eq(ps_members_join(&ms, 1, t, -1), 1);
    ck_assert_int_eq(ps_members_join(&ms, 1, t, -1), 0); /* already in */
    ck_assert_uint_eq(ms.live, 3);
    ps_members_free(&ms);
}
END_TEST

START_TEST(the_owners_stall_is_not_held_against_workers) {
    ps_members ms;
    unsigned char gone[2];
    ck_assert_int_eq(ps_members_init(&ms, 2, 1, 100 * MS, 25 * MS, T0), PS_OK);
    /* the owner's next check comes 400 ms late: its heartbeats are unread, not missing */
    uint64_t t = T0 + 400 * MS;
    ck_assert_uint_eq(ps_members_expire(&ms, t, gone), 0);
    ck_assert_uint_eq(ms.stalls, 1);
    /* the silence counted is one tick: three more ticks on time reach the timeout
     * (not more than it), the fourth is past it */
    for (int i = 0; i < 3; i++) {
        t += 25 * MS;
        ck_assert_uint_eq(ps_members_expire(&ms, t, gone), 0);
    }
    t += 25 * MS;
    ck_assert_uint_eq(ps_members_expire(&ms, t, gone), 2);
    ck_assert_uint_eq(ms.stalls, 1);
    ps_members_free(&ms);
}
END_TEST

START_TEST(goodbye_leaves_the_expected_set) {
    ps_members ms;
    ck_assert_int_eq(ps_members_init(&ms, 2, 1, 100 * MS, 25 * MS, T0), PS_OK);
    ck_assert_int_eq(ps_members_leave(&ms, 0), 1);
    ck_assert_int_eq(ps_members_leave(&ms, 0), 0);
    ck_assert_uint_eq(ms.live, 1);
    ck_assert(ms.m[0].done);
    ck_assert_int_eq(ps_members_join(&ms, 0, T0, -1), 1);
    ck_assert(!ms.m[0].done);
    ck_assert_uint_eq(ms.removed, 0); /* finished is not removed */
    ps_members_free(&ms);
}
END_TEST

START_TEST(a_closed_connection_removes_the_workers_that_said_hello_on_it) {
    ps_members ms;
    unsigned char gone[3];
    ck_assert_int_eq(ps_members_init(&ms, 3, 1, 100 * MS, 25 * MS, T0), PS_OK);
    ps_members_join(&ms, 0, T0, 7);
    ps_members_join(&ms, 1, T0, 8);
    ps_members_join(&ms, 2, T0, 9);
    ck_assert_int_eq(ps_members_leave(&ms, 2), 1); /* a Goodbye, then its connection closes */
    ck_assert_uint_eq(ps_members_disconnect(&ms, 9, gone), 0);
    ck_assert_uint_eq(ps_members_disconnect(&ms, -1, gone), 0); /* unknown: nobody */
    ck_assert_uint_eq(ps_members_disconnect(&ms, 8, gone), 1);
    ck_assert(gone[1] && !gone[0] && !gone[2]);
    ck_assert_uint_eq(ms.live, 1);
    ck_assert_uint_eq(ms.removed, 1);
    /* the number is reused by another connection: it no longer names worker 1 */
    ck_assert_uint_eq(ps_members_disconnect(&ms, 8, gone), 0);
    /* worker 0 says Hello again on a new connection: the old one's close is harmless */
    ps_members_join(&ms, 0, T0, 11);
    ck_assert_uint_eq(ps_members_disconnect(&ms, 7, gone), 0);
    ck_assert(ps_members_live(&ms, 0));
    ps_members_free(&ms);
}
END_TEST

START_TEST(clocks_give_staleness_and_the_slowest_live_worker) {
    ps_members ms;
    ck_assert_int_eq(ps_members_init(&ms, 3, 1, 100 * MS, 25 * MS, T0), PS_OK);
    ck_assert_uint_eq(ps_members_min_clock(&ms), 0);
    ck_assert_uint_eq(ps_members_note_clock(&ms, 0, 0), 0);
    ck_assert_uint_eq(ps_members_note_clock(&ms, 0, 1), 0);
    ck_assert_uint_eq(ps_members_note_clock(&ms, 0, 2), 0);
    /* worker 1 pushes at clock 0 while worker 0 pushed clock 2: two behind */
    ck_assert_uint_eq(ps_members_note_clock(&ms, 1, 0), 2);
    ck_assert_uint_eq(ps_members_min_clock(&ms), 0); /* worker 2 has pushed nothing */
    ps_members_leave(&ms, 2);
    ck_assert_uint_eq(ps_members_min_clock(&ms), 1);
    ps_members_leave(&ms, 0);
    ps_members_leave(&ms, 1);
    ck_assert_uint_eq(ps_members_min_clock(&ms), UINT64_MAX);
    ps_members_free(&ms);
}
END_TEST

START_TEST(a_sync_step_closes_at_the_needed_count) {
    ps_step st;
    ck_assert_int_eq(ps_step_init(&st, 3), PS_OK);
    ck_assert_uint_eq(ps_step_needed(&st, 0, 3), 3);
    ck_assert_uint_eq(ps_step_needed(&st, 2, 3), 2); /* --replicas-to-aggregate 2 */
    ck_assert_uint_eq(ps_step_needed(&st, 0, 2), 2); /* capped by the live workers */
    ck_assert_uint_eq(ps_step_needed(&st, 0, 0), 1); /* at least one */
    ck_assert(!ps_step_ready(&st, 1));               /* no push yet */
    ck_assert_int_eq(ps_step_admit(&st, 0, 0), PS_STEP_ADMIT);
    ps_step_count(&st, 0);
    ck_assert_int_eq(ps_step_admit(&st, 0, 0), PS_STEP_DROP); /* a retry */
    ck_assert_int_eq(ps_step_admit(&st, 1, 1), PS_STEP_AHEAD);
    ps_step_count(&st, 1);
    ck_assert(!ps_step_ready(&st, 3));
    ck_assert(ps_step_ready(&st, 2));
    ps_step_close(&st);
    ck_assert_uint_eq(st.version, 1);
    ck_assert_uint_eq(st.pushes, 0);
    ck_assert_int_eq(ps_step_admit(&st, 0, 0), PS_STEP_DROP); /* closed */
    ck_assert_int_eq(ps_step_admit(&st, 0, 1), PS_STEP_ADMIT);
    ps_step_free(&st);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("shard_members");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, every_worker_is_expected_from_the_start);
    tcase_add_test(tc, silence_past_the_timeout_removes_a_worker);
    tcase_add_test(tc, the_owners_stall_is_not_held_against_workers);
    tcase_add_test(tc, goodbye_leaves_the_expected_set);
    tcase_add_test(tc, a_closed_connection_removes_the_workers_that_said_hello_on_it);
    tcase_add_test(tc, clocks_give_staleness_and_the_slowest_live_worker);
    tcase_add_test(tc, a_sync_step_closes_at_the_needed_count);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(make_suite());
}
