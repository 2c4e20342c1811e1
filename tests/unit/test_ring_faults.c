/* Check tests for ring failures (collective/ring.h): a raw socket peer that
 * sends garbage, a wrong-size frame, a wrong job id or garbage as handshake;
 * ranks that disagree on a size; a rank killed (SIGKILL) or frozen (SIGSTOP)
 * mid-all-reduce; a rank that leaves; a ring that cannot form; an endpoint
 * that is taken; a rank killed or frozen mid-allgatherv, and one announcing a
 * block over the bound. Every failure is a clean error naming the culprit, within a
 * bounded time; nothing crashes or hangs. */
#include "link.h"
#include "ps_error.h"
#include "ring.h"
#include "ring_kit.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a raw peer playing rank 1 of a 2-rank TCP ring ---- */

static int port_of(const char *ep) {
    return atoi(strrchr(ep, ':') + 1);
}

static int raw_listen(const char *ep) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_of(ep))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    return fd;
}

/* Connects to ep, retrying for up to 20 s (the rank may not listen yet). */
static int raw_connect(const char *ep) {
    long long deadline = ps_test_now_ms() + 20000;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_of(ep))};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        ck_assert_msg(ps_test_now_ms() < deadline, "cannot connect to %s", ep);
        ps_test_nap_ms(20);
    }
}

static void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return; /* the rank closed: the test checks what it said */
        c += k;
        n -= (size_t)k;
    }
}

/* Reads one frame (header + payload up to cap) within 20 s; returns the
 * payload length, or -1 when the connection closed first. */
static long read_frame(int fd, ps__frame *f, unsigned char *payload, size_t cap) {
    unsigned char hdr[PS_RING_HDR];
    size_t have = 0;
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (have < PS_RING_HDR) {
        ssize_t k = recv(fd, hdr + have, PS_RING_HDR - have, 0);
        if (k <= 0) return -1;
        have += (size_t)k;
    }
    char err[200];
    ck_assert_int_eq(ps__frame_decode(hdr, f, err, sizeof err), PS_OK);
    ck_assert_uint_le(f->len, cap);
    for (have = 0; have < f->len;) {
        ssize_t k = recv(fd, payload + have, f->len - have, 0);
        if (k <= 0) return -1;
        have += (size_t)k;
    }
    return (long)f->len;
}

typedef struct {
    int to_rank0;   /* our link to rank 0 (we are its previous rank) */
    int from_rank0; /* rank 0's link to us */
} raw_peer;

/* Plays rank 1 through both handshakes with the job id job. */
static void raw_join(raw_peer *p, const rk_ring *k, const char *job) {
    int lfd = raw_listen(k->eps[1]);
    unsigned char buf[PS_RING_HDR + PS_RING_CTRL_MAX], in[PS_RING_CTRL_MAX];
    p->to_rank0 = raw_connect(k->eps[0]);
    size_t n = ps__hello_build(buf, sizeof buf, PS_FRAME_HELLO, 2, 1, 0, job);
    write_all(p->to_rank0, buf, n);
    ps__frame f;
    ck_assert_int_ge(read_frame(p->to_rank0, &f, in, sizeof in), 16);
    ck_assert_int_eq(f.type, PS_FRAME_HELLO_ACK);
    p->from_rank0 = accept(lfd, NULL, NULL);
    ck_assert_int_ge(p->from_rank0, 0);
    close(lfd);
    ck_assert_int_ge(read_frame(p->from_rank0, &f, in, sizeof in), 16);
    ck_assert_int_eq(f.type, PS_FRAME_HELLO);
    n = ps__hello_build(buf, sizeof buf, PS_FRAME_HELLO_ACK, 2, 1, 0, job);
    write_all(p->from_rank0, buf, n);
}

/* ---- a real rank 0 that runs one all-reduce ---- */

