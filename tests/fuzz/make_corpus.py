#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_request (format: harness.h):
valid requests of every type and a few malformed ones, protobuf encoded by
hand (stdlib only). Names: ok-* expect no Error reply from a fresh shard,
bad-* at least one (tests/unit/test_fuzz_regressions.c checks this).
usage: make_corpus.py [OUT_DIR]   (default: corpus/ beside this script)"""
import os
import struct
import sys

# ---- protobuf wire encoding ----


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def f_varint(field, v):
    return key(field, 0) + varint(v) if v else b""


def f_bytes(field, b):
    return key(field, 2) + varint(len(b)) + b


def f_float(field, v):
    return key(field, 5) + struct.pack("<f", v) if v else b""


def f_packed(field, values):
    return f_bytes(field, b"".join(varint(v) for v in values))


# ---- ps.proto messages ----

SYNC, ASYNC, BACKUP, STALE = 0, 1, 2, 3  # shards (harness.h)
RAW, GHOST, MISALIGN, TRUNCATED, FRESH = 0x04, 0x08, 0x10, 0x20, 0x40
VARS = {"w": [4, 3], "b": [3], "e": [2, 2, 2]}  # what every shard starts with
# one variable per other optimizer (created by the ok-optimizers-* seeds)
OPT_VARS = {"ag": ([3], dict(kind=2, lr=0.1, epsilon=1e-7, initial_accumulator=0.1)),
            "rm": ([2, 2], dict(kind=3, lr=0.01, rho=0.9, epsilon=1e-7)),
            "nm": ([2], dict(kind=1, lr=0.1, momentum=0.9, nesterov=1)),
            "aw": ([1, 3], dict(kind=5, lr=0.001, beta1=0.9, beta2=0.999, epsilon=1e-7,
                                weight_decay=0.01))}
VARS.update({n: shape for n, (shape, _) in OPT_VARS.items()})

# Header body fields
HELLO, WELCOME, CREATE_VARS, PULL, PUSH, STATS = 10, 11, 12, 14, 16, 18
SHUTDOWN, HEARTBEAT, GOODBYE, CHECKPOINT = 20, 23, 24, 26
PUSH_PULL = 28


def header(body_field, body, request_id=1, version=1):
    return f_varint(1, version) + f_varint(2, request_id) + f_bytes(body_field, body)


def tensor_meta(name, shape, nbytes=None, dtype=1):
    n = 4
    for d in shape:
        n *= d
    raw_name = name if isinstance(name, bytes) else name.encode()
    return (f_bytes(1, raw_name) + f_varint(2, dtype) + f_packed(3, shape)
            + f_varint(4, n if nbytes is None else nbytes))


def encoded_meta(name, shape, dtype, nbytes, nnz=0):
    """A TensorMeta of an encoded gradient (--compression): DT_F16 2, DT_BF16 3, DT_TOPK_F32 4."""
    return (f_bytes(1, name.encode()) + f_varint(2, dtype) + f_packed(3, shape)
            + f_varint(4, nbytes) + (f_varint(5, nnz) if nnz else b""))


def encoded_push(meta, payload, worker=0):
    return [header(PUSH, f_bytes(1, meta) + f_varint(3, worker), request_id=4), payload]


def pairs(*iv):
    return b"".join(struct.pack("<If", i, v) for i, v in iv)


def optimizer(kind=0, lr=0.1, momentum=0.0, beta1=0.0, beta2=0.0, epsilon=0.0, nesterov=0,
              rho=0.0, weight_decay=0.0, initial_accumulator=0.0):
    return (f_varint(1, kind) + f_float(2, lr) + f_float(3, momentum) + f_varint(4, nesterov)
            + f_float(5, beta1) + f_float(6, beta2) + f_float(7, epsilon) + f_float(8, rho)
            + f_float(9, weight_decay) + f_float(10, initial_accumulator))


def floats(n, start=0.5):
    return struct.pack("<%df" % n, *[start + 0.25 * i for i in range(n)])


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def hello(w, nw=2):
    return header(HELLO, f_varint(1, w) + f_varint(2, nw))


def pull(names, min_version=0, worker=None, clock=0):
    body = b"".join(f_bytes(1, n if isinstance(n, bytes) else n.encode()) for n in names)
    body += f_varint(2, min_version)
    if worker is not None:
        body += f_varint(3, worker) + f_varint(4, clock) + f_varint(5, 1)
    return header(PULL, body, request_id=3)


def push(names, step=0, worker=0, clock=0, values=None):
    """[header, payload...] for a push of gradients for `names`."""
    body = b"".join(f_bytes(1, tensor_meta(n, VARS[n])) for n in names)
    body += f_varint(2, step) + f_varint(3, worker) + f_varint(4, clock)
    frames = [header(PUSH, body, request_id=4)]
    for n in names:
        frames.append(values if values is not None else floats(numel(VARS[n]), 0.1 * (worker + 1)))
    return frames


def push_pull(names, step=0, worker=0, clock=0, values=None):
    """[header, payload...] for a PushPull { Push push = 1; } of the same gradients."""
    body = b"".join(f_bytes(1, tensor_meta(n, VARS[n])) for n in names)
    body += f_varint(2, step) + f_varint(3, worker) + f_varint(4, clock)
    return [header(PUSH_PULL, f_bytes(1, body), request_id=5)] + push(names, step, worker, clock,
                                                                     values)[1:]


def empty(field):
    return header(field, b"")


def one_worker(field, w):
    return header(field, f_varint(1, w))


# ---- framing (harness.h) ----


def message(frames):
    """Records of one message: u16 length, bit 15 on the last."""
    assert 1 <= len(frames) <= 8  # PS_FUZZ_MAX_FRAMES
    out = bytearray()
    for i, fr in enumerate(frames):
        assert len(fr) < 0x8000
        out += struct.pack("<H", len(fr) | (0x8000 if i == len(frames) - 1 else 0)) + fr
    return bytes(out)


def framed(flags, *messages):
    return bytes([flags]) + b"".join(message(m) for m in messages)


def raw(flags, hdr):
    return bytes([flags | RAW]) + hdr


def seeds():
    create_frames = [
        header(CREATE_VARS,
               f_bytes(1, tensor_meta("x", [2, 2])) + f_bytes(1, tensor_meta("w", [4, 3]))
               + f_bytes(1, tensor_meta("r", [5])) + f_bytes(2, optimizer(kind=3, lr=0.01))
               + f_bytes(2, optimizer()) + f_bytes(2, optimizer(kind=2, lr=0.5)),
               request_id=2),
        floats(4), floats(12), floats(5)]
    yield "ok-hello", framed(SYNC, [hello(0)], [hello(1)])
    yield "ok-create-vars", framed(SYNC, create_frames, [pull(["x", "r"])])
    yield "ok-create-vars-adamw", framed(
        ASYNC, [header(CREATE_VARS, f_bytes(1, tensor_meta("z", [2, 1, 3]))
                       + f_bytes(2, optimizer(kind=5, lr=0.001, beta1=0.9, beta2=0.999,
                                              epsilon=1e-7)), request_id=2), floats(6)])
    create_opts = [header(CREATE_VARS, b"".join(f_bytes(1, tensor_meta(n, sh))
                                                for n, (sh, _) in OPT_VARS.items())
                          + b"".join(f_bytes(2, optimizer(**o)) for _, o in OPT_VARS.values()),
                          request_id=2)]
    create_opts += [floats(numel(sh)) for sh, _ in OPT_VARS.values()]
    yield "ok-optimizers-async", framed(ASYNC | FRESH, create_opts, push(list(OPT_VARS), 0, 0, 0),
                                        push(list(OPT_VARS), 0, 1, 0), [pull(list(OPT_VARS))])
    yield "ok-optimizers-sync", framed(SYNC | FRESH, create_opts, push(list(OPT_VARS), 0, 0),
                                       push(list(OPT_VARS), 0, 1), [pull(list(OPT_VARS), 1)])
    def create_scalars(names):
        return [header(CREATE_VARS, b"".join(f_bytes(1, tensor_meta(n, [1])) for n in names)
                       + b"".join(f_bytes(2, optimizer()) for _ in names), request_id=2)] + [
                           floats(1)] * len(names)
    # 3 + 4 variables fit, 4 more would make 11 > --max-vars 10
    yield "bad-max-vars", framed(SYNC, create_scalars(["v0", "v1", "v2", "v3"]),
                                 create_scalars(["v4", "v5", "v6", "v7"]))
    yield "ok-pull", framed(SYNC, [pull(["w", "b", "e"])])
    yield "ok-pull-raw", raw(ASYNC, pull(["w", "e"]))
    yield "ok-hello-raw", raw(SYNC, hello(1))
    # sync: both workers push step 0; the pull deferred for version 1 is answered
    yield "ok-sync-step", framed(SYNC | FRESH, [pull(["w", "b"], 1, 0)], push(["w", "b"], 0, 0),
                                 push(["w", "b", "e"], 0, 1), [pull(["w"], 1)])
    # async: pushes apply on arrival; a pull for a future version waits for them
    yield "ok-async-push", framed(ASYNC | FRESH, [pull(["e"], 2)], push(["e", "w"], 0, 0, 0),
                                  push(["e"], 0, 1, 0), [pull(["b"], 0, 1, 1)])
    # async --staleness 1: worker 0 runs ahead and waits until worker 1 pushes
    yield "ok-staleness", framed(STALE | FRESH, push(["b"], 0, 0, 0), push(["b"], 0, 0, 1),
                                 push(["b"], 0, 0, 2), [pull(["b"], 0, 0, 3)],
                                 push(["b"], 0, 1, 0), push(["b"], 0, 1, 1))
    # backup workers: worker 0 closes the step, worker 1's push is dropped
    yield "ok-backup-drop", framed(BACKUP | FRESH, push(["w"], 0, 0), push(["w"], 0, 1),
                                   [pull(["w"], 1, 1)])
    yield "ok-push-misaligned", framed(ASYNC | MISALIGN, push(["w", "b"], 0, 1, 0))
    # PushPull: sync, worker 0's reply waits for worker 1's push; async, at once
    yield "ok-push-pull-sync", framed(SYNC | FRESH, push_pull(["w", "b"], 0, 0),
                                      push_pull(["w", "b", "e"], 0, 1), push_pull(["b"], 0, 0))
    yield "ok-push-pull-async", framed(ASYNC | FRESH, push_pull(["e", "w"], 0, 0, 0),
                                       push_pull(["e"], 0, 1, 0), [pull(["e"])])
    yield "ok-push-pull-stale", framed(STALE | FRESH, push_pull(["b"], 0, 0, 0),
                                       push_pull(["b"], 0, 0, 1), push_pull(["b"], 0, 1, 0))
    yield "bad-push-pull-empty", raw(ASYNC, header(PUSH_PULL, b""))
    yield "bad-push-pull-nan", framed(ASYNC, push_pull(["b"], values=struct.pack("<3f", 1,
                                                                              float("inf"), 2)))
    yield "ok-stats", framed(SYNC, [empty(STATS)])
    yield "ok-heartbeat", framed(SYNC, [one_worker(HEARTBEAT, 1)], [empty(STATS)])
    # Goodbye from worker 1 closes a step only worker 0 pushed for
    yield "ok-goodbye", framed(SYNC | FRESH, push(["e"], 0, 0), [one_worker(GOODBYE, 1)],
                               [pull(["e"], 1)], [hello(1)])
    yield "ok-checkpoint", framed(BACKUP, push(["b"], 0, 0), [empty(CHECKPOINT)])
    yield "ok-checkpoint-async", raw(ASYNC, empty(CHECKPOINT))
    # Shutdown answers the deferred pull with ESHUTDOWN (an Error): "bad"
    yield "bad-shutdown", framed(SYNC, [pull(["w"], 1)], [empty(SHUTDOWN)], [empty(STATS)])
    yield "ok-shutdown-raw", raw(STALE, empty(SHUTDOWN))
    yield "ok-ghost-pull", framed(SYNC | GHOST, [pull(["w"])], [pull(["b"], 1)])
    # malformed
    yield "bad-no-header-frame", bytes([SYNC])
    yield "bad-empty-header", framed(SYNC, [b""])
    yield "bad-garbage-header", framed(SYNC, [b"\xff\xff\xff\xff\x0f garbage"])
    yield "bad-wrong-version", raw(SYNC, header(STATS, b"", version=7))
    yield "bad-no-body", raw(SYNC, f_varint(1, 1) + f_varint(2, 9))
    yield "bad-reply-as-request", raw(SYNC, header(WELCOME, f_varint(1, 0)))
    yield "bad-pull-with-payload", framed(SYNC, [pull(["w"]), floats(2)])
    yield "bad-pull-unknown", framed(ASYNC, [pull(["w", "nope"])])
    yield "bad-pull-future-sync", framed(SYNC, [pull(["w"], 5)])
    yield "bad-push-nbytes", framed(ASYNC, [header(PUSH, f_bytes(1, tensor_meta("b", [3], 16)),
                                                   request_id=4), floats(4)])
    yield "bad-push-shape", framed(ASYNC, [header(PUSH, f_bytes(1, tensor_meta("b", [1, 3])),
                                                  request_id=4), floats(3)])
    yield "bad-push-dtype", framed(ASYNC, [header(PUSH, f_bytes(1, tensor_meta("b", [3], dtype=0)),
                                                  request_id=4), floats(3)])
    yield "bad-push-frame-count", framed(ASYNC, push(["w", "b"])[:2])
    twice = push(["b"], 0, 0, 0)
    yield "bad-push-twice", framed(ASYNC, [header(PUSH, f_bytes(1, tensor_meta("b", [3])) * 2,
                                                  request_id=4), twice[1], twice[1]])
    yield "bad-push-nan", framed(ASYNC, push(["b"], values=struct.pack("<3f", 1, float("nan"), 2)))
    # encoded gradients (--compression): half and bfloat16 values, top-k pairs
    halves = struct.pack("<3H", 0x3C00, 0xB800, 0x0001)
    yield "ok-push-f16", framed(ASYNC, encoded_push(encoded_meta("b", [3], 2, 6), halves),
                                [pull(["b"])])
    yield "ok-push-bf16", framed(SYNC | FRESH, encoded_push(encoded_meta("b", [3], 3, 6), halves),
                                 encoded_push(encoded_meta("b", [3], 3, 6), halves, 1))
    yield "ok-push-topk", framed(ASYNC, encoded_push(encoded_meta("w", [4, 3], 4, 16, 2),
                                                     pairs((1, 0.5), (11, -0.25))),
                                 [pull(["w"])])
    yield "bad-push-f16-nbytes", framed(ASYNC, encoded_push(encoded_meta("b", [3], 2, 12),
                                                            floats(3)))
    yield "bad-push-f16-inf", framed(ASYNC, encoded_push(encoded_meta("b", [3], 2, 6),
                                                         struct.pack("<3H", 0, 0x7C00, 0)))
    yield "bad-push-topk-index", framed(ASYNC, encoded_push(encoded_meta("w", [4, 3], 4, 16, 2),
                                                            pairs((1, 0.5), (12, 1.0))))
    yield "bad-push-topk-order", framed(ASYNC, encoded_push(encoded_meta("w", [4, 3], 4, 16, 2),
                                                            pairs((5, 0.5), (5, 1.0))))
    yield "bad-push-topk-nnz", framed(ASYNC, encoded_push(encoded_meta("b", [3], 4, 32, 4),
                                                          pairs((0, 1), (1, 1), (2, 1), (2, 1))))
    yield "bad-push-topk-dense-nnz", framed(ASYNC, encoded_push(encoded_meta("b", [3], 2, 6, 1),
                                                                halves))
    yield "bad-push-worker-range", framed(SYNC, push(["b"], 0, 9))
    yield "bad-push-future-step", framed(SYNC, push(["b"], 3, 0))
    yield "bad-create-twice", framed(SYNC, [header(
        CREATE_VARS, f_bytes(1, tensor_meta("q", [1])) + f_bytes(1, tensor_meta("q", [1]))
        + f_bytes(2, optimizer()) + f_bytes(2, optimizer()), request_id=2), floats(1), floats(1)])
    yield "bad-create-reshape", framed(SYNC, [header(
        CREATE_VARS, f_bytes(1, tensor_meta("w", [12])) + f_bytes(2, optimizer()), request_id=2),
        floats(12)])
    yield "bad-create-optimizer", framed(SYNC, [header(
        CREATE_VARS, f_bytes(1, tensor_meta("q", [2])) + f_bytes(2, optimizer(kind=1, momentum=2)),
        request_id=2), floats(2)])
    # names: valid UTF-8 without NUL, checked at decode (an embedded NUL would alias "w")
    def create_one(name, values=None, opt=None):
        return [header(CREATE_VARS, f_bytes(1, tensor_meta(name, [2]))
                       + f_bytes(2, opt or optimizer()), request_id=2),
                values if values is not None else floats(2)]
    yield "ok-create-utf8", framed(SYNC, create_one("w\u00e9ight/\u6743\U0001f600"),
                                   [pull(["w\u00e9ight/\u6743\U0001f600".encode()])])
    yield "bad-create-name-nul", framed(SYNC, create_one(b"w\0x"))
    yield "bad-create-name-overlong", framed(SYNC, create_one(b"\xc0\xaf"))
    yield "bad-pull-name-surrogate", framed(SYNC, [pull([b"w", b"\xed\xa0\x80"])])
    yield "bad-push-name-truncated", framed(ASYNC, [header(
        PUSH, f_bytes(1, tensor_meta(b"b\xe2\x82", [3])), request_id=4), floats(3)])
    yield "bad-push-pull-name-nul", framed(ASYNC, [header(
        PUSH_PULL, f_bytes(1, f_bytes(1, tensor_meta(b"b\0", [3]))), request_id=5), floats(3)])
    # initial values are finite; an existing variable keeps its optimizer
    yield "bad-create-nan", framed(SYNC, create_one("q", struct.pack("<2f", 1, float("nan"))))
    yield "bad-create-other-optimizer", framed(SYNC, [header(
        CREATE_VARS, f_bytes(1, tensor_meta("w", [4, 3])) + f_bytes(2, optimizer(lr=0.5)),
        request_id=2), floats(12)])
    yield "bad-hello-workers", raw(SYNC, hello(0, 3))
    yield "bad-truncated", framed(SYNC | TRUNCATED, [empty(STATS)])
    yield "bad-checkpoint-no-dir", raw(SYNC, empty(CHECKPOINT))
    yield "bad-goodbye-range", raw(SYNC, one_worker(GOODBYE, 2))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
