/* psctl status against two real psd shards after some traffic from the client library: the
 * table and the JSON carry each shard's state, a dead shard is "unreachable" (exit 1),
 * TF_CONFIG names the shards as well as --ps, bad usage exits 2. */
#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "ps.h"
#include "ps_error.h"
#include "raw.h"
#include "run.h"
#include "testutil.h"
#include "utf8.h"

#define NW 6         /* "w" [2, 3] lives on shard 0 */
#define NB 4         /* "b" [4] lives on shard 1 */
#define STEPS_BOTH 3 /* steps pushed to both shards */
#define STEPS_W 2    /* then steps pushed to shard 0 only */
#define REPLY_MS 5000

static ps_test_psd psd[2];
static char *ckpt_dir; /* shard 1's --checkpoint-dir */

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "expected \"%s\" in:\n%s", (needle), (hay))

/* ---- running psctl ---------------------------------------------------------------- */

/* Runs $PSCTL with args (args[0] is argv[0]) and TF_CONFIG set to tf_config (NULL: unset),
 * capturing stdout and stderr, for at most 20 s (then it is killed and the test fails). */
static void run_psctl(const char *const *args, const char *tf_config, ps_test_run_result *r) {
    const char *exe = getenv("PSCTL");
    ck_assert_msg(exe != NULL, "PSCTL is not set");
    char tf[4096];
    snprintf(tf, sizeof tf, "TF_CONFIG=%s", tf_config ? tf_config : "");
    const char *env[] = {tf, NULL};
    ps_test_run(exe, args, env, 20.0, NULL, NULL, r);
    ck_assert_msg(r->finished, "psctl did not finish; output so far:\n%s\n%s", r->out, r->err);
}

/* "--ps" value naming both shards. */
static const char *both_shards(void) {
    static char list[300];
    snprintf(list, sizeof list, "%s,%s", psd[0].endpoint, psd[1].endpoint);
    return list;
}

/* ---- fixture: 2 shards, sync, one worker; traffic; a checkpoint on shard 1 ---------- */

/* The fixture's worker: connected while the tests look (a worker whose connection
 * closes without a Goodbye leaves the expected set as removed). */
static ps_client *worker;

/* Pushes `steps` steps from step `first` with a client that holds "w" on shard 0 and, with
 * `both`, "b" on shard 1 (worker 0 of 1, so every push completes its step); then it says
 * Goodbye and closes, or (`keep`) stays connected as the fixture's worker. */
static void traffic(int both, int create, uint64_t first, int steps, int keep) {
    static float w[NW], dw[NW], b[NB], db[NB];
    const char *eps[2] = {psd[0].endpoint, psd[1].endpoint};
    char err[256];
    ps_client *c = NULL;
    int rc = ps_client_open(&c, eps, 2, 0, 1, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "open: %s", err);
    ps_client_set_timeout(c, REPLY_MS);
    ps_opt_spec opt = ps_opt_spec_default(PS_OPT_SGD);
    ps_client_tensor tw = {.name = "w", .shard = 0, .rank = 2, .shape = {2, 3}, .opt = opt};
    tw.param = w;
    tw.grad = dw;
    ck_assert_int_eq(ps_client_add(c, &tw), PS_OK);
    if (both) {
        ps_client_tensor tb = {.name = "b", .shard = 1, .rank = 1, .shape = {NB}, .opt = opt};
        tb.param = b;
        tb.grad = db;
        ck_assert_int_eq(ps_client_add(c, &tb), PS_OK);
    }
    rc = ps_client_hello(c, NULL, NULL);
    ck_assert_msg(rc == PS_OK, "hello: %s", ps_client_error(c));
    if (create) {
        rc = ps_client_create_vars(c, NULL);
        ck_assert_msg(rc == PS_OK, "create: %s", ps_client_error(c));
    }
    for (int i = 0; i < steps; i++) {
        for (int k = 0; k < NW; k++)
            dw[k] = 0.1f * (float)(k + i);
        for (int k = 0; k < NB; k++)
            db[k] = -0.2f * (float)(k + i);
        int applied = 0;
        rc = ps_client_push(c, first + (uint64_t)i, &applied);
        ck_assert_msg(rc == PS_OK, "push %d: %s", i, ps_client_error(c));
        ck_assert_int_eq(applied, 1);
    }
    if (keep) {
        worker = c;
        return;
    }
    ck_assert_int_eq(ps_client_goodbye(c), PS_OK); /* finished: it rejoins with its Hello */
    ps_client_close(c);
}

