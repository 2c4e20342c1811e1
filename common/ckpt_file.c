/* Checkpoint files (see ckpt_file.h): variables to tensors and back, file
 * naming, choosing the newest valid file, and pruning old ones. */
#include "ckpt_file.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "optim.h"
#include "errf.h"
#include "ps_error.h"
#include "tensorfile.h"
#include "utf8.h"

_Static_assert(PS_TF_MAX_RANK >= PS_WIRE_MAX_RANK, "a variable's rank must fit a tensor file");
_Static_assert(PS_TF_MAX_NAME >= PS_WIRE_MAX_NAME + 16, "slot names must fit a tensor file");

/* docs/FORMATS.md: the variable attribute. Version 2 (written): u32 version, the
 * optimizer spec (PS_OPT_ATTR_BYTES), u32 slot count, u64 updates. Version 1 (read
 * too) is the same with the spec's first PS_OPT_ATTR_V1_BYTES only. */
#define ATTR_VERSION 2u
#define ATTR_BYTES (4u + PS_OPT_ATTR_BYTES + 12u)
#define ATTR_V1_BYTES (4u + PS_OPT_ATTR_V1_BYTES + 12u)
_Static_assert(ATTR_V1_BYTES == 56, "attribute version 1 is 56 bytes");
#define SLOT_SUFFIX "@slot"


static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The variable attribute: optimizer spec, slot count and update count. */
static void attr_encode(uint8_t a[ATTR_BYTES], const ps_ckpt_var *v, uint32_t nslots) {
    const unsigned o = 4 + PS_OPT_ATTR_BYTES;
    put32(a, ATTR_VERSION);
    ps_opt_spec_to_attr(&v->opt, a + 4);
    put32(a + o, nslots);
    put32(a + o + 4, (uint32_t)v->updates);
    put32(a + o + 8, (uint32_t)(v->updates >> 32));
}

static int attr_decode(const ps_tf_owned *t, ps_opt_spec *o, uint32_t *nslots, uint64_t *updates,
                       char *err, size_t errlen) {
    const uint8_t *a = t->attr;
    uint32_t version = t->attr_len >= 4 ? get32(a) : 0;
    uint32_t want = version == 1 ? ATTR_V1_BYTES : ATTR_BYTES;
    if (version != 1 && version != ATTR_VERSION)
        return ps_errf(PS_EFORMAT, err, errlen, "variable '%s': unsupported attribute version %u",
                    t->name, version);
    if (t->attr_len != want)
        return ps_errf(PS_EFORMAT, err, errlen,
                       "variable '%s': attribute version %u of %u bytes, want %u", t->name,
                       version, t->attr_len, want);
    char why[160];
    size_t spec_len = want - 16;
    if (ps_opt_spec_from_attr(a + 4, spec_len, o, why, sizeof why) != PS_OK)
        return ps_errf(PS_EFORMAT, err, errlen, "variable '%s': %s", t->name, why);
    const uint8_t *tail = a + 4 + spec_len;
    *nslots = get32(tail);
    *updates = (uint64_t)get32(tail + 4) | (uint64_t)get32(tail + 8) << 32;
    if (*nslots != (uint32_t)ps_optim_num_slots(o->kind))
        return ps_errf(PS_EFORMAT, err, errlen, "variable '%s': %u slots, %s has %d", t->name, *nslots,
                    ps_opt_kind_name(o->kind), ps_optim_num_slots(o->kind));
    return PS_OK;
}

/* ---- file names ---- */

typedef struct {
    uint64_t version, unix_ms;
    char *name; /* owned */
} ckpt_entry;

static int all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return n > 0;
}

/* "ckpt-<20 digits>-<1..20 digits>.pstf": 1 and the numbers, else 0. With tmp set,
 * matches "<that>.tmp.<pid>" instead and gives the pid in *pid. */
static int parse_name(const char *s, int tmp, uint64_t *version, uint64_t *ms, long *pid) {
    if (strncmp(s, "ckpt-", 5) != 0 || !all_digits(s + 5, 20) || s[25] != '-') return 0;
    const char *p = s + 26, *dot = strchr(p, '.');
    if (!dot || dot - p > 20 || !all_digits(p, (size_t)(dot - p))) return 0;
    if (tmp) {
        if (strncmp(dot, ".pstf.tmp.", 10) != 0 || !all_digits(dot + 10, strlen(dot + 10)))
            return 0;
        *pid = strtol(dot + 10, NULL, 10);
    } else if (strcmp(dot, ".pstf") != 0)
        return 0;
    *version = strtoull(s + 5, NULL, 10);
    *ms = strtoull(p, NULL, 10);
    return 1;
}

