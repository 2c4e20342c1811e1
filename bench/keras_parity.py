"""Step-by-step parity with Keras (docs/PERFORMANCE.md, "Parity with Keras, step by step").

For each network: builds it in Keras 3 (keras.applications, weights=None, 10 classes),
compiles it with Adam and sparse categorical cross-entropy, saves it as a .keras archive
(the shared initial weights), trains it in Keras with train_on_batch on Fashion-MNIST's
training images in order (batch k = images [k*B, (k+1)*B), no shuffling; pixels / 255,
28x28 zero-padded by 2 to 32x32, the gray channel repeated to 3: what psworker does
with an image model whose input is 32x32x3), recording per step the loss and the
variables bench/keras_trajectory records (every BatchNormalization moving mean and
variance, the first and the last kernel). Then runs bench/keras_trajectory on the same
archive, and once more with every initial weight nudged by one float32 ulp (how much
training amplifies a perturbation of float32 rounding's size: the noise floor), and
Keras once more in float64 from the same weights (the reference both float32 sides
are measured against). Last, step 1's gradients of every variable, from one SGD step
at a large learning rate, on each side against float64 Keras. Prints the tables
docs/PERFORMANCE.md holds, and a JSON summary per network into --workdir.

Run through bench/keras_parity.sh (which makes the venv); directly:

    KERAS_BACKEND=jax /var/tmp/ps-test-venvs/keras3/bin/python bench/keras_parity.py \
        --trajectory build/bench/keras_trajectory --workdir /tmp/parity --nets mobilenetv2
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402

NETS = ("mobilenetv2", "mobilenetv3small", "resnet50v2", "densenet121")
CHECK_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 1000)


def build(name, shape):
    """The Keras network called name, 10 classes, no pretrained weights."""
    import keras

    apps = keras.applications
    if name == "mobilenetv2":
        return apps.MobileNetV2(input_shape=shape, alpha=0.35, weights=None, classes=10)
    if name == "mobilenetv3small":
        # no Dropout before the logits (its masks cannot match), and no Rescaling:
        # the images come in [0, 1] on both sides
        return apps.MobileNetV3Small(input_shape=shape, weights=None, classes=10,
                                     dropout_rate=0.0, include_preprocessing=False)
    if name == "resnet50v2":
        return apps.ResNet50V2(input_shape=shape, weights=None, classes=10)
    if name == "densenet121":
        return apps.DenseNet121(input_shape=shape, weights=None, classes=10)
    raise SystemExit(f"keras_parity: unknown network {name!r} (one of {', '.join(NETS)})")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        buf = f.read()
    ndim = buf[3]
    dims = [int.from_bytes(buf[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(buf, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_batches(data_dir, n, shape):
    """The first n training images as the model's input, and their labels."""
    x = read_idx(Path(data_dir) / "train-images-idx3-ubyte.gz")[:n]
    y = read_idx(Path(data_dir) / "train-labels-idx1-ubyte.gz")[:n].astype(np.int32)
    x = x.astype(np.float32) / np.float32(255)
    h, w, c = shape
    top, left = (h - x.shape[1]) // 2, (w - x.shape[2]) // 2
    x = np.pad(x, ((0, 0), (top, h - x.shape[1] - top), (left, w - x.shape[2] - left)))
    return np.repeat(x[..., None], c, axis=-1), y


def var_name(v):
    return v.path


def pick_vars(model):
    """The variables keras_trajectory records, in the model's variable order."""
    vs = list(model.variables)
    kernels = [v for v in vs if var_name(v).endswith("/kernel")]
    keep = {id(kernels[0]), id(kernels[-1])}
    return [v for v in vs if id(v) in keep or var_name(v).endswith(("/moving_mean",
                                                                      "/moving_variance"))]


