"""The ctypes mirror of libps (python/ps/_lib.py) matches the C library's ABI, and every
ps_err code has its own exception class.

The layouts come from abi_dump (tests/python/abi_dump.c, compiled against client/ps.h by
the same compiler as libps); the field lists are also read from the headers, so a field
added to ps.h without abi_dump or _lib.py following fails here."""
from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import env_path

import ps
from ps import _lib, errors

# C name -> the ctypes class that mirrors it
MIRRORS = {
    "ps_lr_schedule": _lib.LrSchedule,
    "ps_opt_spec": _lib.OptSpec,
    "ps_client_tensor": _lib.ClientTensor,
    "ps_var_desc": _lib.VarDesc,
    "ps_piece": _lib.Piece,
    "ps_var_stats": _lib.VarStats,
    "ps_stats": _lib.Stats,
    "ps_table_stats": _lib.TableStats,
    "ps_table_spec": _lib.TableSpec,
    "ps_join_info": _lib.JoinInfo,
    "ps_checkpoint_info": _lib.CheckpointInfo,
    "ps_shard_result": _lib.ShardResult,
}


def source_root() -> Path:
    root = os.environ.get("PS_SOURCE_ROOT")
    if not root:
        pytest.fail("$PS_SOURCE_ROOT is not set (run through meson test)")
    return Path(root)


@pytest.fixture(scope="module")
def dump() -> dict:
    out = subprocess.run([env_path("ABI_DUMP")], capture_output=True, timeout=30, check=True)
    return json.loads(out.stdout)


def header_structs(*headers: Path) -> dict[str, list[str]]:
    """{typedef name: field names in order} for every `typedef struct [tag] {...} name;`."""
    found: dict[str, list[str]] = {}
    for h in headers:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", h.read_text(), flags=re.S)
        structs = r"typedef\s+struct\s*(?:\w+\s*)?\{(.*?)\}\s*(\w+)\s*;"
        for body, name in re.findall(structs, text, re.S):
            names = []
            for decl in filter(None, (d.strip() for d in body.split(";"))):
                decl = re.sub(r"\[[^\]]*\]", "", decl).replace("*", " ")
                parts = [p.strip() for p in decl.split(",")]
                names.append(parts[0].split()[-1])
                names += [p.split()[-1] for p in parts[1:]]
            found[name] = names
    return found


def test_every_mirrored_struct_is_dumped(dump):
    assert sorted(dump) == sorted(MIRRORS)
    # and _lib.py mirrors no other structure that would go unchecked
    mine = {v for v in vars(_lib).values()
            if isinstance(v, type) and issubclass(v, ctypes.Structure)}
    mine.discard(ctypes.Structure)
    assert mine == set(MIRRORS.values())


@pytest.mark.parametrize("cname", sorted(MIRRORS))
def test_field_lists_match_the_headers(dump, cname):
    root = source_root()
    heads = header_structs(root / "client" / "ps.h", root / "common" / "optim_spec.h")
    assert cname in heads, f"{cname} not found in ps.h / optim_spec.h"
    c_fields = [f[0] for f in dump[cname]["fields"]]
    assert c_fields == heads[cname], "abi_dump.c does not list the header's fields"
    py_fields = [f[0] for f in MIRRORS[cname]._fields_]
    assert py_fields == heads[cname], "_lib.py's fields are not the header's"


@pytest.mark.parametrize("cname", sorted(MIRRORS))
def test_layout_matches(dump, cname):
    cls = MIRRORS[cname]
    d = dump[cname]
    assert ctypes.sizeof(cls) == d["size"], f"sizeof({cname})"
    assert ctypes.alignment(cls) <= d["size"]
    for name, offset, size in d["fields"]:
        f = getattr(cls, name)
        assert (f.offset, f.size) == (offset, size), \
            f"{cname}.{name}: ctypes offset/size {(f.offset, f.size)}, C {(offset, size)}"


def header_codes() -> dict[str, int]:
    text = (source_root() / "common" / "ps_error.h").read_text()
    codes = {n: int(v) for n, v in re.findall(r"\b(PS_E[A-Z0-9_]+)\s*=\s*(-?\d+)", text)}
    assert len(codes) >= 19, "parsing ps_error.h found too few codes"
    return codes


def test_every_error_code_has_its_class():
    codes = header_codes()
    seen = set()
    for cname, code in sorted(codes.items(), key=lambda kv: -kv[1]):
        classes = [c for c in vars(errors).values()
                   if isinstance(c, type) and issubclass(c, ps.PsError) and c is not ps.PsError
                   and c.code == code]
        assert len(classes) == 1, f"{cname} ({code}): classes {classes}"
        cls = classes[0]
        assert cls not in seen
        seen.add(cls)
        assert cls.__doc__.startswith(cname + ":"), f"{cls.__name__} says {cls.__doc__!r}"
        e = errors.error_for(code, "a message")
        assert type(e) is cls
        assert e.code == code
        assert e.name == cname[len("PS_"):], f"{cls.__name__}.name {e.name!r}, want {cname}"
        assert e.message == "a message"
        assert str(e) == f"{e.name}: a message"
        assert getattr(ps, cls.__name__) is cls, f"ps.{cls.__name__} not exported"
    # no class for a code the header does not have
    extra = [c for c in errors.PsError.__subclasses__() if c.code not in codes.values()]
    assert extra == []
    # an unknown code is a plain PsError that keeps it
    e = errors.error_for(-1000, "odd")
    assert type(e) is ps.PsError and e.code == -1000
