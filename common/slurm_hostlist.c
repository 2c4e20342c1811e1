/* Slurm hostlist expansion and tasks-per-node counts (see slurm_hostlist.h). */
#include "slurm_hostlist.h"

#include "ps_error.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NUMBER 1000000000L /* 10^9 */
#define MAX_GROUPS 8           /* bracket groups in one item */
#define MAX_NAME 256           /* one host name */

typedef struct {
    long lo, hi;
    int width; /* digits to pad to (0: none) */
} range;

typedef struct {
    range *r;
    size_t n, cap;
    size_t count; /* numbers in the group */
} group;

typedef struct {
    char **v;
    size_t n, cap;
} host_vec;

static int push_host(host_vec *h, const char *name) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 16;
        char **v = realloc(h->v, cap * sizeof *v);
        if (!v) return PS_ENOMEM;
        h->v = v, h->cap = cap;
    }
    if (!(h->v[h->n] = strdup(name))) return PS_ENOMEM;
    h->n++;
    return PS_OK;
}

/* Parses digits [s, e) into *v; returns 0, or -1 when not all digits or too big. */
static int parse_number(const char *s, const char *e, long *v) {
    if (s == e || e - s > 10) return -1;
    long x = 0;
    for (const char *p = s; p < e; p++) {
        if (!isdigit((unsigned char)*p)) return -1;
        x = x * 10 + (*p - '0');
    }
    if (x > MAX_NUMBER) return -1;
    *v = x;
    return 0;
}

/* Parses the inside of one bracket group [s, e) ("01-04,07"). */
static int parse_group(const char *s, const char *e, group *g, char *err, size_t errlen) {
    const char *p = s;
    for (;;) {
        const char *c = memchr(p, ',', (size_t)(e - p));
        const char *end = c ? c : e;
        const char *dash = memchr(p, '-', (size_t)(end - p));
        range r;
        int bad = dash ? parse_number(p, dash, &r.lo) || parse_number(dash + 1, end, &r.hi)
                       : parse_number(p, end, &r.lo);
        if (!dash) r.hi = r.lo;
        if (bad || r.lo > r.hi) {
            snprintf(err, errlen, "bad range '%.*s' in '[%.*s]'", (int)(end - p), p,
                     (int)(e - s), s);
            return PS_EINVAL;
        }
        const char *lo_end = dash ? dash : end;
        r.width = (lo_end - p > 1 && *p == '0') ? (int)(lo_end - p) : 0;
        if (g->n == g->cap) {
            size_t cap = g->cap ? 2 * g->cap : 4;
            range *v = realloc(g->r, cap * sizeof *v);
            if (!v) return PS_ENOMEM;
            g->r = v, g->cap = cap;
        }
        g->r[g->n++] = r;
        g->count += (size_t)(r.hi - r.lo + 1);
        if (g->count > PS_SLURM_MAX_HOSTS) {
            snprintf(err, errlen, "'[%.*s]' names more than %d hosts", (int)(e - s), s,
                     PS_SLURM_MAX_HOSTS);
            return PS_EINVAL;
        }
        if (!c) return PS_OK;
        p = c + 1;
    }
}

/* The text pieces and groups of one item: text[0] group[0] text[1] ... text[n_groups]. */
typedef struct {
    const char *text[MAX_GROUPS + 1];
    size_t text_len[MAX_GROUPS + 1];
    group g[MAX_GROUPS];
    size_t n_groups;
} item;

/* Appends the hosts of it, group k on, to h with the name so far in buf[0..len). */
static int expand_from(const item *it, size_t k, char *buf, size_t len, host_vec *h, char *err,
                       size_t errlen) {
    if (len + it->text_len[k] >= MAX_NAME) {
        snprintf(err, errlen, "a host name is longer than %d bytes", MAX_NAME - 1);
        return PS_EINVAL;
    }
    memcpy(buf + len, it->text[k], it->text_len[k]);
    len += it->text_len[k];
    if (k == it->n_groups) {
        buf[len] = '\0';
        if (h->n >= PS_SLURM_MAX_HOSTS) {
            snprintf(err, errlen, "the list names more than %d hosts", PS_SLURM_MAX_HOSTS);
            return PS_EINVAL;
        }
        return push_host(h, buf);
    }
    const group *g = &it->g[k];
    for (size_t i = 0; i < g->n; i++)
        for (long v = g->r[i].lo; v <= g->r[i].hi; v++) {
            int w = snprintf(buf + len, MAX_NAME - len, "%0*ld", g->r[i].width, v);
            if (w < 0 || len + (size_t)w >= MAX_NAME) {
                snprintf(err, errlen, "a host name is longer than %d bytes", MAX_NAME - 1);
                return PS_EINVAL;
            }
            int rc = expand_from(it, k + 1, buf, len + (size_t)w, h, err, errlen);
            if (rc != PS_OK) return rc;
        }
    return PS_OK;
}

