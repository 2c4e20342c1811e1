/* The input pipeline's order and its threads: the workers' shares are
 * disjoint and cover the data once per epoch (by record and by file); an
 * epoch's order is the same for a seed and differs between epochs; the full
 * shuffle is the in-memory batcher's, record for record; tf.data's shuffle
 * buffer gives a permutation that stays near the stream; the batches are the
 * same with 0 or several threads, after a restart at any batch, and with a
 * small memory budget; bad records fail with their number, or are skipped and
 * counted when asked. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "order.h"
#include "pipeline.h"
#include "ps_error.h"
#include "source.h"
#include "testutil.h"

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- order ---- */

START_TEST(by_record_shares_cover_once) {
    const size_t n = 103;
    for (unsigned count = 1; count <= 4; count++) {
        uint8_t seen[103] = {0};
        for (unsigned w = 0; w < count; w++) {
            ps_order o;
            ck_assert_int_eq(ps_order_init(&o, NULL, n, NULL, 0, w, count, 0, 5), PS_OK);
            ck_assert_uint_eq(o.epoch_n, n / count);
            size_t *e = malloc(o.epoch_n * sizeof *e);
            ck_assert_int_eq(ps_order_epoch(&o, 3, e), PS_OK);
            for (size_t k = 0; k < o.epoch_n; k++) {
                ck_assert_uint_lt(e[k], n);
                ck_assert_uint_eq(e[k] % count, w); /* record i goes to worker i % count */
                ck_assert_uint_eq(seen[e[k]]++, 0);
            }
            free(e);
            ps_order_free(&o);
        }
        size_t total = 0;
        for (size_t i = 0; i < n; i++) total += seen[i];
        ck_assert_uint_eq(total, (n / count) * count);
    }
}
END_TEST

/* The full shuffle draws as the in-memory batcher does: training through the
 * pipeline is the same, sample for sample, as before it. */
START_TEST(full_shuffle_is_the_batchers) {
    const size_t n = 57;
    ps_dataset d = {.n = n, .dim = 1, .num_classes = (int)n};
    d.x = malloc(n * sizeof *d.x);
    d.y = malloc(n * sizeof *d.y);
    for (size_t i = 0; i < n; i++) d.x[i] = (float)i, d.y[i] = (int32_t)i;
    for (unsigned w = 0; w < 2; w++) {
        ps_batcher b;
        ck_assert_int_eq(ps_batcher_init(&b, &d, w, 2, 1000, 77), PS_OK);
        ps_order o;
        ck_assert_int_eq(ps_order_init(&o, NULL, n, NULL, 0, w, 2, 0, 77), PS_OK);
        size_t *e = malloc(o.epoch_n * sizeof *e);
        float x[1000];
        int32_t y[1000];
        for (unsigned epoch = 0; epoch < 3; epoch++) {
            ps_batcher_start_epoch(&b, epoch);
            ck_assert_uint_eq(ps_batcher_next(&b, x, y), o.epoch_n);
            ck_assert_int_eq(ps_order_epoch(&o, epoch, e), PS_OK);
            for (size_t k = 0; k < o.epoch_n; k++) ck_assert_int_eq(y[k], (int32_t)e[k]);
        }
        free(e);
        ps_order_free(&o);
        ps_batcher_free(&b);
    }
    free(d.x), free(d.y);
}
END_TEST

/* Seven files of different sizes over three workers: by file, each worker
 * reads only its files; all use the smallest share's count. */
START_TEST(by_file_shares) {
    size_t starts[8] = {0, 10, 13, 30, 31, 40, 52, 60};
    size_t mine[3] = {0};
    uint8_t seen[60] = {0};
    for (unsigned w = 0; w < 3; w++) {
        ps_order o;
        ck_assert_int_eq(ps_order_init(&o, NULL, 60, starts, 7, w, 3, 4, 1), PS_OK);
        ck_assert(ps_order_by_file(&o));
        mine[w] = o.share_n;
        for (size_t k = 0; k < o.share_n; k++) {
            size_t r = o.share[k], f = 0;
            while (starts[f + 1] <= r) f++;
            ck_assert_uint_eq(f % 3, w);
            ck_assert_uint_eq(seen[r]++, 0);
        }
        ps_order_free(&o);
    }
    for (size_t r = 0; r < 60; r++) ck_assert_uint_eq(seen[r], 1); /* the shares cover it */
    /* files 0,3,6 = 10+1+8; 1,4 = 3+9; 2,5 = 17+12 */
    ck_assert_uint_eq(mine[0], 19);
    ck_assert_uint_eq(mine[1], 12);
    ck_assert_uint_eq(mine[2], 29);
    ps_order o;
    ck_assert_int_eq(ps_order_init(&o, NULL, 60, starts, 7, 2, 3, 0, 1), PS_OK);
    ck_assert_uint_eq(o.epoch_n, 12);
    ps_order_free(&o);
    /* fewer files than workers: by record */
    ck_assert_int_eq(ps_order_init(&o, NULL, 60, starts, 7, 0, 8, 0, 1), PS_OK);
    ck_assert(!ps_order_by_file(&o));
    ck_assert_uint_eq(o.epoch_n, 7);
    ps_order_free(&o);
}
END_TEST

