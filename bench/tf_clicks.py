#!/usr/bin/env python3
"""TensorFlow ParameterServerStrategy on the click model: the TensorFlow peer of
the project's click benchmark.

The model, the data and the optimizer are the project's click model's:
  input    the 26 categorical fields' row indices into ONE embedding table of
           V + 1 rows x 16 (every (field, id) pair of the training file, row 0
           for unseen test ids; see bench/clicks_data.py), Keras Embedding
           (init uniform(-0.05, 0.05)), flattened to 416 and concatenated with
           log1p of the 13 counts -> 429
  layers   Dense 64 relu, Dense 32 relu, Dense 1 sigmoid (glorot_uniform
           kernels, zero biases), binary cross-entropy
  optim    Keras 2's Adagrad (tf_keras.optimizers.legacy.Adagrad: lr 0.05,
           initial accumulator 0.1, epsilon 1e-7 added outside the square
           root, var -= lr * g / (sqrt(acc) + eps)) on all variables; the
           embedding's gradient is an IndexedSlices and its update
           ResourceSparseApplyAdagradV2 (only the batch's rows)
  data     --batch rows per step (default 256) from each worker's own shard of
           the training rows (rows w, w + W, ...), shuffled each epoch with the
           seed (clicks_data.epoch_order), read from files the chief writes

Configurations:
  ps      ParameterServerStrategy on 127.0.0.1: this process is the chief
          (model.fit drives a ClusterCoordinator); it starts --workers worker
          and --ps ps processes (tf.distribute.Server, bench/tf_keras_cnn.py's
          Cluster) on free ports, each with its TF_CONFIG, and stops them at
          the end. The embedding is partitioned over the ps tasks with
          FixedShardsPartitioner(--ps) (--partition all: every variable, as a
          plain FixedShardsPartitioner does, biases of one row excepted); the
          dense variables are placed whole by the strategy (round robin over
          the ps). Needs Keras 2 (tf_keras).
  single  one process, no strategy, model.fit over the whole training set
          (one worker's view: --workers is taken as 1)

Timing: a first model.fit of --warmup steps (tracing, the workers' first
steps) is left out; then one model.fit runs --epochs x (the steps of one
epoch, all workers together) steps; samples/s = its steps x --batch / its
wall time (the epoch callbacks'). The warm-up steps are extra updates and the
timed fit's input pipelines start over from the beginning of each worker's
shuffled shard. The test AUC is the exact ROC AUC of the trained model's
predictions on --test (computed in the chief on a local copy of the weights).

One JSON line on stdout, progress on stderr. Run with a Python that has
tensorflow-cpu and tf_keras, such as the venv bench/tf_clicks.sh makes; never
with the system Python.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clicks_data  # noqa: E402

EMBED_DIM = 16


def log(msg):
    print(f"tf_clicks: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    clicks_data.add_common_args(ap, "ps: worker processes (2)")
    ap.add_argument("--config", choices=["ps", "single"], default="ps")
    ap.add_argument("--ps", type=int, default=2, help="ps: parameter server processes (2)")
    ap.add_argument("--partition", choices=["embedding", "all"], default="embedding",
                    help="ps: FixedShardsPartitioner(--ps) on the embedding only (default) "
                         "or on every variable")
    ap.add_argument("--warmup", type=int, default=20,
                    help="steps of the untimed first model.fit (20)")
    ap.add_argument("--steps-per-execution", type=int, default=1,
                    help="steps per scheduled closure / tf.function call (Keras' "
                         "steps_per_execution, default 1)")
    args = ap.parse_args(argv)
    if min(args.epochs, args.batch, args.workers, args.ps, args.steps_per_execution) < 1 \
            or args.warmup < 0:
        ap.error("--epochs, --batch, --workers, --ps and --steps-per-execution must be "
                 "positive, --warmup >= 0")
    if args.config == "single":
        args.workers = 1
    return args


def write_inputs(p, workers, epochs, batch, seed, d):
    """The files each worker's input pipeline reads: the training arrays and
    every worker's row order over all epochs (int32 [workers, epochs * steps * batch])."""
    n = p.train_label.size
    steps = clicks_data.steps_per_epoch(n, workers, batch)
    orders = np.stack([np.concatenate([clicks_data.epoch_order(n, workers, w, e, seed)
                                       [:steps * batch] for e in range(epochs)])
                       for w in range(workers)]).astype(np.int32)
    np.ascontiguousarray(p.train_cat, dtype=np.int32).tofile(os.path.join(d, "cat.bin"))
    np.ascontiguousarray(p.train_dense, dtype=np.float32).tofile(os.path.join(d, "dense.bin"))
    np.ascontiguousarray(p.train_label, dtype=np.float32).tofile(os.path.join(d, "label.bin"))
    orders.tofile(os.path.join(d, "order.bin"))
    return steps, orders.shape[1]


