#!/usr/bin/env python3
"""TensorFlow/Keras training throughput and test accuracy on Fashion-MNIST.

The baseline the project's CNN training is compared with (docs/PERFORMANCE.md,
"Against TensorFlow"). Run it with a Python that has tensorflow-cpu (and
tf_keras for --config ps or --keras 2), such as the venv bench/tf_compare.sh
makes; never with the system Python.

Models:
  fashion_cnn  the layers, loss, optimizer and batch size of a model spec
               (default examples/fashion_cnn.json), built layer by layer
  mobilenetv2  MobileNetV2 alpha 0.35, 32x32x3, 10 classes, read from
               examples/mobilenetv2.json (Keras 3) or
               tests/fixtures/keras/mobilenetv2_k2.json (Keras 2); images
               zero-padded 28 -> 32 (2 pixels each side) and the gray channel
               repeated 3 times; Adam 1e-3, batch 64 unless told otherwise
Configurations:
  single  one process, TensorFlow's default threads, model.fit
  ps      ParameterServerStrategy on 127.0.0.1: this process is the chief
          (model.fit drives a ClusterCoordinator), it starts --workers worker
          and --ps ps processes (tf.distribute.Server) on free ports, each with
          its TF_CONFIG, and stops them at the end. Needs Keras 2 (tf_keras):
          Keras 3 has no ParameterServerStrategy support.

Training runs in chunks of --chunk steps (one model.fit "epoch" each) until
--epochs passes over the 60,000 training images are done. samples/s counts the
chunks after the first --warmup-chunks: samples trained / seconds training
(evaluation excluded). Test accuracy is on the 10,000 test images after the
last chunk (model.evaluate: BatchNormalization with its moving statistics);
test_accuracy_batch_stats is the same with each test batch of 256 normalized
by its own statistics (training=True), last_chunk_train_accuracy the
training accuracy Keras reports for the last chunk. One JSON line is printed
on stdout.
"""
import argparse
import gzip
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = "/usr/share/datasets/fashion-mnist"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["fashion_cnn", "mobilenetv2"], default="fashion_cnn")
    ap.add_argument("--config", choices=["single", "ps"], default="single")
    ap.add_argument("--keras", choices=["3", "2"], default=None,
                    help="Keras 3 (keras) or Keras 2 (tf_keras); default 3 for single, "
                         "2 for ps")
    ap.add_argument("--spec", default=os.path.join(REPO, "examples", "fashion_cnn.json"),
                    help="model spec for fashion_cnn (default: examples/fashion_cnn.json)")
    ap.add_argument("--keras-json", default=None,
                    help="mobilenetv2: the Keras model JSON to read instead of the default "
                         "(e.g. a copy with another BatchNormalization momentum)")
    ap.add_argument("--data", default=DATA, help="Fashion-MNIST directory (*.gz)")
    ap.add_argument("--epochs", type=float, default=1.0,
                    help="passes over the training set (default 1)")
    ap.add_argument("--batch", type=int, default=None,
                    help="batch size per step (default: the spec's, 64 for mobilenetv2)")
    ap.add_argument("--lr", type=float, default=None,
                    help="Adam learning rate (default: the spec's, 1e-3 for mobilenetv2)")
    ap.add_argument("--chunk", type=int, default=100, help="steps per timed chunk (100)")
    ap.add_argument("--warmup-chunks", type=int, default=1,
                    help="chunks left out of samples/s (default 1)")
    ap.add_argument("--workers", type=int, default=2, help="ps: worker processes (2)")
    ap.add_argument("--ps", type=int, default=1, help="ps: parameter server processes (1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve", action="store_true",
                    help="internal: run a tf.distribute.Server for the task in TF_CONFIG")
    args = ap.parse_args(argv)
    if args.keras is None:
        args.keras = "2" if args.config == "ps" else "3"
    if args.config == "ps" and args.keras != "2":
        ap.error("--config ps needs --keras 2 (Keras 3 does not support "
                 "ParameterServerStrategy)")
    if args.epochs <= 0 or args.chunk <= 0 or args.warmup_chunks < 0:
        ap.error("--epochs and --chunk must be positive, --warmup-chunks >= 0")
    if args.workers < 1 or args.ps < 1:
        ap.error("--workers and --ps must be at least 1")
    return args


def load_keras(which):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    if which == "2":
        import tf_keras as K
    else:
        import keras as K
    return tf, K


# ---------------------------------------------------------------- the cluster

def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def serve():
    """A worker or ps task: serve until the chief (our parent) is gone."""
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                         task_index=resolver.task_id, protocol="grpc", start=True)
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


