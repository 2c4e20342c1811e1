/* Embedding tables through psd's checkpoints, against real psd processes on
 * 127.0.0.1, in async mode over 2 shards and in sync mode over 1: a job
 * pushes rows (lazy Adam with an LRU cap, Adagrad on a fixed table, row-wise
 * Adagrad with a TTL; 64-bit ids) to psd A with --checkpoint-dir and to a
 * control psd C that never stops; A writes a checkpoint (ps_client_checkpoint),
 * takes more pushes that the checkpoint does not hold, and is killed with
 * SIGKILL; restarted on the same directories it serves exactly the rows it
 * had at the checkpoint, bit for bit, which are C's, with C's table counts;
 * then further pushes give both the same rows, bit for bit (the optimizers'
 * slots, lazy Adam's update count and the rows' last steps came back).
 * And the write happens off psd's loop: with a million rows, a pull is
 * answered while a checkpoint is being written; a second Checkpoint request
 * meanwhile gets the next checkpoint; SIGTERM during a write gets the final
 * checkpoint after it, exit status 0, and a restart serves the same rows.
 * The --checkpoint-every timer saves async row pushes too. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"

#define REPLY_MS 20000
#define DIM 8
#define EMB_POOL 300
#define FIXED_ROWS 1000
#define TTL_POOL 120
#define MAX_SHARDS 2

typedef struct {
    ps_test_psd p[MAX_SHARDS];
    int n;
    char ckpt[MAX_SHARDS][700]; /* "" for the control */
} cluster;

static void cluster_args(const cluster *k, int i, const char *mode, const char **args) {
    static char idx[MAX_SHARDS][12], n[12];
    snprintf(idx[i], sizeof idx[i], "%d", i);
    snprintf(n, sizeof n, "%d", k->n);
    int a = 0;
    args[a++] = "--workers", args[a++] = "1", args[a++] = "--mode", args[a++] = mode;
    args[a++] = "--shard", args[a++] = idx[i], args[a++] = "--num-shards", args[a++] = n;
    if (k->ckpt[i][0]) {
        args[a++] = "--checkpoint-dir", args[a++] = k->ckpt[i];
        args[a++] = "--checkpoint-every", args[a++] = "0";
    }
    args[a] = NULL;
}

static void cluster_start(cluster *k, int shards, const char *mode, const char *ckpt_root) {
    memset(k, 0, sizeof *k);
    k->n = shards;
    for (int i = 0; i < shards; i++) {
        if (ckpt_root) snprintf(k->ckpt[i], sizeof k->ckpt[i], "%s/ps-%d", ckpt_root, i);
        const char *args[16];
        cluster_args(k, i, mode, args);
        ck_assert_msg(ps_test_psd_start(&k->p[i], args, 10000) == 0, "psd %d did not start", i);
    }
}

static void cluster_stop(cluster *k) {
    for (int i = 0; i < k->n; i++) {
        int st = ps_test_psd_stop(&k->p[i], 10000);
        ck_assert_msg(st == 0, "psd %d exited with status %d", i, st);
    }
}

typedef struct {
    ps_client *c;
    ps_table *emb, *fixed, *ttl;
} job;

static ps_table *table(ps_client *c, const char *name, const char *opt, uint64_t num_rows,
                       uint64_t max_rows, uint64_t ttl) {
    ps_table_spec spec;
    ps_client_table_spec(&spec, name, DIM, opt, 0.05f);
    spec.num_rows = num_rows;
    spec.max_rows = max_rows;
    spec.ttl_steps = ttl;
    spec.seed = 1234;
    ps_table *t = NULL;
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    return t;
}

/* A 1-worker client of k with the three tables (created, or found as they are). */
static void job_open(job *j, const cluster *k) {
    const char *eps[MAX_SHARDS];
    for (int i = 0; i < k->n; i++) eps[i] = k->p[i].endpoint;
    char err[256];
    ck_assert_msg(ps_client_open(&j->c, eps, (size_t)k->n, 0, 1, err, sizeof err) == PS_OK, "%s",
                  err);
    ps_client_set_timeout(j->c, REPLY_MS);
    ck_assert_msg(ps_client_hello(j->c, NULL, NULL) == PS_OK, "%s", ps_client_error(j->c));
    j->emb = table(j->c, "emb", "lazy_adam", 0, 100, 0); /* a cap per shard: evictions */
    j->fixed = table(j->c, "fixed", "adagrad", FIXED_ROWS, 0, 0);
    j->ttl = table(j->c, "recent", "rowwise_adagrad", 0, 0, 3);
}

