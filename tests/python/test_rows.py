"""Embedding tables from Python (Client.create_table, Table.pull_rows / push_rows)
against real psd processes: fresh rows are the initializer's, the same from every client
and shard layout; a repeated id's gradients are summed; a sync step of 2 workers applies
the mean of their row gradients once; bad arguments are ValueErrors (TypeErrors for
dtypes) before anything is sent; stats() shows each shard's share of the tables."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import ps

F = np.float32
DIM = 4
LR = 0.5
REPLY_MS = 20000
M64 = (1 << 64) - 1


def connect(shards, index: int = 0, workers: int = 1) -> ps.Client:
    c = ps.Client([s.endpoint for s in shards], index, workers, timeout_ms=REPLY_MS)
    c.hello()
    return c


# ---- the initializer, as common/rows.c computes it (ps_rows_initial) -----------------------

def _mix(z: int) -> int:  # splitmix64's finalizer
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _table_key(name: str) -> int:  # FNV-1a of the name, mixed
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return _mix(h)


def initial_rows(seed: int, name: str, ids, lo: float, hi: float, dim: int) -> np.ndarray:
    out = np.empty((len(ids), dim), F)
    lo32, hi32 = F(lo), F(hi)
    for i, id_ in enumerate(ids):
        base = _mix(_mix(seed ^ 0x6A09E667F3BCC908) ^ _table_key(name)) ^ _mix(int(id_))
        for k in range(dim):
            r = _mix((base + 0x9E3779B97F4A7C15 * (k + 1)) & M64)
            u = F(r >> 40) * F(1.0 / 16777216.0)  # 24 bits: [0, 1)
            out[i, k] = lo32 + (hi32 - lo32) * u
    return out


# ---- fresh rows ------------------------------------------------------------------------------

IDS = [0, 5, 1 << 40, 5, M64, 123456789012345, 7]


def test_fresh_rows_are_the_initializers_everywhere(shards):
    """The same ids pulled from a 1-shard job and by two clients of a 2-shard job: the same
    values, the initializer's (uniform in init from seed, name and id), repeats included."""
    spec = dict(seed=7, init=(-0.5, 0.25), lr=LR)
    one = shards(1, mode="async")
    with connect(one) as c:
        a = c.create_table("emb", DIM, **spec).pull_rows(IDS)
    two = shards(2, workers=2, mode="async")
    with connect(two, 0, 2) as c0, connect(two, 1, 2) as c1:
        t0 = c0.create_table("emb", DIM, **spec)
        t1 = c1.create_table("emb", DIM, **spec)  # the same spec again: kept
        b, b1 = t0.pull_rows(IDS), t1.pull_rows(np.array(IDS, np.uint64))
        other = c0.create_table("emb_seed8", DIM, **{**spec, "seed": 8})
        c = other.pull_rows(IDS)
    assert a.shape == (len(IDS), DIM) and a.dtype == F and a.flags.c_contiguous
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, b1)
    np.testing.assert_array_equal(a[1], a[3])  # id 5 twice: the same row
    assert np.all((a >= F(-0.5)) & (a < F(0.25)))
    assert len(np.unique(a[:, 0])) == len(set(IDS))  # distinct ids, distinct rows
    np.testing.assert_array_max_ulp(a, initial_rows(7, "emb", IDS, -0.5, 0.25, DIM), maxulp=1)
    # another table (name and seed): other values
    np.testing.assert_array_max_ulp(c, initial_rows(8, "emb_seed8", IDS, -0.5, 0.25, DIM),
                                    maxulp=1)
    assert not np.any(c == a)


def test_default_spec_is_keras_embedding(shards):
    """Without init and seed: Keras' Embedding initializer, uniform(-0.05, 0.05), seed 0;
    a fixed table's rows too; no ids, no rows."""
    with connect(shards(1, mode="async")) as c:
        t = c.create_table("fixed", 3, num_rows=10)
        assert (t.name, t.dim, t.num_rows) == ("fixed", 3, 10)
        got = t.pull_rows(range(10))
        assert t.pull_rows([]).shape == (0, 3)
    np.testing.assert_array_max_ulp(got, initial_rows(0, "fixed", range(10), -0.05, 0.05, 3),
                                    maxulp=1)


# ---- pushes --------------------------------------------------------------------------------

