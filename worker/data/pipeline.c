/* The input pipeline (pipeline.h): a ring of K batch slots. Sample k of the
 * epoch goes to slot (k / batch) % K, place k % batch; a thread claims the
 * next sample while its batch is within K of the one the consumer holds,
 * reads and prepares it outside the lock, and counts it in. The consumer takes
 * a batch when all of its samples are in. */
#include "pipeline.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"
#include "ps_error.h"

#define MAX_DEPTH 64

typedef struct {
    float *x;
    int32_t *y;
    float *t;      /* targets */
    uint64_t *ids; /* n_ids per sample (NULL: none) */
    uint8_t *ok; /* per sample: 0 when skipped */
    size_t filled;
} slot;

typedef struct {
    ps_pipeline *p;
    pthread_t tid;
    ps_sample sample;
    float *scratch;
    size_t scratch_cap;
} worker;

struct ps_pipeline {
    ps_pipeline_cfg cfg;
    size_t dim;
    size_t n_ids;
    ps_order order;
    size_t *seq; /* the epoch's records, order.epoch_n */
    unsigned epoch;
    size_t batches;
    size_t cap; /* records a slot holds: cfg.batch, or the spread batches' largest */
    slot *ring;
    size_t depth;
    bool over_budget;
    worker *workers; /* cfg.threads of them; or one, unstarted, for the caller's thread */
    size_t n_workers;
    pthread_mutex_t mu;
    pthread_cond_t work, ready;
    size_t claim;    /* next sample of the epoch to read */
    size_t cur;      /* next batch to hand out */
    size_t first;    /* the epoch's first batch (ps_pipeline_start_epoch's skip) */
    size_t limit;    /* samples below this may be read (batches cur .. cur + depth - 1) */
    size_t in_flight;
    uint64_t generation;
    bool held; /* the consumer holds batch cur - 1 (its slot is not to be refilled) */
    bool stop, started;
    int rc; /* the first error, with its message */
    char err[512];
    uint64_t skipped;
    char first_skipped[512];
};

/* The epoch's first record of batch b (b == batches: the end). Spread over
 * cfg.steps batches, batch b starts at floor(b * n / steps). */
static size_t batch_start(const ps_pipeline *p, size_t b) {
    size_t n = p->order.epoch_n;
    if (p->cfg.steps) return b >= p->batches ? n : (size_t)((uint64_t)b * n / p->batches);
    return b * p->cfg.batch < n ? b * p->cfg.batch : n;
}

/* The batch holding the epoch's record k: the last b with batch_start(b) <= k. */
static size_t batch_of(const ps_pipeline *p, size_t k) {
    if (p->cfg.steps)
        return (size_t)(((uint64_t)k + 1) * p->batches - 1) / p->order.epoch_n;
    return k / p->cfg.batch;
}

static size_t batch_len(const ps_pipeline *p, size_t b) {
    return batch_start(p, b + 1) - batch_start(p, b);
}

static bool shape_fits(const ps_pipeline *p, const ps_sample *s) {
    const ps_pipeline_cfg *c = &p->cfg;
    if (s->h * s->w * s->c != p->dim) return false;
    bool flat_in = s->h == 1 && s->w == 1, flat_out = c->out_h == 1 && c->out_w == 1;
    return flat_in || flat_out || (s->h == c->out_h && s->w == c->out_w && s->c == c->out_c);
}

/* Reads and prepares sample k of the epoch into its place; a worker's own
 * sample and scratch. Returns PS_OK or an error with err set. */
