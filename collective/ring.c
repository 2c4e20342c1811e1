/* Ring collectives: the progress thread that owns a ring's two sockets and
 * runs the queued operations (all-reduce = reduce-scatter then all-gather,
 * broadcast, allgather) as streams of chunk frames, sends and receives
 * overlapping through nonblocking sockets; keep-alives, timeouts, and the
 * sticky error that an abort frame carries around the ring. */
#include "ring.h"

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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CHUNK (512u << 10)
#define ERR_MAX 600

typedef struct ring_op {
    struct ring_op *next;
    int kind;
    uint32_t seq;
    int sent;            /* the send thread sent all its pieces (under mu) */
    unsigned char *data; /* all-reduce: the floats; broadcast: the buffer; allgather: all */
    size_t bytes;        /* total bytes of data */
    size_t unit;         /* bytes per block (allgather) */
    unsigned root;       /* broadcast */
} ring_op;

/* Sending side of one socket: the frame in flight (header, then payload). */
typedef struct {
    unsigned char hdr[PS_RING_HDR + PS_RING_CTRL_MAX];
    size_t hdr_len, hdr_off;
    const unsigned char *pay;
    size_t pay_len, pay_off;
    int active;
    long long last_ms; /* last time a frame was started */
} tx_state;

/* Receiving side of one socket. */
typedef struct {
    unsigned char hdr[PS_RING_HDR];
    size_t hdr_have;
    ps__frame f;
    int in_payload;     /* header decoded, payload being read */
    unsigned char *dst; /* where the payload goes */
    size_t got;
    int add; /* DATA: sum into the op's floats when complete */
    unsigned char *sum_into;
    int held; /* a DATA header read with no operation to take it */
    int hup;  /* while held: the peer hung up (read the rest later) */
    int left; /* the peer sent BYE: nothing more comes on this link */
    unsigned char ctrl[PS_RING_CTRL_MAX];
    long long last_ms; /* last time bytes came in */
} rx_state;

struct ps_ring {
    unsigned rank, size;
    char **endpoints;
    unsigned timeout_ms, ka_ms;
    size_t chunk;
    int next_fd, prev_fd, wake_fd;
    pthread_t thread;
    int have_thread;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    ring_op *head, *tail; /* queued operations, head is the running one */
    uint32_t next_seq;
    int closing;
    int err; /* sticky */
    char errmsg[ERR_MAX];
    int failed_since_wait; /* an operation started since the last wait failed */

    /* the send thread: writes every frame to next while it runs (so sends
     * overlap receives and sums); the progress thread owns the rest */
    pthread_t tx_thread;
    int have_tx;
    pthread_cond_t tx_cv;
    int tx_stop_fd;      /* eventfd: stop waiting for room */
    int tx_stop;         /* under mu */
    ring_op *tx_op;      /* under mu: the running operation, whose pieces may go */
    unsigned pub_r_step; /* under mu: its receive progress, (step, chunk) */
    size_t pub_r_chunk;
    int next_left; /* under mu: next sent BYE (no keep-alives to it) */
    int tx_err;    /* under mu: a send failed, tx_msg says why */
    char tx_msg[256];
    unsigned s_step; /* send thread: next piece to send, (step, chunk) */
    size_t s_chunk;
    tx_state tx_next; /* send thread (progress thread once it stopped) */

    /* progress thread only */
    ring_op *cur;
    unsigned r_step; /* next piece to receive: (step, chunk) */
    size_t r_chunk;
    tx_state tx_prev;
    rx_state rx_prev, rx_next;
    unsigned char *tmp; /* one chunk: a received piece before it is summed */
};

static void wake(ps_ring *r);

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static unsigned next_rank(const ps_ring *r) {
    return (r->rank + 1) % r->size;
}
static unsigned prev_rank(const ps_ring *r) {
    return (r->rank + r->size - 1) % r->size;
}

/* ---- the pieces of an operation ---- */

typedef struct {
    unsigned char *p;
    size_t bytes;
} span;

/* Segment i of an all-reduce of n floats over size ranks: the first n%size
 * segments get one float more. */
static span ar_segment(const ps_ring *r, const ring_op *op, unsigned i) {
    size_t n = op->bytes / 4, base = n / r->size, rem = n % r->size;
    size_t off = i * base + (i < rem ? i : rem);
    return (span){op->data + off * 4, (base + (i < rem)) * 4};
}

