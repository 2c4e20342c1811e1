/* Check tests for the cluster spec: TF_CONFIG examples copied from the seed texts, chief
 * numbering, flag lists, host:port parsing, and every malformed-config error path. */
#include "ps_error.h"
#include "testutil.h"
#include "tfconfig.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* The TF_CONFIG examples of /work/shared/seeds, after json.dumps of their Python dicts. */
/* 000_5d73b1a8c6b5e515.txt: MultiWorkerMirroredStrategy, two workers, no ps. */
static const char SEED_WORKERS[] =
    "{\"cluster\": {\"worker\": [\"worker1.example.com:12345\", \"worker2.example.com:23456\"]}, "
    "\"task\": {\"type\": \"worker\", \"index\": 0}}";
/* 001_c10b746d9afd3cad.txt line 27: documentation placeholders, the port is literally "port". */
static const char SEED_PLACEHOLDER[] =
    "{\"cluster\": {\"worker\": [\"host1:port\", \"host2:port\", \"host3:port\"], "
    "\"ps\": [\"host4:port\", \"host5:port\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}";
/* 001_c10b746d9afd3cad.txt line 37: a runnable local cluster. */
static const char SEED_LOCAL[] =
    "{\"cluster\": {\"worker\": [\"localhost:20000\", \"localhost:20001\"], "
    "\"ps\": [\"localhost:20002\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}";

static const char CHIEF_CFG[] = "{\"cluster\":{\"chief\":[\"c:1\"],\"worker\":[\"w:2\",\"w:3\"],"
                                "\"ps\":[\"p:4\"]},\"task\":{\"type\":\"worker\",\"index\":1}}";

/* Parses json expecting success; the caller frees c. */
static void parse_ok(const char *json, ps_cluster *c) {
    char err[256] = "stale";
    int rc = ps_cluster_from_tfconfig(json, c, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "rc %d (%s) for %s", rc, err, json);
    ck_assert_str_eq(err, "");
}

START_TEST(seed_two_workers_example_com) {
    ps_cluster c;
    parse_ok(SEED_WORKERS, &c);
    ck_assert_uint_eq(c.n_worker, 2);
    ck_assert_uint_eq(c.n_ps, 0);
    ck_assert_uint_eq(c.n_chief, 0);
    ck_assert_str_eq(c.worker[0], "worker1.example.com:12345");
    ck_assert_str_eq(c.worker[1], "worker2.example.com:23456");
    ck_assert_str_eq(c.task_type, "worker");
    ck_assert_int_eq(c.task_index, 0);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 2);
    unsigned wi = 99;
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_OK);
    ck_assert_uint_eq(wi, 0);
    char host[64];
    int port = -1;
    ck_assert_int_eq(ps_parse_hostport(c.worker[1], host, sizeof host, &port), PS_OK);
    ck_assert_str_eq(host, "worker2.example.com");
    ck_assert_int_eq(port, 23456);
    ps_cluster_free(&c);
}
END_TEST

START_TEST(seed_placeholder_port_accepted_at_parse_rejected_at_use) {
    ps_cluster c;
    parse_ok(SEED_PLACEHOLDER, &c);
    ck_assert_uint_eq(c.n_worker, 3);
    ck_assert_uint_eq(c.n_ps, 2);
    ck_assert_uint_eq(c.n_chief, 0);
    ck_assert_str_eq(c.worker[1], "host2:port");
    ck_assert_str_eq(c.ps[1], "host5:port");
    ck_assert_str_eq(c.task_type, "worker");
    ck_assert_int_eq(c.task_index, 1);
    unsigned wi = 99;
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_OK);
    ck_assert_uint_eq(wi, 1);
    /* The address is only a placeholder: using it fails. */
    char host[64];
    int port = -1;
    ck_assert_int_eq(ps_parse_hostport(c.worker[1], host, sizeof host, &port), PS_EINVAL);
    ck_assert_int_eq(port, -1);
    ps_cluster_free(&c);
}
END_TEST

