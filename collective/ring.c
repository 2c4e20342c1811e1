/* Ring collectives: the public API (ring.h) and a ring's lifecycle: open
 * (form the links, start the send and progress threads), queue operations,
 * wait for them, close. The work is in ring_progress.c and ring_send.c. */
#include "ring_impl.h"

#include "link.h"
#include "log.h"
#include "ps_error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen, const char *fmt,
                                                          ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void ring_free(ps_ring *r) {
    if (!r) return;
    while (r->head) {
        ring_op *op = r->head;
        r->head = op->next;
        free(op);
    }
    for (unsigned i = 0; r->endpoints && i < r->size; i++)
        free(r->endpoints[i]);
    free(r->endpoints);
    free(r->tmp);
    free(r->tx_enc);
    if (r->wake_fd >= 0) close(r->wake_fd);
    if (r->tx_stop_fd >= 0) close(r->tx_stop_fd);
    pthread_cond_destroy(&r->tx_cv);
    if (r->next_fd >= 0) close(r->next_fd);
    if (r->prev_fd >= 0) close(r->prev_fd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

int ps_ring_open(const ps_ring_config *cfg, ps_ring **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!out) return PS_EINVAL;
    *out = NULL;
    if (!cfg || cfg->size == 0 || cfg->rank >= cfg->size || !cfg->endpoints || !cfg->job_id ||
        cfg->transport > PS_RING_UNIX || strlen(cfg->job_id) > 512) {
        set_err(err, errlen, "bad ring configuration (rank %u of %u)", cfg ? cfg->rank : 0,
                cfg ? cfg->size : 0);
        return PS_EINVAL;
    }
    for (unsigned i = 0; i < cfg->size; i++)
        if (!cfg->endpoints[i] || strlen(cfg->endpoints[i]) >= PS_RING_NAME_MAX - 20) {
            set_err(err, errlen, "ring endpoint %u is missing or too long", i);
            return PS_EINVAL;
        }
    ps_ring *r = calloc(1, sizeof *r);
    if (!r) return PS_ENOMEM;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->tx_cv, &ca);
    pthread_condattr_destroy(&ca);
    r->tx_stop_fd = -1;
    r->rank = cfg->rank;
    r->size = cfg->size;
    r->next_fd = r->prev_fd = r->wake_fd = -1;
    r->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 10000;
    r->ka_ms = r->timeout_ms / 4 < 1000 ? r->timeout_ms / 4 : 1000;
    if (r->ka_ms == 0) r->ka_ms = 1;
    size_t chunk = cfg->chunk_bytes ? cfg->chunk_bytes : DEFAULT_CHUNK;
    if (chunk > (64u << 20)) chunk = 64u << 20;
    r->chunk = chunk < 4 ? 4 : chunk & ~(size_t)3;
    r->endpoints = calloc(cfg->size, sizeof *r->endpoints);
    r->tmp = malloc(r->chunk);
    r->tx_enc = malloc(r->chunk / 2);
    if (!r->endpoints || !r->tmp || !r->tx_enc) {
        ring_free(r);
        return PS_ENOMEM;
    }
    for (unsigned i = 0; i < cfg->size; i++)
        if (!(r->endpoints[i] = strdup(cfg->endpoints[i]))) {
            ring_free(r);
            return PS_ENOMEM;
        }
    if (cfg->size == 1) {
        PS_INFO("ring rank 0/1: ring complete: 1 rank");
        *out = r;
        return PS_OK;
    }
    char why[ERR_MAX];
    ps__links links;
    int rc = ps__links_form(cfg, &links, why, sizeof why);
    if (rc != PS_OK) {
        /* the caller reports the error (err): at info here, one error line */
        PS_INFO("ring rank %u/%u: could not form the ring: %s", cfg->rank, cfg->size, why);
        set_err(err, errlen, "ring rank %u/%u: %s", cfg->rank, cfg->size, why);
        ring_free(r);
        return rc;
    }
    r->next_fd = links.next_fd;
    r->prev_fd = links.prev_fd;
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->tx_stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->wake_fd < 0 || r->tx_stop_fd < 0 ||
        pthread_create(&r->tx_thread, NULL, ps__ring_tx_main, r) != 0) {
        set_err(err, errlen, "ring rank %u/%u: cannot start the send thread", r->rank, r->size);
        ring_free(r);
        return PS_ENOMEM;
    }
    r->have_tx = 1;
    if (pthread_create(&r->thread, NULL, ps__ring_progress, r) != 0) {
        ps__ring_tx_thread_stop(r);
        set_err(err, errlen, "ring rank %u/%u: cannot start the progress thread", r->rank, r->size);
        ring_free(r);
        return PS_ENOMEM;
    }
    r->have_thread = 1;
    *out = r;
    return PS_OK;
}

