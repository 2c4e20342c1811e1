/* psctl slurm-task: one launcher for every task of a Slurm step (see slurm_task.h and
 * docs/ARCHITECTURE.md "Slurm"). The layout itself is common/slurm_plan.c. */
#include "slurm_task.h"

#include "child_argv.h"
#include "local.h"
#include "options.h"
#include "ps_error.h"
#include "shared_flags.h"
#include "slurm_end.h"
#include "slurm_plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_PSD_ARGS 64
#define DEFAULT_BASE_PORT "24000"

typedef struct {
    long num_ps;
    long base_port;
    long mode; /* ps_flag_mode: 0 sync, 1 async */
    const char *checkpoint_dir;
    long checkpoint_every; /* -1: not given */
    double stop_wait_s;
    int gpus;
    int dry_run;
    const char *psd_args[MAX_PSD_ARGS];
    int n_psd_args;
} slurm_opts;

#define F(field) PS_OPTION_FIELD(slurm_opts, field)
#define AT(field) PS_OPTION_AT(slurm_opts, field)

static int parse_psd_arg(const ps_option *d, void *cfg, const char *arg, char *err,
                         size_t errlen) {
    (void)d;
    slurm_opts *o = cfg;
    if (o->n_psd_args == MAX_PSD_ARGS) {
        snprintf(err, errlen, "--psd-arg: at most %d", MAX_PSD_ARGS);
        return PS_EINVAL;
    }
    o->psd_args[o->n_psd_args++] = arg;
    return PS_OK;
}

static const ps_option table[] = {
    {"ps", PS_OPTION_LONG, F(num_ps), 0, PS_MAX_SHARDS, "0", NULL, "N",
     "the first N tasks are psd shards, the rest workers (task N: the chief); 0: no psd, "
     "every task is a worker and they all-reduce (multi_worker_mirrored)",
     .doc = "With 0 TF_CONFIG has only \"worker\" entries, so psworker defaults to "
            "multi_worker_mirrored"},
    {"base-port", PS_OPTION_LONG, F(base_port), 1, 65535, DEFAULT_BASE_PORT, NULL, "P",
     "the task with SLURM_LOCALID L listens on port P + L of its node",
     .doc = "Every node so uses the ports P..P+tasks-1: two jobs sharing a node need different "
            "values"},
    {.like = &ps_flag_mode,
     AT(mode),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "passed to every psd (required with --ps N > 0)",
     .doc = "Refused with --ps 0"},
    {"checkpoint-dir", PS_OPTION_ARG, F(checkpoint_dir), 1, 0, NULL, NULL, "DIR",
     "shared storage: psd shard i checkpoints to and restores from DIR/ps-<i> (made if "
     "missing); --ps 0: every worker gets --checkpoint-dir DIR (the chief writes it)",
     .doc = "A requeued job's psd restores its shard from it and the workers resume there"},
    {.like = &ps_flag_checkpoint_every,
     AT(checkpoint_every),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "passed to every psd (--ps 0: to every worker); needs --checkpoint-dir"},
    {"psd-arg", PS_OPTION_CUSTOM, 0, 0, 0, 0, NULL, NULL, "ARG",
     "one more psd argument (repeat for several, e.g. --psd-arg=--worker-timeout "
     "--psd-arg=60000)",
     .parse = parse_psd_arg},
    {"stop-wait", PS_OPTION_SECONDS, F(stop_wait_s), 0, 1000000, "600", NULL, "SECONDS",
     "--ps N > 0: once its psworker is done, the chief waits this long at most for the other "
     "workers to finish, then stops every psd (they checkpoint and exit 0)",
     .doc = "psd never exits by itself: the chief's task runs psworker as its child (passing "
            "SIGTERM and SIGINT on) and, once it exited 0, waits until no shard counts a live "
            "worker, then asks every shard for a checkpoint (with --checkpoint-dir) and to shut "
            "down. Every other task execs psd or psworker"},
    {"gpus", PS_OPTION_FLAG, F(gpus), 0, 0, NULL, NULL, NULL,
     "workers train on a GPU (see below); without it every worker gets --device cpu",
     .doc = "A worker that sees one GPU (CUDA_VISIBLE_DEVICES lists one, as when Slurm binds a "
            "GPU per task: srun --gpus-per-task=1) gets --device cuda:0; one that sees several "
            "gets cuda:R, R its place among the workers of its node (psd tasks hold no GPU), "
            "which must be below the number it sees (else exit status 2)"},
    {"dry-run", PS_OPTION_FLAG, F(dry_run), 0, 0, NULL, NULL, NULL,
     "print the task's role, TF_CONFIG and command line instead of running it"},
};
#define N_OPTIONS (sizeof table / sizeof table[0])

