/* psctl local's supervisor inside: the state of the job and its children, shared by
 * supervisor.c (start, relay, restart one process, stop), regroup.c (an all-reduce
 * job's workers restart as one) and control.c (psctl scale's socket). Not an API: only
 * these files include it. */
#ifndef PSCTL_SUPERVISOR_IMPL_H
#define PSCTL_SUPERVISOR_IMPL_H

#include "relay.h"
#include "supervisor.h"

#include <stdint.h>
#include <uv.h>

#define READY_POLL_MS 50
#define FINISH_GRACE_MS 10000 /* shards get this long to stop after the workers finished */
#define ABORT_GRACE_MS 5000   /* everyone gets this long to stop after a failure */
#define KILL_GRACE_MS 5000    /* after SIGKILL, before giving up on a process */
#define DRAIN_MS 2000         /* output pipes may stay open this long after the last exit */
#define RESTART_DELAY_MS 200  /* before the first restart of a process; doubles with each */
#define RESTART_DELAY_MAX_MS 5000
#define EXIT_BAD_CONFIG 2 /* our programs' "bad configuration": restarting cannot help */
#define EXIT_LOST 4       /* psworker: a shard lost the job's variables (PS_ELOST) */
#define EXIT_RING 3       /* psworker, all-reduce: the ring broke (a symptom, not a cause) */

typedef enum { CHILD_PSD, CHILD_WORKER } child_kind;

/* Room for an endpoint from a ready file: "host:port" or "ipc://" + a socket path. */
#define PSCTL_ENDPOINT_MAX 128

typedef enum {
    PHASE_STARTING,   /* shards started, waiting for their ready files */
    PHASE_RUNNING,    /* workers started */
    PHASE_REGROUPING, /* all-reduce: a worker failed; stopping the others to restart all */
    PHASE_FINISHING,  /* every worker succeeded: stopping the shards */
    PHASE_ABORTING,   /* failure, signal or deadline: stopping everything */
    PHASE_DONE        /* no child left running */
} phase;

/* A pipe (or process handle) must be fully closed before a restart initialises it again. */
enum { PIPE_NONE, PIPE_OPEN, PIPE_CLOSING, PIPE_CLOSED };

struct sup;

typedef struct {
    struct sup *sv;
    child_kind kind;
    int index;             /* psd: its shard; worker: its index */
    int replica;           /* psd: its index in its shard's group (0 unless --replicas > 1) */
    char label[48];        /* "psd 0", "psd 0 replica 1", "worker 1" */
    uv_process_t proc;     /* initialised by uv_spawn, even when it fails */
    uv_pipe_t pipes[2];    /* read side of the child's stdout and stderr */
    psctl_relay relays[2]; /* to psctl's stdout and stderr */
    int pipe_state[2];
    int proc_open; /* proc initialised and its close callback not run yet */
    int running;   /* spawned and not yet exited (or given up on) */
    int stop_sent; /* psctl signalled it (a signal death is then ours, not a fault) */
    int pid;
    int restarts;             /* restarts so far */
    int restart_pending;      /* restart_timer is armed */
    uv_timer_t restart_timer; /* data: this child */
    /* psd only: */
    char *ready_path;
    char *ipc_path;     /* --transport ipc: its socket, the same for every start; NULL: tcp */
    int awaiting_ready; /* started; its ready file has not been read yet */
    uint64_t ready_deadline;
    int port; /* tcp: from the first ready file; restarts ask for it again */
    /* "host:port" or "ipc://PATH" from the first ready file: what the workers use */
    char endpoint[PSCTL_ENDPOINT_MAX];
    /* --replicas > 1: the address chosen before the start, in its group's --peers, that
     * its ready file must report; "" otherwise */
    char addr[PSCTL_ENDPOINT_MAX];
    int gone; /* a replica that exited once up and is not restarted: its group goes on */
    /* worker only: */
    int scaled_down; /* psctl scale stopped it (SIGTERM): its exit is no failure, no restart */
} child;

