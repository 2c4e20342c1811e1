/* A replicated shard (replica.h): the primary's stream and held replies, the
 * backup's socket to its primary, and the lease timer of both. */
#include "replica.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "log.h"
#include "log_codec.h"
#include "ps_error.h"
#include "server.h"

/* A reply held until the backup has applied entry `index` (and the lease holds). */
typedef struct held {
    struct held *next;
    uint64_t index;
    zmq_msg_t *frames; /* identity, header, payloads */
    size_t n;
} held;

struct ps_repl {
    ps_server *s;
    ps_lease lease;
    int replica, replicas, primary_replica;
    char peers[PS_MAX_REPLICAS][280];
    uint64_t index; /* primary: entries logged; backup: entries applied */
    int replaying;  /* a backup applying an entry: the shard's own log is not ours */
    /* primary: the backup in its view */
    void *backup_id;
    size_t backup_id_len;
    int backup_fd;
    uint64_t acked; /* entries the backup has applied */
    held *head, *tail;
    size_t n_held;
    int lapse_logged;
    int restored; /* the state came from a checkpoint, not from the log */
    uint64_t wait_logged_ns;
    /* a follower that needs the shard's state (a snapshot) before the stream */
    int snap_wanted;
    void *snap_id;
    size_t snap_id_len;
    int snap_fd;
    uint32_t snap_replica;
    /* every replica: the socket to its peer, to find or follow the primary */
    int peer;
    uint64_t found_deadline_ns; /* replica 0: found a fresh group if no primary by then */
    int peer_looking;  /* replica 0: the peer answered our Follow that it looks for one too */
    int peer_in_group; /* the peer answered as the backup of a live group (ENOTPRIMARY) */
    void *dealer;
    uv_poll_t poll;
    uv_timer_t timer;
    int handles;
    uint64_t follow_sent_ns;
    int ready_written;
};

static uint64_t lease_tick_ms(const ps_repl *r) {
    uint64_t t = r->lease.lease_ns / 4000000ull;
    return t < 5 ? 5 : t;
}

/* --- setup -------------------------------------------------------------------- */

static int parse_peers(ps_repl *r, const char *list, char *err, size_t errlen) {
    const char *p = list;
    for (int i = 0; i < r->replicas; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len >= sizeof r->peers[i] - 6) {
            snprintf(err, errlen, "--peers: address %d is empty or too long", i);
            return PS_EINVAL;
        }
        /* "host:port" is the workers' form; ZeroMQ wants tcp://host:port */
        if (strncmp(p, "ipc://", 6) == 0 || strncmp(p, "tcp://", 6) == 0)
            snprintf(r->peers[i], sizeof r->peers[i], "%.*s", (int)len, p);
        else
            snprintf(r->peers[i], sizeof r->peers[i], "tcp://%.*s", (int)len, p);
        p += len + 1;
    }
    return PS_OK;
}

