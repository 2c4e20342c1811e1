"""ps.torch with sparse embeddings (DistributedOptimizer(..., model=)) against real psd
processes: nn.Embedding(sparse=True) and nn.EmbeddingBag(sparse=True, mode "mean", with
offsets) under a Linear head, trained by 1 and 2 workers (threads, one client each; sync,
and async with one worker) end on the parameters plain torch reaches on the concatenated
batches with the same optimizer (SGD; Adagrad once; SparseAdam for the embedding beside
Adam for the head once, as table_optimizer=), within 1e-5; so does a job of 3 shards, one
of which holds none of the dense variables. The tables are never pulled nor pushed whole:
every pull asks for a call's distinct ids only, the shards store exactly the rows the
batches touched, and no shard holds the embedding as a dense variable. Options and
optimizers the tables cannot honour are refused with ValueErrors that name what is
supported, before anything is sent."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import ps  # noqa: E402
import ps.torch as pst  # noqa: E402
from ps.client import Table  # noqa: E402
from test_rows import initial_rows  # noqa: E402 (psd's initializer, recomputed in NumPy)

N = 64        # num_embeddings
D = 4         # embedding_dim
USED = 30     # the batches' ids lie in 0..USED-1: rows USED..N-1 are never touched
B = 8         # samples per (concatenated) step
STEPS = 12
LR = 0.1
REPLY_MS = 30000
TOL = 1e-5


class Net(nn.Module):
    """An embedding (mean of a sample's ids) under a Linear head: one output per sample."""

    def __init__(self, bag: bool) -> None:
        super().__init__()
        self.bag = bag
        self.emb = (nn.EmbeddingBag(N, D, mode="mean", sparse=True) if bag
                    else nn.Embedding(N, D, sparse=True))
        self.head = nn.Linear(D, 1)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
        h = self.emb(ids, offsets) if self.bag else self.emb(ids).mean(1)
        return self.head(h).squeeze(1)


def batches(bag: bool) -> list[list[tuple[list[int], float]]]:
    """STEPS batches of B samples (ids, target); a bag's samples have 1..4 ids, an
    Embedding's 3; ids repeat within and across samples."""
    rng = np.random.default_rng(5)
    out = []
    for _ in range(STEPS):
        batch = []
        for _ in range(B):
            k = int(rng.integers(1, 5)) if bag else 3
            batch.append(([int(i) for i in rng.integers(0, USED, k)], float(rng.normal())))
        out.append(batch)
    return out


def inputs(samples: list[tuple[list[int], float]], bag: bool) -> tuple[tuple, torch.Tensor]:
    y = torch.tensor([t for _, t in samples], dtype=torch.float32)
    if bag:
        flat = [i for ids, _ in samples for i in ids]
        offsets = np.cumsum([0] + [len(ids) for ids, _ in samples[:-1]])
        return (torch.tensor(flat), torch.tensor(offsets, dtype=torch.int64)), y
    return (torch.tensor([ids for ids, _ in samples]),), y


def make_optimizer(kind: str, model: nn.Module) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=LR)
    return torch.optim.Adagrad(model.parameters(), lr=LR, initial_accumulator_value=0.1)


class AdamPair:
    """torch's usual pairing: SparseAdam for the embedding, Adam for the rest."""

    def __init__(self, model: nn.Module) -> None:
        self.sparse = torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.01)
        self.dense = torch.optim.Adam(model.head.parameters(), lr=0.01)

    def zero_grad(self) -> None:
        self.sparse.zero_grad(), self.dense.zero_grad()

    def step(self) -> None:
        self.sparse.step(), self.dense.step()