typedef struct sup {
    uv_loop_t loop; /* first member: a handle's loop pointer leads back here */
    const psctl_job *job;
    child *children; /* the npsd psd processes (shard by shard, replica by replica), then
                        the num_workers workers */
    int nchildren;
    int npsd;     /* num_ps * replicas */
    int replicas; /* psd processes per shard (--replicas) */
    char **peers; /* replicas > 1: each shard's addresses, "A,B,..." (owned); else NULL */
    int workers_ok; /* workers that exited 0 */
    int workers_active; /* workers in the job: started, not stopped by psctl scale (the
                           first workers_active slots); the job ends when all exited 0 */
    struct psctl_control *control; /* psctl scale's socket (elastic jobs), or NULL */
    phase phase;
    phase end_phase; /* the phase the job was in when the last child exited */
    int exit_code;
    int signals;       /* SIGINT/SIGTERM received */
    int unclean;       /* a shard did not stop cleanly after the job finished */
    int kill_stage;    /* 0: SIGTERM sent, 1: SIGKILL sent */
    int stop_grace_ms; /* the SIGTERM grace of the current stop */
    int open_handles;  /* initialised handles whose close callback has not run */
    char *endpoints;   /* the workers' --ps list once every shard was ready (owned) */
    /* all-reduce: */
    int *ports;          /* num_workers ring ports on 127.0.0.1, fresh for every start */
    int regroups;        /* restarts of the whole set of workers so far */
    int regroup_pending; /* regroup_timer is armed (or will be once all have stopped) */
    uv_timer_t regroup_timer;
    int culprit;          /* the worker whose failure started the regroup */
    char culprit_how[96]; /* "was killed by signal 9", "exited with status 1" */
    int culprit_ring;     /* the culprit exited EXIT_RING (another may be the cause) */
    uv_timer_t ready_timer, stop_timer, timeout_timer, drain_timer;
    uv_signal_t sigint, sigterm;
    psctl_screen screen;
    char **env;     /* every child's: psctl's own plus PS_PARENT_PID */
    char **psd_env; /* the shards': env without TF_CONFIG (their flags say it all) */
    int stdout_tty;
    char readbuf[65536];
} sup;

/* "psctl: <message>" on stderr, after ending any line drawn in place. */
void psctl__say(sup *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "<label> killed by signal 9" or "<label> <verb> (exit status 3)". */
void psctl__describe_exit(char *buf, size_t n, const child *c, const char *verb, int64_t status,
                          int sig);
/* Flushes and closes the read side of c's stdout (k 0) or stderr (k 1), if open. */
void psctl__close_pipe(child *c, int k);
/* Signals c's process group (and marks c stop_sent) when it runs. */
void psctl__signal_child(child *c, int sig);
/* Stops the job because of a failure (see supervisor.c). */
void psctl__abort_job(sup *sv, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends the run once nothing runs or waits to be (re)started. */
void psctl__check_done(sup *sv);
/* Starts every worker (all-reduce: on fresh ring ports); phase RUNNING. */
void psctl__start_workers(sup *sv);
/* Starts (or restarts) worker c. Returns 0 or a negative libuv error (printed). */
int psctl__start_worker(sup *sv, child *c);
/* The workers' exits so far make the job finished: stops the shards (phase FINISHING)
 * once every active worker exited 0. */
void psctl__workers_maybe_done(sup *sv);
/* SIGKILLs what still runs after grace_ms (the stop timer, kill stage 0). */
void psctl__arm_kill_timer(sup *sv, int grace_ms);

/* regroup.c: a worker of an all-reduce job failed while it ran (phase RUNNING) / exited
 * while the others are stopped for a restart (phase REGROUPING). */
void psctl__ring_worker_failed(sup *sv, child *c, int64_t status, int sig);
void psctl__ring_worker_stopped(sup *sv, child *c, int64_t status, int sig);

#endif
