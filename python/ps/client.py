"""The client: one connection per psd shard, variables registered from NumPy arrays.

No tensor data is copied by this module: a variable's parameter and gradient
arrays are registered by address, so a push reads the gradient array in place and
a pull (or the step exchange) writes the parameter array in place. The arrays
must stay alive and keep their memory while the client is open (the client holds
a reference to each). Copies happen only inside libps and psd (the wire).

Embedding tables (Client.create_table, Table) are not registered: a pull of rows
returns a new array, a push of rows reads the gradient array given to it.
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import weakref
from ctypes import byref, c_char_p, c_int, c_size_t, c_uint, c_uint64
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np

from . import _lib
from ._lib import lib
from .errors import PsError, VariablesLostError, check, error_for

ERRLEN = 512
TABLE_NAME_MAX = 255  # bytes in a table name (PS_WIRE_MAX_NAME)
TABLE_DIM_MAX = 65536
# the settings each row optimizer reads besides lr (ps_table_spec's fields), as ps.h
# and common/optim_rows.h list them
ROW_OPTIMIZERS: dict[str, tuple[str, ...]] = {
    "sgd": (),
    "adagrad": ("epsilon", "initial_accumulator"),
    "rowwise_adagrad": ("epsilon", "initial_accumulator"),
    "lazy_adam": ("epsilon", "beta1", "beta2"),
    "ftrl": ("initial_accumulator", "l1", "l2", "lr_power"),
}
_ROW_SETTINGS = ("epsilon", "initial_accumulator", "beta1", "beta2", "l1", "l2", "lr_power")
_U64_MAX = (1 << 64) - 1
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


def _uint(what: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{what}: want an int, not {v!r}")
    if not lo <= int(v) <= hi:
        raise ValueError(f"{what}: {int(v)} (allowed {lo}..{hi})")
    return int(v)


def _f32_value(what: str, v: Any) -> float:
    """v as the float32 the spec holds (finite)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{what}: want a number, not {v!r}")
    try:
        with np.errstate(over="ignore"):
            f = np.float32(v)
    except OverflowError:  # an int beyond any float
        f = np.float32(np.inf)
    if not np.isfinite(f):
        raise ValueError(f"{what}: {v!r} is not a finite float32")
    return float(f)


