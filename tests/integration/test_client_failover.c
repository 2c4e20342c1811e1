/* libps against replicated shards: fake replicas (the kit's raw ROUTERs on 127.0.0.1 ports
 * the system picks) answer Hello with a term and a primary flag, and the client must end
 * up at the primary of the newest term: a backup that says ENOTPRIMARY, a primary killed
 * mid-request (measured: well under the 5 s attempt time), a stale primary of an older
 * term; and the '|' address lists, accepted and refused. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps.h"
#include "raw.h"
#include "replicas.h"
#include "testutil.h"
#include "tfconfig.h"

#define ck_assert_contains(hay, needle)                                                            \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "'%s' does not contain '%s'", (hay), (needle))

/* ---- a fake replica: Welcome with its term and role; serves pushes when primary ---- */

typedef struct {
    raw_router router;
    unsigned index, replicas;
    atomic_int primary;           /* answers Hello as primary and serves requests */
    atomic_ullong term;           /* what its Welcome says */
    atomic_int pushes, hellos;    /* requests served (pushes), Hellos answered */
    atomic_int beats;             /* heartbeats received */
    atomic_int swallow;           /* pushes arriving now are kept unanswered (a kill follows) */
    atomic_llong swallowed_at_ms; /* when the first swallowed push arrived (0: none yet) */
} fake_replica;

static void reply_error(raw_router *r, const zmq_msg_t *id, uint64_t rid, int code,
                        const char *name, const char *msg) {
    Ps__Header h = PS__HEADER__INIT;
    Ps__Error e = PS__ERROR__INIT;
    e.code = code;
    e.code_name = (char *)name;
    e.message = (char *)msg;
    h.body_case = PS__HEADER__BODY_ERROR;
    h.error = &e;
    raw_router_reply(r, id, rid, &h, NULL, 0);
}

static int answer(raw_router *r, const zmq_msg_t *id, Ps__Header *req, ps_frames *f, void *user) {
    (void)f;
    fake_replica *p = user;
    Ps__Header h = PS__HEADER__INIT;
    int primary = atomic_load(&p->primary);
    if (req->body_case == PS__HEADER__BODY_HELLO) {
        Ps__Welcome w = PS__WELCOME__INIT;
        w.shard_index = 0;
        w.num_shards = 1;
        w.mode = PS__MODE__MODE_SYNC;
        w.num_workers = req->hello->num_workers;
        w.heartbeat_ms = 50;
        w.incarnation = 4242; /* the group's: a fail-over is not a restart */
        w.term = atomic_load(&p->term);
        w.primary = primary;
        w.replicas = p->replicas;
        w.replica = p->index;
        w.primary_replica = primary ? p->index : (p->index + 1) % p->replicas;
        h.body_case = PS__HEADER__BODY_WELCOME;
        h.welcome = &w;
        atomic_fetch_add(&p->hellos, 1);
        raw_router_reply(r, id, req->request_id, &h, NULL, 0);
    } else if (req->body_case == PS__HEADER__BODY_HEARTBEAT) {
        atomic_fetch_add(&p->beats, 1);
    } else if (!primary) {
        reply_error(r, id, req->request_id, PS_ENOTPRIMARY, "ENOTPRIMARY",
                    "this replica is not the primary");
    } else if (req->body_case == PS__HEADER__BODY_PUSH) {
        if (atomic_load(&p->swallow)) {
            long long zero = 0;
            atomic_compare_exchange_strong(&p->swallowed_at_ms, &zero, ps_test_now_ms());
            return 0;
        }
        Ps__PushReply pr = PS__PUSH_REPLY__INIT;
        pr.applied = 1;
        h.body_case = PS__HEADER__BODY_PUSH_REPLY;
        h.push_reply = &pr;
        atomic_fetch_add(&p->pushes, 1);
        raw_router_reply(r, id, req->request_id, &h, NULL, 0);
    } else {
        reply_error(r, id, req->request_id, PS_EINVAL, "EINVAL", "the fake does not serve this");
    }
    return 0;
}

