"""Fashion-MNIST for the Python examples: the IDX files, one worker's share, progress.

    x, y = load("train")                       # float32 (60000, 784) in [0, 1], int64 labels
    steps = steps_per_epoch(len(x), size, 64)  # the same on every worker of the job
    for epoch ...:
        for idx in batches(len(x), rank, size, 64, epoch, seed): ...

The files are Debian's (apt-get install dataset-fashion-mnist), or any directory
holding the four files under their usual names (plain or .gz). No torch here: both
examples use it.
"""
from __future__ import annotations

import gzip
import os
import sys
import time

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


class DataError(Exception):
    """The dataset is missing or malformed (the message says what to do)."""


def _open(directory: str, name: str):
    for path, opener in ((os.path.join(directory, name + ".gz"), gzip.open),
                         (os.path.join(directory, name), open)):
        if os.path.exists(path):
            return path, opener(path, "rb")
    raise DataError(f"{os.path.join(directory, name)}[.gz] not found: Fashion-MNIST is in "
                    f"Debian's package (apt-get install dataset-fashion-mnist), or give --data "
                    f"DIR holding the four *-idx?-ubyte[.gz] files")


def read_idx(directory: str, name: str) -> np.ndarray:
    """An IDX file (unsigned bytes) as an array of its shape."""
    path, f = _open(directory, name)
    with f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataError(f"{path}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    head = 4 + 4 * ndim
    if len(raw) < head:
        raise DataError(f"{path}: truncated header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    if len(raw) - head != int(np.prod(shape)):
        raise DataError(f"{path}: {len(raw) - head} bytes of data for shape {shape}")
    return np.frombuffer(raw, dtype=np.uint8, offset=head).reshape(shape)


def load(split: str, directory: str = DEFAULT_DIR) -> tuple[np.ndarray, np.ndarray]:
    """("train" or "test") -> (x float32 (n, 784) = pixels / 255, y int64 (n,))."""
    images, labels = (read_idx(directory, n) for n in FILES[split])
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise DataError(f"{directory}: {split} images {images.shape} and labels "
                        f"{labels.shape} do not match")
    x = images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255)
    return x, labels.astype(np.int64)


def steps_per_epoch(n: int, size: int, batch: int) -> int:
    """A worker's steps per epoch: its share is floor(n / size) examples (the same for
    every worker, as a sync job needs), in batches of `batch`, the last one partial."""
    share = n // size
    if share == 0:
        raise ValueError(f"{n} examples cannot be shared by {size} workers")
    return (share + batch - 1) // batch


def batches(n: int, rank: int, size: int, batch: int, epoch: int, seed: int,
            first_step: int = 0):
    """The index arrays of worker `rank`'s batches in `epoch`, from `first_step` on.

    Each epoch the whole set is shuffled with (seed, epoch), the same permutation on
    every worker; worker `rank` takes its floor(n / size) slice of it. So the workers'
    shares never overlap, change every epoch, and a restarted worker finds the same
    batches again."""
    share = n // size
    order = np.random.default_rng([seed, epoch]).permutation(n)[rank * share:(rank + 1) * share]
    for s in range(first_step, steps_per_epoch(n, size, batch)):
        yield order[s * batch:(s + 1) * batch]


class Progress:
    """Keras-like lines: "Epoch 1/2", then "938/938 - 5s - loss: 0.5123 - accuracy: 0.8210"
    (the means over this worker's batches of the epoch)."""

    def __init__(self, epochs: int, steps: int, out=sys.stdout) -> None:
        self.epochs, self.steps, self.out = epochs, steps, out

    def begin(self, epoch: int) -> None:
        print(f"Epoch {epoch + 1}/{self.epochs}", file=self.out, flush=True)
        self.t0 = time.monotonic()
        self.loss = 0.0
        self.correct = 0
        self.seen = 0

    def add(self, loss: float, correct: int, count: int) -> None:
        """One batch: its mean loss, how many it got right, its size."""
        self.loss += loss * count
        self.correct += correct
        self.seen += count

    def end(self) -> None:
        """The epoch's line (a worker that joined mid-epoch shows the batches it did)."""
        dt = time.monotonic() - self.t0
        seen = max(self.seen, 1)
        print(f"{self.steps}/{self.steps} - {dt:.0f}s - loss: {self.loss / seen:.4f} - "
              f"accuracy: {self.correct / seen:.4f}", file=self.out, flush=True)
