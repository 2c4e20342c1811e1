"""Every ps_err code (common/ps_error.h) as an exception class.

All derive from PsError, which carries the code (a negative int), its name
("ESTALE") and libps's one-line message. Where a caller would branch there is a
class of its own, some also deriving from the built-in exception a Python user
would catch (TimeoutError, LookupError, ValueError, MemoryError, OSError).
"""
from __future__ import annotations

from ._lib import lib


class PsError(Exception):
    """A libps call failed: .code (negative), .name ("ETIMEDOUT"), .message."""

    code = 0

    def __init__(self, message: str, code: int | None = None) -> None:
        if code is not None:
            self.code = code
        self.name = lib.ps_errname(self.code).decode()
        self.message = message
        super().__init__(f"{self.name}: {message}")


def _cls(name: str, code: int, doc: str, *bases: type) -> type:
    return type(name, (PsError, *bases), {"code": code, "__doc__": doc})


InvalidArgumentError = _cls("InvalidArgumentError", -1, "PS_EINVAL: bad argument or configuration.", ValueError)
ProtocolError = _cls("ProtocolError", -2, "PS_EPROTO: a malformed message.")
VersionMismatchError = _cls("VersionMismatchError", -3, "PS_EVERSION: protocol version mismatch.")
UnknownVariableError = _cls("UnknownVariableError", -4, "PS_ENOENT: the shard holds no such variable.", LookupError)
ShapeError = _cls("ShapeError", -5, "PS_ESHAPE: wrong shape or dtype.", ValueError)
StaleStepError = _cls("StaleStepError", -6, "PS_ESTALE: a push for a step that was already applied.")
OutOfMemoryError = _cls("OutOfMemoryError", -7, "PS_ENOMEM: an allocation failed.", MemoryError)
PsIOError = _cls("PsIOError", -8, "PS_EIO: file or socket I/O failed.", OSError)
PsTimeoutError = _cls("PsTimeoutError", -9, "PS_ETIMEDOUT: no answer before the deadline.", TimeoutError)
ExistsError = _cls("ExistsError", -10, "PS_EEXIST: exists with another definition (e.g. another job's variables).")
FormatError = _cls("FormatError", -11, "PS_EFORMAT: bad file or spec format.", ValueError)
AddressInUseError = _cls("AddressInUseError", -12, "PS_EADDRINUSE: address already in use.", OSError)
ShuttingDownError = _cls("ShuttingDownError", -13, "PS_ESHUTDOWN: the shard is shutting down.")
RemoteError = _cls("RemoteError", -14, "PS_EREMOTE: the shard answered with an error reply.")
InternalError = _cls("InternalError", -15, "PS_EINTERNAL: a bug; should never happen.")
RejoinError = _cls("RejoinError", -16, "PS_EREJOIN: this worker timed out of the job: hello again.")
ShardRestartedError = _cls(
    "ShardRestartedError", -17,
    "PS_ERESTARTED: a shard restarted from a checkpoint during the request; this step's\n"
    "gradients are lost: pull again and go on (what psworker does).")
BusyError = _cls("BusyError", -18, "PS_EBUSY: a limit of the shard was reached: retry later.")
VariablesLostError = _cls(
    "VariablesLostError", -19,
    "PS_ELOST: a shard lost the job's variables (restarted without a checkpoint).")
NotPrimaryError = _cls(
    "NotPrimaryError", -20,
    "PS_ENOTPRIMARY: a replica of a shard that is not its primary (libps asks the others).")

_BY_CODE = {c.code: c for c in PsError.__subclasses__()}


def error_for(code: int, message: str) -> PsError:
    """The exception for a ps_err code (an unknown code gives a plain PsError)."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls else PsError(message, code)


def check(rc: int, message: str) -> None:
    """Raises the exception for rc unless it is PS_OK (0)."""
    if rc != 0:
        raise error_for(rc, message or lib.ps_strerror(rc).decode())


__all__ = ["PsError", "error_for", "check"] + [c.__name__ for c in _BY_CODE.values()]
