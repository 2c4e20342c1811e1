/* CurveZMQ with real processes: keys from `psctl keygen`; a psd with --curve-secret and
 * --authorized-keys serves an authorized client and psworker, while an unknown key, a
 * plaintext client and a wrong server key get no answer and are counted in its log; bad
 * key files stop psd, psworker and psctl with exit 2; plaintext off loopback warns. */
#include <check.h>
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "curve_keys.h"
#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "testutil.h"

#define LR 0.5f
#define N 4
#define NO_ANSWER_MS 1500

static char *dir; /* keys/ (server, wa, wb, admin), authorized/ (wa.pub, admin.pub) */
static char keys[600], authorized[600], out_path[700];
static ps_test_psd psd; /* the psd of the test, if any */

static void path_of(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", keys, name);
}

/* Runs argv (NULL-terminated) to completion with its output in out_path; returns its
 * exit status. */
static int run(const char *const *argv, int timeout_ms) {
    remove(out_path);
    pid_t pid = ps_test_spawn(argv, out_path);
    ck_assert_int_gt(pid, 0);
    int st = ps_test_wait(pid, timeout_ms);
    ck_assert_msg(st >= 0, "%s did not exit within %d ms", argv[0], timeout_ms);
    return st;
}

static void copy_file(const char *from, const char *to) {
    const char *text = ps_test_text(from);
    ck_assert_msg(text[0], "%s is empty", from);
    ck_assert_int_eq(ps_test_write_file(to, text, strlen(text)), 0);
}

static void keygen(const char *name) {
    const char *argv[] = {getenv("PSCTL"), "keygen", name, "--dir", keys, NULL};
    int st = run(argv, 10000);
    if (st != 0) ps_test_dump(out_path);
    ck_assert_int_eq(st, 0);
}

static void cleanup_at_exit(void) {
    ps_test_psd_stop(&psd, 2000);
    if (dir) ps_test_rmdir(dir);
}

static void setup(void) {
    atexit(cleanup_at_exit);
    memset(&psd, 0, sizeof psd);
    dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    snprintf(keys, sizeof keys, "%s/keys", dir);
    snprintf(authorized, sizeof authorized, "%s/authorized", dir);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    ck_assert_int_eq(mkdir(keys, 0700), 0);
    ck_assert_int_eq(mkdir(authorized, 0700), 0);
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("PS_PARENT_PID", pid, 1); /* psd dies with the test even when it ends early */
    unsetenv("TF_CONFIG");
    keygen("server");
    keygen("wa");
    keygen("wb");
    keygen("admin");
    char from[700], to[700];
    const char *ok[] = {"wa.pub", "admin.pub"};
    for (int i = 0; i < 2; i++) {
        path_of(from, sizeof from, ok[i]);
        snprintf(to, sizeof to, "%s/%s", authorized, ok[i]);
        copy_file(from, to);
    }
}

static void teardown(void) {
    ps_test_psd_stop(&psd, 5000);
    ps_test_rmdir(dir);
    free(dir);
    dir = NULL;
}

/* Starts psd with CurveZMQ (plus extra, NULL-terminated, may be NULL). */
static void start_curve_psd(const char *const *extra) {
    char secret[700];
    path_of(secret, sizeof secret, "server.key");
    const char *args[24] = {"--curve-secret", secret, "--authorized-keys", authorized};
    int n = 4;
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    ck_assert_int_eq(ps_test_psd_start(&psd, args, 10000), 0);
}

/* SIGTERM: psd must exit 0 with its loop closed cleanly (the ZAP and monitor polls
 * included). */
static void stop_psd_cleanly(void) {
    kill(psd.pid, SIGTERM);
    int st = ps_test_wait(psd.pid, 5000);
    psd.pid = 0;
    if (st != 0) ps_test_dump(psd.log);
    ck_assert_msg(st == 0, "psd exit %d", st);
    ck_assert_msg(strstr(ps_test_text(psd.log), "handles still open") == NULL, "psd: %s",
                  ps_test_text(psd.log));
}

