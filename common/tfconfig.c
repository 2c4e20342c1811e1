/* Cluster spec from TensorFlow's TF_CONFIG JSON (parsed with cJSON) or from flag lists,
 * the global worker numbering, and host:port validation. */
#include "tfconfig.h"

#include "ps_error.h"
#include "replicas.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest address string accepted anywhere (a DNS name is at most 253 bytes). */
#define MAX_ADDR_LEN 300
/* Longest host part ps_parse_hostport accepts. */
#define MAX_HOST_LEN 253

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen, const char *fmt,
                                                          ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Copies at most 40 bytes of s into buf for an error message, with anything that is not
 * printable ASCII replaced by '?', so the reason stays on one line. */
static const char *preview(const char *s, char *buf, size_t buflen) {
    size_t i = 0;
    for (; s[i] && i + 4 < buflen && i < 40; i++) {
        unsigned char ch = (unsigned char)s[i];
        buf[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (s[i] && i + 3 < buflen) {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
    return buf;
}

static void cluster_init(ps_cluster *c) {
    memset(c, 0, sizeof *c);
    c->task_index = -1;
}

static void free_list(char **list, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void ps_cluster_free(ps_cluster *c) {
    if (!c) return;
    free_list(c->ps, c->n_ps);
    free_list(c->worker, c->n_worker);
    free_list(c->chief, c->n_chief);
    cluster_init(c);
}

/* Looks up key (case-sensitive) in obj. Returns PS_OK with *item NULL when absent, or
 * PS_EFORMAT when the key appears twice (JSON parsers disagree on which one wins). */
static int get_unique(const cJSON *obj, const char *key, const cJSON **item, const char *where,
                      char *err, size_t errlen) {
    *item = NULL;
    const cJSON *child;
    cJSON_ArrayForEach(child, obj) {
        if (child->string && strcmp(child->string, key) == 0) {
            if (*item) {
                set_err(err, errlen, "%s%s: duplicate key", where, key);
                return PS_EFORMAT;
            }
            *item = child;
        }
    }
    return PS_OK;
}

/* Shape check for a TF_CONFIG entry: "host:port" or "[v6]:port" with a non-empty host and
 * port and no blanks or control characters. The port is not checked to be numeric. */
static int entry_looks_like_hostport(const char *s) {
    size_t len = strlen(s);
    if (len == 0 || len > MAX_ADDR_LEN) return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch >= 0x7f) return 0;
    }
    const char *port;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close == s + 1 || close[1] != ':') return 0;
        port = close + 2;
    } else {
        const char *colon = strchr(s, ':');
        if (!colon || colon == s) return 0;
        port = colon + 1;
    }
    return port[0] != '\0' && strchr(port, ':') == NULL && strchr(port, '/') == NULL;
}

const char *ps_ipc_path(const char *s) {
    return s && strncmp(s, "ipc://", 6) == 0 ? s + 6 : NULL;
}

int ps_check_ipc_path(const char *path, char *err, size_t errlen) {
    char pv[48];
    size_t len = path ? strlen(path) : 0;
    if (len == 0) {
        set_err(err, errlen, "empty Unix socket path");
        return PS_EINVAL;
    }
    if (len > PS_IPC_PATH_MAX) {
        set_err(err, errlen,
                "Unix socket path \"%s\" is %zu bytes; at most %d fit in sun_path (use a "
                "shorter directory)",
                preview(path, pv, sizeof pv), len, PS_IPC_PATH_MAX);
        return PS_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)path[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == ',' || ch == '|') {
            set_err(err, errlen,
                    "Unix socket path \"%s\" has a blank, comma, '|' or control character",
                    preview(path, pv, sizeof pv));
            return PS_EINVAL;
        }
    }
    return PS_OK;
}

/* A shard address in a ps list: "ipc://PATH" with a usable PATH. */
static int ipc_entry_ok(const char *s) {
    const char *path = ps_ipc_path(s);
    return path && ps_check_ipc_path(path, NULL, 0) == PS_OK;
}