def _table_spec(name: str, dim: int, num_rows: int, optimizer: str, lr: float, seed: int,
                init: tuple[float, float], min_count: int, ttl_steps: int, max_rows: int,
                when_full: str, settings: Mapping[str, Any]
                ) -> tuple[_lib.TableSpec, tuple[bytes, bytes]]:
    """The ps_table_spec for create_table's arguments (Keras' defaults for the optimizer,
    then the settings given), checked by psd's rules; ValueError says what is wrong.
    Returns it with the strings it points to (keep them alive while it is used)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"table name: want a non-empty str, not {name!r}")
    name_b = name.encode()
    if len(name_b) > TABLE_NAME_MAX or b"\0" in name_b:
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise ValueError(f"table name {shown!r} ({len(name_b)} bytes): want 1.."
                         f"{TABLE_NAME_MAX} bytes, no NUL")
    what = f"table '{name}'"
    dim = _uint(f"{what}: dim", dim, 1, TABLE_DIM_MAX)
    num_rows = _uint(f"{what}: num_rows", num_rows, 0, _U64_MAX)
    if not isinstance(optimizer, str) or optimizer not in ROW_OPTIMIZERS:
        raise ValueError(f"{what}: optimizer {optimizer!r} (want one of "
                         f"{', '.join(ROW_OPTIMIZERS)})")
    reads = ROW_OPTIMIZERS[optimizer]
    for k in settings:
        if k not in _ROW_SETTINGS:
            raise ValueError(f"{what}: unknown setting {k!r} (the row optimizers' settings: "
                             f"{', '.join(_ROW_SETTINGS)})")
        if k not in reads:
            raise ValueError(f"{what}: {optimizer} does not read {k!r} (it reads "
                             f"{', '.join(reads) if reads else 'only lr'})")
    lr = _f32_value(f"{what}: lr", lr)
    if not lr > 0:
        raise ValueError(f"{what}: lr {lr!r} (want > 0)")
    opt_b = optimizer.encode()
    spec = _lib.TableSpec()
    lib.ps_client_table_spec(byref(spec), name_b, dim, opt_b, lr)  # Keras' defaults
    for k, v in settings.items():
        setattr(spec, k, _f32_value(f"{what}: {k}", v))
    if not spec.epsilon >= 0:
        raise ValueError(f"{what}: epsilon {spec.epsilon!r} (want >= 0)")
    if not spec.initial_accumulator >= 0 or (optimizer == "ftrl"
                                             and not spec.initial_accumulator > 0):
        raise ValueError(f"{what}: initial_accumulator {spec.initial_accumulator!r} (want "
                         f"{'> 0 for ftrl' if optimizer == 'ftrl' else '>= 0'})")
    if optimizer == "lazy_adam" and not (0 <= spec.beta1 < 1 and 0 <= spec.beta2 < 1):
        raise ValueError(f"{what}: beta1 {spec.beta1!r}, beta2 {spec.beta2!r} (want "
                         "0 <= beta < 1)")
    if optimizer == "ftrl" and not (spec.l1 >= 0 and spec.l2 >= 0 and spec.lr_power <= 0):
        raise ValueError(f"{what}: l1 {spec.l1!r}, l2 {spec.l2!r}, lr_power "
                         f"{spec.lr_power!r} (want l1, l2 >= 0 and lr_power <= 0)")
    if not (isinstance(init, (tuple, list)) and len(init) == 2):
        raise ValueError(f"{what}: init: want (low, high), not {init!r}")
    lo, hi = (_f32_value(f"{what}: init", v) for v in init)
    if not lo <= hi:
        raise ValueError(f"{what}: init ({lo!r}, {hi!r}): want low <= high")
    spec.init_lo, spec.init_hi = lo, hi
    spec.seed = _uint(f"{what}: seed", seed, 0, _U64_MAX)
    spec.min_count = _uint(f"{what}: min_count", min_count, 0, (1 << 32) - 1)
    spec.ttl_steps = _uint(f"{what}: ttl_steps", ttl_steps, 0, _U64_MAX)
    spec.max_rows = _uint(f"{what}: max_rows", max_rows, 0, (1 << 32) - 2)
    if num_rows and (spec.min_count > 1 or spec.ttl_steps or spec.max_rows):
        raise ValueError(f"{what}: min_count, ttl_steps and max_rows are for dynamic tables "
                         f"(num_rows 0), not one of {num_rows} rows")
    if when_full not in ("evict", "refuse"):
        raise ValueError(f"{what}: when_full {when_full!r} (want 'evict' or 'refuse')")
    spec.refuse_when_full = int(when_full == "refuse")
    spec.name, spec.optimizer = name_b, opt_b
    spec.num_rows = num_rows
    return spec, (name_b, opt_b)


def _ids(ids: Any, what: str) -> np.ndarray:
    """ids (any 1-D integer array-like) as C-contiguous uint64; negative ids are a
    ValueError, other dtypes a TypeError."""
    try:
        a = np.asarray(ids)
    except OverflowError:
        raise ValueError(f"{what}: ids must lie in 0..2^64-1") from None
    if a.ndim != 1:
        raise ValueError(f"{what}: ids: want a 1-D array, not "
                         + ("a scalar (wrap it: [id])" if a.ndim == 0
                            else f"shape {a.shape} (ravel it)"))
    if a.size == 0:
        return np.empty(0, np.uint64)
    if a.dtype.kind not in "iu" and all(isinstance(v, (int, np.integer))
                                        and not isinstance(v, bool) for v in ids):
        # Python ints that no one integer dtype holds (e.g. -1 and 2^64 - 1: NumPy makes
        # them float64): checked one by one
        a = np.array(list(ids), dtype=object)
        bad = [i for i, v in enumerate(a) if not 0 <= int(v) <= _U64_MAX]
        if bad:
            raise ValueError(f"{what}: id {a[bad[0]]} (at {bad[0]}) is not in 0..2^64-1")
        return np.array([int(v) for v in a], np.uint64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{what}: ids have dtype {a.dtype}, want integers")
    if a.dtype.kind == "i":
        neg = np.flatnonzero(a < 0)
        if neg.size:
            raise ValueError(f"{what}: id {a[neg[0]]} (at {neg[0]}) is negative (ids are "
                             "0..2^64-1)")
    return np.ascontiguousarray(a, dtype=np.uint64)


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
    comma-separated string); a replicated shard is one entry listing its replicas,
    "host:port|host:port" (the client fails over to the primary). Use as a context
    manager, or call close(). One thread at a time per client; the calls release the GIL
    while they wait on the network.
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
        spec = optimizer_spec(optimizer)
        triples = self._triples(variables)
        placed = []
        for var, pc in self._place(triples):
            name, param, grad = triples[var]
            placed.append(self._add_piece(name, pc.name, param, grad, pc.shard, pc.rows, spec))
        return placed

    def place_variables(self, variables: VariablesLike) -> list[Placed]:
        """Where add_variables would put these variables, without registering them."""
        return [pc for _, pc in self._place(self._triples(variables))]

    def _triples(self, variables: VariablesLike) -> list[tuple[str, np.ndarray, np.ndarray]]:
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
        for name, param, grad in triples:
            self._check_pair(name, param, grad)
        return triples

    def _place(self, triples: list[tuple[str, np.ndarray, np.ndarray]]
               ) -> list[tuple[int, Placed]]:
        """libps's placement of the variables: (index in triples, piece) per piece."""
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
            out = []
            for k in range(n.value):
                pc = pieces[k]
                out.append((pc.var, Placed(triples[pc.var][0], pc.name.decode(), pc.shard,
                                           (pc.row_begin, pc.row_end))))
            return out
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
        """psworker's way into a job (libps's ps_client_join): hello; the chief (worker 0)
        checks the shards and creates the variables, the others wait (up to wait_s) until
        they exist; then pulls the current values into the param arrays. Returns the
        worker's clock: the steps the job has taken (sync: the version) or this worker's
        pushes (async). VariablesLostError when a shard lost its part and recreate_lost
        is False; PsTimeoutError when the chief's variables do not come within wait_s."""
        if not (wait_s > 0):
            raise ValueError(f"wait_s must be > 0, not {wait_s!r}")
        info = _lib.JoinInfo()
        info.chief = int(self.is_chief)
        info.recreate_lost = int(bool(recreate_lost))
        info.wait_ms = int(min(wait_s * 1000.0, 2**31 - 1))
        info.total_steps = 0 if total_steps is None else int(total_steps)
        info.pull = 1
        self._check(lib.ps_client_join(self._handle(), byref(info)))
        self.is_async = bool(getattr(info, "async"))
        return int(info.clock)

    def goodbye(self) -> None:
        """Tells every shard this worker is done (it leaves the expected set)."""
        self._check(lib.ps_client_goodbye(self._handle()))

    # ---- embedding tables -------------------------------------------------------------
    def create_table(self, name: str, dim: int, *, num_rows: int = 0, optimizer: str = "sgd",
                     lr: float = 0.01, seed: int = 0, init: tuple[float, float] = (-0.05, 0.05),
                     min_count: int = 0, ttl_steps: int = 0, max_rows: int = 0,
                     when_full: str = "evict", **optimizer_kwargs: float) -> "Table":
        """Creates an embedding table on every shard (after hello or join) and returns it:
        rows of `dim` float32 values addressed by 64-bit id, spread over the shards by a
        hash of (name, id). Every worker of a job creates it with the same arguments (an
        existing table of the same spec is kept; another spec is ExistsError).

        num_rows: ids < num_rows (0: a dynamic table, any id). optimizer: "sgd",
        "adagrad", "rowwise_adagrad", "lazy_adam" or "ftrl" at rate lr, with Keras'
        defaults for the rest; optimizer_kwargs override them, only those the optimizer
        reads (epsilon, initial_accumulator, beta1, beta2, l1, l2, lr_power). A row not
        pushed yet reads as uniform in [init[0], init[1]) from seed, name and id, the same
        on every process. Dynamic tables only: a row is stored at its min_count-th push
        (0, 1: the first), expires after ttl_steps steps without a push (0: never), and
        each shard stores at most max_rows (0: no cap), then evicts the least recently
        pushed row (when_full "evict") or refuses new rows ("refuse"). A bad argument is a
        ValueError before anything is sent."""
        spec, _strings = _table_spec(name, dim, num_rows, optimizer, lr, seed, init,
                                     min_count, ttl_steps, max_rows, when_full,
                                     optimizer_kwargs)
        t = ctypes.c_void_p()
        self._check(lib.ps_client_create_table(self._handle(), byref(spec), byref(t)))
        return Table(self, t, name, int(num_rows))

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
        dense variables, "tables" its share of each embedding table (see create_table)."""
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


class Table:
    """An embedding table (Client.create_table): rows of `dim` float32 values addressed by
    id. Usable while its client is open, with the client's threading rule."""

    def __init__(self, client: Client, handle: ctypes.c_void_p, name: str, num_rows: int
                 ) -> None:
        self._client = client
        self._t = handle
        self.name = name
        self.num_rows = num_rows  # 0: dynamic
        self.dim = int(lib.ps_client_table_dim(handle))

    def __repr__(self) -> str:
        rows = f"{self.num_rows} rows" if self.num_rows else "dynamic"
        return f"<ps.Table {self.name!r} dim {self.dim}, {rows}>"

    def _handle(self) -> ctypes.c_void_p:
        self._client._handle()  # the client owns the table: closed, it is gone
        return self._t

    def pull_rows(self, ids: Any) -> np.ndarray:
        """The rows of ids (1-D, integers >= 0; repeats allowed) as a new float32 array of
        shape [len(ids), dim], in the order asked. A row never stored reads as its initial
        values. Sync: waits until every shard has closed the step this worker last pushed
        to (a push with end_step)."""
        a = _ids(ids, f"pull_rows of table '{self.name}'")
        out = np.empty((a.size, self.dim), np.float32)
        self._client._check(lib.ps_client_pull_rows(self._handle(), a.ctypes.data, a.size,
                                                    out.ctypes.data))
        return out

    def push_rows(self, ids: Any, grads: np.ndarray, *, end_step: bool = False) -> int:
        """Pushes gradients (float32, C-contiguous, shape [len(ids), dim]) for the rows of
        ids; a repeated id's gradients are summed. Async: psd applies them at once. Sync:
        they join the open step, whose update applies the mean over the workers; one push
        per table and step, before the dense step, and end_step=True on the step's last
        one: it ends this worker's step on the shards that hold none of its dense
        variables (all of them for a worker with none). Returns how many row gradients psd did not
        apply (async: rows not admitted yet, or refused at the cap; sync: 0)."""
        what = f"push_rows of table '{self.name}'"
        a = _ids(ids, what)
        if not isinstance(grads, np.ndarray):
            raise TypeError(f"{what}: grads: want a numpy.ndarray of float32, not "
                            f"{type(grads).__name__}")
        if grads.dtype != np.float32:
            raise TypeError(f"{what}: grads: dtype is {grads.dtype}, want float32")
        if grads.shape != (a.size, self.dim):
            raise ValueError(f"{what}: grads: shape {grads.shape}, want ({a.size}, {self.dim}) "
                             "(one row of dim values per id)")
        if not grads.flags.c_contiguous:
            raise ValueError(f"{what}: grads: not C-contiguous (use numpy.ascontiguousarray)")
        dropped = c_uint64()
        self._client._check(lib.ps_client_push_rows(
            self._handle(), a.ctypes.data, a.size, grads.ctypes.data,
            _lib.ROWS_END_STEP if end_step else 0, byref(dropped)))
        return dropped.value


def _stats_dict(s: _lib.Stats) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for name, _ in _lib.Stats._fields_:
        if name in ("vars", "n_vars", "job_id", "tables", "n_tables", "live_set", "n_live_set"):
            continue
        d[name] = getattr(s, name)
    d["mode"] = {0: "sync", 1: "async"}.get(s.mode, s.mode)
    d["job_id"] = (s.job_id or b"").decode()
    d["vars"] = [{"name": s.vars[i].name.decode(), "numel": s.vars[i].numel,
                  "optimizer": (s.vars[i].optimizer or b"").decode()} for i in range(s.n_vars)]
    d["tables"] = [_table_stats_dict(s.tables[i]) for i in range(s.n_tables)]
    d["live_set"] = [s.live_set[i] for i in range(s.n_live_set)]
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
