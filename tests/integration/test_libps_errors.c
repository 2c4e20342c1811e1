/* libps's error paths through the public header only (ps.h): an unreachable shard, bad
 * endpoints, calls in the wrong order, bad placement input, psd restarted mid-loop (with
 * and without a checkpoint). Each is a return code and a message, nothing is printed
 * (stdout and stderr are captured), and nothing leaks (the ASan build runs this file too). */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "testutil.h"

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' does not contain '%s'", (hay), (needle))

/* ---- stdout and stderr captured into a temp file while the library runs ---- */

typedef struct {
    int saved_out, saved_err, fd;
    char path[64];
} capture;

static void capture_begin(capture *k) {
    fflush(stdout);
    fflush(stderr);
    snprintf(k->path, sizeof k->path, "/tmp/libps-capture.XXXXXX");
    k->fd = mkstemp(k->path);
    ck_assert_int_ge(k->fd, 0);
    k->saved_out = dup(STDOUT_FILENO);
    k->saved_err = dup(STDERR_FILENO);
    ck_assert_int_ge(dup2(k->fd, STDOUT_FILENO), 0);
    ck_assert_int_ge(dup2(k->fd, STDERR_FILENO), 0);
}

/* Restores stdout/stderr and fails when anything was written meanwhile. */
static void capture_end_expect_silence(capture *k) {
    fflush(stdout);
    fflush(stderr);
    dup2(k->saved_out, STDOUT_FILENO);
    dup2(k->saved_err, STDERR_FILENO);
    close(k->saved_out);
    close(k->saved_err);
    char buf[512] = "";
    ssize_t n = pread(k->fd, buf, sizeof buf - 1, 0);
    close(k->fd);
    unlink(k->path);
    ck_assert_msg(n == 0, "the library printed: %s", n > 0 ? buf : "?");
}

/* A TCP port on 127.0.0.1 that refuses connections for as long as *fd stays open: bound,
 * never listening (so no other test can take it meanwhile). */
