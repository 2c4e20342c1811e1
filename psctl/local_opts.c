/* Option parsing for `psctl local`: one table {name, type, bounds, help} drives
 * getopt_long, validation and --help. */
#include "local.h"

#include "wire.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    OPT_LONG,
    OPT_LLONG,
    OPT_STR,
    OPT_MODE,
    OPT_SECONDS,
    OPT_GPUS,
    OPT_TRANSPORT,
    OPT_FLAG, /* no value: sets an int field to 1 */
    OPT_HELP
} opt_type;

typedef struct {
    const char *name;
    opt_type type;
    long long min, max; /* bounds for integers */
    size_t off;         /* field in psctl_local_opts */
    const char *metavar;
    const char *help;
} opt_def;

#define F(field) offsetof(psctl_local_opts, field)

static const opt_def defs[] = {
    {"ps", OPT_LONG, 1, 1000, F(num_ps), "N", "number of psd shards (required)"},
    {"workers", OPT_LONG, 1, 1000, F(num_workers), "M",
     "number of workers (required unless --gpus)"},
    {"mode", OPT_MODE, 0, 0, F(mode), "sync|async", "training mode (required)"},
    {"epochs", OPT_LONG, 1, 1000000, F(epochs), "E", "epochs to train (default 2)"},
    {"model", OPT_STR, 0, 0, F(model), "FILE", "model spec JSON (default: the worker's)"},
    {"data", OPT_STR, 0, 0, F(data), "DIR", "dataset directory (default: the worker's)"},
    {"summary", OPT_STR, 0, 0, F(summary), "FILE", "the chief writes its JSON summary here"},
    {"batch", OPT_LONG, 1, 1000000, F(batch), "B", "batch size per worker"},
    {"seed", OPT_LLONG, 0, 0x7fffffffffffffffLL, F(seed), "S", "random seed"},
    {"timeout", OPT_SECONDS, 0, 0, F(timeout_s), "SECONDS",
     "stop everything and fail after this long (default 0 = never)"},
    {"max-restarts", OPT_LONG, 0, 1000, F(max_restarts), "N",
     "restart a failed process up to N times (default 3; 0: never)"},
    {"checkpoint-dir", OPT_STR, 0, 0, F(checkpoint_dir), "DIR",
     "psd shard i checkpoints to and restores from DIR/ps-<i>"},
    {"checkpoint-every", OPT_LONG, 0, 31536000, F(checkpoint_every), "SECONDS",
     "psd: checkpoint this often (0: on request and at stop only)"},
    {"worker-timeout", OPT_LONG, 100, 86400000, F(worker_timeout_ms), "MS",
     "psd: a worker silent this long leaves the expected set"},
    {"replicas-to-aggregate", OPT_LONG, 0, 1000, F(replicas), "R",
     "psd, sync: a step applies after R pushes (0: all live workers)"},
    {"staleness", OPT_LONG, 0, 1000000, F(staleness), "S",
     "psd, async: a worker S steps ahead of the slowest one waits"},
    {"gpus", OPT_GPUS, 0, PSCTL_MAX_GPUS - 1, F(gpus), "all|0,1,...",
     "one worker per GPU, each seeing only its own (see below)"},
    {"transport", OPT_TRANSPORT, 0, 0, F(transport_ipc), "ipc|tcp",
     "how workers reach the shards: Unix sockets (default) or 127.0.0.1 TCP"},
    {"job-id", OPT_STR, 0, 0, F(job_id), "ID",
     "every worker's --job-id (default: the workers' own, \"default\")"},
    {"recreate-lost-variables", OPT_FLAG, 0, 0, F(recreate_lost), NULL,
     "a shard that lost the job's variables gets them again with INITIAL values (see below)"},
    {"help", OPT_HELP, 0, 0, 0, NULL, "show this help"},
};

#define NDEFS (sizeof defs / sizeof defs[0])
#define VAL_BASE 256 /* getopt_long returns VAL_BASE + table index */

