/* Embedding tables against real psd processes on 127.0.0.1 (issue 27): libps's
 * create_table / pull_rows / push_rows over 1 and 2 shards, sync and async;
 * sync equivalence (2 workers' row pushes = 1 worker with the concatenated
 * batch); dynamic tables' admission and cap; and hostile requests by hand on a
 * raw DEALER, each refused with a clear error and nothing changed. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "raw.h"
#include "rows.h"
#include "stats.h"
#include "testutil.h"
#include "wire.h"

#define REPLY_MS 20000
#define LR 0.5f
#define DIM 4

static ps_test_psd psd[2];
static int n_psd;

static void start_with(int shards, const char *workers, const char *mode, const char *flag,
                       const char *value) {
    ps_test_children_die_with_me();
    n_psd = shards;
    for (int i = 0; i < shards; i++) {
        char idx[16], n[16];
        snprintf(idx, sizeof idx, "%d", i);
        snprintf(n, sizeof n, "%d", shards);
        const char *args[] = {"--workers", workers, "--mode", mode, "--shard", idx,
                              "--num-shards", n, flag, value, NULL};
        ck_assert_msg(ps_test_psd_start(&psd[i], args, 10000) == 0, "psd %d did not start", i);
    }
}

static void start(int shards, const char *workers, const char *mode) {
    start_with(shards, workers, mode, NULL, NULL);
}

static void stop_all(void) {
    for (int i = 0; i < n_psd; i++) {
        int alive = psd[i].pid > 0 && ps_test_alive(psd[i].pid);
        if (psd[i].pid > 0) kill(psd[i].pid, SIGTERM);
        int st = psd[i].pid > 0 ? ps_test_wait(psd[i].pid, 5000) : 0;
        if (st != 0) ps_test_dump(psd[i].log);
        psd[i].pid = 0;
        ps_test_psd_stop(&psd[i], 0);
        ck_assert_msg(alive && st == 0, "psd %d died or exited with status %d", i, st);
    }
    n_psd = 0;
}

static ps_client *client(unsigned index, unsigned workers) {
    const char *eps[2] = {psd[0].endpoint, psd[1].endpoint};
    char err[256];
    ps_client *c;
    ck_assert_msg(ps_client_open(&c, eps, (size_t)n_psd, index, workers, err, sizeof err) == PS_OK,
                  "%s", err);
    ps_client_set_timeout(c, REPLY_MS);
    ck_assert_msg(ps_client_hello(c, NULL, NULL) == PS_OK, "%s", ps_client_error(c));
    return c;
}

static ps_table *table(ps_client *c, const char *name, uint64_t num_rows, const char *opt) {
    ps_table_spec spec;
    ps_client_table_spec(&spec, name, DIM, opt, LR);
    spec.num_rows = num_rows;
    spec.seed = 42;
    ps_table *t = NULL;
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    return t;
}

static void initial(const char *name, uint64_t id, float *out) {
    ps_rows_initial(42, ps_rows_table_key(name), id, -0.05f, 0.05f, out, DIM);
}

/* Async, 2 shards: a pull gives the initializer's values in the order asked
 * (repeats too); a push with a repeated id applies the sum of its gradients. */
