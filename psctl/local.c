/* `psctl local`: finds the psd and psworker binaries, makes a private run directory
 * and hands the job to the supervisor. */
#include "local.h"

#include "child_argv.h"
#include "kernels.h"
#include "log.h"
#include "shared_flags.h"
#include "supervisor.h"
#include "tfconfig.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_READY_TIMEOUT_MS 30000

static int is_executable(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* First executable `name` in $PATH, malloc'd, or NULL. */
static char *search_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path || !*path) return NULL;
    char *copy = strdup(path);
    if (!copy) return NULL;
    char *found = NULL, *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char *cand;
        if (asprintf(&cand, "%s/%s", *dir ? dir : ".", name) < 0) break;
        if (is_executable(cand))
            found = cand;
        else
            free(cand);
    }
    free(copy);
    return found;
}

/* Finds an executable: $env_name if set, else each of rel[] relative to the directory
 * of psctl's own executable, else `name` on PATH. Returns a malloc'd path, or NULL
 * after printing why. */
char *psctl_find_binary(const char *name, const char *env_name, const char *const *rel) {
    const char *env = getenv(env_name);
    if (env && *env) {
        if (strchr(env, '/')) {
            if (is_executable(env)) return strdup(env);
            fprintf(stderr, "psctl: %s=%s is not an executable file\n", env_name, env);
            return NULL;
        }
        char *p = search_path(env);
        if (!p) fprintf(stderr, "psctl: %s=%s: not found on PATH\n", env_name, env);
        return p;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        for (int i = 0; rel[i]; i++) {
            char *cand;
            if (asprintf(&cand, "%s/%s", self, rel[i]) < 0) return NULL;
            if (is_executable(cand)) return cand;
            free(cand);
        }
    }
    char *p = search_path(name);
    if (!p)
        fprintf(stderr,
                "psctl: cannot find %s: not next to psctl (%s) nor on PATH; "
                "set %s=/path/to/%s\n",
                name, n > 0 ? self : "?", env_name, name);
    return p;
}

/* Makes $TMPDIR/psctl-local.<pid>.XXXXXX (or under /tmp: psctl scale finds a job's by
 * its pid); returns a malloc'd path or NULL. */
static char *make_run_dir(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    char *dir;
    if (asprintf(&dir, "%s/" PSCTL_RUN_DIR_PREFIX "%ld.XXXXXX", tmp, (long)getpid()) < 0)
        return NULL;
    if (!mkdtemp(dir)) {
        fprintf(stderr, "psctl local: cannot make a run directory %s: %s\n", dir, strerror(errno));
        free(dir);
        return NULL;
    }
    return dir;
}

/* --transport ipc: makes the private (0700) directory for the shards' sockets under
 * $XDG_RUNTIME_DIR, else /tmp (also when DIR/psd-<i>.sock, with --replicas
 * DIR/psd-<i>-r<r>.sock, would not fit in a Unix socket address under $XDG_RUNTIME_DIR).
 * Returns a malloc'd path, or NULL after printing why. */
static char *make_sock_dir(long num_ps, long replicas) {
    char longest[48];
    int tail = replicas > 1 ? snprintf(longest, sizeof longest, "/psd-%ld-r%ld.sock", num_ps - 1,
                                       replicas - 1)
                            : snprintf(longest, sizeof longest, "/psd-%ld.sock", num_ps - 1);
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    const char *bases[] = {xdg && *xdg ? xdg : "/tmp", "/tmp"};
    for (int i = 0; i < 2; i++) {
        char *dir;
        if (asprintf(&dir, "%s/psctl-ipc.XXXXXX", bases[i]) < 0) return NULL;
        if (strlen(dir) + (size_t)tail > PS_IPC_PATH_MAX) {
            free(dir);
            continue;
        }
        if (mkdtemp(dir)) return dir;
        fprintf(stderr, "psctl local: cannot make a socket directory %s: %s\n", dir,
                strerror(errno));
        free(dir);
        return NULL;
    }
    fprintf(stderr, "psctl local: no directory short enough for the shards' Unix sockets; "
                    "use --transport tcp\n");
    return NULL;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0)
        PS_WARN("cannot remove %s: %s", path, strerror(errno));
    return 0;
}

/* Removes a directory psctl made and everything in it (ready files and their temp
 * files; sockets; an all-reduce job's checkpoints), never following a symlink. */
static void remove_run_dir(const char *dir) {
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        PS_WARN("cannot remove run directory %s: %s", dir, strerror(errno));
}

