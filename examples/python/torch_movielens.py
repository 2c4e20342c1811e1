#!/usr/bin/python3
"""Matrix factorisation with biases on MovieLens-style ratings, in plain PyTorch with
sparse embeddings held as psd tables.

    rating(u, i) ~ <user[u], item[i]> + user_bias[u] + item_bias[i] + mean

user and item are nn.Embedding(sparse=True) of --dim values, the biases nn.Embedding of
dim 1, mean a learned scalar started at the training ratings' mean; squared error, the
optimizer Adagrad (--lr). The data is a tab-separated file with the header
"user_id:token<TAB>item_id:token<TAB>rating:float<TAB>timestamp:float" (RecBole's .inter
form of MovieLens); the ids are any tokens, remapped to dense indices here. A seeded
(--seed) 90/10 split of the ratings gives the training and the test set.

It is a normal single-process PyTorch script; the lines marked "# ps:" make it a worker of
a psd job, where the four embeddings are tables (each step pulls the rows of the batch's
users and items and pushes their gradient rows; no table is ever moved whole) and the
mean is a dense variable:

    psctl local --ps 2 --workers 2 --mode sync \\
        --worker-cmd 'python3 examples/python/torch_movielens.py --data ml-100k.inter'

Worker i of n trains on its 1/n of each epoch's shuffle (the same permutation on every
worker, from --seed); every worker takes the same steps per epoch, as a sync job needs.
Without TF_CONFIG it says so and trains alone with the torch optimizer.

Output: "Epoch 1/10 - 123 steps - train rmse: 1.0521" per epoch (this worker's batches),
then "test rmse: 0.9312" with the final parameters.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
from torch import nn

import ps.torch as pst  # ps: the job's shards and this worker's place in it (TF_CONFIG)

HEADER = ["user_id:token", "item_id:token", "rating:float", "timestamp:float"]


def parse_args():
    p = argparse.ArgumentParser(description="Matrix factorisation with biases on a "
                                "MovieLens-style TSV in PyTorch; a psd job's worker under "
                                "psctl local --worker-cmd (TF_CONFIG).")
    p.add_argument("--data", required=True, help="the ratings: a TSV with the header "
                   + "\\t".join(HEADER))
    p.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    p.add_argument("--batch", type=int, default=256, help="batch size per worker (default 256)")
    p.add_argument("--dim", type=int, default=16, help="factors per user and item (default 16)")
    p.add_argument("--lr", type=float, default=0.05, help="Adagrad's learning rate "
                   "(default 0.05)")
    p.add_argument("--seed", type=int, default=1,
                   help="the split, the per-epoch shuffle and the local initial values; the "
                   "same on every worker (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    args = p.parse_args()
    for name in ("epochs", "batch", "dim", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if not args.lr > 0:
        p.error("--lr must be > 0")
    return args


class DataError(Exception):
    pass


def load(path):
    """(users, items, ratings): the ids as int64 dense indices (their tokens' sorted order)
    and the ratings as float32. DataError for a missing file or a bad line."""
    try:
        with open(path, encoding="utf-8") as f:
            header = f.readline().rstrip("\r\n").split("\t")
            if header[:3] != HEADER[:3]:
                raise DataError(f"{path}: header {header!r}, want {HEADER!r}")
            users, items, ratings = [], [], []
            for n, line in enumerate(f, start=2):
                cols = line.rstrip("\r\n").split("\t")
                if cols == [""]:
                    continue
                if len(cols) < 3:
                    raise DataError(f"{path}:{n}: {len(cols)} columns, want {len(HEADER)}")
                try:
                    r = float(cols[2])
                except ValueError:
                    raise DataError(f"{path}:{n}: rating {cols[2]!r} is not a number") from None
                users.append(cols[0])
                items.append(cols[1])
                ratings.append(r)
    except OSError as e:
        raise DataError(f"{path}: {e.strerror}") from None
    if not ratings:
        raise DataError(f"{path}: no ratings")
    _, u = np.unique(np.array(users), return_inverse=True)  # sorted tokens: every worker's
    _, i = np.unique(np.array(items), return_inverse=True)
    return u.astype(np.int64), i.astype(np.int64), np.array(ratings, np.float32)


class MF(nn.Module):
    def __init__(self, n_users, n_items, dim, mean):
        super().__init__()
        self.user = nn.Embedding(n_users, dim, sparse=True)
        self.item = nn.Embedding(n_items, dim, sparse=True)
        self.user_bias = nn.Embedding(n_users, 1, sparse=True)
        self.item_bias = nn.Embedding(n_items, 1, sparse=True)
        self.mean = nn.Parameter(torch.tensor([mean], dtype=torch.float32))
        for e in (self.user, self.item, self.user_bias, self.item_bias):
            nn.init.uniform_(e.weight, -0.05, 0.05)  # psd's tables start so (Keras's)

    def forward(self, u, i):
        dot = (self.user(u) * self.item(i)).sum(1)
        return dot + self.user_bias(u).squeeze(1) + self.item_bias(i).squeeze(1) + self.mean


def rmse(model, u, i, r):
    with torch.no_grad():
        return math.sqrt(torch.mean((model(u, i) - r) ** 2).item())


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    try:
        users, items, ratings = load(args.data)
    except DataError as e:
        print(f"torch_movielens: {e}", file=sys.stderr)
        sys.exit(2)  # bad configuration: psctl does not restart it
    perm = np.random.default_rng(args.seed).permutation(len(ratings))
    n_test = max(1, len(ratings) // 10)
    test, train = perm[:n_test], perm[n_test:]
    u, i, r = (torch.from_numpy(a) for a in (users, items, ratings))

    distributed = "TF_CONFIG" in os.environ
    if not distributed:
        print("torch_movielens: TF_CONFIG is not set: training alone, locally "
              "(psctl local --worker-cmd runs it as a psd job's worker)", flush=True)
    rank, size = (pst.rank(), pst.size()) if distributed else (0, 1)
    share = len(train) // size
    if share == 0:
        print(f"torch_movielens: {len(train)} training ratings for {size} workers",
              file=sys.stderr)
        sys.exit(2)
    steps = math.ceil(share / args.batch)

    model = MF(int(users.max()) + 1, int(items.max()) + 1, args.dim,
               float(ratings[train].mean()))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    if distributed:
        optimizer = pst.DistributedOptimizer(optimizer, model=model, total_steps=steps * args.epochs)  # ps:

    # A restarted worker carries on at the job's step (0 for a new job or a plain optimizer).
    done = min(getattr(optimizer, "clock", 0), steps * args.epochs)
    if done:
        print(f"resuming at epoch {done // steps + 1}, step {done % steps} of {steps}", flush=True)
    for epoch in range(done // steps, args.epochs):
        first = done % steps if epoch == done // steps else 0
        order = np.random.default_rng([args.seed, epoch]).permutation(train)
        mine = order[rank * share:(rank + 1) * share]
        sq, n = 0.0, 0
        for s in range(first, steps):
            idx = torch.from_numpy(mine[s * args.batch:(s + 1) * args.batch])
            optimizer.zero_grad()
            err = model(u[idx], i[idx]) - r[idx]
            loss = torch.mean(err ** 2)
            loss.backward()
            optimizer.step()
            sq += loss.item() * len(idx)
            n += len(idx)
        print(f"Epoch {epoch + 1}/{args.epochs} - {steps} steps - train rmse: "
              f"{math.sqrt(sq / max(n, 1)):.4f}", flush=True)

    test_t = torch.from_numpy(test)
    print(f"test rmse: {rmse(model, u[test_t], i[test_t], r[test_t]):.4f}", flush=True)


if __name__ == "__main__":
    main()