START_TEST(seed_local_cluster) {
    ps_cluster c;
    parse_ok(SEED_LOCAL, &c);
    ck_assert_uint_eq(c.n_worker, 2);
    ck_assert_uint_eq(c.n_ps, 1);
    ck_assert_str_eq(c.ps[0], "localhost:20002");
    ck_assert_str_eq(c.task_type, "worker");
    ck_assert_int_eq(c.task_index, 0);
    for (size_t i = 0; i < c.n_worker; i++) {
        int port;
        ck_assert_int_eq(ps_parse_hostport(c.worker[i], NULL, 0, &port), PS_OK);
        ck_assert_int_eq(port, 20000 + (int)i);
    }
    ps_cluster_free(&c);
}
END_TEST

START_TEST(chief_is_global_worker_zero) {
    ps_cluster c;
    parse_ok(CHIEF_CFG, &c);
    ck_assert_uint_eq(c.n_chief, 1);
    ck_assert_str_eq(c.chief[0], "c:1");
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 3);
    unsigned wi = 99;
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_OK);
    ck_assert_uint_eq(wi, 2);
    ps_cluster_free(&c);

    parse_ok("{\"cluster\":{\"chief\":[\"c:1\"],\"worker\":[\"w:2\"]},"
             "\"task\":{\"type\":\"chief\",\"index\":0}}",
             &c);
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_OK);
    ck_assert_uint_eq(wi, 0);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 2);
    ps_cluster_free(&c);
}
END_TEST

START_TEST(non_worker_tasks_have_no_worker_index) {
    ps_cluster c;
    unsigned wi = 99;
    parse_ok("{\"cluster\":{\"worker\":[\"w:1\"],\"ps\":[\"p:2\",\"p:3\"]},"
             "\"task\":{\"type\":\"ps\",\"index\":1}}",
             &c);
    ck_assert_str_eq(c.task_type, "ps");
    ck_assert_int_eq(c.task_index, 1);
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_EINVAL);
    ck_assert_uint_eq(wi, 99);
    ps_cluster_free(&c);

    /* No task at all. */
    parse_ok("{\"cluster\":{\"worker\":[\"w:1\"]}}", &c);
    ck_assert_str_eq(c.task_type, "");
    ck_assert_int_eq(c.task_index, -1);
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_EINVAL);
    ps_cluster_free(&c);
}
END_TEST

START_TEST(evaluator_job_is_kept_out_but_accepted) {
    ps_cluster c;
    unsigned wi = 99;
    parse_ok("{\"cluster\":{\"worker\":[\"w:1\"],\"ps\":[\"p:2\"],\"evaluator\":[\"e:3\"]},"
             "\"task\":{\"type\":\"evaluator\",\"index\":0}}",
             &c);
    ck_assert_uint_eq(c.n_worker, 1);
    ck_assert_uint_eq(c.n_ps, 1);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 1);
    ck_assert_str_eq(c.task_type, "evaluator");
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_EINVAL);
    ps_cluster_free(&c);

    /* TensorFlow runs the evaluator outside the cluster: not listed is fine. */
    parse_ok("{\"cluster\":{\"worker\":[\"w:1\"]},\"task\":{\"type\":\"evaluator\",\"index\":0}}",
             &c);
    ck_assert_str_eq(c.task_type, "evaluator");
    ps_cluster_free(&c);

    /* Other unknown jobs, whatever their shape, are ignored. */
    parse_ok("{\"cluster\":{\"worker\":[\"w:1\"],\"master\":{\"0\":\"m:1\"}}}", &c);
    ck_assert_uint_eq(c.n_worker, 1);
    ps_cluster_free(&c);
}
END_TEST

