/* Batch prefetching: a background thread copies batch t+1 out of the batcher
 * while the caller computes on batch t (double buffering). The batches are
 * exactly those ps_batcher_next gives, in the same order, so training is
 * bit-identical with or without it. One consumer thread only. */
#ifndef PS_PREFETCH_H
#define PS_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

typedef struct ps_prefetch ps_prefetch;

/* Opens a prefetcher over b (borrowed: b must outlive the prefetcher, and only it
 * may use b until ps_prefetch_close). It reads ahead from b's current
 * position. threaded 0 copies each batch in ps_prefetch_next on the caller's
 * thread instead (no thread, one buffer: the baseline). Returns PS_OK,
 * PS_EINVAL (NULL or an uninitialised batcher) or PS_ENOMEM (buffers, or the
 * thread could not be started); *out is NULL on error. */
int ps_prefetch_open(ps_prefetch **out, ps_batcher *b, int threaded);

/* Stops reading ahead, starts epoch `epoch` (ps_batcher_start_epoch) and
 * drops its first `skip` batches, as `skip` calls of ps_batcher_next would;
 * then reads ahead again. Invalidates the buffer last handed out.
 * pf must come from a successful ps_prefetch_open (nothing here can fail). */
void ps_prefetch_start_epoch(ps_prefetch *pf, unsigned epoch, size_t skip);

/* Hands out the next batch and returns its size, as ps_batcher_next would (0
 * at the end of the epoch, and again on every further call). *x (batch * dim
 * floats) and *y (batch labels) point into a buffer the prefetcher owns,
 * valid until the next call of ps_prefetch_next, ps_prefetch_start_epoch or
 * ps_prefetch_close. Blocks until the thread has copied it (not at all when it
 * is ahead). */
size_t ps_prefetch_next(ps_prefetch *pf, float **x, int32_t **y);

/* Stops and joins the thread (a batch being copied is finished first, so this
 * is quick even mid-epoch) and frees the buffers; the batcher is the caller's
 * again. NULL is a no-op. */
void ps_prefetch_close(ps_prefetch *pf);

#endif