START_TEST(async_pull_push) {
    start(2, "1", "async");
    ps_client *c = client(0, 1);
    ps_table *t = table(c, "emb", 0, "sgd");
    /* empty calls first (no buffers yet): nothing to send, nothing wrong */
    ck_assert_int_eq(ps_client_pull_rows(t, NULL, 0, NULL), PS_OK);
    ck_assert_int_eq(ps_client_push_rows(t, NULL, 0, NULL, 0, NULL), PS_OK);
    uint64_t ids[5] = {5, 1ull << 40, 5, 7, 123456789012345ull};
    float got[5 * DIM], want[DIM];
    ck_assert_int_eq(ps_client_pull_rows(t, ids, 5, got), PS_OK);
    for (int i = 0; i < 5; i++) {
        initial("emb", ids[i], want);
        for (int d = 0; d < DIM; d++) ck_assert_float_eq(got[i * DIM + d], want[d]);
    }
    float g[3 * DIM];
    for (int i = 0; i < 3 * DIM; i++) g[i] = (float)(i % DIM + 1) * (i < DIM ? 1.0f : 0.25f);
    uint64_t pids[3] = {5, 7, 5}; /* 5 twice, different gradients: summed */
    uint64_t dropped = 9;
    ck_assert_int_eq(ps_client_push_rows(t, pids, 3, g, 0, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 0);
    ck_assert_int_eq(ps_client_pull_rows(t, ids, 4, got), PS_OK);
    initial("emb", 5, want);
    for (int d = 0; d < DIM; d++) {
        float sum = g[d] + g[2 * DIM + d];
        ck_assert_float_eq(got[d], want[d] - LR * sum);
        ck_assert_float_eq(got[2 * DIM + d], want[d] - LR * sum);
    }
    initial("emb", 7, want);
    for (int d = 0; d < DIM; d++) ck_assert_float_eq(got[3 * DIM + d], want[d] - LR * g[DIM + d]);
    /* the rows went to the shards the hash names, and only those rows are stored */
    size_t stored = 0;
    for (int s = 0; s < 2; s++) {
        ps_stats st;
        ck_assert_int_eq(ps_client_stats(c, (unsigned)s, &st), PS_OK);
        ck_assert_uint_eq(st.n_tables, 1);
        ck_assert_str_eq(st.tables[0].name, "emb");
        ck_assert_str_eq(st.tables[0].optimizer, "sgd");
        size_t want_here = (ps_rows_shard(ps_rows_table_key("emb"), 5, 2) == (uint32_t)s) +
                           (ps_rows_shard(ps_rows_table_key("emb"), 7, 2) == (uint32_t)s);
        ck_assert_uint_eq(st.tables[0].rows, want_here);
        stored += st.tables[0].rows;
        ps_stats_free(&st);
    }
    ck_assert_uint_eq(stored, 2);
    ps_client_close(c);
    stop_all();
}
END_TEST

/* The same pushes on 1 shard and on 2 shards give the same rows, bit for bit. */
static void run_sequence(int shards, float *out, size_t n_ids, const uint64_t *ids) {
    start(shards, "1", "async");
    ps_client *c = client(0, 1);
    ps_table *t = table(c, "items", 0, "adagrad");
    float *g = malloc(n_ids * DIM * sizeof *g);
    for (int step = 0; step < 5; step++) {
        ps_test_fill_uniform(g, n_ids * DIM, (uint64_t)step + 1, -1.0f, 1.0f);
        ck_assert_int_eq(ps_client_push_rows(t, ids, n_ids, g, 0, NULL), PS_OK);
    }
    ck_assert_int_eq(ps_client_pull_rows(t, ids, n_ids, out), PS_OK);
    free(g);
    ps_client_close(c);
    stop_all();
}

START_TEST(one_and_two_shards_agree) {
    enum { N = 200 };
    uint64_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (uint64_t)(i * 7919) % 150 * 0x9E3779B97F4A7C15ull;
    float a[N * DIM], b[N * DIM];
    run_sequence(1, a, N, ids);
    run_sequence(2, b, N, ids);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
}
END_TEST

/* Sync, 2 shards, 2 workers with no dense variables (each push ends its
 * step): the step applies the mean of the workers' row gradients (a row
 * pushed by both gets both), as one worker pushing the concatenated batch's
 * gradient (the mean over both halves) does. A pull for the next step waits
 * until the other worker's push closes it. */
typedef struct {
    ps_table *t;
    uint64_t ids[3];
    float out[3 * DIM];
    int rc;
} pull_job;

static void *pull_thread(void *arg) {
    pull_job *j = arg;
    j->rc = ps_client_pull_rows(j->t, j->ids, 3, j->out);
    return NULL;
}

static void sync_two_workers(float *out) {
    start(2, "2", "sync");
    ps_client *c0 = client(0, 2), *c1 = client(1, 2);
    ps_table *t0 = table(c0, "users", 100, "sgd"), *t1 = table(c1, "users", 100, "sgd");
    uint64_t a[2] = {1, 2}, b[2] = {2, 3};
    float ga[2 * DIM], gb[2 * DIM];
    for (int i = 0; i < 2 * DIM; i++) ga[i] = 1.0f + (float)i, gb[i] = 0.5f - (float)i;
    ck_assert_int_eq(ps_client_push_rows(t0, a, 2, ga, PS_ROWS_END_STEP, NULL), PS_OK);
    pull_job j = {t0, {1, 2, 3}, {0}, -1};
    pthread_t th;
    pthread_create(&th, NULL, pull_thread, &j);
    ps_test_nap_ms(300);
    ck_assert_int_eq(j.rc, -1); /* still waiting for the step */
    ck_assert_int_eq(ps_client_push_rows(t1, b, 2, gb, PS_ROWS_END_STEP, NULL), PS_OK);
    pthread_join(th, NULL);
    ck_assert_msg(j.rc == PS_OK, "%s", ps_client_error(c0));
    memcpy(out, j.out, sizeof j.out);
    float again[3 * DIM];
    ck_assert_int_eq(ps_client_pull_rows(t1, j.ids, 3, again), PS_OK);
    ck_assert_int_eq(memcmp(again, out, sizeof again), 0);
    ps_client_close(c0);
    ps_client_close(c1);
    stop_all();
}

START_TEST(sync_equivalence) {
    float two[3 * DIM], one[3 * DIM];
    sync_two_workers(two);
    /* one worker, the concatenated batch: its gradient is the mean over both halves */
    start(2, "1", "sync");
    ps_client *c = client(0, 1);
    ps_table *t = table(c, "users", 100, "sgd");
    uint64_t ids[4] = {1, 2, 2, 3};
    float g[4 * DIM];
    for (int i = 0; i < 2 * DIM; i++) {
        g[i] = (1.0f + (float)i) / 2;
        g[2 * DIM + i] = (0.5f - (float)i) / 2;
    }
    ck_assert_int_eq(ps_client_push_rows(t, ids, 4, g, PS_ROWS_END_STEP, NULL), PS_OK);
    uint64_t q[3] = {1, 2, 3};
    ck_assert_int_eq(ps_client_pull_rows(t, q, 3, one), PS_OK);
    ck_assert_int_eq(ps_test_first_mismatch(two, one, 3 * DIM, 1e-6f, 0), -1);
    /* and against the formula */
    float w[DIM];
    initial("users", 2, w);
    for (int d = 0; d < DIM; d++)
        ck_assert_float_eq_tol(two[DIM + d], w[d] - LR * ((1.0f + (float)(DIM + d)) + (0.5f - (float)d)) / 2, 1e-6);
    ps_client_close(c);
    stop_all();
}
END_TEST

/* A dynamic table with min_count 2 and a cap of 2 rows (one shard): a row's
 * first push is dropped (it still reads as its initial values), the second
 * stores it; a third row evicts the least recently pushed one; Stats counts
 * all of it. */
START_TEST(dynamic_admission_and_cap) {
    start(1, "1", "async");
    ps_client *c = client(0, 1);
    ps_table_spec spec;
    ps_client_table_spec(&spec, "ads", DIM, "sgd", LR);
    spec.seed = 42;
    spec.min_count = 2;
    spec.max_rows = 2;
    ps_table *t = NULL;
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    float g[DIM] = {1, 1, 1, 1}, row[DIM], w[DIM];
    uint64_t dropped = 0;
    uint64_t id = 77;
    ck_assert_int_eq(ps_client_push_rows(t, &id, 1, g, 0, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 1);
    ck_assert_int_eq(ps_client_pull_rows(t, &id, 1, row), PS_OK);
    initial("ads", id, w);
    ck_assert_int_eq(memcmp(row, w, sizeof w), 0);
    ck_assert_int_eq(ps_client_push_rows(t, &id, 1, g, 0, &dropped), PS_OK);
    ck_assert_uint_eq(dropped, 0);
    ck_assert_int_eq(ps_client_pull_rows(t, &id, 1, row), PS_OK);
    ck_assert_float_eq(row[0], w[0] - LR);
    /* two more rows, each pushed twice: the cap of 2 evicts id 77 */
    for (uint64_t k = 1; k <= 2; k++)
        for (int rep = 0; rep < 2; rep++) ck_assert_int_eq(ps_client_push_rows(t, &k, 1, g, 0, NULL), PS_OK);
    ck_assert_int_eq(ps_client_pull_rows(t, &id, 1, row), PS_OK);
    ck_assert_int_eq(memcmp(row, w, sizeof w), 0); /* evicted: the initializer again */
    ps_stats st;
    ck_assert_int_eq(ps_client_stats(c, 0, &st), PS_OK);
    ck_assert_uint_eq(st.tables[0].rows, 2);
    ck_assert_uint_eq(st.tables[0].max_rows, 2);
    ck_assert_uint_eq(st.tables[0].admitted, 3);
    ck_assert_uint_eq(st.tables[0].evicted, 1);
    ck_assert_uint_eq(st.tables[0].dropped, 3);
    ps_stats_free(&st);
    ps_client_close(c);
    stop_all();
}
END_TEST

/* A row pull waiting for the step holds a copy of its ids, charged against
 * --max-pending-mb: one over it is refused EBUSY naming the flag, one under
 * it waits and is answered when the step closes. */
START_TEST(deferred_row_pull_bounded) {
    start_with(1, "2", "sync", "--max-pending-mb", "1");
    ps_client *c0 = client(0, 2), *c1 = client(1, 2);
    ps_table *t0 = table(c0, "big", 0, "sgd"), *t1 = table(c1, "big", 0, "sgd");
    ck_assert_int_eq(ps_client_push_rows(t0, NULL, 0, NULL, PS_ROWS_END_STEP, NULL), PS_OK);
    size_t n = 200000; /* 1.6 MB of ids */
    uint64_t *ids = malloc(n * sizeof *ids);
    float *out = malloc(n * DIM * sizeof *out);
    for (size_t i = 0; i < n; i++) ids[i] = i;
    ck_assert_int_eq(ps_client_pull_rows(t0, ids, n, out), PS_EBUSY);
    ck_assert_ptr_nonnull(strstr(ps_client_error(c0), "max-pending-mb"));
    pull_job j = {t0, {1, 2, 3}, {0}, -1};
    pthread_t th;
    pthread_create(&th, NULL, pull_thread, &j);
    ps_test_nap_ms(200);
    ck_assert_int_eq(ps_client_push_rows(t1, NULL, 0, NULL, PS_ROWS_END_STEP, NULL), PS_OK);
    pthread_join(th, NULL);
    ck_assert_msg(j.rc == PS_OK, "%s", ps_client_error(c0));
    free(ids), free(out);
    ps_client_close(c0);
    ps_client_close(c1);
    stop_all();
}
END_TEST

/* Sync, 2 shards, a worker whose one dense variable lives on shard 0: its dense
 * push ends the step there, its last row push (PS_ROWS_END_STEP) on shard 1,
 * which holds none of its dense variables; three steps run, and every row
 * pushed is applied on both shards. */
START_TEST(dense_on_one_shard_rows_on_both) {
    start(2, "1", "sync");
    ps_client *c = client(0, 1);
    float w[2] = {0, 0}, dw[2] = {1, 1};
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = 0.5f;
    ps_client_tensor tw = {.name = "w", .shard = 0, .rank = 1, .shape = {2}, .opt = opt,
                           .param = w, .grad = dw};
    ck_assert_int_eq(ps_client_add(c, &tw), PS_OK);
    ps_join_info j = {.chief = 1, .pull = 1};
    ck_assert_msg(ps_client_join(c, &j) == PS_OK, "%s", ps_client_error(c));
    ps_table *t = table(c, "emb", 0, "sgd");
    uint64_t ids[8];
    for (int i = 0; i < 8; i++) ids[i] = (uint64_t)i * 7919; /* some on each shard */
    float g[8 * DIM], before[8 * DIM], after[8 * DIM];
    for (int i = 0; i < 8 * DIM; i++) g[i] = 1;
    ck_assert_int_eq(ps_client_pull_rows(t, ids, 8, before), PS_OK);
    uint64_t clock = j.clock;
    for (int step = 0; step < 3; step++, clock++) {
        ck_assert_msg(ps_client_push_rows(t, ids, 8, g, PS_ROWS_END_STEP, NULL) == PS_OK, "%s",
                      ps_client_error(c));
        size_t dropped = 9;
        ck_assert_msg(ps_client_push_next(c, clock, &dropped) == PS_OK, "%s", ps_client_error(c));
        ck_assert_uint_eq(dropped, 0);
        ck_assert_int_eq(ps_client_pull_next(c, 0, clock + 1, NULL), PS_OK);
        ck_assert_msg(ps_client_pull_rows(t, ids, 8, after) == PS_OK, "%s", ps_client_error(c));
    }
    for (int i = 0; i < 8 * DIM; i++) ck_assert_float_eq_tol(after[i], before[i] - 3 * LR, 1e-6);
    ck_assert_float_eq(w[0], -1.5f);
    for (int s = 0; s < 2; s++) {
        ps_stats st;
        ck_assert_int_eq(ps_client_stats(c, (unsigned)s, &st), PS_OK);
        ck_assert_uint_eq(st.version, 3);
        ps_stats_free(&st);
    }
    ps_client_close(c);
    stop_all();
}
END_TEST

/* psd's own memory bound: a dynamic table without a cap, on a psd with
 * --max-table-mb 8, gets 4x that in distinct rows pushed; it stores at most
 * the bound's rows (evicting the least recently pushed), Stats says so, and
 * psd's resident memory grows by about the bound, not by the rows pushed. */
static long rss_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

START_TEST(memory_bound_evicts) {
    start_with(1, "1", "async", "--max-table-mb", "8");
    ps_client *c = client(0, 1);
    ps_table_spec spec;
    ps_client_table_spec(&spec, "huge", 16, "sgd", LR);
    ps_table *t = NULL;
    ck_assert_int_eq(ps_client_create_table(c, &spec, &t), PS_OK);
    long before = rss_kb(psd[0].pid);
    enum { BATCH = 4096 };
    uint64_t ids[BATCH];
    static float g[BATCH * 16];
    uint64_t pushed = 0;
    for (int b = 0; pushed < 4 * (8u << 20) / 100; b++) { /* 4x the bound (~100 B a row) */
        for (int i = 0; i < BATCH; i++) ids[i] = (uint64_t)b * BATCH + (uint64_t)i;
        ck_assert_int_eq(ps_client_push_rows(t, ids, BATCH, g, 0, NULL), PS_OK);
        pushed += BATCH;
    }
    ps_stats st;
    ck_assert_int_eq(ps_client_stats(c, 0, &st), PS_OK);
    uint64_t limit = st.tables[0].max_rows;
    ck_assert_uint_gt(limit, 0);
    ck_assert_uint_le(limit * 64, 8u << 20); /* at least the values' 64 bytes a row */
    ck_assert_uint_eq(st.tables[0].rows, limit);
    ck_assert_uint_eq(st.tables[0].evicted, pushed - limit);
    ck_assert_uint_le(st.tables[0].bytes, 8u << 20);
    ps_stats_free(&st);
    long after = rss_kb(psd[0].pid);
    /* unbounded, the rows pushed would take over 32 MB; under the sanitizers freed
     * memory is held in quarantine, so RSS says nothing there (the counts above do) */
    const char *san = getenv("PS_SANITIZED");
    if (!san || strcmp(san, "1") != 0)
        ck_assert_msg(after - before < 16 * 1024, "psd grew by %ld kB for an 8 MB bound",
                      after - before);
    ps_client_close(c);
    stop_all();
}
END_TEST

/* ---- hostile requests, by hand ---------------------------------------------------- */

static uint64_t next_req = 100;

static uint64_t send_pull(raw_conn *r, const char *tbl, uint64_t n, const void *ids, size_t len) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__PullRows p = PS__PULL_ROWS__INIT;
    p.table = (char *)tbl;
    p.n = n;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = ++next_req;
    h.body_case = PS__HEADER__BODY_PULL_ROWS;
    h.pull_rows = &p;
    const void *pl[1] = {ids};
    raw_send_hdr(r, &h, pl, &len, 1);
    return h.request_id;
}

static uint64_t send_push(raw_conn *r, const char *tbl, uint64_t n, const void *ids, size_t ilen,
                          const void *g, size_t glen, uint32_t worker) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__PushRows p = PS__PUSH_ROWS__INIT;
    p.table = (char *)tbl;
    p.n = n;
    p.worker_index = worker;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = ++next_req;
    h.body_case = PS__HEADER__BODY_PUSH_ROWS;
    h.push_rows = &p;
    const void *pl[2] = {ids, g};
    size_t lens[2] = {ilen, glen};
    raw_send_hdr(r, &h, pl, lens, 2);
    return h.request_id;
}

