/* Ring collectives: the progress thread that owns a ring's two sockets and
 * runs the queued operations (all-reduce = reduce-scatter then all-gather,
 * broadcast, allgather): it receives and sums the chunk frames from prev
 * while the send thread (ring_send.c) sends; keep-alives to prev, timeouts,
 * and the sticky error that an abort frame carries around the ring. */
#include "ring_impl.h"

#include "link.h"
#include "log.h"
#include "ps_error.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- errors ---- */

static const char *rank_name(const ps_ring *r, unsigned k, char *buf, size_t n) {
    snprintf(buf, n, "rank %u (%s)", k, r->endpoints[k]);
    return buf;
}

/* Sends `type` (ABORT with code and text, or BYE) to both neighbours after
 * the frames in flight, then closes both sockets, reading what is left so
 * that the close does not reset the connection under our last frame. */
static void say_goodbye(ps_ring *r, int type, int code, const char *text) {
    ps__ring_tx_thread_stop(r); /* the link to next is ours again, a frame maybe half sent */
    long long deadline = now_ms() + 1000;
    int fds[2] = {r->next_fd, r->prev_fd};
    tx_state *txs[2] = {&r->tx_next, &r->tx_prev};
    for (int i = 0; i < 2; i++) {
        if (fds[i] < 0) continue;
        ps__ring_tx_flush_blocking(fds[i], txs[i], deadline);
        if (txs[i]->active) continue; /* stuck mid-frame: the close will tell */
        ps__ring_tx_control(txs[i], type, code, text);
        ps__ring_tx_flush_blocking(fds[i], txs[i], deadline);
        shutdown(fds[i], SHUT_WR);
    }
    for (int i = 0; i < 2; i++) {
        if (fds[i] < 0) continue;
        char sink[4096];
        for (;;) {
            ssize_t k = recv(fds[i], sink, sizeof sink, 0);
            if (k > 0) continue;
            if (k < 0 && errno == EINTR) continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                long long left = deadline - now_ms();
                if (left <= 0) break;
                struct pollfd pf = {.fd = fds[i], .events = POLLIN};
                if (poll(&pf, 1, (int)(left > 200 ? 200 : left)) <= 0) break;
                continue;
            }
            break;
        }
        close(fds[i]);
    }
    r->next_fd = r->prev_fd = -1;
}

/* Drops every queued operation (they fail) and wakes the waiter. Locked. */
static void drop_ops_locked(ps_ring *r) {
    while (r->head) {
        ring_op *op = r->head;
        r->head = op->next;
        free(op);
        r->failed_since_wait = 1;
    }
    r->tail = NULL;
    r->cur = NULL;
    pthread_cond_broadcast(&r->cv);
}

/* Breaks the ring for good: sticky error, abort frames to both neighbours
 * (relaying `relay` unchanged when the reason came from one), sockets closed.
 * The reason goes back to the caller (ps_ring_wait's err), which reports the
 * error: logged here at info only, so that a broken ring makes one error
 * line. quiet: at debug (a neighbour that closed while we were idle). */
__attribute__((format(printf, 4, 5))) static void fail(ps_ring *r, int code, int quiet,
                                                       const char *fmt, ...) {
    char msg[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (quiet)
        PS_DEBUG("ring rank %u/%u: broken: %s", r->rank, r->size, msg);
    else
        PS_INFO("ring rank %u/%u: broken: %s", r->rank, r->size, msg);
    pthread_mutex_lock(&r->mu);
    if (r->err == PS_OK) {
        r->err = code;
        snprintf(r->errmsg, sizeof r->errmsg, "%s", msg);
    }
    pthread_mutex_unlock(&r->mu);
    say_goodbye(r, PS_FRAME_ABORT, code, msg);
    pthread_mutex_lock(&r->mu);
    drop_ops_locked(r);
    pthread_mutex_unlock(&r->mu);
}

/* ---- the data path ---- */

/* Publishes the running operation's receive progress to the send thread. */
static void publish(ps_ring *r) {
    pthread_mutex_lock(&r->mu);
    r->tx_op = r->cur;
    r->pub_r_step = r->r_step;
    r->pub_r_chunk = r->r_chunk;
    pthread_cond_signal(&r->tx_cv);
    pthread_mutex_unlock(&r->mu);
}

/* dst[i] += src[i]: 16 floats a step with vector adds (GCC's -O2 leaves the
 * plain loop scalar), the same bits as the scalar loop (no reassociation). */
typedef float v4f __attribute__((vector_size(16)));
static void sum_into(float *restrict dst, const float *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v4f a[4], b[4];
        memcpy(a, dst + i, sizeof a);
        memcpy(b, src + i, sizeof b);
        for (int k = 0; k < 4; k++)
            a[k] += b[k];
        memcpy(dst + i, a, sizeof a);
    }
    for (; i < n; i++)
        dst[i] += src[i];
}

