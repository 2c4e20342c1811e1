#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) on the click model: the PyTorch peer of
the project's click benchmark.

The model, the data and the optimizer are the project's click model's:
  input    the 26 categorical fields' row indices into ONE embedding table of
           V + 1 rows x 16 (every (field, id) pair of the training file, row 0
           for unseen test ids; see bench/clicks_data.py), looked up with
           nn.EmbeddingBag(V + 1, 16, mode="sum", sparse=True) with one index
           per bag (input [B * 26, 1]), flattened to 416 and concatenated with
           log1p of the 13 counts -> 429
  layers   Dense 64 relu, Dense 32 relu, Dense 1 sigmoid (trained on the logit
           with BCEWithLogitsLoss, the same loss as sigmoid + binary
           cross-entropy); embedding init uniform(-0.05, 0.05), Linear weights
           Glorot uniform, biases zero
  optim    torch.optim.Adagrad over all parameters, lr 0.05,
           initial_accumulator_value 0.1, eps 1e-7; torch adds eps outside
           the square root (var -= lr * g / (sqrt(acc) + eps)) as Keras 2's
           Adagrad does. The embedding's gradient is sparse: DDP all-reduces
           it as a sparse tensor (gloo's sparse allreduce: an allgather of
           every rank's indices and values, then a sum) and Adagrad updates
           only the rows in it.
  data     --workers processes (default 2) x 1 thread on 127.0.0.1, each with
           --batch rows per step (default 256; global batch 512) from its own
           shard of the training rows (rows w, w + W, ...), shuffled each
           epoch with the seed (clicks_data.epoch_order)

Rank 0 evaluates the test AUC (exact ROC AUC) after training. samples/s counts
both processes' samples over the training loop's wall time after the first
--warmup steps (the files are read, the vocabulary built and the process group
and model set up before). One JSON line on stdout, progress on stderr.

Run with Debian's python3-torch: /usr/bin/python3 bench/torch_clicks.py ...
"""
import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clicks_data  # noqa: E402

EMBED_DIM = 16


def log(msg):
    print(f"torch_clicks: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    clicks_data.add_common_args(ap, "DDP processes (2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (1)")
    ap.add_argument("--warmup", type=int, default=20,
                    help="steps left out of samples/s (20)")
    args = ap.parse_args(argv)
    if min(args.epochs, args.batch, args.workers, args.threads) < 1 or args.warmup < 0:
        ap.error("--epochs, --batch, --workers and --threads must be positive, --warmup >= 0")
    return args


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(torch, vocab_rows):
    nn = torch.nn

    class ClickModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.EmbeddingBag(vocab_rows + 1, EMBED_DIM, mode="sum", sparse=True)
            self.mlp = nn.Sequential(
                nn.Linear(clicks_data.CATEGORICAL * EMBED_DIM + clicks_data.NUMERIC, 64),
                nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
            nn.init.uniform_(self.embedding.weight, -0.05, 0.05)
            for m in self.mlp:
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    nn.init.zeros_(m.bias)

        def forward(self, cat, dense):
            b = cat.shape[0]
            e = self.embedding(cat.reshape(-1, 1)).reshape(b, -1)   # one index per bag
            return self.mlp(torch.cat([e, dense], dim=1)).squeeze(1)  # the logit

    return ClickModel()


def worker(rank, args, port, datadir, meta, out):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.workers)
    W = args.workers
    cat = torch.from_numpy(np.load(os.path.join(datadir, "train_cat.npy")).astype(np.int64))
    dense = torch.from_numpy(np.load(os.path.join(datadir, "train_dense.npy")))
    label = torch.from_numpy(np.load(os.path.join(datadir, "train_label.npy")))
    n = label.shape[0]
    model = build_model(torch, meta["vocab_rows"])
    ddp = DDP(model)       # broadcasts rank 0's parameters
    opt = torch.optim.Adagrad(ddp.parameters(), lr=args.lr, initial_accumulator_value=0.1,
                              eps=1e-7)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    steps = clicks_data.steps_per_epoch(n, W, args.batch)
    total = steps * args.epochs
    if total <= args.warmup:
        raise SystemExit(f"torch_clicks: {total} steps, not more than --warmup {args.warmup}")
    orders = [torch.from_numpy(clicks_data.epoch_order(n, W, rank, e, args.seed))
              for e in range(args.epochs)]
    checked_sparse = None
    dist.barrier()
    t0 = time.perf_counter()
    t_warm = None
    lo_warm = None
    cpu_warm = time.process_time()
    step = 0
    epoch_loss = 0.0
    report = max(1, total // 10)
    for e in range(args.epochs):
        epoch_loss = 0.0
        order = orders[e]
        for s in range(steps):
            idx = order[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(cat[idx], dense[idx]), label[idx])
            loss.backward()
            if checked_sparse is None:
                g = model.embedding.weight.grad
                checked_sparse = {"embedding_grad_is_sparse": bool(g.is_sparse),
                                  "embedding_grad_rows_step1": int(g.coalesce().indices().shape[1])
                                  if g.is_sparse else None}
            opt.step()
            epoch_loss += loss.item()
            step += 1
            if step == args.warmup:
                t_warm = time.perf_counter()
                lo_warm = clicks_data.loopback_bytes()
                cpu_warm = time.process_time()
            if rank == 0 and (step % report == 0 or step == total):
                el = time.perf_counter() - t0
                log(f"step {step}/{total} epoch {e + 1} loss {epoch_loss / (s + 1):.4f} "
                    f"{step * args.batch * W / el:.0f} samples/s so far")
    t_end = time.perf_counter()
    lo_end = clicks_data.loopback_bytes()
    cpu = torch.tensor([time.process_time() - cpu_warm], dtype=torch.float64)
    dist.all_reduce(cpu)
    if t_warm is None:
        t_warm = t0
    # the last epoch's mean batch loss over both workers (what Keras logs as an epoch's loss)
    lt = torch.tensor([epoch_loss / steps])
    dist.all_reduce(lt)
    if rank == 0:
        model.eval()
        tc = torch.from_numpy(np.load(os.path.join(datadir, "test_cat.npy")).astype(np.int64))
        td = torch.from_numpy(np.load(os.path.join(datadir, "test_dense.npy")))
        ty = np.load(os.path.join(datadir, "test_label.npy"))
        preds = []
        with torch.no_grad():
            for a in range(0, tc.shape[0], 8192):
                preds.append(torch.sigmoid(model(tc[a:a + 8192], td[a:a + 8192])).numpy())
        p = np.concatenate(preds) if preds else np.zeros(0, np.float32)
        test_auc = clicks_data.auc(ty, p)
        eps = 1e-7
        pc = np.clip(p.astype(np.float64), eps, 1 - eps)
        test_loss = float(-np.mean(ty * np.log(pc) + (1 - ty) * np.log(1 - pc)))
        measured = total - args.warmup
        out.put({
            "samples_per_sec": round(measured * args.batch * W / (t_end - t_warm), 1),
            "train_seconds": round(t_end - t0, 2),
            "timed_seconds": round(t_end - t_warm, 2),
            "timed_cpu_seconds": round(float(cpu.item()), 2),
            "samples_per_cpu_second": round(measured * args.batch * W / float(cpu.item()), 1),
            "steps_per_worker": total, "test_auc": round(test_auc, 5),
            "test_loss": round(test_loss, 5),
            "final_train_loss": round(float(lt.item()) / W, 5),
            "sparse_check": dict(checked_sparse, **{"traffic": clicks_data.traffic(
                lo_warm, lo_end, (total - args.warmup) * W, meta["vocab_rows"])}),
            "torch": torch.__version__,
        })
    dist.barrier()
    dist.destroy_process_group()


def main(argv):
    args = parse_args(argv)
    t0 = time.perf_counter()
    p = clicks_data.prepare(args.train, args.test, log=log)
    meta = {"vocab_rows": int(p.vocab_rows)}
    datadir = tempfile.mkdtemp(prefix="torch-clicks.")
    try:
        for name in ("train_cat", "train_dense", "train_label", "test_cat", "test_dense",
                     "test_label"):
            np.save(os.path.join(datadir, name + ".npy"), getattr(p, name))
        prep_seconds = time.perf_counter() - t0
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        out = ctx.SimpleQueue()
        port = free_port()
        log(f"{args.workers} DDP processes (gloo, 127.0.0.1:{port}), {args.threads} thread(s) "
            f"each, batch {args.batch} per worker, {args.epochs} epoch(s)")
        procs = [ctx.Process(target=worker, args=(r, args, port, datadir, meta, out))
                 for r in range(args.workers)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join()
        if any(pr.exitcode != 0 for pr in procs):
            raise SystemExit("torch_clicks: a DDP process failed")
        res = out.get()
    finally:
        shutil.rmtree(datadir, ignore_errors=True)
    result = {
        "peer": "pytorch",
        "config": f"ddp gloo ({args.workers} process{'es' if args.workers > 1 else ''} x "
                  f"{args.threads} thread{'s' if args.threads > 1 else ''})",
        "workers": args.workers, "ps": 0, "batch_per_worker": args.batch,
        "global_batch": args.batch * args.workers,
        "train_rows": int(p.train_label.size), "test_rows": int(p.test_label.size),
        "vocab_rows": int(p.vocab_rows), "embedding": f"EmbeddingBag({p.vocab_rows + 1}, "
                                                      f"{EMBED_DIM}, sum, sparse=True)",
        "test_ids_unseen": round(p.test_unseen, 4),
        "epochs": args.epochs, "seed": args.seed, "warmup_steps": args.warmup,
        "samples_per_sec": res["samples_per_sec"], "train_seconds": res["train_seconds"],
        "timed_seconds": res["timed_seconds"],
        "timed_cpu_seconds": res["timed_cpu_seconds"],
        "samples_per_cpu_second": res["samples_per_cpu_second"],
        "cpu_seconds_are": "user + system CPU time of the DDP processes over the timed steps",
        "steps_per_worker": res["steps_per_worker"],
        "test_auc": res["test_auc"], "test_loss": res["test_loss"],
        "final_train_loss": res["final_train_loss"],
        "final_train_loss_is": "mean batch loss of the last epoch, all workers",
        "optimizer": f"torch.optim.Adagrad lr {args.lr} initial_accumulator_value 0.1 eps 1e-7 "
                     "(eps added outside the sqrt, as Keras 2)",
        "sparse_check": res["sparse_check"],
        "load_seconds": round(p.load_seconds, 2), "prepare_seconds": round(prep_seconds, 2),
        "torch": res["torch"], "numpy": np.__version__, "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