static int newest_first(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    if (x->version != y->version) return x->version < y->version ? 1 : -1;
    if (x->unix_ms != y->unix_ms) return x->unix_ms < y->unix_ms ? 1 : -1;
    return strcmp(y->name, x->name);
}

static void entries_free(ckpt_entry *e, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

/* Lists dir's checkpoint files newest first. PS_OK, PS_ENOENT (no dir), PS_EIO, PS_ENOMEM. */
static int list_checkpoints(const char *dir, ckpt_entry **out, size_t *n_out, char *err,
                            size_t errlen) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        return ps_errf(e == ENOENT ? PS_ENOENT : PS_EIO, err, errlen, "open directory %s: %s", dir,
                    strerror(e));
    }
    ckpt_entry *v = NULL;
    size_t n = 0, cap = 0;
    int rc = PS_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        ckpt_entry e;
        if (!parse_name(de->d_name, 0, &e.version, &e.unix_ms, NULL)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            ckpt_entry *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = PS_ENOMEM;
                break;
            }
            v = nv;
        }
        if (!(e.name = strdup(de->d_name))) {
            rc = PS_ENOMEM;
            break;
        }
        v[n++] = e;
    }
    closedir(d);
    if (rc != PS_OK) {
        entries_free(v, n);
        return ps_errf(rc, err, errlen, "out of memory");
    }
    if (n > 1) qsort(v, n, sizeof *v, newest_first);
    *out = v;
    *n_out = n;
    return PS_OK;
}

/* ---- save ---- */

/* Keeps `just` and the newest keep-1 others; removes stale temp files. Failures
 * to delete are logged, not returned: the new checkpoint is already safe. */
