"""psworker --export FILE.onnx and --evaluate FILE [--predictions FILE], real processes.

For the MLP (examples/mlp.json), the CNN (examples/fashion_cnn.json), MobileNetV2
(examples/mobilenetv2_train.json: 32x32x3, Fashion-MNIST padded), a spec holding every
other layer and option (ALL_LAYERS) and a Keras file with Add and Concatenate (residual,
5 outputs: labels c % 5): a short training
(--no-ps yes, a few steps) with --export and --save, then
- onnx.checker.check_model(full_check=True) (Debian's python3-onnx 1.12) passes, the
  declared opset is 13 and every variable of the saved model is an initializer of that name;
- `psworker --evaluate SAVED --predictions P` prints the training's test accuracy and loss
  again (same values: the same model on the same test set), and P holds its outputs;
- ONNX Runtime (PyPI onnxruntime in its own venv, tests/tools/pyvenv.sh, run as a
  subprocess: it brings its own numpy) runs the exported file on the test images
  pre-processed here as psworker does (/255; MobileNetV2: zero padding 2 px on each side,
  the one channel repeated to 3, as worker/data/adapt.c): its outputs match psworker's within
  1e-4 (absolute up to 1, relative above: |ort - ps| <= 1e-4 * max(1, |ps|)), and the
  accuracy of its argmax is psworker's. MLP and CNN: all 10,000 test images; MobileNetV2:
  the first 1,000 (--max-test 1000), the other two the first 2,000, for time.
And --evaluate on a missing, a corrupt, an .onnx or another architecture's file fails with
exit status 1 or 2 and a message naming it.

Environment (tests/meson.build): PSWORKER, PS_SOURCE_ROOT.
"""
import gzip
import json
import os
import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

