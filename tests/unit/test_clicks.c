/* The synthetic click log of psctl data synth-clicks (psctl/clicks.c): the same bytes
 * for a seed (and the first rows whatever the count), others for another seed; the Zipf
 * ranks at their law (the head's share, rank 1 against rank 2, the tail beyond 2^30 of
 * 2^40 reached); a field's ids a bijection of its ranks, distinct between fields; the
 * click rate plausible and the true probabilities calibrated; the AUC ceiling the exact
 * AUC of the probabilities (sorted here) within its stated bound, between 0.7 and 0.9;
 * the histogram AUC on known cases; the header and the parameters file. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clicks.h"
#include "testutil.h"

/* The TSV of n rows for seed, in memory. */
static char *write_rows(uint64_t seed, uint64_t n, size_t *len, ps_clicks_stats *st) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    ck_assert_ptr_nonnull(f);
    ps_clicks g;
    ps_clicks_init(&g, seed);
    ck_assert_int_eq(ps_clicks_write(&g, n, f, st), 0);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

START_TEST(deterministic) {
    size_t la, lb, lc, ld;
    ps_clicks_stats sa, sb, sc, sd;
    char *a = write_rows(5, 3000, &la, &sa), *b = write_rows(5, 3000, &lb, &sb);
    char *c = write_rows(6, 3000, &lc, &sc), *d = write_rows(5, 1000, &ld, &sd);
    ck_assert_uint_eq(la, lb);
    ck_assert_mem_eq(a, b, la);
    ck_assert(sa.auc == sb.auc && sa.clicks == sb.clicks && sa.rows == 3000);
    ck_assert(lc != la || memcmp(a, c, la) != 0);
    ck_assert_uint_lt(ld, la); /* the first 1000 rows of 3000 are the 1000 rows */
    ck_assert_mem_eq(a, d, ld);
    /* the header, and 40 fields a row */
    const char *head = "label\ti1\ti2\ti3\ti4\ti5\ti6\ti7\ti8\ti9\ti10\ti11\ti12\ti13\tc1\tc2\t";
    ck_assert_int_eq(strncmp(a, head, strlen(head)), 0);
    size_t lines = 0, tabs = 0;
    for (size_t i = 0; i < la; i++) lines += a[i] == '\n', tabs += a[i] == '\t';
    ck_assert_uint_eq(lines, 3001);
    ck_assert_uint_eq(tabs, 3001 * 39);
    free(a), free(b), free(c), free(d);
}
END_TEST

/* sum_{k=1..N} k^-s for N = 2^40: the first terms, then the integral of the rest. */
static double zipf_norm(double s) {
    double h = 0;
    const double m = 1e6;
    for (double k = 1; k <= m; k++) h += pow(k, -s);
    double a = m + 0.5, b = 1099511627776.0 + 0.5;
    return h + (pow(a, 1 - s) - pow(b, 1 - s)) / (s - 1);
}

START_TEST(zipf_law) {
    ps_clicks g;
    ps_clicks_init(&g, 11);
    const size_t n = 400000;
    size_t one = 0, two = 0, head = 0, mid = 0, tail = 0;
    uint64_t st = 99;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = ps_clicks_zipf(&g, &st);
        ck_assert(k >= 1 && k <= (1ull << 40));
        one += k == 1, two += k == 2;
        head += k <= 10;
        mid += k > 1000 && k <= 1010;
        tail += k > (1ull << 30);
    }
    double hn = zipf_norm(PS_CLICKS_ZIPF_EXPONENT);
    double p1 = 1 / hn;
    double sd = sqrt(p1 * (1 - p1) / (double)n);
    ck_assert_msg(fabs((double)one / (double)n - p1) < 5 * sd, "rank 1: %g, want %g",
                  (double)one / (double)n, p1);
    double ratio = (double)one / (double)two, want = pow(2, PS_CLICKS_ZIPF_EXPONENT);
    ck_assert_msg(fabs(ratio - want) < 0.08 * want, "rank 1 / rank 2: %g, want %g", ratio, want);
    /* the head far heavier than the tail: ranks 1..10 against 1001..1010 (1000^1.1 x) */
    ck_assert_msg((double)head > 300.0 * (double)mid, "head %zu, ranks 1001..1010 %zu", head, mid);
    /* ranks beyond 2^30: the integral's share */
    double pt = (pow(1073741824.5, -0.1) - pow(1099511627776.5, -0.1)) / 0.1 / hn;
    ck_assert_msg(fabs((double)tail / (double)n - pt) < 0.1 * pt, "beyond 2^30: %g, want %g",
                  (double)tail / (double)n, pt);
}
END_TEST