static void prune(const char *dir, int keep, const char *just) {
    ckpt_entry *e;
    size_t n;
    char err[256], path[4096];
    if (list_checkpoints(dir, &e, &n, err, sizeof err) != PS_OK) {
        PS_WARN("checkpoint pruning: %s", err);
        return;
    }
    int kept = 1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(e[i].name, just) == 0) continue;
        if (kept < keep) {
            kept++;
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
        if (unlink(path) != 0)
            PS_WARN("cannot delete old checkpoint %s: %s", path, strerror(errno));
    }
    entries_free(e, n);

    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        uint64_t ver, ms;
        long pid;
        if (!parse_name(de->d_name, 1, &ver, &ms, &pid)) continue;
        /* ours is not being written now (one save at a time); others only if dead */
        if (pid != (long)getpid() && !(kill((pid_t)pid, 0) != 0 && errno == ESRCH)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) == 0) PS_INFO("removed stale checkpoint temp file %s", path);
    }
    if (d) closedir(d);
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int ps_ckpt_write(const char *dir, int keep, const ps_ckpt_var *vars, size_t n,
                  const ps_tf_tensor *tables, size_t n_tables, const ps_ckpt_meta *m,
                  char *path_out, size_t path_len, uint64_t *bytes, char *err, size_t errlen) {
    if (!dir || !*dir || keep < 1 || (!vars && n) || (!tables && n_tables) || !m)
        return ps_errf(PS_EINVAL, err, errlen, "checkpoint: bad arguments (keep must be >= 1)");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ps_errf(PS_EIO, err, errlen, "create checkpoint directory %s: %s", dir,
                    strerror(errno));

    size_t job_len = strlen(m->job_id);
    if (job_len > PS_WIRE_MAX_JOB_ID)
        return ps_errf(PS_EINVAL, err, errlen, "job id longer than %u bytes", PS_WIRE_MAX_JOB_ID);
    uint64_t layout = n_tables  ? PS_CKPT_LAYOUT_TABLES
                      : job_len ? PS_CKPT_LAYOUT_JOB
                                : PS_CKPT_LAYOUT_VERSION;
    size_t n_tt = n_tables * PS_CKPT_TABLE_TENSORS;
    if (n_tables && n_tt / n_tables != PS_CKPT_TABLE_TENSORS)
        return ps_errf(PS_EINVAL, err, errlen, "too many tables");
    /* "@job" (layouts 2, 3), the tables' tensors and "@tables" (layout 3) */
    size_t nt = (layout != PS_CKPT_LAYOUT_VERSION) + n_tt + (layout == PS_CKPT_LAYOUT_TABLES);
    for (size_t i = 0; i < n; i++) {
        if (strlen(vars[i].name) > PS_WIRE_MAX_NAME)
            return ps_errf(PS_EINVAL, err, errlen, "variable name longer than %u bytes",
                        PS_WIRE_MAX_NAME);
        if (vars[i].rank < 1 || vars[i].rank > PS_WIRE_MAX_RANK)
            return ps_errf(PS_EINVAL, err, errlen, "variable '%s': rank %zu", vars[i].name,
                        vars[i].rank);
        nt += 1 + (size_t)ps_optim_num_slots(vars[i].opt.kind);
    }
    ps_tf_tensor *t = calloc(nt ? nt : 1, sizeof *t);
    uint8_t *attrs = malloc(n ? n * ATTR_BYTES : 1);
    char *names = malloc(nt ? nt * (PS_WIRE_MAX_NAME + 16) : 1);
    size_t plen = strlen(dir) + 64;
    char *path = malloc(plen);
    int rc = PS_OK;
    if (!t || !attrs || !names || !path) {
        rc = ps_errf(PS_ENOMEM, err, errlen, "out of memory");
        goto out;
    }

    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const ps_ckpt_var *v = &vars[i];
        uint32_t ns = (uint32_t)ps_optim_num_slots(v->opt.kind);
        ps_tf_tensor base = {.name = v->name, .rank = (uint32_t)v->rank, .numel = v->numel};
        memcpy(base.shape, v->shape, v->rank * sizeof(uint64_t));
        attr_encode(attrs + i * ATTR_BYTES, v, ns);
        t[k] = base;
        t[k].data = v->w;
        t[k].attr = attrs + i * ATTR_BYTES;
        t[k].attr_len = ATTR_BYTES;
        k++;
        for (uint32_t s = 0; s < ns; s++) {
            char *nm = names + k * (PS_WIRE_MAX_NAME + 16);
            snprintf(nm, PS_WIRE_MAX_NAME + 16, "%s" SLOT_SUFFIX "%u", v->name, s);
            t[k] = base;
            t[k].name = nm;
            t[k].data = v->slots[s];
            k++;
        }
    }

    static const float job_value = 0.0f;
    if (layout != PS_CKPT_LAYOUT_VERSION) /* the job the variables belong to, in its attribute */
        t[k++] = (ps_tf_tensor){.name = PS_CKPT_JOB_TENSOR,
                                .rank = 1,
                                .shape = {1},
                                .data = &job_value,
                                .numel = 1,
                                .attr = job_len ? m->job_id : NULL,
                                .attr_len = (uint32_t)job_len};
    float count[2]; /* the number of tables, a u64 bit-copied into two f32 words */
    if (layout == PS_CKPT_LAYOUT_TABLES) {
        memcpy(t + k, tables, n_tt * sizeof *t);
        k += n_tt;
        uint64_t nt64 = (uint64_t)n_tables;
        memcpy(count, &nt64, sizeof count);
        t[k++] = (ps_tf_tensor){
            .name = PS_CKPT_TABLES_TENSOR, .rank = 1, .shape = {2}, .data = count, .numel = 2};
    }
    ps_tf_header h = {.kind = PS_TF_CHECKPOINT};
    uint64_t ms = m->unix_ms ? m->unix_ms : now_ms();
    h.meta[0] = m->version;
    h.meta[1] = m->updates_applied;
    h.meta[2] = m->shard;
    h.meta[3] = m->num_shards;
    h.meta[4] = m->mode;
    h.meta[5] = m->incarnation;
    h.meta[6] = ms;
    h.meta[7] = layout;
    int off = snprintf(path, plen, "%s/", dir);
    snprintf(path + off, plen - (size_t)off, "ckpt-%020" PRIu64 "-%013" PRIu64 ".pstf", m->version,
             ms);
    rc = ps_tf_write(path, &h, t, nt, err, errlen);
    if (rc != PS_OK) goto out;
    if (path_out && path_len) snprintf(path_out, path_len, "%s", path);
    if (bytes) {
        struct stat sb;
        *bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    }
    prune(dir, keep, path + off);
out:
    free(t);
    free(attrs);
    free(names);
    free(path);
    return rc;
}

/* ---- read ---- */

static int same_shape(const ps_tf_owned *a, const ps_tf_owned *b) {
    return a->rank == b->rank && memcmp(a->shape, b->shape, a->rank * sizeof(uint64_t)) == 0;
}

/* Where f's parts are: the variables are f->t[0 .. *nvars), the tables' tensors
 * f->t[*first_table ..] (*n_tables groups). Layout 1: variables only, no job ("");
 * layout 2: then "@job" naming it (job_id[PS_WIRE_MAX_JOB_ID + 1]); layout 3: then
 * "@job" (its attribute may be empty: no job), the tables, and "@tables" counting
 * them. PS_EFORMAT when it is malformed. */
