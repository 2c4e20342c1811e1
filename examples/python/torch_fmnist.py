#!/usr/bin/python3
"""Fashion-MNIST with the project's default MLP (examples/mlp.json) in plain PyTorch.

784-128(relu)-10 logits, sparse categorical cross-entropy, Adam lr 0.001, batch 64.
It is a normal single-process PyTorch script; the two lines marked "# ps:" make it
a worker of a psd job (the update runs on the psd shards):

    psctl local --ps 2 --workers 2 --mode sync \\
        --worker-cmd 'python3 examples/python/torch_fmnist.py --epochs 2'

psctl sets TF_CONFIG for each worker: the shards, this worker's index and the number
of workers. Worker i of n trains on its 1/n of the training set (pst.rank(),
pst.size()), a share drawn anew each epoch from a permutation every worker makes
from the same --seed; every worker takes the same steps per epoch, as a sync job
needs. A restarted worker resumes where the job is (the optimizer's clock: epoch and
step within it). A psd shard that restarts from its checkpoint costs one step's
gradients (the ps package warns and goes on).

Without TF_CONFIG the script says so in one line and trains alone with the torch
optimizer, as the same script without its "# ps:" lines would.

Output (Keras-like, per epoch): "Epoch 1/2", then "938/938 - 5s - loss: 0.5123 -
accuracy: 0.8210" (the means over this worker's batches); at the end "test loss: ...
- test accuracy: ..." on the 10,000 test images with the final parameters.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

import fmnist_data
import ps.torch as pst  # ps: the job's shards and this worker's place in it (TF_CONFIG)


def parse_args():
    p = argparse.ArgumentParser(description="Fashion-MNIST MLP in PyTorch; a psd job's "
                                "worker under psctl local --worker-cmd (TF_CONFIG).")
    p.add_argument("--epochs", type=int, default=2, help="epochs (default 2)")
    p.add_argument("--batch", type=int, default=64, help="batch size per worker (default 64)")
    p.add_argument("--data", default=fmnist_data.DEFAULT_DIR,
                   help="directory of the *-idx?-ubyte.gz files (default %(default)s)")
    p.add_argument("--seed", type=int, default=1,
                   help="initial weights and the per-epoch shuffle; the same on every worker "
                   "(default 1)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads (default 1)")
    args = p.parse_args()
    for name in ("epochs", "batch", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    try:
        x, y = (torch.from_numpy(a) for a in fmnist_data.load("train", args.data))
        x_test, y_test = (torch.from_numpy(a) for a in fmnist_data.load("test", args.data))
    except fmnist_data.DataError as e:
        print(f"torch_fmnist: {e}", file=sys.stderr)
        sys.exit(2)  # bad configuration: psctl does not restart it

    distributed = "TF_CONFIG" in os.environ
    if not distributed:
        print("torch_fmnist: TF_CONFIG is not set: training alone, locally "
              "(psctl local --worker-cmd runs it as a psd job's worker)", flush=True)
    rank, size = (pst.rank(), pst.size()) if distributed else (0, 1)
    steps = fmnist_data.steps_per_epoch(len(x), size, args.batch)

    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    for layer in (model[0], model[2]):  # Keras's (and psworker's) initialisers
        nn.init.xavier_uniform_(layer.weight)
        nn.init.zeros_(layer.bias)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001, eps=1e-7)  # Keras's epsilon
    if distributed:
        optimizer = pst.DistributedOptimizer(optimizer, model.named_parameters(), total_steps=steps * args.epochs)  # ps:

    # A restarted worker carries on at the job's step (0 for a new job or a plain optimizer).
    done = min(getattr(optimizer, "clock", 0), steps * args.epochs)
    if done:
        print(f"resuming at epoch {done // steps + 1}, step {done % steps} of {steps}", flush=True)
    progress = fmnist_data.Progress(args.epochs, steps)
    for epoch in range(done // steps, args.epochs):
        first = done % steps if epoch == done // steps else 0
        progress.begin(epoch)
        model.train()
        for idx in fmnist_data.batches(len(x), rank, size, args.batch, epoch, args.seed, first):
            idx = torch.from_numpy(idx)
            xb, yb = x[idx], y[idx]
            optimizer.zero_grad()
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            loss.backward()
            optimizer.step()
            progress.add(loss.item(), (logits.argmax(1) == yb).sum().item(), len(yb))
        progress.end()

    model.eval()
    with torch.no_grad():
        logits = model(x_test)
        loss = F.cross_entropy(logits, y_test).item()
        accuracy = (logits.argmax(1) == y_test).float().mean().item()
    print(f"test loss: {loss:.4f} - test accuracy: {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
