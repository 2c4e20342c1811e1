/* Integration tests for `psctl local --gpus` (fake scripts; the CPU fallback where there is
 * no GPU) and for `psctl local` running the real psd and psworker. */
#include <check.h>
#include <cjson/cJSON.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels.h"
#include "psctl_local_fakes.h"
#include "run.h"
#include "testutil.h"

/* ---- --gpus --------------------------------------------------------------------------
 * The machines these tests were written on have no GPU: there only the CPU fallback
 * and the errors run. Where a GPU is present, the other branches check the GPU path
 * (one worker per GPU, CUDA_VISIBLE_DEVICES=<its id>, --device cuda:0) instead. */

/* CPUs this process may use, counted as psctl counts them for --gpus all. */
static long cpus_allowed(void) {
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1000 ? 1000 : n;
}

START_TEST(test_gpus_all_without_gpu_runs_cpu_workers) {
    int ngpu = ps_k_cuda_device_count();
    const char *cpu_args[] = {"psctl",  "local", "--ps",   "1",   "--workers", "2",
                              "--mode", "sync",  "--gpus", "all", NULL};
    const char *gpu_args[] = {"psctl", "local",  "--ps", "1", "--mode",
                              "sync",  "--gpus", "all",  NULL};
    ps_test_run_result r;
    run_psctl(ngpu == 0 ? cpu_args : gpu_args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[256];
    if (ngpu == 0) {
        ck_assert_contains(r.err, ps_k_cuda_built() ? "psctl: --gpus all: no CUDA GPU present"
                                                    : "psctl: --gpus all: this psctl was built "
                                                      "without CUDA");
        ck_assert_contains(r.err, "; running 2 CPU workers (--device cpu)\n");
        for (int j = 0; j < 2; j++) {
            snprintf(want, sizeof want,
                     "[worker %d] args: --ps 127.0.0.1:21000 --index %d --workers 2 "
                     "--device cpu --progress plain\n",
                     j, j);
            ck_assert_contains(r.out, want);
        }
        ck_assert_contains(r.err, "psctl: job finished: 1 ps, 2 workers, mode sync\n");
    } else { /* the GPU path: run by tests/gpu_checks.sh where there is a GPU */
        const char *parent = getenv("CUDA_VISIBLE_DEVICES");
        for (int j = 0; j < ngpu; j++) {
            snprintf(want, sizeof want,
                     "[worker %d] args: --ps 127.0.0.1:21000 --index %d "
                     "--workers %d --device cuda:0 --progress plain\n",
                     j, j, ngpu);
            ck_assert_contains(r.out, want);
            int k = 0;
            const char *p = parent && *parent ? parent : NULL;
            for (; p && k < j; k++) /* psctl maps our GPU j to the j-th of our own list */
                p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
            if (p)
                snprintf(want, sizeof want, "[worker %d] cuda_visible: %.*s\n", j,
                         (int)strcspn(p, ","), p);
            else
                snprintf(want, sizeof want, "[worker %d] cuda_visible: %d\n", j, j);
            ck_assert_contains(r.out, want);
        }
    }
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_gpus_all_without_gpu_one_worker_per_cpu) {
    if (ps_k_cuda_device_count() > 0) {
        printf("skipping: a GPU is present, so --gpus all does not fall back to CPU workers\n");
        return;
    }
    const char *args[] = {"psctl", "local", "--ps", "1", "--mode", "sync", "--gpus", "all", NULL};
    long n = cpus_allowed();
    ps_test_run_result r;
    run_psctl(args, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    char want[128];
    snprintf(want, sizeof want, "; running %ld CPU worker%s (--device cpu)\n", n,
             n == 1 ? "" : "s");
    ck_assert_contains(r.err, want);
    snprintf(want, sizeof want, "psctl: job finished: 1 ps, %ld workers, mode sync\n", n);
    ck_assert_contains(r.err, want);
    ck_assert_int_eq(fakes_alive_after_wait(), 0);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_gpus_missing_id_exit_2) {
    /* With no GPU every listed id is missing: only `all` falls back to the CPU. */
    int ngpu = ps_k_cuda_device_count();
    char id[16], list[32], want[128];
    snprintf(id, sizeof id, "%d", ngpu);
    snprintf(list, sizeof list, "%d,%d", ngpu + 1, ngpu);
    const char *lists[] = {id, list};
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"psctl",  "local", "--ps",   "1",      "--workers", i ? "2" : "1",
                              "--mode", "sync",  "--gpus", lists[i], NULL};
        ps_test_run_result r;
        run_psctl(args, NULL, NULL, &r);
        ck_assert(r.finished);
        ck_assert_msg(ps_test_run_exit_code(&r) == 2, "exit %d, stderr:\n%s",
                      ps_test_run_exit_code(&r), r.err);
        snprintf(want, sizeof want, "psctl local: --gpus %s: GPU %d does not exist: ", lists[i],
                 i ? ngpu + 1 : ngpu);
        ck_assert_contains(r.err, want);
        if (ngpu == 0) {
            ck_assert_contains(r.err, "(0 devices); --gpus all would run CPU workers\n");
        } else {
            snprintf(want, sizeof want, "%d CUDA GPU%s present", ngpu, ngpu == 1 ? "" : "s");
            ck_assert_contains(r.err, want);
        }
        ck_assert_int_eq(for_each_fake(count_one), 0);
        ps_test_run_free(&r);
    }
    if (ngpu > 0) { /* --gpus all makes one worker per GPU: another --workers is an error */
        snprintf(id, sizeof id, "%d", ngpu + 1);
        const char *args[] = {"psctl",  "local", "--ps",   "1",   "--workers", id,
                              "--mode", "sync",  "--gpus", "all", NULL};
        ps_test_run_result r;
        run_psctl(args, NULL, NULL, &r);
        ck_assert_int_eq(ps_test_run_exit_code(&r), 2);
        ck_assert_contains(r.err, "disagrees with --gpus all");
        ps_test_run_free(&r);
    }
}
END_TEST

