/* In-process driver for psd's request path (see harness.h): real shards, a
 * ROUTER on inproc://, messages built from fuzzer bytes, replies drained. */
#include "harness.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "ps_error.h"

static const char dealer_id[] = "fuzz"; /* the connected DEALER, as the ROUTER sees it */
static const char ghost_id[] = "ghost"; /* nobody: replies to it are dropped */

/* The variables every shard starts with (so pulls and pushes reach the optimizers). */
static const float init_w[12] = {1, -2, 0.5f, 4, 0, -1, 0.25f, 3, -0.5f, 2, 1, -3};
static const float init_b[3] = {0.25f, 0.5f, -0.75f};
static const float init_e[8] = {1, 2, 3, 4, -1, -2, -3, -4};

/* Removes the files of a checkpoint directory (the directory stays). */
static void clear_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[2200];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static void free_base(void *data, void *hint) {
    (void)data;
    free(hint);
}

/* Makes msg a frame holding a copy of len bytes in an allocation of exactly
 * that size (ASan sees any read past it), `off` bytes into it. */
static int frame_copy(zmq_msg_t *msg, const void *bytes, size_t len, size_t off) {
    if (len == 0) return zmq_msg_init(msg) == 0 ? PS_OK : PS_ENOMEM;
    unsigned char *base = malloc(len + off);
    if (!base) return PS_ENOMEM;
    memcpy(base + off, bytes, len);
    if (zmq_msg_init_data(msg, base + off, len, free_base, base) != 0) {
        free(base);
        return PS_ENOMEM;
    }
    return PS_OK;
}

typedef struct {
    const uint8_t *p;
    size_t len;
} record;

/* Builds [identity][records...] into f (closed by ps_frames_close). */
static int build_frames(unsigned flags, const record *recs, size_t n, ps_frames *f) {
    memset(f, 0, sizeof *f);
    f->frames = calloc(n + 1, sizeof *f->frames);
    if (!f->frames) return PS_ENOMEM;
    f->cap = n + 1;
    const char *id = (flags & PS_FUZZ_F_GHOST) ? ghost_id : dealer_id;
    if (frame_copy(&f->frames[0], id, strlen(id), 0) != PS_OK) {
        ps_frames_close(f);
        return PS_ENOMEM;
    }
    f->n = 1;
    f->bytes = strlen(id);
    for (size_t i = 0; i < n; i++) {
        size_t off = (i > 0 && (flags & PS_FUZZ_F_MISALIGN)) ? 1 : 0;
        if (frame_copy(&f->frames[f->n], recs[i].p, recs[i].len, off) != PS_OK) {
            ps_frames_close(f);
            return PS_ENOMEM;
        }
        f->n++;
        f->bytes += recs[i].len;
    }
    f->truncated = (flags & PS_FUZZ_F_TRUNCATED) != 0;
    return PS_OK;
}

/* Reads every reply waiting on the DEALER; returns a bit per body case seen. */
static uint64_t drain_replies(ps_fuzz *fz, ps_fuzz_shard *sh) {
    uint64_t seen = 0;
    for (;;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sh->dealer, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            return seen;
        }
        Ps__Header *h = ps__header__unpack(NULL, zmq_msg_size(&part), zmq_msg_data(&part));
        fz->replies++;
        if (h) {
            if ((unsigned)h->body_case < 64) seen |= 1ull << (unsigned)h->body_case;
            if (h->body_case == PS__HEADER__BODY_ERROR) fz->error_replies++;
            ps__header__free_unpacked(h, NULL);
        }
        int more = zmq_msg_more(&part);
        zmq_msg_close(&part);
        while (more) { /* payload frames of a PullReply */
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, sh->dealer, 0) < 0)
                more = 0;
            else
                more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
    }
}

/* Dispatches one message and reads what it caused. */
static uint64_t dispatch(ps_fuzz *fz, ps_fuzz_shard *sh, ps_frames *f) {
    ps__server_dispatch(&sh->srv, f);
    ps_frames_close(f);
    return drain_replies(fz, sh);
}

