/* Client library for psd (see client.h): requests go to all shards at once
 * and replies are collected with zmq_poll under a deadline. */
#include "client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "log.h"
#include "ps_error.h"
#include "wire.h"

typedef struct {
    void *sock;
    char endpoint[280];
    uint64_t want_id; /* request id of the outstanding request, 0 = none */
    size_t *tensors;  /* indices into c->tensors living on this shard */
    size_t n_tensors, cap_tensors;
} shard_conn;

struct ps_client {
    void *zctx;
    shard_conn *shards;
    size_t n_shards;
    ps_client_tensor *tensors;
    size_t n_tensors, cap_tensors;
    unsigned worker_index, num_workers;
    uint64_t next_id;
    int timeout_ms;
    char error[512];
};

static int fail(ps_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ps_client *c, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return rc;
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int ps_client_open(ps_client **out, const char *const *endpoints, size_t n_shards,
                   unsigned worker_index, unsigned num_workers, char *err, size_t errlen) {
    *out = NULL;
    if (n_shards == 0) {
        snprintf(err, errlen, "no parameter servers given");
        return PS_EINVAL;
    }
    ps_client *c = calloc(1, sizeof *c);
    if (!c || !(c->shards = calloc(n_shards, sizeof *c->shards)) || !(c->zctx = zmq_ctx_new())) {
        ps_client_close(c);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    c->n_shards = n_shards;
    c->worker_index = worker_index;
    c->num_workers = num_workers;
    c->timeout_ms = 120000;
    c->next_id = 1;
    for (size_t i = 0; i < n_shards; i++) {
        shard_conn *s = &c->shards[i];
        snprintf(s->endpoint, sizeof s->endpoint, "tcp://%s", endpoints[i]);
        s->sock = zmq_socket(c->zctx, ZMQ_DEALER);
        int linger = 0;
        zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_connect(s->sock, s->endpoint) != 0) {
            snprintf(err, errlen, "cannot connect to %s: %s", endpoints[i],
                     zmq_strerror(zmq_errno()));
            ps_client_close(c);
            return PS_EINVAL;
        }
    }
    *out = c;
    return PS_OK;
}

void ps_client_close(ps_client *c) {
    if (!c) return;
    for (size_t i = 0; c->shards && i < c->n_shards; i++) {
        if (c->shards[i].sock) zmq_close(c->shards[i].sock);
        free(c->shards[i].tensors);
    }
    if (c->zctx) zmq_ctx_term(c->zctx);
    free(c->shards);
    free(c->tensors);
    free(c);
}

void ps_client_set_timeout(ps_client *c, int timeout_ms) {
    c->timeout_ms = timeout_ms;
}

const char *ps_client_error(const ps_client *c) {
    return c->error;
}

size_t ps_client_num_shards(const ps_client *c) {
    return c->n_shards;
}

int ps_client_add(ps_client *c, const ps_client_tensor *t) {
    if (t->shard >= c->n_shards)
        return fail(c, PS_EINVAL, "tensor %s: shard %u out of range", t->name, t->shard);
    if (c->n_tensors == c->cap_tensors) {
        size_t cap = c->cap_tensors ? c->cap_tensors * 2 : 16;
        ps_client_tensor *nt = realloc(c->tensors, cap * sizeof *nt);
        if (!nt) return PS_ENOMEM;
        c->tensors = nt;
        c->cap_tensors = cap;
    }
    shard_conn *s = &c->shards[t->shard];
    if (s->n_tensors == s->cap_tensors) {
        size_t cap = s->cap_tensors ? s->cap_tensors * 2 : 8;
        size_t *ni = realloc(s->tensors, cap * sizeof *ni);
        if (!ni) return PS_ENOMEM;
        s->tensors = ni;
        s->cap_tensors = cap;
    }
    s->tensors[s->n_tensors++] = c->n_tensors;
    c->tensors[c->n_tensors++] = *t;
    return PS_OK;
}

static size_t tensor_numel(const ps_client_tensor *t) {
    size_t n = 1;
    for (size_t d = 0; d < t->rank; d++)
        n *= t->shape[d];
    return n;
}

/* Sends hdr (+ payloads) to shard i as a new request. */
static int send_request(ps_client *c, size_t i, Ps__Header *hdr, const ps_payload *pl, size_t n) {
    hdr->protocol_version = PS_PROTOCOL_VERSION;
    hdr->request_id = c->next_id++;
    c->shards[i].want_id = hdr->request_id;
    if (ps_wire_send(c->shards[i].sock, NULL, 0, hdr, pl, n, 0) != PS_OK)
        return fail(c, PS_EIO, "send to %s failed: %s", c->shards[i].endpoint,
                    zmq_strerror(zmq_errno()));
    return PS_OK;
}

/* Called with each shard's reply; returns PS_OK or an error (message set). */
typedef int (*reply_fn)(ps_client *c, size_t shard, Ps__Header *hdr, ps_frames *f, void *ctx);

/* Waits until every shard with an outstanding request answered (or the deadline).
 * Replies to older requests are dropped. Returns the first error seen. */
static int collect(ps_client *c, const char *what, reply_fn on_reply, void *ctx) {
    size_t n = c->n_shards;
    zmq_pollitem_t *items = calloc(n, sizeof *items);
    if (!items) return PS_ENOMEM;
    int rc = PS_OK;
    uint64_t start = now_ms(), deadline = start + (uint64_t)c->timeout_ms,
             next_note = start + 10000;
    for (;;) {
        size_t waiting = 0;
        for (size_t i = 0; i < n; i++) {
            items[i] =
                (zmq_pollitem_t){c->shards[i].sock, 0, c->shards[i].want_id ? ZMQ_POLLIN : 0, 0};
            waiting += c->shards[i].want_id != 0;
        }
        if (waiting == 0) break;
        uint64_t now = now_ms();
        if (now >= deadline) {
            for (size_t i = 0; i < n; i++) {
                if (!c->shards[i].want_id) continue;
                c->shards[i].want_id = 0;
                if (rc == PS_OK)
                    rc = fail(c, PS_ETIMEDOUT, "%s: no answer from psd %zu (%s) within %d ms", what,
                              i, c->shards[i].endpoint + 6, c->timeout_ms);
            }
            break;
        }
        if (now >= next_note) {
            for (size_t i = 0; i < n; i++)
                if (c->shards[i].want_id)
                    PS_INFO("%s: still waiting for psd %zu (%s) after %llu s", what, i,
                            c->shards[i].endpoint + 6, (unsigned long long)((now - start) / 1000));
            next_note = now + 10000;
        }
        uint64_t wait = deadline - now < next_note - now ? deadline - now : next_note - now;
        int ready = zmq_poll(items, (int)n, (long)wait);
        if (ready < 0) {
            if (zmq_errno() == EINTR) continue;
            rc = fail(c, PS_EIO, "poll failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (!(items[i].revents & ZMQ_POLLIN)) continue;
            ps_frames f;
            if (ps_frames_recv(c->shards[i].sock, ZMQ_DONTWAIT, &f) != PS_OK) continue;
            Ps__Header *h = NULL;
            char err[256];
            int drc = f.n >= 1 ? ps_header_decode(zmq_msg_data(&f.frames[0]),
                                                  zmq_msg_size(&f.frames[0]), &h, err, sizeof err)
                               : PS_EPROTO;
            if (h && h->request_id != c->shards[i].want_id) {
                /* an answer to a request we gave up on */
            } else if (drc != PS_OK) {
                c->shards[i].want_id = 0;
                if (rc == PS_OK) rc = fail(c, drc, "%s: bad reply from psd %zu: %s", what, i, err);
            } else {
                c->shards[i].want_id = 0;
                int r2;
                if (h->body_case == PS__HEADER__BODY_ERROR) {
                    r2 = h->error->code < 0 ? h->error->code : PS_EREMOTE;
                    if (rc == PS_OK)
                        fail(c, r2, "%s: psd %zu answered %s: %s", what, i, h->error->code_name,
                             h->error->message);
                } else {
                    r2 = on_reply(c, i, h, &f, ctx);
                }
                if (rc == PS_OK) rc = r2;
            }
            if (h) ps__header__free_unpacked(h, NULL);
            ps_frames_close(&f);
        }
    }
    free(items);
    return rc;
}

static int expect_body(ps_client *c, size_t shard, const Ps__Header *h, Ps__Header__BodyCase want,
                       const char *what) {
    if (h->body_case == want) return PS_OK;
    return fail(c, PS_EPROTO, "%s: psd %zu answered with body %d", what, shard, (int)h->body_case);
}

typedef struct {
    int async;
    uint64_t version;
    int have_mode;
} hello_ctx;

static int on_welcome(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    hello_ctx *ctx = vctx;
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_WELCOME, "hello");
    if (rc != PS_OK) return rc;
    const Ps__Welcome *w = h->welcome;
    if (w->shard_index != shard || w->num_shards != c->n_shards)
        return fail(
            c, PS_EINVAL, "psd at %s is shard %u of %u, but this worker lists it as %zu of %zu",
            c->shards[shard].endpoint + 6, w->shard_index, w->num_shards, shard, c->n_shards);
    int async = w->mode == PS__MODE__MODE_ASYNC;
    if (ctx->have_mode && async != ctx->async)
        return fail(c, PS_EINVAL, "shards disagree on the mode (sync/async)");
    ctx->async = async;
    ctx->have_mode = 1;
    if (w->version < ctx->version) ctx->version = w->version;
    return PS_OK;
}

int ps_client_hello(ps_client *c, int *async, uint64_t *version) {
    for (size_t i = 0; i < c->n_shards; i++) {
        Ps__Header h = PS__HEADER__INIT;
        Ps__Hello hello = PS__HELLO__INIT;
        hello.worker_index = c->worker_index;
        hello.num_workers = c->num_workers;
        h.body_case = PS__HEADER__BODY_HELLO;
        h.hello = &hello;
        int rc = send_request(c, i, &h, NULL, 0);
        if (rc != PS_OK) return rc;
    }
    hello_ctx ctx = {0, UINT64_MAX, 0};
    int rc = collect(c, "hello", on_welcome, &ctx);
    if (rc == PS_OK) {
        if (async) *async = ctx.async;
        if (version) *version = ctx.version;
    }
    return rc;
}

static int on_created(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_CREATE_VARS_REPLY, "create");
    if (rc != PS_OK) return rc;
    size_t *created = vctx;
    for (size_t i = 0; i < h->create_vars_reply->n_created; i++)
        *created += h->create_vars_reply->created[i] != 0;
    return PS_OK;
}