static uint64_t emb_id(uint64_t k) {
    return k * 0x9E3779B97F4A7C15ull ^ (k << 60); /* spread over all 64 bits */
}

/* Round r's pushes: up to 60 rows of each table, gradients from the round. */
static void push_round(job *j, uint64_t r, int sync) {
    ps_test_rng g;
    ps_test_rng_seed(&g, 1000 + r);
    uint64_t ids[60];
    float grads[60 * DIM];
    ps_table *t[3] = {j->emb, j->fixed, j->ttl};
    uint64_t pool[3] = {EMB_POOL, FIXED_ROWS, TTL_POOL};
    for (int k = 0; k < 3; k++) {
        size_t n = 20 + (size_t)ps_test_rng_uniform(&g, 0, 40);
        for (size_t i = 0; i < n; i++) {
            uint64_t x = (uint64_t)ps_test_rng_uniform(&g, 0, (float)pool[k]) % pool[k];
            ids[i] = k == 1 ? x : emb_id(x + 1000 * (uint64_t)k);
        }
        for (size_t i = 0; i < n * DIM; i++) grads[i] = ps_test_rng_uniform(&g, -1, 1);
        int flags = sync && k == 2 ? PS_ROWS_END_STEP : 0;
        ck_assert_msg(ps_client_push_rows(t[k], ids, n, grads, flags, NULL) == PS_OK, "%s",
                      ps_client_error(j->c));
    }
}

typedef struct {
    float emb[EMB_POOL * DIM], fixed[FIXED_ROWS * DIM], ttl[TTL_POOL * DIM];
} rows;

/* Every row the rounds may touch, stored or not. */
static void pull_all(job *j, rows *out) {
    uint64_t ids[FIXED_ROWS];
    for (uint64_t k = 0; k < EMB_POOL; k++) ids[k] = emb_id(k);
    ck_assert_msg(ps_client_pull_rows(j->emb, ids, EMB_POOL, out->emb) == PS_OK, "%s",
                  ps_client_error(j->c));
    for (uint64_t k = 0; k < FIXED_ROWS; k++) ids[k] = k;
    ck_assert_msg(ps_client_pull_rows(j->fixed, ids, FIXED_ROWS, out->fixed) == PS_OK, "%s",
                  ps_client_error(j->c));
    for (uint64_t k = 0; k < TTL_POOL; k++) ids[k] = emb_id(k + 2000);
    ck_assert_msg(ps_client_pull_rows(j->ttl, ids, TTL_POOL, out->ttl) == PS_OK, "%s",
                  ps_client_error(j->c));
}

static void expect_same_rows(const rows *a, const rows *b, const char *when) {
    ck_assert_msg(memcmp(a->emb, b->emb, sizeof a->emb) == 0, "%s: lazy_adam rows differ", when);
    ck_assert_msg(memcmp(a->fixed, b->fixed, sizeof a->fixed) == 0, "%s: adagrad rows differ",
                  when);
    ck_assert_msg(memcmp(a->ttl, b->ttl, sizeof a->ttl) == 0, "%s: TTL table's rows differ",
                  when);
}

/* Each shard's table counts on a and b agree (rows, admitted, evicted,
 * expired, refused, dropped); returns the rows stored and the evictions and
 * expiries seen, over the shards, in sums[3]. */
static void expect_same_counts(job *a, job *b, int shards, uint64_t sums[3]) {
    memset(sums, 0, 3 * sizeof *sums);
    for (int s = 0; s < shards; s++) {
        ps_stats x, y;
        ck_assert_int_eq(ps_client_stats(a->c, (unsigned)s, &x), PS_OK);
        ck_assert_int_eq(ps_client_stats(b->c, (unsigned)s, &y), PS_OK);
        ck_assert_uint_eq(x.n_tables, 3);
        ck_assert_uint_eq(y.n_tables, 3);
        for (size_t t = 0; t < 3; t++) {
            const ps_table_stats *p = &x.tables[t], *q = &y.tables[t];
            ck_assert_str_eq(p->name, q->name);
            ck_assert_uint_eq(p->rows, q->rows);
            ck_assert_uint_eq(p->admitted, q->admitted);
            ck_assert_uint_eq(p->evicted, q->evicted);
            ck_assert_uint_eq(p->expired, q->expired);
            ck_assert_uint_eq(p->refused, q->refused);
            ck_assert_uint_eq(p->dropped, q->dropped);
            sums[0] += p->rows, sums[1] += p->evicted, sums[2] += p->expired;
        }
        ps_stats_free(&x);
        ps_stats_free(&y);
    }
}