def make_dataset_fn(tf, d, n, workers, per_worker, batch, distributed):
    cat_path, dense_path = os.path.join(d, "cat.bin"), os.path.join(d, "dense.bin")
    label_path, order_path = os.path.join(d, "label.bin"), os.path.join(d, "order.bin")

    def dataset_fn(input_context=None):
        # Runs on each worker (in the graph ClusterCoordinator sends it), which
        # reads the files itself; the worker index picks its row order.
        if distributed:
            w = tf.distribute.coordinator.experimental_get_current_worker_index()
        else:
            w = 0
        cat = tf.reshape(tf.io.decode_raw(tf.io.read_file(cat_path), tf.int32),
                         [n, clicks_data.CATEGORICAL])
        dense = tf.reshape(tf.io.decode_raw(tf.io.read_file(dense_path), tf.float32),
                           [n, clicks_data.NUMERIC])
        label = tf.reshape(tf.io.decode_raw(tf.io.read_file(label_path), tf.float32), [n])
        order = tf.reshape(tf.io.decode_raw(tf.io.read_file(order_path), tf.int32),
                           [workers, per_worker])
        mine = tf.gather(order, w)
        ds = tf.data.Dataset.from_tensor_slices(mine).batch(batch, drop_remainder=True)
        ds = ds.map(lambda idx: ({"cat": tf.gather(cat, idx), "dense": tf.gather(dense, idx)},
                                 tf.gather(label, idx)))
        return ds.repeat().prefetch(4)

    return dataset_fn


def build_model(K, vocab_rows):
    L = K.layers
    cat = K.Input(shape=(clicks_data.CATEGORICAL,), dtype="int32", name="cat")
    dense = K.Input(shape=(clicks_data.NUMERIC,), dtype="float32", name="dense")
    e = L.Embedding(vocab_rows + 1, EMBED_DIM,
                    embeddings_initializer=K.initializers.RandomUniform(-0.05, 0.05),
                    name="embedding")(cat)
    x = L.Concatenate()([L.Flatten()(e), dense])
    x = L.Dense(64, activation="relu", name="dense64")(x)
    x = L.Dense(32, activation="relu", name="dense32")(x)
    out = L.Dense(1, activation="sigmoid", name="out")(x)
    return K.Model({"cat": cat, "dense": dense}, out, name="clicks")


def recording_adagrad(tf, K, lr, record):
    """Keras 2's Adagrad that notes, when the train step is traced, the type of
    every gradient it gets and the apply ops it adds (with their devices)."""

    class Adagrad(K.optimizers.legacy.Adagrad):
        def apply_gradients(self, grads_and_vars, *a, **kw):
            grads_and_vars = list(grads_and_vars)
            g = tf.compat.v1.get_default_graph()
            before = len(g.get_operations()) if hasattr(g, "get_operations") else 0
            out = super().apply_gradients(grads_and_vars, *a, **kw)
            if not record.get("grads"):
                record["grads"] = [
                    {"var": v.name, "shape": list(v.shape),
                     "grad": type(gr).__name__,
                     "grad_values_shape": (gr.values.shape.as_list()
                                           if isinstance(gr, tf.IndexedSlices) else
                                           gr.shape.as_list())}
                    for gr, v in grads_and_vars]
                ops = {}
                if hasattr(g, "get_operations"):
                    for op in g.get_operations()[before:]:
                        if "Apply" in op.type:
                            key = f"{op.type} on {op.device or '(unplaced)'}"
                            ops[key] = ops.get(key, 0) + 1
                record["apply_ops"] = ops
            return out

    return Adagrad(learning_rate=lr, initial_accumulator_value=0.1, epsilon=1e-7)


