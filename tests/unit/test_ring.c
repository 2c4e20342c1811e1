/* Check tests for the ring collectives (collective/ring.h): 1, 2 and 3 ranks as
 * processes on 127.0.0.1 over TCP, Unix sockets and AUTO; all-reduce against
 * the exact sum for many sizes (0, 1, size-1, odd, 1M floats), every rank's
 * result bit-identical, several all-reduces in flight, broadcast from every
 * root, allgather, allgatherv (blocks of different sizes, empty ones); and the
 * coordination log lines. */
#include "ps_error.h"
#include "ps_nccl.h"
#include "ring.h"
#include "ring_kit.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG_N ((size_t)1 << 20)
#define ODD_N ((size_t)262147)

/* Integer-valued inputs: their sums are exact in float, in any order. */
static float exact_in(size_t i, unsigned rank, unsigned salt) {
    return (float)((long)((i * 7 + rank * 13 + salt * 31) % 1001) - 500);
}

typedef struct {
    rk_ring k;
    rk_report *rep; /* one per rank */
    float *results; /* [rank][BIG_N]: the random all-reduce's result */
    float *odd;     /* [rank][ODD_N] */
} ring_ctx;

static int check_exact(ps_ring *r, unsigned rank, unsigned size, size_t n, unsigned salt,
                       rk_report *rep) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = exact_in(i, rank, salt);
    char err[512], stage[64];
    snprintf(stage, sizeof stage, "all-reduce of %zu floats", n);
    int rc = ps_ring_allreduce(r, n ? x : NULL, n, err, sizeof err);
    if (rc != PS_OK) {
        free(x);
        return rk_fail(rep, rc, stage, err);
    }
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (unsigned q = 0; q < size; q++)
            want += exact_in(i, q, salt);
        if (x[i] != want) {
            snprintf(err, sizeof err, "x[%zu] = %g, want %g", i, (double)x[i], (double)want);
            free(x);
            return rk_fail(rep, -1, stage, err);
        }
    }
    free(x);
    return 0;
}

