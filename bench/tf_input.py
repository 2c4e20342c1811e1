"""tf.data's records/s on a folder of JPEGs, decoded and augmented as
bench/input_pipeline.sh asks psctl data bench to: tf.io.read_file,
tf.io.decode_jpeg (3 channels), tf.image.resize to SIZE (bilinear),
tf.image.random_crop to CROP, tf.image.random_flip_left_right, / 255, batched.
TensorFlow's own thread pools are limited to THREADS (inter and intra op) and
the map runs with num_parallel_calls THREADS, so THREADS cores do the work.
usage: tf_input.py DIR THREADS [SIZE CROP BATCH]; prints one JSON line."""
import glob
import json
import os
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

folder, threads = sys.argv[1], int(sys.argv[2])
size = int(sys.argv[3]) if len(sys.argv) > 3 else 240
crop = int(sys.argv[4]) if len(sys.argv) > 4 else 224
batch = int(sys.argv[5]) if len(sys.argv) > 5 else 32
tf.config.threading.set_inter_op_parallelism_threads(threads)
tf.config.threading.set_intra_op_parallelism_threads(threads)
files = sorted(glob.glob(f"{folder}/*/*.jpg"))


def load(path):
    img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    img = tf.image.resize(img, [size, size])
    img = tf.image.random_crop(img, [crop, crop, 3])
    img = tf.image.random_flip_left_right(img)
    return img / 255.0


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run():
    ds = tf.data.Dataset.from_tensor_slices(files).map(load, num_parallel_calls=threads)
    ds = ds.batch(batch).prefetch(2)
    n = 0
    t0, c0 = time.perf_counter(), cpu()
    for b in ds:
        n += int(b.shape[0])
    return n, time.perf_counter() - t0, cpu() - c0


run()  # warm: the files in the page cache, the graph traced
n, secs, cpus = run()
print(json.dumps({"peer": "tf.data", "tensorflow": tf.__version__, "threads": threads,
                  "records": n, "seconds": round(secs, 3),
                  "records_per_sec": round(n / secs, 1),
                  "per_thread": round(n / secs / threads, 1),
                  "cpu_seconds": round(cpus, 3), "per_cpu_second": round(n / cpus, 1)}))