static unsigned mod(const ps_ring *r, long v) {
    long s = (long)r->size;
    return (unsigned)(((v % s) + s) % s);
}

static unsigned send_steps(const ps_ring *r, const ring_op *op) {
    if (op->kind == PS_OP_ALLREDUCE) return 2 * (r->size - 1);
    if (op->kind == PS_OP_ALLGATHER) return r->size - 1;
    return next_rank(r) == op->root ? 0 : 1; /* the last rank of a broadcast forwards nothing */
}
static unsigned recv_steps(const ps_ring *r, const ring_op *op) {
    if (op->kind == PS_OP_BROADCAST) return r->rank == op->root ? 0 : 1;
    return send_steps(r, op);
}

/* Send step t: the segment that went through recv step t-1 (all-reduce,
 * allgather) or recv step t (broadcast), so a piece may go once it came in. */
static span send_span(const ps_ring *r, const ring_op *op, unsigned t) {
    long me = (long)r->rank, n1 = (long)r->size - 1;
    if (op->kind == PS_OP_ALLREDUCE)
        return ar_segment(r, op, (long)t < n1 ? mod(r, me - t) : mod(r, me + 1 - (t - n1)));
    if (op->kind == PS_OP_ALLGATHER) return (span){op->data + mod(r, me - t) * op->unit, op->unit};
    return (span){op->data, op->bytes};
}
static span recv_span(const ps_ring *r, const ring_op *op, unsigned t, int *add) {
    long me = (long)r->rank, n1 = (long)r->size - 1;
    *add = 0;
    if (op->kind == PS_OP_ALLREDUCE) {
        *add = (long)t < n1;
        return ar_segment(r, op, (long)t < n1 ? mod(r, me - t - 1) : mod(r, me - (t - n1)));
    }
    if (op->kind == PS_OP_ALLGATHER)
        return (span){op->data + mod(r, me - t - 1) * op->unit, op->unit};
    return (span){op->data, op->bytes};
}
static size_t nchunks(const ps_ring *r, size_t bytes) {
    return (bytes + r->chunk - 1) / r->chunk;
}
static span piece(const ps_ring *r, span s, size_t j) {
    size_t off = j * r->chunk, len = s.bytes - off < r->chunk ? s.bytes - off : r->chunk;
    return (span){s.p + off, len};
}

/* Moves (step, chunk) past finished and empty steps. */
static void skip_send(ps_ring *r, const ring_op *op) {
    unsigned n = send_steps(r, op);
    while (r->s_step < n && r->s_chunk >= nchunks(r, send_span(r, op, r->s_step).bytes)) {
        r->s_step++;
        r->s_chunk = 0;
    }
}
static void skip_recv(ps_ring *r) {
    unsigned n = recv_steps(r, r->cur);
    int add;
    while (r->r_step < n && r->r_chunk >= nchunks(r, recv_span(r, r->cur, r->r_step, &add).bytes)) {
        r->r_step++;
        r->r_chunk = 0;
    }
}

/* 1 when send piece (s_step, s_chunk) of op has its data: received (and
 * summed) by the published receive progress. Under mu. */
static int send_ready(const ps_ring *r, const ring_op *op) {
    if (recv_steps(r, op) == 0) return 1;
    unsigned lag = op->kind == PS_OP_BROADCAST ? 0 : 1;
    if (r->s_step < lag) return 1;
    unsigned need = r->s_step - lag;
    return r->pub_r_step > need || (r->pub_r_step == need && r->pub_r_chunk > r->s_chunk);
}

/* ---- errors ---- */

static const char *rank_name(const ps_ring *r, unsigned k, char *buf, size_t n) {
    snprintf(buf, n, "rank %u (%s)", k, r->endpoints[k]);
    return buf;
}

/* Sends the rest of the frame in flight and then one more frame, waiting for
 * room until deadline; best effort (the peer may be gone). */
