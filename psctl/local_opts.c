/* Option parsing for `psctl local`: its table (common/options.h, the shared flags'
 * bounds from common/shared_flags.h) drives parsing, validation and --help. */
#include "local.h"

#include "half.h"
#include "job_id.h"
#include "options.h"
#include "ps_error.h"
#include "shared_flags.h"

#include <stddef.h>
#include <string.h>

#define F(field) PS_OPTION_FIELD(psctl_local_opts, field)
#define AT(field) PS_OPTION_AT(psctl_local_opts, field)

static int parse_gpus(const ps_option *d, void *cfg, const char *arg, char *err, size_t errlen);

/* The psd and psworker flags come from common/shared_flags.c with their bounds; those
 * passed to psd only when given (worker-timeout ...) take no default here. */
static const ps_option table[] = {
    {.like = &ps_flag_strategy,
     AT(strategy),
     .help = "parameter_server: psd shards hold the variables; mirrored, multi_worker_mirrored: "
             "no psd, the workers all-reduce their gradients in a ring (see below)",
     .doc = "With mirrored and multi_worker_mirrored every worker gets --strategy, "
            "--checkpoint-dir and --checkpoint-every and its TF_CONFIG (see ALL-REDUCE); --ps, "
            "--transport, --replicas-to-aggregate, --staleness, --workers-min, --replicas, "
            "--lease-ms, --recreate-lost-variables, --worker-cmd and --mode async are refused"},
    {.like = &ps_flag_communication,
     AT(communication_index),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "all-reduce strategies: passed to every worker",
     .default_text = "the workers' auto",
     .doc = "nccl is compiled in CUDA builds but has not yet run on a GPU. Refused with "
            "--strategy parameter_server"},
    {.like = &ps_flag_compression,
     AT(compression),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "passed to every worker: how gradients travel (psworker --compression)",
     .default_text = "the workers' none",
     .doc = "Not with --worker-cmd"},
    {"ps", PS_OPTION_LONG, F(num_ps), 1, PS_MAX_SHARDS, NULL, NULL, "N",
     "number of psd shards (required with --strategy parameter_server, refused otherwise)"},
    {.like = &ps_flag_workers,
     AT(num_workers),
     .flags = PS_OPTION_NO_DEFAULT,
     .metavar = "M",
     .help = "number of workers (required unless --gpus)",
     .doc = "With --gpus 0,1,... it must be the number of GPUs listed"},
    {.like = &ps_flag_mode,
     AT(mode_index),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "training mode (required with parameter_server); sync: average all workers' "
             "pushes per step, async: apply each push; the all-reduce strategies are sync"},
    {.like = &ps_flag_epochs,
     AT(epochs),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "epochs to train",
     .default_text = "the workers' own: the model spec's \"epochs\", else 2",
     .doc = "Passed to every worker only when given"},
    {"model", PS_OPTION_ARG, F(model), 1, 0, NULL, NULL, "FILE",
     "model spec JSON", .default_text = "the worker's"},
    {"data", PS_OPTION_ARG, F(data), 1, 0, NULL, NULL, "PATH",
     "the training data, as psworker --data takes it (a directory, a file, a glob or a data "
     "spec); psworker's other data flags (--test-data, --shuffle-buffer, ...) go after --",
     .default_text = "the worker's"},
    {"summary", PS_OPTION_ARG, F(summary), 1, 0, NULL, NULL, "FILE",
     "the chief writes its JSON summary here"},
    {"tensorboard", PS_OPTION_ARG, F(tensorboard), 1, 0, NULL, NULL, "DIR",
     "the chief writes TensorBoard event files under DIR (psworker --tensorboard)"},
    {"tensorboard-every", PS_OPTION_LONG, F(tensorboard_every), 0, 1L << 30, NULL, NULL, "N",
     "the chief's batch_ tags every N steps (psworker --tensorboard-every)",
     .default_text = "the worker's 100"},
    {"history", PS_OPTION_ARG, F(history), 1, 0, NULL, NULL, "FILE",
     "the chief writes Keras' History.history here as JSON (psworker --history)"},
    {.like = &ps_flag_batch, AT(batch)},
    {.like = &ps_flag_seed,
     AT(seed),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "initialisation and shuffling seed",
     .default_text = "the worker's"},
    {"timeout", PS_OPTION_SECONDS, F(timeout_s), 0, 10000000, "0", NULL, "SECONDS",
     "stop everything and fail after this long (0: never)",
     .doc = "Then every process is stopped and psctl exits 1"},
    {"max-restarts", PS_OPTION_LONG, F(max_restarts), 0, 1000, "3", NULL, "N",
     "restart a failed process up to N times (0: never)",
     .doc = "A process killed by a signal or exiting non-zero is started again with the same "
            "arguments and environment after 0.2 s, doubling with each restart of that process up "
            "to 5 s, and psctl logs it (psctl: worker 2 killed by signal 9; restarting (1/3)). A "
            "psd comes back on the port (or socket path) it first got, so the workers' --ps list "
            "stays valid. Exit status 2 (bad configuration) is never restarted, nor is a worker "
            "exiting 4 (a shard lost the job's variables) unless --recreate-lost-variables: the "
            "job stops and psctl exits 1, the worker's error naming the shard. All-reduce "
            "strategies: each restart of the whole set of workers counts once"},
    {"checkpoint-dir", PS_OPTION_ARG, F(checkpoint_dir), 1, 0, NULL, NULL, "DIR",
     "psd shard i checkpoints to and restores from DIR/ps-<i>; all-reduce: the chief "
     "checkpoints to DIR and a restarted job resumes from it (default: psctl's run dir)",
     .doc = "psctl makes the DIR/ps-<i> directories; a restarted psd restores its shard from its "
            "own. psctl's run directory, and so the all-reduce default, is removed at the end"},
    {PSCTL_CKPT_STEPS_FLAG, PS_OPTION_LONG, F(checkpoint_steps), 1, 1L << 40, NULL, NULL, "N",
     "all-reduce: the chief checkpoints every N steps", .default_text = "the workers'",
     .doc = "Refused with --strategy parameter_server (psd checkpoints by time: "
            "--checkpoint-every)"},
    {.like = &ps_flag_checkpoint_every,
     AT(checkpoint_every),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "psd: periodic checkpoints when the version moved (0: only on request and at "
             "SIGTERM/SIGINT); all-reduce: the chief's checkpoint period (default there: 60; "
             "0: only by steps and at the end)",
     .doc = "psd: passed to every shard only when given, and needs --checkpoint-dir"},
    {.like = &ps_flag_worker_timeout, AT(worker_timeout_ms), .flags = PS_OPTION_NO_DEFAULT,
     .doc = "Passed to every psd only when given (else psd's default, 30000); with an all-reduce "
            "strategy to every worker instead, where a ring neighbour silent this long is dead"},
    {.like = &ps_flag_replicas, AT(replicas_to_aggregate), .flags = PS_OPTION_NO_DEFAULT,
     .doc = "Passed to every psd only when given; at most --workers, and only with --mode sync"},
    {.like = &ps_flag_staleness, AT(staleness), .flags = PS_OPTION_NO_DEFAULT,
     .doc = "Passed to every psd only when given; only with --mode async"},
    {.like = &ps_flag_workers_min, AT(workers_min), .flags = PS_OPTION_NO_DEFAULT,
     .doc = "Passed to every psd only when given; at most --workers, and only with --mode "
            "sync. The job is elastic: every psworker gets --elastic yes (the data re-sharded "
            "among the live workers at each epoch) and `psctl scale` may change the number of "
            "workers between M and the slots (--workers-max, else --workers). psctl restarts "
            "the workers that die"},
    {"workers-max", PS_OPTION_LONG, F(workers_max), 1, PS_MAX_WORKERS, NULL, NULL, "X",
     "elastic jobs: the job's worker slots (psd and psworker --workers X), of which --workers "
     "N start (M <= N <= X); needs --workers-min M",
     .default_text = "--workers",
     .doc = "`psctl scale --workers K` starts workers at the free slots (K up to X) or stops "
            "the highest ones (K down to M). Not with --gpus or --worker-cmd"},
    {"replicas", PS_OPTION_LONG, F(psd_replicas), 1, PSCTL_MAX_REPLICAS, "1", NULL, "R",
     "psd processes per shard: a primary and R-1 backups (see REPLICAS below; not "
     "--replicas-to-aggregate)",
     .doc = "With R > 1 psctl starts R psd per shard with --replicas R, --replica r and --peers "
            "(the group's R addresses, chosen before they start), waits for all their ready "
            "files, and gives the workers each shard as \"A|B|...\" (primary first). A replica "
            "that dies once its group is up is restarted while another of its group lives, and "
            "rejoins as a backup from a snapshot; when all of a shard's replicas are gone the "
            "job fails. "
            "Parameter_server only"},
    {"lease-ms", PS_OPTION_LONG, F(lease_ms), 1, 3600000, NULL, NULL, "L",
     "with --replicas 2 or more: passed to every psd, the primary's lease (a backup that "
     "hears nothing from its primary for 1.5 L takes over)",
     .default_text = "psd's 500", .doc = "Refused without --replicas 2 or more"},
    {.name = "gpus",
     .type = PS_OPTION_CUSTOM,
     .max = PSCTL_MAX_GPUS - 1,
     .metavar = "all|0,1,...",
     .help = "one worker per GPU, each seeing only its own (see below)",
     .parse = parse_gpus,
     .doc = "Worker j runs on the j-th listed GPU with CUDA_VISIBLE_DEVICES set to that id and "
            "--device cuda:0. --gpus all with no CUDA GPU (or a psctl built without CUDA) says so "
            "and runs CPU workers instead: --workers M of them, else one per CPU core; a listed "
            "id that does not exist is an error (exit status 2). Without --gpus every worker gets "
            "--device cpu, so that several workers never pile onto GPU 0"},
    {.like = &ps_flag_transport,
     AT(transport_ipc),
     .def = "ipc",
     .help = "how workers reach the shards: Unix sockets or 127.0.0.1 TCP",
     .doc = "ipc: psctl makes a private directory ($XDG_RUNTIME_DIR/psctl-ipc.XXXXXX, else under "
            "/tmp), shard i listens on DIR/psd-<i>.sock (psd --transport ipc --ipc-path) and the "
            "workers get --ps ipc://DIR/psd-0.sock,...; the directory is removed at the end. tcp: "
            "every shard listens on 127.0.0.1 on a free port"},
    {"job-id", PS_OPTION_ARG, F(job_id), 1, 0, NULL, NULL, "ID",
     "every worker's --job-id; with --worker-cmd their PS_JOB_ID",
     .default_text = "the workers' own, \"default\""},
    {"recreate-lost-variables", PS_OPTION_FLAG, F(recreate_lost), 0, 0, NULL, NULL, NULL,
     "a shard that lost the job's variables gets them again with INITIAL values (see below)",
     .doc = "The workers get --recreate-lost-variables yes, and a worker exiting 4 is restarted "
            "instead of failing the job: the chief creates that shard's variables again with "
            "their initial values (logged, and listed in the summary's recreated_lost_variables)"},
    {"worker-cmd", PS_OPTION_ARG, F(worker_cmd), 1, 0, NULL, NULL, "CMD",
     "run each worker as /bin/sh -c 'exec CMD' with TF_CONFIG instead of psworker "
     "(parameter_server only; see below)",
     .doc = "It is supervised, restarted and its output prefixed as psworker's would be; its "
            "environment gets TF_CONFIG, PS_JOB_ID and PS_PARENT_PID (see WORKER COMMAND)"},
};
#define N_OPTIONS (sizeof table / sizeof table[0])

