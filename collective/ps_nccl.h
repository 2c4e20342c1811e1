/* NCCL all-reduce for CUDA workers (--communication nccl): a communicator
 * over the ranks of a ring, its unique id handed out by rank 0 (the chief)
 * with ps_ring_broadcast.
 *
 * Built and linked when the CUDA backend is on (PS_HAVE_NCCL); the build
 * machines have no GPU, tests/gpu_checks.sh runs it where there is one. */
#ifndef PS_NCCL_H
#define PS_NCCL_H

#include <stddef.h>

#include "ring.h"

typedef struct ps_nccl ps_nccl;

/* NCCL needs one GPU per rank: two ranks on one device fail at
 * ncclCommInitRank. Every rank of r sends the UUID of its CUDA device
 * `device` to all (ps_ring_allgather); *a < *b are then the first two ranks
 * on one GPU, or *a == *b == 0 when every rank has its own. Every rank of r
 * must call it. PS_OK, PS_EIO (CUDA failed, or no NCCL in this build) or r's
 * error; the reason in err. */
int ps_nccl_shared_gpu(ps_ring *r, int device, unsigned *a, unsigned *b, char *err,
                       size_t errlen);

/* The pure part of ps_nccl_shared_gpu: ids holds n ids of len bytes each. */
void ps_nccl_first_duplicate(const unsigned char *ids, unsigned n, size_t len, unsigned *a,
                             unsigned *b);

/* Creates the communicator of r's ranks on CUDA device `device`: rank 0 calls
 * ncclGetUniqueId and broadcasts it over r, every rank calls ncclCommInitRank.
 * Every rank of r must call it. Returns PS_OK with *out set (free with
 * ps_nccl_close), PS_EIO (CUDA or NCCL failed, or no NCCL in this build), or
 * r's error; the reason in err. */
int ps_nccl_open(ps_ring *r, int device, ps_nccl **out, char *err, size_t errlen);

/* Sums dev_buf[0..n) (device memory) across the ranks in place
 * (ncclAllReduce, ncclSum, float), then waits for the communicator's stream.
 * Returns PS_OK or PS_EIO with the NCCL/CUDA reason in err. */
int ps_nccl_allreduce(ps_nccl *c, float *dev_buf, size_t n, char *err, size_t errlen);

/* Device memory for n floats on c's device, zeroed (bench/allreduce --nccl);
 * PS_OK with *dev set, or PS_EIO/PS_ENOMEM. ps_nccl_free_floats frees it. */
int ps_nccl_alloc_floats(ps_nccl *c, size_t n, float **dev, char *err, size_t errlen);
void ps_nccl_free_floats(float *dev);

/* Destroys the communicator and its stream. NULL is safe. */
void ps_nccl_close(ps_nccl *c);

#endif