typedef struct {
    rk_ring k;
    rk_report *rep;
    size_t n[RK_MAX_RANKS]; /* floats each rank all-reduces */
    int loops;              /* all-reduces per rank (0: 1) */
    int *progress;          /* shared: all-reduces done per rank */
    int gatherv;            /* allgatherv of n[rank] * 4 + 8 * rank bytes instead */
    size_t max_len[RK_MAX_RANKS]; /* ... each rank's bound (0: 1 GiB) */
} one_ctx;

/* One operation of the body: an all-reduce, or an allgatherv (c->gatherv). */
static int one_op(one_ctx *c, ps_ring *r, unsigned rank, float *x, size_t n, char *err,
                  size_t errlen) {
    if (!c->gatherv) return ps_ring_allreduce(r, x, n, err, errlen);
    size_t lens[RK_MAX_RANKS];
    void *all = NULL;
    size_t bound = c->max_len[rank] ? c->max_len[rank] : 1u << 30;
    int rc = ps_ring_allgatherv(r, x, n * 4 + 8 * rank, bound, &all, lens, err, errlen);
    free(all);
    return rc;
}

static int allreduce_body(void *vctx, unsigned rank) {
    one_ctx *c = vctx;
    rk_report *rep = &c->rep[rank];
    ps_ring *r = NULL;
    char err[700];
    long long t0 = ps_test_now_ms();
    int rc = rk_open(&c->k, rank, &r, err, sizeof err);
    if (rc != PS_OK) {
        rep->ms = ps_test_now_ms() - t0;
        return rk_fail(rep, rc, "open", err);
    }
    size_t n = c->n[rank];
    float *x = calloc(n + 2 * RK_MAX_RANKS, sizeof *x);
    int loops = c->loops ? c->loops : 1;
    for (int i = 0; i < loops; i++) {
        t0 = ps_test_now_ms();
        rc = one_op(c, r, rank, x, n, err, sizeof err);
        if (rc != PS_OK) {
            rep->ms = ps_test_now_ms() - t0;
            rk_fail(rep, rc, c->gatherv ? "allgatherv" : "all-reduce", err);
            break;
        }
        if (c->progress) __atomic_add_fetch(&c->progress[rank], 1, __ATOMIC_SEQ_CST);
    }
    if (rc == PS_OK) {
        /* a later call returns the same sticky error; here: none */
        snprintf(rep->stage, sizeof rep->stage, "done");
    } else {
        char again[700];
        /* (a length refused is not sticky: the ring is still up) */
        int rc2 =
            c->gatherv && rc == PS_EPROTO ? rc : one_op(c, r, rank, x, n, again, sizeof again);
        if (rc2 != rc || (rc != PS_EPROTO && strcmp(again, err) != 0))
            rk_fail(rep, rc2, "sticky error", again);
    }
    free(x);
    ps_ring_close(r);
    return rep->rc != 0;
}

static one_ctx *ctx_new(unsigned size, ps_ring_transport t) {
    one_ctx *c = rk_share(sizeof *c);
    rk_ring_init(&c->k, size, t);
    c->rep = rk_share(RK_MAX_RANKS * sizeof(rk_report));
    c->progress = rk_share(RK_MAX_RANKS * sizeof(int));
    for (unsigned q = 0; q < size; q++)
        c->n[q] = 1000;
    return c;
}

static void ctx_free(one_ctx *c) {
    rk_unshare(c->rep, RK_MAX_RANKS * sizeof(rk_report));
    rk_unshare(c->progress, RK_MAX_RANKS * sizeof(int));
    rk_unshare(c, sizeof *c);
}

/* Rank 0 (a process) against the raw peer that sends bytes after the
 * handshake; rank 0 must fail with want_rc and a reason holding want. */
