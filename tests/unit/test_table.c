/* An embedding table's rows on one shard, without sockets: rows not stored
 * read as their initial values; a push creates and updates rows; the
 * frequency threshold drops a row's first gradients and counts them; rows
 * expire after their TTL; at the cap the least recently pushed row is evicted
 * (or a new row refused); a long random run of pushes, evictions and expiries
 * agrees with a plain reference model id by id (the index's deletions keep
 * every row findable); a table visited and restored reads the same, visits
 * from the least to the most recently pushed row, and a restored table at its
 * cap evicts the same rows as the original. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "rows.h"
#include "table.h"
#include "testutil.h"

#define DIM 4

static ps_table_cfg sgd_cfg(void) {
    return (ps_table_cfg){.dim = DIM,
                          .opt = ps_row_opt_default(PS_ROW_SGD, 0.5f),
                          .seed = 11,
                          .key = ps_rows_table_key("t"),
                          .init_lo = -0.05f,
                          .init_hi = 0.05f};
}

static void initial(uint64_t id, float *out) {
    ps_rows_initial(11, ps_rows_table_key("t"), id, -0.05f, 0.05f, out, DIM);
}

START_TEST(create_on_push) {
    ps_table_cfg cfg = sgd_cfg();
    ps_table *t;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_OK);
    uint64_t ids[3] = {7, 1ull << 40, 7};
    float out[3 * DIM], want[DIM], g[3 * DIM];
    ps_table_pull(t, ids, 2, out);
    initial(7, want);
    ck_assert_mem_eq(out, want, sizeof want);
    ps_table_counts st;
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.rows, 0); /* a pull stores nothing */
    for (int i = 0; i < 3 * DIM; i++) g[i] = (float)(i + 1);
    ck_assert_int_eq(ps_table_push(t, ids, 3, g, 1), PS_OK);
    ps_table_pull(t, ids, 1, out);
    for (int k = 0; k < DIM; k++) /* id 7 twice: both gradients applied, in order */
        ck_assert(out[k] == (want[k] - 0.5f * g[k]) - 0.5f * g[2 * DIM + k]);
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.rows, 2);
    ck_assert_uint_eq(st.admitted, 2);
    ck_assert_uint_gt(st.bytes, 2 * DIM * sizeof(float));
    ps_table_free(t);
    cfg.dim = 0;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_EINVAL);
    cfg.dim = PS_TABLE_MAX_DIM + 1;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_EINVAL);
}
END_TEST

START_TEST(frequency_threshold) {
    ps_table_cfg cfg = sgd_cfg();
    cfg.min_count = 3;
    ps_table *t;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_OK);
    uint64_t id = 123;
    float g[DIM] = {1, 1, 1, 1}, out[DIM], want[DIM];
    initial(id, want);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(ps_table_push(t, &id, 1, g, (uint64_t)k + 1), PS_OK);
        ps_table_pull(t, &id, 1, out);
        ck_assert_mem_eq(out, want, sizeof want); /* still the initial values */
    }
    ck_assert_int_eq(ps_table_push(t, &id, 1, g, 3), PS_OK); /* the third: stored, applied */
    ps_table_pull(t, &id, 1, out);
    for (int k = 0; k < DIM; k++) ck_assert(out[k] == want[k] - 0.5f);
    ps_table_counts st;
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.dropped, 2);
    ck_assert_uint_eq(st.rows, 1);
    ps_table_free(t);
}
END_TEST