/* What psctl_local_main returns (local.c, supervisor.c). */
static const ps_exit_status exits[] = {
    {0, "the job finished: every worker exited 0 and the psd shards stopped cleanly"},
    {1, "a process failed beyond its --max-restarts, a worker exited 2 (bad configuration) or "
        "4 (a shard lost the job's variables), a process could not be started, or --timeout "
        "passed"},
    {2, "bad usage, psd or psworker not found, an unusable --checkpoint-dir or a --gpus id "
        "that does not exist"},
    {130, "interrupted by SIGINT (every process stopped)"},
    {143, "interrupted by SIGTERM (every process stopped)"},
};
#define N_EXITS (sizeof exits / sizeof exits[0])

void psctl_local_usage(FILE *f) {
    fprintf(f, "usage: psctl local --ps N --workers M --mode sync|async [options]\n"
               "                   [-- EXTRA WORKER ARGS...]\n"
               "       psctl local --ps N --workers M --mode sync|async --worker-cmd CMD\n"
               "                   [options]\n"
               "       psctl local --ps N --gpus all|0,1,... --mode sync|async [options]\n"
               "                   [-- ...]\n"
               "       psctl local --strategy mirrored|multi_worker_mirrored --workers M\n"
               "                   [options] [-- ...]\n"
               "Runs N psd shards and M workers on this machine until training ends (with an\n"
               "all-reduce strategy, only the M workers).\n\n"
               "options:\n");
    ps_options_usage(table, N_OPTIONS, f);
    fprintf(f, "\nDevices: without --gpus every worker gets --device cpu (so several workers\n"
               "never pile onto GPU 0). With --gpus, worker j runs on the j-th listed GPU with\n"
               "CUDA_VISIBLE_DEVICES=<that id> and --device cuda:0. --gpus all with no CUDA GPU\n"
               "(or a psctl built without CUDA) says so and runs CPU workers instead:\n"
               "--workers M of them, else one per CPU core; listed ids must exist.\n"
               "\nRestarts: a process killed by a signal or exiting non-zero is started again\n"
               "with the same arguments and environment, up to --max-restarts times each,\n"
               "after 0.2 s (doubling with each restart of that process, at most 5 s). A psd\n"
               "comes back on the port it first got (--port P), or with ipc on the same\n"
               "socket path, so the workers' --ps list stays valid. Exit status 2 (bad\n"
               "configuration) is never restarted; a psd exiting 0 (Shutdown request,\n"
               "SIGTERM) stops the job. A worker exiting 0 is done; when all are, the psd\n"
               "shards get SIGTERM and the job ends.\n"
               "\nThe psd flags (--checkpoint-*, --worker-timeout, --replicas-to-aggregate,\n"
               "--staleness, --workers-min, --lease-ms) are passed to every shard only when\n"
               "given; psctl makes the DIR/ps-<i> directories. --checkpoint-every needs\n"
               "--checkpoint-dir there.\n"
               "\nElastic jobs (--workers-min M, sync): psd gets --workers X, the slots\n"
               "(--workers-max X, else --workers), and --workers N workers start\n"
               "(M <= N <= X). Every psworker gets --elastic yes: at each epoch's start it\n"
               "reads the share of its rank among the live workers. psctl listens on\n"
               "RUNDIR/control.sock (RUNDIR: $TMPDIR/psctl-local.<pid>.XXXXXX, said at the\n"
               "start), where 'psctl scale --workers K PID|RUNDIR' changes the number of\n"
               "workers: up starts the free slots in index order, down sends SIGTERM to the\n"
               "highest (they leave after their step with a Goodbye, not restarted); K\n"
               "outside [M, X] is refused.\n"
               "\nReplicas (--replicas 2): each shard is 2 psd processes, a primary and\n"
               "R-1 backups. psctl chooses their addresses before starting them (free\n"
               "127.0.0.1 ports, or with ipc DIR/psd-<i>-r<r>.sock), starts replica r of\n"
               "shard i with --replicas R --replica r --peers ADDR0,ADDR1,... (and --lease-ms\n"
               "when given), waits for every replica's ready file (a backup writes it once it\n"
               "follows its primary), then gives the workers each shard as one entry\n"
               "\"ADDR0|ADDR1|...\", primary first. A replica that dies before its ready file\n"
               "is restarted as above; once up it is restarted while another replica of its\n"
               "group lives (psctl logs that its group goes on with K of R replicas), and\n"
               "rejoins as a backup from a snapshot of the primary's state. When every\n"
               "replica of a shard is gone the job fails.\n"
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
               "\nAll-reduce strategies (--strategy mirrored|multi_worker_mirrored): no psd is\n"
               "started; every worker holds the variables and the workers sum their gradients\n"
               "in a ring. Worker j gets TF_CONFIG={\"cluster\": {\"worker\": [\"127.0.0.1:P0\",\n"
               "...]}, \"task\": {\"type\": \"worker\", \"index\": j}} with ports free at the\n"
               "start, --strategy, --checkpoint-dir (psctl's own run dir unless given),\n"
               "--checkpoint-every (60 s unless given) and the training flags; --ps,\n"
               "--transport, --replicas-to-aggregate, --staleness, --workers-min, --replicas,\n"
               "--lease-ms, --recreate-lost-variables and --mode async are refused.\n"
               "The ring is all or nothing: when a worker fails, psctl stops the others\n"
               "(SIGTERM, SIGKILL after 5 s) and restarts all of them on fresh ports, resuming\n"
               "from the chief's last checkpoint; each such restart counts against\n"
               "--max-restarts. A worker exiting 2 (bad configuration) fails the job at once.\n"
               "\nAny worker program (--worker-cmd CMD, parameter_server only): worker j runs\n"
               "as /bin/sh -c 'exec CMD' (shell quoting and $VARIABLES work; CMD is one\n"
               "command, exec'd so that signals reach it: put several in a script) instead of\n"
               "psworker, supervised, restarted and prefixed as above with the same command\n"
               "and environment on every restart. Its environment gets, besides psctl's own:\n"
               "  TF_CONFIG={\"cluster\": {\"ps\": [\"ipc://DIR/psd-0.sock\", ...], \"worker\":\n"
               "    [\"127.0.0.1:Q0\", ...]}, \"task\": {\"type\": \"worker\", \"index\": j}}\n"
               "    as TensorFlow's multi-process runner writes it. The ps entries are the\n"
               "    shards' endpoints as psworker's --ps gets them (\"127.0.0.1:P\" with\n"
               "    --transport tcp). The worker entries are 127.0.0.1 ports free when the\n"
               "    workers first start: nothing listens on them (workers do not talk to each\n"
               "    other with psd). There is no \"chief\" entry: worker 0 is the chief.\n"
               "  PS_JOB_ID=ID with --job-id ID.\n"
               "  PS_PARENT_PID=<psctl's pid> (as every child gets).\n"
               "Exit status 0 is done, 2 (bad configuration) and 4 (a shard lost the job's\n"
               "variables) fail the job at once, anything else is restarted. The flags that\n"
               "only configure psworker (--epochs, --model, --data, --batch, --seed,\n"
               "--summary, --tensorboard, --tensorboard-every, --history, --gpus,\n"
               "--recreate-lost-variables, --compression, arguments after \"--\") are refused\n"
               "with --worker-cmd: give them in CMD.\n"
               "\nBinaries: $PSD and $PSWORKER, else next to psctl, else on PATH.\n\n");
    ps_exit_status_usage(exits, N_EXITS, f);
}

