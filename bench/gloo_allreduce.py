#!/usr/bin/env python3
"""bench/gloo_allreduce.py: PyTorch gloo all_reduce (torch.distributed, backend
gloo, init_method tcp://127.0.0.1:PORT) of float32 tensors, N rank processes
spawned on this host; for each size, the median over --reps reps of the time
per all_reduce (a rep of a small size runs several, after a barrier), printed
by rank 0 as "gloo ranks=N bytes=B time_s=T cpu_s=C" (C: CPU time per
all_reduce summed over the ranks). bench/allreduce runs it beside
the ring (bench/allreduce.sh finds a Python with torch)."""
import argparse
import resource
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iters_for(nbytes):
    return max(1, min(100, (8 << 20) // nbytes))  # as bench/allreduce.c


def cpu_s():
    """CPU seconds (user + system, all threads) of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def worker(rank, world, port, sizes, reps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    for nbytes in sizes:
        x = torch.zeros(nbytes // 4, dtype=torch.float32)
        dist.all_reduce(x)  # warm-up
        iters = iters_for(nbytes)
        times, cpus = [], []
        for _ in range(reps):
            dist.barrier()
            t0, c0 = time.perf_counter(), cpu_s()
            for _ in range(iters):
                dist.all_reduce(x)
            times.append((time.perf_counter() - t0) / iters)
            cpus.append((cpu_s() - c0) / iters)
        # CPU time per all_reduce summed over the ranks (as bench/allreduce's cpu_ring)
        cpu = torch.tensor([statistics.median(cpus)], dtype=torch.float64)
        dist.all_reduce(cpu)
        if rank == 0:
            print(f"gloo ranks={world} bytes={nbytes} time_s={statistics.median(times):.9f} "
                  f"cpu_s={cpu.item():.9f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="4096,16777216")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a.ranks, port, sizes, a.reps), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
