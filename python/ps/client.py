"""The client: one connection per psd shard, variables registered from NumPy arrays.

No tensor data is copied by this module: a variable's parameter and gradient
arrays are registered by address, so a push reads the gradient array in place and
a pull (or the step exchange) writes the parameter array in place. The arrays
must stay alive and keep their memory while the client is open (the client holds
a reference to each). Copies happen only inside libps and psd (the wire).
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import time
import weakref
from ctypes import byref, c_char_p, c_int, c_size_t, c_uint, c_uint64
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np

from . import _lib
from ._lib import lib
from .errors import PsError, UnknownVariableError, VariablesLostError, check, error_for

ERRLEN = 512
OptimizerLike = Union[None, str, Mapping[str, Any], _lib.OptSpec]
VariablesLike = Union[Mapping[str, Any], Iterable[Any]]

_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # the heartbeat threads stop before the interpreter does
    for c in list(_open_clients):
        c.close()


def optimizer_spec(optimizer: OptimizerLike = None) -> _lib.OptSpec:
    """An optimizer spec in the model file's form: None (Adam's Keras defaults), a name
    ("sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"), or a dict with "name" and
    Keras's keys (learning_rate, momentum, nesterov, beta_1, beta_2, epsilon, rho,
    weight_decay, initial_accumulator_value, clipnorm, clipvalue, global_clipnorm;
    learning_rate may be a Keras schedule dict). Read by libps, with psworker's rules.
    The clipping is the worker's to do: psd never clips."""
    if isinstance(optimizer, _lib.OptSpec):
        return optimizer
    if optimizer is None:
        optimizer = "adam"
    if not isinstance(optimizer, (str, Mapping)):
        raise TypeError(f"optimizer must be a name or a dict, not {type(optimizer).__name__}")
    spec = _lib.OptSpec()
    err = ctypes.create_string_buffer(ERRLEN)
    text = json.dumps(dict(optimizer) if isinstance(optimizer, Mapping) else optimizer)
    check(lib.ps_opt_spec_from_json_text(text.encode(), byref(spec), err, ERRLEN),
          err.value.decode())
    return spec


def describe_optimizer(spec: _lib.OptSpec) -> str:
    """e.g. "adam lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-07" (what psd's stats show)."""
    buf = ctypes.create_string_buffer(1024)  # a schedule's boundaries make it long
    return lib.ps_opt_spec_describe(byref(spec), buf, 1024).decode()


def _f32(a: Any, what: str, writable: bool) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: want a numpy.ndarray of float32, not {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{what}: dtype is {a.dtype}, want float32 (the shards hold float32)")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: not C-contiguous (its memory is registered by address; "
                         "use numpy.ascontiguousarray and register that array)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{what}: read-only (pulls write the parameters in place)")
    if a.size == 0:
        raise ValueError(f"{what}: empty")
    return a


def _ptr(a: np.ndarray, offset_elems: int = 0) -> ctypes.POINTER(ctypes.c_float):
    return ctypes.cast(a.ctypes.data + 4 * offset_elems, ctypes.POINTER(ctypes.c_float))


@dataclass(frozen=True)
class Placed:
    """Where (a row range of) a registered variable lives."""
    variable: str
    name: str  # its name on the shard ("<variable>/part_<k>" when split)
    shard: int
    rows: tuple[int, int]  # [begin, end) of the first dimension


def tf_config_worker(tf_config: str | None = None) -> tuple[list[str], int, int]:
    """(ps endpoints, this worker's index, number of workers) from TF_CONFIG (the
    environment's when None), by psworker's rules (a "chief" is worker 0)."""
    text = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
    if not text:
        raise error_for(-1, "TF_CONFIG is not set (psctl local --worker-cmd sets it for each "
                            "worker)")
    ps_list = ctypes.create_string_buffer(65536)
    index, n = c_uint(), c_uint()
    err = ctypes.create_string_buffer(ERRLEN)
    check(lib.ps_tf_config_worker(text.encode(), ps_list, 65536, byref(index), byref(n), err,
                                  ERRLEN), err.value.decode())
    return ps_list.value.decode().split(","), index.value, n.value


