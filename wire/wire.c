/* Receiving, decoding, validating and sending framed messages (see wire.h). */
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "proto_strings.h"
#include "ps_error.h"

int ps_frames_recv(void *sock, int flags, ps_frames *f) {
    memset(f, 0, sizeof *f);
    for (;;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, flags) < 0) {
            int e = errno;
            zmq_msg_close(&part);
            if (f->n == 0 && e == EAGAIN) return PS_ETIMEDOUT;
            if (e == EINTR && f->n > 0) continue;
            ps_frames_close(f);
            return e == EAGAIN ? PS_ETIMEDOUT : PS_EIO;
        }
        flags &= ~ZMQ_DONTWAIT; /* the rest of a multipart message is already here */
        int more = zmq_msg_more(&part);
        f->bytes += zmq_msg_size(&part);
        /* identity (router) + header + payloads */
        if (f->n >= PS_WIRE_MAX_FRAMES + 2) {
            f->truncated = true;
            zmq_msg_close(&part);
        } else {
            if (f->n == f->cap) {
                size_t cap = f->cap ? f->cap * 2 : 8;
                zmq_msg_t *nf = realloc(f->frames, cap * sizeof *nf);
                if (!nf) {
                    zmq_msg_close(&part);
                    ps_frames_close(f);
                    return PS_ENOMEM;
                }
                f->frames = nf;
                f->cap = cap;
            }
            f->frames[f->n++] = part; /* zmq_msg_t is moved, not copied */
        }
        if (!more) return PS_OK;
    }
}

void ps_frames_close(ps_frames *f) {
    for (size_t i = 0; i < f->n; i++)
        zmq_msg_close(&f->frames[i]);
    free(f->frames);
    memset(f, 0, sizeof *f);
}

int ps_header_decode(const void *data, size_t len, Ps__Header **out, char *err, size_t errlen) {
    *out = NULL;
    if (len == 0 || len > PS_WIRE_MAX_HEADER) {
        snprintf(err, errlen, "header frame of %zu bytes (allowed 1..%u)", len, PS_WIRE_MAX_HEADER);
        return PS_EPROTO;
    }
    Ps__Header *h = ps__header__unpack(NULL, len, data);
    if (!h) {
        snprintf(err, errlen, "header frame is not a valid protobuf Header");
        return PS_EPROTO;
    }
    *out = h;
    /* before anything reads a name: protobuf-c keeps neither the length nor the encoding */
    int rc = ps_proto_check_strings(&ps__header__descriptor, data, len, err, errlen);
    if (rc != PS_OK) return rc;
    if (h->protocol_version != PS_PROTOCOL_VERSION) {
        snprintf(err, errlen, "protocol version %u not supported (this side speaks %u)",
                 h->protocol_version, PS_PROTOCOL_VERSION);
        return PS_EVERSION;
    }
    if (h->body_case == PS__HEADER__BODY__NOT_SET) {
        snprintf(err, errlen, "header has no body");
        return PS_EPROTO;
    }
    return PS_OK;
}

size_t ps_tensor_numel(const Ps__TensorMeta *m) {
    size_t n = 1;
    for (size_t i = 0; i < m->n_shape; i++)
        n *= (size_t)m->shape[i];
    return n;
}

/* Bytes per value of a dense dtype; 0 for top-k; -1 for one a tensor may not have. */
static int dtype_width(int dtype, int encoded_ok) {
    if (dtype == PS__DTYPE__DT_F32) return 4;
    if (!encoded_ok) return -1;
    if (dtype == PS__DTYPE__DT_F16 || dtype == PS__DTYPE__DT_BF16) return 2;
    if (dtype == PS__DTYPE__DT_TOPK_F32) return 0;
    return -1;
}