void ps__ring_wake(ps_ring *r) {
    uint64_t one = 1;
    if (r->wake_fd >= 0 && write(r->wake_fd, &one, sizeof one) < 0) { /* counter full: awake */
    }
}

/* Queues an operation (offs: an allgatherv's size + 1 block offsets, copied;
 * else NULL); PS_OK, the sticky error, or PS_ENOMEM. */
static int enqueue(ps_ring *r, int kind, void *data, size_t bytes, size_t unit, unsigned root,
                   const size_t *offs) {
    size_t n_offs = offs ? r->size + 1 : 0;
    ring_op *op = calloc(1, sizeof *op + n_offs * sizeof(size_t));
    if (!op) return PS_ENOMEM;
    if (n_offs) memcpy(op->offs, offs, n_offs * sizeof(size_t));
    op->kind = kind;
    op->data = data;
    op->bytes = bytes;
    op->unit = unit;
    op->root = root;
    pthread_mutex_lock(&r->mu);
    if (r->err != PS_OK) {
        int e = r->err;
        r->failed_since_wait = 1;
        pthread_mutex_unlock(&r->mu);
        free(op);
        return e;
    }
    op->seq = r->next_seq++;
    if (r->tail)
        r->tail->next = op;
    else
        r->head = op;
    r->tail = op;
    pthread_mutex_unlock(&r->mu);
    ps__ring_wake(r);
    return PS_OK;
}

int ps_ring_allreduce_start(ps_ring *r, float *data, size_t n) {
    return ps_ring_allreduce_start_enc(r, data, n, PS_RING_F32);
}

int ps_ring_allreduce_start_enc(ps_ring *r, float *data, size_t n, ps_ring_enc enc) {
    if (!r || (!data && n > 0) || n > SIZE_MAX / 4 || enc < PS_RING_F32 || enc > PS_RING_BF16)
        return PS_EINVAL;
    if (r->size == 1) {
        pthread_mutex_lock(&r->mu);
        int e = r->err;
        pthread_mutex_unlock(&r->mu);
        return e;
    }
    int kind = enc == PS_RING_F16    ? PS_OP_ALLREDUCE_F16
               : enc == PS_RING_BF16 ? PS_OP_ALLREDUCE_BF16
                                     : PS_OP_ALLREDUCE;
    return enqueue(r, kind, data, n * 4, 4, 0, NULL);
}

uint64_t ps_ring_bytes_sent(ps_ring *r) {
    if (!r) return 0;
    pthread_mutex_lock(&r->mu);
    uint64_t b = r->bytes_sent;
    pthread_mutex_unlock(&r->mu);
    return b;
}

int ps_ring_wait(ps_ring *r, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!r) return PS_EINVAL;
    pthread_mutex_lock(&r->mu);
    while (r->head && r->err == PS_OK)
        pthread_cond_wait(&r->cv, &r->mu);
    /* on error the thread drops the queue; wait for that, so data is ours again */
    while (r->head && r->have_thread)
        pthread_cond_wait(&r->cv, &r->mu);
    int rc = PS_OK;
    if (r->failed_since_wait) {
        rc = r->err != PS_OK ? r->err : PS_EINTERNAL;
        set_err(err, errlen, "%s", r->errmsg);
    }
    r->failed_since_wait = 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int ps_ring_allreduce(ps_ring *r, float *data, size_t n, char *err, size_t errlen) {
    int rc = ps_ring_allreduce_start(r, data, n);
    if (rc == PS_EINVAL || rc == PS_ENOMEM) {
        set_err(err, errlen, "%s", rc == PS_EINVAL ? "bad all-reduce arguments" : "out of memory");
        return rc;
    }
    return ps_ring_wait(r, err, errlen); /* the sticky error, with its reason */
}