class Cluster:
    """Worker and ps processes on 127.0.0.1, stopped by stop() (and on exit)."""

    def __init__(self, workers, ps, logdir):
        ports = free_ports(1 + workers + ps)
        addr = [f"127.0.0.1:{p}" for p in ports]
        self.spec = {"chief": addr[:1], "worker": addr[1:1 + workers],
                     "ps": addr[1 + workers:]}
        self.procs = []
        for kind in ("ps", "worker"):
            for i in range(len(self.spec[kind])):
                env = dict(os.environ)
                env["TF_CONFIG"] = json.dumps({"cluster": self.spec,
                                               "task": {"type": kind, "index": i}})
                log = open(os.path.join(logdir, f"{kind}{i}.log"), "w")
                p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"],
                                     env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
                log.close()
                self.procs.append(p)
        os.environ["TF_CONFIG"] = json.dumps({"cluster": self.spec,
                                              "task": {"type": "chief", "index": 0}})

    def check(self):
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"a cluster process exited early (status {p.returncode})")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        self.procs = []


# ------------------------------------------------------------------- the data

def idx_count(path):
    with gzip.open(path, "rb") as f:
        head = f.read(8)
    return int.from_bytes(head[4:8], "big")


def make_dataset_fn(tf, data, split, batch, model, train, seed):
    """A function (input_context) -> tf.data.Dataset that reads the idx files
    in the graph, so each process that runs it reads the files itself."""
    prefix = "train" if split == "train" else "t10k"
    img_path = os.path.join(data, f"{prefix}-images-idx3-ubyte.gz")
    lab_path = os.path.join(data, f"{prefix}-labels-idx1-ubyte.gz")
    n = idx_count(lab_path)
    if idx_count(img_path) != n:
        raise RuntimeError(f"{img_path} and {lab_path} disagree on the count")

    def preprocess(x, y):
        x = tf.cast(x, tf.float32) / 255.0
        x = tf.expand_dims(x, -1)
        if model == "mobilenetv2":
            x = tf.pad(x, [[0, 0], [2, 2], [2, 2], [0, 0]])
            x = tf.tile(x, [1, 1, 1, 3])
        return x, y

    def dataset_fn(input_context=None):
        raw = tf.io.decode_compressed(tf.io.read_file(img_path), "GZIP")
        images = tf.reshape(tf.io.decode_raw(tf.strings.substr(raw, 16, n * 784), tf.uint8),
                            [n, 28, 28])
        raw = tf.io.decode_compressed(tf.io.read_file(lab_path), "GZIP")
        labels = tf.cast(tf.io.decode_raw(tf.strings.substr(raw, 8, n), tf.uint8), tf.int64)
        ds = tf.data.Dataset.from_tensor_slices((images, labels))
        if train:
            s = seed if input_context is None else seed + input_context.input_pipeline_id
            ds = ds.shuffle(n, seed=s).repeat()
        ds = ds.batch(batch, drop_remainder=train)
        return ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)

    return dataset_fn, n


# ------------------------------------------------------------------ the model

def build_from_spec(K, spec):
    """The layers of a project model spec, in Keras."""
    L = K.layers
    layers = [K.Input(shape=tuple(spec["input_shape"]))]
    for entry in spec["layers"]:
        kind = entry["type"]
        act = entry.get("activation")
        if kind == "Conv2D":
            layers.append(L.Conv2D(entry["filters"], entry["kernel_size"],
                                   strides=entry.get("strides", 1),
                                   padding=entry.get("padding", "valid"), activation=act))
        elif kind == "MaxPooling2D":
            layers.append(L.MaxPooling2D(entry.get("pool_size", 2), strides=entry.get("strides")))
        elif kind == "Flatten":
            layers.append(L.Flatten())
        elif kind == "Dense":
            layers.append(L.Dense(entry["units"], activation=act))
        elif kind == "Activation":
            layers.append(L.Activation(act))
        else:
            raise SystemExit(f"tf_keras_cnn: layer type {kind!r} of the spec is not mirrored here")
    return K.Sequential(layers, name=spec.get("name", "spec"))


def training_setup(args):
    """(builder, optimizer name, lr, batch, from_logits, what)"""
    if args.model == "fashion_cnn":
        with open(args.spec) as f:
            spec = json.load(f)
        opt = spec.get("optimizer", {})
        if opt.get("name", "adam") != "adam":
            raise SystemExit(f"tf_keras_cnn: optimizer {opt.get('name')!r} is not mirrored here")
        lr = args.lr or opt.get("learning_rate", 1e-3)
        batch = args.batch or spec.get("batch_size", 64)
        return (lambda K: build_from_spec(K, spec)), lr, batch, bool(spec.get("from_logits")), \
            os.path.relpath(args.spec, REPO)
    path = args.keras_json or (
        os.path.join(REPO, "examples", "mobilenetv2.json") if args.keras == "3" else
        os.path.join(REPO, "tests", "fixtures", "keras", "mobilenetv2_k2.json"))
    with open(path) as f:
        text = f.read()
    return (lambda K: K.models.model_from_json(text)), args.lr or 1e-3, args.batch or 64, \
        False, os.path.relpath(path, REPO)


