/* Ties a child process's life to its supervisor (psctl local): when the
 * environment names a parent pid, the kernel sends SIGTERM if that parent dies;
 * and keeps a dead supervisor's closed pipes from killing it (SIGPIPE). */
#ifndef PS_LIFETIME_H
#define PS_LIFETIME_H

/* Environment variable psctl sets in every child: its own pid. */
#define PS_PARENT_PID_ENV "PS_PARENT_PID"

/* If $PS_PARENT_PID is set: asks for SIGTERM on parent death, and raises SIGTERM
 * at once if the parent is already gone. No effect otherwise. */
void ps_die_with_parent(void);

/* Ignores SIGPIPE, so that writing to a closed stdout/stderr (a supervisor that died
 * with the read ends of our pipes) fails with EPIPE instead of killing the process
 * before it can shut down cleanly (psd's final checkpoint). */
void ps_ignore_sigpipe(void);

#endif