static void kill_restart_continue(const char *mode, int shards) {
    ps_test_children_die_with_me();
    int sync = strcmp(mode, "sync") == 0;
    char *dir = ps_test_mkdtemp();
    cluster a, c;
    cluster_start(&a, shards, mode, dir);
    cluster_start(&c, shards, mode, NULL);
    job ja, jc;
    job_open(&ja, &a);
    job_open(&jc, &c);
    enum { BEFORE = 12, LOST = 4, AFTER = 8 };
    rows *ra = malloc(sizeof *ra), *rc = malloc(sizeof *rc), *at_ckpt = malloc(sizeof *at_ckpt);
    for (uint64_t r = 0; r < BEFORE; r++) {
        push_round(&ja, r, sync);
        push_round(&jc, r, sync);
    }
    pull_all(&ja, at_ckpt);
    pull_all(&jc, rc);
    expect_same_rows(at_ckpt, rc, "before the checkpoint");
    uint64_t sums[3];
    expect_same_counts(&ja, &jc, shards, sums);
    ck_assert_uint_gt(sums[1], 0); /* the cap evicted */
    ck_assert_uint_gt(sums[2], 0); /* the TTL expired */
    for (int s = 0; s < shards; s++) {
        ps_checkpoint_info info;
        ck_assert_msg(ps_client_checkpoint(ja.c, (unsigned)s, &info) == PS_OK, "%s",
                      ps_client_error(ja.c));
        ck_assert_msg(strstr(info.path, a.ckpt[s]) == info.path, "checkpoint %s", info.path);
    }
    /* pushes the checkpoint does not hold: lost with the kill */
    for (uint64_t r = BEFORE; r < BEFORE + LOST; r++) push_round(&ja, 100 + r, sync);
    pull_all(&ja, ra);
    ck_assert_int_ne(memcmp(ra->emb, at_ckpt->emb, sizeof ra->emb), 0);
    ps_client_close(ja.c);
    for (int s = 0; s < shards; s++) ps_test_psd_kill(&a.p[s]);

    for (int s = 0; s < shards; s++) {
        const char *args[16];
        cluster_args(&a, s, mode, args);
        ck_assert_msg(ps_test_psd_restart(&a.p[s], args, 10000) == 0, "psd %d did not restart",
                      s);
        ck_assert_msg(ps_test_file_has(a.p[s].log, "3 tables"), "psd %d restored no tables:\n%s",
                      s, ps_test_text(a.p[s].log));
    }
    job_open(&ja, &a); /* the same specs: the restored tables are kept */
    pull_all(&ja, ra);
    expect_same_rows(ra, at_ckpt, "after the restart");
    expect_same_counts(&ja, &jc, shards, sums);
    for (uint64_t r = BEFORE; r < BEFORE + AFTER; r++) {
        push_round(&ja, r, sync);
        push_round(&jc, r, sync);
    }
    pull_all(&ja, ra);
    pull_all(&jc, rc);
    expect_same_rows(ra, rc, "further pushes after the restart");
    ck_assert_int_ne(memcmp(ra->emb, at_ckpt->emb, sizeof ra->emb), 0);
    expect_same_counts(&ja, &jc, shards, sums);

    free(ra), free(rc), free(at_ckpt);
    ps_client_close(ja.c);
    ps_client_close(jc.c);
    cluster_stop(&a);
    cluster_stop(&c);
    ps_test_rmdir(dir);
    free(dir);
}

START_TEST(async_two_shards) {
    kill_restart_continue("async", 2);
}
END_TEST

START_TEST(sync_one_shard) {
    kill_restart_continue("sync", 1);
}
END_TEST

/* ---- the write off the loop ---- */

