/* Ring collectives: writing frames to a link, and the send thread, which
 * writes every frame to next while an operation runs, so that sends overlap
 * the progress thread's receives and sums. */
#include "ring_impl.h"

#include "link.h"
#include "ps_error.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Sends the rest of the frame in flight and then one more frame, waiting for
 * room until deadline; best effort (the peer may be gone). */
void ps__ring_tx_flush_blocking(int fd, tx_state *tx, long long deadline) {
    while (tx->active) {
        struct iovec iov[2];
        int n = 0;
        if (tx->hdr_off < tx->hdr_len)
            iov[n++] = (struct iovec){tx->hdr + tx->hdr_off, tx->hdr_len - tx->hdr_off};
        if (tx->pay_off < tx->pay_len)
            iov[n++] = (struct iovec){(void *)(tx->pay + tx->pay_off), tx->pay_len - tx->pay_off};
        if (n == 0) {
            tx->active = 0;
            break;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            long long left = deadline - now_ms();
            if (left <= 0) return;
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, (int)left);
            continue;
        }
        if (k <= 0) return;
        size_t kk = (size_t)k, h = tx->hdr_len - tx->hdr_off;
        if (kk >= h) {
            tx->hdr_off = tx->hdr_len;
            tx->pay_off += kk - h;
        } else {
            tx->hdr_off += kk;
        }
    }
}

void ps__ring_tx_control(tx_state *tx, int type, int code, const char *text) {
    size_t tl = 0;
    if (type == PS_FRAME_ABORT) {
        tl = strlen(text);
        if (tl > PS_RING_CTRL_MAX - 4) tl = PS_RING_CTRL_MAX - 4;
    }
    ps__frame f = {.type = (uint8_t)type, .len = type == PS_FRAME_ABORT ? (uint32_t)(4 + tl) : 0};
    ps__frame_encode(&f, tx->hdr);
    if (type == PS_FRAME_ABORT) {
        uint32_t c = htole32((uint32_t)code);
        memcpy(tx->hdr + PS_RING_HDR, &c, 4);
        memcpy(tx->hdr + PS_RING_HDR + 4, text, tl);
    }
    tx->hdr_len = PS_RING_HDR + f.len;
    tx->hdr_off = 0;
    tx->pay = NULL;
    tx->pay_len = tx->pay_off = 0;
    tx->active = 1;
    tx->last_ms = now_ms();
}

/* Starts the frame of data piece (s_step, s_chunk) of op on the link to next. */
static void tx_start_piece(ps_ring *r, const ring_op *op, long long now) {
    tx_state *tx = &r->tx_next;
    span s = ps__ring_piece(r, ps__ring_send_span(r, op, r->s_step), r->s_chunk);
    int enc = ps__is_encoded(op->kind);
    size_t len = enc ? s.bytes / 2 : s.bytes; /* encoded: 2 bytes a float */
    ps__frame f = {.type = PS_FRAME_DATA,
                   .op = (uint8_t)op->kind,
                   .step = (uint16_t)r->s_step,
                   .seq = op->seq,
                   .chunk = (uint32_t)r->s_chunk,
                   .len = (uint32_t)len,
                   .total = op->bytes};
    ps__frame_encode(&f, tx->hdr);
    tx->hdr_len = PS_RING_HDR;
    tx->hdr_off = 0;
    tx->pay = enc ? r->tx_enc : s.p;
    /* encoded after mu is released, before the frame goes (tx_main) */
    r->enc_src = enc ? (const float *)(const void *)s.p : NULL;
    r->enc_n = s.bytes / 4;
    r->enc_kind = op->kind == PS_OP_ALLREDUCE_F16 ? PS_HALF_F16 : PS_HALF_BF16;
    r->bytes_sent += PS_RING_HDR + len;
    tx->pay_len = len;
    tx->pay_off = 0;
    tx->active = 1;
    tx->last_ms = now;
    r->s_chunk++;
}

/* Writes as much of the frame in flight as the socket takes. Returns 1 when
 * bytes went out, 0 when the socket is full, or an error (errno-based text
 * in msg). */