START_TEST(shuffle_buffer_orders) {
    size_t starts[5] = {0, 25, 50, 75, 100};
    ps_order o;
    size_t e1[100], e2[100], e3[100];
    /* buffer 10: a permutation, each record within 10 of its place in the
     * stream of (shuffled) files */
    ck_assert_int_eq(ps_order_init(&o, NULL, 100, starts, 4, 0, 1, 10, 9), PS_OK);
    ck_assert_int_eq(ps_order_epoch(&o, 0, e1), PS_OK);
    ck_assert_int_eq(ps_order_epoch(&o, 0, e2), PS_OK);
    ck_assert_int_eq(ps_order_epoch(&o, 1, e3), PS_OK);
    ck_assert_mem_eq(e1, e2, sizeof e1);     /* reproducible */
    ck_assert(memcmp(e1, e3, sizeof e1) != 0); /* reshuffled per epoch */
    size_t sorted[100];
    memcpy(sorted, e1, sizeof sorted);
    qsort(sorted, 100, sizeof *sorted, cmp_size);
    for (size_t i = 0; i < 100; i++) ck_assert_uint_eq(sorted[i], i);
    /* the first output comes from the first 10 records of some file */
    ck_assert_uint_lt(e1[0] % 25, 10);
    ps_order_free(&o);
    /* buffer 1: the files' records in order, files shuffled */
    ck_assert_int_eq(ps_order_init(&o, NULL, 100, starts, 4, 0, 1, 1, 9), PS_OK);
    ck_assert_int_eq(ps_order_epoch(&o, 0, e1), PS_OK);
    for (size_t i = 1; i < 100; i++)
        if (i % 25) ck_assert_uint_eq(e1[i], e1[i - 1] + 1);
    ps_order_free(&o);
    /* in order: the share as it is */
    ck_assert_int_eq(ps_order_init(&o, NULL, 100, starts, 4, 0, 1, PS_ORDER_IN_ORDER, 9), PS_OK);
    ck_assert_int_eq(ps_order_epoch(&o, 5, e1), PS_OK);
    for (size_t i = 0; i < 100; i++) ck_assert_uint_eq(e1[i], i);
    ps_order_free(&o);
}
END_TEST

START_TEST(subset_and_errors) {
    size_t recs[6] = {1, 4, 5, 8, 9, 12};
    ps_order o;
    ck_assert_int_eq(ps_order_init(&o, recs, 6, NULL, 0, 1, 2, 0, 3), PS_OK);
    ck_assert_uint_eq(o.epoch_n, 3);
    ck_assert_uint_eq(o.share[0], 4);
    ck_assert_uint_eq(o.share[1], 8);
    ck_assert_uint_eq(o.share[2], 12);
    ps_order_free(&o);
    ck_assert_int_eq(ps_order_init(&o, NULL, 3, NULL, 0, 0, 4, 0, 1), PS_EINVAL);
    ck_assert_int_eq(ps_order_init(&o, NULL, 3, NULL, 0, 2, 2, 0, 1), PS_EINVAL);
    ck_assert_int_eq(ps_order_init(&o, NULL, 3, NULL, 0, 0, 0, 0, 1), PS_EINVAL);
    ps_order_free(&o);
}
END_TEST

/* ---- the pipeline ---- */

/* n records of dim floats: record i holds i * 1000 + k, label i % 7. */
static ps_dataset make_data(size_t n, size_t dim) {
    ps_dataset d = {.n = n, .dim = dim, .num_classes = 7};
    d.x = malloc(n * dim * sizeof *d.x);
    d.y = malloc(n * sizeof *d.y);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < dim; k++) d.x[i * dim + k] = (float)(i * 1000 + k);
        d.y[i] = (int32_t)(i % 7);
    }
    return d;
}

