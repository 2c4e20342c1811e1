/* psd's HTTP endpoint (see metrics.h). */
#include "metrics.h"

#include "ps_error.h"
#include "server.h"

int ps__metrics_start(struct ps_server *s, char *err, size_t errlen) {
    (void)s;
    (void)err;
    (void)errlen;
    return PS_OK;
}

void ps__metrics_stop(struct ps_server *s) {
    (void)s;
}
