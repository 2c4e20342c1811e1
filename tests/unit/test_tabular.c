/* Tabular records (CSV / TSV with id columns and float labels): 64-bit ids
 * parsed as decimals (the whole range, nothing else) or hashed (the stated
 * hash, pinned by its values; salted by the column's place; an empty field the
 * column's missing id); the CSV source's records carry them and a float
 * target, and every bad table is an error naming the file, line and column;
 * the data spec's keys and their errors; the pipeline's batches carry ids and
 * targets beside x and the labels, the same with 0, 1 or 4 threads, aligned
 * with their records through shuffling and skipping, the two workers' shares
 * disjoint and covering the table. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataspec.h"
#include "ids.h"
#include "order.h"
#include "pipeline.h"
#include "ps_error.h"
#include "source.h"
#include "testutil.h"

static char *dir;

static void setup(void) {
    dir = ps_test_mkdtemp();
}

static void teardown(void) {
    ps_test_rmdir(dir);
    free(dir);
}

/* Writes text to dir/rel; its path in p (4096 bytes). */
static void put(const char *rel, const char *text, char *p) {
    snprintf(p, 4096, "%s/%s", dir, rel);
    ck_assert_int_eq(ps_test_write_file(p, text, strlen(text)), 0);
}

/* ---- ids ---- */