/* A missing index is 0 only in a job of one entry (with more it would be a guess). */
START_TEST(missing_index_defaults_to_zero_and_ipv6_entries) {
    ps_cluster c;
    parse_ok("{\"cluster\":{\"worker\":[\"[::1]:5000\"],\"ps\":[\"10.0.0.2:5001\"]},"
             "\"task\":{\"type\":\"worker\"}}",
             &c);
    ck_assert_int_eq(c.task_index, 0);
    char host[64];
    int port;
    ck_assert_int_eq(ps_parse_hostport(c.worker[0], host, sizeof host, &port), PS_OK);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 5000);
    ps_cluster_free(&c);
    ps_cluster_free(&c); /* twice is safe */
    ps_cluster_free(NULL);
}
END_TEST

/* Kubeflow's TFJob: the operator (training-operator, genTFConfigJSONStr) marshals a Go struct
 * {cluster, task, environment} with encoding/json: no blanks, the cluster's keys sorted, replica
 * types lower-case, hosts "<job>-<type>-<i>.<namespace>.svc:<port>" (with CUSTOM_CLUSTER_DOMAIN
 * appended after "svc" when the operator has it), "environment": "cloud". Job "fashion" in
 * namespace "ml", 2 PS and 2 Worker replicas, port 2222 (the operator's default). */
#define TFJOB_CLUSTER                                                                              \
    "{\"cluster\":{\"ps\":[\"fashion-ps-0.ml.svc:2222\",\"fashion-ps-1.ml.svc:2222\"],"            \
    "\"worker\":[\"fashion-worker-0.ml.svc:2222\",\"fashion-worker-1.ml.svc:2222\"]},"
static const char TFJOB_PS1[] =
    TFJOB_CLUSTER "\"task\":{\"type\":\"ps\",\"index\":1},\"environment\":\"cloud\"}";
static const char TFJOB_WORKER1[] =
    TFJOB_CLUSTER "\"task\":{\"type\":\"worker\",\"index\":1},\"environment\":\"cloud\"}";
/* With a Chief replica and CUSTOM_CLUSTER_DOMAIN=cluster.local: "chief" sorts first. */
static const char TFJOB_CHIEF[] =
    "{\"cluster\":{\"chief\":[\"fashion-chief-0.ml.svc.cluster.local:2222\"],"
    "\"ps\":[\"fashion-ps-0.ml.svc.cluster.local:2222\"],"
    "\"worker\":[\"fashion-worker-0.ml.svc.cluster.local:2222\"]},"
    "\"task\":{\"type\":\"chief\",\"index\":0},\"environment\":\"cloud\"}";

START_TEST(kubeflow_tfjob_ps_task) {
    ps_cluster c;
    parse_ok(TFJOB_PS1, &c);
    ck_assert_uint_eq(c.n_ps, 2);
    ck_assert_uint_eq(c.n_worker, 2);
    ck_assert_uint_eq(c.n_chief, 0);
    ck_assert_str_eq(c.task_type, "ps");
    ck_assert_int_eq(c.task_index, 1);
    unsigned wi;
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_EINVAL);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 2); /* psd's --workers */
    char host[256];
    int port = -1;
    ck_assert_int_eq(ps_parse_hostport(c.ps[c.task_index], host, sizeof host, &port), PS_OK);
    ck_assert_str_eq(host, "fashion-ps-1.ml.svc");
    ck_assert_int_eq(port, 2222);
    ps_cluster_free(&c);
}
END_TEST

