/* The all-reduce exchange (see exchange.h): --strategy mirrored and
 * multi_worker_mirrored. Every worker holds the variables and the optimizer
 * (local_opt.c, the same formulas as psd and --no-ps); a step's gradients are
 * summed over a ring between the workers (collective/ring.h), in buckets
 * started from the backward pass as soon as they are complete, divided by the
 * number of workers (psd's sync mean) and applied by every worker alike.
 * --communication nccl sums them with NCCL on the CUDA device instead
 * (collective/ps_nccl.h; one GPU per worker). Embedding tables are mirrored
 * (mirror_tables.h): whole on every worker, their rows gathered as rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "exchange.h"
#include "half.h"
#include "kernels.h"
#include "local_opt.h"
#include "log.h"
#include "loss_scale.h"
#include "mirror_tables.h"
#include "model_ckpt.h"
#include "optim.h"
#include "ps_nccl.h"
#include "ring.h"

/* A gradient range reported final but not yet handed to the ring. */
typedef struct {
    float *lo, *hi;
} span;

/* --compression topk: a bucket's sparse all-gather in flight. */
typedef struct {
    span s;
    size_t k;            /* pairs each rank sent */
    unsigned char *mine; /* this rank's pairs */
    unsigned char *all;  /* every rank's, rank order (the ring's until the wait) */
} topk_bucket;

typedef struct {
    const ps_train_config *cfg; /* borrowed */
    ps_model *model;            /* borrowed */
    ps_local_opt *opt;          /* owned */
    ps_ring *ring;              /* owned, from join on */
    ps_nccl *nccl;              /* owned, --communication nccl: the sums go through it */
    float *d_sum;               /* owned (on the model's device): the NCCL all-reduce's buffer */
    unsigned rank, size;
    uint64_t clock;   /* the current step's: steps done before it */
    uint64_t done;    /* steps done after the last step_end (or the join) */
    span pending;     /* final gradients not started yet (contiguous), lo == NULL: none */
    span *started;    /* ranges started this step (to find any the hook missed) */
    size_t n_started, cap_started;
    int failed_peer;  /* the failure was the ring's or another replica's */
    int step_failed;  /* a bucket could not be started: step_end reports the ring's error */
    double last_ckpt; /* monotonic seconds of the chief's last checkpoint */
    uint64_t ckpt_clock; /* steps done at the last checkpoint (UINT64_MAX: none yet) */
    uint64_t bytes_at_join; /* ring bytes sent before training (the chief's broadcast) */
    float *residual;        /* topk: what was not sent yet, per parameter (owned) */
    uint32_t *scratch;      /* topk: selection scratch, one per parameter (owned) */
    topk_bucket *tk;        /* topk: this step's buckets (owned) */
    size_t n_tk, cap_tk;
    int check_finite;    /* loss scaling: skip the update when the reduced gradient overflowed */
    int skipped;         /* ... and it did, this step */
    ps_loss_scale *scaler;        /* the loop's (borrowed), NULL: no loss scaling */
    ps_loss_scale scaler_next;    /* during step_end: the scaler after this step's outcome */
    const ps_loss_scale *ckpt_ls; /* what a checkpoint written now holds */
    ps_mirror_tables *tables;     /* owned: the model's embedding tables (NULL: none) */
    uint64_t total_steps;         /* the job's steps (join): the last one checks the tables */
} coll_ex;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A ring call failed: the ring is broken (its reason names the rank at fault),
 * unless this worker's own configuration or memory is the cause. */
static int ring_failed(coll_ex *x, int rc) {
    if (rc != PS_OK && rc != PS_ENOMEM && rc != PS_EINVAL && rc != PS_EADDRINUSE)
        x->failed_peer = 1;
    return rc;
}

/* ---- buckets ---- */

/* --compression topk: the bucket's top k of (residual + gradients) go round the
 * ring as (index, value) pairs (a sparse all-gather: a reduce-scatter would
 * not stay sparse); the rest stays in the residual for later steps. */
static int start_topk(coll_ex *x, span s) {
    size_t n = (size_t)(s.hi - s.lo), off = (size_t)(s.lo - ps_model_grads(x->model));
    if (x->n_tk == x->cap_tk) {
        size_t cap = x->cap_tk ? x->cap_tk * 2 : 16;
        topk_bucket *t = realloc(x->tk, cap * sizeof *t);
        if (!t) return PS_ENOMEM;
        x->tk = t;
        x->cap_tk = cap;
    }
    topk_bucket *b = &x->tk[x->n_tk];
    b->s = s;
    b->k = ps_topk_k(n, x->cfg->topk_ratio);
    b->mine = malloc(b->k * PS_TOPK_PAIR_BYTES);
    b->all = malloc((size_t)x->size * b->k * PS_TOPK_PAIR_BYTES);
    if (!b->mine || !b->all) {
        free(b->mine);
        free(b->all);
        return PS_ENOMEM;
    }
    x->n_tk++;
    ps_topk_compress(x->residual + off, s.lo, n, b->k, b->mine, x->scratch);
    return ps_ring_allgather_start(x->ring, b->mine, b->k * PS_TOPK_PAIR_BYTES, b->all);
}