START_TEST(ttl_and_caps) {
    ps_table_cfg cfg = sgd_cfg();
    cfg.ttl_steps = 5;
    ps_table *t;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_OK);
    float g[DIM] = {0};
    for (uint64_t s = 1; s <= 10; s++) {
        uint64_t id = s;
        ck_assert_int_eq(ps_table_push(t, &id, 1, g, s), PS_OK);
    }
    ck_assert_uint_eq(ps_table_expire(t, 10), 5); /* rows pushed at steps 1..5 */
    ps_table_counts st;
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.rows, 5);
    ck_assert_uint_eq(st.expired, 5);
    ps_table_free(t);
    /* LRU: 400 ids through a cap of 100; the last 100 stay */
    cfg = sgd_cfg();
    cfg.max_rows = 100;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_OK);
    for (uint64_t id = 0; id < 400; id++) ck_assert_int_eq(ps_table_push(t, &id, 1, g, id + 1), PS_OK);
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.rows, 100);
    ck_assert_uint_eq(st.evicted, 300);
    uint64_t bytes = st.bytes;
    for (uint64_t id = 400; id < 1000; id++) ck_assert_int_eq(ps_table_push(t, &id, 1, g, id + 1), PS_OK);
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.bytes, bytes); /* the cap holds the memory */
    ps_table_free(t);
    /* refuse: new rows beyond the cap are dropped and counted */
    cfg.full = PS_TABLE_REFUSE;
    cfg.max_rows = 10;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_OK);
    for (uint64_t id = 0; id < 20; id++) ck_assert_int_eq(ps_table_push(t, &id, 1, g, 1), PS_OK);
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.rows, 10);
    ck_assert_uint_eq(st.refused, 10);
    ck_assert_uint_eq(st.dropped, 10);
    ps_table_free(t);
}
END_TEST

/* The reference: rows as a plain array, the least recently pushed evicted
 * first, expiry by a scan. */
typedef struct {
    uint64_t id, last, order;
    float w[DIM];
} ref_row;

static int ref_find(ref_row *r, int n, uint64_t id) {
    for (int i = 0; i < n; i++)
        if (r[i].id == id) return i;
    return -1;
}

/* The reference's push of id at step: a new row at the cap evicts the least recently
 * pushed; SGD with rate 0.5. */
static void ref_push(ref_row *ref, int *n, int cap, uint64_t id, const float *g, uint64_t step,
                     uint64_t *order) {
    int i = ref_find(ref, *n, id);
    if (i < 0) {
        if (*n == cap) {
            int old = 0;
            for (int j = 1; j < *n; j++)
                if (ref[j].order < ref[old].order) old = j;
            ref[old] = ref[--*n];
        }
        i = (*n)++;
        ref[i].id = id;
        initial(id, ref[i].w);
    }
    for (int k = 0; k < DIM; k++) ref[i].w[k] -= 0.5f * g[k];
    ref[i].last = step, ref[i].order = ++*order;
}

START_TEST(random_run_matches_a_reference) {
    ps_table_cfg cfg = sgd_cfg();
    cfg.max_rows = 64;
    cfg.ttl_steps = 40;
    ps_table *t;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_OK);
    ref_row *ref = calloc(64, sizeof *ref);
    int n = 0;
    uint64_t rng = 99, order = 0;
    for (uint64_t step = 1; step <= 3000; step++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        uint64_t id = (rng % 200) * 0x100000001ull; /* 200 ids, far apart */
        float g[DIM];
        for (int k = 0; k < DIM; k++) g[k] = (float)((rng >> (8 * k)) & 7) - 3.5f;
        ck_assert_int_eq(ps_table_push(t, &id, 1, g, step), PS_OK);
        ref_push(ref, &n, 64, id, g, step, &order);
        if (step % 50 == 0) {
            size_t gone = ps_table_expire(t, step), want = 0;
            for (int j = 0; j < n;)
                if (ref[j].last + 40 <= step) ref[j] = ref[--n], want++;
                else j++;
            ck_assert_uint_eq(gone, want);
        }
    }
    ps_table_counts st;
    ps_table_stats_get(t, &st);
    ck_assert_uint_eq(st.rows, (uint64_t)n);
    for (uint64_t v = 0; v < 200; v++) {
        uint64_t id = v * 0x100000001ull;
        float out[DIM], want[DIM];
        ps_table_pull(t, &id, 1, out);
        int i = ref_find(ref, n, id);
        if (i >= 0) memcpy(want, ref[i].w, sizeof want);
        else initial(id, want);
        ck_assert_msg(memcmp(out, want, sizeof want) == 0, "id %llu", (unsigned long long)v);
    }
    free(ref);
    ps_table_free(t);
}
END_TEST

