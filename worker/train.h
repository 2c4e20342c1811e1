/* The worker's training loop: forward/backward on a batch of its data shard,
 * with the parameters and gradients going through one exchange (exchange.h:
 * psd shards, or the optimizer in this process); the chief (worker 0) also
 * creates the variables, evaluates on the test set after each epoch and writes
 * the summary. */
#ifndef PS_TRAIN_H
#define PS_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "progress.h"
#include "ps.h"

#define PS_TRAIN_DEFAULT_EPOCHS 2 /* neither --epochs nor the spec's "epochs" */

typedef struct {
    const char *const *ps; /* "host:port" per shard, borrowed */
    size_t n_ps;
    unsigned index, workers; /* global worker index (0 = chief) and count */
    const char *model_path;  /* NULL: the built-in default model */
    const char *loss;        /* --loss: for a bare Keras model file; NULL: none */
    const char *data_dir;    /* --data: a directory, a file, a glob or a data spec (input.h) */
    const char *test_data;   /* --test-data: the test set in the same forms; NULL: --data's own
                                (IDX, CIFAR-10) or none */
    double validation_split; /* --validation-split: held out of the training data (0: the
                                spec's, else none) */
    long shuffle_buffer;     /* --shuffle-buffer N (0: the spec's, else a full shuffle) */
    long input_threads;      /* --input-threads (0: one per core, at most 8) */
    size_t input_memory;     /* --input-memory, bytes (0: PS_PIPELINE_MEMORY_DEFAULT) */
    const char *device;      /* "auto", "cpu", "cuda:N" */
    const char *dataset;     /* "auto", "fashion_mnist"/"idx", "cifar10" */
    unsigned epochs; /* 0: the model spec's "epochs", else PS_TRAIN_DEFAULT_EPOCHS */
    const char *positive_classes; /* --positive-classes "5,7,9"; NULL: not given */
    const char *label_map;        /* --label-map "0:0,1:0,..."; NULL: not given */
    int input_adapt;              /* a ps_adapt_mode */
    int rgb_to_gray;              /* 3-channel data may feed a 1-channel model (luminance) */
    size_t batch; /* per worker; 0: the model spec's batch_size */
    uint64_t seed;
    const char *summary_path; /* chief writes JSON here; NULL: none */
    const char *tensorboard_dir; /* chief: TensorBoard event files here (train_log.h); NULL */
    unsigned tensorboard_every;  /* chief: the batch_ tags every N steps (0: none) */
    const char *history_path;    /* chief: Keras' History.history as JSON; NULL: none */
    ps_progress_mode progress;
    size_t max_train, max_test; /* 0: all samples */
    int timeout_ms;             /* per request round */
    size_t max_steps;           /* per epoch, 0: all (tests) */
    const char *save_path;      /* chief: write the final model here (tensor file); NULL: no */
    const char *export_path;    /* chief: --export FILE.onnx | FILE.safetensors (export.h); NULL */
    const char *init_from;      /* chief: initial values from this saved model; NULL: seeded */
    unsigned slow_ms;           /* tests: sleep this long every step (a slow worker) */
    int retry_ms;               /* a shard silent this long is probed (client retry) */
    const char *curve_secret;   /* CurveZMQ key pair file; NULL: plaintext */
    const char *server_key;     /* CurveZMQ: the shards' public key file */
    int no_ps;                  /* train alone, optimizer in this process (the benchmark floor) */
    int separate_pull;          /* a push then a pull per step, not one push-pull round trip */
    int no_prefetch;            /* copy each batch on this thread, not ahead on another */
    const char *job_id;         /* the job the variables belong to (CreateVars); NULL: none */
    int recreate_lost;          /* chief: re-create variables a shard lost (initial values) */
    /* the all-reduce strategies (exchange_collective.c) */
    int strategy;                     /* a ps_strategy */
    int communication;                /* a ps_communication */
    int communication_auto;           /* nccl chosen by auto: the ring if workers share a GPU */
    const char *const *peers;         /* every worker's "host:port" in global order, borrowed */
    size_t n_peers;                   /* == workers */
    unsigned worker_timeout_ms;       /* a ring neighbour silent this long is dead */
    unsigned ring_connect_timeout_ms; /* waiting for the ring to form */
    size_t bucket_bytes;              /* gradients fused into all-reduces of at least this */
    size_t max_mirrored_table_bytes;  /* an embedding table (+ slots) mirrored up to this;
                                       * 0: 1 GiB */
    uint64_t check_every;             /* compare the variables' checksums every N steps (0: no) */
    const char *checkpoint_dir;       /* chief: checkpoints here, resumed from at start; NULL */
    unsigned checkpoint_every_s;      /* chief: a checkpoint when this many seconds passed (0: no) */
    uint64_t checkpoint_every_steps;  /* chief: a checkpoint every N steps (0: no) */
    unsigned keep_checkpoints;        /* newest checkpoint files kept */
    uint64_t perturb_at_step;         /* tests (fault injection): nudge a variable after step N */
    unsigned accumulate_steps; /* micro-batches summed per step (accumulate.h); 0, 1: none */
    unsigned sync_every;       /* local SGD: combine every K local steps (exchange_localsgd.c);
                                * 0, 1: every step (the strategies' own way) */
    int compression;                  /* gradients on the wire: a PS_COMPRESSION_* (half.h) */
    float topk_ratio;                 /* PS_COMPRESSION_TOPK: 0 < ratio <= 1 */
    const char *dtype_policy;         /* --dtype-policy: over the spec's; NULL: the spec's */
    uint64_t inject_overflow_at_step; /* tests: step N's gradient gets an inf (mixed_float16) */
    int elastic; /* --elastic: the data re-sharded among the live workers each epoch (elastic.h) */
    const volatile sig_atomic_t *stop; /* set (by a signal handler): leave after the current step with
                                 a Goodbye, ps_train_run returns PS_ESHUTDOWN; NULL: none */
} ps_train_config;