/* Parses --gpus: "all", or distinct ids from 0 to d->max separated by single commas.
 * Returns PS_OK, or PS_EINVAL with a reason naming the problem. */
static int parse_gpus(const ps_option *d, void *cfg, const char *arg, char *err, size_t errlen) {
    psctl_local_opts *o = cfg;
    o->gpus = arg;
    o->gpus_all = strcmp(arg, "all") == 0;
    o->num_gpu_ids = 0;
    if (o->gpus_all) return PS_OK;
    const char *why = NULL;
    const char *p = arg;
    for (;;) {
        if (*p < '0' || *p > '9') {
            why = *p == ',' || *p == '\0' ? "an empty id" : "an id that is not a number";
            break;
        }
        long id = 0;
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
        if (*p == '\0') return PS_OK;
        p++;
    }
    snprintf(err, errlen, "--gpus needs 'all' or distinct GPU ids 0..%ld like 0,1; '%s' has %s",
             d->max, arg, why);
    return PS_EINVAL;
}

/* With an all-reduce strategy: the flags that only make sense with psd. Returns 0, or -1
 * after a message naming the flag. */
static int allreduce_conflict(const psctl_local_opts *o, const unsigned char *given) {
    static const char *const psd_only[] = {"ps",          "transport",
                                           "replicas-to-aggregate", "staleness",
                                           "workers-min", "replicas",
                                           "lease-ms",    "recreate-lost-variables",
                                           "workers-max"};
    for (size_t i = 0; i < sizeof psd_only / sizeof psd_only[0]; i++) {
        if (!given[ps_options_find(table, N_OPTIONS, psd_only[i]) - table]) continue;
        fprintf(stderr,
                "psctl local: --%s applies to --strategy parameter_server only; --strategy %s "
                "runs no psd\n",
                psd_only[i], o->strategy_name);
        return -1;
    }
    if (o->mode && strcmp(o->mode, "sync") != 0) {
        fprintf(stderr,
                "psctl local: --mode %s: --strategy %s is synchronous (every step "
                "all-reduces all workers' gradients)\n",
                o->mode, o->strategy_name);
        return -1;
    }
    return 0;
}

