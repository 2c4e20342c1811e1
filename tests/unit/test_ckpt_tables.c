/* Check tests for embedding tables in psd's checkpoints (layout 3): a store
 * with tables of every row optimizer, fixed and dynamic (admission, TTL, LRU
 * cap, refusing cap), with 64-bit ids and steps whose float words are NaNs and
 * infinities, survives save + restore bit for bit (rows in LRU order, slots,
 * last steps, counts, update counts), and trains on identically (the count-min
 * sketch aside: not saved, a row not yet admitted counts from zero); a table's
 * file grows with its rows, not its id space; without tables the file keeps
 * layout 1 or 2; the tensors are byte for byte what docs/FORMATS.md says;
 * every corrupt variant of a table (truncated, duplicate id,
 * dim mismatch, bad spec, counts, names, placement) is skipped for the older
 * valid file, with its reason logged. Also measures (prints, asserts nothing
 * on time) the loop's pause for a million rows of dim 16. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_tables.h"
#include "optim.h"
#include "ps_error.h"
#include "rows.h"
#include "store.h"
#include "tables.h"
#include "tensorfile.h"
#include "testutil.h"

/* ids whose two float words are a NaN with a payload, -inf, a denormal and -0 */
static const uint64_t special_ids[] = {0,
                                       1,
                                       UINT64_MAX,
                                       0x7FC000017FC00001ull,
                                       0xFF800000FF800000ull,
                                       0x0000000180000000ull,
                                       1ull << 63,
                                       0x123456789ABCDEF0ull};
#define N_SPECIAL (sizeof special_ids / sizeof special_ids[0])

static ps_table_entry *mk(ps_tables *ts, const char *name, uint64_t num_rows, ps_row_opt_kind kind,
                          size_t dim, uint32_t min_count, uint64_t ttl, size_t max_rows,
                          ps_table_full full) {
    ps_table_cfg cfg = {.dim = dim,
                        .opt = ps_row_opt_default(kind, 0.05f),
                        .seed = 7,
                        .key = ps_rows_table_key(name),
                        .init_lo = -0.1f,
                        .init_hi = 0.1f,
                        .min_count = min_count,
                        .ttl_steps = ttl,
                        .max_rows = max_rows,
                        .full = full};
    char why[160];
    ck_assert_msg(ps_table_entry_cfg_check(num_rows, &cfg, why, sizeof why) == PS_OK, "%s", why);
    ps_table_entry *e;
    ck_assert_int_eq(ps_tables_create(ts, name, num_rows, &cfg, &e), PS_OK);
    return e;
}

/* The id of pool entry k: the special ones, then spread over 64 bits (a fixed
 * table's: below its num_rows). */
static uint64_t pool_id(const ps_table_entry *e, uint64_t k) {
    if (e->num_rows) return (k * 2654435761u) % e->num_rows;
    if (k < N_SPECIAL) return special_ids[k];
    return k * 0x9E3779B97F4A7C15ull;
}

/* `rounds` async pushes of up to 40 rows from a pool of `pool` ids. */
static void push_random(ps_table_entry *e, uint64_t seed, int rounds, uint64_t pool) {
    ps_test_rng r;
    ps_test_rng_seed(&r, seed);
    uint64_t ids[40];
    float *g = malloc(40 * e->cfg.dim * sizeof *g);
    for (int k = 0; k < rounds; k++) {
        size_t n = 1 + (size_t)(ps_test_rng_uniform(&r, 0, 40));
        if (n > 40) n = 40;
        for (size_t i = 0; i < n; i++)
            ids[i] = pool_id(e, (uint64_t)ps_test_rng_uniform(&r, 0, (float)pool));
        for (size_t i = 0; i < n * e->cfg.dim; i++) g[i] = ps_test_rng_uniform(&r, -1, 1);
        ck_assert_int_eq(ps_table_entry_apply(e, ids, n, g, NULL), PS_OK);
    }
    free(g);
}

/* Six tables: every row optimizer; fixed and dynamic; admission, TTL, an LRU
 * cap and a refusing one; one never pushed. Steps start high (2^40) in one. */
static void build_tables(ps_tables *ts, int rounds) {
    ps_tables_init(ts, 2);
    ps_table_entry *e;
    e = mk(ts, "emb", 0, PS_ROW_LAZY_ADAM, 8, 0, 0, 64, PS_TABLE_EVICT_LRU);
    e->updates = 1ull << 40;
    push_random(e, 1, rounds, 200);
    e = mk(ts, "fixed", 1000, PS_ROW_ADAGRAD, 3, 0, 0, 0, PS_TABLE_EVICT_LRU);
    push_random(e, 2, rounds, 1000);
    e = mk(ts, "ftrl", 0, PS_ROW_FTRL, 4, 2, 6, 0, PS_TABLE_EVICT_LRU);
    push_random(e, 3, rounds, 120);
    e = mk(ts, "capped", 0, PS_ROW_SGD, 5, 0, 0, 10, PS_TABLE_REFUSE);
    push_random(e, 4, rounds, 30);
    e = mk(ts, "rowwise", 0, PS_ROW_ROWWISE_ADAGRAD, 2, 0, 0, 0, PS_TABLE_EVICT_LRU);
    push_random(e, 5, rounds, 50);
    mk(ts, "empty", 0, PS_ROW_LAZY_ADAM, 16, 0, 0, 0, PS_TABLE_EVICT_LRU);
}

