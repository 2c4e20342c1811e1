/* psd's deferred pulls (see pending.h): one list in arrival order (which is also
 * deadline order), one list per connection, O(1) to add and to remove. */
#include "pending.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

static size_t bucket_of(const void *id, size_t len) {
    const unsigned char *p = id;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h % PS_PEER_BUCKETS;
}

static ps_peer **peer_slot(ps_pending *q, const void *id, size_t len) {
    ps_peer **pp = &q->buckets[bucket_of(id, len)];
    while (*pp && ((*pp)->identity_len != len || memcmp((*pp)->identity, id, len) != 0))
        pp = &(*pp)->hnext;
    return pp;
}

static size_t peer_bytes(size_t identity_len) {
    return sizeof(ps_peer) + identity_len;
}

/* PS_OK when one more pull of n variables from this connection fits every limit;
 * else PS_EBUSY (counted) with the flag named in err. */
static int check_room(ps_pending *q, const ps_peer *peer, size_t identity_len, size_t n,
                      char *err, size_t errlen) {
    size_t need =
        sizeof(ps_pending_pull) + n * sizeof(ps_var *) + (peer ? 0 : peer_bytes(identity_len));
    const char *flag = NULL;
    size_t limit = 0;
    if (q->n >= q->limits.max_pulls) {
        flag = "max-pending-pulls";
        limit = q->limits.max_pulls;
    } else if (peer && peer->n_pulls >= q->limits.max_per_peer) {
        flag = "max-pending-per-peer";
        limit = q->limits.max_per_peer;
    } else if (q->bytes + need > q->limits.max_bytes) {
        flag = "max-pending-mb";
        limit = q->limits.max_bytes >> 20;
    }
    if (!flag) return PS_OK;
    q->refused++;
    snprintf(err, errlen, "psd holds too many waiting pulls (--%s %zu reached): retry later", flag,
             limit);
    return PS_EBUSY;
}

void ps_pending_init(ps_pending *q, const ps_pending_limits *limits) {
    memset(q, 0, sizeof *q);
    q->limits = *limits;
}

int ps_pending_room(ps_pending *q, const void *identity, size_t identity_len, size_t n,
                    char *err, size_t errlen) {
    return check_room(q, *peer_slot(q, identity, identity_len), identity_len, n, err, errlen);
}

int ps_pending_add(ps_pending *q, const void *identity, size_t identity_len, int fd,
                   ps_var *const *vars, size_t n, const ps_pending_info *info, uint64_t now,
                   char *err, size_t errlen) {
    ps_peer **slot = peer_slot(q, identity, identity_len);
    ps_peer *peer = *slot;
    /* a row pull holds a copy of its ids while it waits (its reply is made when
     * answered, and sent zero-copy) */
    size_t bytes = sizeof(ps_pending_pull) + n * sizeof(ps_var *) + info->n_ids * sizeof(uint64_t);
    int rc = check_room(q, peer, identity_len, n, err, errlen);
    if (rc == PS_OK && info->n_ids * sizeof(uint64_t) + q->bytes > q->limits.max_bytes) {
        q->refused++;
        snprintf(err, errlen,
                 "psd holds too many waiting pulls (--max-pending-mb %zu reached): retry later",
                 q->limits.max_bytes >> 20);
        rc = PS_EBUSY;
    }
    if (rc != PS_OK) return rc;
    ps_pending_pull *p = malloc(sizeof(ps_pending_pull) + n * sizeof(ps_var *));
    uint64_t *ids = info->n_ids ? malloc(info->n_ids * sizeof *ids) : NULL;
    if (!p || (info->n_ids && !ids)) {
        free(p), free(ids);
        goto nomem;
    }
    if (!peer) {
        peer = calloc(1, peer_bytes(identity_len));
        if (!peer) {
            free(p), free(ids);
            goto nomem;
        }
        memcpy(peer->identity, identity, identity_len);
        peer->identity_len = identity_len;
        *slot = peer;
        q->n_peers++;
        q->bytes += peer_bytes(identity_len);
    }
    peer->fd = fd;
    memset(p, 0, sizeof *p);
    p->peer = peer;
    p->request_id = info->request_id;
    p->min_version = info->min_version;
    p->clock = info->clock;
    p->deadline_ns = now + q->limits.wait_ns;
    p->worker = info->worker;
    p->has_worker = (unsigned char)!!info->has_worker;
    p->push_pull = (unsigned char)!!info->push_pull;
    p->applied = (unsigned char)!!info->applied;
    p->dropped = (unsigned char)!!info->dropped;
    p->bytes = bytes;
    p->n_vars = n;
    if (n) memcpy(p->vars, vars, n * sizeof *vars);
    p->table = info->table;
    p->ids = ids;
    p->n_ids = info->n_ids;
    if (ids) memcpy(ids, info->ids, info->n_ids * sizeof *ids);
    p->prev = q->tail; /* O(1) append */
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    p->peer_next = peer->pulls;
    if (peer->pulls) peer->pulls->peer_prev = p;
    peer->pulls = p;
    peer->n_pulls++;
    q->n++;
    q->bytes += bytes;
    return PS_OK;
nomem:
    snprintf(err, errlen, "out of memory deferring a pull");
    return PS_ENOMEM;
}