/* After the wait: each topk bucket becomes the sum of every rank's pairs (checked:
 * they came from other processes). */
static int finish_topk(coll_ex *x, char *err, size_t errlen) {
    int rc = PS_OK;
    for (size_t i = 0; i < x->n_tk; i++) {
        topk_bucket *b = &x->tk[i];
        size_t n = (size_t)(b->s.hi - b->s.lo), len = b->k * PS_TOPK_PAIR_BYTES;
        memset(b->s.lo, 0, n * sizeof(float));
        for (unsigned r = 0; rc == PS_OK && r < x->size; r++) {
            const unsigned char *pairs = b->all + (size_t)r * len;
            size_t bad = 0;
            if (ps_topk_check(pairs, b->k, n, &bad) != 0) {
                snprintf(err, errlen,
                         "worker %u sent a top-k list with a bad index at pair %zu (bucket of "
                         "%zu values)", r, bad, n);
                x->failed_peer = 1;
                rc = PS_EPROTO;
            } else {
                ps_topk_decode(pairs, b->k, b->s.lo, n, 1);
            }
        }
    }
    return rc;
}

static void free_topk(coll_ex *x) {
    for (size_t i = 0; i < x->n_tk; i++) {
        free(x->tk[i].mine);
        free(x->tk[i].all);
    }
    x->n_tk = 0;
}

/* Hands [lo, hi) to the ring (asynchronously). */
static void start_span(coll_ex *x, span s) {
    if (s.lo == s.hi) return;
    if (x->n_started == x->cap_started) {
        size_t cap = x->cap_started ? x->cap_started * 2 : 16;
        span *n = realloc(x->started, cap * sizeof *n);
        if (!n) {
            x->step_failed = PS_ENOMEM;
            return;
        }
        x->started = n;
        x->cap_started = cap;
    }
    x->started[x->n_started++] = s;
    int rc;
    if (x->cfg->compression == PS_COMPRESSION_TOPK)
        rc = start_topk(x, s);
    else
        rc = ps_ring_allreduce_start_enc(x->ring, s.lo, (size_t)(s.hi - s.lo),
                                         x->cfg->compression == PS_COMPRESSION_F16    ? PS_RING_F16
                                         : x->cfg->compression == PS_COMPRESSION_BF16 ? PS_RING_BF16
                                                                                      : PS_RING_F32);
    if (rc != PS_OK && !x->step_failed) x->step_failed = rc;
}

/* The backward pass made [begin, end) final: it joins the pending bucket when
 * adjacent (layers come last first, so usually just below it), else the
 * pending bucket goes out and this one starts; a bucket of bucket_bytes or
 * more goes out at once. Every rank runs the same model, so every rank starts
 * the same buckets in the same order. */
static void coll_grads_ready(void *self, const float *begin, const float *end) {
    coll_ex *x = self;
    float *b = (float *)begin, *e = (float *)end; /* the model's own gradient buffer */
    if (b == e || x->step_failed || x->nccl) return; /* NCCL: all at step_end */
    span *p = &x->pending;
    if (p->lo && e == p->lo)
        p->lo = b;
    else if (p->lo && b == p->hi)
        p->hi = e;
    else {
        if (p->lo) start_span(x, *p);
        *p = (span){b, e};
    }
    if ((size_t)(p->hi - p->lo) * sizeof(float) >= x->cfg->bucket_bytes) {
        start_span(x, *p);
        *p = (span){NULL, NULL};
    }
}

