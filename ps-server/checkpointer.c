/* psd's checkpoints on its loop (server.h): the restore at start; then each
 * checkpoint as a snapshot taken on the loop (checkpoint.h: the tables' rows
 * and the variables' slots copied, their values shared copy-on-write) and its
 * file written on libuv's thread pool, one at a time, so that the loop pauses
 * for the copy only, not for the write and its fsyncs. A Checkpoint request
 * is answered once its file is written; one that arrives during a write waits
 * for the next checkpoint, which starts when that write ends. The final
 * checkpoint at SIGTERM/SIGINT is written on the loop, after any write in
 * flight. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoint.h"
#include "log.h"
#include "ps_error.h"
#include "server.h"

struct ps_ckpt_job {
    uv_work_t work;
    ps_server *s;
    ps_ckpt_snapshot *snap;
    char dir[sizeof((ps_server_config){0}).checkpoint_dir];
    int keep;
    uint64_t version, pushes, start_ns, pause_ns; /* version and pushes applied at the snapshot */
    ps_ckpt_waiter *waiters; /* the requests this checkpoint answers */
    size_t n_waiters;
    /* the write's outcome */
    int rc;
    char path[1200], err[512];
    uint64_t bytes;
};

/* Creates dir (one level) if missing. */
static int ensure_dir(const char *dir, char *err, size_t errlen) {
    if (mkdir(dir, 0750) == 0 || errno == EEXIST) return PS_OK;
    snprintf(err, errlen, "cannot create checkpoint directory %s: %s", dir, strerror(errno));
    return PS_EIO;
}

int ps__ckpt_restore(ps_server *s, char *err, size_t errlen) {
    const char *dir = s->cfg.checkpoint_dir;
    int rc = ensure_dir(dir, err, errlen);
    if (rc != PS_OK) return rc;
    ps_ckpt_meta m;
    char path[1200];
    rc = ps_ckpt_restore(dir, &s->shard.store, &s->shard.tables, &m, path, sizeof path, err,
                         errlen);
    /* the restored tables too */
    ps_tables_set_bound(&s->shard.tables, (uint64_t)s->cfg.max_table_mb << 20);
    if (rc == PS_ENOENT) {
        PS_INFO("no valid checkpoint in %s: starting empty", dir);
        return PS_OK;
    }
    if (rc != PS_OK) return rc;
    if (m.shard != (uint64_t)s->cfg.shard || m.num_shards != (uint64_t)s->cfg.num_shards) {
        snprintf(err, errlen,
                 "checkpoint %s belongs to shard %llu of %llu, this is shard %ld of %ld", path,
                 (unsigned long long)m.shard, (unsigned long long)m.num_shards, s->cfg.shard,
                 s->cfg.num_shards);
        return PS_EINVAL;
    }
    s->shard.step.version = m.version;
    s->shard.stats.updates_applied = m.updates_applied;
    s->ckpt_version = m.version;
    s->ckpt_ns = ps__now_ns();
    snprintf(s->shard.job_id, sizeof s->shard.job_id, "%.*s", (int)PS_WIRE_MAX_JOB_ID, m.job_id);
    PS_INFO("restored checkpoint %s: version %llu, %zu variables, %zu tables%s%s", path,
            (unsigned long long)m.version, s->shard.store.n, s->shard.tables.n,
            m.job_id[0] ? " of job " : "", m.job_id);
    return PS_OK;
}

void ps__ckpt_meta_now(const ps_server *s, ps_ckpt_meta *m) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    *m = (ps_ckpt_meta){
        .version = s->shard.step.version,
        .updates_applied = s->shard.stats.updates_applied,
        .shard = (uint64_t)s->cfg.shard,
        .num_shards = (uint64_t)s->cfg.num_shards,
        .mode = (uint64_t)s->cfg.mode,
        .incarnation = s->incarnation,
        .unix_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u,
    };
    snprintf(m->job_id, sizeof m->job_id, "%s", s->shard.job_id);
}

/* Counts and logs a checkpoint's outcome. */
static void record(ps_server *s, int rc, uint64_t version, uint64_t pushes, const char *path,
                   uint64_t bytes, const char *err, uint64_t start_ns, uint64_t pause_ns) {
    if (rc != PS_OK) {
        s->stats.checkpoint_failures++;
        PS_ERROR("checkpoint failed: %s", err);
        return;
    }
    s->stats.checkpoints++;
    s->ckpt_version = version;
    s->ckpt_pushes = pushes;
    s->ckpt_ns = ps__now_ns();
    PS_INFO("checkpoint version %llu written to %s (%llu bytes, %.1f ms; the loop paused %.1f ms)",
            (unsigned long long)version, path, (unsigned long long)bytes,
            (double)(s->ckpt_ns - start_ns) / 1e6, (double)pause_ns / 1e6);
}

