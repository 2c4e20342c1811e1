/* The shard's table registry and step state, without sockets: row sums
 * combine repeated ids in order of first appearance; a sync step sums the
 * workers' row pushes, refuses a worker's second push, and applies the mean
 * (divided by the step's row pushes, empty ones included) when it closes;
 * async applies duplicate ids once with their sum and reports the rows it
 * dropped; a fixed table names its first id out of range. */
#include <check.h>
#include <string.h>

#include "ps_error.h"
#include "row_sum.h"
#include "rows.h"
#include "tables.h"
#include "testutil.h"

#define DIM 2

START_TEST(row_sum_combines) {
    ps_row_sum s;
    ps_row_sum_init(&s, DIM);
    uint64_t ids[4] = {9, 3, 9, 5};
    float g[4 * DIM] = {1, 2, 10, 20, 100, 200, 7, 8};
    ck_assert_int_eq(ps_row_sum_add(&s, ids, 4, g), PS_OK);
    ck_assert_uint_eq(s.n, 3);
    ck_assert_uint_eq(s.ids[0], 9);
    ck_assert_uint_eq(s.ids[1], 3);
    ck_assert_uint_eq(s.ids[2], 5);
    ck_assert_float_eq(s.sums[0], 101);
    ck_assert_float_eq(s.sums[1], 202);
    ps_row_sum_scale(&s, 0.5f);
    ck_assert_float_eq(s.sums[2], 5);
    ps_row_sum_clear(&s);
    ck_assert_uint_eq(s.n, 0);
    /* many distinct ids: the index grows, every id still found once */
    enum { N = 5000 };
    static uint64_t many[N];
    static float ones[N * DIM];
    for (int i = 0; i < N; i++) many[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N * DIM; i++) ones[i] = 1;
    ck_assert_int_eq(ps_row_sum_add(&s, many, N, ones), PS_OK);
    ck_assert_int_eq(ps_row_sum_add(&s, many, N, ones), PS_OK);
    ck_assert_uint_eq(s.n, N);
    for (int i = 0; i < N * DIM; i++)
        if (s.sums[i] != 2) ck_abort_msg("sum %d is %g", i, s.sums[i]);
    ps_row_sum_free(&s);
}
END_TEST

static ps_table_cfg cfg(void) {
    return (ps_table_cfg){.dim = DIM,
                          .opt = ps_row_opt_default(PS_ROW_SGD, 1.0f),
                          .key = ps_rows_table_key("u"),
                          .init_lo = 0,
                          .init_hi = 0}; /* rows start at 0 */
}

START_TEST(sync_step_mean) {
    ps_tables ts;
    ps_tables_init(&ts, 3);
    ps_table_cfg c = cfg();
    ps_table_entry *e;
    ck_assert_int_eq(ps_tables_create(&ts, "u", 0, &c, &e), PS_OK);
    ck_assert_ptr_eq(ps_tables_find(&ts, "u"), e);
    ck_assert_ptr_null(ps_tables_find(&ts, "v"));
    uint64_t a[2] = {1, 2}, b[1] = {2};
    float ga[2 * DIM] = {3, 3, 6, 6}, gb[DIM] = {3, 0};
    ck_assert_int_eq(ps_table_entry_step_add(e, 0, a, 2, ga), PS_OK);
    ck_assert_int_eq(ps_table_entry_step_add(e, 0, b, 1, gb), PS_EEXIST); /* a second push */
    ck_assert_int_eq(ps_table_entry_step_add(e, 1, b, 1, gb), PS_OK);
    ck_assert_int_eq(ps_table_entry_step_add(e, 2, NULL, 0, NULL), PS_OK); /* empty: counts */
    ck_assert_int_eq(ps_table_entry_step_add(e, 3, b, 1, gb), PS_EINVAL);
    float rows[2 * DIM];
    ps_table_pull(e->t, a, 2, rows);
    ck_assert_float_eq(rows[0], 0); /* nothing applied before the step closes */
    ck_assert_int_eq(ps_tables_close_step(&ts, 1), PS_OK);
    ps_table_pull(e->t, a, 2, rows);
    ck_assert_float_eq(rows[0], -1); /* 3 / 3 pushes */
    ck_assert_float_eq(rows[1], -1);
    ck_assert_float_eq(rows[2], -3); /* (6 + 3) / 3 */
    ck_assert_float_eq(rows[3], -2); /* (6 + 0) / 3 */
    /* the next step is open again for every worker */
    ck_assert_int_eq(ps_table_entry_step_add(e, 0, b, 1, gb), PS_OK);
    ps_tables_free(&ts);
}
END_TEST