/* Creates the starting variables through the real socket path (DEALER ->
 * ROUTER -> ps_frames_recv -> dispatch), which also lets the ROUTER learn
 * the DEALER's identity. */
static int create_vars(ps_fuzz *fz, ps_fuzz_shard *sh, char *err, size_t errlen) {
    static const char *names[3] = {"w", "b", "e"};
    static const size_t shapes[3][3] = {{4, 3}, {3}, {2, 2, 2}};
    static const size_t ranks[3] = {2, 1, 3};
    const float *init[3] = {init_w, init_b, init_e};
    size_t counts[3] = {12, 3, 8};
    Ps__TensorMeta metas[3], *mp[3];
    Ps__Optimizer opts[3], *op[3];
    uint64_t shape_buf[3][PS_WIRE_MAX_RANK];
    ps_payload pl[3];
    for (int i = 0; i < 3; i++) {
        ps_tensor_meta_f32(&metas[i], names[i], shapes[i], ranks[i], shape_buf[i]);
        mp[i] = &metas[i];
        ps__optimizer__init(&opts[i]);
        opts[i].lr = 0.1f;
        op[i] = &opts[i];
        pl[i] = (ps_payload){init[i], counts[i] * sizeof(float), NULL, NULL};
    }
    opts[1].kind = PS__OPT_KIND__OPT_MOMENTUM;
    opts[1].momentum = 0.9f;
    opts[2].kind = PS__OPT_KIND__OPT_ADAM;
    opts[2].beta1 = 0.9f;
    opts[2].beta2 = 0.999f;
    opts[2].epsilon = 1e-7f;
    Ps__CreateVars cv = PS__CREATE_VARS__INIT;
    cv.vars = mp;
    cv.n_vars = 3;
    cv.optimizers = op;
    cv.n_optimizers = 3;
    Ps__Header h = PS__HEADER__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = 1;
    h.body_case = PS__HEADER__BODY_CREATE_VARS;
    h.create_vars = &cv;
    if (ps_wire_send(sh->dealer, NULL, 0, &h, pl, 3, 0) != PS_OK) {
        snprintf(err, errlen, "setup send: %s", zmq_strerror(zmq_errno()));
        return PS_EIO;
    }
    zmq_pollitem_t it = {sh->srv.router, 0, ZMQ_POLLIN, 0};
    ps_frames f;
    if (zmq_poll(&it, 1, 2000) != 1 || ps_frames_recv(sh->srv.router, ZMQ_DONTWAIT, &f) != PS_OK) {
        snprintf(err, errlen, "setup: the ROUTER received nothing over inproc://");
        return PS_EIO;
    }
    uint64_t seen = dispatch(fz, sh, &f);
    if (!(seen & (1ull << PS__HEADER__BODY_CREATE_VARS_REPLY))) {
        snprintf(err, errlen, "setup: CreateVars was not answered with CreateVarsReply");
        return PS_EIO;
    }
    return PS_OK;
}

static void shard_close(ps_fuzz *fz, ps_fuzz_shard *sh) {
    if (!sh->open) return;
    /* checkpoints are written on libuv's thread pool: let those in flight finish (and
     * their replies go) before the server and its loop are freed */
    uv_run(&fz->loop, UV_RUN_DEFAULT);
    ps_server_stop(&sh->srv);            /* answers deferred pulls with ESHUTDOWN */
    ps_shard_stop(&sh->srv.shard);       /* any deferred after a Shutdown request */
    drain_replies(fz, sh);               /* no reply may point into the store any more */
    zmq_close(sh->dealer);
    sh->dealer = NULL;
    int zero = 0;
    zmq_setsockopt(sh->srv.router, ZMQ_LINGER, &zero, sizeof zero);
    ps_server_free(&sh->srv);
    sh->open = 0;
    if (sh->ckpt_dir[0]) clear_dir(sh->ckpt_dir);
}

