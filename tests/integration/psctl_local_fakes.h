/* What the `psctl local` tests (test_psctl_local, test_psctl_local_gpus) share: fake
 * psd/psworker shell scripts that record their pids in the test's dir, psctl run against
 * them (the kit's runner, run.h), and the fixture. */
#ifndef PS_TEST_PSCTL_LOCAL_FAKES_H
#define PS_TEST_PSCTL_LOCAL_FAKES_H

#include <check.h>
#include <string.h>
#include <sys/types.h>

#include "run.h"

extern char *tdir; /* this test's temp dir: scripts, pid files, summary */
extern char fake_psd_path[4096], fake_worker_path[4096];

/* Counts a pid (for for_each_fake). */
int count_one(pid_t pid);
/* Calls fn(pid) for every pid recorded in the temp dir; returns how many fn counted. */
int for_each_fake(int (*fn)(pid_t));
/* Waits (up to 3 s) until no recorded fake is alive; returns how many still are. */
int fakes_alive_after_wait(void);
/* Runs psctl with the fakes as PSD/PSWORKER (plus extra env), bounded by 30 s; act (may be
 * NULL) signals it once its markers appear. */
void run_psctl(const char *const *args, const char *const *env, ps_test_signal_when *act,
               ps_test_run_result *r);
/* Every line of text starts with one of the prefixes. */
void assert_prefixed(const char *text, const char *const *prefixes);

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "missing \"%s\" in:\n%s", (needle), (hay))

/* The fixture: a temp dir with the fake scripts (removed, and every recorded process
 * killed, at teardown or when a failed assertion ends the test process). */
void setup(void);
void teardown(void);
/* A TCase with that fixture and a timeout of timeout_s seconds. */
TCase *psctl_local_tcase(const char *name, double timeout_s);

#endif
