/* The command lines and environments psctl local gives its children: built afresh for
 * every start, so a restarted process gets the same arguments and environment. */
#ifndef PSCTL_CHILD_ARGV_H
#define PSCTL_CHILD_ARGV_H

#include "local.h"

/* A NULL-terminated argv under construction; every string is malloc'd. Zero it to
 * start; after an allocation failure `oom` is set and further adds do nothing. */
typedef struct {
    char **v;
    int n, cap, oom;
} psctl_argv;

/* Appends one printf-formatted argument. */
void psctl_argv_add(psctl_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees the array and its strings; a may be reused after zeroing. */
void psctl_argv_free(psctl_argv *a);

/* DIR/ps-<shard> for --checkpoint-dir DIR, malloc'd, or NULL (no memory). */
char *psctl_checkpoint_subdir(const char *dir, int shard);

/* Fills a (zeroed) with the command line of psd shard `shard`: listening on the Unix
 * socket ipc_path (--transport ipc) when it is non-NULL, else on 127.0.0.1:port (0: any
 * free port); writing ready_path once it listens; plus the psd flags given to psctl. With
 * --replicas R > 1 it is replica `replica` of the shard's group: --replicas R --replica
 * replica --peers peers (the group's R addresses, comma-separated, in replica order) and
 * --lease-ms when given; otherwise replica and peers are unused. Returns 0, or -1 when out
 * of memory (a->oom). */
int psctl_psd_argv(psctl_argv *a, const psctl_local_opts *o, const char *psd_path, int shard,
                   int replica, const char *peers, int port, const char *ipc_path,
                   const char *ready_path);

/* Fills a (zeroed) with the command line of worker j. parameter_server: the shards'
 * endpoints ("host:port,..." or "ipc://PATH,..."), its index and worker count; all-reduce
 * (o->allreduce; endpoints unused, the cluster is in TF_CONFIG, see psctl_tf_config):
 * --strategy, --communication when given, --checkpoint-dir ckpt_dir, --checkpoint-every
 * (given or PSCTL_ALLREDUCE_CHECKPOINT_EVERY_S), --checkpoint-every-steps and
 * --worker-timeout when given. Then the training flags and the arguments after "--".
 * progress_tty: the worker's progress redraws in place (worker 0 on a terminal). Returns 0,
 * or -1 when out of memory (a->oom). */
int psctl_worker_argv(psctl_argv *a, const psctl_local_opts *o, const char *worker_path, int j,
                      const char *endpoints, const char *ckpt_dir, int progress_tty);

/* Fills a (zeroed) with the command line of a --worker-cmd worker: /bin/sh -c 'exec CMD'
 * (the shell parses CMD; exec makes CMD the process psctl signals). Returns 0, or -1 when
 * out of memory (a->oom). */
int psctl_worker_cmd_argv(psctl_argv *a, const char *cmd);

/* The TF_CONFIG of worker j of n whose entries are 127.0.0.1 at ports[0..n):
 * {"cluster": {"ps": ["E0", ...], "worker": ["127.0.0.1:P0", ...]}, "task": {"type":
 * "worker", "index": j}} (TensorFlow's multi-process runner does the same). ps_csv: the
 * shards' endpoints, comma-separated ("host:port" or "ipc://PATH"), or NULL for no "ps"
 * job (all-reduce). Returns a malloc'd string, or NULL when out of memory. */
char *psctl_tf_config(const char *ps_csv, const int *ports, int n, int j);

/* A copy of the environment `base` with KEY=value in place of any KEY=... it has.
 * The array and the new string (its last entry) are malloc'd, the other strings are
 * base's; free with psctl_env_free. Returns NULL when out of memory. */
char **psctl_env_set(char *const *base, const char *key, const char *value);
void psctl_env_free(char **env);

/* A copy of the environment `base` without KEY=...: an array (malloc'd; free it with free)
 * of base's strings. Returns NULL when out of memory. */
char **psctl_env_unset(char *const *base, const char *key);

#endif