/* A ps entry of TF_CONFIG: one address or a replica group "ADDR|ADDR|..." (replicas.h),
 * each a host:port shape or a usable ipc://PATH. 1 when it is; else 0 with why the group
 * is malformed in why ("" when an address is). */
static int ps_entry_ok(const char *s, char *why, size_t whylen) {
    ps_replica_part parts[PS_MAX_REPLICAS];
    size_t n;
    why[0] = '\0';
    if (ps_replicas_split(s, parts, &n, why, whylen) != PS_OK) return 0;
    for (size_t k = 0; k < n; k++) {
        char addr[MAX_ADDR_LEN + 1];
        if (parts[k].len > MAX_ADDR_LEN) return 0;
        memcpy(addr, parts[k].at, parts[k].len);
        addr[parts[k].len] = '\0';
        if (!entry_looks_like_hostport(addr) && !ipc_entry_ok(addr)) return 0;
    }
    return 1;
}

/* Reads cluster.<job> into a newly allocated list of strings (NULL, 0 when absent). */
static int parse_job(const cJSON *cluster, const char *job, char ***list, size_t *n, char *err,
                     size_t errlen) {
    const cJSON *arr;
    int rc = get_unique(cluster, job, &arr, "cluster.", err, errlen);
    if (rc != PS_OK) return rc;
    if (!arr) return PS_OK;
    if (!cJSON_IsArray(arr)) {
        set_err(err, errlen, "cluster.%s: must be an array of \"host:port\" strings", job);
        return PS_EFORMAT;
    }
    size_t count = (size_t)cJSON_GetArraySize(arr);
    if (count == 0 && strcmp(job, "ps") == 0) { /* shards forgotten, or all-reduce? */
        set_err(err, errlen, "cluster.ps: an empty list is ambiguous: for all-reduce (mirrored, "
                             "multi_worker_mirrored) leave \"ps\" out; for the parameter-server "
                             "strategy list its tasks, \"ps\": [\"host:port\", ...]");
        return PS_EINVAL;
    }
    if (count == 0) return PS_OK;
    char **out = calloc(count, sizeof *out);
    if (!out) {
        set_err(err, errlen, "cluster.%s: out of memory", job);
        return PS_ENOMEM;
    }
    size_t i = 0;
    const cJSON *e;
    char pv[48];
    cJSON_ArrayForEach(e, arr) {
        if (!cJSON_IsString(e) || !e->valuestring) {
            set_err(err, errlen, "cluster.%s[%zu]: must be a \"host:port\" string", job, i);
            rc = PS_EFORMAT;
            break;
        }
        int is_ps = strcmp(job, "ps") == 0;
        char why[96] = "";
        if (is_ps ? !ps_entry_ok(e->valuestring, why, sizeof why)
                  : !entry_looks_like_hostport(e->valuestring)) {
            if (why[0])
                set_err(err, errlen, "cluster.%s[%zu]: \"%s\": %s", job, i,
                        preview(e->valuestring, pv, sizeof pv), why);
            else
                set_err(err, errlen, "cluster.%s[%zu]: \"%s\" is not host:port%s", job, i,
                        preview(e->valuestring, pv, sizeof pv),
                        is_ps ? " or ipc://PATH (replicas: ADDR|ADDR)" : "");
            rc = PS_EINVAL;
            break;
        }
        out[i] = strdup(e->valuestring);
        if (!out[i]) {
            set_err(err, errlen, "cluster.%s: out of memory", job);
            rc = PS_ENOMEM;
            break;
        }
        i++;
    }
    if (rc != PS_OK) {
        free_list(out, i);
        return rc;
    }
    *list = out;
    *n = i;
    return PS_OK;
}

/* Reads the optional "task" object into c->task_type / c->task_index and checks it against
 * the jobs already parsed into c. */