static int by_lo(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The end of the backward pass: the pending bucket, then whatever the hook did
 * not report (none on the CPU; on CUDA the one call covers everything). */
static void start_rest(coll_ex *x) {
    if (x->pending.lo) start_span(x, x->pending);
    x->pending = (span){NULL, NULL};
    float *g = ps_model_grads(x->model), *gend = g + ps_model_num_updated_params(x->model);
    size_t n = x->n_started;
    if (n) qsort(x->started, n, sizeof *x->started, by_lo); /* none yet: started is NULL */
    float *at = g;
    for (size_t i = 0; i < n && !x->step_failed; i++) {
        if (x->started[i].lo > at) start_span(x, (span){at, x->started[i].lo});
        if (x->started[i].hi > at) at = x->started[i].hi;
    }
    if (at < gend && !x->step_failed) start_span(x, (span){at, gend});
}

/* ---- join ---- */

/* What every rank must agree on before training: the model's variables. */
typedef struct {
    uint64_t n_vars, n_params;
    uint32_t layout_crc; /* names and sizes of the variables, in order */
    uint32_t opt_kind;
} model_desc;

static model_desc describe(ps_model *m) {
    model_desc d = {.n_vars = ps_model_num_vars(m), .n_params = ps_model_num_params(m)};
    for (size_t i = 0; i < d.n_vars; i++) {
        const ps_model_var *v = ps_model_var_at(m, i);
        d.layout_crc = ps_crc32c_extend(d.layout_crc, v->name, strlen(v->name) + 1);
        uint64_t numel = v->numel;
        d.layout_crc = ps_crc32c_extend(d.layout_crc, &numel, sizeof numel);
        uint8_t frozen = v->frozen; /* every rank must exchange the same variables */
        d.layout_crc = ps_crc32c_extend(d.layout_crc, &frozen, 1);
    }
    for (size_t e = 0; e < ps_model_num_embeddings(m); e++) { /* and mirror the same tables */
        const ps_model_embedding *me = ps_model_embedding_at(m, e);
        uint64_t shape[2] = {me->input_dim, me->dim};
        d.layout_crc = ps_crc32c_extend(d.layout_crc, me->name, strlen(me->name) + 1);
        d.layout_crc = ps_crc32c_extend(d.layout_crc, shape, sizeof shape);
    }
    d.opt_kind = (uint32_t)ps_model_optimizer(m)->kind;
    return d;
}

/* Every rank's model must be the chief's: allgather the descriptions. */
static int check_models(coll_ex *x, char *err, size_t errlen) {
    model_desc mine = describe(x->model);
    model_desc *all = calloc(x->size, sizeof *all);
    if (!all) return PS_ENOMEM;
    int rc = ring_failed(x, ps_ring_allgather(x->ring, &mine, sizeof mine, all, err, errlen));
    for (unsigned r = 1; rc == PS_OK && r < x->size; r++) {
        if (memcmp(&all[r], &all[0], sizeof mine) == 0) continue;
        snprintf(err, errlen,
                 "worker %u's model differs from the chief's: %llu variables / %llu parameters "
                 "(layout %08x, %s) against %llu / %llu (layout %08x, %s); every worker must "
                 "train the same --model",
                 r, (unsigned long long)all[r].n_vars, (unsigned long long)all[r].n_params,
                 all[r].layout_crc, ps_opt_kind_name((ps_opt_kind)all[r].opt_kind),
                 (unsigned long long)all[0].n_vars, (unsigned long long)all[0].n_params,
                 all[0].layout_crc, ps_opt_kind_name((ps_opt_kind)all[0].opt_kind));
        rc = PS_EINVAL;
    }
    free(all);
    return rc;
}

/* Chief: the newest checkpoint of this job, if any. */
static int load_checkpoint(coll_ex *x, uint64_t *clock, char *err, size_t errlen) {
    const ps_train_config *cfg = x->cfg;
    char path[1200];
    ps_model_ckpt_extra tables = {.load = ps_mirror_tables_ckpt_load, .user = x->tables};
    int rc = ps_model_ckpt_load_scaled(cfg->checkpoint_dir, x->model, x->opt, x->scaler,
                                       x->tables ? &tables : NULL, cfg->job_id, clock, path,
                                       sizeof path, err, errlen);
    if (rc == PS_ENOENT) {
        PS_INFO("no checkpoint in %s: starting afresh", cfg->checkpoint_dir);
        *err = '\0';
        return PS_OK;
    }
    if (rc == PS_OK) {
        PS_INFO("resuming from checkpoint %s: %llu steps done", path, (unsigned long long)*clock);
        x->ckpt_clock = *clock;
    }
    return rc;
}

/* The chief's variables, optimizer state and clock go to every rank. */
static int broadcast_state(coll_ex *x, uint64_t *clock, char *err, size_t errlen) {
    /* with the loss scaler's state: every replica scales (and skips) alike */
    uint32_t scale_bits = 0;
    if (x->scaler) memcpy(&scale_bits, &x->scaler->scale, sizeof scale_bits);
    uint64_t head[5] = {*clock, ps_local_opt_updates(x->opt), scale_bits,
                        x->scaler ? x->scaler->good_steps : 0, x->cfg->seed};
    int rc = ring_failed(x, ps_ring_broadcast(x->ring, 0, head, sizeof head, err, errlen));
    if (rc == PS_OK && x->scaler && head[2]) {
        scale_bits = (uint32_t)head[2];
        memcpy(&x->scaler->scale, &scale_bits, sizeof scale_bits);
        x->scaler->good_steps = (uint32_t)head[3];
    }
    size_t n = ps_model_num_params(x->model);
    if (rc == PS_OK)
        rc = ring_failed(x, ps_ring_broadcast(x->ring, 0, ps_model_params(x->model),
                                              n * sizeof(float), err, errlen));
    int ns = ps_optim_num_slots(ps_model_optimizer(x->model)->kind);
    for (size_t i = 0; rc == PS_OK && i < ps_model_num_vars(x->model); i++) {
        int vs = ps_optim_num_slots(ps_model_var_optimizer(x->model, i)->kind);
        for (int k = 0; rc == PS_OK && k < vs; k++)
            rc = ring_failed(x, ps_ring_broadcast(x->ring, 0, ps_local_opt_slot(x->opt, i, k),
                                                  ps_model_var_at(x->model, i)->numel *
                                                      sizeof(float),
                                                  err, errlen));
    }
    /* resumed from the chief's checkpoint: its tables too; fresh ones start from the
     * chief's seed (the rows' initial values are the seed's, not sent) */
    if (rc == PS_OK && x->tables && head[0] > 0)
        rc = ring_failed(x, ps_mirror_tables_broadcast(x->tables, x->ring, err, errlen));
    else if (rc == PS_OK && x->tables && head[4] != x->cfg->seed) {
        PS_INFO("embedding tables start from the chief's --seed %llu (this worker's: %llu)",
                (unsigned long long)head[4], (unsigned long long)x->cfg->seed);
        rc = ps_mirror_tables_reseed(x->tables, x->model, head[4], err, errlen);
    }
    if (rc != PS_OK) return rc;
    *clock = head[0];
    ps_local_opt_set_updates(x->opt, head[1]);
    if (x->rank == 0)
        PS_INFO("variables broadcast from the chief (%zu floats%s)", n,
                ns ? ", with the optimizer's slots" : "");
    else
        PS_INFO("variables received from the chief (%zu floats), starting at step %llu", n,
                (unsigned long long)*clock);
    return PS_OK;
}

/* --communication nccl: a communicator over the ring's ranks on the model's
 * CUDA device, its unique id handed out by the chief over the ring, and a
 * device buffer for the sums. NCCL needs a GPU per worker: when two share one,
 * auto keeps the ring, an explicit nccl is a configuration error. Every rank
 * sees every GPU id, so all decide alike. */
static int open_nccl(coll_ex *x, char *err, size_t errlen) {
    ps_k_dev *dev = ps_model_device(x->model);
    const char *name = ps_k_dev_name(dev);
    if (ps_k_dev_kind(dev) != PS_K_CUDA || strncmp(name, "cuda:", 5) != 0) {
        snprintf(err, errlen, "--communication nccl needs a CUDA device, not %s", name);
        return PS_EINVAL;
    }
    unsigned a, b;
    int rc = ring_failed(x, ps_nccl_shared_gpu(x->ring, atoi(name + 5), &a, &b, err, errlen));
    if (rc != PS_OK) return rc;
    if (a != b && x->cfg->communication_auto) {
        PS_INFO("communication ring: workers %u and %u compute on one GPU, and NCCL needs a GPU "
                "per worker (psctl local --gpus gives each its own)", a, b);
        return PS_OK;
    }
    if (a != b) {
        snprintf(err, errlen, "--communication nccl: workers %u and %u compute on one GPU, and "
                 "NCCL needs a GPU per worker: give each its own (psctl local --gpus, "
                 "CUDA_VISIBLE_DEVICES) or use --communication ring", a, b);
        return PS_EINVAL;
    }
    rc = ring_failed(x, ps_nccl_open(x->ring, atoi(name + 5), &x->nccl, err, errlen));
    if (rc != PS_OK) return rc;
    void *buf = NULL;
    if (ps_k_malloc(dev, ps_model_num_updated_params(x->model) * sizeof(float), &buf) != PS_OK) {
        snprintf(err, errlen, "no device memory for the NCCL all-reduce buffer");
        return PS_ENOMEM;
    }
    x->d_sum = buf;
    PS_INFO("communication nccl on %s", name);
    return PS_OK;
}

/* NCCL: the step's gradients (on the host at the end of a CUDA step) are
 * summed on the device and brought back. */
static int nccl_sum(coll_ex *x, char *err, size_t errlen) {
    ps_k_dev *dev = ps_model_device(x->model);
    size_t n = ps_model_num_updated_params(x->model);
    float *g = ps_model_grads(x->model);
    int rc = ps_k_copy_to_dev(dev, x->d_sum, g, n * sizeof(float));
    if (rc == PS_OK) rc = ps_nccl_allreduce(x->nccl, x->d_sum, n, err, errlen);
    else snprintf(err, errlen, "copying the gradients to the device failed");
    if (rc == PS_OK && ps_k_copy_to_host(dev, g, x->d_sum, n * sizeof(float)) != PS_OK) {
        snprintf(err, errlen, "copying the summed gradients from the device failed");
        rc = PS_EIO;
    }
    return rc;
}

static int coll_join(void *self, ps_exchange_job *job, char *err, size_t errlen) {
    coll_ex *x = self;
    const ps_train_config *cfg = x->cfg;
    job->async = 0;
    job->clock = 0;
    job->n_recreated = 0;
    x->scaler = job->scaler;
    x->ckpt_ls = job->scaler;
    x->total_steps = job->total_steps;
    ps_ring_config rc_cfg = {
        .rank = cfg->index,
        .size = cfg->workers,
        .endpoints = cfg->peers,
        .job_id = cfg->job_id,
        .transport = cfg->strategy == PS_STRATEGY_MIRRORED ? PS_RING_UNIX : PS_RING_AUTO,
        .connect_timeout_ms = cfg->ring_connect_timeout_ms,
        .timeout_ms = cfg->worker_timeout_ms,
    };
    PS_INFO("%s: worker %u of %u, listening on %s, communication %s",
            ps_strategy_name(cfg->strategy), cfg->index, cfg->workers, cfg->peers[cfg->index],
            cfg->communication == PS_COMM_NCCL
                ? (cfg->communication_auto ? "auto (nccl if every worker has its own GPU)"
                                           : "nccl")
                : "ring");
    int rc = ring_failed(x, ps_ring_open(&rc_cfg, &x->ring, err, errlen));
    if (rc != PS_OK) return rc;
    x->rank = ps_ring_rank(x->ring);
    x->size = ps_ring_size(x->ring);
    PS_INFO("ring complete: %u workers, this is rank %u", x->size, x->rank);
    rc = check_models(x, err, errlen);
    uint64_t clock = 0;
    /* every rank learns whether the chief could load its checkpoint */
    int32_t load_rc = PS_OK;
    char load_err[400] = "";
    if (rc == PS_OK && x->rank == 0 && cfg->checkpoint_dir)
        load_rc = load_checkpoint(x, &clock, load_err, sizeof load_err);
    if (rc == PS_OK)
        rc = ring_failed(x, ps_ring_broadcast(x->ring, 0, &load_rc, sizeof load_rc, err, errlen));
    if (rc == PS_OK && load_rc != PS_OK) {
        if (x->rank == 0)
            snprintf(err, errlen, "--checkpoint-dir %s: %s", cfg->checkpoint_dir, load_err);
        else
            snprintf(err, errlen, "the chief could not load its checkpoint (%s)",
                     ps_strerror(load_rc));
        return load_rc;
    }
    if (rc == PS_OK) rc = broadcast_state(x, &clock, err, errlen);
    if (rc == PS_OK && cfg->communication == PS_COMM_NCCL) rc = open_nccl(x, err, errlen);
    if (rc != PS_OK) return rc;
    x->last_ckpt = now_s();
    job->clock = x->done = clock;
    x->bytes_at_join = ps_ring_bytes_sent(x->ring);
    if (cfg->compression != PS_COMPRESSION_NONE)
        PS_INFO("all-reduce pieces travel as %s%s", ps_compression_name(cfg->compression),
                cfg->compression == PS_COMPRESSION_TOPK ? " (sparse all-gather per bucket)" : "");
    return PS_OK;
}

/* ---- steps ---- */

static int coll_step_begin(void *self, uint64_t clock, char *err, size_t errlen) {
    (void)err, (void)errlen;
    coll_ex *x = self;
    x->clock = clock;
    x->pending = (span){NULL, NULL};
    x->n_started = 0;
    x->step_failed = PS_OK;
    return PS_OK;
}

/* Every rank's checksum of the variables; a rank that differs from the chief
 * is named, loudly: replicas that drift apart train nonsense silently. */
static int compare_checksums(coll_ex *x, uint64_t steps, char *err, size_t errlen) {
    uint32_t mine = ps_crc32c(ps_model_params(x->model),
                              ps_model_num_params(x->model) * sizeof(float));
    mine = ps_mirror_tables_crc(x->tables, mine); /* and the embedding tables, slots too */
    uint32_t *all = calloc(x->size, sizeof *all);
    if (!all) return PS_ENOMEM;
    int rc = ring_failed(x, ps_ring_allgather(x->ring, &mine, sizeof mine, all, err, errlen));
    if (rc == PS_OK) {
        char ranks[256] = "";
        size_t used = 0, bad = 0;
        for (unsigned r = 1; r < x->size; r++) {
            if (all[r] == all[0]) continue;
            bad++;
            if (used < sizeof ranks)
                used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%u (%08x)",
                                         used ? ", " : "", r, all[r]);
        }
        if (bad) {
            snprintf(err, errlen,
                     "the replicas diverged after step %llu: worker%s %s differ%s from the "
                     "chief's variables%s (checksum %08x)",
                     (unsigned long long)steps, bad > 1 ? "s" : "", ranks, bad > 1 ? "" : "s",
                     x->tables ? " and embedding tables" : "", all[0]);
            x->failed_peer = 1;
            rc = PS_EPROTO;
        } else if (x->tables && steps == x->total_steps) {
            PS_INFO("variables and embedding tables equal on all %u workers after step %llu "
                    "(checksum %08x; %llu rows updated from the workers' rows)",
                    x->size, (unsigned long long)steps, mine,
                    (unsigned long long)ps_mirror_tables_rows_gathered(x->tables));
        } else {
            PS_DEBUG("variables equal on all %u workers after step %llu (%08x)", x->size,
                     (unsigned long long)steps, mine);
        }
    }
    free(all);
    return rc;
}