void psctl_local_usage(FILE *f) {
    fprintf(f, "usage: psctl local --ps N --workers M --mode sync|async [options] "
               "[-- EXTRA WORKER ARGS...]\n"
               "       psctl local --ps N --gpus all|0,1,... --mode sync|async [options] "
               "[-- ...]\n"
               "Runs N psd shards and M workers on this machine until training ends.\n\n"
               "options:\n");
    for (size_t i = 0; i < NDEFS; i++) {
        char left[64];
        if (defs[i].metavar)
            snprintf(left, sizeof left, "--%s %s", defs[i].name, defs[i].metavar);
        else if (defs[i].type == OPT_FLAG)
            snprintf(left, sizeof left, "--%s", defs[i].name);
        else
            snprintf(left, sizeof left, "-h, --%s", defs[i].name);
        fprintf(f, "  %-28s %s\n", left, defs[i].help);
    }
    fprintf(f, "\nDevices: without --gpus every worker gets --device cpu (so several workers\n"
               "never pile onto GPU 0). With --gpus, worker j runs on the j-th listed GPU with\n"
               "CUDA_VISIBLE_DEVICES=<that id> and --device cuda:0. --gpus all with no CUDA GPU\n"
               "(or a psctl built without CUDA) says so and runs CPU workers instead: --workers M\n"
               "of them, else one per CPU core; listed ids must exist.\n"
               "\nRestarts: a process killed by a signal or exiting non-zero is started again\n"
               "with the same arguments and environment, up to --max-restarts times each,\n"
               "after 0.2 s (doubling with each restart of that process, at most 5 s). A psd\n"
               "comes back on the port it first got (--port P), or with ipc on the same\n"
               "socket path, so the workers' --ps list stays valid. Exit status 2 (bad "
               "configuration) is never restarted; a psd\n"
               "exiting 0 (Shutdown request, SIGTERM) stops the job. A worker exiting 0 is\n"
               "done; when all are, the psd shards get SIGTERM and the job ends.\n"
               "\nThe psd flags (--checkpoint-*, --worker-timeout, --replicas-to-aggregate,\n"
               "--staleness) are passed to every shard only when given; psctl makes the\n"
               "DIR/ps-<i> directories. --checkpoint-every needs --checkpoint-dir.\n"
               "\nTransport: with ipc (the default) psctl makes a private directory\n"
               "($XDG_RUNTIME_DIR/psctl-ipc.XXXXXX, else under /tmp), shard i listens on\n"
               "DIR/psd-<i>.sock (psd --transport ipc --ipc-path) and the workers get\n"
               "--ps ipc://DIR/psd-0.sock,...; the directory is removed at the end. With tcp\n"
               "every shard listens on 127.0.0.1 on a free port.\n"
               "\nLost variables: a psd restarted without a checkpoint to restore (no\n"
               "--checkpoint-dir, or none written yet) has lost its part of the model. The\n"
               "workers then exit with status 4 naming the shard, and the job fails: they are\n"
               "not restarted into the same failure. With --recreate-lost-variables they are\n"
               "restarted and the chief creates that shard's variables again with their\n"
               "initial values (logged, and listed in the summary's recreated_lost_variables).\n"
               "\nBinaries: $PSD and $PSWORKER, else next to psctl, else on PATH.\n"
               "Exit status: 0 done, 1 a process failed (beyond its restarts), a shard lost\n"
               "the job's variables, or --timeout,\n"
               "2 bad usage, 130/143 interrupted by SIGINT/SIGTERM.\n");
}

static int bad_value(const opt_def *d, const char *arg, const char *what) {
    fprintf(stderr, "psctl local: --%s needs %s, got '%s'\n", d->name, what, arg);
    return 2;
}

static int parse_integer(const char *s, long long *out) {
    if (!((*s >= '0' && *s <= '9') || *s == '-' || *s == '+')) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno) return -1;
    *out = v;
    return 0;
}

