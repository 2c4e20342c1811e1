/* psworker: one training worker (one per GPU, or per CPU when there is none).
 * Cluster from TF_CONFIG or flags; trains through psd or with all-reduce
 * (--strategy), and as chief evaluates and writes the summary. Its exit
 * statuses are the table `exits` (--help, psworker(1)). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exchange.h"
#include "evaluate.h"
#include "export.h"
#include "half.h"
#include "job_id.h"
#include "kernels.h"
#include "lifetime.h"
#include "log.h"
#include "options.h"
#include "ps_error.h"
#include "replicas.h"
#include "shared_flags.h"
#include "tfconfig.h"
#include "train.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define DEFAULT_JOB_ID "default"
#define EXIT_PEER 3 /* all-reduce: a peer died, went silent or sent garbage; replicas diverged */
#define EXIT_LOST 4 /* PS_ELOST: restarting this worker cannot bring the variables back */

/* libps logs through common/log.c, which applies its own level (PS_LOG_LEVEL). */
static void lib_log(void *user, ps_lib_log_level level, const char *line) {
    (void)user;
    static const ps_log_level map[] = {PS_LOG_DEBUG, PS_LOG_INFO, PS_LOG_WARN, PS_LOG_ERROR};
    ps_log(map[level <= PS_LIB_LOG_ERROR ? level : PS_LIB_LOG_ERROR], "%s", line);
}

typedef struct {
    char ps[8192];
    long index, workers;
    char model[1024], data[1024], test_data[1024], summary[1024], device[64], save[1024], init_from[1024];
    char export_path[1024], tensorboard[1024], history[1024];
    long tensorboard_every;
    char evaluate[1024], predictions[1024];
    char curve_secret[1024], server_key[1024], job_id[PS_WIRE_MAX_JOB_ID + 1];
    long epochs, batch, seed, progress, dataset;
    long max_train, max_test, max_steps, timeout, blas_threads, retry_ms, slow_ms, no_ps, push_pull;
    long prefetch, recreate_lost;
    double validation_split;
    long shuffle_buffer, input_threads, input_memory;
    char positive_classes[1024], label_map[4096];
    long input_adapt, rgb_to_gray;
    long strategy, communication, worker_timeout, ring_connect_timeout, bucket_kb, check_every;
    long max_mirrored_table_mb;
    char checkpoint_dir[1024], loss[64];
    long checkpoint_every, checkpoint_every_steps, keep_checkpoints, perturb_at_step;
    long accumulate_steps, sync_every;
    char compression[64];
    long dtype_policy, inject_overflow_at_step, elastic;
} worker_opts;

enum { PROGRESS_AUTO, PROGRESS_TTY, PROGRESS_PLAIN, PROGRESS_NONE };

/* --validation-split: a fraction in [0, 1). */
static int parse_fraction(const ps_option *o, void *cfg, const char *val, char *err,
                          size_t errlen) {
    char *end;
    errno = 0;
    double d = strtod(val, &end);
    if (end == val || *end || errno || !(d >= 0 && d < 1)) {
        snprintf(err, errlen, "--%s needs a fraction from 0 to below 1, got '%s'", o->name, val);
        return PS_EINVAL;
    }
    memcpy((char *)cfg + o->offset, &d, sizeof d);
    return PS_OK;
}
/* --dataset choices, in table order; fashion_mnist is another name for idx. */
static const char *const dataset_names[] = {"auto", "idx", "idx", "cifar10"};

