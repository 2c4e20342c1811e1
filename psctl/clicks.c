/* The synthetic click log (clicks.h). */
#include "clicks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ull
#define ID_MASK ((1ull << PS_CLICKS_ID_BITS) - 1)

static uint64_t mix(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t next(uint64_t *st) { /* splitmix64 */
    return mix(*st += GOLDEN);
}

/* Uniform in (0, 1), 53 bits. */
static double uniform(uint64_t *st) {
    return ((double)(next(st) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller, one of the pair). */
static double normal(uint64_t *st) {
    double u = uniform(st), v = uniform(st);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ---- Zipf by rejection-inversion (Hoermann and Derflinger; as Apache Commons RNG's
 * RejectionInversionZipfSampler) ---- */

static double helper1(double x) { /* log1p(x) / x */
    return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

static double helper2(double x) { /* expm1(x) / x */
    return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

static double zh(double x) {
    return exp(-PS_CLICKS_ZIPF_EXPONENT * log(x));
}

static double zh_integral(double x) {
    double lx = log(x);
    return helper2((1 - PS_CLICKS_ZIPF_EXPONENT) * lx) * lx;
}

static double zh_integral_inverse(double x) {
    double t = x * (1 - PS_CLICKS_ZIPF_EXPONENT);
    if (t < -1) t = -1;
    return exp(helper1(t) * x);
}

uint64_t ps_clicks_zipf(const ps_clicks *g, uint64_t *st) {
    for (;;) {
        double u = g->h_n + uniform(st) * (g->h_x1 - g->h_n);
        double x = zh_integral_inverse(u);
        double kd = floor(x + 0.5);
        if (kd < 1) kd = 1;
        if (kd > g->n) kd = g->n;
        if (kd - x <= g->s_cut || u >= zh_integral(kd + 0.5) - zh(kd)) return (uint64_t)kd;
    }
}

/* ---- the generator ---- */

void ps_clicks_init(ps_clicks *g, uint64_t seed) {
    memset(g, 0, sizeof *g);
    g->seed = seed;
    uint64_t st = mix(seed ^ 0x636c69636b73ull); /* "clicks" */
    for (int f = 0; f < PS_CLICKS_CAT; f++) g->key[f] = next(&st);
    for (int j = 0; j < PS_CLICKS_NUM; j++) {
        g->mu[j] = -0.5 + 3.5 * uniform(&st);
        g->sigma[j] = 0.8 + 0.7 * uniform(&st);
        g->weight[j] = 0.35 * normal(&st);
    }
    g->n = (double)(1ull << PS_CLICKS_ID_BITS);
    g->h_x1 = zh_integral(1.5) - 1;
    g->h_n = zh_integral(g->n + 0.5);
    g->s_cut = 2 - zh_integral_inverse(zh_integral(2.5) - zh(2));
}

#define MUL_A GOLDEN
#define MUL_B 0xbf58476d1ce4e5b9ull

uint64_t ps_clicks_id(const ps_clicks *g, int f, uint64_t k) { /* a keyed bijection */
    uint64_t x = ((k - 1) ^ g->key[f]) & ID_MASK;
    x = (x * MUL_A) & ID_MASK; /* odd multipliers, xor-shifts: each step a bijection */
    x ^= x >> 19;
    x = (x * MUL_B) & ID_MASK;
    x ^= x >> 21;
    return x;
}

static uint64_t inverse_of_odd(uint64_t a) { /* a * inverse = 1 mod 2^64 (Newton) */
    uint64_t v = a;
    for (int i = 0; i < 6; i++) v *= 2 - a * v;
    return v;
}

uint64_t ps_clicks_rank_of(const ps_clicks *g, int f, uint64_t id) {
    uint64_t x = id & ID_MASK;
    x ^= x >> 21; /* 2 * 21 >= 40 bits: one step undoes it */
    x = (x * inverse_of_odd(MUL_B)) & ID_MASK;
    x ^= (x >> 19) ^ (x >> 38);
    x = (x * inverse_of_odd(MUL_A)) & ID_MASK;
    return ((x ^ g->key[f]) & ID_MASK) + 1;
}

/* w(f, id): the hidden weight of a categorical value. */
static double cat_weight(const ps_clicks *g, int f, uint64_t id) {
    uint64_t st = mix(g->seed ^ mix(((uint64_t)f + 1) * GOLDEN ^ mix(id + 0x5eed)));
    return PS_CLICKS_CAT_WEIGHT_SD * normal(&st);
}

void ps_clicks_row_make(const ps_clicks *g, uint64_t r, ps_clicks_row *out) {
    uint64_t st = mix(g->seed ^ mix((r + 1) * GOLDEN));
    double z = PS_CLICKS_INTERCEPT;
    for (int j = 0; j < PS_CLICKS_NUM; j++) {
        double e = exp(g->mu[j] + g->sigma[j] * normal(&st));
        uint64_t x = e < 1e15 ? (uint64_t)e : (uint64_t)1e15;
        out->num[j] = x;
        double c = g->mu[j] > 0 ? g->mu[j] : 0;
        z += g->weight[j] * (log1p((double)x) - c) / g->sigma[j];
    }
    for (int f = 0; f < PS_CLICKS_CAT; f++) {
        out->rank[f] = ps_clicks_zipf(g, &st);
        out->id[f] = ps_clicks_id(g, f, out->rank[f]);
        z += cat_weight(g, f, out->id[f]);
    }
    out->p = 1.0 / (1.0 + exp(-z));
    out->label = uniform(&st) < out->p;
}

/* ---- the AUC ceiling ---- */

int ps_auc_hist_init(ps_auc_hist *h, size_t bins) {
    memset(h, 0, sizeof *h);
    h->pos = calloc(bins, sizeof *h->pos);
    h->neg = calloc(bins, sizeof *h->neg);
    if (!h->pos || !h->neg) {
        ps_auc_hist_free(h);
        return -1;
    }
    h->bins = bins;
    return 0;
}

void ps_auc_hist_add(ps_auc_hist *h, double score, int label) {
    double b = score * (double)h->bins;
    size_t i = b <= 0 ? 0 : b >= (double)h->bins ? h->bins - 1 : (size_t)b;
    if (label) h->pos[i]++, h->n_pos++;
    else h->neg[i]++, h->n_neg++;
}

double ps_auc_hist_value(const ps_auc_hist *h, double *bound) {
    if (bound) *bound = 0;
    if (!h->n_pos || !h->n_neg) return 0.5;
    double below = 0, win = 0, tie = 0; /* negatives in lower bins; pairs won; pairs in a bin */
    for (size_t i = 0; i < h->bins; i++) {
        win += (double)h->pos[i] * below;
        tie += (double)h->pos[i] * (double)h->neg[i];
        below += (double)h->neg[i];
    }
    double pairs = (double)h->n_pos * (double)h->n_neg;
    if (bound) *bound = 0.5 * tie / pairs;
    return (win + 0.5 * tie) / pairs;
}

void ps_auc_hist_free(ps_auc_hist *h) {
    free(h->pos);
    free(h->neg);
    memset(h, 0, sizeof *h);
}

/* ---- writing ---- */

int ps_clicks_write(const ps_clicks *g, uint64_t n, FILE *f, ps_clicks_stats *st) {
    memset(st, 0, sizeof *st);
    ps_auc_hist h;
    if (ps_auc_hist_init(&h, PS_CLICKS_AUC_BINS) != 0) return -1;
    int bad = fputs("label", f) < 0;
    for (int j = 0; j < PS_CLICKS_NUM; j++) bad |= fprintf(f, "\ti%d", j + 1) < 0;
    for (int k = 0; k < PS_CLICKS_CAT; k++) bad |= fprintf(f, "\tc%d", k + 1) < 0;
    bad |= fputc('\n', f) == EOF;
    ps_clicks_row row;
    for (uint64_t r = 0; r < n && !bad; r++) {
        ps_clicks_row_make(g, r, &row);
        bad |= fprintf(f, "%d", row.label) < 0;
        for (int j = 0; j < PS_CLICKS_NUM; j++)
            bad |= fprintf(f, "\t%llu", (unsigned long long)row.num[j]) < 0;
        for (int k = 0; k < PS_CLICKS_CAT; k++)
            bad |= fprintf(f, "\t%010llx", (unsigned long long)row.id[k]) < 0;
        bad |= fputc('\n', f) == EOF;
        ps_auc_hist_add(&h, row.p, row.label);
        st->clicks += (uint64_t)row.label;
        st->rows++;
    }
    st->auc = ps_auc_hist_value(&h, &st->auc_bound);
    ps_auc_hist_free(&h);
    return bad ? -2 : 0;
}

int ps_clicks_write_params(const ps_clicks *g, const ps_clicks_stats *st, FILE *f) {
    int bad = fprintf(f,
                      "{\n  \"generator\": \"psctl data synth-clicks\",\n"
                      "  \"seed\": %llu,\n  \"rows\": %llu,\n  \"clicks\": %llu,\n"
                      "  \"label_rate\": %.6f,\n"
                      "  \"auc_ceiling\": %.6f,\n  \"auc_ceiling_error_bound\": %.3g,\n"
                      "  \"auc_ceiling_is\": \"the ROC AUC of the true click probabilities "
                      "against the drawn labels (a histogram of %zu bins)\",\n"
                      "  \"columns\": \"label, i1..i%d (numeric), c1..c%d (categorical, 10 hex "
                      "digits), tab separated\",\n"
                      "  \"categorical_fields\": %d,\n  \"id_bits\": %d,\n"
                      "  \"zipf_exponent\": %.3g,\n"
                      "  \"ids\": \"Zipf rank k (1..2^%d) through a bijection of the %d-bit "
                      "space keyed by the seed and the field\",\n"
                      "  \"numeric_fields\": %d,\n"
                      "  \"numeric\": \"floor(exp(mu_j + sigma_j * N(0,1)))\",\n"
                      "  \"label_model\": \"P(label = 1) = sigmoid(intercept + sum_f w(f, id_f) "
                      "+ sum_j weight_j * (log1p(x_j) - max(mu_j, 0)) / sigma_j), w(f, id) = "
                      "categorical_weight_sd * N(0,1) from a hash of (seed, f, id)\",\n"
                      "  \"intercept\": %.6g,\n  \"categorical_weight_sd\": %.6g,\n",
                      (unsigned long long)g->seed, (unsigned long long)st->rows,
                      (unsigned long long)st->clicks,
                      st->rows ? (double)st->clicks / (double)st->rows : 0.0, st->auc,
                      st->auc_bound, PS_CLICKS_AUC_BINS, PS_CLICKS_NUM, PS_CLICKS_CAT,
                      PS_CLICKS_CAT, PS_CLICKS_ID_BITS, PS_CLICKS_ZIPF_EXPONENT,
                      PS_CLICKS_ID_BITS, PS_CLICKS_ID_BITS, PS_CLICKS_NUM, PS_CLICKS_INTERCEPT,
                      PS_CLICKS_CAT_WEIGHT_SD) < 0;
    const char *names[3] = {"mu", "sigma", "weight"};
    const double *vals[3] = {g->mu, g->sigma, g->weight};
    for (int a = 0; a < 3; a++) {
        bad |= fprintf(f, "  \"numeric_%s\": [", names[a]) < 0;
        for (int j = 0; j < PS_CLICKS_NUM; j++)
            bad |= fprintf(f, "%s%.9g", j ? ", " : "", vals[a][j]) < 0;
        bad |= fprintf(f, "]%s\n", a < 2 ? "," : "") < 0;
    }
    bad |= fputs("}\n", f) < 0;
    return bad ? -2 : 0;
}