int ps__repl_init(ps_server *s, char *err, size_t errlen) {
    s->repl = NULL;
    if (s->cfg.group_replicas <= 1) return PS_OK;
    if (s->cfg.curve_secret[0]) {
        snprintf(err, errlen,
                 "--replicas with --curve-secret is not supported yet: the replicas' "
                 "own connection has no keys");
        return PS_EINVAL;
    }
    ps_repl *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    s->repl = r;
    r->s = s;
    r->replica = (int)s->cfg.replica;
    r->replicas = (int)s->cfg.group_replicas;
    r->backup_fd = -1;
    r->restored = s->ckpt_version != 0;
    /* every replica starts looking for its group's primary (replica 0 founds the
     * group when it finds none: ps__repl_start, on_timer) */
    ps_lease_init(&r->lease, (uint64_t)s->cfg.lease_ms * 1000000ull, 1, r->replicas);
    int rc = parse_peers(r, s->cfg.peers, err, errlen);
    if (rc != PS_OK) return rc;
    r->peer = r->replica == 0 ? 1 : 0;
    r->snap_fd = -1;
    r->dealer = zmq_socket(s->zctx, ZMQ_DEALER);
    int linger = 0, ivl = 50;
    if (!r->dealer) {
        snprintf(err, errlen, "cannot make the socket to the other replica");
        return PS_EIO;
    }
    zmq_setsockopt(r->dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(r->dealer, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    if (zmq_connect(r->dealer, r->peers[r->peer]) != 0) {
        snprintf(err, errlen, "--peers: cannot connect to %s: %s", r->peers[r->peer],
                 zmq_strerror(zmq_errno()));
        return PS_EINVAL;
    }
    return PS_OK;
}

/* --- primary: the stream and the held replies --------------------------------- */

static void drop_held(ps_repl *r) {
    while (r->head) {
        held *h = r->head;
        r->head = h->next;
        for (size_t i = 0; i < h->n; i++)
            zmq_msg_close(&h->frames[i]);
        free(h->frames);
        free(h);
    }
    r->tail = NULL;
    r->n_held = 0;
}

static void forget_backup(ps_repl *r) {
    free(r->backup_id);
    r->backup_id = NULL;
    r->backup_id_len = 0;
    r->backup_fd = -1;
}

static void mute_answer(void *ctx, ps_pending_pull *p) {
    (void)ctx;
    (void)p;
}

static void mute_fail(void *ctx, ps_pending_pull *p, int code, const char *msg) {
    (void)ctx;
    (void)p;
    (void)code;
    (void)msg;
}

static void step_down(ps_repl *r, const char *why) {
    r->lease.role = PS_ROLE_DEPOSED;
    /* deferred pulls vanish unanswered: their values may never have reached the
     * backup, and the workers ask the new primary */
    r->s->shard.out.answer = mute_answer;
    r->s->shard.out.fail = mute_fail;
    r->lease.has_backup = 0;
    if (r->n_held)
        PS_WARN("%zu repl(ies) held for the backup are dropped: the workers retry at the new "
                "primary",
                r->n_held);
    drop_held(r);
    forget_backup(r);
    PS_ERROR("no longer the primary of shard %ld (term %llu): %s; this psd now answers "
             "ENOTPRIMARY (a replica rejoining as a backup needs catch-up by snapshot, not "
             "built yet: stop it)",
             r->s->cfg.shard, (unsigned long long)r->lease.term, why);
}

/* Sends the replies the backup has caught up with, in order. */
static void release(ps_repl *r) {
    uint64_t now = ps__now_ns();
    while (r->head && ps_lease_may_ack(&r->lease, now) &&
           (!r->lease.has_backup || r->head->index <= r->acked)) {
        held *h = r->head;
        int ok = 1;
        for (size_t i = 0; i < h->n; i++) {
            int more = i + 1 < h->n ? ZMQ_SNDMORE : 0;
            if (ok && zmq_msg_send(&h->frames[i], r->s->router, ZMQ_DONTWAIT | more) >= 0) continue;
            ok = 0;
            zmq_msg_close(&h->frames[i]);
        }
        if (!ok) r->s->stats.dropped_replies++;
        r->head = h->next;
        if (!r->head) r->tail = NULL;
        r->n_held--;
        free(h->frames);
        free(h);
    }
}

int ps__repl_hold(ps_server *s, const void *identity, size_t identity_len, const Ps__Header *hdr,
                  const ps_payload *payloads, size_t n_payloads) {
    ps_repl *r = s->repl;
    if (!r || r->lease.role != PS_ROLE_PRIMARY) return 0; /* a backup's refusals go at once */
    uint64_t now = ps__now_ns();
    if (!r->head && ps_lease_may_ack(&r->lease, now) &&
        (!r->lease.has_backup || r->acked >= r->index))
        return 0;
    held *h = calloc(1, sizeof *h);
    zmq_msg_t *f = calloc(n_payloads + 2, sizeof *f);
    size_t hlen = ps__header__get_packed_size(hdr), made = 0;
    if (h && f && zmq_msg_init_size(&f[0], identity_len) == 0) {
        memcpy(zmq_msg_data(&f[0]), identity, identity_len);
        made = 1;
        if (zmq_msg_init_size(&f[1], hlen) == 0) {
            ps__header__pack(hdr, zmq_msg_data(&f[1]));
            made = 2;
        }
    }
    for (size_t i = 0; i < n_payloads; i++) {
        const ps_payload *p = &payloads[i];
        int ok = made == i + 2;
        if (ok && p->free_fn)
            ok = zmq_msg_init_data(&f[i + 2], (void *)p->data, p->len, p->free_fn, p->hint) == 0;
        else if (ok && zmq_msg_init_size(&f[i + 2], p->len) == 0)
            memcpy(zmq_msg_data(&f[i + 2]), p->data, p->len);
        else
            ok = 0;
        if (ok)
            made++;
        else if (p->free_fn)
            p->free_fn((void *)p->data, p->hint);
    }
    if (made != n_payloads + 2) { /* out of memory: the reply is lost, the worker retries */
        for (size_t i = 0; i < made; i++)
            zmq_msg_close(&f[i]);
        free(f);
        free(h);
        s->stats.dropped_replies++;
        return 1;
    }
    h->index = r->index;
    h->frames = f;
    h->n = made;
    if (r->tail)
        r->tail->next = h;
    else
        r->head = h;
    r->tail = h;
    r->n_held++;
    return 1;
}

static void free_copy(void *data, void *hint) {
    (void)hint;
    free(data);
}

/* Sends Replicate (entries: e, or none for a heartbeat) to the backup. */
static void send_replicate(ps_repl *r, const ps_shard_event *e) {
    ps_server *s = r->s;
    Ps__Header h = PS__HEADER__INIT;
    Ps__Replicate m = PS__REPLICATE__INIT;
    static ps_log_out o; /* large (payload tables); one thread */
    Ps__LogEntry *entries[1];
    m.term = r->lease.term;
    m.sent_ns = ps__now_ns();
    m.first_index = e ? r->index : r->index + 1;
    ps_payload pl[PS_LOG_MAX_PAYLOADS];
    size_t n = 0;
    if (e) {
        if (ps__log_encode(&s->shard, e, &o) != PS_OK) {
            step_down(r, "an entry of the log cannot be encoded (a bug)");
            return;
        }
        entries[0] = &o.msg;
        m.entries = entries;
        m.n_entries = 1;
        for (; n < o.n; n++) {
            void *copy = malloc(o.len[n] ? o.len[n] : 1);
            if (!copy) break;
            memcpy(copy, o.data[n], o.len[n]);
            pl[n] = (ps_payload){copy, o.len[n], free_copy, NULL};
        }
        if (n != o.n) {
            for (size_t i = 0; i < n; i++)
                free((void *)pl[i].data);
            step_down(r, "out of memory copying an entry for the backup");
            return;
        }
    }
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.body_case = PS__HEADER__BODY_REPLICATE;
    h.replicate = &m;
    if (ps_wire_send(s->router, r->backup_id, r->backup_id_len, &h, pl, n, ZMQ_DONTWAIT) == PS_OK)
        return;
    int zerr = zmq_errno();
    if (zerr == EHOSTUNREACH) { /* its connection is gone: as the monitor would say */
        ps__repl_disconnected(s, r->backup_fd);
        return;
    }
    char why[200];
    snprintf(why, sizeof why, "cannot send the log to the backup (%s)", zmq_strerror(zerr));
    step_down(r, why);
}

void ps__repl_log(void *server, const ps_shard_event *e) {
    ps_server *s = server;
    ps_repl *r = s->repl;
    if (!r || r->replaying) return;
    r->index++;
    if (r->lease.role == PS_ROLE_PRIMARY && r->lease.has_backup) send_replicate(r, e);
}

/* Takes the follower waiting for a snapshot into the view (its stream starts
 * after entry r->index). */
static void join_view(ps_repl *r, void *id, size_t id_len, int fd, uint32_t replica) {
    forget_backup(r);
    r->backup_id = id;
    r->backup_id_len = id_len;
    r->backup_fd = fd;
    r->acked = r->index;
    ps_lease_backup_joined(&r->lease, ps__now_ns());
    PS_INFO("replica %u follows (log at %llu entries, term %llu): updates are acknowledged once "
            "it has applied them",
            replica, (unsigned long long)r->index, (unsigned long long)r->lease.term);
    release(r);
}

static void forget_snap(ps_repl *r) {
    free(r->snap_id);
    r->snap_id = NULL;
    r->snap_id_len = 0;
    r->snap_fd = -1;
    r->snap_wanted = 0;
}

/* The shard's state as a checkpoint file's bytes (*buf malloc'd), written to a
 * private temporary directory and read back. PS_OK or an error with the reason. */
static int snapshot_bytes(ps_server *s, char *name, size_t name_len, unsigned char **buf,
                          size_t *len, char *err, size_t errlen) {
    const char *tmp = getenv("TMPDIR");
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/psd-snapshot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        snprintf(err, errlen, "cannot make a directory for the snapshot: %s", strerror(errno));
        return PS_EIO;
    }
    ps_ckpt_meta m;
    ps__ckpt_meta_now(s, &m);
    ps_ckpt_snapshot *snap = NULL;
    uint64_t bytes = 0;
    int rc = ps_ckpt_snapshot_take(&s->shard.store, &s->shard.tables, &m, 0, &snap);
    if (rc == PS_OK)
        rc = ps_ckpt_snapshot_write(snap, dir, 1, path, sizeof path, &bytes, err, errlen);
    else
        snprintf(err, errlen, "out of memory taking the snapshot");
    ps_ckpt_snapshot_free(snap);
    *buf = NULL;
    if (rc == PS_OK) {
        FILE *f = fopen(path, "rb");
        *buf = malloc(bytes ? bytes : 1);
        if (!f || !*buf || fread(*buf, 1, bytes, f) != bytes) {
            snprintf(err, errlen, "cannot read the snapshot back: %s", strerror(errno));
            rc = PS_EIO;
        }
        if (f) fclose(f);
        const char *base = strrchr(path, '/');
        snprintf(name, name_len, "%.200s", base ? base + 1 : path);
        unlink(path);
    }
    rmdir(dir);
    if (rc != PS_OK) {
        free(*buf);
        *buf = NULL;
    }
    *len = (size_t)bytes;
    return rc;
}

/* Sends the waiting follower the shard's state, once no sync step is open (a
 * snapshot holds no step's partial sums), and takes it into the view. */
static void try_snapshot(ps_repl *r) {
    ps_server *s = r->s;
    if (!r->snap_wanted || r->lease.role != PS_ROLE_PRIMARY || !ps_shard_between_steps(&s->shard))
        return;
    char name[256], err[512];
    unsigned char *buf;
    size_t len;
    uint64_t t0 = ps__now_ns();
    int rc = snapshot_bytes(s, name, sizeof name, &buf, &len, err, sizeof err);
    if (rc != PS_OK) {
        PS_ERROR("cannot send replica %u a snapshot: %s", r->snap_replica, err);
        forget_snap(r);
        return;
    }
    Ps__Header h = PS__HEADER__INIT;
    Ps__Snapshot m = PS__SNAPSHOT__INIT;
    uint32_t n = s->shard.members.n;
    Ps__SnapshotMember *mem = calloc(n ? n : 1, sizeof *mem);
    Ps__SnapshotMember **mp = calloc(n ? n : 1, sizeof *mp);
    if (!mem || !mp) {
        free(mem), free(mp), free(buf);
        PS_ERROR("cannot send replica %u a snapshot: out of memory", r->snap_replica);
        forget_snap(r);
        return;
    }
    for (uint32_t w = 0; w < n; w++) {
        const ps_member *x = &s->shard.members.m[w];
        ps__snapshot_member__init(&mem[w]);
        mem[w].live = x->live;
        mem[w].done = x->done;
        mem[w].clock = x->clock;
        mem[w].session = x->session;
        mem[w].last_seq = x->last_seq;
        mem[w].rows_session = x->rows_session;
        mem[w].rows_last_seq = x->rows_last_seq;
        mp[w] = &mem[w];
    }
    m.term = r->lease.term;
    m.incarnation = s->incarnation;
    m.index = r->index;
    m.version = s->shard.step.version;
    m.updates_applied = s->shard.stats.updates_applied;
    m.job_id = s->shard.job_id;
    m.n_members = n;
    m.members = mp;
    m.file_name = name;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.body_case = PS__HEADER__BODY_SNAPSHOT;
    h.snapshot = &m;
    ps_payload pl = {buf, len, free_copy, NULL};
    rc = ps_wire_send(s->router, r->snap_id, r->snap_id_len, &h, &pl, 1, ZMQ_DONTWAIT);
    free(mem);
    free(mp);
    if (rc != PS_OK) {
        PS_WARN("cannot send replica %u its snapshot: %s", r->snap_replica,
                zmq_strerror(zmq_errno()));
        forget_snap(r);
        return;
    }
    PS_INFO("sent replica %u a snapshot at entry %llu, version %llu (%zu bytes, %.1f ms)",
            r->snap_replica, (unsigned long long)r->index,
            (unsigned long long)s->shard.step.version, len, (double)(ps__now_ns() - t0) / 1e6);
    void *id = r->snap_id;
    size_t id_len = r->snap_id_len;
    int fd = r->snap_fd;
    uint32_t replica = r->snap_replica;
    r->snap_id = NULL;
    forget_snap(r);
    join_view(r, id, id_len, fd, replica);
}

void ps__repl_after_request(ps_server *s) {
    if (s->repl && s->repl->snap_wanted) try_snapshot(s->repl);
}

int ps__handle_follow(ps_server *s, ps_request *req, char *err, size_t errlen) {
    ps_repl *r = s->repl;
    const Ps__Follow *f = req->hdr->follow;
    if (!r) {
        snprintf(err, errlen, "this psd is not replicated (--replicas 1)");
        return PS_EINVAL;
    }
    if (f->shard != (uint32_t)s->cfg.shard || f->replica >= (uint32_t)r->replicas ||
        (int)f->replica == r->replica) {
        snprintf(err, errlen, "Follow from shard %u replica %u: this is shard %ld replica %d of %d",
                 f->shard, f->replica, s->cfg.shard, r->replica, r->replicas);
        return PS_EINVAL;
    }
    if (ps_lease_observe_term(&r->lease, f->term)) step_down(r, "a replica knows a higher term");
    if (r->lease.role == PS_ROLE_BACKUP && !r->lease.following) {
        /* not a backup of a live group: replica 0 may found one (on_timer) */
        snprintf(err, errlen, "replica %d of shard %ld looks for its primary too", r->replica,
                 s->cfg.shard);
        return PS_EBUSY;
    }
    if (r->lease.role != PS_ROLE_PRIMARY) {
        ps__repl_not_primary(s, err, errlen);
        return PS_ENOTPRIMARY;
    }
    if (r->lease.has_backup && req->fd == r->backup_fd) return PS_OK; /* a repeat: it has it */
    void *id = malloc(req->identity_len ? req->identity_len : 1);
    if (!id) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    memcpy(id, req->identity, req->identity_len);
    if (f->applied == 0 && r->index == 0 && !r->restored) {
        /* a fresh group: nothing to send but the stream */
        Ps__Header h = PS__HEADER__INIT;
        Ps__FollowReply fr = PS__FOLLOW_REPLY__INIT;
        fr.term = r->lease.term;
        fr.incarnation = s->incarnation;
        fr.index = r->index;
        h.body_case = PS__HEADER__BODY_FOLLOW_REPLY;
        h.follow_reply = &fr;
        /* straight to the backup: not a reply the lease holds back */
        h.protocol_version = PS_PROTOCOL_VERSION;
        h.request_id = req->hdr->request_id;
        ps_wire_send(s->router, req->identity, req->identity_len, &h, NULL, 0, ZMQ_DONTWAIT);
        join_view(r, id, req->identity_len, req->fd, f->replica);
        return PS_OK;
    }
    /* it lacks the history: the state itself, between two steps */
    forget_snap(r);
    r->snap_id = id;
    r->snap_id_len = req->identity_len;
    r->snap_fd = req->fd;
    r->snap_replica = f->replica;
    r->snap_wanted = 1;
    try_snapshot(r);
    return PS_OK;
}

int ps__handle_replicate_ack(ps_server *s, ps_request *req, char *err, size_t errlen) {
    ps_repl *r = s->repl;
    const Ps__ReplicateAck *a = req->hdr->replicate_ack;
    if (!r) {
        snprintf(err, errlen, "this psd is not replicated (--replicas 1)");
        return PS_EINVAL;
    }
    if (ps_lease_observe_term(&r->lease, a->term)) {
        char why[120];
        snprintf(why, sizeof why, "replica %u is in term %llu", a->replica,
                 (unsigned long long)a->term);
        step_down(r, why);
        return PS_OK; /* no reply to an ack */
    }
    if (r->lease.role != PS_ROLE_PRIMARY || req->fd != r->backup_fd) return PS_OK;
    if (a->error && a->error[0]) {
        PS_ERROR("replica %u cannot follow: %s", a->replica, a->error);
        return PS_OK; /* it stops; its connection closes */
    }
    if (a->applied > r->acked) r->acked = a->applied;
    ps_lease_acked(&r->lease, a->sent_ns);
    if (r->lapse_logged && ps_lease_may_ack(&r->lease, ps__now_ns())) {
        PS_INFO("replica %u answers again: the lease holds", a->replica);
        r->lapse_logged = 0;
    }
    release(r);
    return PS_OK;
}

void ps__repl_disconnected(ps_server *s, int fd) {
    ps_repl *r = s->repl;
    if (!r || r->lease.role != PS_ROLE_PRIMARY || !r->lease.has_backup || fd != r->backup_fd)
        return;
    if (ps_lease_backup_gone(&r->lease, ps__now_ns())) {
        PS_WARN("the backup's connection closed: serving alone (replica %d of %d), every update "
                "now on this psd only",
                r->replica, r->replicas);
        forget_backup(r);
        release(r);
    } else {
        step_down(r, "the backup's connection closed after the lease lapsed (it may have taken "
                     "over)");
    }
}

/* --- backup: following the primary -------------------------------------------- */

static void send_to_primary(ps_repl *r, Ps__Header *h) {
    h->protocol_version = PS_PROTOCOL_VERSION;
    ps_wire_send(r->dealer, NULL, 0, h, NULL, 0, ZMQ_DONTWAIT);
}

static void send_follow(ps_repl *r) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Follow f = PS__FOLLOW__INIT;
    f.shard = (uint32_t)r->s->cfg.shard;
    f.replica = (uint32_t)r->replica;
    f.term = 0; /* a replica looking for its primary deposes nobody */
    f.applied = r->index;
    h.body_case = PS__HEADER__BODY_FOLLOW;
    h.follow = &f;
    send_to_primary(r, &h);
    r->follow_sent_ns = ps__now_ns();
}