/* A prepare step that adds a value drawn from the record's seed to every
 * element, to see the draws depend on the record alone. */
static int add_draw(void *ctx, const ps_sample *in, float *out, float **scratch, size_t *cap,
                    uint64_t seed, bool training, char *err, size_t errlen) {
    (void)ctx, (void)err, (void)errlen;
    if (*cap < 3) { /* grows like a real step's */
        float *s = realloc(*scratch, 3 * sizeof *s);
        ck_assert_ptr_nonnull(s);
        *scratch = s, *cap = 3;
    }
    float v = training ? (float)(seed % 1000) / 1000.0f : 0.0f;
    for (size_t k = 0; k < in->h * in->w * in->c; k++) out[k] = in->x[k] + v;
    return PS_OK;
}

/* Every batch of `epochs` epochs, flattened: x values then labels. */
static size_t run_epochs(ps_pipeline_cfg cfg, unsigned epochs, size_t skip, float *xs,
                         int32_t *ys) {
    ps_pipeline *p;
    char err[512];
    ck_assert_msg(ps_pipeline_open(&p, &cfg, err, sizeof err) == PS_OK, "%s", err);
    size_t dim = cfg.out_c, got = 0;
    for (unsigned e = 0; e < epochs; e++) {
        ck_assert_int_eq(ps_pipeline_start_epoch(p, e, e == 0 ? skip : 0), PS_OK);
        for (;;) {
            float *x;
            int32_t *y;
            size_t nb;
            ck_assert_msg(ps_pipeline_next(p, &x, &y, &nb, err, sizeof err) == PS_OK, "%s", err);
            if (!nb) break;
            memcpy(xs + got * dim, x, nb * dim * sizeof *x);
            memcpy(ys + got, y, nb * sizeof *y);
            got += nb;
        }
    }
    ps_pipeline_close(p);
    return got;
}

START_TEST(threads_give_the_same_batches) {
    ps_dataset d = make_data(211, 5);
    ps_source *src;
    char err[256];
    ck_assert_int_eq(ps_source_memory(&d, "test", &src, err, sizeof err), PS_OK);
    ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 5, .batch = 16,
                           .index = 1, .count = 2, .seed = 42, .training = true,
                           .prepare = add_draw};
    size_t cap = 3 * 211;
    float *rx = malloc(cap * 5 * sizeof *rx), *x = malloc(cap * 5 * sizeof *x);
    int32_t *ry = malloc(cap * sizeof *ry), *y = malloc(cap * sizeof *y);
    size_t want = run_epochs(cfg, 3, 0, rx, ry);
    ck_assert_uint_eq(want, 3 * 105);
    unsigned threads[] = {1, 3, 8};
    size_t budgets[] = {0, 1}; /* the default; a budget under two batches (two it is) */
    for (size_t t = 0; t < 3; t++)
        for (size_t m = 0; m < 2; m++) {
            cfg.threads = threads[t];
            cfg.memory_bytes = budgets[m];
            ck_assert_uint_eq(run_epochs(cfg, 3, 0, x, y), want);
            ck_assert_mem_eq(x, rx, want * 5 * sizeof *x);
            ck_assert_mem_eq(y, ry, want * sizeof *y);
        }
    /* a restart at batch 4 of epoch 0 reads what the run read from there */
    cfg.threads = 2;
    ck_assert_uint_eq(run_epochs(cfg, 3, 4, x, y), want - 4 * 16);
    ck_assert_mem_eq(x, rx + 4 * 16 * 5, (want - 64) * 5 * sizeof *x);
    /* the records are those of the order, the values their own plus the draw */
    for (size_t k = 0; k < 105; k++) {
        size_t rec = (size_t)(rx[k * 5 + 1] - 1.0f) / 1000; /* element 1: rec*1000 + 1 + draw */
        ck_assert_uint_eq(rec % 2, 1);
        ck_assert_int_eq(ry[k], (int32_t)(rec % 7));
    }
    ps_source_close(src);
    free(rx), free(x), free(ry), free(y), free(d.x), free(d.y);
}
END_TEST

