#!/usr/bin/python3
"""PyTorch over psd (ps.torch.DistributedOptimizer) on the project's default MLP, for
bench/torch_ps_vs_ddp.sh: one worker process of a job whose cluster comes from
TF_CONFIG (the script starts the psd shards and sets it per worker). The same
model (784-128-10, ReLU, logits), loss (cross-entropy), optimizer (Adam, lr 0.001:
its settings go to psd, which applies it), data (Fashion-MNIST IDX files, pixels /
255), per-process batch (64), sharding (worker i of n trains on its 1/n of the
training set, reshuffled every epoch) and seeds as bench/ddp_mlp.py.

The chief (worker 0) prints one JSON line as ddp_mlp.py does: samples_per_sec
job-wide (all workers' samples over its training time, start-up and data loading
excluded), the test accuracy after training, and where its step time went
(fwd_bwd: zero_grad, forward, loss, backward; exchange: the optimizer's step, i.e.
the PushPull round trips; data: batch indexing), each in ms per step. Run with
Debian's python3-torch (/usr/bin/python3); one thread per process."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_mlp import load  # noqa: E402  (the same IDX reader and scaling)

import ps.torch as pst  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="per process")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--profile", metavar="FILE", help="cProfile the training loop into FILE")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rank, procs = pst.rank(), pst.size()
    x, y = load(args.data, "train")
    shard = torch.arange(rank, x.shape[0], procs)  # 1/n of the set each
    x, y = x[shard].contiguous(), y[shard].contiguous()
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    opt = pst.DistributedOptimizer(opt, model.named_parameters())  # joins the job
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    n = x.shape[0]
    # The job's first step is its barrier (sync: it closes once every worker has joined
    # and pushed): the clock starts after it and its samples are not counted, as
    # ddp_mlp.py starts after dist.barrier().
    barrier = True
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
    train_secs, samples, steps = 0.0, 0, 0
    t_data = t_fb = t_ex = 0.0
    clock = time.perf_counter
    for _ in range(args.epochs):
        order = torch.randperm(n, generator=gen)
        if prof:
            prof.enable()
        t0 = clock()
        for i in range(0, n, args.batch):
            a = clock()
            idx = order[i:i + args.batch]
            xb, yb = x[idx], y[idx]
            b = clock()
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            c = clock()
            opt.step()
            d = clock()
            if barrier:
                barrier = False
                t0 = clock()
                continue
            t_data += b - a
            t_fb += c - b
            t_ex += d - c
            steps += 1
            samples += idx.shape[0] * procs
        train_secs += clock() - t0
        if prof:
            prof.disable()
    if prof:
        prof.dump_stats(args.profile)
    opt.finish()
    if rank == 0:
        tx, ty = load(args.data, "t10k")
        with torch.no_grad():
            acc = (model(tx).argmax(1) == ty).float().mean().item()
        ms = 1e3 / steps
        print(json.dumps({
            "samples_per_sec": samples / train_secs, "train_seconds": train_secs,
            "test_accuracy": acc, "procs": procs, "batch": args.batch, "epochs": args.epochs,
            "torch": torch.__version__, "steps": steps,
            "ms_per_step": {"total": train_secs * ms, "data": t_data * ms,
                            "fwd_bwd": t_fb * ms, "exchange": t_ex * ms}}), flush=True)


if __name__ == "__main__":
    main()
