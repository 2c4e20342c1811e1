/* libps's join: hello, then the chief creates the variables and the others
 * wait for them, then where the job is (ps_client_join, ps.h). One copy of the
 * steps psworker, the Python package and the examples take into a job. */
#include <stdio.h>
#include <time.h>

#include "client_impl.h"

static int wait_for_vars(ps_client *c, int wait_ms, ps_join_info *info) {
    uint64_t deadline = ps__now_ms() + (uint64_t)(wait_ms > 0 ? wait_ms : c->timeout_ms);
    for (;;) {
        int rc = ps_client_pull(c, 0, NULL);
        if (rc != PS_ENOENT) return rc;
        if (!info->waited++) CL_INFO("waiting for the chief to create the variables");
        if (ps__now_ms() > deadline)
            return ps__fail(c, PS_ETIMEDOUT, "the chief did not create the variables within %d ms",
                            wait_ms > 0 ? wait_ms : c->timeout_ms);
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
}

int ps_client_join(ps_client *c, ps_join_info *info) {
    info->created = info->n_lost = 0;
    info->lost_error[0] = 0;
    info->waited = 0;
    info->async = 0;
    info->version = info->clock = 0;
    int rc = ps_client_hello(c, &info->async, &info->version);
    if (rc != PS_OK) return rc;
    if (info->chief) {
        size_t n = 0;
        rc = ps_client_check_shards(c, info->lost, info->lost ? info->lost_cap : 0, &n);
        if (rc == PS_ELOST && info->recreate_lost) {
            info->n_lost = n;
            snprintf(info->lost_error, sizeof info->lost_error, "%s", ps_client_error(c));
            rc = PS_OK;
        }
        if (rc == PS_OK) rc = ps_client_create_vars(c, &info->created);
    } else {
        /* a shard without variables may be one the chief is creating them on now:
         * the chief decides (PS_ELOST); another job's variables fail here too */
        rc = ps_client_check_shards(c, NULL, 0, NULL);
        if (rc == PS_ELOST) rc = PS_OK;
        if (rc == PS_OK) rc = wait_for_vars(c, info->wait_ms, info);
    }
    if (rc != PS_OK) return rc;
    info->clock = info->async ? ps_client_worker_clock(c) : info->version;
    if (info->total_steps) rc = ps_client_check_progress(c, info->async, info->total_steps);
    if (rc == PS_OK && info->pull) rc = ps_client_pull_next(c, info->async, info->clock, NULL);
    return rc;
}