/* What psctl_slurm_task_main returns, or the program it becomes. */
static const ps_exit_status exits[] = {
    {0, "done: psd or psworker exited 0 (the chief's task: its psworker, and then every shard "
        "stopped), or --dry-run printed the task"},
    {1, "psd or psworker could not be started, or the chief's task could not stop the shards"},
    {2, "bad usage; psd or psworker not found; a --checkpoint-dir that cannot be made; Slurm's "
        "environment does not describe this task (a variable missing or wrong, a TF_CONFIG "
        "already set, a cyclic distribution); --gpus and a worker seeing too few GPUs"},
    {PS_EXIT_OTHER, "that of psd or psworker: the task becomes it (the chief's task runs "
                    "psworker as its child: its status, 128+N when signal N killed it)"},
};
#define N_EXITS (sizeof exits / sizeof exits[0])

static void usage(FILE *f) {
    fprintf(f, "usage: srun [...] psctl slurm-task [--ps N --mode sync|async] [options]\n"
               "                  [-- WORKER ARGS...]\n"
               "Run by every task of a Slurm job step: works out from Slurm's environment which\n"
               "task this is, builds its TF_CONFIG and runs psd or psworker with it (exec).\n\n"
               "options:\n");
    ps_options_usage(table, N_OPTIONS, f);
    fprintf(f,
            "\nFrom Slurm: SLURM_PROCID (this task), SLURM_NTASKS (or SLURM_STEP_NUM_TASKS),\n"
            "SLURM_STEP_NODELIST (e.g. gpu[01-04,07]) and SLURM_STEP_TASKS_PER_NODE (else\n"
            "SLURM_TASKS_PER_NODE; e.g. 2(x3),1). Tasks are laid out as Slurm's default block\n"
            "distribution places them (the first tasks on the first node, ...); SLURM_LOCALID\n"
            "and SLURMD_NODENAME, when set, must agree (srun --distribution=cyclic is\n"
            "refused).\n"
            "Task i's address is NODE:P+L (L: its place on its node), so every node uses\n"
            "ports P..P+tasks-1; two jobs sharing a node need different --base-port.\n"
            "\nTF_CONFIG: {\"cluster\": {\"ps\": [tasks 0..N-1], \"worker\": [tasks N..]},\n"
            "\"task\": {\"type\": \"ps\"|\"worker\", \"index\": I}}; psd listens on all\n"
            "interfaces at its port; node names must resolve on every node. A TF_CONFIG\n"
            "already in the environment is refused (it would be silently replaced).\n"
            "\nDevices (--gpus): a worker that sees one GPU (CUDA_VISIBLE_DEVICES lists one,\n"
            "as when Slurm binds a GPU per task: --gpus-per-task=1) gets --device cuda:0;\n"
            "one that sees several gets cuda:R, R its place among the workers of its node\n"
            "(psd tasks hold no GPU), which must be below the GPUs it sees.\n"
            "\nThe end of a psd job: psd never exits by itself, so with --ps N > 0 the chief\n"
            "task runs psworker as its child (SIGTERM/SIGINT passed on) and, when it exits 0,\n"
            "waits until no shard counts a live worker (--stop-wait) and sends every shard\n"
            "a Checkpoint request (with --checkpoint-dir) and Shutdown: they exit 0 and the\n"
            "step ends; a requeued job's psd restores it and the workers resume there. Every\n"
            "other task becomes psd or psworker (exec). Run the step with\n"
            "srun --kill-on-bad-exit=1 so that a failed task ends it.\n"
            "\nThe binaries: $PSD and $PSWORKER, else next to psctl, else on PATH.\n\n");
    ps_exit_status_usage(exits, N_EXITS, f);
}