/* How the workers combine gradients (psworker --strategy). */
typedef enum {
    PS_STRATEGY_PARAMETER_SERVER = 0, /* through psd shards (exchange_ps.c) */
    PS_STRATEGY_MIRRORED,             /* all-reduce, every worker on this host (Unix sockets) */
    PS_STRATEGY_MULTI_WORKER_MIRRORED /* all-reduce, workers on any hosts */
} ps_strategy;

/* The all-reduce's implementation (psworker --communication, TensorFlow's names). */
typedef enum { PS_COMM_AUTO = 0, PS_COMM_RING, PS_COMM_NCCL } ps_communication;

/* Returns the strategy's name as --strategy takes it ("parameter_server", ...). */
const char *ps_strategy_name(int strategy);

#define PS_TRAIN_MAX_RECREATED 64 /* shards listed in ps_train_result.recreated */

typedef struct {
    double test_accuracy, test_loss; /* chief only; -1 when not evaluated */
    int test_rmse; /* float targets: test_accuracy holds the root mean squared error */
    double test_auc; /* the model's metrics name "auc": the test set's ROC AUC; else -1 */
    double samples_per_sec;          /* job-wide, training time only */
    double wall_seconds;
    uint64_t steps; /* this worker's steps */
    int async;
    /* chief, --recreate-lost-variables: shards whose lost variables it re-created */
    unsigned recreated[PS_TRAIN_MAX_RECREATED];
    size_t n_recreated;
    int peer_failed; /* the failure was another worker's (a broken ring, diverged replicas) */
    double bytes_sent_per_step; /* gradient bytes this worker put on the wire per step (-1: n/a) */
    int dtype_policy;       /* the model's ps_dtype_policy */
    size_t params, trainable_params; /* as Keras counts them (the rest: moving statistics,
                                      * frozen layers) */
    float loss_scale;       /* mixed_float16: the loss scale at the end (0: none) */
    uint64_t skipped_steps; /* mixed_float16: steps skipped for inf / NaN gradients */
} ps_train_result;

/* Places the model's variables on n_shards shards (the same on every worker)
 * and registers each piece with the client, pointing into the model's params
 * and grads (both borrowed). Returns PS_OK or an error with a reason in err.
 * Defined with the psd exchange (exchange_ps.c); tests build loops on it. */
int ps_train_register_vars(ps_model *m, ps_client *c, unsigned n_shards, char *err, size_t errlen);

/* Runs the whole job for this worker. Returns PS_OK or an error with a one-line
 * reason in err: among them PS_ELOST when a shard lost the job's variables (it
 * restarted without a checkpoint; the chief finds it before creating anything, any
 * worker during training) and PS_EEXIST when a shard holds another job's variables. */
int ps_train_run(const ps_train_config *cfg, ps_train_result *res, char *err, size_t errlen);

#endif