/* Checks a DATA header against the piece the running operation expects and
 * sets where its payload goes. Returns PS_OK or PS_EPROTO (reason in msg). */
static int rx_accept_data(ps_ring *r, rx_state *rx, char *msg, size_t msglen) {
    ring_op *op = r->cur;
    const ps__frame *f = &rx->f;
    ps__ring_skip_recv(r);
    int add = 0;
    span exp = {0};
    if (r->r_step < ps__ring_recv_steps(r, op))
        exp = ps__ring_piece(r, ps__ring_recv_span(r, op, r->r_step, &add), r->r_chunk);
    if (f->seq != op->seq || f->op != op->kind || f->total != op->bytes) {
        snprintf(msg, msglen,
                 "sent %s #%u of %llu bytes where this rank runs %s #%u of %zu bytes (every rank "
                 "must start the same operations with the same sizes)",
                 ps__op_name(f->op), (unsigned)f->seq, (unsigned long long)f->total,
                 ps__op_name(op->kind), (unsigned)op->seq, op->bytes);
        return PS_EPROTO;
    }
    int enc = ps__is_encoded(op->kind);
    size_t want = enc ? exp.bytes / 2 : exp.bytes; /* encoded: 2 bytes a float */
    if (r->r_step >= ps__ring_recv_steps(r, op) || f->step != r->r_step || f->chunk != r->r_chunk ||
        f->len != want) {
        snprintf(msg, msglen,
                 "sent a %u-byte frame for %s #%u step %u chunk %u; expected %zu bytes for step %u "
                 "chunk %zu",
                 f->len, ps__op_name(op->kind), (unsigned)op->seq, (unsigned)f->step,
                 (unsigned)f->chunk, want, r->r_step, r->r_chunk);
        return PS_EPROTO;
    }
    rx->add = add;
    rx->enc = enc;
    rx->last_add = add && r->r_step + 2 == r->size; /* step size-2: the last reduce step */
    rx->sum_into = exp.p;
    rx->dst = add || enc ? r->tmp : exp.p;
    rx->got = 0;
    rx->in_payload = 1;
    return PS_OK;
}

/* Reads what the socket has. is_prev: the forward link from the previous
 * rank (data); else the backward link from next (control only). Returns
 * PS_OK, or an error after fail() was called. */
