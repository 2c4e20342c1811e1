/* Prefetcher tests: its batches are ps_batcher_next's, byte for byte, over
 * epochs, batch sizes (with a last partial batch), shards and skips, threaded
 * or not; a batch handed out stays put while the thread reads ahead; closing
 * at any point neither hangs nor leaks (the suite also runs under ASan). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "prefetch.h"
#include "ps_error.h"
#include "testutil.h"

/* n random rows of dim floats; labels 0..n-1 so every sample is distinct. */
static ps_dataset make_data(size_t n, size_t dim, uint64_t seed) {
    ps_dataset d = {.n = n, .dim = dim, .num_classes = (int)n};
    d.x = malloc(n * dim * sizeof *d.x);
    d.y = malloc(n * sizeof *d.y);
    ck_assert_ptr_nonnull(d.x);
    ck_assert_ptr_nonnull(d.y);
    ps_test_fill_uniform(d.x, n * dim, seed, 0, 1);
    for (size_t i = 0; i < n; i++)
        d.y[i] = (int32_t)i;
    return d;
}

/* A slow consumer: the pause is the scenario (the thread gets ahead), not a wait. */
static void sleep_us(long us) {
    nanosleep(&(struct timespec){0, us * 1000}, NULL);
}

/* Compares epoch `epoch` after `skip` batches, and a call past its end,
 * between a plain batcher and a prefetcher over an identical batcher.
 * take < 0: the whole epoch; else stop after `take` batches (--max-steps). A
 * slow consumer now and then lets the thread get ahead before the check. */
static void compare_epoch(ps_batcher *ref, ps_prefetch *pf, unsigned epoch, size_t skip, long take,
                          float *rx, int32_t *ry) {
    size_t dim = ref->data->dim;
    ps_batcher_start_epoch(ref, epoch);
    for (size_t s = 0; s < skip; s++)
        ps_batcher_next(ref, rx, ry);
    ps_prefetch_start_epoch(pf, epoch, skip);
    for (long t = 0; take < 0 || t < take; t++) {
        size_t want = ps_batcher_next(ref, rx, ry);
        float *x = NULL;
        int32_t *y = NULL;
        size_t got = ps_prefetch_next(pf, &x, &y);
        ck_assert_uint_eq(got, want);
        ck_assert_ptr_nonnull(x);
        ck_assert_ptr_nonnull(y);
        if (t % 3 == 1) sleep_us(200); /* the thread fills the other buffer meanwhile */
        ck_assert_msg(memcmp(x, rx, got * dim * sizeof *x) == 0, "epoch %u skip %zu batch %ld x",
                      epoch, skip, t);
        ck_assert_msg(memcmp(y, ry, got * sizeof *y) == 0, "epoch %u skip %zu batch %ld y", epoch,
                      skip, t);
        if (want == 0) { /* past the end: 0 again, as from the batcher */
            ck_assert_uint_eq(ps_prefetch_next(pf, &x, &y), 0);
            ck_assert_uint_eq(ps_batcher_next(ref, rx, ry), 0);
            break;
        }
    }
}

/* Every combination of shard, batch size, threading, epoch and skip. */
START_TEST(same_batches_as_batcher) {
    ps_dataset d = make_data(203, 13, 7);
    const size_t batches[] = {1, 7, 16, 64, 100, 300}; /* 300: more than the shard */
    const unsigned shards[][2] = {{0, 1}, {1, 3}};     /* {index, count} */
    for (int threaded = 0; threaded <= 1; threaded++)
        for (size_t w = 0; w < 2; w++)
            for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
                ps_batcher ref, b;
                unsigned idx = shards[w][0], cnt = shards[w][1];
                ck_assert_int_eq(ps_batcher_init(&ref, &d, idx, cnt, batches[bi], 99), PS_OK);
                ck_assert_int_eq(ps_batcher_init(&b, &d, idx, cnt, batches[bi], 99), PS_OK);
                size_t steps = ps_batcher_steps_per_epoch(&b);
                float *rx = malloc(batches[bi] * d.dim * sizeof *rx);
                int32_t *ry = malloc(batches[bi] * sizeof *ry);
                ps_prefetch *pf = NULL;
                ck_assert_int_eq(ps_prefetch_open(&pf, &b, threaded), PS_OK);
                const size_t skips[] = {0, 1, 3, steps - 1, steps, steps + 2};
                for (unsigned epoch = 0; epoch < 4; epoch++)
                    for (size_t k = 0; k < sizeof skips / sizeof *skips; k++)
                        compare_epoch(&ref, pf, epoch, skips[k], -1, rx, ry);
                /* an epoch left early (--max-steps, or an error) then the next */
                compare_epoch(&ref, pf, 5, 1, 2, rx, ry);
                compare_epoch(&ref, pf, 6, 0, -1, rx, ry);
                ps_prefetch_close(pf);
                free(rx);
                free(ry);
                ps_batcher_free(&ref);
                ps_batcher_free(&b);
            }
    ps_dataset_free(&d);
}
END_TEST

