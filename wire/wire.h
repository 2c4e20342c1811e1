/* Wire framing: a message is [protobuf-c Header][raw tensor frame]...; this
 * file receives, decodes, validates and sends such messages over ZeroMQ.
 * Payload frames never pass through protobuf: they are sent from the caller's
 * memory (zmq_msg_init_data) and read in place. */
#ifndef PS_WIRE_H
#define PS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "job_id.h"
#include "var_limits.h"
#include "ps.pb-c.h"

#define PS_PROTOCOL_VERSION 1u
#define PS_WIRE_MAX_FRAMES 1024u      /* payload frames per message */
#define PS_WIRE_MAX_HEADER (4u << 20) /* bytes in the header frame */

/* All frames of one received message. For a ROUTER socket frame 0 is the peer
 * identity. `truncated` is set when the message had more frames than fit
 * (the rest were read and dropped). */
typedef struct {
    zmq_msg_t *frames; /* owned; each closed by ps_frames_close */
    size_t n, cap;
    bool truncated;
    size_t bytes; /* total payload bytes received */
} ps_frames;

/* Receives every part of one message (flags: 0 or ZMQ_DONTWAIT). Returns PS_OK,
 * PS_ETIMEDOUT when ZMQ_DONTWAIT found nothing (EAGAIN), PS_EIO otherwise.
 * On PS_OK the caller owns f and must call ps_frames_close. */
int ps_frames_recv(void *sock, int flags, ps_frames *f);
void ps_frames_close(ps_frames *f);

/* Decodes a header frame and checks that every string field in it is valid UTF-8
 * without NUL (ps_proto_check_strings), the protocol version and that a body is set.
 * This is the one decode of both sides (psd's requests, the clients' replies).
 * On PS_OK *out is owned by the caller (ps__header__free_unpacked(*out, NULL)).
 * Errors: PS_EPROTO (not a header, a bad string field, no body, too big),
 * PS_EVERSION. Whenever the bytes unpacked, *out is set even on error (the caller
 * frees it) so that the caller can echo request_id. */
int ps_header_decode(const void *data, size_t len, Ps__Header **out, char *err, size_t errlen);

/* Checks tensor metadata against the payload frames that carry them: the
 * counts match, dtype is F32, rank 1..8, each dim > 0, product(shape)*4 without
 * overflow == nbytes == frame length, name non-empty and short. Returns PS_OK,
 * PS_EPROTO (count/length mismatch) or PS_ESHAPE (dtype/shape), reason in err. */
int ps_tensors_check(Ps__TensorMeta *const *metas, size_t n_metas, const zmq_msg_t *frames,
                     size_t n_frames, char *err, size_t errlen);

/* ps_tensors_check for a push's gradients: dtype F32, F16, BF16 (nbytes = numel * 2)
 * or TOPK_F32 (1 <= nnz <= numel < 2^32, nbytes = nnz * 8); nnz is 0 for dense ones.
 * The top-k indices are checked by ps_grad_decode. */
int ps_grads_check(Ps__TensorMeta *const *metas, size_t n_metas, const zmq_msg_t *frames,
                   size_t n_frames, char *err, size_t errlen);

/* Decodes a gradient checked by ps_grads_check into out (numel floats): F32 copied,
 * F16/BF16 widened, TOPK_F32 scattered into zeros after checking every index is < numel
 * and strictly increasing. PS_OK, or PS_EPROTO (a bad index, reason in err). */
int ps_grad_decode(const Ps__TensorMeta *m, const zmq_msg_t *frame, float *out, char *err,
                   size_t errlen);

/* Number of elements of a checked tensor. */
size_t ps_tensor_numel(const Ps__TensorMeta *m);

/* A payload to send: `len` bytes at `data`. With free_fn NULL the memory is
 * borrowed: it must stay unchanged until ZeroMQ has sent it (the callers
 * guarantee this by protocol, see docs/ARCHITECTURE.md). With free_fn set,
 * ZeroMQ calls free_fn(data, hint) when done (possibly from its I/O thread). */
typedef struct {
    const void *data;
    size_t len;
    zmq_free_fn *free_fn;
    void *hint;
} ps_payload;

/* Sends [identity?][header][payloads...]. identity may be NULL (DEALER side).
 * flags: 0 or ZMQ_DONTWAIT. Returns PS_OK or PS_EIO/PS_ENOMEM. Payloads with
 * free_fn are released even on failure. */
int ps_wire_send(void *sock, const void *identity, size_t identity_len, const Ps__Header *hdr,
                 const ps_payload *payloads, size_t n_payloads, int flags);

/* Fills a TensorMeta for a float32 tensor. `shape` is copied into `shape_buf`
 * (which must outlive the meta); name is borrowed. */
void ps_tensor_meta_f32(Ps__TensorMeta *m, const char *name, const size_t *shape, size_t rank,
                        uint64_t *shape_buf);

/* Returns float pointer to a frame's payload: the frame itself when 4-byte aligned,
 * else a copy in *scratch (grown with realloc; caller frees). NULL on ENOMEM. */
const float *ps_frame_floats(const zmq_msg_t *frame, float **scratch, size_t *scratch_cap);

#endif