static int checkpoint_now(coll_ex *x, uint64_t steps, char *err, size_t errlen) {
    const ps_train_config *cfg = x->cfg;
    char path[1200];
    double t0 = now_s();
    ps_model_ckpt_extra tables = {0}; /* the mirrored embedding tables, after the variables */
    int rc = x->tables ? ps_mirror_tables_ckpt_vars(x->tables, &tables.vars, &tables.n) : PS_OK;
    if (rc != PS_OK) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    rc = ps_model_ckpt_save_scaled(cfg->checkpoint_dir, cfg->keep_checkpoints, x->model, x->opt,
                                   x->ckpt_ls, &tables, steps, cfg->job_id, path, sizeof path, err,
                                   errlen);
    if (rc != PS_OK) return rc;
    x->last_ckpt = now_s();
    x->ckpt_clock = steps;
    PS_INFO("checkpoint after step %llu written to %s (%.1f ms)", (unsigned long long)steps, path,
            (x->last_ckpt - t0) * 1e3);
    return PS_OK;
}

/* Chief: --checkpoint-every-steps or --checkpoint-every seconds elapsed. A
 * failed periodic checkpoint is logged; training goes on. */
static void maybe_checkpoint(coll_ex *x, uint64_t steps) {
    const ps_train_config *cfg = x->cfg;
    if (x->rank != 0 || !cfg->checkpoint_dir) return;
    int due = (cfg->checkpoint_every_steps && steps % cfg->checkpoint_every_steps == 0) ||
              (cfg->checkpoint_every_s && now_s() - x->last_ckpt >= cfg->checkpoint_every_s);
    char err[512];
    if (due && checkpoint_now(x, steps, err, sizeof err) != PS_OK)
        PS_ERROR("checkpoint failed: %s", err);
}