static void replica_start(fake_replica *p, unsigned index, unsigned replicas, int primary,
                          uint64_t term) {
    memset(p, 0, sizeof *p);
    p->index = index;
    p->replicas = replicas;
    atomic_init(&p->primary, primary);
    atomic_init(&p->term, term);
    raw_router_start(&p->router, answer, p);
}

/* ---- the client: one replicated shard of a 1-worker sync job, a tensor to push ---- */

typedef struct {
    char lines[8192];
    size_t used;
} log_sink;

static void sink(void *user, ps_lib_log_level level, const char *line) {
    (void)level;
    log_sink *s = user;
    int n = snprintf(s->lines + s->used, sizeof s->lines - s->used, "%s\n", line);
    if (n > 0 && s->used + (size_t)n < sizeof s->lines) s->used += (size_t)n;
}

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

typedef struct {
    ps_client *c;
    float param[4], grad[4];
    log_sink log;
} client_fix;

/* Opens a client on the group of replicas (their endpoints joined by '|'), says hello. */
static void client_open(client_fix *k, fake_replica *const *reps, size_t n) {
    memset(k, 0, sizeof *k);
    char entry[512] = "";
    for (size_t i = 0; i < n; i++) {
        if (i) strcat(entry, "|");
        strcat(entry, reps[i]->router.endpoint);
    }
    const char *eps[] = {entry};
    char err[256];
    ps_lib_set_log(sink, &k->log, PS_LIB_LOG_INFO);
    ck_assert_int_eq(ps_client_open(&k->c, eps, 1, 0, 1, err, sizeof err), PS_OK);
    ck_assert_int_eq(ps_client_set_timeout(k->c, 10000), PS_OK); /* bounded, with headroom */
    ps_client_tensor t = {.name = "w", .shard = 0, .rank = 1, .shape = {4}};
    t.param = k->param;
    t.grad = k->grad;
    t.opt = ps_opt_spec_default(PS_OPT_SGD);
    ck_assert_int_eq(ps_client_add(k->c, &t), PS_OK);
    ck_assert_msg(ps_client_hello(k->c, NULL, NULL) == PS_OK, "hello: %s", ps_client_error(k->c));
}

static void client_close(client_fix *k) {
    ps_client_close(k->c);
    ps_lib_set_log(NULL, NULL, PS_LIB_LOG_INFO);
}

static void push_ok(client_fix *k, uint64_t step) {
    int applied = 0;
    ck_assert_msg(ps_client_push(k->c, step, &applied) == PS_OK, "push: %s", ps_client_error(k->c));
    ck_assert_int_eq(applied, 1);
}

/* "replica R at ADDR is the primary now (term T)" as the client logs it. */
static const char *primary_line(const fake_replica *p, uint64_t term) {
    static char line[160];
    snprintf(line, sizeof line, "replica %u at %s is the primary now (term %llu)", p->index,
             p->router.endpoint, (unsigned long long)term);
    return line;
}

/* (a) Hello answered by a backup (Welcome primary=false): the client moves to replica 1,
 * the primary, which serves the push; one log line for the fail-over. */
START_TEST(hello_to_a_backup_moves_to_the_primary) {
    fake_replica r0, r1;
    replica_start(&r0, 0, 2, 0, 1);
    replica_start(&r1, 1, 2, 1, 1);
    fake_replica *reps[] = {&r0, &r1};
    client_fix k;
    client_open(&k, reps, 2);
    push_ok(&k, 0);
    ck_assert_int_eq(atomic_load(&r1.pushes), 1);
    ck_assert_int_eq(atomic_load(&r0.pushes), 0);
    ck_assert_int_eq(count_of(k.log.lines, primary_line(&r1, 1)), 1);
    ck_assert_int_eq(count_of(k.log.lines, "is the primary now"), 1);
    client_close(&k);
    raw_router_stop(&r0.router);
    raw_router_stop(&r1.router);
}
END_TEST