/* Exit code of `exe --help`, or -1 if it could not be run in 20 s. */
static int help_exit_code(const char *exe) {
    const char *args[] = {exe, "--help", NULL};
    ps_test_run_result r;
    ps_test_run(exe, args, NULL, 20.0, NULL, NULL, &r);
    int code = r.finished ? ps_test_run_exit_code(&r) : -1;
    ps_test_run_free(&r);
    return code;
}

START_TEST(test_real_binaries_train) {
    const char *psd = getenv("PSD"), *worker = getenv("PSWORKER"), *psctl = getenv("PSCTL");
    ck_assert_msg(psd && worker && psctl, "PSD, PSWORKER and PSCTL must be set");
    int c1 = help_exit_code(psd), c2 = help_exit_code(worker);
    if (c1 != 0 || c2 != 0) {
        printf("skipping the real-binaries test: '%s --help' exited %d, '%s --help' exited %d\n",
               psd, c1, worker, c2);
        return;
    }
    char summary[4200];
    snprintf(summary, sizeof summary, "%s/summary.json", tdir);
    const char *args[] = {psctl,       "local",
                          "--ps",      "2",
                          "--workers", "2",
                          "--mode",    "sync",
                          "--epochs",  "1",
                          "--summary", summary,
                          "--data",    ps_test_data_dir(),
                          "--timeout", "240",
                          "--",        "--max-train",
                          "6000",      "--max-test",
                          "2000",      NULL};
    ps_test_run_result r;
    ps_test_run(psctl, args, NULL, 260.0, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);

    FILE *f = fopen(summary, "r");
    ck_assert_msg(f != NULL, "no summary file %s", summary);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    ck_assert_msg(j != NULL, "summary is not JSON: %s", buf);
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(j, "test_accuracy");
    ck_assert_msg(cJSON_IsNumber(acc), "no numeric test_accuracy in %s", buf);
    ck_assert_msg(acc->valuedouble > 0.6, "test_accuracy %g", acc->valuedouble);
    cJSON_Delete(j);
    ps_test_run_free(&r);
}
END_TEST

START_TEST(test_real_binaries_gpus_all) {
    /* A short real job through --gpus all: CPU workers here (no GPU), one per GPU where
     * there are GPUs (tests/gpu_checks.sh runs this where there is one). */
    const char *psd = getenv("PSD"), *worker = getenv("PSWORKER"), *psctl = getenv("PSCTL");
    ck_assert_msg(psd && worker && psctl, "PSD, PSWORKER and PSCTL must be set");
    int c1 = help_exit_code(psd), c2 = help_exit_code(worker);
    if (c1 != 0 || c2 != 0) {
        printf("skipping the real --gpus test: '%s --help' exited %d, '%s --help' exited %d\n", psd,
               c1, worker, c2);
        return;
    }
    int ngpu = ps_k_cuda_device_count();
    const char *head[] = {
        psctl,      "local", "--ps",      "1",   "--mode", "sync", "--data", ps_test_data_dir(),
        "--epochs", "1",     "--timeout", "120", "--gpus", "all",  NULL};
    const char *tail[] = {"--",  "--max-train", "512", "--max-test",
                          "256", "--max-steps", "2",   NULL};
    const char *args[32];
    int n = 0;
    for (const char *const *a = head; *a; a++)
        args[n++] = *a;
    if (ngpu == 0) { /* with GPUs --workers must match their count: leave it out */
        args[n++] = "--workers";
        args[n++] = "2";
    }
    for (const char *const *a = tail; *a; a++)
        args[n++] = *a;
    args[n] = NULL;
    ps_test_run_result r;
    ps_test_run(psctl, args, NULL, 150.0, NULL, NULL, &r);
    ck_assert(r.finished);
    ck_assert_msg(ps_test_run_exit_code(&r) == 0, "exit %d, stderr:\n%s", ps_test_run_exit_code(&r),
                  r.err);
    ck_assert_contains(r.err, ngpu == 0 ? "running 2 CPU workers (--device cpu)"
                                        : "one per GPU (CUDA_VISIBLE_DEVICES ");
    ck_assert_contains(r.err, "psctl: job finished: 1 ps, ");
    ps_test_run_free(&r);
}
END_TEST

static Suite *psctl_local_suite(void) {
    Suite *s = suite_create("psctl_local");
    TCase *fake = psctl_local_tcase("fakes", 60);
    tcase_add_test(fake, test_gpus_all_without_gpu_runs_cpu_workers);
    tcase_add_test(fake, test_gpus_all_without_gpu_one_worker_per_cpu);
    tcase_add_test(fake, test_gpus_missing_id_exit_2);
    suite_add_tcase(s, fake);

    TCase *real = psctl_local_tcase("real", 280);
    tcase_add_test(real, test_real_binaries_train);
    tcase_add_test(real, test_real_binaries_gpus_all);
    suite_add_tcase(s, real);
    return s;
}

int main(void) {
    return ps_test_run_suite(psctl_local_suite());
}