static uint64_t send_create(raw_conn *r, const char *tbl, uint64_t dim) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__CreateTable ct = PS__CREATE_TABLE__INIT;
    Ps__TableSpec sp = PS__TABLE_SPEC__INIT;
    Ps__RowOptimizer o = PS__ROW_OPTIMIZER__INIT;
    o.lr = 0.1f;
    sp.name = (char *)tbl;
    sp.dim = dim;
    sp.optimizer = &o;
    ct.table = &sp;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = ++next_req;
    h.body_case = PS__HEADER__BODY_CREATE_TABLE;
    h.create_table = &ct;
    raw_send_hdr(r, &h, NULL, NULL, 0);
    return h.request_id;
}

/* The table's row 3 and its stored-row count, through a fresh client. */
static void check_unchanged(const float *want3) {
    ps_client *c = client(0, 1);
    ps_table *t = table(c, "fixed", 10, "sgd");
    uint64_t id = 3;
    float row[DIM];
    ck_assert_int_eq(ps_client_pull_rows(t, &id, 1, row), PS_OK);
    ck_assert_int_eq(memcmp(row, want3, sizeof row), 0);
    ps_stats st;
    ck_assert_int_eq(ps_client_stats(c, 0, &st), PS_OK);
    ck_assert_uint_eq(st.tables[0].rows, 1);
    ps_stats_free(&st);
    ps_client_close(c);
}