static int layout_of(const ps_tf_file *f, char *job_id, size_t *nvars, size_t *first_table,
                     size_t *n_tables, char *err, size_t errlen) {
    job_id[0] = '\0';
    *nvars = *first_table = f->n;
    *n_tables = 0;
    uint64_t layout = f->h.meta[7];
    if (layout == PS_CKPT_LAYOUT_VERSION) return PS_OK;
    if (layout != PS_CKPT_LAYOUT_JOB && layout != PS_CKPT_LAYOUT_TABLES)
        return ps_errf(PS_EFORMAT, err, errlen, "unsupported checkpoint layout %" PRIu64, layout);
    size_t job = f->n; /* one past "@job" */
    if (layout == PS_CKPT_LAYOUT_TABLES) {
        const ps_tf_owned *c = f->n ? &f->t[f->n - 1] : NULL;
        if (!c || strcmp(c->name, PS_CKPT_TABLES_TENSOR) != 0 || c->rank != 1 || c->shape[0] != 2 ||
            c->attr_len != 0)
            return ps_errf(PS_EFORMAT, err, errlen,
                           "layout 3 without a valid last tensor '%s' (rank 1, shape [2])",
                           PS_CKPT_TABLES_TENSOR);
        uint64_t nt;
        memcpy(&nt, c->data, sizeof nt);
        if (f->n < 2 || nt > (f->n - 2) / PS_CKPT_TABLE_TENSORS)
            return ps_errf(PS_EFORMAT, err, errlen,
                           "'%s' counts %" PRIu64 " tables, the file has %zu tensors in all",
                           PS_CKPT_TABLES_TENSOR, nt, f->n);
        *n_tables = (size_t)nt;
        job = f->n - 1 - *n_tables * PS_CKPT_TABLE_TENSORS;
    }
    const ps_tf_owned *t = job ? &f->t[job - 1] : NULL;
    size_t min_len = layout == PS_CKPT_LAYOUT_JOB ? 1 : 0;
    if (!t || strcmp(t->name, PS_CKPT_JOB_TENSOR) != 0 || t->attr_len < min_len ||
        t->attr_len > PS_WIRE_MAX_JOB_ID)
        return ps_errf(PS_EFORMAT, err, errlen, "layout %" PRIu64 " without a valid tensor '%s'%s",
                       layout, PS_CKPT_JOB_TENSOR,
                       layout == PS_CKPT_LAYOUT_JOB ? " last" : " before the tables");
    if (t->attr_len) memcpy(job_id, t->attr, t->attr_len);
    job_id[t->attr_len] = '\0';
    if (t->attr_len && !ps_job_id_valid(job_id))
        return ps_errf(PS_EFORMAT, err, errlen, "malformed job id in tensor '%s'", PS_CKPT_JOB_TENSOR);
    *nvars = job - 1;
    *first_table = job;
    return PS_OK;
}

int ps_ckpt_tables_of(const ps_tf_file *f, size_t *first, size_t *n_tables, char *err,
                      size_t errlen) {
    char job_id[PS_WIRE_MAX_JOB_ID + 1];
    size_t nvars;
    return layout_of(f, job_id, &nvars, first, n_tables, err, errlen);
}

/* Checks that f's tensors describe variables and lists them in *out (owned,
 * free()); PS_EFORMAT (reason in err) or PS_ENOMEM otherwise. */
