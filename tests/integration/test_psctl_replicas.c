/* psctl local --replicas R against fake psd/psworker scripts: the psd command lines of each
 * (shard, replica) with their group's --peers, the workers' "A|B" shard entries (--ps and
 * TF_CONFIG), and supervision: a dead replica is not restarted and its group goes on, a
 * shard with no replica left fails the job, the survivors are stopped at the end. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psctl_fakes.h"
#include "run.h"
#include "testutil.h"

/* The value after `flag ` in an argv record line, into out; "" when absent. */
static void flag_value(const char *line, const char *flag, char *out, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, "%s ", flag);
    const char *p = strstr(line, pat);
    out[0] = '\0';
    if (!p) return;
    p += strlen(pat);
    size_t len = strcspn(p, " ");
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p);
}

/* Checks shard s's R argv records (one line per replica, in any order): --replicas R,
 * each --replica 0..R-1 once, all with the same --peers, whose r-th address is replica
 * r's own (ipc: its --ipc-path, tcp: its --port). Writes that --peers to peers. */
static void check_group(int s, int R, int ipc, char *peers, size_t n) {
    char name[32], *lines[16];
    snprintf(name, sizeof name, "psd-%d.argv", s);
    int got = read_lines(name, lines);
    ck_assert_int_eq(got, R);
    int seen[8] = {0};
    peers[0] = '\0';
    for (int i = 0; i < got; i++) {
        char v[4096], p[4096], own[4200], want[64];
        snprintf(want, sizeof want, "--shard %d --num-shards ", s);
        ck_assert_contains(lines[i], want);
        snprintf(want, sizeof want, " --replicas %d --replica ", R);
        ck_assert_contains(lines[i], want);
        flag_value(lines[i], "--replica", v, sizeof v);
        int r = atoi(v);
        ck_assert_msg(r >= 0 && r < R && !seen[r], "bad --replica in %s", lines[i]);
        seen[r] = 1;
        flag_value(lines[i], "--peers", p, sizeof p);
        if (!peers[0]) snprintf(peers, n, "%s", p);
        ck_assert_str_eq(p, peers); /* one list for the whole group */
        if (ipc) {
            flag_value(lines[i], "--ipc-path", v, sizeof v);
            snprintf(own, sizeof own, "ipc://%s", v);
        } else {
            flag_value(lines[i], "--port", v, sizeof v);
            ck_assert_int_gt(atoi(v), 0); /* chosen before the start, never 0 */
            snprintf(own, sizeof own, "127.0.0.1:%s", v);
        }
        /* the r-th comma-separated address of --peers is its own */
        const char *a = p;
        for (int k = 0; k < r && a; k++) {
            a = strchr(a, ',');
            if (a) a++;
        }
        ck_assert_ptr_nonnull(a);
        ck_assert_int_eq((int)strcspn(a, ","), (int)strlen(own));
        ck_assert_msg(strncmp(a, own, strlen(own)) == 0,
                      "replica %d's own address %s is not "
                      "entry %d of --peers %s",
                      r, own, r, p);
    }
    free_lines(lines, got);
}

/* "A,B" -> "A|B": a group's --peers as the workers' entry for the shard. */
static void as_entry(const char *peers, char *out, size_t n) {
    snprintf(out, n, "%s", peers);
    for (char *c = out; *c; c++)
        if (*c == ',') *c = '|';
}