START_TEST(sync_ttl_at_close) {
    ps_tables ts;
    ps_tables_init(&ts, 1);
    ps_table_cfg c = cfg();
    c.ttl_steps = 2;
    ps_table_entry *e;
    ck_assert_int_eq(ps_tables_create(&ts, "u", 0, &c, &e), PS_OK);
    uint64_t id = 5;
    float g[DIM] = {1, 1};
    ck_assert_int_eq(ps_table_entry_step_add(e, 0, &id, 1, g), PS_OK);
    ck_assert_int_eq(ps_tables_close_step(&ts, 1), PS_OK);
    ck_assert_int_eq(ps_tables_close_step(&ts, 2), PS_OK);
    ps_table_counts k;
    ps_table_stats_get(e->t, &k);
    ck_assert_uint_eq(k.rows, 1);
    ck_assert_int_eq(ps_tables_close_step(&ts, 3), PS_OK); /* last pushed at 1: 1 + 2 <= 3 */
    ps_table_stats_get(e->t, &k);
    ck_assert_uint_eq(k.rows, 0);
    ck_assert_uint_eq(k.expired, 1);
    ps_tables_free(&ts);
}
END_TEST

START_TEST(async_apply_sums_duplicates) {
    ps_tables ts;
    ps_tables_init(&ts, 1);
    ps_table_cfg c = cfg();
    c.min_count = 2;
    ps_table_entry *e;
    ck_assert_int_eq(ps_tables_create(&ts, "u", 0, &c, &e), PS_OK);
    uint64_t ids[3] = {4, 4, 8};
    float g[3 * DIM] = {1, 1, 2, 2, 5, 5};
    uint64_t dropped = 0;
    /* first sight of 4 (once, its gradients summed) and of 8: both dropped */
    ck_assert_int_eq(ps_table_entry_apply(e, ids, 3, g, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 2);
    ck_assert_int_eq(ps_table_entry_apply(e, ids, 3, g, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 0);
    ck_assert_uint_eq(e->updates, 2);
    float rows[2 * DIM];
    uint64_t q[2] = {4, 8};
    ps_table_pull(e->t, q, 2, rows);
    ck_assert_float_eq(rows[0], -3); /* one update with 1 + 2 */
    ck_assert_float_eq(rows[2], -5);
    ps_tables_free(&ts);
}
END_TEST

START_TEST(fixed_table_range) {
    ps_tables ts;
    ps_tables_init(&ts, 1);
    ps_table_cfg c = cfg();
    ps_table_entry *e;
    ck_assert_int_eq(ps_tables_create(&ts, "f", 10, &c, &e), PS_OK);
    uint64_t ids[3] = {0, 9, 10};
    ck_assert_uint_eq(ps_table_entry_bad_id(e, ids, 2), 2);
    ck_assert_uint_eq(ps_table_entry_bad_id(e, ids, 3), 2);
    ck_assert_int_eq(ps_table_entry_same(e, 10, &c), 1);
    ck_assert_int_eq(ps_table_entry_same(e, 11, &c), 0);
    c.opt.lr = 0.5f;
    ck_assert_int_eq(ps_table_entry_same(e, 10, &c), 0);
    ps_tables_free(&ts);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tables");
    TCase *tc = tcase_create("tables");
    tcase_add_test(tc, row_sum_combines);
    tcase_add_test(tc, sync_step_mean);
    tcase_add_test(tc, sync_ttl_at_close);
    tcase_add_test(tc, async_apply_sums_duplicates);
    tcase_add_test(tc, fixed_table_range);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
