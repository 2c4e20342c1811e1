/* The exact ROC AUC (auc.h): sort by score, sum the negatives' ranks. */
#include "auc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

static int reserve(ps_auc *a, size_t n) {
    if (a->n + n <= a->cap) return PS_OK;
    size_t cap = a->cap ? a->cap : 4096;
    while (cap < a->n + n)
        cap *= 2;
    float *s = realloc(a->score, cap * sizeof *s);
    if (!s) return PS_ENOMEM;
    a->score = s;
    unsigned char *l = realloc(a->label, cap);
    if (!l) return PS_ENOMEM;
    a->label = l;
    a->cap = cap;
    return PS_OK;
}

/* Appends n scores; the labels' n places are left to the caller (NULL: no memory). */
static unsigned char *append(ps_auc *a, const float *score, size_t n) {
    if (reserve(a, n) != PS_OK) return NULL;
    memcpy(a->score + a->n, score, n * sizeof *score);
    unsigned char *l = a->label + a->n;
    a->n += n;
    return l;
}

int ps_auc_add(ps_auc *a, const float *score, const int32_t *label, size_t n) {
    unsigned char *l = append(a, score, n);
    if (!l) return PS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        l[i] = label[i] != 0;
    return PS_OK;
}

int ps_auc_add_f(ps_auc *a, const float *score, const float *label, size_t n) {
    unsigned char *l = append(a, score, n);
    if (!l) return PS_ENOMEM;
    for (size_t i = 0; i < n; i++)
        l[i] = label[i] > 0.5f;
    return PS_OK;
}

/* A sortable key of a float: the bits made monotonic (NaN sorts above +inf). */
static uint32_t key(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static int by_key(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a >> 32 > b >> 32) - (a >> 32 < b >> 32);
}

double ps_auc_value(const ps_auc *a) {
    size_t pos = 0;
    for (size_t i = 0; i < a->n; i++)
        pos += a->label[i];
    size_t neg = a->n - pos;
    if (!pos || !neg) return -1;
    /* (key << 32 | label): sorted by score; ties grouped, their order does not matter */
    uint64_t *v = malloc(a->n * sizeof *v);
    if (!v) return -2;
    for (size_t i = 0; i < a->n; i++)
        v[i] = (uint64_t)key(a->score[i]) << 32 | a->label[i];
    qsort(v, a->n, sizeof *v, by_key);
    /* each positive beats the negatives below it, and half those tied with it */
    double wins = 0, below = 0;
    for (size_t i = 0; i < a->n;) {
        size_t j = i, p = 0;
        while (j < a->n && v[j] >> 32 == v[i] >> 32)
            p += v[j++] & 1;
        double q = (double)(j - i - p);
        wins += (double)p * (below + 0.5 * q);
        below += q;
        i = j;
    }
    free(v);
    return wins / ((double)pos * (double)neg);
}

void ps_auc_free(ps_auc *a) {
    free(a->score);
    free(a->label);
    memset(a, 0, sizeof *a);
}