/* A client of psd with one SGD tensor "w" [N]; keys NULL: plaintext. */
typedef struct {
    ps_client *c;
    float w[N], dw[N];
} client;

static void client_open(client *k, const char *key_name, const char *server_pub) {
    memset(k, 0, sizeof *k);
    const char *eps[1] = {psd.endpoint};
    char err[1200];
    ck_assert_msg(ps_client_open(&k->c, eps, 1, 0, 1, err, sizeof err) == PS_OK, "open: %s", err);
    if (key_name) {
        char secret[700], server[700];
        path_of(secret, sizeof secret, key_name);
        path_of(server, sizeof server, server_pub);
        int rc = ps_client_set_curve(k->c, secret, server, err, sizeof err);
        ck_assert_msg(rc == PS_OK, "set_curve: %s", err);
    }
    ps_client_set_timeout(k->c, 5000);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    opt.lr = LR;
    ps_client_tensor t = {.name = "w", .shard = 0, .rank = 1, .shape = {N}, .opt = opt};
    t.param = k->w;
    t.grad = k->dw;
    ck_assert_int_eq(ps_client_add(k->c, &t), PS_OK);
}

/* A client whose requests must get no answer: its Hello times out. */
static void expect_no_answer(const char *key_name, const char *server_pub) {
    client k;
    client_open(&k, key_name, server_pub);
    ps_client_set_timeout(k.c, NO_ANSWER_MS);
    ps_client_set_retry(k.c, 300);
    int rc = ps_client_hello(k.c, NULL, NULL);
    ck_assert_msg(rc == PS_ETIMEDOUT, "hello from %s: %s (%s), want ETIMEDOUT",
                  key_name ? key_name : "a plaintext client", ps_errname(rc), ps_client_error(k.c));
    ps_client_close(k.c);
}

/* Waits for psd's log to report a refusal for `reason`. */
static void expect_refusal_logged(const char *reason) {
    int found = ps_test_wait_file_has(psd.log, reason, 5000, 0);
    if (!found) ps_test_dump(psd.log);
    ck_assert_msg(found, "psd's log does not say '%s'", reason);
    ck_assert_ptr_nonnull(strstr(ps_test_text(psd.log), "refused in all"));
}

/* (1) An authorized client: Hello, CreateVars, Push, Pull as usual; its heartbeat
 * sockets are CURVE clients too (else psd would time the worker out), and psctl status
 * with an authorized key reads the shard while one without keys gets no answer. */
