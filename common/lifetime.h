/* Ties a child process's life to its supervisor (psctl local): when the
 * environment names a parent pid, the kernel sends SIGTERM if that parent dies. */
#ifndef PS_LIFETIME_H
#define PS_LIFETIME_H

/* Environment variable psctl sets in every child: its own pid. */
#define PS_PARENT_PID_ENV "PS_PARENT_PID"

/* If $PS_PARENT_PID is set: asks for SIGTERM on parent death, and raises SIGTERM
 * at once if the parent is already gone. No effect otherwise. */
void ps_die_with_parent(void);

#endif