void ps_pending_remove(ps_pending *q, ps_pending_pull *p) {
    if (p->prev)
        p->prev->next = p->next;
    else
        q->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        q->tail = p->prev;
    ps_peer *peer = p->peer;
    if (p->peer_prev)
        p->peer_prev->peer_next = p->peer_next;
    else
        peer->pulls = p->peer_next;
    if (p->peer_next) p->peer_next->peer_prev = p->peer_prev;
    q->n--;
    q->bytes -= p->bytes;
    free(p->ids);
    free(p);
    if (--peer->n_pulls > 0) return;
    ps_peer **slot = peer_slot(q, peer->identity, peer->identity_len);
    *slot = peer->hnext;
    q->n_peers--;
    q->bytes -= peer_bytes(peer->identity_len);
    free(peer);
}

size_t ps_pending_release_fd(ps_pending *q, int fd) {
    size_t dropped = 0;
    for (size_t b = 0; b < PS_PEER_BUCKETS; b++) {
        ps_peer *peer = q->buckets[b];
        while (peer) {
            ps_peer *next = peer->hnext; /* peer is freed with its last pull */
            if (peer->fd == fd) {
                size_t k = peer->n_pulls;
                for (size_t i = 0; i < k; i++)
                    ps_pending_remove(q, peer->pulls);
                dropped += k;
            }
            peer = next;
        }
    }
    q->released += dropped;
    return dropped;
}

void ps_pending_drop_worker(ps_pending *q, uint32_t w, ps_pending_answer_fn *fn, void *ctx) {
    ps_pending_pull *p = q->head;
    char msg[160];
    snprintf(msg, sizeof msg, "worker %u was removed from the expected set while its pull waited",
             w);
    while (p) {
        ps_pending_pull *next = p->next;
        if (p->has_worker && p->worker == w) {
            fn(ctx, p, PS_EREJOIN, msg);
            ps_pending_remove(q, p);
            q->released++;
        }
        p = next;
    }
}

void ps_pending_expire(ps_pending *q, uint64_t now, ps_pending_answer_fn *fn, void *ctx) {
    char msg[160];
    snprintf(msg, sizeof msg, "the pull waited longer than --max-pull-wait-ms %llu",
             (unsigned long long)(q->limits.wait_ns / 1000000ull));
    /* arrival order is deadline order: stop at the first one still in time */
    while (q->head && q->head->deadline_ns <= now) {
        ps_pending_pull *p = q->head;
        fn(ctx, p, PS_ETIMEDOUT, msg);
        ps_pending_remove(q, p);
        q->timed_out++;
    }
}

void ps_pending_free(ps_pending *q) {
    while (q->head)
        ps_pending_remove(q, q->head);
}