START_TEST(authorized_client_is_served) {
    start_curve_psd((const char *[]){"--worker-timeout", "1500", NULL});
    ck_assert_ptr_nonnull(strstr(ps_test_text(psd.log), "2 authorized client keys"));
    client k;
    client_open(&k, "wa.key", "server.pub");
    const float w0[N] = {1.0f, -2.0f, 0.5f, 4.0f}, g[N] = {0.5f, 1.0f, -2.0f, 0.25f};
    memcpy(k.w, w0, sizeof w0);
    int rc = ps_client_hello(k.c, NULL, NULL);
    ck_assert_msg(rc == PS_OK, "hello: %s", ps_client_error(k.c));
    size_t created = 0;
    rc = ps_client_create_vars(k.c, &created);
    ck_assert_msg(rc == PS_OK, "create: %s", ps_client_error(k.c));
    ck_assert_uint_eq(created, 1);
    memcpy(k.dw, g, sizeof g);
    int applied = 0;
    rc = ps_client_push(k.c, 0, &applied);
    ck_assert_msg(rc == PS_OK, "push: %s", ps_client_error(k.c));
    ck_assert_int_eq(applied, 1);
    memset(k.w, 0, sizeof k.w);
    uint64_t version = 0;
    rc = ps_client_pull(k.c, 1, &version);
    ck_assert_msg(rc == PS_OK, "pull: %s", ps_client_error(k.c));
    ck_assert_uint_eq(version, 1);
    for (int i = 0; i < N; i++) {
        float want = w0[i] - LR * g[i]; /* psd's SGD step, in float (common/optim.c) */
        ck_assert_msg(k.w[i] == want, "w[%d] = %.9g, want %.9g", i, k.w[i], want);
    }
    /* idle for a few worker timeouts: only CURVE heartbeats keep the worker in (the
     * idle time is the scenario; the worker must stay in all along) */
    long long until = ps_test_now_ms() + 4000;
    while (ps_test_now_ms() < until) {
        ps_stats h;
        rc = ps_client_stats(k.c, 0, &h);
        ck_assert_msg(rc == PS_OK, "stats: %s", ps_client_error(k.c));
        uint64_t removed = h.workers_removed;
        ps_stats_free(&h);
        ck_assert_msg(removed == 0, "psd timed the worker out: its heartbeats did not get in");
        ps_test_nap_ms(100); /* pacing between checks */
    }
    ps_client_close(k.c);

    char admin[700], server_pub[700];
    path_of(admin, sizeof admin, "admin.key");
    path_of(server_pub, sizeof server_pub, "server.pub");
    const char *status[] = {
        getenv("PSCTL"),  "status", "--ps",         psd.endpoint, "--timeout", "5",
        "--curve-secret", admin,    "--server-key", server_pub,   NULL};
    int st = run(status, 20000);
    if (st != 0) ps_test_dump(out_path);
    ck_assert_int_eq(st, 0);
    const char *plain[] = {getenv("PSCTL"), "status", "--ps", psd.endpoint, "--timeout", "1", NULL};
    ck_assert_int_eq(run(plain, 20000), 1);
    ck_assert_ptr_nonnull(strstr(ps_test_text(out_path), "unreachable"));
    const char *text = ps_test_text(psd.log);
    ck_assert_msg(strstr(text, "its public key is not in") == NULL, "a key was refused:\n%s", text);
    stop_psd_cleanly();
}
END_TEST

/* (2) A key pair psd was not told about: no answer; psd logs and counts the refusal,
 * naming the key, and keeps serving the authorized. */
START_TEST(unknown_key_gets_no_answer) {
    start_curve_psd(NULL);
    expect_no_answer("wb.key", "server.pub");
    expect_refusal_logged("its public key is not in --authorized-keys");
    char pub_path[700], z85[PS_CURVE_Z85_LEN + 1], err[1200];
    uint8_t pub[PS_CURVE_KEY_BYTES];
    path_of(pub_path, sizeof pub_path, "wb.pub");
    ck_assert_int_eq(ps_curve_public_read(pub_path, pub, NULL, err, sizeof err), PS_OK);
    ps_curve_z85(pub, z85);
    ck_assert_msg(strstr(ps_test_text(psd.log), z85) != NULL, "the log does not name the key %s",
                  z85);
    client k;
    client_open(&k, "wa.key", "server.pub");
    int rc = ps_client_hello(k.c, NULL, NULL);
    ck_assert_msg(rc == PS_OK, "hello after a refusal: %s", ps_client_error(k.c));
    ps_client_close(k.c);
    stop_psd_cleanly();
}
END_TEST

/* (3) A plaintext client gets no answer; so does one with the wrong server key. */
START_TEST(plaintext_client_gets_no_answer) {
    start_curve_psd(NULL);
    expect_no_answer(NULL, NULL);
    expect_refusal_logged("(a plaintext client?)"); /* psd or the client saw the mismatch */
    expect_no_answer("wa.key", "wb.pub");
    expect_refusal_logged("its CURVE handshake failed");
    stop_psd_cleanly();
}
END_TEST