static int parse_task(const cJSON *task, const cJSON *cluster, ps_cluster *c, char *err,
                      size_t errlen) {
    if (!cJSON_IsObject(task)) {
        set_err(err, errlen, "task: must be an object like {\"type\": \"worker\", \"index\": 0}");
        return PS_EFORMAT;
    }
    const cJSON *type, *index;
    int rc = get_unique(task, "type", &type, "task.", err, errlen);
    if (rc == PS_OK) rc = get_unique(task, "index", &index, "task.", err, errlen);
    if (rc != PS_OK) return rc;
    if (!type) {
        set_err(err, errlen, "task.type: missing");
        return PS_EINVAL;
    }
    if (!cJSON_IsString(type) || !type->valuestring) {
        set_err(err, errlen, "task.type: must be a string");
        return PS_EFORMAT;
    }
    long idx = 0; /* TensorFlow's resolver defaults a missing index to 0 */
    if (index) {
        if (!cJSON_IsNumber(index)) {
            set_err(err, errlen, "task.index: must be an integer");
            return PS_EFORMAT;
        }
        double d = index->valuedouble;
        if (!isfinite(d) || d != floor(d)) {
            set_err(err, errlen, "task.index: must be an integer");
            return PS_EFORMAT;
        }
        if (d < 0) {
            set_err(err, errlen, "task.index: %.0f is negative", d);
            return PS_EINVAL;
        }
        if (d > INT_MAX) {
            set_err(err, errlen, "task.index: %.0f is out of range", d);
            return PS_EINVAL;
        }
        idx = (long)d;
    }

    const char *t = type->valuestring;
    size_t n_job;
    int bounded = 1;
    char pv[48];
    if (strcmp(t, "ps") == 0) {
        n_job = c->n_ps;
    } else if (strcmp(t, "worker") == 0) {
        n_job = c->n_worker;
    } else if (strcmp(t, "chief") == 0) {
        n_job = c->n_chief;
    } else if (strcmp(t, "evaluator") == 0) {
        /* The evaluator runs outside the training cluster; bound it only if listed. */
        const cJSON *ev;
        rc = get_unique(cluster, "evaluator", &ev, "cluster.", err, errlen);
        if (rc != PS_OK) return rc;
        n_job = cJSON_IsArray(ev) ? (size_t)cJSON_GetArraySize(ev) : 0;
        bounded = n_job > 0;
    } else {
        set_err(err, errlen,
                "task.type: \"%s\" is not a job in cluster (expected ps, worker, chief or "
                "evaluator)",
                preview(t, pv, sizeof pv));
        return PS_EINVAL;
    }
    if (bounded && n_job == 0) {
        set_err(err, errlen, "task.type: \"%s\" is not a job in cluster", t);
        return PS_EINVAL;
    }
    if (!index && bounded && n_job > 1) {
        /* TensorFlow would take 0: every task without an index would be task 0 */
        set_err(err, errlen, "task.index: missing, and job \"%s\" has %zu entries (say which)", t,
                n_job);
        return PS_EINVAL;
    }
    if (bounded && (size_t)idx >= n_job) {
        set_err(err, errlen, "task.index: %ld is out of range for job \"%s\" (%zu entries)", idx, t,
                n_job);
        return PS_EINVAL;
    }
    snprintf(c->task_type, sizeof c->task_type, "%s", t);
    c->task_index = (int)idx;
    return PS_OK;
}