START_TEST(batched_pushes_match_a_reference) {
    /* pushes of 48 distinct ids at a time at the cap: the lookups run in batches ahead of
     * the updates, and an eviction in the middle moves a row an earlier lookup found */
    enum { B = 48, CAP = 40 };
    ps_table_cfg cfg = sgd_cfg();
    cfg.max_rows = CAP;
    ps_table *t;
    ck_assert_int_eq(ps_table_new(&cfg, &t), PS_OK);
    ref_row *ref = calloc(CAP, sizeof *ref);
    int n = 0;
    uint64_t rng = 7, order = 0;
    for (uint64_t step = 1; step <= 300; step++) {
        uint64_t ids[B];
        float g[B * DIM];
        for (int b = 0; b < B;) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            uint64_t id = (rng % 90) * 0x100000001ull;
            bool dup = false;
            for (int c = 0; c < b; c++) dup = dup || ids[c] == id;
            if (dup) continue;
            ids[b] = id;
            for (int k = 0; k < DIM; k++) g[b * DIM + k] = (float)((rng >> (8 * k)) & 7) - 3.5f;
            b++;
        }
        ck_assert_int_eq(ps_table_push(t, ids, B, g, step), PS_OK);
        for (int b = 0; b < B; b++)
            ref_push(ref, &n, CAP, ids[b], g + b * DIM, step, &order);
    }
    for (uint64_t v = 0; v < 90; v++) {
        uint64_t id = v * 0x100000001ull;
        float out[DIM], want[DIM];
        ps_table_pull(t, &id, 1, out);
        int i = ref_find(ref, n, id);
        if (i >= 0) memcpy(want, ref[i].w, sizeof want);
        else initial(id, want);
        ck_assert_msg(memcmp(out, want, sizeof want) == 0, "id %llu", (unsigned long long)v);
    }
    free(ref);
    ps_table_free(t);
}
END_TEST

static void copy_row(void *ctx, uint64_t id, const float *row, const float *slots,
                     uint64_t last) {
    ck_assert_int_eq(ps_table_restore_row(ctx, id, row, slots, last), PS_OK);
}

START_TEST(visit_and_restore) {
    ps_table_cfg cfg = sgd_cfg();
    cfg.opt = ps_row_opt_default(PS_ROW_ADAGRAD, 0.1f);
    ps_table *a, *b;
    ck_assert_int_eq(ps_table_new(&cfg, &a), PS_OK);
    ck_assert_int_eq(ps_table_new(&cfg, &b), PS_OK);
    uint64_t ids[50];
    float g[50 * DIM];
    for (int i = 0; i < 50; i++) ids[i] = (uint64_t)i * 977;
    for (int i = 0; i < 50 * DIM; i++) g[i] = (float)(i % 7) - 3;
    ck_assert_int_eq(ps_table_push(a, ids, 50, g, 1), PS_OK);
    ps_table_visit(a, copy_row, b);
    /* one more step on both: values and Adagrad's accumulators came across */
    ck_assert_int_eq(ps_table_push(a, ids, 50, g, 2), PS_OK);
    ck_assert_int_eq(ps_table_push(b, ids, 50, g, 2), PS_OK);
    float x[50 * DIM], y[50 * DIM];
    ps_table_pull(a, ids, 50, x);
    ps_table_pull(b, ids, 50, y);
    ck_assert_mem_eq(x, y, sizeof x);
    ps_table_free(a);
    ps_table_free(b);
}
END_TEST

typedef struct {
    ps_table *to;
    uint64_t last, visited;
} lru_copy;