#define F(field) PS_OPTION_FIELD(worker_opts, field)
static const ps_option table[] = {
    {"ps", PS_OPTION_STR, F(ps), 0, 0, NULL, NULL, "HOST:PORT,...",
     "parameter servers, in shard order (TF_CONFIG: cluster.ps); a shard on this machine "
     "started with --transport ipc is given as ipc://PATH, a replicated shard as its "
     "replicas ADDR|ADDR|... (the initial primary first)"},
    {"index", PS_OPTION_LONG, F(index), 0, PS_MAX_WORKERS - 1, NULL, NULL, "N",
     "this worker's index, 0 = chief (TF_CONFIG: task)", .default_text = "0"},
    {.like = &ps_flag_workers,
     PS_OPTION_AT(worker_opts, workers),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "workers in the job (TF_CONFIG: chief + workers)",
     .default_text = "1"},
    {"model", PS_OPTION_STR, F(model), 0, 0, "", NULL, "FILE",
     "Keras-like JSON model spec, a {\"keras\": ...} wrapper, a Keras model.to_json() file "
     "(then give --loss), or a Keras 3 .keras archive (architecture and weights)",
     .default_text = "built-in 784-128-10 MLP = examples/mlp.json",
     .doc = "The wrapper is {\"keras\": ..., \"loss\": ...} around a Keras model; a "
            "model.to_json() file is taken as written. A FILE.keras (Keras 3's model.save) gives "
            "the layers of its config.json, the loss and optimizer of its compile_config (else "
            "--loss is needed) and the initial weights (--init-from overrides them); the "
            "optimizer's state in it is not loaded (docs/MODELS.md). The examples are installed "
            "under share/doc/ps/examples"},
    {"loss", PS_OPTION_STR, F(loss), 0, 0, "", NULL, "NAME",
     "the loss of a bare Keras model file given to --model (to_json() carries none): "
     "sparse_categorical_crossentropy, binary_crossentropy or mse; refused for specs that "
     "give their own",
     .doc = "Such a file without --loss is refused, and so is --loss with a spec that names its "
            "own loss"},
    {"data", PS_OPTION_STR, F(data), 0, 0, DEFAULT_DATA_DIR, NULL, "PATH",
     "the training data: a directory (IDX files, CIFAR-10 batches, *.tfrecord files, or "
     "class subdirectories of images), a file (.npz, .csv, .tsv, TFRecord), a glob of files, "
     "or a data spec (FILE.json: format, files, preprocessing, validation)",
     .doc = "IDX files may be gzipped or raw. IDX and CIFAR-10 load whole; every other format "
            "streams from disk through the input pipeline (--input-threads, --input-memory). "
            "Image folders are read as Keras' image_dataset_from_directory reads them (classes "
            "sorted, the mapping logged), every image resized to the model's input unless the "
            "data spec's \"preprocess\" says otherwise. README.md's \"Your own data\" shows "
            "each form"},
    {"test-data", PS_OPTION_STR, F(test_data), 0, 0, "", NULL, "PATH",
     "chief: the test set, evaluated at the end (and after each epoch when there is no "
     "validation set), in the forms --data takes",
     .default_text = "--data's own test files (IDX, CIFAR-10), else none"},
    {"validation-split", PS_OPTION_CUSTOM, F(validation_split), 0, 0, "0", NULL, "F",
     "hold out this fraction of the training data (chosen by --seed, as Keras' "
     "validation_split with a seed) and evaluate it after each epoch as val_loss and "
     "val_accuracy",
     .parse = parse_fraction,
     .default_text = "the data spec's \"validation_split\", else 0"},
    {"shuffle-buffer", PS_OPTION_LONG, F(shuffle_buffer), 0, 1L << 40, "0", NULL, "N",
     "shuffle through a buffer of N records as tf.data's shuffle does (files in a shuffled "
     "order, each read in order; 1: no shuffling); 0: a full shuffle of the worker's share "
     "every epoch",
     .default_text = "the data spec's \"shuffle_buffer\", else 0"},
    {"input-threads", PS_OPTION_LONG, F(input_threads), 0, 256, "0", NULL, "N",
     "threads that read, decode and augment records ahead of training",
     .default_text = "one per core, at most 8 (1 for IDX and CIFAR-10)"},
    {"input-memory", PS_OPTION_LONG, F(input_memory), 1, 1L << 20, "256", NULL, "MB",
     "the prepared batches held ahead of training take at most this much (at least two "
     "batches)"},
    {"dataset", PS_OPTION_CHOICE, F(dataset), 0, 0, "auto", "auto|idx|fashion_mnist|cifar10", NULL,
     "format of --data (fashion_mnist = idx); auto: cifar10 when --data holds "
     "data_batch_1.bin or test_batch.bin (or .bin.gz), else idx"},
    {"device", PS_OPTION_STR, F(device), 0, 0, "auto", NULL, "auto|cpu|cuda:N",
     "compute device; auto: cuda:0 when CUDA is built in and a GPU is present, else cpu"},
    {"positive-classes", PS_OPTION_STR, F(positive_classes), 0, 0, "", NULL, "C,C,...",
     "binary task: label 1 for these classes of the data (e.g. 5,7,9), 0 for the others; "
     "the model needs a binary output (Dense 1 + binary_crossentropy, or Dense 2)",
     .default_text = "the model spec's \"labels\", else the data's own labels",
     .doc = "A class the data does not have, a class listed twice, or every class positive is "
            "refused"},
    {"label-map", PS_OPTION_STR, F(label_map), 0, 0, "", NULL, "C:L,...",
     "relabel: class C of the data becomes label L (e.g. 0:0,1:0,2:1,...); every class of the "
     "data once, every label of the model used",
     .default_text = "as --positive-classes",
     .doc = "Every label must be one of the model's. Not with --positive-classes. The worker logs "
            "the mapping and the class balance of the training and test sets"},
    {"input-adapt", PS_OPTION_CHOICE, F(input_adapt), 0, 0, "pad", "pad|resize|refuse", NULL,
     "when the model's image input (h, w, c) differs from the data's images: pad smaller "
     "ones with zeros (centred), resize (bilinear) any, or refuse; 1 channel is repeated to c. "
     "Done once at load (memory: samples x h x w x c floats)",
     .doc = "The data's images are 28x28x1 (Fashion-MNIST) or 32x32x3 (CIFAR-10). pad puts "
            "smaller images in the middle of zeros (an odd difference leaves the extra row or "
            "column at the bottom or right); resize scales any size (bilinear, half-pixel "
            "centres, no antialiasing); refuse makes any difference an error. One log line says "
            "what was done; the adapted sets are converted in place (Fashion-MNIST at 32x32x3: "
            "about 860 MB instead of 220 MB). A flat model input takes data with the same number "
            "of values"},
    {"rgb-to-gray", PS_OPTION_CHOICE, F(rgb_to_gray), 0, 0, "no", "no|yes", NULL,
     "yes: 3-channel images feed a 1-channel model input as their luminance "
     "(0.2989 R + 0.5870 G + 0.1140 B); no: that is refused"},
    {.like = &ps_flag_epochs,
     PS_OPTION_AT(worker_opts, epochs),
     .flags = PS_OPTION_NO_DEFAULT,
     .help = "epochs to train",
     .default_text = "the model spec's \"epochs\", else 2",
     .doc = "The chief logs which it used"},
    {.like = &ps_flag_batch, PS_OPTION_AT(worker_opts, batch)},
    {.like = &ps_flag_seed, PS_OPTION_AT(worker_opts, seed)},
    {"summary", PS_OPTION_STR, F(summary), 0, 0, "", NULL, "FILE",
     "chief: write a JSON summary here at the end",
     .doc = "Its keys: test_accuracy, test_loss, test_samples, epochs, steps, mode, strategy, "
            "workers, shards, samples_per_sec, wall_seconds, job_id, recreated_lost_variables "
            "(the shards whose lost variables were created again, see --recreate-lost-variables; "
            "normally []), accumulate_steps, sync_every, compression, bytes_sent_per_step (the "
            "gradient bytes this worker sent per step), dtype_policy (and loss_scale, "
            "skipped_steps under mixed_float16); the training loss and accuracy over all workers: "
            "loss, accuracy, samples (the last epoch), workers_reported, chief_loss, "
            "chief_accuracy, chief_samples (the chief's own), and history (per epoch, each "
            "worker's figures too). With --evaluate: \"mode\": \"evaluate\" and the test figures"},
    {"tensorboard", PS_OPTION_STR, F(tensorboard), 0, 0, "", NULL, "DIR",
     "chief: TensorBoard event files in DIR/train and DIR/validation (Keras' TensorBoard "
     "callback's runs and tags: epoch_loss, epoch_accuracy, epoch_learning_rate, batch_*), "
     "flushed after each epoch",
     .doc = "Per epoch epoch_loss, epoch_accuracy (both runs; validation is the test-set "
            "evaluation) and epoch_learning_rate (train); every --tensorboard-every steps "
            "batch_loss, batch_accuracy, batch_learning_rate, batch_samples_per_sec, "
            "batch_gradient_global_norm (train); the variables' histograms per epoch. The files "
            "are named events.out.tfevents.<seconds>.<host>.<pid>.<n> (docs/FORMATS.md)"},
    {"tensorboard-every", PS_OPTION_LONG, F(tensorboard_every), 0, 1L << 30, "100", NULL, "N",
     "chief, --tensorboard: the batch_ tags every N steps (Keras' update_freq; 0: none)"},
    {"history", PS_OPTION_STR, F(history), 0, 0, "", NULL, "FILE",
     "chief: Keras' History.history as JSON (loss, accuracy, val_loss, val_accuracy: one "
     "entry per epoch), rewritten after each epoch",
     .doc = "It is written beside, then renamed"},
    {"progress", PS_OPTION_CHOICE, F(progress), 0, 0, "auto", "auto|tty|plain|none", NULL,
     "progress line: redrawn in place (tty) or plain lines; auto picks by stdout",
     .doc = "The chief's line at an epoch's end shows the loss and accuracy of all workers (their "
            "summed losses and hits over their summed samples); every worker logs its own in one "
            "line"},
    {"max-train", PS_OPTION_LONG, F(max_train), 0, 1L << 40, "0", NULL, "N",
     "use only the first N training samples (0: all)"},
    {"max-test", PS_OPTION_LONG, F(max_test), 0, 1L << 40, "0", NULL, "N",
     "evaluate on the first N test samples (0: all)"},
    {"max-steps", PS_OPTION_LONG, F(max_steps), 0, 1L << 40, "0", NULL, "N",
     "at most N steps per epoch (0: all)"},
    {"timeout", PS_OPTION_LONG, F(timeout), 1, 86400, "120", NULL, "SECONDS",
     "give up when the shards do not answer for this long",
     .doc = "The worker then fails (exit status 1)"},
    {"blas-threads", PS_OPTION_LONG, F(blas_threads), 1, 256, "1", NULL, "N",
     "OpenBLAS threads (one per worker: two pools on two cores slow a small MLP ~3x)"},
    {"save", PS_OPTION_STR, F(save), 0, 0, "", NULL, "FILE",
     "chief: save the final model here (tensor file, docs/FORMATS.md)"},
    {"export", PS_OPTION_STR, F(export_path), 0, 0, "", NULL, "FILE",
     "chief: after training, write the model to FILE as ONNX (FILE.onnx: architecture and "
     "weights), safetensors (FILE.safetensors: the weights, the model JSON beside them) or "
     "Keras 3 (FILE.keras: architecture and weights; FILE.weights.h5: the weights)",
     .doc = "Any other extension is refused before training starts (exit status 2). The ONNX file "
            "(opset 13) takes channels-last input as psworker feeds it (pixels / 255) and outputs "
            "what the model's last layer does. A safetensors export holds the weights under "
            "PyTorch's state_dict names and layouts (layer.param: Dense weight (out, in), Conv2d "
            "OIHW, BatchNorm running_mean ...); beside it, FILE with .model.json in place of "
            ".safetensors holds the layers (docs/FORMATS.md). Both appear, or neither. The Keras "
            "files are what Keras 3's keras.saving.load_model and model.load_weights read: a "
            "Functional model of the same layers, its loss and optimizer settings in "
            "compile_config, without the optimizer's state. A failed export exits 1"},
    {"evaluate", PS_OPTION_STR, F(evaluate), 0, 0, "", NULL, "FILE",
     "train nothing: load a model saved with --save, or a Keras 3 .keras / .weights.h5 file "
     "(its architecture from --model, or from the .keras file), print its test accuracy and "
     "loss as training's last line does (and --summary), exit 0; no psd, no other workers. "
     "Not an .onnx export",
     .doc = "It evaluates on --test-data, else on --data (its test files for IDX and CIFAR-10; "
            "any other form whole, through the input pipeline with the data spec's "
            "deterministic preprocessing), as the chief does after training, with the same "
            "--dataset, "
            "--max-test, --input-adapt, --rgb-to-gray and labels, and prints \"test accuracy: A  "
            "test loss: L  (evaluated FILE: N test samples, S s)\"; --summary gets them as JSON "
            "(\"mode\": \"evaluate\"). The options only training uses (--save, --export, "
            "--init-from, --ps, --no-ps, --strategy, --epochs, --max-train, --max-steps) are "
            "refused. A missing FILE exits 1; a corrupt one, one that does not hold every "
            "variable of --model, or an .onnx export exits 2, with the reason"},
    {"predictions", PS_OPTION_STR, F(predictions), 0, 0, "", NULL, "FILE",
     "with --evaluate: write the model's outputs on the test set to FILE: test samples x "
     "outputs float32, little-endian, row-major, no header (logits, or probabilities when "
     "the last layer has softmax / sigmoid; docs/FORMATS.md)",
     .doc = "The outputs are those of the ONNX export"},
    {"init-from", PS_OPTION_STR, F(init_from), 0, 0, "", NULL, "FILE",
     "chief: start from a model saved with --save, or the weights of a Keras 3 FILE.keras or "
     "FILE.weights.h5, instead of seeded values",
     .doc = "Every variable of --model must be in FILE with its shape: Keras weights are matched "
            "by layer name and order. A missing, extra or misshapen weight, or a damaged file, "
            "exits 2 naming the file and the weight; the optimizer's state in a Keras file is not "
            "loaded"},
    {"retry-ms", PS_OPTION_LONG, F(retry_ms), 50, 3600000, "5000", NULL, "MS",
     "a shard silent this long in a request is probed; one that does not answer is "
     "reconnected with backoff, and the request re-sent when it is back"},
    {"curve-secret", PS_OPTION_STR, F(curve_secret), 0, 0, "", NULL, "FILE",
     "CurveZMQ: this worker's key pair (psctl keygen); needs --server-key"},
    {"server-key", PS_OPTION_STR, F(server_key), 0, 0, "", NULL, "FILE",
     "CurveZMQ: the shards' public key (the .pub file of their key pair)"},
    {"no-ps", PS_OPTION_CHOICE, F(no_ps), 0, 0, "no", "no|yes", NULL,
     "yes: train alone with the optimizer in this process (no psd; one worker): the floor "
     "against which the system's overhead is measured",
     .doc = "It computes exactly what one worker through psd computes. Not with --ps, TF_CONFIG, "
            "--workers, --strategy, --compression or --sync-every"},
    {"push-pull", PS_OPTION_CHOICE, F(push_pull), 0, 0, "yes", "yes|no", NULL,
     "yes: one round trip per step (each shard's gradients go out as soon as they are "
     "computed, its reply carries the updated values); no: a push, then a pull",
     .doc = "yes sends one PushPull per shard and step (the gradients out, the updated values "
            "back), each during the backward pass as soon as that shard's gradients are computed; "
            "no makes two round trips, a pull before and a push after each step"},
    {"prefetch", PS_OPTION_CHOICE, F(prefetch), 0, 0, "yes", "no|yes", NULL,
     "yes: the input threads prepare the next batches while this one computes (same "
     "batches, same results); no: each batch is read on this thread between steps",
     .doc = "no is for measuring what the thread gains"},
    {"job-id", PS_OPTION_STR, F(job_id), 0, 0, DEFAULT_JOB_ID, NULL, "ID",
     "the job the variables belong to (1..64 of A-Z a-z 0-9 . _ -): the shards remember it "
     "with the variables and in their checkpoints, and refuse another job's; every worker "
     "of a job, and a job resumed from its checkpoints, gives the same",
     .doc = "A shard or a checkpoint of another job is refused with exit status 2, the error "
            "naming both ids. Give each job its own id when shards or checkpoint directories "
            "could be reused"},
    {"recreate-lost-variables", PS_OPTION_CHOICE, F(recreate_lost), 0, 0, "no", "no|yes", NULL,
     "chief, yes: a shard that lost the job's variables (restarted without a checkpoint) "
     "gets them again with their INITIAL values, logged and listed in the summary; no: "
     "the job fails naming the shard (exit status 4)",
     .doc = "Recreated variables are logged as an error, warned about at the end and listed in "
            "the summary's recreated_lost_variables"},
    {.like = &ps_flag_strategy,
     PS_OPTION_AT(worker_opts, strategy),
     .help = "how the workers combine gradients: through psd shards, or all-reduce between the "
             "workers (mirrored: all on this host, Unix sockets; multi_worker_mirrored: any "
             "hosts)",
     .default_text = "parameter_server with --ps or a TF_CONFIG naming cluster.ps, "
                     "multi_worker_mirrored with a TF_CONFIG of only worker (and chief) entries",
     .doc = "mirrored refuses a worker address that is not on this host. The all-reduce "
            "strategies take every worker's address from TF_CONFIG (see DESCRIPTION) and refuse "
            "--ps"},
    {.like = &ps_flag_communication, PS_OPTION_AT(worker_opts, communication),
     .doc = "nccl is compiled in CUDA builds but has not yet run on a GPU; nccl on a CPU device, "
            "or in a build without NCCL, is a configuration error (exit status 2)"},
    {.like = &ps_flag_worker_timeout,
     PS_OPTION_AT(worker_opts, worker_timeout),
     .help = "all-reduce: a worker silent this long (a ring neighbour) is dead: every worker "
             "stops, naming it (exit status 3)"},
    {"ring-connect-timeout-ms", PS_OPTION_LONG, F(ring_connect_timeout), 100, 86400000, "60000",
     NULL, "MS", "all-reduce: wait this long for every worker to join the ring"},
    {"bucket-kb", PS_OPTION_LONG, F(bucket_kb), 1, 1L << 20, "1024", NULL, "KB",
     "all-reduce: gradients are fused into buckets of at least this many KiB, each summed "
     "as soon as the backward pass completes it",
     .doc = "Communication so overlaps the rest of the backward pass"},
    {"max-mirrored-table-mb", PS_OPTION_LONG, F(max_mirrored_table_mb), 1, 1L << 30, "1024", NULL,
     "MB",
     "all-reduce: an embedding table (Embedding with input_dim) whose values and optimizer "
     "slots take at most this many MiB is mirrored on every worker, its rows exchanged as "
     "rows; a bigger one, or a dynamic table (no input_dim), is refused at start, naming "
     "--strategy parameter_server",
     .doc = "The bound is per table, on every worker: e.g. a table of 1000000 rows of 64 "
            "with Adam (lazy Adam for the rows: values and two moments) takes 732 MiB. Each "
            "step the workers all-gather the rows their batches touched (ids and gradients), "
            "sum them by id in worker order and divide by the workers, as the dense gradients "
            "are"},
    {"check-every", PS_OPTION_LONG, F(check_every), 0, 1L << 40, "100", NULL, "N",
     "all-reduce: compare a checksum of the variables across workers every N steps; a "
     "worker that differs stops the job, named (exit status 3); 0: never",
     .doc = "The checksum is CRC-32C"},
    {"checkpoint-dir", PS_OPTION_STR, F(checkpoint_dir), 0, 0, "", NULL, "DIR",
     "all-reduce: the chief writes checkpoints here (psd's file format), and at start "
     "every worker resumes from the newest one of this --job-id; every strategy: each worker "
     "keeps its own state here for an exact resume (worker-I-step-N.pstf: a loss scale of "
     "its own, top-k residuals, local SGD's optimizer)",
     .doc = "A checkpoint holds the variables, the optimizer's slots, the steps done and the job "
            "id, written to a temporary file and renamed; at start the chief loads the newest one "
            "and every worker resumes from its step. A checkpoint of another job is refused (exit "
            "status 2). With --strategy parameter_server every psd checkpoints its shard (psd "
            "--checkpoint-dir) and this directory holds only the workers' own state. A worker "
            "resuming at step N loads its file of step N; when there is none, or it was written "
            "by another worker count or job, that state starts afresh with a warning. Not with "
            "--no-ps"},
    {.like = &ps_flag_checkpoint_every,
     PS_OPTION_AT(worker_opts, checkpoint_every),
     .def = "0",
     .help = "all-reduce chief: a checkpoint once this many seconds passed since the last "
             "(0: not by time); always one at the end"},
    {"checkpoint-every-steps", PS_OPTION_LONG, F(checkpoint_every_steps), 0, 1L << 40, "0",
     NULL, "N", "all-reduce chief: a checkpoint every N steps (0: not by steps); every worker: "
     "its own state too (always at each epoch's end; with --sync-every, only then)"},
    {"keep-checkpoints", PS_OPTION_LONG, F(keep_checkpoints), 1, 1000, "3", NULL, "K",
     "newest checkpoint files kept in --checkpoint-dir (the chief's, and each worker's own)"},
    {"accumulate-steps", PS_OPTION_LONG, F(accumulate_steps), 1, 65536, "1", NULL, "N",
     "gradient accumulation: each step sums the gradients of N micro-batches of --batch and "
     "exchanges once (their mean: the gradient of one batch of N x --batch, the global batch "
     "workers x batch x N; BatchNormalization still normalises each micro-batch alone); an "
     "epoch still covers the data once, its last step taking what is left, and a step "
     "(--max-steps, psd's clock) is N micro-batches",
     .doc = "The mean is weighted by samples; the progress line counts steps of N micro-batches"},
    {"sync-every", PS_OPTION_LONG, F(sync_every), 1, 1L << 20, "1", NULL, "K",
     "local SGD: each worker takes K steps with the model's optimizer in this process, then "
     "the workers combine: parameter_server pushes the K-step change of the variables (psd "
     "holds them with SGD rate 1: sync averages the workers' variables, async applies each "
     "worker's change as it comes), all-reduce averages the variables; a round also ends "
     "with each epoch. The optimizer's state stays in each worker, saved with its own state "
     "(--checkpoint-dir). 1: combine every step, the strategy's own way. Not with --no-ps",
     .doc = "psd (and the all-reduce checkpoints) count rounds. A restarted worker takes its "
            "optimizer's state from its --checkpoint-dir file of the step it resumes at, else it "
            "starts afresh (said). Every worker of a job needs the same K"},
    {.like = &ps_flag_compression, PS_OPTION_AT(worker_opts, compression),
     .doc = "fp16 is IEEE binary16, bf16 bfloat16; top-k entries travel as (index, value) pairs. "
            "The all-reduce sums fp16/bf16 pieces in float32 at each hop (re-rounded per hop) and "
            "gathers top-k lists round the ring. Not with --no-ps or --communication nccl. The "
            "summary's bytes_sent_per_step gives the gradient bytes this worker sent per step"},
    {"slow-ms", PS_OPTION_LONG, F(slow_ms), 0, 3600000, "0", NULL, "MS",
     "for tests: sleep MS every step, to play a slow worker"},
    {"perturb-at-step", PS_OPTION_LONG, F(perturb_at_step), 0, 1L << 40, "0", NULL, "N",
     "for tests (fault injection): after step N, change this worker's first variable a "
     "little, so the --check-every comparison has a divergence to find"},
    {"dtype-policy", PS_OPTION_CHOICE, F(dtype_policy), 0, 0, "spec",
     "spec|float32|mixed_float16|mixed_bfloat16", NULL,
     "Keras' dtype policy for every layer, over the model spec's \"dtype_policy\" (or a Keras "
     "file's layers'): mixed_*: layers compute in float16 / bfloat16, variables stay float32; "
     "mixed_float16 adds dynamic loss scaling (2^15, halved on an overflow, the step skipped; "
     "doubled after 2000 good steps). spec: as the model says (default float32)",
     .doc = "On the CPU mixed precision is emulated (rounded values, float32 GEMMs) and slower "
            "than float32"},
    {"elastic", PS_OPTION_CHOICE, F(elastic), 0, 0, "no", "no|yes", NULL,
     "a job of workers that come and go (psd --workers-min; psctl local passes it): at each "
     "epoch's start this worker asks psd 0 for the live workers and reads the share of its "
     "rank among them (no: the share of --index of --workers, always)",
     .doc = "An epoch keeps the full job's steps: a share of fewer live workers is spread over "
            "them in larger batches (the global batch stays). A worker that joins mid-epoch "
            "asks at once; workers that saw different live sets around a change may read some "
            "samples of that epoch twice (docs/TRAINING.md, \"Workers that come and go\"). "
            "parameter_server only; not with --accumulate-steps or --sync-every"},
    {"inject-overflow-at-step", PS_OPTION_LONG, F(inject_overflow_at_step), 0, 1L << 40, "0",
     NULL, "N",
     "for tests (mixed_float16): step N's gradient on this worker gets an inf, as an fp16 "
     "overflow would: the step is skipped and the loss scale halved"},
};
#define N_OPTIONS (sizeof table / sizeof table[0])