START_TEST(kubeflow_tfjob_worker_task) {
    ps_cluster c;
    parse_ok(TFJOB_WORKER1, &c);
    ck_assert_str_eq(c.task_type, "worker");
    ck_assert_int_eq(c.task_index, 1);
    unsigned wi = 99;
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_OK);
    ck_assert_uint_eq(wi, 1); /* no chief: worker 0 is the chief, as the operator assumes */
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 2);
    ck_assert_str_eq(c.ps[0], "fashion-ps-0.ml.svc:2222");
    char host[256];
    int port = -1;
    for (size_t i = 0; i < c.n_ps; i++)
        ck_assert_int_eq(ps_parse_hostport(c.ps[i], host, sizeof host, &port), PS_OK);
    ps_cluster_free(&c);

    parse_ok(TFJOB_CHIEF, &c);
    ck_assert_str_eq(c.task_type, "chief");
    ck_assert_int_eq(ps_cluster_worker_index(&c, &wi), PS_OK);
    ck_assert_uint_eq(wi, 0);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 2);
    ck_assert_int_eq(ps_parse_hostport(c.ps[0], host, sizeof host, &port), PS_OK);
    ck_assert_str_eq(host, "fashion-ps-0.ml.svc.cluster.local");
    ps_cluster_free(&c);
}
END_TEST

/* What the operator writes with enableDynamicWorker (a ps task sees only itself, a worker only
 * itself and the shards), and for a Master replica's pod: refused, each with its reason. */
START_TEST(kubeflow_tfjob_unsupported_forms) {
    ps_cluster c;
    char err[256];
    const char *sparse = "{\"sparseCluster\":{\"worker\":{\"1\":\"fashion-worker-1.ml.svc:2222\"},"
                         "\"ps\":[\"fashion-ps-0.ml.svc:2222\",\"fashion-ps-1.ml.svc:2222\"]},"
                         "\"task\":{\"type\":\"worker\",\"index\":1}}";
    ck_assert_int_eq(ps_cluster_from_tfconfig(sparse, &c, err, sizeof err), PS_EINVAL);
    ck_assert_msg(strstr(err, "sparseCluster") && strstr(err, "enableDynamicWorker"), "%s", err);
    ps_cluster_free(&c);
    /* a Master replica's own pod: its task type is no job this project knows */
    const char *master = "{\"cluster\":{\"master\":[\"fashion-master-0.ml.svc:2222\"],"
                         "\"ps\":[\"fashion-ps-0.ml.svc:2222\"],"
                         "\"worker\":[\"fashion-worker-0.ml.svc:2222\"]},"
                         "\"task\":{\"type\":\"master\",\"index\":0},\"environment\":\"cloud\"}";
    ck_assert_int_eq(ps_cluster_from_tfconfig(master, &c, err, sizeof err), PS_EINVAL);
    ck_assert_msg(strstr(err, "task.type") && strstr(err, "chief"), "%s", err);
    ck_assert_uint_eq(c.n_ps + c.n_worker + c.n_chief, 0);
    ps_cluster_free(&c);
}
END_TEST

typedef struct {
    const char *json;
    int rc;
    const char *field; /* must appear in the reason */
} bad_case;