/* A decimal environment variable in [0, max]; -1 after a message when missing or bad. */
static long env_long(const char *name, const char *alt, long max) {
    const char *v = getenv(name);
    if ((!v || !*v) && alt) v = getenv(alt);
    if (!v || !*v) {
        fprintf(stderr,
                "psctl slurm-task: %s%s%s%s is not set: run inside a Slurm job step (srun)\n",
                name, alt ? " (or " : "", alt ? alt : "", alt ? ")" : "");
        return -1;
    }
    const char *first = getenv(name);
    if (alt && (!first || !*first)) name = alt;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < 0 || x > max) {
        fprintf(stderr, "psctl slurm-task: %s='%s' is not a number in 0..%ld\n", name, v, max);
        return -1;
    }
    return x;
}

static const char *env_str(const char *name, const char *alt) {
    const char *v = getenv(name);
    if ((!v || !*v) && alt) v = getenv(alt);
    if (!v || !*v)
        fprintf(stderr,
                "psctl slurm-task: %s%s%s%s is not set: run inside a Slurm job step (srun)\n",
                name, alt ? " (or " : "", alt ? alt : "", alt ? ")" : "");
    return v && *v ? v : NULL;
}

/* Number of entries of a comma-separated list ("" or NULL: 0). */
static int count_list(const char *s) {
    if (!s || !*s) return 0;
    int n = 1;
    for (; *s; s++)
        n += *s == ',';
    return n;
}

/* Checks the plan against SLURM_LOCALID / SLURMD_NODENAME. Returns 0 or 2 after a message. */
static int check_placement(const ps_slurm_plan *p) {
    const char *lid = getenv("SLURM_LOCALID");
    if (lid && *lid && atol(lid) != p->local_id) {
        fprintf(stderr,
                "psctl slurm-task: task %d: SLURM_LOCALID=%s, but Slurm's block distribution "
                "puts it at %d on %s: run the step with the default (block) distribution\n",
                p->procid, lid, p->local_id, p->host);
        return 2;
    }
    const char *node = getenv("SLURMD_NODENAME");
    if (node && *node && strcmp(node, p->host) != 0) {
        fprintf(stderr,
                "psctl slurm-task: task %d runs on %s, but the block distribution puts it on "
                "%s: run the step with the default (block) distribution\n",
                p->procid, node, p->host);
        return 2;
    }
    return 0;
}

static int build_psd(psctl_argv *a, const slurm_opts *o, const ps_slurm_plan *p,
                     const char *path) {
    psctl_argv_add(a, "%s", path);
    psctl_argv_add(a, "--mode");
    psctl_argv_add(a, "%s", o->mode ? "async" : "sync");
    if (o->checkpoint_dir) {
        char *dir = psctl_checkpoint_subdir(o->checkpoint_dir, p->index);
        if (!dir) return -1;
        if (!o->dry_run && mkdir(o->checkpoint_dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "psctl slurm-task: cannot make %s: %s\n", o->checkpoint_dir,
                    strerror(errno));
            free(dir);
            return 2;
        }
        if (!o->dry_run && mkdir(dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "psctl slurm-task: cannot make %s: %s\n", dir, strerror(errno));
            free(dir);
            return 2;
        }
        psctl_argv_add(a, "--checkpoint-dir");
        psctl_argv_add(a, "%s", dir);
        free(dir);
    }
    if (o->checkpoint_every >= 0) psctl_argv_add(a, "--checkpoint-every=%ld", o->checkpoint_every);
    for (int i = 0; i < o->n_psd_args; i++)
        psctl_argv_add(a, "%s", o->psd_args[i]);
    return a->oom ? -1 : 0;
}