static int produce(ps_pipeline *p, worker *w, size_t k, unsigned epoch, const size_t *seq,
                   char *err, size_t errlen) {
    const ps_pipeline_cfg *c = &p->cfg;
    size_t rec = seq[k];
    size_t b = batch_of(p, k);
    slot *sl = &p->ring[b % p->depth];
    size_t at = k - batch_start(p, b);
    float *out = sl->x + at * p->dim;
    char why[400] = "";
    int rc = ps_source_read(c->src, rec, &w->sample, why, sizeof why);
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s", why);
        return rc;
    }
    int32_t label = w->sample.label;
    float target = w->sample.target;
    if (w->sample.n_ids != p->n_ids) {
        snprintf(err, errlen, "%s: record %zu has %zu ids, the source %zu", c->src->desc, rec,
                 w->sample.n_ids, p->n_ids);
        return PS_EINTERNAL;
    }
    if (c->src->float_target) {
        label = 0;
    } else if (c->label_map) {
        if (label < 0 || (size_t)label >= c->label_map_n) {
            snprintf(err, errlen, "%s: record %zu: label %d has no entry in the label map",
                     c->src->desc, rec, (int)label);
            return PS_EFORMAT;
        }
        label = c->label_map[label];
    }
    if (!c->src->float_target && c->num_classes > 0 && (label < 0 || label >= c->num_classes)) {
        snprintf(err, errlen, "%s: record %zu: label %d, but the model has %d classes",
                 c->src->desc, rec, (int)label, c->num_classes);
        return PS_EFORMAT;
    }
    if (c->prepare) {
        uint64_t seed = ps_order_seed(c->seed ^ (0x9E3779B97F4A7C15ull * (rec + 1)), epoch, 0);
        rc = c->prepare(c->prepare_ctx, &w->sample, out, &w->scratch, &w->scratch_cap, seed,
                        c->training, why, sizeof why);
        if (rc != PS_OK) {
            snprintf(err, errlen, "%s: record %zu: %s", c->src->desc, rec, why);
            return rc;
        }
    } else if (!shape_fits(p, &w->sample)) {
        snprintf(err, errlen,
                 "%s: record %zu is %zux%zux%zu, the model takes %zux%zux%zu (a \"resize\" in "
                 "the data spec's \"preprocess\" makes images fit)",
                 c->src->desc, rec, w->sample.h, w->sample.w, w->sample.c, c->out_h, c->out_w,
                 c->out_c);
        return PS_ESHAPE;
    } else {
        memcpy(out, w->sample.x, p->dim * sizeof *out);
    }
    sl->y[at] = label;
    sl->t[at] = c->src->float_target ? target : (float)label;
    if (p->n_ids) memcpy(sl->ids + at * p->n_ids, w->sample.ids, p->n_ids * sizeof *sl->ids);
    return PS_OK;
}

/* Whether an error of one record may be skipped (never running out of memory). */
static bool skippable(const ps_pipeline *p, int rc) {
    return p->cfg.skip_bad && rc != PS_ENOMEM && rc != PS_EINTERNAL;
}

/* Counts sample k in (under the lock). */
static void settle(ps_pipeline *p, size_t k, int rc, const char *err) {
    size_t b = batch_of(p, k);
    slot *sl = &p->ring[b % p->depth];
    sl->ok[k - batch_start(p, b)] = rc == PS_OK;
    if (rc != PS_OK && skippable(p, rc)) {
        if (p->skipped++ == 0) snprintf(p->first_skipped, sizeof p->first_skipped, "%s", err);
    } else if (rc != PS_OK && p->rc == PS_OK) {
        p->rc = rc;
        snprintf(p->err, sizeof p->err, "%s", err);
    }
    if (++sl->filled == batch_len(p, b) || rc != PS_OK)
        pthread_cond_broadcast(&p->ready);
}