def test_repeated_id_applies_the_sum(shards):
    """Async, 2 shards, sgd: a push naming id 5 twice moves it by lr times the sum of its
    two gradients (w - lr * (g1 + g2)); id 7 by its one gradient."""
    with connect(shards(2, mode="async")) as c:
        t = c.create_table("emb", DIM, lr=LR, seed=1)
        w = t.pull_rows([5, 7])
        g = np.array([[1, 2, 3, 4], [0.5, 0.5, 0.5, 0.5], [0.25, -1, 2, -4]], F)
        assert t.push_rows([5, 7, 5], g) == 0
        got = t.pull_rows([5, 7, 5])
    np.testing.assert_array_max_ulp(got[0], w[0] - F(LR) * (g[0] + g[2]), maxulp=1)
    np.testing.assert_array_max_ulp(got[1], w[1] - F(LR) * g[1], maxulp=1)
    np.testing.assert_array_equal(got[0], got[2])


def test_optimizer_settings_reach_psd(shards):
    """adagrad with Keras' defaults (initial_accumulator 0.1, epsilon 1e-7) and with both
    overridden: one push moves a row by lr * g / (sqrt(acc + g^2) + epsilon)."""
    g = np.array([[1, -2, 3, 0.5]], F)
    with connect(shards(1, mode="async")) as c:
        keras = c.create_table("keras", DIM, optimizer="adagrad", lr=LR)
        mine = c.create_table("mine", DIM, optimizer="adagrad", lr=LR,
                              initial_accumulator=3.0, epsilon=0.0)
        got = {}
        for t, acc, eps in ((keras, 0.1, 1e-7), (mine, 3.0, 0.0)):
            w = t.pull_rows([9])
            t.push_rows([9], g)
            got[t.name] = (t.pull_rows([9]), w - F(LR) * g / (np.sqrt(F(acc) + g * g) + F(eps)))
        assert [x["optimizer"] for x in c.stats(0)["tables"]] == ["adagrad", "adagrad"]
    for name, (have, want) in got.items():
        np.testing.assert_allclose(have, want, rtol=1e-6, err_msg=name)


def test_sync_two_workers_apply_the_mean_once(shards):
    """Sync, 2 shards, 2 workers with no dense variables, each pushing with end_step: the
    step applies the mean of the two workers' row gradients (a row pushed by both gets
    both, halved; a row pushed by one gets half its gradient), once. Worker 0's pull
    waits until worker 1's push closes the step; both then read the same rows."""
    job = shards(2, workers=2, mode="sync")
    with connect(job, 0, 2) as c0, connect(job, 1, 2) as c1:
        t0 = c0.create_table("users", DIM, num_rows=100, lr=LR, seed=3)
        t1 = c1.create_table("users", DIM, num_rows=100, lr=LR, seed=3)
        ids = [1, 2, 3]
        w = t0.pull_rows(ids)
        ga = np.arange(1, 2 * DIM + 1, dtype=F).reshape(2, DIM)       # rows 1, 2
        gb = (0.5 - np.arange(2 * DIM, dtype=F)).reshape(2, DIM)       # rows 2, 3
        assert t0.push_rows([1, 2], ga, end_step=True) == 0
        pulled: dict = {}

        def pull() -> None:
            try:
                pulled["rows"] = t0.pull_rows(ids)
            except BaseException as e:  # noqa: BLE001 (reported by the test below)
                pulled["error"] = e

        th = threading.Thread(target=pull)
        th.start()
        try:
            time.sleep(0.3)
            assert th.is_alive(), f"worker 0's pull did not wait for the step: {pulled}"
            assert t1.push_rows([2, 3], gb, end_step=True) == 0
        finally:  # c0 stays open while the pull runs
            th.join(REPLY_MS / 1000 + 10)  # past the pull's own deadline
        assert not th.is_alive() and "error" not in pulled, pulled
        got = pulled["rows"]
        np.testing.assert_array_equal(t1.pull_rows(ids), got)
        assert [s["version"] for s in c0.stats()] == [1, 1]  # one step
    mean = np.stack([ga[0] / 2, (ga[1] + gb[0]) / 2, gb[1] / 2])
    np.testing.assert_allclose(got, w - F(LR) * mean, rtol=0, atol=1e-6)