static void setup(void) {
    ckpt_dir = ps_test_mkdtemp();
    ck_assert_ptr_nonnull(ckpt_dir);
    const char *args0[] = {"--shard", "0",      "--num-shards", "2", "--workers",
                           "1",       "--mode", "sync",         NULL};
    const char *args1[] = {
        "--shard",          "1",      "--num-shards",       "2", "--workers", "1", "--mode", "sync",
        "--checkpoint-dir", ckpt_dir, "--checkpoint-every", "0", NULL};
    ck_assert_int_eq(ps_test_psd_start(&psd[0], args0, 10000), 0);
    ck_assert_int_eq(ps_test_psd_start(&psd[1], args1, 10000), 0);
    /* shard 0 ends at version STEPS_BOTH + STEPS_W, shard 1 at STEPS_BOTH */
    traffic(1, 1, 0, STEPS_BOTH, 0);
    const char *ckpt[] = {"psctl", "checkpoint", "--ps", psd[1].endpoint, NULL};
    ps_test_run_result r;
    run_psctl(ckpt, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "psctl checkpoint: %s", r.err);
    ps_test_run_free(&r);
    traffic(0, 0, STEPS_BOTH, STEPS_W, 1);
}

/* Both shards must still be serving, and stop cleanly (exit 0) on SIGTERM. */
static void teardown(void) {
    ps_client_close(worker);
    worker = NULL;
    for (int i = 0; i < 2; i++) {
        int alive = psd[i].pid > 0 && ps_test_alive(psd[i].pid);
        int st = ps_test_psd_stop(&psd[i], 5000);
        ck_assert_msg(alive && st == 0, "psd %d: alive %d, exit status %d", i, alive, st);
    }
    ps_test_rmdir(ckpt_dir);
    free(ckpt_dir);
    ckpt_dir = NULL;
}

/* ---- the table -------------------------------------------------------------------- */

/* Splits line `row` (0: the header) of text into blank-separated words. Returns the count. */
static int row_words(const char *text, int row, char words[][320], int max) {
    const char *p = text;
    for (int i = 0; i < row && p; i++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    ck_assert_msg(p && *p, "no row %d in:\n%s", row, text);
    const char *end = strchr(p, '\n');
    if (!end) end = p + strlen(p);
    int n = 0;
    while (p < end && n < max) {
        while (p < end && *p == ' ')
            p++;
        if (p == end) break;
        size_t len = strcspn(p, " \n");
        ck_assert_uint_lt(len, 320);
        memcpy(words[n], p, len);
        words[n++][len] = '\0';
        p += len;
    }
    return n;
}

static const char *const header[] = {"SHARD",   "ADDRESS",  "MODE",    "VERSION", "WORKERS",
                                     "UPTIME",  "REQUESTS", "ERRORS",  "PUSHES",  "DROPPED",
                                     "PENDING", "CKPT",     "CKPT_AGE"};

/* Checks the table psctl status printed for the fixture's two shards. */
static void check_table(const char *out) {
    char w[16][320];
    ck_assert_int_eq(row_words(out, 0, w, 16), 13);
    for (int j = 0; j < 13; j++)
        ck_assert_str_eq(w[j], header[j]);
    const unsigned long versions[2] = {STEPS_BOTH + STEPS_W, STEPS_BOTH};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(row_words(out, i + 1, w, 16), 13);
        ck_assert_int_eq(atoi(w[0]), i);
        ck_assert_str_eq(w[1], psd[i].endpoint);
        ck_assert_str_eq(w[2], "sync");
        ck_assert_uint_eq(strtoul(w[3], NULL, 10), versions[i]);
        ck_assert_str_eq(w[4], "1/1");
        ck_assert_msg(w[5][strlen(w[5]) - 1] == 's', "uptime '%s'", w[5]);
        ck_assert_uint_ge(strtoul(w[6], NULL, 10), versions[i] + 2); /* + Hello, CreateVars */
        ck_assert_str_eq(w[7], "0");
        ck_assert_uint_eq(strtoul(w[8], NULL, 10), versions[i]);
        ck_assert_str_eq(w[9], "0");
        ck_assert_str_eq(w[10], "0");
    }
    /* shard 0 has no checkpoint dir; shard 1 wrote one at version STEPS_BOTH */
    row_words(out, 1, w, 16);
    ck_assert_str_eq(w[11], "-");
    ck_assert_str_eq(w[12], "-");
    row_words(out, 2, w, 16);
    ck_assert_uint_eq(strtoul(w[11], NULL, 10), STEPS_BOTH);
    ck_assert_msg(strcmp(w[12], "-") != 0 && w[12][strlen(w[12]) - 1] == 's', "age '%s'", w[12]);
}