def train_keras(model, x, y, steps, batch, out, vs=None):
    """Trains in order with train_on_batch, writing the trajectory file out (of the
    variables vs, by default pick_vars')."""
    vs = pick_vars(model) if vs is None else vs
    with open(out, "wb") as f:
        f.write(f"keras_trajectory 1\nvars {len(vs)}\n".encode())
        for v in vs:
            f.write(f"{var_name(v)} {int(np.prod(v.shape))}\n".encode())
        f.write(f"steps {steps}\n".encode())
        for s in range(steps):
            sl = slice(s * batch, (s + 1) * batch)
            loss = model.train_on_batch(x[sl], y[sl])
            rec = [np.asarray([loss], np.float32)]
            rec += [np.asarray(v.value, np.float32).ravel() for v in vs]
            f.write(np.concatenate(rec).astype("<f4").tobytes())


def read_trajectory(path):
    """{"loss": [steps], name: [steps, numel]} from a trajectory file."""
    with open(path, "rb") as f:
        if f.readline().strip() != b"keras_trajectory 1":
            raise SystemExit(f"keras_parity: {path}: not a trajectory file")
        nv = int(f.readline().split()[1])
        names = []
        for _ in range(nv):
            name, numel = f.readline().decode().rsplit(" ", 1)
            names.append((name, int(numel)))
        steps = int(f.readline().split()[1])
        width = 1 + sum(n for _, n in names)
        data = np.frombuffer(f.read(), "<f4")
    if data.size != steps * width:
        raise SystemExit(f"keras_parity: {path}: {data.size} floats, expected {steps * width}")
    data = data.reshape(steps, width)
    out, col = {"loss": data[:, 0]}, 1
    for name, n in names:
        out[name] = data[:, col:col + n]
        col += n
    return out


def rel_diff(a, b):
    """max |a - b| over max |b| (the variable's scale), and ||a - b|| / ||b|| (L2)."""
    d = a.astype(np.float64) - b
    scale, norm = float(np.max(np.abs(b))), float(np.linalg.norm(b))
    return float(np.max(np.abs(d))) / scale, float(np.linalg.norm(d)) / norm


def bn_layers(t):
    return [n[:-len("/moving_mean")] for n in t if n.endswith("/moving_mean")]


def bn_diffs(ref, other, i):
    """The BN moving statistics' largest differences at record i: the mean's in units of
    the layer's standard deviation (|d mean| / sqrt(Keras' moving variance + 1e-3): how far
    the difference shifts the normalized output; the means themselves may be rounding
    noise around 0, after a layer whose input has zero batch mean), and the variance's
    relative to it (|d var| / Keras' var)."""
    mean = var = 0.0
    for layer in bn_layers(ref):
        m0, v0 = ref[layer + "/moving_mean"][i], ref[layer + "/moving_variance"][i]
        m1, v1 = other[layer + "/moving_mean"][i], other[layer + "/moving_variance"][i]
        v0 = v0.astype(np.float64)
        mean = max(mean, float(np.max(np.abs(m1 - m0) / np.sqrt(v0 + 1e-3))))
        var = max(var, float(np.max(np.abs(v1 - v0) / v0)))
    return mean, var


def compare_at(ref, other, s):
    """The row of differences at step s (1-based) between two trajectories."""
    i = s - 1
    lr, lk = float(other["loss"][i]), float(ref["loss"][i])
    row = {"step": s, "loss_ref": lk, "loss": lr, "loss_rel": abs(lr - lk) / abs(lk)}
    row["bn_mean"], row["bn_var_rel"] = bn_diffs(ref, other, i)
    kernels = [n for n in ref if n.endswith("/kernel")]
    for tag, n in (("first", kernels[0]), ("last", kernels[-1])):
        row[f"{tag}_max_rel"], row[f"{tag}_l2_rel"] = rel_diff(other[n][i], ref[n][i])
    return row


def check_names(keras_t, c_t):
    missing = sorted(set(keras_t) ^ set(c_t))
    if missing:
        raise SystemExit(f"keras_parity: the two trajectories record different variables: "
                         f"{missing[:6]}")


