/* Running a parsed model (model_impl.h): buffers on the model's device,
 * initialisation, forward, loss, backward. Parsing is in model_spec.c. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "model_impl.h"
#include "ps_error.h"

#define EVAL_CHUNK 256 /* rows per evaluation pass: bounds activation memory */

static const char default_spec[] =
    "{\n"
    "  \"name\": \"mlp\",\n"
    "  \"input_shape\": [784],\n"
    "  \"layers\": [\n"
    "    {\"type\": \"Dense\", \"units\": 128, \"activation\": \"relu\"},\n"
    "    {\"type\": \"Dense\", \"units\": 10}\n"
    "  ],\n"
    "  \"loss\": \"sparse_categorical_crossentropy\",\n"
    "  \"from_logits\": true,\n"
    "  \"optimizer\": {\"name\": \"adam\", \"learning_rate\": 0.001},\n"
    "  \"batch_size\": 64\n"
    "}\n";

const char *ps_model_default_spec(void) {
    return default_spec;
}

static bool on_cuda(const ps_model *m) {
    return ps_k_dev_kind(m->dev) != PS_K_CPU;
}

/* ---- buffers ------------------------------------------------------------- */

/* Frees the activation-sized buffers (they are regrown by ensure_cap). */
static void free_activations(ps_model *m) {
    for (size_t j = 0; j < m->nops; j++) {
        ps_k_free(m->dev, m->ops[j].y);
        ps_k_free(m->dev, m->ops[j].arg);
        ps_k_free(m->dev, m->ops[j].stat);
        ps_k_free(m->dev, m->ops[j].aux);
        ps_k_free(m->dev, m->ops[j].daux);
        m->ops[j].aux = m->ops[j].daux = NULL;
        m->ops[j].y = NULL;
        m->ops[j].arg = NULL;
        m->ops[j].stat = NULL;
    }
    for (size_t k = 0; k < m->ngslots; k++) {
        ps_k_free(m->dev, m->g[k]);
        m->g[k] = NULL;
    }
    ps_k_free(m->dev, m->gscr);
    ps_k_free(m->dev, m->ws);
    free(m->h_stat);
    m->h_stat = NULL;
    ps_k_free(m->dev, m->d_t);
    if (on_cuda(m)) {
        ps_k_free(m->dev, m->d_x);
        ps_k_free(m->dev, m->d_y);
    }
    free(m->h_out);
    m->gscr = m->ws = m->d_t = m->d_x = m->h_out = NULL;
    m->d_y = NULL;
    m->cap = 0;
    m->ws_floats = 0;
}

/* Frees params/grads on the host and the device. */
static void free_params(ps_model *m) {
    if (on_cuda(m)) {
        ps_k_free(m->dev, m->d_params);
        ps_k_free(m->dev, m->d_grads);
    }
    ps_k_host_free(m->dev, m->params);
    ps_k_host_free(m->dev, m->grads);
    m->params = m->grads = m->d_params = m->d_grads = NULL;
}

/* Allocates params/grads for m->dev (zeroed host buffers; device copies on CUDA). */
static int alloc_params(ps_model *m) {
    size_t bytes = (m->nparams ? m->nparams : 1) * sizeof(float);
    int rc = ps_k_host_alloc(m->dev, bytes, (void **)&m->params);
    if (rc == PS_OK) rc = ps_k_host_alloc(m->dev, bytes, (void **)&m->grads);
    if (rc != PS_OK) return rc;
    memset(m->params, 0, bytes);
    memset(m->grads, 0, bytes);
    if (!on_cuda(m)) {
        m->d_params = m->params;
        m->d_grads = m->grads;
        return PS_OK;
    }
    rc = ps_k_malloc(m->dev, bytes, (void **)&m->d_params);
    if (rc == PS_OK) rc = ps_k_malloc(m->dev, bytes, (void **)&m->d_grads);
    return rc;
}