/* Expands one item [s, e) (no top-level comma inside) onto h. */
static int expand_item(const char *s, const char *e, host_vec *h, char *err, size_t errlen) {
    item it;
    memset(&it, 0, sizeof it);
    int rc = PS_OK;
    const char *p = s;
    it.text[0] = p;
    while (p < e && rc == PS_OK) {
        if (*p == ']') {
            snprintf(err, errlen, "unbalanced ']' in '%.*s'", (int)(e - s), s);
            rc = PS_EINVAL;
        } else if (*p == '[') {
            const char *close = memchr(p, ']', (size_t)(e - p));
            const char *open2 = memchr(p + 1, '[', (size_t)(e - p - 1));
            if (!close || (open2 && open2 < close)) {
                snprintf(err, errlen, "unbalanced '[' in '%.*s'", (int)(e - s), s);
                rc = PS_EINVAL;
            } else if (it.n_groups == MAX_GROUPS) {
                snprintf(err, errlen, "more than %d bracket groups in '%.*s'", MAX_GROUPS,
                         (int)(e - s), s);
                rc = PS_EINVAL;
            } else {
                it.text_len[it.n_groups] = (size_t)(p - it.text[it.n_groups]);
                rc = parse_group(p + 1, close, &it.g[it.n_groups], err, errlen);
                it.n_groups++;
                p = close + 1;
                it.text[it.n_groups] = p;
            }
        } else if (isspace((unsigned char)*p) || !isprint((unsigned char)*p)) {
            snprintf(err, errlen, "blank or control character in '%.*s'", (int)(e - s), s);
            rc = PS_EINVAL;
        } else {
            p++;
        }
    }
    if (rc == PS_OK) {
        it.text_len[it.n_groups] = (size_t)(e - it.text[it.n_groups]);
        char buf[MAX_NAME];
        rc = expand_from(&it, 0, buf, 0, h, err, errlen);
    }
    for (size_t i = 0; i < MAX_GROUPS; i++)
        free(it.g[i].r);
    return rc;
}

int ps_slurm_hostlist_expand(const char *list, char ***hosts, size_t *n_hosts, char *err,
                             size_t errlen) {
    if (err && errlen) err[0] = '\0';
    char dummy[1];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    if (hosts) *hosts = NULL;
    if (n_hosts) *n_hosts = 0;
    if (!list || !hosts || !n_hosts) {
        snprintf(err, errlen, "no host list");
        return PS_EINVAL;
    }
    if (!*list) {
        snprintf(err, errlen, "empty host list");
        return PS_EINVAL;
    }
    host_vec h = {0};
    int rc = PS_OK;
    const char *p = list;
    while (rc == PS_OK) {
        /* the item ends at the first comma outside brackets */
        const char *e = p;
        int depth = 0;
        while (*e && (depth || *e != ',')) {
            if (*e == '[') depth++;
            if (*e == ']' && depth) depth--;
            e++;
        }
        if (e == p) {
            snprintf(err, errlen, "empty item in host list '%s'", list);
            rc = PS_EINVAL;
            break;
        }
        rc = expand_item(p, e, &h, err, errlen);
        if (!*e) break;
        p = e + 1;
    }
    if (rc != PS_OK) {
        if (rc == PS_ENOMEM) snprintf(err, errlen, "out of memory");
        ps_slurm_hosts_free(h.v, h.n);
        return rc;
    }
    *hosts = h.v;
    *n_hosts = h.n;
    return PS_OK;
}

void ps_slurm_hosts_free(char **hosts, size_t n_hosts) {
    if (!hosts) return;
    for (size_t i = 0; i < n_hosts; i++)
        free(hosts[i]);
    free(hosts);
}

int ps_slurm_tasks_per_node(const char *spec, size_t n_nodes, int *counts, char *err,
                            size_t errlen) {
    char dummy[1];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    err[0] = '\0';
    if (!spec || !*spec) {
        snprintf(err, errlen, "empty tasks-per-node list");
        return PS_EINVAL;
    }
    size_t node = 0;
    const char *p = spec;
    for (;;) {
        char *end;
        if (!isdigit((unsigned char)*p)) goto bad;
        long tasks = strtol(p, &end, 10);
        long times = 1;
        if (tasks < 1 || tasks > PS_SLURM_MAX_HOSTS) goto bad;
        p = end;
        if (strncmp(p, "(x", 2) == 0) {
            if (!isdigit((unsigned char)p[2])) goto bad;
            times = strtol(p + 2, &end, 10);
            if (times < 1 || times > PS_SLURM_MAX_HOSTS || *end != ')') goto bad;
            p = end + 1;
        }
        for (long i = 0; i < times; i++) {
            if (node == n_nodes) {
                snprintf(err, errlen, "'%s' names more nodes than the node list's %zu", spec,
                         n_nodes);
                return PS_EINVAL;
            }
            counts[node++] = (int)tasks;
        }
        if (!*p) break;
        if (*p != ',' || !p[1]) goto bad;
        p++;
    }
    if (node != n_nodes) {
        snprintf(err, errlen, "'%s' names %zu nodes, the node list %zu", spec, node, n_nodes);
        return PS_EINVAL;
    }
    return PS_OK;
bad:
    snprintf(err, errlen, "bad tasks-per-node list '%s' (expected e.g. \"2(x3),1\")", spec);
    return PS_EINVAL;
}