static int rx_pump(ps_ring *r, int is_prev) {
    int fd = is_prev ? r->prev_fd : r->next_fd;
    rx_state *rx = is_prev ? &r->rx_prev : &r->rx_next;
    unsigned peer = is_prev ? prev_rank(r) : next_rank(r);
    char who[PS_RING_NAME_MAX], msg[ERR_MAX];
    rank_name(r, peer, who, sizeof who);
    for (int rounds = 0; rounds < 16; rounds++) {
        if (rx->held) {
            if (!r->cur || r->r_step >= ps__ring_recv_steps(r, r->cur)) return PS_OK;
            rx->held = 0;
            rx->hup = 0;
            int rc = rx_accept_data(r, rx, msg, sizeof msg);
            if (rc != PS_OK) {
                fail(r, rc, 0, "%s %s", who, msg);
                return rc;
            }
        }
        unsigned char *dst;
        size_t want;
        if (!rx->in_payload) {
            dst = rx->hdr + rx->hdr_have;
            want = PS_RING_HDR - rx->hdr_have;
        } else {
            dst = rx->dst + rx->got;
            want = rx->f.len - rx->got;
        }
        ssize_t k = want ? recv(fd, dst, want, MSG_DONTWAIT) : 0;
        if (want && k <= 0) {
            if (k < 0 && errno == EINTR) continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return PS_OK;
            if (k == 0 || errno == ECONNRESET || errno == EPIPE)
                fail(r, PS_EIO, 0, "%s closed the connection%s", who,
                     r->cur ? " during an operation" : "");
            else
                fail(r, PS_EIO, 0, "reading from %s: %s", who, strerror(errno));
            return PS_EIO;
        }
        rx->last_ms = now_ms();
        if (!rx->in_payload) {
            rx->hdr_have += (size_t)k;
            if (rx->hdr_have < PS_RING_HDR) continue;
            rx->hdr_have = 0;
            if (ps__frame_decode(rx->hdr, &rx->f, msg, sizeof msg) != PS_OK) {
                fail(r, PS_EPROTO, 0, "%s sent garbage: %s", who, msg);
                return PS_EPROTO;
            }
            switch (rx->f.type) {
            case PS_FRAME_KEEPALIVE:
            case PS_FRAME_BYE:
                if (rx->f.len != 0) {
                    fail(r, PS_EPROTO, 0, "%s sent a %u-byte keep-alive", who, rx->f.len);
                    return PS_EPROTO;
                }
                if (rx->f.type == PS_FRAME_BYE) {
                    PS_INFO("ring rank %u/%u: %s left the ring", r->rank, r->size, who);
                    rx->left = 1; /* an error only if an operation still needs it */
                    if (!is_prev) {
                        pthread_mutex_lock(&r->mu);
                        r->next_left = 1;
                        pthread_mutex_unlock(&r->mu);
                    }
                    return PS_OK;
                }
                continue;
            case PS_FRAME_ABORT:
                if (rx->f.len < 4 || rx->f.len > PS_RING_CTRL_MAX) {
                    fail(r, PS_EPROTO, 0, "%s sent an abort frame of %u bytes", who, rx->f.len);
                    return PS_EPROTO;
                }
                rx->dst = rx->ctrl;
                rx->got = 0;
                rx->in_payload = 1;
                continue;
            case PS_FRAME_DATA:
                if (!is_prev) {
                    fail(r, PS_EPROTO, 0, "%s sent data on the backward link", who);
                    return PS_EPROTO;
                }
                if (!r->cur ||
                    (ps__ring_skip_recv(r), r->r_step >= ps__ring_recv_steps(r, r->cur))) {
                    rx->held = 1; /* the next operation's: wait until it starts */
                    return PS_OK;
                }
                {
                    int rc = rx_accept_data(r, rx, msg, sizeof msg);
                    if (rc != PS_OK) {
                        fail(r, rc, 0, "%s %s", who, msg);
                        return rc;
                    }
                }
                if (rx->f.len == 0) goto payload_done;
                continue;
            default:
                fail(r, PS_EPROTO, 0, "%s sent a frame of type %u on an open ring", who,
                     (unsigned)rx->f.type);
                return PS_EPROTO;
            }
        }
        rx->got += (size_t)k;
        if (rx->got < rx->f.len) continue;
    payload_done:
        rx->in_payload = 0;
        if (rx->f.type == PS_FRAME_ABORT) {
            uint32_t c;
            memcpy(&c, rx->ctrl, 4);
            int code = (int)le32toh(c);
            if (code >= 0 || code < -100) code = PS_EIO;
            fail(r, code, 0, "%.*s [relayed by %s]", (int)(rx->f.len - 4), rx->ctrl + 4, who);
            return code;
        }
        if (rx->enc) {
            /* decoded and summed in float; the rank that completes a segment's sum rounds
             * it as the wire will carry it, so every rank ends with the same values */
            ps_half_kind k =
                r->cur->kind == PS_OP_ALLREDUCE_F16 ? PS_HALF_F16 : PS_HALF_BF16;
            float *into = (float *)(void *)rx->sum_into;
            ps_half_decode(k, (const uint16_t *)(void *)r->tmp, rx->f.len / 2, into, rx->add);
            if (rx->last_add) ps_half_round(k, into, rx->f.len / 2);
        } else if (rx->add) {
            sum_into((float *)(void *)rx->sum_into, (const float *)(void *)r->tmp, rx->f.len / 4);
        }
        r->r_chunk++;
        ps__ring_skip_recv(r);
        publish(r);
    }
    return PS_OK;
}

