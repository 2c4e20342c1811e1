"""psworker's training-loop protocol over a Client, for models written in Python.

    w = Worker(client, {"w": (w, dw), "b": (b, db)}, optimizer="adam")
    for step in range(w.clock, total):        # the job's step: resume where it is
        ... compute dw, db from w, b ...       # w, b hold the values of step `step`
        w.step()                               # gradients out, new values in (in place)
    w.finish()

The same rules as the C worker: the chief (worker 0) creates the variables, the
others wait for them; each step is one PushPull round trip per shard (or a push
then a pull with push_pull=False); a shard that restarted from a checkpoint
during a step costs that step's gradients (a warning, then a pull and on), and a
shard that lost the job's variables fails the worker (VariablesLostError; left
uncaught, it ends the program with psworker's status 4, which psctl local treats
as fatal instead of restarting the worker into the same loss).
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any

from .client import Client, OptimizerLike, VariablesLike
from .errors import ShardRestartedError, VariablesLostError

log = logging.getLogger("ps")

# psworker's exit status when a shard lost the job's variables: psctl local stops the
# job at once instead of restarting the worker into the same loss
EXIT_VARIABLES_LOST = 4
_hook_installed = False


def _install_exit_status_hook() -> None:
    """An uncaught VariablesLostError ends a worker program with status 4, as psworker
    (after the usual traceback and the client's cleanup); other exceptions are left to
    the previous hook (status 1)."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: Any) -> None:
        previous(kind, value, tb)
        if isinstance(value, VariablesLostError):
            from .client import _close_all
            _close_all()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_VARIABLES_LOST)

    sys.excepthook = hook


class Worker:
    """Joins the job on construction; then step() once per training step."""

    def __init__(self, client: Client, variables: VariablesLike,
                 optimizer: OptimizerLike = None, *, total_steps: int | None = None,
                 push_pull: bool = True, recreate_lost: bool = False,
                 wait_s: float = 120.0) -> None:
        _install_exit_status_hook()
        self.client = client
        self.placed = client.add_variables(variables, optimizer)
        self.push_pull = push_pull
        self.clock = client.join(total_steps=total_steps, recreate_lost=recreate_lost,
                                 wait_s=wait_s)
        self.restarts_seen = 0  # steps whose gradients a restarted shard lost

    @property
    def is_async(self) -> bool:
        return bool(self.client.is_async)

    def step(self) -> None:
        """Sends this step's gradients (the grad arrays) and brings back the values (into
        the param arrays) of the step's end: sync, once every worker has pushed."""
        fresh = False
        try:
            if self.push_pull:
                _, fresh = self.client.step(self.clock)
            else:
                self.client.push_next(self.clock)
        except ShardRestartedError as e:
            self.restarts_seen += 1
            log.warning("%s; this step's gradients are lost, going on", e.message)
        self.clock += 1
        if not fresh:
            self.client.pull_next(self.clock)

    def finish(self) -> None:
        """Leaves the job (goodbye to every shard)."""
        self.client.goodbye()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is None:
            self.finish()