static int parse_vars(const ps_tf_file *f, char *job_id, ps_ckpt_loaded_var **out, size_t *n_out,
                      char *err, size_t errlen) {
    *out = NULL;
    *n_out = 0;
    if (f->h.kind != PS_TF_CHECKPOINT)
        return ps_errf(PS_EFORMAT, err, errlen, "not a checkpoint (file kind %u)", f->h.kind);
    size_t nvars, first_table, n_tables;
    int rc = layout_of(f, job_id, &nvars, &first_table, &n_tables, err, errlen);
    if (rc != PS_OK) return rc;
    ps_ckpt_loaded_var *v = calloc(nvars ? nvars : 1, sizeof *v);
    if (!v) return ps_errf(PS_ENOMEM, err, errlen, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < nvars;) {
        const ps_tf_owned *t = &f->t[i];
        ps_ckpt_loaded_var *lv = &v[n];
        rc = attr_decode(t, &lv->opt, &lv->nslots, &lv->updates, err, errlen);
        if (rc != PS_OK) break;
        /* as a name from the wire (ps_header_decode): Stats replies carry it */
        if (ps_utf8_check(t->name, strlen(t->name), NULL) != strlen(t->name)) {
            rc = ps_errf(PS_EFORMAT, err, errlen, "variable %zu: name is not UTF-8 text", i);
            break;
        }
        if (strlen(t->name) > PS_WIRE_MAX_NAME || t->rank < 1 || t->rank > PS_WIRE_MAX_RANK) {
            rc = ps_errf(PS_EFORMAT, err, errlen, "variable '%s': bad name length or rank %u",
                      t->name, t->rank);
            break;
        }
        for (uint32_t d = 0; d < t->rank && rc == PS_OK; d++)
            if (t->shape[d] == 0)
                rc = ps_errf(PS_EFORMAT, err, errlen, "variable '%s': zero dimension", t->name);
        if (rc == PS_OK && i + 1 + lv->nslots > nvars)
            rc = ps_errf(PS_EFORMAT, err, errlen, "variable '%s': missing slot tensors", t->name);
        for (uint32_t s = 0; s < lv->nslots && rc == PS_OK; s++) {
            const ps_tf_owned *sl = &f->t[i + 1 + s];
            char want[PS_WIRE_MAX_NAME + 16];
            snprintf(want, sizeof want, "%s" SLOT_SUFFIX "%u", t->name, s);
            if (strcmp(sl->name, want) != 0 || !same_shape(sl, t) || sl->attr_len != 0)
                rc = ps_errf(PS_EFORMAT, err, errlen,
                          "variable '%s': tensor %zu is '%s', want "
                          "its slot '%s' of the same shape",
                          t->name, i + 1 + s, sl->name, want);
        }
        if (rc != PS_OK) break;
        lv->name = t->name;
        lv->rank = t->rank;
        lv->shape = t->shape;
        lv->numel = t->numel;
        lv->tensor = i;
        n++;
        i += 1 + lv->nslots;
    }
    if (rc != PS_OK) {
        free(v);
        return rc;
    }
    *out = v;
    *n_out = n;
    return PS_OK;
}

int ps_ckpt_read_newest(const char *dir, ps_ckpt_accept_fn accept, void *user, ps_ckpt_meta *m,
                        char *path_out, size_t path_len, char *err, size_t errlen) {
    if (!dir || !accept)
        return ps_errf(PS_EINVAL, err, errlen, "checkpoint read: needs a directory and a reader");
    ckpt_entry *e;
    size_t n;
    int rc = list_checkpoints(dir, &e, &n, err, errlen);
    if (rc != PS_OK) return rc;
    size_t skipped = 0, unreadable = 0;
    char path[4096], why[512];
    rc = PS_ENOENT;
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
        ps_tf_file f;
        ps_ckpt_loaded_var *vars = NULL;
        size_t nv = 0;
        ps_ckpt_meta got;
        memset(&got, 0, sizeof got);
        int r = ps_tf_read(path, &f, why, sizeof why);
        if (r == PS_OK) r = parse_vars(&f, got.job_id, &vars, &nv, why, sizeof why);
        if (r == PS_OK) {
            got.version = f.h.meta[0];
            got.updates_applied = f.h.meta[1];
            got.shard = f.h.meta[2];
            got.num_shards = f.h.meta[3];
            got.mode = f.h.meta[4];
            got.incarnation = f.h.meta[5];
            got.unix_ms = f.h.meta[6];
            r = accept(user, &f, vars, nv, &got, why, sizeof why);
        }
        free(vars);
        ps_tf_file_free(&f);
        if (r == PS_OK) {
            if (m) *m = got;
            if (path_out && path_len) snprintf(path_out, path_len, "%s", path);
            rc = PS_OK;
            break;
        }
        if (r != PS_EFORMAT && r != PS_ENOENT && r != PS_EIO) {
            rc = ps_errf(r, err, errlen, "%s: %s", path, why);
            break;
        }
        PS_WARN("checkpoint %s skipped: %s", path, why);
        skipped++;
        if (r != PS_EFORMAT && r != PS_ENOENT) unreadable++; /* ENOENT: deleted meanwhile */
    }
    entries_free(e, n);
    if (rc == PS_ENOENT && unreadable > 0)
        rc = ps_errf(PS_EIO, err, errlen, "no valid checkpoint in %s: %zu of %zu could not be read",
                  dir, unreadable, n);
    else if (rc == PS_ENOENT)
        ps_errf(PS_ENOENT, err, errlen, "no valid checkpoint in %s (%zu skipped)", dir, skipped);
    return rc;
}