static void build_store(ps_store *st) {
    ps_store_init(st);
    uint64_t shape[1] = {6};
    float init[6], g[6];
    ps_test_fill_uniform(init, 6, 9, -1, 1);
    ps_var *v;
    ps_opt_spec adam = ps_opt_spec_default(PS_OPT_ADAM);
    ck_assert_int_eq(ps_store_create(st, "dense", 1, shape, init, &adam, &v), PS_OK);
    ps_test_fill_uniform(g, 6, 10, -1, 1);
    ck_assert_int_eq(ps_var_apply(v, g), PS_OK);
}

typedef struct {
    size_t n, cap, dim, sf;
    uint64_t *ids, *last;
    float *rows, *slots;
} rows_dump;

static void dump_row(void *ctx, uint64_t id, const float *row, const float *slots, uint64_t last) {
    rows_dump *d = ctx;
    ck_assert_uint_lt(d->n, d->cap);
    d->ids[d->n] = id;
    d->last[d->n] = last;
    memcpy(d->rows + d->n * d->dim, row, d->dim * sizeof *row);
    memcpy(d->slots + d->n * d->sf, slots, d->sf * sizeof *slots);
    d->n++;
}

/* e's rows in LRU order. */
static void dump(const ps_table_entry *e, rows_dump *d) {
    ps_table_counts st;
    ps_table_stats_get(e->t, &st);
    d->n = 0;
    d->cap = (size_t)st.rows;
    d->dim = e->cfg.dim;
    d->sf = ps_row_opt_slot_floats(e->cfg.opt.kind, e->cfg.dim);
    d->ids = malloc((d->cap + 1) * sizeof *d->ids);
    d->last = malloc((d->cap + 1) * sizeof *d->last);
    d->rows = malloc((d->cap * d->dim + 1) * sizeof *d->rows);
    d->slots = malloc((d->cap * d->sf + 1) * sizeof *d->slots);
    ps_table_visit(e->t, dump_row, d);
    ck_assert_uint_eq(d->n, d->cap);
}

static void dump_free(rows_dump *d) {
    free(d->ids), free(d->last), free(d->rows), free(d->slots);
}

/* b holds a's tables exactly: spec, update count, counts, and every row (id,
 * values, slots, last step) bit for bit in the same LRU order. */
static void expect_same_tables(const ps_tables *a, const ps_tables *b) {
    ck_assert_uint_eq(b->n, a->n);
    for (size_t i = 0; i < a->n; i++) {
        const ps_table_entry *x = a->v[i], *y = b->v[i];
        ck_assert_str_eq(y->name, x->name);
        ck_assert_ptr_eq(ps_tables_find(b, x->name), y);
        ck_assert_msg(ps_table_entry_same(y, x->num_rows, &x->cfg), "%s: another spec", x->name);
        ck_assert_uint_eq(y->updates, x->updates);
        ps_table_counts sx, sy;
        ps_table_stats_get(x->t, &sx);
        ps_table_stats_get(y->t, &sy);
        ck_assert_uint_eq(sy.rows, sx.rows);
        ck_assert_uint_eq(sy.admitted, sx.admitted);
        ck_assert_uint_eq(sy.evicted, sx.evicted);
        ck_assert_uint_eq(sy.expired, sx.expired);
        ck_assert_uint_eq(sy.refused, sx.refused);
        ck_assert_uint_eq(sy.dropped, sx.dropped);
        rows_dump dx, dy;
        dump(x, &dx);
        dump(y, &dy);
        ck_assert_mem_eq(dy.ids, dx.ids, dx.n * sizeof *dx.ids);
        ck_assert_mem_eq(dy.last, dx.last, dx.n * sizeof *dx.last);
        ck_assert_mem_eq(dy.rows, dx.rows, dx.n * dx.dim * sizeof *dx.rows);
        ck_assert_mem_eq(dy.slots, dx.slots, dx.n * dx.sf * sizeof *dx.slots);
        dump_free(&dx);
        dump_free(&dy);
    }
}

static ps_ckpt_meta meta_v(uint64_t version, const char *job) {
    ps_ckpt_meta m = {.version = version,
                      .updates_applied = version,
                      .shard = 0,
                      .num_shards = 1,
                      .mode = 1,
                      .incarnation = 5,
                      .unix_ms = 1700000000000ull + version};
    snprintf(m.job_id, sizeof m.job_id, "%s", job);
    return m;
}

static void save(const char *dir, const ps_store *st, const ps_tables *ts, uint64_t version,
                 const char *job, char *path, size_t path_len) {
    ps_ckpt_meta m = meta_v(version, job);
    char err[512];
    int rc = ps_ckpt_save(dir, 10, st, ts, &m, path, path_len, NULL, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "save: %s", err);
}

