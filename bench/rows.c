/* bench/rows: what an embedding-table step costs against the same table
 * exchanged densely (issue 27's target: a step touching 0.1% of a 10-million-row
 * table costs at most 2% of a dense push and pull of it), through libps against
 * real psd shards (sync, 1 worker, 127.0.0.1), all measured in one run.
 *
 *   dense:  the table as two dense variables [rows/2, dim], one per shard:
 *           ps_client_push then ps_client_pull (the step's exchange)
 *   rows:   the same shards holding a table [rows, dim]: pull_rows of the step's
 *           ids (uniform over the table, distinct), push_rows of their gradients
 *   rows small: the same touched count on a table of rows/100 rows: a row step's
 *           cost must follow the rows touched, not the table's size
 *
 * psd: $PSD, else ../ps-server/psd next to this binary, else the build's. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_psd.h"
#include "benchutil.h"
#include "ps.h"

#ifndef PS_BENCH_PSD
#define PS_BENCH_PSD "psd"
#endif

#define SHARDS 2

static char psd_path[PATH_MAX], tmpdir[64];

typedef ps_bench_psd psd_proc;

/* Shard `shard` of SHARDS, sync, 1 worker, room for the dense table. */
static int psd_start(psd_proc *p, int shard) {
    char sh[16], n[16];
    snprintf(sh, sizeof sh, "%d", shard);
    snprintf(n, sizeof n, "%d", SHARDS);
    const char *args[] = {"--mode", "sync", "--workers", "1", "--shard", sh, "--num-shards", n,
                          "--max-tensor-mb", "4096", "--max-message-mb", "4096",
                          "--log-level", "warn", NULL};
    return ps_bench_psd_start(p, psd_path, tmpdir, sh, args, 20.0);
}

static void psd_stop(psd_proc *p) {
    ps_bench_psd_stop(p, 10.0);
}

