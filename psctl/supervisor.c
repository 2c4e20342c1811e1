/* psctl local's supervisor: spawns the shards and workers with uv_spawn, relays their
 * output, restarts a process that fails (up to --max-restarts), and turns exits beyond
 * that, signals and deadlines into an orderly stop of everything. An all-reduce job's
 * workers restart as one: regroup.c. */
#include "supervisor_impl.h"

#include "child_argv.h"
#include "control.h"
#include "lifetime.h"
#include "log.h"
#include "ring_job.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

extern char **environ;

/* ---- messages ---------------------------------------------------------------- */

void psctl__say(sup *sv, const char *fmt, ...) {
    char line[1024];
    int n = snprintf(line, sizeof line, "psctl: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    psctl_screen_break(&sv->screen);
    psctl_write_all(STDERR_FILENO, line, len);
}

/* "exit status 3" or "killed by signal 9". */
static void describe_status(char *buf, size_t n, int64_t status, int sig) {
    if (sig)
        snprintf(buf, n, "killed by signal %d", sig);
    else
        snprintf(buf, n, "exit status %lld", (long long)status);
}

/* "<label> killed by signal 9" or "<label> <verb> (exit status 3)". */
void psctl__describe_exit(char *buf, size_t n, const child *c, const char *verb, int64_t status,
                          int sig) {
    if (sig)
        snprintf(buf, n, "%s killed by signal %d", c->label, sig);
    else
        snprintf(buf, n, "%s %s (exit status %lld)", c->label, verb, (long long)status);
}

/* ---- handles ------------------------------------------------------------------ */

static void on_closed(uv_handle_t *h) {
    sup *sv = (sup *)(void *)h->loop;
    sv->open_handles--;
}

/* Closes h unless it is closing already or was never initialised (still zeroed). */
static void close_handle(uv_handle_t *h) {
    if (h->type != UV_UNKNOWN_HANDLE && !uv_is_closing(h)) uv_close(h, on_closed);
}

static void on_pipe_closed(uv_handle_t *h) {
    child *c = h->data;
    c->pipe_state[h == (uv_handle_t *)&c->pipes[1]] = PIPE_CLOSED;
    c->sv->open_handles--;
}

void psctl__close_pipe(child *c, int k) {
    if (c->pipe_state[k] != PIPE_OPEN) return;
    psctl_relay_flush(&c->relays[k]);
    uv_close((uv_handle_t *)&c->pipes[k], on_pipe_closed);
    c->pipe_state[k] = PIPE_CLOSING;
}

static void on_proc_closed(uv_handle_t *h) {
    child *c = h->data;
    c->proc_open = 0;
    c->sv->open_handles--;
}

static void close_proc(child *c) {
    if (c->proc_open && !uv_is_closing((uv_handle_t *)&c->proc))
        uv_close((uv_handle_t *)&c->proc, on_proc_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    child *c = h->data;
    *buf = uv_buf_init(c->sv->readbuf, sizeof c->sv->readbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
    child *c = s->data;
    int k = (s == (uv_stream_t *)&c->pipes[1]);
    if (n > 0) {
        psctl_relay_feed(&c->relays[k], buf->base, (size_t)n);
    } else if (n < 0) {
        if (n != UV_EOF) PS_DEBUG("reading from %s: %s", c->label, uv_strerror((int)n));
        psctl__close_pipe(c, k);
    }
}

/* Signals the child's whole process group (it leads one: UV_PROCESS_DETACHED), so
 * that helpers it started go too. */
void psctl__signal_child(child *c, int sig) {
    if (!c->running) return;
    c->stop_sent = 1;
    if (uv_kill(-c->pid, sig) < 0) uv_kill(c->pid, sig);
}

/* ---- stopping ----------------------------------------------------------------- */

/* Sends SIGTERM to every running child; arm_stop then arms the SIGKILL deadline. */
static void stop_all(sup *sv, int grace_ms) {
    uv_timer_stop(&sv->ready_timer);
    if (sv->regroup_pending) {
        PS_DEBUG("restart of the workers cancelled");
        uv_timer_stop(&sv->regroup_timer);
        sv->regroup_pending = 0;
    }
    for (int i = 0; i < sv->nchildren; i++) {
        child *c = &sv->children[i];
        if (c->restart_pending) {
            PS_DEBUG("%s: restart cancelled", c->label);
            uv_timer_stop(&c->restart_timer);
            c->restart_pending = 0;
        }
        psctl__signal_child(c, SIGTERM);
    }
    sv->kill_stage = 0;
    sv->stop_grace_ms = grace_ms;
    uv_timer_stop(&sv->stop_timer);
    psctl__check_done(sv);
}

static void kill_stragglers(sup *sv) {
    for (int i = 0; i < sv->nchildren; i++) {
        child *c = &sv->children[i];
        if (!c->running) continue;
        psctl__say(sv, "%s did not stop within %.0f s of SIGTERM; sending SIGKILL", c->label,
                   sv->stop_grace_ms / 1000.0);
        psctl__signal_child(c, SIGKILL);
        if (sv->phase == PHASE_FINISHING) sv->unclean = 1;
    }
    sv->kill_stage = 1;
}

static void give_up(sup *sv) {
    for (int i = 0; i < sv->nchildren; i++) {
        child *c = &sv->children[i];
        if (!c->running) continue;
        psctl__say(sv, "%s (pid %d) is still running after SIGKILL; giving up on it", c->label,
                   c->pid);
        c->running = 0;
        uv_unref((uv_handle_t *)&c->proc);
        sv->unclean = 1;
        if (sv->exit_code == 0) sv->exit_code = 1;
    }
    psctl__check_done(sv);
}

static void on_stop_timer(uv_timer_t *t) {
    sup *sv = t->data;
    if (sv->kill_stage == 0) {
        kill_stragglers(sv);
        uv_timer_start(&sv->stop_timer, on_stop_timer, KILL_GRACE_MS, 0);
    } else if (sv->phase == PHASE_REGROUPING) {
        psctl__abort_job(sv, 1, "cannot restart the workers: one is still running after SIGKILL");
        give_up(sv);
    } else {
        give_up(sv);
    }
}

void psctl__arm_kill_timer(sup *sv, int grace_ms) {
    sv->kill_stage = 0;
    sv->stop_grace_ms = grace_ms;
    uv_timer_start(&sv->stop_timer, on_stop_timer, (uint64_t)grace_ms, 0);
}

/* Stops every child: SIGTERM now, SIGKILL after grace_ms, give up KILL_GRACE_MS later. */
static void arm_stop(sup *sv, int grace_ms) {
    stop_all(sv, grace_ms);
    if (sv->phase != PHASE_DONE) uv_timer_start(&sv->stop_timer, on_stop_timer, grace_ms, 0);
}

/* Stops the job because of a failure: prints why, stops every child, exits with code
 * (unless a signal already chose the code). Later failures are only logged. */
void psctl__abort_job(sup *sv, int code, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (sv->phase == PHASE_ABORTING || sv->phase == PHASE_DONE) {
        PS_DEBUG("while stopping: %s", msg);
        return;
    }
    psctl__say(sv, "%s", msg);
    if (sv->signals == 0) sv->exit_code = code;
    sv->phase = PHASE_ABORTING;
    arm_stop(sv, ABORT_GRACE_MS);
}

static void on_drain_timer(uv_timer_t *t) {
    sup *sv = t->data;
    for (int i = 0; i < sv->nchildren; i++) {
        for (int k = 0; k < 2; k++) {
            if (sv->children[i].pipe_state[k] != PIPE_OPEN) continue;
            PS_DEBUG("output of %s still open after it exited; closing", sv->children[i].label);
            psctl__close_pipe(&sv->children[i], k);
        }
    }
}

/* Ends the run once no child is running or waiting for its restart: stops the timers
 * and gives the output pipes DRAIN_MS to reach end of file; uv_run then returns. */
void psctl__check_done(sup *sv) {
    if (sv->phase == PHASE_DONE) return;
    for (int i = 0; i < sv->nchildren; i++)
        if (sv->children[i].running || sv->children[i].restart_pending) return;
    if (sv->regroup_pending) return;
    sv->end_phase = sv->phase;
    sv->phase = PHASE_DONE;
    uv_timer_stop(&sv->ready_timer);
    uv_timer_stop(&sv->stop_timer);
    uv_timer_stop(&sv->timeout_timer);
    uv_timer_start(&sv->drain_timer, on_drain_timer, DRAIN_MS, 0);
}

/* ---- spawning ----------------------------------------------------------------- */

static void on_child_exit(uv_process_t *p, int64_t status, int sig);
static void on_ready_timer(uv_timer_t *t);

/* Starts c with args (args[0] is the executable) and env (NULL: sv->env); its handles
 * must be closed (a fresh child, or a restart after the close callbacks ran). Returns
 * 0, or a negative libuv error after printing why. */
static int spawn_child(sup *sv, child *c, char **args, char **env) {
    for (int k = 0; k < 2; k++) {
        uv_pipe_init(&sv->loop, &c->pipes[k], 0);
        c->pipes[k].data = c;
        c->pipe_state[k] = PIPE_OPEN;
        sv->open_handles++;
    }
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE;
    for (int k = 0; k < 2; k++) {
        stdio[k + 1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
        stdio[k + 1].data.stream = (uv_stream_t *)&c->pipes[k];
    }
    uv_process_options_t o = {0};
    o.file = args[0];
    o.args = args;
    o.env = env ? env : sv->env;
    o.flags = UV_PROCESS_DETACHED; /* own process group: signalled as a whole */
    o.stdio_count = 3;
    o.stdio = stdio;
    o.exit_cb = on_child_exit;
    c->proc.data = c;
    int r = uv_spawn(&sv->loop, &c->proc, &o);
    c->proc_open = 1;
    sv->open_handles++;
    if (r < 0) {
        psctl__say(sv, "cannot start %s (%s): %s", c->label, args[0], uv_strerror(r));
        for (int k = 0; k < 2; k++)
            psctl__close_pipe(c, k);
        close_proc(c);
        return r;
    }
    c->running = 1;
    c->pid = c->proc.pid;
    for (int k = 0; k < 2; k++) {
        int e = uv_read_start((uv_stream_t *)&c->pipes[k], on_alloc, on_read);
        if (e < 0) {
            PS_ERROR("reading output of %s: %s", c->label, uv_strerror(e));
            psctl__close_pipe(c, k);
        }
    }
    PS_DEBUG("started %s: pid %d, %s", c->label, c->pid, args[0]);
    return 0;
}

/* Starts (or restarts) psd c: on its first start with --port 0, afterwards on the port
 * it got then (--replicas > 1: always on the port chosen for it); its old ready file is
 * removed first and the ready poll waits for the new one. Returns 0 or a negative libuv
 * error (printed). */
static int start_psd(sup *sv, child *c) {
    if (unlink(c->ready_path) != 0 && errno != ENOENT)
        PS_WARN("cannot remove %s: %s", c->ready_path, strerror(errno));
    psctl_argv a = {0};
    int r = psctl_psd_argv(&a, sv->job->opts, sv->job->psd_path, c->index, c->replica,
                           sv->peers ? sv->peers[c->index] : NULL, c->port, c->ipc_path,
                           c->ready_path);
    r = r < 0 ? UV_ENOMEM : spawn_child(sv, c, a.v, sv->psd_env);
    psctl_argv_free(&a);
    if (r < 0) return r;
    c->awaiting_ready = 1;
    c->ready_deadline = uv_now(&sv->loop) + (uint64_t)sv->job->ready_timeout_ms;
    if (!uv_is_active((uv_handle_t *)&sv->ready_timer))
        uv_timer_start(&sv->ready_timer, on_ready_timer, 10, READY_POLL_MS);
    return 0;
}

/* Starts (or restarts) worker c with the same command line and environment each time.
 * Returns 0 or a negative libuv error (printed). */
int psctl__start_worker(sup *sv, child *c) {
    const psctl_local_opts *o = sv->job->opts;
    psctl_argv a = {0};
    int r = o->worker_cmd ? psctl_worker_cmd_argv(&a, o->worker_cmd)
                          : psctl_worker_argv(&a, o, sv->job->worker_path, c->index, sv->endpoints,
                                              sv->job->ckpt_dir, c->index == 0 && sv->stdout_tty);
    /* TF_CONFIG (replacing any psctl inherited): all-reduce, the ring; --worker-cmd, the
     * shards and the workers' ports */
    char *tf = NULL;
    if (o->allreduce || o->worker_cmd)
        tf = psctl_tf_config(o->worker_cmd ? sv->endpoints : NULL, sv->ports, (int)o->num_workers,
                             c->index);
    const char *keys[3], *values[3];
    int nkeys = 0, oom = r < 0 || ((o->allreduce || o->worker_cmd) && !tf);
    if (tf) keys[nkeys] = "TF_CONFIG", values[nkeys++] = tf;
    if (o->worker_cmd && o->job_id) keys[nkeys] = PSCTL_JOB_ID_ENV, values[nkeys++] = o->job_id;
    if (o->worker_cuda_visible)
        keys[nkeys] = "CUDA_VISIBLE_DEVICES", values[nkeys++] = o->worker_cuda_visible[c->index];
    /* each environment is the previous one plus one variable (psctl_env_set) */
    char **envs[3], **env = NULL;
    int nenvs = 0;
    for (int k = 0; k < nkeys && !oom; k++) {
        env = psctl_env_set(env ? env : sv->env, keys[k], values[k]);
        if (env)
            envs[nenvs++] = env;
        else
            oom = 1;
    }
    r = oom ? UV_ENOMEM : spawn_child(sv, c, a.v, env);
    while (nenvs > 0)
        psctl_env_free(envs[--nenvs]);
    free(tf);
    psctl_argv_free(&a);
    return r;
}

static int start_child(sup *sv, child *c) {
    return c->kind == CHILD_PSD ? start_psd(sv, c) : psctl__start_worker(sv, c);
}

static void start_psds(sup *sv) {
    for (int i = 0; i < sv->npsd; i++) {
        if (start_psd(sv, &sv->children[i]) < 0) {
            psctl__abort_job(sv, 1, "%s could not be started; stopping", sv->children[i].label);
            return;
        }
    }
}

void psctl__start_workers(sup *sv) {
    const psctl_local_opts *o = sv->job->opts;
    sv->phase = PHASE_RUNNING;
    sv->workers_ok = 0;
    if (o->allreduce || o->worker_cmd) {
        char err[256];
        if (psctl_free_ports(sv->ports, (int)o->num_workers, err, sizeof err) != 0) {
            psctl__abort_job(sv, 1, "cannot find free ports for the workers' %s: %s",
                             o->allreduce ? "ring" : "TF_CONFIG", err);
            return;
        }
    }
    if (o->worker_cmd) {
        char list[256] = "";
        size_t used = 0;
        for (int j = 0; j < o->num_workers && used < sizeof list - 16; j++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", j ? "," : "",
                                     sv->ports[j]);
        psctl__say(sv, "workers run: %s (TF_CONFIG worker ports %s%s on 127.0.0.1, not listened on)",
                   o->worker_cmd, list, used >= sizeof list - 16 ? ",..." : "");
    }
    if (o->allreduce) {
        char list[256] = "";
        size_t used = 0;
        for (int j = 0; j < o->num_workers && used < sizeof list - 16; j++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", j ? "," : "",
                                     sv->ports[j]);
        psctl__say(sv,
                   "strategy %s: starting %ld worker%s, ring on 127.0.0.1 ports %s%s, checkpoints "
                   "in %s",
                   o->strategy_name, o->num_workers, o->num_workers == 1 ? "" : "s", list,
                   used >= sizeof list - 16 ? ",..." : "", sv->job->ckpt_dir);
    }
    sv->workers_active = (int)o->num_workers;
    for (int j = 0; j < o->num_workers; j++) {
        sv->children[sv->npsd + j].stop_sent = 0;
        if (psctl__start_worker(sv, &sv->children[sv->npsd + j]) < 0) {
            psctl__abort_job(sv, 1, "worker %d could not be started; stopping", j);
            return;
        }
    }
}

void psctl__workers_maybe_done(sup *sv) {
    if (sv->phase != PHASE_RUNNING || sv->workers_ok < sv->workers_active) return;
    PS_DEBUG("all workers finished; stopping the psd shards");
    sv->phase = PHASE_FINISHING;
    arm_stop(sv, FINISH_GRACE_MS);
}

/* ---- restarts ----------------------------------------------------------------- */

static void on_restart_timer(uv_timer_t *t) {
    child *c = t->data;
    sup *sv = c->sv;
    c->restart_pending = 0;
    if (sv->phase != PHASE_STARTING && sv->phase != PHASE_RUNNING) {
        psctl__check_done(sv);
        return;
    }
    /* The old process's output ends once its process group is gone; whatever it still
     * holds open after the restart delay is cut off, as at the end of a job. */
    for (int k = 0; k < 2; k++)
        psctl__close_pipe(c, k);
    if (c->pipe_state[0] == PIPE_CLOSING || c->pipe_state[1] == PIPE_CLOSING || c->proc_open) {
        c->restart_pending = 1; /* close callbacks run on the next loop turn */
        uv_timer_start(&c->restart_timer, on_restart_timer, 10, 0);
        return;
    }
    PS_DEBUG("restarting %s (%d/%ld)", c->label, c->restarts, sv->job->opts->max_restarts);
    if (start_child(sv, c) < 0)
        psctl__abort_job(sv, 1, "%s could not be restarted; stopping", c->label);
}

/* Handles a child that died abnormally while the job runs: schedules its restart when
 * it has restarts left (and the exit status is not "bad configuration"), else stops
 * the job naming it. */
static void child_failed(sup *sv, child *c, int64_t status, int sig) {
    long max = sv->job->opts->max_restarts;
    int bad_config = sig == 0 && status == EXIT_BAD_CONFIG;
    if (c->kind == CHILD_WORKER && sig == 0 && status == EXIT_LOST &&
        !sv->job->opts->recreate_lost) {
        /* restarted, the worker would meet the same shard without its variables (or the
         * chief would create them afresh): a model that lost state never ends in success */
        psctl__abort_job(
            sv, 1,
            "%s failed (exit status %d): a psd shard lost the job's variables (named "
            "above); not restarted. The job cannot finish with that part of the model "
            "lost: start it again (from a checkpoint)%s",
            c->label, EXIT_LOST,
            sv->job->opts->worker_cmd ? "" : ", or give --recreate-lost-variables");
        return;
    }
    if (!bad_config && c->restarts < max) {
        c->restarts++;
        uint64_t delay = RESTART_DELAY_MS;
        for (int i = 1; i < c->restarts && delay < RESTART_DELAY_MAX_MS; i++)
            delay *= 2;
        if (delay > RESTART_DELAY_MAX_MS) delay = RESTART_DELAY_MAX_MS;
        char how[64];
        if (sig)
            snprintf(how, sizeof how, "killed by signal %d", sig);
        else
            snprintf(how, sizeof how, "exited with status %lld", (long long)status);
        psctl__say(sv, "%s %s%s; restarting (%d/%ld)", c->label, how,
                   c->kind == CHILD_PSD && !c->endpoint[0] ? " before it was ready" : "",
                   c->restarts, max);
        c->restart_pending = 1;
        uv_timer_start(&c->restart_timer, on_restart_timer, delay, 0);
        return;
    }
    char msg[256], how[96];
    if (c->kind == CHILD_PSD && !c->endpoint[0]) {
        describe_status(how, sizeof how, status, sig);
        snprintf(msg, sizeof msg, "%s exited before it was ready (%s)", c->label, how);
    } else {
        psctl__describe_exit(msg, sizeof msg, c, "failed", status, sig);
    }
    size_t used = strlen(msg);
    if (max > 0 && bad_config)
        snprintf(msg + used, sizeof msg - used,
                 "; exit status %d means bad configuration: "
                 "not restarted",
                 EXIT_BAD_CONFIG);
    else if (max > 0)
        snprintf(msg + used, sizeof msg - used, "; gave up after %d restart%s (--max-restarts %ld)",
                 c->restarts, c->restarts == 1 ? "" : "s", max);
    psctl__abort_job(sv, 1, "%s", msg);
}

/* --replicas > 1: psd replica c, up once, exited while the job runs. The group goes
 * on with the replicas left; c is restarted (up to --max-restarts) and rejoins as a
 * backup, from a snapshot of the new primary's state. The job fails once no replica
 * of the shard is left (that part of the model is gone with them). */
static void replica_lost(sup *sv, child *c, int64_t status, int sig) {
    c->gone = 1;
    int live = 0;
    for (int r = 0; r < sv->replicas; r++) {
        const child *o = &sv->children[c->index * sv->replicas + r];
        live += o->running || o->restart_pending;
    }
    char how[64];
    if (sig)
        snprintf(how, sizeof how, "signal %d", sig);
    else
        snprintf(how, sizeof how, "exit status %lld", (long long)status);
    if (live == 0) {
        psctl__abort_job(sv, 1,
                         "psd shard %d replica %d exited (%s): every replica of shard %d is gone, "
                         "and that part of the model with them; stopping",
                         c->index, c->replica, how, c->index);
        return;
    }
    long max = sv->job->opts->max_restarts;
    if (c->restarts >= max || (sig == 0 && status == EXIT_BAD_CONFIG)) {
        psctl__say(sv, "psd shard %d replica %d exited (%s): its group goes on with %d of %d "
                   "replicas; not restarted (%s)", c->index, c->replica, how, live, sv->replicas,
                   sig == 0 && status == EXIT_BAD_CONFIG ? "bad configuration" : "--max-restarts");
        return;
    }
    c->restarts++;
    psctl__say(sv, "psd shard %d replica %d exited (%s): its group goes on with %d of %d "
               "replicas; restarting it (%d/%ld): it rejoins as a backup", c->index, c->replica,
               how, live, sv->replicas, c->restarts, max);
    c->gone = 0;
    c->restart_pending = 1;
    uv_timer_start(&c->restart_timer, on_restart_timer, RESTART_DELAY_MS, 0);
}

/* ---- events ------------------------------------------------------------------- */

static void on_child_exit(uv_process_t *p, int64_t status, int sig) {
    child *c = p->data;
    sup *sv = c->sv;
    c->running = 0;
    c->awaiting_ready = 0;
    uv_kill(-c->pid, SIGKILL); /* whatever it left behind in its process group */
    close_proc(c);             /* a restart initialises the handle again */
    int ok = status == 0 && sig == 0;
    char how[96];
    PS_DEBUG("%s (pid %d) exited: status %lld, signal %d", c->label, c->pid, (long long)status,
             sig);

    switch (sv->phase) {
    case PHASE_STARTING:
    case PHASE_RUNNING:
        if (c->kind == CHILD_WORKER && c->scaled_down) { /* psctl scale stopped it */
            describe_status(how, sizeof how, status, sig);
            psctl__say(sv, "%s left the job (psctl scale; %s): %d worker%s", c->label, how,
                       sv->workers_active, sv->workers_active == 1 ? "" : "s");
            psctl__workers_maybe_done(sv);
        } else if (c->kind == CHILD_PSD && sv->replicas > 1 && c->endpoint[0]) {
            replica_lost(sv, c, status, sig);
        } else if (!ok && sv->job->opts->allreduce) {
            psctl__ring_worker_failed(sv, c, status, sig);
        } else if (!ok) {
            child_failed(sv, c, status, sig);
        } else if (c->kind == CHILD_PSD) { /* Shutdown request or someone's SIGTERM */
            if (!c->endpoint[0]) {
                describe_status(how, sizeof how, status, sig);
                psctl__abort_job(sv, 1, "%s exited before it was ready (%s)", c->label, how);
            } else {
                psctl__describe_exit(how, sizeof how, c, "exited unexpectedly", status, sig);
                psctl__abort_job(sv, 1, "%s", how);
            }
        } else {
            sv->workers_ok++;
            psctl__workers_maybe_done(sv);
        }
        break;
    case PHASE_REGROUPING:
        psctl__ring_worker_stopped(sv, c, status, sig);
        break;
    case PHASE_FINISHING:
        if (!ok && sig != SIGTERM) {
            describe_status(how, sizeof how, status, sig);
            psctl__say(sv, "%s did not stop cleanly (%s)", c->label, how);
            sv->unclean = 1;
        }
        break;
    case PHASE_ABORTING:
    case PHASE_DONE:
        break;
    }
    psctl__check_done(sv);
}

/* Returns 1 when c's ready file holds an endpoint, "host:port" or "ipc://PATH" (copied
 * to ep[PSCTL_ENDPOINT_MAX]), 0 when it is not there (or not complete) yet, -1 when it
 * is malformed. */
static int read_ready(const child *c, char ep[PSCTL_ENDPOINT_MAX]) {
    int fd = open(c->ready_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[2 * PSCTL_ENDPOINT_MAX];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0 || buf[n - 1] != '\n') return n == (ssize_t)sizeof buf - 1 ? -1 : 0;
    buf[n - 1] = '\0';
    if (strlen(buf) >= PSCTL_ENDPOINT_MAX) return -1;
    if (strcspn(buf, " \t\r\n,") != strlen(buf)) return -1;
    if (strncmp(buf, "ipc://", 6) == 0) {
        if (buf[6] == '\0') return -1;
        memcpy(ep, buf, strlen(buf) + 1);
        return 1;
    }
    char *colon = strrchr(buf, ':');
    if (!colon || colon == buf) return -1;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || port < 1 || port > 65535) return -1;
    memcpy(ep, buf, strlen(buf) + 1);
    return 1;
}

/* Takes the endpoint psd c reported. The first one is what the workers get; a
 * restarted shard must report the same (it was given that port). Returns 0, or -1
 * after stopping the job. */
static int psd_ready(sup *sv, child *c, const char *ep) {
    c->awaiting_ready = 0;
    if (c->addr[0] && strcmp(ep, c->addr) != 0) {
        psctl__abort_job(sv, 1, "%s is ready at %s, not at %s where its group (--peers) expects "
                         "it; stopping", c->label, ep, c->addr);
        return -1;
    }
    if (!c->endpoint[0]) {
        snprintf(c->endpoint, sizeof c->endpoint, "%s", ep);
        if (strncmp(ep, "ipc://", 6) != 0) c->port = atoi(strrchr(ep, ':') + 1);
        return 0;
    }
    if (strcmp(ep, c->endpoint) != 0) {
        psctl__abort_job(sv, 1,
                         "%s came back at %s, not at %s where the workers expect it; stopping",
                         c->label, ep, c->endpoint);
        return -1;
    }
    psctl__say(sv, "%s back at %s", c->label, ep);
    return 0;
}

/* The workers' --ps list, "host:port,..." or "ipc://PATH,..." in shard order, into
 * sv->endpoints; with --replicas > 1 each shard's entry is its replicas' endpoints in
 * replica order (the primary first), separated by '|'. */
static int join_endpoints(sup *sv) {
    size_t cap = (size_t)sv->npsd * sizeof sv->children[0].endpoint + 1;
    sv->endpoints = calloc(1, cap);
    if (!sv->endpoints) return -1;
    for (int i = 0; i < sv->npsd; i++) {
        if (i) strcat(sv->endpoints, i % sv->replicas ? "|" : ",");
        strcat(sv->endpoints, sv->children[i].endpoint);
    }
    return 0;
}

/* Polls the ready files of the shards that were (re)started: a new one is taken (see
 * psd_ready), a missing one past its deadline stops the job. Once every shard is up
 * for the first time, the workers start. */
static void on_ready_timer(uv_timer_t *t) {
    sup *sv = t->data;
    if (sv->phase != PHASE_STARTING && sv->phase != PHASE_RUNNING) {
        uv_timer_stop(t);
        return;
    }
    int waiting = 0, all_up = 1;
    uint64_t now = uv_now(&sv->loop);
    char late[512] = "";
    size_t used = 0;
    for (int i = 0; i < sv->npsd; i++) {
        child *c = &sv->children[i];
        if (c->awaiting_ready) {
            char ep[PSCTL_ENDPOINT_MAX];
            int r = read_ready(c, ep);
            if (r < 0) {
                psctl__abort_job(
                    sv, 1,
                    "%s wrote a malformed ready file %s (want HOST:PORT or ipc://PATH and "
                    "a newline)",
                    c->label, c->ready_path);
                return;
            }
            if (r > 0 && psd_ready(sv, c, ep) < 0) return;
            if (r == 0) {
                waiting++;
                if (now >= c->ready_deadline && used < sizeof late - 16)
                    used += (size_t)snprintf(late + used, sizeof late - used, "%s%s",
                                             used ? ", " : "", c->label);
            }
        }
        if ((!c->running && !c->gone) || c->awaiting_ready) all_up = 0;
    }
    if (late[0]) {
        psctl__abort_job(sv, 1, "%s not ready within %.1f s (no ready file); stopping", late,
                         sv->job->ready_timeout_ms / 1000.0);
        return;
    }
    if (waiting == 0) uv_timer_stop(t);
    if (sv->phase == PHASE_STARTING && all_up) {
        if (join_endpoints(sv) < 0) {
            psctl__abort_job(sv, 1, "out of memory");
            return;
        }
        if (sv->replicas > 1)
            psctl__say(sv, "psd shards ready (%d replicas each) at %s; starting %ld worker%s",
                       sv->replicas, sv->endpoints, sv->job->opts->num_workers,
                       sv->job->opts->num_workers == 1 ? "" : "s");
        else
            psctl__say(sv, "psd shards ready at %s; starting %ld worker%s", sv->endpoints,
                       sv->job->opts->num_workers, sv->job->opts->num_workers == 1 ? "" : "s");
        psctl__start_workers(sv);
    }
}

static void on_timeout(uv_timer_t *t) {
    sup *sv = t->data;
    psctl__abort_job(sv, 1,
                     "timeout: the job ran longer than --timeout %g s; stopping all processes",
                     sv->job->opts->timeout_s);
}

static void on_signal(uv_signal_t *h, int signum) {
    sup *sv = h->data;
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
    sv->signals++;
    sv->exit_code = 128 + signum;
    if (sv->phase == PHASE_DONE) return;
    if (sv->phase == PHASE_ABORTING) {
        if (sv->signals > 1 && sv->kill_stage == 0) {
            psctl__say(sv, "got %s again; killing all processes now", name);
            kill_stragglers(sv);
            uv_timer_start(&sv->stop_timer, on_stop_timer, KILL_GRACE_MS, 0);
        }
        return;
    }
    psctl__say(sv, "got %s; stopping all processes", name);
    sv->phase = PHASE_ABORTING;
    arm_stop(sv, ABORT_GRACE_MS);
}

/* ---- setup and teardown ------------------------------------------------------- */

/* The inherited environment plus PS_PARENT_PID=<our pid> (psctl_env_free). */
static char **build_env(void) {
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    return psctl_env_set(environ, PS_PARENT_PID_ENV, pid);
}

/* --replicas > 1: the address of every psd, chosen before any starts (a replica must know
 * its group's): a free 127.0.0.1 port each, or with ipc its socket path; and each shard's
 * --peers list. Returns 0, or a negative libuv error (printed when it is not ENOMEM). */
static int choose_addresses(sup *sv) {
    int *ports = calloc((size_t)sv->npsd, sizeof *ports);
    sv->peers = calloc((size_t)(sv->npsd / sv->replicas), sizeof *sv->peers);
    if (!ports || !sv->peers) {
        free(ports);
        return UV_ENOMEM;
    }
    char err[256];
    if (!sv->job->sock_dir && psctl_free_ports(ports, sv->npsd, err, sizeof err) != 0) {
        psctl__say(sv, "cannot find free ports for the psd replicas: %s", err);
        free(ports);
        return UV_EADDRNOTAVAIL;
    }
    for (int i = 0; i < sv->npsd; i++) {
        child *c = &sv->children[i];
        if (c->ipc_path) {
            snprintf(c->addr, sizeof c->addr, "ipc://%s", c->ipc_path);
        } else {
            c->port = ports[i];
            snprintf(c->addr, sizeof c->addr, "127.0.0.1:%d", c->port);
        }
    }
    free(ports);
    for (int s = 0; s < sv->npsd / sv->replicas; s++) {
        size_t cap = (size_t)sv->replicas * PSCTL_ENDPOINT_MAX + 1;
        sv->peers[s] = calloc(1, cap);
        if (!sv->peers[s]) return UV_ENOMEM;
        for (int r = 0; r < sv->replicas; r++) {
            if (r) strcat(sv->peers[s], ",");
            strcat(sv->peers[s], sv->children[s * sv->replicas + r].addr);
        }
    }
    return 0;
}

static int setup(sup *sv, const psctl_job *job) {
    const psctl_local_opts *o = job->opts;
    sv->job = job;
    sv->stdout_tty = isatty(STDOUT_FILENO);
    sv->replicas = o->allreduce ? 1 : (int)o->psd_replicas;
    sv->npsd = (int)o->num_ps * sv->replicas;
    int n = sv->npsd + (int)psctl_local_slots(o);
    sv->children = calloc((size_t)n, sizeof *sv->children);
    sv->env = build_env();
    sv->psd_env = sv->env ? psctl_env_unset(sv->env, "TF_CONFIG") : NULL;
    sv->ports = calloc((size_t)o->num_workers, sizeof *sv->ports);
    if (!sv->children || !sv->env || !sv->psd_env || !sv->ports) return UV_ENOMEM;
    sv->nchildren = n;
    for (int i = 0; i < sv->nchildren; i++) {
        child *c = &sv->children[i];
        c->sv = sv;
        c->kind = i < sv->npsd ? CHILD_PSD : CHILD_WORKER;
        c->index = c->kind == CHILD_PSD ? i / sv->replicas : i - sv->npsd;
        c->replica = c->kind == CHILD_PSD ? i % sv->replicas : 0;
        /* names of a replica's label, ready file and socket: psd 0 replica 1, psd-0-r1 */
        char rlabel[24] = "", rfile[24] = "";
        if (c->kind == CHILD_PSD && sv->replicas > 1) {
            snprintf(rlabel, sizeof rlabel, " replica %d", c->replica);
            snprintf(rfile, sizeof rfile, "-r%d", c->replica);
        }
        snprintf(c->label, sizeof c->label, "%s %d%s", c->kind == CHILD_PSD ? "psd" : "worker",
                 c->index, rlabel);
        psctl_relay_init(&c->relays[0], &sv->screen, c->label, STDOUT_FILENO, sv->stdout_tty);
        psctl_relay_init(&c->relays[1], &sv->screen, c->label, STDERR_FILENO, 0);
        if (c->kind == CHILD_PSD &&
            asprintf(&c->ready_path, "%s/psd-%d%s.ready", job->run_dir, c->index, rfile) < 0) {
            c->ready_path = NULL;
            return UV_ENOMEM;
        }
        if (c->kind == CHILD_PSD && job->sock_dir &&
            asprintf(&c->ipc_path, "%s/psd-%d%s.sock", job->sock_dir, c->index, rfile) < 0) {
            c->ipc_path = NULL;
            return UV_ENOMEM;
        }
        uv_timer_init(&sv->loop, &c->restart_timer);
        c->restart_timer.data = c;
        sv->open_handles++;
    }
    if (sv->replicas > 1) {
        int r = choose_addresses(sv);
        if (r < 0) return r;
    }
    uv_timer_t *timers[] = {&sv->ready_timer, &sv->stop_timer, &sv->timeout_timer, &sv->drain_timer,
                            &sv->regroup_timer};
    for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++) {
        uv_timer_init(&sv->loop, timers[i]);
        timers[i]->data = sv;
        sv->open_handles++;
    }
    /* Only children, the ready poll and pending restarts keep the loop running; the
     * other timers and the signal watchers fire while it runs but never hold it open. */
    uv_unref((uv_handle_t *)&sv->stop_timer);
    uv_unref((uv_handle_t *)&sv->timeout_timer);
    uv_unref((uv_handle_t *)&sv->drain_timer);
    uv_signal_t *sigs[] = {&sv->sigint, &sv->sigterm};
    int signums[] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        int r = uv_signal_init(&sv->loop, sigs[i]);
        if (r < 0) return r;
        sigs[i]->data = sv;
        sv->open_handles++;
        r = uv_signal_start(sigs[i], on_signal, signums[i]);
        if (r < 0) return r;
        uv_unref((uv_handle_t *)sigs[i]);
    }
    if (psctl_local_elastic(o)) { /* psctl scale's way in */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", job->run_dir, PSCTL_CONTROL_SOCKET);
        int r = psctl__control_open(sv, path);
        if (r < 0)
            psctl__say(sv, "cannot listen on %s (%s): psctl scale cannot reach this job", path,
                       uv_strerror(r));
        else
            psctl__say(sv, "elastic job: %ld of %ld worker slots, at least %ld live; psctl "
                           "scale --workers K %s (or %ld, psctl's pid) changes their number",
                       o->num_workers, psctl_local_slots(o), o->workers_min, job->run_dir,
                       (long)getpid());
    }
    return 0;
}

static void close_all(sup *sv) {
    for (int i = 0; i < sv->nchildren; i++) {
        child *c = &sv->children[i];
        for (int k = 0; k < 2; k++)
            psctl__close_pipe(c, k);
        close_proc(c);
        close_handle((uv_handle_t *)&c->restart_timer);
    }
    close_handle((uv_handle_t *)&sv->ready_timer);
    close_handle((uv_handle_t *)&sv->stop_timer);
    close_handle((uv_handle_t *)&sv->timeout_timer);
    close_handle((uv_handle_t *)&sv->drain_timer);
    close_handle((uv_handle_t *)&sv->regroup_timer);
    close_handle((uv_handle_t *)&sv->sigint);
    close_handle((uv_handle_t *)&sv->sigterm);
    psctl__control_close(sv);
}

static void free_all(sup *sv) {
    for (int i = 0; i < sv->nchildren && sv->children; i++) {
        psctl_relay_free(&sv->children[i].relays[0]);
        psctl_relay_free(&sv->children[i].relays[1]);
        free(sv->children[i].ready_path);
        free(sv->children[i].ipc_path);
    }
    for (int s = 0; sv->peers && s < sv->npsd / sv->replicas; s++)
        free(sv->peers[s]);
    free(sv->peers);
    free(sv->children);
    free(sv->endpoints);
    free(sv->ports);
    free(sv->psd_env);
    psctl_env_free(sv->env);
    free(sv);
}

int psctl_supervise(const psctl_job *job) {
    sup *sv = calloc(1, sizeof *sv);
    if (!sv) {
        fprintf(stderr, "psctl: out of memory\n");
        return 1;
    }
    int r = uv_loop_init(&sv->loop);
    if (r < 0) {
        fprintf(stderr, "psctl: cannot create the event loop: %s\n", uv_strerror(r));
        free(sv);
        return 1;
    }
    r = setup(sv, job);
    if (r < 0) {
        psctl__say(sv, "cannot set up: %s", uv_strerror(r));
        sv->exit_code = 1;
        sv->phase = PHASE_DONE;
        sv->end_phase = PHASE_ABORTING;
    } else {
        if (job->opts->timeout_s > 0)
            uv_timer_start(&sv->timeout_timer, on_timeout,
                           (uint64_t)(job->opts->timeout_s * 1000.0 + 0.5), 0);
        sv->phase = PHASE_STARTING;
        if (job->opts->allreduce)
            psctl__start_workers(sv);
        else
            start_psds(sv);
        uv_run(&sv->loop, UV_RUN_DEFAULT);
    }

    close_all(sv);
    uv_run(&sv->loop, UV_RUN_DEFAULT);
    int code = sv->exit_code;
    if (sv->phase != PHASE_DONE) { /* cannot happen: the loop ends only when done */
        psctl__say(sv, "internal error: the event loop ended while processes were running");
        if (code == 0) code = 1;
    } else if (sv->end_phase == PHASE_FINISHING && sv->signals == 0) {
        const psctl_local_opts *o = job->opts;
        if (sv->unclean) {
            psctl__say(sv, "job finished, but not every psd stopped cleanly");
            code = 1;
        } else if (o->allreduce) {
            psctl__say(sv, "job finished: %ld workers, strategy %s%s", o->num_workers,
                       o->strategy_name, sv->regroups ? " (after restarting the workers)" : "");
            code = 0;
        } else {
            if (sv->replicas > 1)
                psctl__say(sv, "job finished: %ld ps (%d replicas each), %ld workers, mode %s",
                           o->num_ps, sv->replicas, o->num_workers, o->mode);
            else
                psctl__say(sv, "job finished: %ld ps, %ld workers, mode %s", o->num_ps,
                           o->num_workers, o->mode);
            code = 0;
        }
    }
    int loop_rc = uv_loop_close(&sv->loop);
    if (sv->open_handles != 0 || loop_rc != 0) {
        psctl__say(sv, "internal error: %d libuv handles left open", sv->open_handles);
        if (code == 0) code = 1;
    }
    free_all(sv);
    return code;
}