static int build_worker(psctl_argv *a, const slurm_opts *o, const ps_slurm_plan *p,
                        const char *path, char **extra, int n_extra) {
    psctl_argv_add(a, "%s", path);
    if (o->gpus) {
        int visible = count_list(getenv("CUDA_VISIBLE_DEVICES"));
        int dev = visible == 1 ? 0 : p->worker_local_rank;
        if (visible > 1 && dev >= visible) {
            fprintf(stderr,
                    "psctl slurm-task: worker %d is worker %d of %d on %s, but it sees %d GPUs "
                    "(CUDA_VISIBLE_DEVICES=%s): ask Slurm for one GPU per worker\n",
                    p->index, dev, p->node_workers, p->host, visible,
                    getenv("CUDA_VISIBLE_DEVICES"));
            return 2;
        }
        psctl_argv_add(a, "--device=cuda:%d", dev);
    } else {
        psctl_argv_add(a, "--device=cpu");
    }
    if (p->num_ps == 0 && o->checkpoint_dir) {
        psctl_argv_add(a, "--checkpoint-dir");
        psctl_argv_add(a, "%s", o->checkpoint_dir);
    }
    if (p->num_ps == 0 && o->checkpoint_every >= 0)
        psctl_argv_add(a, "--checkpoint-every=%ld", o->checkpoint_every);
    for (int i = 0; i < n_extra; i++)
        psctl_argv_add(a, "%s", extra[i]);
    return a->oom ? -1 : 0;
}

static volatile sig_atomic_t child_pid;

static void pass_on(int sig) {
    if (child_pid > 0) kill((pid_t)child_pid, sig);
}

/* The chief of a psd job: runs psworker as a child, passing SIGTERM/SIGINT on; when it
 * exits 0, stops the shards. Returns the exit code. */
static int run_chief(const char *path, char **args, char **env, const ps_slurm_plan *p,
                     const slurm_opts *o) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = pass_on;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "psctl slurm-task: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        execve(path, args, env);
        fprintf(stderr, "psctl slurm-task: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    child_pid = pid;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "psctl slurm-task: waitpid: %s\n", strerror(errno));
            return 1;
        }
    child_pid = 0;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    int code = WEXITSTATUS(status);
    if (code != 0) return code;
    return psctl_slurm_end_job(p->addr, (size_t)p->num_ps, o->stop_wait_s, o->checkpoint_dir != NULL);
}