START_TEST(hostile_requests) {
    start(1, "1", "async");
    ps_client *c = client(0, 1);
    ps_table *t = table(c, "fixed", 10, "sgd");
    ps_table_spec wide;
    ps_client_table_spec(&wide, "wide", 32, "sgd", LR); /* for the size limit below */
    ps_table *tw = NULL;
    ck_assert_int_eq(ps_client_create_table(c, &wide, &tw), PS_OK);
    uint64_t id = 3;
    float g[DIM] = {1, 2, 3, 4}, want3[DIM];
    ck_assert_int_eq(ps_client_push_rows(t, &id, 1, g, 0, NULL), PS_OK);
    ck_assert_int_eq(ps_client_pull_rows(t, &id, 1, want3), PS_OK);
    /* the client refuses an id out of range itself */
    uint64_t big = 10;
    float row[DIM];
    ck_assert_int_eq(ps_client_pull_rows(t, &big, 1, row), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(ps_client_error(c), "out of range"));

    /* the raw requests speak for worker 0, whose client stays connected (its
     * connection closing would remove it from the expected set: EREJOIN) */
    raw_conn r;
    raw_open(&r, psd[0].endpoint);
    uint64_t ids2[2] = {3, 10};
    raw_expect_error_text(&r, send_pull(&r, "fixed", 2, ids2, sizeof ids2), PS_EINVAL,
                          "out of range", REPLY_MS);
    float g2[2 * DIM] = {0};
    raw_expect_error_text(&r, send_push(&r, "fixed", 2, ids2, sizeof ids2, g2, sizeof g2, 0),
                          PS_EINVAL, "out of range", REPLY_MS);
    /* ids and rows disagree in count */
    uint64_t ids3[3] = {1, 2, 3};
    raw_expect_error_text(&r, send_push(&r, "fixed", 3, ids3, sizeof ids3, g2, sizeof g2, 0),
                          PS_EPROTO, "gradients frame", REPLY_MS);
    raw_expect_error_text(&r, send_pull(&r, "fixed", 2, ids3, sizeof ids3), PS_EPROTO,
                          "ids frame", REPLY_MS);
    /* a NaN gradient */
    float gn[DIM] = {0, NAN, 0, 0};
    raw_expect_error_text(&r, send_push(&r, "fixed", 1, &id, sizeof id, gn, sizeof gn, 0),
                          PS_EINVAL, "NaN", REPLY_MS);
    /* a worker the job does not have, a table that does not exist */
    raw_expect_error_text(&r, send_push(&r, "fixed", 1, &id, sizeof id, g, sizeof g, 7),
                          PS_EINVAL, "worker index", REPLY_MS);
    raw_expect_error_text(&r, send_pull(&r, "nope", 1, &id, sizeof id), PS_ENOENT, "no table",
                          REPLY_MS);
    /* dims 0 and 2^31 */
    raw_expect_error_text(&r, send_create(&r, "zero", 0), PS_EINVAL, "dim 0", REPLY_MS);
    raw_expect_error_text(&r, send_create(&r, "huge", 1ull << 31), PS_EINVAL, "dim 2147483648",
                          REPLY_MS);
    /* 10 million ids in one request: over the values limit at dim 32 (2^28 values),
     * refused with what the limit is (libps splits such a pull; ten_million_ids) */
    size_t n10 = 10000000;
    uint64_t *many = calloc(n10, sizeof *many);
    for (size_t i = 0; i < n10; i++) many[i] = i;
    raw_expect_error_text(&r, send_pull(&r, "wide", n10, many, n10 * sizeof *many), PS_EINVAL,
                          "split it", REPLY_MS);
    free(many);
    raw_close(&r);
    ps_client_close(c);
    check_unchanged(want3);
    stop_all();
}
END_TEST