/* With --worker-cmd: refuses the strategies without psd and the flags that only configure
 * psworker (given on psctl's command line, so they would be ignored). Returns 0, or -1
 * after a message naming the flag. */
static int worker_cmd_conflict(const psctl_local_opts *o, const unsigned char *given) {
    static const char *const psworker_only[] = {"epochs",  "model", "data",
                                                "batch",   "seed",  "summary",
                                                "tensorboard", "tensorboard-every", "history",
                                                "gpus",    "recreate-lost-variables", "compression"};
    if (o->allreduce) {
        fprintf(stderr,
                "psctl local: --worker-cmd applies to --strategy parameter_server only; with "
                "--strategy %s the workers are psworker\n",
                o->strategy_name);
        return -1;
    }
    if (strspn(o->worker_cmd, " \t\n") == strlen(o->worker_cmd)) {
        fprintf(stderr, "psctl local: --worker-cmd needs a command, not blanks\n");
        return -1;
    }
    for (size_t i = 0; i < sizeof psworker_only / sizeof psworker_only[0]; i++) {
        if (!given[ps_options_find(table, N_OPTIONS, psworker_only[i]) - table]) continue;
        fprintf(stderr,
                "psctl local: --%s configures psworker and is not used with --worker-cmd; pass "
                "it in the command instead\n",
                psworker_only[i]);
        return -1;
    }
    if (o->num_extra > 0) {
        fprintf(stderr,
                "psctl local: the arguments after \"--\" (%s ...) go to psworker and are not "
                "used with --worker-cmd; pass them in the command instead\n",
                o->extra[0]);
        return -1;
    }
    return 0;
}

