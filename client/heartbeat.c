/* The heartbeat thread (see heartbeat.h). Heartbeats are one-way: psd sends
 * no reply, so the sockets are only ever written. The thread has a ZeroMQ
 * context of its own: its I/O thread never queues a beat behind the training
 * loop's megabytes of gradients, and nothing here takes a lock the training
 * thread holds (the one lock, hb->lock, guards only the endpoints a fail-over
 * changes, held for a copy). */
#include "heartbeat.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "ps.pb-c.h"
#include "ps_error.h"
#include "wire.h"

struct ps_heartbeat {
    pthread_t thread;
    atomic_int stop;
    void *zctx;
    char **endpoints; /* guarded by lock */
    size_t n;
    pthread_mutex_t lock;
    atomic_uint moved; /* ps_heartbeat_follow calls so far: the thread reconnects on a change */
    unsigned worker_index, interval_ms;
    int have_curve;
    ps_curve_client curve; /* secret: wiped on stop */
    int own_ctx;           /* zctx was made here (terminated on stop) */
};

/* A DEALER to endpoint (NULL when none could be made: that shard skips beats). */
static void *beat_socket(ps_heartbeat *hb, const char *endpoint) {
    void *sock = zmq_socket(hb->zctx, ZMQ_DEALER);
    if (!sock) return NULL;
    int linger = 0, hwm = 4; /* a dead shard must not pile up heartbeats */
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (hb->have_curve) ps_curve_client_apply(sock, &hb->curve);
    zmq_connect(sock, endpoint);
    return sock;
}

/* Reopens the sockets whose endpoint changed since they were made (conns[i]: the one made). */
static void follow(ps_heartbeat *hb, void **socks, char **conns) {
    for (size_t i = 0; i < hb->n; i++) {
        pthread_mutex_lock(&hb->lock);
        int same = conns[i] && strcmp(conns[i], hb->endpoints[i]) == 0;
        char *now = same ? NULL : strdup(hb->endpoints[i]);
        pthread_mutex_unlock(&hb->lock);
        if (same || !now) continue;
        free(conns[i]);
        conns[i] = now;
        if (socks[i]) zmq_close(socks[i]);
        socks[i] = beat_socket(hb, now);
    }
}

static void *run(void *arg) {
    ps_heartbeat *hb = arg;
    void **socks = calloc(hb->n, sizeof *socks);
    char **conns = calloc(hb->n, sizeof *conns); /* the endpoint each socket connected to */
    unsigned seen = atomic_load(&hb->moved);
    if (socks && conns) follow(hb, socks, conns);
    uint64_t id = 1;
    while (socks && conns && !atomic_load(&hb->stop)) {
        unsigned moved = atomic_load(&hb->moved);
        if (moved != seen) {
            seen = moved;
            follow(hb, socks, conns);
        }
        for (size_t i = 0; i < hb->n; i++) {
            Ps__Header h = PS__HEADER__INIT;
            Ps__Heartbeat beat = PS__HEARTBEAT__INIT;
            beat.worker_index = hb->worker_index;
            h.protocol_version = PS_PROTOCOL_VERSION;
            h.request_id = id++;
            h.body_case = PS__HEADER__BODY_HEARTBEAT;
            h.heartbeat = &beat;
            if (socks[i]) /* full: skip a beat */
                ps_wire_send(socks[i], NULL, 0, &h, NULL, 0, ZMQ_DONTWAIT);
        }
        /* sleep in short slices so stop is quick */
        for (unsigned slept = 0; slept < hb->interval_ms && !atomic_load(&hb->stop); slept += 20)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    for (size_t i = 0; i < hb->n; i++) {
        if (socks && socks[i]) zmq_close(socks[i]);
        if (conns) free(conns[i]);
    }
    free(socks);
    free(conns);
    return NULL;
}

void ps_heartbeat_follow(ps_heartbeat *hb, size_t i, const char *endpoint) {
    if (!hb || i >= hb->n) return;
    pthread_mutex_lock(&hb->lock);
    int same = strcmp(hb->endpoints[i], endpoint) == 0;
    char *copy = same ? NULL : strdup(endpoint);
    if (copy) {
        free(hb->endpoints[i]);
        hb->endpoints[i] = copy;
    }
    pthread_mutex_unlock(&hb->lock);
    if (copy) atomic_fetch_add(&hb->moved, 1);
}

int ps_heartbeat_start(const char *const *endpoints, size_t n, unsigned worker_index,
                       unsigned interval_ms, const ps_curve_client *curve, ps_heartbeat **out) {
    *out = NULL;
    ps_heartbeat *hb = calloc(1, sizeof *hb);
    if (!hb || !(hb->endpoints = calloc(n, sizeof *hb->endpoints)) || !(hb->zctx = zmq_ctx_new())) {
        if (hb) free(hb->endpoints);
        free(hb);
        return PS_ENOMEM;
    }
    hb->own_ctx = 1;
    hb->n = n;
    hb->worker_index = worker_index;
    hb->interval_ms = interval_ms ? interval_ms : 1000;
    if (curve) {
        hb->curve = *curve;
        hb->have_curve = 1;
    }
    atomic_init(&hb->stop, 0);
    atomic_init(&hb->moved, 0);
    pthread_mutex_init(&hb->lock, NULL);
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        while (endpoints[i][len])
            len++;
        hb->endpoints[i] = malloc(len + 1);
        if (!hb->endpoints[i]) {
            hb->n = i;
            ps_heartbeat_stop(hb);
            return PS_ENOMEM;
        }
        for (size_t k = 0; k <= len; k++)
            hb->endpoints[i][k] = endpoints[i][k];
    }
    if (pthread_create(&hb->thread, NULL, run, hb) != 0) {
        for (size_t i = 0; i < n; i++)
            free(hb->endpoints[i]);
        free(hb->endpoints);
        ps_curve_wipe(&hb->curve, sizeof hb->curve);
        zmq_ctx_term(hb->zctx);
        pthread_mutex_destroy(&hb->lock);
        free(hb);
        return PS_ENOMEM;
    }
    *out = hb;
    return PS_OK;
}

void ps_heartbeat_stop(ps_heartbeat *hb) {
    if (!hb) return;
    atomic_store(&hb->stop, 1);
    if (hb->thread) pthread_join(hb->thread, NULL);
    for (size_t i = 0; i < hb->n; i++)
        free(hb->endpoints[i]);
    free(hb->endpoints);
    ps_curve_wipe(&hb->curve, sizeof hb->curve);
    if (hb->own_ctx) zmq_ctx_term(hb->zctx);
    pthread_mutex_destroy(&hb->lock);
    free(hb);
}