START_TEST(table_shows_each_shards_version_and_counters) {
    const char *args[] = {"psctl", "status", "--ps", both_shards(), NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_str_eq(r.err, "");
    check_table(r.out);
    /* exactly a header and two rows */
    int lines = 0;
    for (const char *p = r.out; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(lines, 3);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(tf_config_names_the_shards) {
    char tf[700];
    snprintf(tf, sizeof tf,
             "{\"cluster\": {\"ps\": [\"%s\", \"%s\"], \"worker\": [\"localhost:0\"]},"
             " \"task\": {\"type\": \"worker\", \"index\": 0}}",
             psd[0].endpoint, psd[1].endpoint);
    const char *args[] = {"psctl", "status", NULL};
    ps_test_run_result r;
    run_psctl(args, tf, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    check_table(r.out);
    ps_test_run_free(&r);
}
END_TEST

/* ---- JSON ------------------------------------------------------------------------- */

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "\"%s\" is not a number", key);
    return v->valuedouble;
}

START_TEST(json_has_every_stats_field_with_the_right_values) {
    const char *args[] = {"psctl", "status", "--json", "--ps", both_shards(), NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    cJSON *arr = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_IsArray(arr), "not a JSON array:\n%s", r.out);
    ck_assert_int_eq(cJSON_GetArraySize(arr), 2);
    const double versions[2] = {STEPS_BOTH + STEPS_W, STEPS_BOTH};
    const char *incarnation[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        const cJSON *o = cJSON_GetArrayItem(arr, i);
        ck_assert(cJSON_IsObject(o));
        /* every StatsReply field is there, under its proto name */
        for (unsigned k = 0; k < ps__stats_reply__descriptor.n_fields; k++) {
            const char *name = ps__stats_reply__descriptor.fields[k].name;
            ck_assert_msg(cJSON_HasObjectItem(o, name), "shard %d: no \"%s\"", i, name);
        }
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok")));
        ck_assert_double_eq(num(o, "shard"), i);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "address")->valuestring,
                         psd[i].endpoint);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "mode")->valuestring, "sync");
        ck_assert_double_eq(num(o, "shard_index"), i);
        ck_assert_double_eq(num(o, "version"), versions[i]);
        ck_assert_double_eq(num(o, "pushes_applied"), versions[i]);
        ck_assert_double_eq(num(o, "updates_applied"), versions[i]);
        ck_assert_double_eq(num(o, "num_workers"), 1);
        ck_assert_double_eq(num(o, "live_workers"), 1);
        ck_assert_double_eq(num(o, "errors"), 0);
        ck_assert_double_eq(num(o, "dropped_pushes"), 0);
        ck_assert_double_eq(num(o, "stale_pushes"), 0);
        ck_assert_double_eq(num(o, "pending_pulls"), 0);
        ck_assert_double_eq(num(o, "workers_removed"), 0);
        ck_assert_double_ge(num(o, "requests"), versions[i] + 2);
        ck_assert_double_gt(num(o, "bytes_in"), 0);
        ck_assert_double_gt(num(o, "uptime_seconds"), 0);
        ck_assert_double_eq(num(o, "checkpoints"), i);
        const cJSON *inc = cJSON_GetObjectItemCaseSensitive(o, "incarnation");
        ck_assert(cJSON_IsString(inc) && inc->valuestring[0]);
        ck_assert_uint_eq(strspn(inc->valuestring, "0123456789"), strlen(inc->valuestring));
        incarnation[i] = inc->valuestring;
        const cJSON *vars = cJSON_GetObjectItemCaseSensitive(o, "vars");
        ck_assert_int_eq(cJSON_GetArraySize(vars), 1);
        const cJSON *v = cJSON_GetArrayItem(vars, 0);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring, i ? "b" : "w");
        ck_assert_double_eq(num(v, "numel"), i ? NB : NW);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(v, "optimizer")->valuestring,
                         ps_opt_kind_name(PS_OPT_SGD));
    }
    const cJSON *o0 = cJSON_GetArrayItem(arr, 0), *o1 = cJSON_GetArrayItem(arr, 1);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o0, "checkpoint_version")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o0, "checkpoint_age_seconds")));
    ck_assert_double_eq(num(o1, "checkpoint_version"), STEPS_BOTH);
    ck_assert_double_ge(num(o1, "checkpoint_age_seconds"), 0);
    ck_assert_str_ne(incarnation[0], incarnation[1]);
    cJSON_Delete(arr);
    ps_test_run_free(&r);
}
END_TEST

