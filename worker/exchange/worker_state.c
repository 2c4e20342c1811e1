/* A worker's own state files (see worker_state.h). */
#include "worker_state.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "crc32c.h"
#include "errf.h"
#include "ps_error.h"
#include "tensorfile.h"

/* meta[] of a worker state file (kind 3) */
enum { META_STEPS = 0, META_WORKERS, META_INDEX, META_JOB_CRC, META_JOB_LEN };

int ps_wstate_add(ps_wstate *s, const char *name, float *data, size_t numel, uint64_t *count) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        ps_wstate_entry *e = realloc(s->e, cap * sizeof *e);
        if (!e) return PS_ENOMEM;
        s->e = e;
        s->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return PS_ENOMEM;
    s->e[s->n++] = (ps_wstate_entry){copy, data, numel, count};
    return PS_OK;
}

void ps_wstate_free(ps_wstate *s) {
    for (size_t i = 0; i < s->n; i++)
        free(s->e[i].name);
    free(s->e);
    *s = (ps_wstate){0};
}

static uint32_t job_crc(const char *job_id) {
    return job_id ? ps_crc32c(job_id, strlen(job_id)) : 0;
}

static void file_name(char *buf, size_t n, const ps_wstate_where *w, uint64_t steps) {
    snprintf(buf, n, "%s/worker-%u-step-%020" PRIu64 ".pstf", w->dir, w->index, steps);
}

/* "worker-<index>-step-<20 digits>.pstf" of this worker: 1 and its steps; its temp
 * file (".pstf.tmp.<pid>", left by a crash while writing; one writer per worker): 2;
 * else 0. */
static int own_file(const char *name, unsigned index, uint64_t *steps) {
    char prefix[64];
    int k = snprintf(prefix, sizeof prefix, "worker-%u-step-", index);
    size_t len = strlen(name), base = (size_t)k + 20 + 5;
    if (strncmp(name, prefix, (size_t)k) != 0 || len < base ||
        strncmp(name + base - 5, ".pstf", 5) != 0)
        return 0;
    if (len > base) return strncmp(name + base, ".tmp.", 5) == 0 ? 2 : 0;
    uint64_t v = 0;
    for (const char *p = name + k; p < name + k + 20; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *steps = v;
    return 1;
}

static int cmp_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Removes this worker's files of steps after `steps` (a run that was
 * abandoned when the job resumed earlier) and all but the newest `keep`.
 * Failures only leave files behind. */
static void prune(const ps_wstate_where *w, uint64_t steps) {
    DIR *d = opendir(w->dir);
    if (!d) return;
    uint64_t *found = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    char path[4200];
    while ((de = readdir(d)) != NULL) {
        uint64_t s;
        int own = own_file(de->d_name, w->index, &s);
        if (!own) continue;
        if (own == 2) { /* a temp file of an earlier, interrupted save */
            snprintf(path, sizeof path, "%s/%s", w->dir, de->d_name);
            remove(path);
            continue;
        }
        if (s > steps) {
            file_name(path, sizeof path, w, s);
            remove(path);
            continue;
        }
        if (n == cap) {
            uint64_t *f = realloc(found, (cap = cap ? 2 * cap : 16) * sizeof *f);
            if (!f) break;
            found = f;
        }
        found[n++] = s;
    }
    closedir(d);
    qsort(found, n, sizeof *found, cmp_desc);
    for (size_t i = w->keep ? w->keep : 1; i < n; i++) {
        file_name(path, sizeof path, w, found[i]);
        remove(path);
    }
    free(found);
}

