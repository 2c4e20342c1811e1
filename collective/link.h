/* Internal to collective/: the frames on a ring link and the forming of the
 * ring (listen, connect with backoff, accept, handshake). The tests use the
 * frame layout to play a bad peer. */
#ifndef PS_RING_LINK_H
#define PS_RING_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "ring.h"

/* Every frame starts with this 32-byte header, little-endian:
 *   u32 magic | u8 type | u8 op | u16 step | u32 seq | u32 chunk | u32 len |
 *   u32 reserved (0) | u64 total
 * then len payload bytes. DATA frames carry a piece of an operation: op kind,
 * its sequence number (the n-th operation of the ring, from 0), the step of
 * the algorithm, the chunk within the step, and the operation's total bytes
 * (so ranks that disagree on a size fail on the first frame). */
#define PS_RING_MAGIC 0x47525350u /* "PSRG" */
#define PS_RING_VERSION 1u
#define PS_RING_HDR 32
#define PS_RING_CTRL_MAX 1024 /* longest payload of a control frame */

enum {
    PS_FRAME_DATA = 1,
    PS_FRAME_KEEPALIVE = 2, /* no payload: "still here" */
    PS_FRAME_ABORT = 3,     /* i32 ps_err code, then the reason text */
    PS_FRAME_HELLO = 4,     /* u32 version, size, from rank, to rank; then the job id */
    PS_FRAME_HELLO_ACK = 5, /* the same, from the accepting rank */
    PS_FRAME_BYE = 6,       /* no payload: the sender closes the ring */
};

enum {
    PS_OP_NONE = 0,
    PS_OP_ALLREDUCE = 1,
    PS_OP_BROADCAST = 2,
    PS_OP_ALLGATHER = 3,
    PS_OP_ALLREDUCE_F16 = 4,  /* all-reduce whose pieces travel as binary16 */
    PS_OP_ALLREDUCE_BF16 = 5, /* ... as bfloat16 */
    PS_OP_ALLGATHERV = 6,     /* allgather of blocks of different sizes (rank order) */
};

typedef struct {
    uint8_t type;
    uint8_t op;
    uint16_t step;
    uint32_t seq;
    uint32_t chunk;
    uint32_t len;
    uint64_t total;
} ps__frame;

void ps__frame_encode(const ps__frame *f, unsigned char out[PS_RING_HDR]);
/* Returns PS_OK, or PS_EPROTO (bad magic, unknown type, reserved bits set;
 * the reason in err). */
int ps__frame_decode(const unsigned char in[PS_RING_HDR], ps__frame *f, char *err, size_t errlen);
/* Short name of an op kind ("all-reduce", ...) or frame type, for messages. */
const char *ps__op_name(int op);

/* Builds a HELLO or HELLO_ACK frame (header + payload) into buf; returns its
 * length, or 0 when buf is too small. */
size_t ps__hello_build(unsigned char *buf, size_t buflen, int type, unsigned size, unsigned from,
                       unsigned to, const char *job_id);

/* The two connections of a formed ring: to the next rank (our sends) and from
 * the previous one (our receives). Both nonblocking; -1 for a ring of one. */
typedef struct {
    int next_fd;
    int prev_fd;
} ps__links;

/* Forms the ring as ps_ring_open documents (cfg already checked); on error
 * nothing is left open. */
int ps__links_form(const ps_ring_config *cfg, ps__links *out, char *err, size_t errlen);

/* Sets the socket options of a ring link (no delay, big buffers). */
void ps__link_tune(int fd, int is_tcp);

/* "host:port" of rank i, as in the config: for messages. */
#define PS_RING_NAME_MAX 300

#endif
