/* Check tests for variable placement: the default model on 1-3 shards with exact expected
 * shards, split/balance invariants on seeded random models, determinism, and bad input. */
#include "placement.h"
#include "ps_error.h"
#include "testutil.h"

#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The default model (784-128-10 MLP). dense_0/kernel is 401408 bytes: 2 slices of 256 KiB. */
static const ps_place_var MODEL[] = {
    {"dense_0/kernel", 784, 128},
    {"dense_0/bias", 128, 1},
    {"dense_1/kernel", 128, 10},
    {"dense_1/bias", 10, 1},
};
#define N_MODEL (sizeof MODEL / sizeof MODEL[0])

static size_t piece_bytes(const ps_place_var *vars, const ps_place_piece *p) {
    return (p->row_end - p->row_begin) * vars[p->var].row_numel * 4;
}

/* Checks everything ps_place promises that does not depend on the exact assignment:
 * input order, part counts (MinSizePartitioner rule), even row split with the extra rows
 * first, every row covered exactly once, piece names, shard range, and the greedy bound
 * (max load - min load <= largest piece). Returns the per-shard loads (malloc'd). */
static size_t *check_invariants(const ps_place_var *vars, size_t n, unsigned shards,
                                size_t min_slice, const ps_placement *pl) {
    size_t *load = calloc(shards, sizeof *load);
    ck_assert_ptr_nonnull(load);
    size_t j = 0, max_piece = 0;
    for (size_t v = 0; v < n; v++) {
        size_t bytes = vars[v].rows * vars[v].row_numel * 4;
        size_t want = (bytes + min_slice - 1) / min_slice;
        if (vars[v].rows < want) want = vars[v].rows;
        if (shards < want) want = shards;
        if (want == 0) want = 1;
        size_t next_row = 0;
        for (size_t part = 0; part < want; part++, j++) {
            ck_assert_uint_lt(j, pl->n);
            const ps_place_piece *p = &pl->pieces[j];
            ck_assert_uint_eq(p->var, v);
            ck_assert_uint_eq(p->part, part);
            ck_assert_uint_eq(p->num_parts, want);
            ck_assert_uint_eq(p->row_begin, next_row);
            size_t rows = vars[v].rows / want + (part < vars[v].rows % want);
            ck_assert_uint_eq(p->row_end - p->row_begin, rows);
            next_row = p->row_end;
            char name[128];
            if (want == 1)
                snprintf(name, sizeof name, "%s", vars[v].name);
            else
                snprintf(name, sizeof name, "%s/part_%zu", vars[v].name, part);
            ck_assert_str_eq(p->name, name);
            ck_assert_uint_lt(p->shard, shards);
            load[p->shard] += piece_bytes(vars, p);
            if (piece_bytes(vars, p) > max_piece) max_piece = piece_bytes(vars, p);
        }
        ck_assert_uint_eq(next_row, vars[v].rows);
    }
    ck_assert_uint_eq(j, pl->n);
    size_t lo = SIZE_MAX, hi = 0;
    for (unsigned s = 0; s < shards; s++) {
        if (load[s] < lo) lo = load[s];
        if (load[s] > hi) hi = load[s];
    }
    ck_assert_uint_le(hi - lo, max_piece);
    return load;
}