def reference(bag: bool, kind: str) -> dict[str, np.ndarray]:
    """Plain torch on the concatenated batches, from the table's initial rows."""
    torch.manual_seed(0)
    model = Net(bag)
    with torch.no_grad():
        model.emb.weight.copy_(torch.from_numpy(
            initial_rows(0, "emb.weight", range(N), -0.05, 0.05, D)))
    opt = AdamPair(model) if kind == "lazy_adam" else make_optimizer(kind, model)
    for samples in batches(bag):
        x, y = inputs(samples, bag)
        opt.zero_grad()
        nn.functional.mse_loss(model(*x), y).backward()
        opt.step()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def train(endpoints: list[str], workers: int, bag: bool, kind: str) -> list[dict]:
    """Each worker a thread with its own client and model; worker i trains on its 1/workers
    of each batch. Returns per worker: the dense parameters, the whole table (pulled after
    training), the optimizer's counters and the shards' stats."""
    results: list[dict] = [{} for _ in range(workers)]
    models = []
    for _ in range(workers):  # here: torch's generator is one for every thread
        torch.manual_seed(0)
        models.append(Net(bag))

    def run(i: int) -> None:
        try:
            model = models[i]
            with ps.Client(endpoints, i, workers, timeout_ms=REPLY_MS) as c:
                if kind == "lazy_adam":
                    pair = AdamPair(model)
                    opt = pst.DistributedOptimizer(pair.dense, model=model, client=c,
                                                   table_optimizer=pair.sparse)
                else:
                    opt = pst.DistributedOptimizer(make_optimizer(kind, model), model=model,
                                                   client=c)
                share = B // workers
                for samples in batches(bag):
                    x, y = inputs(samples[i * share:(i + 1) * share], bag)
                    opt.zero_grad()
                    nn.functional.mse_loss(model(*x), y).backward()
                    opt.step()
                r = results[i]
                r["head.weight"] = model.head.weight.detach().numpy().copy()
                r["head.bias"] = model.head.bias.detach().numpy().copy()
                r["pulled"], r["pushed"] = opt.rows_pulled, opt.rows_pushed
                r["stats"] = c.stats()
                r["table"] = opt.tables["emb.weight"].pull_rows(range(N))  # the check's own
                opt.finish()
        except BaseException as e:  # noqa: BLE001 (reported below)
            results[i]["error"] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a worker is stuck"
    for i, r in enumerate(results):
        if "error" in r:
            raise AssertionError(f"worker {i} failed") from r["error"]
    return results


@pytest.fixture
def pull_sizes(monkeypatch) -> list[int]:
    """The size of every Table.pull_rows call (from any thread)."""
    sizes: list[int] = []
    original = Table.pull_rows

    def counted(self: Table, ids):  # noqa: ANN001
        sizes.append(len(ids))
        return original(self, ids)

    monkeypatch.setattr(Table, "pull_rows", counted)
    return sizes


# module, workers, mode, optimizer, shards (3: one shard holds none of the dense variables)
CASES = [("embedding", 1, "sync", "sgd", 2), ("embedding", 2, "sync", "sgd", 2),
         ("bag", 1, "sync", "sgd", 2), ("bag", 2, "sync", "sgd", 2),
         ("embedding", 2, "sync", "adagrad", 2), ("embedding", 1, "async", "sgd", 2),
         ("bag", 2, "sync", "sgd", 3), ("embedding", 2, "sync", "lazy_adam", 2)]


@pytest.mark.parametrize("module,workers,mode,kind,n_shards", CASES,
                         ids=["-".join(map(str, c)) + "shards" for c in CASES])
