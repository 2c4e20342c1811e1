/* The exchange for --no-ps (see exchange.h): no shards, no client; after each
 * step the optimizer (local_opt.c) applies the gradients to the model's own
 * parameters in this process, and the embedding tables are whole tables here
 * (emb_local.h: fixed-size tables only). The benchmark floor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emb_local.h"
#include "emb_tables.h"
#include "exchange.h"
#include "local_opt.h"
#include "log.h"

typedef struct {
    ps_local_opt *opt;
    ps_emb_local **tables; /* per embedding layer */
    size_t *dims;
    const char **names; /* the layers' (borrowed from the model) */
    size_t n_tables;
} local_ex;

/* Training alone: a fresh sync job, nothing to create or wait for. */
static int local_join(void *self, ps_exchange_job *job, char *err, size_t errlen) {
    (void)self, (void)err, (void)errlen;
    job->async = 0;
    job->clock = 0;
    job->n_recreated = 0;
    return PS_OK;
}

/* The parameters already hold the last step's update. */
static int local_step_begin(void *self, uint64_t clock, char *err, size_t errlen) {
    (void)self, (void)clock, (void)err, (void)errlen;
    return PS_OK;
}

static int local_step_end(void *self, char *err, size_t errlen) {
    (void)err, (void)errlen;
    ps_local_opt_step(((local_ex *)self)->opt);
    return PS_OK;
}

static int local_step_end_checked(void *self, int bad, int *skipped, char *err, size_t errlen) {
    *skipped = bad;
    return bad ? PS_OK : local_step_end(self, err, errlen);
}

/* The ids are distinct: the table's lookup gives their rows in their order. */
static int local_rows_pull(void *self, size_t e, const uint64_t *ids, size_t n, float *out,
                           char *err, size_t errlen) {
    local_ex *x = self;
    const float *rows = NULL;
    const uint32_t *where;
    size_t nu = 0;
    int rc = n ? ps_emb_local_lookup(x->tables[e], ids, n, &rows, &nu, &where) : PS_OK;
    if (rc != PS_OK || nu != n) {
        snprintf(err, errlen, "embedding table '%s': %s", x->names[e],
                 rc == PS_EINVAL ? "an id out of the table's range" : ps_strerror(rc));
        return rc != PS_OK ? rc : PS_EINVAL;
    }
    if (n) memcpy(out, rows, n * x->dims[e] * sizeof *out);
    return PS_OK;
}

/* The rows of the last lookup (this step's pull) get their gradients. */
static int local_rows_push(void *self, size_t e, const uint64_t *ids, size_t n,
                           const float *grads, int last, char *err, size_t errlen) {
    local_ex *x = self;
    (void)ids, (void)last;
    int rc = n ? ps_emb_local_apply(x->tables[e], grads, n) : PS_OK;
    if (rc != PS_OK) snprintf(err, errlen, "embedding table '%s': %s", x->names[e], ps_strerror(rc));
    return rc;
}

static void local_free(void *self) {
    local_ex *x = self;
    ps_local_opt_free(x->opt);
    for (size_t e = 0; e < x->n_tables; e++) ps_emb_local_free(x->tables[e]);
    free(x->tables), free(x->dims), free(x->names);
    free(x);
}

static const ps_exchange_ops local_ops = {
    .name = "local",
    .join = local_join,
    .step_begin = local_step_begin,
    .step_end = local_step_end,
    .step_end_checked = local_step_end_checked,
    .rows_pull = local_rows_pull,
    .rows_push = local_rows_push,
    .free = local_free,
};

/* The model's tables, whole, in this process: fixed sizes only. */
static int open_tables(local_ex *x, ps_model *m, uint64_t seed, char *err, size_t errlen) {
    x->n_tables = ps_model_num_embeddings(m);
    if (!x->n_tables) return PS_OK;
    ps_row_opt opt;
    int rc = ps_emb_row_opt(m, &opt, err, errlen);
    if (rc != PS_OK) return rc;
    x->tables = calloc(x->n_tables, sizeof *x->tables);
    x->dims = calloc(x->n_tables, sizeof *x->dims);
    x->names = calloc(x->n_tables, sizeof *x->names);
    if (!x->tables || !x->dims || !x->names) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    for (size_t e = 0; e < x->n_tables; e++) {
        const ps_model_embedding *me = ps_model_embedding_at(m, e);
        x->dims[e] = me->dim;
        x->names[e] = me->name;
        if (!me->input_dim) {
            snprintf(err, errlen,
                     "embedding '%s' has no input_dim (ids of any value): --no-ps holds whole "
                     "tables only; train it with psd (--strategy parameter_server)",
                     me->name);
            return PS_EINVAL;
        }
        rc = ps_emb_local_for(m, e, seed, &opt, &x->tables[e]);
        if (rc != PS_OK) {
            snprintf(err, errlen, "embedding '%s': cannot hold its table [%zu, %zu] here: %s",
                     me->name, me->input_dim, me->dim, ps_strerror(rc));
            return rc;
        }
    }
    return PS_OK;
}

int ps_exchange_local_open(ps_model *m, uint64_t seed, ps_exchange *out, char *err,
                           size_t errlen) {
    *out = (ps_exchange){0};
    PS_INFO("--no-ps: %s applied in this process", ps_opt_kind_name(ps_model_optimizer(m)->kind));
    local_ex *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    int rc = ps_local_opt_new(m, &x->opt);
    if (rc != PS_OK)
        snprintf(err, errlen, "--no-ps: cannot allocate the optimizer's slots: %s",
                 ps_strerror(rc));
    else
        rc = open_tables(x, m, seed, err, errlen);
    if (rc != PS_OK) {
        local_free(x);
        return rc;
    }
    *out = (ps_exchange){.ops = &local_ops, .self = x};
    return PS_OK;
}
