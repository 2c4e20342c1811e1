/* A psd process for the benchmarks (see bench_psd.h). */
#include "bench_psd.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"

void ps_bench_find_psd(const char *argv0, const char *fallback, char *out, size_t n) {
    const char *env = getenv("PSD");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return;
    }
    const char *slash = strrchr(argv0, '/');
    if (slash) {
        snprintf(out, n, "%.*s/../ps-server/psd", (int)(slash - argv0), argv0);
        if (access(out, X_OK) == 0) return;
    }
    snprintf(out, n, "%s", fallback);
}

int ps_bench_psd_start(ps_bench_psd *p, const char *psd, const char *dir, const char *tag,
                       const char *const *args, double timeout_s) {
    char ready[600], logf[600];
    snprintf(ready, sizeof ready, "%s/ready%s", dir, tag);
    snprintf(logf, sizeof logf, "%s/psd%s.log", dir, tag);
    unlink(ready);
    const char *argv[40] = {psd, "--bind", "127.0.0.1", "--port", "0", "--ready-file", ready};
    size_t n = 7;
    for (size_t i = 0; args && args[i] && n < 39; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(logf, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        execv(psd, (char *const *)argv);
        _exit(127);
    }
    p->pid = pid;
    double deadline = ps_bench_now_s() + timeout_s;
    while (ps_bench_now_s() < deadline) {
        FILE *f = fopen(ready, "r");
        if (f) {
            int ok = fgets(p->endpoint, sizeof p->endpoint, f) != NULL;
            fclose(f);
            p->endpoint[strcspn(p->endpoint, "\n")] = 0;
            if (ok && p->endpoint[0]) return 0;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "psd (%s) exited before listening; log: %s\n", psd, logf);
            return -1;
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    fprintf(stderr, "psd did not listen within %.0f s; log: %s\n", timeout_s, logf);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

void ps_bench_psd_stop(ps_bench_psd *p, double timeout_s) {
    kill(p->pid, SIGTERM);
    double deadline = ps_bench_now_s() + timeout_s;
    while (ps_bench_now_s() < deadline) {
        if (waitpid(p->pid, NULL, WNOHANG) == p->pid) return;
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
}
