/* Batch prefetching on a thread (see prefetch.h). */
#include "prefetch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "ps_error.h"

struct ps_prefetch {
    ps_batcher *b; /* borrowed; touched only by the thread while it is busy */
    bool threaded;
    float *x[2]; /* owned; slot 1 only when threaded */
    int32_t *y[2];
    size_t nb[2];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Under mu. Batch k of the epoch goes to slot k % 2. The consumer holds
     * batch consumed - 1, so the thread may fill batch `produced` only while
     * produced <= consumed: that is always the other slot. */
    size_t produced, consumed;
    bool done;   /* the end of the epoch (size 0) is produced: nothing to read */
    bool paused; /* start_epoch has the batcher */
    bool busy;   /* the thread is copying out of the batcher without the lock */
    bool stop;
};

static void *run(void *arg) {
    ps_prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->stop && (pf->paused || pf->done || pf->produced > pf->consumed))
            pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->stop) break;
        size_t slot = pf->produced % 2;
        pf->busy = true;
        pthread_mutex_unlock(&pf->mu); /* copy while the consumer computes */
        size_t n = ps_batcher_next(pf->b, pf->x[slot], pf->y[slot]);
        pthread_mutex_lock(&pf->mu);
        pf->busy = false;
        pf->nb[slot] = n;
        pf->produced++;
        pf->done = n == 0;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

static void free_buffers(ps_prefetch *pf) {
    for (int i = 0; i < 2; i++) {
        free(pf->x[i]);
        free(pf->y[i]);
    }
    free(pf);
}

int ps_prefetch_open(ps_prefetch **out, ps_batcher *b, int threaded) {
    *out = NULL;
    if (!b || !b->data || !b->data->dim || !b->order || b->batch == 0) return PS_EINVAL;
    size_t dim = b->data->dim;
    if (b->batch > SIZE_MAX / sizeof(float) / dim) return PS_ENOMEM;
    ps_prefetch *pf = calloc(1, sizeof *pf);
    if (!pf) return PS_ENOMEM;
    pf->b = b;
    pf->threaded = threaded != 0;
    for (int i = 0; i < (pf->threaded ? 2 : 1); i++) {
        pf->x[i] = malloc(b->batch * dim * sizeof(float));
        pf->y[i] = malloc(b->batch * sizeof(int32_t));
        if (!pf->x[i] || !pf->y[i]) {
            free_buffers(pf);
            return PS_ENOMEM;
        }
    }
    if (pf->threaded) {
        if (pthread_mutex_init(&pf->mu, NULL) != 0) {
            free_buffers(pf);
            return PS_ENOMEM;
        }
        if (pthread_cond_init(&pf->cv, NULL) != 0) {
            pthread_mutex_destroy(&pf->mu);
            free_buffers(pf);
            return PS_ENOMEM;
        }
        if (pthread_create(&pf->thread, NULL, run, pf) != 0) { /* EAGAIN: out of resources */
            pthread_cond_destroy(&pf->cv);
            pthread_mutex_destroy(&pf->mu);
            free_buffers(pf);
            return PS_ENOMEM;
        }
    }
    *out = pf;
    return PS_OK;
}

void ps_prefetch_start_epoch(ps_prefetch *pf, unsigned epoch, size_t skip) {
    if (pf->threaded) { /* take the batcher from the thread: let it finish its copy */
        pthread_mutex_lock(&pf->mu);
        pf->paused = true;
        while (pf->busy)
            pthread_cond_wait(&pf->cv, &pf->mu);
        pthread_mutex_unlock(&pf->mu);
    }
    ps_batcher_start_epoch(pf->b, epoch);
    /* Skipping copies too, exactly as before: rare (a worker rejoining) and
     * it keeps the batcher's position logic in one place. */
    for (size_t s = 0; s < skip && ps_batcher_next(pf->b, pf->x[0], pf->y[0]) > 0; s++) {
    }
    if (pf->threaded) {
        pthread_mutex_lock(&pf->mu);
        pf->produced = pf->consumed = 0;
        pf->done = pf->paused = false;
        pthread_cond_broadcast(&pf->cv);
        pthread_mutex_unlock(&pf->mu);
    }
}

size_t ps_prefetch_next(ps_prefetch *pf, float **x, int32_t **y) {
    if (!pf->threaded) {
        *x = pf->x[0];
        *y = pf->y[0];
        return ps_batcher_next(pf->b, pf->x[0], pf->y[0]);
    }
    pthread_mutex_lock(&pf->mu);
    /* Past the end the thread produces nothing more: hand out size 0 again. */
    while (pf->produced <= pf->consumed && !pf->done)
        pthread_cond_wait(&pf->cv, &pf->mu);
    size_t n = 0, slot = 0;
    if (pf->produced > pf->consumed) {
        slot = pf->consumed % 2;
        n = pf->nb[slot];
        pf->consumed++; /* frees the slot handed out last time: the thread refills it */
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    *x = pf->x[slot];
    *y = pf->y[slot];
    return n;
}

void ps_prefetch_close(ps_prefetch *pf) {
    if (!pf) return;
    if (pf->threaded) {
        pthread_mutex_lock(&pf->mu);
        pf->stop = true;
        pthread_cond_broadcast(&pf->cv);
        pthread_mutex_unlock(&pf->mu);
        pthread_join(pf->thread, NULL);
        pthread_cond_destroy(&pf->cv);
        pthread_mutex_destroy(&pf->mu);
    }
    free_buffers(pf);
}