int ps_cluster_from_tfconfig(const char *json, ps_cluster *out, char *err, size_t errlen) {
    set_err(err, errlen, "%s", "");
    if (!out) {
        set_err(err, errlen, "TF_CONFIG: no output cluster");
        return PS_EINVAL;
    }
    cluster_init(out);
    if (!json) {
        set_err(err, errlen, "TF_CONFIG: no JSON text");
        return PS_EINVAL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        size_t off = (end && end >= json) ? (size_t)(end - json) : 0;
        set_err(err, errlen, "TF_CONFIG: not valid JSON (near byte %zu)", off);
        return PS_EFORMAT;
    }
    int rc = PS_OK;
    const cJSON *cluster = NULL, *task = NULL;
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "TF_CONFIG: must be a JSON object");
        rc = PS_EFORMAT;
        goto done;
    }
    rc = get_unique(root, "cluster", &cluster, "", err, errlen);
    if (rc == PS_OK) rc = get_unique(root, "task", &task, "", err, errlen);
    if (rc != PS_OK) goto done;
    if (!cluster) {
        const cJSON *sparse;
        rc = get_unique(root, "sparseCluster", &sparse, "", err, errlen);
        if (rc != PS_OK) goto done;
        /* Kubeflow's TFJob with enableDynamicWorker writes "sparseCluster": each task sees
         * only itself and the shards, so the job's size is unknown */
        set_err(err, errlen, "%s",
                sparse ? "cluster: missing; \"sparseCluster\" (TFJob enableDynamicWorker) is "
                         "not supported: every task needs the whole cluster"
                       : "cluster: missing");
        rc = PS_EINVAL;
        goto done;
    }
    if (!cJSON_IsObject(cluster)) {
        set_err(err, errlen, "cluster: must be an object of job name -> address list");
        rc = PS_EFORMAT;
        goto done;
    }
    rc = parse_job(cluster, "ps", &out->ps, &out->n_ps, err, errlen);
    if (rc == PS_OK) rc = parse_job(cluster, "worker", &out->worker, &out->n_worker, err, errlen);
    if (rc == PS_OK) rc = parse_job(cluster, "chief", &out->chief, &out->n_chief, err, errlen);
    if (rc != PS_OK) goto done;
    if (out->n_chief > 1) {
        set_err(err, errlen, "cluster.chief: has %zu entries; there is at most one chief",
                out->n_chief);
        rc = PS_EINVAL;
        goto done;
    }
    if (task) rc = parse_task(task, cluster, out, err, errlen);

done:
    cJSON_Delete(root);
    if (rc != PS_OK) ps_cluster_free(out);
    return rc;
}

/* Splits one comma-separated flag value into out[*n]; each item must be a usable address
 * (host:port, or with allow_ipc, a ps list, also ipc://PATH or a replica group
 * "ADDR|ADDR|..."). */
static int parse_csv(const char *csv, const char *what, int allow_ipc, char ***list, size_t *n,
                     char *err, size_t errlen) {
    if (!csv) return PS_OK;
    const char *p = csv;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0') return PS_OK;

    size_t cap = 1;
    for (const char *q = csv; *q; q++)
        cap += (*q == ',');
    char **out = calloc(cap, sizeof *out);
    if (!out) {
        set_err(err, errlen, "%s: out of memory", what);
        return PS_ENOMEM;
    }
    size_t count = 0;
    int rc = PS_OK;
    p = csv;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *b = p, *e = comma ? comma : p + strlen(p);
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        size_t len = (size_t)(e - b);
        char *item = malloc(len + 1);
        if (!item) {
            set_err(err, errlen, "%s: out of memory", what);
            rc = PS_ENOMEM;
            break;
        }
        memcpy(item, b, len);
        item[len] = '\0';
        char pv[48];
        if (len == 0) {
            set_err(err, errlen, "%s: item %zu is empty", what, count);
            rc = PS_EINVAL;
        } else if (allow_ipc && strchr(item, '|')) { /* a shard's replica group */
            char why[320];
            if (ps_check_shard_entry(item, why, sizeof why) != PS_OK) {
                set_err(err, errlen, "%s: item %zu: %s", what, count, why);
                rc = PS_EINVAL;
            }
        } else if (allow_ipc && ps_ipc_path(item)) {
            if (!ipc_entry_ok(item)) {
                char why[160];
                ps_check_ipc_path(ps_ipc_path(item), why, sizeof why);
                set_err(err, errlen, "%s: item %zu: %s", what, count, why);
                rc = PS_EINVAL;
            }
        } else if (ps_parse_hostport(item, NULL, 0, NULL) != PS_OK) {
            set_err(err, errlen, "%s: item %zu \"%s\" is not host:port with a numeric port%s", what,
                    count, preview(item, pv, sizeof pv), allow_ipc ? " or ipc://PATH" : "");
            rc = PS_EINVAL;
        }
        if (rc != PS_OK) {
            free(item);
            break;
        }
        out[count++] = item;
        if (!comma) break;
        p = comma + 1;
    }
    if (rc != PS_OK) {
        free_list(out, count);
        return rc;
    }
    *list = out;
    *n = count;
    return PS_OK;
}

