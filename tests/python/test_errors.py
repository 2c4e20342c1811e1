"""Wrong input raises the right exception before anything is sent, and failures of the
shards (unknown variables, a killed psd, a psd restarted with or without a checkpoint)
come out as the right ps.PsError subclasses, within bounded time, against a real psd."""
from __future__ import annotations

import json
import logging
import select
import subprocess
import sys
import time

import numpy as np
import pytest

import ps

F = np.float32
SGD = {"name": "sgd", "learning_rate": 0.1}


@pytest.fixture
def client(free_port):
    """A client of one shard nothing listens on (for checks made before any request)."""
    with ps.Client([f"127.0.0.1:{free_port}"], 0, 1, timeout_ms=2000) as c:
        yield c


def pair(shape=(4, 3)):
    return np.zeros(shape, F), np.zeros(shape, F)


# ---- arrays ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.float16])
@pytest.mark.parametrize("which", ["param", "grad"])
def test_wrong_dtype_is_type_error(client, dtype, which):
    p, g = pair()
    bad = np.zeros((4, 3), dtype)
    args = (bad, g) if which == "param" else (p, bad)
    with pytest.raises(TypeError, match=f"{which}: dtype is {np.dtype(dtype).name}"):
        client.add_variables({"v": args}, SGD)
    with pytest.raises(TypeError):
        client.add("v", *args, shard=0, optimizer=SGD)


def test_not_an_array_is_type_error(client):
    with pytest.raises(TypeError, match="numpy.ndarray"):
        client.add_variables({"v": ([0.0, 1.0], np.zeros(2, F))}, SGD)


@pytest.mark.parametrize("make", [
    lambda: np.zeros((4, 6), F).T,           # transposed
    lambda: np.zeros((8, 3), F)[::2],        # every other row
    lambda: np.zeros((4, 6), F)[:, :3],      # a column slice
], ids=["transposed", "strided_rows", "column_slice"])
@pytest.mark.parametrize("which", ["param", "grad"])
def test_non_contiguous_is_value_error(client, make, which):
    bad = make()
    assert not bad.flags.c_contiguous
    good = np.zeros(bad.shape, F)
    args = (bad, good) if which == "param" else (good, bad)
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.add_variables({"v": args}, SGD)


def test_read_only_param_is_value_error(client):
    p, g = pair()
    p.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        client.add_variables({"v": (p, g)}, SGD)
    # a read-only gradient is fine: it is only read
    p2, g2 = pair()
    g2.setflags(write=False)
    client.add_variables({"w": (p2, g2)}, SGD)


@pytest.mark.parametrize("gshape", [(3, 4), (4, 3, 1), (12,), (4, 2)])
def test_shape_mismatch_is_value_error(client, gshape):
    p = np.zeros((4, 3), F)
    with pytest.raises(ValueError, match="differ"):
        client.add_variables({"v": (p, np.zeros(gshape, F))}, SGD)


def test_empty_is_value_error(client):
    with pytest.raises(ValueError):
        client.add_variables({"v": (np.zeros(0, F), np.zeros(0, F))}, SGD)
    with pytest.raises(ValueError):
        client.add_variables({}, SGD)


# ---- optimizers, endpoints ------------------------------------------------------------------

def test_bad_optimizer_key_is_format_error_naming_it(client):
    p, g = pair()
    with pytest.raises(ps.FormatError, match="learnin_rate") as e:
        client.add_variables({"v": (p, g)}, {"name": "sgd", "learnin_rate": 0.1})
    assert isinstance(e.value, ValueError) and e.value.code == -11
    with pytest.raises(ps.FormatError, match="adamm"):
        ps.optimizer_spec("adamm")
    with pytest.raises(ps.InvalidArgumentError):
        ps.optimizer_spec({"name": "sgd", "learning_rate": -1})
    with pytest.raises(TypeError):
        ps.optimizer_spec(3)


