/* The ROUTER's socket monitor: one per socket (ZeroMQ allows no more), read on the
 * loop; disconnects release deferred pulls, failed handshakes are counted by auth.c. */
#ifndef PS_MONITOR_H
#define PS_MONITOR_H

struct ps_server;

/* Starts monitoring s->router (call after auth init, before bind). Returns PS_OK, or
 * PS_EIO (logged; psd runs on without it). */
int ps__monitor_init(struct ps_server *s);
/* Watches the monitor on the loop. Returns PS_OK or PS_EIO. */
int ps__monitor_start(struct ps_server *s);
/* Handles every event waiting now (also called before a pull is deferred). */
void ps__monitor_drain(struct ps_server *s);
/* Closes the loop handle. */
void ps__monitor_stop(struct ps_server *s);
/* Closes the monitor socket (after the loop ended). */
void ps__monitor_free(struct ps_server *s);

#endif