int ps_model_set_device(ps_model *m, ps_k_dev *d, char *err, size_t errlen) {
    if (d == m->dev) return PS_OK;
    size_t bytes = m->nparams * sizeof(float);
    float *keep = malloc(bytes ? bytes : 1);
    if (!keep) {
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    memcpy(keep, m->params, bytes);
    free_activations(m);
    ps_rows_release(m);
    free_params(m);
    m->dev = d;
    int rc = alloc_params(m);
    if (rc == PS_OK) memcpy(m->params, keep, bytes);
    free(keep);
    if (rc != PS_OK)
        snprintf(err, errlen, "%s: cannot allocate %zu parameters: %s", ps_k_dev_name(d),
                 m->nparams, ps_strerror(rc));
    return rc;
}

static int alloc_dev(ps_model *m, size_t floats, void *out) {
    return ps_k_malloc(m->dev, (floats ? floats : 1) * sizeof(float), (void **)out);
}

/* Grows the activation, gradient and workspace buffers to hold rows rows. */
static int ensure_cap(ps_model *m, size_t rows) {
    if (rows <= m->cap) return PS_OK;
    free_activations(m);
    size_t classes = m->ops[m->nops - 1].out.c, ws = 0, maxc = 0;
    int rc = PS_OK;
    for (size_t j = 0; j < m->nops && rc == PS_OK; j++) {
        ps_op *o = &m->ops[j];
        const ps_layer *ly = ps_layer_of(o->kind);
        if (!ly->view) rc = alloc_dev(m, rows * ps_shape_numel(o->out), &o->y);
        if (rc == PS_OK && ly->alloc) rc = ly->alloc(m, o, rows, &ws, &maxc);
    }
    for (size_t k = 0; k < m->ngslots && rc == PS_OK; k++)
        rc = alloc_dev(m, rows * m->maxw, &m->g[k]);
    if (rc == PS_OK) rc = alloc_dev(m, rows * m->maxw, &m->gscr);
    if (rc == PS_OK && ws) rc = alloc_dev(m, ws, &m->ws);
    if (rc == PS_OK && maxc && !(m->h_stat = malloc(2 * maxc * sizeof(float)))) rc = PS_ENOMEM;
    if (rc == PS_OK && m->loss != LOSS_SPARSE_CE) rc = alloc_dev(m, rows * classes, &m->d_t);
    if (rc == PS_OK && on_cuda(m)) rc = alloc_dev(m, rows * ps_shape_numel(m->input), &m->d_x);
    if (rc == PS_OK && on_cuda(m)) rc = alloc_dev(m, rows, &m->d_y);
    if (rc == PS_OK && classes == 1 && !(m->h_out = malloc(rows * sizeof(float)))) rc = PS_ENOMEM;
    if (rc != PS_OK) {
        free_activations(m);
        return rc;
    }
    m->cap = rows;
    m->ws_floats = ws;
    return PS_OK;
}

/* Whether op o may write input i's gradient into its output's buffer (when
 * the input has no other reader): activations and dropout work in place,
 * Flatten/Reshape and Add's first input pass the gradient through. */
static bool aliasable(const ps_op *o, size_t i) {
    return i == 0 && ps_layer_of(o->kind)->grad_in_place;
}

/* Gives each tensor's gradient a buffer, reusing them as the backward pass
 * goes: a tensor's gradient lives from its last reader's backward to its
 * producer's. A chain needs two (ping-pong), a residual block one more. */
static int assign_gslots(ps_model *m, char *err, size_t errlen) {
    bool used[PS_MAX_GSLOTS] = {0};
    bool *has = calloc(m->nops + 1, sizeof *has);
    if (!has) return PS_ENOMEM;
    int rc = PS_OK;
    size_t want = 0;
    for (size_t j = m->nrun + 1; j-- > 0 && rc == PS_OK;) {
        /* j == nrun: the output's gradient (from the loss); else op j's inputs' */
        const ps_op *o = j < m->nrun ? &m->ops[j] : NULL;
        size_t nin = o ? o->nin : 1, given = PS_MAX_GSLOTS;
        for (size_t i = 0; i < nin && rc == PS_OK; i++) {
            size_t s = o ? o->in_t[i] : m->nrun;
            if (s == 0 || has[s]) continue;
            has[s] = true;
            if (o && given == PS_MAX_GSLOTS && aliasable(o, i) && m->ops[s - 1].consumers == 1) {
                given = o->gslot;
                m->ops[s - 1].gslot = given;
                continue;
            }
            size_t k = 0;
            while (k < PS_MAX_GSLOTS && used[k])
                k++;
            if (k == PS_MAX_GSLOTS) {
                snprintf(err, errlen, "the graph keeps more than %d gradients alive at once",
                         PS_MAX_GSLOTS);
                rc = PS_EFORMAT;
                break;
            }
            used[k] = true;
            m->ops[s - 1].gslot = k;
            if (k + 1 > want) want = k + 1;
        }
        if (o && given == PS_MAX_GSLOTS) used[o->gslot] = false;
    }
    free(has);
    m->ngslots = want;
    return rc;
}

/* Which tensors' gradients the backward pass computes: those read by an op
 * with variables to train, directly or through ops that pass the gradient on.
 * The input's never; a frozen layer's variables get none. */
static int mark_tgrad(ps_model *m) {
    if (!(m->tgrad = calloc(m->nops + 1, sizeof *m->tgrad))) return PS_ENOMEM;
    for (size_t j = 0; j < m->nops; j++) {
        const ps_op *o = &m->ops[j];
        const ps_layer *ly = ps_layer_of(o->kind);
        bool need = !o->frozen && (ly->vars || ly->ids);
        for (size_t i = 0; i < o->nin && !need; i++)
            need = m->tgrad[o->in_t[i]];
        m->tgrad[j + 1] = need;
    }
    return PS_OK;
}

/* ---- construction ---------------------------------------------------------- */

static int model_new(const char *json, const char *base_dir, const ps_model_overrides *ov,
                     ps_model **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    ps_model *m = calloc(1, sizeof *m);
    if (!m) {
        if (err) snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    m->dev = ps_k_cpu();
    int rc = ps_model_parse(m, json, base_dir, ov, err, errlen);
    if (rc == PS_OK) rc = assign_gslots(m, err, errlen);
    if (rc == PS_OK && !(m->ginit = calloc(m->nops + 1, sizeof *m->ginit))) rc = PS_ENOMEM;
    if (rc == PS_OK) rc = mark_tgrad(m);
    if (rc == PS_OK && ps_rows_setup(m) != PS_OK) {
        rc = PS_ENOMEM;
        if (err) snprintf(err, errlen, "out of memory");
    }
    if (rc == PS_OK) {
        m->maxw = ps_shape_numel(m->input);
        for (size_t j = 0; j < m->nops; j++)
            if (ps_shape_numel(m->ops[j].out) > m->maxw) m->maxw = ps_shape_numel(m->ops[j].out);
        rc = alloc_params(m);
        if (rc != PS_OK && err) snprintf(err, errlen, "out of memory");
    }
    if (rc != PS_OK) {
        ps_model_free(m);
        return rc;
    }
    *out = m;
    return PS_OK;
}

int ps_model_from_json(const char *json, ps_model **out, char *err, size_t errlen) {
    return model_new(json, NULL, NULL, out, err, errlen);
}

int ps_model_load_with(const char *path, const ps_model_overrides *ov, ps_model **out, char *err,
                       size_t errlen) {
    *out = NULL;
    char *buf = NULL;
    int rc = ps_model_read_file(path, &buf, err, errlen);
    if (rc != PS_OK) return rc;
    char dir[4096], why[512];
    const char *slash = strrchr(path, '/');
    if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        snprintf(dir, sizeof dir, ".");
    rc = model_new(buf, dir, ov, out, why, sizeof why);
    free(buf);
    if (rc != PS_OK && err) snprintf(err, errlen, "%s: %s", path, why);
    return rc;
}

int ps_model_load(const char *path, ps_model **out, char *err, size_t errlen) {
    return ps_model_load_with(path, NULL, out, err, errlen);
}

void ps_model_free(ps_model *m) {
    if (!m) return;
    if (m->dev) {
        free_activations(m);
        ps_rows_free(m);
        free_params(m);
    }
    free(m->ops);
    free(m->vars);
    free(m->inits);
    free(m->vscale);
    free(m->ginit);
    free(m->tgrad);
    free(m);
}

/* ---- accessors ------------------------------------------------------------- */

ps_k_dev *ps_model_device(const ps_model *m) {
    return m->dev;
}

size_t ps_model_input_dim(const ps_model *m) {
    return ps_shape_numel(m->input);
}
void ps_model_input_shape(const ps_model *m, size_t *h, size_t *w, size_t *c) {
    *h = m->input.h;
    *w = m->input.w;
    *c = m->input.c;
}
size_t ps_model_epochs(const ps_model *m) {
    return m->epochs;
}
const ps_label_spec *ps_model_labels(const ps_model *m) {
    return &m->labels;
}
size_t ps_model_num_classes(const ps_model *m) {
    size_t c = m->ops[m->nops - 1].out.c;
    return c == 1 ? 2 : c;
}
bool ps_model_takes_targets(const ps_model *m) {
    return m->loss != LOSS_SPARSE_CE;
}
bool ps_model_wants_auc(const ps_model *m) {
    return m->metric_auc;
}
size_t ps_model_output_dim(const ps_model *m) {
    return m->ops[m->nops - 1].out.c;
}
size_t ps_model_num_vars(const ps_model *m) {
    return m->nvars;
}
const ps_model_var *ps_model_var_at(const ps_model *m, size_t i) {
    return i < m->nvars ? &m->vars[i] : NULL;
}
size_t ps_model_num_params(const ps_model *m) {
    return m->nparams;
}
size_t ps_model_num_updated_params(const ps_model *m) {
    return m->nupdated;
}
float *ps_model_params(ps_model *m) {
    return m->params;
}
float *ps_model_grads(ps_model *m) {
    return m->grads;
}
const ps_opt_spec *ps_model_optimizer(const ps_model *m) {
    return &m->opt;
}
const ps_opt_spec *ps_model_var_optimizer(const ps_model *m, size_t i) {
    return i < m->nvars && !m->vars[i].trainable ? &m->stat_opt : &m->opt;
}
size_t ps_model_num_trainable_params(const ps_model *m) {
    size_t n = 0;
    for (size_t i = 0; i < m->nvars; i++)
        n += m->vars[i].trainable ? m->vars[i].numel : 0;
    return n;
}
size_t ps_model_batch_size(const ps_model *m) {
    return m->batch_size;
}
const char *ps_model_name(const ps_model *m) {
    return m->name;
}
ps_dtype_policy ps_model_dtype_policy(const ps_model *m) {
    return m->policy;
}
const char *ps_dtype_policy_name(ps_dtype_policy p) {
    return p == PS_POLICY_MIXED_FLOAT16    ? "mixed_float16"
           : p == PS_POLICY_MIXED_BFLOAT16 ? "mixed_bfloat16"
                                           : "float32";
}
void ps_model_set_dtype_policy(ps_model *m, ps_dtype_policy p) {
    m->policy = p;
    for (size_t j = 0; j < m->nops; j++)
        m->ops[j].prec = ps_dtype_policy_prec(p);
}
float ps_model_loss_scale(const ps_model *m) {
    return m->loss_scale;
}

void ps_model_set_loss_scale(ps_model *m, float scale) {
    m->loss_scale = scale > 0.0f ? scale : 0.0f;
}

/* ---- initialisation --------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A standard normal draw (Box-Muller) from the stream s. */
static double normal01(uint64_t *s) {
    double u1 = ((double)(splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0); /* (0, 1] */
    double u2 = (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Keras' VarianceScaling: n the fan by mode; uniform in +-sqrt(3 scale / n);
 * truncated normal (redrawn beyond 2 sd) with sd sqrt(scale / n) / .8796,
 * the truncation's correction; or a plain normal with sd sqrt(scale / n). */
static void init_vscale(float *p, size_t numel, const ps_model_var *v, const ps_vscale *vs,
                        uint64_t *s) {
    double n = vs->mode == PS_FAN_IN    ? (double)v->fan_in
               : vs->mode == PS_FAN_OUT ? (double)v->fan_out
                                        : ((double)v->fan_in + (double)v->fan_out) / 2.0;
    double var = (double)vs->scale / (n > 1.0 ? n : 1.0);
    for (size_t j = 0; j < numel; j++) {
        if (vs->dist == PS_DIST_UNIFORM) {
            double u = (double)(splitmix64(s) >> 40) * (1.0 / 16777216.0);
            p[j] = (float)(sqrt(3.0 * var) * (2.0 * u - 1.0));
            continue;
        }
        double z = normal01(s);
        if (vs->dist == PS_DIST_TRUNCATED_NORMAL) {
            while (fabs(z) > 2.0)
                z = normal01(s);
            z /= 0.87962566103423978;
        }
        p[j] = (float)(sqrt(var) * z);
    }
}

void ps_model_init_params(ps_model *m, uint64_t seed) {
    for (size_t i = 0; i < m->nvars; i++) {
        const ps_model_var *v = &m->vars[i];
        float *p = m->params + v->offset;
        if (m->inits[i] == INIT_ZEROS || m->inits[i] == INIT_ONES) {
            for (size_t j = 0; j < v->numel; j++)
                p[j] = m->inits[i] == INIT_ONES ? 1.0f : 0.0f;
            continue;
        }
        /* One stream per variable, so a variable's values depend only on
         * (seed, its index), not on the sizes of the layers before it. */
        uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (i + 1));
        if (m->inits[i] == INIT_VSCALE) {
            init_vscale(p, v->numel, v, &m->vscale[i], &s);
            continue;
        }
        float limit = (float)sqrt(6.0 / (double)(v->fan_in + v->fan_out));
        for (size_t j = 0; j < v->numel; j++) {
            float u = (float)(splitmix64(&s) >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
            p[j] = limit * (2.0f * u - 1.0f);
        }
    }
    m->dropout_seed = seed;
    m->step = 0;
}

void ps_model_set_dropout_seed(ps_model *m, uint64_t seed) {
    m->dropout_seed = seed;
}

uint64_t ps_model_train_steps(const ps_model *m) {
    return m->step;
}

void ps_model_set_train_steps(ps_model *m, uint64_t n) {
    m->step = n;
}

/* ---- forward, loss, backward ------------------------------------------------ */

const float *ps_layer_param(const ps_model *m, size_t var) {
    return var == PS_NO_VAR ? NULL : m->d_params + m->vars[var].offset;
}

float *ps_layer_grad(const ps_model *m, size_t var) {
    return var == PS_NO_VAR || m->vars[var].frozen ? NULL : m->d_grads + m->vars[var].offset;
}

int ps_layer_alloc(ps_model *m, size_t floats, void *out) {
    return alloc_dev(m, floats, out);
}

uint64_t ps_layer_dropout_seed(const ps_model *m, size_t j) {
    uint64_t s = m->dropout_seed ^ (m->step * 0x9E3779B97F4A7C15ull);
    s ^= (uint64_t)(j + 1) * 0xD1B54A32D192ED03ull;
    return splitmix64(&s);
}

const float *ps_layer_tensor(const ps_pass *p, size_t t) {
    return t ? p->m->ops[t - 1].outp : p->x;
}

/* Runs the executed ops on rows samples of x (on the device); *outp gets the
 * output [rows, classes]. Dropout is applied and batch normalization uses the
 * batch's statistics only when training; stats: also write the moving
 * statistics' updates (a training step). */
static int forward(ps_model *m, const float *x, size_t rows, size_t row0, bool training,
                   bool stats, const float **outp) {
    const ps_pass p = {
        .m = m, .x = x, .rows = rows, .row0 = row0, .training = training, .stats = stats};
    int rc = PS_OK;
    for (size_t j = 0; j < m->nrun && rc == PS_OK; j++) {
        ps_op *o = &m->ops[j];
        const float *out = o->y;
        rc = ps_layer_of(o->kind)->forward(&p, j, o, ps_layer_tensor(&p, o->in_t[0]), &out);
        /* mixed precision: the layer's output is stored in its precision */
        if (o->prec != PS_K_PREC_F32 && out == o->y)
            ps_k_round(m->dev, o->prec, o->y, rows * ps_shape_numel(o->out));
        o->outp = out;
    }
    *outp = ps_layer_tensor(&p, m->nrun);
    return rc;
}

/* Loss of out[rows, classes] against labels y, or float targets t when not
 * NULL (both on the device); when dout is not NULL it receives d(mean
 * loss)/d(out). */
static int loss_of(ps_model *m, float *dout, const float *out, const int32_t *y, const float *t,
                   size_t rows, float *loss) {
    size_t cols = m->ops[m->nops - 1].out.c;
    int rc;
    if (m->loss == LOSS_SPARSE_CE) {
        rc = ps_k_softmax_ce_overwrite(m->dev, dout, out, y, rows, cols, loss);
    } else {
        if (!t) ps_k_onehot_overwrite(m->dev, m->d_t, y, rows, cols);
        if (!t) t = m->d_t;
        rc = m->loss == LOSS_BCE ? ps_k_bce_overwrite(m->dev, dout, out, t, rows, cols, loss)
                                 : ps_k_mse_overwrite(m->dev, dout, out, t, rows, cols, loss);
    }
    /* loss scaling: the loss (float32) times the scale, so its gradient is */
    if (rc == PS_OK && dout && m->loss_scale > 0.0f)
        ps_k_scale(m->dev, dout, m->loss_scale, rows * cols);
    return rc;
}

/* Correct predictions: argmax for several outputs; for one output, its sign
 * (a logit, before the folded sigmoid) or, under mse, a 0.5 threshold. */
static int correct_of(ps_model *m, const float *out, const int32_t *y, const int32_t *host_y,
                      size_t rows, size_t *correct) {
    size_t cols = m->ops[m->nops - 1].out.c;
    if (cols > 1) return ps_k_argmax_correct(m->dev, out, y, rows, cols, correct);
    if (m->loss != LOSS_MSE) return ps_k_binary_correct(m->dev, out, y, rows, correct);
    int rc = ps_k_copy_to_host(m->dev, m->h_out, out, rows * sizeof(float));
    if (rc != PS_OK) return rc;
    size_t hits = 0;
    for (size_t r = 0; r < rows; r++)
        hits += (m->h_out[r] > 0.5f) == (host_y[r] != 0);
    *correct = hits;
    return PS_OK;
}

void ps_model_set_grad_hook(ps_model *m, ps_model_grad_hook fn, void *ctx) {
    m->grad_hook = fn;
    m->grad_hook_ctx = ctx;
}

/* Tells the hook that op o's variables' gradients are final (CPU: d_grads is
 * grads); for batch normalization also the moving statistics' slots. */
void ps_layer_grads_final(const ps_model *m, const ps_op *o) {
    if (!m->grad_hook || m->d_grads != m->grads || m->loss_scale > 0.0f || o->frozen) return;
    size_t vs[6] = {o->kernel_var, o->kernel2_var, o->bias_var,
                    o->mean_var,   o->mvar_var,    o->count_var};
    for (int k = 0; k < 6; k++) {
        if (vs[k] == PS_NO_VAR) continue;
        const ps_model_var *v = &m->vars[vs[k]];
        m->grad_hook(m->grad_hook_ctx, m->grads + v->offset, m->grads + v->offset + v->numel);
    }
}

static float *gbuf(const ps_model *m, size_t t) {
    return m->g[m->ops[t - 1].gslot];
}

/* Where a backward kernel writes the gradient of input tensor s: its own
 * buffer the first time, else the scratch buffer, added in by din_done (the
 * tensor fans out). NULL where no gradient is needed (the model's input, a
 * tensor only frozen layers read). */
float *ps_layer_din(ps_model *m, size_t s, bool *acc) {
    *acc = false;
    if (!m->tgrad[s]) return NULL;
    if (!m->ginit[s]) {
        m->ginit[s] = true;
        return gbuf(m, s);
    }
    *acc = true;
    return m->gscr;
}

void ps_layer_din_done(ps_model *m, size_t s, bool acc, size_t n) {
    if (acc) ps_k_add_acc(m->dev, gbuf(m, s), m->gscr, n);
}

float *ps_layer_scratch(ps_model *m) {
    return m->gscr;
}

void ps_layer_pass_grad(ps_model *m, size_t s, const float *dout, size_t n) {
    if (!m->tgrad[s]) return;
    float *g = gbuf(m, s);
    if (!m->ginit[s]) {
        m->ginit[s] = true;
        if (g == dout) return;
        ps_k_zero(m->dev, g, n * sizeof(float));
    }
    ps_k_add_acc(m->dev, g, dout, n);
}

/* The backward pass, ops in reverse topological order; the output's gradient
 * is in its buffer (from the loss). */
static int backward(ps_model *m, const float *x, size_t rows) {
    const ps_pass p = {.m = m, .x = x, .rows = rows, .row0 = 0, .training = true};
    memset(m->ginit, 0, (m->nops + 1) * sizeof *m->ginit);
    m->ginit[m->nrun] = true;
    int rc = PS_OK;
    for (size_t j = m->nrun; j-- > 0 && rc == PS_OK;) {
        ps_op *o = &m->ops[j];
        if (!m->tgrad[j + 1]) continue; /* frozen, and nothing before it trains */
        /* mixed precision: the gradient reaching a layer is in its precision
         * (complete here: every reader of the output has run its backward) */
        if (o->prec != PS_K_PREC_F32)
            ps_k_round(m->dev, o->prec, gbuf(m, j + 1), rows * ps_shape_numel(o->out));
        rc = ps_layer_of(o->kind)->backward(&p, j, o, ps_layer_tensor(&p, o->in_t[0]),
                                            gbuf(m, j + 1));
    }
    return rc;
}

static int check_labels(const ps_model *m, const int32_t *y, size_t n) {
    size_t classes = ps_model_num_classes(m);
    for (size_t i = 0; i < n; i++)
        if (y[i] < 0 || (size_t)y[i] >= classes) return PS_EINVAL;
    return PS_OK;
}

/* Makes x and the labels y or the targets t (host; the other NULL) available
 * on the device: the same pointers on the CPU, copies into d_x and d_y or d_t
 * on CUDA. */
static int stage_batch(ps_model *m, const float *x, const int32_t *y, const float *t, size_t rows,
                       const float **dx, const int32_t **dy, const float **dt) {
    if (!on_cuda(m)) {
        *dx = x;
        *dy = y;
        *dt = t;
        return PS_OK;
    }
    size_t in = ps_model_input_dim(m), cols = m->ops[m->nops - 1].out.c;
    int rc = in ? ps_k_copy_to_dev(m->dev, m->d_x, x, rows * in * sizeof(float)) : PS_OK;
    if (rc == PS_OK && y) rc = ps_k_copy_to_dev(m->dev, m->d_y, y, rows * sizeof(int32_t));
    if (rc == PS_OK && t) rc = ps_k_copy_to_dev(m->dev, m->d_t, t, rows * cols * sizeof(float));
    *dx = m->d_x;
    *dy = y ? m->d_y : NULL;
    *dt = t ? m->d_t : NULL;
    return rc;
}

/* On CUDA, copies the host parameters (just pulled) to the device. */
static int params_in(ps_model *m) {
    if (!on_cuda(m)) return PS_OK;
    return ps_k_copy_to_dev(m->dev, m->d_params, m->params, m->nparams * sizeof(float));
}

/* A batch in training: its labels y or its float targets t (host; the other
 * NULL) and, once staged, their device copies. */
typedef struct {
    const float *x;
    const int32_t *y;
    const float *t;
    const float *dx, *dt;
    const int32_t *dy;
} batch_in;

/* Forward in training mode and the loss; with want_grad, g0 gets its gradient. */
static int train_forward(ps_model *m, batch_in *b, size_t batch, bool want_grad, float *loss,
                         const float **outp) {
    if (batch == 0 || (b->y && check_labels(m, b->y, batch) != PS_OK) ||
        (b->t && m->loss == LOSS_SPARSE_CE) || ps_rows_ready(m, batch, want_grad) != PS_OK)
        return PS_EINVAL;
    int rc = ensure_cap(m, batch);
    if (rc == PS_OK) rc = params_in(m);
    if (rc == PS_OK) rc = stage_batch(m, b->x, b->y, b->t, batch, &b->dx, &b->dy, &b->dt);
    if (rc != PS_OK) return rc;
    rc = forward(m, b->dx, batch, 0, true, want_grad, outp);
    if (rc != PS_OK) return rc;
    return loss_of(m, want_grad ? gbuf(m, m->nrun) : NULL, *outp, b->dy, b->dt, batch, loss);
}

/* A whole train step; correct (labels only) gets the hits. */
static int train_step(ps_model *m, batch_in *b, size_t batch, float *loss, size_t *correct) {
    const float *out;
    int rc = train_forward(m, b, batch, true, loss, &out);
    if (rc == PS_OK && correct) rc = correct_of(m, out, b->dy, b->y, batch, correct);
    if (rc != PS_OK) return rc;
    rc = backward(m, b->dx, batch);
    m->step++;
    int src = ps_k_sync(m->dev);
    if (rc == PS_OK) rc = src;
    if (rc == PS_OK && on_cuda(m))
        rc = ps_k_copy_to_host(m->dev, m->grads, m->d_grads, m->nupdated * sizeof(float));
    if (rc == PS_OK) rc = ps_rows_step_done(m);
    if (rc == PS_OK && on_cuda(m) && m->grad_hook && m->loss_scale <= 0.0f)
        m->grad_hook(m->grad_hook_ctx, m->grads, m->grads + m->nupdated);
    return rc;
}

int ps_model_train_step(ps_model *m, const float *x, const int32_t *y, size_t batch, float *loss,
                        size_t *correct) {
    batch_in b = {.x = x, .y = y};
    return train_step(m, &b, batch, loss, correct);
}

int ps_model_train_step_targets(ps_model *m, const float *x, const float *targets, size_t batch,
                                float *loss) {
    batch_in b = {.x = x, .t = targets};
    return targets ? train_step(m, &b, batch, loss, NULL) : PS_EINVAL;
}

int ps_model_train_loss(ps_model *m, const float *x, const int32_t *y, size_t batch, float *loss) {
    const float *out;
    batch_in b = {.x = x, .y = y};
    int rc = train_forward(m, &b, batch, false, loss, &out);
    return rc == PS_OK ? ps_k_sync(m->dev) : rc;
}

int ps_model_train_loss_targets(ps_model *m, const float *x, const float *targets, size_t batch,
                                float *loss) {
    const float *out;
    batch_in b = {.x = x, .t = targets};
    if (!targets) return PS_EINVAL;
    int rc = train_forward(m, &b, batch, false, loss, &out);
    return rc == PS_OK ? ps_k_sync(m->dev) : rc;
}

/* The final activation the loss folds in (from_logits false), applied to one row. */
static void apply_folded(const ps_model *m, float *row, size_t cols) {
    const ps_op *last = &m->ops[m->nops - 1];
    if (m->nrun == m->nops || last->kind != OP_ACT) return;
    if (last->act == PS_ACT_SOFTMAX) {
        float mx = row[0];
        for (size_t c = 1; c < cols; c++)
            mx = row[c] > mx ? row[c] : mx;
        double sum = 0.0;
        for (size_t c = 0; c < cols; c++) {
            row[c] = expf(row[c] - mx);
            sum += (double)row[c];
        }
        for (size_t c = 0; c < cols; c++)
            row[c] = (float)((double)row[c] / sum);
    } else { /* sigmoid */
        for (size_t c = 0; c < cols; c++)
            row[c] = 1.0f / (1.0f + expf(-row[c]));
    }
}

int ps_model_evaluate(ps_model *m, const float *x, const int32_t *y, size_t n, float *loss,
                      size_t *correct) {
    return ps_model_evaluate_out(m, x, y, n, loss, correct, NULL);
}

/* Evaluation over n samples in chunks, against labels y or float targets t
 * (host; the other NULL): the mean loss, the hits (labels), the sum of
 * squared errors (targets), the outputs (may be NULL). */
static int evaluate(ps_model *m, const float *x, const int32_t *y, const float *t, size_t n,
                    float *loss, size_t *correct, double *sq_err, float *outputs) {
    if (n == 0 || (y && check_labels(m, y, n) != PS_OK) || (t && m->loss == LOSS_SPARSE_CE) ||
        ps_rows_ready(m, n, false) != PS_OK)
        return PS_EINVAL;
    size_t chunk = n < EVAL_CHUNK ? n : EVAL_CHUNK, in_dim = ps_model_input_dim(m);
    size_t cols = m->ops[m->nops - 1].out.c;
    int rc = ensure_cap(m, chunk);
    if (rc == PS_OK) rc = params_in(m);
    if (rc != PS_OK) return rc;
    float *h_out = NULL; /* the chunk's outputs on the host, for the squared errors */
    if (t && !(h_out = malloc(chunk * cols * sizeof *h_out))) return PS_ENOMEM;
    double sum = 0.0, sq = 0.0;
    size_t hits = 0;
    for (size_t i = 0; i < n && rc == PS_OK; i += chunk) {
        size_t rows = n - i < chunk ? n - i : chunk, c = 0;
        float l = 0.0f;
        const float *dx, *dt, *out = NULL;
        const int32_t *dy;
        rc = stage_batch(m, x ? x + i * in_dim : NULL, y ? y + i : NULL, t ? t + i * cols : NULL,
                         rows, &dx, &dy, &dt);
        if (rc == PS_OK) rc = forward(m, dx, rows, i, false, false, &out);
        if (rc == PS_OK) rc = loss_of(m, NULL, out, dy, dt, rows, &l);
        if (rc == PS_OK && y) rc = correct_of(m, out, dy, y + i, rows, &c);
        float *o = outputs ? outputs + i * cols : h_out;
        if (rc == PS_OK && o) rc = ps_k_copy_to_host(m->dev, o, out, rows * cols * sizeof(float));
        for (size_t r = 0; o && rc == PS_OK && r < rows; r++)
            apply_folded(m, o + r * cols, cols);
        for (size_t k = 0; t && rc == PS_OK && k < rows * cols; k++) {
            double e = (double)o[k] - (double)t[i * cols + k];
            sq += e * e;
        }
        sum += (double)l * (double)rows;
        hits += c;
    }
    free(h_out);
    if (rc != PS_OK) return rc;
    *loss = (float)(sum / (double)n);
    if (correct) *correct = hits;
    if (sq_err) *sq_err = sq;
    return ps_k_sync(m->dev);
}

int ps_model_evaluate_out(ps_model *m, const float *x, const int32_t *y, size_t n, float *loss,
                          size_t *correct, float *outputs) {
    return y ? evaluate(m, x, y, NULL, n, loss, correct, NULL, outputs) : PS_EINVAL;
}

int ps_model_evaluate_targets(ps_model *m, const float *x, const float *targets, size_t n,
                              float *loss, double *sq_err, float *outputs) {
    return targets ? evaluate(m, x, NULL, targets, n, loss, NULL, sq_err, outputs) : PS_EINVAL;
}