static int refusing_port(int *fd) {
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(*fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(*fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(*fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

static ps_client_tensor tensor(const char *name, float *param, float *grad, size_t n) {
    ps_client_tensor t = {.shard = 0, .rank = 1, .shape = {n}, .param = param, .grad = grad};
    snprintf(t.name, sizeof t.name, "%s", name);
    t.opt = ps_opt_spec_default(PS_OPT_SGD);
    return t;
}

/* Counts the lines the library logged through the callback, keeping the last. */
typedef struct {
    int lines;
    char last[256];
} log_sink;

static void sink(void *user, ps_lib_log_level level, const char *line) {
    log_sink *s = user;
    (void)level;
    s->lines++;
    snprintf(s->last, sizeof s->last, "%s", line);
}

/* ---- the tests ---- */

START_TEST(unreachable_shard_times_out_with_a_clear_error) {
    int hold;
    char ep[64], err[256];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", refusing_port(&hold));
    const char *eps[1] = {ep};
    log_sink logged = {0};
    ps_lib_set_log(sink, &logged, PS_LIB_LOG_DEBUG);
    capture k;
    capture_begin(&k);
    ps_client *c;
    int rc = ps_client_open(&c, eps, 1, 0, 1, err, sizeof err);
    ck_assert_int_eq(rc, PS_OK);
    ck_assert_int_eq(ps_client_set_timeout(c, 1500), PS_OK);
    ck_assert_int_eq(ps_client_set_retry(c, 200), PS_OK); /* probes and reconnects too */
    long long t0 = ps_test_now_ms();
    rc = ps_client_hello(c, NULL, NULL);
    long long took = ps_test_now_ms() - t0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ps_client_error(c));
    /* an admin request to the same shard: the same, without probes */
    ps_stats st;
    int rc2 = ps_client_stats(c, 0, &st);
    ps_client_close(c);
    capture_end_expect_silence(&k);
    ps_lib_set_log(NULL, NULL, PS_LIB_LOG_INFO);
    close(hold);
    ck_assert_msg(rc == PS_ETIMEDOUT, "hello: %s (%s)", ps_errname(rc), msg);
    ck_assert_contains(msg, "no answer from psd 0");
    ck_assert_contains(msg, ep);
    ck_assert_contains(msg, "1500 ms");
    ck_assert_msg(took >= 1400 && took < 4000, "hello gave up after %lld ms", took);
    ck_assert_int_eq(rc2, PS_ETIMEDOUT);
    /* the reconnects were logged, through the callback only */
    ck_assert_int_ge(logged.lines, 1);
    ck_assert_contains(logged.last, "does not answer");
}
END_TEST

START_TEST(bad_endpoints_are_refused_at_open) {
    char long_ipc[300] = "ipc:///tmp/"; /* longer than a Unix socket path can be */
    memset(long_ipc + strlen(long_ipc), 'a', 200);
    char long_host[400];
    memset(long_host, 'h', 300);
    snprintf(long_host + 300, sizeof long_host - 300, ":5000");
    const char *const bad[] = {"not-an-endpoint", "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:",
                               ":5000",           "ipc://",          long_ipc};
    capture k;
    capture_begin(&k);
    int rcs[sizeof bad / sizeof bad[0]];
    char errs[sizeof bad / sizeof bad[0]][256];
    ps_client *outs[sizeof bad / sizeof bad[0]];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *eps[2] = {"127.0.0.1:5000", bad[i]};
        errs[i][0] = 0;
        rcs[i] = ps_client_open(&outs[i], eps, 2, 0, 1, errs[i], sizeof errs[i]);
    }
    char none_err[256] = "";
    ps_client *none = (ps_client *)(uintptr_t)1; /* must be set to NULL */
    int rc_none = ps_client_open(&none, NULL, 0, 0, 1, none_err, sizeof none_err);
    capture_end_expect_silence(&k);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(rcs[i] == PS_EINVAL, "'%s': %s", bad[i], ps_errname(rcs[i]));
        ck_assert_ptr_null(outs[i]);
        ck_assert_contains(errs[i], "endpoint 1");
    }
    ck_assert_int_eq(rc_none, PS_EINVAL);
    ck_assert_ptr_null(none);
    ck_assert_contains(none_err, "no parameter servers");
}
END_TEST

START_TEST(calls_out_of_order_are_einval_with_a_message) {
    /* no shard needed: each of these is refused before anything is sent */
    int hold;
    char ep[64], err[256];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", refusing_port(&hold));
    const char *eps[1] = {ep};
    float p[4] = {0}, g[4] = {0};
    capture k;
    capture_begin(&k);
    ps_client *c;
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_tensor t = tensor("w", p, g, 4);
    int add = ps_client_add(c, &t);
    struct {
        const char *call;
        int rc;
        char msg[512];
    } got[10];
    size_t n = 0;
#define TRY(expr)                                                                                  \
    do {                                                                                           \
        got[n].call = #expr;                                                                       \
        got[n].rc = (expr);                                                                        \
        snprintf(got[n].msg, sizeof got[n].msg, "%s", ps_client_error(c));                         \
        n++;                                                                                       \
    } while (0)
    int applied = -1;
    size_t dropped = 99;
    int fresh = -1;
    TRY(ps_client_push(c, 0, &applied));
    TRY(ps_client_push_next(c, 0, &dropped));
    TRY(ps_client_pull(c, 0, NULL));
    TRY(ps_client_pull_next(c, 0, 0, NULL));
    TRY(ps_client_step_begin(c, 0));
    TRY(ps_client_grads_ready(c, g, g + 4));
    TRY(ps_client_step_end(c, &dropped, &fresh));
    TRY(ps_client_check_shards(c, NULL, 0, NULL));
    t.shard = 3;
    TRY(ps_client_add(c, &t));
    TRY(ps_client_stats(c, 7, &(ps_stats){0}));
#undef TRY
    ps_client_close(c);
    capture_end_expect_silence(&k);
    close(hold);
    ck_assert_int_eq(add, PS_OK);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(got[i].rc == PS_EINVAL, "%s: %s (%s)", got[i].call, ps_errname(got[i].rc),
                      got[i].msg);
        ck_assert_msg(got[i].msg[0] != 0, "%s: no message", got[i].call);
    }
    ck_assert_contains(got[0].msg, "push before ps_client_hello");
    ck_assert_contains(got[2].msg, "pull before ps_client_hello");
    ck_assert_contains(got[4].msg, "step_begin before ps_client_hello");
    ck_assert_contains(got[5].msg, "outside a step exchange");
    ck_assert_contains(got[6].msg, "step_end without step_begin");
    ck_assert_int_eq(dropped, 0);
    ck_assert_int_eq(fresh, 0);
    ck_assert_contains(got[8].msg, "shard 3 out of range");
    ck_assert_contains(got[9].msg, "shard 7 out of range");
}
END_TEST