static int rank_body(void *vctx, unsigned rank) {
    ring_ctx *c = vctx;
    rk_report *rep = &c->rep[rank];
    unsigned size = c->k.cfg.size;
    ps_ring *r = NULL;
    char err[512];
    int rc = rk_open(&c->k, rank, &r, err, sizeof err);
    if (rc != PS_OK) return rk_fail(rep, rc, "open", err);
    if (ps_ring_rank(r) != rank || ps_ring_size(r) != size) return rk_fail(rep, -1, "rank", "");
    /* exact sums, many sizes */
    size_t sizes[] = {0, 1, size - 1, size, size + 1, 7, 1001, 65537};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        if (check_exact(r, rank, size, sizes[s], (unsigned)s, rep)) goto out;
    /* random floats: 1M and an odd size; the test compares the ranks' bits */
    ps_test_fill_uniform(c->results + rank * BIG_N, BIG_N, 1000 + rank, -1.0f, 1.0f);
    if ((rc = ps_ring_allreduce(r, c->results + rank * BIG_N, BIG_N, err, sizeof err)) != PS_OK) {
        rk_fail(rep, rc, "all-reduce of 1M floats", err);
        goto out;
    }
    ps_test_fill_uniform(c->odd + rank * ODD_N, ODD_N, 2000 + rank, -100.0f, 100.0f);
    if ((rc = ps_ring_allreduce(r, c->odd + rank * ODD_N, ODD_N, err, sizeof err)) != PS_OK) {
        rk_fail(rep, rc, "all-reduce of an odd size", err);
        goto out;
    }
    /* several in flight, then one wait (buckets) */
    {
        size_t ns[3] = {5, 100003, 64};
        float *b[3];
        for (int j = 0; j < 3; j++) {
            b[j] = malloc(ns[j] * sizeof(float));
            for (size_t i = 0; i < ns[j]; i++)
                b[j][i] = exact_in(i, rank, 50u + (unsigned)j);
            if ((rc = ps_ring_allreduce_start(r, b[j], ns[j])) != PS_OK) {
                rk_fail(rep, rc, "allreduce_start", "");
                goto out;
            }
        }
        rc = ps_ring_wait(r, err, sizeof err);
        int bad = rc != PS_OK;
        if (bad) rk_fail(rep, rc, "wait for 3 all-reduces", err);
        for (int j = 0; j < 3 && !bad; j++)
            for (size_t i = 0; i < ns[j] && !bad; i++) {
                float want = 0;
                for (unsigned q = 0; q < size; q++)
                    want += exact_in(i, q, 50u + (unsigned)j);
                if (b[j][i] != want) {
                    snprintf(err, sizeof err, "bucket %d [%zu] = %g, want %g", j, i,
                             (double)b[j][i], (double)want);
                    bad = rk_fail(rep, -1, "3 all-reduces in flight", err);
                }
            }
        for (int j = 0; j < 3; j++)
            free(b[j]);
        if (bad) goto out;
    }
    /* broadcast from every root */
    for (unsigned root = 0; root < size; root++) {
        size_t len = 100003;
        unsigned char *buf = malloc(len);
        for (size_t i = 0; i < len; i++)
            buf[i] = rank == root ? (unsigned char)(i * 31 + root) : 0;
        rc = ps_ring_broadcast(r, root, buf, len, err, sizeof err);
        int bad = rc != PS_OK;
        if (bad) rk_fail(rep, rc, "broadcast", err);
        for (size_t i = 0; i < len && !bad; i++)
            if (buf[i] != (unsigned char)(i * 31 + root)) {
                snprintf(err, sizeof err, "root %u byte %zu = %u", root, i, buf[i]);
                bad = rk_fail(rep, -1, "broadcast", err);
            }
        free(buf);
        if (bad) goto out;
    }
    /* allgather: 777 bytes each, then 0 */
    {
        unsigned char mine[777], all[777 * RK_MAX_RANKS];
        for (size_t i = 0; i < sizeof mine; i++)
            mine[i] = (unsigned char)(i + 7 * rank);
        memset(all, 0xee, sizeof all);
        if ((rc = ps_ring_allgather(r, mine, sizeof mine, all, err, sizeof err)) != PS_OK) {
            rk_fail(rep, rc, "allgather", err);
            goto out;
        }
        for (unsigned q = 0; q < size; q++)
            for (size_t i = 0; i < sizeof mine; i++)
                if (all[q * sizeof mine + i] != (unsigned char)(i + 7 * q)) {
                    snprintf(err, sizeof err, "block %u byte %zu", q, i);
                    rk_fail(rep, -1, "allgather", err);
                    goto out;
                }
        if ((rc = ps_ring_allgather(r, mine, 0, all, err, sizeof err)) != PS_OK) {
            rk_fail(rep, rc, "allgather of 0 bytes", err);
            goto out;
        }
    }
    /* allgatherv: blocks of different sizes (rank q: 5000 * q + 3 bytes, so
     * rank 0's is shorter than a chunk and others span several), then one with
     * only the last rank's block non-empty, then all empty */
    for (int round = 0; round < 3; round++) {
        size_t len_of[RK_MAX_RANKS], lens[RK_MAX_RANKS];
        for (unsigned q = 0; q < size; q++)
            len_of[q] = round == 0 ? 5000 * q + 3 : round == 1 && q == size - 1 ? 1001 : 0;
        unsigned char *mine = malloc(len_of[rank] + 1);
        for (size_t i = 0; i < len_of[rank]; i++)
            mine[i] = (unsigned char)(i * 3 + 11 * rank + round);
        void *all = NULL;
        rc = ps_ring_allgatherv(r, mine, len_of[rank], 1 << 20, &all, lens, err, sizeof err);
        free(mine);
        if (rc != PS_OK) {
            rk_fail(rep, rc, "allgatherv", err);
            goto out;
        }
        const unsigned char *b = all;
        int bad = 0;
        for (unsigned q = 0; q < size && !bad; q++) {
            if (lens[q] != len_of[q]) {
                snprintf(err, sizeof err, "round %d: rank %u's length %zu, want %zu", round, q,
                         lens[q], len_of[q]);
                bad = rk_fail(rep, -1, "allgatherv", err);
            }
            for (size_t i = 0; i < len_of[q] && !bad; i++, b++)
                if (*b != (unsigned char)(i * 3 + 11 * q + (unsigned)round)) {
                    snprintf(err, sizeof err, "round %d: block %u byte %zu", round, q, i);
                    bad = rk_fail(rep, -1, "allgatherv", err);
                }
        }
        free(all);
        if (bad) goto out;
    }
    snprintf(rep->stage, sizeof rep->stage, "done");
out:
    ps_ring_close(r);
    return rep->rc;
}

/* Runs size ranks over transport t with chunk bytes; checks every rank's
 * report, the random all-reduces against the sums, bit-identical across ranks.
 * Returns the log directory's first rank log path in logs (for log checks). */
/* Endpoints named "localhost" rather than 127.0.0.1 in the next run_ring. */
static int by_name;

