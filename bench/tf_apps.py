"""TensorFlow's side of bench/apps_speed.sh: training samples/s of a keras.applications
network (weights=None, 10 classes) in one process, Keras 3 (on TensorFlow) or tf_keras
(Keras 2), with TensorFlow's default thread pools or one thread each. Fashion-MNIST
images resized to the network's input (bilinear) and repeated to 3 channels, Adam 1e-3,
sparse categorical cross-entropy; WARMUP steps first (tracing), then STEPS timed.
Prints one JSON line.

usage: tf_apps.py NETWORK --keras 3|2 --threads 0|1 [--batch 64] [--steps 40]
       [--warmup 10] [--data DIR]"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np

# name: (constructor, input side, kwargs): as tests/fixtures/keras/make_apps_networks.py
NETWORKS = {
    "MobileNet": ("MobileNet", 32, {"alpha": 0.25}),
    "MobileNetV2": ("MobileNetV2", 32, {"alpha": 0.35}),
    "MobileNetV3Small": ("MobileNetV3Small", 32, {"alpha": 0.75}),
    "MobileNetV3Large": ("MobileNetV3Large", 32, {"alpha": 0.75}),
    "ResNet50": ("ResNet50", 32, {}),
    "ResNet50V2": ("ResNet50V2", 32, {}),
    "DenseNet121": ("DenseNet121", 32, {}),
    "VGG16": ("VGG16", 32, {}),
    "Xception": ("Xception", 71, {}),
    "NASNetMobile": ("NASNetMobile", 32, {}),
    "EfficientNetB0": ("EfficientNetB0", 32, {}),
}


def images(data, n, side):
    with gzip.open(os.path.join(data, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16)[: n * 784]
    with gzip.open(os.path.join(data, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n].astype(np.int32)
    x = x.reshape(n, 28, 28, 1).astype(np.float32) / 255.0
    return x, y


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("network", choices=sorted(NETWORKS))
    ap.add_argument("--keras", choices=["3", "2"], required=True)
    ap.add_argument("--threads", type=int, choices=[0, 1], required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if a.keras == "2":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    if a.keras == "2":
        import tf_keras as keras
    else:
        os.environ["KERAS_BACKEND"] = "tensorflow"
        import keras
    ctor, side, kw = NETWORKS[a.network]
    model = getattr(keras.applications, ctor)(input_shape=(side, side, 3), weights=None,
                                              classes=10, **kw)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(
                      from_logits=model.layers[-1].get_config().get("activation") != "softmax"))
    n = a.batch * (a.steps + a.warmup)
    x, y = images(a.data, min(n, 60000), side)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
    ds = ds.map(lambda i, l: (tf.image.grayscale_to_rgb(tf.image.resize(i, (side, side))), l))
    ds = ds.batch(a.batch, drop_remainder=True).prefetch(4)
    times = []

    class Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            times.append(time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter())

    model.fit(ds, epochs=1, steps_per_epoch=a.warmup, verbose=0)
    model.fit(ds, epochs=1, steps_per_epoch=a.steps, verbose=0, callbacks=[Clock()])
    secs = times[1] - times[0]
    print(json.dumps({"side": "tensorflow", "network": a.network, "keras": a.keras,
                      "threads": "default" if not a.threads else a.threads, "batch": a.batch,
                      "steps": a.steps, "samples_per_sec": round(a.batch * a.steps / secs, 1),
                      "tf": tf.__version__}))


if __name__ == "__main__":
    sys.exit(main())