/* Opened without start_epoch, it reads on from where the batcher is. */
START_TEST(reads_on_from_batcher_position) {
    ps_dataset d = make_data(50, 3, 8);
    ps_batcher ref, b;
    ck_assert_int_eq(ps_batcher_init(&ref, &d, 0, 1, 8, 5), PS_OK);
    ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 1, 8, 5), PS_OK);
    float rx[8 * 3], bx[8 * 3];
    int32_t ry[8], by[8];
    ps_batcher_next(&ref, rx, ry); /* both one batch in */
    ps_batcher_next(&b, bx, by);
    ps_prefetch *pf;
    ck_assert_int_eq(ps_prefetch_open(&pf, &b, 1), PS_OK);
    size_t n;
    do {
        float *x;
        int32_t *y;
        n = ps_prefetch_next(pf, &x, &y);
        ck_assert_uint_eq(n, ps_batcher_next(&ref, rx, ry));
        ck_assert_mem_eq(x, rx, n * 3 * sizeof *x);
        ck_assert_mem_eq(y, ry, n * sizeof *y);
    } while (n > 0);
    ps_prefetch_close(pf);
    ps_batcher_free(&ref);
    ps_batcher_free(&b);
    ps_dataset_free(&d);
}
END_TEST

/* Closing right after open, after start_epoch, and mid-epoch while the thread
 * is likely copying a big batch: returns promptly (the test's timeout would
 * catch a hang) and frees everything (ASan's leak check). */
START_TEST(early_close) {
    ps_dataset d = make_data(2048, 784, 9);
    ps_batcher b;
    ck_assert_int_eq(ps_batcher_init(&b, &d, 0, 1, 256, 3), PS_OK);
    for (int round = 0; round < 60; round++) {
        ps_prefetch *pf;
        ck_assert_int_eq(ps_prefetch_open(&pf, &b, 1), PS_OK);
        if (round % 3 > 0) ps_prefetch_start_epoch(pf, (unsigned)round, (size_t)round % 4);
        for (int t = 0; t < round % 3 + round % 5; t++) {
            float *x;
            int32_t *y;
            ck_assert_uint_le(ps_prefetch_next(pf, &x, &y), 256);
        }
        if (round % 2) sleep_us(round * 10);
        ps_prefetch_close(pf);
    }
    /* the batcher is the caller's again */
    float *x = malloc(256 * 784 * sizeof *x);
    int32_t *y = malloc(256 * sizeof *y);
    ps_batcher_start_epoch(&b, 0);
    ck_assert_uint_eq(ps_batcher_next(&b, x, y), 256);
    free(x);
    free(y);
    ps_batcher_free(&b);
    ps_dataset_free(&d);
}
END_TEST

START_TEST(bad_args) {
    ps_prefetch *pf = (ps_prefetch *)&pf;
    ck_assert_int_eq(ps_prefetch_open(&pf, NULL, 1), PS_EINVAL);
    ck_assert_ptr_null(pf);
    ps_batcher zero = {0}; /* never initialised, or already freed */
    ck_assert_int_eq(ps_prefetch_open(&pf, &zero, 1), PS_EINVAL);
    ck_assert_ptr_null(pf);
    ps_prefetch_close(NULL);
}
END_TEST

static Suite *prefetch_suite(void) {
    Suite *s = suite_create("prefetch");
    TCase *tc = tcase_create("prefetch");
    tcase_add_test(tc, same_batches_as_batcher);
    tcase_add_test(tc, reads_on_from_batcher_position);
    tcase_add_test(tc, early_close);
    tcase_add_test(tc, bad_args);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(prefetch_suite());
}
