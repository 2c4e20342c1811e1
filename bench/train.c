/* bench/train: training throughput (samples/s) of the default MLP on Fashion-MNIST
 * in four setups, each run --reps times (default 3), median, ratios to (a):
 *
 * (a) psworker --no-ps yes: the optimizer in the worker, no psd (the floor);
 * (b) psctl local --ps 1 --workers 1 --mode sync: one psd, one worker;
 * (c) psctl local --ps 2 --workers 2 --mode sync;
 * (d) psctl local --ps 2 --workers 2 --mode async.
 *
 * Every run trains --epochs 1 (default) with --progress none and writes a JSON
 * summary; samples_per_sec (job-wide, training time only) is read from it with
 * cJSON. The binaries: $PSWORKER / $PSCTL, else ../worker/psworker and
 * ../psctl/psctl next to this binary, else the build's. psctl local finds
 * psd itself (next to psctl). Built by meson, never run by the tests. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"

#ifndef PS_BENCH_PSWORKER
#define PS_BENCH_PSWORKER "psworker"
#endif
#ifndef PS_BENCH_PSCTL
#define PS_BENCH_PSCTL "psctl"
#endif

#define MAX_REPS 101
#define MAX_ARGS 32
#define NSETUPS 4

typedef struct {
    int reps;
    long epochs;
    const char *data; /* NULL: the worker's default */
} opts;

static void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s [--reps N] [--epochs E] [--data DIR]\n"
            "Training throughput (samples/s, job-wide, training time only) of the default MLP\n"
            "in four setups: (a) psworker --no-ps yes, (b) psctl local 1 psd + 1 worker sync,\n"
            "(c) 2 psd + 2 workers sync, (d) 2 psd + 2 workers async.\n"
            "  --reps N     runs per setup, the median is reported (default 3)\n"
            "  --epochs E   epochs per run (default 1)\n"
            "  --data DIR   dataset directory (default: the worker's)\n"
            "  --help       this text\n"
            "binaries: $PSWORKER / $PSCTL, else ../worker/psworker and ../psctl/psctl next\n"
            "to this binary, else %s and %s\n",
            argv0, PS_BENCH_PSWORKER, PS_BENCH_PSCTL);
}

static int parse_opts(int argc, char **argv, opts *o) {
    *o = (opts){.reps = 3, .epochs = 1};
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
        } else if (strcmp(a, "--epochs") == 0 && ps_bench_parse_long(val, 1, 1000, &v)) {
            o->epochs = v;
        } else if (strcmp(a, "--data") == 0 && *val) {
            o->data = val;
        } else {
            fprintf(stderr, "%s: bad option or value: %s %s\n", argv[0], a, val);
            return -1;
        }
    }
    return 0;
}

/* ---- binaries and processes ------------------------------------------------ */

static char worker_path[PATH_MAX], psctl_path[PATH_MAX];
static char tmpdir[64];

/* $env, else dirname(argv0)/rel if executable, else the build's path. */
static void find_bin(char *out, size_t len, const char *env_name, const char *argv0,
                     const char *rel, const char *built) {
    const char *env = getenv(env_name);
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return;
    }
    const char *slash = strrchr(argv0, '/');
    if (slash) {
        snprintf(out, len, "%.*s/%s", (int)(slash - argv0), argv0, rel);
        if (access(out, X_OK) == 0) return;
    }
    snprintf(out, len, "%s", built);
}

/* Runs argv (stdout and stderr appended to logf), waits; 0 when it exits 0. */
static int run(char *const argv[], const char *logf) {
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        int fd = open(logf, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setenv("PSWORKER", worker_path, 1); /* psctl local runs this worker */
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    fprintf(stderr, "%s exited with %s %d; log: %s\n", argv[0], WIFEXITED(st) ? "status" : "signal",
            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), logf);
    return -1;
}

/* samples_per_sec from the summary at path, or -1. */
static double read_rate(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "no summary %s\n", path);
        return -1;
    }
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "samples_per_sec");
    double r = cJSON_IsNumber(v) ? v->valuedouble : -1;
    cJSON_Delete(j);
    if (r <= 0) fprintf(stderr, "summary %s: no positive samples_per_sec\n", path);
    return r;
}

/* ---- setups -------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int ps, workers; /* ps = 0: psworker --no-ps yes */
    const char *mode;
} setup;

static const setup setups[NSETUPS] = {
    {"(a) no-ps, 1 worker", 0, 1, "-"},
    {"(b) 1 psd, 1 worker, sync", 1, 1, "sync"},
    {"(c) 2 psd, 2 workers, sync", 2, 2, "sync"},
    {"(d) 2 psd, 2 workers, async", 2, 2, "async"},
};

