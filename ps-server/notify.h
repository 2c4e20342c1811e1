/* systemd service notification (sd_notify): READY=1 once psd serves,
 * STOPPING=1 when it stops, WATCHDOG=1 from the loop while it runs. A no-op
 * when built without libsystemd or when not started by systemd. */
#ifndef PS_NOTIFY_H
#define PS_NOTIFY_H

struct ps_server;

/* The socket is bound and any checkpoint restored: READY=1 (+ STATUS=), and
 * starts WATCHDOG=1 pings on s->watchdog_timer when systemd asked for them. */
void ps__notify_ready(struct ps_server *s);
/* STOPPING=1 (+ STATUS=). */
void ps__notify_stopping(struct ps_server *s);

#endif
