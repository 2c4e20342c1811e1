/* Real processes for integration tests: start psd and workers, wait for
 * conditions with deadlines (never sleep-and-hope), and kill what is left. */
#ifndef PS_TEST_PROC_H
#define PS_TEST_PROC_H

#include <sys/types.h>

#include "testutil.h"

typedef struct {
    pid_t pid;
    char endpoint[128]; /* "127.0.0.1:PORT" once ready */
    char dir[512];      /* private temp dir (ready file, log) */
    char log[600];      /* stdout+stderr of the process */
} ps_test_psd;

/* Sets PS_PARENT_PID to this process, so that psd, psworker and psctl started from now on
 * die with it (even when a failed assertion ends the test early). */
void ps_test_children_die_with_me(void);

/* Starts $PSD --bind 127.0.0.1 --port 0 --ready-file ... plus extra_args
 * (NULL-terminated, may be NULL) and waits up to timeout_ms for it to listen.
 * Returns 0, or -1 (the process is killed, the reason printed). */
int ps_test_psd_start(ps_test_psd *p, const char *const *extra_args, int timeout_ms);
/* Starts psd again in the same temp dir (log appended) on the port it had,
 * with extra_args; waits for it to listen like ps_test_psd_start. */
int ps_test_psd_restart(ps_test_psd *p, const char *const *extra_args, int timeout_ms);
/* SIGKILL and reap; keeps the temp dir (and the log) for a restart. */
void ps_test_psd_kill(ps_test_psd *p);
/* SIGTERM, wait up to timeout_ms, then SIGKILL. Returns the exit status (0..255),
 * 128+signal when killed by a signal, or -1. Removes the temp dir. */
int ps_test_psd_stop(ps_test_psd *p, int timeout_ms);

/* Forks and execs argv with stdout+stderr appended to out_path (or /dev/null).
 * Returns the pid, or -1. */
pid_t ps_test_spawn(const char *const *argv, const char *out_path);
/* Runs argv to completion with stdout+stderr appended to out_path (or /dev/null): checks
 * that it started and exited within timeout_ms (else it is killed and the test fails).
 * Returns its exit status, or 128+signal. */
int ps_test_run_to(const char *const *argv, const char *out_path, int timeout_ms);
/* Waits up to timeout_ms for pid; on timeout kills it (SIGKILL) and returns -1.
 * Otherwise returns its exit status, or 128+signal. */
int ps_test_wait(pid_t pid, int timeout_ms);
/* 1 when the process is still there (not yet reaped), 0 otherwise. */
int ps_test_alive(pid_t pid);
/* Waits up to timeout_ms for the file at path to have a first line (psd's ready file,
 * written whole by a rename): copies it, without its newline, into buf[0..n) and returns
 * 1. Returns 0 (buf "") when the time is up or pid (when > 0) is no longer alive first. */
int ps_test_wait_first_line(const char *path, pid_t pid, char *buf, size_t n, int timeout_ms);
/* Prints a file to stderr (for failure diagnostics). */
void ps_test_dump(const char *path);
/* The pid of a child of `parent` whose command line holds the argument arg followed
 * by the argument value (e.g. "--shard", "1"), or 0. Reads /proc. */
pid_t ps_test_find_child(pid_t parent, const char *arg, const char *value);
/* The pid of a child of `parent` one of whose environment entries contains text (e.g.
 * "\"index\": 1}" for the worker psctl gave that TF_CONFIG), or 0. Reads /proc. */
pid_t ps_test_find_child_env(pid_t parent, const char *text);
/* 1 when $PSD was linked with libsystemd (built with -Dsystemd=auto|enabled and
 * found), so it sends sd_notify messages; else 0. */
int ps_test_psd_has_libsystemd(void);
/* Waits up to timeout_ms for a process that need not be our child (e.g. a grandchild
 * reparented to us as subreaper) to be gone, reaping it if it is ours. Returns its
 * exit status as ps_test_wait does when we reaped it, 0 when it is gone otherwise,
 * -1 when it is still there. */
int ps_test_wait_gone(pid_t pid, int timeout_ms);

#endif