def test_same_parameters_as_torch(shards, pull_sizes, module, workers, mode, kind, n_shards):
    bag = module == "bag"
    job = shards(n_shards, workers=workers, mode=mode)
    results = train([s.endpoint for s in job], workers, bag, kind)
    want = reference(bag, kind)
    init = initial_rows(0, "emb.weight", range(N), -0.05, 0.05, D)
    for i, r in enumerate(results):
        for name in ("head.weight", "head.bias"):
            np.testing.assert_allclose(r[name], want[name], rtol=0, atol=TOL,
                                       err_msg=f"worker {i}: {name}")
        np.testing.assert_allclose(r["table"], want["emb.weight"], rtol=0, atol=TOL,
                                   err_msg=f"worker {i}: the table")
    # not trivially equal: the touched rows moved, the others are the initializer's
    touched = sorted({j for b in batches(bag) for ids, _ in b for j in ids})
    table = results[0]["table"]
    assert np.all(np.abs(table[touched] - init[touched]) > 1e-7)
    np.testing.assert_array_max_ulp(table[USED:], init[USED:], maxulp=1)
    # never whole: each pull asked for one call's distinct ids (<= 3 * B of them, below N);
    # the pulls of training were the hooks' (the counters agree), then one check pull each
    train_pulls = pull_sizes[:-workers] if workers == 1 else \
        [n for n in pull_sizes if n != N]
    assert sorted(pull_sizes) == sorted(train_pulls + [N] * workers)
    assert train_pulls and max(train_pulls) <= min(USED, 4 * B)
    assert sum(train_pulls) == sum(r["pulled"] for r in results)
    assert len(train_pulls) == STEPS * workers
    # the shards store the rows pushed, exactly the touched ones; no dense copy of the table
    stats = results[0]["stats"]
    tables = [t for s in stats for t in s["tables"]]
    assert {t["name"] for t in tables} == {"emb.weight"}
    assert all(t["num_rows"] == N and t["dim"] == D and t["optimizer"] == kind for t in tables)
    assert sum(t["rows"] for t in tables) == len(touched)
    assert all(t["rows"] > 0 for t in tables)  # spread over every shard
    dense = sorted(v["name"] for s in stats for v in s["vars"])
    assert dense == ["head.bias", "head.weight"], dense  # shards 2.. hold rows alone
    assert all(0 < r["pushed"] <= STEPS * len(touched) for r in results)


def test_two_workers_async(shards):
    """Async, 2 workers: both run through and end on finite values; the shards store the
    touched rows only (the result depends on the interleaving: no equality)."""
    job = shards(2, workers=2, mode="async")
    results = train([s.endpoint for s in job], 2, False, "sgd")
    touched = {j for b in batches(False) for ids, _ in b for j in ids}
    for r in results:
        assert np.all(np.isfinite(r["table"])) and np.all(np.isfinite(r["head.weight"]))
    stats = results[1]["stats"]
    assert sum(t["rows"] for s in stats for t in s["tables"]) == len(touched)


# ---- the optimizers' mapping and the refusals ----------------------------------------------

def params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(2, 2))]


def test_table_spec_from_torch():
    assert pst.table_spec_from_torch(torch.optim.SGD(params(), lr=0.3)) == \
        {"optimizer": "sgd", "lr": 0.3}
    assert pst.table_spec_from_torch(torch.optim.Adagrad(
        params(), lr=0.2, initial_accumulator_value=0.5, eps=1e-8)) == \
        {"optimizer": "adagrad", "lr": 0.2, "epsilon": 1e-8, "initial_accumulator": 0.5}
    lazy = {"optimizer": "lazy_adam", "lr": 0.01, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}
    assert pst.table_spec_from_torch(torch.optim.SparseAdam(
        params(), lr=0.01, betas=(0.8, 0.99), eps=1e-6)) == lazy
    assert pst.table_spec_from_torch(torch.optim.Adam(
        params(), lr=0.01, betas=(0.8, 0.99), eps=1e-6)) == lazy


@pytest.fixture
def nowhere(free_port):
    """A client of one shard nothing listens on: a refusal that comes at once was made
    before anything was sent."""
    with ps.Client([f"127.0.0.1:{free_port}"], 0, 1, timeout_ms=2000) as c:
        yield c


class Two(nn.Module):
    def __init__(self, **emb) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 3, sparse=True, **emb)
        self.head = nn.Linear(3, 1)