@pytest.mark.parametrize("endpoints", [["nohost"], ["127.0.0.1:0"], ["127.0.0.1:99999"],
                                       ["127.0.0.1:x"], ["127.0.0.1:7000", ""]])
def test_bad_endpoint_is_an_error(endpoints):
    with pytest.raises((ps.PsError, ValueError)) as e:
        ps.Client(endpoints, 0, 1)
    assert isinstance(e.value, ValueError)  # InvalidArgumentError is one too


def test_bad_worker_index_is_value_error(free_port):
    with pytest.raises(ValueError):
        ps.Client([f"127.0.0.1:{free_port}"], 2, 2)
    with pytest.raises(ValueError):
        ps.Client([], 0, 1)


def test_nothing_listening_times_out(free_port):
    with ps.Client([f"127.0.0.1:{free_port}"], 0, 1, timeout_ms=1500, retry_ms=300) as c:
        t0 = time.monotonic()
        with pytest.raises(ps.PsTimeoutError) as e:
            c.hello()
        assert time.monotonic() - t0 < 1.5 + 10
        assert isinstance(e.value, TimeoutError)


# ---- a real psd ------------------------------------------------------------------------------

def test_unknown_variable_is_lookup_error(psd):
    s = psd(workers=1)
    a, da = pair()
    with ps.Client([s.endpoint], 0, 1, timeout_ms=20000) as chief:
        chief.add_variables({"a": (a, da)}, SGD)
        chief.hello()
        assert chief.create_vars() == 1
        b, db = pair()
        with ps.Client([s.endpoint], 0, 1, timeout_ms=20000) as other:
            other.add_variables({"b": (b, db)}, SGD)  # never created by the chief
            other.hello()
            with pytest.raises(ps.UnknownVariableError) as e:
                other.pull()
            assert isinstance(e.value, LookupError)
            assert e.value.code == -4 and e.value.name == "ENOENT"
        assert chief.pull() == 0  # the chief's own variable is there


# The worker of test_psd_killed_mid_step: one step against a sync psd that waits for a
# second worker; prints "stepping" before it, then the outcome as JSON. A child process,
# so that a step that hangs can be killed (a thread could not be, and closing a client a
# thread still uses is not allowed).
STEPPER = """
import json, sys, time
import numpy as np, ps
endpoint, timeout_ms = sys.argv[1], int(sys.argv[2])
p, g = np.zeros(4, np.float32), np.ones(4, np.float32)
with ps.Client([endpoint], 0, 2, timeout_ms=timeout_ms, retry_ms=300) as c:
    w = ps.Worker(c, {"v": (p, g)}, {"name": "sgd", "learning_rate": 0.1})
    print("stepping", flush=True)
    t0 = time.monotonic()
    try:
        w.step()
        out = {"error": None}
    except ps.PsError as e:
        out = {"error": type(e).__name__, "message": str(e),
               "is_timeout": isinstance(e, TimeoutError)}
    out["seconds"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
"""


