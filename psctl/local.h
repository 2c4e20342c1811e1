/* psctl local: run a whole cluster (psd shards + workers) on this machine.
 * Options (local_opts.c), entry point (local.c) and the supervisor (supervisor.c). */
#ifndef PSCTL_LOCAL_H
#define PSCTL_LOCAL_H

#include <stdio.h>

#define PSCTL_MAX_GPUS 256 /* GPU ids 0..255 in a --gpus list */
#define PSCTL_MAX_REPLICAS 2 /* --replicas: psd processes per shard (psd's own limit) */

/* psctl local's and psworker's flag for the chief's checkpoint period in steps (all-reduce). */
#define PSCTL_CKPT_STEPS_FLAG "checkpoint-every-steps"
/* All-reduce: the chief's --checkpoint-every SECONDS unless given (psd's default). */
#define PSCTL_ALLREDUCE_CHECKPOINT_EVERY_S 60

/* --strategy, in the order of its choices. */
typedef enum {
    PSCTL_PARAMETER_SERVER = 0, /* psd shards + workers (today's behaviour) */
    PSCTL_MIRRORED,             /* all-reduce between the workers, all on this host */
    PSCTL_MULTI_WORKER_MIRRORED /* all-reduce, workers on any hosts (here: this one) */
} psctl_strategy;

/* Parsed `psctl local` options; strings point into argv (not owned). */
typedef struct {
    long strategy;             /* --strategy: a psctl_strategy */
    const char *strategy_name; /* its name, as psworker's --strategy takes it */
    int allreduce;             /* strategy != PSCTL_PARAMETER_SERVER: no psd, a ring */
    const char *communication; /* --communication auto|ring|nccl when given, else NULL */
    long communication_index;  /* as parsed */
    long num_ps;               /* --ps N (required with parameter_server, >= 1; 0 otherwise) */
    long num_workers;          /* --workers M (>= 1; 0 when not given, allowed only with --gpus) */
    const char *mode;          /* --mode: "sync" or "async" (required with parameter_server;
                                  the all-reduce strategies are "sync") */
    long mode_index;           /* --mode as parsed: 0 sync, 1 async */
    long epochs;               /* --epochs E (-1: not given, the workers decide) */
    const char *model;         /* --model FILE, or NULL for the worker's default */
    const char *data;          /* --data DIR, or NULL */
    const char *summary;       /* --summary FILE (chief only), or NULL */
    const char *tensorboard;   /* --tensorboard DIR (chief only), or NULL */
    long tensorboard_every;    /* --tensorboard-every N (chief only; -1: not given) */
    const char *history;       /* --history FILE (chief only), or NULL */
    long batch;                /* --batch B, or 0 when not given */
    long seed;                 /* --seed S, or -1 when not given */
    double timeout_s;          /* --timeout SECONDS for the whole job; 0 = none */
    char **extra;              /* arguments after "--", passed to every worker */
    int num_extra;
    long transport_ipc;         /* --transport: 1 ipc (default), 0 tcp */
    long max_restarts;          /* --max-restarts N per process (default 3; 0: no restarts) */
    const char *checkpoint_dir; /* --checkpoint-dir DIR (shard i gets DIR/ps-<i>; all-reduce:
                                   every worker gets DIR), or NULL */
    long checkpoint_every;      /* passed to every psd when >= 0 (-1: not given), and so */
    long worker_timeout_ms;     /* are these three */
    long replicas_to_aggregate; /* --replicas-to-aggregate (sync backup workers) */
    long staleness;
    long workers_min;      /* --workers-min M passed to every psd when >= 0 (-1: not given) */
    long workers_max;      /* --workers-max X: the job's slots (psd and psworker --workers X),
                              num_workers of them started at first (-1: not given: slots =
                              num_workers) */
    long psd_replicas;     /* --replicas R: psd processes per shard, a primary and R-1 backups
                              (1: unreplicated; not --replicas-to-aggregate) */
    long lease_ms;         /* --lease-ms L passed to every psd when >= 0 (-1: not given; only
                              with psd_replicas > 1) */
    long checkpoint_steps; /* all-reduce: the chief's checkpoint period in steps (-1: not given) */
    char compression[64];  /* --compression passed to every psworker; "" when not given */
    const char *job_id;    /* --job-id ID passed to every worker (--worker-cmd: as PS_JOB_ID in
                              its environment), or NULL (their default) */
    const char *worker_cmd; /* --worker-cmd CMD: workers run /bin/sh -c 'exec CMD' with TF_CONFIG
                               instead of psworker (parameter_server only), or NULL */
    int recreate_lost;     /* --recreate-lost-variables: passed on; a worker exiting 4 restarts */
    const char *gpus;      /* --gpus as given, or NULL */
    int gpus_all;          /* --gpus all */
    int num_gpu_ids;       /* --gpus ID,...: the distinct ids, in order */
    int gpu_ids[PSCTL_MAX_GPUS];
    /* Set by psctl_local_resolve_gpus, not by the parser: */
    const char *worker_device;  /* --device for every worker: "cpu" or "cuda:0" */
    char **worker_cuda_visible; /* CUDA_VISIBLE_DEVICES of worker j (owned), or NULL: CPU */
} psctl_local_opts;