static void answer(ps_server *s, ps_ckpt_waiter *w, size_t n, int rc, uint64_t version,
                   const char *path, uint64_t bytes, const char *err) {
    for (size_t i = 0; i < n; i++) {
        if (rc != PS_OK) {
            ps__server_reply_error(s, w[i].identity, w[i].identity_len, w[i].request_id, rc, err);
        } else {
            Ps__Header out = PS__HEADER__INIT;
            Ps__CheckpointReply rep = PS__CHECKPOINT_REPLY__INIT;
            rep.path = (char *)path;
            rep.version = version;
            rep.bytes = bytes;
            out.body_case = PS__HEADER__BODY_CHECKPOINT_REPLY;
            out.checkpoint_reply = &rep;
            ps__server_reply(s, w[i].identity, w[i].identity_len, w[i].request_id, &out, NULL, 0);
        }
        free(w[i].identity);
    }
    free(w);
}

/* The final checkpoint, written on the loop; then the queued requests get its
 * outcome and the server stops. */
static void final_then_stop(ps_server *s) {
    ps_ckpt_meta m;
    ps__ckpt_meta_now(s, &m);
    char path[1200], err[512];
    uint64_t bytes = 0, t0 = ps__now_ns(), pushes = s->shard.stats.pushes_applied;
    int rc = ps_ckpt_save(s->cfg.checkpoint_dir, (int)s->cfg.keep_checkpoints, &s->shard.store,
                          &s->shard.tables, &m, path, sizeof path, &bytes, err, sizeof err);
    uint64_t took = ps__now_ns() - t0;
    record(s, rc, m.version, pushes, path, bytes, err, t0, took);
    if (rc != PS_OK) {
        s->final_ckpt_failed = 1; /* what we promised to save is not saved: exit 1 */
        PS_ERROR("stopping without the final checkpoint: the updates since the last one "
                 "are lost");
    }
    answer(s, s->ckpt_next, s->ckpt_next_n, rc, m.version, path, bytes, err);
    s->ckpt_next = NULL;
    s->ckpt_next_n = s->ckpt_next_cap = 0;
    ps_server_stop(s);
}

static void write_off_loop(uv_work_t *req) {
    struct ps_ckpt_job *j = req->data;
    j->rc = ps_ckpt_snapshot_write(j->snap, j->dir, j->keep, j->path, sizeof j->path, &j->bytes,
                                   j->err, sizeof j->err);
}

static int start(ps_server *s, ps_ckpt_waiter *w, size_t nw, char *err, size_t errlen);

static void after_write(uv_work_t *req, int status) {
    struct ps_ckpt_job *j = req->data;
    ps_server *s = j->s;
    s->ckpt_job = NULL;
    ps_ckpt_snapshot_free(j->snap);
    if (status != 0) {
        j->rc = PS_EIO;
        snprintf(j->err, sizeof j->err, "the write did not run: %s", uv_strerror(status));
    }
    record(s, j->rc, j->version, j->pushes, j->path, j->bytes, j->err, j->start_ns, j->pause_ns);
    answer(s, j->waiters, j->n_waiters, j->rc, j->version, j->path, j->bytes, j->err);
    free(j);
    if (s->ckpt_stop_after) {
        s->ckpt_stop_after = 0;
        final_then_stop(s);
    } else if (s->ckpt_next_n) { /* requests that came during the write: their own checkpoint */
        ps_ckpt_waiter *next = s->ckpt_next;
        size_t n = s->ckpt_next_n;
        s->ckpt_next = NULL;
        s->ckpt_next_n = s->ckpt_next_cap = 0;
        char err[512];
        int rc = s->stopping ? PS_ESHUTDOWN : start(s, next, n, err, sizeof err);
        if (rc == PS_ESHUTDOWN) snprintf(err, sizeof err, "psd is shutting down");
        if (rc != PS_OK) answer(s, next, n, rc, 0, "", 0, err);
    }
    /* replies sent here may have taken ZMQ_FD's edge while requests wait */
    ps__server_drain(s);
}

/* Takes the snapshot (the loop's pause) and queues its write; on success the
 * job owns w[0..nw). */