static void copy_in_order(void *ctx, uint64_t id, const float *row, const float *slots,
                          uint64_t last) {
    lru_copy *c = ctx;
    ck_assert_uint_ge(last, c->last); /* least recently pushed first */
    c->last = last;
    c->visited++;
    ck_assert_int_eq(ps_table_restore_row(c->to, id, row, slots, last), PS_OK);
    ck_assert_int_eq(ps_table_restore_row(c->to, id, row, slots, last), PS_EEXIST);
}

/* A capped lazy-Adam table, rows pushed and re-pushed out of id order: the
 * visit runs in LRU order, and the copy (rows in that order, then the counts)
 * evicts the same rows and updates the same values over further steps. */
START_TEST(restored_table_evicts_the_same_rows) {
    ps_table_cfg cfg = sgd_cfg();
    cfg.opt = ps_row_opt_default(PS_ROW_LAZY_ADAM, 0.01f);
    cfg.max_rows = 16;
    ps_table *a, *b;
    ck_assert_int_eq(ps_table_new(&cfg, &a), PS_OK);
    ck_assert_int_eq(ps_table_new(&cfg, &b), PS_OK);
    float g[4 * DIM];
    uint64_t step = 0;
    for (int round = 0; round < 12; round++) {
        uint64_t ids[4];
        for (int k = 0; k < 4; k++) ids[k] = (uint64_t)((round * 5 + k * 7) % 23);
        ps_test_fill_uniform(g, 4 * DIM, (uint64_t)round + 1, -1, 1);
        ck_assert_int_eq(ps_table_push(a, ids, 4, g, ++step), PS_OK);
    }
    lru_copy c = {.to = b};
    ps_table_visit(a, copy_in_order, &c);
    ps_table_counts sa, sb;
    ps_table_stats_get(a, &sa);
    ck_assert_uint_eq(c.visited, sa.rows);
    ck_assert_uint_gt(sa.evicted, 0);
    ps_table_restore_counts(b, &sa);
    ps_table_stats_get(b, &sb);
    ck_assert_uint_eq(sb.rows, sa.rows);
    ck_assert_uint_eq(sb.admitted, sa.admitted);
    ck_assert_uint_eq(sb.evicted, sa.evicted);
    ck_assert_uint_eq(sb.dropped, sa.dropped);
    for (int round = 0; round < 6; round++) { /* new ids: each evicts the oldest row */
        uint64_t ids[3] = {100 + (uint64_t)round, (uint64_t)round, 200 + (uint64_t)round};
        ps_test_fill_uniform(g, 3 * DIM, 50 + (uint64_t)round, -1, 1);
        ++step;
        ck_assert_int_eq(ps_table_push(a, ids, 3, g, step), PS_OK);
        ck_assert_int_eq(ps_table_push(b, ids, 3, g, step), PS_OK);
    }
    for (uint64_t id = 0; id < 210; id++) {
        float x[DIM], y[DIM];
        ps_table_pull(a, &id, 1, x);
        ps_table_pull(b, &id, 1, y);
        ck_assert_msg(memcmp(x, y, sizeof x) == 0, "id %llu differs", (unsigned long long)id);
    }
    ps_table_stats_get(a, &sa);
    ps_table_stats_get(b, &sb);
    ck_assert_uint_eq(sb.rows, sa.rows);
    ck_assert_uint_eq(sb.evicted, sa.evicted);
    ck_assert_uint_eq(sb.admitted, sa.admitted);
    ps_table_free(a);
    ps_table_free(b);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("table");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, create_on_push);
    tcase_add_test(tc, frequency_threshold);
    tcase_add_test(tc, ttl_and_caps);
    tcase_add_test(tc, random_run_matches_a_reference);
    tcase_add_test(tc, batched_pushes_match_a_reference);
    tcase_add_test(tc, visit_and_restore);
    tcase_add_test(tc, restored_table_evicts_the_same_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