static void raw_sends(const void *bytes, size_t n, int want_rc, const char *want) {
    one_ctx *c = ctx_new(2, PS_RING_TCP);
    pid_t pid = rk_fork(allreduce_body, c, 0, NULL);
    raw_peer p;
    raw_join(&p, &c->k, c->k.job);
    write_all(p.to_rank0, bytes, n);
    int st = rk_wait(pid, 30000);
    rk_report *rep = &c->rep[0];
    ck_assert_msg(st == 1, "rank 0 exited with %d (%s)", st, rep->err);
    ck_assert_msg(rep->rc == want_rc, "rc %d (%s): %s", rep->rc, ps_errname(rep->rc), rep->err);
    ck_assert_str_eq(rep->stage, "all-reduce");
    char culprit[80];
    snprintf(culprit, sizeof culprit, "rank 1 (%s)", c->k.eps[1]);
    ck_assert_msg(strstr(rep->err, culprit) != NULL, "no \"%s\" in: %s", culprit, rep->err);
    ck_assert_msg(strstr(rep->err, want) != NULL, "no \"%s\" in: %s", want, rep->err);
    /* rank 0 told its neighbour why: an abort frame with the same reason (on
     * the backward link, which carries nothing but keep-alives before it) */
    ps__frame f;
    unsigned char payload[PS_RING_CTRL_MAX];
    long got;
    do {
        got = read_frame(p.to_rank0, &f, payload, sizeof payload);
    } while (got >= 0 && f.type == PS_FRAME_KEEPALIVE);
    ck_assert_msg(got >= 4 && f.type == PS_FRAME_ABORT, "no abort frame (got %ld, type %d)", got,
                  got >= 0 ? f.type : -1);
    ck_assert_msg(memmem(payload + 4, (size_t)got - 4, culprit, strlen(culprit)) != NULL,
                  "abort reason: %.*s", (int)got - 4, payload + 4);
    close(p.to_rank0);
    close(p.from_rank0);
    ctx_free(c);
}

START_TEST(garbage_after_handshake) {
    char junk[200];
    memset(junk, 'x', sizeof junk);
    memcpy(junk, "GET / HTTP/1.1\r\n", 16);
    raw_sends(junk, sizeof junk, PS_EPROTO, "garbage");
}
END_TEST

START_TEST(wrong_size_frame) {
    /* rank 0 expects step 0 chunk 0 of 500 floats (2000 bytes) from us */
    unsigned char buf[PS_RING_HDR + 12];
    ps__frame f = {.type = PS_FRAME_DATA, .op = PS_OP_ALLREDUCE, .len = 12, .total = 4000};
    ps__frame_encode(&f, buf);
    memset(buf + PS_RING_HDR, 0, 12);
    raw_sends(buf, sizeof buf, PS_EPROTO, "12-byte frame");
}
END_TEST

START_TEST(wrong_operation_size) {
    unsigned char buf[PS_RING_HDR];
    ps__frame f = {.type = PS_FRAME_DATA, .op = PS_OP_ALLREDUCE, .len = 2000, .total = 4004};
    ps__frame_encode(&f, buf);
    raw_sends(buf, sizeof buf, PS_EPROTO, "same sizes");
}
END_TEST

START_TEST(huge_abort_frame) {
    unsigned char buf[PS_RING_HDR];
    ps__frame f = {.type = PS_FRAME_ABORT, .len = 1u << 30};
    ps__frame_encode(&f, buf);
    raw_sends(buf, sizeof buf, PS_EPROTO, "abort frame of 1073741824 bytes");
}
END_TEST

/* A stranger's handshake: open fails with PS_EPROTO naming it; the stranger
 * hears why. */