static int coll_step_end(void *self, char *err, size_t errlen) {
    coll_ex *x = self;
    if (x->nccl) {
        int nrc = nccl_sum(x, err, errlen);
        if (nrc != PS_OK) return nrc;
    } else if (!x->step_failed) {
        start_rest(x);
    }
    char why[400] = "";
    int rc = ring_failed(x, ps_ring_wait(x->ring, why, sizeof why));
    if (rc != PS_OK)
        snprintf(err, errlen, "step %llu: the all-reduce ring broke: %s",
                 (unsigned long long)x->clock + 1, why);
    if (rc == PS_OK && x->step_failed) {
        rc = x->step_failed;
        snprintf(err, errlen, "starting an all-reduce: %s", ps_strerror(rc));
    }
    if (rc == PS_OK && x->n_tk) rc = finish_topk(x, err, errlen);
    free_topk(x);
    if (rc == PS_OK && x->tables) { /* the rows, as rows: summed and averaged by id */
        int peer = 0;
        rc = ps_mirror_tables_gather(x->tables, x->ring, &peer, err, errlen);
        if (peer) x->failed_peer = 1;
    }
    if (rc != PS_OK) return rc;
    /* the mean of the replicas' gradients, as psd's sync mode computes it */
    if (x->size > 1) {
        float scale = 1.0f / (float)x->size;
        float *g = ps_model_grads(x->model);
        size_t n = ps_model_num_updated_params(x->model);
        for (size_t i = 0; i < n; i++)
            g[i] *= scale;
    }
    /* loss scaling: checked on the reduced gradient, the same on every replica */
    x->skipped = x->check_finite &&
                 (!ps_all_finite(ps_model_grads(x->model), ps_model_num_updated_params(x->model)) ||
                  (x->tables && !ps_mirror_tables_finite(x->tables)));
    if (x->tables && !x->skipped) ps_mirror_tables_apply(x->tables);
    if (x->skipped) {
        /* nothing applied */
    } else if (x->cfg->sync_every > 1) { /* local SGD (exchange_localsgd.c): minus the mean delta */
        float *w = ps_model_params(x->model), *g = ps_model_grads(x->model);
        for (size_t i = 0, n = ps_model_num_updated_params(x->model); i < n; i++)
            w[i] -= g[i];
    } else {
        ps_local_opt_step(x->opt);
    }
    if (x->check_finite && x->scaler) { /* the loop updates its scaler after this returns */
        x->scaler_next = *x->scaler;
        ps_loss_scale_update(&x->scaler_next, !x->skipped);
        x->ckpt_ls = &x->scaler_next;
    }
    uint64_t steps = x->done = x->clock + 1;
    if (x->cfg->perturb_at_step && steps == x->cfg->perturb_at_step) {
        /* fault injection for tests (--perturb-at-step): this replica drifts */
        ps_model_params(x->model)[0] += 1e-3f;
        PS_WARN("--perturb-at-step %llu: nudged this worker's first variable (fault injection)",
                (unsigned long long)steps);
    }
    if ((x->cfg->check_every && steps % x->cfg->check_every == 0) ||
        (x->tables && steps == x->total_steps)) { /* the tables' replicas, once at the end */
        rc = compare_checksums(x, steps, err, errlen);
        if (rc != PS_OK) return rc;
    }
    maybe_checkpoint(x, steps);
    return PS_OK;
}

