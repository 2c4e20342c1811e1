/* Command lines and environments of psctl local's children (see child_argv.h). */
#include "child_argv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void psctl_argv_add(psctl_argv *a, const char *fmt, ...) {
    if (a->oom) return;
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) {
            a->oom = 1;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    if (!s) {
        a->oom = 1;
        return;
    }
    a->v[a->n++] = s;
    a->v[a->n] = NULL;
}

void psctl_argv_free(psctl_argv *a) {
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    a->v = NULL;
    a->n = a->cap = a->oom = 0;
}

char *psctl_checkpoint_subdir(const char *dir, int shard) {
    char *p;
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') /* "ckpt/" -> "ckpt/ps-0", not "ckpt//ps-0" */
        len--;
    if (asprintf(&p, "%.*s/ps-%d", (int)len, dir, shard) < 0) return NULL;
    return p;
}

/* Adds "--flag value" when value >= 0 (given to psctl). */
static void add_if_given(psctl_argv *a, const char *flag, long value) {
    if (value < 0) return;
    psctl_argv_add(a, "%s", flag);
    psctl_argv_add(a, "%ld", value);
}

int psctl_psd_argv(psctl_argv *a, const psctl_local_opts *o, const char *psd_path, int shard,
                   int replica, const char *peers, int port, const char *ipc_path,
                   const char *ready_path) {
    psctl_argv_add(a, "%s", psd_path);
    if (ipc_path) {
        psctl_argv_add(a, "--transport");
        psctl_argv_add(a, "ipc");
        psctl_argv_add(a, "--ipc-path");
        psctl_argv_add(a, "%s", ipc_path);
    } else {
        psctl_argv_add(a, "--bind");
        psctl_argv_add(a, "127.0.0.1");
        psctl_argv_add(a, "--port");
        psctl_argv_add(a, "%d", port);
    }
    psctl_argv_add(a, "--shard");
    psctl_argv_add(a, "%d", shard);
    psctl_argv_add(a, "--num-shards");
    psctl_argv_add(a, "%ld", o->num_ps);
    if (o->psd_replicas > 1) {
        psctl_argv_add(a, "--replicas");
        psctl_argv_add(a, "%ld", o->psd_replicas);
        psctl_argv_add(a, "--replica");
        psctl_argv_add(a, "%d", replica);
        psctl_argv_add(a, "--peers");
        psctl_argv_add(a, "%s", peers ? peers : "");
        add_if_given(a, "--lease-ms", o->lease_ms);
    }
    psctl_argv_add(a, "--workers");
    psctl_argv_add(a, "%ld", psctl_local_slots(o));
    psctl_argv_add(a, "--mode");
    psctl_argv_add(a, "%s", o->mode);
    psctl_argv_add(a, "--ready-file");
    psctl_argv_add(a, "%s", ready_path);
    if (o->checkpoint_dir) {
        char *sub = psctl_checkpoint_subdir(o->checkpoint_dir, shard);
        psctl_argv_add(a, "--checkpoint-dir");
        if (sub)
            psctl_argv_add(a, "%s", sub);
        else
            a->oom = 1;
        free(sub);
    }
    add_if_given(a, "--checkpoint-every", o->checkpoint_every);
    add_if_given(a, "--worker-timeout", o->worker_timeout_ms);
    add_if_given(a, "--replicas-to-aggregate", o->replicas_to_aggregate);
    add_if_given(a, "--staleness", o->staleness);
    add_if_given(a, "--workers-min", o->workers_min);
    return a->oom ? -1 : 0;
}

/* The all-reduce part of a worker's command line (see psctl_worker_argv). */
static void add_allreduce_flags(psctl_argv *a, const psctl_local_opts *o, const char *ckpt_dir) {
    psctl_argv_add(a, "--strategy");
    psctl_argv_add(a, "%s", o->strategy_name);
    if (o->communication)
        psctl_argv_add(a, "--communication"), psctl_argv_add(a, "%s", o->communication);
    psctl_argv_add(a, "--checkpoint-dir");
    psctl_argv_add(a, "%s", ckpt_dir);
    /* psd's default period, unless given: a restarted ring resumes from a recent step */
    psctl_argv_add(a, "--checkpoint-every");
    psctl_argv_add(a, "%ld",
                   o->checkpoint_every >= 0 ? o->checkpoint_every
                                            : PSCTL_ALLREDUCE_CHECKPOINT_EVERY_S);
    add_if_given(a, "--" PSCTL_CKPT_STEPS_FLAG, o->checkpoint_steps);
    add_if_given(a, "--worker-timeout", o->worker_timeout_ms);
}

