"""examples/python/ run as psd jobs by psctl local --worker-cmd (real processes).

- torch_fmnist.py, 2 shards x 2 workers, sync, 2 epochs: exit 0, both workers'
  prefixed lines, the chief's test accuracy >= 0.85;
- numpy_softmax.py, 2 x 2, sync, 1 epoch: test accuracy >= 0.77;
- torch_fmnist.py, worker 1 SIGKILLed in epoch 2: psctl restarts it, it resumes at
  the job's step (epoch 2), exit 0, test accuracy >= 0.85;
- torch_fmnist.py with psd checkpoints every second, shard 1 SIGKILLed mid-training:
  psctl restarts it from its checkpoint, the workers go on (ShardRestartedError is a
  warning), exit 0 and test accuracy >= 0.85;
- torch_movielens.py (sparse embeddings as psd tables), 2 x 2, sync, on a synthetic
  low-rank ratings TSV the test writes: exit 0, test RMSE below a third of the ratings'
  standard deviation, the same on both workers.

Environment (tests/meson.build sets it): PSCTL, PS_SOURCE_ROOT, PS_LIBRARY (libps of
this build) and PYTHONPATH (the source tree's python/). Self-contained: no conftest.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("numpy")
pytest.importorskip("torch")

SRC = Path(os.environ.get("PS_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
EXAMPLES = SRC / "examples" / "python"
DATA = Path("/usr/share/datasets/fashion-mnist")
PSCTL_TIMEOUT = 240  # psctl --timeout: it stops everything and fails after this long

needs_fmnist = pytest.mark.skipif(not (DATA / "train-images-idx3-ubyte.gz").exists(),
                                  reason="no Fashion-MNIST (apt-get install "
                                  "dataset-fashion-mnist)")


def psctl():
    path = os.environ.get("PSCTL")
    if not path:
        pytest.fail("PSCTL is not set (meson test sets it to the build's psctl)")
    return path


def worker_cmd(script, *args):
    return " ".join([sys.executable, str(EXAMPLES / script), *args])


def env():
    e = dict(os.environ)
    e.pop("TF_CONFIG", None)
    for key in ("PS_LIBRARY", "PYTHONPATH"):
        if not e.get(key):
            pytest.fail(f"{key} is not set (meson test sets it)")
    return e


def start(tmp_path, cmd, *extra):
    """psctl local, 2 shards x 2 workers, sync, its output into tmp_path/psctl.log."""
    log = open(tmp_path / "psctl.log", "w")
    argv = [psctl(), "local", "--ps", "2", "--workers", "2", "--mode", "sync",
            "--timeout", str(PSCTL_TIMEOUT), *extra, "--worker-cmd", cmd]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                            env=env(), start_new_session=True), tmp_path / "psctl.log"


def finish(proc, log):
    """psctl's exit status and output (bounded wait; the whole group killed if stuck)."""
    try:
        rc = proc.wait(timeout=PSCTL_TIMEOUT + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"psctl still running after {PSCTL_TIMEOUT + 30} s:\n{log.read_text()}")
    return rc, log.read_text()


def printed_accuracy(out, worker=0):
    """The test accuracy a worker printed (its prefixed "test accuracy: X" line)."""
    m = re.findall(rf"^\[worker {worker}\] test loss: [0-9.]+ - test accuracy: ([0-9.]+)$",
                   out, re.M)
    assert len(m) == 1, f"worker {worker}: want one test accuracy line:\n{out}"
    return float(m[0])


def check_job(rc, out, epochs, steps):
    assert rc == 0, f"psctl exit status {rc}:\n{out}"
    for j in (0, 1):
        for e in range(1, epochs + 1):
            assert f"[worker {j}] Epoch {e}/{epochs}\n" in out, f"worker {j}, epoch {e}:\n{out}"
        assert re.search(rf"^\[worker {j}\] {steps}/{steps} - \d+s - loss: [0-9.]+ - "
                         rf"accuracy: [0-9.]+$", out, re.M), f"worker {j}'s progress:\n{out}"
    assert "psctl: job finished" in out, out


@needs_fmnist
def test_torch_fmnist_two_workers_sync(tmp_path):
    t0 = time.monotonic()
    rc, out = finish(*start(tmp_path, worker_cmd("torch_fmnist.py", "--epochs", "2")))
    check_job(rc, out, 2, 469)  # floor(60000 / 2) / 64, the last batch partial
    acc = printed_accuracy(out)
    print(f"torch_fmnist 2x2 sync: test accuracy {acc:.4f} in {time.monotonic() - t0:.1f} s")
    assert acc >= 0.85, f"torch_fmnist: test accuracy {acc} < 0.85:\n{out}"
    assert printed_accuracy(out, 1) == acc  # sync: both end with the same parameters