/* Loss scaling: this replica's own check does not matter (an inf reaches the
 * sum, so every replica sees it there). */
static int coll_step_end_checked(void *self, int bad, int *skipped, char *err, size_t errlen) {
    coll_ex *x = self;
    (void)bad;
    x->check_finite = 1;
    x->skipped = 0;
    int rc = coll_step_end(self, err, errlen);
    x->check_finite = 0;
    x->ckpt_ls = x->scaler; /* outside a step: the loop's own, up to date */
    *skipped = x->skipped;
    return rc;
}

/* The chief's last checkpoint, a last comparison, then a barrier: no rank
 * closes its ring while another (the chief evaluating) still needs it. */
static void coll_finish(void *self) {
    coll_ex *x = self;
    char err[512];
    if (x->rank == 0 && x->cfg->checkpoint_dir && x->ckpt_clock != x->done &&
        checkpoint_now(x, x->done, err, sizeof err) != PS_OK)
        PS_ERROR("final checkpoint failed: %s", err);
    float one = 1;
    if (ring_failed(x, ps_ring_allreduce(x->ring, &one, 1, err, sizeof err)) != PS_OK)
        PS_WARN("final barrier: %s", err);
}

/* An all-gather of every rank's sums (a double and two exact counts: no
 * float32 rounding, unlike an all-reduce of floats), added in rank order, so
 * every rank holds the same totals. */