def read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """The child's next stdout line, waited for at most timeout_s ("" at its end)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise AssertionError(f"no line from the child within {timeout_s:g} s")
    return proc.stdout.readline()


def test_psd_killed_mid_step_raises_in_bounded_time(psd):
    # sync with 2 workers and only this one pushing: the step's reply waits for the other
    # worker, so the request is in flight when psd dies
    s = psd(workers=2)
    timeout_ms = 4000
    child = subprocess.Popen([sys.executable, "-c", STEPPER, s.endpoint, str(timeout_ms)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(child, 60).strip() == "stepping"
        time.sleep(1.0)
        assert child.poll() is None, "the step did not wait for the other worker"
        s.kill()
        line = read_line(child, timeout_ms / 1000 + 30)  # a hang fails here
        out = json.loads(line)
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()
    assert out["error"] in ("PsTimeoutError", "PsIOError"), out
    # from the step's start: the second before the kill, then the request's deadline
    assert out["seconds"] < 1.0 + timeout_ms / 1000 + 10, out


def train(w: ps.Worker, g: np.ndarray, steps: int) -> None:
    for _ in range(steps):
        g[...] = 0.5
        w.step()


def test_restart_from_checkpoint_push_next_is_shard_restarted(psd, workdir):
    s = psd(workers=1, extra=["--checkpoint-dir", str(workdir / "ckpt"),
                              "--checkpoint-every", "0"])
    p, g = pair((6,))
    with ps.Client([s.endpoint], 0, 1, timeout_ms=20000, retry_ms=300) as c:
        w = ps.Worker(c, {"v": (p, g)}, SGD)
        train(w, g, 3)
        info = c.checkpoint(0)
        assert info["version"] == 3 and info["bytes"] > 0
        at_ckpt = p.copy()
        train(w, g, 2)
        assert not np.array_equal(p, at_ckpt)
        s.kill()
        s.start()  # same port, same checkpoint dir
        assert "restored checkpoint" in s.log_text()
        g[...] = 0.5
        t0 = time.monotonic()
        with pytest.raises(ps.ShardRestartedError, match="restarted from a checkpoint") as e:
            c.push_next(w.clock)
        assert time.monotonic() - t0 < 10
        assert e.value.code == -17
        assert c.pull_next(w.clock) == 3
        np.testing.assert_array_equal(p, at_ckpt)


def test_restart_from_checkpoint_worker_step_recovers(psd, workdir, caplog):
    s = psd(workers=1, extra=["--checkpoint-dir", str(workdir / "ckpt"),
                              "--checkpoint-every", "0"])
    p, g = pair((6,))
    with ps.Client([s.endpoint], 0, 1, timeout_ms=20000, retry_ms=300) as c:
        w = ps.Worker(c, {"v": (p, g)}, SGD)
        train(w, g, 3)
        assert c.checkpoint(0)["version"] == 3
        at_ckpt = p.copy()
        train(w, g, 2)
        s.kill()
        s.start()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ps"):
            g[...] = 0.5
            w.step()  # its gradients are lost: no exception
        assert w.restarts_seen == 1
        warned = [r for r in caplog.records
                  if r.levelno == logging.WARNING and "gradients are lost" in r.getMessage()]
        assert warned, [r.getMessage() for r in caplog.records]
        np.testing.assert_array_equal(p, at_ckpt)  # the next values are the checkpoint's
        # and training goes on from there: one step of SGD, lr 0.1, gradient 0.5
        g[...] = 0.5
        w.step()
        np.testing.assert_array_equal(p, at_ckpt - F(0.1) * F(0.5))
        assert c.stats(0)["version"] == 4
        w.finish()


def test_restart_without_checkpoint_is_variables_lost(psd):
    s = psd(workers=1)
    p, g = pair((6,))
    with ps.Client([s.endpoint], 0, 1, timeout_ms=20000, retry_ms=300) as c:
        w = ps.Worker(c, {"v": (p, g)}, SGD)
        train(w, g, 3)
        s.kill()
        s.start()
        t0 = time.monotonic()
        with pytest.raises(ps.VariablesLostError, match="lost the job's variables") as e:
            train(w, g, 1)
        assert time.monotonic() - t0 < 10
        assert e.value.code == -19
        assert w.restarts_seen == 0


# ---- exit status -------------------------------------------------------------------------

@pytest.mark.parametrize("exc, status", [("ps.VariablesLostError('shard 1 lost them')", 4),
                                         ("ValueError('something else')", 1)])
def test_uncaught_variables_lost_exits_4(exc, status):
    """A worker program (one that made a ps.Worker) that lets VariablesLostError escape ends
    with psworker's status 4, which psctl local treats as fatal; anything else stays 1."""
    code = ("import ps, ps.worker\n"
            "ps.worker._install_exit_status_hook()  # what ps.Worker() does\n"
            f"raise {exc}\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == status, r.stderr
    assert "Traceback" in r.stderr  # the usual report comes first
