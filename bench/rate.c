/* bench/rate: small-tensor requests per second against a real psd, through the
 * client library (client/ps.h (libps)), on 127.0.0.1.
 *
 * - pull 1x16:  one client, one 16-float tensor, ps_client_pull in a loop
 *   (each call is one round trip: the library waits for the reply).
 * - push 1x16:  the same with ps_client_push (async psd applies each push).
 * - pull/push 64x16: one client with 64 tensors of 16 floats on the one
 *   shard; the library sends all of a shard's tensors in one request, so a
 *   round carries 64 variables; reported as rounds/s and variables/s.
 * - K clients: K threads, each its own ps_client (worker index i of K), each
 *   pulling (or pushing) one 16-float tensor in a loop; aggregate requests/s.
 *   The library waits for each round, so this is how a job pipelines.
 *
 * psd is fork/exec'd per scenario: $PSD, else ../ps-server/psd next to this
 * binary (argv[0]), else the build's psd; --bind 127.0.0.1 --port 0
 * --ready-file, --mode async, --workers 1 (K for the K-client rows).
 * Each rep runs the loop for at least --min-ms; --reps reps, medians reported.
 * Built by meson, never run by the tests. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_psd.h"
#include "benchutil.h"
#include "ps.h"
#include "ps_error.h"

#ifndef PS_BENCH_PSD
#define PS_BENCH_PSD "psd"
#endif

#define MAX_REPS 101
#define MAX_K 16
#define NFLOATS 16
#define NVARS 64

/* ---- options ----------------------------------------------------------- */

typedef struct {
    int reps;
    double min_s;
    int ks[8];
    int nks;
} opts;

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s [--reps N] [--min-ms MS] [--clients K,K,...]\n"
            "Small-tensor requests/s against a real psd (async, 127.0.0.1) through the\n"
            "client library: pulls and pushes of one 16-float tensor, rounds of 64 such\n"
            "tensors, and K clients in parallel.\n"
            "  --reps N         timed reps per row, the median is reported (default 7)\n"
            "  --min-ms MS      least duration of one rep (default 300)\n"
            "  --clients LIST   client counts for the parallel rows (default 1,2,4; max %d)\n"
            "  --help           this text\n"
            "psd: $PSD, else ../ps-server/psd next to this binary, else %s\n",
            argv0, MAX_K, PS_BENCH_PSD);
}

static int parse_opts(int argc, char **argv, opts *o) {
    *o = (opts){.reps = 7, .min_s = 0.300};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, argv[0]);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: unknown option or missing value: %s\n", argv[0], a);
            return -1;
        }
        const char *val = argv[++i];
        if (strcmp(a, "--reps") == 0 && ps_bench_parse_long(val, 1, MAX_REPS, &v)) {
            o->reps = (int)v;
        } else if (strcmp(a, "--min-ms") == 0 && ps_bench_parse_long(val, 1, 60000, &v)) {
            o->min_s = (double)v / 1000.0;
        } else if (strcmp(a, "--clients") == 0) {
            o->nks = 0;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", val);
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (o->nks == 8 || !ps_bench_parse_long(tok, 1, MAX_K, &v)) {
                    fprintf(stderr, "%s: bad --clients: %s\n", argv[0], val);
                    return -1;
                }
                o->ks[o->nks++] = (int)v;
            }
        } else {
            fprintf(stderr, "%s: bad option or value: %s %s\n", argv[0], a, val);
            return -1;
        }
    }
    if (o->nks == 0) {
        o->ks[0] = 1;
        o->ks[1] = 2;
        o->ks[2] = 4;
        o->nks = 3;
    }
    return 0;
}

/* ---- psd ------------------------------------------------------------------ */

static char psd_path[PATH_MAX];
static char tmpdir[64];

typedef ps_bench_psd psd_proc;

/* An async psd for `workers` workers. */
static int psd_start(psd_proc *p, int workers) {
    char wbuf[16];
    snprintf(wbuf, sizeof wbuf, "%d", workers);
    const char *args[] = {"--mode", "async", "--workers", wbuf, "--log-level", "warn", NULL};
    return ps_bench_psd_start(p, psd_path, tmpdir, "", args, 10.0);
}

static void psd_stop(psd_proc *p) {
    ps_bench_psd_stop(p, 5.0);
}

/* ---- clients ---------------------------------------------------------------- */

