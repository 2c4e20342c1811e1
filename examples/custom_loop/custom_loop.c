/* A custom training loop over libps: the user's own model (softmax regression on
 * Fashion-MNIST), its own forward and hand-written backward, and psd shards holding the
 * variables (pull, compute, push; sync mode). Uses nothing of the project but <ps.h>.
 *
 *   cc -std=c17 -O2 -o custom_loop custom_loop.c $(pkg-config --cflags --libs ps) -lm
 *   ./custom_loop --ps HOST:PORT,HOST:PORT --worker 0 --workers 2 [--data DIR] ...
 */
#define _POSIX_C_SOURCE 200809L /* popen, clock_gettime, nanosleep, strdup, strtok_r */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ps.h>

#define NPIX 784
#define NCLASS 10
#define MAX_SHARDS 64

/* ---- data: IDX files (gzip-compressed ones are read through `gzip -dc`) ----------- */

typedef struct {
    size_t n;
    float *x;         /* n x NPIX, in [0, 1] */
    unsigned char *y; /* n labels */
} dataset;

static uint32_t be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads DIR/NAME, or DIR/NAME.gz through gzip. Returns a malloc'd buffer (caller frees)
 * with its size in *len, or NULL. */
static unsigned char *read_file(const char *dir, const char *name, size_t *len) {
    char path[4096], cmd[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    int piped = 0;
    if (!f) {
        snprintf(cmd, sizeof cmd, "gzip -dc '%s.gz'", path);
        f = popen(cmd, "r");
        piped = 1;
    }
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int bad = piped ? pclose(f) != 0 : fclose(f) != 0;
    if (bad || !buf) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Loads PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte. Returns 0 or -1. */
static int load_idx(const char *dir, const char *prefix, dataset *d) {
    char name[256];
    size_t ilen = 0, llen = 0;
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    unsigned char *img = read_file(dir, name, &ilen);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    unsigned char *lab = read_file(dir, name, &llen);
    int rc = -1;
    if (img && lab && ilen >= 16 && llen >= 8 && be32(img) == 0x803 && be32(lab) == 0x801) {
        size_t n = be32(img + 4);
        if (be32(lab + 4) == n && be32(img + 8) * be32(img + 12) == NPIX && ilen >= 16 + n * NPIX &&
            llen >= 8 + n) {
            d->n = n;
            d->x = malloc(n * NPIX * sizeof *d->x);
            d->y = malloc(n);
            if (d->x && d->y) {
                for (size_t i = 0; i < n * NPIX; i++)
                    d->x[i] = img[16 + i] / 255.0f;
                memcpy(d->y, lab + 8, n);
                rc = 0;
            }
        }
    }
    free(img);
    free(lab);
    return rc;
}

/* ---- the model: logits = x W + b, softmax cross-entropy ---------------------------- */

typedef struct {
    float *params; /* one allocation: W (NPIX x NCLASS) then b (NCLASS) */
    float *grads;  /* the same layout */
} model;

#define W_OF(p) (p)
#define B_OF(p) ((p) + NPIX * NCLASS)
#define NPARAMS (NPIX * NCLASS + NCLASS)

/* logits[NCLASS] = x W + b for one sample (overwrites). */
static void linear_forward(float *logits, const float *x, const float *w, const float *b) {
    for (int k = 0; k < NCLASS; k++)
        logits[k] = b[k];
    for (int i = 0; i < NPIX; i++) {
        if (x[i] == 0.0f) continue;
        for (int k = 0; k < NCLASS; k++)
            logits[k] += x[i] * w[i * NCLASS + k];
    }
}

/* probs = softmax(logits) (overwrites); returns -log probs[label]. */
static float softmax_xent_forward(float *probs, const float *logits, int label) {
    float mx = logits[0], sum = 0.0f;
    for (int k = 1; k < NCLASS; k++)
        if (logits[k] > mx) mx = logits[k];
    for (int k = 0; k < NCLASS; k++)
        sum += probs[k] = expf(logits[k] - mx);
    for (int k = 0; k < NCLASS; k++)
        probs[k] /= sum;
    return -logf(probs[label] > 1e-30f ? probs[label] : 1e-30f);
}

/* The hand-written backward of the mean loss over a batch of n samples, for one of
 * them: dlogits = (probs - onehot(label)) / n, then dW += x^T dlogits, db += dlogits
 * (accumulates). */
static void linear_softmax_backward(float *dw, float *db, const float *probs, int label,
                                    const float *x, size_t n) {
    float dlogits[NCLASS];
    for (int k = 0; k < NCLASS; k++)
        dlogits[k] = (probs[k] - (k == label)) / (float)n;
    for (int k = 0; k < NCLASS; k++)
        db[k] += dlogits[k];
    for (int i = 0; i < NPIX; i++) {
        if (x[i] == 0.0f) continue;
        for (int k = 0; k < NCLASS; k++)
            dw[i * NCLASS + k] += x[i] * dlogits[k];
    }
}

/* One batch: overwrites m->grads with the gradient of the mean loss; returns the loss. */
static float train_batch(model *m, const dataset *d, size_t first, size_t n) {
    memset(m->grads, 0, NPARAMS * sizeof *m->grads);
    float loss = 0.0f, logits[NCLASS], probs[NCLASS];
    for (size_t s = first; s < first + n; s++) {
        const float *x = d->x + s * NPIX;
        linear_forward(logits, x, W_OF(m->params), B_OF(m->params));
        loss += softmax_xent_forward(probs, logits, d->y[s]);
        linear_softmax_backward(W_OF(m->grads), B_OF(m->grads), probs, d->y[s], x, n);
    }
    return loss / (float)n;
}

static double accuracy(const model *m, const dataset *d) {
    size_t correct = 0;
    float logits[NCLASS];
    for (size_t s = 0; s < d->n; s++) {
        linear_forward(logits, d->x + s * NPIX, W_OF(m->params), B_OF(m->params));
        int best = 0;
        for (int k = 1; k < NCLASS; k++)
            if (logits[k] > logits[best]) best = k;
        correct += best == d->y[s];
    }
    return d->n ? (double)correct / (double)d->n : 0.0;
}

/* ---- the exchange: placement, registration, join ---------------------------------- */

/* Places W and b on the shards the way psworker would, and registers each piece with
 * its slice of the params and grads. Returns PS_OK or an error with a reason in err. */
static int register_vars(ps_client *c, model *m, unsigned n_shards, ps_opt_spec opt, char *err,
                         size_t errlen) {
    static const size_t w_shape[2] = {NPIX, NCLASS}, b_shape[1] = {NCLASS};
    const ps_var_desc vars[2] = {{"custom/W", 2, w_shape}, {"custom/b", 1, b_shape}};
    float *param_of[2] = {W_OF(m->params), B_OF(m->params)};
    float *grad_of[2] = {W_OF(m->grads), B_OF(m->grads)};
    ps_piece *pieces = NULL;
    size_t n = 0;
    int rc = ps_place_vars(vars, 2, n_shards, &pieces, &n, err, errlen);
    for (size_t i = 0; i < n && rc == PS_OK; i++) {
        const ps_piece *p = &pieces[i];
        const ps_var_desc *v = &vars[p->var];
        size_t row = v->rank > 1 ? v->shape[1] : 1;
        ps_client_tensor t = {.shard = p->shard, .rank = v->rank, .opt = opt};
        snprintf(t.name, sizeof t.name, "%s", p->name);
        t.shape[0] = p->row_end - p->row_begin;
        t.shape[1] = v->rank > 1 ? v->shape[1] : 0;
        t.param = param_of[p->var] + p->row_begin * row;
        t.grad = grad_of[p->var] + p->row_begin * row;
        rc = ps_client_add(c, &t);
        if (rc != PS_OK) snprintf(err, errlen, "%s", ps_client_error(c));
    }
    ps_pieces_free(pieces);
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Worker 0 creates the variables (initial values: the params as they are); the others
 * wait until they exist; all pull the current values (ps_client_join). Returns PS_OK
 * or the error (ps_client_error says why). */
static int join(ps_client *c, unsigned index, int timeout_ms, uint64_t *version) {
    ps_join_info info = {.chief = index == 0, .wait_ms = timeout_ms, .pull = 1};
    int rc = ps_client_join(c, &info);
    if (rc == PS_OK && info.async) {
        fprintf(stderr, "custom_loop: the shards run async; this example is for sync mode\n");
        return PS_EINVAL;
    }
    *version = info.version;
    return rc;
}

/* ---- main ------------------------------------------------------------------------- */

static void usage(FILE *to) {
    fprintf(to, "usage: custom_loop --ps HOST:PORT[,HOST:PORT...] --worker I --workers N\n"
                "                   [--data DIR] [--epochs E] [--batch B] [--lr LR]\n"
                "                   [--timeout MS]\n"
                "Trains softmax regression on Fashion-MNIST with psd shards (sync mode);\n"
                "worker 0 creates the variables and prints test_accuracy=A at the end.\n");
}

int main(int argc, char **argv) {
    const char *ps = NULL, *data = "/usr/share/datasets/fashion-mnist";
    long index = -1, workers = 0, epochs = 3, batch = 32, timeout_ms = 60000;
    double lr = 0.1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "custom_loop: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--ps"))
            ps = v;
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--worker"))
            index = strtol(v, NULL, 10);
        else if (!strcmp(a, "--workers"))
            workers = strtol(v, NULL, 10);
        else if (!strcmp(a, "--epochs"))
            epochs = strtol(v, NULL, 10);
        else if (!strcmp(a, "--batch"))
            batch = strtol(v, NULL, 10);
        else if (!strcmp(a, "--timeout"))
            timeout_ms = strtol(v, NULL, 10);
        else if (!strcmp(a, "--lr"))
            lr = strtod(v, NULL);
        else {
            fprintf(stderr, "custom_loop: unknown flag %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!ps || workers < 1 || index < 0 || index >= workers || epochs < 1 || batch < 1 ||
        timeout_ms < 1 || !(lr > 0)) {
        usage(stderr);
        return 2;
    }

    /* the shard endpoints: --ps a,b,... */
    char *list = strdup(ps);
    const char *eps[MAX_SHARDS];
    size_t n_shards = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && n_shards < MAX_SHARDS;
         tok = strtok_r(NULL, ",", &save))
        eps[n_shards++] = tok;

    dataset train = {0}, test = {0};
    if (load_idx(data, "train", &train) || load_idx(data, "t10k", &test)) {
        fprintf(stderr, "custom_loop: cannot read the Fashion-MNIST IDX files in %s\n", data);
        return 1;
    }
    model m = {calloc(NPARAMS, sizeof(float)), calloc(NPARAMS, sizeof(float))};
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = (float)lr;

    char err[512] = "";
    ps_client *c = NULL;
    int rc = ps_client_open(&c, eps, n_shards, (unsigned)index, (unsigned)workers, err, sizeof err);
    if (rc == PS_OK) rc = ps_client_set_timeout(c, (int)timeout_ms);
    if (rc == PS_OK) rc = register_vars(c, &m, (unsigned)n_shards, opt, err, sizeof err);
    uint64_t version = 0;
    if (rc == PS_OK && (rc = join(c, (unsigned)index, (int)timeout_ms, &version)) != PS_OK)
        snprintf(err, sizeof err, "%s", ps_client_error(c));

    /* Sync: every worker makes the same number of steps; worker i takes batches
     * i, i+N, i+2N, ... of each epoch. A step: pull the step's values, compute the
     * gradients on this worker's batch, push them (the shards average and apply). */
    size_t steps = train.n / ((size_t)batch * (size_t)workers);
    uint64_t clock = version;
    double t0 = now_s(), loss = 0;
    for (long e = 0; e < epochs && rc == PS_OK; e++) {
        for (size_t s = 0; s < steps && rc == PS_OK; s++, clock++) {
            rc = ps_client_pull_next(c, 0, clock, NULL);
            if (rc != PS_OK) break;
            size_t first = (s * (size_t)workers + (size_t)index) * (size_t)batch;
            loss = train_batch(&m, &train, first, (size_t)batch);
            size_t dropped = 0;
            rc = ps_client_push_next(c, clock, &dropped);
        }
        if (rc == PS_OK)
            printf("worker %ld: epoch %ld: last loss %.4f (%.1f s)\n", index, e + 1, loss,
                   now_s() - t0);
        else
            snprintf(err, sizeof err, "%s", ps_client_error(c));
    }
    /* the values after the last step every worker pushed */
    if (rc == PS_OK && (rc = ps_client_pull(c, clock, NULL)) != PS_OK)
        snprintf(err, sizeof err, "%s", ps_client_error(c));
    if (rc == PS_OK && index == 0)
        printf("test_accuracy=%.4f steps=%llu seconds=%.1f\n", accuracy(&m, &test),
               (unsigned long long)clock, now_s() - t0);
    fflush(stdout);
    if (c && rc == PS_OK) rc = ps_client_goodbye(c);
    if (rc != PS_OK)
        fprintf(stderr, "custom_loop: worker %ld: %s: %s\n", index, ps_strerror(rc),
                *err ? err : ps_client_error(c));
    ps_client_close(c);
    free(m.params);
    free(m.grads);
    free(train.x);
    free(train.y);
    free(test.x);
    free(test.y);
    free(list);
    return rc == PS_OK ? 0 : 1;
}