def accuracy_with_batch_stats(tf, model, dataset):
    """Test accuracy with model(x, training=True): BatchNormalization
    normalizes each test batch (256 images) with its own statistics instead of
    the moving ones. Run after evaluate(): it moves the moving statistics."""
    correct = total = 0
    for x, y in dataset:
        pred = tf.argmax(model(x, training=True), axis=-1)
        correct += int(tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.int32)))
        total += int(y.shape[0])
    return correct / total


def run(args):
    tf, K = load_keras(args.keras)
    K.utils.set_random_seed(args.seed)
    build, lr, batch, from_logits, source = training_setup(args)
    train_fn, n_train = make_dataset_fn(tf, args.data, "train", batch, args.model, True,
                                        args.seed)
    test_fn, _ = make_dataset_fn(tf, args.data, "test", 256, args.model, False, args.seed)
    total_steps = math.ceil(args.epochs * n_train / batch)
    chunks = max(args.warmup_chunks + 1, math.ceil(total_steps / args.chunk))

    def compile_model(model):
        model.compile(optimizer=K.optimizers.Adam(learning_rate=lr),
                      loss=K.losses.SparseCategoricalCrossentropy(from_logits=from_logits),
                      metrics=["accuracy"])
        return model

    cluster = None
    times, begins, last_logs = [], [], {}

    class Timer(K.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()
            begins.append(self.t0)

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.t0)
            last_logs.clear()
            last_logs.update(logs or {})

    try:
        if args.config == "ps":
            logdir = os.environ.get("TF_BENCH_LOGDIR", "/tmp")
            cluster = Cluster(args.workers, args.ps, logdir)
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
            with strategy.scope():
                model = compile_model(build(K))
            data = K.utils.experimental.DatasetCreator(train_fn)
        else:
            model = compile_model(build(K))
            data = train_fn()
        t_start = time.perf_counter()
        model.fit(data, epochs=chunks, steps_per_epoch=args.chunk, callbacks=[Timer()],
                  verbose=0)
        wall = time.perf_counter() - t_start
        if cluster:
            cluster.check()
            local = compile_model(build(K))
            local.set_weights(model.get_weights())
            model = local
        test_loss, test_acc = model.evaluate(test_fn(), verbose=0)
        batch_stats_acc = accuracy_with_batch_stats(tf, model, test_fn())
    finally:
        if cluster:
            cluster.stop()

    measured = times[args.warmup_chunks:]
    steps = len(measured) * args.chunk
    result = {
        "config": args.config if args.config == "single" else
        f"ps ({args.workers} workers, {args.ps} ps, 1 chief)",
        "model": args.model, "source": source, "seed": args.seed,
        "tensorflow": tf.__version__, "keras": K.__version__,
        "batch": batch, "optimizer": f"adam lr {lr}",
        "loss": "sparse_categorical_crossentropy" + (" from_logits" if from_logits else ""),
        "steps": chunks * args.chunk, "epochs_of_data": round(chunks * args.chunk * batch / n_train, 3),
        "warmup_steps": args.warmup_chunks * args.chunk,
        "samples_per_sec": round(steps * batch / sum(measured), 1),
        "train_seconds": round(sum(times), 2), "fit_seconds": round(wall, 2),
        "fit_startup_seconds": round(begins[0] - t_start, 2),
        "test_accuracy": round(float(test_acc), 4), "test_loss": round(float(test_loss), 4),
        "test_accuracy_batch_stats": round(batch_stats_acc, 4),
        "last_chunk_train_accuracy": round(float(last_logs.get("accuracy", float("nan"))), 4),
        "params": int(model.count_params()),
        "threads": "TensorFlow default (intra/inter-op 0)", "cpus": os.cpu_count(),
    }
    print(json.dumps(result), flush=True)
    if args.config == "ps":
        # The cluster is stopped: skip TensorFlow's teardown, which would try
        # to reach the stopped servers and log a page of connection errors.
        sys.stderr.flush()
        os._exit(0)


def main(argv):
    args = parse_args(argv)
    if args.serve:
        serve()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        if not os.path.exists(os.path.join(args.data, name)):
            raise SystemExit(f"tf_keras_cnn: {os.path.join(args.data, name)} is missing")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run(args)


if __name__ == "__main__":
    main(sys.argv[1:])