typedef struct {
    ps_client *c;
    int rc, done;
    ps_checkpoint_info info;
    pthread_t th;
} ckpt_call;

static void *ckpt_thread(void *arg) {
    ckpt_call *k = arg;
    k->rc = ps_client_checkpoint(k->c, 0, &k->info);
    __atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A Checkpoint request from its own client, in a thread. */
static void ckpt_begin(ckpt_call *k, const ps_test_psd *p) {
    memset(k, 0, sizeof *k);
    const char *eps[1] = {p->endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(&k->c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(k->c, 120000);
    ck_assert_int_eq(pthread_create(&k->th, NULL, ckpt_thread, k), 0);
}

static void ckpt_end(ckpt_call *k) {
    pthread_join(k->th, NULL);
    ck_assert_msg(k->rc == PS_OK, "checkpoint: %s", ps_client_error(k->c));
    ps_client_close(k->c);
}

static int is_done(const ckpt_call *k) {
    return __atomic_load_n(&k->done, __ATOMIC_ACQUIRE);
}

static int count_in(const char *path, const char *what) {
    const char *t = ps_test_text(path);
    int n = 0;
    for (const char *q = strstr(t, what); q; q = strstr(q + 1, what))
        n++;
    return n;
}

typedef struct {
    const char *log, *what;
    int n;
} log_count;

static int has_count(void *ctx) {
    log_count *c = ctx;
    return count_in(c->log, c->what) >= c->n;
}

/* Waits for psd's n-th snapshot (its log line: the write is under way). */
static void wait_snapshot(const ps_test_psd *p, int n) {
    log_count c = {p->log, "snapshot of", n};
    ck_assert_msg(ps_test_wait_until(has_count, &c, 60000, 5), "no snapshot %d:\n%s", n,
                  ps_test_text(p->log));
}

/* A pull answered now, while the checkpoint k is still being written. */
static void pull_during(ps_table *t, const ckpt_call *k, const char *when) {
    uint64_t ids[4] = {1, 2, 3, 4};
    float out[4 * 16];
    ck_assert_int_eq(ps_client_pull_rows(t, ids, 4, out), PS_OK);
    ck_assert_msg(!is_done(k), "%s: the checkpoint was written before a pull was answered", when);
}

START_TEST(write_off_the_loop) {
    ps_test_children_die_with_me();
    const char *san = getenv("PS_SANITIZED");
    size_t rows = san && strcmp(san, "1") == 0 ? 200000 : 1000000, chunk = 100000;
    char *dir = ps_test_mkdtemp(), ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *args[] = {"--workers", "1", "--mode", "async", "--checkpoint-dir", ck,
                          "--checkpoint-every", "0", NULL};
    ps_test_psd a;
    ck_assert_int_eq(ps_test_psd_start(&a, args, 10000), 0);
    const char *eps[1] = {a.endpoint};
    char err[256];
    ps_client *c;
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, 120000);
    ck_assert_msg(ps_client_hello(c, NULL, NULL) == PS_OK, "%s", ps_client_error(c));
    ps_table_spec spec;
    ps_client_table_spec(&spec, "big", 16, "lazy_adam", 0.01f);
    ps_table *t;
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    uint64_t *ids = malloc(chunk * sizeof *ids);
    float *g = malloc(chunk * 16 * sizeof *g);
    ps_test_fill_uniform(g, chunk * 16, 5, -1, 1);
    for (size_t done = 0; done < rows; done += chunk) {
        for (size_t i = 0; i < chunk; i++)
            ids[i] = done + i;
        ck_assert_msg(ps_client_push_rows(t, ids, chunk, g, 0, NULL) == PS_OK, "%s",
                      ps_client_error(c));
    }
    float *before = malloc(chunk * 16 * sizeof *before);
    for (size_t i = 0; i < chunk; i++)
        ids[i] = i * (rows / chunk);
    ck_assert_int_eq(ps_client_pull_rows(t, ids, chunk, before), PS_OK);

    /* a pull is answered during the write; a second request waits for the next */
    ckpt_call k1, k2, k3;
    ckpt_begin(&k1, &a);
    wait_snapshot(&a, 1);
    pull_during(t, &k1, "the first checkpoint");
    ckpt_begin(&k2, &a);
    ckpt_end(&k1);
    ckpt_end(&k2);
    ck_assert_str_ne(k2.info.path, k1.info.path);
    ck_assert_uint_eq(k2.info.version, k1.info.version);
    ck_assert_int_eq(count_in(a.log, "snapshot of"), 2);

    /* SIGTERM during a write: the final checkpoint follows it */
    ckpt_begin(&k3, &a);
    wait_snapshot(&a, 3);
    pull_during(t, &k3, "the third checkpoint");
    ps_client_close(c);
    ck_assert_int_eq(kill(a.pid, SIGTERM), 0);
    ck_assert_int_eq(ps_test_wait(a.pid, 120000), 0);
    a.pid = 0;
    ckpt_end(&k3);
    ck_assert_msg(ps_test_file_has(a.log, "the final checkpoint follows the one being written"),
                  "%s", ps_test_text(a.log));
    ck_assert_int_eq(count_in(a.log, "written to"), 4);

    ck_assert_int_eq(ps_test_psd_restart(&a, args, 60000), 0);
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, 120000);
    ck_assert_msg(ps_client_hello(c, NULL, NULL) == PS_OK, "%s", ps_client_error(c));
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    float *after = malloc(chunk * 16 * sizeof *after);
    ck_assert_int_eq(ps_client_pull_rows(t, ids, chunk, after), PS_OK);
    ck_assert_int_eq(memcmp(after, before, chunk * 16 * sizeof *after), 0);
    ps_stats st;
    ck_assert_int_eq(ps_client_stats(c, 0, &st), PS_OK);
    ck_assert_uint_eq(st.tables[0].rows, rows);
    ps_stats_free(&st);
    ps_client_close(c);
    ck_assert_int_eq(ps_test_psd_stop(&a, 60000), 0);
    free(ids), free(g), free(before), free(after);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static uint64_t checkpoints_of(ps_client *c) {
    ps_stats st;
    ck_assert_int_eq(ps_client_stats(c, 0, &st), PS_OK);
    uint64_t n = st.checkpoints;
    ps_stats_free(&st);
    return n;
}

typedef struct {
    ps_client *c;
    uint64_t want;
} ckpt_count;

static int has_checkpoints(void *ctx) {
    ckpt_count *k = ctx;
    return checkpoints_of(k->c) >= k->want;
}

/* --checkpoint-every: async row pushes (which do not move the shard's version)
 * are saved by the next tick, and a restart after SIGKILL serves them. */
START_TEST(timer_saves_async_row_pushes) {
    ps_test_children_die_with_me();
    char *dir = ps_test_mkdtemp(), ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *args[] = {"--workers", "1", "--mode", "async", "--checkpoint-dir", ck,
                          "--checkpoint-every", "1", NULL};
    ps_test_psd a;
    ck_assert_int_eq(ps_test_psd_start(&a, args, 10000), 0);
    cluster k = {.n = 1};
    k.p[0] = a;
    job j;
    job_open(&j, &k);
    push_round(&j, 1, 0);
    ckpt_count want = {j.c, 1};
    ck_assert_msg(ps_test_wait_until(has_checkpoints, &want, 20000, 50), "no timer checkpoint");
    want.want = checkpoints_of(j.c) + 1;
    push_round(&j, 2, 0); /* rows only: the version does not move */
    ck_assert_msg(ps_test_wait_until(has_checkpoints, &want, 20000, 50),
                  "the timer did not save the row pushes:\n%s", ps_test_text(a.log));
    rows *before = malloc(sizeof *before), *after = malloc(sizeof *after);
    pull_all(&j, before);
    ps_client_close(j.c);
    ps_test_psd_kill(&a);
    ck_assert_int_eq(ps_test_psd_restart(&a, args, 10000), 0);
    k.p[0] = a;
    job_open(&j, &k);
    pull_all(&j, after);
    expect_same_rows(after, before, "after the restart");
    free(before), free(after);
    ps_client_close(j.c);
    ck_assert_int_eq(ps_test_psd_stop(&a, 10000), 0);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("psd_rows_checkpoint");
    TCase *tc = tcase_create("rows");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, async_two_shards);
    tcase_add_test(tc, sync_one_shard);
    tcase_add_test(tc, write_off_the_loop);
    tcase_add_test(tc, timer_saves_async_row_pushes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_main_needing("PSD", suite);
}