static void bad_handshake(const void *hello, size_t n, const char *want) {
    one_ctx *c = ctx_new(2, PS_RING_TCP);
    pid_t pid = rk_fork(allreduce_body, c, 0, NULL);
    int lfd = raw_listen(c->k.eps[1]); /* rank 0 may connect; it gets no answer */
    int fd = raw_connect(c->k.eps[0]);
    write_all(fd, hello, n);
    int st = rk_wait(pid, 30000);
    rk_report *rep = &c->rep[0];
    ck_assert_msg(st == 1, "rank 0 exited with %d", st);
    ck_assert_msg(rep->rc == PS_EPROTO, "rc %d: %s", rep->rc, rep->err);
    ck_assert_str_eq(rep->stage, "open");
    ck_assert_msg(strstr(rep->err, want) != NULL, "no \"%s\" in: %s", want, rep->err);
    ck_assert_msg(strstr(rep->err, "127.0.0.1:") != NULL, "no peer address in: %s", rep->err);
    ps__frame f;
    unsigned char payload[PS_RING_CTRL_MAX];
    long got = read_frame(fd, &f, payload, sizeof payload);
    if (got >= 0) { /* garbage: rank 0 may just close */
        ck_assert_int_eq(f.type, PS_FRAME_ABORT);
        ck_assert_msg(memmem(payload + 4, (size_t)got - 4, want, strlen(want)) != NULL,
                      "reject reason: %.*s", (int)got - 4, payload + 4);
    }
    close(fd);
    close(lfd);
    ctx_free(c);
}

START_TEST(wrong_job_id_handshake) {
    unsigned char buf[PS_RING_HDR + PS_RING_CTRL_MAX];
    size_t n = ps__hello_build(buf, sizeof buf, PS_FRAME_HELLO, 2, 1, 0, "some-other-job");
    bad_handshake(buf, n, "job \"some-other-job\"");
}
END_TEST

START_TEST(wrong_rank_handshake) {
    unsigned char buf[PS_RING_HDR + PS_RING_CTRL_MAX];
    char job[40];
    snprintf(job, sizeof job, "job-%d", (int)getpid()); /* rk_ring_init's job id */
    size_t n = ps__hello_build(buf, sizeof buf, PS_FRAME_HELLO, 3, 2, 0, job);
    bad_handshake(buf, n, "rank 2 of 3");
}
END_TEST

START_TEST(garbage_handshake) {
    char junk[64];
    memset(junk, 'z', sizeof junk);
    bad_handshake(junk, sizeof junk, "garbage");
}
END_TEST

/* Two real ranks that all-reduce different sizes: both fail, not hang. */
START_TEST(ranks_disagree_on_size) {
    one_ctx *c = ctx_new(2, PS_RING_UNIX);
    c->n[1] = 1001;
    pid_t p0 = rk_fork(allreduce_body, c, 0, NULL), p1 = rk_fork(allreduce_body, c, 1, NULL);
    int s0 = rk_wait(p0, 30000), s1 = rk_wait(p1, 30000);
    ck_assert_msg(s0 == 1 && s1 == 1, "exit %d %d", s0, s1);
    for (int q = 0; q < 2; q++) {
        ck_assert_msg(c->rep[q].rc == PS_EPROTO, "rank %d rc %d: %s", q, c->rep[q].rc,
                      c->rep[q].err);
        ck_assert_msg(strstr(c->rep[q].err, "same sizes") != NULL, "rank %d: %s", q, c->rep[q].err);
    }
    ctx_free(c);
}
END_TEST

/* 3 ranks loop big all-reduces; `victim` gets sig once all have done two;
 * the others must fail within the bound, naming the victim. */