static int by_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(ids_per_field) {
    ps_clicks g;
    ps_clicks_init(&g, 3);
    /* a bijection: the first 2^18 ranks and the last 2^10 give distinct ids, */
    const size_t m = (1 << 18) + (1 << 10);
    uint64_t *ids = malloc(m * sizeof *ids);
    for (size_t i = 0; i < m; i++) {
        uint64_t k = i < (1 << 18) ? i + 1 : (1ull << 40) - (i - (1 << 18));
        ids[i] = ps_clicks_id(&g, 7, k);
        ck_assert_uint_lt(ids[i], 1ull << 40);
    }
    qsort(ids, m, sizeof *ids, by_u64);
    for (size_t i = 1; i < m; i++) ck_assert(ids[i] != ids[i - 1]);
    free(ids);
    /* and undone by ps_clicks_rank_of, both ways, over the whole space */
    uint64_t st = 5;
    for (int i = 0; i < 100000; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t v = st >> 24, k = v + 1; /* 40 bits */
        int f = i % PS_CLICKS_CAT;
        ck_assert(ps_clicks_rank_of(&g, f, ps_clicks_id(&g, f, k)) == k);
        ck_assert(ps_clicks_id(&g, f, ps_clicks_rank_of(&g, f, v)) == v);
    }
    ck_assert(ps_clicks_rank_of(&g, 0, ps_clicks_id(&g, 0, 1ull << 40)) == 1ull << 40);
    ps_clicks_row r;
    size_t seen = 0;
    uint64_t id_of_rank1[PS_CLICKS_CAT] = {0};
    for (uint64_t i = 0; i < 20000; i++) {
        ps_clicks_row_make(&g, i, &r);
        for (int f = 0; f < PS_CLICKS_CAT; f++) {
            ck_assert_uint_lt(r.id[f], 1ull << 40);
            if (r.rank[f] != 1) continue;
            if (id_of_rank1[f] == 0) id_of_rank1[f] = r.id[f] + 1, seen++;
            ck_assert(id_of_rank1[f] == r.id[f] + 1); /* one rank, one id */
        }
        ck_assert(r.p > 0 && r.p < 1 && (r.label == 0 || r.label == 1));
    }
    ck_assert_uint_eq(seen, PS_CLICKS_CAT);
    for (int f = 0; f < PS_CLICKS_CAT; f++) /* the frequent id differs between fields */
        for (int e = 0; e < f; e++) ck_assert(id_of_rank1[f] != id_of_rank1[e]);
    ck_assert(id_of_rank1[0] != 1); /* rank 1 is not id 0 */
}
END_TEST

typedef struct {
    double p;
    int label;
} scored;

static int by_p(const void *a, const void *b) {
    double x = ((const scored *)a)->p, y = ((const scored *)b)->p;
    return x < y ? -1 : x > y;
}

/* The exact AUC: ranks with ties averaged (Mann-Whitney). */
static double exact_auc(scored *s, size_t n) {
    qsort(s, n, sizeof *s, by_p);
    double rank_sum = 0, pos = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j].p == s[i].p) j++;
        double mid = (double)(i + j + 1) / 2; /* ranks i+1 .. j */
        for (size_t k = i; k < j; k++)
            if (s[k].label) rank_sum += mid, pos++;
        i = j;
    }
    double neg = (double)n - pos;
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