static int shard_open(ps_fuzz *fz, unsigned i, char *err, size_t errlen) {
    ps_fuzz_shard *sh = &fz->shards[i];
    const char *argv[24] = {"psd",       "--bind", "127.0.0.1",  "--port", "0",
                            "--workers", "2",      "--max-vars", "10"};
    int argc = 9;
    argv[argc++] = "--mode";
    argv[argc++] = (i == PS_FUZZ_SHARD_ASYNC || i == PS_FUZZ_SHARD_STALE) ? "async" : "sync";
    if (i == PS_FUZZ_SHARD_BACKUP) {
        argv[argc++] = "--replicas-to-aggregate";
        argv[argc++] = "1";
    }
    if (i == PS_FUZZ_SHARD_STALE) {
        argv[argc++] = "--staleness";
        argv[argc++] = "1";
    }
    sh->ckpt_dir[0] = '\0';
    if (i == PS_FUZZ_SHARD_ASYNC || i == PS_FUZZ_SHARD_BACKUP) {
        snprintf(sh->ckpt_dir, sizeof sh->ckpt_dir, "%s/shard-%u", fz->tmp_dir, i);
        clear_dir(sh->ckpt_dir); /* start empty: nothing to restore */
        argv[argc++] = "--checkpoint-dir";
        argv[argc++] = sh->ckpt_dir;
        argv[argc++] = "--checkpoint-every";
        argv[argc++] = "0";
    }
    ps_server_config cfg;
    if (ps_server_config_parse(argc, (char **)argv, NULL, &cfg, err, errlen) != PS_OK)
        return PS_EINVAL;
    int rc = ps_server_init(&sh->srv, &fz->loop, &cfg, err, errlen);
    if (rc != PS_OK) {
        ps_server_free(&sh->srv);
        return rc;
    }
    /* No network: drop the TCP endpoint psd bound and serve inproc:// only. */
    char ep[256], inproc[64];
    size_t ep_len = sizeof ep;
    if (zmq_getsockopt(sh->srv.router, ZMQ_LAST_ENDPOINT, ep, &ep_len) == 0)
        zmq_unbind(sh->srv.router, ep);
    snprintf(inproc, sizeof inproc, "inproc://psd-fuzz-%u", i);
    sh->dealer = zmq_socket(sh->srv.zctx, ZMQ_DEALER);
    int zero = 0;
    if (zmq_bind(sh->srv.router, inproc) != 0 || !sh->dealer ||
        zmq_setsockopt(sh->dealer, ZMQ_ROUTING_ID, dealer_id, strlen(dealer_id)) != 0 ||
        zmq_setsockopt(sh->dealer, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(sh->dealer, inproc) != 0) {
        snprintf(err, errlen, "inproc setup: %s", zmq_strerror(zmq_errno()));
        rc = PS_EIO;
    }
    sh->open = 1;
    if (rc == PS_OK) rc = create_vars(fz, sh, err, errlen);
    if (rc != PS_OK) shard_close(fz, sh);
    return rc;
}

int ps_fuzz_reset(ps_fuzz *fz, unsigned shard, char *err, size_t errlen) {
    shard_close(fz, &fz->shards[shard]);
    return shard_open(fz, shard, err, errlen);
}

int ps_fuzz_open(ps_fuzz *fz, char *err, size_t errlen) {
    memset(fz, 0, sizeof *fz);
    if (!getenv("PS_LOG_LEVEL")) ps_log_set_level(PS_LOG_ERROR);
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fz->tmp_dir, sizeof fz->tmp_dir, "%s/psd-fuzz.XXXXXX", base);
    if (!mkdtemp(fz->tmp_dir)) {
        snprintf(err, errlen, "cannot make a temp directory under %s", base);
        fz->tmp_dir[0] = '\0';
        return PS_EIO;
    }
    if (uv_loop_init(&fz->loop) != 0) {
        snprintf(err, errlen, "uv_loop_init failed");
        return PS_EIO;
    }
    for (unsigned i = 0; i < PS_FUZZ_SHARDS; i++) {
        int rc = shard_open(fz, i, err, errlen);
        if (rc != PS_OK) {
            ps_fuzz_close(fz);
            return rc;
        }
    }
    return PS_OK;
}

