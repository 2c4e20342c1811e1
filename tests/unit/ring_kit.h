/* What the ring tests share: a ring configuration on free 127.0.0.1 ports,
 * ranks as forked processes (they die with the test), reports and results in
 * shared memory, and waiting for the ranks with a deadline. */
#ifndef PS_TEST_RING_KIT_H
#define PS_TEST_RING_KIT_H

#include <stddef.h>
#include <sys/types.h>

#include "ring.h"

#define RK_MAX_RANKS 4

typedef struct {
    ps_ring_config cfg;
    char eps[RK_MAX_RANKS][40];
    const char *ep_ptrs[RK_MAX_RANKS];
    char job[40];
} rk_ring;

/* What a rank process tells the test: the return code and reason of the step
 * that failed (stage names it), or rc 0 with stage "done". */
typedef struct {
    int rc;
    char stage[64];
    char err[700];
    long long ms; /* how long the failing call took */
} rk_report;

/* size ranks on free ports, job "job-<pid>", timeouts of a few seconds. */
void rk_ring_init(rk_ring *k, unsigned size, ps_ring_transport t);
/* ps_ring_open for rank (cfg.rank set on a copy). */
int rk_open(const rk_ring *k, unsigned rank, ps_ring **out, char *err, size_t errlen);
/* Zeroed memory shared with forked children (munmap with rk_unshare). */
void *rk_share(size_t bytes);
void rk_unshare(void *p, size_t bytes);
/* Forks a rank: the child sends stderr (the ring's log) to log_path (NULL:
 * keep), runs fn(ctx, rank) and exits with its result (0 = success). */
pid_t rk_fork(int (*fn)(void *ctx, unsigned rank), void *ctx, unsigned rank, const char *log_path);
/* Waits for pid up to timeout_ms (then SIGKILL): its exit status, 128+signal,
 * or -1 on timeout. */
int rk_wait(pid_t pid, int timeout_ms);
/* Records a failure in rep (rc, stage, err) and returns 1; for rank bodies. */
int rk_fail(rk_report *rep, int rc, const char *stage, const char *err);

#endif
