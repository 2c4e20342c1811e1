/* The shared flag definitions (see shared_flags.h): one place for their bounds. */
#include "shared_flags.h"

const ps_option ps_flag_workers = {
    .name = "workers",
    .type = PS_OPTION_LONG,
    .min = 1,
    .max = PS_MAX_WORKERS,
    .def = "1",
    .metavar = "N",
    .help = "workers in the job (TF_CONFIG: chief + workers); the sync barrier waits for all"};

const ps_option ps_flag_mode = {
    .name = "mode",
    .type = PS_OPTION_CHOICE,
    .def = "sync",
    .choices = "sync|async",
    .help = "sync: average all workers' pushes per step; async: apply each push"};

const ps_option ps_flag_transport = {
    .name = "transport",
    .type = PS_OPTION_CHOICE,
    .def = "tcp",
    .choices = "tcp|ipc",
    .help = "tcp: listen on --bind:--port; ipc: on the Unix socket --ipc-path (this machine "
            "only; TF_CONFIG gives it as ipc://PATH)"};

const ps_option ps_flag_worker_timeout = {
    .name = "worker-timeout",
    .type = PS_OPTION_LONG,
    .min = 100,
    .max = 86400000,
    .def = "30000",
    .metavar = "MS",
    .help = "a worker silent this long (no request, no heartbeat) leaves the expected set "
            "until its next Hello; workers heartbeat every MS/4"};

const ps_option ps_flag_replicas = {
    .name = "replicas-to-aggregate",
    .type = PS_OPTION_LONG,
    .min = 0,
    .max = PS_MAX_WORKERS,
    .def = "0",
    .metavar = "R",
    .help = "sync: a step applies once R pushes for it arrived (later ones are dropped and "
            "counted); 0: all live workers"};

const ps_option ps_flag_workers_min = {
    .name = "workers-min",
    .type = PS_OPTION_LONG,
    .min = 0,
    .max = PS_MAX_WORKERS,
    .def = "0",
    .metavar = "M",
    .help = "sync, elastic: of the --workers slots, a worker counts from its Hello, and steps "
            "close only while at least M are live (below M they wait; a waiting pull fails "
            "after --max-pull-wait-ms); 0: all --workers are expected from the start"};

const ps_option ps_flag_staleness = {
    .name = "staleness",
    .type = PS_OPTION_LONG,
    .min = -1,
    .max = 1000000,
    .def = "-1",
    .metavar = "S",
    .help = "async: a worker more than S steps ahead of the slowest live worker waits at its "
            "pull; -1: plain async"};

const ps_option ps_flag_checkpoint_every = {
    .name = "checkpoint-every",
    .type = PS_OPTION_LONG,
    .min = 0,
    .max = 31536000,
    .def = "60",
    .metavar = "SECONDS",
    .help = "periodic checkpoints when there are new updates (0: only on request and at "
            "SIGTERM/SIGINT)"};

const ps_option ps_flag_epochs = {.name = "epochs",
                                  .type = PS_OPTION_LONG,
                                  .min = 1,
                                  .max = 1000000,
                                  .def = "2",
                                  .metavar = "N",
                                  .help = "epochs to train"};

const ps_option ps_flag_batch = {
    .name = "batch",
    .type = PS_OPTION_LONG,
    .min = 0,
    .max = 1 << 20,
    .def = "0",
    .metavar = "N",
    .help = "per-worker batch, global batch = N x workers (0: the model's batch_size)"};

const ps_option ps_flag_seed = {.name = "seed",
                                .type = PS_OPTION_LONG,
                                .min = 0,
                                .max = 1L << 62,
                                .def = "1",
                                .metavar = "N",
                                .help = "initialisation and shuffling seed"};

const ps_option ps_flag_strategy = {
    .name = "strategy",
    .type = PS_OPTION_CHOICE,
    .def = "parameter_server",
    .choices = "parameter_server|mirrored|multi_worker_mirrored",
    .help = "how the workers combine gradients: through psd shards, or all-reduce between the "
            "workers (mirrored: all on this host; multi_worker_mirrored: any hosts)"};

const ps_option ps_flag_communication = {
    .name = "communication",
    .type = PS_OPTION_CHOICE,
    .def = "auto",
    .choices = "auto|ring|nccl",
    .help = "all-reduce implementation: ring (over the workers' sockets), nccl (CUDA devices, "
            "when built with NCCL; one GPU per worker), auto = nccl when every worker computes on "
            "a GPU of its own, NCCL is built in and --compression is none, else ring"};

const ps_option ps_flag_compression = {
    .name = "compression",
    .type = PS_OPTION_STR,
    .def = "none",
    .metavar = "none|fp16|bf16|topk:R",
    .help = "gradients on the wire (psd pushes, the all-reduce): fp16 / bf16 rounded to nearest "
            "even (fp16 saturates beyond 65504); topk:R sends each tensor's (all-reduce: each "
            "bucket's) max(1, ceil(R x n)) largest entries and keeps the rest for later steps "
            "(error feedback), 0 < R <= 1. Parameters and psd's state stay float32"};