/* Parses --gpus: "all", or distinct ids from 0 to d->max separated by single commas.
 * Returns 0, or 2 after a message naming the problem. */
static int parse_gpus(const opt_def *d, const char *arg, psctl_local_opts *o) {
    o->gpus = arg;
    o->gpus_all = strcmp(arg, "all") == 0;
    o->num_gpu_ids = 0;
    if (o->gpus_all) return 0;
    const char *why = NULL;
    const char *p = arg;
    for (;;) {
        if (*p < '0' || *p > '9') {
            why = *p == ',' || *p == '\0' ? "an empty id" : "an id that is not a number";
            break;
        }
        long long id = 0;
        while (*p >= '0' && *p <= '9' && id <= d->max)
            id = id * 10 + (*p++ - '0');
        if (id > d->max) {
            why = "an id that is too large";
            break;
        }
        if (*p != ',' && *p != '\0') {
            why = "an id that is not a number";
            break;
        }
        for (int i = 0; i < o->num_gpu_ids && !why; i++)
            if (o->gpu_ids[i] == id) why = "a GPU listed twice";
        if (why) break;
        o->gpu_ids[o->num_gpu_ids++] = (int)id; /* distinct ids <= max: always fits */
        if (*p == '\0') return 0;
        p++;
    }
    fprintf(stderr,
            "psctl local: --gpus needs 'all' or distinct GPU ids 0..%lld like 0,1; '%s' has %s\n",
            d->max, arg, why);
    return 2;
}

/* Stores arg into the field d names; returns 0, or 2 after a message. */
static int apply(const opt_def *d, const char *arg, psctl_local_opts *o) {
    char *field = (char *)o + d->off;
    switch (d->type) {
    case OPT_LONG:
    case OPT_LLONG: {
        long long v;
        if (parse_integer(arg, &v) < 0 || v < d->min || v > d->max) {
            char what[96];
            snprintf(what, sizeof what, "an integer from %lld to %lld", d->min, d->max);
            return bad_value(d, arg, what);
        }
        if (d->type == OPT_LONG)
            *(long *)(void *)field = (long)v;
        else
            *(long long *)(void *)field = v;
        return 0;
    }
    case OPT_STR:
        if (!*arg) return bad_value(d, arg, "a non-empty value");
        *(const char **)(void *)field = arg;
        return 0;
    case OPT_MODE:
        if (strcmp(arg, "sync") != 0 && strcmp(arg, "async") != 0)
            return bad_value(d, arg, "'sync' or 'async'");
        *(const char **)(void *)field = arg;
        return 0;
    case OPT_SECONDS: {
        char *end;
        errno = 0;
        double v = strtod(arg, &end);
        if (end == arg || *end != '\0' || errno || !isfinite(v) || v < 0 || v > 1e7)
            return bad_value(d, arg, "a number of seconds >= 0");
        *(double *)(void *)field = v;
        return 0;
    }
    case OPT_GPUS:
        return parse_gpus(d, arg, o);
    case OPT_TRANSPORT:
        if (strcmp(arg, "ipc") != 0 && strcmp(arg, "tcp") != 0)
            return bad_value(d, arg, "'ipc' or 'tcp'");
        *(int *)(void *)field = strcmp(arg, "ipc") == 0;
        return 0;
    case OPT_FLAG:
        *(int *)(void *)field = 1;
        return 0;
    case OPT_HELP:
        break;
    }
    return 0;
}

