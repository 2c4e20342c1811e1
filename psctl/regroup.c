/* psctl local, all-reduce strategies: the ring is all or nothing, so when one worker
 * fails the others are stopped and the whole set restarts (fresh ring ports, resuming
 * from the chief's newest checkpoint), counted against --max-restarts. */
#include "log.h"
#include "ring_job.h"
#include "supervisor_impl.h"

#include <signal.h>
#include <stdio.h>

/* "was killed by signal 9" or "exited with status 3". */
static void describe_how(char *buf, size_t n, int64_t status, int sig) {
    if (sig)
        snprintf(buf, n, "was killed by signal %d", sig);
    else
        snprintf(buf, n, "exited with status %lld", (long long)status);
}

static void on_regroup_timer(uv_timer_t *t) {
    sup *sv = t->data;
    if (sv->phase != PHASE_REGROUPING) {
        sv->regroup_pending = 0;
        psctl__check_done(sv);
        return;
    }
    /* every old worker must be gone, with its output read to the end, before any starts */
    int closing = 0;
    for (int i = 0; i < sv->nchildren; i++) {
        child *c = &sv->children[i];
        for (int k = 0; k < 2; k++)
            psctl__close_pipe(c, k);
        closing |=
            c->pipe_state[0] == PIPE_CLOSING || c->pipe_state[1] == PIPE_CLOSING || c->proc_open;
    }
    if (closing) {
        uv_timer_start(&sv->regroup_timer, on_regroup_timer, 10, 0);
        return;
    }
    sv->regroup_pending = 0;
    char from[160];
    long step = psctl_latest_checkpoint_step(sv->job->ckpt_dir);
    if (step >= 0)
        snprintf(from, sizeof from, "from the checkpoint at step %ld", step);
    else
        snprintf(from, sizeof from, "from the start (no checkpoint in %s yet)", sv->job->ckpt_dir);
    psctl__say(sv, "restarting all %ld workers %s (restart %d/%ld)", sv->job->opts->num_workers,
               from, sv->regroups, sv->job->opts->max_restarts);
    psctl__start_workers(sv);
}

/* Every worker has stopped after a failure: the restart waits the backoff delay. */
static void regroup_when_stopped(sup *sv) {
    for (int i = 0; i < sv->nchildren; i++)
        if (sv->children[i].running) return;
    uv_timer_stop(&sv->stop_timer);
    uint64_t delay = RESTART_DELAY_MS;
    for (int i = 1; i < sv->regroups && delay < RESTART_DELAY_MAX_MS; i++)
        delay *= 2;
    if (delay > RESTART_DELAY_MAX_MS) delay = RESTART_DELAY_MAX_MS;
    psctl__say(sv, "all workers stopped (worker %d %s)", sv->culprit, sv->culprit_how);
    uv_timer_start(&sv->regroup_timer, on_regroup_timer, delay, 0);
}

/* A worker of an all-reduce job failed: the ring is all or nothing, so the others are
 * stopped and the whole set restarts (from the chief's checkpoint), counted against
 * --max-restarts; exit status 2 (bad configuration) or no restarts left stop the job. */
void psctl__ring_worker_failed(sup *sv, child *c, int64_t status, int sig) {
    long max = sv->job->opts->max_restarts;
    char how[96];
    describe_how(how, sizeof how, status, sig);
    if (sig == 0 && status == EXIT_BAD_CONFIG) {
        psctl__abort_job(sv, 1,
                         "%s failed (exit status %d); exit status %d means bad configuration: not "
                         "restarted",
                         c->label, EXIT_BAD_CONFIG, EXIT_BAD_CONFIG);
        return;
    }
    if (sv->regroups >= max) {
        char msg[256];
        psctl__describe_exit(msg, sizeof msg, c, "failed", status, sig);
        if (max > 0)
            psctl__abort_job(sv, 1,
                             "%s; gave up after %d restart%s of all workers (--max-restarts %ld)",
                             msg, sv->regroups, sv->regroups == 1 ? "" : "s", max);
        else
            psctl__abort_job(sv, 1, "%s", msg);
        return;
    }
    sv->regroups++;
    sv->culprit = c->index;
    sv->culprit_ring = sig == 0 && status == EXIT_RING;
    snprintf(sv->culprit_how, sizeof sv->culprit_how, "%s", how);
    psctl__say(sv,
               "%s %s; stopping the other workers to restart all of them (the ring needs every "
               "worker)",
               c->label, how);
    sv->phase = PHASE_REGROUPING;
    sv->regroup_pending = 1;
    for (int i = 0; i < sv->nchildren; i++)
        psctl__signal_child(&sv->children[i], SIGTERM);
    psctl__arm_kill_timer(sv, ABORT_GRACE_MS);
    regroup_when_stopped(sv);
}

/* A worker exited while the others are being stopped for a restart. One that failed on
 * its own (not by psctl's signal, not the ring breaking under it) names the cause better
 * than a culprit that only saw the ring break. */
void psctl__ring_worker_stopped(sup *sv, child *c, int64_t status, int sig) {
    char how[96];
    describe_how(how, sizeof how, status, sig);
    int ours = sig != 0 && c->stop_sent;
    int ring = sig == 0 && status == EXIT_RING;
    if (status == 0 && sig == 0)
        PS_DEBUG("%s finished while the workers restart", c->label);
    else if (!ours)
        psctl__say(sv, "%s %s", c->label, how);
    if (sv->culprit_ring && !ours && !ring && !(status == 0 && sig == 0)) {
        sv->culprit = c->index;
        sv->culprit_ring = 0;
        snprintf(sv->culprit_how, sizeof sv->culprit_how, "%s", how);
    }
    regroup_when_stopped(sv);
}
