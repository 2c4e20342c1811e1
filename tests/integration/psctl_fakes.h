/* What the psctl supervision tests (test_psctl_restart, test_psctl_flags,
 * test_psctl_admin) share: fake psd/psworker shell scripts that record their pids, argv and
 * starts in the test's dir, psctl run against them (the kit's runner, run.h), fake shards
 * (a ROUTER in a thread of the test) and the fixtures. */
#ifndef PS_TEST_PSCTL_FAKES_H
#define PS_TEST_PSCTL_FAKES_H

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/types.h>

#include "raw.h"
#include "run.h"

extern char *tdir; /* this test's temp dir: scripts, pid files, argv records */
extern char fake_psd_path[4096], fake_worker_path[4096];

/* Calls fn(pid) for every process recorded in tdir; returns the sum. */
int for_each_recorded(int (*fn)(pid_t));
/* Waits (up to 3 s) until no recorded process is alive; returns how many still are. */
int recorded_alive_after_wait(void);
/* Runs psctl with the fakes as PSD/PSWORKER (plus extra env, TF_CONFIG unset), bounded by
 * 30 s; hook (may be NULL) is called with ctx while it runs. */
void run_psctl(const char *const *args, const char *const *env, ps_test_run_hook hook, void *ctx,
               ps_test_run_result *r);
/* Hook: SIGTERM to the process once the text ctx appears on its stderr. */
void term_on_marker(const ps_test_run_result *r, void *ctx);
/* The lines of tdir/name (at most 16, each malloc'd); returns how many. */
int read_lines(const char *name, char *lines[16]);
void free_lines(char *lines[16], int n);
/* How many lines tdir/name has (at most 16). */
int count_lines(const char *name);
/* Removes the argv/start records of earlier runs in this test's dir. */
void forget_runs(void);

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "missing \"%s\" in:\n%s", (needle), (hay))
#define ck_assert_lacks(hay, needle)                                                               \
    ck_assert_msg(strstr((hay), (needle)) == NULL, "unexpected \"%s\" in:\n%s", (needle), (hay))

/* ---- fake shards: a ROUTER in a thread that answers as told ----------------------- */

typedef enum {
    SHARD_OK,           /* checkpoint_reply / shutdown_reply */
    SHARD_ERROR,        /* an Error reply */
    SHARD_SILENT,       /* reads the request, never answers */
    SHARD_OLD_ID_FIRST, /* a reply with another request id first, then the right one */
} shard_behaviour;

typedef struct {
    shard_behaviour behaviour;
    raw_router router;      /* the kit's ROUTER in a thread; router.endpoint: "127.0.0.1:PORT" */
    atomic_int requests;    /* requests received */
    atomic_int last_body;   /* body case of the last request */
    atomic_uint last_proto; /* its protocol_version */
} fake_shard;

#define MAX_SHARDS 4
extern fake_shard shards[MAX_SHARDS];

/* Starts fake shard i (bound to 127.0.0.1, any port) answering as b. */
fake_shard *shard_start(int i, shard_behaviour b);
/* Stops it (no-op when not running). */
void shard_stop(fake_shard *s);

/* Fixtures. base_setup/base_teardown (unchecked: a failed assertion ends a test with _exit,
 * so neither the checked teardown nor atexit runs) give each TCase a base dir that $TMPDIR
 * points into, and afterwards kill every process recorded in any test dir under it and
 * remove it all. setup/teardown make and remove the test's dir with the fake scripts. */
void base_setup(void);
void base_teardown(void);
void setup(void);
void teardown(void);
/* A TCase with those fixtures and a 60 s timeout. */
TCase *psctl_fakes_tcase(const char *name);

#endif
