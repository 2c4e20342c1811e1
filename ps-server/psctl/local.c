/* `psctl local`: finds the psd and psworker binaries, makes a private run directory
 * and hands the job to the supervisor. */
#include "local.h"

#include "log.h"
#include "supervisor.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
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
static char *find_binary(const char *name, const char *env_name, const char *const *rel) {
    const char *env = getenv(env_name);
    if (env && *env) {
        if (strchr(env, '/')) {
            if (is_executable(env)) return strdup(env);
            fprintf(stderr, "psctl local: %s=%s is not an executable file\n", env_name, env);
            return NULL;
        }
        char *p = search_path(env);
        if (!p) fprintf(stderr, "psctl local: %s=%s: not found on PATH\n", env_name, env);
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
                "psctl local: cannot find %s: not next to psctl (%s) nor on PATH; "
                "set %s=/path/to/%s\n",
                name, n > 0 ? self : "?", env_name, name);
    return p;
}

/* Makes $TMPDIR/psctl-local.XXXXXX (or under /tmp); returns a malloc'd path or NULL. */
static char *make_run_dir(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    char *dir;
    if (asprintf(&dir, "%s/psctl-local.XXXXXX", tmp) < 0) return NULL;
    if (!mkdtemp(dir)) {
        fprintf(stderr, "psctl local: cannot make a run directory %s: %s\n", dir, strerror(errno));
        free(dir);
        return NULL;
    }
    return dir;
}

/* Removes the run directory and the files in it (ready files and their temp files). */
static void remove_run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *p;
            if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) continue;
            if (unlink(p) != 0) PS_WARN("cannot remove %s: %s", p, strerror(errno));
            free(p);
        }
        closedir(d);
    }
    if (rmdir(dir) != 0) PS_WARN("cannot remove run directory %s: %s", dir, strerror(errno));
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

int psctl_local_main(int argc, char **argv) {
    psctl_local_opts opts;
    int r = psctl_local_parse(argc, argv, &opts);
    if (r == 1) return 0;
    if (r != 0) return 2;

    static const char *const psd_rel[] = {"psd", NULL};
    static const char *const worker_rel[] = {"../worker/psworker", "psworker", NULL};
    char *psd = find_binary("psd", "PSD", psd_rel);
    char *worker = psd ? find_binary("psworker", "PSWORKER", worker_rel) : NULL;
    char *run_dir = worker ? make_run_dir() : NULL;
    int code = 2;
    if (run_dir) {
        psctl_job job = {&opts, psd, worker, run_dir, ready_timeout_ms()};
        PS_DEBUG("psd %s, worker %s, run dir %s", psd, worker, run_dir);
        code = psctl_supervise(&job);
        remove_run_dir(run_dir);
    }
    free(run_dir);
    free(worker);
    free(psd);
    return code;
}