START_TEST(test_replicas_argv_tcp) {
    const char *args[] = {"psctl",      "local",  "--ps",        "2",          "--workers",
                          "2",          "--mode", "sync",        "--replicas", "2",
                          "--lease-ms", "300",    "--transport", "tcp",        NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char peers[2][4096], entry[2][4096], want[8400];
    for (int s = 0; s < 2; s++) {
        check_group(s, 2, 0, peers[s], sizeof peers[s]);
        as_entry(peers[s], entry[s], sizeof entry[s]);
        char *lines[16];
        char name[32];
        snprintf(name, sizeof name, "psd-%d.argv", s);
        int n = read_lines(name, lines);
        for (int i = 0; i < n; i++)
            ck_assert_contains(lines[i], " --lease-ms 300 ");
        free_lines(lines, n);
    }
    ck_assert_str_ne(peers[0], peers[1]);
    /* four distinct addresses */
    char all[8400], *addr[4], *save = NULL;
    snprintf(all, sizeof all, "%s,%s", peers[0], peers[1]);
    int k = 0;
    for (char *a = strtok_r(all, ",", &save); a && k < 4; a = strtok_r(NULL, ",", &save))
        addr[k++] = a;
    ck_assert_int_eq(k, 4);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            ck_assert_str_ne(addr[i], addr[j]);
    snprintf(want, sizeof want, "--ps %s,%s ", entry[0], entry[1]);
    for (int j = 0; j < 2; j++) {
        char name[32], *lines[16];
        snprintf(name, sizeof name, "worker-%d.starts", j);
        int n = read_lines(name, lines);
        ck_assert_int_eq(n, 1);
        ck_assert_contains(lines[0], want);
        free_lines(lines, n);
    }
    snprintf(want, sizeof want,
             "psctl: psd shards ready (2 replicas each) at %s,%s; starting 2 "
             "workers\n",
             entry[0], entry[1]);
    ck_assert_contains(r.err, want);
    ck_assert_contains(r.err,
                       "psctl: job finished: 2 ps (2 replicas each), 2 workers, mode sync\n");
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_replicas_ipc_and_tf_config) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s", fake_worker_path);
    const char *args[] = {"psctl",  "local", "--ps",       "1", "--workers",    "1",
                          "--mode", "async", "--replicas", "2", "--worker-cmd", cmd,
                          NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char peers[4096], entry[4096], want[4200];
    check_group(0, 2, 1, peers, sizeof peers);
    ck_assert_contains(peers, "/psd-0-r1.sock");
    as_entry(peers, entry, sizeof entry);
    char *lines[16];
    int n = read_lines("psd-0.argv", lines);
    for (int i = 0; i < n; i++)
        ck_assert_lacks(lines[i], "--lease-ms"); /* passed only when given */
    free_lines(lines, n);
    n = read_lines("worker-0.tfconfig", lines);
    ck_assert_int_eq(n, 1);
    snprintf(want, sizeof want, "{\"cluster\": {\"ps\": [\"%s\"], \"worker\": [", entry);
    ck_assert_contains(lines[0], want);
    free_lines(lines, n);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_one_replica_unset_adds_no_replica_flags) {
    const char *args[] = {"psctl",  "local", "--ps",       "1", "--workers", "1",
                          "--mode", "sync",  "--replicas", "1", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char *lines[16];
    int n = read_lines("psd-0.argv", lines);
    ck_assert_int_eq(n, 1);
    ck_assert_lacks(lines[0], "--replica");
    ck_assert_lacks(lines[0], "--peers");
    ck_assert_contains(lines[0], "/psd-0.sock "); /* the unreplicated names stay */
    free_lines(lines, n);
    ck_assert_contains(r.err, "psctl: job finished: 1 ps, 1 workers, mode sync\n");
    ps_test_run_free(&r);
}
END_TEST

/* ---- supervision ---------------------------------------------------------------- */

/* Hook: creates tdir/go once the text ctx appears on psctl's stderr (the fake workers'
 * --wait-for go then lets them finish). */
static void go_on_marker(const ps_test_run_result *r, void *ctx) {
    char path[4200];
    snprintf(path, sizeof path, "%s/go", tdir);
    if (strstr(r->err, (const char *)ctx) && access(path, F_OK) != 0)
        ck_assert_int_eq(ps_test_write_file(path, "", 0), 0);
}

/* A replica killed once up: the group goes on, and the replica is restarted (it
 * rejoins as a backup: psd's part, tested with real psd in test_replicas.c). */
START_TEST(test_dead_replica_restarted_group_goes_on) {
    const char *args[] = {"psctl",  "local",      "--ps",       "2", "--workers",   "2",
                          "--mode", "sync",       "--replicas", "2", "--transport", "tcp",
                          "--",     "--wait-for", "go",         NULL};
    const char *env[] = {"FAKE_PSD_DIE=1", "FAKE_PSD_DIE_REPLICA=0", "FAKE_PSD_DIE_HOW=kill",
                         "FAKE_PSD_DIE_RUNS=2", NULL};
    ps_test_run_result r;
    run_psctl(args, env, go_on_marker, "its group goes on", &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "psctl: psd shard 1 replica 0 exited (signal 9): its group goes on "
                              "with 1 of 2 replicas; restarting it (1/");
    ck_assert_lacks(r.err, "did not stop cleanly");
    ck_assert_contains(r.err,
                       "psctl: job finished: 2 ps (2 replicas each), 2 workers, mode sync\n");
    /* both replicas, then the restart, unless the job ended first */
    ck_assert_int_ge(count_lines("psd-1.argv"), 2);
    ck_assert_int_eq(count_lines("worker-0.starts"), 1);
    ck_assert_int_eq(count_lines("worker-1.starts"), 1);
    ck_assert_int_eq(recorded_alive_after_wait(), 0); /* the survivors were stopped */
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_every_replica_of_a_shard_dead_fails_job) {
    const char *args[] = {"psctl",      "local", "--ps",       "2",           "--workers",
                          "1",          "--mode", "sync",      "--replicas",  "2",
                          "--max-restarts", "0", "--",        "--hang",      NULL};
    const char *env[] = {"FAKE_PSD_DIE=0", "FAKE_PSD_DIE_HOW=3", NULL};
    ps_test_run_result r;
    run_psctl(args, env, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, "(exit status 3): its group goes on with 1 of 2 replicas; not "
                              "restarted (--max-restarts)\n");
    ck_assert_contains(r.err, "(exit status 3): every replica of shard 0 is gone, and that part "
                              "of the model with them; stopping\n");
    ck_assert_lacks(r.err, "restarting");
    ck_assert_int_eq(count_lines("psd-0.argv"), 2);
    ck_assert_int_eq(recorded_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

static Suite *psctl_replicas_suite(void) {
    Suite *s = suite_create("psctl_replicas");
    TCase *tc = psctl_fakes_tcase("replicas");
    tcase_add_test(tc, test_replicas_argv_tcp);
    tcase_add_test(tc, test_replicas_ipc_and_tf_config);
    tcase_add_test(tc, test_one_replica_unset_adds_no_replica_flags);
    tcase_add_test(tc, test_dead_replica_restarted_group_goes_on);
    tcase_add_test(tc, test_every_replica_of_a_shard_dead_fails_job);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_replicas_suite());
}
