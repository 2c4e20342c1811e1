"""ctypes bindings to libps (client/ps.h): the structures and prototypes, nothing else.

The library is found as, in order: $PS_LIBRARY (a path, e.g. the build tree's
client/libps.so.0), the path `meson install` wrote into _install_paths.py, then
"libps.so.0" through the dynamic linker's search path.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double,
                    c_float, c_int, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

NAME_MAX = 96  # ps_client_tensor.name, ps_piece.name


LR_MAX_BOUNDARIES = 16  # PS_LR_MAX_BOUNDARIES


class LrSchedule(Structure):
    """ps_lr_schedule (common/optim_spec.h): a learning-rate schedule."""
    _fields_ = [("kind", c_int), ("decay_steps", c_float), ("decay_rate", c_float),
                ("staircase", c_bool), ("alpha", c_float), ("warmup_target", c_float),
                ("warmup_steps", c_float), ("n_boundaries", c_uint),
                ("boundaries", c_uint * LR_MAX_BOUNDARIES),
                ("values", c_float * LR_MAX_BOUNDARIES)]


class OptSpec(Structure):
    """ps_opt_spec (common/optim_spec.h)."""
    _fields_ = [("kind", c_int), ("lr", c_float), ("momentum", c_float),
                ("nesterov", c_bool), ("beta1", c_float), ("beta2", c_float),
                ("epsilon", c_float), ("rho", c_float), ("weight_decay", c_float),
                ("initial_accumulator", c_float), ("clipnorm", c_float),
                ("clipvalue", c_float), ("global_clipnorm", c_float),
                ("schedule", LrSchedule)]


class ClientTensor(Structure):
    """ps_client_tensor: a tensor (or row slice) on one shard; param/grad borrowed."""
    _fields_ = [("name", c_char * NAME_MAX), ("shard", c_uint), ("rank", c_size_t),
                ("shape", c_size_t * 2), ("param", POINTER(c_float)),
                ("grad", POINTER(c_float)), ("opt", OptSpec)]


class VarDesc(Structure):
    _fields_ = [("name", c_char_p), ("rank", c_size_t), ("shape", POINTER(c_size_t))]


class Piece(Structure):
    _fields_ = [("var", c_size_t), ("shard", c_uint), ("part", c_uint), ("num_parts", c_uint),
                ("row_begin", c_size_t), ("row_end", c_size_t), ("name", c_char * NAME_MAX)]


class TableSpec(Structure):
    """ps_table_spec: an embedding table's definition (name and optimizer borrowed)."""
    _fields_ = [("name", c_char_p), ("dim", c_uint64), ("num_rows", c_uint64),
                ("optimizer", c_char_p), ("lr", c_float), ("epsilon", c_float),
                ("initial_accumulator", c_float), ("beta1", c_float), ("beta2", c_float),
                ("l1", c_float), ("l2", c_float), ("lr_power", c_float),
                ("init_lo", c_float), ("init_hi", c_float), ("seed", c_uint64),
                ("min_count", c_uint32), ("ttl_steps", c_uint64), ("max_rows", c_uint64),
                ("refuse_when_full", c_int)]


class JoinInfo(Structure):
    """ps_join_info: how a worker joins a job (in) and where the job is (out)."""
    _fields_ = [("chief", c_int), ("recreate_lost", c_int), ("wait_ms", c_int),
                ("total_steps", c_uint64), ("pull", c_int), ("lost", POINTER(c_uint)),
                ("lost_cap", c_size_t), ("async", c_int), ("version", c_uint64),
                ("clock", c_uint64), ("created", c_size_t), ("n_lost", c_size_t),
                ("lost_error", c_char * 512), ("waited", c_int)]


class VarStats(Structure):
    _fields_ = [("name", c_char_p), ("numel", c_uint64), ("optimizer", c_char_p)]


_U64 = c_uint64
TABLE_STATS_U64_FIELDS = ["dim", "num_rows", "rows", "admitted", "evicted", "expired",
                          "refused", "dropped", "bytes", "max_rows"]


class TableStats(Structure):
    """ps_table_stats: one embedding table's share on a shard (strings owned by the
    Stats that holds it)."""
    _fields_ = ([("name", c_char_p), ("optimizer", c_char_p)]
                + [(n, _U64) for n in TABLE_STATS_U64_FIELDS])


STATS_U64_FIELDS = (
    ["requests", "errors", "pushes_applied", "stale_pushes", "bytes_in", "bytes_out",
     "pending_pulls"],
    ["updates_applied", "workers_removed", "dropped_pushes", "max_staleness",
     "staleness_waits", "checkpoints", "checkpoint_version"],
    ["incarnation", "auth_denied", "pending_pull_bytes", "pending_pulls_refused",
     "pending_pulls_timed_out", "pending_pulls_released", "dropped_replies",
     "loop_turns_cut", "checkpoint_failures"],
)


class Stats(Structure):
    """ps_stats: one shard's StatsReply (strings, vars and tables owned: ps_stats_free)."""
    _fields_ = ([("version", _U64), ("mode", c_int), ("shard_index", c_uint),
                 ("num_workers", c_uint), ("live_workers", c_uint)]
                + [(n, _U64) for n in STATS_U64_FIELDS[0]]
                + [("uptime_seconds", c_double), ("vars", POINTER(VarStats)),
                   ("n_vars", c_size_t)]
                + [(n, _U64) for n in STATS_U64_FIELDS[1]]
                + [("checkpoint_age_seconds", c_double)]
                + [(n, _U64) for n in STATS_U64_FIELDS[2]]
                + [("job_id", c_char_p), ("push_bytes", _U64),
                   ("tables", POINTER(TableStats)), ("n_tables", c_size_t),
                   ("live_set", POINTER(c_uint)), ("n_live_set", c_size_t),
                   ("workers_min", c_uint)])