SRC = Path(os.environ.get("PS_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
DATA = Path("/usr/share/datasets/fashion-mnist")
ORT_PIN = "onnxruntime==1.19.2"
TOL = 1e-4

pytestmark = pytest.mark.skipif(not (DATA / "t10k-images-idx3-ubyte.gz").exists(),
                                reason="no Fashion-MNIST (apt-get install dataset-fashion-mnist)")

# Every other layer and option the exporter maps, in one model of the project's spec:
# asymmetric ZeroPadding2D, a stride-2 "same" Conv2D on an odd size (TensorFlow puts the
# odd padding cell after), gelu / tanh / sigmoid / relu6, BatchNormalization without gamma
# and beta (and on a flat input), DepthwiseConv2D with a depth multiplier and a bias,
# AveragePooling2D "same" (padding not counted), MaxPooling2D 3x3 stride 1, Dropout,
# Reshape of an image to another image, Dense straight on an image (read flattened), a
# final softmax folded into the loss (from_logits false: the graph outputs probabilities).
ALL_LAYERS = {
    "name": "all_layers",
    "input_shape": [28, 28, 1],
    "layers": [
        {"type": "ZeroPadding2D", "padding": [[1, 0], [0, 2]]},
        {"type": "Conv2D", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same",
         "activation": "gelu"},
        {"type": "BatchNormalization", "center": False, "scale": False, "epsilon": 0.01},
        {"type": "DepthwiseConv2D", "kernel_size": 3, "depth_multiplier": 2,
         "padding": "same", "activation": "tanh"},
        {"type": "AveragePooling2D", "pool_size": 2, "padding": "same"},
        {"type": "MaxPooling2D", "pool_size": 3, "strides": 1},
        {"type": "Dropout", "rate": 0.3},
        {"type": "Reshape", "target_shape": [12, 12, 4]},
        {"type": "Conv2D", "filters": 4, "kernel_size": 2, "activation": "sigmoid"},
        {"type": "ReLU", "max_value": 6},
        {"type": "Dense", "units": 32},
        {"type": "Activation", "activation": "relu"},
        {"type": "BatchNormalization"},
        {"type": "Dense", "units": 10, "activation": "softmax"},
    ],
    "loss": "sparse_categorical_crossentropy",
    "from_logits": False,
    "optimizer": {"name": "adam", "learning_rate": 0.01},
    "batch_size": 32,
}


def residual():
    """Add and Concatenate: a Keras 3 file of tests/fixtures/keras (made for 6x6x3 input),
    its input made 28x28x3 (the one channel repeated), in a wrapper."""
    k = json.loads((SRC / "tests/fixtures/keras/residual_k3.json").read_text())
    inputs = [l for l in k["config"]["layers"] if l["class_name"] == "InputLayer"]
    assert len(inputs) == 1 and inputs[0]["config"]["batch_shape"][1:] == [6, 6, 3]
    inputs[0]["config"]["batch_shape"] = [None, 28, 28, 3]
    # 5 outputs: class c of the data is label c % 5
    return {"keras": k, "loss": "sparse_categorical_crossentropy",
            "labels": {"map": {str(c): c % 5 for c in range(10)}}}


RESIDUAL = residual()


def apps_block():
    """The layers of keras.applications' newer networks (Rescaling, hard_swish, a
    squeeze-and-excitation Multiply, Cropping2D, LayerNormalization, SeparableConv2D with
    swish): tests/fixtures/keras/apps_block_k3.json, its input made 28x28x3, in a wrapper."""
    k = json.loads((SRC / "tests/fixtures/keras/apps_block_k3.json").read_text())
    inputs = [l for l in k["config"]["layers"] if l["class_name"] == "InputLayer"]
    inputs[0]["config"]["batch_shape"] = [None, 28, 28, 3]
    return {"keras": k, "loss": "sparse_categorical_crossentropy",
            "labels": {"map": {str(c): c % 5 for c in range(10)}}}


APPS_BLOCK = apps_block()

# EfficientNet's layers (Rescaling, Normalization with adapted statistics, BatchNormalization,
# swish, depthwise, squeeze-and-excitation through Reshape, the skip Add): a Keras-written
# .keras archive (an absolute path: the join below keeps it).
EFFNET_BLOCK = str(SRC / "tests/fixtures/keras/effnet_fmnist.keras")

# SeparableConv2D (strided "same", a depth multiplier; no bias) and
# GlobalAveragePooling2D(keepdims=True) read by a 1x1 Conv2D.
SEPARABLE = {
    "name": "separable", "input_shape": [28, 28, 1],
    "layers": [
        {"type": "SeparableConv2D", "filters": 8, "kernel_size": 3, "strides": 2,
         "padding": "same", "depth_multiplier": 2, "activation": "relu"},
        {"type": "SeparableConv2D", "filters": 8, "kernel_size": [3, 2], "use_bias": False},
        {"type": "GlobalAveragePooling2D", "keepdims": True},
        {"type": "Conv2D", "filters": 10, "kernel_size": 1},
        {"type": "Flatten"}],
    "loss": "sparse_categorical_crossentropy", "from_logits": True,
    "optimizer": {"name": "adam", "learning_rate": 0.01}, "batch_size": 32}

# name -> (spec: a file of examples/ or a spec written here, training flags, test samples
# compared, ONNX Runtime's padding)
MODELS = {
    "mlp": ("mlp.json", ["--max-steps", "40"], 10000, 0),
    "cnn": ("fashion_cnn.json", ["--max-steps", "15", "--max-train", "2000"], 10000, 0),
    "mobilenetv2": ("mobilenetv2_train.json", ["--max-steps", "3", "--max-train", "500"],
                    1000, 2),
    "all_layers": (ALL_LAYERS, ["--max-steps", "20", "--max-train", "1000"], 2000, 0),
    "residual": (RESIDUAL, ["--max-steps", "10", "--max-train", "1000"], 2000, 0),
    "separable": (SEPARABLE, ["--max-steps", "20", "--max-train", "1000"], 2000, 0),
    "apps_block": (APPS_BLOCK, ["--max-steps", "10", "--max-train", "1000"], 2000, 0),
    "effnet_block": (EFFNET_BLOCK, ["--max-steps", "10", "--max-train", "1000"], 2000, 0),
}

ORT_SCRIPT = r"""
import sys, numpy as np, onnxruntime as ort
model, images, n, pad, channels, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
x = np.load(images)[:n].astype(np.float32) / 255.0           # [n, 28, 28]
if pad:
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
x = np.repeat(x[..., None], channels, axis=3)                  # NHWC
s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
shape = s.get_inputs()[0].shape
if len(shape) == 2:
    x = x.reshape(n, -1)
y = s.run(None, {s.get_inputs()[0].name: x})[0]
np.save(out, y.astype(np.float32))
"""


def psworker():
    p = os.environ.get("PSWORKER")
    if not p or not os.path.exists(p):
        pytest.fail("PSWORKER is not set or missing (run through meson test)")
    return p


def run(args, timeout=300):
    return subprocess.run([psworker(), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def final_line(out):
    m = re.search(r"^test accuracy: ([0-9.]+)  test loss: ([0-9.]+)  \(", out, re.M)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def read_idx_images(path):
    raw = gzip.open(path).read()
    n, h, w = struct.unpack(">III", raw[4:16])
    return np.frombuffer(raw, np.uint8, offset=16).reshape(n, h, w)


def read_idx_labels(path):
    raw = gzip.open(path).read()
    return np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)


def saved_names(path):
    """The tensor names of a saved model (docs/FORMATS.md, tensor files)."""
    b = Path(path).read_bytes()
    assert b[:8] == b"PSTENSOR"
    (n,) = struct.unpack_from("<Q", b, 80)
    pos, names = 92, []
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", b, pos)
        names.append(b[pos + 4:pos + 4 + ln].decode())
        pos += 4 + ln
        (rank,) = struct.unpack_from("<I", b, pos)
        pos += 4 + 8 * rank
        (alen,) = struct.unpack_from("<I", b, pos)
        pos += 4 + alen
        (numel,) = struct.unpack_from("<Q", b, pos)
        pos += 8 + 4 * numel + 4
    return names


@pytest.fixture(scope="module")
def ort_python(tmp_path_factory):
    r = subprocess.run(["bash", str(SRC / "tests/tools/pyvenv.sh"), "onnxrt", ORT_PIN],
                       capture_output=True, text=True, timeout=1200)
    if r.returncode == 77:
        pytest.skip("no onnxruntime venv (PyPI unreachable?): " + r.stderr[-500:])
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def test_images(tmp_path_factory):
    p = tmp_path_factory.mktemp("data") / "t10k.npy"
    np.save(p, read_idx_images(DATA / "t10k-images-idx3-ubyte.gz"))
    return p


@pytest.mark.parametrize("name", list(MODELS))
def test_export_matches_onnx_runtime(name, tmp_path, ort_python, test_images):
    spec, train_flags, n, pad = MODELS[name]
    if isinstance(spec, dict):
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        model = str(tmp_path / "spec.json")
    else:
        model = str(SRC / "examples" / spec)
    onnx_path, saved = tmp_path / f"{name}.onnx", tmp_path / f"{name}.pstf"
    r = run(["--no-ps", "yes", "--model", model, "--epochs", "1", *train_flags,
             "--max-test", str(n), "--progress", "none",
             "--export", str(onnx_path), "--save", str(saved)])
    assert r.returncode == 0, r.stderr
    trained_acc, trained_loss = final_line(r.stdout)

    m = onnx.load(str(onnx_path))
    onnx.checker.check_model(m, full_check=True)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 13)]
    inits = {t.name for t in m.graph.initializer}
    missing = set(saved_names(saved)) - inits
    assert not missing, f"variables not among the initializers: {sorted(missing)}"

    pred = tmp_path / "pred.f32"
    summary = tmp_path / "summary.json"
    r = run(["--evaluate", str(saved), "--model", model, "--max-test", str(n),
             "--predictions", str(pred), "--summary", str(summary)])
    assert r.returncode == 0, r.stderr
    acc, loss = final_line(r.stdout)
    assert (acc, loss) == (trained_acc, trained_loss)
    assert '"mode":\t"evaluate"' in summary.read_text()

    ours = np.fromfile(pred, dtype="<f4")
    classes = m.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    assert ours.size == n * classes
    ours = ours.reshape(n, classes)

    ort_out = tmp_path / "ort.npy"
    script = tmp_path / "ort_run.py"
    script.write_text(ORT_SCRIPT)
    channels = 3 if name in ("mobilenetv2", "residual", "apps_block") else 1
    r = subprocess.run([ort_python, str(script), str(onnx_path), str(test_images), str(n),
                        str(pad), str(channels), str(ort_out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    theirs = np.load(ort_out)
    assert theirs.shape == ours.shape

    err = np.abs(theirs - ours) / np.maximum(1.0, np.abs(ours))
    worst = np.unravel_index(np.argmax(err), err.shape)
    print(f"{name}: {n} samples, worst |ort - psworker| / max(1, |psworker|) = {err.max():.2g}")
    assert err.max() <= TOL, (f"{name}: worst |ort - psworker| / max(1, |psworker|) = "
                              f"{err.max():.3g} at {worst}: {theirs[worst]} vs {ours[worst]}")
    labels = read_idx_labels(DATA / "t10k-labels-idx1-ubyte.gz")[:n] % classes
    ort_acc = float(np.mean(np.argmax(theirs, axis=1) == labels))
    assert round(ort_acc, 4) == acc
    assert np.array_equal(np.argmax(theirs, axis=1), np.argmax(ours, axis=1))
    if name in ("mobilenetv2", "all_layers", "residual", "apps_block", "effnet_block"):  # ends in softmax: the graph's output is probabilities
        np.testing.assert_allclose(theirs.sum(axis=1), 1.0, atol=1e-5)


def test_evaluate_errors(tmp_path):
    model = str(SRC / "examples" / "mlp.json")
    saved = tmp_path / "mlp.pstf"
    r = run(["--no-ps", "yes", "--model", model, "--epochs", "1", "--max-steps", "2",
             "--max-test", "100", "--progress", "none", "--save", str(saved)])
    assert r.returncode == 0, r.stderr

    missing = tmp_path / "nothing.pstf"
    r = run(["--evaluate", str(missing), "--model", model])
    assert r.returncode == 1 and str(missing) in r.stderr, r.stderr

    corrupt = tmp_path / "corrupt.pstf"
    b = bytearray(saved.read_bytes())
    b[200] ^= 0xFF  # inside the first tensor: its CRC no longer matches
    corrupt.write_bytes(bytes(b))
    r = run(["--evaluate", str(corrupt), "--model", model])
    assert r.returncode == 2 and "CRC" in r.stderr, r.stderr

    r = run(["--evaluate", str(tmp_path / "x.onnx"), "--model", model])
    assert r.returncode == 2 and "--save" in r.stderr, r.stderr

    r = run(["--evaluate", str(saved), "--model", str(SRC / "examples" / "fashion_cnn.json")])
    assert r.returncode == 2 and "no variable 'conv2d_0/kernel'" in r.stderr, r.stderr

    r = run(["--predictions", str(tmp_path / "p"), "--no-ps", "yes"])
    assert r.returncode == 2 and "--evaluate" in r.stderr, r.stderr

    r = run(["--evaluate", str(saved), "--model", model, "--save", str(tmp_path / "y")])
    assert r.returncode == 2 and "--save does not apply" in r.stderr, r.stderr
