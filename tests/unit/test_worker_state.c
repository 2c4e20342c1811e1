/* Check tests for a worker's own state files (worker/exchange/worker_state.c):
 * a round trip restores every entry and counter bit for bit; a file of another
 * worker count, another job or other entries is refused whole (nothing is
 * written into the buffers); a step with no file is ENOENT; saving step N
 * removes this worker's files of later steps (and a temp file an interrupted
 * save left) and keeps the newest K. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_error.h"
#include "testutil.h"
#include "worker_state.h"

typedef struct {
    float a[5], b[3];
    uint64_t count;
    ps_wstate s;
} bufs;

static void bufs_init(bufs *x, float base) {
    for (int i = 0; i < 5; i++)
        x->a[i] = base + (float)i * 0.1f;
    for (int i = 0; i < 3; i++)
        x->b[i] = -base - (float)i;
    x->count = (uint64_t)base * 1000003u;
    x->s = (ps_wstate){0};
    ck_assert_int_eq(ps_wstate_add(&x->s, "loss_scale", x->a, 5, NULL), PS_OK);
    ck_assert_int_eq(ps_wstate_add(&x->s, "local_sgd/updates", NULL, 0, &x->count), PS_OK);
    ck_assert_int_eq(ps_wstate_add(&x->s, "local_sgd/dense/kernel:0/slot0", x->b, 3, NULL),
                     PS_OK);
}

static int exists(const char *dir, unsigned index, unsigned long long step) {
    char p[700];
    snprintf(p, sizeof p, "%s/worker-%u-step-%020llu.pstf", dir, index, step);
    return access(p, F_OK) == 0;
}

START_TEST(round_trip_and_refusals) {
    char *dir = ps_test_mkdtemp();
    char why[512], path[800];
    bufs w, r;
    bufs_init(&w, 7);
    bufs_init(&r, 1);
    ps_wstate_where at = {.dir = dir, .index = 1, .workers = 2, .job_id = "job-a", .keep = 2};
    ck_assert_int_eq(ps_wstate_save(&w.s, &at, 10, path, sizeof path, why, sizeof why), PS_OK);
    ck_assert(exists(dir, 1, 10));
    ck_assert_int_eq(ps_wstate_load(&r.s, &at, 9, NULL, 0, why, sizeof why), PS_ENOENT);
    ps_wstate_where other = at;
    other.workers = 3; /* the worker count changed between the runs */
    ck_assert_int_eq(ps_wstate_load(&r.s, &other, 10, NULL, 0, why, sizeof why), PS_ESHAPE);
    ck_assert_msg(strstr(why, "2 workers, this one has 3"), "%s", why);
    other = at;
    other.job_id = "job-b";
    ck_assert_int_eq(ps_wstate_load(&r.s, &other, 10, NULL, 0, why, sizeof why), PS_ESHAPE);
    bufs fewer;
    bufs_init(&fewer, 1);
    fewer.s.n = 2; /* a model or options with other entries */
    ck_assert_int_eq(ps_wstate_load(&fewer.s, &at, 10, NULL, 0, why, sizeof why), PS_ESHAPE);
    fewer.s.n = 3;
    ps_wstate_free(&fewer.s);
    ck_assert(r.a[0] == 1.0f && r.count == 1000003u); /* nothing was written by a refusal */
    ck_assert_int_eq(ps_wstate_load(&r.s, &at, 10, NULL, 0, why, sizeof why), PS_OK);
    ck_assert_mem_eq(r.a, w.a, sizeof w.a);
    ck_assert_mem_eq(r.b, w.b, sizeof w.b);
    ck_assert_uint_eq(r.count, w.count);
    ps_wstate_free(&w.s);
    ps_wstate_free(&r.s);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

START_TEST(later_steps_go_and_the_newest_stay) {
    char *dir = ps_test_mkdtemp();
    char why[512];
    bufs w;
    bufs_init(&w, 3);
    ps_wstate_where at = {.dir = dir, .index = 0, .workers = 1, .keep = 2};
    ps_wstate_where other = at;
    other.index = 1;
    ck_assert_int_eq(ps_wstate_save(&w.s, &other, 40, NULL, 0, why, sizeof why), PS_OK);
    for (unsigned long long s = 10; s <= 40; s += 10)
        ck_assert_int_eq(ps_wstate_save(&w.s, &at, s, NULL, 0, why, sizeof why), PS_OK);
    ck_assert(!exists(dir, 0, 10) && !exists(dir, 0, 20) && exists(dir, 0, 30) &&
              exists(dir, 0, 40));
    /* resumed at step 20 (an older checkpoint): the run that went on to 30, 40 is gone */
    ck_assert_int_eq(ps_wstate_save(&w.s, &at, 25, NULL, 0, why, sizeof why), PS_OK);
    ck_assert(exists(dir, 0, 25) && !exists(dir, 0, 30) && !exists(dir, 0, 40));
    ck_assert(exists(dir, 1, 40)); /* another worker's files are its own */
    char tmp[700]; /* a save interrupted by a crash left its temp file */
    snprintf(tmp, sizeof tmp, "%s/worker-0-step-%020d.pstf.tmp.123", dir, 30);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(ps_wstate_save(&w.s, &at, 26, NULL, 0, why, sizeof why), PS_OK);
    ck_assert(access(tmp, F_OK) != 0 && exists(dir, 0, 25) && exists(dir, 0, 26));
    ps_wstate_free(&w.s);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("worker_state");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, round_trip_and_refusals);
    tcase_add_test(tc, later_steps_go_and_the_newest_stay);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(make_suite());
}