@pytest.mark.parametrize("when_full", ["evict", "refuse"])
def test_cap_evicts_or_refuses(shards, when_full):
    """A dynamic table capped at 2 rows (one shard): a third row evicts the least recently
    pushed one (it reads as its initial values again), or is refused (push_rows counts it
    as dropped and the row keeps its initial values)."""
    with connect(shards(1, mode="async")) as c:
        t = c.create_table("ads", DIM, lr=LR, max_rows=2, when_full=when_full)
        g = np.ones((1, DIM), F)
        w = t.pull_rows([1, 2, 3])
        assert t.push_rows([1], g) == 0
        assert t.push_rows([2], g) == 0
        dropped = t.push_rows([3], g)
        got = t.pull_rows([1, 2, 3])
        st = c.stats(0)["tables"][0]
    moved = w - F(LR)
    assert (st["name"], st["rows"], st["max_rows"]) == ("ads", 2, 2)
    np.testing.assert_array_equal(got[1], moved[1])
    if when_full == "evict":
        assert dropped == 0
        assert (st["evicted"], st["refused"], st["admitted"]) == (1, 0, 3)
        np.testing.assert_array_equal(got[0], w[0])  # evicted: the initializer again
        np.testing.assert_array_equal(got[2], moved[2])
    else:
        assert dropped == 1
        assert (st["evicted"], st["refused"], st["admitted"], st["dropped"]) == (0, 1, 2, 1)
        np.testing.assert_array_equal(got[0], moved[0])
        np.testing.assert_array_equal(got[2], w[2])  # refused: never stored


# ---- stats -------------------------------------------------------------------------------

TABLE_KEYS = {"name", "optimizer", "dim", "num_rows", "rows", "admitted", "evicted",
              "expired", "refused", "dropped", "bytes", "max_rows"}


def test_stats_show_the_tables(shards):
    """stats() lists each shard's share of every table: its spec (dim, num_rows, optimizer,
    max_rows) and counters. A dynamic table with min_count 2 drops each row's first push
    (push_rows says how many) and stores the row at its second; the rows spread over
    both shards."""
    job = shards(2, mode="async")
    with connect(job) as c:
        t = c.create_table("emb", DIM, optimizer="adagrad", lr=0.1, min_count=2,
                           max_rows=1000)
        c.create_table("fixed", 2, num_rows=50, optimizer="ftrl", l1=0.01)
        ids = np.arange(20, dtype=np.int64) * 1000003
        g = np.ones((20, DIM), F)
        assert t.push_rows(ids, g) == 20  # first pushes: not admitted yet
        assert t.push_rows(ids, g) == 0
        every = c.stats()
        second = c.stats(1)
    assert len(every) == 2 and [s["shard_index"] for s in every] == [0, 1]
    assert second["tables"] == every[1]["tables"]
    emb, fixed = [], []
    for s in every:
        assert sorted(x["name"] for x in s["tables"]) == ["emb", "fixed"]
        for x in s["tables"]:
            assert set(x) == TABLE_KEYS
            (emb if x["name"] == "emb" else fixed).append(x)
    for e in emb:
        assert (e["dim"], e["num_rows"], e["optimizer"], e["max_rows"]) == \
            (DIM, 0, "adagrad", 1000)
        assert e["rows"] > 0 and e["bytes"] > 0
        assert e["admitted"] == e["rows"] and e["dropped"] == e["rows"]
        assert e["evicted"] == e["expired"] == e["refused"] == 0
    assert sum(e["rows"] for e in emb) == 20
    for f in fixed:
        assert (f["dim"], f["num_rows"], f["optimizer"], f["rows"]) == (2, 50, "ftrl", 0)
        assert f["max_rows"] > 1_000_000  # no cap of its own: psd's --max-table-mb bound


# ---- bad arguments ------------------------------------------------------------------------

@pytest.fixture
def nowhere(free_port):
    """A client of one shard nothing listens on: a request would time out, so a check that
    raises at once was made before anything was sent."""
    with ps.Client([f"127.0.0.1:{free_port}"], 0, 1, timeout_ms=2000) as c:
        yield c


