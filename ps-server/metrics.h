/* psd's HTTP endpoint on the event loop: GET /metrics (Prometheus text
 * format) and GET /healthz. Started only with --metrics-port. */
#ifndef PS_METRICS_H
#define PS_METRICS_H

#include <stddef.h>

struct ps_server;

/* Listens on --metrics-bind:--metrics-port (no-op when the port is -1).
 * Returns PS_OK or PS_EADDRINUSE/PS_EINVAL with a reason in err. */
int ps__metrics_start(struct ps_server *s, char *err, size_t errlen);
/* Closes the listener and every connection (their close callbacks run on the loop). */
void ps__metrics_stop(struct ps_server *s);

#endif
