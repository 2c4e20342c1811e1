"""Fixtures for the Python package's tests: free ports, real psd processes, a tmp dir.

Every psd is started with --ready-file and waited for (bounded), and is SIGKILLed and
reaped at teardown whatever the test's outcome, so no process outlives its test (nor the
test process, should it crash: see PDEATHSIG).
Environment (set by tests/meson.build): PSD (the psd binary), PS_LIBRARY (libps.so.0),
PYTHONPATH (the source tree's python/), PS_SOURCE_ROOT; ABI_DUMP and C_STEPS for the
tests that compare with C programs.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

READY_TIMEOUT_S = 30.0  # a loaded 2-core machine starts psd in well under a second
# psd gets SIGKILL when the test process dies, even by a crash that skips the fixtures'
# teardown (util-linux's setpriv sets PR_SET_PDEATHSIG, then execs psd)
PDEATHSIG = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []


def env_path(name: str) -> str:
    """An executable or file named by the environment (the meson test sets them)."""
    v = os.environ.get(name)
    if not v:
        pytest.fail(f"${name} is not set (run through meson test, which sets it)")
    if not os.path.exists(v):
        pytest.fail(f"${name}={v} does not exist (build first)")
    return v


def pick_free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return pick_free_port()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A fresh directory, removed after the test."""
    d = tempfile.mkdtemp(prefix="ps-pytest-")
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Psd:
    """One psd shard: start() waits for its ready file; kill() SIGKILLs and reaps it;
    start() again restarts it on the same port with the same arguments."""

    def __init__(self, exe: str, logdir: Path, tag: str, args: list[str], port: int) -> None:
        self.exe = exe
        self.args = args
        self.port = port  # 0 until the first start has read the port psd chose
        self.log = logdir / f"psd-{tag}.log"
        self.ready = logdir / f"psd-{tag}.ready"
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "Psd":
        assert self.proc is None, "psd already running"
        self.ready.unlink(missing_ok=True)
        cmd = [*PDEATHSIG, self.exe, "--bind", "127.0.0.1", "--port", str(self.port),
               "--ready-file", str(self.ready), *self.args]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.ready.exists():  # written whole (renamed into place): "host:port\n"
                port = int(self.ready.read_text().strip().rsplit(":", 1)[1])
                assert self.port in (0, port), f"psd listens on {port}, asked {self.port}"
                self.port = port
                return self
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self.proc = None
                pytest.fail(f"psd exited ({rc}) before it was ready: {' '.join(cmd)}\n"
                            + self.log.read_text(errors="replace")[-3000:])
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"psd not ready within {READY_TIMEOUT_S:g} s: {' '.join(cmd)}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL and reap (idempotent)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def restart(self) -> "Psd":
        self.kill()
        return self.start()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def psd(workdir: Path) -> Iterator:
    """A factory: psd(shard=0, num_shards=1, workers=1, mode="sync", extra=[...]) starts
    one shard on a port it picks itself (--port 0, read back from the ready file) and
    returns its Psd. Every shard started is killed and reaped at teardown."""
    exe = env_path("PSD")
    started: list[Psd] = []

    def start(shard: int = 0, num_shards: int = 1, workers: int = 1, mode: str = "sync",
              extra: list[str] | None = None, port: int = 0) -> Psd:
        args = ["--shard", str(shard), "--num-shards", str(num_shards),
                "--workers", str(workers), "--mode", mode, "--log-level", "info",
                *(extra or [])]
        p = Psd(exe, workdir, f"{len(started)}", args, port)
        started.append(p)
        return p.start()

    try:
        yield start
    finally:
        for p in started:
            p.kill()


@pytest.fixture
def shards(psd) -> Iterator:
    """A factory: shards(n, ...) starts n shards of one job (see psd)."""
    def start(n: int, **kw) -> list[Psd]:
        return [psd(shard=i, num_shards=n, **kw) for i in range(n)]
    yield start