typedef struct {
    ps_client *c;
    float param[NVARS][NFLOATS], grad[NVARS][NFLOATS];
} bench_client;

/* Opens worker `index` of `workers` with `nvars` tensors t0.. of 16 floats (SGD),
 * says Hello and creates them (existing ones are kept). */
static int client_open(bench_client *b, const char *endpoint, unsigned index, unsigned workers,
                       int nvars) {
    const char *eps[1] = {endpoint};
    char err[256];
    if (ps_client_open(&b->c, eps, 1, index, workers, err, sizeof err) != PS_OK) {
        fprintf(stderr, "open: %s\n", err);
        return -1;
    }
    ps_client_set_timeout(b->c, 10000);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    for (int v = 0; v < nvars; v++) {
        for (int i = 0; i < NFLOATS; i++) {
            b->param[v][i] = 0.01f * (float)i;
            b->grad[v][i] = 1e-3f;
        }
        ps_client_tensor t = {.shard = 0, .rank = 1, .shape = {NFLOATS}, .opt = opt};
        snprintf(t.name, sizeof t.name, "t%d", v);
        t.param = b->param[v];
        t.grad = b->grad[v];
        if (ps_client_add(b->c, &t) != PS_OK) return -1;
    }
    int async = -1;
    if (ps_client_hello(b->c, &async, NULL) != PS_OK || ps_client_create_vars(b->c, NULL)) {
        fprintf(stderr, "hello/create: %s\n", ps_client_error(b->c));
        return -1;
    }
    if (async != 1) {
        fprintf(stderr, "psd is not in async mode\n");
        return -1;
    }
    return 0;
}

static void client_close(bench_client *b) {
    ps_client_goodbye(b->c);
    ps_client_close(b->c);
    b->c = NULL;
}

/* Runs pulls (push = 0) or pushes for at least `secs`; returns rounds, or -1. */
static long run_loop(bench_client *b, int push, double secs, double *elapsed) {
    long n = 0;
    uint64_t step = 0, version;
    double t0 = ps_bench_now_s(), t;
    do {
        for (int i = 0; i < 16; i++, n++) {
            int rc = push ? ps_client_push(b->c, step++, NULL) : ps_client_pull(b->c, 0, &version);
            if (rc != PS_OK) {
                fprintf(stderr, "%s: %s\n", push ? "push" : "pull", ps_client_error(b->c));
                return -1;
            }
        }
        t = ps_bench_now_s();
    } while (t - t0 < secs);
    *elapsed = t - t0;
    return n;
}

/* ---- K clients in threads ---------------------------------------------------- */

typedef struct {
    bench_client b;
    int push;
    double secs;
    pthread_barrier_t *go, *done;
    long rounds;
    double start, end;
    bool stop;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg *w = p;
    for (;;) {
        pthread_barrier_wait(w->go);
        if (w->stop) break;
        double el;
        w->start = ps_bench_now_s();
        w->rounds = run_loop(&w->b, w->push, w->secs, &el);
        w->end = w->start + el;
        pthread_barrier_wait(w->done);
    }
    return NULL;
}

/* ---- results ------------------------------------------------------------------ */

static void print_row(const char *name, int clients, int vars, double rounds_s, double min_r,
                      double max_r) {
    printf("%-18s %7d %9d %12.0f %10.1f %14.0f %12.0f %12.0f\n", name, clients, vars, rounds_s,
           1e6 * clients / rounds_s, rounds_s * vars, min_r, max_r);
    fflush(stdout);
}

/* One client, `nvars` tensors: pulls or pushes. */
static int single(const opts *o, int nvars, int push, const char *name) {
    psd_proc p;
    if (psd_start(&p, 1) != 0) return -1;
    bench_client *b = calloc(1, sizeof *b);
    int rc = -1;
    if (b && client_open(b, p.endpoint, 0, 1, nvars) == 0) {
        double el, rate[MAX_REPS];
        if (run_loop(b, push, 0.1, &el) >= 0) { /* warm-up */
            rc = 0;
            for (int r = 0; r < o->reps && rc == 0; r++) {
                long n = run_loop(b, push, o->min_s, &el);
                if (n < 0) rc = -1;
                rate[r] = (double)n / el;
            }
            if (rc == 0) {
                double lo = rate[0], hi = rate[0];
                for (int r = 1; r < o->reps; r++) {
                    if (rate[r] < lo) lo = rate[r];
                    if (rate[r] > hi) hi = rate[r];
                }
                print_row(name, 1, nvars, ps_bench_median(rate, o->reps), lo, hi);
            }
        }
        client_close(b);
    }
    free(b);
    psd_stop(&p);
    return rc;
}

