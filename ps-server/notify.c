/* systemd notification (see notify.h) through sd_notify(3). Built with
 * libsystemd only when meson found it (-Dsystemd=auto|enabled, which defines
 * PS_HAVE_SYSTEMD); without it both functions do nothing. Without
 * NOTIFY_SOCKET at run time (not started by systemd) sd_notify does nothing. */
#include "notify.h"

#include "server.h"

#ifdef PS_HAVE_SYSTEMD

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "log.h"

/* Sends msg; logs at debug once sent, warns (once per kind) if it failed. */
static void send_state(const char *msg, const char *what, int *warned) {
    int rc = sd_notify(0, msg);
    if (rc > 0) {
        PS_DEBUG("sd_notify: %s sent", what);
    } else if (rc < 0 && !*warned) {
        *warned = 1;
        PS_WARN("sd_notify %s failed: %s", what, strerror(-rc));
    }
}

/* Runs on the loop: a loop that is stuck stops sending, and systemd restarts
 * the service after WatchdogSec. */
static void on_watchdog(uv_timer_t *t) {
    static int warned;
    (void)t;
    send_state("WATCHDOG=1", "WATCHDOG=1", &warned);
}

void ps__notify_ready(struct ps_server *s) {
    static int warned;
    char msg[512];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=serving shard %ld/%ld on %s (version %llu)",
             s->cfg.shard, s->cfg.num_shards, s->endpoint, (unsigned long long)s->shard.step.version);
    send_state(msg, "READY=1", &warned);
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
        uint64_t ms = usec / 2000u; /* ping at half the watchdog period */
        if (ms < 1) ms = 1;
        uv_timer_start(&s->watchdog_timer, on_watchdog, ms, ms);
        PS_DEBUG("systemd watchdog: %llu us, WATCHDOG=1 every %llu ms", (unsigned long long)usec,
                 (unsigned long long)ms);
    }
}

void ps__notify_stopping(struct ps_server *s) {
    static int warned;
    char msg[512];
    snprintf(msg, sizeof msg, "STOPPING=1\nSTATUS=stopping shard %ld/%ld at version %llu",
             s->cfg.shard, s->cfg.num_shards, (unsigned long long)s->shard.step.version);
    send_state(msg, "STOPPING=1", &warned);
}

#else /* no libsystemd at build time: nothing to tell */

void ps__notify_ready(struct ps_server *s) {
    (void)s;
}

void ps__notify_stopping(struct ps_server *s) {
    (void)s;
}

#endif