def print_table(name, rows, floor):
    kern = [n for n in rows[0]["names"] if n.endswith("/kernel")]
    print(f"\n{name}: Keras (train_on_batch) vs the project (keras_trajectory); "
          f"first kernel {kern[0]}, last {kern[-1]}; {len(bn_layers(rows[0]['names']))} BN "
          f"layers")
    print("loss rel = |diff| / Keras'; BN mean = max |diff| / sqrt(var + 1e-3); BN var = max "
          "|diff| / var; kernels: max |diff| / max |w|, and ||diff|| / ||w||; floor = the "
          "project against itself with every initial weight nudged by 1 ulp")
    hdr = ("step", "loss Keras", "loss ours", "loss rel", "BN mean", "BN var", "first k max",
           "first k L2", "last k max", "last k L2", "floor: loss", "BN mean", "BN var",
           "last k L2")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    e = "{:.1e}".format
    for r, f in zip(rows, floor):
        cells = [str(r["step"]), f"{r['loss_ref']:.5f}", f"{r['loss']:.5f}", e(r["loss_rel"]),
                 e(r["bn_mean"]), e(r["bn_var_rel"]), e(r["first_max_rel"]),
                 e(r["first_l2_rel"]), e(r["last_max_rel"]), e(r["last_l2_rel"])]
        cells += [e(f["loss_rel"]), e(f["bn_mean"]), e(f["bn_var_rel"]), e(f["last_l2_rel"])] \
            if f else ["-"] * 4
        print("| " + " | ".join(cells) + " |")


def run_c(args, keras_file, out, extra=(), steps=None):
    cmd = [args.trajectory, "--model", str(keras_file), "--out", str(out), "--steps",
           str(steps or args.steps), "--batch", str(args.batch), "--data", args.data, *extra]
    t0 = time.time()
    subprocess.run(cmd, check=True)
    return time.time() - t0


GRAD_LR = 1000.0


def load_as(keras_file, dtype):
    """The archive's model (its layers' names as written) with its weights, every layer
    in dtype ("float32" or "float64": the config's dtypes rewritten)."""
    import zipfile

    import keras

    with zipfile.ZipFile(keras_file) as z:
        config = z.read("config.json").decode()
    model = keras.models.model_from_json(config.replace('"float32"', f'"{dtype}"'))
    model.load_weights(keras_file)
    return model


def keras_grad_step(args, name, keras_file, x, y, out):
    """One SGD step at learning rate GRAD_LR from the archive's weights, every variable
    recorded into out; saves the SGD archive the project's side reads. Returns the
    initial weights (float64) and the trainable variables' names."""
    import keras

    model = load_as(keras_file, str(x.dtype))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=GRAD_LR),
                  loss="sparse_categorical_crossentropy")
    if x.dtype == np.float32:
        model.save(Path(args.workdir) / f"{name}.sgd.keras")
    w0 = {v.path: np.asarray(v.value, np.float64).ravel() for v in model.variables}
    train_keras(model, x, y, 1, args.batch, out, vs=list(model.variables))
    return w0, [v.path for v in model.trainable_variables]


def grad_check(args, name, keras_file, x, y):
    """Step 1's gradient of every trainable variable, from one SGD step at learning rate
    GRAD_LR (large, so that w0 - w1 keeps the gradient's digits): Keras in float32, the
    project, the project nudged; grad_compare measures them against Keras in float64
    (its run is made by the float64 pass, run_float64)."""
    work = Path(args.workdir)
    keras_grad_step(args, name, keras_file, x, y, work / f"{name}.grad.keras.traj")
    sgd_file = work / f"{name}.sgd.keras"
    run_c(args, sgd_file, work / f"{name}.grad.c.traj", ["--all-vars"], steps=1)
    run_c(args, sgd_file, work / f"{name}.grad.nudged.traj", ["--all-vars", "--nudge"], steps=1)
    return grad_compare(args, name)


def grad_compare(args, name):
    """grad_check's runs against the float64 one. Returns {variable: [rel errors..., rms]}:
    ||g - g64|| / ||g64|| in the order of GRAD_SIDES, then g64's root mean square."""
    work = Path(args.workdir)
    model = load_as(work / f"{name}.sgd.keras", "float32")
    w0 = {v.path: np.asarray(v.value, np.float64).ravel() for v in model.variables}
    ref = read_trajectory(work / f"{name}.grad.keras64.traj")
    sides = [read_trajectory(work / f"{name}.grad.{t}.traj") for t in ("keras", "c", "nudged")]
    for t in sides:
        check_names(ref, t)
    out = {}
    for n in (v.path for v in model.trainable_variables):
        w1 = ref[n][0].astype(np.float64)
        norm = float(np.linalg.norm(w0[n] - w1)) or 1.0
        out[n] = [float(np.linalg.norm(t[n][0] - w1)) / norm for t in sides]
        out[n].append(norm / GRAD_LR / np.sqrt(w1.size))
    return out


