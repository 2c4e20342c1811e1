/* The fail-over rule of a replicated shard (ps-server/shard/lease.c), with
 * simulated time: a fresh group's primary acknowledges nothing until its backup
 * follows; the lease holds for one lease after the send time of the newest
 * message acknowledged, not after the acknowledgement's arrival; a backup takes
 * over only after 1.5 leases of silence, so never while the old primary's lease
 * holds; a stall of the backup's own loop restarts its silence clock; a backup
 * whose connection closes is dropped only while the lease holds; a higher term
 * deposes for good. */
#include <check.h>
#include <stdint.h>

#include "lease.h"
#include "testutil.h"

#define MS 1000000ull
#define L (400 * MS)
#define T0 (7000 * MS)

START_TEST(fresh_primary_waits_for_its_backup) {
    ps_lease p, b;
    ps_lease_init(&p, L, 0, 2);
    ps_lease_init(&b, L, 1, 2);
    ck_assert_int_eq(p.role, PS_ROLE_PRIMARY);
    ck_assert_uint_eq(p.term, 1);
    ck_assert_int_eq(b.role, PS_ROLE_BACKUP);
    ck_assert(!ps_lease_may_ack(&p, T0));
    ck_assert(!ps_lease_may_ack(&b, T0));
    ps_lease_backup_joined(&p, T0);
    ck_assert(ps_lease_may_ack(&p, T0 + 1));
    /* a group of one acknowledges from the start */
    ps_lease solo;
    ps_lease_init(&solo, L, 0, 1);
    ck_assert(ps_lease_may_ack(&solo, T0));
}
END_TEST

START_TEST(lease_runs_from_the_send_time_of_what_was_acknowledged) {
    ps_lease p;
    ps_lease_init(&p, L, 0, 2);
    ps_lease_backup_joined(&p, T0);
    ck_assert(ps_lease_may_ack(&p, T0 + L - 1));
    ck_assert(!ps_lease_may_ack(&p, T0 + L));
    ps_lease_acked(&p, T0 + 100 * MS); /* arriving late: counts from its send */
    ck_assert(ps_lease_may_ack(&p, T0 + 100 * MS + L - 1));
    ck_assert(!ps_lease_may_ack(&p, T0 + 100 * MS + L));
    ps_lease_acked(&p, T0 + 50 * MS); /* an older one changes nothing */
    ck_assert(ps_lease_may_ack(&p, T0 + 100 * MS + L - 1));
}
END_TEST

/* For every message time s the backup heard, its take-over comes after the end
 * of any lease the primary holds from an acknowledgement of a message sent at or
 * before s. */
START_TEST(backup_never_takes_over_while_the_lease_holds) {
    for (uint64_t sent = 0; sent <= 1000 * MS; sent += 37 * MS) {
        ps_lease p, b;
        ps_lease_init(&p, L, 0, 2);
        ps_lease_init(&b, L, 1, 2);
        ps_lease_backup_joined(&p, T0);
        ps_lease_following(&b, 1, T0);
        uint64_t heard = T0 + sent + 3 * MS; /* after the send */
        ps_lease_acked(&p, T0 + sent);
        ps_lease_heard(&b, heard);
        uint64_t lease_end = T0 + sent + L;
        for (uint64_t t = heard; t <= lease_end + L; t += 5 * MS) {
            if (ps_lease_should_promote(&b, t)) ck_assert(!ps_lease_may_ack(&p, t));
        }
        ck_assert(!ps_lease_should_promote(&b, heard + L + L / 2));
        ck_assert(ps_lease_should_promote(&b, heard + L + L / 2 + 1));
    }
}
END_TEST

START_TEST(promotion_starts_the_next_term_alone) {
    ps_lease b;
    ps_lease_init(&b, L, 1, 2);
    ck_assert(!ps_lease_should_promote(&b, T0 + 10 * L)); /* never followed: never */
    ps_lease_following(&b, 3, T0);
    ck_assert(ps_lease_should_promote(&b, T0 + 2 * L));
    ps_lease_promote(&b);
    ck_assert_int_eq(b.role, PS_ROLE_PRIMARY);
    ck_assert_uint_eq(b.term, 4);
    ck_assert(ps_lease_may_ack(&b, T0 + 2 * L));
    ck_assert(!ps_lease_should_promote(&b, T0 + 9 * L));
}
END_TEST