/* Names reach the JSON as valid UTF-8 text, escaped: one with quotes, a backslash,
 * control characters and multibyte characters comes back exactly; one that is not
 * UTF-8 is refused by psd, so the output stays valid JSON. */
START_TEST(json_escapes_names) {
    const char *odd = "q\"b\\s/\n\t\x7f\x01 w\xc3\xa9ight \xe6\x9d\x83\xf0\x9f\x98\x80";
    raw_conn rc;
    raw_open(&rc, psd[0].endpoint);
    const float init[2] = {1, 2};
    const char *names[2] = {odd, "bad\xc3(\xff"};
    for (int i = 0; i < 2; i++) {
        raw_pb opt = {.n = 0}, body = {.n = 0}, meta = raw_pb_meta2(names[i], strlen(names[i]));
        const uint8_t lr[] = {0x15, 0xcd, 0xcc, 0xcc, 0x3d}; /* lr = 0.1f */
        memcpy(opt.b, lr, sizeof lr);
        opt.n = sizeof lr;
        raw_pb_bytes(&body, 1, meta.b, meta.n);
        raw_pb_bytes(&body, 2, opt.b, opt.n);
        raw_send_body(&rc, 700 + (uint64_t)i, 12, &body, 1, init);
        Ps__Header *h = raw_recv(&rc, REPLY_MS, NULL);
        ck_assert_ptr_nonnull(h);
        ck_assert_int_eq(h->body_case,
                         i ? PS__HEADER__BODY_ERROR : PS__HEADER__BODY_CREATE_VARS_REPLY);
        ps__header__free_unpacked(h, NULL);
    }
    raw_close(&rc);
    const char *args[] = {"psctl", "status", "--json", "--ps", psd[0].endpoint, NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    const char *why;
    size_t len = strlen(r.out);
    ck_assert_msg(ps_utf8_check(r.out, len, &why) == len, "output not UTF-8 (%s):\n%s", why, r.out);
    cJSON *arr = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_IsArray(arr), "not a JSON array:\n%s", r.out);
    const cJSON *vars = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, 0), "vars");
    ck_assert_int_eq(cJSON_GetArraySize(vars), 2);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(vars, 1), "name");
    ck_assert(cJSON_IsString(name));
    ck_assert_str_eq(name->valuestring, odd);
    cJSON_Delete(arr);
    ps_test_run_free(&r);
}
END_TEST

/* Embedding tables: a line per table and shard under the shards' table, and a
 * "tables" array in the JSON, with the rows each shard stores. */