/* Fails the ring when the running operation still needs data from a
 * previous rank that left (sent BYE); a next rank that left only stops our
 * sends (tx_main). Returns PS_OK or the error. */
static int check_left(ps_ring *r) {
    if (!r->cur) return PS_OK;
    char who[PS_RING_NAME_MAX];
    ps__ring_skip_recv(r);
    if (r->rx_prev.left && r->r_step < ps__ring_recv_steps(r, r->cur)) {
        fail(r, PS_ESHUTDOWN, 0, "%s left the ring during %s #%u",
             rank_name(r, prev_rank(r), who, sizeof who), ps__op_name(r->cur->kind),
             (unsigned)r->cur->seq);
        return PS_ESHUTDOWN;
    }
    return PS_OK;
}

/* Takes the head of the queue as the running operation. */
static void op_begin(ps_ring *r) {
    pthread_mutex_lock(&r->mu);
    r->cur = r->head;
    pthread_mutex_unlock(&r->mu);
    if (!r->cur) return;
    r->r_step = 0;
    r->r_chunk = 0;
    ps__ring_skip_recv(r);
    publish(r);
    r->rx_prev.last_ms = now_ms(); /* silence counts from the start of the operation */
}

static int op_done(ps_ring *r) {
    ps__ring_skip_recv(r);
    if (r->r_step < ps__ring_recv_steps(r, r->cur)) return 0;
    pthread_mutex_lock(&r->mu);
    int sent = r->cur->sent;
    pthread_mutex_unlock(&r->mu);
    return sent;
}