static void run_ring(unsigned size, ps_ring_transport t, size_t chunk, const char *logdir) {
    ring_ctx c;
    rk_ring_init(&c.k, size, t);
    c.k.cfg.chunk_bytes = chunk;
    if (by_name) /* "localhost:PORT", as in TF_CONFIG examples */
        for (unsigned q = 0; q < size; q++) {
            int port = atoi(strrchr(c.k.eps[q], ':') + 1);
            snprintf(c.k.eps[q], sizeof c.k.eps[q], "localhost:%d", port);
        }
    c.rep = rk_share(RK_MAX_RANKS * sizeof(rk_report));
    c.results = rk_share(size * BIG_N * sizeof(float));
    c.odd = rk_share(size * ODD_N * sizeof(float));
    pid_t pids[RK_MAX_RANKS];
    for (unsigned q = 0; q < size; q++) {
        char log[600];
        snprintf(log, sizeof log, "%s/rank%u.log", logdir, q);
        pids[q] = rk_fork(rank_body, &c, q, log);
    }
    for (unsigned q = 0; q < size; q++) {
        int st = rk_wait(pids[q], 90000);
        ck_assert_msg(st == 0, "rank %u of %u exited with %d: %s rc %d (%s): %s", q, size, st,
                      c.rep[q].stage, c.rep[q].rc, ps_errname(c.rep[q].rc), c.rep[q].err);
        ck_assert_str_eq(c.rep[q].stage, "done");
    }
    /* the random sums: close to the float64 sum, and the same bits everywhere */
    float *in = malloc(BIG_N * sizeof *in);
    double *sum = calloc(BIG_N, sizeof *sum);
    for (unsigned q = 0; q < size; q++) {
        ps_test_fill_uniform(in, BIG_N, 1000 + q, -1.0f, 1.0f);
        for (size_t i = 0; i < BIG_N; i++)
            sum[i] += in[i];
    }
    for (size_t i = 0; i < BIG_N; i++)
        if (!(fabs(c.results[i] - sum[i]) <= 1e-6 * size))
            ck_abort_msg("[%zu] %g vs %g", i, (double)c.results[i], sum[i]);
    for (unsigned q = 1; q < size; q++) {
        ck_assert_msg(memcmp(c.results, c.results + q * BIG_N, BIG_N * sizeof(float)) == 0,
                      "rank %u's 1M-float result differs from rank 0's", q);
        ck_assert_msg(memcmp(c.odd, c.odd + q * ODD_N, ODD_N * sizeof(float)) == 0,
                      "rank %u's odd-size result differs from rank 0's", q);
    }
    memset(sum, 0, BIG_N * sizeof *sum);
    for (unsigned q = 0; q < size; q++) {
        ps_test_fill_uniform(in, ODD_N, 2000 + q, -100.0f, 100.0f);
        for (size_t i = 0; i < ODD_N; i++)
            sum[i] += in[i];
    }
    for (size_t i = 0; i < ODD_N; i++)
        if (!(fabs(c.odd[i] - sum[i]) <= 1e-4 * size))
            ck_abort_msg("odd [%zu] %g vs %g", i, (double)c.odd[i], sum[i]);
    free(in);
    free(sum);
    rk_unshare(c.rep, RK_MAX_RANKS * sizeof(rk_report));
    rk_unshare(c.results, size * BIG_N * sizeof(float));
    rk_unshare(c.odd, size * ODD_N * sizeof(float));
}

static void run_and_clean(unsigned size, ps_ring_transport t, size_t chunk) {
    char *dir = ps_test_mkdtemp();
    run_ring(size, t, chunk, dir);
    ps_test_rmdir(dir);
    free(dir);
}

START_TEST(one_rank) {
    run_and_clean(1, PS_RING_AUTO, 0);
}
END_TEST

START_TEST(two_ranks_tcp) {
    run_and_clean(2, PS_RING_TCP, 0);
}
END_TEST

START_TEST(three_ranks_tcp_small_chunks) {
    run_and_clean(3, PS_RING_TCP, 4096);
}
END_TEST

START_TEST(two_ranks_unix_odd_chunks) {
    run_and_clean(2, PS_RING_UNIX, 1002); /* rounded down to 1000: not a power of two */
}
END_TEST

START_TEST(three_ranks_unix) {
    run_and_clean(3, PS_RING_UNIX, 0);
}
END_TEST