static const bad_case BAD[] = {
    {"", PS_EFORMAT, "JSON"},
    {"{", PS_EFORMAT, "JSON"},
    {"{'cluster': {'worker': ['a:1']}}", PS_EFORMAT, "JSON"}, /* Python dict, not JSON */
    {"{\"cluster\":{\"worker\":[\"a:1\"]}} trailing", PS_EFORMAT, "JSON"},
    {"[\"a:1\"]", PS_EFORMAT, "TF_CONFIG"},
    {"{\"cluster\":[\"a:1\"]}", PS_EFORMAT, "cluster"},
    {"{\"cluster\":\"a:1\"}", PS_EFORMAT, "cluster"},
    {"{\"cluster\":{\"ps\":\"a:1\"}}", PS_EFORMAT, "cluster.ps"},
    {"{\"cluster\":{\"ps\":{\"0\":\"a:1\"}}}", PS_EFORMAT, "cluster.ps"},
    {"{\"cluster\":{\"worker\":[\"a:1\",2]}}", PS_EFORMAT, "cluster.worker[1]"},
    {"{\"cluster\":{\"ps\":[null]}}", PS_EFORMAT, "cluster.ps[0]"},
    {"{\"cluster\":{\"ps\":[\"a:1\"],\"ps\":[\"b:2\"]}}", PS_EFORMAT, "cluster.ps"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":\"worker\"}", PS_EFORMAT, "task"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":1,\"index\":0}}", PS_EFORMAT,
     "task.type"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":\"0\"}}",
     PS_EFORMAT, "task.index"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":0.5}}",
     PS_EFORMAT, "task.index"},
    {"{}", PS_EINVAL, "cluster"},
    {"{\"task\":{\"type\":\"worker\",\"index\":0}}", PS_EINVAL, "cluster"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":-1}}", PS_EINVAL,
     "task.index"},
    {"{\"cluster\":{\"worker\":[\"a:1\",\"b:2\"]},\"task\":{\"type\":\"worker\",\"index\":2}}",
     PS_EINVAL, "task.index"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":1e12}}",
     PS_EINVAL, "task.index"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"ps\",\"index\":0}}", PS_EINVAL,
     "task.type"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"chief\",\"index\":0}}", PS_EINVAL,
     "task.type"},
    /* "ps": [] is refused, naming both ways to write it (issue: a parameter-server job
     * with its shards forgotten, or an all-reduce job?) */
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"ps\":[]},\"task\":{\"type\":\"ps\",\"index\":0}}",
     PS_EINVAL, "cluster.ps: an empty list is ambiguous"},
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"ps\":[]},\"task\":{\"type\":\"worker\",\"index\":0}}",
     PS_EINVAL, "leave \"ps\" out"},
    {"{\"cluster\":{\"chief\":[\"c:1\"],\"ps\":[]}}", PS_EINVAL,
     "list its tasks, \"ps\": [\"host:port\""},
    {"{\"cluster\":{\"master\":[\"a:1\"]},\"task\":{\"type\":\"master\",\"index\":0}}", PS_EINVAL,
     "task.type"},
    {"{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"index\":0}}", PS_EINVAL, "task.type"},
    {"{\"cluster\":{\"worker\":[\"a:1\",\"b:2\"]},\"task\":{\"type\":\"worker\"}}", PS_EINVAL,
     "task.index: missing"},
    {"{\"cluster\":{\"ps\":[\"a:1\",\"b:2\"]},\"task\":{\"type\":\"ps\"}}", PS_EINVAL,
     "task.index: missing"},
    {"{\"cluster\":{\"worker\":[\"a:1\"],\"evaluator\":[\"e:1\"]},"
     "\"task\":{\"type\":\"evaluator\",\"index\":1}}",
     PS_EINVAL, "task.index"},
    {"{\"cluster\":{\"chief\":[\"c:1\",\"c:2\"],\"worker\":[\"a:1\"]}}", PS_EINVAL,
     "cluster.chief"},
    {"{\"cluster\":{\"ps\":[\"nocolon\"]}}", PS_EINVAL, "cluster.ps[0]"},
    {"{\"cluster\":{\"ps\":[\"a:1\",\"\"]}}", PS_EINVAL, "cluster.ps[1]"},
    {"{\"cluster\":{\"ps\":[\":1\"]}}", PS_EINVAL, "cluster.ps[0]"},
    {"{\"cluster\":{\"ps\":[\"host:\"]}}", PS_EINVAL, "cluster.ps[0]"},
    {"{\"cluster\":{\"worker\":[\"host 1:1\"]}}", PS_EINVAL, "cluster.worker[0]"},
    {"{\"cluster\":{\"worker\":[\"a:1\\nb:2\"]}}", PS_EINVAL, "cluster.worker[0]"},
};

