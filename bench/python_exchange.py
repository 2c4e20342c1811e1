#!/usr/bin/python3
"""bench/python_exchange.py: the default MLP's step exchange from Python (the ps
package: ps.Worker.step, over libps through ctypes) against the same exchange from
C (bench/step_exchange: ps_client_step_begin / ps_client_step_end), both against the
same live psd shards, interleaved.

The variables are shaped like the MLP's (784x128, 128, 128x10, 10: 101,770 floats),
placed over the shards as psworker places them, Adam; one worker (index 0 of 1).
The script starts the shards (psd --mode sync --workers 1, 127.0.0.1, free ports),
then per repetition runs the C program (a fresh process: join, warm-up, timed steps,
goodbye) and the Python side (in this process: a fresh ps.Client and ps.Worker, the
same warm-up and steps, goodbye), alternating which goes first. Prints time per step
(median, min, max over repetitions) for both, CPU time per step of the worker
process, and the ratio of the medians against the target (Python <= 1.2x C).
After each run it checks that every shard's version moved by the run's steps.

usage: /usr/bin/python3 bench/python_exchange.py [--build BUILD] [options]
The ps package is imported from this source tree (python/ next to bench/); libps is
$PS_LIBRARY, else BUILD/client/libps.so.0, the library the C program links too.
--profile FILE writes a cProfile of one extra Python run."""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
SHAPES = [("dense/kernel", (784, 128)), ("dense/bias", (128,)),
          ("dense_1/kernel", (128, 10)), ("dense_1/bias", (10,))]