/* (a) The primary in use steps down between requests: the push is answered ENOTPRIMARY,
 * re-sent to replica 1 (primary in term 2) and served there, once. */
START_TEST(enotprimary_moves_the_request_to_the_primary) {
    fake_replica r0, r1;
    replica_start(&r0, 0, 2, 1, 1);
    replica_start(&r1, 1, 2, 0, 1);
    fake_replica *reps[] = {&r0, &r1};
    client_fix k;
    client_open(&k, reps, 2);
    push_ok(&k, 0);
    ck_assert_int_eq(atomic_load(&r0.pushes), 1);
    ck_assert_int_eq(count_of(k.log.lines, "is the primary now"), 0); /* no fail-over yet */
    atomic_store(&r0.primary, 0);
    atomic_store(&r1.term, 2);
    atomic_store(&r1.primary, 1);
    push_ok(&k, 1);
    ck_assert_int_eq(atomic_load(&r0.pushes), 1);
    ck_assert_int_eq(atomic_load(&r1.pushes), 1);
    ck_assert_int_eq(count_of(k.log.lines, primary_line(&r1, 2)), 1);
    ck_assert_int_eq(count_of(k.log.lines, "is the primary now"), 1);
    client_close(&k);
    raw_router_stop(&r0.router);
    raw_router_stop(&r1.router);
}
END_TEST

typedef struct {
    fake_replica *victim;
    long long killed_at_ms;
    fake_replica *heir; /* NULL, or made primary in term 2 promote_ms after the kill */
    int promote_ms;
} killer;

static int push_swallowed(void *ctx) {
    return atomic_load(&((fake_replica *)ctx)->swallowed_at_ms) != 0;
}

/* Closes the victim's ROUTER (as a SIGKILL would) once it holds a push unanswered. */
static void *kill_mid_request(void *arg) {
    killer *k = arg;
    if (ps_test_wait_until(push_swallowed, k->victim, 10000, 2)) {
        k->killed_at_ms = ps_test_now_ms();
        raw_router_stop(&k->victim->router);
        if (k->heir) {
            ps_test_nap_ms(k->promote_ms); /* the scenario: a backup waiting out its lease */
            atomic_store(&k->heir->term, 2);
            atomic_store(&k->heir->primary, 1);
        }
    }
    return NULL;
}

static int beats_arrive(void *ctx) {
    return atomic_load(&((fake_replica *)ctx)->beats) >= 2;
}

/* (b) The primary dies holding the push: the client notices the dropped connection at
 * once (not after the 5 s attempt time), fails over to replica 1 and the push is served
 * there; the heartbeats follow. */
START_TEST(killed_primary_fails_over_fast) {
    fake_replica r0, r1;
    replica_start(&r0, 0, 2, 1, 1);
    replica_start(&r1, 1, 2, 1, 2); /* took over in term 2 (the client asks it only later) */
    fake_replica *reps[] = {&r0, &r1};
    client_fix k;
    client_open(&k, reps, 2);
    push_ok(&k, 0);
    ck_assert_int_eq(atomic_load(&r0.pushes), 1);
    atomic_store(&r0.swallow, 1);
    killer kl = {&r0, 0, NULL, 0};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, kill_mid_request, &kl), 0);
    push_ok(&k, 1);
    long long done = ps_test_now_ms();
    pthread_join(th, NULL);
    ck_assert_msg(kl.killed_at_ms > 0, "the push never reached replica 0");
    long long took = done - kl.killed_at_ms;
    fprintf(stderr, "fail-over after the kill: %lld ms\n", took);
    ck_assert_msg(took < 3000, "fail-over took %lld ms", took);
    ck_assert_int_eq(atomic_load(&r1.pushes), 1);
    ck_assert_int_eq(count_of(k.log.lines, primary_line(&r1, 2)), 1);
    int before = atomic_load(&r1.beats);
    ck_assert_msg(ps_test_wait_until(beats_arrive, &r1, 5000, 10),
                  "no heartbeats at the new primary (%d before the wait)", before);
    client_close(&k);
    raw_router_stop(&r1.router);
}
END_TEST

