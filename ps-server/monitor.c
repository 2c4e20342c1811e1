/* The ROUTER's one socket monitor (see monitor.h): closed connections release their
 * deferred pulls; failed CURVE handshakes go to auth.c. (ZMQ_ROUTER_NOTIFY would tell
 * the routing id directly, but Debian's libzmq 4.3.4 is built without the draft API
 * and refuses the option with EINVAL; so a pull remembers its socket, ZMQ_SRCFD, and
 * the monitor's DISCONNECTED event names that socket.) */
#include "monitor.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "auth.h"
#include "log.h"
#include "pending.h"
#include "ps_error.h"
#include "server.h"

#define MONITOR_ENDPOINT "inproc://psd-monitor"

int ps__monitor_init(ps_server *s) {
    int events = ZMQ_EVENT_DISCONNECTED | (s->auth ? PS_AUTH_EVENTS : 0);
    int linger = 0;
    if (zmq_socket_monitor(s->router, MONITOR_ENDPOINT, events) != 0 ||
        !(s->monitor = zmq_socket(s->zctx, ZMQ_PAIR)) ||
        zmq_setsockopt(s->monitor, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_connect(s->monitor, MONITOR_ENDPOINT) != 0) {
        PS_WARN("cannot monitor connections (%s): pulls of closed connections wait until "
                "--max-pull-wait-ms, refused CURVE clients are not counted",
                zmq_strerror(zmq_errno()));
        if (s->monitor) zmq_close(s->monitor);
        s->monitor = NULL;
        return PS_EIO;
    }
    return PS_OK;
}

/* One event: frame 1 = uint16 event + uint32 value, frame 2 = endpoint. 0: none left. */
static int read_one(ps_server *s) {
    uint8_t head[6] = {0};
    int got = 0;
    for (int more = 1, part = 0; more; part++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            if (part == 0) return 0;
            break;
        }
        more = zmq_msg_more(&m);
        if (part == 0 && zmq_msg_size(&m) == sizeof head) {
            memcpy(head, zmq_msg_data(&m), sizeof head);
            got = 1;
        }
        zmq_msg_close(&m);
    }
    if (!got) return 1;
    uint16_t event;
    uint32_t value;
    memcpy(&event, head, sizeof event);
    memcpy(&value, head + 2, sizeof value);
    if (event == ZMQ_EVENT_DISCONNECTED)
        ps__server_disconnected(s, (int)value);
    else if (s->auth)
        ps__auth_handshake_event(s->auth, event, value);
    return 1;
}

void ps__monitor_drain(ps_server *s) {
    if (!s->monitor) return;
    while (read_one(s))
        ;
}

static void on_monitor(uv_poll_t *h, int status, int events) {
    (void)events;
    if (status < 0) PS_ERROR("monitor socket poll failed: %s", uv_strerror(status));
    ps__monitor_drain(h->data);
}

int ps__monitor_start(ps_server *s) {
    if (!s->monitor) return PS_OK;
    int fd;
    size_t len = sizeof fd;
    if (zmq_getsockopt(s->monitor, ZMQ_FD, &fd, &len) != 0 ||
        uv_poll_init(s->loop, &s->monitor_poll, fd) != 0)
        return PS_EIO;
    s->monitor_poll.data = s;
    uv_poll_start(&s->monitor_poll, UV_READABLE, on_monitor);
    s->monitor_started = 1;
    ps__monitor_drain(s); /* ZMQ_FD is edge-triggered: events may be waiting already */
    return PS_OK;
}

void ps__monitor_stop(ps_server *s) {
    if (!s->monitor_started) return;
    uv_close((uv_handle_t *)&s->monitor_poll, NULL);
    s->monitor_started = 0;
}

void ps__monitor_free(ps_server *s) {
    if (s->monitor) zmq_close(s->monitor);
    s->monitor = NULL;
}
