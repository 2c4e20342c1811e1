/* 64-bit ids from table fields (ids.h). */
#include "ids.h"

#include "ps_error.h"

#define FNV_BASIS 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
#define GOLDEN 0x9e3779b97f4a7c15ull

static uint64_t finish(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t ps_id_hash(const char *s, size_t len, size_t position) {
    uint64_t h = FNV_BASIS ^ ((uint64_t)(position + 1) * GOLDEN);
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= FNV_PRIME;
    }
    return finish(h);
}

uint64_t ps_id_missing(size_t position) {
    return ps_id_hash("", 0, position);
}

/* field without the spaces around it: [*start, *start + *len). */
static void trim(const char *field, const char **start, size_t *len) {
    while (*field == ' ') field++;
    size_t n = 0;
    while (field[n]) n++;
    while (n && field[n - 1] == ' ') n--;
    *start = field, *len = n;
}

int ps_id_parse(const char *field, size_t position, uint64_t *out) {
    const char *s;
    size_t n;
    trim(field, &s, &n);
    if (n == 0) {
        *out = ps_id_missing(position);
        return PS_OK;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return PS_EFORMAT;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return PS_EFORMAT;
        v = v * 10 + d;
    }
    *out = v;
    return PS_OK;
}

int ps_id_of(const char *field, size_t position, int hash, uint64_t *out) {
    if (!hash) return ps_id_parse(field, position, out);
    const char *s;
    size_t n;
    trim(field, &s, &n);
    *out = n ? ps_id_hash(s, n, position) : ps_id_missing(position);
    return PS_OK;
}
