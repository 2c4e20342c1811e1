/* Rows by id: one id always on one shard, whatever else the table holds; the
 * rows spread over the shards within 10% of even, for dense and for sparse
 * (random 64-bit) ids; a row's initial values the same whoever makes them,
 * in range, different between ids and tables; a request's ids deduplicated
 * with every place mapped to its row, and split by shard in order. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "rows.h"
#include "testutil.h"

START_TEST(placement_spreads_evenly) {
    uint64_t key = ps_rows_table_key("users");
    ck_assert(key != ps_rows_table_key("items"));
    uint64_t r = 12345;
    for (uint32_t n = 2; n <= 8; n++)
        for (int sparse = 0; sparse < 2; sparse++) {
            size_t count[8] = {0}, total = 400000, bad = 0;
            for (size_t i = 0; i < total; i++) {
                uint64_t id = i;
                if (sparse) { /* xorshift: ids anywhere in 2^64 */
                    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                    id = r;
                }
                uint32_t s = ps_rows_shard(key, id, n);
                /* (one check per id through Check's own asserts is slow: count instead) */
                if (s >= n || s != ps_rows_shard(key, id, n)) bad++; /* always the same */
                else count[s]++;
            }
            ck_assert_uint_eq(bad, 0);
            for (uint32_t s = 0; s < n; s++) {
                double share = (double)count[s] * n / (double)total;
                ck_assert_msg(share > 0.9 && share < 1.1, "%u shards, %s ids: shard %u has %.3f",
                              n, sparse ? "sparse" : "dense", s, share);
            }
        }
    ck_assert_uint_eq(ps_rows_shard(key, 42, 1), 0);
}
END_TEST

START_TEST(initial_values) {
    uint64_t key = ps_rows_table_key("items");
    float a[16], b[16], c[16], d[16];
    ps_rows_initial(7, key, 99, -0.05f, 0.05f, a, 16);
    ps_rows_initial(7, key, 99, -0.05f, 0.05f, b, 16);
    ps_rows_initial(7, key, 100, -0.05f, 0.05f, c, 16);
    ps_rows_initial(7, ps_rows_table_key("users"), 99, -0.05f, 0.05f, d, 16);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert(memcmp(a, c, sizeof a) != 0 && memcmp(a, d, sizeof a) != 0);
    ps_rows_initial(8, key, 99, -0.05f, 0.05f, c, 16);
    ck_assert(memcmp(a, c, sizeof a) != 0); /* another seed */
    double sum = 0;
    for (uint64_t id = 0; id < 2000; id++) {
        ps_rows_initial(7, key, id, -0.05f, 0.05f, a, 16);
        for (int k = 0; k < 16; k++) {
            if (!(a[k] >= -0.05f && a[k] < 0.05f)) ck_abort_msg("id %d: %g", (int)id, (double)a[k]);
            sum += a[k];
        }
    }
    ck_assert(sum / 32000 > -0.002 && sum / 32000 < 0.002); /* centred */
}
END_TEST

START_TEST(dedupe_and_split) {
    uint64_t ids[10] = {5, 9, 5, 1ull << 63, 9, 9, 7, 5, 1ull << 63, 0};
    uint64_t uniq[10];
    uint32_t where[10];
    size_t nu = 0;
    ck_assert_int_eq(ps_rows_dedupe(ids, 10, uniq, &nu, where), PS_OK);
    ck_assert_uint_eq(nu, 5);
    uint64_t want[5] = {5, 9, 1ull << 63, 7, 0};
    ck_assert_mem_eq(uniq, want, sizeof want);
    for (int i = 0; i < 10; i++) ck_assert(uniq[where[i]] == ids[i]);
    ck_assert_int_eq(ps_rows_dedupe(ids, 0, uniq, &nu, where), PS_OK);
    ck_assert_uint_eq(nu, 0);
    /* a large request with many repeats */
    size_t n = 1000000;
    uint64_t *big = malloc(n * sizeof *big), *bu = malloc(n * sizeof *bu);
    uint32_t *bw = malloc(n * sizeof *bw);
    for (size_t i = 0; i < n; i++) big[i] = (i * 7919) % 50000;
    ck_assert_int_eq(ps_rows_dedupe(big, n, bu, &nu, bw), PS_OK);
    ck_assert_uint_eq(nu, 50000);
    for (size_t i = 0; i < n; i += 997) ck_assert(bu[bw[i]] == big[i]);
    free(big), free(bu), free(bw);
    /* split by shard: groups in shard order, each in the ids' order */
    uint64_t key = ps_rows_table_key("t");
    uint32_t counts[3], order[5], shard_of[5];
    ps_rows_split(key, uniq, 5, 3, counts, order, shard_of);
    ck_assert_uint_eq(counts[0] + counts[1] + counts[2], 5);
    size_t k = 0;
    for (uint32_t s = 0; s < 3; s++) {
        uint32_t last = 0;
        for (uint32_t j = 0; j < counts[s]; j++, k++) {
            ck_assert_uint_eq(shard_of[order[k]], s);
            ck_assert_uint_eq(ps_rows_shard(key, uniq[order[k]], 3), s);
            if (j) ck_assert_uint_gt(order[k], last);
            last = order[k];
        }
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("rows");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, placement_spreads_evenly);
    tcase_add_test(tc, initial_values);
    tcase_add_test(tc, dedupe_and_split);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