/* An elastic job's share (cfg.steps): the epoch's records spread over exactly `steps`
 * batches, sizes one apart, in the order's order, with any number of threads; a restart
 * at a batch reads from that batch's first record; more steps than records is refused. */
START_TEST(spread_over_steps) {
    ps_dataset d = make_data(211, 5);
    ps_source *src;
    char err[256];
    ck_assert_int_eq(ps_source_memory(&d, "test", &src, err, sizeof err), PS_OK);
    /* share 1 of 2: 105 records over 8 steps, batches of 13 and 14 */
    ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 5, .batch = 1,
                           .steps = 8, .index = 1, .count = 2, .seed = 42};
    ps_pipeline_cfg plain = cfg;
    plain.steps = 0, plain.batch = 105;
    float *rx = malloc(105 * 5 * sizeof *rx), *x = malloc(105 * 5 * sizeof *x);
    int32_t *ry = malloc(105 * sizeof *ry), *y = malloc(105 * sizeof *y);
    ck_assert_uint_eq(run_epochs(plain, 1, 0, rx, ry), 105);
    for (unsigned threads = 0; threads <= 3; threads += 3) {
        cfg.threads = threads;
        ps_pipeline *p;
        ck_assert_msg(ps_pipeline_open(&p, &cfg, err, sizeof err) == PS_OK, "%s", err);
        ck_assert_uint_eq(ps_pipeline_steps_per_epoch(p), 8);
        ck_assert_int_eq(ps_pipeline_start_epoch(p, 0, 0), PS_OK);
        size_t got = 0, batches = 0;
        for (;;) {
            float *bx;
            int32_t *by;
            size_t nb;
            ck_assert_msg(ps_pipeline_next(p, &bx, &by, &nb, err, sizeof err) == PS_OK, "%s",
                          err);
            if (!nb) break;
            ck_assert_msg(nb == 13 || nb == 14, "a batch of %zu", nb);
            memcpy(x + got * 5, bx, nb * 5 * sizeof *bx);
            memcpy(y + got, by, nb * sizeof *by);
            got += nb, batches++;
        }
        ck_assert_uint_eq(batches, 8);
        ck_assert_uint_eq(got, 105);
        ck_assert_mem_eq(x, rx, 105 * 5 * sizeof *x); /* the same records, in order */
        ck_assert_mem_eq(y, ry, 105 * sizeof *y);
        ps_pipeline_close(p);
    }
    /* a restart at batch 3: floor(3 * 105 / 8) = 39 records in */
    ck_assert_uint_eq(run_epochs(cfg, 1, 3, x, y), 105 - 39);
    ck_assert_mem_eq(x, rx + 39 * 5, (105 - 39) * 5 * sizeof *x);
    ps_pipeline *p;
    cfg.steps = 106;
    ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "105 records per epoch cannot fill 106 steps"));
    ps_source_close(src);
    free(rx), free(x), free(ry), free(y), free(d.x), free(d.y);
}
END_TEST

START_TEST(depth_follows_the_budget) {
    ps_dataset d = make_data(1000, 100);
    ps_source *src;
    char err[256];
    ck_assert_int_eq(ps_source_memory(&d, "test", &src, err, sizeof err), PS_OK);
    /* a batch of 10 records is 10 * (400 + 4 + 4 + 1) bytes: x, label, target, a flag */
    ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 100, .batch = 10,
                           .count = 1, .threads = 2, .memory_bytes = 5 * 4090};
    ps_pipeline *p;
    ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
    bool over = true;
    ck_assert_uint_eq(ps_pipeline_depth(p, &over), 5);
    ck_assert(!over);
    ps_pipeline_close(p);
    cfg.memory_bytes = 4090;
    ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
    ck_assert_uint_eq(ps_pipeline_depth(p, &over), 2);
    ck_assert(over);
    ps_pipeline_close(p);
    ps_source_close(src);
    free(d.x), free(d.y);
}
END_TEST

/* A source whose records 3 and 10 cannot be read. */
static int flaky_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    if (i == 3 || i == 10) {
        snprintf(err, errlen, "flaky: record %zu: damaged", i);
        return PS_EFORMAT;
    }
    if (ps_sample_reserve(s, 2) != PS_OK) return PS_ENOMEM;
    s->x[0] = (float)i, s->x[1] = 0;
    s->h = s->w = 1, s->c = 2;
    s->label = 0;
    (void)src;
    return PS_OK;
}

static const ps_source_ops flaky_ops = {.read = flaky_read};

