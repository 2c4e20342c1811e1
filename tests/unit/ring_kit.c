/* The ring tests' kit: configs on free ports, forked ranks, shared reports. */
#include "ring_kit.h"

#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

void rk_ring_init(rk_ring *k, unsigned size, ps_ring_transport t) {
    memset(k, 0, sizeof *k);
    ck_assert_uint_le(size, RK_MAX_RANKS);
    for (unsigned i = 0; i < size; i++) {
        snprintf(k->eps[i], sizeof k->eps[i], "127.0.0.1:%d", ps_test_free_port());
        k->ep_ptrs[i] = k->eps[i];
    }
    snprintf(k->job, sizeof k->job, "job-%d", (int)getpid());
    k->cfg.size = size;
    k->cfg.endpoints = k->ep_ptrs;
    k->cfg.job_id = k->job;
    k->cfg.transport = t;
    k->cfg.connect_timeout_ms = 30000;
    k->cfg.timeout_ms = 20000;
}

int rk_open(const rk_ring *k, unsigned rank, ps_ring **out, char *err, size_t errlen) {
    ps_ring_config c = k->cfg;
    c.rank = rank;
    c.endpoints = k->ep_ptrs;
    c.job_id = k->job;
    return ps_ring_open(&c, out, err, errlen);
}

void *rk_share(size_t bytes) {
    void *p =
        mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

void rk_unshare(void *p, size_t bytes) {
    munmap(p, bytes ? bytes : 1);
}

pid_t rk_fork(int (*fn)(void *ctx, unsigned rank), void *ctx, unsigned rank, const char *log_path) {
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(99);
    if (log_path) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            close(fd);
        }
    }
    int rc = fn(ctx, rank);
    _exit(rc == 0 ? 0 : 1);
}

int rk_wait(pid_t pid, int timeout_ms) {
    long long deadline = ps_test_now_ms() + timeout_ms;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -1;
        if (ps_test_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        ps_test_nap_ms(5);
    }
}

int rk_fail(rk_report *rep, int rc, const char *stage, const char *err) {
    rep->rc = rc ? rc : -1000;
    snprintf(rep->stage, sizeof rep->stage, "%s", stage);
    snprintf(rep->err, sizeof rep->err, "%s", err ? err : "");
    return 1;
}