/* Builds metas (+ payloads from param or grad) for shard i's tensors. */
typedef struct {
    Ps__TensorMeta *metas;
    Ps__TensorMeta **ptrs;
    uint64_t *shapes;
    ps_payload *pl;
    Ps__Optimizer *opts;
    Ps__Optimizer **optptrs;
} frame_set;

static void frame_set_free(frame_set *fs) {
    free(fs->metas);
    free(fs->ptrs);
    free(fs->shapes);
    free(fs->pl);
    free(fs->opts);
    free(fs->optptrs);
}

static int frame_set_build(ps_client *c, size_t i, int use_grad, frame_set *fs) {
    size_t n = c->shards[i].n_tensors, m = n ? n : 1;
    fs->metas = calloc(m, sizeof *fs->metas);
    fs->ptrs = calloc(m, sizeof *fs->ptrs);
    fs->shapes = calloc(m * 2, sizeof *fs->shapes);
    fs->pl = calloc(m, sizeof *fs->pl);
    fs->opts = calloc(m, sizeof *fs->opts);
    fs->optptrs = calloc(m, sizeof *fs->optptrs);
    if (!fs->metas || !fs->ptrs || !fs->shapes || !fs->pl || !fs->opts || !fs->optptrs)
        return PS_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        const ps_client_tensor *t = &c->tensors[c->shards[i].tensors[k]];
        ps_tensor_meta_f32(&fs->metas[k], t->name, t->shape, t->rank, fs->shapes + 2 * k);
        fs->ptrs[k] = &fs->metas[k];
        /* zero-copy: the frame is the caller's buffer, which stays unchanged until the reply */
        fs->pl[k] = (ps_payload){use_grad ? t->grad : t->param, tensor_numel(t) * sizeof(float),
                                 NULL, NULL};
        Ps__Optimizer *o = &fs->opts[k];
        ps__optimizer__init(o);
        o->kind = (Ps__OptKind)t->opt.kind;
        o->lr = t->opt.lr;
        o->momentum = t->opt.momentum;
        o->nesterov = t->opt.nesterov;
        o->beta1 = t->opt.beta1;
        o->beta2 = t->opt.beta2;
        o->epsilon = t->opt.epsilon;
        o->rho = t->opt.rho;
        o->weight_decay = t->opt.weight_decay;
        o->initial_accumulator = t->opt.initial_accumulator;
        fs->optptrs[k] = o;
    }
    return PS_OK;
}