/* What main returns. */
static const ps_exit_status exits[] = {
    {0, "success (--evaluate: the model was evaluated)"},
    {1, "training failed: a shard did not answer within --timeout, a file could not be read "
        "or written, an --export failed (--evaluate: FILE is missing)"},
    {2, "bad configuration: a flag, TF_CONFIG, the model spec, the data or --device (a "
        "message names it); also: a shard or the all-reduce --checkpoint-dir holds another "
        "job's variables (--job-id), or the same names with other shapes (EEXIST)"},
    {EXIT_PEER, "another worker failed (all-reduce: a worker died, went silent for "
                "--worker-timeout, sent garbage or wrong sizes on the ring, or the replicas' "
                "variables diverged; the error names the worker and its address)"},
    {EXIT_LOST, "a shard lost the job's variables (restarted without a checkpoint to "
                "restore): restarting the worker cannot help (see --recreate-lost-variables)"},
    {143, "--elastic yes: stopped by SIGTERM between two steps, after telling the shards it "
          "left (Goodbye); without --elastic SIGTERM ends the process at once"},
};
#define N_EXITS (sizeof exits / sizeof exits[0])

static void usage(FILE *out) {
    fprintf(out,
            "usage: psworker [options]\n"
            "Training worker: computes gradients on its shard of the data and combines them\n"
            "with the other workers', through psd shards (--strategy parameter_server: pulls\n"
            "parameters, pushes gradients) or by all-reduce between the workers (mirrored,\n"
            "multi_worker_mirrored: every worker holds the variables and runs the optimizer).\n"
            "Worker 0 is the chief: it creates (or broadcasts) the variables, evaluates on\n"
            "the test set after each epoch and writes the summary.\n"
            "The cluster comes from TF_CONFIG (cluster.ps, cluster.worker, optional\n"
            "cluster.chief; task.type worker|chief, task.index) or from the flags, which win.\n"
            "A TF_CONFIG without a task (and no --index) is refused, not taken as the chief.\n\n"
            "options:\n");
    ps_options_usage(table, N_OPTIONS, out);
    fprintf(out, "\n");
    ps_exit_status_usage(exits, N_EXITS, out);
}