@needs_fmnist
def test_numpy_softmax_two_workers_sync(tmp_path):
    t0 = time.monotonic()
    rc, out = finish(*start(tmp_path, worker_cmd("numpy_softmax.py", "--epochs", "1")))
    check_job(rc, out, 1, 469)
    acc = printed_accuracy(out)
    print(f"numpy_softmax 2x2 sync: test accuracy {acc:.4f} in {time.monotonic() - t0:.1f} s")
    # measured 0.78..0.81 over seeds 1..5 (0.8121 with the default seed)
    assert acc >= 0.77, f"numpy_softmax: test accuracy {acc} < 0.77:\n{out}"


def children(pid):
    """(pid, argv) of pid's child processes."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int(re.search(r"^PPid:\s+(\d+)", (d / "status").read_text(), re.M)[1])
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except (OSError, TypeError):
            continue
        if ppid == pid:
            out.append((int(d.name), [a.decode(errors="replace") for a in argv if a]))
    return out


def checkpoint_version(directory):
    """The newest version among a psd's complete checkpoints (ckpt-<version>-<t>.pstf);
    -1 when none."""
    versions = [int(m[1]) for f in (directory.iterdir() if directory.is_dir() else ())
                if (m := re.fullmatch(r"ckpt-(\d+)-\d+\.pstf", f.name))]
    return max(versions, default=-1)


def wait_for(what, cond, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    pytest.fail(f"no {what} within {timeout_s} s")


@needs_fmnist
def test_torch_fmnist_survives_a_psd_kill(tmp_path):
    ck = tmp_path / "ck"
    proc, log = start(tmp_path, worker_cmd("torch_fmnist.py", "--epochs", "2"),
                      "--checkpoint-dir", str(ck), "--checkpoint-every", "1")
    try:
        # shard 1 has a checkpoint well into the job (version >= 150 of 938) ...
        wait_for("checkpoint of shard 1 at version >= 150",
                 lambda: checkpoint_version(ck / "ps-1") >= 150)
        psd = [p for p, argv in children(proc.pid)
               if "--shard" in argv and argv[argv.index("--shard") + 1] == "1"]
        assert len(psd) == 1, f"psd 1 among psctl's children: {children(proc.pid)}"
        # ... and training is not over: the kill lands mid-training
        assert "test accuracy" not in log.read_text(), "training ended before the kill"
        os.kill(psd[0], signal.SIGKILL)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    rc, out = finish(proc, log)
    check_job(rc, out, 2, 469)
    assert "psctl: psd 1 killed by signal 9; restarting" in out, f"no restart:\n{out}"
    m = re.search(r"^\[psd 1\] .* restored checkpoint .*: version (\d+)", out, re.M)
    assert m and int(m[1]) >= 150, f"psd 1 did not restore its checkpoint:\n{out}"
    # the Python Worker took the shard's restart (ShardRestartedError) as a warning
    assert re.search(r"^\[worker \d\] .*restarted from a checkpoint; this step's gradients "
                     r"are lost, going on$", out, re.M), f"no worker saw the restart:\n{out}"
    acc = printed_accuracy(out)
    print(f"torch_fmnist, psd 1 killed: test accuracy {acc:.4f}")
    assert acc >= 0.85, f"after the psd kill: test accuracy {acc} < 0.85:\n{out}"


def worker_pid(psctl_pid, index):
    """The pid of psctl's worker `index` (its TF_CONFIG's task index), or None."""
    for pid, argv in children(psctl_pid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        tf = [e for e in environ if e.startswith(b"TF_CONFIG=")]
        if tf and re.search(rb'"index":\s*%d\b' % index, tf[0]):
            return pid
    return None


@needs_fmnist
def test_torch_fmnist_killed_worker_resumes(tmp_path):
    proc, log = start(tmp_path, worker_cmd("torch_fmnist.py", "--epochs", "3"))
    try:
        # worker 1 is into epoch 2 (the job's clock is past one epoch) and not done
        wait_for("worker 1's second epoch", lambda: "[worker 1] Epoch 2/3\n" in log.read_text())
        pid = worker_pid(proc.pid, 1)
        assert pid, f"worker 1 among psctl's children: {children(proc.pid)}"
        assert "[worker 1] test loss" not in log.read_text(), "worker 1 ended before the kill"
        os.kill(pid, signal.SIGKILL)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    rc, out = finish(proc, log)
    assert rc == 0, f"psctl exit status {rc}:\n{out}"
    for e in (1, 2, 3):  # worker 1's last epochs depend on when it is back
        assert f"[worker 0] Epoch {e}/3\n" in out, f"worker 0, epoch {e}:\n{out}"
    assert "psctl: job finished" in out, out
    assert "psctl: worker 1 killed by signal 9; restarting" in out, f"no restart:\n{out}"
    # the shards removed it when its connection closed: worker 0 did not wait for it
    assert "worker 1 removed: its connection closed" in out, f"no removal:\n{out}"
    # the restarted worker carries on at the job's step (where worker 0 has got to
    # meanwhile), not from the start
    m = re.search(r"^\[worker 1\] resuming at epoch (\d+), step (\d+) of 469$", out, re.M)
    assert m and int(m.group(1)) >= 2, f"worker 1 did not resume where the job is:\n{out}"
    # a clean exit says Goodbye: only the killed worker was ever removed
    assert out.count("removed: its connection closed") == 2, f"a finished worker removed:\n{out}"
    acc = printed_accuracy(out)
    print(f"torch_fmnist, worker 1 killed: test accuracy {acc:.4f}")
    assert acc >= 0.85, f"after the worker kill: test accuracy {acc} < 0.85:\n{out}"
    # Without faults both workers end on the same values (test_torch_fmnist checks equality);
    # after this kill the two have been seen to differ by one test image (0.8520 vs 0.8521
    # once in CI) and by eleven (0.0011, on a loaded machine); cause not yet found (the
    # restarted worker's last pull may see the values one step early), so only closeness
    # is required here.
    assert abs(printed_accuracy(out, 1) - acc) <= 0.003


def write_ratings(path, users=200, items=150, rank=3, n=8000, seed=0):
    """A MovieLens-style TSV (RecBole's header) of n ratings of rank-`rank` structure plus
    user and item biases and a little noise; returns the ratings' standard deviation."""
    import numpy as np
    rng = np.random.default_rng(seed)
    u, v = rng.normal(0, 0.7, (users, rank)), rng.normal(0, 0.7, (items, rank))
    bu, bi = rng.normal(0, 0.3, users), rng.normal(0, 0.3, items)
    pairs = rng.choice(users * items, n, replace=False)
    ratings = []
    with open(path, "w") as f:
        f.write("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
        for p in pairs:
            a, b = divmod(int(p), items)
            r = 3.0 + u[a] @ v[b] + bu[a] + bi[b] + rng.normal(0, 0.1)
            ratings.append(r)
            f.write(f"user{a}\titem{b}\t{r:.3f}\t{881250949 + int(p)}\n")
    return float(np.std(ratings))


def printed_rmse(out, worker):
    m = re.findall(rf"^\[worker {worker}\] test rmse: ([0-9.]+)$", out, re.M)
    assert len(m) == 1, f"worker {worker}: want one test rmse line:\n{out}"
    return float(m[0])


def test_torch_movielens_two_workers_sync(tmp_path):
    data = tmp_path / "ratings.inter"
    std = write_ratings(data)
    t0 = time.monotonic()
    rc, out = finish(*start(tmp_path, worker_cmd("torch_movielens.py", "--data", str(data),
                                                 "--epochs", "12", "--batch", "64",
                                                 "--lr", "0.1")))
    assert rc == 0, f"psctl exit status {rc}:\n{out}"
    for j in (0, 1):
        assert re.search(rf"^\[worker {j}\] Epoch 12/12 - 57 steps - train rmse: [0-9.]+$",
                         out, re.M), f"worker {j}'s epochs:\n{out}"
    rmse = printed_rmse(out, 0)
    print(f"torch_movielens 2x2 sync: test rmse {rmse:.4f} (ratings' std {std:.4f}) in "
          f"{time.monotonic() - t0:.1f} s")
    # measured 0.167 (0.161 with 20 epochs); predicting the mean gives the std (about 0.9)
    assert rmse < std / 3, f"torch_movielens: test rmse {rmse} >= {std / 3}:\n{out}"
    assert printed_rmse(out, 1) == rmse  # sync: both end with the same parameters
