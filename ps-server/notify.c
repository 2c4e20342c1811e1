/* systemd notification (see notify.h). */
#include "notify.h"

#include "server.h"

void ps__notify_ready(struct ps_server *s) {
    (void)s;
}

void ps__notify_stopping(struct ps_server *s) {
    (void)s;
}
