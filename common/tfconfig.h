/* Cluster spec: TensorFlow's TF_CONFIG JSON (or --ps/--workers flag lists) turned into
 * ps/worker/chief address lists plus this process's task, and address parsing: a shard
 * is "host:port" (TCP) or "ipc://PATH" (a Unix socket on this machine). */
#ifndef PS_TFCONFIG_H
#define PS_TFCONFIG_H

#include <stddef.h>

typedef struct {
    char **ps;
    size_t n_ps; /* "host:port" or "ipc://PATH" strings, owned */
    char **worker;
    size_t n_worker;
    char **chief;
    size_t n_chief;     /* 0 or 1 */
    char task_type[16]; /* "ps", "worker", "chief", "evaluator"; "" when no task */
    int task_index;     /* -1 when no task */
} ps_cluster;

/* Parses TensorFlow's TF_CONFIG JSON:
 *   {"cluster": {"ps": [...], "worker": [...], "chief": [...]},
 *    "task": {"type": "worker", "index": 1}}
 * Other top-level keys (Kubeflow's TFJob adds "environment": "cloud") are ignored. Unknown extra
 * job names in cluster (e.g. "evaluator", "master") are kept out but accepted; a "master" task
 * is refused (PS_EINVAL, not a job this project knows: name it chief). "task" is
 * optional here (a program that needs it says so); when present, "type" is required and
 * "index" may be left out only when the job has one entry (it is then 0, as in TensorFlow's
 * TFConfigClusterResolver; with more entries that guess could make two tasks one). An "evaluator"
 * task need not be in the cluster (TensorFlow runs it outside the training cluster). Entries are
 * checked only for shape ("host:port", non-empty host and port, no blanks): like TensorFlow, the
 * port is not validated here, so documentation placeholders such as "host1:port" are accepted; use
 * ps_parse_hostport when an address is used. A cluster.ps entry may also be "ipc://PATH" (checked
 * with ps_check_ipc_path), or a shard's replica group "ADDR|ADDR|..." of such addresses
 * (replicas.h). Returns PS_OK; PS_EFORMAT (not JSON, trailing garbage, duplicate key,
 * wrong JSON types); PS_EINVAL (NULL argument, missing cluster (the reason names a TFJob's
 * "sparseCluster", which is not supported), task type missing or not in the
 * cluster, task index negative, out of range for its job or missing in a job of several entries,
 * bad host:port entry, more than one chief). On error, err (if non-NULL and errlen > 0) gets a
 * one-line reason naming the field; on success err is "". *out is always initialised: on success
 * the caller owns it and frees it with ps_cluster_free; on error it is left empty (ps_cluster_free
 * is still safe). */
int ps_cluster_from_tfconfig(const char *json, ps_cluster *out, char *err, size_t errlen);

/* Builds a cluster from flag values: comma-separated "host:port" lists (NULL or "" = none;
 * blanks around commas are ignored). Unlike TF_CONFIG, flag addresses are used as given, so
 * each one must pass ps_parse_hostport (a ps item may instead be "ipc://PATH", checked with
 * ps_check_ipc_path, or a replica group "ADDR|ADDR|...", checked with ps_check_shard_entry). The result has no task ("" and -1).
 * Returns PS_OK, PS_EINVAL (empty item or bad address, reason in err) or PS_ENOMEM.
 * *out is always initialised; on success the caller frees it with ps_cluster_free. */
int ps_cluster_from_lists(const char *ps_csv, const char *worker_csv, ps_cluster *out, char *err,
                          size_t errlen);

/* Frees every list and string of c and leaves it empty (no task). NULL and repeated calls
 * are safe. */
void ps_cluster_free(ps_cluster *c);

/* Returns the number of workers in the job: n_worker + n_chief. The chief is global worker 0
 * and "worker" i is global index i + n_chief (TensorFlow's numbering when a chief exists);
 * with no chief, worker 0 is the chief. */
unsigned ps_cluster_num_workers(const ps_cluster *c);

/* Stores the global worker index of the task (type chief or worker) in *index.
 * Returns PS_OK, or PS_EINVAL if the task is not a worker (ps, evaluator, no task). */
int ps_cluster_worker_index(const ps_cluster *c, unsigned *index);

/* Splits "host:port" (host may be a name, IPv4, or [IPv6]); port is 1-5 digits, 0..65535.
 * Writes the host (without the brackets of an IPv6 literal) into host[hostlen] and the port
 * into *port; either may be NULL to only validate. Returns PS_OK, or PS_EINVAL for a bad
 * address or a host that does not fit in hostlen. */
int ps_parse_hostport(const char *s, char *host, size_t hostlen, int *port);

/* Longest PATH of an "ipc://PATH" address: a Unix socket path must fit in
 * sockaddr_un.sun_path (108 bytes on Linux) with its terminating NUL. */
#define PS_IPC_PATH_MAX 107

/* Returns PATH (pointing into s) when s is "ipc://PATH", else NULL. */
const char *ps_ipc_path(const char *s);

/* Checks the PATH of an ipc:// address (or of psd --ipc-path): non-empty, at most
 * PS_IPC_PATH_MAX bytes, printable ASCII without blanks, commas or '|' (shard lists are
 * comma-separated, a shard's replicas '|'-separated). Returns PS_OK, or PS_EINVAL with a one-line reason in err. */
int ps_check_ipc_path(const char *path, char *err, size_t errlen);

#endif