int ps_client_create_vars(ps_client *c, size_t *created) {
    size_t count = 0;
    int rc = PS_OK;
    frame_set *sets = calloc(c->n_shards, sizeof *sets);
    if (!sets) return PS_ENOMEM;
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++) {
        if (c->shards[i].n_tensors == 0) continue;
        rc = frame_set_build(c, i, 0, &sets[i]);
        if (rc != PS_OK) break;
        Ps__Header h = PS__HEADER__INIT;
        Ps__CreateVars cv = PS__CREATE_VARS__INIT;
        cv.vars = sets[i].ptrs;
        cv.n_vars = c->shards[i].n_tensors;
        cv.optimizers = sets[i].optptrs;
        cv.n_optimizers = cv.n_vars;
        h.body_case = PS__HEADER__BODY_CREATE_VARS;
        h.create_vars = &cv;
        rc = send_request(c, i, &h, sets[i].pl, cv.n_vars);
    }
    int rc2 = collect(c, "create", on_created, &count);
    if (rc == PS_OK) rc = rc2;
    for (size_t i = 0; i < c->n_shards; i++)
        frame_set_free(&sets[i]);
    free(sets);
    if (created) *created = count;
    return rc;
}

typedef struct {
    uint64_t version;
} pull_ctx;

static int on_pulled(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    pull_ctx *ctx = vctx;
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_PULL_REPLY, "pull");
    if (rc != PS_OK) return rc;
    const Ps__PullReply *p = h->pull_reply;
    const shard_conn *s = &c->shards[shard];
    char err[256];
    rc = ps_tensors_check(p->tensors, p->n_tensors, f->frames + 1, f->n - 1, err, sizeof err);
    if (rc != PS_OK) return fail(c, rc, "pull: bad reply from psd %zu: %s", shard, err);
    if (p->n_tensors != s->n_tensors)
        return fail(c, PS_EPROTO, "pull: psd %zu sent %zu tensors, asked %zu", shard, p->n_tensors,
                    s->n_tensors);
    for (size_t k = 0; k < s->n_tensors; k++) {
        const ps_client_tensor *t = &c->tensors[s->tensors[k]];
        size_t bytes = tensor_numel(t) * sizeof(float);
        if (strcmp(p->tensors[k]->name, t->name) != 0 || zmq_msg_size(&f->frames[k + 1]) != bytes)
            return fail(c, PS_ESHAPE, "pull: psd %zu sent '%s' where '%s' [%zu bytes] was expected",
                        shard, p->tensors[k]->name, t->name, bytes);
        /* the one copy on the pull path: from the received frame into place */
        memcpy(t->param, zmq_msg_data(&f->frames[k + 1]), bytes);
    }
    if (p->version < ctx->version) ctx->version = p->version;
    return PS_OK;
}