REFUSALS = [
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), {},
     r"SGD\(momentum=0.9\).*supported for tables: torch.optim.SGD \(without momentum\), "
     "Adagrad, SparseAdam, Adam"),
    (lambda m: torch.optim.RMSprop(m.parameters()), {},
     r"RMSprop: not an optimizer for psd's embedding tables; supported for tables: "
     r"torch.optim.SGD \(without momentum\), Adagrad, SparseAdam, Adam"),
    (lambda m: torch.optim.AdamW(m.parameters()), {}, "AdamW: not an optimizer for psd's "
     "embedding tables"),
    (lambda m: torch.optim.Adam(m.parameters(), amsgrad=True), {}, r"Adam\(amsgrad=True\)"),
    (lambda m: torch.optim.Adagrad(m.parameters(), lr_decay=0.1), {},
     r"Adagrad\(lr_decay=0.1\)"),
    (lambda m: torch.optim.SGD(m.parameters(), lr=0.1), {"max_norm": 1.0}, "max_norm"),
]


@pytest.mark.parametrize("make,emb,match", REFUSALS,
                         ids=["momentum", "rmsprop", "adamw", "amsgrad", "lr_decay", "max_norm"])
def test_refusals(nowhere, make, emb, match):
    model = Two(**emb)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=match):
        pst.DistributedOptimizer(make(model), model=model, client=nowhere)
    assert time.monotonic() - t0 < 1.0  # nothing was sent (a request would wait 2 s)


def test_other_refusals(nowhere):
    model = Two()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="mode 'max'"):
        bag = nn.Module()
        bag.emb = nn.EmbeddingBag(10, 3, mode="max", sparse=True)
        bag.head = nn.Linear(3, 1)
        pst.DistributedOptimizer(torch.optim.SGD(bag.parameters(), lr=0.1), model=bag,
                                 client=nowhere)
    with pytest.raises(ValueError, match="need a torch optimizer to map, or table_optimizer"):
        pst.DistributedOptimizer("adam", model=model, client=nowhere)
    with pytest.raises(ValueError, match="unknown keys \\['momentum'\\]"):
        pst.DistributedOptimizer(sgd, model=model, table_optimizer={"momentum": 0.9},
                                 client=nowhere)
    with pytest.raises(TypeError, match="table_optimizer: want a torch optimizer or a dict"):
        pst.DistributedOptimizer(sgd, model=model, table_optimizer="adam", client=nowhere)
    with pytest.raises(ValueError, match=r"sparse embeddings \['emb'\]: their weights are in "
                       "no optimizer"):
        pst.DistributedOptimizer(torch.optim.SGD(model.head.parameters(), lr=0.1),
                                 model=model, client=nowhere)
    alone = nn.Module()
    alone.emb = nn.Embedding(10, 3, sparse=True)
    with pytest.raises(ValueError, match="embedding tables alone is not supported"):
        pst.DistributedOptimizer(torch.optim.SGD(alone.parameters(), lr=0.1), model=alone,
                                 client=nowhere)
    with pytest.raises(TypeError, match="model: want a torch.nn.Module"):
        pst.DistributedOptimizer(sgd, model=model.state_dict(), client=nowhere)


def test_sparse_embedding_without_model(shards):
    """Without model=, a sparse embedding's weight is a dense variable as before (the
    whole table moves each step: its sparse gradient lands in the registered dense
    buffer); a sparse .grad put in the buffer's place is a TypeError that says to give
    the model."""
    job = shards(1)
    model = Two()
    with ps.Client([s.endpoint for s in job], 0, 1, timeout_ms=REPLY_MS) as c:
        opt = pst.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       model.named_parameters(), client=c)
        try:
            model.head(model.emb(torch.tensor([1, 2]))).sum().backward()
            opt.step()
            assert opt.tables == {} and opt.copies == 0
            st = c.stats(0)
            assert "emb.weight" in [v["name"] for v in st["vars"]] and st["tables"] == []
            model.emb.weight.grad = None  # as zero_grad(set_to_none=True) from outside does
            model.head(model.emb(torch.tensor([1, 2]))).sum().backward()
            assert model.emb.weight.grad.is_sparse
            with pytest.raises(TypeError, match="parameter 'emb.weight' has a sparse "
                               "gradient: give DistributedOptimizer the model"):
                opt.step()
        finally:
            opt.finish()