/* (4) A real psworker with an authorized key trains; one with an unknown key cannot. */
START_TEST(authorized_worker_trains) {
    start_curve_psd((const char *[]){"--workers", "1", NULL});
    char secret[700], server_pub[700], summary[700], log[700];
    path_of(secret, sizeof secret, "wa.key");
    path_of(server_pub, sizeof server_pub, "server.pub");
    snprintf(summary, sizeof summary, "%s/summary.json", dir);
    snprintf(log, sizeof log, "%s/worker.log", dir);
    const char *w[] = {getenv("PSWORKER"),
                       "--ps",
                       psd.endpoint,
                       "--max-steps",
                       "30",
                       "--epochs",
                       "1",
                       "--max-test",
                       "500",
                       "--summary",
                       summary,
                       "--timeout",
                       "60",
                       "--curve-secret",
                       secret,
                       "--server-key",
                       server_pub,
                       NULL};
    int st = ps_test_wait(ps_test_spawn(w, log), 120000);
    if (st != 0) {
        ps_test_dump(log);
        ps_test_dump(psd.log);
    }
    ck_assert_int_eq(st, 0);
    cJSON *j = cJSON_Parse(ps_test_text(summary));
    ck_assert_ptr_nonnull(j);
    double acc = cJSON_GetObjectItem(j, "test_accuracy")->valuedouble;
    cJSON_Delete(j);
    ck_assert_msg(acc > 0.3, "test accuracy %.4f after 30 steps", acc);
    ck_assert_ptr_null(strstr(ps_test_text(psd.log), "refused a connection"));

    path_of(secret, sizeof secret, "wb.key");
    const char *bad[] = {getenv("PSWORKER"),
                         "--ps",
                         psd.endpoint,
                         "--max-train",
                         "100",
                         "--max-test",
                         "100",
                         "--timeout",
                         "2",
                         "--curve-secret",
                         secret,
                         "--server-key",
                         server_pub,
                         NULL};
    st = run(bad, 60000);
    ck_assert_msg(st == 1 && strstr(ps_test_text(out_path), "no answer from psd 0"),
                  "unauthorized psworker: exit %d:\n%s", st, ps_test_text(out_path));
    expect_refusal_logged("its public key is not in --authorized-keys");
    stop_psd_cleanly();
}
END_TEST

static mode_t mode_of(const char *path) {
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0, "%s is missing", path);
    return st.st_mode & 07777;
}

/* (5) psctl keygen: 0600 / 0644 whatever the umask, never overwrites (and leaves no
 * half pair behind), files parse and hold a matching pair; bad usage is exit 2. */
START_TEST(keygen_modes_and_no_overwrite) {
    const char *psctl = getenv("PSCTL");
    char key[700], pub[700], err[1200];
    mode_t masks[] = {0, 077, 022};
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "u%d", i);
        mode_t old = umask(masks[i]);
        const char *argv[] = {psctl, "keygen", "--dir", keys, name, NULL};
        int st = run(argv, 10000);
        umask(old);
        ck_assert_int_eq(st, 0);
        snprintf(key, sizeof key, "%s/%s.key", keys, name);
        snprintf(pub, sizeof pub, "%s/%s.pub", keys, name);
        ck_assert_int_eq(mode_of(key), 0600);
        ck_assert_int_eq(mode_of(pub), 0644);
    }
    ps_curve_pair kp;
    uint8_t pk[PS_CURVE_KEY_BYTES];
    int has_secret = -1;
    path_of(key, sizeof key, "wa.key");
    path_of(pub, sizeof pub, "wa.pub");
    ck_assert_int_eq(ps_curve_pair_read(key, &kp, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_curve_public_read(pub, pk, &has_secret, err, sizeof err), PS_OK);
    ck_assert_int_eq(has_secret, 0);
    ck_assert(memcmp(pk, kp.public_key, sizeof pk) == 0);
    char z85[PS_CURVE_Z85_LEN + 1], line[64];
    ps_curve_z85(pk, z85);
    snprintf(line, sizeof line, "public=%s\n", z85);
    ck_assert_ptr_nonnull(strstr(ps_test_text(pub), line));
    ck_assert_ptr_null(strstr(ps_test_text(pub), "secret="));
    /* .pub is not a key pair */
    ck_assert_int_eq(ps_curve_pair_read(pub, &kp, err, sizeof err), PS_EFORMAT);

    /* an existing pair is kept as it was */
    char before[2048];
    snprintf(before, sizeof before, "%s", ps_test_text(key));
    const char *again[] = {psctl, "keygen", "wa", "--dir", keys, NULL};
    ck_assert_int_eq(run(again, 10000), 1);
    ck_assert_ptr_nonnull(strstr(ps_test_text(out_path), "never overwrites"));
    ck_assert_str_eq(ps_test_text(key), before);
    /* only NAME.pub exists: refused, and no NAME.key is left behind */
    char lone[700], lone_key[700];
    snprintf(lone, sizeof lone, "%s/lone.pub", keys);
    snprintf(lone_key, sizeof lone_key, "%s/lone.key", keys);
    ck_assert_int_eq(ps_test_write_file(lone, "x\n", 2), 0);
    const char *half[] = {psctl, "keygen", "lone", "--dir", keys, NULL};
    ck_assert_int_eq(run(half, 10000), 1);
    ck_assert_int_ne(access(lone_key, F_OK), 0);
    ck_assert_str_eq(ps_test_text(lone), "x\n");

    ck_assert_int_eq(run((const char *[]){psctl, "keygen", "--dir", keys, NULL}, 10000), 2);
    ck_assert_int_eq(run((const char *[]){psctl, "keygen", "a/b", "--dir", keys, NULL}, 10000), 2);
    ck_assert_int_eq(run((const char *[]){psctl, "keygen", "--help", NULL}, 10000), 0);
    ck_assert_ptr_nonnull(strstr(ps_test_text(out_path), "usage: psctl keygen"));
}
END_TEST