class Client:
    """A worker's (or an administrator's) connection to every psd shard of a job.

    endpoints: "host:port" or "ipc://PATH" per shard, in shard order (a list, or one
    comma-separated string). Use as a context manager, or call close(). One thread at a
    time per client; the calls release the GIL while they wait on the network.
    """

    def __init__(self, endpoints: Sequence[str] | str, worker_index: int = 0,
                 num_workers: int = 1, *, timeout_ms: int | None = None,
                 retry_ms: int | None = None, job_id: str | None = None,
                 curve: tuple[str, str] | None = None, ipv6: bool = False) -> None:
        self._c = ctypes.c_void_p()
        if isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",")]
        endpoints = list(endpoints)
        if not endpoints or not all(isinstance(e, str) and e for e in endpoints):
            raise ValueError("endpoints: want one or more 'host:port' or 'ipc://PATH' strings")
        for name, v in (("worker_index", worker_index), ("num_workers", num_workers)):
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name}: want an int >= 0, not {v!r}")
        if worker_index >= max(num_workers, 1):
            raise ValueError(f"worker_index {worker_index} is not below num_workers {num_workers}")
        arr = (c_char_p * len(endpoints))(*[e.encode() for e in endpoints])
        err = ctypes.create_string_buffer(ERRLEN)
        check(lib.ps_client_open(byref(self._c), arr, len(endpoints), worker_index, num_workers,
                                 err, ERRLEN), err.value.decode())
        _open_clients.add(self)
        self.endpoints = endpoints
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.is_async: bool | None = None  # from hello()
        self._keep: list[np.ndarray] = []  # arrays whose addresses libps holds
        self._by_name: dict[str, Placed] = {}
        try:
            if timeout_ms is not None:
                self._check(lib.ps_client_set_timeout(self._c, int(timeout_ms)))
            if retry_ms is not None:
                self._check(lib.ps_client_set_retry(self._c, int(retry_ms)))
            if ipv6:
                self._check(lib.ps_client_set_ipv6(self._c, 1))
            if job_id:
                self._check(lib.ps_client_set_job(self._c, job_id.encode()))
            if curve:
                err = ctypes.create_string_buffer(ERRLEN)
                check(lib.ps_client_set_curve(self._c, curve[0].encode(), curve[1].encode(),
                                              err, ERRLEN), err.value.decode())
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_tf_config(cls, tf_config: str | None = None, **kw: Any) -> "Client":
        """A worker's client from TF_CONFIG (the environment's when None): its shards,
        index and job size. The job id defaults to $PS_JOB_ID when set."""
        endpoints, index, n = tf_config_worker(tf_config)
        if "job_id" not in kw and os.environ.get("PS_JOB_ID"):
            kw["job_id"] = os.environ["PS_JOB_ID"]
        return cls(endpoints, index, n, **kw)

    # ---- life ------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the heartbeat and closes the sockets (idempotent). Does not say goodbye."""
        if getattr(self, "_c", None) and self._c.value:
            lib.ps_client_close(self._c)
            self._c = ctypes.c_void_p()
        _open_clients.discard(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _handle(self) -> ctypes.c_void_p:
        if not self._c.value:
            raise ValueError("the client is closed")
        return self._c

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise error_for(rc, lib.ps_client_error(self._c).decode()
                            or lib.ps_strerror(rc).decode())

    @property
    def num_shards(self) -> int:
        return int(lib.ps_client_num_shards(self._handle()))

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0

    # ---- variables -------------------------------------------------------------------
    def add(self, name: str, param: np.ndarray, grad: np.ndarray, *, shard: int,
            optimizer: OptimizerLike = None) -> None:
        """Registers one tensor that lives whole on `shard` under `name`. param and grad
        are float32, C-contiguous, of the same shape (rank 1 or 2 as the shard sees it;
        more dimensions are flattened behind the first)."""
        self._add_piece(name, name, param, grad, shard, (0, param.shape[0] if param.ndim else 1),
                        optimizer_spec(optimizer))

    def add_variables(self, variables: VariablesLike, optimizer: OptimizerLike = None
                      ) -> list[Placed]:
        """Registers a model's variables, placed on the shards as psworker places them
        (large ones split by rows). variables: {name: (param, grad)} or an iterable of
        (name, param, grad); every worker of a job must give the same names and shapes in
        the same order. Returns where each piece went."""
        items = list(variables.items()) if isinstance(variables, Mapping) else list(variables)
        triples = []
        for it in items:
            if isinstance(variables, Mapping):
                name, (param, grad) = it
            else:
                name, param, grad = it
            triples.append((name, param, grad))
        if not triples:
            raise ValueError("add_variables: no variables")
        spec = optimizer_spec(optimizer)
        for name, param, grad in triples:
            self._check_pair(name, param, grad)
        shapes = [(c_size_t * max(p.ndim, 1))(*(p.shape or (1,))) for _, p, _ in triples]
        names = [n.encode() for n, _, _ in triples]
        descs = (_lib.VarDesc * len(triples))(
            *[_lib.VarDesc(names[i], max(p.ndim, 1), shapes[i])
              for i, (_, p, _) in enumerate(triples)])
        pieces = ctypes.POINTER(_lib.Piece)()
        n = c_size_t()
        err = ctypes.create_string_buffer(ERRLEN)
        check(lib.ps_place_vars(descs, len(triples), self.num_shards, byref(pieces), byref(n),
                                err, ERRLEN), err.value.decode())
        try:
            placed = []
            for k in range(n.value):
                pc = pieces[k]
                name, param, grad = triples[pc.var]
                placed.append(self._add_piece(name, pc.name.decode(), param, grad, pc.shard,
                                              (pc.row_begin, pc.row_end), spec))
            return placed
        finally:
            lib.ps_pieces_free(pieces)

    @staticmethod
    def _check_pair(name: str, param: Any, grad: Any) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"variable name: want a non-empty str, not {name!r}")
        _f32(param, f"variable '{name}': param", True)
        _f32(grad, f"variable '{name}': grad", False)
        if param.shape != grad.shape:
            raise ValueError(f"variable '{name}': param shape {param.shape} and grad shape "
                             f"{grad.shape} differ")

    def _add_piece(self, var: str, name: str, param: np.ndarray, grad: np.ndarray, shard: int,
                   rows: tuple[int, int], spec: _lib.OptSpec) -> Placed:
        self._check_pair(var, param, grad)
        if len(name.encode()) >= _lib.NAME_MAX:
            raise ValueError(f"variable name '{name}' is longer than {_lib.NAME_MAX - 1} bytes")
        row_numel = param.size // (param.shape[0] if param.ndim else 1)
        t = _lib.ClientTensor()
        t.name = name.encode()
        t.shard = shard
        t.rank = 2 if param.ndim > 1 else 1
        t.shape[0] = rows[1] - rows[0]
        t.shape[1] = row_numel if param.ndim > 1 else 0
        t.param = _ptr(param, rows[0] * row_numel)
        t.grad = _ptr(grad, rows[0] * row_numel)
        t.opt = spec
        self._check(lib.ps_client_add(self._handle(), byref(t)))
        self._keep += [param, grad]
        placed = Placed(var, name, shard, rows)
        self._by_name[name] = placed
        return placed

    # ---- joining a job ---------------------------------------------------------------
    def hello(self) -> tuple[bool, int]:
        """Joins the job on every shard (checks protocol and job size, starts the
        heartbeat). Returns (async mode?, the smallest shard version)."""
        a, v = c_int(), c_uint64()
        self._check(lib.ps_client_hello(self._handle(), byref(a), byref(v)))
        self.is_async = bool(a.value)
        return self.is_async, v.value

    def check_shards(self) -> list[int]:
        """After hello: the shards that lost this job's variables (restarted without a
        checkpoint) while others hold theirs; [] when none. ExistsError: another job's."""
        lost = (c_uint * 1024)()
        n = c_size_t()
        rc = lib.ps_client_check_shards(self._handle(), lost, 1024, byref(n))
        if rc == VariablesLostError.code:
            return [lost[i] for i in range(min(n.value, 1024))]
        self._check(rc)
        return []

    def create_vars(self) -> int:
        """Creates every registered variable on its shard with the param arrays' current
        values (existing ones of the same shape are kept). Returns how many were new."""
        n = c_size_t()
        self._check(lib.ps_client_create_vars(self._handle(), byref(n)))
        return n.value

    def join(self, *, total_steps: int | None = None, wait_s: float = 120.0,
             recreate_lost: bool = False) -> int:
        """psworker's way into a job: hello; the chief (worker 0) checks the shards and
        creates the variables, the others wait (up to wait_s) until they exist; then pulls
        the current values into the param arrays. Returns the worker's clock: the steps
        the job has taken (sync: the version) or this worker's pushes (async).
        VariablesLostError when a shard lost its part and recreate_lost is False."""
        async_, version = self.hello()
        if self.is_chief:
            lost = self.check_shards()
            if lost and not recreate_lost:
                raise VariablesLostError(lib.ps_client_error(self._c).decode())
            self.create_vars()
        else:
            self.check_shards()  # another job's variables raise here
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    self.pull()
                    break
                except UnknownVariableError:
                    if time.monotonic() > deadline:
                        raise error_for(-9, f"the chief did not create the variables within "
                                            f"{wait_s:g} s") from None
                    time.sleep(0.1)
        if total_steps is not None:
            self._check(lib.ps_client_check_progress(self._c, int(async_), int(total_steps)))
        clock = int(lib.ps_client_worker_clock(self._c)) if async_ else version
        self.pull_next(clock)
        return clock

    def goodbye(self) -> None:
        """Tells every shard this worker is done (it leaves the expected set)."""
        self._check(lib.ps_client_goodbye(self._handle()))

    # ---- pulls, pushes and the step exchange ------------------------------------------
    def pull(self, min_version: int = 0) -> int:
        """Writes every registered variable's values into its param array (each shard
        answers once its version >= min_version). Returns the smallest shard version."""
        v = c_uint64()
        self._check(lib.ps_client_pull(self._handle(), min_version, byref(v)))
        return v.value

    def pull_next(self, clock: int) -> int:
        """The training loop's pull (sync: the step this worker last pushed to, once
        closed; async: the newest values, within the staleness bound)."""
        v = c_uint64()
        self._check(lib.ps_client_pull_next(self._handle(), int(bool(self.is_async)), clock,
                                            byref(v)))
        return v.value

    def push(self, step: int) -> bool:
        """Pushes every registered gradient array, tagged with step. True when every
        shard completed the step with it."""
        applied = c_int()
        self._check(lib.ps_client_push(self._handle(), step, byref(applied)))
        return bool(applied.value)

    def push_next(self, clock: int) -> int:
        """The training loop's push; returns how many shards dropped it (its step had
        closed). ShardRestartedError: a shard restarted from a checkpoint meanwhile."""
        dropped = c_size_t()
        self._check(lib.ps_client_push_next(self._handle(), clock, byref(dropped)))
        return dropped.value

    def step_begin(self, clock: int) -> None:
        """Opens a step exchange (then grads_ready as gradients become final, step_end)."""
        self._check(lib.ps_client_step_begin(self._handle(), clock))

    def grads_ready(self, grad: np.ndarray) -> None:
        """The gradients in this array are final: their shards' requests may leave now."""
        start = grad.ctypes.data
        self._check(lib.ps_client_grads_ready(self._handle(), start, start + grad.nbytes))

    def step_end(self) -> tuple[int, bool]:
        """Sends what is left, waits for every reply (values written into the param
        arrays). Returns (shards that dropped the push, fresh: every shard sent values)."""
        dropped, fresh = c_size_t(), c_int()
        self._check(lib.ps_client_step_end(self._handle(), byref(dropped), byref(fresh)))
        return dropped.value, bool(fresh.value)

    def step(self, clock: int) -> tuple[int, bool]:
        """One step exchange: each shard gets this worker's gradients and answers with its
        values after the update (one round trip per shard). See step_end."""
        try:
            self.step_begin(clock)
        except PsError as e:
            if e.code != -1:  # PS_EINVAL: no step was opened; else it is open with the error,
                self.step_end()  # and step_end closes it (raising that error)
            raise
        return self.step_end()

    # ---- admin -----------------------------------------------------------------------
    def stats(self, shard: int | None = None) -> Any:
        """A shard's stats as a dict (shard None: a list, one per shard). "vars" lists its
        dense variables, "tables" its share of each embedding table."""
        if shard is None:
            n = self.num_shards
            out, res = (_lib.Stats * n)(), (_lib.ShardResult * n)()
            rc = lib.ps_client_stats_all(self._handle(), out, res)
            try:
                self._check(rc)
                return [_stats_dict(out[i]) for i in range(n)]
            finally:
                for i in range(n):
                    if res[i].rc == 0:
                        lib.ps_stats_free(byref(out[i]))
        s = _lib.Stats()
        self._check(lib.ps_client_stats(self._handle(), shard, byref(s)))
        try:
            return _stats_dict(s)
        finally:
            lib.ps_stats_free(byref(s))

    def checkpoint(self, shard: int | None = None) -> Any:
        """Asks a shard (None: every shard) to write a checkpoint now; returns
        {"version", "bytes", "path"} (a list for every shard)."""
        if shard is None:
            n = self.num_shards
            out, res = (_lib.CheckpointInfo * n)(), (_lib.ShardResult * n)()
            self._check(lib.ps_client_checkpoint_all(self._handle(), out, res))
            return [_ckpt_dict(out[i]) for i in range(n)]
        info = _lib.CheckpointInfo()
        self._check(lib.ps_client_checkpoint(self._handle(), shard, byref(info)))
        return _ckpt_dict(info)

    def shutdown(self, shard: int | None = None) -> None:
        """Asks a shard (None: every shard) to shut down."""
        if shard is None:
            res = (_lib.ShardResult * self.num_shards)()
            self._check(lib.ps_client_shutdown_all(self._handle(), res))
        else:
            self._check(lib.ps_client_shutdown(self._handle(), shard))