int psctl_worker_argv(psctl_argv *a, const psctl_local_opts *o, const char *worker_path, int j,
                      const char *endpoints, const char *ckpt_dir, int progress_tty) {
    psctl_argv_add(a, "%s", worker_path);
    if (o->allreduce) {
        add_allreduce_flags(a, o, ckpt_dir);
    } else {
        psctl_argv_add(a, "--ps");
        psctl_argv_add(a, "%s", endpoints);
        psctl_argv_add(a, "--index");
        psctl_argv_add(a, "%d", j);
        psctl_argv_add(a, "--workers");
        psctl_argv_add(a, "%ld", psctl_local_slots(o));
        if (psctl_local_elastic(o)) psctl_argv_add(a, "--elastic"), psctl_argv_add(a, "yes");
    }
    add_if_given(a, "--epochs", o->epochs);
    if (o->model) psctl_argv_add(a, "--model"), psctl_argv_add(a, "%s", o->model);
    if (o->data) psctl_argv_add(a, "--data"), psctl_argv_add(a, "%s", o->data);
    if (o->batch > 0) psctl_argv_add(a, "--batch"), psctl_argv_add(a, "%ld", o->batch);
    if (o->seed >= 0) psctl_argv_add(a, "--seed"), psctl_argv_add(a, "%ld", o->seed);
    if (j == 0 && o->summary) psctl_argv_add(a, "--summary"), psctl_argv_add(a, "%s", o->summary);
    if (j == 0 && o->tensorboard)
        psctl_argv_add(a, "--tensorboard"), psctl_argv_add(a, "%s", o->tensorboard);
    if (j == 0) add_if_given(a, "--tensorboard-every", o->tensorboard_every);
    if (j == 0 && o->history) psctl_argv_add(a, "--history"), psctl_argv_add(a, "%s", o->history);
    psctl_argv_add(a, "--device"); /* CPU unless --gpus: workers must not all share GPU 0 */
    psctl_argv_add(a, "%s", o->worker_device ? o->worker_device : "cpu");
    psctl_argv_add(a, "--progress");
    psctl_argv_add(a, "%s", progress_tty ? "tty" : "plain");
    if (o->job_id) psctl_argv_add(a, "--job-id"), psctl_argv_add(a, "%s", o->job_id);
    if (o->compression[0])
        psctl_argv_add(a, "--compression"), psctl_argv_add(a, "%s", o->compression);
    if (o->recreate_lost) psctl_argv_add(a, "--recreate-lost-variables"), psctl_argv_add(a, "yes");
    for (int e = 0; e < o->num_extra; e++)
        psctl_argv_add(a, "%s", o->extra[e]);
    return a->oom ? -1 : 0;
}

int psctl_worker_cmd_argv(psctl_argv *a, const char *cmd) {
    psctl_argv_add(a, "/bin/sh");
    psctl_argv_add(a, "-c");
    psctl_argv_add(a, "exec %s", cmd);
    return a->oom ? -1 : 0;
}

/* Appends s[0..len) to out as the inside of a JSON string: '"' and '\\' escaped (endpoints
 * are printable ASCII, see ps_check_ipc_path). Returns the bytes written. */
static size_t json_chars(char *out, const char *s, size_t len) {
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"' || s[i] == '\\') out[w++] = '\\';
        out[w++] = s[i];
    }
    return w;
}

char *psctl_tf_config(const char *ps_csv, const int *ports, int n, int j) {
    size_t ps_len = ps_csv ? strlen(ps_csv) : 0;
    /* each ps byte at most 2 once escaped, each entry 4 more (quotes, ", ") */
    size_t cap = 128 + (size_t)n * 20 + 2 * ps_len + 4 * (ps_len + 1);
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t used = (size_t)snprintf(s, cap, "{\"cluster\": {");
    if (ps_csv) {
        used += (size_t)snprintf(s + used, cap - used, "\"ps\": [");
        for (const char *p = ps_csv;;) {
            size_t len = strcspn(p, ",");
            s[used++] = '"';
            used += json_chars(s + used, p, len);
            s[used++] = '"';
            if (p[len] == '\0') break;
            memcpy(s + used, ", ", 2);
            used += 2;
            p += len + 1;
        }
        used += (size_t)snprintf(s + used, cap - used, "], ");
    }
    used += (size_t)snprintf(s + used, cap - used, "\"worker\": [");
    for (int i = 0; i < n; i++)
        used +=
            (size_t)snprintf(s + used, cap - used, "%s\"127.0.0.1:%d\"", i ? ", " : "", ports[i]);
    snprintf(s + used, cap - used, "]}, \"task\": {\"type\": \"worker\", \"index\": %d}}", j);
    return s;
}

char **psctl_env_set(char *const *base, const char *key, const char *value) {
    size_t n = 0, klen = strlen(key);
    while (base[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!(strncmp(base[i], key, klen) == 0 && base[i][klen] == '=')) env[m++] = base[i];
    if (asprintf(&env[m], "%s=%s", key, value) < 0) {
        free(env);
        return NULL;
    }
    return env;
}

void psctl_env_free(char **env) {
    if (!env) return;
    size_t n = 0;
    while (env[n + 1])
        n++;
    free(env[n]); /* ours is last */
    free(env);
}

char **psctl_env_unset(char *const *base, const char *key) {
    size_t n = 0, m = 0, klen = strlen(key);
    while (base[n])
        n++;
    char **env = calloc(n + 1, sizeof *env);
    if (!env) return NULL;
    for (size_t i = 0; i < n; i++)
        if (!(strncmp(base[i], key, klen) == 0 && base[i][klen] == '=')) env[m++] = base[i];
    return env;
}