/* (6) Plaintext psd: a warning when bound beyond loopback, none on 127.0.0.1 or with
 * CURVE. */
START_TEST(plaintext_warning_off_loopback) {
    const char *want = "serving in plaintext on 0.0.0.0:";
    ck_assert_int_eq(ps_test_psd_start(&psd, (const char *[]){"--bind", "0.0.0.0", NULL}, 10000),
                     0);
    int found = ps_test_wait_file_has(psd.log, want, 5000, 0);
    if (!found) ps_test_dump(psd.log);
    ck_assert_msg(found, "no plaintext warning for 0.0.0.0");
    ck_assert_ptr_nonnull(strstr(ps_test_text(psd.log), "--curve-secret/--authorized-keys"));
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);

    ck_assert_int_eq(ps_test_psd_start(&psd, NULL, 10000), 0); /* --bind 127.0.0.1 */
    ck_assert_ptr_null(strstr(ps_test_text(psd.log), "serving in plaintext"));
    ck_assert_int_eq(ps_test_psd_stop(&psd, 5000), 0);

    start_curve_psd((const char *[]){"--bind", "0.0.0.0", NULL});
    ck_assert_ptr_null(strstr(ps_test_text(psd.log), "serving in plaintext"));
    ck_assert_ptr_nonnull(strstr(ps_test_text(psd.log), "CurveZMQ on"));
}
END_TEST

/* Runs psd with --curve-secret secret and --authorized-keys keys_dir (either NULL:
 * left out); it must exit 2 naming `why`. */
static void expect_psd_refuses(const char *secret, const char *keys_dir, const char *why) {
    const char *argv[12] = {getenv("PSD"), "--bind", "127.0.0.1", "--port", "0"};
    int n = 5;
    if (secret) {
        argv[n++] = "--curve-secret";
        argv[n++] = secret;
    }
    if (keys_dir) {
        argv[n++] = "--authorized-keys";
        argv[n++] = keys_dir;
    }
    argv[n] = NULL;
    int st = run(argv, 10000);
    const char *out = ps_test_text(out_path);
    ck_assert_msg(st == 2, "psd exit %d, want 2:\n%s", st, out);
    ck_assert_msg(strstr(out, "psd: ") && strstr(out, why), "psd's message does not say '%s':\n%s",
                  why, out);
}