int psctl_local_parse(int argc, char **argv, psctl_local_opts *o) {
    memset(o, 0, sizeof *o);
    o->seed = o->epochs = -1;
    o->checkpoint_every = o->worker_timeout_ms = o->replicas_to_aggregate = o->staleness = -1;
    o->workers_min = o->workers_max = o->lease_ms = -1;
    o->checkpoint_steps = o->tensorboard_every = -1;
    unsigned char given[N_OPTIONS] = {0};
    char err[512];
    int rest = argc;
    /* In order: stop at the first non-option, so worker arguments are never permuted;
     * they go after a "--". */
    int rc = ps_options_defaults(table, N_OPTIONS, o, err, sizeof err);
    if (rc == PS_OK)
        rc =
            ps_options_parse_args(table, N_OPTIONS, argc, argv, o, given, "psctl local",
                                  PS_OPTIONS_IN_ORDER | PS_OPTIONS_ARGS | PS_OPTIONS_AFTER_DASHDASH,
                                  &rest, err, sizeof err);
    if (rc == PS_OPTIONS_HELP || rc == PS_OPTIONS_HELP_MAN) {
        if (rc == PS_OPTIONS_HELP)
            psctl_local_usage(stdout);
        else
            ps_options_help_man(table, N_OPTIONS, exits, N_EXITS, stdout);
        return 1;
    }
    if (rc != PS_OK) {
        fprintf(stderr, "psctl local: %s\n", err);
        return 2;
    }
    o->extra = argv + rest;
    o->num_extra = argc - rest;
    int ckind;
    float cratio;
    if (o->compression[0] &&
        ps_compression_parse(o->compression, &ckind, &cratio, err, sizeof err) != 0) {
        fprintf(stderr, "psctl local: --compression %s\n", err);
        return 2;
    }
    if (given[ps_options_find(table, N_OPTIONS, "mode") - table])
        o->mode = o->mode_index ? "async" : "sync";
    static const char *const strategies[] = {"parameter_server", "mirrored",
                                             "multi_worker_mirrored"};
    static const char *const communications[] = {"auto", "ring", "nccl"};
    o->strategy_name = strategies[o->strategy];
    o->allreduce = o->strategy != PSCTL_PARAMETER_SERVER;
    if (given[ps_options_find(table, N_OPTIONS, "communication") - table])
        o->communication = communications[o->communication_index];
    if (o->worker_cmd && worker_cmd_conflict(o, given) != 0) goto usage_hint;
    if (o->allreduce && allreduce_conflict(o, given) != 0) goto usage_hint;
    if (o->allreduce && !o->mode) o->mode = "sync";
    if (!o->allreduce && o->communication) {
        fprintf(stderr, "psctl local: --communication applies to the all-reduce strategies "
                        "(--strategy mirrored|multi_worker_mirrored) only\n");
        goto usage_hint;
    }

    if (o->num_ps == 0 && !o->allreduce) {
        fprintf(stderr, "psctl local: --ps is required (with --strategy parameter_server, the "
                        "default)\n");
        goto usage_hint;
    }
    if (!o->allreduce && o->checkpoint_steps >= 0) {
        fprintf(stderr, "psctl local: --" PSCTL_CKPT_STEPS_FLAG " applies to the all-reduce "
                        "strategies only (psd checkpoints with --checkpoint-every SECONDS)\n");
        goto usage_hint;
    }
    if ((o->num_workers == 0 && !o->gpus) || !o->mode) {
        fprintf(stderr, "psctl local: %s is required\n",
                o->num_workers == 0 && !o->gpus ? "--workers (or --gpus)" : "--mode");
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
    if (o->checkpoint_every >= 0 && !o->checkpoint_dir && !o->allreduce)
        conflict = "--checkpoint-every needs --checkpoint-dir";
    else if (o->replicas_to_aggregate >= 0 && strcmp(o->mode, "sync") != 0)
        conflict = "--replicas-to-aggregate applies to --mode sync only";
    else if (o->staleness >= 0 && strcmp(o->mode, "async") != 0)
        conflict = "--staleness applies to --mode async only";
    else if (o->workers_min > 0 && strcmp(o->mode, "sync") != 0)
        conflict = "--workers-min applies to --mode sync only";
    else if (o->workers_max > 0 && o->workers_min <= 0)
        conflict = "--workers-max makes the job elastic: it needs --workers-min M too "
                   "(M <= --workers <= --workers-max)";
    else if (o->workers_max > 0 && o->gpus)
        conflict = "--workers-max: not with --gpus (one worker per listed GPU)";
    else if (o->workers_max > 0 && o->worker_cmd)
        conflict = "--workers-max: not with --worker-cmd (psctl scale starts psworker)";
    else if (o->lease_ms >= 0 && o->psd_replicas < 2)
        conflict = "--lease-ms is the primary's lease over its backups: it needs --replicas 2 or "
                   "more (psd processes per shard)";
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
    if (o->workers_max > 0 && o->num_workers > o->workers_max) {
        fprintf(stderr, "psctl local: --workers %ld is more than --workers-max %ld (the job's "
                        "slots)\n",
                o->num_workers, o->workers_max);
        return 2;
    }
    if (o->workers_min > o->num_workers) {
        fprintf(stderr, "psctl local: --workers-min %ld is more than the %ld workers started "
                        "(--workers)\n",
                o->workers_min, o->num_workers);
        return 2;
    }
    if (o->replicas_to_aggregate > o->num_workers) {
        fprintf(stderr, "psctl local: --replicas-to-aggregate %ld is more than the %ld workers\n",
                o->replicas_to_aggregate, o->num_workers);
        return 2;
    }
    return 0;
}