static void send_ack(ps_repl *r, uint64_t sent_ns, const char *error) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__ReplicateAck a = PS__REPLICATE_ACK__INIT;
    a.term = r->lease.term;
    a.applied = r->index;
    a.sent_ns = sent_ns;
    a.replica = (uint32_t)r->replica;
    a.error = (char *)(error ? error : "");
    h.body_case = PS__HEADER__BODY_REPLICATE_ACK;
    h.replicate_ack = &a;
    send_to_primary(r, &h);
}

/* The backup cannot go on: it stops, exit status 2. */
static void give_up(ps_repl *r, uint64_t sent_ns, const char *why) {
    PS_ERROR("cannot follow the primary of shard %ld: %s", r->s->cfg.shard, why);
    if (sent_ns) send_ack(r, sent_ns, why);
    r->s->failed = 1;
    ps_server_stop(r->s);
}

/* 1 while this replica looks for a primary to follow: a backup not following,
 * or replica 0 that founded a group no backup follows yet. */
static int looking(const ps_repl *r) {
    return (r->lease.role == PS_ROLE_BACKUP && !r->lease.following) ||
           (r->lease.role == PS_ROLE_PRIMARY && r->lease.awaiting);
}

static void write_ready(ps_repl *r) {
    if (r->ready_written || !r->s->cfg.ready_file[0]) return;
    char err[1400];
    if (ps__write_ready_file(r->s->cfg.ready_file, r->s->endpoint, err, sizeof err) != PS_OK) {
        give_up(r, 0, err);
        return;
    }
    r->ready_written = 1;
}

