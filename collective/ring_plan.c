/* Ring collectives: the pieces of an operation. All-reduce is reduce-scatter
 * then all-gather over size segments; an allgather(v) passes each rank's block
 * on size - 1 times; each step's segment goes in chunks of
 * at most r->chunk bytes, tracked as a (step, chunk) cursor. */
#include "ring_impl.h"

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

/* Rank b's block of an allgatherv (possibly empty). */
static span agv_block(const ring_op *op, unsigned b) {
    return (span){op->data + op->offs[b], op->offs[b + 1] - op->offs[b]};
}

unsigned ps__ring_send_steps(const ps_ring *r, const ring_op *op) {
    if (ps__is_allreduce(op->kind)) return 2 * (r->size - 1);
    if (op->kind == PS_OP_ALLGATHER || op->kind == PS_OP_ALLGATHERV) return r->size - 1;
    return next_rank(r) == op->root ? 0 : 1; /* the last rank of a broadcast forwards nothing */
}
unsigned ps__ring_recv_steps(const ps_ring *r, const ring_op *op) {
    if (op->kind == PS_OP_BROADCAST) return r->rank == op->root ? 0 : 1;
    return ps__ring_send_steps(r, op);
}

/* Send step t: the segment that went through recv step t-1 (all-reduce,
 * allgather) or recv step t (broadcast), so a piece may go once it came in. */
span ps__ring_send_span(const ps_ring *r, const ring_op *op, unsigned t) {
    long me = (long)r->rank, n1 = (long)r->size - 1;
    if (ps__is_allreduce(op->kind))
        return ar_segment(r, op, (long)t < n1 ? mod(r, me - t) : mod(r, me + 1 - (t - n1)));
    if (op->kind == PS_OP_ALLGATHER) return (span){op->data + mod(r, me - t) * op->unit, op->unit};
    if (op->kind == PS_OP_ALLGATHERV) return agv_block(op, mod(r, me - t));
    return (span){op->data, op->bytes};
}
span ps__ring_recv_span(const ps_ring *r, const ring_op *op, unsigned t, int *add) {
    long me = (long)r->rank, n1 = (long)r->size - 1;
    *add = 0;
    if (ps__is_allreduce(op->kind)) {
        *add = (long)t < n1;
        return ar_segment(r, op, (long)t < n1 ? mod(r, me - t - 1) : mod(r, me - (t - n1)));
    }
    if (op->kind == PS_OP_ALLGATHER)
        return (span){op->data + mod(r, me - t - 1) * op->unit, op->unit};
    if (op->kind == PS_OP_ALLGATHERV) return agv_block(op, mod(r, me - t - 1));
    return (span){op->data, op->bytes};
}
static size_t nchunks(const ps_ring *r, size_t bytes) {
    return (bytes + r->chunk - 1) / r->chunk;
}
span ps__ring_piece(const ps_ring *r, span s, size_t j) {
    size_t off = j * r->chunk, len = s.bytes - off < r->chunk ? s.bytes - off : r->chunk;
    return (span){s.p + off, len};
}

/* Moves (step, chunk) past finished and empty steps. */
void ps__ring_skip_send(ps_ring *r, const ring_op *op) {
    unsigned n = ps__ring_send_steps(r, op);
    while (r->s_step < n && r->s_chunk >= nchunks(r, ps__ring_send_span(r, op, r->s_step).bytes)) {
        r->s_step++;
        r->s_chunk = 0;
    }
}
void ps__ring_skip_recv(ps_ring *r) {
    unsigned n = ps__ring_recv_steps(r, r->cur);
    int add;
    while (r->r_step < n &&
           r->r_chunk >= nchunks(r, ps__ring_recv_span(r, r->cur, r->r_step, &add).bytes)) {
        r->r_step++;
        r->r_chunk = 0;
    }
}

/* 1 when send piece (s_step, s_chunk) of op has its data: received (and
 * summed) by the published receive progress. Under mu. */
int ps__ring_send_ready(const ps_ring *r, const ring_op *op) {
    if (ps__ring_recv_steps(r, op) == 0) return 1;
    unsigned lag = op->kind == PS_OP_BROADCAST ? 0 : 1;
    if (r->s_step < lag) return 1;
    unsigned need = r->s_step - lag;
    return r->pub_r_step > need || (r->pub_r_step == need && r->pub_r_chunk > r->s_chunk);
}
