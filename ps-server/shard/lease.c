/* The fail-over rule (lease.h). */
#include "lease.h"

void ps_lease_init(ps_lease *l, uint64_t lease_ns, int replica, int replicas) {
    *l = (ps_lease){.lease_ns = lease_ns, .awaiting = replica == 0 && replicas > 1};
    l->role = replica == 0 ? PS_ROLE_PRIMARY : PS_ROLE_BACKUP;
    l->term = replica == 0 ? 1 : 0;
}

void ps_lease_found(ps_lease *l, uint64_t term) {
    l->role = PS_ROLE_PRIMARY;
    l->term = term;
    l->awaiting = 1;
    l->has_backup = 0;
    l->following = 0;
}

int ps_lease_may_ack(const ps_lease *l, uint64_t now) {
    if (l->role != PS_ROLE_PRIMARY || l->awaiting) return 0;
    return !l->has_backup || now - l->acked_sent_ns < l->lease_ns;
}

void ps_lease_backup_joined(ps_lease *l, uint64_t now) {
    l->has_backup = 1;
    l->awaiting = 0;
    l->acked_sent_ns = now;
}

void ps_lease_acked(ps_lease *l, uint64_t sent_ns) {
    if (sent_ns > l->acked_sent_ns) l->acked_sent_ns = sent_ns;
}

int ps_lease_backup_gone(ps_lease *l, uint64_t now) {
    if (l->role != PS_ROLE_PRIMARY || !l->has_backup) return 1;
    if (now - l->acked_sent_ns < l->lease_ns) {
        l->has_backup = 0;
        return 1;
    }
    l->role = PS_ROLE_DEPOSED;
    return 0;
}

void ps_lease_following(ps_lease *l, uint64_t term, uint64_t now) {
    l->role = PS_ROLE_BACKUP;
    l->awaiting = 0;
    l->has_backup = 0;
    l->term = term;
    l->following = 1;
    l->heard_ns = now;
}

void ps_lease_heard(ps_lease *l, uint64_t now) {
    if (now > l->heard_ns) l->heard_ns = now;
}

void ps_lease_tick(ps_lease *l, uint64_t now) {
    if (l->tick_ns && now - l->tick_ns > l->lease_ns / 2 && now > l->heard_ns) l->heard_ns = now;
    l->tick_ns = now;
}

int ps_lease_should_promote(const ps_lease *l, uint64_t now) {
    return l->role == PS_ROLE_BACKUP && l->following &&
           now - l->heard_ns > l->lease_ns + l->lease_ns / 2;
}

void ps_lease_promote(ps_lease *l) {
    l->term++;
    l->role = PS_ROLE_PRIMARY;
    l->has_backup = 0;
    l->awaiting = 0;
    l->following = 0;
}

int ps_lease_observe_term(ps_lease *l, uint64_t term) {
    if (term <= l->term) return 0;
    l->term = term;
    l->role = PS_ROLE_DEPOSED;
    l->has_backup = 0;
    l->following = 0;
    return 1;
}
