/* The fail-over rule of a replicated shard (docs/ARCHITECTURE.md, "Replicated
 * shards") as plain state and time, no I/O: who may acknowledge updates, and
 * when a backup takes over. Times are ns on the caller's monotonic clock; each
 * process compares only its own times, so the two clocks need not agree, only
 * run at rates within a factor 1.5 of each other.
 *
 * The rule. A term has at most one primary: the replica 0 of a fresh group is the
 * primary of term 1, and a backup becomes the primary of term t+1 only after
 * 1.5 x lease without hearing from the primary of term t. The primary
 * acknowledges (sends any reply) only while its lease holds: every backup in its
 * view acknowledged a message the primary sent less than one lease ago. A
 * backup's silence clock restarts at each message it receives, which is after
 * the primary sent it; so when a backup may take over, the primary's lease on
 * it ended at least 0.5 lease before, and from then on the old primary sends
 * nothing. It may only drop a backup from its view (and go on alone) when the
 * backup's connection closes while the lease still holds: a process that is
 * gone takes its state with it and can never take over. A replica that learns
 * of a higher term steps down for good. */
#ifndef PS_LEASE_H
#define PS_LEASE_H

#include <stdint.h>

typedef enum {
    PS_ROLE_PRIMARY = 0, /* serves requests and streams the log to its backups */
    PS_ROLE_BACKUP,      /* applies the primary's log; answers requests ENOTPRIMARY */
    PS_ROLE_DEPOSED,     /* a primary that learned of a higher term: serves nothing */
} ps_role;

typedef struct {
    uint64_t lease_ns;
    uint64_t term;
    ps_role role;
    /* primary */
    int has_backup;         /* a backup is in the view */
    int awaiting;           /* a fresh group's primary: no reply until its backup follows */
    uint64_t acked_sent_ns; /* when the newest message the backup acknowledged was sent */
    /* backup */
    int following;     /* the primary of `term` accepted it (FollowReply) */
    uint64_t heard_ns; /* when the primary was last heard */
    uint64_t tick_ns;  /* when the backup's timer last ran */
} ps_lease;

/* A fresh replica of a group of `replicas`: replica 0 is the primary of term 1
 * (acknowledging nothing until its backup follows), the others backups waiting to
 * follow it. */
void ps_lease_init(ps_lease *l, uint64_t lease_ns, int replica, int replicas);
/* Founds a fresh group: the primary of `term`, acknowledging nothing until a backup
 * follows (a replica that found no primary among its peers). */
void ps_lease_found(ps_lease *l, uint64_t term);
/* Primary: 1 when it may acknowledge (its lease holds, or no backup is in its view
 * once the group was complete). */
int ps_lease_may_ack(const ps_lease *l, uint64_t now);
/* Primary: a backup joined the view at `now` (its clock starts at the FollowReply). */
void ps_lease_backup_joined(ps_lease *l, uint64_t now);
/* Primary: the backup acknowledged a message sent at sent_ns. */
void ps_lease_acked(ps_lease *l, uint64_t sent_ns);
/* Primary: the backup's connection closed. 1: dropped from the view, go on alone;
 * 0: the lease had lapsed (the backup may have taken over): stepped down. */
int ps_lease_backup_gone(ps_lease *l, uint64_t now);
/* Backup (or a founder still awaiting its backup): the primary of `term`
 * accepted it, at `now`; it follows that primary from now on. */
void ps_lease_following(ps_lease *l, uint64_t term, uint64_t now);
/* Backup: a message of its primary arrived at `now`. */
void ps_lease_heard(ps_lease *l, uint64_t now);
/* Backup: its timer runs at `now`. A stall of its own since the last run (the
 * process was stopped, the machine overloaded) longer than half a lease restarts
 * the silence clock: what the primary sent meanwhile may not have been read yet.
 * (Waiting longer is always safe; only taking over early is not.) */
void ps_lease_tick(ps_lease *l, uint64_t now);
/* Backup: 1 when it must take over now (it follows, and the primary has been
 * silent for 1.5 x lease). */
int ps_lease_should_promote(const ps_lease *l, uint64_t now);
/* Backup: takes over: primary of term + 1, with no backup. */
void ps_lease_promote(ps_lease *l);
/* A message of term `term` arrived: a higher one than ours deposes a primary or
 * a backup for good (returns 1); the same or lower changes nothing (0). */
int ps_lease_observe_term(ps_lease *l, uint64_t term);

#endif