START_TEST(tables_listed) {
    const char *eps[2] = {psd[0].endpoint, psd[1].endpoint};
    char err[256];
    ps_client *c = NULL;
    ck_assert_msg(ps_client_open(&c, eps, 2, 0, 1, err, sizeof err) == PS_OK, "%s", err);
    ps_client_set_timeout(c, REPLY_MS);
    ck_assert_int_eq(ps_client_hello(c, NULL, NULL), PS_OK);
    ps_table_spec spec;
    ps_client_table_spec(&spec, "emb", 3, "rowwise_adagrad", 0.1f);
    ps_table *t;
    ck_assert_msg(ps_client_create_table(c, &spec, &t) == PS_OK, "%s", ps_client_error(c));
    uint64_t ids[5] = {1, 2, 3, 1000003, 1ull << 50};
    float g[5 * 3] = {0};
    ck_assert_msg(ps_client_push_rows(t, ids, 5, g, PS_ROWS_END_STEP, NULL) == PS_OK, "%s",
                  ps_client_error(c));
    float rows[5 * 3];
    ck_assert_int_eq(ps_client_pull_rows(t, ids, 5, rows), PS_OK);
    ps_client_close(c);

    const char *args[] = {"psctl", "status", "--ps", both_shards(), NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d:\n%s", ps_test_run_exit_code(&r), r.err);
    const char *tab = strstr(r.out, "\nTABLE ");
    ck_assert_msg(tab, "no table of tables:\n%s", r.out);
    unsigned long total = 0;
    int lines = 0;
    for (const char *p = strstr(tab + 1, "\n"); p && p[1]; p = strchr(p + 1, '\n')) {
        char name[32];
        unsigned shard, dim;
        unsigned long stored;
        ck_assert_int_eq(sscanf(p + 1, "%31s %u %u %lu", name, &shard, &dim, &stored), 4);
        ck_assert_str_eq(name, "emb");
        ck_assert_uint_eq(dim, 3);
        total += stored;
        lines++;
    }
    ck_assert_int_eq(lines, 2);
    ck_assert_uint_eq(total, 5);
    ps_test_run_free(&r);

    const char *jargs[] = {"psctl", "status", "--json", "--ps", both_shards(), NULL};
    run_psctl(jargs, NULL, &r);
    cJSON *arr = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_IsArray(arr), "not a JSON array:\n%s", r.out);
    double rows_json = 0;
    for (int i = 0; i < 2; i++) {
        const cJSON *tables = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, i), "tables");
        ck_assert_int_eq(cJSON_GetArraySize(tables), 1);
        const cJSON *o = cJSON_GetArrayItem(tables, 0);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "optimizer")->valuestring,
                         "rowwise_adagrad");
        ck_assert_double_eq(num(o, "dim"), 3);
        ck_assert_double_eq(num(o, "num_rows"), 0);
        rows_json += num(o, "rows");
        ck_assert_double_eq(num(o, "rows"), num(o, "admitted"));
    }
    ck_assert_double_eq(rows_json, 5);
    cJSON_Delete(arr);
    ps_test_run_free(&r);
}
END_TEST

/* ---- a dead shard ----------------------------------------------------------------- */

START_TEST(dead_shard_is_unreachable_exit_1) {
    char list[300], dead[64];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", ps_test_free_port());
    snprintf(list, sizeof list, "%s,%s", psd[0].endpoint, dead);
    const char *args[] = {"psctl", "status", "--ps", list, "--timeout", "0.5", NULL};
    ps_test_run_result r;
    run_psctl(args, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_double_lt(r.secs, 5.0);
    char w[16][320];
    ck_assert_int_eq(row_words(r.out, 1, w, 16), 13); /* the live shard's row is complete */
    ck_assert_str_eq(w[3], "5");
    const char *row2 = strchr(strchr(r.out, '\n') + 1, '\n') + 1;
    ck_assert_int_eq(row_words(r.out, 2, w, 16), 7);
    ck_assert_str_eq(w[0], "1");
    ck_assert_str_eq(w[1], dead);
    ck_assert_contains(row2, "unreachable (no answer in 0.5s)\n");
    ck_assert_contains(r.err, "psctl status: 1 of 2 shards failed\n");
    ps_test_run_free(&r);

    /* the same in JSON */
    const char *jargs[] = {"psctl", "status", "--json", "--ps", list, "--timeout", "0.5", NULL};
    run_psctl(jargs, NULL, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 1, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    cJSON *arr = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_GetArraySize(arr) == 2, "JSON:\n%s", r.out);
    const cJSON *o = cJSON_GetArrayItem(arr, 1);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "ok")));
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "address")->valuestring, dead);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "error")->valuestring,
                     "unreachable (no answer in 0.5s)");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, 0), "ok")));
    cJSON_Delete(arr);
    ps_test_run_free(&r);
}
END_TEST

