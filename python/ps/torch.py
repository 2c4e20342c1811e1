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
"""
from __future__ import annotations

import atexit
import logging
import os
import weakref
from typing import Any, Callable, Iterable, Mapping

import torch

from .client import Client, OptimizerLike, tf_config_worker
from .worker import Worker

log = logging.getLogger("ps")

SUPPORTED = "torch.optim.SGD, Adam, AdamW, Adagrad, RMSprop (or a psd optimizer spec dict)"


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


def spec_from_torch(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The psd optimizer spec (the model file's names) for a torch optimizer's settings.
    ValueError for a kind or an option psd does not have (nothing is dropped silently)."""
    groups = opt.param_groups
    keys = [k for k in groups[0] if k != "params"]
    for g in groups[1:]:
        if any(g.get(k) != groups[0].get(k) for k in keys):
            raise ValueError("parameter groups with different hyperparameters: psd applies one "
                             "optimizer spec per job here; use one group")
    g = groups[0]
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


class DistributedOptimizer(torch.optim.Optimizer):
    """A torch optimizer whose updates run on psd shards (see the module's docstring).

    optimizer: a torch optimizer (its kind and hyperparameters become psd's) or a psd
    optimizer spec ("adam", or a dict in the model file's form); named_parameters: the
    model's named_parameters() (names on the shards; every worker gives the same);
    client: a ps.Client (default: Client.from_tf_config(timeout_ms=...));
    total_steps: the job's steps per worker, checked against the shards' progress.
    """

    def __init__(self, optimizer: torch.optim.Optimizer | OptimizerLike,
                 named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None, *,
                 client: Client | None = None, total_steps: int | None = None,
                 push_pull: bool = True, timeout_ms: int | None = None) -> None:
        if isinstance(optimizer, torch.optim.Optimizer):
            spec: OptimizerLike = spec_from_torch(optimizer)
            params = [p for g in optimizer.param_groups for p in g["params"]]
        else:
            spec = optimizer
            params = None
        if named_parameters is None:
            if params is None:
                raise ValueError("named_parameters is needed with an optimizer spec")
            named = [(f"param_{i}", p) for i, p in enumerate(params)]
        else:
            named = list(named_parameters)
        named = [(n, p) for n, p in named if p.requires_grad]
        if not named:
            raise ValueError("no parameters that require gradients")
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
        super().__init__([p for _, p in named], {})
        self._named = named
        self._grads = [p.grad for _, p in named]  # the registered buffers
        own = client is None
        if own:
            client = Client.from_tf_config(
                timeout_ms=timeout_ms if timeout_ms is not None else
                int(os.environ.get("PS_TIMEOUT_MS", "120000")))
        self.client = client
        self.copies = 0  # steps that had to copy a replaced .grad into its buffer
        with torch.no_grad():
            self.worker = Worker(client, variables, spec, total_steps=total_steps,
                                 push_pull=push_pull)
        self._finished = False
        ref = weakref.ref(self)
        atexit.register(lambda: ref() and ref().finish())
        self._own_client = own

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

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for (_, p), buf in zip(self._named, self._grads):
            if p.grad is None:
                buf.zero_()  # no gradient this step: push zeros
                p.grad = buf
            elif p.grad is not buf:
                buf.copy_(p.grad)
                p.grad = buf
                self.copies += 1
        self.worker.step()
        return loss

    def finish(self) -> None:
        """Leaves the job (goodbye) and closes the client it made; idempotent."""
        if self._finished:
            return
        self._finished = True
        try:
            self.worker.finish()
        finally:
            if self._own_client:
                self.client.close()

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError("the optimizer's state lives on psd: checkpoint the shards "
                                  "(psd --checkpoint-dir, Client.checkpoint)")
