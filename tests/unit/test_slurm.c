/* Check tests for Slurm's environment: hostlist expansion (checked against Slurm 22.05's
 * `scontrol show hostnames`), tasks-per-node counts, and the task -> role/address layout. */
#include "ps_error.h"
#include "slurm_hostlist.h"
#include "slurm_plan.h"
#include "testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Expands list and compares with the space-separated want. */
static void expands_to(const char *list, const char *want) {
    char **h;
    size_t n;
    char err[256] = "stale";
    int rc = ps_slurm_hostlist_expand(list, &h, &n, err, sizeof err);
    ck_assert_msg(rc == PS_OK, "'%s': rc %d (%s)", list, rc, err);
    ck_assert_str_eq(err, "");
    char got[4096] = "";
    for (size_t i = 0; i < n; i++) {
        strcat(got, i ? " " : "");
        strcat(got, h[i]);
    }
    ck_assert_msg(strcmp(got, want) == 0, "'%s' gave '%s', want '%s'", list, got, want);
    ps_slurm_hosts_free(h, n);
}

static void refused(const char *list, const char *why) {
    char **h = (char **)1;
    size_t n = 99;
    char err[256] = "";
    int rc = ps_slurm_hostlist_expand(list, &h, &n, err, sizeof err);
    ck_assert_msg(rc == PS_EINVAL, "'%s' accepted (rc %d)", list, rc);
    ck_assert_ptr_null(h);
    ck_assert_uint_eq(n, 0);
    ck_assert_msg(strstr(err, why), "'%s': reason '%s' lacks '%s'", list, err, why);
}

START_TEST(single_hosts_and_plain_lists) {
    expands_to("vm", "vm");
    expands_to("a,b", "a b");
    expands_to("node-1.example.com", "node-1.example.com");
    expands_to("n[1-2],m3", "n1 n2 m3");
}
END_TEST

START_TEST(ranges_and_comma_lists_in_brackets) {
    expands_to("gpu[01-04,07]", "gpu01 gpu02 gpu03 gpu04 gpu07");
    expands_to("tux[0-2,12,20-21]", "tux0 tux1 tux2 tux12 tux20 tux21");
    expands_to("x[5]", "x5");
    expands_to("x[1-2],y,z[3,5]", "x1 x2 y z3 z5");
}
END_TEST

START_TEST(zero_padding) {
    expands_to("x[8-11]", "x8 x9 x10 x11");
    expands_to("x[08-11]", "x08 x09 x10 x11");
    expands_to("x[009-10]", "x009 x010");
    expands_to("n[0001-0002]", "n0001 n0002");
    expands_to("n[0]", "n0");
    expands_to("n[00-01]", "n00 n01");
}
END_TEST

START_TEST(several_groups_and_suffixes) {
    expands_to("r[1-2]n[01-02]", "r1n01 r1n02 r2n01 r2n02");
    expands_to("a-[001-003]b", "a-001b a-002b a-003b");
    expands_to("r[1-2]n[1-2]x,c", "r1n1x r1n2x r2n1x r2n2x c");
}
END_TEST

START_TEST(errors) {
    refused("", "empty");
    refused("a,,b", "empty item");
    refused("a,", "empty item");
    refused(",a", "empty item");
    refused("x[3-1]", "bad range '3-1'");
    refused("x[]", "bad range");
    refused("x[a]", "bad range 'a'");
    refused("x[1,,2]", "bad range");
    refused("x[1-]", "bad range");
    refused("x[-2]", "bad range");
    refused("x[1-2", "unbalanced '['");
    refused("x1-2]", "unbalanced ']'");
    refused("x[1[2]]", "unbalanced");
    refused("x[1-9999999999]", "bad range");
    refused("x[0-70000]", "more than");
    refused("a b", "blank");
    char **h;
    size_t n;
    ck_assert_int_eq(ps_slurm_hostlist_expand(NULL, &h, &n, NULL, 0), PS_EINVAL);
}
END_TEST

START_TEST(tasks_per_node) {
    int c[8];
    char err[256];
    ck_assert_int_eq(ps_slurm_tasks_per_node("2(x3),1", 4, c, err, sizeof err), PS_OK);
    ck_assert_int_eq(c[0], 2);
    ck_assert_int_eq(c[1], 2);
    ck_assert_int_eq(c[2], 2);
    ck_assert_int_eq(c[3], 1);
    ck_assert_int_eq(ps_slurm_tasks_per_node("4", 1, c, err, sizeof err), PS_OK);
    ck_assert_int_eq(c[0], 4);
    ck_assert_int_eq(ps_slurm_tasks_per_node("1,3", 2, c, err, sizeof err), PS_OK);
    ck_assert_int_eq(c[1], 3);
    ck_assert_int_eq(ps_slurm_tasks_per_node("2(x3),1", 3, c, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "more nodes"));
    ck_assert_int_eq(ps_slurm_tasks_per_node("2(x3)", 4, c, err, sizeof err), PS_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "3 nodes"));
    const char *bad[] = {"", "0", "2(x0)", "2(x3", "2x3", "2,", ",2", "a", "2(x)", "-1", NULL};
    for (int i = 0; bad[i]; i++)
        ck_assert_msg(ps_slurm_tasks_per_node(bad[i], 1, c, err, sizeof err) == PS_EINVAL,
                      "'%s' accepted", bad[i]);
}
END_TEST

