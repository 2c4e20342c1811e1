/* Child processes die with their supervisor, and survive its closed pipes (see
 * lifetime.h). */
#include "lifetime.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

void ps_die_with_parent(void) {
    const char *s = getenv(PS_PARENT_PID_ENV);
    if (!s || !*s) return;
    long want = strtol(s, NULL, 10);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (want > 0 && getppid() != (pid_t)want) raise(SIGTERM);
}

void ps_ignore_sigpipe(void) {
    signal(SIGPIPE, SIG_IGN);
}