/* psctl local's run directory is $TMPDIR/psctl-local.<pid>.XXXXXX (else under /tmp). */
#define PSCTL_RUN_DIR_PREFIX "psctl-local."

/* The job's worker slots: --workers-max when given, else --workers. */
static inline long psctl_local_slots(const psctl_local_opts *o) {
    return o->workers_max > 0 ? o->workers_max : o->num_workers;
}

/* An elastic job (--workers-min M): psworker gets --elastic yes, psctl scale may change
 * the number of workers between M and the slots. */
static inline int psctl_local_elastic(const psctl_local_opts *o) {
    return o->workers_min > 0 && !o->allreduce;
}

/* --worker-cmd: the environment variable that carries --job-id. */
#define PSCTL_JOB_ID_ENV "PS_JOB_ID"

/* Parses `psctl local` arguments; argv[0] is "local". Returns 0 when opts is filled
 * in, 1 when --help (or --help-man's scdoc) was printed to stdout, 2 after printing a
 * message naming the bad flag to stderr. Uses the option table machinery (common/options.h). */
int psctl_local_parse(int argc, char **argv, psctl_local_opts *opts);

/* Checks what needs the final worker count (after psctl_local_resolve_gpus):
 * --replicas-to-aggregate at most --workers. Returns 0, or 2 after a message. */
int psctl_local_check(const psctl_local_opts *opts);

/* Decides where the workers run: without --gpus on the CPU; with --gpus on the
 * listed GPUs (or all of them), one worker each, seeing only its GPU; with --gpus
 * all and no GPU (or no CUDA in this build) on the CPU, --workers M of them or one
 * per CPU core. Sets num_workers, worker_device and worker_cuda_visible (free
 * with psctl_local_free_gpus). Returns 0, or 2 after printing why to stderr (an
 * id that does not exist, --workers disagreeing with the GPU count). */
int psctl_local_resolve_gpus(psctl_local_opts *opts);
void psctl_local_free_gpus(psctl_local_opts *opts);

/* Finds an executable: $env_name if set, else each of rel[] (NULL-terminated) relative to
 * the directory of psctl's own executable, else `name` on PATH. Returns a malloc'd path, or
 * NULL after printing why to stderr. */
char *psctl_find_binary(const char *name, const char *env_name, const char *const *rel);

/* Prints the usage of `psctl local` to f. */
void psctl_local_usage(FILE *f);

/* Runs `psctl local` with argv[0] == "local". Returns the process exit code: 0 job
 * finished, 1 a process failed (beyond its restarts) or the job timed out, 2 bad
 * usage, missing binaries or an unusable --checkpoint-dir, 128+signal when
 * interrupted by SIGINT/SIGTERM. */
int psctl_local_main(int argc, char **argv);

#endif