static void *run(void *arg) {
    worker *w = arg;
    ps_pipeline *p = w->p;
    char err[512];
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (p->rc != PS_OK || p->claim >= p->limit) {
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        size_t k = p->claim++;
        uint64_t gen = p->generation;
        unsigned epoch = p->epoch;
        p->in_flight++;
        pthread_mutex_unlock(&p->mu);
        int rc = produce(p, w, k, epoch, p->seq, err, sizeof err);
        pthread_mutex_lock(&p->mu);
        p->in_flight--;
        if (gen == p->generation) settle(p, k, rc, err);
        if (p->in_flight == 0) pthread_cond_broadcast(&p->ready);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void set_limit(ps_pipeline *p) {
    p->limit = batch_start(p, p->cur + p->depth - (p->held ? 1 : 0));
}

int ps_pipeline_open(ps_pipeline **out, const ps_pipeline_cfg *cfg, char *err, size_t errlen) {
    *out = NULL;
    if (!cfg->src || cfg->batch == 0 ||
        (cfg->out_h * cfg->out_w * cfg->out_c == 0 && !cfg->src->n_ids)) {
        snprintf(err, errlen, "input pipeline: no source, batch or input shape");
        return PS_EINVAL;
    }
    if (cfg->src->float_target && cfg->label_map) {
        snprintf(err, errlen, "%s: float targets are not relabelled", cfg->src->desc);
        return PS_EINVAL;
    }
    ps_pipeline *p = calloc(1, sizeof *p);
    if (!p) return PS_ENOMEM;
    p->cfg = *cfg;
    p->dim = cfg->out_h * cfg->out_w * cfg->out_c;
    p->n_ids = cfg->src->n_ids;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->ready, NULL);
    size_t n = cfg->records ? cfg->n_records : cfg->src->n;
    int rc = ps_order_init(&p->order, cfg->records, n, cfg->src->file_start, cfg->src->n_files,
                           cfg->index, cfg->count, cfg->shuffle_buffer, cfg->seed);
    if (rc != PS_OK) {
        if (rc == PS_EINVAL)
            snprintf(err, errlen, "%s: %zu records cannot be shared among %u workers",
                     cfg->src->desc, n, cfg->count);
        ps_pipeline_close(p);
        return rc;
    }
    p->batches = (p->order.epoch_n + cfg->batch - 1) / cfg->batch;
    p->cap = cfg->batch;
    if (cfg->steps) {
        if (p->order.epoch_n < cfg->steps) {
            snprintf(err, errlen, "%s: %zu records per epoch cannot fill %zu steps",
                     cfg->src->desc, p->order.epoch_n, cfg->steps);
            ps_pipeline_close(p);
            return PS_EINVAL;
        }
        p->batches = cfg->steps;
        p->cap = (p->order.epoch_n + cfg->steps - 1) / cfg->steps;
    }
    size_t batch_bytes = p->cap * (p->dim * sizeof(float) + p->n_ids * sizeof(uint64_t) +
                                       sizeof(int32_t) + sizeof(float) + 1);
    size_t budget = cfg->memory_bytes ? cfg->memory_bytes : PS_PIPELINE_MEMORY_DEFAULT;
    p->depth = budget / batch_bytes;
    p->over_budget = p->depth < 2;
    if (p->depth < 2) p->depth = 2;
    if (p->depth > MAX_DEPTH) p->depth = MAX_DEPTH;
    if (p->depth > p->batches + 1) p->depth = p->batches + 1;
    if (cfg->threads == 0) p->depth = 1;
    p->seq = malloc(p->order.epoch_n * sizeof *p->seq);
    p->ring = calloc(p->depth, sizeof *p->ring);
    p->n_workers = cfg->threads ? cfg->threads : 1;
    p->workers = calloc(p->n_workers, sizeof *p->workers);
    rc = p->seq && p->ring && p->workers ? PS_OK : PS_ENOMEM;
    for (size_t i = 0; rc == PS_OK && i < p->depth; i++) {
        slot *s = &p->ring[i];
        s->x = malloc((p->dim ? p->cap * p->dim : 1) * sizeof *s->x);
        s->y = malloc(p->cap * sizeof *s->y);
        s->t = malloc(p->cap * sizeof *s->t);
        s->ids = p->n_ids ? malloc(p->cap * p->n_ids * sizeof *s->ids) : NULL;
        s->ok = malloc(p->cap);
        if (!s->x || !s->y || !s->t || (p->n_ids && !s->ids) || !s->ok) rc = PS_ENOMEM;
    }
    for (size_t i = 0; rc == PS_OK && i < p->n_workers; i++) p->workers[i].p = p;
    for (size_t i = 0; rc == PS_OK && i < cfg->threads; i++) {
        if (pthread_create(&p->workers[i].tid, NULL, run, &p->workers[i]) != 0) {
            rc = PS_ENOMEM;
            break;
        }
        p->started = true;
        p->n_workers = i + 1; /* joined at close */
    }
    if (rc != PS_OK) {
        if (rc == PS_ENOMEM) snprintf(err, errlen, "input pipeline: out of memory or threads");
        ps_pipeline_close(p);
        return rc;
    }
    *out = p;
    return PS_OK;
}

size_t ps_pipeline_epoch_records(const ps_pipeline *p) {
    return p->order.epoch_n;
}

size_t ps_pipeline_steps_per_epoch(const ps_pipeline *p) {
    return p->batches;
}

size_t ps_pipeline_depth(const ps_pipeline *p, bool *over_budget) {
    if (over_budget) *over_budget = p->over_budget;
    return p->depth;
}

bool ps_pipeline_by_file(const ps_pipeline *p) {
    return ps_order_by_file(&p->order);
}

uint64_t ps_pipeline_skipped(const ps_pipeline *p, char *first, size_t firstlen) {
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    uint64_t n = p->skipped;
    if (first && firstlen) snprintf(first, firstlen, "%s", p->first_skipped);
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return n;
}

int ps_pipeline_start_epoch(ps_pipeline *p, unsigned epoch, size_t skip) {
    pthread_mutex_lock(&p->mu);
    p->generation++;
    p->limit = p->claim = 0; /* nothing new is claimed meanwhile */
    while (p->in_flight > 0) pthread_cond_wait(&p->ready, &p->mu);
    int rc = ps_order_epoch(&p->order, epoch, p->seq);
    p->epoch = epoch;
    p->cur = p->first = skip < p->batches ? skip : p->batches;
    p->held = false;
    for (size_t i = 0; i < p->depth; i++) p->ring[i].filled = 0;
    p->rc = rc;
    if (rc != PS_OK) snprintf(p->err, sizeof p->err, "input pipeline: out of memory");
    p->claim = batch_start(p, p->cur);
    set_limit(p);
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

uint64_t ps_pipeline_epoch_digest(ps_pipeline *p, size_t *n) {
    pthread_mutex_lock(&p->mu);
    uint64_t sum = 0;
    size_t k0 = batch_start(p, p->first), k1 = p->order.epoch_n;
    for (size_t k = k0; k < k1; k++) {
        uint64_t st = p->seq[k];
        sum += ps_order_rand(&st);
    }
    *n = k1 - k0;
    pthread_mutex_unlock(&p->mu);
    return sum;
}

/* Drops the skipped samples of a batch, keeping the order of the rest. */
static size_t compact(ps_pipeline *p, slot *sl, size_t len) {
    size_t kept = 0;
    for (size_t i = 0; i < len; i++) {
        if (!sl->ok[i]) continue;
        if (kept != i) {
            memmove(sl->x + kept * p->dim, sl->x + i * p->dim, p->dim * sizeof *sl->x);
            sl->y[kept] = sl->y[i];
            sl->t[kept] = sl->t[i];
            if (p->n_ids)
                memmove(sl->ids + kept * p->n_ids, sl->ids + i * p->n_ids,
                        p->n_ids * sizeof *sl->ids);
        }
        kept++;
    }
    return kept;
}

int ps_pipeline_next_batch(ps_pipeline *p, ps_pipeline_batch *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->n_ids = p->n_ids;
    out->float_targets = p->cfg.src->float_target;
    pthread_mutex_lock(&p->mu);
    if (p->held) { /* the batch handed out last is free again */
        p->ring[(p->cur - 1) % p->depth].filled = 0;
        p->held = false;
        set_limit(p);
        pthread_cond_broadcast(&p->work);
    }
    if (p->cur >= p->batches || p->rc != PS_OK) {
        int rc = p->rc;
        if (rc != PS_OK) snprintf(err, errlen, "%s", p->err);
        pthread_mutex_unlock(&p->mu);
        return rc;
    }
    size_t b = p->cur, len = batch_len(p, b);
    slot *sl = &p->ring[b % p->depth];
    if (!p->cfg.threads) { /* on this thread: read the batch now */
        char e[512];
        size_t k0 = batch_start(p, b);
        sl->filled = 0;
        for (size_t k = k0; k < k0 + len && p->rc == PS_OK; k++) {
            pthread_mutex_unlock(&p->mu);
            int rc = produce(p, &p->workers[0], k, p->epoch, p->seq, e, sizeof e);
            pthread_mutex_lock(&p->mu);
            settle(p, k, rc, e);
        }
    }
    while (sl->filled < len && p->rc == PS_OK) pthread_cond_wait(&p->ready, &p->mu);
    int rc = p->rc;
    if (rc != PS_OK) {
        snprintf(err, errlen, "%s", p->err);
    } else {
        out->nb = compact(p, sl, len);
        out->x = sl->x;
        out->y = sl->y;
        out->targets = sl->t;
        out->ids = sl->ids;
        p->cur++;
        p->held = true;
        set_limit(p);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int ps_pipeline_next(ps_pipeline *p, float **x, int32_t **y, size_t *nb, char *err,
                     size_t errlen) {
    ps_pipeline_batch b;
    int rc = ps_pipeline_next_batch(p, &b, err, errlen);
    *nb = b.nb;
    if (b.nb) *x = b.x, *y = b.y;
    return rc;
}

void ps_pipeline_close(ps_pipeline *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; p->started && i < p->n_workers; i++) pthread_join(p->workers[i].tid, NULL);
    for (size_t i = 0; p->workers && i < p->n_workers; i++) {
        ps_sample_free(&p->workers[i].sample);
        free(p->workers[i].scratch);
    }
    for (size_t i = 0; p->ring && i < p->depth; i++) {
        free(p->ring[i].x);
        free(p->ring[i].y);
        free(p->ring[i].t);
        free(p->ring[i].ids);
        free(p->ring[i].ok);
    }
    free(p->ring);
    free(p->workers);
    free(p->seq);
    ps_order_free(&p->order);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->ready);
    free(p);
}
