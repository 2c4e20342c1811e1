/* psd checkpoints through real processes on 127.0.0.1:
 * - SIGTERM writes a checkpoint and exits 0; a restart restores the same
 *   version and bit-identical values, and its optimizer state (a further
 *   step gives bit-identical results to a psd that never stopped);
 * - a truncated or bit-flipped checkpoint is never loaded: the older valid
 *   one is, and with none valid psd starts empty;
 * - kill -9 at random moments while checkpoints are being written, 20
 *   times: every restart loads a valid checkpoint holding exactly the
 *   values the shard had at that checkpoint's version. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "crc32c.h"
#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"
#include "wire.h"

enum { REPLY_MS = 10000 };

typedef struct {
    ps_client *c;
    float *w, *dw; /* n floats */
    size_t n;
} client;

/* A worker-0 client of a 1-worker sync job holding one Adam variable "w" [n]. */
static void client_open(client *k, const ps_test_psd *p, size_t n, int create) {
    memset(k, 0, sizeof *k);
    k->n = n;
    k->w = malloc(n * sizeof *k->w);
    k->dw = malloc(n * sizeof *k->dw);
    ck_assert(k->w && k->dw);
    for (size_t i = 0; i < n; i++) {
        k->w[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        k->dw[i] = 0.0f;
    }
    const char *eps[1] = {p->endpoint};
    char err[256];
    ck_assert_int_eq(ps_client_open(&k->c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ps_client_set_timeout(k->c, REPLY_MS);
    ps_client_tensor t = {
        .name = "w", .shard = 0, .rank = 1, .shape = {n}, .opt = ps_opt_spec_default(PS_OPT_ADAM)};
    t.param = k->w;
    t.grad = k->dw;
    ck_assert_int_eq(ps_client_add(k->c, &t), PS_OK);
    ck_assert_msg(ps_client_hello(k->c, NULL, NULL) == PS_OK, "%s", ps_client_error(k->c));
    if (create)
        ck_assert_msg(ps_client_create_vars(k->c, NULL) == PS_OK, "%s", ps_client_error(k->c));
}

static void client_close(client *k) {
    ps_client_close(k->c);
    free(k->w);
    free(k->dw);
}

/* One sync step with gradient g(i, step); returns the new version. */
static uint64_t step(client *k, uint64_t s) {
    for (size_t i = 0; i < k->n; i++)
        k->dw[i] = (float)(((i + 7 * s) % 13)) / 13.0f - 0.4f;
    ck_assert_msg(ps_client_push(k->c, s, NULL) == PS_OK, "%s", ps_client_error(k->c));
    uint64_t v = 0;
    ck_assert_msg(ps_client_pull(k->c, s + 1, &v) == PS_OK, "%s", ps_client_error(k->c));
    return v;
}

static uint64_t pull_now(client *k) {
    uint64_t v = 0;
    ck_assert_msg(ps_client_pull(k->c, 0, &v) == PS_OK, "%s", ps_client_error(k->c));
    return v;
}

static int log_has(const ps_test_psd *p, const char *what) {
    FILE *f = fopen(p->log, "r");
    if (!f) return 0;
    char line[2048];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

START_TEST(sigterm_checkpoint_restores_bit_identical) {
    char *dir = ps_test_mkdtemp();
    char ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *args[] = {"--workers", "1", "--checkpoint-dir", ck, "--checkpoint-every",
                          "0",         NULL};
    const char *plain[] = {"--workers", "1", NULL};
    ps_test_psd a, ctl;
    ck_assert_int_eq(ps_test_psd_start(&a, args, 10000), 0);
    ck_assert_int_eq(ps_test_psd_start(&ctl, plain, 10000), 0); /* never stops */
    client ka, kc;
    client_open(&ka, &a, 1000, 1);
    client_open(&kc, &ctl, 1000, 1);
    for (uint64_t s = 0; s < 5; s++) {
        ck_assert_uint_eq(step(&ka, s), s + 1);
        ck_assert_uint_eq(step(&kc, s), s + 1);
    }
    float *before = malloc(ka.n * sizeof *before);
    memcpy(before, ka.w, ka.n * sizeof *before);
    client_close(&ka);

    ck_assert_int_eq(kill(a.pid, SIGTERM), 0);
    ck_assert_int_eq(ps_test_wait(a.pid, 10000), 0); /* exit status 0 */
    a.pid = 0;
    ck_assert_msg(log_has(&a, "checkpoint version 5 written"), "no checkpoint at SIGTERM");

    ck_assert_int_eq(ps_test_psd_restart(&a, args, 10000), 0);
    ck_assert_msg(log_has(&a, "restored checkpoint"), "the restart did not restore");
    client_open(&ka, &a, 1000, 1); /* CreateVars again: kept, not replaced */
    ck_assert_uint_eq(pull_now(&ka), 5);
    ck_assert_int_eq(memcmp(ka.w, before, ka.n * sizeof *before), 0);
    /* Adam's slots and step count came back too: one more step matches the
     * psd that never stopped, bit for bit */
    ck_assert_uint_eq(step(&ka, 5), 6);
    ck_assert_uint_eq(step(&kc, 5), 6);
    ck_assert_int_eq(memcmp(ka.w, kc.w, ka.n * sizeof *before), 0);
    free(before);
    client_close(&ka);
    client_close(&kc);
    ck_assert_int_eq(ps_test_psd_stop(&a, 10000), 0);
    ck_assert_int_eq(ps_test_psd_stop(&ctl, 10000), 0);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* Asks psd for a checkpoint now (the client library has no call for it). */
static void request_checkpoint(const ps_test_psd *p, int wait_reply, uint64_t *version) {
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = wait_reply ? 0 : 5000; /* without a reply: closing waits until it is sent */
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    char ep[300];
    snprintf(ep, sizeof ep, "tcp://%s", p->endpoint);
    ck_assert_int_eq(zmq_connect(s, ep), 0);
    Ps__Header h = PS__HEADER__INIT;
    Ps__Checkpoint c = PS__CHECKPOINT__INIT;
    h.protocol_version = PS_PROTOCOL_VERSION;
    h.request_id = 99;
    h.body_case = PS__HEADER__BODY_CHECKPOINT;
    h.checkpoint = &c;
    ck_assert_int_eq(ps_wire_send(s, NULL, 0, &h, NULL, 0, 0), PS_OK);
    if (wait_reply) {
        zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
        ck_assert_int_eq(zmq_poll(&it, 1, REPLY_MS), 1);
        ps_frames f;
        ck_assert_int_eq(ps_frames_recv(s, 0, &f), PS_OK);
        Ps__Header *r = NULL;
        char err[256];
        ck_assert_int_eq(ps_header_decode(zmq_msg_data(&f.frames[0]), zmq_msg_size(&f.frames[0]),
                                          &r, err, sizeof err),
                         PS_OK);
        ck_assert_int_eq(r->body_case, PS__HEADER__BODY_CHECKPOINT_REPLY);
        if (version) *version = r->checkpoint_reply->version;
        ps__header__free_unpacked(r, NULL);
        ps_frames_close(&f);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* The checkpoint files of dir, newest last (names sort by version). */
static size_t list_ckpts(const char *dir, char names[][300], size_t max) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "ls %s | grep '^ckpt-' | sort", dir);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = 0;
    while (n < max && fgets(names[n], 300, f)) {
        names[n][strcspn(names[n], "\n")] = 0;
        n++;
    }
    pclose(f);
    return n;
}

START_TEST(corrupt_checkpoints_never_loaded) {
    char *dir = ps_test_mkdtemp();
    char ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *args[] = {"--workers", "1", "--checkpoint-dir", ck, "--checkpoint-every",
                          "0",         NULL};
    ps_test_psd a;
    ck_assert_int_eq(ps_test_psd_start(&a, args, 10000), 0);
    client k;
    client_open(&k, &a, 5000, 1);
    uint64_t v = 0;
    step(&k, 0);
    request_checkpoint(&a, 1, &v); /* version 1 */
    ck_assert_uint_eq(v, 1);
    float *at1 = malloc(k.n * sizeof *at1);
    pull_now(&k);
    memcpy(at1, k.w, k.n * sizeof *at1);
    step(&k, 1);
    request_checkpoint(&a, 1, &v); /* version 2 */
    ck_assert_uint_eq(v, 2);
    client_close(&k);
    ps_test_psd_kill(&a); /* no checkpoint at exit */

    char names[8][300], path[1100];
    ck_assert_uint_eq(list_ckpts(ck, names, 8), 2);
    /* flip one byte in the middle of the newest */
    snprintf(path, sizeof path, "%s/%s", ck, names[1]);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size / 2, SEEK_SET);
    int byte = fgetc(f);
    fseek(f, size / 2, SEEK_SET);
    fputc(byte ^ 0x10, f);
    fclose(f);
    ck_assert_int_eq(ps_test_psd_restart(&a, args, 10000), 0);
    ck_assert_msg(log_has(&a, names[1]) && log_has(&a, "restored checkpoint"),
                  "no skip line for the corrupt file, or nothing restored");
    client_open(&k, &a, 5000, 0);
    ck_assert_uint_eq(pull_now(&k), 1); /* the older, valid one */
    ck_assert_int_eq(memcmp(k.w, at1, k.n * sizeof *at1), 0);
    client_close(&k);
    ps_test_psd_kill(&a);

    /* truncate the valid one too (by one byte): nothing valid is left */
    snprintf(path, sizeof path, "%s/%s", ck, names[0]);
    ck_assert_int_eq(truncate(path, 1000), 0);
    ck_assert_int_eq(ps_test_psd_restart(&a, args, 10000), 0);
    ck_assert_msg(log_has(&a, "starting empty"), "psd did not start empty");
    client_open(&k, &a, 5000, 0);
    ck_assert_int_eq(ps_client_pull(k.c, 0, NULL), PS_ENOENT); /* no variable was loaded */
    client_close(&k);
    ck_assert_int_eq(ps_test_psd_stop(&a, 10000), 0);
    free(at1);
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

/* kill -9 while checkpoints are being written, 20 times: each restart loads
 * a checkpoint, and its values are exactly those the shard had at its version. */
START_TEST(kill_during_checkpoint_writes) {
    enum { N = 1 << 21, ROUNDS = 20, MAXV = 64 }; /* 8 MiB of values per file */
    char *dir = ps_test_mkdtemp();
    char ck[700];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *args[] = {
        "--workers", "1", "--checkpoint-dir", ck, "--checkpoint-every", "0", "--keep-checkpoints",
        "2",         NULL};
    uint32_t crc_at[MAXV] = {0}; /* CRC of the values at each version */
    ps_test_psd a;
    ck_assert_int_eq(ps_test_psd_start(&a, args, 10000), 0);
    client k;
    client_open(&k, &a, N, 1);
    crc_at[0] = ps_crc32c(k.w, N * sizeof(float));
    uint64_t v = step(&k, 0);
    crc_at[v] = ps_crc32c(k.w, N * sizeof(float));
    request_checkpoint(&a, 1, NULL); /* one valid checkpoint exists before the first kill */
    unsigned seed = 12345;
    for (int round = 0; round < ROUNDS; round++) {
        if (v + 1 < MAXV) {
            v = step(&k, v);
            crc_at[v] = ps_crc32c(k.w, N * sizeof(float));
        }
        request_checkpoint(&a, 0, NULL);
        seed = seed * 1103515245u + 12345u;
        long delay_us = (long)((seed >> 8) % 60000); /* 0..60 ms into the write */
        /* the scenario: psd is killed somewhere inside the checkpoint write */
        nanosleep(&(struct timespec){0, delay_us * 1000}, NULL);
        client_close(&k);
        ps_test_psd_kill(&a);
        ck_assert_int_eq(ps_test_psd_restart(&a, args, 20000), 0);
        client_open(&k, &a, N, 0);
        uint64_t got = pull_now(&k);
        ck_assert_msg(got >= 1 && got <= v, "round %d: restored version %llu (last %llu)", round,
                      (unsigned long long)got, (unsigned long long)v);
        ck_assert_msg(ps_crc32c(k.w, N * sizeof(float)) == crc_at[got],
                      "round %d: values at version %llu differ from the shard's", round,
                      (unsigned long long)got);
        v = got; /* the shard goes on from there */
    }
    client_close(&k);
    ck_assert_int_eq(ps_test_psd_stop(&a, 10000), 0);
    ck_assert_msg(!log_has(&a, "starting empty"), "a restart found no valid checkpoint");
    ps_test_rmdir(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("checkpoints");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, sigterm_checkpoint_restores_bit_identical);
    tcase_add_test(tc, corrupt_checkpoints_never_loaded);
    tcase_add_test(tc, kill_during_checkpoint_writes);
    suite_add_tcase(s, tc);
    return ps_test_run_suite(s);
}