static void lose_a_rank_in(int gatherv, int sig, unsigned victim, unsigned timeout_ms,
                           int want_rc, const char *want) {
    one_ctx *c = ctx_new(3, PS_RING_TCP);
    c->gatherv = gatherv;
    c->k.cfg.timeout_ms = timeout_ms;
    c->loops = 1000000;
    for (unsigned q = 0; q < 3; q++)
        c->n[q] = (size_t)4 << 20;
    pid_t pid[3];
    for (unsigned q = 0; q < 3; q++)
        pid[q] = rk_fork(allreduce_body, c, q, NULL);
    long long deadline = ps_test_now_ms() + 60000;
    while (__atomic_load_n(&c->progress[0], __ATOMIC_SEQ_CST) < 2 ||
           __atomic_load_n(&c->progress[1], __ATOMIC_SEQ_CST) < 2 ||
           __atomic_load_n(&c->progress[2], __ATOMIC_SEQ_CST) < 2) {
        ck_assert_msg(ps_test_now_ms() < deadline, "the ranks did not get going");
        ps_test_nap_ms(5);
    }
    long long t_kill = ps_test_now_ms();
    kill(pid[victim], sig);
    char culprit[80];
    snprintf(culprit, sizeof culprit, "rank %u (%s)", victim, c->k.eps[victim]);
    for (unsigned q = 0; q < 3; q++) {
        if (q == victim) continue;
        int st = rk_wait(pid[q], (int)timeout_ms + 20000);
        long long took = ps_test_now_ms() - t_kill;
        ck_assert_msg(st == 1, "rank %u exited with %d", q, st);
        ck_assert_msg(took <= (long long)timeout_ms + 15000, "rank %u took %lld ms", q, took);
        ck_assert_msg(c->rep[q].rc == want_rc, "rank %u rc %d (%s): %s", q, c->rep[q].rc,
                      ps_errname(c->rep[q].rc), c->rep[q].err);
        ck_assert_msg(strstr(c->rep[q].err, culprit) != NULL, "rank %u: no \"%s\" in: %s", q,
                      culprit, c->rep[q].err);
        ck_assert_msg(strstr(c->rep[q].err, want) != NULL, "rank %u: no \"%s\" in: %s", q, want,
                      c->rep[q].err);
    }
    kill(pid[victim], SIGKILL);
    rk_wait(pid[victim], 10000);
    ctx_free(c);
}

static void lose_a_rank(int sig, unsigned victim, unsigned timeout_ms, int want_rc,
                        const char *want) {
    lose_a_rank_in(0, sig, victim, timeout_ms, want_rc, want);
}

/* The same mid-allgatherv (the blocks of a mirrored table's rows). */
START_TEST(rank_killed_mid_allgatherv) {
    lose_a_rank_in(1, SIGKILL, 1, 5000, PS_EIO, "closed the connection");
}
END_TEST

START_TEST(rank_frozen_mid_allgatherv) {
    lose_a_rank_in(1, SIGSTOP, 2, 1500, PS_ETIMEDOUT, "sent nothing for 1500 ms");
}
END_TEST

/* A rank announcing a block over the bound is named by every rank, and none hangs. */
START_TEST(allgatherv_block_too_long) {
    one_ctx *c = ctx_new(3, PS_RING_UNIX);
    c->gatherv = 1;
    c->max_len[0] = c->max_len[1] = 4000 + 8; /* rank 2 sends 4000 + 16 */
    pid_t pid[3];
    for (unsigned q = 0; q < 3; q++)
        pid[q] = rk_fork(allreduce_body, c, q, NULL);
    char culprit[120];
    snprintf(culprit, sizeof culprit, "rank 2 (%s) announced an allgatherv block of 4016 bytes",
             c->k.eps[2]);
    for (unsigned q = 0; q < 3; q++) {
        int st = rk_wait(pid[q], 30000);
        ck_assert_msg(st == 1, "rank %u exited with %d (%s)", q, st, c->rep[q].err);
        if (q == 2) continue; /* it fails once the others leave */
        ck_assert_msg(c->rep[q].rc == PS_EPROTO, "rank %u rc %d: %s", q, c->rep[q].rc,
                      c->rep[q].err);
        ck_assert_msg(strstr(c->rep[q].err, culprit) != NULL, "rank %u: no \"%s\" in: %s", q,
                      culprit, c->rep[q].err);
    }
    ctx_free(c);
}
END_TEST

START_TEST(rank_killed_mid_allreduce) {
    lose_a_rank(SIGKILL, 2, 5000, PS_EIO, "closed the connection");
}
END_TEST

START_TEST(rank_frozen_mid_allreduce) {
    lose_a_rank(SIGSTOP, 1, 1500, PS_ETIMEDOUT, "sent nothing for 1500 ms");
}
END_TEST