int psctl_slurm_task_main(int argc, char **argv) {
    slurm_opts o;
    memset(&o, 0, sizeof o);
    o.mode = -1;
    o.checkpoint_every = -1;
    char err[512];
    unsigned char given[N_OPTIONS] = {0};
    int rest = argc;
    if (ps_options_defaults(table, N_OPTIONS, &o, err, sizeof err) != PS_OK) {
        fprintf(stderr, "psctl slurm-task: %s\n", err);
        return 2;
    }
    int rc = ps_options_parse_args(table, N_OPTIONS, argc, argv, &o, given, "psctl slurm-task",
                                   PS_OPTIONS_ARGS | PS_OPTIONS_AFTER_DASHDASH, &rest, err,
                                   sizeof err);
    if (rc == PS_OPTIONS_HELP || rc == PS_OPTIONS_HELP_MAN) {
        if (rc == PS_OPTIONS_HELP)
            usage(stdout);
        else
            ps_options_help_man(table, N_OPTIONS, exits, N_EXITS, stdout);
        return 0;
    }
    if (rc != PS_OK) {
        fprintf(stderr, "psctl slurm-task: %s\n", err);
        usage(stderr);
        return 2;
    }
    int mode_given = given[ps_options_find(table, N_OPTIONS, "mode") - table];
    if (o.num_ps > 0 && !mode_given) {
        fprintf(stderr, "psctl slurm-task: --ps %ld needs --mode sync|async (psd's)\n", o.num_ps);
        return 2;
    }
    if (o.num_ps == 0 && (mode_given || o.n_psd_args)) {
        fprintf(stderr, "psctl slurm-task: --mode and --psd-arg are psd's: give --ps N too\n");
        return 2;
    }
    if (o.checkpoint_every >= 0 && !o.checkpoint_dir) {
        fprintf(stderr, "psctl slurm-task: --checkpoint-every needs --checkpoint-dir\n");
        return 2;
    }
    const char *tf = getenv("TF_CONFIG");
    if (tf && *tf) {
        fprintf(stderr, "psctl slurm-task: TF_CONFIG is already set; slurm-task builds it from "
                        "Slurm's environment: unset it\n");
        return 2;
    }
    long ntasks = env_long("SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", 1L << 20);
    long procid = ntasks < 0 ? -1 : env_long("SLURM_PROCID", NULL, 1L << 20);
    const char *nodes = procid < 0 ? NULL : env_str("SLURM_STEP_NODELIST", NULL);
    const char *tpn = nodes ? env_str("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") : NULL;
    if (!tpn) return 2;

    ps_slurm_plan plan;
    rc = ps_slurm_plan_make(nodes, tpn, ntasks, procid, o.num_ps, o.base_port, &plan, err,
                            sizeof err);
    if (rc != PS_OK) {
        fprintf(stderr, "psctl slurm-task: task %ld: %s\n", procid, err);
        return 2;
    }
    int exit_code = check_placement(&plan);
    char *tf_config = exit_code ? NULL : ps_slurm_plan_tf_config(&plan);
    char *path = NULL;
    char **env = NULL;
    psctl_argv a = {0};
    if (exit_code) goto done;
    exit_code = 2;
    if (!tf_config) goto oom;
    static const char *const psd_rel[] = {"psd", "../ps-server/psd", NULL};
    static const char *const worker_rel[] = {"../worker/psworker", "psworker", NULL};
    path = plan.is_ps ? psctl_find_binary("psd", "PSD", psd_rel)
                      : psctl_find_binary("psworker", "PSWORKER", worker_rel);
    if (!path) goto done;
    int r = plan.is_ps ? build_psd(&a, &o, &plan, path)
                       : build_worker(&a, &o, &plan, path, argv + rest, argc - rest);
    if (r < 0) goto oom;
    if (r > 0) goto done;
    if (!(env = psctl_env_set(environ, "TF_CONFIG", tf_config))) goto oom;
    if (o.dry_run) {
        printf("task %d: %s %d on %s:%d\nTF_CONFIG=%s\n", plan.procid,
               plan.is_ps ? "psd shard" : (plan.index == 0 ? "chief, worker" : "worker"),
               plan.index, plan.host, plan.port, tf_config);
        for (int i = 0; i < a.n; i++)
            printf("%s%s", i ? " " : "", a.v[i]);
        printf("\n");
        exit_code = 0;
        goto done;
    }
    fprintf(stderr, "psctl slurm-task: task %d is %s %d at %s:%d\n", plan.procid,
            plan.is_ps ? "psd shard" : "worker", plan.index, plan.host, plan.port);
    fflush(stderr);
    if (!plan.is_ps && plan.index == 0 && plan.num_ps > 0) {
        exit_code = run_chief(path, a.v, env, &plan, &o);
        goto done;
    }
    execve(path, a.v, env);
    fprintf(stderr, "psctl slurm-task: cannot run %s: %s\n", path, strerror(errno));
    exit_code = 1;
    goto done;
oom:
    fprintf(stderr, "psctl slurm-task: out of memory\n");
    exit_code = 1;
done:
    psctl_env_free(env);
    psctl_argv_free(&a);
    free(path);
    free(tf_config);
    ps_slurm_plan_free(&plan);
    return exit_code;
}