int ps__ring_tx_pump(int fd, tx_state *tx, char *msg, size_t msglen) {
    int moved = 0;
    while (tx->active) {
        struct iovec iov[2];
        int n = 0;
        if (tx->hdr_off < tx->hdr_len)
            iov[n++] = (struct iovec){tx->hdr + tx->hdr_off, tx->hdr_len - tx->hdr_off};
        if (tx->pay_off < tx->pay_len)
            iov[n++] = (struct iovec){(void *)(tx->pay + tx->pay_off), tx->pay_len - tx->pay_off};
        if (n == 0) {
            tx->active = 0;
            break;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
            snprintf(msg, msglen, "%s",
                     errno == EPIPE || errno == ECONNRESET ? "closed the connection"
                                                           : strerror(errno));
            return PS_EIO;
        }
        moved = 1;
        size_t kk = (size_t)k, h = tx->hdr_len - tx->hdr_off;
        if (kk >= h) {
            tx->hdr_off = tx->hdr_len;
            tx->pay_off += kk - h;
        } else {
            tx->hdr_off += kk;
        }
    }
    return moved;
}

/* Writes the frame in flight whole, waiting for room; returns PS_OK, 1 when
 * told to stop (the frame stays half sent), or PS_EIO (reason in msg). */
static int tx_send_frame(ps_ring *r, char *msg, size_t msglen) {
    while (r->tx_next.active) {
        int rc = ps__ring_tx_pump(r->next_fd, &r->tx_next, msg, msglen);
        if (rc < 0) return rc;
        if (!r->tx_next.active) break;
        struct pollfd pf[2] = {{.fd = r->next_fd, .events = POLLOUT},
                               {.fd = r->tx_stop_fd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR) return PS_EIO;
        if (pf[1].revents) return 1;
    }
    return PS_OK;
}

/* The send thread: the pieces of the running operation as soon as they have
 * their data, keep-alives when nothing went out for ka_ms. */
void *ps__ring_tx_main(void *arg) {
    ps_ring *r = arg;
    char msg[256];
    ring_op *op = NULL;
    uint32_t op_seq = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->tx_stop) {
        /* (by sequence number too: the next operation may reuse the address) */
        if (r->tx_op != op || (op && op->seq != op_seq)) {
            op = r->tx_op;
            op_seq = op ? op->seq : 0;
            r->s_step = 0;
            r->s_chunk = 0;
        }
        int go = 0;
        long long now = now_ms();
        if (op && !op->sent && r->next_left) {
            /* next left the ring: nobody takes the rest (our result only
             * needs what comes from prev, which check_left watches) */
            op->sent = 1;
            ps__ring_wake(r);
            continue;
        }
        if (op && !op->sent) {
            ps__ring_skip_send(r, op);
            if (r->s_step >= ps__ring_send_steps(r, op)) {
                op->sent = 1;
                ps__ring_wake(r);
                continue;
            }
            if (ps__ring_send_ready(r, op)) {
                tx_start_piece(r, op, now);
                go = 1;
            }
        }
        if (!go && now - r->tx_next.last_ms >= r->ka_ms && !r->next_left) {
            ps__ring_tx_control(&r->tx_next, PS_FRAME_KEEPALIVE, 0, NULL);
            go = 1;
        }
        if (!go) {
            long long until = r->tx_next.last_ms + r->ka_ms;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            long long ms = until - now < 1 ? 1 : until - now;
            ts.tv_sec += ms / 1000;
            ts.tv_nsec += (ms % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&r->tx_cv, &r->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&r->mu);
        if (r->enc_src) { /* the piece's floats, rounded to 16 bits for the wire */
            ps_half_encode((ps_half_kind)r->enc_kind, r->enc_src, r->enc_n,
                           (uint16_t *)(void *)r->tx_enc);
            r->enc_src = NULL;
        }
        int rc = tx_send_frame(r, msg, sizeof msg);
        pthread_mutex_lock(&r->mu);
        if (rc == 1) break;
        if (rc < 0 && r->next_left) { /* it closed after its BYE: see above */
            r->tx_next.active = 0;
            continue;
        }
        if (rc < 0) {
            r->tx_err = rc;
            snprintf(r->tx_msg, sizeof r->tx_msg, "%s", msg);
            ps__ring_wake(r);
            while (!r->tx_stop)
                pthread_cond_wait(&r->tx_cv, &r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Stops and joins the send thread (progress thread; idempotent). */
void ps__ring_tx_thread_stop(ps_ring *r) {
    if (!r->have_tx) return;
    pthread_mutex_lock(&r->mu);
    r->tx_stop = 1;
    pthread_cond_broadcast(&r->tx_cv);
    pthread_mutex_unlock(&r->mu);
    uint64_t one = 1;
    if (write(r->tx_stop_fd, &one, sizeof one) < 0) { /* counter full: it wakes anyway */
    }
    pthread_join(r->tx_thread, NULL);
    r->have_tx = 0;
}