static int check_tensors(Ps__TensorMeta *const *metas, size_t n_metas, const zmq_msg_t *frames,
                         size_t n_frames, int encoded_ok, char *err, size_t errlen) {
    if (n_metas != n_frames) {
        snprintf(err, errlen, "header lists %zu tensors but %zu payload frames followed", n_metas,
                 n_frames);
        return PS_EPROTO;
    }
    for (size_t i = 0; i < n_metas; i++) {
        const Ps__TensorMeta *m = metas[i];
        size_t name_len = m->name ? strlen(m->name) : 0;
        if (name_len == 0 || name_len > PS_WIRE_MAX_NAME) {
            snprintf(err, errlen, "tensor %zu: name length %zu (allowed 1..%u)", i, name_len,
                     PS_WIRE_MAX_NAME);
            return PS_EPROTO;
        }
        int width = dtype_width((int)m->dtype, encoded_ok);
        if (width < 0) {
            snprintf(err, errlen, "tensor '%s': dtype %d not supported (%s)", m->name,
                     (int)m->dtype,
                     encoded_ok ? "float32, float16, bfloat16 or top-k" : "only float32");
            return PS_ESHAPE;
        }
        if (m->n_shape < 1 || m->n_shape > PS_WIRE_MAX_RANK) {
            snprintf(err, errlen, "tensor '%s': rank %zu (allowed 1..%u)", m->name, m->n_shape,
                     PS_WIRE_MAX_RANK);
            return PS_ESHAPE;
        }
        uint64_t bytes = sizeof(float), numel = 1;
        for (size_t d = 0; d < m->n_shape; d++) {
            uint64_t dim = m->shape[d];
            if (dim == 0 || bytes > UINT64_MAX / dim || bytes * dim > (uint64_t)SIZE_MAX / 2) {
                snprintf(err, errlen, "tensor '%s': dimension %zu is 0 or the size overflows",
                         m->name, d);
                return PS_ESHAPE;
            }
            bytes *= dim;
            numel *= dim;
        }
        if (width == 0) { /* top-k: nnz pairs of a dense tensor of numel values */
            if (m->nnz < 1 || m->nnz > numel || numel > UINT32_MAX) {
                snprintf(err, errlen, "tensor '%s': top-k of %llu entries out of %llu (allowed "
                         "1..numel, numel < 2^32)", m->name, (unsigned long long)m->nnz,
                         (unsigned long long)numel);
                return PS_EPROTO;
            }
            bytes = m->nnz * PS_TOPK_PAIR_BYTES; /* nnz <= numel: no overflow */
        } else {
            if (m->nnz != 0) {
                snprintf(err, errlen, "tensor '%s': nnz %llu on a dense tensor", m->name,
                         (unsigned long long)m->nnz);
                return PS_EPROTO;
            }
            bytes = numel * (uint64_t)width;
        }
        if (bytes != m->nbytes) {
            snprintf(err, errlen, "tensor '%s': shape gives %llu bytes but nbytes says %llu",
                     m->name, (unsigned long long)bytes, (unsigned long long)m->nbytes);
            return PS_EPROTO;
        }
        size_t flen = zmq_msg_size((zmq_msg_t *)&frames[i]);
        if (flen != bytes) {
            snprintf(err, errlen, "tensor '%s': frame has %zu bytes, header says %llu", m->name,
                     flen, (unsigned long long)bytes);
            return PS_EPROTO;
        }
    }
    return PS_OK;
}

int ps_tensors_check(Ps__TensorMeta *const *metas, size_t n_metas, const zmq_msg_t *frames,
                     size_t n_frames, char *err, size_t errlen) {
    return check_tensors(metas, n_metas, frames, n_frames, 0, err, errlen);
}

int ps_grads_check(Ps__TensorMeta *const *metas, size_t n_metas, const zmq_msg_t *frames,
                   size_t n_frames, char *err, size_t errlen) {
    return check_tensors(metas, n_metas, frames, n_frames, 1, err, errlen);
}