START_TEST(step_exchange_out_of_order_against_a_live_shard) {
    ps_test_psd psd;
    ck_assert_int_eq(ps_test_psd_start(&psd, NULL, 10000), 0);
    const char *eps[1] = {psd.endpoint};
    float p[4] = {1, 2, 3, 4}, g[4] = {0};
    char err[256];
    capture k;
    capture_begin(&k);
    ps_client *c;
    ck_assert_int_eq(ps_client_open(&c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(c, 5000);
    ps_client_tensor t = tensor("w", p, g, 4);
    ck_assert_int_eq(ps_client_add(c, &t), PS_OK);
    int hello = ps_client_hello(c, NULL, NULL);
    int create = ps_client_create_vars(c, NULL);
    int begin = ps_client_step_begin(c, 0);
    int again = ps_client_step_begin(c, 0);
    char again_msg[512];
    snprintf(again_msg, sizeof again_msg, "%s", ps_client_error(c));
    int pull = ps_client_pull(c, 0, NULL);
    char pull_msg[512];
    snprintf(pull_msg, sizeof pull_msg, "%s", ps_client_error(c));
    int ready = ps_client_grads_ready(c, g, g + 4);
    int fresh = 0;
    int end = ps_client_step_end(c, NULL, &fresh);
    int end_again = ps_client_step_end(c, NULL, NULL);
    int bye = ps_client_goodbye(c);
    ps_client_close(c);
    capture_end_expect_silence(&k);
    ck_assert_int_eq(hello, PS_OK);
    ck_assert_int_eq(create, PS_OK);
    ck_assert_int_eq(begin, PS_OK);
    ck_assert_int_eq(again, PS_EINVAL);
    ck_assert_contains(again_msg, "already open");
    ck_assert_int_eq(pull, PS_EINVAL);
    ck_assert_contains(pull_msg, "during a step exchange");
    ck_assert_int_eq(ready, PS_OK);
    ck_assert_int_eq(end, PS_OK);
    ck_assert_int_eq(fresh, 1);
    ck_assert_int_eq(end_again, PS_EINVAL);
    ck_assert_int_eq(bye, PS_OK);
    ck_assert_int_eq(ps_test_psd_stop(&psd, 10000), 0);
}
END_TEST

START_TEST(placement_is_public_and_checks_its_input) {
    const size_t kernel[2] = {784, 128}, bias[1] = {128}, zero[2] = {3, 0};
    ps_var_desc vars[2] = {{"dense/kernel", 2, kernel}, {"dense/bias", 1, bias}};
    ps_piece *pieces = NULL;
    size_t n = 0;
    char err[256] = "";
    ck_assert_int_eq(ps_place_vars(vars, 2, 2, &pieces, &n, err, sizeof err), PS_OK);
    /* docs/ARCHITECTURE.md: the 784x128 kernel is split in two on 2 shards */
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(pieces[0].name, "dense/kernel/part_0");
    ck_assert_uint_eq(pieces[0].row_begin, 0);
    ck_assert_uint_eq(pieces[0].row_end, 392);
    ck_assert_uint_eq(pieces[1].row_begin, 392);
    ck_assert_uint_eq(pieces[1].row_end, 784);
    ck_assert_uint_ne(pieces[0].shard, pieces[1].shard);
    ck_assert_str_eq(pieces[2].name, "dense/bias");
    ck_assert_uint_eq(pieces[2].num_parts, 1);
    ps_pieces_free(pieces);

    ps_var_desc dup[2] = {{"a", 1, bias}, {"a", 1, bias}};
    ps_var_desc empty_dim[1] = {{"z", 2, zero}};
    capture k;
    capture_begin(&k);
    int r_dup = ps_place_vars(dup, 2, 2, &pieces, &n, err, sizeof err);
    char dup_err[256];
    snprintf(dup_err, sizeof dup_err, "%s", err);
    int r_zero = ps_place_vars(empty_dim, 1, 2, &pieces, &n, err, sizeof err);
    char zero_err[256];
    snprintf(zero_err, sizeof zero_err, "%s", err);
    int r_shards = ps_place_vars(vars, 2, 0, &pieces, &n, err, sizeof err);
    capture_end_expect_silence(&k);
    ck_assert_int_eq(r_dup, PS_EINVAL);
    ck_assert_contains(dup_err, "unique");
    ck_assert_int_eq(r_zero, PS_EINVAL);
    ck_assert_contains(zero_err, "dimension 1 is 0");
    ck_assert_int_eq(r_shards, PS_EINVAL);
    ck_assert_contains(err, "no shards");
    ck_assert_ptr_null(pieces);
    ck_assert_uint_eq(n, 0);
}
END_TEST

/* ---- psd SIGKILLed between steps and started again on its port ---- */

/* One sync training loop's worth of client against psd p: a 4-float variable, created,
 * then `steps` rounds of pull_next / push_next. The client and the log sink stay open. */
typedef struct {
    ps_client *c;
    float w[4], dw[4];
    uint64_t clock;
} loop_client;

static void loop_open(loop_client *l, const ps_test_psd *p) {
    const char *eps[1] = {p->endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(&l->c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(l->c, 20000);
    ps_client_set_retry(l->c, 300);
    ps_client_tensor t = tensor("w", l->w, l->dw, 4);
    ck_assert_int_eq(ps_client_add(l->c, &t), PS_OK);
    ck_assert_msg(ps_client_hello(l->c, NULL, NULL) == PS_OK, "%s", ps_client_error(l->c));
    ck_assert_msg(ps_client_create_vars(l->c, NULL) == PS_OK, "%s", ps_client_error(l->c));
}

/* Runs steps rounds of the training loop's pull and push; each must succeed. */
static void loop_steps(loop_client *l, int steps) {
    for (int s = 0; s < steps; s++, l->clock++) {
        ck_assert_msg(ps_client_pull_next(l->c, 0, l->clock, NULL) == PS_OK, "%s",
                      ps_client_error(l->c));
        for (int i = 0; i < 4; i++)
            l->dw[i] = 0.5f * (float)(i + 1);
        size_t dropped = 9;
        ck_assert_msg(ps_client_push_next(l->c, l->clock, &dropped) == PS_OK, "%s",
                      ps_client_error(l->c));
        ck_assert_uint_eq(dropped, 0);
    }
}

/* A call's outcome: its code, its message, how long it took. */
typedef struct {
    int rc;
    long long ms;
    char msg[512];
} outcome;

#define CALL(out, c, expr)                                                                         \
    do {                                                                                           \
        long long t0_ = ps_test_now_ms();                                                          \
        (out).rc = (expr);                                                                         \
        (out).ms = ps_test_now_ms() - t0_;                                                         \
        snprintf((out).msg, sizeof(out).msg, "%s", ps_client_error(c));                            \
    } while (0)

/* A restart scenario: psd started with args, the library's log going to `logged`, stdout
 * and stderr captured, and a training loop client that made 3 steps. */
typedef struct {
    ps_test_psd psd;
    log_sink logged;
    capture k;
    loop_client l;
} restart_run;

static void restart_run_begin(restart_run *r, const char *const *args) {
    memset(r, 0, sizeof *r);
    ck_assert_int_eq(ps_test_psd_start(&r->psd, args, 10000), 0);
    ps_lib_set_log(sink, &r->logged, PS_LIB_LOG_DEBUG);
    capture_begin(&r->k);
    loop_open(&r->l, &r->psd);
    loop_steps(&r->l, 3);
}

/* Closes the client, checks nothing was printed, and stops the log (psd keeps running). */
static void restart_run_end(restart_run *r) {
    ps_client_close(r->l.c);
    capture_end_expect_silence(&r->k);
    ps_lib_set_log(NULL, NULL, PS_LIB_LOG_INFO);
}

/* Without a checkpoint the restarted psd holds nothing: every request after it is
 * PS_ELOST naming the shard (never a hang, never PS_ENOENT). */
START_TEST(psd_restarted_empty_mid_loop_is_elost) {
    const char *args[] = {"--workers", "1", "--mode", "sync", NULL};
    restart_run r;
    restart_run_begin(&r, args);
    ps_client *c = r.l.c;
    ps_test_psd_kill(&r.psd);
    int restarted = ps_test_psd_restart(&r.psd, args, 10000);
    outcome push, pull;
    CALL(push, c, ps_client_push_next(c, r.l.clock, NULL));
    CALL(pull, c, ps_client_pull_next(c, 0, r.l.clock, NULL));
    restart_run_end(&r);
    ck_assert_int_eq(restarted, 0);
    outcome *both[2] = {&push, &pull};
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(both[i]->rc == PS_ELOST, "%s: %s (%s)", i ? "pull" : "push",
                      ps_errname(both[i]->rc), both[i]->msg);
        ck_assert_contains(both[i]->msg, "psd 0");
        ck_assert_contains(both[i]->msg, r.psd.endpoint);
        ck_assert_contains(both[i]->msg, "lost the job's variables");
        /* well before the 20 s request deadline: the restart is seen, not waited out */
        ck_assert_msg(both[i]->ms < 10000, "%s took %lld ms", i ? "pull" : "push", both[i]->ms);
    }
    ck_assert_int_eq(ps_test_psd_stop(&r.psd, 10000), 0);
}
END_TEST

/* Restored from a checkpoint, psd is at the checkpoint's version: the push in flight
 * across the restart is PS_ERESTARTED (its gradients were for a version the shard no
 * longer has), the restart is logged through the callback only, and a pull then goes on
 * from the restored values. */
START_TEST(psd_restarted_from_checkpoint_mid_loop_is_erestarted) {
    char *dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *args[] = {"--workers", "1", "--mode", "sync", "--checkpoint-dir", ck, NULL};
    restart_run r;
    restart_run_begin(&r, args);
    ps_client *c = r.l.c;
    ps_checkpoint_info info = {0};
    int ckpt = ps_client_checkpoint(c, 0, &info);
    float at_ckpt[4];
    uint64_t v_ckpt = 0;
    int pulled = ps_client_pull(c, info.version, &v_ckpt);
    memcpy(at_ckpt, r.l.w, sizeof at_ckpt);
    loop_steps(&r.l, 2); /* the shard moves past the checkpoint, then dies */
    ps_test_psd_kill(&r.psd);
    int restarted = ps_test_psd_restart(&r.psd, args, 10000);
    outcome push, pull;
    CALL(push, c, ps_client_push_next(c, r.l.clock, NULL));
    uint64_t v_after = 0;
    CALL(pull, c, ps_client_pull_next(c, 0, r.l.clock, &v_after));
    float after[4];
    memcpy(after, r.l.w, sizeof after);
    loop_steps(&r.l, 2); /* and the loop goes on */
    restart_run_end(&r);
    ck_assert_int_eq(ckpt, PS_OK);
    ck_assert_uint_eq(info.version, 3);
    ck_assert_int_eq(pulled, PS_OK);
    ck_assert_uint_eq(v_ckpt, 3);
    ck_assert_int_eq(restarted, 0);
    ck_assert_msg(ps_test_file_has(r.psd.log, "restored checkpoint"), "psd did not restore");
    ck_assert_msg(push.rc == PS_ERESTARTED, "push: %s (%s)", ps_errname(push.rc), push.msg);
    ck_assert_contains(push.msg, "psd 0 restarted from a checkpoint");
    ck_assert_msg(push.ms < 10000, "push took %lld ms", push.ms);
    ck_assert_msg(pull.rc == PS_OK, "pull: %s (%s)", ps_errname(pull.rc), pull.msg);
    ck_assert_uint_eq(v_after, 3);
    ck_assert_msg(memcmp(after, at_ckpt, sizeof after) == 0,
                  "pulled values are not the checkpoint's");
    ck_assert_int_ge(r.logged.lines, 1);
    ck_assert_contains(r.logged.last, "restarted");
    ck_assert_int_eq(ps_test_psd_stop(&r.psd, 10000), 0);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("libps_errors");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, unreachable_shard_times_out_with_a_clear_error);
    tcase_add_test(tc, bad_endpoints_are_refused_at_open);
    tcase_add_test(tc, calls_out_of_order_are_einval_with_a_message);
    tcase_add_test(tc, step_exchange_out_of_order_against_a_live_shard);
    tcase_add_test(tc, placement_is_public_and_checks_its_input);
    suite_add_tcase(s, tc);
    TCase *restart = tcase_create("restart");
    tcase_set_timeout(restart, 90);
    tcase_add_test(restart, psd_restarted_empty_mid_loop_is_elost);
    tcase_add_test(restart, psd_restarted_from_checkpoint_mid_loop_is_erestarted);
    suite_add_tcase(s, restart);
    return ps_test_run_suite(s);
}
