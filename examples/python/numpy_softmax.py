#!/usr/bin/python3
"""Softmax regression (784 -> 10) on Fashion-MNIST in NumPy, trained through psd.

The model, its forward pass and its gradients are a few lines of NumPy; ps.Client
and ps.Worker do the rest: the parameter arrays W and b and their gradient arrays
dW and db are registered with the client by address, so Worker.step() sends dW and
db as they are and writes the new W and b in place (the SGD update runs on the psd
shards). Run it as a job's workers:

    psctl local --ps 2 --workers 2 --mode sync \\
        --worker-cmd 'python3 examples/python/numpy_softmax.py --epochs 1'

It needs TF_CONFIG (psctl local --worker-cmd sets it: the shards, this worker's index
and the number of workers) and says so when it is not set. Worker i of n trains on
its 1/n of the training set, drawn anew each epoch from a permutation every worker
makes from the same --seed; a restarted worker resumes at the job's step
(Worker.clock); a psd shard restarted from its checkpoint costs one step's gradients
(Worker.step warns and goes on). Output as torch_fmnist.py's: "Epoch 1/1", "469/469
- 1s - loss: ... - accuracy: ...", and at the end "test loss: ... - test accuracy:
..." on the 10,000 test images with the final parameters.
"""
import argparse
import os
import sys

import numpy as np

import fmnist_data
import ps


def parse_args():
    p = argparse.ArgumentParser(description="Fashion-MNIST softmax regression in NumPy, "
                                "a psd job's worker under psctl local --worker-cmd (TF_CONFIG).")
    p.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    p.add_argument("--batch", type=int, default=64, help="batch size per worker (default 64)")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    p.add_argument("--data", default=fmnist_data.DEFAULT_DIR,
                   help="directory of the *-idx?-ubyte.gz files (default %(default)s)")
    p.add_argument("--seed", type=int, default=1,
                   help="the per-epoch shuffle; the same on every worker (default 1)")
    args = p.parse_args()
    for name in ("epochs", "batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if not args.lr > 0:
        p.error("--lr must be positive")
    return args


def forward(W, b, x, y):
    """Mean cross-entropy, the softmax probabilities, how many are right."""
    logits = x @ W + b
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    loss = -logp[np.arange(len(y)), y].mean()
    return float(loss), np.exp(logp), int((logp.argmax(axis=1) == y).sum())


def gradients(probs, x, y, dW, db):
    """d(mean cross-entropy) into dW and db, in place (the client sends these arrays)."""
    delta = probs
    delta[np.arange(len(y)), y] -= 1
    delta /= len(y)
    np.matmul(x.T, delta, out=dW)
    np.sum(delta, axis=0, out=db)


def fail(message, status):
    """Exit statuses as psctl reads them: 2, bad configuration; 4, a shard lost the
    job's variables (neither is restarted)."""
    print(f"numpy_softmax: {message}", file=sys.stderr)
    sys.exit(status)


def main():
    args = parse_args()
    if "TF_CONFIG" not in os.environ:
        fail("TF_CONFIG is not set: run it as a psd job's worker, e.g. psctl local --ps 2 "
             "--workers 2 --mode sync --worker-cmd 'python3 numpy_softmax.py'", 2)
    try:
        x, y = fmnist_data.load("train", args.data)
        x_test, y_test = fmnist_data.load("test", args.data)
    except fmnist_data.DataError as e:
        fail(str(e), 2)

    W = np.zeros((784, 10), np.float32)  # the chief's values start the job
    b = np.zeros(10, np.float32)
    dW, db = np.zeros_like(W), np.zeros_like(b)

    with ps.Client.from_tf_config(timeout_ms=120000) as client:
        rank, size = client.worker_index, client.num_workers
        steps = fmnist_data.steps_per_epoch(len(x), size, args.batch)
        worker = ps.Worker(client, {"W": (W, dW), "b": (b, db)},
                           optimizer={"name": "sgd", "learning_rate": args.lr},
                           total_steps=steps * args.epochs)
        done = min(worker.clock, steps * args.epochs)  # the job's step: resume there
        if done:
            print(f"resuming at epoch {done // steps + 1}, step {done % steps} of {steps}",
                  flush=True)
        progress = fmnist_data.Progress(args.epochs, steps)
        for epoch in range(done // steps, args.epochs):
            first = done % steps if epoch == done // steps else 0
            progress.begin(epoch)
            for idx in fmnist_data.batches(len(x), rank, size, args.batch, epoch, args.seed,
                                           first):
                loss, probs, correct = forward(W, b, x[idx], y[idx])
                gradients(probs, x[idx], y[idx], dW, db)
                worker.step()  # dW, db out; W, b in (the values after the step)
                progress.add(loss, correct, len(idx))
            progress.end()
        worker.finish()

    loss, _, correct = forward(W, b, x_test, y_test)
    print(f"test loss: {loss:.4f} - test accuracy: {correct / len(y_test):.4f}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except ps.VariablesLostError as e:  # a psd restarted without a checkpoint
        fail(str(e), 4)