int ps_grad_decode(const Ps__TensorMeta *m, const zmq_msg_t *frame, float *out, char *err,
                   size_t errlen) {
    const void *p = zmq_msg_data((zmq_msg_t *)frame);
    size_t numel = ps_tensor_numel(m);
    switch (m->dtype) {
    case PS__DTYPE__DT_F32:
        memcpy(out, p, numel * sizeof(float));
        return PS_OK;
    case PS__DTYPE__DT_F16:
    case PS__DTYPE__DT_BF16: {
        ps_half_kind k = m->dtype == PS__DTYPE__DT_F16 ? PS_HALF_F16 : PS_HALF_BF16;
        ps_half_decode(k, p, numel, out, 0); /* the frame may be misaligned: any is fine */
        return PS_OK;
    }
    case PS__DTYPE__DT_TOPK_F32: {
        size_t bad = 0;
        if (ps_topk_check(p, (size_t)m->nnz, numel, &bad) != 0) {
            uint32_t idx;
            memcpy(&idx, (const unsigned char *)p + bad * PS_TOPK_PAIR_BYTES, 4);
            snprintf(err, errlen,
                     "tensor '%s': top-k pair %zu has index %u (indices must be < %zu and "
                     "strictly increasing)", m->name, bad, idx, numel);
            return PS_EPROTO;
        }
        ps_topk_decode(p, (size_t)m->nnz, out, numel, 0);
        return PS_OK;
    }
    default:
        snprintf(err, errlen, "tensor '%s': dtype %d not supported", m->name, (int)m->dtype);
        return PS_ESHAPE;
    }
}

static int send_part(void *sock, zmq_msg_t *msg, int flags) {
    while (zmq_msg_send(msg, sock, flags) < 0) {
        if (errno == EINTR) continue;
        zmq_msg_close(msg);
        return PS_EIO;
    }
    return PS_OK;
}

int ps_wire_send(void *sock, const void *identity, size_t identity_len, const Ps__Header *hdr,
                 const ps_payload *payloads, size_t n_payloads, int flags) {
    int rc = PS_OK;
    size_t i = 0;
    zmq_msg_t msg;
    if (identity) {
        if (zmq_msg_init_size(&msg, identity_len) != 0) goto nomem;
        memcpy(zmq_msg_data(&msg), identity, identity_len);
        if ((rc = send_part(sock, &msg, flags | ZMQ_SNDMORE)) != PS_OK) goto release;
    }
    size_t hlen = ps__header__get_packed_size(hdr);
    if (zmq_msg_init_size(&msg, hlen) != 0) goto nomem;
    ps__header__pack(hdr, zmq_msg_data(&msg));
    if ((rc = send_part(sock, &msg, flags | (n_payloads ? ZMQ_SNDMORE : 0))) != PS_OK) goto release;
    for (; i < n_payloads; i++) {
        const ps_payload *p = &payloads[i];
        /* zero-copy: the frame points at the caller's memory */
        if (zmq_msg_init_data(&msg, (void *)p->data, p->len, p->free_fn, p->hint) != 0) goto nomem;
        /* payload i now belongs to msg: send_part's close releases it on failure */
        int more = i + 1 < n_payloads ? ZMQ_SNDMORE : 0;
        if ((rc = send_part(sock, &msg, flags | more)) != PS_OK) {
            i++;
            goto release;
        }
    }
    return PS_OK;
nomem:
    rc = PS_ENOMEM;
release:
    for (; i < n_payloads; i++)
        if (payloads[i].free_fn) payloads[i].free_fn((void *)payloads[i].data, payloads[i].hint);
    return rc;
}

void ps_tensor_meta_f32(Ps__TensorMeta *m, const char *name, const size_t *shape, size_t rank,
                        uint64_t *shape_buf) {
    ps__tensor_meta__init(m);
    m->name = (char *)name;
    m->dtype = PS__DTYPE__DT_F32;
    uint64_t bytes = sizeof(float);
    for (size_t i = 0; i < rank; i++) {
        shape_buf[i] = shape[i];
        bytes *= shape[i];
    }
    m->shape = shape_buf;
    m->n_shape = rank;
    m->nbytes = bytes;
}

const float *ps_frame_floats(const zmq_msg_t *frame, float **scratch, size_t *scratch_cap) {
    zmq_msg_t *f = (zmq_msg_t *)frame;
    const void *p = zmq_msg_data(f);
    size_t len = zmq_msg_size(f);
    if (((uintptr_t)p & (sizeof(float) - 1)) == 0) return p;
    if (*scratch_cap < len) {
        float *ns = realloc(*scratch, len);
        if (!ns) return NULL;
        *scratch = ns;
        *scratch_cap = len;
    }
    memcpy(*scratch, p, len); /* the one copy, only for a misaligned frame */
    return *scratch;
}