/* mkdir -p path (mode 0755 for what it makes). Returns 0, or -1 with errno set. */
static int make_dirs(const char *path) {
    char *p = strdup(path);
    if (!p) return -1;
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        struct stat st;
        if (mkdir(p, 0755) != 0 && !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
            if (errno == EEXIST) errno = ENOTDIR;
            rc = -1;
            break;
        }
        *s = c;
        if (c == '\0') break;
    }
    free(p);
    return rc;
}

/* Makes --checkpoint-dir DIR/ps-<i> for every shard (all-reduce: DIR itself). Returns 0,
 * or 2 after a message. */
static int make_checkpoint_dirs(const psctl_local_opts *o) {
    if (o->allreduce && o->checkpoint_dir && make_dirs(o->checkpoint_dir) != 0) {
        fprintf(stderr, "psctl local: --checkpoint-dir: cannot make %s: %s\n", o->checkpoint_dir,
                strerror(errno));
        return 2;
    }
    for (int i = 0; o->checkpoint_dir && i < o->num_ps; i++) {
        char *sub = psctl_checkpoint_subdir(o->checkpoint_dir, i);
        if (!sub || make_dirs(sub) != 0) {
            fprintf(stderr, "psctl local: --checkpoint-dir: cannot make %s: %s\n",
                    sub ? sub : o->checkpoint_dir, sub ? strerror(errno) : "out of memory");
            free(sub);
            return 2;
        }
        free(sub);
    }
    return 0;
}

/* $PSCTL_READY_TIMEOUT_MS (tests shorten it), else 30 s. */
static int ready_timeout_ms(void) {
    const char *s = getenv("PSCTL_READY_TIMEOUT_MS");
    if (!s || !*s) return DEFAULT_READY_TIMEOUT_MS;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 24L * 3600 * 1000) {
        PS_WARN("ignoring PSCTL_READY_TIMEOUT_MS=%s (want milliseconds >= 1)", s);
        return DEFAULT_READY_TIMEOUT_MS;
    }
    return (int)v;
}