/* AUTO between ranks on one host: Unix sockets; and the coordination logs. */
START_TEST(three_ranks_auto_logs) {
    char *dir = ps_test_mkdtemp();
    run_ring(3, PS_RING_AUTO, 0, dir);
    char p0[600], p2[600];
    snprintf(p0, sizeof p0, "%s/rank0.log", dir);
    snprintf(p2, sizeof p2, "%s/rank2.log", dir);
    ck_assert_msg(ps_test_file_has(p0, "ring rank 0/3: listening on 127.0.0.1:"), "%s",
                  ps_test_text(p0));
    ck_assert_msg(ps_test_file_has(p0, "connected to rank 1 (next) at 127.0.0.1:"), "%s",
                  ps_test_text(p0));
    ck_assert_msg(ps_test_file_has(p0, "over unix"), "%s", ps_test_text(p0));
    ck_assert_msg(ps_test_file_has(p0, "accepted rank 2 (previous)"), "%s", ps_test_text(p0));
    ck_assert_msg(ps_test_file_has(p0, "ring complete: 3 ranks"), "%s", ps_test_text(p0));
    ck_assert_msg(ps_test_file_has(p2, "connected to rank 0 (next)"), "%s", ps_test_text(p2));
    ck_assert_msg(!ps_test_file_has(p0, "ERROR") && !ps_test_file_has(p2, "ERROR"),
                  "errors at a clean close: %s", ps_test_text(p0));
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* TCP links say so in the log. */
START_TEST(two_ranks_tcp_log_says_tcp) {
    char *dir = ps_test_mkdtemp();
    run_ring(2, PS_RING_TCP, 0, dir);
    char p1[600];
    snprintf(p1, sizeof p1, "%s/rank1.log", dir);
    ck_assert_msg(ps_test_file_has(p1, "connected to rank 0 (next) at 127.0.0.1:"), "%s",
                  ps_test_text(p1));
    ck_assert_msg(ps_test_file_has(p1, "over tcp"), "%s", ps_test_text(p1));
    ck_assert_msg(ps_test_file_has(p1, "ring complete: 2 ranks"), "%s", ps_test_text(p1));
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Endpoints by host name, as TF_CONFIG's examples write them. */
START_TEST(three_ranks_localhost_tcp) {
    by_name = 1;
    run_and_clean(3, PS_RING_TCP, 0);
    by_name = 0;
}
END_TEST

/* Bad arguments: EINVAL, nothing opened. */
/* NCCL needs a GPU per rank: the first two ranks with one GPU id are named. */
START_TEST(nccl_first_duplicate) {
    unsigned a = 9, b = 9;
    const unsigned char distinct[] = {1, 0, 2, 0, 3, 0};
    ps_nccl_first_duplicate(distinct, 3, 2, &a, &b);
    ck_assert_uint_eq(a, 0);
    ck_assert_uint_eq(b, 0);
    const unsigned char shared[] = {1, 0, 2, 0, 3, 0, 2, 0, 1, 0};
    ps_nccl_first_duplicate(shared, 5, 2, &a, &b);
    ck_assert_uint_eq(a, 1); /* ranks 1 and 3 meet before ranks 0 and 4 */
    ck_assert_uint_eq(b, 3);
    ps_nccl_first_duplicate(shared, 1, 2, &a, &b);
    ck_assert_uint_eq(a, b);
}
END_TEST

START_TEST(bad_config) {
    rk_ring k;
    rk_ring_init(&k, 2, PS_RING_TCP);
    ps_ring *r = (ps_ring *)1;
    char err[256];
    ps_ring_config c = k.cfg;
    c.rank = 2;
    ck_assert_int_eq(ps_ring_open(&c, &r, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_null(r);
    c.rank = 0;
    c.size = 0;
    ck_assert_int_eq(ps_ring_open(&c, &r, err, sizeof err), PS_EINVAL);
    const char *bad[2] = {"no-port-here", "127.0.0.1:1"};
    c = k.cfg;
    c.endpoints = bad;
    ck_assert_int_eq(ps_ring_open(&c, &r, err, sizeof err), PS_EINVAL);
    ck_assert_msg(strstr(err, "no-port-here") != NULL, "%s", err);
    ps_ring_close(NULL);
}
END_TEST

static Suite *ring_suite(void) {
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("ring");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, one_rank);
    tcase_add_test(tc, two_ranks_tcp);
    tcase_add_test(tc, three_ranks_tcp_small_chunks);
    tcase_add_test(tc, two_ranks_unix_odd_chunks);
    tcase_add_test(tc, three_ranks_unix);
    tcase_add_test(tc, three_ranks_auto_logs);
    tcase_add_test(tc, two_ranks_tcp_log_says_tcp);
    tcase_add_test(tc, three_ranks_localhost_tcp);
    tcase_add_test(tc, bad_config);
    tcase_add_test(tc, nccl_first_duplicate);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(ring_suite());
}
