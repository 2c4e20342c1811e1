/* psworker: one training worker (one per GPU, or per CPU when there is none).
 * Cluster from TF_CONFIG or flags; trains, and as chief evaluates and writes
 * the summary. Exit 0 on success, 1 on a training failure, 2 on bad config. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "lifetime.h"
#include "log.h"
#include "ps_error.h"
#include "tfconfig.h"
#include "train.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

static void usage(FILE *out) {
    fprintf(out,
            "usage: psworker [options]\n"
            "Training worker: pulls parameters from the psd shards, computes gradients on its\n"
            "shard of the data, pushes them. Worker 0 is the chief: it creates the variables,\n"
            "evaluates on the test set after each epoch and writes the summary.\n"
            "The cluster comes from TF_CONFIG (cluster.ps, cluster.worker, optional\n"
            "cluster.chief; task.type worker|chief, task.index) or from the flags, which win.\n\n"
            "options:\n"
            "  --ps HOST:PORT,...     parameter servers, in shard order\n"
            "  --index N              this worker's index (0 = chief) [default: 0]\n"
            "  --workers N            workers in the job [default: 1]\n"
            "  --model FILE           Keras-like JSON model spec [default: built-in 784-128-10 MLP,\n"
            "                         Adam 1e-3, batch 64; same as examples/mlp.json]\n"
            "  --data DIR             IDX dataset directory [default: " DEFAULT_DATA_DIR "]\n"
            "  --epochs N             [default: 2]\n"
            "  --batch N              per-worker batch; global batch = N x workers [default: model's]\n"
            "  --seed N               initialisation and shuffling seed [default: 1]\n"
            "  --summary FILE         chief: write a JSON summary here at the end\n"
            "  --progress MODE        auto, tty, plain or none [default: auto]\n"
            "  --max-train N          use only the first N training samples [default: all]\n"
            "  --max-test N           evaluate on the first N test samples [default: all]\n"
            "  --max-steps N          at most N steps per epoch [default: all]\n"
            "  --timeout SECONDS      give up when the shards do not answer [default: 120]\n"
            "  --blas-threads N       BLAS threads [default: 1]\n"
            "  -h, --help             show this help\n");
}

static int parse_num(const char *flag, const char *s, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "psworker: %s: '%s' is not an integer in [%ld, %ld]\n", flag, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* Splits a comma-separated list in place; returns the count (max cap). */
static size_t split_list(char *s, char **out, size_t cap) {
    size_t n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

enum { O_PS = 1000, O_INDEX, O_WORKERS, O_MODEL, O_DATA, O_EPOCHS, O_BATCH, O_SEED, O_SUMMARY,
       O_PROGRESS, O_MAX_TRAIN, O_MAX_TEST, O_MAX_STEPS, O_TIMEOUT, O_BLAS };

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        {"ps", required_argument, NULL, O_PS}, {"index", required_argument, NULL, O_INDEX},
        {"workers", required_argument, NULL, O_WORKERS}, {"model", required_argument, NULL, O_MODEL},
        {"data", required_argument, NULL, O_DATA}, {"epochs", required_argument, NULL, O_EPOCHS},
        {"batch", required_argument, NULL, O_BATCH}, {"seed", required_argument, NULL, O_SEED},
        {"summary", required_argument, NULL, O_SUMMARY}, {"progress", required_argument, NULL, O_PROGRESS},
        {"max-train", required_argument, NULL, O_MAX_TRAIN}, {"max-test", required_argument, NULL, O_MAX_TEST},
        {"max-steps", required_argument, NULL, O_MAX_STEPS}, {"timeout", required_argument, NULL, O_TIMEOUT},
        {"blas-threads", required_argument, NULL, O_BLAS}, {"help", no_argument, NULL, 'h'}, {0}};
    ps_train_config cfg = {.workers = 1, .data_dir = DEFAULT_DATA_DIR, .epochs = 2, .seed = 1,
                           .timeout_ms = 120000};
    char *ps_flag = NULL, *progress = "auto";
    long idx = -1, workers = -1, v, blas = 1;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'h': usage(stdout); return 0;
        case O_PS: ps_flag = optarg; break;
        case O_INDEX: bad = parse_num("--index", optarg, 0, 65535, &idx); break;
        case O_WORKERS: bad = parse_num("--workers", optarg, 1, 65536, &workers); break;
        case O_MODEL: cfg.model_path = optarg; break;
        case O_DATA: cfg.data_dir = optarg; break;
        case O_EPOCHS: bad = parse_num("--epochs", optarg, 1, 100000, &v); cfg.epochs = (unsigned)v; break;
        case O_BATCH: bad = parse_num("--batch", optarg, 1, 1 << 20, &v); cfg.batch = (size_t)v; break;
        case O_SEED: bad = parse_num("--seed", optarg, 0, LONG_MAX, &v); cfg.seed = (uint64_t)v; break;
        case O_SUMMARY: cfg.summary_path = optarg; break;
        case O_PROGRESS: progress = optarg; break;
        case O_MAX_TRAIN: bad = parse_num("--max-train", optarg, 1, LONG_MAX, &v); cfg.max_train = (size_t)v; break;
        case O_MAX_TEST: bad = parse_num("--max-test", optarg, 1, LONG_MAX, &v); cfg.max_test = (size_t)v; break;
        case O_MAX_STEPS: bad = parse_num("--max-steps", optarg, 1, LONG_MAX, &v); cfg.max_steps = (size_t)v; break;
        case O_TIMEOUT: bad = parse_num("--timeout", optarg, 1, 86400, &v); cfg.timeout_ms = (int)v * 1000; break;
        case O_BLAS: bad = parse_num("--blas-threads", optarg, 1, 256, &blas); break;
        case ':': fprintf(stderr, "psworker: %s needs a value (see --help)\n", argv[optind - 1]); return 2;
        default: fprintf(stderr, "psworker: unknown option %s (see --help)\n", argv[optind - 1]); return 2;
        }
        if (bad) return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "psworker: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (strcmp(progress, "auto") == 0) cfg.progress = isatty(1) ? PS_PROGRESS_TTY : PS_PROGRESS_PLAIN;
    else if (strcmp(progress, "tty") == 0) cfg.progress = PS_PROGRESS_TTY;
    else if (strcmp(progress, "plain") == 0) cfg.progress = PS_PROGRESS_PLAIN;
    else if (strcmp(progress, "none") == 0) cfg.progress = PS_PROGRESS_NONE;
    else {
        fprintf(stderr, "psworker: --progress: '%s' is not auto, tty, plain or none\n", progress);
        return 2;
    }

    /* TF_CONFIG first, flags win. */
    char err[512];
    ps_cluster cl = {0};
    const char *tf = getenv("TF_CONFIG");
    int have_tf = tf && *tf;
    if (have_tf) {
        if (ps_cluster_from_tfconfig(tf, &cl, err, sizeof err) != PS_OK) {
            fprintf(stderr, "psworker: TF_CONFIG: %s\n", err);
            return 2;
        }
        unsigned gi;
        if (idx < 0 && cl.task_type[0]) {
            if (ps_cluster_worker_index(&cl, &gi) != PS_OK) {
                fprintf(stderr, "psworker: TF_CONFIG: task type '%s' is not a worker or chief\n", cl.task_type);
                ps_cluster_free(&cl);
                return 2;
            }
            idx = gi;
        }
        if (workers < 0 && ps_cluster_num_workers(&cl) > 0) workers = ps_cluster_num_workers(&cl);
    }
    char *ps_list[256];
    char ps_buf[8192] = "";
    size_t n_ps = 0;
    if (ps_flag) {
        snprintf(ps_buf, sizeof ps_buf, "%s", ps_flag);
        n_ps = split_list(ps_buf, ps_list, 256);
    } else if (have_tf) {
        for (size_t i = 0; i < cl.n_ps && i < 256; i++) ps_list[n_ps++] = cl.ps[i];
    }
    if (n_ps == 0) {
        fprintf(stderr, "psworker: no parameter servers: give --ps HOST:PORT,... or a TF_CONFIG with "
                        "cluster.ps (this system trains through psd shards)\n");
        ps_cluster_free(&cl);
        return 2;
    }
    for (size_t i = 0; i < n_ps; i++) {
        char host[256];
        int port;
        if (ps_parse_hostport(ps_list[i], host, sizeof host, &port) != PS_OK || port == 0) {
            fprintf(stderr, "psworker: parameter server '%s' is not host:port\n", ps_list[i]);
            ps_cluster_free(&cl);
            return 2;
        }
    }
    cfg.index = idx < 0 ? 0 : (unsigned)idx;
    cfg.workers = workers < 0 ? 1 : (unsigned)workers;
    if (cfg.index >= cfg.workers) {
        fprintf(stderr, "psworker: --index %u is out of range for --workers %u\n", cfg.index, cfg.workers);
        ps_cluster_free(&cl);
        return 2;
    }
    cfg.ps = (const char *const *)ps_list;
    cfg.n_ps = n_ps;

    char tag[32];
    snprintf(tag, sizeof tag, cfg.index == 0 ? "chief" : "worker[%u]", cfg.index);
    ps_log_set_tag(tag);
    ps_die_with_parent();
    ps_k_set_threads((int)blas);

    ps_train_result res;
    int rc = ps_train_run(&cfg, &res, err, sizeof err);
    ps_cluster_free(&cl);
    if (rc != PS_OK) {
        PS_ERROR("%s", err);
        return rc == PS_EINVAL || rc == PS_EFORMAT ? 2 : 1;
    }
    return 0;
}