static void die(ps_client *c, const char *what) {
    fprintf(stderr, "bench/rows: %s: %s\n", what, c ? ps_client_error(c) : "");
    exit(1);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* n distinct ids below rows (rejection on a small hash set). */
static void draw_ids(uint64_t *ids, size_t n, uint64_t rows) {
    size_t cap = 1;
    while (cap < 4 * n) cap <<= 1;
    uint64_t *set = calloc(cap, sizeof *set); /* id + 1; 0 empty */
    for (size_t k = 0; k < n;) {
        uint64_t id = next_u64() % rows;
        size_t h = (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
        while (set[h] && set[h] != id + 1) h = (h + 1) & (cap - 1);
        if (set[h]) continue;
        set[h] = id + 1;
        ids[k++] = id;
    }
    free(set);
}

/* Seconds per row step (median of reps, each `steps` steps) on a table of `rows`. */
static double row_steps(ps_client *c, const char *name, uint64_t rows, size_t dim, size_t touch,
                        int steps, int reps) {
    ps_table_spec spec;
    ps_client_table_spec(&spec, name, dim, "sgd", 0.01f);
    spec.num_rows = rows;
    ps_table *t;
    if (ps_client_create_table(c, &spec, &t) != PS_OK) die(c, "create_table");
    uint64_t *ids = malloc(touch * sizeof *ids);
    float *vals = malloc(touch * dim * sizeof *vals), *g = malloc(touch * dim * sizeof *g);
    for (size_t i = 0; i < touch * dim; i++) g[i] = 1e-3f;
    double v[64];
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        double t0 = ps_bench_now_s();
        for (int s = 0; s < steps; s++) {
            draw_ids(ids, touch, rows);
            if (ps_client_pull_rows(t, ids, touch, vals) != PS_OK) die(c, "pull_rows");
            if (ps_client_push_rows(t, ids, touch, g, PS_ROWS_END_STEP, NULL) != PS_OK)
                die(c, "push_rows");
        }
        if (r >= 0) v[r] = (ps_bench_now_s() - t0) / steps;
    }
    free(ids), free(vals), free(g);
    return ps_bench_median(v, reps);
}

int main(int argc, char **argv) {
    long rows = 10000000, dim = 16, permille = 1, reps = 5;
    for (int i = 1; i < argc; i++) {
        long v;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s [--rows N] [--dim D] [--permille P] [--reps R]\n"
                   "An embedding-table step (pull_rows + push_rows of P/1000 of the rows,\n"
                   "default 1 = 0.1%%) against a dense push + pull of the same table [N, D]\n"
                   "(default 10,000,000 x 16), on 2 psd shards started here (sync, 127.0.0.1).\n",
                   argv[0]);
            return 0;
        }
        if (i + 1 < argc && strcmp(argv[i], "--rows") == 0 &&
            ps_bench_parse_long(argv[i + 1], 1000, 1L << 32, &v))
            rows = v, i++;
        else if (i + 1 < argc && strcmp(argv[i], "--dim") == 0 &&
                 ps_bench_parse_long(argv[i + 1], 1, 1024, &v))
            dim = v, i++;
        else if (i + 1 < argc && strcmp(argv[i], "--permille") == 0 &&
                 ps_bench_parse_long(argv[i + 1], 1, 1000, &v))
            permille = v, i++;
        else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0 &&
                 ps_bench_parse_long(argv[i + 1], 1, 64, &v))
            reps = v, i++;
        else {
            fprintf(stderr, "%s: bad option: %s (--help)\n", argv[0], argv[i]);
            return 2;
        }
    }
    ps_bench_find_psd(argv[0], PS_BENCH_PSD, psd_path, sizeof psd_path);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ps-bench-rows-XXXXXX");
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    psd_proc p[SHARDS];
    for (int s = 0; s < SHARDS; s++)
        if (psd_start(&p[s], s) != 0) return 1;
    const char *eps[SHARDS] = {p[0].endpoint, p[1].endpoint};
    char err[256];
    ps_client *c;
    if (ps_client_open(&c, eps, SHARDS, 0, 1, err, sizeof err) != PS_OK) {
        fprintf(stderr, "bench/rows: %s\n", err);
        return 1;
    }
    ps_client_set_timeout(c, 600000);
    size_t half = (size_t)rows / SHARDS * (size_t)dim;
    float *param = calloc(2 * half, sizeof *param), *grad = calloc(2 * half, sizeof *grad);
    if (!param || !grad) return fprintf(stderr, "bench/rows: out of memory\n"), 1;
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = 0.01f;
    for (int s = 0; s < SHARDS; s++) {
        ps_client_tensor t = {.shard = (unsigned)s, .rank = 2,
                              .shape = {(size_t)rows / SHARDS, (size_t)dim}, .opt = opt};
        snprintf(t.name, sizeof t.name, "dense_%d", s);
        t.param = param + (size_t)s * half;
        t.grad = grad + (size_t)s * half;
        if (ps_client_add(c, &t) != PS_OK) die(c, "add");
    }
    ps_join_info join = {.chief = 1};
    if (ps_client_join(c, &join) != PS_OK) die(c, "join");
    uint64_t version = join.version;
    double vd[64];
    for (int r = -1; r < reps; r++) {
        double t0 = ps_bench_now_s();
        if (ps_client_push(c, version, NULL) != PS_OK) die(c, "push");
        if (ps_client_pull(c, version + 1, &version) != PS_OK) die(c, "pull");
        if (r >= 0) vd[r] = ps_bench_now_s() - t0;
    }
    double dense = ps_bench_median(vd, (int)reps);
    free(param), free(grad);
    size_t touch = (size_t)rows * (size_t)permille / 1000;
    if (!touch) touch = 1;
    int steps = 20;
    /* a table step ends the step on every shard: the dense variables' step too */
    double big = row_steps(c, "table_big", (uint64_t)rows, (size_t)dim, touch, steps, (int)reps);
    double small = row_steps(c, "table_small", (uint64_t)rows / 100, (size_t)dim, touch, steps,
                             (int)reps);
    printf("table [%ld x %ld] float32 on %d psd shards (sync, 1 worker, 127.0.0.1); median of "
           "%ld\n",
           rows, dim, SHARDS, reps);
    printf("  dense push + pull of the table:        %10.2f ms/step (%.0f MB each way)\n",
           dense * 1e3, (double)rows * (double)dim * 4 / 1e6);
    printf("  row step, %zu rows (%.2f%%):          %10.3f ms/step  = %.3f%% of dense "
           "(target <= 2%%)\n",
           touch, 100.0 * (double)touch / (double)rows, big * 1e3, 100.0 * big / dense);
    printf("  row step, same rows, table of %ld:  %10.3f ms/step  (%.2fx the big table's)\n",
           rows / 100, small * 1e3, small / big);
    ps_client_close(c);
    for (int s = 0; s < SHARDS; s++) psd_stop(&p[s]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "bench/rows: could not remove %s\n", tmpdir);
    return 0;
}