/* Empties the shard (a replica that restored a checkpoint, then found a live
 * group: the group's state wins). PS_OK or PS_ENOMEM. */
static int clear_shard(ps_repl *r) {
    ps_server *s = r->s;
    if (r->index == 0 && !r->restored && s->shard.store.n == 0 && s->shard.tables.n == 0)
        return PS_OK;
    ps_shard_free(&s->shard);
    r->restored = 0;
    r->index = 0;
    return ps__shard_init(s);
}

static void now_following(ps_repl *r, uint64_t term, uint64_t incarnation, const char *how) {
    ps_lease_following(&r->lease, term, ps__now_ns());
    r->primary_replica = r->peer;
    r->s->incarnation = incarnation; /* the group's state: workers see one shard */
    r->wait_logged_ns = 0;
    PS_INFO("following the primary, replica %d at %s (term %llu)%s", r->peer, r->peers[r->peer],
            (unsigned long long)term, how);
    write_ready(r);
}

static void on_follow_reply(ps_repl *r, const Ps__FollowReply *fr) {
    if (!looking(r)) return;
    if (fr->index != 0) {
        give_up(r, 0, "the primary's log does not start where this replica is");
        return;
    }
    if (clear_shard(r) != PS_OK) {
        give_up(r, 0, "out of memory");
        return;
    }
    now_following(r, fr->term, fr->incarnation, "");
}