START_TEST(bad_tfconfig_is_rejected_with_reason) {
    const bad_case *bc = &BAD[_i];
    ps_cluster c;
    char err[256] = "";
    int rc = ps_cluster_from_tfconfig(bc->json, &c, err, sizeof err);
    ck_assert_msg(rc == bc->rc, "case %d: rc %d (%s), want %d for %s", _i, rc, err, bc->rc,
                  bc->json);
    ck_assert_msg(err[0] != '\0', "case %d: empty reason", _i);
    ck_assert_msg(strstr(err, bc->field) != NULL, "case %d: reason \"%s\" lacks \"%s\"", _i, err,
                  bc->field);
    ck_assert_msg(strchr(err, '\n') == NULL, "case %d: reason spans lines", _i);
    /* The output is left empty and freeing it is safe. */
    ck_assert_uint_eq(c.n_ps + c.n_worker + c.n_chief, 0);
    ck_assert_ptr_null(c.ps);
    ck_assert_int_eq(c.task_index, -1);
    ps_cluster_free(&c);
}
END_TEST

START_TEST(null_arguments) {
    ps_cluster c;
    char err[128] = "";
    ck_assert_int_eq(ps_cluster_from_tfconfig(NULL, &c, err, sizeof err), PS_EINVAL);
    ck_assert(err[0] != '\0');
    ck_assert_int_eq(ps_cluster_from_tfconfig("{}", NULL, err, sizeof err), PS_EINVAL);
    /* err is optional. */
    ck_assert_int_eq(ps_cluster_from_tfconfig("{", &c, NULL, 0), PS_EFORMAT);
    ck_assert_int_eq(ps_cluster_from_tfconfig(SEED_LOCAL, &c, NULL, 0), PS_OK);
    ps_cluster_free(&c);
    /* A short buffer truncates but stays terminated. */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    ck_assert_int_eq(ps_cluster_from_tfconfig("{}", &c, tiny, sizeof tiny), PS_EINVAL);
    ck_assert_uint_lt(strlen(tiny), sizeof tiny);
}
END_TEST

START_TEST(cluster_from_flag_lists) {
    ps_cluster c;
    char err[128] = "stale";
    ck_assert_int_eq(ps_cluster_from_lists("p0:5000, p1:5001", " w0:6000,[::1]:6001 ,10.1.2.3:6002",
                                           &c, err, sizeof err),
                     PS_OK);
    ck_assert_str_eq(err, "");
    ck_assert_uint_eq(c.n_ps, 2);
    ck_assert_str_eq(c.ps[0], "p0:5000");
    ck_assert_str_eq(c.ps[1], "p1:5001");
    ck_assert_uint_eq(c.n_worker, 3);
    ck_assert_str_eq(c.worker[1], "[::1]:6001");
    ck_assert_str_eq(c.worker[2], "10.1.2.3:6002");
    ck_assert_uint_eq(c.n_chief, 0);
    ck_assert_str_eq(c.task_type, "");
    ck_assert_int_eq(c.task_index, -1);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 3);
    ps_cluster_free(&c);

    ck_assert_int_eq(ps_cluster_from_lists(NULL, "", &c, err, sizeof err), PS_OK);
    ck_assert_uint_eq(c.n_ps + c.n_worker, 0);
    ck_assert_uint_eq(ps_cluster_num_workers(&c), 0);
    ps_cluster_free(&c);
}
END_TEST

typedef struct {
    const char *ps, *workers;
    const char *field; /* the list the reason must name */
} bad_lists;

static const bad_lists BAD_LISTS[] = {
    {"a:1,,b:2", NULL, "ps list"},    {"a:1,", NULL, "ps list"},
    {NULL, ",a:1", "worker list"},    {"host1:port", NULL, "ps list"},
    {NULL, "w:70000", "worker list"}, {"a:1", "w", "worker list"},
    {"a:1 b:2", NULL, "ps list"},     {NULL, "[::1:5000", "worker list"},
};

