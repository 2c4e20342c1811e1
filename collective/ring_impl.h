/* Internal to collective/ring*.c: the state of a ring, shared by the API and
 * lifecycle (ring.c), the planning of an operation's pieces (ring_plan.c),
 * the send thread (ring_send.c) and the progress thread (ring_progress.c). */
#ifndef PS_RING_IMPL_H
#define PS_RING_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "half.h"
#include "link.h"
#include "ring.h"

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
    size_t offs[];       /* allgatherv: size + 1 block offsets into data (else none) */
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
    int enc; /* DATA of an encoded all-reduce: the payload (in tmp) is decoded */
    int last_add; /* the last reduce-scatter step: the sum is final here (rounded) */
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
    uint64_t bytes_sent; /* under mu: DATA frames' bytes (header + payload) sent to next */
    unsigned char *tx_enc; /* send thread: an encoded piece (chunk / 2 bytes) */
    const float *enc_src;  /* send thread: the piece to encode into tx_enc before sending */
    size_t enc_n;
    int enc_kind;
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

/* An all-reduce, in float32 or encoded on the wire (2 bytes a value). */
static inline int ps__is_allreduce(int kind) {
    return kind == PS_OP_ALLREDUCE || kind == PS_OP_ALLREDUCE_F16 || kind == PS_OP_ALLREDUCE_BF16;
}
static inline int ps__is_encoded(int kind) {
    return kind == PS_OP_ALLREDUCE_F16 || kind == PS_OP_ALLREDUCE_BF16;
}

static inline long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline unsigned next_rank(const ps_ring *r) {
    return (r->rank + 1) % r->size;
}
static inline unsigned prev_rank(const ps_ring *r) {
    return (r->rank + r->size - 1) % r->size;
}

/* ---- ring_plan.c: the pieces of an operation ---- */

typedef struct {
    unsigned char *p;
    size_t bytes;
} span;

/* Steps of op this rank sends to next / receives from prev. */
unsigned ps__ring_send_steps(const ps_ring *r, const ring_op *op);
unsigned ps__ring_recv_steps(const ps_ring *r, const ring_op *op);
/* The bytes of send / receive step t (add: the received piece is summed). */
span ps__ring_send_span(const ps_ring *r, const ring_op *op, unsigned t);
span ps__ring_recv_span(const ps_ring *r, const ring_op *op, unsigned t, int *add);
/* Chunk j of s. */
span ps__ring_piece(const ps_ring *r, span s, size_t j);
/* Move (s_step, s_chunk) / (r_step, r_chunk) past finished and empty steps. */
void ps__ring_skip_send(ps_ring *r, const ring_op *op);
void ps__ring_skip_recv(ps_ring *r);
/* 1 when send piece (s_step, s_chunk) of op has its data. Under mu. */
int ps__ring_send_ready(const ps_ring *r, const ring_op *op);

/* ---- ring_send.c: writing frames, and the send thread ---- */

void ps__ring_tx_flush_blocking(int fd, tx_state *tx, long long deadline);
void ps__ring_tx_control(tx_state *tx, int type, int code, const char *text);
int ps__ring_tx_pump(int fd, tx_state *tx, char *msg, size_t msglen);
void *ps__ring_tx_main(void *arg);
void ps__ring_tx_thread_stop(ps_ring *r);

/* ---- ring_progress.c: the progress thread ---- */

void *ps__ring_progress(void *arg);

/* ---- ring.c ---- */

/* Wakes the progress thread. */
void ps__ring_wake(ps_ring *r);

#endif