/* Rank 1 closes its ring without the all-reduce rank 0 runs. */
static int close_early_body(void *vctx, unsigned rank) {
    one_ctx *c = vctx;
    if (rank == 0) return allreduce_body(vctx, rank);
    ps_ring *r = NULL;
    char err[700];
    int rc = rk_open(&c->k, rank, &r, err, sizeof err);
    if (rc != PS_OK) return rk_fail(&c->rep[rank], rc, "open", err);
    ps_ring_close(r);
    snprintf(c->rep[rank].stage, sizeof c->rep[rank].stage, "done");
    return 0;
}

START_TEST(neighbour_closes_early) {
    one_ctx *c = ctx_new(2, PS_RING_AUTO);
    c->n[0] = (size_t)1 << 20;
    pid_t p0 = rk_fork(close_early_body, c, 0, NULL), p1 = rk_fork(close_early_body, c, 1, NULL);
    ck_assert_int_eq(rk_wait(p1, 30000), 0);
    ck_assert_int_eq(rk_wait(p0, 30000), 1);
    char culprit[80];
    snprintf(culprit, sizeof culprit, "rank 1 (%s) left the ring", c->k.eps[1]);
    ck_assert_msg(c->rep[0].rc == PS_ESHUTDOWN, "rc %d: %s", c->rep[0].rc, c->rep[0].err);
    ck_assert_msg(strstr(c->rep[0].err, culprit) != NULL, "%s", c->rep[0].err);
    ctx_free(c);
}
END_TEST

START_TEST(ring_cannot_form) {
    rk_ring k;
    rk_ring_init(&k, 2, PS_RING_AUTO);
    k.cfg.connect_timeout_ms = 1000;
    ps_ring *r = NULL;
    char err[700];
    long long t0 = ps_test_now_ms();
    int rc = rk_open(&k, 0, &r, err, sizeof err);
    long long took = ps_test_now_ms() - t0;
    ck_assert_msg(rc == PS_ETIMEDOUT, "rc %d: %s", rc, err);
    ck_assert_ptr_null(r);
    ck_assert_msg(took >= 900 && took < 6000, "took %lld ms", took);
    char want[80];
    snprintf(want, sizeof want, "rank 1 (next) at %s", k.eps[1]);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    ck_assert_msg(strstr(err, "did not connect") != NULL, "%s", err);
}
END_TEST

START_TEST(endpoint_taken) {
    rk_ring k;
    rk_ring_init(&k, 2, PS_RING_TCP);
    int lfd = raw_listen(k.eps[0]);
    ps_ring *r = NULL;
    char err[700];
    int rc = rk_open(&k, 0, &r, err, sizeof err);
    ck_assert_msg(rc == PS_EADDRINUSE, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(err, k.eps[0]) != NULL, "%s", err);
    close(lfd);
}
END_TEST

static Suite *faults_suite(void) {
    Suite *s = suite_create("ring_faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 200);
    tcase_add_test(tc, garbage_after_handshake);
    tcase_add_test(tc, wrong_size_frame);
    tcase_add_test(tc, wrong_operation_size);
    tcase_add_test(tc, huge_abort_frame);
    tcase_add_test(tc, wrong_job_id_handshake);
    tcase_add_test(tc, wrong_rank_handshake);
    tcase_add_test(tc, garbage_handshake);
    tcase_add_test(tc, ranks_disagree_on_size);
    tcase_add_test(tc, rank_killed_mid_allreduce);
    tcase_add_test(tc, rank_frozen_mid_allreduce);
    tcase_add_test(tc, rank_killed_mid_allgatherv);
    tcase_add_test(tc, rank_frozen_mid_allgatherv);
    tcase_add_test(tc, allgatherv_block_too_long);
    tcase_add_test(tc, neighbour_closes_early);
    tcase_add_test(tc, ring_cannot_form);
    tcase_add_test(tc, endpoint_taken);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(faults_suite());
}
