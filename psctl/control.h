/* psctl local's control socket (elastic jobs): RUNDIR/control.sock, where `psctl scale`
 * asks the supervisor to change the number of workers. One request per connection, one
 * line each way:
 *     scale K\n          ->  ok MESSAGE\n  |  error MESSAGE\n
 * Scaling up starts workers at the free slots, in index order; scaling down stops the
 * highest-index workers with SIGTERM (psworker --elastic leaves after its step with a
 * Goodbye); K must lie in [--workers-min, slots]. */
#ifndef PSCTL_CONTROL_H
#define PSCTL_CONTROL_H

#include <stddef.h>

#define PSCTL_CONTROL_SOCKET "control.sock" /* in psctl local's run directory */
#define PSCTL_CONTROL_LINE_MAX 512

struct sup;

/* Listens on path (the supervisor's loop; the handle does not keep the loop running).
 * Returns 0 or a negative libuv error. */
int psctl__control_open(struct sup *sv, const char *path);
/* Closes the socket and any connection still open (their close callbacks run on the
 * loop). */
void psctl__control_close(struct sup *sv);

/* Changes the number of workers of sv's job to k. Returns 0 with what it did in msg, or
 * -1 with why it refused. */
int psctl__scale(struct sup *sv, long k, char *msg, size_t n);

#endif