/* 2 psd + 5 workers on gpu[01-02,07], 3 + 2 + 2 tasks. */
START_TEST(plan_ps_job) {
    ps_slurm_plan p;
    char err[256];
    const char *want[] = {"gpu01:9000", "gpu01:9001", "gpu01:9002", "gpu02:9000",
                          "gpu02:9001", "gpu07:9000", "gpu07:9001"};
    for (int t = 0; t < 7; t++) {
        ck_assert_int_eq(
            ps_slurm_plan_make("gpu[01-02,07]", "3,2(x2)", 7, t, 2, 9000, &p, err, sizeof err),
            PS_OK);
        ck_assert_int_eq(p.ntasks, 7);
        for (int i = 0; i < 7; i++)
            ck_assert_str_eq(p.addr[i], want[i]);
        ck_assert_int_eq(p.is_ps, t < 2);
        ck_assert_int_eq(p.index, t < 2 ? t : t - 2);
        ck_assert_str_eq(p.host, t < 3 ? "gpu01" : t < 5 ? "gpu02" : "gpu07");
        static const int local[] = {0, 1, 2, 0, 1, 0, 1};
        static const int wrank[] = {-1, -1, 0, 0, 1, 0, 1};
        static const int nworkers[] = {1, 1, 1, 2, 2, 2, 2};
        ck_assert_int_eq(p.local_id, local[t]);
        ck_assert_int_eq(p.port, 9000 + local[t]);
        ck_assert_int_eq(p.worker_local_rank, wrank[t]);
        ck_assert_int_eq(p.node_workers, nworkers[t]);
        char *tf = ps_slurm_plan_tf_config(&p);
        char want_tf[512];
        snprintf(want_tf, sizeof want_tf,
                 "{\"cluster\":{\"ps\":[\"gpu01:9000\",\"gpu01:9001\"],\"worker\":[\"gpu01:9002\","
                 "\"gpu02:9000\",\"gpu02:9001\",\"gpu07:9000\",\"gpu07:9001\"]},\"task\":{\"type\":"
                 "\"%s\",\"index\":%d}}",
                 t < 2 ? "ps" : "worker", t < 2 ? t : t - 2);
        ck_assert_str_eq(tf, want_tf);
        free(tf);
        ps_slurm_plan_free(&p);
    }
}
END_TEST

START_TEST(plan_allreduce_job) {
    ps_slurm_plan p;
    char err[256];
    ck_assert_int_eq(ps_slurm_plan_make("n[1-2]", "2(x2)", 4, 3, 0, 30000, &p, err, sizeof err),
                     PS_OK);
    ck_assert(!p.is_ps);
    ck_assert_int_eq(p.index, 3);
    ck_assert_int_eq(p.port, 30001);
    ck_assert_int_eq(p.worker_local_rank, 1);
    char *tf = ps_slurm_plan_tf_config(&p);
    ck_assert_str_eq(tf, "{\"cluster\":{\"worker\":[\"n1:30000\",\"n1:30001\",\"n2:30000\","
                         "\"n2:30001\"]},\"task\":{\"type\":\"worker\",\"index\":3}}");
    free(tf);
    ps_slurm_plan_free(&p);
}
END_TEST

static void plan_refused(const char *nodes, const char *tpn, long ntasks, long procid,
                         long num_ps, long port, const char *why) {
    ps_slurm_plan p;
    char err[256] = "";
    int rc = ps_slurm_plan_make(nodes, tpn, ntasks, procid, num_ps, port, &p, err, sizeof err);
    ck_assert_msg(rc == PS_EINVAL, "%s/%s accepted", nodes, tpn);
    ck_assert_msg(strstr(err, why), "reason '%s' lacks '%s'", err, why);
    ck_assert_ptr_null(p.addr);
    ps_slurm_plan_free(&p);
}

START_TEST(plan_errors) {
    plan_refused("n[1-2]", "2(x2)", 5, 0, 1, 9000, "add up to 4");
    plan_refused("n[1-2]", "2", 2, 0, 1, 9000, "names 1 nodes");
    plan_refused("n[1-2", "2(x2)", 4, 0, 1, 9000, "node list");
    plan_refused("n[1-2]", "2(x2)", 4, 4, 1, 9000, "outside");
    plan_refused("n[1-2]", "2(x2)", 4, 0, 4, 9000, "no worker");
    plan_refused("n[1-2]", "2(x2)", 4, 0, -1, 9000, "no worker");
    plan_refused("n[1-2]", "2(x2)", 4, 0, 1, 65535, "past 65535");
    plan_refused("n[1-2]", "2(x2)", 4, 0, 1, 0, "base port");
    plan_refused("n1", "1", 0, 0, 0, 9000, "task count");
}
END_TEST

static Suite *slurm_suite(void) {
    Suite *s = suite_create("slurm");
    TCase *tc = tcase_create("slurm");
    tcase_add_test(tc, single_hosts_and_plain_lists);
    tcase_add_test(tc, ranges_and_comma_lists_in_brackets);
    tcase_add_test(tc, zero_padding);
    tcase_add_test(tc, several_groups_and_suffixes);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, tasks_per_node);
    tcase_add_test(tc, plan_ps_job);
    tcase_add_test(tc, plan_allreduce_job);
    tcase_add_test(tc, plan_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return ps_test_run_suite(slurm_suite());
}
