"""psworker --export FILE.safetensors: the file safetensors (PyPI) reads, its values the saved
model's exactly after undoing the documented layout change, and a PyTorch module built from
the model JSON beside it reproducing the trained model's test accuracy (docs/FORMATS.md,
"safetensors export").

safetensors comes from PyPI through tests/tools/pyvenv.sh (skipped when PyPI cannot be
reached); numpy and torch are Debian's, seen by that venv (--system-site-packages).
"""
from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import env_path

SAFETENSORS_PIN = "safetensors==0.4.5"
FASHION = Path("/usr/share/datasets/fashion-mnist")
RUN_TIMEOUT_S = 600  # a loaded 2-core machine; the runs themselves take well under a minute
# The torch module's accuracy on the 10,000 test images may differ from the trained model's
# by a few images whose two best logits are closer than the float rounding of the two
# implementations: at most 10 of 10,000.
ACCURACY_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def safetensors_numpy():
    """safetensors.numpy from the test venv (same interpreter, Debian's numpy)."""
    root = Path(env_path("PS_SOURCE_ROOT"))
    r = subprocess.run([str(root / "tests/tools/pyvenv.sh"), "safetensors",
                        "--system-site-packages", SAFETENSORS_PIN],
                       capture_output=True, text=True, timeout=1200)
    if r.returncode == 77:
        pytest.skip(f"no safetensors venv: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    venv_python = r.stdout.strip()
    site = subprocess.run([venv_python, "-c",
                           "import safetensors, os; "
                           "print(os.path.dirname(os.path.dirname(safetensors.__file__)))"],
                          capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    sys.path.insert(0, site)
    import safetensors.numpy
    return safetensors.numpy


# ---- readers ------------------------------------------------------------------------------

def read_pstf(path: Path) -> dict[str, np.ndarray]:
    """A saved model (docs/FORMATS.md, "Tensor files"): name -> float32 array in its shape."""
    b = path.read_bytes()
    assert b[:8] == b"PSTENSOR" and struct.unpack_from("<II", b, 8) == (1, 2)
    (n,) = struct.unpack_from("<Q", b, 80)
    pos, out = 92, {}
    for _ in range(n):
        (nl,) = struct.unpack_from("<I", b, pos)
        name = b[pos + 4:pos + 4 + nl].decode()
        pos += 4 + nl
        (rank,) = struct.unpack_from("<I", b, pos)
        shape = struct.unpack_from(f"<{rank}Q", b, pos + 4)
        pos += 4 + 8 * rank
        (al,) = struct.unpack_from("<I", b, pos)
        pos += 4 + al
        (numel,) = struct.unpack_from("<Q", b, pos)
        pos += 8
        out[name] = np.frombuffer(b, "<f4", numel, pos).reshape(shape).copy()
        pos += 4 * numel + 4
    assert b[pos:pos + 8] == b"PSEND\0\0\0" and len(b) == pos + 20
    return out


def read_idx_gz(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        b = f.read()
    ndim = b[3]
    dims = struct.unpack_from(f">{ndim}I", b, 4)
    return np.frombuffer(b, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def read_header(path: Path) -> tuple[dict, int]:
    """The safetensors header (checked against the format's rules) and the data's length."""
    b = path.read_bytes()
    (n,) = struct.unpack_from("<Q", b, 0)
    assert n % 8 == 0 and 8 + n <= len(b)
    text = b[8:8 + n].decode("utf-8")
    assert text.startswith("{") and text[len(text.rstrip(" ")):] == " " * (n - len(text.rstrip(" ")))
    pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
    names = [k for k, _ in pairs]
    assert len(names) == len(set(names)), "duplicate names"
    header = dict(pairs)
    meta = dict(header.pop("__metadata__"))
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    spans = sorted(tuple(dict(v)["data_offsets"]) for v in header.values())
    end = 0
    for begin, stop in spans:  # contiguous, no gaps, no overlap, ending at the file's end
        assert begin == end and stop >= begin
        end = stop
    assert 8 + n + end == len(b)
    return {k: dict(v) for k, v in header.items()} | {"__metadata__": meta}, end


# ---- the project's model, in PyTorch -----------------------------------------------------

def torch_module(spec: dict):
    """A module of the exported architecture: tensors NCHW, the layers the model JSON lists."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    acts = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
            "linear": lambda x: x, "softmax": lambda x: torch.softmax(x, 1),
            "relu6": lambda x: torch.clamp(x, 0, 6), "gelu": F.gelu}

    class Exported(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for op in spec["ops"]:
                p = op.get("params", {})
                if op["op"] == "Dense":
                    m = nn.Linear(p["weight"]["shape"][1], op["units"], bias=op["use_bias"])
                elif op["op"] in ("Conv2D", "DepthwiseConv2D"):
                    cout, _, kh, kw = p["weight"]["shape"]
                    m = nn.Conv2d(op["in_shape"][2], cout, (kh, kw), tuple(op["strides"]),
                                  groups=op.get("groups", 1), bias=op["use_bias"])
                elif op["op"] == "SeparableConv2D":  # depthwise (no bias), then 1x1
                    cin, mid = op["in_shape"][2], op["in_shape"][2] * op["depth_multiplier"]
                    _, _, kh, kw = p["depthwise.weight"]["shape"]
                    m = nn.Module()
                    m.depthwise = nn.Conv2d(cin, mid, (kh, kw), tuple(op["strides"]),
                                            groups=cin, bias=False)
                    m.pointwise = nn.Conv2d(mid, op["filters"], 1, bias=op["use_bias"])
                elif op["op"] == "BatchNormalization":
                    image = op["in_shape"][0] * op["in_shape"][1] > 1
                    m = (nn.BatchNorm2d if image else nn.BatchNorm1d)(
                        op["in_shape"][2], eps=op["epsilon"], momentum=op["torch_momentum"])
                else:
                    assert "module" not in op, f"no torch layer here for {op['op']}"
                    continue
                self.add_module(op["module"], m)

        def forward(self, x):
            t = [x]
            for op in spec["ops"]:
                a = t[op["inputs"][0]]
                kind = op["op"]
                if kind == "Dense":
                    y = getattr(self, op["module"])(torch.flatten(a, 1))
                elif kind in ("Conv2D", "DepthwiseConv2D"):
                    top, bottom, left, right = op["pads"]
                    y = getattr(self, op["module"])(F.pad(a, (left, right, top, bottom)))
                elif kind == "SeparableConv2D":
                    top, bottom, left, right = op["pads"]
                    m = getattr(self, op["module"])
                    y = m.pointwise(m.depthwise(F.pad(a, (left, right, top, bottom))))
                elif kind == "MaxPooling2D":
                    top, bottom, left, right = op["pads"]
                    a = F.pad(a, (left, right, top, bottom), value=float("-inf"))
                    y = F.max_pool2d(a, tuple(op["pool_size"]), tuple(op["strides"]))
                elif kind == "BatchNormalization":
                    y = getattr(self, op["module"])(a)
                elif kind == "GlobalAveragePooling2D":  # keepdims: a 1x1 image
                    y = a.mean((2, 3), keepdim=op["image"])
                elif kind == "Add":
                    y = sum(t[i] for i in op["inputs"])
                elif kind == "Concatenate":
                    y = torch.cat([t[i] for i in op["inputs"]], 1)
                elif kind == "ZeroPadding2D":
                    top, bottom, left, right = op["pads"]
                    y = F.pad(a, (left, right, top, bottom))
                elif kind == "Activation":
                    y = acts[op["activation"]](a)
                elif kind == "Flatten":
                    y = torch.flatten(a, 1)
                elif kind == "Dropout":
                    y = a
                else:
                    raise AssertionError(f"the test's module has no {kind}")
                t.append(y)
            return t[-1]

    return Exported()


def torch_accuracy(spec: dict, weights: Path, images: np.ndarray, labels: np.ndarray) -> float:
    import torch
    from safetensors.torch import load_file

    model = torch_module(spec)
    model.load_state_dict(load_file(str(weights)), strict=True)
    model.eval()
    h, w, c = spec["input_shape"]
    x = torch.from_numpy(images.astype(np.float32) / np.float32(255.0))
    x = x.reshape(-1, h, w, c).permute(0, 3, 1, 2) if spec["input_image"] else x.reshape(len(x), -1)
    with torch.no_grad():
        pred = torch.cat([model(x[i:i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
    return float((pred.numpy() == labels).mean())


# ---- undoing the layout change -------------------------------------------------------------

def nhwc_rows(shape_in: list[int]) -> np.ndarray:
    """perm[p]: the model's (NHWC) flat index of torch's (NCHW) flat position p."""
    h, w, c = shape_in
    return np.arange(h * w * c).reshape(h, w, c).transpose(2, 0, 1).reshape(-1)


def project_value(op: dict, param: str, value: np.ndarray, flat_from: list[int] | None) -> np.ndarray:
    """The exported tensor back in the project's layout (the saved model's shapes)."""
    if op["op"] == "Dense" and param == "weight":
        k = value.T  # (in, out)
        if op["in_nchw_order"]:
            back = np.empty_like(k)
            back[nhwc_rows(flat_from)] = k
            k = back
        return k
    if op["op"] == "Conv2D" and param == "weight":
        o, i, kh, kw = value.shape
        return value.transpose(2, 3, 1, 0).reshape(kh * kw * i, o)
    if op["op"] == "SeparableConv2D" and param == "pointwise.weight":  # (out, mid, 1, 1)
        return value[:, :, 0, 0].T
    if (op["op"] == "DepthwiseConv2D" and param == "weight") or param == "depthwise.weight":
        c = op["in_shape"][2]  # (c * mult, 1, kh, kw)
        _, _, kh, kw = value.shape
        return value.reshape(c, -1, kh, kw).transpose(2, 3, 0, 1).reshape(kh * kw * c, -1)
    if op["op"] == "BatchNormalization" and flat_from:  # on a flattened image
        back = np.empty_like(value)
        back[nhwc_rows(flat_from)] = value
        return back
    return value


def image_before_flatten(spec: dict, op: dict) -> list[int] | None:
    """The image shape a Dense's or BatchNormalization's flat input was flattened from
    (through Flatten / Dropout / Activation / BatchNormalization), for this test's models."""
    t = op["inputs"][0]
    while t > 0:
        src = spec["ops"][t - 1]
        if src["in_shape"][0] * src["in_shape"][1] > 1 and src["op"] == "Flatten":
            return src["in_shape"]
        if src["op"] not in ("Flatten", "Dropout", "Activation", "BatchNormalization"):
            return None
        t = src["inputs"][0]
    return None


# ---- the tests ---------------------------------------------------------------------------

# Depthwise convolution, batch normalization on images and on a flattened image, and a
# strided "same" convolution (its padding uneven: none above, one row below).
BN_DW_MODEL = {
    "name": "bn_dw", "input_shape": [28, 28, 1],
    "layers": [
        {"type": "Conv2D", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same"},
        {"type": "BatchNormalization", "momentum": 0.9},
        {"type": "ReLU"},
        {"type": "DepthwiseConv2D", "kernel_size": 3, "depth_multiplier": 2, "padding": "same",
         "activation": "relu"},
        {"type": "MaxPooling2D", "pool_size": 2},
        {"type": "Flatten"},
        {"type": "BatchNormalization", "momentum": 0.9},
        {"type": "Dropout", "rate": 0.1},
        {"type": "Dense", "units": 10}],
    "loss": "sparse_categorical_crossentropy", "from_logits": True,
    "optimizer": {"name": "adam", "learning_rate": 0.002}, "batch_size": 64}


# SeparableConv2D (strided "same", a depth multiplier, with and without a bias) and a
# squeeze-and-excitation-like head: GlobalAveragePooling2D(keepdims=True), a 1x1 Conv2D.
SEPARABLE_MODEL = {
    "name": "separable", "input_shape": [28, 28, 1],
    "layers": [
        {"type": "Conv2D", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same",
         "activation": "relu"},
        {"type": "SeparableConv2D", "filters": 16, "kernel_size": 3, "strides": 2,
         "padding": "same", "depth_multiplier": 2, "activation": "relu"},
        {"type": "SeparableConv2D", "filters": 16, "kernel_size": 3, "use_bias": False,
         "activation": "relu"},
        {"type": "GlobalAveragePooling2D", "keepdims": True},
        {"type": "Conv2D", "filters": 10, "kernel_size": 1},
        {"type": "Flatten"}],
    "loss": "sparse_categorical_crossentropy", "from_logits": True,
    "optimizer": {"name": "adam", "learning_rate": 0.005}, "batch_size": 64}
WRITTEN = {"bn_dw.json": BN_DW_MODEL, "separable.json": SEPARABLE_MODEL}


def train(workdir: Path, model: str, steps: int, extra: list[str] = ()) -> subprocess.CompletedProcess:
    root = Path(env_path("PS_SOURCE_ROOT"))
    if model in WRITTEN:
        (workdir / model).write_text(json.dumps(WRITTEN[model]))
    path = workdir / model if model in WRITTEN else root / "examples" / model
    return subprocess.run(
        [env_path("PSWORKER"), "--model", str(path), "--data", str(FASHION),
         "--no-ps", "yes", "--epochs", "1", "--max-steps", str(steps), "--seed", "7",
         "--progress", "none", *extra],
        cwd=workdir, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


@pytest.mark.parametrize("model,steps,max_train", [("mlp.json", 300, 19200),
                                                   ("fashion_cnn.json", 100, 6400),
                                                   ("bn_dw.json", 150, 9600),
                                                   ("separable.json", 300, 19200),
                                                   # a Keras functional model: Add, GAP
                                                   ("residual_cnn.json", 600, 38400)])
def test_export_matches_saved_model_and_torch(safetensors_numpy, workdir: Path, model: str,
                                              steps: int, max_train: int) -> None:
    if not (FASHION / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"no Fashion-MNIST at {FASHION}")
    r = train(workdir, model, steps, ["--max-train", str(max_train), "--save", "m.pstf",
                                      "--export", "m.safetensors", "--summary", "s.json"])
    assert r.returncode == 0, r.stderr
    saved = read_pstf(workdir / "m.pstf")
    spec = json.loads((workdir / "m.model.json").read_text())
    header, _ = read_header(workdir / "m.safetensors")
    meta = header["__metadata__"]
    assert meta["ps_export"] == "1" and meta["model_json"] == "m.model.json"
    assert spec["format"] == "ps-model-export" and spec["weights"] == "m.safetensors"
    loaded = safetensors_numpy.load_file(str(workdir / "m.safetensors"))
    assert set(loaded) == set(header) - {"__metadata__"}

    # every saved variable exactly once, with the same bits after undoing the layout
    seen = []
    for op in spec["ops"]:
        for param, p in op.get("params", {}).items():
            value = loaded[p["name"]]
            if param == "num_batches_tracked":  # torch's, not the model's: an I64 zero
                assert "project" not in p and value.dtype == np.int64 and value.shape == ()
                assert int(value) == 0
                continue
            assert list(value.shape) == p["shape"] and value.dtype == np.float32
            assert meta["ps_name." + p["name"]] == p["project"]
            back = project_value(op, param, value, image_before_flatten(spec, op))
            want = saved[p["project"]]
            assert back.shape == want.shape, p["name"]
            assert np.array_equal(back.view(np.uint32), want.view(np.uint32)), p["name"]
            seen.append(p["project"])
    assert sorted(seen) == sorted(saved)
    if model == "fashion_cnn.json":  # the Dense after Flatten is the one in NCHW order
        assert [op["in_nchw_order"] for op in spec["ops"] if op["op"] == "Dense"] == [True, False]

    summary = json.loads((workdir / "s.json").read_text())
    images = read_idx_gz(FASHION / "t10k-images-idx3-ubyte.gz")
    labels = read_idx_gz(FASHION / "t10k-labels-idx1-ubyte.gz")
    assert len(labels) == 10000
    acc = torch_accuracy(spec, workdir / "m.safetensors", images, labels)
    # well above chance (0.1): the model learned, so the check below means something
    assert summary["test_accuracy"] > 0.3
    assert abs(acc - summary["test_accuracy"]) <= ACCURACY_TOLERANCE, (acc, summary["test_accuracy"])


@pytest.mark.parametrize("target", ["no-such-dir/m.safetensors", "taken.safetensors"])
def test_export_failure_leaves_nothing(workdir: Path, target: str) -> None:
    """A directory that does not exist, and a path that is a directory (the rename fails
    after the model JSON's: it is taken back): exit 1, a message, no file left."""
    (workdir / "taken.safetensors").mkdir()
    before = sorted(p.name for p in workdir.iterdir())
    r = train(workdir, "mlp.json", 5, ["--max-train", "640", "--max-test", "100",
                                       "--export", target])
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"--export {target}: cannot write" in r.stderr, r.stderr
    assert sorted(p.name for p in workdir.iterdir()) == before
    assert not any((workdir / "taken.safetensors").iterdir())
