/* The tests' process runner (see run.h). */
#include "run.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

double ps_test_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void ps_test_run_free(ps_test_run_result *r) {
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

static void append(char **buf, size_t *len, const char *data, size_t n) {
    char *p = realloc(*buf, *len + n + 1);
    ck_assert_ptr_nonnull(p);
    memcpy(p + *len, data, n);
    *len += n;
    p[*len] = '\0';
    *buf = p;
}

void ps_test_run(const char *exe, const char *const *args, const char *const *env,
                 double deadline_s, ps_test_run_hook hook, void *ctx, ps_test_run_result *r) {
    memset(r, 0, sizeof *r);
    append(&r->out, &r->out_len, "", 0);
    append(&r->err, &r->err_len, "", 0);
    int po[2], pe[2];
    ck_assert_int_eq(pipe2(po, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(pe, O_CLOEXEC), 0);
    double start = ps_test_now_s();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* if the test dies, psctl stops its children */
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        for (const char *const *e = env; e && *e; e++) {
            char *kv = strdup(*e), *eq = strchr(kv, '=');
            *eq = '\0';
            if (eq[1])
                setenv(kv, eq + 1, 1);
            else
                unsetenv(kv);
        }
        execv(exe, (char *const *)args);
        dprintf(2, "exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    r->pid = pid;
    close(po[1]);
    close(pe[1]);
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2, reaped = 0;
    double deadline = start + deadline_s, reaped_at = 0;
    while (open_fds > 0 || !reaped) {
        double t = ps_test_now_s();
        if (t > deadline || (reaped && t > reaped_at + 3.0)) break;
        if (poll(fds, 2, 50) < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[4096];
            ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                if (i == 0)
                    append(&r->out, &r->out_len, buf, (size_t)n);
                else
                    append(&r->err, &r->err_len, buf, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
        if (hook && !reaped) hook(r, ctx);
        if (!reaped && waitpid(pid, &r->status, WNOHANG) == pid) {
            reaped = 1;
            reaped_at = ps_test_now_s();
        }
    }
    r->secs = ps_test_now_s() - start;
    r->finished = reaped && open_fds == 0;
    if (!reaped) {
        kill(pid, SIGKILL);
        waitpid(pid, &r->status, 0);
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    if (!r->finished)
        fprintf(stderr, "%s did not finish in time; output so far:\n%s\n%s\n", exe, r->out, r->err);
}

int ps_test_run_exit_code(const ps_test_run_result *r) {
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
}

void ps_test_signal_when_seen(const ps_test_run_result *r, void *ctx) {
    ps_test_signal_when *w = ctx;
    if (w->sent) return;
    for (const char *const *m = w->markers; *m; m++)
        if (!(r->out && strstr(r->out, *m)) && !(r->err && strstr(r->err, *m))) return;
    kill(r->pid, w->sig);
    w->sent = 1;
}

void ps_test_reap_all(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int ps_test_proc_alive(pid_t pid) {
    if (kill(pid, 0) != 0) return errno != ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

int ps_test_kill_if_alive(pid_t pid) {
    if (!ps_test_proc_alive(pid)) return 0;
    kill(pid, SIGKILL);
    return 1;
}

int ps_test_for_each_recorded(const char *dir, int (*fn)(pid_t)) {
    int count = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "pid.", 4) != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int pid = 0;
        if (fscanf(f, "%d", &pid) == 1 && pid > 0) count += fn((pid_t)pid);
        fclose(f);
    }
    closedir(d);
    return count;
}

int ps_test_recorded_alive_after_wait(const char *dir, int timeout_ms) {
    long long end = ps_test_now_ms() + timeout_ms;
    for (;;) {
        ps_test_reap_all();
        int alive = ps_test_for_each_recorded(dir, ps_test_proc_alive);
        if (alive == 0 || ps_test_now_ms() > end) return alive;
        ps_test_nap_ms(20); /* pacing between polls */
    }
}
