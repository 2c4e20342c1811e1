"""10,000 clients opened and closed, and 100,000 small push-pulls, keep the process's
resident memory (VmRSS), file descriptors and threads flat.

The bound: RSS may grow by at most 8 MiB over each phase, measured after a warm-up (the
first clients and steps fill libzmq's, glibc's and Python's pools: about 2 MiB here).
A leak of 1 KiB per client would be 10 MiB over the 10,000 clients, one of 100 bytes
per step 10 MiB over the 100,000 steps: both fail; the noise measured on a flat run is
well under 1 MiB. File descriptors and threads must come back exactly (a socket or a
heartbeat thread left behind by close() shows there first)."""
from __future__ import annotations

import os
import time

import numpy as np

import ps

CLIENTS = 10_000
STEPS = 100_000
BOUND_KIB = 8 * 1024
SGD = {"name": "sgd", "learning_rate": 0.01}


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def one_client(endpoint: str, w: np.ndarray, g: np.ndarray, hello: bool) -> None:
    """A client through its life: open, a variable, a request (connects its socket),
    sometimes a hello (starts the heartbeat thread) and goodbye, close."""
    with ps.Client([endpoint], 0, 1, timeout_ms=30000) as c:
        c.add_variables({"w": (w, g)}, SGD)
        assert c.stats(0)["shard_index"] == 0
        if hello:
            c.hello()
            c.goodbye()


def test_clients_do_not_leak(psd, capsys):
    s = psd(workers=1)
    w, g = np.zeros(16, np.float32), np.zeros(16, np.float32)
    for i in range(200):  # warm-up
        one_client(s.endpoint, w, g, i % 100 == 0)
    rss0, fd0, th0, t0 = rss_kib(), fds(), threads(), time.monotonic()
    for i in range(CLIENTS):
        one_client(s.endpoint, w, g, i % 100 == 0)
    grew, secs = rss_kib() - rss0, time.monotonic() - t0
    with capsys.disabled():
        print(f"\n{CLIENTS} clients: VmRSS {rss0} KiB -> +{grew} KiB in {secs:.1f} s")
    assert fds() == fd0, "file descriptors left open"
    assert threads() == th0, "threads left running"
    assert grew < BOUND_KIB, f"VmRSS grew {grew} KiB over {CLIENTS} clients"


def test_push_pulls_do_not_leak(psd, capsys):
    s = psd(workers=1)
    w = np.zeros(16, np.float32)
    g = np.full(16, 1e-3, np.float32)
    with ps.Client([s.endpoint], 0, 1, timeout_ms=30000) as c:
        worker = ps.Worker(c, {"w": (w, g)}, SGD)
        for _ in range(2000):  # warm-up
            worker.step()
        rss0, fd0, th0, t0 = rss_kib(), fds(), threads(), time.monotonic()
        for _ in range(STEPS):
            worker.step()
        grew, secs = rss_kib() - rss0, time.monotonic() - t0
        fd1, th1 = fds(), threads()
        assert worker.clock == 2000 + STEPS
        assert c.stats(0)["version"] == 2000 + STEPS  # every step was a real exchange
        # 102,000 steps of SGD with a constant gradient: w = -steps * lr * g (about)
        assert np.allclose(w, -(2000 + STEPS) * 0.01 * 1e-3, rtol=1e-2)
        worker.finish()
    with capsys.disabled():
        print(f"\n{STEPS} push-pulls: VmRSS {rss0} KiB -> +{grew} KiB in {secs:.1f} s")
    assert fd1 == fd0, "file descriptors opened by the steps"
    assert th1 == th0, "threads started by the steps"
    assert grew < BOUND_KIB, f"VmRSS grew {grew} KiB over {STEPS} push-pulls"