START_TEST(bad_flag_lists_are_rejected) {
    const bad_lists *bl = &BAD_LISTS[_i];
    ps_cluster c;
    char err[128] = "";
    int rc = ps_cluster_from_lists(bl->ps, bl->workers, &c, err, sizeof err);
    ck_assert_msg(rc == PS_EINVAL, "case %d: rc %d", _i, rc);
    ck_assert_msg(strstr(err, bl->field) != NULL, "case %d: reason \"%s\" lacks \"%s\"", _i, err,
                  bl->field);
    ck_assert_uint_eq(c.n_ps + c.n_worker, 0);
    ps_cluster_free(&c);
}
END_TEST

typedef struct {
    const char *in;
    const char *host; /* NULL: must be rejected */
    int port;
} hp_case;

static const hp_case HOSTPORTS[] = {
    {"localhost:20000", "localhost", 20000},
    {"worker1.example.com:12345", "worker1.example.com", 12345},
    {"127.0.0.1:0", "127.0.0.1", 0},
    {"my_host-2:65535", "my_host-2", 65535},
    {"[::1]:80", "::1", 80},
    {"[fe80::1%eth0]:5000", "fe80::1%eth0", 5000},
    {"h:000080", NULL, 0}, /* more than 5 digits */
    {"h:0080", "h", 80},
    {"host1:port", NULL, 0},
    {"h:65536", NULL, 0},
    {"h:99999", NULL, 0},
    {"h:-1", NULL, 0},
    {"h:+1", NULL, 0},
    {"h:1a", NULL, 0},
    {"h: 1", NULL, 0},
    {"h:", NULL, 0},
    {":80", NULL, 0},
    {"h", NULL, 0},
    {"", NULL, 0},
    {"::1:80", NULL, 0},
    {"[::1]80", NULL, 0},
    {"[::1:80", NULL, 0},
    {"[]:80", NULL, 0},
    {"[nothex]:80", NULL, 0},
    {"256.1.1.1:80", NULL, 0},
    {"1.2.3:80", NULL, 0},
    {"bad host:80", NULL, 0},
    {"tcp://h:80", NULL, 0},
    {"*:80", NULL, 0},
    {"-h:80", NULL, 0},
};

START_TEST(parse_hostport_table) {
    const hp_case *hc = &HOSTPORTS[_i];
    char host[64] = "untouched";
    int port = -7;
    int rc = ps_parse_hostport(hc->in, host, sizeof host, &port);
    if (hc->host) {
        ck_assert_msg(rc == PS_OK, "\"%s\": rc %d", hc->in, rc);
        ck_assert_str_eq(host, hc->host);
        ck_assert_int_eq(port, hc->port);
    } else {
        ck_assert_msg(rc == PS_EINVAL, "\"%s\": rc %d, want PS_EINVAL", hc->in, rc);
        ck_assert_str_eq(host, "untouched");
        ck_assert_int_eq(port, -7);
    }
}
END_TEST

START_TEST(parse_hostport_small_buffer_and_null) {
    char host[4];
    int port = -1;
    ck_assert_int_eq(ps_parse_hostport("abcd:1", host, sizeof host, &port), PS_EINVAL);
    ck_assert_int_eq(ps_parse_hostport("abc:1", host, sizeof host, &port), PS_OK);
    ck_assert_str_eq(host, "abc");
    ck_assert_int_eq(port, 1);
    ck_assert_int_eq(ps_parse_hostport(NULL, host, sizeof host, &port), PS_EINVAL);
    ck_assert_int_eq(ps_parse_hostport("abc:2", NULL, 0, NULL), PS_OK);
}
END_TEST

/* A ps entry may be ipc://PATH (TF_CONFIG and flag lists); other jobs may not, and the
 * path must fit sun_path and have no blanks or commas. */