/* The primary's state as a checkpoint file: loaded into an emptied shard, with
 * its members; the stream follows from m->index + 1. */
static void on_snapshot(ps_repl *r, const Ps__Snapshot *m, ps_frames *f) {
    ps_server *s = r->s;
    if (!looking(r)) return;
    if (f->n < 2 || !m->file_name || strchr(m->file_name, '/') || !m->file_name[0] ||
        m->n_members != s->shard.members.n) {
        give_up(r, 0, "a malformed snapshot from the primary");
        return;
    }
    ps_shard_free(&s->shard);
    r->restored = 0;
    if (ps__shard_init(s) != PS_OK) {
        give_up(r, 0, "out of memory");
        return;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[1024], path[1400], err[512] = "";
    snprintf(dir, sizeof dir, "%s/psd-snapshot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int rc = PS_EIO;
    if (mkdtemp(dir)) {
        snprintf(path, sizeof path, "%s/%s", dir, m->file_name);
        FILE *out = fopen(path, "wb");
        size_t len = zmq_msg_size(&f->frames[1]);
        if (out && fwrite(zmq_msg_data(&f->frames[1]), 1, len, out) == len && fclose(out) == 0) {
            out = NULL;
            ps_ckpt_meta cm;
            rc = ps_ckpt_restore(dir, &s->shard.store, &s->shard.tables, &cm, NULL, 0, err,
                                 sizeof err);
        } else {
            snprintf(err, sizeof err, "cannot write the snapshot to %.300s: %s", path,
                     strerror(errno));
        }
        if (out) fclose(out);
        unlink(path);
        rmdir(dir);
    } else {
        snprintf(err, sizeof err, "cannot make a directory for the snapshot: %s", strerror(errno));
    }
    if (rc != PS_OK) {
        give_up(r, 0, err);
        return;
    }
    ps_tables_set_bound(&s->shard.tables, (uint64_t)s->cfg.max_table_mb << 20);
    s->shard.step.version = m->version;
    s->shard.stats.updates_applied = m->updates_applied;
    snprintf(s->shard.job_id, sizeof s->shard.job_id, "%s", m->job_id ? m->job_id : "");
    ps_member *mem = calloc(m->n_members ? m->n_members : 1, sizeof *mem);
    if (!mem) {
        give_up(r, 0, "out of memory");
        return;
    }
    for (size_t w = 0; w < m->n_members; w++) {
        const Ps__SnapshotMember *x = m->members[w];
        mem[w] = (ps_member){.clock = x->clock,
                             .session = x->session,
                             .last_seq = x->last_seq,
                             .rows_session = x->rows_session,
                             .rows_last_seq = x->rows_last_seq,
                             .live = x->live,
                             .done = x->done};
    }
    ps_shard_adopt_members(&s->shard, mem, (uint32_t)m->n_members);
    free(mem);
    r->index = m->index;
    char how[160];
    snprintf(how, sizeof how, ", from its snapshot at entry %llu, version %llu",
             (unsigned long long)m->index, (unsigned long long)m->version);
    now_following(r, m->term, m->incarnation, how);
    send_ack(r, 0, NULL);
}

static void on_replicate(ps_repl *r, const Ps__Replicate *m, ps_frames *f) {
    if (m->term < r->lease.term || r->lease.role != PS_ROLE_BACKUP) {
        send_ack(r, m->sent_ns, NULL); /* our term: an old primary steps down */
        return;
    }
    if (!r->lease.following) return; /* before our FollowReply: ignored */
    if (m->term > r->lease.term) r->lease.term = m->term;
    ps_lease_heard(&r->lease, ps__now_ns());
    size_t at = 1; /* frame 0 is the header (a DEALER gets no identity frame) */
    for (size_t k = 0; k < m->n_entries; k++) {
        if (m->first_index + k != r->index + 1) {
            char why[160];
            snprintf(why, sizeof why, "entry %llu arrived after entry %llu (a gap)",
                     (unsigned long long)(m->first_index + k), (unsigned long long)r->index);
            give_up(r, m->sent_ns, why);
            return;
        }
        ps_log_in in;
        size_t used = 0;
        char err[300];
        int rc = ps__log_decode(&r->s->shard, m->entries[k], f->frames + at, f->n - at, &used, &in,
                                err, sizeof err);
        if (rc == PS_OK) {
            r->replaying = 1;
            rc = ps_shard_replay(&r->s->shard, &in.e, err, sizeof err);
            r->replaying = 0;
        }
        ps__log_in_free(&in);
        if (rc != PS_OK) {
            give_up(r, m->sent_ns, rc == PS_ENOMEM ? "out of memory" : err);
            return;
        }
        at += used;
        r->index++;
    }
    send_ack(r, m->sent_ns, NULL);
}

static void drain_dealer(ps_repl *r) {
    for (;;) {
        if (!r->dealer || r->s->stopping) return;
        int events = 0;
        size_t len = sizeof events;
        if (zmq_getsockopt(r->dealer, ZMQ_EVENTS, &events, &len) != 0 || !(events & ZMQ_POLLIN))
            return;
        ps_frames f;
        if (ps_frames_recv(r->dealer, ZMQ_DONTWAIT, &f) != PS_OK) return;
        Ps__Header *h = NULL;
        char err[200];
        if (f.n >= 1 && ps_header_decode(zmq_msg_data(&f.frames[0]), zmq_msg_size(&f.frames[0]), &h,
                                         err, sizeof err) == PS_OK) {
            if (h->body_case == PS__HEADER__BODY_FOLLOW_REPLY)
                on_follow_reply(r, h->follow_reply);
            else if (h->body_case == PS__HEADER__BODY_SNAPSHOT)
                on_snapshot(r, h->snapshot, &f);
            else if (h->body_case == PS__HEADER__BODY_REPLICATE)
                on_replicate(r, h->replicate, &f);
            else if (h->body_case == PS__HEADER__BODY_ERROR && h->error->code == PS_EBUSY)
                r->peer_looking = 1; /* the peer looks for a primary too */
            else if (h->body_case == PS__HEADER__BODY_ERROR && h->error->code == PS_ENOTPRIMARY)
                r->peer_in_group = 1; /* a backup of a live group: its primary will answer */
            else if (h->body_case == PS__HEADER__BODY_ERROR && looking(r))
                give_up(r, 0, h->error->message);
        } else {
            PS_WARN("a malformed message from the primary: %s", err);
        }
        if (h) ps__header__free_unpacked(h, NULL);
        ps_frames_close(&f);
    }
}

static void promote(ps_repl *r) {
    uint64_t silent = (ps__now_ns() - r->lease.heard_ns) / 1000000ull;
    ps_lease_promote(&r->lease);
    r->primary_replica = r->replica;
    ps_shard_took_over(&r->s->shard);
    PS_WARN("took over as the primary of shard %ld in term %llu: the primary was silent for "
            "%llu ms (more than 1.5 x --lease-ms %ld); %llu entries applied, version %llu",
            r->s->cfg.shard, (unsigned long long)r->lease.term, (unsigned long long)silent,
            r->s->cfg.lease_ms, (unsigned long long)r->index,
            (unsigned long long)r->s->shard.step.version);
}

/* Replica 0 that found no primary: the peer answered that it looks for one too,
 * or said nothing for a lease. A fresh group's term is the wall clock's
 * milliseconds: above any term an older group of this shard reached, so
 * workers that knew that one take the new one. */
static void found(ps_repl *r, uint64_t now) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t term = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    ps_lease_found(&r->lease, term);
    r->primary_replica = r->replica;
    r->wait_logged_ns = now;
    PS_INFO("replica %d of shard %ld: no primary found (%s): the primary of a fresh group, "
            "term %llu; waiting for replica %d (%s) to follow",
            r->replica, r->s->cfg.shard,
            r->peer_looking ? "the other replica looks for one too" : "no answer",
            (unsigned long long)term, r->peer, r->peers[r->peer]);
    write_ready(r);
}

static void on_timer(uv_timer_t *t) {
    ps_repl *r = t->data;
    ps_server *s = r->s;
    uint64_t now = ps__now_ns();
    if (r->lease.role == PS_ROLE_BACKUP) {
        ps_lease_tick(&r->lease, now); /* a stall of our own is not the primary's silence */
        drain_dealer(r); /* what arrived while we slept counts before the silence does */
        now = ps__now_ns();
        if (r->lease.role == PS_ROLE_BACKUP && !r->lease.following) {
            /* a backup of a live group answered: its primary (or itself, taking over) will
             * answer; founding a group beside it would only wait for nothing */
            if (r->replica == 0 && !r->peer_in_group &&
                (r->peer_looking || now > r->found_deadline_ns)) {
                found(r, now);
            } else {
                if (now - r->follow_sent_ns > r->lease.lease_ns) send_follow(r);
                if (now - r->wait_logged_ns > 5000000000ull) {
                    if (r->wait_logged_ns)
                        PS_WARN("still looking for the primary (asking replica %d at %s)", r->peer,
                                r->peers[r->peer]);
                    r->wait_logged_ns = now;
                }
            }
        }
        if (ps_lease_should_promote(&r->lease, now)) promote(r);
    } else if (r->lease.role == PS_ROLE_PRIMARY) {
        if (r->lease.has_backup) send_replicate(r, NULL);
        if (r->lease.awaiting) {
            drain_dealer(r); /* a live group's primary may answer our Follow */
            if (r->lease.awaiting && now - r->follow_sent_ns > r->lease.lease_ns) send_follow(r);
            if (r->lease.awaiting && now - r->wait_logged_ns > 5000000000ull) {
                PS_WARN("waiting for replica %d (%s) to follow: no update is acknowledged until "
                        "it does",
                        r->peer, r->peers[r->peer]);
                r->wait_logged_ns = now;
            }
        }
        if (r->lease.has_backup && !ps_lease_may_ack(&r->lease, now) && !r->lapse_logged) {
            PS_WARN("the backup has not answered for %llu ms (--lease-ms %ld): nothing is "
                    "acknowledged until it does, or its connection closes",
                    (unsigned long long)((now - r->lease.acked_sent_ns) / 1000000ull),
                    s->cfg.lease_ms);
            r->lapse_logged = 1;
        }
        try_snapshot(r);
        release(r);
    }
    ps__server_drain(s); /* a send may have taken ZMQ_FD's edge */
}

static void on_dealer(uv_poll_t *h, int status, int events) {
    (void)status;
    (void)events;
    drain_dealer(h->data);
}

static void on_close(uv_handle_t *h) {
    ps_repl *r = h->data;
    r->handles--;
}

int ps__repl_start(ps_server *s) {
    ps_repl *r = s->repl;
    if (!r) return PS_OK;
    uv_timer_init(s->loop, &r->timer);
    r->timer.data = r;
    r->handles = 1;
    uint64_t tick = lease_tick_ms(r);
    uv_timer_start(&r->timer, on_timer, tick, tick);
    int fd;
    size_t len = sizeof fd;
    if (zmq_getsockopt(r->dealer, ZMQ_FD, &fd, &len) != 0) return PS_EIO;
    uv_poll_init(s->loop, &r->poll, fd);
    r->poll.data = r;
    r->handles++;
    uv_poll_start(&r->poll, UV_READABLE, on_dealer);
    r->found_deadline_ns = ps__now_ns() + r->lease.lease_ns;
    PS_INFO("replica %d of %d of shard %ld: looking for the primary (asking replica %d at %s)",
            r->replica, r->replicas, s->cfg.shard, r->peer, r->peers[r->peer]);
    send_follow(r);
    return PS_OK;
}

void ps__repl_stop(ps_server *s) {
    ps_repl *r = s->repl;
    if (!r || !r->handles) return;
    uv_close((uv_handle_t *)&r->timer, on_close);
    uv_close((uv_handle_t *)&r->poll, on_close);
}

void ps__repl_free(ps_server *s) {
    ps_repl *r = s->repl;
    if (!r) return;
    drop_held(r);
    forget_backup(r);
    forget_snap(r);
    if (r->dealer) zmq_close(r->dealer);
    free(r);
    s->repl = NULL;
}

/* --- what requests see --------------------------------------------------------- */

int ps__repl_serving(const ps_server *s) {
    return !s->repl || s->repl->lease.role == PS_ROLE_PRIMARY;
}

void ps__repl_not_primary(const ps_server *s, char *err, size_t errlen) {
    const ps_repl *r = s->repl;
    if (r->lease.role == PS_ROLE_BACKUP)
        snprintf(err, errlen, "replica %d of shard %ld is a backup (term %llu): ask the primary",
                 r->replica, s->cfg.shard, (unsigned long long)r->lease.term);
    else
        snprintf(err, errlen,
                 "replica %d of shard %ld is no longer the primary (a higher term than %llu "
                 "exists, or its lease lapsed): ask the other replicas",
                 r->replica, s->cfg.shard, (unsigned long long)r->lease.term);
}

void ps__repl_welcome(const ps_server *s, Ps__Welcome *w) {
    const ps_repl *r = s->repl;
    if (!r) return;
    w->term = r->lease.term;
    w->primary = r->lease.role == PS_ROLE_PRIMARY;
    w->replicas = (uint32_t)r->replicas;
    w->replica = (uint32_t)r->replica;
    w->primary_replica = (uint32_t)r->primary_replica;
}