/* A row push re-sent after its reply was lost (the same session and seq) is
 * answered 'duplicate' and not applied again; the next seq is. */
START_TEST(retried_row_push_applies_once) {
    start(1, "1", "async");
    ps_client *c = client(0, 1);
    ps_table *t = table(c, "fixed", 10, "sgd");
    uint64_t id = 3;
    float before[DIM], after[DIM];
    ck_assert_int_eq(ps_client_pull_rows(t, &id, 1, before), PS_OK);
    raw_conn r;
    raw_open(&r, psd[0].endpoint);
    float g[DIM] = {1, 1, 1, 1};
    const uint64_t seqs[3] = {9, 9, 10};
    for (int k = 0; k < 3; k++) {
        Ps__Header h = PS__HEADER__INIT;
        Ps__PushRows p = PS__PUSH_ROWS__INIT;
        p.table = "fixed";
        p.n = 1;
        p.worker_index = 0;
        p.session = 0xabc;
        p.seq = seqs[k];
        h.protocol_version = PS_PROTOCOL_VERSION;
        h.request_id = ++next_req;
        h.body_case = PS__HEADER__BODY_PUSH_ROWS;
        h.push_rows = &p;
        const void *pl[2] = {&id, g};
        size_t lens[2] = {sizeof id, sizeof g};
        raw_send_hdr(&r, &h, pl, lens, 2);
        Ps__Header *rep = raw_recv(&r, REPLY_MS, NULL);
        ck_assert_ptr_nonnull(rep);
        ck_assert_int_eq(rep->body_case, PS__HEADER__BODY_PUSH_ROWS_REPLY);
        ck_assert_int_eq(rep->push_rows_reply->duplicate, (k == 1));
        ck_assert(!rep->push_rows_reply->dropped);
        ps__header__free_unpacked(rep, NULL);
    }
    raw_close(&r);
    ck_assert_int_eq(ps_client_pull_rows(t, &id, 1, after), PS_OK);
    for (int d = 0; d < DIM; d++) /* two SGD steps of lr * 1, not three */
        ck_assert_float_eq_tol(after[d], before[d] - 2 * LR, 1e-6);
    ps_client_close(c);
    stop_all();
}
END_TEST

