/* NCCL communicator over a ring's ranks (see ps_nccl.h). Without NCCL
 * (PS_HAVE_NCCL unset) every call says so. */
#include "ps_nccl.h"

#include "log.h"
#include "ps_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen, const char *fmt,
                                                          ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void ps_nccl_first_duplicate(const unsigned char *ids, unsigned n, size_t len, unsigned *a,
                             unsigned *b) {
    *a = *b = 0;
    for (unsigned j = 1; j < n; j++)
        for (unsigned i = 0; i < j; i++)
            if (memcmp(ids + (size_t)i * len, ids + (size_t)j * len, len) == 0) {
                *a = i;
                *b = j;
                return;
            }
}

#ifdef PS_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

struct ps_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
};

int ps_nccl_open(ps_ring *r, int device, ps_nccl **out, char *err, size_t errlen) {
    *out = NULL;
    cudaError_t ce = cudaSetDevice(device);
    if (ce != cudaSuccess) {
        set_err(err, errlen, "cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
        return PS_EIO;
    }
    ncclUniqueId id;
    if (ps_ring_rank(r) == 0) {
        ncclResult_t nr = ncclGetUniqueId(&id);
        if (nr != ncclSuccess) {
            set_err(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(nr));
            return PS_EIO;
        }
    }
    /* every rank takes part in the broadcast, rank 0 included */
    int rc = ps_ring_broadcast(r, 0, &id, sizeof id, err, errlen);
    if (rc != PS_OK) return rc;
    ps_nccl *c = calloc(1, sizeof *c);
    if (!c) return PS_ENOMEM;
    c->device = device;
    ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        set_err(err, errlen, "cudaStreamCreate: %s", cudaGetErrorString(ce));
        free(c);
        return PS_EIO;
    }
    ncclResult_t nr = ncclCommInitRank(&c->comm, (int)ps_ring_size(r), id, (int)ps_ring_rank(r));
    if (nr != ncclSuccess) {
        set_err(err, errlen, "ncclCommInitRank (rank %u of %u): %s", ps_ring_rank(r),
                ps_ring_size(r), ncclGetErrorString(nr));
        cudaStreamDestroy(c->stream);
        free(c);
        return PS_EIO;
    }
    PS_INFO("nccl rank %u/%u: communicator ready on device %d", ps_ring_rank(r), ps_ring_size(r),
            device);
    *out = c;
    return PS_OK;
}

int ps_nccl_shared_gpu(ps_ring *r, int device, unsigned *a, unsigned *b, char *err,
                       size_t errlen) {
    *a = *b = 0;
    struct cudaDeviceProp prop;
    cudaError_t ce = cudaGetDeviceProperties(&prop, device);
    if (ce != cudaSuccess) {
        set_err(err, errlen, "cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(ce));
        return PS_EIO;
    }
    unsigned n = ps_ring_size(r);
    size_t len = sizeof prop.uuid;
    unsigned char *all = malloc((size_t)n * len);
    if (!all) return PS_ENOMEM;
    int rc = ps_ring_allgather(r, &prop.uuid, len, all, err, errlen);
    if (rc == PS_OK) ps_nccl_first_duplicate(all, n, len, a, b);
    free(all);
    return rc;
}

int ps_nccl_allreduce(ps_nccl *c, float *dev_buf, size_t n, char *err, size_t errlen) {
    if (!c || (!dev_buf && n > 0)) return PS_EINVAL;
    if (n == 0) return PS_OK;
    ncclResult_t nr = ncclAllReduce(dev_buf, dev_buf, n, ncclFloat, ncclSum, c->comm, c->stream);
    if (nr != ncclSuccess) {
        set_err(err, errlen, "ncclAllReduce of %zu floats: %s", n, ncclGetErrorString(nr));
        return PS_EIO;
    }
    cudaError_t ce = cudaStreamSynchronize(c->stream);
    if (ce != cudaSuccess) {
        set_err(err, errlen, "ncclAllReduce of %zu floats: %s", n, cudaGetErrorString(ce));
        return PS_EIO;
    }
    return PS_OK;
}

int ps_nccl_alloc_floats(ps_nccl *c, size_t n, float **dev, char *err, size_t errlen) {
    *dev = NULL;
    if (!c) return PS_EINVAL;
    cudaError_t ce = cudaSetDevice(c->device);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)dev, (n ? n : 1) * sizeof(float));
    if (ce == cudaSuccess) ce = cudaMemset(*dev, 0, (n ? n : 1) * sizeof(float));
    if (ce != cudaSuccess) {
        set_err(err, errlen, "cudaMalloc of %zu floats: %s", n, cudaGetErrorString(ce));
        if (*dev) cudaFree(*dev);
        *dev = NULL;
        return ce == cudaErrorMemoryAllocation ? PS_ENOMEM : PS_EIO;
    }
    return PS_OK;
}

void ps_nccl_free_floats(float *dev) {
    if (dev) cudaFree(dev);
}

void ps_nccl_close(ps_nccl *c) {
    if (!c) return;
    ncclCommDestroy(c->comm);
    cudaStreamDestroy(c->stream);
    free(c);
}

#else

int ps_nccl_shared_gpu(ps_ring *r, int device, unsigned *a, unsigned *b, char *err,
                       size_t errlen) {
    (void)r;
    (void)device;
    *a = *b = 0;
    set_err(err, errlen, "this build has no NCCL (built without the CUDA backend)");
    return PS_EIO;
}

int ps_nccl_open(ps_ring *r, int device, ps_nccl **out, char *err, size_t errlen) {
    (void)r;
    (void)device;
    *out = NULL;
    set_err(err, errlen, "this build has no NCCL (built without the CUDA backend)");
    return PS_EIO;
}

int ps_nccl_allreduce(ps_nccl *c, float *dev_buf, size_t n, char *err, size_t errlen) {
    (void)c;
    (void)dev_buf;
    (void)n;
    set_err(err, errlen, "this build has no NCCL (built without the CUDA backend)");
    return PS_EIO;
}

int ps_nccl_alloc_floats(ps_nccl *c, size_t n, float **dev, char *err, size_t errlen) {
    (void)c;
    (void)n;
    *dev = NULL;
    set_err(err, errlen, "this build has no NCCL (built without the CUDA backend)");
    return PS_EIO;
}

void ps_nccl_free_floats(float *dev) {
    (void)dev;
}

void ps_nccl_close(ps_nccl *c) {
    (void)c;
}

#endif