START_TEST(decimal_ids) {
    uint64_t v = 1;
    ck_assert_int_eq(ps_id_parse("0", 0, &v), PS_OK);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(ps_id_parse(" 42 ", 0, &v), PS_OK);
    ck_assert_uint_eq(v, 42);
    ck_assert_int_eq(ps_id_parse("18446744073709551615", 0, &v), PS_OK);
    ck_assert(v == UINT64_MAX);
    ck_assert_int_eq(ps_id_parse("", 3, &v), PS_OK);
    ck_assert(v == ps_id_missing(3));
    ck_assert_int_eq(ps_id_parse("   ", 3, &v), PS_OK);
    ck_assert(v == ps_id_missing(3));
    const char *bad[] = {"18446744073709551616", "99999999999999999999", "-1", "+1", "1e3",
                         "0x10", "4.0", "12a", "1 2", "abc"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(ps_id_parse(bad[i], 0, &v) == PS_EFORMAT, "\"%s\" taken", bad[i]);
}
END_TEST

START_TEST(hashed_ids) {
    /* the stated hash (ids.h), pinned: FNV-1a 64 from a basis salted by the
     * position, splitmix64's finalizer (values from an independent script) */
    ck_assert(ps_id_missing(0) == 0xe9d327596b869820ull);
    ck_assert(ps_id_missing(1) == 0xd5829c41b3e705f7ull);
    ck_assert(ps_id_hash("68fd1e64", 8, 0) == 0x099eee7535e58ed2ull);
    ck_assert(ps_id_hash("68fd1e64", 8, 1) == 0x50198c6836be9f4full);
    ck_assert(ps_id_hash("a", 1, 0) == 0xd1eca9cdc0066f33ull);
    uint64_t v;
    ck_assert_int_eq(ps_id_of(" 68fd1e64 ", 1, 1, &v), PS_OK); /* spaces around: not the id */
    ck_assert(v == 0x50198c6836be9f4full);
    ck_assert_int_eq(ps_id_of("", 1, 1, &v), PS_OK);
    ck_assert(v == ps_id_missing(1));
    ck_assert_int_eq(ps_id_of("12", 0, 1, &v), PS_OK); /* hashed, not read as a number */
    ck_assert(v != 12 && v == ps_id_hash("12", 2, 0));
    /* the same text in 64 columns: 64 ids */
    uint64_t seen[64];
    for (size_t c = 0; c < 64; c++) {
        seen[c] = ps_id_hash("x", 1, c);
        for (size_t k = 0; k < c; k++) ck_assert(seen[k] != seen[c]);
    }
}
END_TEST

/* ---- the CSV source ---- */

static ps_source *open_csv(const char *p, const ps_source_opts *o) {
    ps_source *s = NULL;
    char err[512];
    const char *paths[1] = {p};
    int rc = ps_source_csv(paths, 1, o, &s, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    return s;
}

START_TEST(csv_ids_and_float_label) {
    char p[4096], err[512];
    /* MovieLens' layout: ids, a rating, a timestamp nobody reads; any file name */
    put("r.inter", "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                   "196\t242\t3\t881250949\n"
                   "18446744073709551615\t1\t4.5\tnot a number\n",
        p);
    const char *ids[2] = {"user_id:token", "item_id:token"};
    const char *none[1] = {NULL};
    ps_source_opts o = {.id_columns = ids, .n_id_columns = 2, .label_column = "rating:float",
                        .float_label = true, .columns = none, .n_columns = 0,
                        .delimiter = '\t'};
    ps_source *s = open_csv(p, &o);
    ck_assert_uint_eq(s->n, 2);
    ck_assert_uint_eq(s->n_ids, 2);
    ck_assert(s->float_target);
    ck_assert_int_eq(s->num_classes, 0);
    ck_assert(s->target_min == 3.0 && s->target_max == 4.5);
    ck_assert_uint_eq(s->c, 0);
    ck_assert_ptr_nonnull(strstr(s->desc, "(2 rows, 0 features, 2 ids, float label"));
    ps_sample smp = {0};
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_OK);
    ck_assert_uint_eq(smp.n_ids, 2);
    ck_assert(smp.ids[0] == UINT64_MAX && smp.ids[1] == 1);
    ck_assert(smp.target == 4.5f && smp.label == 0 && smp.c == 0);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.ids[0] == 196 && smp.ids[1] == 242 && smp.target == 3.0f);
    ps_source_close(s);

    /* hashed: any text, an empty field the column's missing id; the same text in
     * two columns two ids; numeric features beside; a class label */
    put("c.csv", "label,i1,c1,c2\n1,0.5,68fd1e64,68fd1e64\n0,-2,,\"a,b\"\n", p);
    const char *cids[2] = {"c1", "c2"};
    ps_source_opts h = {.id_columns = cids, .n_id_columns = 2, .hash_ids = true};
    s = open_csv(p, &h);
    ck_assert_uint_eq(s->c, 1); /* every other column: i1 */
    ck_assert_int_eq(s->num_classes, 2);
    ck_assert(!s->float_target);
    ck_assert_int_eq(ps_source_read(s, 0, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.x[0] == 0.5f && smp.label == 1 && smp.target == 1.0f);
    ck_assert(smp.ids[0] == 0x099eee7535e58ed2ull && smp.ids[1] == 0x50198c6836be9f4full);
    ck_assert_int_eq(ps_source_read(s, 1, &smp, err, sizeof err), PS_OK);
    ck_assert(smp.x[0] == -2.0f && smp.label == 0);
    ck_assert(smp.ids[0] == ps_id_missing(0) && smp.ids[1] == ps_id_hash("a,b", 3, 1));
    ps_source_close(s);
    ps_sample_free(&smp);
}
END_TEST

/* ps_source_csv on text fails with PS_EFORMAT and an error holding want. */
static void csv_fails(const char *name, const char *text, const ps_source_opts *o,
                      const char *want) {
    char p[4096], err[512] = "";
    put(name, text, p);
    ps_source *s = NULL;
    const char *paths[1] = {p};
    int rc = ps_source_csv(paths, 1, o, &s, err, sizeof err);
    ck_assert_msg(rc == PS_EFORMAT, "%s: rc %d (%s)", text, rc, err);
    ck_assert_msg(strstr(err, p) && strstr(err, want), "want \"%s\" in \"%s\"", want, err);
}

START_TEST(csv_errors) {
    const char *ids[2] = {"u", "i"};
    ps_source_opts o = {.id_columns = ids, .n_id_columns = 2, .float_label = true,
                        .label_column = "r"};
    csv_fails("a.csv", "u,i,r\n1,2,3\n1,x2,3\n", &o,
              ":3: column 2 (i): not an unsigned 64-bit decimal id: \"x2\"");
    csv_fails("b.csv", "u,i,r\n18446744073709551616,2,3\n", &o,
              ":2: column 1 (u): not an unsigned 64-bit decimal id");
    csv_fails("c.csv", "u,i,r\n-1,2,3\n", &o, ":2: column 1 (u): not an unsigned");
    csv_fails("d.csv", "u,i,r\n1,2,3\n1,2,inf\n", &o,
              ":3: column 3 (r): the label inf is not a finite float");
    csv_fails("e.csv", "u,i,r\n1,2,nan\n", &o, ":2: column 3 (r): the label nan is not");
    csv_fails("f.csv", "u,i,r\n1,2,1e39\n", &o, "the label 1e+39 is not a finite float");
    csv_fails("g.csv", "u,r\n1,2\n", &o, "no id column \"i\"");
    csv_fails("h.csv", "u,i,r\n1,2,x\n", &o, ":2: column 3 (r): not a number");
    const char *twice[2] = {"u", "u"};
    ps_source_opts t = {.id_columns = twice, .n_id_columns = 2, .label_column = "r"};
    csv_fails("i.csv", "u,i,r\n1,2,3\n", &t, "column \"u\" is named twice in \"id_columns\"");
    const char *lab[1] = {"r"};
    ps_source_opts l = {.id_columns = lab, .n_id_columns = 1, .label_column = "r"};
    csv_fails("j.csv", "u,i,r\n1,2,3\n", &l, "column \"r\" is both the label and an id column");
    const char *feat[1] = {"u"};
    ps_source_opts f = {.id_columns = ids, .n_id_columns = 2, .label_column = "r",
                        .columns = feat, .n_columns = 1};
    csv_fails("k.csv", "u,i,r\n1,2,3\n", &f, "column \"u\" is both a feature and an id column");
    const char *none[1] = {NULL};
    ps_source_opts n = {.columns = none, .n_columns = 0};
    csv_fails("l.csv", "a,label\n1,0\n", &n, "no feature columns");
    /* a class label stays a class number */
    ps_source_opts c = {.id_columns = ids, .n_id_columns = 2, .label_column = "r"};
    csv_fails("m.csv", "u,i,r\n1,2,3.5\n", &c, ":2: the label 3.5 is not a class number");
}
END_TEST

/* ---- the data spec ---- */

static int resolve(const char *json, ps_data_spec *s, char *err, size_t errlen) {
    char p[4096];
    put("spec.json", json, p);
    return ps_data_spec_resolve(p, s, err, errlen);
}

static void spec_fails(const char *json, const char *want) {
    ps_data_spec s;
    char err[1024] = "";
    int rc = resolve(json, &s, err, sizeof err);
    ck_assert_msg(rc == PS_EFORMAT, "%s: rc %d", json, rc);
    ck_assert_msg(strstr(err, want), "want \"%s\" in \"%s\"", want, err);
}

START_TEST(spec_keys) {
    char p[4096], err[1024];
    put("m.inter", "user\titem\trating\tts\n1\t2\t3.5\t9\n4\t5\t1\t9\n", p);
    put("h.csv", "label,n1,c1\n1,0.5,ab\n0,1,\n", p);
    ps_data_spec s;
    int rc = resolve("{\"format\": \"csv\", \"path\": \"m.inter\", \"delimiter\": \"\\t\", "
                     "\"id_columns\": [\"user\", \"item\"], \"columns\": [], \"label\": \"rating\", "
                     "\"label_type\": \"float\", \"validation\": \"m.inter\"}",
                     &s, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    ck_assert_int_eq(s.format, PS_DATA_CSV);
    ck_assert_uint_eq(s.opts.n_id_columns, 2);
    ck_assert(s.opts.float_label && !s.opts.hash_ids && s.opts.delimiter == '\t');
    ck_assert_ptr_nonnull(s.opts.columns);
    ck_assert_uint_eq(s.opts.n_columns, 0);
    /* a validation path is read the same way */
    ck_assert_uint_eq(s.validation->opts.n_id_columns, 2);
    ck_assert(s.validation->opts.float_label && s.validation->opts.delimiter == '\t');
    ck_assert_ptr_nonnull(s.validation->opts.columns);
    ps_source *src;
    ck_assert_msg(ps_data_spec_open(&s, &src, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(src->n, 2);
    ck_assert_uint_eq(src->n_ids, 2);
    ck_assert_uint_eq(src->c, 0);
    ck_assert(src->float_target && src->target_min == 1.0 && src->target_max == 3.5);
    ps_source_close(src);
    ck_assert_msg(ps_data_spec_open(s.validation, &src, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(src->n_ids, 2);
    ps_source_close(src);
    ps_data_spec_free(&s);
    rc = resolve("{\"path\": \"h.csv\", \"id_columns\": [\"c1\"], \"hash_ids\": true, "
                 "\"label_type\": \"class\"}",
                 &s, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    ck_assert(s.opts.hash_ids && !s.opts.float_label);
    ck_assert_msg(ps_data_spec_open(&s, &src, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_uint_eq(src->c, 1);
    ck_assert_int_eq(src->num_classes, 2);
    ps_source_close(src);
    ps_data_spec_free(&s);

    spec_fails("{\"path\": \"h.csv\", \"hash_ids\": true}", "\"hash_ids\" must be given with");
    spec_fails("{\"path\": \"h.csv\", \"hash_ids\": 1, \"id_columns\": [\"c1\"]}",
               "\"hash_ids\" must be true or false");
    spec_fails("{\"path\": \"h.csv\", \"id_columns\": []}", "\"id_columns\" must be a list");
    spec_fails("{\"path\": \"h.csv\", \"id_columns\": [\"c1\", 2]}", "\"id_columns\" must be");
    spec_fails("{\"path\": \"h.csv\", \"id_columns\": [\"c1\", \"c1\"]}",
               "\"id_columns\" names \"c1\" twice");
    spec_fails("{\"path\": \"h.csv\", \"label_type\": \"real\"}",
               "\"label_type\" must be \"class\" or \"float\"");
    spec_fails("{\"path\": \"h.csv\", \"delimiter\": \";\"}", "\"delimiter\" must be");
    spec_fails("{\"path\": \"h.csv\", \"columns\": []}", "empty only with \"id_columns\"");
    spec_fails("{\"format\": \"npy\", \"x\": \"x.npy\", \"y\": \"y.npy\", \"id_columns\": [\"a\"]}",
               "\"id_columns\" is for CSV / TSV tables, not npy data");
    spec_fails("{\"path\": \"m.inter\"}", "not a format the name or the first bytes tell");
}
END_TEST

/* ---- the pipeline ---- */

/* rows records in `files` files named t0.csv, ...: row r has the ids "r" and
 * "k<r % 5>" (hashed), features r and -r, the float label r / 4. */
static ps_source *make_table(size_t rows, size_t files, ps_source_opts *o) {
    static const char *ids[2] = {"row", "key"};
    static const char *cols[2] = {"a", "b"};
    *o = (ps_source_opts){.id_columns = ids, .n_id_columns = 2, .columns = cols, .n_columns = 2,
                          .label_column = "y", .float_label = true, .hash_ids = true};
    char *paths[8];
    size_t per = (rows + files - 1) / files;
    for (size_t f = 0; f < files; f++) {
        char p[4096], name[32];
        size_t cap = 64 + per * 64, off = 0;
        char *text = malloc(cap);
        off += (size_t)snprintf(text, cap, "key,y,a,row,b\n");
        for (size_t r = f * per; r < rows && r < (f + 1) * per; r++)
            off += (size_t)snprintf(text + off, cap - off, "k%zu,%g,%zu,%zu,-%zu\n", r % 5,
                                    (double)r / 4, r, r, r);
        snprintf(name, sizeof name, "t%zu.csv", f);
        put(name, text, p);
        free(text);
        paths[f] = strdup(p);
    }
    ps_source *s = NULL;
    char err[512];
    int rc = ps_source_csv((const char *const *)paths, files, o, &s, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "%s", err);
    for (size_t f = 0; f < files; f++) free(paths[f]);
    return s;
}

typedef struct {
    uint64_t *rows; /* each record's row */
    float *x, *t;
    int32_t *y;
    uint64_t *ids;
    size_t n;
} epochs_out;

/* Every batch of `epochs` epochs through ps_pipeline_next_batch, each record
 * checked against its own row (x, target and ids aligned). */
static epochs_out run(ps_pipeline_cfg cfg, unsigned epochs) {
    ps_pipeline *p;
    char err[512];
    ck_assert_msg(ps_pipeline_open(&p, &cfg, err, sizeof err) == PS_OK, "%s", err);
    size_t cap = epochs * ps_pipeline_epoch_records(p), dim = cfg.out_c;
    epochs_out o = {.rows = malloc(cap * sizeof(uint64_t)),
                    .x = malloc((cap * dim + 1) * sizeof(float)),
                    .t = malloc(cap * sizeof(float)),
                    .y = malloc(cap * sizeof(int32_t)),
                    .ids = malloc(cap * 2 * sizeof(uint64_t))};
    for (unsigned e = 0; e < epochs; e++) {
        ck_assert_int_eq(ps_pipeline_start_epoch(p, e, 0), PS_OK);
        for (;;) {
            ps_pipeline_batch b;
            ck_assert_msg(ps_pipeline_next_batch(p, &b, err, sizeof err) == PS_OK, "%s", err);
            if (!b.nb) break;
            ck_assert_uint_eq(b.n_ids, 2);
            ck_assert(b.float_targets);
            for (size_t k = 0; k < b.nb; k++) {
                uint64_t row = (uint64_t)b.x[k * dim];
                char key[32];
                snprintf(key, sizeof key, "%u", (unsigned)row);
                ck_assert(b.ids[2 * k] == ps_id_hash(key, strlen(key), 0));
                snprintf(key, sizeof key, "k%u", (unsigned)(row % 5));
                ck_assert(b.ids[2 * k + 1] == ps_id_hash(key, strlen(key), 1));
                ck_assert(b.targets[k] == (float)row / 4);
                ck_assert_int_eq(b.y[k], 0);
                ck_assert(b.x[k * dim + 1] == -(float)row);
                o.rows[o.n + k] = row;
            }
            memcpy(o.x + o.n * dim, b.x, b.nb * dim * sizeof *b.x);
            memcpy(o.t + o.n, b.targets, b.nb * sizeof *b.targets);
            memcpy(o.y + o.n, b.y, b.nb * sizeof *b.y);
            memcpy(o.ids + 2 * o.n, b.ids, b.nb * 2 * sizeof *b.ids);
            o.n += b.nb;
        }
    }
    ps_pipeline_close(p);
    return o;
}

static void out_free(epochs_out *o) {
    free(o->rows), free(o->x), free(o->t), free(o->y), free(o->ids);
}

START_TEST(batches_carry_ids_and_targets) {
    ps_source_opts so;
    ps_source *src = make_table(203, 1, &so);
    ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 2, .batch = 16,
                           .count = 1, .seed = 7, .training = true};
    epochs_out want = run(cfg, 2);
    ck_assert_uint_eq(want.n, 2 * 203);
    unsigned threads[] = {1, 4};
    for (size_t i = 0; i < 2; i++) {
        cfg.threads = threads[i];
        cfg.memory_bytes = i ? 1 : 0; /* two batches at a time, and the default */
        epochs_out got = run(cfg, 2);
        ck_assert_uint_eq(got.n, want.n);
        ck_assert_mem_eq(got.x, want.x, want.n * 2 * sizeof *got.x);
        ck_assert_mem_eq(got.t, want.t, want.n * sizeof *got.t);
        ck_assert_mem_eq(got.y, want.y, want.n * sizeof *got.y);
        ck_assert_mem_eq(got.ids, want.ids, want.n * 2 * sizeof *got.ids);
        out_free(&got);
    }
    /* shuffled: not the table's order, and another order in the second epoch */
    size_t in_place = 0;
    for (size_t k = 0; k < 203; k++) in_place += want.rows[k] == k;
    ck_assert_uint_lt(in_place, 20);
    ck_assert(memcmp(want.rows, want.rows + 203, 203 * sizeof *want.rows) != 0);
    /* the existing accessor gives the same x and labels */
    ps_pipeline *p;
    char err[512];
    cfg.threads = 2;
    ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_pipeline_start_epoch(p, 0, 0), PS_OK);
    size_t n = 0, nb;
    float *x;
    int32_t *y;
    while (ps_pipeline_next(p, &x, &y, &nb, err, sizeof err) == PS_OK && nb) {
        ck_assert_mem_eq(x, want.x + 2 * n, nb * 2 * sizeof *x);
        n += nb;
    }
    ck_assert_uint_eq(n, 203);
    ps_pipeline_close(p);
    /* float targets are not relabelled */
    int32_t map[1] = {0};
    cfg.label_map = map, cfg.label_map_n = 1;
    ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "float targets are not relabelled"));
    out_free(&want);
    ps_source_close(src);
}
END_TEST

/* Two workers: by record (one file) and by file (two), the shares are
 * disjoint and cover every row once per epoch; ids alone (no features). */
START_TEST(two_workers_share_the_table) {
    for (size_t files = 1; files <= 2; files++) {
        ps_source_opts so;
        ps_source *src = make_table(104, files, &so);
        uint8_t seen[104] = {0};
        for (unsigned w = 0; w < 2; w++)
            for (unsigned threads = 0; threads <= 4; threads += 4) {
                ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 2,
                                       .batch = 10, .index = w, .count = 2, .seed = 3,
                                       .threads = threads};
                epochs_out o = run(cfg, 1);
                ck_assert_uint_eq(o.n, 52);
                for (size_t k = 0; k < o.n; k++) {
                    uint64_t row = o.rows[k];
                    ck_assert_uint_lt(row, 104);
                    if (files == 1) ck_assert_uint_eq(row % 2, w); /* record i: worker i % 2 */
                    else ck_assert_uint_eq(row / 52, w);          /* file i: worker i */
                    if (threads == 0) ck_assert_uint_eq(seen[row]++, 0);
                }
                out_free(&o);
            }
        for (size_t r = 0; r < 104; r++) ck_assert_uint_eq(seen[r], 1);
        ps_source_close(src);
    }
    /* the ids as the whole input: no numeric columns */
    char p[4096];
    put("ids.tsv", "u\ti\tr\n1\t2\t0.5\n3\t4\t1.5\n5\t6\t2.5\n", p);
    const char *ids[2] = {"u", "i"};
    const char *none[1] = {NULL};
    ps_source_opts o = {.id_columns = ids, .n_id_columns = 2, .columns = none, .n_columns = 0,
                        .label_column = "r", .float_label = true};
    ps_source *src = open_csv(p, &o);
    ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 0, .batch = 2,
                           .count = 1, .threads = 2, .shuffle_buffer = PS_ORDER_IN_ORDER};
    ps_pipeline *pl;
    char err[512];
    ck_assert_msg(ps_pipeline_open(&pl, &cfg, err, sizeof err) == PS_OK, "%s", err);
    ck_assert_int_eq(ps_pipeline_start_epoch(pl, 0, 0), PS_OK);
    ps_pipeline_batch b;
    ck_assert_int_eq(ps_pipeline_next_batch(pl, &b, err, sizeof err), PS_OK);
    ck_assert_uint_eq(b.nb, 2);
    ck_assert(b.ids[0] == 1 && b.ids[1] == 2 && b.ids[2] == 3 && b.ids[3] == 4);
    ck_assert(b.targets[0] == 0.5f && b.targets[1] == 1.5f);
    ck_assert_int_eq(ps_pipeline_next_batch(pl, &b, err, sizeof err), PS_OK);
    ck_assert(b.nb == 1 && b.ids[0] == 5 && b.ids[1] == 6 && b.targets[0] == 2.5f);
    ck_assert_int_eq(ps_pipeline_next_batch(pl, &b, err, sizeof err), PS_OK);
    ck_assert_uint_eq(b.nb, 0);
    ps_pipeline_close(pl);
    ps_source_close(src);
}
END_TEST

/* A source with one id per record (i * 7) whose records 3 and 10 cannot be
 * read: skipped, the rest of the batch moves up with their ids and targets. */
static int flaky_read(ps_source *src, size_t i, ps_sample *s, char *err, size_t errlen) {
    (void)src;
    if (i == 3 || i == 10) {
        snprintf(err, errlen, "flaky: record %zu: damaged", i);
        return PS_EFORMAT;
    }
    if (ps_sample_reserve(s, 1) != PS_OK || ps_sample_reserve_ids(s, 1) != PS_OK)
        return PS_ENOMEM;
    s->x[0] = (float)i;
    s->h = s->w = s->c = 1;
    s->ids[0] = i * 7, s->n_ids = 1;
    s->label = (int32_t)(i % 2);
    return PS_OK;
}

static const ps_source_ops flaky_ops = {.read = flaky_read};

START_TEST(skipped_records_keep_ids_aligned) {
    ps_source *src = ps_source_new(&flaky_ops, 1);
    src->n = 20;
    src->file_start[1] = 20;
    src->n_ids = 1;
    src->num_classes = 2;
    snprintf(src->desc, sizeof src->desc, "flaky");
    for (unsigned threads = 0; threads <= 2; threads += 2) {
        ps_pipeline_cfg cfg = {.src = src, .out_h = 1, .out_w = 1, .out_c = 1, .batch = 8,
                               .count = 1, .threads = threads, .skip_bad = true,
                               .shuffle_buffer = PS_ORDER_IN_ORDER};
        ps_pipeline *p;
        char err[512];
        ck_assert_int_eq(ps_pipeline_open(&p, &cfg, err, sizeof err), PS_OK);
        ck_assert_int_eq(ps_pipeline_start_epoch(p, 0, 0), PS_OK);
        size_t total = 0;
        ps_pipeline_batch b;
        while (ps_pipeline_next_batch(p, &b, err, sizeof err) == PS_OK && b.nb) {
            ck_assert(!b.float_targets);
            for (size_t k = 0; k < b.nb; k++) {
                size_t i = (size_t)b.x[k];
                ck_assert(i != 3 && i != 10);
                ck_assert(b.ids[k] == i * 7);
                ck_assert(b.y[k] == (int32_t)(i % 2) && b.targets[k] == (float)(i % 2));
            }
            total += b.nb;
        }
        ck_assert_uint_eq(total, 18);
        ps_pipeline_close(p);
    }
    ps_source_close(src);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("tabular");
    TCase *tc = tcase_create("tabular");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, decimal_ids);
    tcase_add_test(tc, hashed_ids);
    tcase_add_test(tc, csv_ids_and_float_label);
    tcase_add_test(tc, csv_errors);
    tcase_add_test(tc, spec_keys);
    tcase_add_test(tc, batches_carry_ids_and_targets);
    tcase_add_test(tc, two_workers_share_the_table);
    tcase_add_test(tc, skipped_records_keep_ids_aligned);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