/* (7) Bad key files: psd, psworker and psctl exit 2 with the reason. */
START_TEST(bad_key_files_exit_2) {
    char server[700], server_pub[700], f[800], d[700];
    path_of(server, sizeof server, "server.key");
    path_of(server_pub, sizeof server_pub, "server.pub");
    snprintf(f, sizeof f, "%s/missing.key", dir);
    expect_psd_refuses(f, authorized, "cannot read key file");
    expect_psd_refuses(server_pub, authorized, "holds no secret key");
    snprintf(f, sizeof f, "%s/garbage.key", dir);
    ps_test_write_file(f, "hello world\n", 12);
    expect_psd_refuses(f, authorized, "line 1");
    ps_test_write_file(f, "public=abc\nsecret=def\n", 22);
    expect_psd_refuses(f, authorized, "not 40 characters of Z85");
    /* wa's public key with wb's secret key */
    char mixed[2048], wa_pub[700], wb_key[700];
    path_of(wa_pub, sizeof wa_pub, "wa.pub");
    path_of(wb_key, sizeof wb_key, "wb.key");
    const char *sec = strstr(ps_test_text(wb_key), "secret=");
    ck_assert_ptr_nonnull(sec);
    snprintf(mixed, sizeof mixed, "%s%s", ps_test_text(wa_pub), sec);
    ps_test_write_file(f, mixed, strlen(mixed));
    expect_psd_refuses(f, authorized, "does not belong to the public key");
    snprintf(d, sizeof d, "%s/no-such-dir", dir);
    expect_psd_refuses(server, d, "--authorized-keys");
    snprintf(d, sizeof d, "%s/empty", dir);
    ck_assert_int_eq(mkdir(d, 0700), 0);
    expect_psd_refuses(server, d, "holds no *.pub");
    snprintf(f, sizeof f, "%s/bad.pub", d);
    ps_test_write_file(f, "public=short\n", 13);
    expect_psd_refuses(server, d, "bad.pub");
    expect_psd_refuses(server, NULL, "go together");

    /* psworker: a malformed key pair, a missing server key (before any network) */
    snprintf(f, sizeof f, "%s/garbage.key", dir);
    const char *w[] = {getenv("PSWORKER"),
                       "--ps",
                       "127.0.0.1:9",
                       "--max-train",
                       "100",
                       "--max-test",
                       "100",
                       "--timeout",
                       "1",
                       "--curve-secret",
                       f,
                       "--server-key",
                       server_pub,
                       NULL};
    int st = run(w, 60000);
    ck_assert_msg(st == 2 && strstr(ps_test_text(out_path), "garbage.key"), "psworker exit %d:\n%s",
                  st, ps_test_text(out_path));
    char wa_key[700];
    path_of(wa_key, sizeof wa_key, "wa.key");
    w[10] = wa_key;
    w[12] = d; /* a directory, not a key file */
    st = run(w, 60000);
    ck_assert_msg(st == 2 && strstr(ps_test_text(out_path), "not a regular file"),
                  "psworker exit %d:\n%s", st, ps_test_text(out_path));

    const char *status[] = {getenv("PSCTL"), "status",         "--ps",
                            "127.0.0.1:9",   "--curve-secret", server_pub,
                            "--server-key",  server_pub,       NULL};
    st = run(status, 10000);
    ck_assert_msg(st == 2 && strstr(ps_test_text(out_path), "holds no secret key"),
                  "psctl exit %d:\n%s", st, ps_test_text(out_path));
}
END_TEST

static Suite *curve_suite(void) {
    Suite *s = suite_create("curve");
    TCase *tc = tcase_create("curve");
    tcase_set_timeout(tc, 150);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, authorized_client_is_served);
    tcase_add_test(tc, unknown_key_gets_no_answer);
    tcase_add_test(tc, plaintext_client_gets_no_answer);
    tcase_add_test(tc, authorized_worker_trains);
    tcase_add_test(tc, keygen_modes_and_no_overwrite);
    tcase_add_test(tc, plaintext_warning_off_loopback);
    tcase_add_test(tc, bad_key_files_exit_2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    if (!getenv("PSD") || !getenv("PSWORKER") || !getenv("PSCTL")) {
        fprintf(stderr, "PSD, PSWORKER and PSCTL must be set\n");
        return 77;
    }
    return ps_test_run_suite(curve_suite());
}