START_TEST(own_stall_restarts_the_silence_clock) {
    ps_lease b;
    ps_lease_init(&b, L, 1, 2);
    ps_lease_following(&b, 1, T0);
    ps_lease_tick(&b, T0 + 100 * MS);
    ps_lease_tick(&b, T0 + 200 * MS);
    /* stopped for 5 leases: at the first tick after it nothing was read yet */
    ps_lease_tick(&b, T0 + 200 * MS + 5 * L);
    ck_assert(!ps_lease_should_promote(&b, T0 + 200 * MS + 5 * L));
    /* the primary is silent from there on: 1.5 leases later it takes over */
    ck_assert(ps_lease_should_promote(&b, T0 + 200 * MS + 5 * L + L + L / 2 + 1));
    /* regular ticks do not restart it */
    ps_lease c;
    ps_lease_init(&c, L, 1, 2);
    ps_lease_following(&c, 1, T0);
    for (uint64_t t = T0; t < T0 + 2 * L; t += L / 4)
        ps_lease_tick(&c, t);
    ck_assert(ps_lease_should_promote(&c, T0 + 2 * L));
}
END_TEST

START_TEST(backup_gone_is_dropped_only_while_the_lease_holds) {
    ps_lease p;
    ps_lease_init(&p, L, 0, 2);
    ps_lease_backup_joined(&p, T0);
    ck_assert_int_eq(ps_lease_backup_gone(&p, T0 + L - 1), 1);
    ck_assert(!p.has_backup);
    ck_assert(ps_lease_may_ack(&p, T0 + 100 * L)); /* alone now */
    ps_lease q;
    ps_lease_init(&q, L, 0, 2);
    ps_lease_backup_joined(&q, T0);
    ck_assert_int_eq(ps_lease_backup_gone(&q, T0 + L), 0);
    ck_assert_int_eq(q.role, PS_ROLE_DEPOSED);
    ck_assert(!ps_lease_may_ack(&q, T0 + L));
}
END_TEST

START_TEST(higher_term_deposes_for_good) {
    ps_lease p;
    ps_lease_init(&p, L, 0, 2);
    ps_lease_backup_joined(&p, T0);
    ck_assert_int_eq(ps_lease_observe_term(&p, 1), 0);
    ck_assert_int_eq(p.role, PS_ROLE_PRIMARY);
    ck_assert_int_eq(ps_lease_observe_term(&p, 2), 1);
    ck_assert_int_eq(p.role, PS_ROLE_DEPOSED);
    ck_assert(!ps_lease_may_ack(&p, T0));
    ps_lease_acked(&p, T0 + L);
    ck_assert(!ps_lease_may_ack(&p, T0 + L));
    ck_assert(!ps_lease_should_promote(&p, T0 + 100 * L));
}
END_TEST

/* A replica that finds no primary founds a group: primary, acknowledging
 * nothing until a backup follows; found by a live group's primary before that,
 * it follows it instead (it never acknowledged anything of its own term). */
START_TEST(founder_follows_a_live_group_instead) {
    ps_lease f;
    ps_lease_init(&f, L, 1, 2); /* every replica starts looking for a primary */
    ps_lease_found(&f, 1234567);
    ck_assert_int_eq(f.role, PS_ROLE_PRIMARY);
    ck_assert(!ps_lease_may_ack(&f, T0));
    ps_lease_following(&f, 3, T0);
    ck_assert_int_eq(f.role, PS_ROLE_BACKUP);
    ck_assert_uint_eq(f.term, 3);
    ck_assert(!ps_lease_may_ack(&f, T0));
    ck_assert(!ps_lease_should_promote(&f, T0 + L));
    ck_assert(ps_lease_should_promote(&f, T0 + 2 * L));
}
END_TEST

static Suite *lease_suite(void) {
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, fresh_primary_waits_for_its_backup);
    tcase_add_test(tc, lease_runs_from_the_send_time_of_what_was_acknowledged);
    tcase_add_test(tc, backup_never_takes_over_while_the_lease_holds);
    tcase_add_test(tc, promotion_starts_the_next_term_alone);
    tcase_add_test(tc, own_stall_restarts_the_silence_clock);
    tcase_add_test(tc, backup_gone_is_dropped_only_while_the_lease_holds);
    tcase_add_test(tc, higher_term_deposes_for_good);
    tcase_add_test(tc, founder_follows_a_live_group_instead);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(lease_suite());
}