int ps_cluster_from_lists(const char *ps_csv, const char *worker_csv, ps_cluster *out, char *err,
                          size_t errlen) {
    set_err(err, errlen, "%s", "");
    if (!out) {
        set_err(err, errlen, "cluster lists: no output cluster");
        return PS_EINVAL;
    }
    cluster_init(out);
    int rc = parse_csv(ps_csv, "ps list", 1, &out->ps, &out->n_ps, err, errlen);
    if (rc == PS_OK)
        rc = parse_csv(worker_csv, "worker list", 0, &out->worker, &out->n_worker, err, errlen);
    if (rc != PS_OK) ps_cluster_free(out);
    return rc;
}

unsigned ps_cluster_num_workers(const ps_cluster *c) {
    if (!c) return 0;
    return (unsigned)(c->n_worker + c->n_chief);
}

int ps_cluster_worker_index(const ps_cluster *c, unsigned *index) {
    if (!c || !index || c->task_index < 0) return PS_EINVAL;
    if (strcmp(c->task_type, "chief") == 0) {
        if (c->n_chief == 0) return PS_EINVAL;
        *index = 0;
        return PS_OK;
    }
    if (strcmp(c->task_type, "worker") == 0) {
        if ((size_t)c->task_index >= c->n_worker) return PS_EINVAL;
        *index = (unsigned)(c->n_chief + (size_t)c->task_index);
        return PS_OK;
    }
    return PS_EINVAL;
}

/* A DNS name (letters, digits, '-', '_', '.'); an all-digit dotted name must be IPv4. */
static int host_name_ok(const char *h) {
    int all_numeric = 1;
    for (const char *p = h; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (!(isalnum(ch) || ch == '-' || ch == '_' || ch == '.')) return 0;
        if (!(isdigit(ch) || ch == '.')) all_numeric = 0;
    }
    if (all_numeric) {
        struct in_addr a4;
        return inet_pton(AF_INET, h, &a4) == 1;
    }
    return h[0] != '.' && h[0] != '-';
}

/* An IPv6 literal, optionally with a "%zone" suffix. */
static int host_v6_ok(const char *h) {
    char addr[64];
    const char *pct = strchr(h, '%');
    size_t alen = pct ? (size_t)(pct - h) : strlen(h);
    if (alen == 0 || alen >= sizeof addr) return 0;
    memcpy(addr, h, alen);
    addr[alen] = '\0';
    if (pct) {
        if (pct[1] == '\0') return 0;
        for (const char *p = pct + 1; *p; p++) {
            unsigned char ch = (unsigned char)*p;
            if (!(isalnum(ch) || ch == '-' || ch == '_' || ch == '.')) return 0;
        }
    }
    struct in6_addr a6;
    return inet_pton(AF_INET6, addr, &a6) == 1;
}

int ps_parse_hostport(const char *s, char *host, size_t hostlen, int *port) {
    if (!s) return PS_EINVAL;
    const char *hb, *he, *pp;
    int v6 = 0;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') return PS_EINVAL;
        hb = s + 1;
        he = close;
        pp = close + 2;
        v6 = 1;
    } else {
        const char *colon = strchr(s, ':');
        if (!colon) return PS_EINVAL;
        hb = s;
        he = colon;
        pp = colon + 1;
    }
    size_t hlen = (size_t)(he - hb);
    if (hlen == 0 || hlen > MAX_HOST_LEN) return PS_EINVAL;
    char h[MAX_HOST_LEN + 1];
    memcpy(h, hb, hlen);
    h[hlen] = '\0';
    if (!(v6 ? host_v6_ok(h) : host_name_ok(h))) return PS_EINVAL;

    size_t ndig = 0;
    long value = 0;
    for (; pp[ndig]; ndig++) {
        if (!isdigit((unsigned char)pp[ndig]) || ndig >= 5) return PS_EINVAL;
        value = value * 10 + (pp[ndig] - '0');
    }
    if (ndig == 0 || value > 65535) return PS_EINVAL;

    if (host) {
        if (hostlen < hlen + 1) return PS_EINVAL;
        memcpy(host, h, hlen + 1);
    }
    if (port) *port = (int)value;
    return PS_OK;
}
