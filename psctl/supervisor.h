/* The psctl local supervisor: one libuv loop starts the psd shards, waits for their
 * ready files, starts the workers, relays all output and stops everything at the end. */
#ifndef PSCTL_SUPERVISOR_H
#define PSCTL_SUPERVISOR_H

#include "local.h"

/* Everything the supervisor needs; nothing here is owned by it. */
typedef struct {
    const psctl_local_opts *opts;
    const char *psd_path;    /* executable for the shards */
    const char *worker_path; /* executable for the workers */
    const char *run_dir;     /* existing private directory for ready files */
    const char *sock_dir;    /* --transport ipc: existing private directory for the shards'
                                sockets (DIR/psd-<i>.sock); NULL: tcp on 127.0.0.1 */
    int ready_timeout_ms;    /* how long the shards get to write their ready files */
    const char *ckpt_dir;    /* all-reduce: the workers' --checkpoint-dir (existing) */
} psctl_job;

/* Runs the job to its end; never leaves a child running. Returns the exit code for
 * psctl: 0 all workers finished and every psd stopped cleanly, 1 a process failed, a
 * deadline passed or the loop could not be set up, 128+signal after SIGINT/SIGTERM. */
int psctl_supervise(const psctl_job *job);

#endif