/* (b) The primary dies and its backup takes over only after a lease (600 ms): meanwhile
 * the client cycles between the dead replica (refused at once) and the backup with a short
 * backoff, and ends at the new primary soon after the promotion, with one log line. */
START_TEST(no_primary_during_the_lease_keeps_cycling) {
    fake_replica r0, r1;
    replica_start(&r0, 0, 2, 1, 1);
    replica_start(&r1, 1, 2, 0, 1);
    fake_replica *reps[] = {&r0, &r1};
    client_fix k;
    client_open(&k, reps, 2);
    push_ok(&k, 0);
    atomic_store(&r0.swallow, 1);
    killer kl = {&r0, 0, &r1, 600};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, kill_mid_request, &kl), 0);
    push_ok(&k, 1);
    long long done = ps_test_now_ms();
    pthread_join(th, NULL);
    ck_assert_msg(kl.killed_at_ms > 0, "the push never reached replica 0");
    long long took = done - kl.killed_at_ms;
    fprintf(stderr, "fail-over through a 600 ms lease: %lld ms, %d Hellos to the backup\n", took,
            atomic_load(&r1.hellos));
    ck_assert_msg(took >= 600 && took < 3000, "fail-over took %lld ms", took);
    ck_assert_int_ge(atomic_load(&r1.hellos), 3);   /* asked again and again, not given up on */
    ck_assert_int_le(atomic_load(&r1.hellos), 100); /* with a backoff, not a busy loop */
    ck_assert_int_eq(atomic_load(&r1.pushes), 1);
    ck_assert_int_eq(count_of(k.log.lines, primary_line(&r1, 2)), 1);
    ck_assert_int_eq(count_of(k.log.lines, "is the primary now"), 1);
    client_close(&k);
    raw_router_stop(&r1.router);
}
END_TEST

/* (c) After term 5, a replica still claiming primary in term 3 (a stale one) is passed
 * over: the push goes to the primary of term 6. */
START_TEST(stale_primary_of_an_older_term_is_not_used) {
    fake_replica r0, r1, r2;
    replica_start(&r0, 0, 3, 1, 5);
    replica_start(&r1, 1, 3, 1, 3); /* never learnt it was replaced */
    replica_start(&r2, 2, 3, 0, 5);
    fake_replica *reps[] = {&r0, &r1, &r2};
    client_fix k;
    client_open(&k, reps, 3);
    push_ok(&k, 0);
    ck_assert_int_eq(atomic_load(&r0.pushes), 1);
    atomic_store(&r0.primary, 0);
    atomic_store(&r0.term, 6);
    atomic_store(&r2.term, 6);
    atomic_store(&r2.primary, 1);
    push_ok(&k, 1);
    ck_assert_int_eq(atomic_load(&r1.pushes), 0);
    ck_assert_int_ge(atomic_load(&r1.hellos), 1); /* it was asked, and passed over */
    ck_assert_int_eq(atomic_load(&r2.pushes), 1);
    ck_assert_int_eq(count_of(k.log.lines, primary_line(&r2, 6)), 1);
    ck_assert_int_eq(count_of(k.log.lines, "is the primary now"), 1);
    client_close(&k);
    raw_router_stop(&r0.router);
    raw_router_stop(&r1.router);
    raw_router_stop(&r2.router);
}
END_TEST

/* (d) Address lists: a group is one shard; empty parts and a 9th replica are refused with
 * a reason, by libps and by the cluster parsers above it. */
static int open_one(const char *entry, char *err, size_t errlen) {
    ps_client *c = NULL;
    const char *eps[] = {entry};
    int rc = ps_client_open(&c, eps, 1, 0, 1, err, errlen);
    ps_client_close(c);
    return rc;
}