BAD_SPECS = [
    (dict(name=""), "table name"),
    (dict(name=7), "table name"),
    (dict(name="x" * 256), "256 bytes"),
    (dict(name="a\0b"), "no NUL"),
    (dict(dim=0), "dim: 0"),
    (dict(dim=65537), "dim: 65537"),
    (dict(dim=2.0), "dim: want an int"),
    (dict(num_rows=-1), "num_rows"),
    (dict(optimizer="adam"), "optimizer 'adam'"),
    (dict(lr=0.0), "lr 0.0"),
    (dict(lr=-0.1), "lr"),
    (dict(lr=float("nan")), "not a finite"),
    (dict(lr=1e39), "not a finite"),
    (dict(momentum=0.9), "unknown setting 'momentum'"),
    (dict(beta1=0.5), "sgd does not read 'beta1'"),
    (dict(optimizer="adagrad", l1=0.1), "adagrad does not read 'l1'"),
    (dict(optimizer="lazy_adam", beta1=1.0), "beta1 1.0"),
    (dict(optimizer="lazy_adam", epsilon=-1e-7), "epsilon"),
    (dict(optimizer="ftrl", initial_accumulator=0.0), "> 0 for ftrl"),
    (dict(optimizer="ftrl", lr_power=0.5), "lr_power"),
    (dict(optimizer="ftrl", l2=-1.0), "l2"),
    (dict(init=(0.1, -0.1)), "low <= high"),
    (dict(init=0.05), "want \\(low, high\\)"),
    (dict(init=(0.0, float("inf"))), "not a finite"),
    (dict(seed=-1), "seed"),
    (dict(seed=1 << 64), "seed"),
    (dict(min_count=1 << 32), "min_count"),
    (dict(max_rows=1 << 32), "max_rows"),
    (dict(num_rows=10, min_count=2), "for dynamic tables"),
    (dict(num_rows=10, ttl_steps=5), "for dynamic tables"),
    (dict(num_rows=10, max_rows=5), "for dynamic tables"),
    (dict(when_full="drop"), "when_full 'drop'"),
]


@pytest.mark.parametrize("kw,match", BAD_SPECS,
                         ids=[",".join(f"{k}={ascii(v)[:12]}" for k, v in kw.items())
                              for kw, _ in BAD_SPECS])
def test_bad_table_spec_is_value_error_before_sending(nowhere, kw, match):
    args = {"name": "emb", "dim": DIM, **kw}
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=match):
        nowhere.create_table(args.pop("name"), args.pop("dim"), **args)
    assert time.monotonic() - t0 < 1.0  # no request went out (it would wait 2 s)


def test_bad_rows_arguments(shards):
    """ids that are not a 1-D array of integers >= 0, gradients of the wrong shape or
    dtype: ValueError / TypeError, and nothing reaches psd (no row is stored); a table
    created again with another spec: ExistsError."""
    job = shards(1, mode="async")
    with connect(job) as c:
        t = c.create_table("emb", DIM)
        fixed = c.create_table("fixed", DIM, num_rows=10)
        g1 = np.ones((1, DIM), F)
        for bad in ([3, -1], np.array([-5], np.int64), [-1, M64]):
            with pytest.raises(ValueError, match="negative|not in 0..2\\^64-1"):
                t.pull_rows(bad)
            with pytest.raises(ValueError):
                t.push_rows(bad, np.ones((len(bad), DIM), F))
        with pytest.raises(ValueError, match="not in 0..2\\^64-1"):
            t.pull_rows([1 << 64])
        with pytest.raises(ValueError, match="1-D"):
            t.pull_rows([[1, 2], [3, 4]])
        with pytest.raises(ValueError, match="scalar"):
            t.pull_rows(3)
        with pytest.raises(TypeError, match="dtype float64"):
            t.pull_rows([1.0, 2.0])
        with pytest.raises(TypeError, match="dtype bool"):
            t.pull_rows(np.array([True]))
        with pytest.raises(ValueError, match=r"shape \(1, 3\), want \(1, 4\)"):
            t.push_rows([1], np.ones((1, DIM - 1), F))
        with pytest.raises(ValueError, match=r"shape \(4,\), want \(1, 4\)"):
            t.push_rows([1], np.ones(DIM, F))
        with pytest.raises(ValueError, match=r"want \(2, 4\)"):
            t.push_rows([1, 2], g1)
        with pytest.raises(TypeError, match="float64"):
            t.push_rows([1], np.ones((1, DIM)))
        with pytest.raises(TypeError, match="numpy.ndarray"):
            t.push_rows([1], [[1.0] * DIM])
        with pytest.raises(ValueError, match="C-contiguous"):
            t.push_rows([1, 2], np.ones((DIM, 2), F).T)
        # a fixed table's range is libps's check: InvalidArgumentError, a ValueError too
        with pytest.raises(ps.InvalidArgumentError, match="out of range"):
            fixed.push_rows([10], g1)
        with pytest.raises(ValueError, match="out of range"):
            fixed.pull_rows([0, 10])
        with pytest.raises(ps.ExistsError, match="on this client already"):
            c.create_table("emb", DIM)
        with connect(job) as other, pytest.raises(ps.ExistsError, match="another spec"):
            other.create_table("emb", DIM + 1)
        st = c.stats(0)
        assert sorted((x["name"], x["rows"], x["dropped"]) for x in st["tables"]) == \
            [("emb", 0, 0), ("fixed", 0, 0)]
    with pytest.raises(ValueError, match="closed"):
        t.pull_rows([1])