static int start(ps_server *s, ps_ckpt_waiter *w, size_t nw, char *err, size_t errlen) {
    struct ps_ckpt_job *j = calloc(1, sizeof *j);
    if (!j) {
        s->stats.checkpoint_failures++;
        snprintf(err, errlen, "out of memory");
        PS_ERROR("checkpoint failed: %s", err);
        return PS_ENOMEM;
    }
    ps_ckpt_meta m;
    ps__ckpt_meta_now(s, &m);
    j->start_ns = ps__now_ns();
    int rc = ps_ckpt_snapshot_take(&s->shard.store, &s->shard.tables, &m, 1, &j->snap);
    j->pause_ns = ps__now_ns() - j->start_ns;
    if (rc != PS_OK) {
        free(j);
        s->stats.checkpoint_failures++;
        snprintf(err, errlen, "out of memory for the checkpoint's snapshot");
        PS_ERROR("checkpoint failed: %s", err);
        return rc;
    }
    j->s = s;
    snprintf(j->dir, sizeof j->dir, "%s", s->cfg.checkpoint_dir);
    j->keep = (int)s->cfg.keep_checkpoints;
    j->version = m.version;
    j->pushes = s->shard.stats.pushes_applied;
    j->waiters = w;
    j->n_waiters = nw;
    j->work.data = j;
    int q = uv_queue_work(s->loop, &j->work, write_off_loop, after_write);
    if (q != 0) {
        ps_ckpt_snapshot_free(j->snap);
        free(j);
        s->stats.checkpoint_failures++;
        snprintf(err, errlen, "cannot queue the checkpoint's write: %s", uv_strerror(q));
        PS_ERROR("checkpoint failed: %s", err);
        return PS_EIO;
    }
    s->ckpt_job = j;
    PS_INFO("checkpoint version %llu: snapshot of %.1f MiB taken in %.1f ms, written off the loop",
            (unsigned long long)m.version, (double)ps_ckpt_snapshot_bytes(j->snap) / (1 << 20),
            (double)j->pause_ns / 1e6);
    return PS_OK;
}

int ps__ckpt_request(ps_server *s, const ps_request *r, char *err, size_t errlen) {
    if (!s->cfg.checkpoint_dir[0]) {
        snprintf(err, errlen, "this psd has no --checkpoint-dir");
        return PS_EINVAL;
    }
    ps_ckpt_waiter w = {.identity = malloc(r->identity_len ? r->identity_len : 1),
                        .identity_len = r->identity_len,
                        .request_id = r->hdr->request_id};
    if (!w.identity) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    memcpy(w.identity, r->identity, r->identity_len);
    if (s->ckpt_job) { /* it may not hold what this request has seen: the next one */
        if (s->ckpt_next_n == s->ckpt_next_cap) {
            size_t cap = s->ckpt_next_cap ? 2 * s->ckpt_next_cap : 4;
            ps_ckpt_waiter *v = realloc(s->ckpt_next, cap * sizeof *v);
            if (!v) {
                free(w.identity);
                snprintf(err, errlen, "out of memory");
                return PS_ENOMEM;
            }
            s->ckpt_next = v, s->ckpt_next_cap = cap;
        }
        s->ckpt_next[s->ckpt_next_n++] = w;
        return PS_OK;
    }
    ps_ckpt_waiter *one = malloc(sizeof *one);
    if (!one) {
        free(w.identity);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    *one = w;
    int rc = start(s, one, 1, err, errlen);
    if (rc != PS_OK) {
        free(w.identity);
        free(one);
    }
    return rc;
}

void ps__ckpt_periodic(ps_server *s) {
    /* a write in flight: the next tick. Nothing new: neither the version moved nor a
     * push was applied (async row pushes do not move the version) */
    if (s->ckpt_job || (s->ckpt_ns && s->ckpt_version == s->shard.step.version &&
                        s->ckpt_pushes == s->shard.stats.pushes_applied))
        return;
    char err[512];
    start(s, NULL, 0, err, sizeof err);
}

void ps__ckpt_stop_signal(ps_server *s) {
    if (s->ckpt_stop_after) return; /* a second signal: already on its way */
    if (!s->cfg.checkpoint_dir[0] || s->stopping) {
        ps_server_stop(s);
        return;
    }
    if (s->ckpt_job) {
        PS_INFO("the final checkpoint follows the one being written");
        s->ckpt_stop_after = 1;
        return;
    }
    final_then_stop(s);
}

void ps__ckpt_free(ps_server *s) {
    for (size_t i = 0; i < s->ckpt_next_n; i++)
        free(s->ckpt_next[i].identity);
    free(s->ckpt_next);
    s->ckpt_next = NULL;
    s->ckpt_next_n = s->ckpt_next_cap = 0;
}