class CheckpointInfo(Structure):
    _fields_ = [("version", c_uint64), ("bytes", c_uint64), ("path", c_char * 4096)]


class ShardResult(Structure):
    _fields_ = [("rc", c_int), ("remote", c_int), ("error", c_char * 512)]


LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


def _candidates() -> list[str]:
    out = []
    env = os.environ.get("PS_LIBRARY")
    if env:
        return [env]  # given: only that one, so a wrong path is an error, not a fallback
    try:
        from . import _install_paths  # written by meson install
        out.append(_install_paths.LIBPS)
    except ImportError:
        pass
    out.append("libps.so.0")
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("cannot load libps (set PS_LIBRARY to the path of libps.so.0): "
                      + "; ".join(errors))


lib = _load()

_P = c_void_p  # ps_client *
_T = c_void_p  # ps_table * (owned by its client)
ROWS_END_STEP = 1  # PS_ROWS_END_STEP
_PROTOS = {
    # name: (restype, argtypes)
    "ps_strerror": (c_char_p, [c_int]),
    "ps_errname": (c_char_p, [c_int]),
    "ps_lib_set_log": (None, [LOG_FN, c_void_p, c_int]),
    "ps_opt_spec_default": (OptSpec, [c_int]),
    "ps_opt_kind_parse": (c_int, [c_char_p, POINTER(c_int)]),
    "ps_opt_spec_validate": (c_int, [POINTER(OptSpec), c_char_p, c_size_t]),
    "ps_opt_spec_describe": (c_char_p, [POINTER(OptSpec), c_char_p, c_size_t]),
    "ps_opt_spec_from_json_text": (c_int, [c_char_p, POINTER(OptSpec), c_char_p, c_size_t]),
    "ps_tf_config_worker": (c_int, [c_char_p, c_char_p, c_size_t, POINTER(c_uint),
                                    POINTER(c_uint), c_char_p, c_size_t]),
    "ps_place_vars": (c_int, [POINTER(VarDesc), c_size_t, c_uint, POINTER(POINTER(Piece)),
                              POINTER(c_size_t), c_char_p, c_size_t]),
    "ps_pieces_free": (None, [POINTER(Piece)]),
    "ps_client_open": (c_int, [POINTER(_P), POINTER(c_char_p), c_size_t, c_uint, c_uint,
                               c_char_p, c_size_t]),
    "ps_client_set_curve": (c_int, [_P, c_char_p, c_char_p, c_char_p, c_size_t]),
    "ps_client_close": (None, [_P]),
    "ps_client_set_timeout": (c_int, [_P, c_int]),
    "ps_client_set_retry": (c_int, [_P, c_int]),
    "ps_client_set_ipv6": (c_int, [_P, c_int]),
    "ps_client_add": (c_int, [_P, POINTER(ClientTensor)]),
    "ps_client_hello": (c_int, [_P, POINTER(c_int), POINTER(c_uint64)]),
    "ps_client_set_job": (c_int, [_P, c_char_p]),
    "ps_client_check_shards": (c_int, [_P, POINTER(c_uint), c_size_t, POINTER(c_size_t)]),
    "ps_client_worker_clock": (c_uint64, [_P]),
    "ps_client_check_progress": (c_int, [_P, c_int, c_uint64]),
    "ps_client_create_vars": (c_int, [_P, POINTER(c_size_t)]),
    "ps_client_pull": (c_int, [_P, c_uint64, POINTER(c_uint64)]),
    "ps_client_pull_next": (c_int, [_P, c_int, c_uint64, POINTER(c_uint64)]),
    "ps_client_push": (c_int, [_P, c_uint64, POINTER(c_int)]),
    "ps_client_push_next": (c_int, [_P, c_uint64, POINTER(c_size_t)]),
    "ps_client_step_begin": (c_int, [_P, c_uint64]),
    "ps_client_grads_ready": (c_int, [_P, c_void_p, c_void_p]),
    "ps_client_step_end": (c_int, [_P, POINTER(c_size_t), POINTER(c_int)]),
    "ps_client_join": (c_int, [_P, POINTER(JoinInfo)]),
    "ps_client_goodbye": (c_int, [_P]),
    "ps_client_table_spec": (None, [POINTER(TableSpec), c_char_p, c_uint64, c_char_p, c_float]),
    "ps_client_create_table": (c_int, [_P, POINTER(TableSpec), POINTER(_T)]),
    "ps_client_pull_rows": (c_int, [_T, c_void_p, c_size_t, c_void_p]),
    "ps_client_push_rows": (c_int, [_T, c_void_p, c_size_t, c_void_p, c_int, POINTER(c_uint64)]),
    "ps_client_table_dim": (c_uint64, [_T]),
    "ps_stats_free": (None, [POINTER(Stats)]),
    "ps_client_stats": (c_int, [_P, c_uint, POINTER(Stats)]),
    "ps_client_checkpoint": (c_int, [_P, c_uint, POINTER(CheckpointInfo)]),
    "ps_client_shutdown": (c_int, [_P, c_uint]),
    "ps_client_stats_all": (c_int, [_P, POINTER(Stats), POINTER(ShardResult)]),
    "ps_client_checkpoint_all": (c_int, [_P, POINTER(CheckpointInfo), POINTER(ShardResult)]),
    "ps_client_shutdown_all": (c_int, [_P, POINTER(ShardResult)]),
    "ps_client_error": (c_char_p, [_P]),
    "ps_client_num_shards": (c_size_t, [_P]),
}
for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
