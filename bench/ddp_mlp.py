#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) on the project's default MLP, for
bench/train_strategies.sh: the same model (784-128-10, ReLU, logits), loss
(cross-entropy), optimizer (Adam, lr 0.001), data (Fashion-MNIST IDX files,
pixels / 255), per-process batch (64) and sharding (process i of n trains on
its 1/n of the training set, reshuffled every epoch) as psworker.

Prints one JSON line: samples_per_sec job-wide (all processes' samples over
the training time, start-up and data loading excluded, as psworker's summary
counts it), plus the test accuracy after training. Run with Debian's
python3-torch (/usr/bin/python3); one thread per process (psworker's
--blas-threads 1 default)."""
import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8)
    return t.reshape(dims)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    sys.exit(f"ddp_mlp: no {stem}[.gz] in {data_dir}")


def load(data_dir, kind):
    x = read_idx(find(data_dir, f"{kind}-images-idx3-ubyte"))
    y = read_idx(find(data_dir, f"{kind}-labels-idx1-ubyte"))
    return x.reshape(x.shape[0], -1).float() / 255.0, y.long()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, args, port, out):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.procs)
    x, y = load(args.data, "train")
    shard = torch.arange(rank, x.shape[0], args.procs)  # 1/n of the set each
    x, y = x[shard].contiguous(), y[shard].contiguous()
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=0.001)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    n = x.shape[0]
    dist.barrier()
    train_secs, samples = 0.0, 0
    for _ in range(args.epochs):
        order = torch.randperm(n, generator=gen)
        t0 = time.perf_counter()
        for i in range(0, n, args.batch):
            idx = order[i:i + args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
            samples += idx.shape[0] * args.procs
        train_secs += time.perf_counter() - t0
    if rank == 0:
        tx, ty = load(args.data, "t10k")
        with torch.no_grad():
            acc = (model(tx).argmax(1) == ty).float().mean().item()
        out.put({"samples_per_sec": samples / train_secs, "train_seconds": train_secs,
                 "test_accuracy": acc, "procs": args.procs, "batch": args.batch,
                 "epochs": args.epochs, "torch": torch.__version__})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="per process")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=run, args=(r, args, port, out)) for r in range(args.procs)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    if any(pr.exitcode != 0 for pr in procs):
        sys.exit("ddp_mlp: a process failed")
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
