/* Process helpers for integration tests (see proc.h). */
#include "proc.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void ps_test_children_die_with_me(void) {
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("PS_PARENT_PID", pid, 1);
}

pid_t ps_test_spawn(const char *const *argv, const char *out_path) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    int fd = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

int ps_test_run_to(const char *const *argv, const char *out_path, int timeout_ms) {
    pid_t pid = ps_test_spawn(argv, out_path);
    ck_assert_int_gt(pid, 0);
    int st = ps_test_wait(pid, timeout_ms);
    ck_assert_msg(st >= 0, "%s did not exit within %d ms", argv[0], timeout_ms);
    return st;
}

static int decode_status(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int ps_test_wait(pid_t pid, int timeout_ms) {
    long long deadline = ps_test_now_ms() + timeout_ms;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return decode_status(st);
        if (r < 0) return -1;
        if (ps_test_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        ps_test_nap_ms(10);
    }
}

int ps_test_alive(pid_t pid) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == 0) return 1;
    return 0;
}

typedef struct {
    const char *path;
    pid_t pid;
    char *buf;
    size_t n;
} first_line_wait;

/* 1 once the file has a non-empty first line (in w->buf) or the process is gone. */
static int first_line_or_gone(void *ctx) {
    first_line_wait *w = ctx;
    w->buf[0] = 0;
    FILE *f = fopen(w->path, "r");
    if (f) {
        if (!fgets(w->buf, (int)w->n, f)) w->buf[0] = 0;
        fclose(f);
        w->buf[strcspn(w->buf, "\n")] = 0;
        if (w->buf[0]) return 1;
    }
    return w->pid > 0 && !ps_test_alive(w->pid);
}

int ps_test_wait_first_line(const char *path, pid_t pid, char *buf, size_t n, int timeout_ms) {
    first_line_wait w = {path, pid, buf, n};
    return ps_test_wait_until(first_line_or_gone, &w, timeout_ms, 5) && buf[0];
}

void ps_test_dump(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    fprintf(stderr, "---- %s ----\n", path);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fclose(f);
}

/* Spawns psd on `port` ("0": any) and waits for its ready file. */
static int psd_spawn(ps_test_psd *p, const char *port, const char *const *extra_args,
                     int timeout_ms) {
    char ready[600];
    snprintf(ready, sizeof ready, "%s/ready", p->dir);
    unlink(ready);
    const char *argv[64] = {getenv("PSD"), "--bind",       "127.0.0.1", "--port",
                            port,          "--ready-file", ready};
    int n = 7;
    for (int i = 0; extra_args && extra_args[i] && n < 62; i++)
        argv[n++] = extra_args[i];
    argv[n] = NULL;
    if (!argv[0]) {
        fprintf(stderr, "PSD is not set\n");
        return -1;
    }
    p->pid = ps_test_spawn(argv, p->log);
    if (p->pid < 0) return -1;
    if (ps_test_wait_first_line(ready, p->pid, p->endpoint, sizeof p->endpoint, timeout_ms))
        return 0;
    if (!ps_test_alive(p->pid)) {
        fprintf(stderr, "psd exited before listening\n");
        ps_test_dump(p->log);
        p->pid = 0;
        return -1;
    }
    fprintf(stderr, "psd did not listen within %d ms\n", timeout_ms);
    ps_test_dump(p->log);
    ps_test_psd_stop(p, 1000);
    return -1;
}

int ps_test_psd_start(ps_test_psd *p, const char *const *extra_args, int timeout_ms) {
    memset(p, 0, sizeof *p);
    char *dir = ps_test_mkdtemp();
    if (!dir) return -1;
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    free(dir);
    snprintf(p->log, sizeof p->log, "%s/psd.log", p->dir);
    return psd_spawn(p, "0", extra_args, timeout_ms);
}

int ps_test_psd_restart(ps_test_psd *p, const char *const *extra_args, int timeout_ms) {
    const char *colon = strrchr(p->endpoint, ':');
    if (!colon || p->pid > 0) return -1;
    char port[16];
    snprintf(port, sizeof port, "%s", colon + 1);
    return psd_spawn(p, port, extra_args, timeout_ms);
}

void ps_test_psd_kill(ps_test_psd *p) {
    if (p->pid <= 0) return;
    kill(p->pid, SIGKILL);
    ps_test_wait(p->pid, 5000);
    p->pid = 0;
}

int ps_test_psd_stop(ps_test_psd *p, int timeout_ms) {
    int rc = -1;
    if (p->pid > 0) {
        kill(p->pid, SIGTERM);
        rc = ps_test_wait(p->pid, timeout_ms);
        p->pid = 0;
    }
    if (p->dir[0]) {
        ps_test_rmdir(p->dir);
        p->dir[0] = 0;
    }
    return rc;
}

pid_t ps_test_find_child(pid_t parent, const char *arg, const char *value) {
    char want[256];
    int wlen = snprintf(want, sizeof want, "%s%c%s", arg, '\0', value) + 1;
    DIR *d = opendir("/proc");
    pid_t found = 0;
    struct dirent *e;
    while (d && !found && (e = readdir(d)) != NULL) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[8192];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *rp = strrchr(buf, ')');
        int ppid = 0;
        if (!rp || sscanf(rp + 2, "%*c %d", &ppid) != 1 || ppid != parent) continue;
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        if (!(f = fopen(path, "r"))) continue;
        n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        for (size_t i = 0; i + (size_t)wlen <= n; i++)
            if ((i == 0 || buf[i - 1] == '\0') && memcmp(buf + i, want, (size_t)wlen) == 0)
                found = pid;
    }
    if (d) closedir(d);
    return found;
}

/* The parent pid of pid from /proc/pid/stat, or 0. */
static pid_t parent_of(int pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    int ppid = 0;
    if (!rp || sscanf(rp + 2, "%*c %d", &ppid) != 1) return 0;
    return ppid;
}

pid_t ps_test_find_child_env(pid_t parent, const char *text) {
    DIR *d = opendir("/proc");
    pid_t found = 0;
    static char buf[1 << 17];
    for (struct dirent *e; d && !found && (e = readdir(d)) != NULL;) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || parent_of(pid) != parent) continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/environ", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (size_t i = 0; i < n && !found; i += strlen(buf + i) + 1)
            if (strstr(buf + i, text)) found = pid;
    }
    if (d) closedir(d);
    return found;
}

int ps_test_wait_gone(pid_t pid, int timeout_ms) {
    long long deadline = ps_test_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return decode_status(st);
        if (r < 0 && kill(pid, 0) != 0 && errno == ESRCH) return 0; /* not ours, gone */
        if (ps_test_now_ms() > deadline) return -1;
        ps_test_nap_ms(10);
    }
}

int ps_test_psd_has_libsystemd(void) {
    const char *psd = getenv("PSD");
    if (!psd) return 0;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ldd '%s' 2>/dev/null", psd);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[1024];
    int found = 0;
    while (fgets(line, sizeof line, p))
        if (strstr(line, "libsystemd.so")) found = 1;
    pclose(p);
    return found;
}