/* A worker on the CPU whose OpenBLAS fell back to kernels without AVX2 or AVX-512 on a CPU
 * that has them (an OpenBLAS older than the CPU) trains several times slower than it could:
 * say so once, with the setting that fixes it. */
static void warn_slow_blas(void) {
    ps_k_blas_kernels k = ps_k_cpu_blas_kernels();
    if (!k.better) return;
    PS_WARN("OpenBLAS runs its %s GEMM kernels: it does not recognise this CPU, which has %s; "
            "OPENBLAS_CORETYPE=%s in the environment selects faster ones (docs/TRAINING.md, "
            "\"Devices\")",
            k.core, k.cpu_isa, k.better);
}

/* Splits a comma-separated list in place; returns the count (max cap). */
static size_t split_list(char *s, char **out, size_t cap) {
    size_t n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

#define PS_MAX_PEERS 1024 /* workers in an all-reduce ring */

/* True when host names this machine: a loopback name or address, its
 * hostname, or an address of one of its interfaces. */
static int host_is_local(const char *host) {
    char me[256] = "";
    if (strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
        strcmp(host, "::1") == 0)
        return 1;
    if (gethostname(me, sizeof me - 1) == 0 && strcmp(host, me) == 0) return 1;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return 0;
    int local = 0;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
        if (!i->ifa_addr) continue;
        char addr[INET6_ADDRSTRLEN] = "";
        int fam = i->ifa_addr->sa_family;
        if (fam == AF_INET)
            inet_ntop(fam, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, addr,
                      sizeof addr);
        else if (fam == AF_INET6)
            inet_ntop(fam, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, addr,
                      sizeof addr);
        local = addr[0] && strcmp(addr, host) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

/* The all-reduce strategies: every worker's address, in TensorFlow's global
 * order (chief, then workers), from TF_CONFIG (cl; NULL: none). mirrored: all
 * on this machine. Returns PS_OK or PS_EINVAL with a reason in err. */
static int allreduce_peers(const worker_opts *o, const ps_cluster *cl, const char *ps_flag,
                           int strategy, long workers, const char **peers, size_t *n,
                           char *err, size_t errlen) {
    const char *name = ps_strategy_name(strategy);
    *n = 0;
    if (ps_flag || (cl && cl->n_ps)) {
        snprintf(err, errlen, "--strategy %s trains without psd: give no --ps (or cluster.ps)",
                 name);
        return PS_EINVAL;
    }
    if (!cl || ps_cluster_num_workers(cl) == 0) {
        snprintf(err, errlen,
                 "--strategy %s needs every worker's address: a TF_CONFIG with cluster.worker "
                 "(and cluster.chief), e.g. {\"cluster\": {\"worker\": [\"localhost:20000\", "
                 "\"localhost:20001\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
                 name);
        return PS_EINVAL;
    }
    if (ps_cluster_num_workers(cl) > PS_MAX_PEERS) {
        snprintf(err, errlen, "%u workers: at most %d in a ring", ps_cluster_num_workers(cl),
                 PS_MAX_PEERS);
        return PS_EINVAL;
    }
    for (size_t i = 0; i < cl->n_chief; i++)
        peers[(*n)++] = cl->chief[i];
    for (size_t i = 0; i < cl->n_worker; i++)
        peers[(*n)++] = cl->worker[i];
    if (workers >= 0 && (size_t)workers != *n) {
        snprintf(err, errlen, "--workers %ld, but TF_CONFIG names %zu workers", workers, *n);
        return PS_EINVAL;
    }
    for (size_t i = 0; i < *n; i++) {
        char host[256];
        int port = 0;
        if (ps_parse_hostport(peers[i], host, sizeof host, &port) != PS_OK || port == 0) {
            snprintf(err, errlen, "worker address '%s' is not host:port", peers[i]);
            return PS_EINVAL;
        }
        if (strategy == PS_STRATEGY_MIRRORED && !host_is_local(host)) {
            snprintf(err, errlen,
                     "--strategy mirrored runs every worker on this host, but worker %zu is at "
                     "'%s' (use multi_worker_mirrored across hosts)",
                     i, peers[i]);
            return PS_EINVAL;
        }
    }
    (void)o;
    return PS_OK;
}

/* --communication: nccl needs a CUDA device and NCCL built in; auto picks
 * nccl when both hold and nothing is compressed, else the ring (and the ring
 * too when the workers find at join that two of them share a GPU). */
static int check_communication(const worker_opts *o, ps_train_config *cfg, char *err,
                               size_t errlen) {
    cfg->communication = (int)o->communication;
    if (cfg->communication == PS_COMM_RING) return PS_OK;
    ps_k_dev *dev;
    if (ps_k_dev_open(o->device, &dev, err, errlen) != PS_OK) return PS_EINVAL;
    int cuda = ps_k_dev_kind(dev) == PS_K_CUDA;
    char dname[64];
    snprintf(dname, sizeof dname, "%s", ps_k_dev_name(dev));
    ps_k_dev_close(dev);
    int nccl_built = ps_exchange_nccl_built();
    if (cfg->communication == PS_COMM_AUTO) {
        int nccl = cuda && nccl_built && cfg->compression == PS_COMPRESSION_NONE;
        cfg->communication = nccl ? PS_COMM_NCCL : PS_COMM_RING;
        cfg->communication_auto = nccl;
        return PS_OK;
    }
    if (!cuda) {
        snprintf(err, errlen, "--communication nccl needs a CUDA device, and this worker "
                 "computes on %s (--device %s): use ring", dname, o->device);
        return PS_EINVAL;
    }
    if (!nccl_built) {
        snprintf(err, errlen, "--communication nccl: this psworker was built without NCCL "
                 "(use ring)");
        return PS_EINVAL;
    }
    return PS_OK;
}

/* --elastic: SIGTERM (psctl scale, an operator) asks the training loop to leave after
 * its current step with a Goodbye, so psd drops this worker at once (not as a dead
 * connection). A second SIGTERM, or 10 s without leaving, ends the process as before. */
static volatile sig_atomic_t stop_requested;

static void on_sigterm(int sig) {
    (void)sig;
    stop_requested = 1;
    signal(SIGTERM, SIG_DFL);
    alarm(10);
}

static void leave_on_sigterm(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

int main(int argc, char **argv) {
    ps_ignore_sigpipe(); /* a closed stdout/stderr fails writes (EPIPE), it does not kill */
    worker_opts o = {0};
    unsigned char given[N_OPTIONS] = {0};
    char err[512];
    int prc = ps_options_defaults(table, N_OPTIONS, &o, err, sizeof err);
    if (prc == PS_OK)
        prc =
            ps_options_parse(table, N_OPTIONS, argc, argv, &o, given, "psworker", err, sizeof err);
    if (prc == PS_OPTIONS_HELP || prc == PS_OPTIONS_HELP_MAN) {
        if (prc == PS_OPTIONS_HELP)
            usage(stdout);
        else
            ps_options_help_man(table, N_OPTIONS, exits, N_EXITS, stdout);
        return 0;
    }
    if (prc != PS_OK) {
        fprintf(stderr, "psworker: %s\n", err);
        return 2;
    }
    /* A bad --device or a missing GPU is a configuration error: say so before any
     * network activity. The device is opened again by the training loop. */
    ps_k_dev *dev;
    int drc = ps_k_dev_open(o.device, &dev, err, sizeof err);
    if (drc != PS_OK) {
        fprintf(stderr, "psworker: --device: %s\n", err);
        return drc == PS_EINVAL ? 2 : 1;
    }
    int on_cpu = ps_k_dev_kind(dev) == PS_K_CPU;
    ps_k_dev_close(dev);
#define GIVEN(name) given[ps_options_find(table, N_OPTIONS, name) - table]
    long idx = GIVEN("index") ? o.index : -1;
    long workers = GIVEN("workers") ? o.workers : -1;
    ps_train_config cfg = {
        .model_path = o.model[0] ? o.model : NULL,
        .loss = o.loss[0] ? o.loss : NULL,
        .data_dir = o.data,
        .test_data = o.test_data[0] ? o.test_data : NULL,
        .validation_split = o.validation_split,
        .shuffle_buffer = o.shuffle_buffer,
        .input_threads = o.input_threads,
        .input_memory = (size_t)o.input_memory << 20,
        .device = o.device,
        .dataset = dataset_names[o.dataset],
        .epochs = GIVEN("epochs") ? (unsigned)o.epochs : 0,
        .positive_classes = o.positive_classes[0] ? o.positive_classes : NULL,
        .label_map = o.label_map[0] ? o.label_map : NULL,
        .input_adapt = (int)o.input_adapt,
        .rgb_to_gray = o.rgb_to_gray == 1,
        .batch = (size_t)o.batch,
        .seed = (uint64_t)o.seed,
        .summary_path = o.summary[0] ? o.summary : NULL,
        .tensorboard_dir = o.tensorboard[0] ? o.tensorboard : NULL,
        .tensorboard_every = (unsigned)o.tensorboard_every,
        .history_path = o.history[0] ? o.history : NULL,
        .max_train = (size_t)o.max_train,
        .max_test = (size_t)o.max_test,
        .max_steps = (size_t)o.max_steps,
        .timeout_ms = (int)o.timeout * 1000,
        .save_path = o.save[0] ? o.save : NULL,
        .export_path = o.export_path[0] ? o.export_path : NULL,
        .init_from = o.init_from[0] ? o.init_from : NULL,
        .retry_ms = (int)o.retry_ms,
        .slow_ms = (unsigned)o.slow_ms,
        .no_ps = (int)o.no_ps,
        .separate_pull = o.push_pull == 1,
        .no_prefetch = !o.prefetch,
        .curve_secret = o.curve_secret[0] ? o.curve_secret : NULL,
        .server_key = o.server_key[0] ? o.server_key : NULL,
        .job_id = o.job_id,
        .recreate_lost = o.recreate_lost == 1,
        .worker_timeout_ms = (unsigned)o.worker_timeout,
        .ring_connect_timeout_ms = (unsigned)o.ring_connect_timeout,
        .bucket_bytes = (size_t)o.bucket_kb * 1024,
        .max_mirrored_table_bytes = (size_t)o.max_mirrored_table_mb << 20,
        .check_every = (uint64_t)o.check_every,
        .checkpoint_dir = o.checkpoint_dir[0] ? o.checkpoint_dir : NULL,
        .checkpoint_every_s = (unsigned)o.checkpoint_every,
        .checkpoint_every_steps = (uint64_t)o.checkpoint_every_steps,
        .keep_checkpoints = (unsigned)o.keep_checkpoints,
        .perturb_at_step = (uint64_t)o.perturb_at_step,
        .accumulate_steps = (unsigned)o.accumulate_steps,
        .sync_every = (unsigned)o.sync_every,
        .dtype_policy = o.dtype_policy == 0   ? NULL
                        : o.dtype_policy == 1 ? "float32"
                        : o.dtype_policy == 2 ? "mixed_float16"
                                              : "mixed_bfloat16",
        .inject_overflow_at_step = (uint64_t)o.inject_overflow_at_step,
        .elastic = o.elastic == 1,
    };
    ps_export_format export_format;
    if (cfg.export_path &&
        ps_export_format_of(cfg.export_path, &export_format, err, sizeof err) != PS_OK) {
        fprintf(stderr, "psworker: %s\n", err);
        return 2;
    }
    if (o.predictions[0] && !o.evaluate[0]) {
        fprintf(stderr, "psworker: --predictions goes with --evaluate FILE\n");
        return 2;
    }
    if (o.evaluate[0]) {
        /* no training: refuse what only training uses rather than ignore it */
        static const char *const train_only[] = {"save", "export", "init-from", "ps", "no-ps",
                                                 "strategy", "epochs", "max-train", "max-steps"};
        for (size_t i = 0; i < sizeof train_only / sizeof train_only[0]; i++) {
            if (GIVEN(train_only[i])) {
                fprintf(stderr, "psworker: --evaluate trains nothing: --%s does not apply\n",
                        train_only[i]);
                return 2;
            }
        }
        ps_log_set_tag("evaluate");
        ps_k_set_threads((int)o.blas_threads);
        if (on_cpu) warn_slow_blas();
        ps_train_result res;
        int rc = ps_evaluate_run(&cfg, o.evaluate, o.predictions[0] ? o.predictions : NULL, &res,
                                 err, sizeof err);
        if (rc == PS_OK) return 0;
        fprintf(stderr, "psworker: %s\n", err);
        return rc == PS_EINVAL || rc == PS_EFORMAT ? 2 : 1;
    }
    if (ps_compression_parse(o.compression, &cfg.compression, &cfg.topk_ratio, err,
                             sizeof err) != 0) {
        fprintf(stderr, "psworker: --compression %s\n", err);
        return 2;
    }
    if (cfg.no_ps && cfg.compression != PS_COMPRESSION_NONE) {
        fprintf(stderr, "psworker: --compression %s: --no-ps sends no gradients\n", o.compression);
        return 2;
    }
    if (cfg.positive_classes && cfg.label_map) {
        fprintf(stderr, "psworker: give --positive-classes or --label-map, not both\n");
        return 2;
    }
    if (!ps_job_id_valid(o.job_id)) {
        fprintf(stderr, "psworker: --job-id '%s': want 1..%u of A-Z a-z 0-9 . _ -\n", o.job_id,
                PS_WIRE_MAX_JOB_ID);
        return 2;
    }
    static const ps_progress_mode modes[] = {PS_PROGRESS_PLAIN, PS_PROGRESS_TTY, PS_PROGRESS_PLAIN,
                                             PS_PROGRESS_NONE};
    cfg.progress = o.progress == PROGRESS_AUTO && isatty(1) ? PS_PROGRESS_TTY : modes[o.progress];
    char *ps_flag = GIVEN("ps") ? o.ps : NULL;

    /* TF_CONFIG first, flags win. */
    ps_cluster cl = {0};
    const char *tf = getenv("TF_CONFIG");
    int have_tf = tf && *tf;
    if (have_tf) {
        if (ps_cluster_from_tfconfig(tf, &cl, err, sizeof err) != PS_OK) {
            fprintf(stderr, "psworker: TF_CONFIG: %s\n", err);
            return 2;
        }
        unsigned gi;
        if (idx < 0 && !cl.task_type[0]) {
            /* Guessing "chief" would make every such worker the chief. */
            fprintf(stderr,
                    "psworker: TF_CONFIG has no task: say which worker this is with "
                    "\"task\": {\"type\": \"worker\"|\"chief\", \"index\": N} (or --index)\n");
            ps_cluster_free(&cl);
            return 2;
        }
        if (idx < 0) {
            if (ps_cluster_worker_index(&cl, &gi) != PS_OK) {
                fprintf(stderr, "psworker: TF_CONFIG: task type '%s' is not a worker or chief\n",
                        cl.task_type);
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
        for (size_t i = 0; i < cl.n_ps && i < 256; i++)
            ps_list[n_ps++] = cl.ps[i];
    }
    /* The strategy: as given, else TensorFlow's default for the cluster. */
    int strategy = (int)o.strategy;
    if (!GIVEN("strategy") && !ps_flag && have_tf && cl.n_ps == 0 &&
        ps_cluster_num_workers(&cl) > 0)
        strategy = PS_STRATEGY_MULTI_WORKER_MIRRORED;
    int allreduce = strategy != PS_STRATEGY_PARAMETER_SERVER;
    const char *peers[PS_MAX_PEERS];
    size_t n_peers = 0;
    if (cfg.no_ps) {
        if (o.sync_every > 1) {
            fprintf(stderr, "psworker: --sync-every %ld combines workers' variables: --no-ps "
                            "trains alone, so there is nothing to combine\n",
                    o.sync_every);
            ps_cluster_free(&cl);
            return 2;
        }
        if (n_ps || (workers > 1) || GIVEN("strategy")) {
            fprintf(stderr, "psworker: --no-ps trains alone: give no --ps, TF_CONFIG, --workers "
                            "or --strategy\n");
            ps_cluster_free(&cl);
            return 2;
        }
        allreduce = 0;
    } else if (allreduce) {
        int prc2 = allreduce_peers(&o, have_tf ? &cl : NULL, ps_flag, strategy, workers, peers,
                                   &n_peers, err, sizeof err);
        if (prc2 != PS_OK) {
            fprintf(stderr, "psworker: %s\n", err);
            ps_cluster_free(&cl);
            return 2;
        }
        n_ps = 0;
        workers = (long)n_peers;
    } else if (n_ps == 0) {
        fprintf(stderr, "psworker: no parameter servers: give --ps HOST:PORT|ipc://PATH,... or a "
                        "TF_CONFIG with cluster.ps, or train with all-reduce (--strategy "
                        "mirrored|multi_worker_mirrored and a TF_CONFIG naming the workers)\n");
        ps_cluster_free(&cl);
        return 2;
    }
    for (size_t i = 0; i < n_ps; i++) {
        if (ps_check_shard_entry(ps_list[i], err, sizeof err) != PS_OK) {
            fprintf(stderr, "psworker: parameter server %zu: %s\n", i, err);
            ps_cluster_free(&cl);
            return 2;
        }
    }
    cfg.index = idx < 0 ? 0 : (unsigned)idx;
    cfg.workers = workers < 0 ? 1 : (unsigned)workers;
    if (cfg.index >= cfg.workers) {
        fprintf(stderr, "psworker: --index %u is out of range for --workers %u\n", cfg.index,
                cfg.workers);
        ps_cluster_free(&cl);
        return 2;
    }
    if (cfg.no_ps && cfg.checkpoint_dir) {
        fprintf(stderr, "psworker: --checkpoint-dir: --no-ps keeps no checkpoints (a job "
                        "through psd or all-reduce does)\n");
        ps_cluster_free(&cl);
        return 2;
    }
    cfg.ps = (const char *const *)ps_list;
    cfg.n_ps = n_ps;
    cfg.strategy = allreduce ? strategy : PS_STRATEGY_PARAMETER_SERVER;
    cfg.peers = peers;
    cfg.n_peers = n_peers;
    if (allreduce && check_communication(&o, &cfg, err, sizeof err) != PS_OK) {
        fprintf(stderr, "psworker: %s\n", err);
        ps_cluster_free(&cl);
        return 2;
    }
    const char *no_elastic = !cfg.elastic              ? NULL
                             : allreduce || cfg.no_ps  ? "the parameter_server strategy only"
                             : o.accumulate_steps > 1 ? "not with --accumulate-steps"
                             : o.sync_every > 1       ? "not with --sync-every"
                                                      : NULL;
    if (no_elastic) {
        fprintf(stderr, "psworker: --elastic yes: %s\n", no_elastic);
        ps_cluster_free(&cl);
        return 2;
    }

    char tag[32];
    snprintf(tag, sizeof tag, cfg.index == 0 ? "chief" : "worker[%u]", cfg.index);
    ps_log_set_tag(tag);
    ps_lib_set_log(lib_log, NULL, PS_LIB_LOG_DEBUG);
    ps_die_with_parent();
    ps_k_set_threads((int)o.blas_threads);
    if (on_cpu) warn_slow_blas();

    if (cfg.elastic) {
        cfg.stop = &stop_requested;
        leave_on_sigterm();
    }
    ps_train_result res;
    int rc = ps_train_run(&cfg, &res, err, sizeof err);
    ps_cluster_free(&cl);
    if (rc == PS_ESHUTDOWN && stop_requested) {
        PS_INFO("%s", err);
        return 128 + SIGTERM;
    }
    if (rc != PS_OK) {
        PS_ERROR("%s", err);
        if (rc == PS_ELOST) return EXIT_LOST;
        if (res.peer_failed) return EXIT_PEER;
        return rc == PS_EINVAL || rc == PS_EFORMAT || rc == PS_EEXIST ? 2 : 1;
    }
    return 0;
}