int psctl_local_parse(int argc, char **argv, psctl_local_opts *o) {
    memset(o, 0, sizeof *o);
    o->epochs = 2;
    o->seed = -1;
    o->max_restarts = 3;
    o->transport_ipc = 1;
    o->checkpoint_every = o->worker_timeout_ms = o->replicas = o->staleness = -1;

    struct option longopts[NDEFS + 1];
    for (size_t i = 0; i < NDEFS; i++) {
        longopts[i] = (struct option){
            defs[i].name,
            defs[i].type == OPT_HELP || defs[i].type == OPT_FLAG ? no_argument : required_argument,
            NULL, VAL_BASE + (int)i};
    }
    longopts[NDEFS] = (struct option){0};

    /* "+": stop at the first non-option, so worker arguments are never permuted;
     * ":": report a missing value as ':' so the message can name the flag. */
    opterr = 0;
    optind = 0;
    const char *last_value = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (c == 'h' || (c >= VAL_BASE && defs[c - VAL_BASE].type == OPT_HELP)) {
            psctl_local_usage(stdout);
            return 1;
        }
        if (c == ':') {
            if (optopt >= VAL_BASE && optopt < VAL_BASE + (int)NDEFS)
                fprintf(stderr, "psctl local: --%s needs a value\n", defs[optopt - VAL_BASE].name);
            else
                fprintf(stderr, "psctl local: option '%s' needs a value\n", argv[optind - 1]);
            goto usage_hint;
        }
        if (c == '?' || c < VAL_BASE || c >= VAL_BASE + (int)NDEFS) {
            if (optopt > 0 && optopt < VAL_BASE)
                fprintf(stderr, "psctl local: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "psctl local: unknown option '%s'\n", argv[optind - 1]);
            goto usage_hint;
        }
        if (apply(&defs[c - VAL_BASE], optarg, o) != 0) return 2;
        last_value = optarg;
    }

    /* getopt_long consumed a "--" separator (not a flag's value "--") if it is the
     * argument just before optind. */
    int saw_separator =
        optind > 1 && strcmp(argv[optind - 1], "--") == 0 && argv[optind - 1] != last_value;
    if (optind < argc && !saw_separator) {
        fprintf(stderr, "psctl local: unexpected argument '%s' (worker arguments go after --)\n",
                argv[optind]);
        goto usage_hint;
    }
    o->extra = argv + optind;
    o->num_extra = argc - optind;

    if (o->num_ps == 0 || (o->num_workers == 0 && !o->gpus) || !o->mode) {
        fprintf(stderr, "psctl local: %s is required\n",
                o->num_ps == 0                    ? "--ps"
                : o->num_workers == 0 && !o->gpus ? "--workers (or --gpus)"
                                                  : "--mode");
        goto usage_hint;
    }
    if (o->gpus && !o->gpus_all && o->num_workers > 0 && o->num_workers != o->num_gpu_ids) {
        fprintf(stderr,
                "psctl local: --workers %ld disagrees with --gpus %s: one worker per listed GPU "
                "makes %d\n",
                o->num_workers, o->gpus, o->num_gpu_ids);
        goto usage_hint;
    }
    const char *conflict = NULL;
    if (o->checkpoint_every >= 0 && !o->checkpoint_dir)
        conflict = "--checkpoint-every needs --checkpoint-dir";
    else if (o->replicas >= 0 && strcmp(o->mode, "sync") != 0)
        conflict = "--replicas-to-aggregate applies to --mode sync only";
    else if (o->staleness >= 0 && strcmp(o->mode, "async") != 0)
        conflict = "--staleness applies to --mode async only";
    else if (o->job_id && !ps_job_id_valid(o->job_id))
        conflict = "--job-id needs 1 to 64 of A-Z a-z 0-9 . _ -";
    if (conflict) {
        fprintf(stderr, "psctl local: %s\n", conflict);
        goto usage_hint;
    }
    return 0;

usage_hint:
    fprintf(stderr, "Try 'psctl local --help'.\n");
    return 2;
}

int psctl_local_check(const psctl_local_opts *o) {
    if (o->replicas > o->num_workers) {
        fprintf(stderr, "psctl local: --replicas-to-aggregate %ld is more than the %ld workers\n",
                o->replicas, o->num_workers);
        return 2;
    }
    return 0;
}
