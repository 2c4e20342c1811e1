"""PyTorch over psd: wrap the optimizer, as with Horovod's DistributedOptimizer.

    import ps.torch as pst                                             # line 1
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer = pst.DistributedOptimizer(optimizer, model.named_parameters())  # line 2

Then the script's loop is unchanged: zero_grad(), backward(), step(). The cluster
comes from TF_CONFIG (psctl local --worker-cmd sets it; so do Kubeflow and the
multi-process runners), or from a ps.Client given as client=.

What happens: the wrapper registers every parameter tensor and a gradient buffer
with the client by address (Tensor.numpy() shares memory: nothing is copied), placed
on the shards as psworker places its variables. Construction joins the job (the
chief creates the variables from its initial values; every worker then starts
from the same values). step() sends the gradients and writes the new values into
the parameters in place, one round trip per shard. The update itself runs on psd
with the wrapped optimizer's kind and hyperparameters (psd's Keras formulas): the
torch optimizer is used for its settings only, never stepped.

Copies: none, unless something replaced a parameter's .grad tensor with a new one
(zero_grad(set_to_none=True) from outside, or code assigning .grad): that step copies
the new gradient into the registered buffer and puts the buffer back in .grad.

Sparse embeddings: given the model (model=), every nn.Embedding and nn.EmbeddingBag
built with sparse=True is held on psd as an embedding table (Client.create_table),
never as a dense variable: a forward pre-hook pulls the rows of the ids the module is
called with into its weight, in place, and step() pushes the sparse gradient's rows
(coalesced) before the dense step. The table is never pulled or pushed whole (see
DistributedOptimizer and docs/PYTHON.md, "Sparse embeddings in ps.torch").
"""
from __future__ import annotations

import atexit
import logging
import os
import weakref
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch
from torch import nn

from .client import Client, OptimizerLike, Table, tf_config_worker
from .worker import Worker

log = logging.getLogger("ps")

SUPPORTED = "torch.optim.SGD, Adam, AdamW, Adagrad, RMSprop (or a psd optimizer spec dict)"
TABLE_SUPPORTED = ("torch.optim.SGD (without momentum), Adagrad, SparseAdam, Adam (or a dict "
                   "of create_table keywords as table_optimizer)")
# the one-float variables that make the shards without dense variables take part in every
# sync step (see DistributedOptimizer.__init__)
# create_table's keywords a table_optimizer dict may give
_TABLE_KEYS = ("optimizer", "lr", "seed", "init", "epsilon", "initial_accumulator", "beta1",
               "beta2", "l1", "l2", "lr_power")


def rank() -> int:
    """This worker's index in the job (from TF_CONFIG; 0 is the chief)."""
    return tf_config_worker()[1]


def size() -> int:
    """The number of workers in the job (from TF_CONFIG)."""
    return tf_config_worker()[2]


def _refuse(opt: torch.optim.Optimizer, key: str, g: Mapping[str, Any], ok: Any) -> None:
    v = g.get(key, ok)
    if v != ok:
        raise ValueError(f"{type(opt).__name__}({key}={v!r}): psd's optimizer has no such option "
                         f"(only {key}={ok!r} is supported)")


def _one_group(opt: torch.optim.Optimizer) -> Mapping[str, Any]:
    """The settings of opt's parameter groups, which must all have the same."""
    groups = opt.param_groups
    keys = [k for k in groups[0] if k != "params"]
    for g in groups[1:]:
        if any(g.get(k) != groups[0].get(k) for k in keys):
            raise ValueError("parameter groups with different hyperparameters: psd applies one "
                             "optimizer spec per job here; use one group")
    return groups[0]