void ps_fuzz_close(ps_fuzz *fz) {
    for (unsigned i = 0; i < PS_FUZZ_SHARDS; i++) {
        shard_close(fz, &fz->shards[i]);
        if (fz->shards[i].ckpt_dir[0]) rmdir(fz->shards[i].ckpt_dir);
    }
    uv_loop_close(&fz->loop);
    if (fz->tmp_dir[0]) rmdir(fz->tmp_dir);
    fz->tmp_dir[0] = '\0';
}

/* Splits framed input into messages and dispatches each; stops, as psd's
 * drain() does, once the shard is stopping. */
static void run_framed(ps_fuzz *fz, ps_fuzz_shard *sh, unsigned flags, const uint8_t *p,
                       size_t left) {
    record recs[PS_FUZZ_MAX_FRAMES];
    for (unsigned m = 0; m < PS_FUZZ_MAX_MESSAGES && !sh->srv.stopping; m++) {
        size_t n = 0;
        int last = 0;
        while (n < PS_FUZZ_MAX_FRAMES && !last && left >= 2) {
            unsigned v = (unsigned)p[0] | (unsigned)p[1] << 8;
            size_t len = v & 0x7fffu;
            last = (v & 0x8000u) != 0;
            p += 2;
            left -= 2;
            if (len > left) len = left;
            recs[n++] = (record){p, len};
            p += len;
            left -= len;
        }
        ps_frames f;
        if (build_frames(flags, recs, n, &f) != PS_OK) return;
        dispatch(fz, sh, &f);
        if (left < 2) return;
    }
}

void ps_fuzz_input(ps_fuzz *fz, const uint8_t *data, size_t size) {
    if (size == 0) return;
    unsigned flags = data[0], i = flags & 3u;
    ps_fuzz_shard *sh = &fz->shards[i];
    char err[512];
    if ((flags & PS_FUZZ_F_FRESH) || !sh->open) {
        if (ps_fuzz_reset(fz, i, err, sizeof err) != PS_OK) {
            fprintf(stderr, "fuzz harness: cannot reopen shard %u: %s\n", i, err);
            return;
        }
    }
    fz->inputs[i]++;
    if (flags & PS_FUZZ_F_RAW) {
        record r = {data + 1, size - 1};
        ps_frames f;
        if (build_frames(flags, &r, 1, &f) == PS_OK) dispatch(fz, sh, &f);
    } else {
        run_framed(fz, sh, flags, data + 1, size - 1);
    }
    if (sh->srv.stopping || sh->srv.shard.pending.n > PS_FUZZ_MAX_PENDING ||
        (fz->reset_every && fz->inputs[i] % fz->reset_every == 0)) {
        if (ps_fuzz_reset(fz, i, err, sizeof err) != PS_OK)
            fprintf(stderr, "fuzz harness: cannot reopen shard %u: %s\n", i, err);
    }
}

int ps_fuzz_ping(ps_fuzz *fz, unsigned shard) {
    if (shard >= PS_FUZZ_SHARDS || !fz->shards[shard].open) return PS_EINVAL;
    ps_fuzz_shard *sh = &fz->shards[shard];
    Ps__Stats st = PS__STATS__INIT;
    Ps__Header h = PS__HEADER__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = 7;
    h.body_case = PS__HEADER__BODY_STATS;
    h.stats = &st;
    uint8_t buf[64];
    size_t len = ps__header__pack(&h, buf);
    record r = {buf, len};
    ps_frames f;
    if (build_frames(0, &r, 1, &f) != PS_OK) return PS_ENOMEM;
    uint64_t seen = dispatch(fz, sh, &f);
    return (seen & (1ull << PS__HEADER__BODY_STATS_REPLY)) ? PS_OK : PS_EIO;
}