START_TEST(ipc_ps_addresses) {
    ps_cluster c;
    char err[256];
    ck_assert_int_eq(
        ps_cluster_from_tfconfig("{\"cluster\": {\"ps\": [\"ipc:///run/p/psd-0.sock\", "
                                 "\"h:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}",
                                 &c, err, sizeof err),
        PS_OK);
    ck_assert_str_eq(c.ps[0], "ipc:///run/p/psd-0.sock");
    ck_assert_str_eq(ps_ipc_path(c.ps[0]), "/run/p/psd-0.sock");
    ck_assert_ptr_null(ps_ipc_path(c.ps[1]));
    ps_cluster_free(&c);
    ck_assert_int_eq(ps_cluster_from_tfconfig("{\"cluster\": {\"worker\": [\"ipc:///w.sock\"]}}",
                                              &c, err, sizeof err),
                     PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "cluster.worker[0]"));

    ck_assert_int_eq(ps_cluster_from_lists("ipc://a.sock, 127.0.0.1:5", NULL, &c, err, sizeof err),
                     PS_OK);
    ck_assert_uint_eq(c.n_ps, 2);
    ck_assert_str_eq(c.ps[0], "ipc://a.sock");
    ps_cluster_free(&c);
    ck_assert_int_eq(ps_cluster_from_lists(NULL, "ipc://a.sock", &c, err, sizeof err), PS_EINVAL);

    char path[PS_IPC_PATH_MAX + 2];
    memset(path, 'p', sizeof path);
    path[PS_IPC_PATH_MAX] = '\0';
    ck_assert_int_eq(ps_check_ipc_path(path, err, sizeof err), PS_OK);
    path[PS_IPC_PATH_MAX] = 'p';
    path[PS_IPC_PATH_MAX + 1] = '\0';
    ck_assert_int_eq(ps_check_ipc_path(path, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "at most 107"));
    ck_assert_int_eq(ps_check_ipc_path("", err, sizeof err), PS_EINVAL);
    ck_assert_int_eq(ps_check_ipc_path("a b", err, sizeof err), PS_EINVAL);
    ck_assert_int_eq(ps_check_ipc_path("a,b", err, sizeof err), PS_EINVAL);
    ck_assert_int_eq(ps_cluster_from_lists("ipc://", NULL, &c, err, sizeof err), PS_EINVAL);
}
END_TEST

static Suite *tfconfig_suite(void) {
    Suite *s = suite_create("tfconfig");
    TCase *tc = tcase_create("seeds");
    tcase_add_test(tc, seed_two_workers_example_com);
    tcase_add_test(tc, seed_placeholder_port_accepted_at_parse_rejected_at_use);
    tcase_add_test(tc, seed_local_cluster);
    suite_add_tcase(s, tc);

    tc = tcase_create("tasks");
    tcase_add_test(tc, chief_is_global_worker_zero);
    tcase_add_test(tc, non_worker_tasks_have_no_worker_index);
    tcase_add_test(tc, evaluator_job_is_kept_out_but_accepted);
    tcase_add_test(tc, missing_index_defaults_to_zero_and_ipv6_entries);
    suite_add_tcase(s, tc);

    tc = tcase_create("kubeflow");
    tcase_add_test(tc, kubeflow_tfjob_ps_task);
    tcase_add_test(tc, kubeflow_tfjob_worker_task);
    tcase_add_test(tc, kubeflow_tfjob_unsupported_forms);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_loop_test(tc, bad_tfconfig_is_rejected_with_reason, 0,
                        (int)(sizeof BAD / sizeof BAD[0]));
    tcase_add_test(tc, null_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("lists");
    tcase_add_test(tc, cluster_from_flag_lists);
    tcase_add_loop_test(tc, bad_flag_lists_are_rejected, 0,
                        (int)(sizeof BAD_LISTS / sizeof BAD_LISTS[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("hostport");
    tcase_add_loop_test(tc, parse_hostport_table, 0, (int)(sizeof HOSTPORTS / sizeof HOSTPORTS[0]));
    tcase_add_test(tc, parse_hostport_small_buffer_and_null);
    tcase_add_test(tc, ipc_ps_addresses);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(tfconfig_suite());
}
