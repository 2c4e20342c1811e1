/* The heartbeat thread (see heartbeat.h). Heartbeats are one-way: psd sends
 * no reply, so the sockets are only ever written. The thread has a ZeroMQ
 * context of its own: its I/O thread never queues a beat behind the training
 * loop's megabytes of gradients, and nothing here takes a lock the training
 * thread holds. */
#include "heartbeat.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <zmq.h>

#include "ps.pb-c.h"
#include "ps_error.h"
#include "wire.h"

struct ps_heartbeat {
    pthread_t thread;
    atomic_int stop;
    void *zctx;
    char **endpoints;
    size_t n;
    unsigned worker_index, interval_ms;
    int have_curve;
    ps_curve_client curve; /* secret: wiped on stop */
    int own_ctx;           /* zctx was made here (terminated on stop) */
};

static void *run(void *arg) {
    ps_heartbeat *hb = arg;
    void **socks = calloc(hb->n, sizeof *socks);
    for (size_t i = 0; socks && i < hb->n; i++) {
        socks[i] = zmq_socket(hb->zctx, ZMQ_DEALER);
        int linger = 0, hwm = 4; /* a dead shard must not pile up heartbeats */
        zmq_setsockopt(socks[i], ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(socks[i], ZMQ_SNDHWM, &hwm, sizeof hwm);
        if (hb->have_curve) ps_curve_client_apply(socks[i], &hb->curve);
        zmq_connect(socks[i], hb->endpoints[i]);
    }
    uint64_t id = 1;
    while (socks && !atomic_load(&hb->stop)) {
        for (size_t i = 0; i < hb->n; i++) {
            Ps__Header h = PS__HEADER__INIT;
            Ps__Heartbeat beat = PS__HEARTBEAT__INIT;
            beat.worker_index = hb->worker_index;
            h.protocol_version = PS_PROTOCOL_VERSION;
            h.request_id = id++;
            h.body_case = PS__HEADER__BODY_HEARTBEAT;
            h.heartbeat = &beat;
            ps_wire_send(socks[i], NULL, 0, &h, NULL, 0, ZMQ_DONTWAIT); /* full: skip a beat */
        }
        /* sleep in short slices so stop is quick */
        for (unsigned slept = 0; slept < hb->interval_ms && !atomic_load(&hb->stop); slept += 20)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    for (size_t i = 0; socks && i < hb->n; i++)
        zmq_close(socks[i]);
    free(socks);
    return NULL;
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
    free(hb);
}