int ps_ring_broadcast(ps_ring *r, unsigned root, void *data, size_t len, char *err, size_t errlen) {
    if (!r || root >= r->size || (!data && len > 0)) {
        set_err(err, errlen, "bad broadcast arguments");
        return PS_EINVAL;
    }
    if (r->size == 1) return ps_ring_wait(r, err, errlen);
    int rc = enqueue(r, PS_OP_BROADCAST, data, len, len, root, NULL);
    if (rc == PS_ENOMEM) return rc;
    return ps_ring_wait(r, err, errlen);
}

int ps_ring_allgather_start(ps_ring *r, const void *mine, size_t len, void *all) {
    if (!r || ((!mine || !all) && len > 0) || (r->size > 0 && len > SIZE_MAX / r->size))
        return PS_EINVAL;
    unsigned char *dst = (unsigned char *)all + (size_t)r->rank * len;
    if (len > 0 && dst != mine) memmove(dst, mine, len);
    if (r->size == 1) {
        pthread_mutex_lock(&r->mu);
        int e = r->err;
        pthread_mutex_unlock(&r->mu);
        return e;
    }
    return enqueue(r, PS_OP_ALLGATHER, all, len * r->size, len, 0, NULL);
}

int ps_ring_allgather(ps_ring *r, const void *mine, size_t len, void *all, char *err,
                      size_t errlen) {
    int rc = ps_ring_allgather_start(r, mine, len, all);
    if (rc == PS_EINVAL) {
        set_err(err, errlen, "bad allgather arguments");
        return rc;
    }
    if (rc == PS_ENOMEM) return rc;
    return ps_ring_wait(r, err, errlen);
}

int ps_ring_allgatherv(ps_ring *r, const void *mine, size_t len, size_t max_len, void **all,
                       size_t *lens, char *err, size_t errlen) {
    *all = NULL;
    if (!r || !lens || (!mine && len > 0) || len > max_len ||
        (r->size > 0 && max_len > (SIZE_MAX - 1) / r->size)) {
        set_err(err, errlen, "bad allgatherv arguments");
        return PS_EINVAL;
    }
    uint64_t *ln = calloc(r->size, sizeof *ln);
    size_t *offs = calloc((size_t)r->size + 1, sizeof *offs);
    if (!ln || !offs) {
        free(ln), free(offs);
        set_err(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    uint64_t my_len = len;
    int rc = ps_ring_allgather(r, &my_len, sizeof my_len, ln, err, errlen);
    for (unsigned i = 0; rc == PS_OK && i < r->size; i++) {
        if (ln[i] > max_len) { /* every rank sees the same lengths: all name it */
            set_err(err, errlen,
                    "ring rank %u (%s) announced an allgatherv block of %llu bytes, more than "
                    "the %zu allowed",
                    i, r->endpoints[i], (unsigned long long)ln[i], max_len);
            rc = PS_EPROTO;
            break;
        }
        lens[i] = (size_t)ln[i];
        offs[i + 1] = offs[i] + lens[i];
    }
    unsigned char *buf = NULL;
    if (rc == PS_OK) {
        buf = malloc(offs[r->size] ? offs[r->size] : 1);
        if (!buf) {
            set_err(err, errlen, "out of memory for an allgatherv of %zu bytes", offs[r->size]);
            rc = PS_ENOMEM;
        }
    }
    if (rc == PS_OK) {
        if (len) memcpy(buf + offs[r->rank], mine, len);
        if (r->size > 1) {
            rc = enqueue(r, PS_OP_ALLGATHERV, buf, offs[r->size], 0, 0, offs);
            if (rc != PS_ENOMEM) rc = ps_ring_wait(r, err, errlen);
            else set_err(err, errlen, "out of memory");
        }
    }
    free(ln), free(offs);
    if (rc != PS_OK) {
        free(buf);
        return rc;
    }
    *all = buf;
    return PS_OK;
}

unsigned ps_ring_rank(const ps_ring *r) {
    return r ? r->rank : 0;
}

unsigned ps_ring_size(const ps_ring *r) {
    return r ? r->size : 0;
}

void ps_ring_close(ps_ring *r) {
    if (!r) return;
    if (r->have_thread) {
        pthread_mutex_lock(&r->mu);
        r->closing = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        ps__ring_wake(r);
        pthread_join(r->thread, NULL);
        r->have_thread = 0;
    }
    ring_free(r);
}