START_TEST(bad_records_fail_or_are_skipped) {
    ps_source *src = ps_source_new(&flaky_ops, 1);
    src->n = 20;
    src->file_start[1] = 20;
    snprintf(src->desc, sizeof src->desc, "flaky");
    for (unsigned threads = 0; threads <= 2; threads += 2) {
        ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 2, .batch = 8,
                               .count = 1, .threads = threads,
                               .shuffle_buffer = PS_ORDER_IN_ORDER};
        ps_pipeline *p;
        char err[512] = "";
        float *x;
        int32_t *y;
        size_t nb;
        ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
        ck_assert_int_eq(ps_pipeline_start_epoch(p, 0, 0), PS_OK);
        ck_assert_int_eq(ps_pipeline_next(p, &x, &y, &nb, err, sizeof err), PS_EFORMAT);
        ck_assert_ptr_nonnull(strstr(err, "record 3: damaged"));
        ps_pipeline_close(p);
        cfg.skip_bad = true;
        ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
        ck_assert_int_eq(ps_pipeline_start_epoch(p, 0, 0), PS_OK);
        size_t sizes[3], total = 0;
        for (int b = 0; b < 3; b++) {
            ck_assert_int_eq(ps_pipeline_next(p, &x, &y, &nb, err, sizeof err), PS_OK);
            sizes[b] = nb;
            for (size_t k = 0; k < nb; k++) ck_assert(x[2 * k] != 3.0f && x[2 * k] != 10.0f);
            if (b == 0) ck_assert(x[2 * 3] == 4.0f); /* the rest moved up, in order */
            total += nb;
        }
        ck_assert_uint_eq(sizes[0], 7);
        ck_assert_uint_eq(sizes[1], 7);
        ck_assert_uint_eq(sizes[2], 4);
        ck_assert_uint_eq(total, 18);
        char first[512];
        ck_assert_uint_eq(ps_pipeline_skipped(p, first, sizeof first), 2);
        ck_assert_str_eq(first, "flaky: record 3: damaged");
        ck_assert_int_eq(ps_pipeline_next(p, &x, &y, &nb, err, sizeof err), PS_OK);
        ck_assert_uint_eq(nb, 0);
        ps_pipeline_close(p);
    }
    ps_source_close(src);
}
END_TEST

START_TEST(shape_and_label_checks) {
    ps_dataset d = make_data(30, 6);
    d.h = 1, d.w = 2, d.c = 3;
    ps_source *src;
    char err[512];
    ck_assert_int_eq(ps_source_memory(&d, "test", &src, err, sizeof err), PS_OK);
    ps_pipeline_cfg cfg = {.src = src, .out_h = 2, .out_w = 1, .out_c = 3, .batch = 4,
                           .count = 1, .threads = 1};
    ps_pipeline *p;
    float *x;
    int32_t *y;
    size_t nb;
    ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_pipeline_start_epoch(p, 0, 0), PS_OK);
    ck_assert_int_eq(ps_pipeline_next(p, &x, &y, &nb, err, sizeof err), PS_ESHAPE);
    ck_assert_ptr_nonnull(strstr(err, "is 1x2x3, the model takes 2x1x3"));
    ps_pipeline_close(p);
    cfg.out_h = 1, cfg.out_w = 2, cfg.num_classes = 5; /* labels run to 6 */
    ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_pipeline_start_epoch(p, 0, 0), PS_OK);
    int rc = PS_OK;
    while (rc == PS_OK && (rc = ps_pipeline_next(p, &x, &y, &nb, err, sizeof err)) == PS_OK && nb)
        ;
    ck_assert_int_eq(rc, PS_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "but the model has 5 classes"));
    ps_pipeline_close(p);
    ps_source_close(src);
    free(d.x), free(d.y);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("order");
    tcase_add_test(tc, by_record_shares_cover_once);
    tcase_add_test(tc, full_shuffle_is_the_batchers);
    tcase_add_test(tc, by_file_shares);
    tcase_add_test(tc, shuffle_buffer_orders);
    tcase_add_test(tc, subset_and_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("pipeline");
    tcase_add_test(tc, threads_give_the_same_batches);
    tcase_add_test(tc, spread_over_steps);
    tcase_add_test(tc, depth_follows_the_budget);
    tcase_add_test(tc, bad_records_fail_or_are_skipped);
    tcase_add_test(tc, shape_and_label_checks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