def _stats_dict(s: _lib.Stats) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for name, _ in _lib.Stats._fields_:
        if name in ("vars", "n_vars", "job_id", "tables", "n_tables"):
            continue
        d[name] = getattr(s, name)
    d["mode"] = {0: "sync", 1: "async"}.get(s.mode, s.mode)
    d["job_id"] = (s.job_id or b"").decode()
    d["vars"] = [{"name": s.vars[i].name.decode(), "numel": s.vars[i].numel,
                  "optimizer": (s.vars[i].optimizer or b"").decode()} for i in range(s.n_vars)]
    d["tables"] = [_table_stats_dict(s.tables[i]) for i in range(s.n_tables)]
    return d


def _table_stats_dict(t: _lib.TableStats) -> dict[str, Any]:
    """One embedding table's share on a shard: name, optimizer (its kind), dim, num_rows
    (0: dynamic), rows (stored here now), admitted, evicted, expired, refused, dropped
    (row gradients not applied), bytes, max_rows (0: no cap)."""
    d: dict[str, Any] = {"name": (t.name or b"").decode(),
                         "optimizer": (t.optimizer or b"").decode()}
    for name in _lib.TABLE_STATS_U64_FIELDS:
        d[name] = getattr(t, name)
    return d


def _ckpt_dict(c: _lib.CheckpointInfo) -> dict[str, Any]:
    return {"version": c.version, "bytes": c.bytes, "path": c.path.decode()}