def copy_weights(src, dst):
    """Copies the (possibly partitioned) weights of src into the unpartitioned
    model dst of the same layers: a partitioned variable's shards, which
    src's layers list one by one, are put back together along axis 0."""
    for ls, ld in zip(src.layers, dst.layers):
        parts = [w.numpy() for w in ls.weights]
        out = []
        for target in ld.weights:
            rows = target.shape[0] if len(target.shape) else None
            got = [parts.pop(0)]
            while rows is not None and sum(x.shape[0] for x in got) < rows:
                got.append(parts.pop(0))
            out.append(np.concatenate(got, axis=0) if len(got) > 1 else got[0])
        if parts:
            raise RuntimeError(f"tf_clicks: layer {ls.name}: weights left over")
        ld.set_weights(out)


def run(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t_prep = time.perf_counter()
    p = clicks_data.prepare(args.train, args.test, log=log)
    import tensorflow as tf
    import tf_keras as K
    from tf_keras_cnn import Cluster

    K.utils.set_random_seed(args.seed)
    n = int(p.train_label.size)
    W = args.workers
    work = tempfile.mkdtemp(prefix="tf-clicks.")
    cluster = None
    record = {}
    times = []

    class Timer(K.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append((time.perf_counter() - self.t0, dict(logs or {})))
            log(f"epoch {epoch + 1}: {times[-1][0]:.1f} s, loss {times[-1][1].get('loss', 0):.4f}")

    try:
        steps, per_worker = write_inputs(p, W, args.epochs, args.batch, args.seed, work)
        if steps < 1:
            raise SystemExit("tf_clicks: fewer training rows than one batch per worker")
        steps_all = steps * W            # one epoch's steps, all workers together
        dataset_fn = make_dataset_fn(tf, work, n, W, per_worker, args.batch,
                                     args.config == "ps")
        vocab = int(p.vocab_rows)

        def compile_model(model):
            model.compile(optimizer=recording_adagrad(tf, K, args.lr, record),
                          loss=K.losses.BinaryCrossentropy(),
                          steps_per_execution=args.steps_per_execution)
            return model

        if args.config == "ps":
            logdir = os.environ.get("TF_BENCH_LOGDIR", work)
            cluster = Cluster(W, args.ps, logdir)
            log(f"cluster: {json.dumps(cluster.spec)} (logs in {logdir})")
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            fixed = tf.distribute.experimental.partitioners.FixedShardsPartitioner(args.ps)
            if args.partition == "all":
                partitioner = fixed
            else:
                def partitioner(shape, dtype):
                    if shape[0] == vocab + 1:      # the embedding table
                        return fixed(shape, dtype)
                    return [1] * len(shape)
            strategy = tf.distribute.experimental.ParameterServerStrategy(
                resolver, variable_partitioner=partitioner)
            with strategy.scope():
                model = compile_model(build_model(K, vocab))
            emb = model.get_layer("embedding").embeddings
            placement = {v.name: v.device for v in model.weights}
            if hasattr(emb, "variables"):
                placement["embedding shards"] = [
                    f"{v.shape[0]} rows on {v.device}" for v in emb.variables]
            data = K.utils.experimental.DatasetCreator(dataset_fn)
        else:
            model = compile_model(build_model(K, vocab))
            placement = None
            data = dataset_fn()
        prep_seconds = time.perf_counter() - t_prep
        t_fit = time.perf_counter()
        if args.warmup:
            log(f"warm-up: {args.warmup} steps")
            model.fit(data, epochs=1, steps_per_epoch=args.warmup, verbose=0)
        warm_seconds = time.perf_counter() - t_fit
        log(f"timed fit: {args.epochs} x {steps_all} steps of {args.batch} rows "
            f"({W} worker{'s' if W > 1 else ''})")
        lo_before = clicks_data.loopback_bytes()
        pids = [os.getpid()] + ([pr.pid for pr in cluster.procs] if cluster else [])
        cpu_before = clicks_data.cpu_seconds(pids)
        t1 = time.perf_counter()
        model.fit(data, epochs=args.epochs, steps_per_epoch=steps_all, callbacks=[Timer()],
                  verbose=0)
        fit_seconds = time.perf_counter() - t1
        lo_after = clicks_data.loopback_bytes()
        cpu_fit = clicks_data.cpu_seconds(pids) - cpu_before
        if cluster:
            cluster.check()
            local = build_model(K, vocab)
            copy_weights(model, local)
        else:
            local = model
        pred = local.predict({"cat": p.test_cat, "dense": p.test_dense}, batch_size=8192,
                             verbose=0).reshape(-1)
    except BaseException:
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
        raise

    test_auc = clicks_data.auc(p.test_label, pred)
    pc = np.clip(pred.astype(np.float64), 1e-7, 1 - 1e-7)
    y = p.test_label
    test_loss = float(-np.mean(y * np.log(pc) + (1 - y) * np.log(1 - pc)))
    timed = sum(t for t, _ in times)
    result = {
        "peer": "tensorflow",
        "config": (f"ps (ParameterServerStrategy: {W} workers, {args.ps} ps, 1 chief; "
                   f"model.fit + ClusterCoordinator)" if args.config == "ps" else
                   "single (one process, model.fit)"),
        "workers": W, "ps": args.ps if args.config == "ps" else 0,
        "batch_per_worker": args.batch,
        "train_rows": n, "test_rows": int(p.test_label.size), "vocab_rows": vocab,
        "test_ids_unseen": round(p.test_unseen, 4),
        "epochs": args.epochs, "seed": args.seed,
        "steps": args.epochs * steps_all, "warmup_steps": args.warmup,
        "warmup": "a separate untimed model.fit before the timed one (extra updates)",
        "steps_per_execution": args.steps_per_execution,
        "samples_per_sec": round(args.epochs * steps_all * args.batch / timed, 1),
        "train_seconds": round(timed, 2), "fit_seconds": round(fit_seconds, 2),
        "warmup_seconds": round(warm_seconds, 2),
        "timed_cpu_seconds": round(cpu_fit, 2),
        "samples_per_cpu_second": round(args.epochs * steps_all * args.batch / cpu_fit, 1)
        if cpu_fit > 0 else None,
        "cpu_seconds_are": "user + system CPU time of the chief, worker and ps processes over "
                           "the timed model.fit",
        "test_auc": round(test_auc, 5), "test_loss": round(test_loss, 5),
        "final_train_loss": round(float(times[-1][1].get("loss", float("nan"))), 5),
        "final_train_loss_is": "Keras' loss of the last epoch (mean batch loss, all workers)",
        "optimizer": f"tf_keras.optimizers.legacy.Adagrad lr {args.lr} initial_accumulator 0.1 "
                     "epsilon 1e-7 (outside the sqrt)",
        "partition": (f"embedding: FixedShardsPartitioner({args.ps}); dense variables whole"
                      if args.partition == "embedding" else
                      f"FixedShardsPartitioner({args.ps}) on every variable")
        if args.config == "ps" else None,
        "placement": placement,
        "sparse_check": {"grads": record.get("grads"),
                         "apply_ops": record.get("apply_ops"),
                         "traffic": clicks_data.traffic(lo_before, lo_after,
                                                        args.epochs * steps_all, vocab)
                         if args.config == "ps" else None},
        "load_seconds": round(p.load_seconds, 2), "prepare_seconds": round(prep_seconds, 2),
        "tensorflow": tf.__version__, "tf_keras": K.__version__, "numpy": np.__version__,
        "python": sys.version.split()[0], "threads": "TensorFlow default",
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result), flush=True)
    if cluster:
        # Once the servers are gone, TensorFlow's runtime in this process logs
        # a page of connection errors (and would at its teardown, which is
        # skipped): stderr goes to /dev/null from here on.
        log("stopping the cluster")
        sys.stderr.flush()
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        cluster.stop()
    shutil.rmtree(work, ignore_errors=True)
    if cluster:
        os._exit(0)


def main(argv):
    args = parse_args(argv)
    run(args)


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main(sys.argv[1:])