int ps_wstate_save(const ps_wstate *s, const ps_wstate_where *w, uint64_t steps, char *path_out,
                   size_t path_len, char *err, size_t errlen) {
    if (mkdir(w->dir, 0755) != 0 && errno != EEXIST)
        return ps_errf(PS_EIO, err, errlen, "cannot make %s: %s", w->dir, strerror(errno));
    ps_tf_tensor *t = calloc(s->n ? s->n : 1, sizeof *t);
    unsigned char(*counts)[8] = calloc(s->n ? s->n : 1, sizeof *counts);
    if (!t || !counts) {
        free(t), free(counts);
        return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    }
    for (size_t i = 0; i < s->n; i++) {
        const ps_wstate_entry *e = &s->e[i];
        t[i] = (ps_tf_tensor){.name = e->name, .rank = 1, .data = e->data, .numel = e->numel};
        t[i].shape[0] = e->numel;
        if (e->count) { /* little-endian u64 in the attribute */
            for (int b = 0; b < 8; b++)
                counts[i][b] = (unsigned char)(*e->count >> (8 * b));
            t[i].attr = counts[i];
            t[i].attr_len = 8;
        }
    }
    ps_tf_header h = {.kind = PS_TF_WORKER_STATE};
    h.meta[META_STEPS] = steps;
    h.meta[META_WORKERS] = w->workers;
    h.meta[META_INDEX] = w->index;
    h.meta[META_JOB_CRC] = job_crc(w->job_id);
    h.meta[META_JOB_LEN] = w->job_id ? strlen(w->job_id) : 0;
    char path[4200];
    file_name(path, sizeof path, w, steps);
    int rc = ps_tf_write(path, &h, t, s->n, err, errlen);
    free(t), free(counts);
    if (rc != PS_OK) return rc;
    prune(w, steps);
    if (path_out) snprintf(path_out, path_len, "%s", path);
    return PS_OK;
}

/* Whether f holds s's entries, in order, with the same sizes. */
static int same_entries(const ps_wstate *s, const ps_tf_file *f, char *why, size_t whylen) {
    if (f->n != s->n)
        return ps_errf(PS_ESHAPE, why, whylen, "it holds %zu entries, this worker %zu", f->n,
                       s->n);
    for (size_t i = 0; i < s->n; i++) {
        const ps_tf_owned *t = &f->t[i];
        const ps_wstate_entry *e = &s->e[i];
        if (strcmp(t->name, e->name) != 0 || t->numel != e->numel ||
            (e->count && t->attr_len != 8))
            return ps_errf(PS_ESHAPE, why, whylen, "entry %zu is '%s' [%zu], this worker's '%s' "
                           "[%zu]", i, t->name, t->numel, e->name, e->numel);
    }
    return PS_OK;
}

int ps_wstate_load(const ps_wstate *s, const ps_wstate_where *w, uint64_t steps, char *path_out,
                   size_t path_len, char *why, size_t whylen) {
    char path[4200];
    file_name(path, sizeof path, w, steps);
    if (path_out) snprintf(path_out, path_len, "%s", path);
    ps_tf_file f = {0};
    int rc = ps_tf_read(path, &f, why, whylen);
    if (rc == PS_ENOENT)
        return ps_errf(PS_ENOENT, why, whylen, "no state of this worker at step %" PRIu64
                       " in %s", steps, w->dir);
    if (rc != PS_OK) return rc;
    const uint64_t *m = f.h.meta;
    size_t jl = w->job_id ? strlen(w->job_id) : 0;
    if (f.h.kind != PS_TF_WORKER_STATE || m[META_STEPS] != steps || m[META_INDEX] != w->index)
        rc = ps_errf(PS_EFORMAT, why, whylen, "%s is not this worker's state at step %" PRIu64,
                     path, steps);
    else if (m[META_WORKERS] != w->workers)
        rc = ps_errf(PS_ESHAPE, why, whylen, "%s was written by a job of %" PRIu64 " workers, "
                     "this one has %u", path, m[META_WORKERS], w->workers);
    else if (m[META_JOB_CRC] != job_crc(w->job_id) || m[META_JOB_LEN] != jl)
        rc = ps_errf(PS_ESHAPE, why, whylen, "%s belongs to another job (--job-id)", path);
    else
        rc = same_entries(s, &f, why, whylen);
    for (size_t i = 0; rc == PS_OK && i < s->n; i++) {
        const ps_wstate_entry *e = &s->e[i];
        if (e->numel) memcpy(e->data, f.t[i].data, e->numel * sizeof(float));
        if (!e->count) continue;
        const unsigned char *a = f.t[i].attr;
        uint64_t c = 0;
        for (int b = 7; b >= 0; b--)
            c = c << 8 | a[b];
        *e->count = c;
    }
    ps_tf_file_free(&f);
    return rc;
}