START_TEST(ceiling) {
    const size_t n = 40000;
    ps_clicks g;
    ps_clicks_init(&g, 1);
    scored *s = malloc(n * sizeof *s);
    ps_clicks_row r;
    double psum = 0;
    size_t clicks = 0;
    for (size_t i = 0; i < n; i++) {
        ps_clicks_row_make(&g, i, &r);
        s[i] = (scored){r.p, r.label};
        psum += r.p, clicks += (size_t)r.label;
    }
    double rate = (double)clicks / (double)n;
    ck_assert_msg(rate > 0.1 && rate < 0.4, "click rate %g", rate);
    /* calibrated: the labels are drawn from the probabilities */
    ck_assert_msg(fabs(rate - psum / (double)n) < 4 * sqrt(0.25 / (double)n), "rate %g, mean p %g",
                  rate, psum / (double)n);
    size_t len;
    ps_clicks_stats st;
    char *text = write_rows(1, n, &len, &st);
    free(text);
    ck_assert_uint_eq(st.clicks, clicks);
    double want = exact_auc(s, n);
    ck_assert_msg(fabs(st.auc - want) <= st.auc_bound + 1e-12, "AUC %.9f, exact %.9f, bound %g",
                  st.auc, want, st.auc_bound);
    ck_assert_msg(st.auc_bound < 1e-4, "bound %g", st.auc_bound);
    ck_assert_msg(st.auc > 0.7 && st.auc < 0.9, "AUC ceiling %g", st.auc);
    free(s);
}
END_TEST

START_TEST(auc_histogram) {
    ps_auc_hist h;
    double bound;
    ck_assert_int_eq(ps_auc_hist_init(&h, 100), 0);
    ck_assert(ps_auc_hist_value(&h, &bound) == 0.5); /* no pairs */
    for (int i = 0; i < 10; i++) ps_auc_hist_add(&h, 0.1 + 0.01 * i, 0);
    for (int i = 0; i < 10; i++) ps_auc_hist_add(&h, 0.6 + 0.01 * i, 1);
    ck_assert(ps_auc_hist_value(&h, &bound) == 1.0 && bound == 0);
    ps_auc_hist_free(&h);
    ck_assert_int_eq(ps_auc_hist_init(&h, 100), 0);
    ps_auc_hist_add(&h, 0.9, 0), ps_auc_hist_add(&h, 0.1, 1);
    ck_assert(ps_auc_hist_value(&h, &bound) == 0.0);
    ps_auc_hist_add(&h, 0.5, 0), ps_auc_hist_add(&h, 0.5, 1); /* one bin: a tie */
    ps_auc_hist_add(&h, 1.0, 1), ps_auc_hist_add(&h, -1.0, 0); /* clamped to the ends */
    /* pos {0.1, 0.5, 1.0} x neg {-1, 0.5, 0.9}: won 1 + 1 + 3 = 5 (+ 0.5 for the tie) of 9 */
    ck_assert(fabs(ps_auc_hist_value(&h, &bound) - 5.5 / 9) < 1e-12);
    ck_assert(fabs(bound - 0.5 / 9) < 1e-12);
    ps_auc_hist_free(&h);
}
END_TEST

START_TEST(parameters_file) {
    ps_clicks g;
    ps_clicks_init(&g, 42);
    ps_clicks_stats st = {.rows = 10, .clicks = 3, .auc = 0.81, .auc_bound = 1e-6};
    char *buf = NULL;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(ps_clicks_write_params(&g, &st, f), 0);
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    ck_assert_msg(j != NULL, "not JSON: %s", buf);
    ck_assert(cJSON_GetObjectItem(j, "seed")->valuedouble == 42);
    ck_assert(cJSON_GetObjectItem(j, "auc_ceiling")->valuedouble == 0.81);
    ck_assert(cJSON_GetObjectItem(j, "label_rate")->valuedouble == 0.3);
    ck_assert(cJSON_GetObjectItem(j, "zipf_exponent")->valuedouble == 1.1);
    ck_assert(cJSON_GetObjectItem(j, "id_bits")->valuedouble == 40);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "numeric_weight")), 13);
    const cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "numeric_weight"), 4);
    ck_assert(fabs(w->valuedouble - g.weight[4]) < 1e-8);
    cJSON_Delete(j);
    free(buf);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("clicks");
    TCase *tc = tcase_create("clicks");
    tcase_add_test(tc, deterministic);
    tcase_add_test(tc, zipf_law);
    tcase_add_test(tc, ids_per_field);
    tcase_add_test(tc, ceiling);
    tcase_add_test(tc, auc_histogram);
    tcase_add_test(tc, parameters_file);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