GRAD_SIDES = ("Keras float32", "project", "project nudged")


def print_grads(name, diffs):
    """The table of grad_check's errors, without the variables whose gradient is zero in
    exact arithmetic (a bias or beta followed by a BatchNormalization, which removes any
    constant: their float64 gradient is rounding noise, 1e-6 of the median's or less)."""
    rms = np.array([d[3] for d in diffs.values()])
    keep = rms > 1e-6 * np.median(rms)
    errs = np.array([d[:3] for d in diffs.values()])[keep]
    names = [n for n, k in zip(diffs, keep) if k]
    print(f"\n{name}: step 1's gradients of {len(names)} trainable variables against Keras in "
          f"float64, ||g - g64|| / ||g64|| ({int((~keep).sum())} more, whose gradient is 0 in "
          f"exact arithmetic, left out):")
    print("| side | median over variables | 90th percentile | max (variable) |")
    print("|---|---|---|---|")
    for k, side in enumerate(GRAD_SIDES):
        col = errs[:, k]
        worst = names[int(np.argmax(col))]
        print(f"| {side} | {np.median(col):.1e} | {np.percentile(col, 90):.1e} | "
              f"{col.max():.1e} ({worst}) |")


def print_ref64(name, ref, sides, steps):
    """Each float32 trajectory's distance from Keras' float64 one."""
    print(f"\n{name}: distance from Keras in float64 (loss rel, BN var, last kernel L2)")
    hdr = ["step"] + [f"{t}: {q}" for t in sides for q in ("loss", "BN var", "last k")]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for s in steps:
        cells = [str(s)]
        for t in sides.values():
            r = compare_at(ref, t, s)
            cells += [f"{r['loss_rel']:.1e}", f"{r['bn_var_rel']:.1e}", f"{r['last_l2_rel']:.1e}"]
        print("| " + " | ".join(cells) + " |")


def keep_float64():
    """Keras computes some ops in result_type(input, "float32") (BatchNormalization,
    ops.mean: GlobalAveragePooling2D, the loss's mean) and promotes float64 with float32
    to float32, so a float64 model would hold float32 islands. Patched so that float64
    stays float64 (the reference must be float64 throughout)."""
    from keras.src import backend
    from keras.src.backend.common import dtypes

    real = dtypes.result_type

    def result_type(*args):
        for d in args:
            try:
                if d is not None and backend.standardize_dtype(d) == "float64":
                    return "float64"
            except (TypeError, ValueError):
                pass
        return real(*args)

    dtypes.result_type = result_type
    backend.result_type = result_type


def run_float64(args, name):
    """The float64 pass (a process of its own: JAX's 64-bit mode is set at start):
    Keras in float64 from the same float32 archive, on the same batches, for --ref64-steps
    steps, and its one-step SGD gradient run."""
    import keras

    keep_float64()
    work = Path(args.workdir)
    keras_file = work / f"{name}.keras"
    keras.config.set_floatx("float64")
    x, y = load_batches(args.data, max(args.ref64_steps, 1) * args.batch, (32, 32, 3))
    x = x.astype(np.float64)
    model = load_as(keras_file, "float64")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=args.lr),
                  loss="sparse_categorical_crossentropy")
    if args.ref64_steps:
        train_keras(model, x, y, args.ref64_steps, args.batch, work / f"{name}.keras64.traj")
    if args.grads:
        keras_grad_step(args, name, keras_file, x, y, work / f"{name}.grad.keras64.traj")


