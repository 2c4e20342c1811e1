/* libps replica groups: a shard served by R psd replicas (one primary, R-1 backups). The
 * group's addresses come from a '|' entry of the shard list; a socket monitor watches the
 * connection to the replica in use, and a fail-over moves on, replica after replica, until
 * one answers Hello as the primary of the newest term. The request engine (conn.c) decides
 * when; this file does the moving. */
#include "client_impl.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "tfconfig.h"

int ps__replicas_parse(shard_conn *s, size_t i, const char *entry, char *err, size_t errlen) {
    ps_replica_part parts[PS_MAX_REPLICAS];
    size_t n;
    char why[256];
    if (ps_replicas_split(entry, parts, &n, why, sizeof why) != PS_OK) {
        snprintf(err, errlen, "endpoint %zu '%.200s': %s", i, entry ? entry : "(null)", why);
        return PS_EINVAL;
    }
    for (size_t k = 0; k < n; k++) {
        char addr[PS_ENDPOINT_SIZE];
        char label[32] = ""; /* names the replica only in a group */
        if (n > 1) snprintf(label, sizeof label, " replica %zu", k);
        if (parts[k].len + sizeof "tcp://" > sizeof addr) {
            snprintf(err, errlen, "endpoint %zu%s '%.40s...': longer than %zu bytes", i, label,
                     parts[k].at, sizeof addr - sizeof "tcp://");
            return PS_EINVAL;
        }
        memcpy(addr, parts[k].at, parts[k].len);
        addr[parts[k].len] = '\0';
        const char *ipc = ps_ipc_path(addr);
        int port = 0;
        if (ipc && ps_check_ipc_path(ipc, why, sizeof why) != PS_OK) {
            snprintf(err, errlen, "endpoint %zu%s '%s': %s", i, label, addr, why);
            return PS_EINVAL;
        }
        if (!ipc && (ps_parse_hostport(addr, NULL, 0, &port) != PS_OK || port == 0)) {
            snprintf(err, errlen,
                     "endpoint %zu%s '%.200s' is not HOST:PORT (port 1..65535) or ipc://PATH", i,
                     label, addr);
            return PS_EINVAL;
        }
        strcpy(s->replicas[k], ipc ? "" : "tcp://"); /* fits: the length was checked */
        strcat(s->replicas[k], addr);
    }
    s->n_replicas = n;
    s->replica = s->primary = 0;
    s->endpoint = s->replicas[0];
    return PS_OK;
}

/* The connection events a fail-over acts on: gone, or refused (a replica that is down). */
#define WATCHED (ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED)

int ps__monitor_open(ps_client *c, shard_conn *s) {
    if (!ps__replicated(s)) return PS_OK;
    char name[64];
    snprintf(name, sizeof name, "inproc://ps-monitor-%llu", (unsigned long long)c->monitor_seq++);
    if (zmq_socket_monitor(s->sock, name, WATCHED) != 0) return PS_ENOMEM;
    s->monitor = zmq_socket(c->zctx, ZMQ_PAIR);
    if (!s->monitor) return PS_ENOMEM;
    int linger = 0;
    zmq_setsockopt(s->monitor, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(s->monitor, name) != 0) {
        zmq_close(s->monitor);
        s->monitor = NULL;
        return PS_ENOMEM;
    }
    s->link_down = 0;
    return PS_OK;
}

void ps__monitor_drain(shard_conn *s) {
    while (s->monitor) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, s->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        /* frame 1: uint16 event, uint32 value; frame 2: the endpoint */
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= sizeof event) memcpy(&event, zmq_msg_data(&ev), sizeof event);
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) {
            zmq_msg_init(&addr);
            zmq_msg_recv(&addr, s->monitor, ZMQ_DONTWAIT);
            zmq_msg_close(&addr);
        }
        if (event == ZMQ_EVENT_CONNECTED) s->link_down = 0;
        if (event == ZMQ_EVENT_DISCONNECTED || event == ZMQ_EVENT_CONNECT_RETRIED) s->link_down = 1;
    }
}

int ps__not_primary(const shard_conn *s, const Ps__Welcome *w) {
    if (!ps__replicated(s) || w->replicas <= 1) return 0; /* a plain shard is always the one */
    return !w->primary || w->term < s->term;
}

void ps__primary_found(ps_client *c, size_t i, const Ps__Welcome *w, const char *what) {
    shard_conn *s = &c->shards[i];
    if (!ps__replicated(s)) return; /* (a psd without replication ends a fail-over too) */
    int changed = s->replica != s->primary || w->term != s->term;
    if (s->failover && changed)
        CL_INFO("%s: psd %zu: replica %zu at %s is the primary now (term %llu)", what, i,
                s->replica, ps__shard_addr(s), (unsigned long long)w->term);
    if (w->term > s->term) s->term = w->term;
    s->primary = s->replica;
    s->failover = 0;
    s->failover_steps = 0;
    ps_heartbeat_follow(c->heartbeat, i, s->endpoint);
}

uint64_t ps__probe_wait_ms(const ps_client *c, const shard_conn *s) {
    uint64_t wait = 2000;
    if (s->failover) { /* 0.5 s on the first round of the group, +0.5 s each round after */
        uint64_t rounds = s->failover_steps / (s->n_replicas ? s->n_replicas : 1);
        wait = 500 * (rounds + 1);
        if (wait > 2000) wait = 2000;
    }
    return (uint64_t)c->attempt_ms < wait ? (uint64_t)c->attempt_ms : wait;
}

void ps__failover_next(ps_client *c, size_t i, const char *why, const char *what, uint64_t now) {
    shard_conn *s = &c->shards[i];
    if (!s->failover) {
        CL_DEBUG("%s: psd %zu: replica %zu at %s %s; looking for the primary", what, i, s->replica,
                 ps__shard_addr(s), why);
        s->failover = 1;
        s->failover_steps = 0;
    }
    s->replica = (s->replica + 1) % s->n_replicas;
    s->endpoint = s->replicas[s->replica];
    ps__close_socket(s);
    ps__open_socket(c, s); /* a failure leaves no socket's answer: the probe times out */
    s->reopened = 1;
    s->probe_id = 0;
    s->probes = 0;
    s->after_probe = PROBE_RESEND; /* what was in flight went to a replica we left */
    s->attempt_deadline = now;     /* the probe is due once the backoff is over */
    /* the first step is at once; then 25 ms growing by 25 ms a round of the group up to
     * 100 ms, +-25% jitter: backups wait out a lease before one of them takes over */
    uint64_t delay = 0;
    if (s->failover_steps > 0) {
        uint64_t rounds = s->failover_steps / s->n_replicas;
        uint64_t base = 25 * (rounds + 1);
        if (base > 100) base = 100;
        c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
        delay = base * 3 / 4 + (c->rng >> 33) % (base / 2 + 1);
    }
    s->next_probe_at = now + delay;
    s->failover_steps++;
}
