/* psctl, the operator's tool: dispatches to its commands (`local` runs a whole cluster
 * on this machine; `scale` changes an elastic one's workers; `checkpoint`, `shutdown` and
 * `status` talk to the shards of a running
 * job; `data` inspects, times and converts datasets; `keygen` makes CurveZMQ keys; `slurm-task` is each task of a Slurm job step). */
#include "admin.h"
#include "data_cmd.h"
#include "keygen.h"
#include "lifetime.h"
#include "local.h"
#include "log.h"
#include "scale.h"
#include "slurm_task.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the command name; returns the exit code */
    const char *summary;
} command;

static const command commands[] = {
    {"local", psctl_local_main, "run psd shards and workers on this machine until training ends"},
    {"checkpoint", psctl_checkpoint_main, "ask every psd shard of a job to write a checkpoint now"},
    {"shutdown", psctl_shutdown_main, "ask every psd shard of a job to stop"},
    {"scale", psctl_scale_main, "change the number of workers of a running elastic psctl local job"},
    {"status", psctl_status_main, "show every psd shard's state and counters (or --json)"},
    {"data", psctl_data_main,
     "inspect, time or convert what psworker --data reads (image folders, TFRecord, ...)"},
    {"keygen", psctl_keygen_main, "make a CurveZMQ key pair (NAME.key, NAME.pub) for psd/workers"},
    {"slurm-task", psctl_slurm_task_main,
     "run by every task of a Slurm step: become its psd shard or worker"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: psctl COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'psctl COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv) {
    ps_log_set_tag("psctl");
    /* A closed stdout must not kill the supervisor (children get SIG_DFL back and
     * ignore it again themselves). */
    ps_ignore_sigpipe();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "psctl: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