def spawn_float64(args, name):
    cmd = [sys.executable, __file__, "--as-float64", "--trajectory", args.trajectory,
           "--workdir", args.workdir, "--nets", name, "--batch", str(args.batch), "--lr",
           str(args.lr), "--data", args.data, "--ref64-steps", str(args.ref64_steps)]
    if not args.grads:
        cmd.append("--no-grads")
    subprocess.run(cmd, check=True, env=dict(os.environ, JAX_ENABLE_X64="1"))


def train_all(args, name, model, keras_file):
    """Every run of one network; returns the seconds of each."""
    work = Path(args.workdir)
    model.save(keras_file)
    x, y = load_batches(args.data, args.steps * args.batch, (32, 32, 3))
    t = {}
    t0 = time.time()
    train_keras(model, x, y, args.steps, args.batch, work / f"{name}.keras.traj")
    t["keras"] = time.time() - t0
    t["project"] = run_c(args, keras_file, work / f"{name}.c.traj")
    t["project nudged"] = run_c(args, keras_file, work / f"{name}.nudged.traj", ["--nudge"])
    t0 = time.time()
    spawn_float64(args, name)
    t["keras float64"] = time.time() - t0
    if args.grads:
        grads = grad_check(args, name, keras_file, x, y)
        (work / f"{name}.grads.json").write_text(json.dumps(grads, indent=1))
    return t


def run_net(args, name):
    import keras

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(args.seed)
    model = build(name, (32, 32, 3))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=args.lr),
                  loss="sparse_categorical_crossentropy")
    keras_file = work / f"{name}.keras"
    secs = {} if args.reuse else train_all(args, name, model, keras_file)
    kt, ct = read_trajectory(work / f"{name}.keras.traj"), read_trajectory(work / f"{name}.c.traj")
    nt = read_trajectory(work / f"{name}.nudged.traj")
    check_names(kt, ct)
    steps = [s for s in CHECK_STEPS if s <= args.steps]
    rows = [dict(compare_at(kt, ct, s), names=list(kt)) for s in steps]
    floor = [compare_at(ct, nt, s) for s in steps]
    print_table(name, rows, floor)
    if args.ref64_steps:
        ref = read_trajectory(work / f"{name}.keras64.traj")
        print_ref64(name, ref, {"Keras float32": kt, "project": ct, "project nudged": nt},
                    [s for s in steps if s <= args.ref64_steps])
    if args.grads:
        if args.reuse:
            (work / f"{name}.grads.json").write_text(json.dumps(grad_compare(args, name),
                                                                indent=1))
        print_grads(name, json.loads((work / f"{name}.grads.json").read_text()))
    print(f"\nparameters {model.count_params():,}; seconds: "
          + ", ".join(f"{k} {v:.0f}" for k, v in secs.items()))
    summary = {"net": name, "params": model.count_params(), "steps": args.steps,
               "batch": args.batch, "seconds": secs,
               "rows": [{k: v for k, v in r.items() if k != "names"} for r in rows],
               "floor": floor}
    (work / f"{name}.json").write_text(json.dumps(summary, indent=1))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trajectory", required=True, help="the built bench/keras_trajectory")
    ap.add_argument("--workdir", required=True, help="where the .keras and trajectory files go")
    ap.add_argument("--nets", default="mobilenetv2,mobilenetv3small,resnet50v2",
                    help=f"comma-separated, of {', '.join(NETS)}")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    ap.add_argument("--seed", type=int, default=0, help="Keras' initial weights")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--ref64-steps", type=int, default=None,
                    help="steps of the float64 Keras reference (default --steps; 0: none)")
    ap.add_argument("--as-float64", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-grads", dest="grads", action="store_false",
                    help="skip the comparison of step 1's gradients of every variable")
    ap.add_argument("--reuse", action="store_true",
                    help="compare the trajectory files already in --workdir, train nothing")
    args = ap.parse_args()
    if args.ref64_steps is None:
        args.ref64_steps = args.steps
    import keras

    if args.as_float64:
        for name in args.nets.split(","):
            run_float64(args, name.strip())
        return

    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, steps {args.steps}, "
          f"batch {args.batch}, Adam lr {args.lr}")
    for name in args.nets.split(","):
        run_net(args, name.strip())


if __name__ == "__main__":
    main()