START_TEST(replica_lists_accepted_and_refused) {
    char err[256];
    ck_assert_int_eq(open_one("127.0.0.1:5000|127.0.0.1:5001", err, sizeof err), PS_OK);
    ck_assert_int_eq(open_one("ipc:///tmp/a.sock|ipc:///tmp/b.sock", err, sizeof err), PS_OK);
    ck_assert_int_eq(open_one("127.0.0.1:5000||127.0.0.1:5001", err, sizeof err), PS_EINVAL);
    ck_assert_contains(err, "replica 1 is empty");
    ck_assert_int_eq(open_one("|127.0.0.1:5000", err, sizeof err), PS_EINVAL);
    ck_assert_contains(err, "replica 0 is empty");
    ck_assert_int_eq(open_one("127.0.0.1:5000|", err, sizeof err), PS_EINVAL);
    ck_assert_contains(err, "replica 1 is empty");
    ck_assert_int_eq(open_one("127.0.0.1:5000|localhost", err, sizeof err), PS_EINVAL);
    ck_assert_contains(err, "replica 1 'localhost' is not HOST:PORT");
    char nine[256] = "";
    for (int i = 0; i < 9; i++)
        snprintf(nine + strlen(nine), sizeof nine - strlen(nine), "%s127.0.0.1:%d", i ? "|" : "",
                 6000 + i);
    ck_assert_int_eq(open_one(nine, err, sizeof err), PS_EINVAL);
    ck_assert_contains(err, "more than 8 replicas");
    nine[strlen(nine) - strlen("|127.0.0.1:6008")] = '\0'; /* 8 fit */
    ck_assert_int_eq(open_one(nine, err, sizeof err), PS_OK);

    /* two shards, the first a group of two: the flag list and TF_CONFIG keep it whole */
    ps_cluster cl;
    ck_assert_int_eq(
        ps_cluster_from_lists("127.0.0.1:1|127.0.0.1:2, 127.0.0.1:3", NULL, &cl, err, sizeof err),
        PS_OK);
    ck_assert_uint_eq(cl.n_ps, 2);
    ck_assert_str_eq(cl.ps[0], "127.0.0.1:1|127.0.0.1:2");
    ps_cluster_free(&cl);
    ck_assert_int_eq(ps_cluster_from_lists("127.0.0.1:1||127.0.0.1:2", NULL, &cl, err, sizeof err),
                     PS_EINVAL);
    ck_assert_contains(err, "replica 1 is empty");
    char list[256];
    unsigned index, workers;
    ck_assert_int_eq(ps_tf_config_worker("{\"cluster\": {\"ps\": [\"h1:1|h2:2\", \"h3:3\"], "
                                         "\"worker\": [\"w:1\"]}, \"task\": {\"type\": "
                                         "\"worker\", \"index\": 0}}",
                                         list, sizeof list, &index, &workers, err, sizeof err),
                     PS_OK);
    ck_assert_str_eq(list, "h1:1|h2:2,h3:3");
    ck_assert_int_eq(ps_tf_config_worker("{\"cluster\": {\"ps\": [\"h1:1|\"], \"worker\": "
                                         "[\"w:1\"]}, \"task\": {\"type\": \"worker\"}}",
                                         list, sizeof list, &index, &workers, err, sizeof err),
                     PS_EINVAL);
    ck_assert_contains(err, "replica 1 is empty");
    ck_assert_int_ne(ps_check_ipc_path("/tmp/a|b", err, sizeof err), PS_OK); /* '|' splits */
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("client_failover");
    TCase *tc = tcase_create("failover");
    tcase_add_test(tc, hello_to_a_backup_moves_to_the_primary);
    tcase_add_test(tc, enotprimary_moves_the_request_to_the_primary);
    tcase_add_test(tc, killed_primary_fails_over_fast);
    tcase_add_test(tc, no_primary_during_the_lease_keeps_cycling);
    tcase_add_test(tc, stale_primary_of_an_older_term_is_not_used);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    TCase *addr = tcase_create("addresses");
    tcase_add_test(addr, replica_lists_accepted_and_refused);
    suite_add_tcase(s, addr);
    return s;
}

int main(void) {
    return ps_test_run_suite(suite());
}