static int coll_reduce_metrics(void *self, ps_job_epoch *e, char *err, size_t errlen) {
    coll_ex *x = self;
    typedef struct {
        double loss_sum;
        uint64_t correct, samples;
    } sums;
    sums mine = {e->mine.loss_sum, e->mine.correct, e->mine.samples};
    sums *all = calloc(x->size, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory gathering the metrics");
        return PS_ENOMEM;
    }
    int rc = ring_failed(x, ps_ring_allgather(x->ring, &mine, sizeof mine, all, err, errlen));
    if (rc == PS_OK) {
        e->total = (ps_metric_sums){0, 0, 0};
        e->n_each = 0;
        for (unsigned r = 0; r < x->size; r++) {
            ps_metric_sums s = {all[r].loss_sum, all[r].correct, all[r].samples};
            e->total.loss_sum += s.loss_sum;
            e->total.correct += s.correct;
            e->total.samples += s.samples;
            if (r < e->workers) e->each[e->n_each++] = (ps_worker_metrics){r, s};
        }
        e->reported = x->size;
    }
    free(all);
    return rc;
}

static int coll_peer_failed(void *self) {
    return ((coll_ex *)self)->failed_peer;
}

/* --compression topk: this worker's residual; local SGD keeps its own state. */
static int coll_state(void *self, ps_wstate *s) {
    coll_ex *x = self;
    return x->residual ? ps_wstate_add(s, "topk_residual", x->residual,
                                       ps_model_num_params(x->model), NULL)
                       : PS_OK;
}

