"""Python client for the psd parameter server (over libps, by ctypes).

    import numpy as np, ps
    with ps.Client.from_tf_config() as c:          # or ps.Client(["127.0.0.1:7000"], 0, 1)
        w = ps.Worker(c, {"w": (params, grads)}, optimizer={"name": "sgd",
                                                           "learning_rate": 0.1})
        for _ in range(steps):
            grads[...] = ...                       # in place: the array is registered
            w.step()                               # params now hold the new values
        w.finish()

No tensor data is copied by the package: arrays are registered by address (see
ps.client). PyTorch: ps.torch.DistributedOptimizer. libps's log lines go to the
logging module's "ps" logger.
"""
from __future__ import annotations

import logging

from . import _lib
from .client import (Client, Placed, Table, describe_optimizer, optimizer_spec,
                     tf_config_worker)
from .errors import *  # noqa: F401,F403  (every exception class)
from .errors import __all__ as _errors_all
from .worker import Worker

__version__ = "0.1.0"

_log = logging.getLogger("ps")
_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


@_lib.LOG_FN
def _log_line(user, level, line):  # called by libps, from any thread that uses a client
    _log.log(_LEVELS.get(level, logging.ERROR), "%s", line.decode(errors="replace"))


_lib.lib.ps_lib_set_log(_log_line, None, 1)  # INFO and above

__all__ = ["Client", "Worker", "Placed", "Table", "optimizer_spec", "describe_optimizer",
           "tf_config_worker"] + list(_errors_all)