int ps_client_pull(ps_client *c, uint64_t min_version, uint64_t *version) {
    int rc = PS_OK;
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++) {
        shard_conn *s = &c->shards[i];
        if (s->n_tensors == 0) continue;
        char **names = calloc(s->n_tensors, sizeof *names);
        if (!names) return PS_ENOMEM;
        for (size_t k = 0; k < s->n_tensors; k++)
            names[k] = c->tensors[s->tensors[k]].name;
        Ps__Header h = PS__HEADER__INIT;
        Ps__Pull pull = PS__PULL__INIT;
        pull.names = names;
        pull.n_names = s->n_tensors;
        pull.min_version = min_version;
        h.body_case = PS__HEADER__BODY_PULL;
        h.pull = &pull;
        rc = send_request(c, i, &h, NULL, 0);
        free(names);
    }
    pull_ctx ctx = {UINT64_MAX};
    int rc2 = collect(c, "pull", on_pulled, &ctx);
    if (rc == PS_OK) rc = rc2;
    if (rc == PS_OK && version) *version = ctx.version;
    return rc;
}

static int on_pushed(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    int rc = expect_body(c, shard, h, PS__HEADER__BODY_PUSH_REPLY, "push");
    if (rc == PS_OK && !h->push_reply->applied) *(int *)vctx = 0;
    return rc;
}