static void tx_flush_blocking(int fd, tx_state *tx, long long deadline) {
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

static void tx_control(tx_state *tx, int type, int code, const char *text) {
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

/* Sends `type` (ABORT with code and text, or BYE) to both neighbours after
 * the frames in flight, then closes both sockets, reading what is left so
 * that the close does not reset the connection under our last frame. */
static void tx_thread_stop(ps_ring *r);

static void say_goodbye(ps_ring *r, int type, int code, const char *text) {
    tx_thread_stop(r); /* the link to next is ours again, a frame maybe half sent */
    long long deadline = now_ms() + 1000;
    int fds[2] = {r->next_fd, r->prev_fd};
    tx_state *txs[2] = {&r->tx_next, &r->tx_prev};
    for (int i = 0; i < 2; i++) {
        if (fds[i] < 0) continue;
        tx_flush_blocking(fds[i], txs[i], deadline);
        if (txs[i]->active) continue; /* stuck mid-frame: the close will tell */
        tx_control(txs[i], type, code, text);
        tx_flush_blocking(fds[i], txs[i], deadline);
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
 * quiet: log at info (a neighbour that closed while we were idle). */
__attribute__((format(printf, 4, 5))) static void fail(ps_ring *r, int code, int quiet,
                                                       const char *fmt, ...) {
    char msg[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (quiet)
        PS_INFO("ring rank %u/%u: %s", r->rank, r->size, msg);
    else
        PS_ERROR("ring rank %u/%u: %s", r->rank, r->size, msg);
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

/* Starts the frame of data piece (s_step, s_chunk) of op on the link to next. */
static void tx_start_piece(ps_ring *r, const ring_op *op, long long now) {
    tx_state *tx = &r->tx_next;
    span s = piece(r, send_span(r, op, r->s_step), r->s_chunk);
    ps__frame f = {.type = PS_FRAME_DATA,
                   .op = (uint8_t)op->kind,
                   .step = (uint16_t)r->s_step,
                   .seq = op->seq,
                   .chunk = (uint32_t)r->s_chunk,
                   .len = (uint32_t)s.bytes,
                   .total = op->bytes};
    ps__frame_encode(&f, tx->hdr);
    tx->hdr_len = PS_RING_HDR;
    tx->hdr_off = 0;
    tx->pay = s.p;
    tx->pay_len = s.bytes;
    tx->pay_off = 0;
    tx->active = 1;
    tx->last_ms = now;
    r->s_chunk++;
}

/* Writes as much of the frame in flight as the socket takes. Returns 1 when
 * bytes went out, 0 when the socket is full, or an error (errno-based text
 * in msg). */
static int tx_pump(int fd, tx_state *tx, char *msg, size_t msglen) {
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
        int rc = tx_pump(r->next_fd, &r->tx_next, msg, msglen);
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
static void *tx_main(void *arg) {
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
            wake(r);
            continue;
        }
        if (op && !op->sent) {
            skip_send(r, op);
            if (r->s_step >= send_steps(r, op)) {
                op->sent = 1;
                wake(r);
                continue;
            }
            if (send_ready(r, op)) {
                tx_start_piece(r, op, now);
                go = 1;
            }
        }
        if (!go && now - r->tx_next.last_ms >= r->ka_ms && !r->next_left) {
            tx_control(&r->tx_next, PS_FRAME_KEEPALIVE, 0, NULL);
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
            wake(r);
            while (!r->tx_stop)
                pthread_cond_wait(&r->tx_cv, &r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Stops and joins the send thread (progress thread; idempotent). */
static void tx_thread_stop(ps_ring *r) {
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
    skip_recv(r);
    int add = 0;
    span exp = {0};
    if (r->r_step < recv_steps(r, op))
        exp = piece(r, recv_span(r, op, r->r_step, &add), r->r_chunk);
    if (f->seq != op->seq || f->op != op->kind || f->total != op->bytes) {
        snprintf(msg, msglen,
                 "sent %s #%u of %llu bytes where this rank runs %s #%u of %zu bytes (every rank "
                 "must start the same operations with the same sizes)",
                 ps__op_name(f->op), (unsigned)f->seq, (unsigned long long)f->total,
                 ps__op_name(op->kind), (unsigned)op->seq, op->bytes);
        return PS_EPROTO;
    }
    if (r->r_step >= recv_steps(r, op) || f->step != r->r_step || f->chunk != r->r_chunk ||
        f->len != exp.bytes) {
        snprintf(msg, msglen,
                 "sent a %u-byte frame for %s #%u step %u chunk %u; expected %zu bytes for step %u "
                 "chunk %zu",
                 f->len, ps__op_name(op->kind), (unsigned)op->seq, (unsigned)f->step,
                 (unsigned)f->chunk, exp.bytes, r->r_step, r->r_chunk);
        return PS_EPROTO;
    }
    rx->add = add;
    rx->sum_into = exp.p;
    rx->dst = add ? r->tmp : exp.p;
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
            if (!r->cur || r->r_step >= recv_steps(r, r->cur)) return PS_OK;
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
                if (!r->cur || (skip_recv(r), r->r_step >= recv_steps(r, r->cur))) {
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
        if (rx->add)
            sum_into((float *)(void *)rx->sum_into, (const float *)(void *)r->tmp, rx->f.len / 4);
        r->r_chunk++;
        skip_recv(r);
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
    skip_recv(r);
    if (r->rx_prev.left && r->r_step < recv_steps(r, r->cur)) {
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
    skip_recv(r);
    publish(r);
    r->rx_prev.last_ms = now_ms(); /* silence counts from the start of the operation */
}

static int op_done(ps_ring *r) {
    skip_recv(r);
    if (r->r_step < recv_steps(r, r->cur)) return 0;
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

static void *progress(void *arg) {
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
            tx_control(&r->tx_prev, PS_FRAME_KEEPALIVE, 0, NULL);
        if (!prev_quiet && tx_pump(r->prev_fd, &r->tx_prev, msg, sizeof msg) < 0) {
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
    tx_thread_stop(r);
    return NULL;
}

/* ---- the API ---- */

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
    if (!r->endpoints || !r->tmp) {
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
        PS_ERROR("ring rank %u/%u: %s", cfg->rank, cfg->size, why);
        set_err(err, errlen, "ring rank %u/%u: %s", cfg->rank, cfg->size, why);
        ring_free(r);
        return rc;
    }
    r->next_fd = links.next_fd;
    r->prev_fd = links.prev_fd;
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->tx_stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->wake_fd < 0 || r->tx_stop_fd < 0 ||
        pthread_create(&r->tx_thread, NULL, tx_main, r) != 0) {
        set_err(err, errlen, "ring rank %u/%u: cannot start the send thread", r->rank, r->size);
        ring_free(r);
        return PS_ENOMEM;
    }
    r->have_tx = 1;
    if (pthread_create(&r->thread, NULL, progress, r) != 0) {
        tx_thread_stop(r);
        set_err(err, errlen, "ring rank %u/%u: cannot start the progress thread", r->rank, r->size);
        ring_free(r);
        return PS_ENOMEM;
    }
    r->have_thread = 1;
    *out = r;
    return PS_OK;
}

static void wake(ps_ring *r) {
    uint64_t one = 1;
    if (r->wake_fd >= 0 && write(r->wake_fd, &one, sizeof one) < 0) { /* counter full: awake */
    }
}

/* Queues an operation; PS_OK, the sticky error, or PS_ENOMEM. */
static int enqueue(ps_ring *r, int kind, void *data, size_t bytes, size_t unit, unsigned root) {
    ring_op *op = calloc(1, sizeof *op);
    if (!op) return PS_ENOMEM;
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
    wake(r);
    return PS_OK;
}

int ps_ring_allreduce_start(ps_ring *r, float *data, size_t n) {
    if (!r || (!data && n > 0) || n > SIZE_MAX / 4) return PS_EINVAL;
    if (r->size == 1) {
        pthread_mutex_lock(&r->mu);
        int e = r->err;
        pthread_mutex_unlock(&r->mu);
        return e;
    }
    return enqueue(r, PS_OP_ALLREDUCE, data, n * 4, 4, 0);
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
    int rc = enqueue(r, PS_OP_BROADCAST, data, len, len, root);
    if (rc == PS_ENOMEM) return rc;
    return ps_ring_wait(r, err, errlen);
}

int ps_ring_allgather(ps_ring *r, const void *mine, size_t len, void *all, char *err,
                      size_t errlen) {
    if (!r || ((!mine || !all) && len > 0) || (r->size > 0 && len > SIZE_MAX / r->size)) {
        set_err(err, errlen, "bad allgather arguments");
        return PS_EINVAL;
    }
    unsigned char *dst = (unsigned char *)all + (size_t)r->rank * len;
    if (len > 0 && dst != mine) memmove(dst, mine, len);
    if (r->size == 1) return ps_ring_wait(r, err, errlen);
    int rc = enqueue(r, PS_OP_ALLGATHER, all, len * r->size, len, 0);
    if (rc == PS_ENOMEM) return rc;
    return ps_ring_wait(r, err, errlen);
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
        wake(r);
        pthread_join(r->thread, NULL);
        r->have_thread = 0;
    }
    ring_free(r);
}