static void op_finish(ps_ring *r) {
    pthread_mutex_lock(&r->mu);
    ring_op *op = r->head;
    r->head = op->next;
    if (!r->head) r->tail = NULL;
    free(op);
    r->cur = NULL;
    r->tx_op = NULL;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* A send to a neighbour failed: it closed, perhaps after an abort frame that
 * names the real culprit, so read what it sent before blaming it. */
static void send_failed(ps_ring *r, int to_next, const char *msg) {
    char who[PS_RING_NAME_MAX];
    rx_state *rx = to_next ? &r->rx_next : &r->rx_prev;
    if (!rx->held && !rx->left && rx_pump(r, !to_next) != PS_OK) return; /* failed there */
    if (r->err != PS_OK) return;
    fail(r, PS_EIO, 0, "%s %s",
         rank_name(r, to_next ? next_rank(r) : prev_rank(r), who, sizeof who), msg);
}

void *ps__ring_progress(void *arg) {
    ps_ring *r = arg;
    char who[PS_RING_NAME_MAX], msg[256];
    long long t0 = now_ms();
    r->tx_prev.last_ms = 0;
    r->rx_prev.last_ms = r->rx_next.last_ms = t0;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int closing = r->closing, broken = r->err != PS_OK;
        pthread_mutex_unlock(&r->mu);
        if (closing) break;
        if (broken) { /* sockets closed: wait for ps_ring_close */
            pthread_mutex_lock(&r->mu);
            while (!r->closing)
                pthread_cond_wait(&r->cv, &r->mu);
            pthread_mutex_unlock(&r->mu);
            break;
        }
        if (!r->cur) op_begin(r);
        if (check_left(r) != PS_OK) continue;
        /* receive and sum until nothing more comes (bounded in time, so that
         * keep-alives and silence checks stay on time); the send thread sends */
        long long spin_end = now_ms() + (r->ka_ms + 3) / 4;
        for (int spins = 0; spins < 16; spins++) {
            if (spins > 0 && now_ms() > spin_end) break;
            size_t before = r->r_chunk + ((size_t)r->r_step << 32) + r->rx_prev.got;
            if (!r->rx_prev.left && rx_pump(r, 1) != PS_OK) break;
            if (check_left(r) != PS_OK) break;
            size_t after = r->r_chunk + ((size_t)r->r_step << 32) + r->rx_prev.got;
            if (r->cur && op_done(r)) {
                op_finish(r);
                op_begin(r);
                if (check_left(r) != PS_OK) break;
                continue;
            }
            if (before == after) break;
        }
        if (r->err != PS_OK || r->next_fd < 0) continue;
        if (!r->rx_next.left && rx_pump(r, 0) != PS_OK) continue;
        if (check_left(r) != PS_OK) continue;
        pthread_mutex_lock(&r->mu);
        int tx_err = r->tx_err;
        snprintf(msg, sizeof msg, "%s", r->tx_msg);
        pthread_mutex_unlock(&r->mu);
        if (tx_err) {
            send_failed(r, 1, msg);
            continue;
        }
        long long now = now_ms();
        int prev_quiet = r->rx_prev.left || r->rx_prev.hup;
        /* keep-alives backward: the previous rank watches us too */
        if (!r->tx_prev.active && now - r->tx_prev.last_ms >= r->ka_ms && !prev_quiet)
            ps__ring_tx_control(&r->tx_prev, PS_FRAME_KEEPALIVE, 0, NULL);
        if (!prev_quiet && ps__ring_tx_pump(r->prev_fd, &r->tx_prev, msg, sizeof msg) < 0) {
            send_failed(r, 0, msg);
            continue;
        }
        /* silence */
        if (!prev_quiet && !r->rx_prev.held && now - r->rx_prev.last_ms > r->timeout_ms) {
            fail(r, PS_ETIMEDOUT, 0, "%s sent nothing for %u ms",
                 rank_name(r, prev_rank(r), who, sizeof who), r->timeout_ms);
            continue;
        }
        if (!r->rx_next.left && now - r->rx_next.last_ms > r->timeout_ms) {
            fail(r, PS_ETIMEDOUT, 0, "%s sent nothing for %u ms",
                 rank_name(r, next_rank(r), who, sizeof who), r->timeout_ms);
            continue;
        }
        struct pollfd pf[3] = {
            {.fd = r->wake_fd, .events = POLLIN},
            {.fd = prev_quiet ? -1 : r->prev_fd,
             .events = (short)((r->rx_prev.held ? POLLRDHUP : POLLIN) |
                               (r->tx_prev.active ? POLLOUT : 0))},
            {.fd = r->rx_next.left ? -1 : r->next_fd, .events = POLLIN},
        };
        long long wait = r->ka_ms;
        long long ka1 = r->tx_prev.last_ms + r->ka_ms - now;
        if (ka1 < wait && !prev_quiet) wait = ka1;
        if (wait < 1) wait = 1;
        if (poll(pf, 3, (int)wait) > 0 && pf[0].revents) {
            uint64_t v;
            if (read(r->wake_fd, &v, sizeof v) < 0) { /* nothing to do: woken anyway */
            }
        }
        /* the previous rank left after sending the next operation's data: read
         * that when the operation starts (its end then fails, or not) */
        if (r->rx_prev.held && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            r->rx_prev.hup = 1;
    }
    if (r->err == PS_OK && r->next_fd >= 0) say_goodbye(r, PS_FRAME_BYE, 0, "");
    ps__ring_tx_thread_stop(r);
    return NULL;
}
