"""The same 20 SGD and Adam steps through the Python client and through the C client give
bit-identical variables.

c_steps.c trains a toy model (a large variable split across 2 shards by placement, two
small ones) with libps; here ps.Worker does the same against fresh shards, with NumPy
computing the same gradients in float32, operation by operation as c_steps.c does."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import env_path

import ps

STEPS = 20
SHARDS = 2
# name, shape: as VARS in c_steps.c
VARS = [("dense/kernel", (300, 400)), ("dense/bias", (7,)), ("emb", (5, 3))]
OPTIMIZERS = {
    "sgd": {"name": "sgd", "learning_rate": 0.1},
    "adam": {"name": "adam", "learning_rate": 0.01},
}
F = np.float32


def initial(v: int, shape: tuple[int, ...]) -> np.ndarray:
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return (((i * 37 + 11 * v) % 101).astype(F) * F(0.01) - F(0.5)).reshape(shape)


def gradient(param: np.ndarray, k: int, out: np.ndarray) -> None:
    """grad[i] = param[i] * 0.01f + (float)((i * 7 + k * 13) % 17) * 0.001f, in float32."""
    i = np.arange(param.size, dtype=np.int64).reshape(param.shape)
    term = ((i * 7 + k * 13) % 17).astype(F) * F(0.001)
    np.add(param * F(0.01), term, out=out)
    assert out.dtype == F


def run_c(opt: dict, endpoints: list[str], workdir) -> bytes:
    out = workdir / "c.bin"
    r = subprocess.run([env_path("C_STEPS"), str(out), str(STEPS), json.dumps(opt), *endpoints],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"c_steps failed: {r.stderr}"
    return out.read_bytes()


def run_python(opt: dict, endpoints: list[str], push_pull: bool) -> tuple[bytes, list]:
    params = [initial(v, shape) for v, (_, shape) in enumerate(VARS)]
    grads = [np.zeros_like(p) for p in params]
    with ps.Client(endpoints, 0, 1, timeout_ms=60000) as c:
        w = ps.Worker(c, [(name, p, g) for (name, _), p, g in zip(VARS, params, grads)],
                      optimizer=opt, push_pull=push_pull)
        assert w.clock == 0
        for k in range(STEPS):
            for p, g in zip(params, grads):
                gradient(p, k, g)
            w.step()
        assert w.clock == STEPS
        assert c.stats(0)["version"] == STEPS
        w.finish()
    return b"".join(p.tobytes() for p in params), w.placed


def initial_bytes() -> bytes:
    return b"".join(initial(v, shape).tobytes() for v, (_, shape) in enumerate(VARS))


@pytest.fixture(scope="module")
def results() -> dict:
    return {}


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("push_pull", [True, False], ids=["step_exchange", "push_then_pull"])
def test_python_equals_c(opt_name, push_pull, shards, workdir, results):
    opt = OPTIMIZERS[opt_name]
    c_bytes = run_c(opt, [s.endpoint for s in shards(SHARDS)], workdir)
    py_bytes, placed = run_python(opt, [s.endpoint for s in shards(SHARDS)], push_pull)
    # the large variable really is split across both shards
    kernel = [p for p in placed if p.variable == "dense/kernel"]
    assert sorted(p.shard for p in kernel) == [0, 1], placed
    assert len(c_bytes) == len(py_bytes) == 4 * sum(int(np.prod(s)) for _, s in VARS)
    c = np.frombuffer(c_bytes, F)
    py = np.frombuffer(py_bytes, F)
    if c_bytes != py_bytes:
        bad = np.flatnonzero(c.view(np.uint32) != py.view(np.uint32))
        pytest.fail(f"{len(bad)} of {c.size} values differ, first at {bad[0]}: "
                    f"C {c[bad[0]]!r}, Python {py[bad[0]]!r}")
    # not trivially equal: the values moved, everywhere
    init = np.frombuffer(initial_bytes(), F)
    moved = np.count_nonzero(c != init)
    assert moved > 0.99 * c.size, f"only {moved} of {c.size} values moved"
    assert np.all(np.isfinite(c))
    results[(opt_name, push_pull)] = c_bytes


def test_optimizers_differ(results):
    for pp in (True, False):
        if ("sgd", pp) not in results or ("adam", pp) not in results:
            pytest.skip("an equality test failed")
        assert results[("sgd", pp)] != results[("adam", pp)]