/* ---- usage ------------------------------------------------------------------------ */

typedef struct {
    const char *args[8];
    const char *tf_config;
    const char *want; /* on stderr */
} bad_case;

static const bad_case bad_cases[] = {
    {{"psctl", "status", "--bogus", NULL}, NULL, "psctl status: unknown option '--bogus'"},
    {{"psctl", "status", "--ps", NULL}, NULL, "psctl status: --ps needs a value"},
    {{"psctl", "status", "--timeout", "0", "--ps", "127.0.0.1:1", NULL}, NULL, "--timeout needs"},
    {{"psctl", "status", "--timeout", "soon", "--ps", "127.0.0.1:1", NULL}, NULL, "--timeout"},
    {{"psctl", "status", "--ps", "127.0.0.1:1", "extra", NULL},
     NULL,
     "unexpected argument 'extra'"},
    {{"psctl", "status", "--ps", "127.0.0.1:0", NULL}, NULL, "port 1..65535"},
    {{"psctl", "status", "--ps", "", NULL}, NULL, "--ps lists no ps shards"},
    {{"psctl", "status", NULL}, NULL, "--ps is required (or TF_CONFIG with cluster.ps)"},
    {{"psctl", "status", NULL}, "{\"cluster\": ", "psctl status: TF_CONFIG: "},
    {{"psctl", "checkpoint", "--json", "--ps", "127.0.0.1:1", NULL},
     NULL,
     "psctl checkpoint: unknown option '--json'"},
};

START_TEST(bad_usage_exits_2) {
    const bad_case *c = &bad_cases[_i];
    ps_test_run_result r;
    run_psctl(c->args, c->tf_config, &r);
    ck_assert_msg(ps_test_run_exit_code(&r) == 2, "case %d: exit %d, stderr:\n%s", _i,
                  ps_test_run_exit_code(&r), r.err);
    ck_assert_contains(r.err, c->want);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(r.secs < 5.0, "case %d took %.1f s", _i, r.secs);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(help_describes_status) {
    const char *top[] = {"psctl", "--help", NULL};
    const char *help[] = {"psctl", "status", "--help", NULL};
    ps_test_run_result r;
    run_psctl(top, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    ck_assert_contains(r.out, "\n  status ");
    ps_test_run_free(&r);
    run_psctl(help, NULL, &r);
    ck_assert_int_eq(ps_test_run_exit_code(&r), 0);
    ck_assert_contains(
        r.out, "usage: psctl status [--ps HOST:PORT|ipc://PATH,...] [--json] [--timeout SECONDS]");
    ck_assert_contains(r.out, "unreachable (no answer in Ns)");
    ck_assert_contains(r.out, "CKPT_AGE");
    ps_test_run_free(&r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("psctl_status");
    TCase *tc = tcase_create("two_shards");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, table_shows_each_shards_version_and_counters);
    tcase_add_test(tc, tf_config_names_the_shards);
    tcase_add_test(tc, json_has_every_stats_field_with_the_right_values);
    tcase_add_test(tc, json_escapes_names);
    tcase_add_test(tc, tables_listed);
    tcase_add_test(tc, dead_shard_is_unreachable_exit_1);
    suite_add_tcase(s, tc);
    TCase *usage = tcase_create("usage");
    tcase_set_timeout(usage, 30);
    tcase_add_loop_test(usage, bad_usage_exits_2, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(usage, help_describes_status);
    suite_add_tcase(s, usage);
    return ps_test_run_suite(s);
}