/* Runs restore with stderr sent to a file; the log text goes to log. */
static int restore_logged(const char *dir, ps_store *st, ps_tables *ts, ps_ckpt_meta *m,
                          char *log, size_t loglen) {
    char logpath[4096], err[512];
    snprintf(logpath, sizeof logpath, "%s.log", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(logpath, O_CREAT | O_TRUNC | O_RDWR, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 2);
    int rc = ps_ckpt_restore(dir, st, ts, m, NULL, 0, err, sizeof err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t k = pread(fd, log, loglen - 1, 0);
    log[k > 0 ? k : 0] = '\0';
    close(fd);
    unlink(logpath);
    fputs(log, stderr);
    return rc;
}

START_TEST(tables_round_trip_bit_identical) {
    char *dir = ps_test_mkdtemp(), path[4096], err[512];
    ps_store st, st2;
    ps_tables ts, ts2;
    build_store(&st);
    build_tables(&ts, 60);
    /* every feature left a trace worth saving */
    ps_table_counts c;
    ps_table_stats_get(ts.v[0]->t, &c);
    ck_assert_uint_gt(c.evicted, 0);
    ps_table_stats_get(ts.v[2]->t, &c);
    ck_assert_uint_gt(c.expired, 0);
    ck_assert_uint_gt(c.dropped, 0);
    ps_table_stats_get(ts.v[3]->t, &c);
    ck_assert_uint_gt(c.refused, 0);
    save(dir, &st, &ts, 40, "", path, sizeof path);

    ps_store_init(&st2);
    ps_tables_init(&ts2, 2);
    ps_ckpt_meta m;
    ck_assert_int_eq(ps_ckpt_restore(dir, &st2, &ts2, &m, NULL, 0, err, sizeof err), PS_OK);
    ck_assert_uint_eq(m.version, 40);
    ck_assert_str_eq(m.job_id, "");
    ck_assert_uint_eq(st2.n, 1);
    ck_assert_mem_eq(st2.vars[0]->w, st.vars[0]->w, 6 * sizeof(float));
    ck_assert_uint_eq(ts2.workers, 2);
    expect_same_tables(&ts, &ts2);
    /* the special ids came back as themselves */
    for (size_t k = 0; k < N_SPECIAL; k++) {
        float x[8], y[8];
        ps_table_pull(ts.v[0]->t, &special_ids[k], 1, x);
        ps_table_pull(ts2.v[0]->t, &special_ids[k], 1, y);
        ck_assert_mem_eq(x, y, sizeof x);
    }
    /* both train on alike: evictions, expiries, refusals, Adam's t (the table
     * with a frequency threshold aside: its sketch is not saved, below) */
    for (size_t i = 0; i < ts.n; i++) {
        if (ts.v[i]->cfg.min_count > 1) continue;
        push_random(ts.v[i], 100 + i, 30, i == 1 ? 1000 : 260);
        push_random(ts2.v[i], 100 + i, 30, i == 1 ? 1000 : 260);
    }
    expect_same_tables(&ts, &ts2);
    /* ... pushing only its stored rows, it stays the same too */
    ps_table_entry *fa = ps_tables_find(&ts, "ftrl"), *fb = ps_tables_find(&ts2, "ftrl");
    rows_dump d;
    dump(fa, &d);
    ck_assert_uint_gt(d.n, 0);
    float *g = calloc(d.n * 4, sizeof *g);
    for (size_t i = 0; i < d.n * 4; i++) g[i] = (float)(i % 5) - 2;
    ck_assert_int_eq(ps_table_entry_apply(fa, d.ids, d.n, g, NULL), PS_OK);
    ck_assert_int_eq(ps_table_entry_apply(fb, d.ids, d.n, g, NULL), PS_OK);
    dump_free(&d);
    free(g);
    expect_same_tables(&ts, &ts2);

    /* the file: variables, "@job" (no job: empty), 5 tensors a table, "@tables" */
    ps_tf_file f;
    ck_assert_int_eq(ps_tf_read(path, &f, err, sizeof err), PS_OK);
    ck_assert_uint_eq(f.h.meta[7], PS_CKPT_LAYOUT_TABLES);
    ck_assert_uint_eq(f.n, 3 + 1 + 6 * 5 + 1);
    ck_assert_str_eq(f.t[3].name, "@job");
    ck_assert_uint_eq(f.t[3].attr_len, 0);
    ck_assert_str_eq(f.t[4].name, "emb@table");
    ck_assert_str_eq(f.t[5].name, "emb@ids");
    ck_assert_str_eq(f.t[6].name, "emb@steps");
    ck_assert_str_eq(f.t[7].name, "emb@rows");
    ck_assert_str_eq(f.t[8].name, "emb@slots");
    ck_assert_str_eq(f.t[f.n - 1].name, "@tables");
    uint64_t count;
    memcpy(&count, f.t[f.n - 1].data, sizeof count);
    ck_assert_uint_eq(count, 6);
    ck_assert_uint_eq(f.t[8].shape[1], 16); /* lazy Adam: m and v per value */
    ps_tf_file_free(&f);

    ps_store_free(&st), ps_store_free(&st2);
    ps_tables_free(&ts), ps_tables_free(&ts2);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* The count-min sketch is not saved: a row pushed once before the save (min_count
 * 2, not admitted) counts from zero after the restore, so the next push admits
 * it in the original and not in the restored table; one more push does. */
START_TEST(sketch_not_saved_counts_from_zero) {
    char *dir = ps_test_mkdtemp(), path[4096], err[512];
    ps_store st, st2;
    ps_store_init(&st);
    ps_store_init(&st2);
    ps_tables ts, ts2;
    ps_tables_init(&ts, 1);
    ps_tables_init(&ts2, 1);
    ps_table_entry *a = mk(&ts, "t", 0, PS_ROW_SGD, 2, 2, 0, 0, 0);
    uint64_t id = 42, dropped;
    float g[2] = {1, 1}, ra[2], rb[2], init[2];
    ps_table_pull(a->t, &id, 1, init);
    ck_assert_int_eq(ps_table_entry_apply(a, &id, 1, g, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 1);
    save(dir, &st, &ts, 1, "", path, sizeof path);
    ck_assert_int_eq(ps_ckpt_restore(dir, &st2, &ts2, NULL, NULL, 0, err, sizeof err), PS_OK);
    ps_table_entry *b = ts2.v[0];
    ck_assert_int_eq(ps_table_entry_apply(a, &id, 1, g, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 0); /* admitted */
    ck_assert_int_eq(ps_table_entry_apply(b, &id, 1, g, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 1); /* the first push it counts */
    ps_table_pull(a->t, &id, 1, ra);
    ps_table_pull(b->t, &id, 1, rb);
    ck_assert(ra[0] != init[0]);
    ck_assert_mem_eq(rb, init, sizeof init);
    ck_assert_int_eq(ps_table_entry_apply(b, &id, 1, g, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 0);
    ps_store_free(&st), ps_store_free(&st2);
    ps_tables_free(&ts), ps_tables_free(&ts2);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static void le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void le64(uint8_t *p, uint64_t v) {
    le32(p, (uint32_t)v);
    le32(p + 4, (uint32_t)(v >> 32));
}

static void lef(uint8_t *p, float f) {
    uint32_t v;
    memcpy(&v, &f, sizeof v);
    le32(p, v);
}

/* The table's tensors byte for byte as docs/FORMATS.md ("Layout 3") has them,
 * built here from that page: the 92-byte attribute, the numbers, ids and steps
 * as little-endian u64s, the rows in LRU order, "@job" empty, "@tables". */
START_TEST(table_tensors_as_documented) {
    char *dir = ps_test_mkdtemp(), path[4096], err[512];
    ps_store st;
    ps_store_init(&st);
    ps_tables ts;
    ps_tables_init(&ts, 1);
    ps_table_cfg cfg = {.dim = 2,
                        .opt = ps_row_opt_default(PS_ROW_FTRL, 0.25f),
                        .seed = 0x0102030405060708ull,
                        .key = ps_rows_table_key("doc"),
                        .init_lo = -0.5f,
                        .init_hi = 0.75f,
                        .min_count = 0,
                        .ttl_steps = 0x1122334455ull,
                        .max_rows = 77,
                        .full = PS_TABLE_REFUSE};
    cfg.opt.l1 = 0.125f, cfg.opt.l2 = 0.0625f;
    ps_table_entry *e;
    ck_assert_int_eq(ps_tables_create(&ts, "doc", 0, &cfg, &e), PS_OK);
    uint64_t a = 0xFFFFFFFF7FC00001ull, b = 3;
    float g[2] = {1, -1};
    ck_assert_int_eq(ps_table_entry_apply(e, &a, 1, g, NULL), PS_OK); /* step 1 */
    ck_assert_int_eq(ps_table_entry_apply(e, &b, 1, g, NULL), PS_OK); /* step 2 */
    ck_assert_int_eq(ps_table_entry_apply(e, &a, 1, g, NULL), PS_OK); /* step 3: a is newest */
    save(dir, &st, &ts, 9, "", path, sizeof path);

    uint8_t want[92] = {0};
    le32(want + 0, 1);
    le32(want + 4, 2);
    le64(want + 8, 0);
    le64(want + 16, 0x0102030405060708ull);
    lef(want + 24, -0.5f);
    lef(want + 28, 0.75f);
    le32(want + 32, 0);
    le32(want + 36, 1);
    le64(want + 40, 0x1122334455ull);
    le64(want + 48, 77);
    le32(want + 56, 4);
    lef(want + 60, 0.25f);
    lef(want + 64, cfg.opt.eps);
    lef(want + 68, cfg.opt.initial_accumulator);
    lef(want + 72, cfg.opt.beta_1);
    lef(want + 76, cfg.opt.beta_2);
    lef(want + 80, 0.125f);
    lef(want + 84, 0.0625f);
    lef(want + 88, cfg.opt.lr_power);

    ps_tf_file f;
    ck_assert_int_eq(ps_tf_read(path, &f, err, sizeof err), PS_OK);
    ck_assert_uint_eq(f.h.meta[7], 3);
    ck_assert_uint_eq(f.n, 1 + 5 + 1);
    ck_assert_str_eq(f.t[0].name, "@job");
    ck_assert_uint_eq(f.t[0].attr_len, 0);
    ck_assert_uint_eq(f.t[0].rank, 1);
    ck_assert_uint_eq(f.t[0].shape[0], 1);
    ck_assert(f.t[0].data[0] == 0.0f);
    const ps_tf_owned *h = &f.t[1];
    ck_assert_str_eq(h->name, "doc@table");
    ck_assert_uint_eq(h->attr_len, 92);
    ck_assert_mem_eq(h->attr, want, 92);
    ck_assert_uint_eq(h->rank, 1);
    ck_assert_uint_eq(h->shape[0], 14);
    uint8_t nums[56];
    const uint64_t nv[7] = {2, 3, 2, 0, 0, 0, 0}; /* rows, updates, admitted, ... */
    for (int k = 0; k < 7; k++) le64(nums + 8 * k, nv[k]);
    ck_assert_mem_eq(h->data, nums, 56);
    uint8_t ids[16], steps[16];
    le64(ids, b), le64(ids + 8, a); /* least recently pushed first */
    le64(steps, 2), le64(steps + 8, 3);
    const char *names[4] = {"doc@ids", "doc@steps", "doc@rows", "doc@slots"};
    const uint64_t cols[4] = {2, 2, 2, 4};
    for (int k = 0; k < 4; k++) {
        ck_assert_str_eq(f.t[2 + k].name, names[k]);
        ck_assert_uint_eq(f.t[2 + k].rank, 2);
        ck_assert_uint_eq(f.t[2 + k].shape[0], 2);
        ck_assert_uint_eq(f.t[2 + k].shape[1], cols[k]);
        ck_assert_uint_eq(f.t[2 + k].attr_len, 0);
    }
    ck_assert_mem_eq(f.t[2].data, ids, 16);
    ck_assert_mem_eq(f.t[3].data, steps, 16);
    float rows[4], slots[8];
    ps_table_pull(e->t, &b, 1, rows);
    ps_table_pull(e->t, &a, 1, rows + 2);
    ck_assert_mem_eq(f.t[4].data, rows, sizeof rows);
    rows_dump d;
    dump(e, &d);
    memcpy(slots, d.slots, sizeof slots); /* z then n, a row each */
    dump_free(&d);
    ck_assert_mem_eq(f.t[5].data, slots, sizeof slots);
    ck_assert_str_eq(f.t[6].name, "@tables");
    uint8_t count[8];
    le64(count, 1);
    ck_assert_mem_eq(f.t[6].data, count, 8);
    ck_assert_uint_eq(f.t[6].attr_len, 0);
    ps_tf_file_free(&f);
    ps_store_free(&st);
    ps_tables_free(&ts);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static uint64_t file_size(const char *path) {
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* A fixed table of 2^40 ids holding 3 rows costs its rows, not its id space;
 * each further row costs its id, step, values and slots (dim 4, Adagrad:
 * 4 + 4 + 16 + 16 bytes). */
START_TEST(size_grows_with_rows_not_id_space) {
    char *dir = ps_test_mkdtemp(), path[4096];
    ps_store st;
    ps_store_init(&st);
    ps_tables ts;
    ps_tables_init(&ts, 1);
    ps_table_entry *e = mk(&ts, "huge", 1ull << 40, PS_ROW_ADAGRAD, 4, 0, 0, 0, 0);
    uint64_t ids[3] = {5, 1ull << 39, (1ull << 40) - 1};
    float g[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    ck_assert_int_eq(ps_table_entry_apply(e, ids, 3, g, NULL), PS_OK);
    save(dir, &st, &ts, 1, "", path, sizeof path);
    uint64_t small = file_size(path);
    ck_assert_uint_lt(small, 2048);
    uint64_t more[100];
    float g100[400];
    for (int i = 0; i < 100; i++) more[i] = 1000 + (uint64_t)i;
    ps_test_fill_uniform(g100, 400, 3, -1, 1);
    ck_assert_int_eq(ps_table_entry_apply(e, more, 100, g100, NULL), PS_OK);
    save(dir, &st, &ts, 2, "", path, sizeof path);
    ck_assert_uint_eq(file_size(path) - small, 100 * (8 + 8 + 16 + 16));
    ps_store_free(&st);
    ps_tables_free(&ts);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Without tables the file is as before tables existed (layouts 1 and 2, which
 * older builds read); with tables and a job, layout 3 carries the job. */
START_TEST(layouts_without_tables_unchanged_and_job_in_layout_3) {
    char *dir = ps_test_mkdtemp(), path[4096], err[512];
    ps_store st;
    build_store(&st);
    ps_tables none;
    ps_tables_init(&none, 1);
    ps_tf_file f;
    save(dir, &st, &none, 1, "", path, sizeof path);
    ck_assert_int_eq(ps_tf_read(path, &f, err, sizeof err), PS_OK);
    ck_assert_uint_eq(f.h.meta[7], PS_CKPT_LAYOUT_VERSION);
    ck_assert_uint_eq(f.n, 3);
    ps_tf_file_free(&f);
    save(dir, &st, &none, 2, "job-a", path, sizeof path);
    ck_assert_int_eq(ps_tf_read(path, &f, err, sizeof err), PS_OK);
    ck_assert_uint_eq(f.h.meta[7], PS_CKPT_LAYOUT_JOB);
    ck_assert_uint_eq(f.n, 4);
    ps_tf_file_free(&f);

    ps_tables ts;
    build_tables(&ts, 5);
    save(dir, &st, &ts, 3, "job-a", path, sizeof path);
    ps_store back;
    ps_store_init(&back);
    ps_tables tb;
    ps_tables_init(&tb, 2);
    ps_ckpt_meta m;
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, &tb, &m, NULL, 0, err, sizeof err), PS_OK);
    ck_assert_uint_eq(m.version, 3);
    ck_assert_str_eq(m.job_id, "job-a");
    expect_same_tables(&ts, &tb);
    /* a caller without tables still gets the variables (the tables checked) */
    ps_store only;
    ps_store_init(&only);
    ck_assert_int_eq(ps_ckpt_restore(dir, &only, NULL, &m, NULL, 0, err, sizeof err), PS_OK);
    ck_assert_uint_eq(only.n, 1);
    /* and restoring into a registry that is not empty is refused */
    ps_store again;
    ps_store_init(&again);
    ck_assert_int_eq(ps_ckpt_restore(dir, &again, &tb, &m, NULL, 0, err, sizeof err), PS_EINVAL);
    ps_store_free(&st), ps_store_free(&back), ps_store_free(&only), ps_store_free(&again);
    ps_tables_free(&ts), ps_tables_free(&tb), ps_tables_free(&none);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* ---- corrupt files ---- */

static ps_tf_owned *tensor(ps_tf_file *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    ck_abort_msg("no tensor %s", name);
    return NULL;
}

/* Gives t the shape [r, c] (rank 2), its data cut or padded with zeros. */
static void reshape(ps_tf_owned *t, uint64_t r, uint64_t c) {
    size_t n = (size_t)(r * c);
    t->data = realloc(t->data, (n ? n : 1) * sizeof *t->data);
    for (size_t i = t->numel; i < n; i++) t->data[i] = 0;
    t->rank = 2, t->shape[0] = r, t->shape[1] = c, t->numel = n;
}

static uint64_t get_u64(const float *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void set_u64(float *p, uint64_t v) {
    memcpy(p, &v, sizeof v);
}

static void rename_tensor(ps_tf_owned *t, const char *name) {
    free(t->name);
    t->name = strdup(name);
}

static void put32(void *attr, size_t off, uint32_t v) {
    memcpy((char *)attr + off, &v, sizeof v);
}

typedef struct {
    const char *what, *reason;
    void (*mutate)(ps_tf_file *f);
} variant;

static void truncated_rows(ps_tf_file *f) {
    ps_tf_owned *t = tensor(f, "emb@rows");
    reshape(t, t->shape[0] - 1, t->shape[1]);
}
static void truncated_ids(ps_tf_file *f) {
    ps_tf_owned *t = tensor(f, "emb@ids");
    reshape(t, t->shape[0] - 1, 2);
}
static void truncated_slots(ps_tf_file *f) {
    ps_tf_owned *t = tensor(f, "emb@slots");
    reshape(t, t->shape[0], t->shape[1] - 1);
}
static void duplicate_id(ps_tf_file *f) {
    ps_tf_owned *t = tensor(f, "emb@ids");
    set_u64(t->data + 2 * 5, get_u64(t->data + 2 * 2));
}
static void rows_wider_than_dim(ps_tf_file *f) {
    ps_tf_owned *t = tensor(f, "fixed@rows");
    reshape(t, t->shape[0], t->shape[1] + 1);
}
static void spec_dim_differs(ps_tf_file *f) {
    put32(tensor(f, "fixed@table")->attr, 4, 4); /* dim 3 -> 4 */
}
static void spec_nan_lr(ps_tf_file *f) {
    float nan = NAN;
    uint32_t v;
    memcpy(&v, &nan, sizeof v);
    put32(tensor(f, "fixed@table")->attr, 60, v);
}
static void spec_version_2(ps_tf_file *f) {
    put32(tensor(f, "emb@table")->attr, 0, 2);
}
static void spec_unknown_optimizer(ps_tf_file *f) {
    put32(tensor(f, "rowwise@table")->attr, 56, 9);
}
static void spec_short(ps_tf_file *f) {
    tensor(f, "emb@table")->attr_len = 88;
}
static void id_out_of_range(ps_tf_file *f) {
    set_u64(tensor(f, "fixed@ids")->data, 1000);
}
static void step_zero(ps_tf_file *f) {
    set_u64(tensor(f, "ftrl@steps")->data + 2, 0);
}
static void step_ahead(ps_tf_file *f) {
    ps_tf_owned *t = tensor(f, "emb@steps");
    set_u64(t->data, get_u64(t->data) + (1ull << 41));
}
static void counts_disagree(ps_tf_file *f) {
    ps_tf_owned *t = tensor(f, "emb@table");
    set_u64(t->data + 2 * 2, get_u64(t->data + 2 * 2) + 1); /* admitted */
}
static void more_rows_than_the_cap(ps_tf_file *f) {
    put32(tensor(f, "capped@table")->attr, 48, 3); /* max_rows 10 -> 3 */
}
static void too_many_tables(ps_tf_file *f) {
    set_u64(tensor(f, "@tables")->data, 1000);
}
static void one_table_fewer(ps_tf_file *f) {
    set_u64(tensor(f, "@tables")->data, 5);
}
static void no_count(ps_tf_file *f) {
    rename_tensor(tensor(f, "@tables"), "@tablez");
}
static void names_swapped(ps_tf_file *f) {
    rename_tensor(tensor(f, "emb@ids"), "emb@stepz");
    rename_tensor(tensor(f, "emb@steps"), "emb@ids");
    rename_tensor(tensor(f, "emb@stepz"), "emb@steps");
}
static void table_named_like_a_variable(ps_tf_file *f) {
    const char *sfx[5] = {"@table", "@ids", "@steps", "@rows", "@slots"};
    for (int k = 0; k < 5; k++) {
        char from[64], to[64];
        snprintf(from, sizeof from, "empty%s", sfx[k]);
        snprintf(to, sizeof to, "dense%s", sfx[k]);
        rename_tensor(tensor(f, from), to);
    }
}
static void table_twice(ps_tf_file *f) {
    const char *sfx[5] = {"@table", "@ids", "@steps", "@rows", "@slots"};
    for (int k = 0; k < 5; k++) {
        char from[64], to[64];
        snprintf(from, sizeof from, "rowwise%s", sfx[k]);
        snprintf(to, sizeof to, "ftrl%s", sfx[k]);
        rename_tensor(tensor(f, from), to);
    }
}
static void name_not_utf8(ps_tf_file *f) {
    const char *sfx[5] = {"@table", "@ids", "@steps", "@rows", "@slots"};
    for (int k = 0; k < 5; k++) {
        char from[64], to[64];
        snprintf(from, sizeof from, "empty%s", sfx[k]);
        snprintf(to, sizeof to, "bad\xff%s", sfx[k]);
        rename_tensor(tensor(f, from), to);
    }
}

static const variant variants[] = {
    {"truncated rows", "table 'emb': want [", truncated_rows},
    {"truncated ids", "table 'emb': want [", truncated_ids},
    {"truncated slots", "table 'emb': want [", truncated_slots},
    {"duplicate id", "appears twice", duplicate_id},
    {"rows wider than dim", "table 'fixed': want [", rows_wider_than_dim},
    {"spec dim differs", "table 'fixed': want [", spec_dim_differs},
    {"spec lr NaN", "lr must be finite", spec_nan_lr},
    {"spec version 2", "attribute version 2", spec_version_2},
    {"spec unknown optimizer", "optimizer kind 9", spec_unknown_optimizer},
    {"spec short", "of 88 bytes", spec_short},
    {"id out of range", "id 1000 out of range", id_out_of_range},
    {"step 0", "at step 0, not in", step_zero},
    {"step ahead", "not in 1..", step_ahead},
    {"counts disagree", "admitted", counts_disagree},
    {"more rows than the cap", "rows (at most 3 stored", more_rows_than_the_cap},
    {"too many tables", "counts 1000 tables", too_many_tables},
    {"one table fewer", "without a valid tensor '@job' before the tables", one_table_fewer},
    {"no count", "without a valid last tensor '@tables'", no_count},
    {"names swapped", "tensor 'emb@steps' where 'emb@ids' belongs", names_swapped},
    {"table named like a variable", "'dense' is both a variable and a table",
     table_named_like_a_variable},
    {"table twice", "table 'ftrl' appears twice", table_twice},
    {"name not UTF-8", "not UTF-8", name_not_utf8},
};

static void write_back(const ps_tf_file *f, const char *path) {
    ps_tf_tensor *t = calloc(f->n, sizeof *t);
    for (size_t i = 0; i < f->n; i++) {
        const ps_tf_owned *o = &f->t[i];
        t[i] = (ps_tf_tensor){.name = o->name,
                              .rank = o->rank,
                              .data = o->data,
                              .numel = o->numel,
                              .attr = o->attr,
                              .attr_len = o->attr_len};
        memcpy(t[i].shape, o->shape, sizeof o->shape);
    }
    char err[512];
    ck_assert_msg(ps_tf_write(path, &f->h, t, f->n, err, sizeof err) == PS_OK, "%s", err);
    free(t);
}

/* An older valid file (version 1) and, newer, each corrupt variant of a valid
 * file in turn (its CRCs right: only the checkpoint's own checks can see it):
 * the variant is skipped with its reason and version 1 is restored whole. */
START_TEST(corrupt_tables_are_skipped_with_a_reason) {
    char *dir = ps_test_mkdtemp(), *scratch = ps_test_mkdtemp(), path[4096], good[4096];
    char err[512], log[16384];
    ps_store st;
    ps_tables ts;
    build_store(&st);
    build_tables(&ts, 10);
    save(dir, &st, &ts, 1, "", path, sizeof path);
    for (size_t i = 0; i < ts.n; i++) push_random(ts.v[i], 50 + i, 30, i == 1 ? 1000 : 200);
    save(scratch, &st, &ts, 2, "", good, sizeof good);
    /* version 1's tables, to compare with */
    ps_store st1;
    ps_tables ts1;
    ps_store_init(&st1);
    ps_tables_init(&ts1, 2);
    ps_ckpt_meta m;
    ck_assert_int_eq(ps_ckpt_restore(dir, &st1, &ts1, &m, NULL, 0, err, sizeof err), PS_OK);
    ck_assert_uint_eq(m.version, 1);

    char bad[4096];
    snprintf(bad, sizeof bad, "%s/ckpt-00000000000000000002-1700000000002.pstf", dir);
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        ps_tf_file f;
        ck_assert_int_eq(ps_tf_read(good, &f, err, sizeof err), PS_OK);
        variants[v].mutate(&f);
        write_back(&f, bad);
        ps_tf_file_free(&f);
        ps_store back;
        ps_tables tb;
        ps_store_init(&back);
        ps_tables_init(&tb, 2);
        int rc = restore_logged(dir, &back, &tb, &m, log, sizeof log);
        ck_assert_msg(rc == PS_OK, "%s: restore failed", variants[v].what);
        ck_assert_msg(m.version == 1, "%s: the corrupt file was loaded", variants[v].what);
        ck_assert_msg(strstr(log, "skipped") && strstr(log, variants[v].reason),
                      "%s: the log does not say '%s':\n%s", variants[v].what, variants[v].reason,
                      log);
        expect_same_tables(&ts1, &tb);
        ps_store_free(&back);
        ps_tables_free(&tb);
    }
    /* the unmodified file loads (the variants' base was valid) */
    ps_tf_file f;
    ck_assert_int_eq(ps_tf_read(good, &f, err, sizeof err), PS_OK);
    write_back(&f, bad);
    ps_tf_file_free(&f);
    ps_store back;
    ps_tables tb;
    ps_store_init(&back);
    ps_tables_init(&tb, 2);
    ck_assert_int_eq(restore_logged(dir, &back, &tb, &m, log, sizeof log), PS_OK);
    ck_assert_uint_eq(m.version, 2);
    expect_same_tables(&ts, &tb);
    /* a file cut in the middle of a table's tensor: the tensor file's own check */
    size_t n;
    char *bytes = ps_test_slurp(good, &n);
    ck_assert_int_eq(ps_test_write_file(bad, bytes, n - 4000), 0);
    free(bytes);
    ps_store_free(&back);
    ps_tables_free(&tb);
    ps_store_init(&back);
    ps_tables_init(&tb, 2);
    ck_assert_int_eq(restore_logged(dir, &back, &tb, &m, log, sizeof log), PS_OK);
    ck_assert_uint_eq(m.version, 1);
    ck_assert_ptr_nonnull(strstr(log, "truncated"));

    ps_store_free(&st), ps_store_free(&st1), ps_store_free(&back);
    ps_tables_free(&ts), ps_tables_free(&ts1), ps_tables_free(&tb);
    ps_test_rmdir(dir), ps_test_rmdir(scratch);
    free(dir), free(scratch);
}
END_TEST

/* ---- the pause ---- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A million rows of dim 16 (lazy Adam: 32 floats of state a row), 100 000
 * under a sanitizer: how long the snapshot (the loop's pause) takes, the
 * write after it and a restore. Printed for the test log; only the result is
 * checked, never the time. */
START_TEST(pause_for_a_million_rows) {
    const char *san = getenv("PS_SANITIZED");
    size_t rows = san && strcmp(san, "1") == 0 ? 100000 : 1000000, chunk = 100000;
    char *dir = ps_test_mkdtemp(), path[4096], err[512];
    ps_store st;
    ps_store_init(&st);
    ps_tables ts;
    ps_tables_init(&ts, 1);
    ps_table_entry *e = mk(&ts, "big", 0, PS_ROW_LAZY_ADAM, 16, 0, 0, 0, 0);
    uint64_t *ids = malloc(chunk * sizeof *ids);
    float *g = malloc(chunk * 16 * sizeof *g);
    ps_test_fill_uniform(g, chunk * 16, 1, -1, 1);
    for (size_t done = 0; done < rows; done += chunk) {
        for (size_t i = 0; i < chunk; i++) ids[i] = (done + i) * 0x9E3779B97F4A7C15ull;
        ck_assert_int_eq(ps_table_entry_apply(e, ids, chunk, g, NULL), PS_OK);
    }
    ps_ckpt_meta m = meta_v(1, "");
    double t0 = now_ms();
    ps_ckpt_snapshot *snap;
    ck_assert_int_eq(ps_ckpt_snapshot_take(&st, &ts, &m, 1, &snap), PS_OK);
    double t1 = now_ms();
    uint64_t bytes = 0;
    ck_assert_int_eq(
        ps_ckpt_snapshot_write(snap, dir, 1, path, sizeof path, &bytes, err, sizeof err), PS_OK);
    double t2 = now_ms();
    uint64_t copied = ps_ckpt_snapshot_bytes(snap);
    ps_ckpt_snapshot_free(snap);
    double t3 = now_ms();
    ps_store back;
    ps_tables tb;
    ps_store_init(&back);
    ps_tables_init(&tb, 1);
    ck_assert_int_eq(ps_ckpt_restore(dir, &back, &tb, NULL, NULL, 0, err, sizeof err), PS_OK);
    double t4 = now_ms();
    fprintf(stderr,
            "pause measurement: %zu rows of dim 16 (lazy_adam, 32 floats of state a row): "
            "snapshot (the loop's pause) %.1f ms for %.1f MiB copied; write off the loop "
            "%.1f ms for a file of %.1f MiB; restore %.1f ms\n",
            rows, t1 - t0, (double)copied / (1 << 20), t2 - t1, (double)bytes / (1 << 20),
            t4 - t3);
    ps_table_counts c;
    ps_table_stats_get(tb.v[0]->t, &c);
    ck_assert_uint_eq(c.rows, rows);
    ck_assert_uint_ge(bytes, rows * (16 + 32 + 4) * sizeof(float));
    free(ids), free(g);
    ps_store_free(&st), ps_store_free(&back);
    ps_tables_free(&ts), ps_tables_free(&tb);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("ckpt_tables");
    TCase *tc = tcase_create("tables");
    tcase_set_timeout(tc, 100);
    tcase_add_test(tc, tables_round_trip_bit_identical);
    tcase_add_test(tc, table_tensors_as_documented);
    tcase_add_test(tc, sketch_not_saved_counts_from_zero);
    tcase_add_test(tc, size_grows_with_rows_not_id_space);
    tcase_add_test(tc, layouts_without_tables_unchanged_and_job_in_layout_3);
    tcase_add_test(tc, corrupt_tables_are_skipped_with_a_reason);
    tcase_add_test(tc, pause_for_a_million_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
