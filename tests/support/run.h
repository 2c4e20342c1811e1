/* One process runner for the tests: run a command with extra environment, capture its
 * stdout and stderr until it exits (or a deadline passes), optionally act on it while it
 * runs; and the bookkeeping of processes that record their pids in a directory. */
#ifndef PS_TEST_RUN_H
#define PS_TEST_RUN_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    int status;   /* wait status */
    int finished; /* exited and its output reached end of file */
    double secs;  /* how long it ran */
    pid_t pid;
    char *out, *err; /* all it wrote, NUL-terminated (owned; ps_test_run_free frees) */
    size_t out_len, err_len;
} ps_test_run_result;

/* Called on every turn of ps_test_run's loop while the process runs. */
typedef void (*ps_test_run_hook)(const ps_test_run_result *r, void *ctx);

/* Runs exe with args (NULL-terminated, args[0] included; stdin /dev/null; SIGTERM should
 * this process die) and extra env entries ("K=V"; "K=" unsets K), capturing its output
 * until it exits and its pipes close, or until deadline_s seconds pass (then it is killed
 * and r->finished stays 0). hook (may be NULL) is called with ctx while it runs. */
void ps_test_run(const char *exe, const char *const *args, const char *const *env,
                 double deadline_s, ps_test_run_hook hook, void *ctx, ps_test_run_result *r);
/* Frees r's output and clears it. */
void ps_test_run_free(ps_test_run_result *r);
/* r's exit status (0..255), or 128+signal. */
int ps_test_run_exit_code(const ps_test_run_result *r);

/* Hook context: send sig once every one of markers (NULL-terminated) appears in the
 * process's stdout or stderr. */
typedef struct {
    const char *const *markers;
    int sig;
    int sent;
} ps_test_signal_when;
/* The hook for ps_test_signal_when (ctx). */
void ps_test_signal_when_seen(const ps_test_run_result *r, void *ctx);

/* Seconds on the monotonic clock. */
double ps_test_now_s(void);
/* Reaps every exited child (a subreaper also gets orphaned grandchildren). */
void ps_test_reap_all(void);
/* 1 if pid exists and is not a zombie. */
int ps_test_proc_alive(pid_t pid);
/* SIGKILL to pid when ps_test_proc_alive; returns 1 then, else 0. */
int ps_test_kill_if_alive(pid_t pid);
/* Calls fn(pid) for every pid recorded in dir (files pid.*, each holding one pid);
 * returns the sum of what fn returned. */
int ps_test_for_each_recorded(const char *dir, int (*fn)(pid_t));
/* Reaps and waits up to timeout_ms until no process recorded in dir is alive; returns
 * how many still are. */
int ps_test_recorded_alive_after_wait(const char *dir, int timeout_ms);

#endif