static uint64_t coll_bytes_sent(void *self) {
    coll_ex *x = self;
    return ps_ring_bytes_sent(x->ring) - x->bytes_at_join;
}

static void coll_free(void *self) {
    coll_ex *x = self;
    if (!x) return;
    free_topk(x);
    free(x->tk);
    free(x->residual);
    free(x->scratch);
    if (x->d_sum) ps_k_free(ps_model_device(x->model), x->d_sum);
    ps_nccl_close(x->nccl);
    ps_ring_close(x->ring);
    ps_local_opt_free(x->opt);
    ps_mirror_tables_free(x->tables);
    free(x->started);
    free(x);
}

/* Embedding rows: read from this worker's copy of the table. */
static int coll_rows_pull(void *self, size_t e, const uint64_t *ids, size_t n, float *out,
                          char *err, size_t errlen) {
    return ps_mirror_tables_pull(((coll_ex *)self)->tables, e, ids, n, out, err, errlen);
}

/* Kept for step_end, which gathers every worker's rows after the dense sums. */
static int coll_rows_push(void *self, size_t e, const uint64_t *ids, size_t n, const float *grads,
                          int last, char *err, size_t errlen) {
    (void)last;
    return ps_mirror_tables_keep(((coll_ex *)self)->tables, e, ids, n, grads, err, errlen);
}

static const ps_exchange_ops coll_ops = {
    .name = "all-reduce (ring)",
    .join = coll_join,
    .step_begin = coll_step_begin,
    .grads_ready = coll_grads_ready,
    .step_end = coll_step_end,
    .step_end_checked = coll_step_end_checked,
    .finish = coll_finish,
    .peer_failed = coll_peer_failed,
    .free = coll_free,
    .bytes_sent = coll_bytes_sent,
    .state = coll_state,
    .reduce_metrics = coll_reduce_metrics,
    .rows_pull = coll_rows_pull,
    .rows_push = coll_rows_push,
};

int ps_exchange_nccl_built(void) {
#ifdef PS_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

int ps_exchange_collective_open(const ps_train_config *cfg, ps_model *m, ps_exchange *out,
                                char *err, size_t errlen) {
    *out = (ps_exchange){0};
    if (cfg->communication == PS_COMM_NCCL && !ps_exchange_nccl_built()) {
        snprintf(err, errlen,
                 "--communication nccl: this psworker was built without NCCL (use ring)");
        return PS_EINVAL;
    }
    if (cfg->communication == PS_COMM_NCCL && cfg->compression != PS_COMPRESSION_NONE) {
        snprintf(err, errlen, "--compression %s: not with --communication nccl (ring only)",
                 ps_compression_name(cfg->compression));
        return PS_EINVAL;
    }
    if (!cfg->peers || cfg->n_peers != cfg->workers || cfg->index >= cfg->workers) {
        snprintf(err, errlen, "%s needs every worker's address (TF_CONFIG cluster.worker)",
                 ps_strategy_name(cfg->strategy));
        return PS_EINVAL;
    }
    coll_ex *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    x->cfg = cfg;
    x->model = m;
    x->ckpt_clock = UINT64_MAX;
    if (cfg->compression == PS_COMPRESSION_TOPK) {
        size_t n = ps_model_num_params(m);
        x->residual = calloc(n ? n : 1, sizeof(float));
        x->scratch = malloc((n ? n : 1) * sizeof *x->scratch);
    }
    if ((cfg->compression == PS_COMPRESSION_TOPK && (!x->residual || !x->scratch)) ||
        ps_local_opt_new(m, &x->opt) != PS_OK) {
        free(x->residual);
        free(x->scratch);
        free(x);
        snprintf(err, errlen, "cannot allocate the optimizer's slots: %s", ps_strerror(PS_ENOMEM));
        return PS_ENOMEM;
    }
    int rc = ps_mirror_tables_open(m, cfg->seed, cfg->max_mirrored_table_bytes, &x->tables, err,
                                   errlen);
    if (rc != PS_OK) {
        coll_free(x);
        return rc;
    }
    if (x->tables)
        PS_INFO("%s: %zu embedding table(s) mirrored on every worker, rows exchanged as rows",
                ps_strategy_name(cfg->strategy), ps_model_num_embeddings(m));
    *out = (ps_exchange){.ops = &coll_ops, .self = x};
    return PS_OK;
}