/* K clients in K threads, one 16-float tensor each (all the same "t0"). */
static int parallel(const opts *o, int k, int push) {
    psd_proc p;
    if (psd_start(&p, k) != 0) return -1;
    worker_arg *w = calloc((size_t)k, sizeof *w);
    pthread_t th[MAX_K];
    pthread_barrier_t go, done;
    pthread_barrier_init(&go, NULL, (unsigned)k + 1);
    pthread_barrier_init(&done, NULL, (unsigned)k + 1);
    int rc = 0, started = 0;
    for (int i = 0; i < k && rc == 0; i++) {
        w[i] = (worker_arg){.push = push, .secs = 0.1, .go = &go, .done = &done};
        if (client_open(&w[i].b, p.endpoint, (unsigned)i, (unsigned)k, 1) != 0) rc = -1;
    }
    if (rc == 0) {
        for (int i = 0; i < k; i++)
            pthread_create(&th[i], NULL, worker_main, &w[i]);
        started = 1;
        double rate[MAX_REPS];
        for (int r = -1; r < o->reps && rc == 0; r++) { /* r = -1: warm-up */
            pthread_barrier_wait(&go);
            pthread_barrier_wait(&done);
            long total = 0;
            double t0 = w[0].start, t1 = w[0].end;
            for (int i = 0; i < k; i++) {
                if (w[i].rounds < 0) rc = -1;
                total += w[i].rounds;
                if (w[i].start < t0) t0 = w[i].start;
                if (w[i].end > t1) t1 = w[i].end;
                w[i].secs = o->min_s;
            }
            if (r >= 0) rate[r] = (double)total / (t1 - t0);
        }
        if (rc == 0) {
            double lo = rate[0], hi = rate[0];
            for (int r = 1; r < o->reps; r++) {
                if (rate[r] < lo) lo = rate[r];
                if (rate[r] > hi) hi = rate[r];
            }
            print_row(push ? "push 1x16, K thr" : "pull 1x16, K thr", k, 1,
                      ps_bench_median(rate, o->reps), lo, hi);
        }
    }
    if (started) {
        for (int i = 0; i < k; i++)
            w[i].stop = true;
        pthread_barrier_wait(&go);
        for (int i = 0; i < k; i++)
            pthread_join(th[i], NULL);
    }
    for (int i = 0; i < k; i++)
        if (w[i].b.c) client_close(&w[i].b);
    pthread_barrier_destroy(&go);
    pthread_barrier_destroy(&done);
    free(w);
    psd_stop(&p);
    return rc;
}

int main(int argc, char **argv) {
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        usage(stderr, argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    ps_bench_find_psd(argv[0], PS_BENCH_PSD, psd_path, sizeof psd_path);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ps-bench-rate-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    printf("command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\npsd: %s --bind 127.0.0.1 --port 0 --mode async --workers K (log %s/psd.log)\n",
           psd_path, tmpdir);
    printf("timing: a warm-up, then %d reps of >= %.0f ms each (calls in a loop), median; "
           "min/max = over reps\n",
           o.reps, o.min_s * 1e3);
    printf("tensors: %d floats each, SGD; rounds = ps_client_pull / ps_client_push calls "
           "(each one request + reply per shard)\n\n",
           NFLOATS);
    printf("%-18s %7s %9s %12s %10s %14s %12s %12s\n", "row", "clients", "vars/rnd", "rounds/s",
           "us/round", "variables/s", "min rnd/s", "max rnd/s");
    int rc = 0;
    rc |= single(&o, 1, 0, "pull 1x16");
    rc |= single(&o, 1, 1, "push 1x16");
    rc |= single(&o, NVARS, 0, "pull 64x16");
    rc |= single(&o, NVARS, 1, "push 64x16");
    for (int push = 0; push < 2; push++)
        for (int i = 0; i < o.nks; i++)
            rc |= parallel(&o, o.ks[i], push);
    printf("\nus/round = clients / (rounds/s): the latency one client sees per round\n");
    char logf[128];
    snprintf(logf, sizeof logf, "%s/psd.log", tmpdir);
    if (rc == 0) {
        unlink(logf);
        rmdir(tmpdir);
    }
    return rc ? 1 : 0;
}
