/* Stopping the psd shards of a Slurm job once the workers are done (see slurm_end.h). */
#include "slurm_end.h"

#include "ps.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Live workers summed over the shards, or -1 when a shard did not answer. */
static long live_workers(ps_client *c, size_t n) {
    ps_stats *st = calloc(n, sizeof *st);
    ps_shard_result *res = calloc(n, sizeof *res);
    long live = -1;
    if (st && res && ps_client_stats_all(c, st, res) == PS_OK) {
        live = 0;
        for (size_t i = 0; i < n; i++)
            live += st[i].live_workers;
    }
    if (st)
        for (size_t i = 0; i < n; i++)
            if (res && res[i].rc == PS_OK) ps_stats_free(&st[i]);
    free(st);
    free(res);
    return live;
}

int psctl_slurm_end_job(char *const *ps, size_t n, double wait_s, int checkpoint) {
    ps_client *c = NULL;
    char err[256];
    if (ps_client_open(&c, (const char *const *)ps, n, 0, 1, err, sizeof err) != PS_OK) {
        fprintf(stderr, "psctl slurm-task: cannot reach the shards: %s\n", err);
        return 1;
    }
    ps_client_set_timeout(c, 10000);
    double deadline = now_s() + wait_s;
    long live;
    while ((live = live_workers(c, n)) != 0 && now_s() < deadline) {
        struct timespec half = {0, 500000000};
        nanosleep(&half, NULL);
    }
    if (live != 0)
        fprintf(stderr,
                "psctl slurm-task: after %.0f s the shards still count %ld live worker(s)%s; "
                "stopping them anyway\n",
                wait_s, live, live < 0 ? " (a shard did not answer)" : "");
    ps_shard_result *res = calloc(n, sizeof *res);
    ps_checkpoint_info *info = calloc(n, sizeof *info);
    int rc = res && info ? PS_OK : PS_ENOMEM;
    if (rc == PS_OK && checkpoint) {
        /* a Shutdown request stops psd without a checkpoint (SIGTERM writes one) */
        rc = ps_client_checkpoint_all(c, info, res);
        if (rc != PS_OK)
            fprintf(stderr, "psctl slurm-task: the final checkpoint: %s\n", ps_client_error(c));
        else
            fprintf(stderr, "psctl slurm-task: final checkpoint at version %llu\n",
                    (unsigned long long)info[0].version);
    }
    int rc2 = res ? ps_client_shutdown_all(c, res) : PS_ENOMEM;
    if (rc == PS_OK) rc = rc2;
    if (rc2 != PS_OK)
        fprintf(stderr, "psctl slurm-task: stopping the shards: %s\n", ps_client_error(c));
    else
        fprintf(stderr, "psctl slurm-task: training done, %zu psd shard(s) stopped\n", n);
    free(res);
    free(info);
    ps_client_close(c);
    return rc == PS_OK ? 0 : 1;
}
