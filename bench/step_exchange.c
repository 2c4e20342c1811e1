/* bench/step_exchange: the default MLP's training-step exchange from C, through libps
 * (ps_client_step_begin / ps_client_step_end), against psd shards already running:
 * the C side of bench/python_exchange.py, which runs the same exchange from Python
 * (ps.Worker.step) against the same shards, interleaved with this program.
 *
 * The variables are shaped like the MLP's (784x128, 128, 128x10, 10: 101,770 floats),
 * placed with ps_place_vars as psworker and ps.Client.add_variables place them (the
 * 784x128 kernel is split by rows), Adam with its defaults (what ps.Worker's default
 * optimizer is). The worker joins as psworker does (hello; the chief creates the
 * variables, existing ones are kept; pull_next at the job's version), runs --warmup
 * steps, then times --steps steps, each one PushPull round trip per shard, and says
 * goodbye. Prints one JSON line: steps, seconds, us_per_step, and cpu_us_per_step (this
 * process's CPU time over the timed steps, libps's threads included). Built by meson, never
 * run by the tests. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "ps.h"
#include "ps_error.h"

#define MAX_SHARDS 16
#define NVARS 4

static const char *const var_names[NVARS] = {"dense/kernel", "dense/bias", "dense_1/kernel",
                                             "dense_1/bias"};
static const size_t var_shapes[NVARS][2] = {{784, 128}, {128, 0}, {128, 10}, {10, 0}};
static const size_t var_ranks[NVARS] = {2, 1, 2, 1};

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s --ps HOST:PORT[,HOST:PORT...] [--steps N] [--warmup N] [--timeout-ms MS]\n"
            "The default MLP's step exchange (101,770 floats, 4 variables placed over the\n"
            "shards, Adam) as worker 0 of 1, through libps's step exchange, against running\n"
            "psd shards (sync or async). Prints one JSON line with us_per_step.\n"
            "  --ps LIST        the shards' endpoints, in shard order (required)\n"
            "  --steps N        timed steps (default 2000)\n"
            "  --warmup N       untimed steps first (default 200)\n"
            "  --timeout-ms MS  libps's request deadline (default 10000)\n"
            "  --help           this text\n",
            argv0);
}

static size_t numel(int v) {
    return var_ranks[v] == 2 ? var_shapes[v][0] * var_shapes[v][1] : var_shapes[v][0];
}

/* This process's CPU time (every thread), seconds. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(ps_client *c, const char *what) {
    fprintf(stderr, "step_exchange: %s: %s\n", what, ps_client_error(c));
    return 1;
}

int main(int argc, char **argv) {
    const char *ps_list = NULL;
    long steps = 2000, warmup = 200, timeout_ms = 10000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, argv[0]);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "step_exchange: unknown option or missing value: %s\n", a);
            usage(stderr, argv[0]);
            return 2;
        }
        const char *val = argv[++i];
        bool ok = true;
        if (strcmp(a, "--ps") == 0) {
            ps_list = val;
        } else if (strcmp(a, "--steps") == 0) {
            ok = ps_bench_parse_long(val, 1, 100000000, &steps);
        } else if (strcmp(a, "--warmup") == 0) {
            ok = ps_bench_parse_long(val, 0, 100000000, &warmup);
        } else if (strcmp(a, "--timeout-ms") == 0) {
            ok = ps_bench_parse_long(val, 1, 3600000, &timeout_ms);
        } else {
            ok = false;
        }
        if (!ok) {
            fprintf(stderr, "step_exchange: bad option or value: %s %s\n", a, val);
            return 2;
        }
    }
    if (!ps_list || !*ps_list) {
        fprintf(stderr, "step_exchange: --ps is required (see --help)\n");
        return 2;
    }

    char buf[4096];
    const char *eps[MAX_SHARDS];
    size_t n_shards = 0;
    snprintf(buf, sizeof buf, "%s", ps_list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n_shards == MAX_SHARDS) {
            fprintf(stderr, "step_exchange: more than %d shards in --ps\n", MAX_SHARDS);
            return 2;
        }
        eps[n_shards++] = tok;
    }

    /* the MLP's variables: small parameters, small constant gradients */
    float *param[NVARS], *grad[NVARS];
    ps_var_desc descs[NVARS];
    for (int v = 0; v < NVARS; v++) {
        size_t n = numel(v);
        param[v] = malloc(n * sizeof(float));
        grad[v] = malloc(n * sizeof(float));
        if (!param[v] || !grad[v]) {
            fprintf(stderr, "step_exchange: out of memory\n");
            return 1;
        }
        for (size_t k = 0; k < n; k++) {
            param[v][k] = 0.01f * (float)((k * 2654435761u) % 200u) / 200.0f - 0.005f;
            grad[v][k] = 1e-3f * (float)((k % 7u) + 1u);
        }
        descs[v] = (ps_var_desc){var_names[v], var_ranks[v], var_shapes[v]};
    }

    char err[512];
    ps_piece *pieces;
    size_t n_pieces;
    if (ps_place_vars(descs, NVARS, (unsigned)n_shards, &pieces, &n_pieces, err, sizeof err) !=
        PS_OK) {
        fprintf(stderr, "step_exchange: placement: %s\n", err);
        return 1;
    }
    ps_client *c;
    if (ps_client_open(&c, eps, n_shards, 0, 1, err, sizeof err) != PS_OK) {
        fprintf(stderr, "step_exchange: %s\n", err);
        return 1;
    }
    ps_client_set_timeout(c, (int)timeout_ms);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_ADAM);
    for (size_t k = 0; k < n_pieces; k++) {
        const ps_piece *pc = &pieces[k];
        int v = (int)pc->var;
        size_t row = var_ranks[v] == 2 ? var_shapes[v][1] : 1;
        ps_client_tensor t = {.shard = pc->shard, .rank = var_ranks[v], .opt = opt};
        snprintf(t.name, sizeof t.name, "%s", pc->name);
        t.shape[0] = pc->row_end - pc->row_begin;
        t.shape[1] = var_ranks[v] == 2 ? row : 0;
        t.param = param[v] + pc->row_begin * row;
        t.grad = grad[v] + pc->row_begin * row;
        if (ps_client_add(c, &t) != PS_OK) return fail(c, "add");
    }
    ps_pieces_free(pieces);

    /* join as psworker and ps.Worker do (worker 0 is the chief) */
    int async;
    uint64_t version;
    if (ps_client_hello(c, &async, &version) != PS_OK) return fail(c, "hello");
    if (ps_client_check_shards(c, NULL, 0, NULL) != PS_OK) return fail(c, "check shards");
    if (ps_client_create_vars(c, NULL) != PS_OK) return fail(c, "create vars");
    uint64_t clock = async ? ps_client_worker_clock(c) : version;
    if (ps_client_pull_next(c, async, clock, &version) != PS_OK) return fail(c, "pull");

    double t0 = 0, cpu0 = 0;
    for (long s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            t0 = ps_bench_now_s();
            cpu0 = cpu_s();
        }
        int fresh = 0;
        if (ps_client_step_begin(c, clock) != PS_OK) return fail(c, "step begin");
        if (ps_client_step_end(c, NULL, &fresh) != PS_OK) return fail(c, "step end");
        clock++;
        if (!fresh && ps_client_pull_next(c, async, clock, &version) != PS_OK)
            return fail(c, "pull");
    }
    double secs = ps_bench_now_s() - t0, cpu = cpu_s() - cpu0;
    if (ps_client_goodbye(c) != PS_OK) return fail(c, "goodbye");
    ps_client_close(c);
    for (int v = 0; v < NVARS; v++) {
        free(param[v]);
        free(grad[v]);
    }
    printf("{\"steps\": %ld, \"seconds\": %.6f, \"us_per_step\": %.3f, \"cpu_us_per_step\": %.3f, "
           "\"shards\": %zu}\n",
           steps, secs, secs / (double)steps * 1e6, cpu / (double)steps * 1e6, n_shards);
    return 0;
}