/* Fills argv for setup s (summary to `summary`); returns argc. */
static int build_argv(const setup *s, const opts *o, const char *summary, char *argv[MAX_ARGS],
                      char bufs[3][32]) {
    int n = 0;
    snprintf(bufs[0], sizeof bufs[0], "%ld", o->epochs);
    snprintf(bufs[1], sizeof bufs[1], "%d", s->ps);
    snprintf(bufs[2], sizeof bufs[2], "%d", s->workers);
    if (s->ps == 0) {
        argv[n++] = worker_path;
        argv[n++] = "--no-ps";
        argv[n++] = "yes";
        argv[n++] = "--epochs";
        argv[n++] = bufs[0];
        argv[n++] = "--progress";
        argv[n++] = "none";
        argv[n++] = "--summary";
        argv[n++] = (char *)summary;
        if (o->data) {
            argv[n++] = "--data";
            argv[n++] = (char *)o->data;
        }
    } else {
        argv[n++] = psctl_path;
        argv[n++] = "local";
        argv[n++] = "--ps";
        argv[n++] = bufs[1];
        argv[n++] = "--workers";
        argv[n++] = bufs[2];
        argv[n++] = "--mode";
        argv[n++] = (char *)s->mode;
        argv[n++] = "--epochs";
        argv[n++] = bufs[0];
        argv[n++] = "--summary";
        argv[n++] = (char *)summary;
        if (o->data) {
            argv[n++] = "--data";
            argv[n++] = (char *)o->data;
        }
        argv[n++] = "--";
        argv[n++] = "--progress";
        argv[n++] = "none";
    }
    argv[n] = NULL;
    return n;
}

int main(int argc, char **argv) {
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        usage(stderr, argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    find_bin(worker_path, sizeof worker_path, "PSWORKER", argv[0], "../worker/psworker",
             PS_BENCH_PSWORKER);
    find_bin(psctl_path, sizeof psctl_path, "PSCTL", argv[0], "../psctl/psctl", PS_BENCH_PSCTL);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ps-bench-train-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    char logf[128], summary[128];
    snprintf(logf, sizeof logf, "%s/train.log", tmpdir);
    snprintf(summary, sizeof summary, "%s/summary.json", tmpdir);

    printf("command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\nruns (summary and log in %s):\n", tmpdir);
    for (int s = 0; s < NSETUPS; s++) {
        char *av[MAX_ARGS], bufs[3][32];
        int n = build_argv(&setups[s], &o, "FILE", av, bufs);
        printf("  %.3s", setups[s].name);
        for (int i = 0; i < n; i++)
            printf(" %s", av[i]);
        printf("\n");
    }
    printf("timing: samples_per_sec from each run's summary (job-wide, training time only); "
           "%d runs per setup, median; min/max over runs; setups interleaved (a b c d, a b c d, "
           "...)\n\n",
           o.reps);
    fflush(stdout);

    double rate[NSETUPS][MAX_REPS], wall[NSETUPS][MAX_REPS];
    int rc = 0;
    for (int r = 0; r < o.reps && rc == 0; r++) {
        for (int s = 0; s < NSETUPS && rc == 0; s++) {
            char *av[MAX_ARGS], bufs[3][32];
            build_argv(&setups[s], &o, summary, av, bufs);
            unlink(summary);
            double t0 = ps_bench_now_s();
            if (run(av, logf) != 0 || (rate[s][r] = read_rate(summary)) <= 0) rc = 1;
            wall[s][r] = ps_bench_now_s() - t0;
            if (rc == 0)
                fprintf(stderr, "rep %d %s: %.0f samples/s, %.1f s wall\n", r + 1, setups[s].name,
                        rate[s][r], wall[s][r]);
        }
    }
    if (rc != 0) return 1;

    double med[NSETUPS], lo[NSETUPS], hi[NSETUPS], medwall[NSETUPS];
    for (int s = 0; s < NSETUPS; s++) {
        lo[s] = hi[s] = rate[s][0];
        for (int r = 1; r < o.reps; r++) {
            if (rate[s][r] < lo[s]) lo[s] = rate[s][r];
            if (rate[s][r] > hi[s]) hi[s] = rate[s][r];
        }
        med[s] = ps_bench_median(rate[s], o.reps);
        medwall[s] = ps_bench_median(wall[s], o.reps);
    }
    printf("%-28s %12s %10s %10s %8s %10s\n", "setup", "samples/s", "min", "max", "x (a)",
           "wall s");
    for (int s = 0; s < NSETUPS; s++)
        printf("%-28s %12.0f %10.0f %10.0f %8.2f %10.1f\n", setups[s].name, med[s], lo[s], hi[s],
               med[s] / med[0], medwall[s]);
    printf("\nwall s = median wall time of the whole run (start-up, data loading, evaluation "
           "included)\n");
    printf("\nTargets (printed, not asserted):\n");
    double rb = med[1] / med[0];
    printf("  (b) 1 psd + 1 worker sync >= 0.80 x (a): %.2f x  %s\n", rb,
           rb >= 0.80 ? "met" : "NOT met");
    printf("  (c) 2 psd + 2 workers sync >= 50000 samples/s: %.0f  %s "
           "(PyTorch DDP gloo, same model/data/batch: 32700)\n",
           med[2], med[2] >= 50000 ? "met" : "NOT met");
    unlink(summary);
    unlink(logf);
    rmdir(tmpdir);
    return 0;
}