START_TEST(default_model_one_shard_all_whole) {
    ps_placement pl;
    ck_assert_int_eq(ps_place(MODEL, N_MODEL, 1, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, N_MODEL);
    for (size_t i = 0; i < pl.n; i++) {
        ck_assert_uint_eq(pl.pieces[i].var, i);
        ck_assert_uint_eq(pl.pieces[i].num_parts, 1);
        ck_assert_uint_eq(pl.pieces[i].shard, 0);
        ck_assert_uint_eq(pl.pieces[i].row_begin, 0);
        ck_assert_uint_eq(pl.pieces[i].row_end, MODEL[i].rows);
        ck_assert_str_eq(pl.pieces[i].name, MODEL[i].name);
    }
    free(check_invariants(MODEL, N_MODEL, 1, PS_PLACE_MIN_SLICE_BYTES, &pl));
    ps_placement_free(&pl);
    ck_assert_ptr_null(pl.pieces);
    ck_assert_uint_eq(pl.n, 0);
    ps_placement_free(&pl); /* twice is safe */
}
END_TEST

START_TEST(default_model_two_shards_splits_kernel) {
    ps_placement pl;
    ck_assert_int_eq(ps_place(MODEL, N_MODEL, 2, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 5);
    const ps_place_piece *k0 = &pl.pieces[0], *k1 = &pl.pieces[1];
    ck_assert_str_eq(k0->name, "dense_0/kernel/part_0");
    ck_assert_str_eq(k1->name, "dense_0/kernel/part_1");
    ck_assert_uint_eq(k0->num_parts, 2);
    ck_assert_uint_eq(k0->row_begin, 0);
    ck_assert_uint_eq(k0->row_end, 392);
    ck_assert_uint_eq(k1->row_begin, 392);
    ck_assert_uint_eq(k1->row_end, 784);
    ck_assert_uint_ne(k0->shard, k1->shard);
    /* Largest first: the halves take shards 0 and 1; dense_1/kernel (5120 B) goes to the
     * tie's lowest shard 0; then dense_0/bias (512 B) and dense_1/bias (40 B) to shard 1. */
    static const unsigned want_shard[] = {0, 1, 1, 0, 1};
    static const char *const want_name[] = {"dense_0/kernel/part_0", "dense_0/kernel/part_1",
                                            "dense_0/bias", "dense_1/kernel", "dense_1/bias"};
    for (size_t i = 0; i < pl.n; i++) {
        ck_assert_str_eq(pl.pieces[i].name, want_name[i]);
        ck_assert_msg(pl.pieces[i].shard == want_shard[i], "%s on shard %u, want %u",
                      pl.pieces[i].name, pl.pieces[i].shard, want_shard[i]);
    }
    size_t *load = check_invariants(MODEL, N_MODEL, 2, PS_PLACE_MIN_SLICE_BYTES, &pl);
    ck_assert_uint_eq(load[0], 200704 + 5120);
    ck_assert_uint_eq(load[1], 200704 + 512 + 40);
    /* Balanced within the size of the small variables. */
    size_t diff = load[0] > load[1] ? load[0] - load[1] : load[1] - load[0];
    ck_assert_uint_le(diff, 5120 + 512 + 40);
    free(load);
    ps_placement_free(&pl);
}
END_TEST

START_TEST(default_model_three_shards) {
    ps_placement pl;
    ck_assert_int_eq(ps_place(MODEL, N_MODEL, 3, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    /* ceil(401408 / 262144) = 2 caps the split below the 3 shards. */
    ck_assert_uint_eq(pl.n, 5);
    ck_assert_uint_eq(pl.pieces[0].num_parts, 2);
    ck_assert_uint_eq(pl.pieces[0].row_end, 392);
    static const unsigned want_shard[] = {0, 1, 2, 2, 2};
    for (size_t i = 0; i < pl.n; i++)
        ck_assert_msg(pl.pieces[i].shard == want_shard[i], "%s on shard %u, want %u",
                      pl.pieces[i].name, pl.pieces[i].shard, want_shard[i]);
    size_t *load = check_invariants(MODEL, N_MODEL, 3, PS_PLACE_MIN_SLICE_BYTES, &pl);
    ck_assert_uint_eq(load[0], 200704);
    ck_assert_uint_eq(load[1], 200704);
    ck_assert_uint_eq(load[2], 512 + 5120 + 40);
    free(load);
    ps_placement_free(&pl);
}
END_TEST

START_TEST(smaller_min_slice_gives_more_parts) {
    ps_placement pl;
    /* ceil(401408 / 100000) = 5 parts of 784 rows: 157,157,157,157,156. */
    ck_assert_int_eq(ps_place(MODEL, N_MODEL, 8, 100000, &pl), PS_OK);
    ck_assert_uint_eq(pl.pieces[0].num_parts, 5);
    ck_assert_uint_eq(pl.pieces[3].row_end - pl.pieces[3].row_begin, 157);
    ck_assert_uint_eq(pl.pieces[4].row_end - pl.pieces[4].row_begin, 156);
    free(check_invariants(MODEL, N_MODEL, 8, 100000, &pl));
    /* Five equal-ish parts on eight shards: each on its own shard. */
    for (size_t a = 0; a < 5; a++)
        for (size_t b = a + 1; b < 5; b++)
            ck_assert_uint_ne(pl.pieces[a].shard, pl.pieces[b].shard);
    ps_placement_free(&pl);
}
END_TEST

START_TEST(largest_first_not_input_order) {
    /* Input-order greedy would give loads 12/4; largest first gives 8/8. No splits. */
    static const ps_place_var v[] = {{"a", 1, 1}, {"b", 1, 1}, {"c", 1, 2}};
    ps_placement pl;
    ck_assert_int_eq(ps_place(v, 3, 2, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 3);
    ck_assert_uint_eq(pl.pieces[2].shard, 0); /* c, the largest, first on shard 0 */
    ck_assert_uint_eq(pl.pieces[0].shard, 1);
    ck_assert_uint_eq(pl.pieces[1].shard, 1);
    ps_placement_free(&pl);

    /* Equal sizes: input order, lowest shard on ties. */
    static const ps_place_var e[] = {{"x", 2, 2}, {"y", 2, 2}, {"z", 2, 2}};
    ck_assert_int_eq(ps_place(e, 3, 2, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.pieces[0].shard, 0);
    ck_assert_uint_eq(pl.pieces[1].shard, 1);
    ck_assert_uint_eq(pl.pieces[2].shard, 0);
    ps_placement_free(&pl);
}
END_TEST

START_TEST(uneven_rows_first_parts_get_extra) {
    /* 10 rows of 100000 floats: 4 MB, 16 slices; capped at 3 shards: rows 4, 3, 3. */
    static const ps_place_var v[] = {{"emb", 10, 100000}};
    ps_placement pl;
    ck_assert_int_eq(ps_place(v, 1, 3, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 3);
    static const size_t begin[] = {0, 4, 7}, end[] = {4, 7, 10};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_uint_eq(pl.pieces[i].row_begin, begin[i]);
        ck_assert_uint_eq(pl.pieces[i].row_end, end[i]);
        ck_assert_uint_eq(pl.pieces[i].shard, i);
    }
    free(check_invariants(v, 1, 3, PS_PLACE_MIN_SLICE_BYTES, &pl));
    ps_placement_free(&pl);
}
END_TEST

START_TEST(more_shards_than_rows) {
    /* 3 rows of 1M floats (12 MB, 46 slices) on 8 shards: 3 one-row parts. A single-row
     * variable is never split however big. */
    static const ps_place_var v[] = {{"wide", 3, 1000000}, {"row", 1, 2000000}};
    ps_placement pl;
    ck_assert_int_eq(ps_place(v, 2, 8, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 4);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_uint_eq(pl.pieces[i].num_parts, 3);
        ck_assert_uint_eq(pl.pieces[i].row_end - pl.pieces[i].row_begin, 1);
    }
    ck_assert_uint_eq(pl.pieces[3].num_parts, 1);
    ck_assert_str_eq(pl.pieces[3].name, "row");
    ck_assert_uint_eq(pl.pieces[3].shard, 0); /* largest: 8 MB, first */
    for (size_t i = 0; i < 3; i++)
        ck_assert_uint_eq(pl.pieces[i].shard, i + 1);
    free(check_invariants(v, 2, 8, PS_PLACE_MIN_SLICE_BYTES, &pl));
    ps_placement_free(&pl);

    /* A huge shard count must not cost memory per shard. */
    ck_assert_int_eq(ps_place(MODEL, N_MODEL, UINT_MAX, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 5);
    static const unsigned want_shard[] = {0, 1, 3, 2, 4}; /* one piece per shard, by size */
    for (size_t i = 0; i < pl.n; i++)
        ck_assert_uint_eq(pl.pieces[i].shard, want_shard[i]);
    ps_placement_free(&pl);
}
END_TEST

START_TEST(split_threshold_is_ceil) {
    /* Exactly one slice stays whole; one float more splits in two. */
    static const ps_place_var v[] = {{"exact", 65536, 1}, {"over", 65537, 1}};
    ps_placement pl;
    ck_assert_int_eq(ps_place(v, 2, 4, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 3);
    ck_assert_uint_eq(pl.pieces[0].num_parts, 1);
    ck_assert_str_eq(pl.pieces[0].name, "exact");
    ck_assert_uint_eq(pl.pieces[1].num_parts, 2);
    ck_assert_uint_eq(pl.pieces[1].row_end, 32769);
    ck_assert_str_eq(pl.pieces[2].name, "over/part_1");
    free(check_invariants(v, 2, 4, PS_PLACE_MIN_SLICE_BYTES, &pl));
    ps_placement_free(&pl);
}
END_TEST

START_TEST(deterministic) {
    ps_placement a, b;
    for (unsigned shards = 1; shards <= 5; shards++) {
        ck_assert_int_eq(ps_place(MODEL, N_MODEL, shards, PS_PLACE_MIN_SLICE_BYTES, &a), PS_OK);
        ck_assert_int_eq(ps_place(MODEL, N_MODEL, shards, PS_PLACE_MIN_SLICE_BYTES, &b), PS_OK);
        ck_assert_uint_eq(a.n, b.n);
        for (size_t i = 0; i < a.n; i++) {
            ck_assert_uint_eq(a.pieces[i].shard, b.pieces[i].shard);
            ck_assert_uint_eq(a.pieces[i].row_begin, b.pieces[i].row_begin);
            ck_assert_uint_eq(a.pieces[i].row_end, b.pieces[i].row_end);
            ck_assert_str_eq(a.pieces[i].name, b.pieces[i].name);
        }
        ps_placement_free(&a);
        ps_placement_free(&b);
    }
}
END_TEST

START_TEST(random_models_keep_invariants) {
    ps_test_rng rng;
    ps_test_rng_seed(&rng, 1234 + (uint64_t)_i);
    enum { MAXV = 40 };
    ps_place_var v[MAXV];
    char names[MAXV][24];
    size_t n = 1 + (size_t)ps_test_rng_uniform(&rng, 0, MAXV);
    if (n > MAXV) n = MAXV;
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "v%zu", i);
        v[i].name = names[i];
        v[i].rows = 1 + (size_t)ps_test_rng_uniform(&rng, 0, 3000);
        v[i].row_numel = 1 + (size_t)ps_test_rng_uniform(&rng, 0, 300);
    }
    unsigned shards = 1 + (unsigned)ps_test_rng_uniform(&rng, 0, 12);
    size_t min_slice = _i % 2 ? PS_PLACE_MIN_SLICE_BYTES : 4096;
    ps_placement a, b;
    ck_assert_int_eq(ps_place(v, n, shards, min_slice, &a), PS_OK);
    free(check_invariants(v, n, shards, min_slice, &a));
    /* Same inputs, same placement, byte for byte. */
    ck_assert_int_eq(ps_place(v, n, shards, min_slice, &b), PS_OK);
    ck_assert_uint_eq(a.n, b.n);
    ck_assert_int_eq(memcmp(a.pieces, b.pieces, a.n * sizeof *a.pieces), 0);
    ps_placement_free(&a);
    ps_placement_free(&b);
}
END_TEST

START_TEST(empty_input_is_empty_placement) {
    ps_placement pl;
    ck_assert_int_eq(ps_place(NULL, 0, 2, PS_PLACE_MIN_SLICE_BYTES, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 0);
    ps_placement_free(&pl);
}
END_TEST

/* Each case: vars, count, shards, min slice. */
typedef struct {
    ps_place_var v[3];
    size_t n;
    unsigned shards;
    size_t min_slice;
} bad_place;

#define NAME79 "0123456789012345678901234567890123456789012345678901234567890123456789012345678"
#define NAME80 NAME79 "9"

static const bad_place BAD[] = {
    {{{"a", 1, 1}}, 1, 0, PS_PLACE_MIN_SLICE_BYTES},                           /* no shards */
    {{{"a", 1, 1}}, 1, 2, 0},                                                  /* min slice 0 */
    {{{NULL, 1, 1}}, 1, 2, PS_PLACE_MIN_SLICE_BYTES},                          /* no name */
    {{{"", 1, 1}}, 1, 2, PS_PLACE_MIN_SLICE_BYTES},                            /* empty name */
    {{{"a", 1, 1}, {"b", 2, 2}, {"a", 3, 3}}, 3, 2, PS_PLACE_MIN_SLICE_BYTES}, /* duplicate */
    {{{"a", 0, 1}}, 1, 2, PS_PLACE_MIN_SLICE_BYTES},                           /* zero rows */
    {{{"a", 1, 0}}, 1, 2, PS_PLACE_MIN_SLICE_BYTES},                           /* zero row_numel */
    {{{NAME80, 1, 1}}, 1, 2, PS_PLACE_MIN_SLICE_BYTES},                        /* name too long */
    {{{"a", SIZE_MAX / 2, 3}}, 1, 2, PS_PLACE_MIN_SLICE_BYTES},                /* bytes overflow */
    {{{"a/part_0", 1, 1}, {"a", 2, 1}}, 2, 2, 4}, /* piece names clash */
    {{{"a", 1, 1}, {"a", 2, 1}}, 2, 2, 4},        /* duplicate: one whole, one split */
};

START_TEST(bad_input_is_rejected) {
    const bad_place *bp = &BAD[_i];
    ps_placement pl = {(ps_place_piece *)1, 99};
    int rc = ps_place(bp->v, bp->n, bp->shards, bp->min_slice, &pl);
    ck_assert_msg(rc == PS_EINVAL, "case %d: rc %d", _i, rc);
    ck_assert_ptr_null(pl.pieces);
    ck_assert_uint_eq(pl.n, 0);
}
END_TEST

START_TEST(name_limits_and_null_arguments) {
    /* 79 bytes fits even with a part suffix. */
    static const ps_place_var v[] = {{NAME79, 2, 1}};
    ck_assert_uint_eq(strlen(NAME79), 79);
    ps_placement pl;
    ck_assert_int_eq(ps_place(v, 1, 2, 4, &pl), PS_OK);
    ck_assert_uint_eq(pl.n, 2);
    ck_assert_str_eq(pl.pieces[1].name, NAME79 "/part_1");
    ps_placement_free(&pl);
    /* Same name split or whole is fine when nothing clashes. */
    static const ps_place_var w[] = {{"a/part_2", 1, 1}, {"a", 2, 1}};
    ck_assert_int_eq(ps_place(w, 2, 2, 4, &pl), PS_OK);
    ps_placement_free(&pl);

    ck_assert_int_eq(ps_place(NULL, 1, 2, 4, &pl), PS_EINVAL);
    ck_assert_int_eq(ps_place(v, 1, 2, 4, NULL), PS_EINVAL);
    ps_placement_free(NULL);
}
END_TEST

static Suite *placement_suite(void) {
    Suite *s = suite_create("placement");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, default_model_one_shard_all_whole);
    tcase_add_test(tc, default_model_two_shards_splits_kernel);
    tcase_add_test(tc, default_model_three_shards);
    tcase_add_test(tc, smaller_min_slice_gives_more_parts);
    tcase_add_test(tc, deterministic);
    suite_add_tcase(s, tc);

    tc = tcase_create("rules");
    tcase_add_test(tc, largest_first_not_input_order);
    tcase_add_test(tc, uneven_rows_first_parts_get_extra);
    tcase_add_test(tc, more_shards_than_rows);
    tcase_add_test(tc, split_threshold_is_ceil);
    tcase_add_loop_test(tc, random_models_keep_invariants, 0, 50);
    tcase_add_test(tc, empty_input_is_empty_placement);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_loop_test(tc, bad_input_is_rejected, 0, (int)(sizeof BAD / sizeof BAD[0]));
    tcase_add_test(tc, name_limits_and_null_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(placement_suite());
}