int ps_client_push(ps_client *c, uint64_t step, int *applied_all) {
    int rc = PS_OK;
    frame_set *sets = calloc(c->n_shards, sizeof *sets);
    if (!sets) return PS_ENOMEM;
    for (size_t i = 0; i < c->n_shards && rc == PS_OK; i++) {
        if (c->shards[i].n_tensors == 0) continue;
        rc = frame_set_build(c, i, 1, &sets[i]);
        if (rc != PS_OK) break;
        Ps__Header h = PS__HEADER__INIT;
        Ps__Push push = PS__PUSH__INIT;
        push.grads = sets[i].ptrs;
        push.n_grads = c->shards[i].n_tensors;
        push.step = step;
        push.worker_index = c->worker_index;
        h.body_case = PS__HEADER__BODY_PUSH;
        h.push = &push;
        rc = send_request(c, i, &h, sets[i].pl, push.n_grads);
    }
    int applied = 1;
    int rc2 = collect(c, "push", on_pushed, &applied);
    if (rc == PS_OK) rc = rc2;
    for (size_t i = 0; i < c->n_shards; i++)
        frame_set_free(&sets[i]);
    free(sets);
    if (applied_all) *applied_all = applied;
    return rc;
}

typedef struct {
    Ps__Header__BodyCase want;
    Ps__Header *keep;
} one_ctx;

static int on_one(ps_client *c, size_t shard, Ps__Header *h, ps_frames *f, void *vctx) {
    (void)f;
    one_ctx *ctx = vctx;
    int rc = expect_body(c, shard, h, ctx->want, "request");
    if (rc != PS_OK) return rc;
    /* re-decode a private copy the caller can keep */
    size_t len = ps__header__get_packed_size(h);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return PS_ENOMEM;
    ps__header__pack(h, buf);
    ctx->keep = ps__header__unpack(NULL, len, buf);
    free(buf);
    return ctx->keep ? PS_OK : PS_ENOMEM;
}

static int one_request(ps_client *c, unsigned shard, Ps__Header *h, Ps__Header__BodyCase want,
                       Ps__Header **out) {
    if (shard >= c->n_shards) return fail(c, PS_EINVAL, "shard %u out of range", shard);
    int rc = send_request(c, shard, h, NULL, 0);
    if (rc != PS_OK) return rc;
    one_ctx ctx = {want, NULL};
    rc = collect(c, "request", on_one, &ctx);
    if (rc == PS_OK && out)
        *out = ctx.keep;
    else if (ctx.keep)
        ps__header__free_unpacked(ctx.keep, NULL);
    return rc;
}

int ps_client_stats(ps_client *c, unsigned shard, Ps__Header **out) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Stats st = PS__STATS__INIT;
    h.body_case = PS__HEADER__BODY_STATS;
    h.stats = &st;
    return one_request(c, shard, &h, PS__HEADER__BODY_STATS_REPLY, out);
}

int ps_client_shutdown(ps_client *c, unsigned shard) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Shutdown sd = PS__SHUTDOWN__INIT;
    h.body_case = PS__HEADER__BODY_SHUTDOWN;
    h.shutdown = &sd;
    return one_request(c, shard, &h, PS__HEADER__BODY_SHUTDOWN_REPLY, NULL);
}
