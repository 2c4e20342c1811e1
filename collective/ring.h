/* Ring all-reduce between worker processes: the collective the all-reduce
 * strategies (mirrored, multi_worker_mirrored) combine gradients with.
 *
 * Rank r listens on endpoints[r] ("host:port") and keeps two connections: to
 * its next rank (r+1 mod size) and from its previous one. A link between two
 * ranks on the same host is a Unix socket (PS_RING_AUTO), otherwise TCP. An
 * all-reduce is a reduce-scatter then an all-gather over the ring, in chunks,
 * pipelined (sends and receives overlap).
 *
 * One progress thread per ring (and a send thread writing to the next rank,
 * so that sends overlap receives) owns both sockets and runs the operations in
 * the order they were started (every rank must start the same operations in
 * the same order, with the same sizes). While idle it sends keep-alives, so a
 * neighbour silent for timeout_ms is dead. The first failure (a dead or
 * silent neighbour, a malformed or wrong-size frame, a mismatched handshake)
 * breaks the ring for good: the thread sends an abort frame carrying the
 * reason (naming the rank and endpoint at fault) to both neighbours and
 * closes its sockets, so every rank fails soon, naming the same culprit, and
 * every later call returns that error. Nothing hangs.
 *
 * The library never prints except through common/log.h (connections, ring
 * complete, ranks; failures at info level, "ring rank R/N: broken: <reason>":
 * the reason comes back in err, and reporting it as an error is the
 * caller's job); it never exits.
 * Thread-safety: one thread calls a ring's functions (the progress thread is
 * internal). Different rings are independent. */
#ifndef PS_RING_H
#define PS_RING_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_ring ps_ring;

typedef enum {
    PS_RING_AUTO = 0, /* Unix socket to a neighbour on the same host, TCP otherwise */
    PS_RING_TCP,      /* TCP for every link */
    PS_RING_UNIX,     /* Unix sockets for every link (all ranks on this host) */
} ps_ring_transport;

typedef struct {
    unsigned rank;                 /* this process, 0 .. size-1 (rank 0: the chief) */
    unsigned size;                 /* ranks in the ring, >= 1 */
    const char *const *endpoints;  /* size entries "host:port": where each rank listens */
    const char *job_id;            /* ranks of another job are refused at the handshake */
    ps_ring_transport transport;
    unsigned connect_timeout_ms;   /* waiting for the ring to form (0: 60000) */
    unsigned timeout_ms;           /* a neighbour silent this long is dead (0: 10000) */
    size_t chunk_bytes;            /* pipeline chunk (0: the library's default) */
} ps_ring_config;

/* Listens on endpoints[rank], connects to the next rank (retrying with backoff
 * until connect_timeout_ms) and accepts the previous one; checks both
 * handshakes (job id, ring size, ranks). size 1 is a ring of one (every
 * operation is a copy or nothing). Returns PS_OK with *out set (free with
 * ps_ring_close), or PS_EINVAL (bad config/endpoint), PS_EADDRINUSE (own
 * endpoint taken), PS_EIO, PS_ETIMEDOUT (the ring did not form), PS_EPROTO
 * (handshake mismatch), PS_ENOMEM; the reason in err. */
int ps_ring_open(const ps_ring_config *cfg, ps_ring **out, char *err, size_t errlen);

/* Starts summing data[0..n) across all ranks, in place. data belongs to the
 * ring until ps_ring_wait returns. Returns PS_OK, or the ring's sticky error
 * (the reason is given by ps_ring_wait). */
int ps_ring_allreduce_start(ps_ring *r, float *data, size_t n);

/* How an all-reduce's pieces travel: float32, or rounded to nearest even as
 * binary16 / bfloat16 (2 bytes a value; received pieces are decoded and summed
 * in float, so a partial sum is re-rounded at every hop; the rank completing a
 * segment's sum rounds it too, so every rank ends with the same values). */
typedef enum { PS_RING_F32 = 0, PS_RING_F16, PS_RING_BF16 } ps_ring_enc;

/* ps_ring_allreduce_start with the pieces encoded as enc (every rank must
 * give the same; a rank that differs fails the ring). */
int ps_ring_allreduce_start_enc(ps_ring *r, float *data, size_t n, ps_ring_enc enc);

/* Starts ps_ring_allgather: mine is copied into all at once; all belongs to
 * the ring until ps_ring_wait returns. PS_OK, PS_EINVAL, PS_ENOMEM or the
 * ring's sticky error. */
int ps_ring_allgather_start(ps_ring *r, const void *mine, size_t len, void *all);

/* Bytes of data frames (headers included) this rank has sent to the next one. */
uint64_t ps_ring_bytes_sent(ps_ring *r);

/* Waits until every started operation is done. Returns PS_OK or the ring's
 * error with its reason in err. */
int ps_ring_wait(ps_ring *r, char *err, size_t errlen);

/* ps_ring_allreduce_start + ps_ring_wait. */
int ps_ring_allreduce(ps_ring *r, float *data, size_t n, char *err, size_t errlen);

/* Every rank gets root's bytes[0..len) (the same len on every rank). Blocking. */
int ps_ring_broadcast(ps_ring *r, unsigned root, void *data, size_t len, char *err,
                      size_t errlen);

/* all[i*len .. (i+1)*len) gets rank i's mine[0..len) on every rank. Blocking. */
int ps_ring_allgather(ps_ring *r, const void *mine, size_t len, void *all, char *err,
                      size_t errlen);

/* A variable-sized allgather: rank i gives mine[0..len) (len may differ from
 * rank to rank, 0 too). Every rank first learns every rank's length (an
 * allgather of u64s), then gets the blocks in rank order, each passed on over
 * the ring's links as any operation is (its faults and timeouts). On PS_OK,
 * lens[0..size) holds the lengths and *all (malloc'd, the caller frees it)
 * the blocks back to back. A rank announcing more than max_len bytes fails
 * the call on every rank, named (PS_EPROTO; the ring itself stays up).
 * PS_EINVAL (len > max_len, bad arguments), PS_ENOMEM, or the ring's error,
 * with the reason in err. Blocking; *all is NULL on failure. */
int ps_ring_allgatherv(ps_ring *r, const void *mine, size_t len, size_t max_len, void **all,
                       size_t *lens, char *err, size_t errlen);

unsigned ps_ring_rank(const ps_ring *r);
unsigned ps_ring_size(const ps_ring *r);

/* Stops the progress thread, closes the sockets, frees r. NULL is safe. A
 * rank that closes while others still run an operation makes them fail. */
void ps_ring_close(ps_ring *r);

#endif