/* CPUs this process may run on (its affinity mask, else the online count), >= 1. */
static long cpu_count(void) {
    cpu_set_t set;
    long n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

/* What a worker given GPU `id` (numbered as this process sees them) must get as
 * CUDA_VISIBLE_DEVICES: the id-th entry of our own CUDA_VISIBLE_DEVICES when that
 * is set (ids are relative to it), else the id itself. Returns a malloc'd string. */
static char *visible_device(int id) {
    const char *mine = getenv("CUDA_VISIBLE_DEVICES");
    char *out = NULL;
    if (mine && *mine) {
        const char *p = mine;
        for (int k = 0; k < id && p; k++) {
            p = strchr(p, ',');
            if (p) p++;
        }
        if (p) {
            size_t len = strcspn(p, ",");
            if (len > 0) return strndup(p, len);
        }
    }
    if (asprintf(&out, "%d", id) < 0) return NULL;
    return out;
}

void psctl_local_free_gpus(psctl_local_opts *o) {
    if (o->worker_cuda_visible) {
        for (long j = 0; j < o->num_workers; j++)
            free(o->worker_cuda_visible[j]);
        free(o->worker_cuda_visible);
    }
    o->worker_cuda_visible = NULL;
}

int psctl_local_resolve_gpus(psctl_local_opts *o) {
    o->worker_device = "cpu";
    o->worker_cuda_visible = NULL;
    if (!o->gpus) return 0;
    int count = ps_k_cuda_device_count();
    const char *none = ps_k_cuda_built() ? "no CUDA GPU present (0 devices)"
                                         : "this psctl was built without CUDA (0 devices)";
    if (o->gpus_all && count == 0) {
        long cpus = cpu_count();
        if (o->num_workers == 0) o->num_workers = cpus < PS_MAX_WORKERS ? cpus : PS_MAX_WORKERS;
        fprintf(stderr, "psctl: --gpus all: %s; running %ld CPU worker%s (--device cpu)\n", none,
                o->num_workers, o->num_workers == 1 ? "" : "s");
        return 0;
    }
    int ids[PSCTL_MAX_GPUS], n = 0;
    if (o->gpus_all) {
        for (int i = 0; i < count && i < PSCTL_MAX_GPUS; i++)
            ids[n++] = i;
        if (o->num_workers > 0 && o->num_workers != n) {
            fprintf(stderr,
                    "psctl local: --workers %ld disagrees with --gpus all: %d CUDA GPU%s present, "
                    "one worker each\n",
                    o->num_workers, n, n == 1 ? "" : "s");
            return 2;
        }
    } else {
        for (int i = 0; i < o->num_gpu_ids; i++) {
            if (o->gpu_ids[i] < count) continue;
            if (count == 0)
                fprintf(stderr,
                        "psctl local: --gpus %s: GPU %d does not exist: %s; --gpus all "
                        "would run CPU workers\n",
                        o->gpus, o->gpu_ids[i], none);
            else
                fprintf(stderr,
                        "psctl local: --gpus %s: GPU %d does not exist: %d CUDA GPU%s present "
                        "(ids 0..%d)\n",
                        o->gpus, o->gpu_ids[i], count, count == 1 ? "" : "s", count - 1);
            return 2;
        }
        n = o->num_gpu_ids;
        memcpy(ids, o->gpu_ids, (size_t)n * sizeof ids[0]);
    }
    o->num_workers = n;
    o->worker_device = "cuda:0"; /* each worker sees only its own GPU */
    o->worker_cuda_visible = calloc((size_t)n, sizeof *o->worker_cuda_visible);
    for (int j = 0; o->worker_cuda_visible && j < n; j++) {
        o->worker_cuda_visible[j] = visible_device(ids[j]);
        if (!o->worker_cuda_visible[j]) {
            psctl_local_free_gpus(o);
            break;
        }
    }
    if (!o->worker_cuda_visible) {
        fprintf(stderr, "psctl local: out of memory\n");
        return 2;
    }
    char list[512] = "";
    size_t used = 0;
    for (int j = 0; j < n && used < sizeof list - 16; j++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", j ? "," : "",
                                 o->worker_cuda_visible[j]);
    fprintf(stderr,
            "psctl: --gpus %s: running %d worker%s, one per GPU (CUDA_VISIBLE_DEVICES %s)\n",
            o->gpus, n, n == 1 ? "" : "s", list);
    return 0;
}

int psctl_local_main(int argc, char **argv) {
    psctl_local_opts opts;
    int r = psctl_local_parse(argc, argv, &opts);
    if (r == 1) return 0;
    if (r != 0) return 2;
    if (psctl_local_resolve_gpus(&opts) != 0) return 2;
    if (psctl_local_check(&opts) != 0 || make_checkpoint_dirs(&opts) != 0) {
        psctl_local_free_gpus(&opts);
        return 2;
    }

    static const char *const psd_rel[] = {"psd", "../ps-server/psd", NULL};
    static const char *const worker_rel[] = {"../worker/psworker", "psworker", NULL};
    /* the all-reduce strategies start no psd: it need not exist */
    char *psd = opts.allreduce ? strdup("-") : psctl_find_binary("psd", "PSD", psd_rel);
    /* --worker-cmd: the workers are CMD run by /bin/sh; psworker need not exist */
    char *worker = !psd              ? NULL
                   : opts.worker_cmd ? strdup("/bin/sh")
                                     : psctl_find_binary("psworker", "PSWORKER", worker_rel);
    char *run_dir = worker ? make_run_dir() : NULL;
    int want_socks = opts.transport_ipc && !opts.allreduce;
    char *sock_dir = run_dir && want_socks ? make_sock_dir(opts.num_ps, opts.psd_replicas) : NULL;
    /* all-reduce: the chief's checkpoints, in --checkpoint-dir or in the run dir */
    char *ckpt_dir = NULL;
    if (run_dir && opts.allreduce) {
        if (opts.checkpoint_dir)
            ckpt_dir = strdup(opts.checkpoint_dir);
        else if (asprintf(&ckpt_dir, "%s/checkpoints", run_dir) < 0)
            ckpt_dir = NULL;
        else if (mkdir(ckpt_dir, 0700) != 0) {
            fprintf(stderr, "psctl local: cannot make %s: %s\n", ckpt_dir, strerror(errno));
            free(ckpt_dir);
            ckpt_dir = NULL;
        }
    }
    int code = 2;
    if (run_dir && (sock_dir || !want_socks) && (ckpt_dir || !opts.allreduce)) {
        psctl_job job = {&opts, psd, worker, run_dir, sock_dir, ready_timeout_ms(), ckpt_dir};
        PS_DEBUG("psd %s, worker %s, run dir %s, sockets in %s", psd, worker, run_dir,
                 sock_dir ? sock_dir : "- (tcp)");
        code = psctl_supervise(&job);
    }
    free(ckpt_dir);
    if (sock_dir) remove_run_dir(sock_dir); /* also sockets of shards that were killed */
    if (run_dir) remove_run_dir(run_dir);
    free(sock_dir);
    free(run_dir);
    free(worker);
    free(psd);
    psctl_local_free_gpus(&opts);
    return code;
}
