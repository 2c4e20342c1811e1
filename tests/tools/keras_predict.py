"""Keras 3's predictions from psworker's --export FILE.keras and FILE.weights.h5,
compared with psworker --evaluate's --predictions on the same test samples
(tests/integration/keras_roundtrip.sh runs it in a venv holding keras and jax).

usage: keras_predict.py MODEL.keras MODEL.weights.h5 PREDICTIONS.f32 DATA_DIR N [TOL]
Exit 0 when every output is within TOL (default 1e-5) of psworker's, 1 otherwise."""
import gzip
import os
import struct
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np  # noqa: E402
import keras  # noqa: E402


def idx_images(data_dir):
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte"):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            raw = (gzip.open if name.endswith(".gz") else open)(path, "rb").read()
            nd = raw[3]
            dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
            return np.frombuffer(raw[4 + 4 * nd:], np.uint8).reshape(dims)
    sys.exit(f"keras_predict: no t10k images in {data_dir}")


def main():
    keras_file, weights, preds, data_dir, n = sys.argv[1:6]
    tol = float(sys.argv[6]) if len(sys.argv) > 6 else 1e-5
    n = int(n)
    model = keras.saving.load_model(keras_file)
    shape = tuple(model.input_shape[1:])
    x = (idx_images(data_dir)[:n].astype(np.float32) / 255.0).reshape((n,) + shape)
    want = np.fromfile(preds, "<f4").reshape(n, -1)
    worst = 0.0
    for what, m in (("load_model", model),
                    ("load_weights", keras.models.model_from_json(model.to_json()))):
        if what == "load_weights":
            m.load_weights(weights)
        got = np.asarray(m.predict(x, batch_size=256, verbose=0), np.float32)
        if got.shape != want.shape:
            print(f"{what}: Keras outputs {got.shape}, psworker's {want.shape}")
            return 1
        diff = float(np.max(np.abs(got - want)))
        worst = max(worst, diff)
        print(f"{keras_file}: {what}: {n} samples, largest difference {diff:.3g}")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
