/* The rows of mirrored tables between all-reduce ranks, without a ring
 * (worker/exchange/mirror_rows.h): blocks of different tables and counts
 * (empty ones too) encoded, aligned and padded; every rank's summed by id in
 * rank order, first appearance first, and averaged over the ranks; a bad id,
 * a count beyond a table and a block of the wrong length each named with the
 * rank that sent it. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "mirror_rows.h"
#include "ps_error.h"
#include "testutil.h"

START_TEST(blocks_summed_by_id_in_rank_order) {
    ps_mirror_shape tabs[2] = {{"a", 10, 2}, {"b", 4, 3}};
    /* rank 0: a {3, 7}, b {}; rank 1: a {7, 1}, b {2}; rank 2: a {}, b {2, 0} */
    uint64_t ia[3][2] = {{3, 7}, {7, 1}, {0, 0}}, ib[3][2] = {{0, 0}, {2, 0}, {2, 0}};
    size_t na[3] = {2, 2, 0}, nb[3] = {0, 1, 2};
    float ga[3][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}, {0}};
    float gb[3][6] = {{0}, {5, 6, 7}, {1, 1, 1, 9, 9, 9}};
    size_t lens[3], off = 0;
    unsigned char *all = malloc(4096);
    for (unsigned r = 0; r < 3; r++) {
        size_t n[2] = {na[r], nb[r]};
        const uint64_t *ip[2] = {ia[r], ib[r]};
        const float *gp[2] = {ga[r], gb[r]};
        lens[r] = ps_mirror_rows_bytes(tabs, 2, n);
        ck_assert_uint_eq(lens[r] % 8, 0);
        ps_mirror_rows_encode(tabs, 2, n, ip, gp, all + off);
        off += lens[r];
    }
    /* b's 3 floats of rank 1 are padded to 16 bytes */
    ck_assert_uint_eq(lens[1], 8 + 16 + 16 + 8 + 8 + 16);
    ps_row_sum sums[2];
    ps_row_sum_init(&sums[0], 2);
    ps_row_sum_init(&sums[1], 3);
    unsigned bad = 99;
    char err[300];
    ck_assert_int_eq(ps_mirror_rows_sum(tabs, 2, all, lens, 3, sums, &bad, err, sizeof err), PS_OK);
    /* first appearance order: 3, 7, 1; averaged over 3 ranks */
    ck_assert_uint_eq(sums[0].n, 3);
    ck_assert(sums[0].ids[0] == 3 && sums[0].ids[1] == 7 && sums[0].ids[2] == 1);
    float third = 1.0f / 3.0f;
    ck_assert(sums[0].sums[2] == (3.0f + 10.0f) * third &&
              sums[0].sums[3] == (4.0f + 20.0f) * third);
    ck_assert(sums[0].sums[4] == 30.0f * third);
    ck_assert_uint_eq(sums[1].n, 2);
    ck_assert(sums[1].ids[0] == 2 && sums[1].ids[1] == 0);
    ck_assert(sums[1].sums[0] == (5.0f + 1.0f) * third && sums[1].sums[5] == 9.0f * third);
    /* a bad id from rank 2 is named */
    uint64_t evil = 4; /* b has 4 rows */
    memcpy(all + lens[0] + lens[1] + 8 + 8, &evil, 8);
    ck_assert_int_eq(ps_mirror_rows_sum(tabs, 2, all, lens, 3, sums, &bad, err, sizeof err),
                     PS_EPROTO);
    ck_assert_uint_eq(bad, 2);
    ck_assert_msg(strstr(err, "worker 2 sent bad embedding rows: it sent id 4 of table 'b'"), "%s",
                  err);
    /* a count beyond the table, and a block of the wrong length, from rank 1 */
    uint64_t many = 11;
    memcpy(all + lens[0], &many, 8);
    ck_assert_int_eq(ps_mirror_rows_sum(tabs, 2, all, lens, 3, sums, &bad, err, sizeof err),
                     PS_EPROTO);
    ck_assert_msg(bad == 1 && strstr(err, "it sent 11 rows of table 'a', which has 10"), "%s", err);
    many = 2;
    memcpy(all + lens[0], &many, 8);
    lens[1] += 8;
    lens[2] -= 8;
    ck_assert_int_eq(ps_mirror_rows_sum(tabs, 2, all, lens, 3, sums, &bad, err, sizeof err),
                     PS_EPROTO);
    ck_assert_msg(bad == 1 && strstr(err, "8 bytes after the last table"), "%s", err);
    /* every table's every row bounds a block */
    ck_assert_uint_eq(ps_mirror_rows_max_bytes(tabs, 2), 8 + 80 + 80 + 8 + 32 + 48);
    ps_row_sum_free(&sums[0]);
    ps_row_sum_free(&sums[1]);
    free(all);
}
END_TEST

static Suite *mirror_rows_suite(void) {
    Suite *s = suite_create("mirror_rows");
    TCase *tc = tcase_create("mirror_rows");
    tcase_add_test(tc, blocks_summed_by_id_in_rank_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(mirror_rows_suite());
}