/* 10 million ids through libps on a dim-1 table: split into rounds, every row
 * the initializer's. */
START_TEST(ten_million_ids) {
    start(2, "1", "async");
    ps_client *c = client(0, 1);
    ps_table_spec spec;
    ps_client_table_spec(&spec, "big", 1, "sgd", LR);
    ps_table *t = NULL;
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    size_t n = 10000000;
    uint64_t *ids = malloc(n * sizeof *ids);
    float *out = malloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++) ids[i] = i * 0x9E3779B97F4A7C15ull;
    ck_assert_msg(ps_client_pull_rows(t, ids, n, out) == PS_OK, "%s", ps_client_error(c));
    for (size_t i = 0; i < n; i += 999983) {
        float w;
        ps_rows_initial(0, ps_rows_table_key("big"), ids[i], -0.05f, 0.05f, &w, 1);
        ck_assert_float_eq(out[i], w);
    }
    free(ids), free(out);
    ps_client_close(c);
    stop_all();
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("rows");
    TCase *tc = tcase_create("rows");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, async_pull_push);
    tcase_add_test(tc, one_and_two_shards_agree);
    tcase_add_test(tc, sync_equivalence);
    tcase_add_test(tc, dynamic_admission_and_cap);
    tcase_add_test(tc, deferred_row_pull_bounded);
    tcase_add_test(tc, dense_on_one_shard_rows_on_both);
    tcase_add_test(tc, memory_bound_evicts);
    tcase_add_test(tc, hostile_requests);
    tcase_add_test(tc, retried_row_push_applies_once);
    tcase_add_test(tc, ten_million_ids);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", suite);
}