def spec_from_torch(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The psd optimizer spec (the model file's names) for a torch optimizer's settings.
    ValueError for a kind or an option psd does not have (nothing is dropped silently)."""
    g = _one_group(opt)
    for key in ("maximize", "differentiable", "capturable"):
        _refuse(opt, key, g, False)
    name = type(opt).__name__
    if name == "SGD":
        _refuse(opt, "weight_decay", g, 0)
        _refuse(opt, "dampening", g, 0)
        if g["momentum"] == 0 and not g.get("nesterov"):
            return {"name": "sgd", "learning_rate": g["lr"]}
        return {"name": "momentum", "learning_rate": g["lr"], "momentum": g["momentum"],
                "nesterov": bool(g.get("nesterov"))}
    if name in ("Adam", "AdamW"):
        _refuse(opt, "amsgrad", g, False)
        spec = {"name": name.lower(), "learning_rate": g["lr"], "beta_1": g["betas"][0],
                "beta_2": g["betas"][1], "epsilon": g["eps"]}
        if name == "Adam":
            _refuse(opt, "weight_decay", g, 0)
        else:
            spec["weight_decay"] = g["weight_decay"]
        return spec
    if name == "Adagrad":
        _refuse(opt, "lr_decay", g, 0)
        _refuse(opt, "weight_decay", g, 0)
        return {"name": "adagrad", "learning_rate": g["lr"], "epsilon": g["eps"],
                "initial_accumulator_value": g["initial_accumulator_value"]}
    if name == "RMSprop":
        for key in ("momentum", "weight_decay"):
            _refuse(opt, key, g, 0)
        _refuse(opt, "centered", g, False)
        return {"name": "rmsprop", "learning_rate": g["lr"], "rho": g["alpha"],
                "epsilon": g["eps"]}
    raise ValueError(f"{name}: not an optimizer psd runs; supported: {SUPPORTED}")


def table_spec_from_torch(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """create_table's optimizer keywords (optimizer, lr and its settings) for a torch
    optimizer's settings, for the embedding tables: SGD without momentum -> "sgd",
    Adagrad -> "adagrad" (initial_accumulator_value and eps kept), SparseAdam and Adam ->
    "lazy_adam" (betas and eps kept; a row and its moments move only in the steps it
    has a gradient, as SparseAdam's, not at every step as dense Adam's). ValueError for
    any other kind or option, naming the ones supported."""
    g = _one_group(opt)
    name = type(opt).__name__

    def refuse(key: str, ok: Any) -> None:
        v = g.get(key, ok)
        if v != ok:
            raise ValueError(f"{name}({key}={v!r}): the embedding tables' optimizers have no "
                             f"such option (only {key}={ok!r}); supported for tables: "
                             f"{TABLE_SUPPORTED}")

    for key in ("maximize", "differentiable", "capturable"):
        refuse(key, False)
    if name == "SGD":
        for key in ("momentum", "weight_decay", "dampening"):
            refuse(key, 0)
        refuse("nesterov", False)
        return {"optimizer": "sgd", "lr": g["lr"]}
    if name == "Adagrad":
        for key in ("lr_decay", "weight_decay"):
            refuse(key, 0)
        return {"optimizer": "adagrad", "lr": g["lr"], "epsilon": g["eps"],
                "initial_accumulator": g["initial_accumulator_value"]}
    if name in ("SparseAdam", "Adam"):
        refuse("amsgrad", False)
        refuse("weight_decay", 0)
        return {"optimizer": "lazy_adam", "lr": g["lr"], "beta1": g["betas"][0],
                "beta2": g["betas"][1], "epsilon": g["eps"]}
    raise ValueError(f"{name}: not an optimizer for psd's embedding tables; supported for "
                     f"tables: {TABLE_SUPPORTED}")


def sparse_embeddings(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The (name, module) of model's nn.Embedding and nn.EmbeddingBag built with
    sparse=True whose weight requires gradients: those DistributedOptimizer holds as
    tables. ValueError for options a table cannot honour (max_norm, mode "max")."""
    out = []
    for mname, m in model.named_modules():
        if not isinstance(m, (nn.Embedding, nn.EmbeddingBag)) or not m.sparse:
            continue
        if not m.weight.requires_grad:
            continue
        kind = type(m).__name__
        if m.max_norm is not None:
            raise ValueError(f"{kind} '{mname}': max_norm renormalises the local weight in "
                             "place, which psd's table would never see; not supported")
        if isinstance(m, nn.EmbeddingBag) and m.mode not in ("sum", "mean"):
            raise ValueError(f"{kind} '{mname}': mode {m.mode!r} (sparse gradients are for "
                             "mode 'sum' or 'mean')")
        w = m.weight
        if w.dtype != torch.float32:
            raise TypeError(f"{kind} '{mname}': weight dtype {w.dtype}, want torch.float32")
        if w.device.type != "cpu":
            raise ValueError(f"{kind} '{mname}' is on {w.device}: the client reads CPU memory "
                             "(move the model to the CPU)")
        out.append((mname, m))
    return out


class _TableModule:
    """One sparse embedding module held as a psd table: the pre-hook that pulls the rows a
    call reads into the module's weight, and the push of its gradient's rows."""

    def __init__(self, name: str, module: nn.Module, table: Table,
                 owner: "DistributedOptimizer") -> None:
        self.name = name
        self.module = module
        self.weight: torch.Tensor = module.weight
        self.table = table
        self.padding_idx: int | None = module.padding_idx
        self._owner = weakref.ref(owner)
        if self.padding_idx is not None:
            with torch.no_grad():  # torch's padding row: zeros, never pulled nor pushed
                self.weight.data[self.padding_idx] = 0
        self.handle = module.register_forward_pre_hook(self._pull)

    def _pull(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if not args or not isinstance(args[0], torch.Tensor):
            raise TypeError(f"{type(module).__name__} '{self.name}': call it with the ids as "
                            "its first positional argument (the table's rows are pulled for "
                            "them before forward)")
        ids = torch.unique(args[0].detach().reshape(-1)).to(torch.int64)
        if self.padding_idx is not None:
            ids = ids[ids != self.padding_idx]
        if ids.numel() == 0:
            return
        ids_np = ids.numpy()
        rows = self.table.pull_rows(ids_np)
        self.weight.data[ids] = torch.from_numpy(rows)
        owner = self._owner()
        if owner is not None:
            owner.rows_pulled += int(ids_np.size)

    def push(self, last: bool = False) -> int:
        """Pushes the weight's gradient rows (an empty push when there is none: in sync
        mode every worker pushes every table each step). Returns the rows pushed."""
        g = self.weight.grad
        if g is None:
            ids = np.empty(0, np.int64)
            values = np.empty((0, self.table.dim), np.float32)
        else:
            if not g.is_sparse:  # a dense gradient someone put there: its nonzero rows
                g = g.to_sparse(1)
            g = g.coalesce()
            ids = g.indices()[0].numpy()
            values = np.ascontiguousarray(g.values().to(torch.float32).numpy())
        # the step's last row push ends it on the shards holding no dense variable
        self.table.push_rows(ids, values, end_step=last)
        return int(ids.size)


class DistributedOptimizer(torch.optim.Optimizer):
    """A torch optimizer whose updates run on psd shards (see the module's docstring).

    optimizer: a torch optimizer (its kind and hyperparameters become psd's) or a psd
    optimizer spec ("adam", or a dict in the model file's form); named_parameters: the
    model's named_parameters() (names on the shards; every worker gives the same;
    default with model=: model.named_parameters());
    client: a ps.Client (default: Client.from_tf_config(timeout_ms=...));
    total_steps: the job's steps per worker, checked against the shards' progress.

    model: the model, to hold its sparse embeddings as psd tables. Every nn.Embedding and
    nn.EmbeddingBag (mode "sum" or "mean", offsets and per_sample_weights as torch
    allows) built with sparse=True becomes a table named as its weight parameter
    ("<module name>.weight"), with num_rows = num_embeddings and dim = embedding_dim; its
    weight is not a dense variable. A forward pre-hook pulls the rows of the ids the
    module is called with (its first positional argument) into the module's own
    [num_embeddings, dim] weight, in place; step() pushes the coalesced rows of its
    sparse gradient (an empty push when it has none), then takes the dense step. Only
    the rows the last calls read are current in the weight; read others with
    tables[name].pull_rows(ids). Rows start at psd's initializer, uniform in
    (-0.05, 0.05) from a seed, the table name and the id (Keras' Embedding), not torch's
    N(0, 1): the module's own initial values are overwritten by the first pull. A
    padding_idx row is zeros, never pulled nor pushed. max_norm and mode "max" are
    refused. A sparse gradient on a parameter without model= is a TypeError at step().

    table_optimizer: how the tables learn. None: the wrapped torch optimizer, mapped by
    table_spec_from_torch (SGD without momentum, Adagrad, SparseAdam or Adam); a torch
    optimizer (e.g. SparseAdam over the embeddings' weights beside an Adam over the
    rest): mapped the same way; a dict of create_table keywords (optimizer, lr, seed,
    init and the row optimizers' settings): without "optimizer", added to the wrapped
    optimizer's mapping (e.g. {"init": (-0.1, 0.1), "seed": 3}), with it, used as it is.
    """

    def __init__(self, optimizer: torch.optim.Optimizer | OptimizerLike,
                 named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None, *,
                 model: nn.Module | None = None,
                 table_optimizer: torch.optim.Optimizer | Mapping[str, Any] | None = None,
                 client: Client | None = None, total_steps: int | None = None,
                 push_pull: bool = True, timeout_ms: int | None = None) -> None:
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"model: want a torch.nn.Module, not {type(model).__name__}")
        if isinstance(optimizer, torch.optim.Optimizer):
            params = [p for g in optimizer.param_groups for p in g["params"]]
        else:
            params = None
        if named_parameters is None and model is not None:
            named_parameters = model.named_parameters()
        if named_parameters is None:
            if params is None:
                raise ValueError("named_parameters is needed with an optimizer spec")
            named = [(f"param_{i}", p) for i, p in enumerate(params)]
        else:
            named = list(named_parameters)
        named = [(n, p) for n, p in named if p.requires_grad]
        embeddings = sparse_embeddings(model) if model is not None else []
        table_ids = {id(m.weight) for _, m in embeddings}
        table_kw = self._table_kwargs(optimizer, table_optimizer) if embeddings else {}
        if table_optimizer is not None and not embeddings:
            raise ValueError("table_optimizer without sparse embeddings to train (give model= "
                             "with nn.Embedding or nn.EmbeddingBag built with sparse=True)")
        if embeddings:
            owners = list(params or [])
            if isinstance(table_optimizer, torch.optim.Optimizer):
                owners += [p for g in table_optimizer.param_groups for p in g["params"]]
            if isinstance(optimizer, torch.optim.Optimizer):
                owned = {id(p) for p in owners}
                missing = [n for n, m in embeddings if id(m.weight) not in owned]
                if missing:
                    raise ValueError(f"sparse embeddings {missing[:5]}: their weights are in "
                                     "no optimizer given")
        named = [(n, p) for n, p in named if id(p) not in table_ids]
        if not named:
            raise ValueError("no dense parameters that require gradients" +
                             (" (a model of embedding tables alone is not supported here: use "
                              "ps.Client.create_table directly)" if embeddings else ""))
        spec: OptimizerLike = (spec_from_torch(optimizer)
                               if isinstance(optimizer, torch.optim.Optimizer) else optimizer)
        if params is not None:
            ids = {id(p) for p in params}
            missing = [n for n, p in named if id(p) not in ids]
            if missing:
                raise ValueError(f"named_parameters has parameters the optimizer does not: "
                                 f"{missing[:5]}")
        variables = []
        for n, p in named:
            if p.dtype != torch.float32:
                raise TypeError(f"parameter '{n}': dtype {p.dtype}, want torch.float32")
            if p.device.type != "cpu":
                raise ValueError(f"parameter '{n}' is on {p.device}: the client reads CPU "
                                 "memory (move the model to the CPU)")
            if not p.is_contiguous():
                raise ValueError(f"parameter '{n}' is not contiguous")
            if p.grad is None or p.grad.data_ptr() == 0 or not p.grad.is_contiguous():
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            variables.append((n, p.detach().numpy(), p.grad.detach().numpy()))
        super().__init__([p for _, p in named] + [m.weight for _, m in embeddings], {})
        self._named = named
        self._grads = [p.grad for _, p in named]  # the registered buffers
        own = client is None
        if own:
            client = Client.from_tf_config(
                timeout_ms=timeout_ms if timeout_ms is not None else
                int(os.environ.get("PS_TIMEOUT_MS", "120000")))
        self.client = client
        self.copies = 0  # steps that had to copy a replaced .grad into its buffer
        self.rows_pulled = 0  # rows the embeddings' pre-hooks pulled (all calls)
        self.rows_pushed = 0  # gradient rows step() pushed (all steps)
        self._finished = False
        self._own_client = own
        with torch.no_grad():
            self.worker = Worker(client, variables, spec, total_steps=total_steps,
                                 push_pull=push_pull)
        self._tables: list[_TableModule] = []
        for mname, m in embeddings:
            tname = f"{mname}.weight" if mname else "weight"
            t = client.create_table(tname, m.embedding_dim, num_rows=m.num_embeddings,
                                    **table_kw)
            self._tables.append(_TableModule(tname, m, t, self))
        ref = weakref.ref(self)
        atexit.register(lambda: ref() and ref().finish())

    def __del__(self) -> None:
        # Collected (the script's function returned) before the exit handler ran: the
        # worker leaves the job now, so the shards count it as finished, not as lost
        # (a connection that closes without a Goodbye removes its worker as failed).
        try:
            self.finish()
        except Exception:  # half-built, or the interpreter is shutting down
            pass

    @staticmethod
    def _table_kwargs(optimizer: Any, table_optimizer: Any) -> dict[str, Any]:
        """create_table's keywords for the tables (see the class's docstring)."""
        if isinstance(table_optimizer, torch.optim.Optimizer):
            return table_spec_from_torch(table_optimizer)
        if table_optimizer is not None and not isinstance(table_optimizer, Mapping):
            raise TypeError("table_optimizer: want a torch optimizer or a dict of "
                            f"create_table keywords, not {type(table_optimizer).__name__}")
        given = dict(table_optimizer or {})
        unknown = [k for k in given if k not in _TABLE_KEYS]
        if unknown:
            raise ValueError(f"table_optimizer: unknown keys {unknown} (create_table's: "
                             f"{', '.join(_TABLE_KEYS)})")
        if "optimizer" in given:
            return given
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError("the embedding tables need a torch optimizer to map, or "
                             "table_optimizer= (a torch optimizer, or a dict with 'optimizer'"
                             f"); supported for tables: {TABLE_SUPPORTED}")
        return {**table_spec_from_torch(optimizer), **given}

    @property
    def tables(self) -> dict[str, Table]:
        """The embedding tables, by name ("<module name>.weight")."""
        return {t.name: t.table for t in self._tables}

    @property
    def clock(self) -> int:
        """The job's step (sync) or this worker's pushes (async): where to resume."""
        return self.worker.clock

    @property
    def is_chief(self) -> bool:
        return self.client.is_chief

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes the registered gradient buffers in place (set_to_none is not honoured:
        the buffers' memory is what the client sends)."""
        for (_, p), buf in zip(self._named, self._grads):
            buf.zero_()
            if p.grad is not buf:
                p.grad = buf
        for t in self._tables:
            t.weight.grad = None  # sparse: nothing to zero in place

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for (n, p), buf in zip(self._named, self._grads):
            if p.grad is None:
                buf.zero_()  # no gradient this step: push zeros
                p.grad = buf
            elif p.grad.is_sparse:
                raise TypeError(f"parameter '{n}' has a sparse gradient: give "
                                "DistributedOptimizer the model (model=) so that its sparse "
                                "embeddings are held as tables")
            elif p.grad is not buf:
                buf.copy_(p.grad)
                p.grad = buf
                self.copies += 1
        for i, t in enumerate(self._tables):  # the rows first: the dense step closes a sync step
            self.rows_pushed += t.push(last=i + 1 == len(self._tables))
        self.worker.step()
        return loss

    def finish(self) -> None:
        """Leaves the job (goodbye) and closes the client it made; idempotent."""
        if self._finished:
            return
        self._finished = True
        for t in self._tables:  # the model runs locally from here (on the rows it has)
            t.handle.remove()
        try:
            self.worker.finish()
        finally:
            if self._own_client:
                self.client.close()

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError("the optimizer's state lives on psd: checkpoint the shards "
                                  "(psd --checkpoint-dir, Client.checkpoint)")