TARGET = 1.2


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--build", default="build", help="the meson build dir (default: build)")
    p.add_argument("--reps", type=int, default=5, help="runs of each side (default 5)")
    p.add_argument("--steps", type=int, default=2000, help="timed steps per run (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="untimed steps first (default 200)")
    p.add_argument("--shards", type=int, default=2, help="psd shards (default 2)")
    p.add_argument("--profile", metavar="FILE",
                   help="after the runs, one more Python run under cProfile, stats to FILE")
    a = p.parse_args()
    for name in ("reps", "steps", "shards"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    return a


def start_shards(psd, n, work, procs):
    """n psd shards (sync, 1 worker) on free 127.0.0.1 ports, appended to procs (so
    that the caller stops every one started, even when this fails); their endpoints."""
    eps = []
    for i in range(n):
        ready = os.path.join(work, f"ready{i}")
        log = open(os.path.join(work, f"psd{i}.log"), "w")
        procs.append(subprocess.Popen(
            [psd, "--bind", "127.0.0.1", "--port", "0", "--ready-file", ready,
             "--shard", str(i), "--num-shards", str(n), "--workers", "1", "--mode", "sync",
             "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT))
        log.close()
    deadline = time.monotonic() + 15
    for i, pr in enumerate(procs):
        ready = os.path.join(work, f"ready{i}")
        while True:
            if os.path.exists(ready):
                with open(ready) as f:
                    ep = f.read().strip()
                if ep:
                    eps.append(ep)
                    break
            if pr.poll() is not None:
                raise RuntimeError(f"psd {i} exited ({pr.returncode}); log in {work}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"psd {i} did not listen within 15 s; log in {work}")
            time.sleep(0.01)
    return eps


def stop_shards(procs):
    for pr in procs:
        if pr.poll() is None:
            pr.terminate()
    for pr in procs:
        try:
            pr.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()


def run_c(exe, eps, a):
    out = subprocess.run([exe, "--ps", ",".join(eps), "--steps", str(a.steps),
                          "--warmup", str(a.warmup)], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{exe} failed ({out.returncode}): {out.stderr.strip()}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["us_per_step"], r["cpu_us_per_step"]


def run_py(ps, np, eps, a, profile=None):
    rng = np.random.default_rng(1)
    variables = []
    for name, shape in SHAPES:
        w = (rng.standard_normal(shape) * 0.01).astype(np.float32)
        g = np.full(shape, 1e-3, np.float32)
        variables.append((name, w, g))
    with ps.Client(eps, 0, 1, timeout_ms=10000) as c:
        wk = ps.Worker(c, variables, optimizer="adam")
        for _ in range(a.warmup):
            wk.step()
        prof = None
        if profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(a.steps):
            wk.step()
        secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if prof:
            prof.disable()
            prof.dump_stats(profile)
        wk.finish()
    return secs / a.steps * 1e6, cpu / a.steps * 1e6


def main():
    a = parse()
    build = os.path.abspath(a.build)
    psd = os.environ.get("PSD") or os.path.join(build, "ps-server", "psd")
    exe = os.path.join(build, "bench", "step_exchange")
    for b in (psd, exe):
        if not os.access(b, os.X_OK):
            sys.exit(f"python_exchange: {b} is not built (ninja -C {a.build})")
    os.environ.setdefault("PS_LIBRARY", os.path.join(build, "client", "libps.so.0"))
    sys.path.insert(0, os.path.join(SRC, "python"))
    import numpy as np
    import ps

    # SIGTERM / SIGHUP end the run through the finally below (the shards are stopped)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(1))
    work = tempfile.mkdtemp(prefix="ps-bench-pyexchange.")
    procs = []
    try:
        eps = start_shards(psd, a.shards, work, procs)
        print(f"command: {' '.join(sys.argv)}")
        print(f"shards: {a.shards} psd, sync, 1 worker, {','.join(eps)} (logs in {work})")
        print(f"libps: {os.environ['PS_LIBRARY']}; ps package: {os.path.dirname(ps.__file__)}")
        print(f"per run: {a.warmup} warm-up steps, {a.steps} timed steps; {a.reps} runs each, "
              "interleaved (C first in odd runs, Python first in even ones)")
        res = {"c": [], "py": []}
        admin = ps.Client(eps, timeout_ms=10000)  # stats only: no hello, not a worker
        for r in range(1, a.reps + 1):
            order = ("c", "py") if r % 2 else ("py", "c")
            for side in order:
                before = [s["version"] for s in admin.stats()]
                res[side].append(run_c(exe, eps, a) if side == "c" else
                                 run_py(ps, np, eps, a))
                # every step closed one step on every shard, or the figure is not the exchange's
                moved = [s["version"] - v for s, v in zip(admin.stats(), before)]
                if moved != [a.warmup + a.steps] * a.shards:
                    raise RuntimeError(f"run {r} ({side}): the shards' versions moved by {moved}, "
                                       f"not {a.warmup + a.steps} each")
            print(f"run {r}: C {res['c'][-1][0]:.1f} us/step  Python {res['py'][-1][0]:.1f} "
                  "us/step", file=sys.stderr, flush=True)
        print(f"\n{'side':34s} {'us/step':>9s} {'min':>9s} {'max':>9s} {'cpu us/step':>12s}")
        names = {"c": "C (bench/step_exchange)", "py": "Python (ps.Worker.step)"}
        med = {}
        for side in ("c", "py"):
            wall = [w for w, _ in res[side]]
            cpu = [c for _, c in res[side]]
            med[side] = statistics.median(wall)
            print(f"{names[side]:34s} {med[side]:9.1f} {min(wall):9.1f} {max(wall):9.1f} "
                  f"{statistics.median(cpu):12.1f}")
        ratio = med["py"] / med["c"]
        print(f"\nratio Python / C (medians): {ratio:.3f}")
        print(f"target Python <= {TARGET} x C: {'met' if ratio <= TARGET else 'NOT met'}")
        if a.profile:
            run_py(ps, np, eps, a, profile=a.profile)
            import pstats
            print(f"\ncProfile of one more Python run ({a.profile}):")
            pstats.Stats(a.profile).sort_stats("tottime").print_stats(12)
    except (RuntimeError, subprocess.TimeoutExpired, ps.PsError) as e:
        sys.exit(f"python_exchange: {e}")
    finally:
        stop_shards(procs)


if __name__ == "__main__":
    main()
