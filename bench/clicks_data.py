#!/usr/bin/env python3
"""The click data of the click-model benchmark, shared by its peer baselines.

Reads the tab-separated files `psctl data synth-clicks` writes (a header
`label i1..i13 c1..c26`; label 0/1, i1..i13 non-negative integer counts,
c1..c26 categorical ids as hex digits), builds the vocabulary of the training
file and turns both files into the arrays the peers train on:

  cat     int32 [N, 26]  row indices into ONE embedding table of V + 1 rows:
                         every distinct (field, id) pair of the training file
                         gets a row 1..V (field by field, ids in increasing
                         order within a field); row 0 is the out-of-vocabulary
                         row, for test ids that training never saw
  dense   float32 [N, 13] log1p of the counts (no other normalization)
  label   float32 [N]

It also has the shard and shuffle both peers use (worker w of W owns the
training rows w, w + W, w + 2W, ...; each epoch it goes through them in the
order numpy's default_rng([seed, epoch, w]) permutes them) and the exact ROC
AUC (rank based, tied scores share their average rank).

Runs with numpy only (Debian's python3-numpy or a venv's). The fast path reads
the file with numpy in a few vectorized passes; files whose categorical fields
are not all 10 hex digits fall back to a line-by-line parser.

Run it alone to check a pair of files: it prints one JSON line with the row
counts, the vocabulary size, the out-of-vocabulary share of the test ids and
the loading time.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

NUMERIC = 13
CATEGORICAL = 26
HEADER = ["label"] + [f"i{j}" for j in range(1, NUMERIC + 1)] + \
    [f"c{j}" for j in range(1, CATEGORICAL + 1)]
HEX_DIGITS = 10
# from the first byte of c1 to the line's newline, inclusive
CAT_BLOCK = CATEGORICAL * (HEX_DIGITS + 1)


class Table:
    """One file's rows: label float32 [N], counts int64 [N, 13], ids uint64 [N, 26]."""

    def __init__(self, label, counts, ids):
        self.label, self.counts, self.ids = label, counts, ids

    def __len__(self):
        return self.label.shape[0]


def _hex_lut():
    lut = np.full(256, 255, dtype=np.uint8)
    for i, c in enumerate(b"0123456789abcdef"):
        lut[c] = i
    for i, c in enumerate(b"ABCDEF"):
        lut[c] = 10 + i
    return lut


def _fast_parse(body):
    """body: uint8 array of the rows after the header, ending with a newline.
    Returns a Table, or None when the rows are not in the fixed layout (26
    categorical fields of exactly 10 hex digits at the end of each line)."""
    nl = np.flatnonzero(body == 10)
    n = nl.size
    if n == 0:
        return Table(np.zeros(0, np.float32), np.zeros((0, NUMERIC), np.int64),
                     np.zeros((0, CATEGORICAL), np.uint64))
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    cstart = nl - (CAT_BLOCK - 1)            # first byte of c1
    if np.any(cstart - 1 < starts + 2 * NUMERIC + 1) or np.any(body[cstart - 1] != 9):
        return None
    lut = _hex_lut()
    ids = np.empty((n, CATEGORICAL), dtype=np.uint64)
    field_off = np.arange(CATEGORICAL, dtype=np.int64) * (HEX_DIGITS + 1)
    digit_off = np.arange(HEX_DIGITS, dtype=np.int64)
    seps = np.full(CATEGORICAL, 9, dtype=np.uint8)
    seps[-1] = 10
    chunk = 32768
    for a in range(0, n, chunk):
        cs = cstart[a:a + chunk]
        if np.any(body[cs[:, None] + field_off[None, :] + HEX_DIGITS] != seps[None, :]):
            return None
        nib = lut[body[cs[:, None, None] + field_off[None, :, None] + digit_off[None, None, :]]]
        if nib.max(initial=0) > 15:
            return None
        val = np.zeros((cs.size, CATEGORICAL), dtype=np.uint64)
        for k in range(HEX_DIGITS):
            val <<= np.uint64(4)
            val |= nib[:, :, k].astype(np.uint64)
        ids[a:a + chunk] = val
    # The label and the counts: each line's bytes before c1 (they end with a
    # tab), all lines' put end to end, read as one tab-separated integer list.
    lens = cstart - starts
    total = int(lens.sum())
    first = np.cumsum(lens) - lens
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - first, lens)
    text = body[idx].tobytes()
    if not text or text[-1:] != b"\t":
        return None
    allowed = np.zeros(256, dtype=bool)
    allowed[list(b"0123456789\t")] = True
    if not allowed[body[idx]].all():
        return None
    nums = np.fromstring(text[:-1], dtype=np.int64, sep="\t")
    if nums.size != n * (1 + NUMERIC):
        return None
    nums = nums.reshape(n, 1 + NUMERIC)
    return Table(nums[:, 0].astype(np.float32), nums[:, 1:].copy(), ids)


def _cat_id(s):
    """A categorical id as uint64: its hex value when it is at most 16 hex
    digits, else the first 8 bytes of its BLAKE2b digest (the empty string is 0)."""
    if len(s) <= 16:
        try:
            return int(s, 16) if s else 0
        except ValueError:
            pass
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")


def _slow_parse(text, path):
    rows = text.splitlines()
    n = len(rows)
    label = np.empty(n, dtype=np.float32)
    counts = np.empty((n, NUMERIC), dtype=np.int64)
    ids = np.empty((n, CATEGORICAL), dtype=np.uint64)
    for r, line in enumerate(rows):
        parts = line.split("\t")
        if len(parts) != 1 + NUMERIC + CATEGORICAL:
            raise SystemExit(f"clicks_data: {path}: line {r + 2} has {len(parts)} fields, "
                             f"not {1 + NUMERIC + CATEGORICAL}")
        label[r] = int(parts[0])
        counts[r] = [int(x) for x in parts[1:1 + NUMERIC]]
        ids[r] = [_cat_id(x) for x in parts[1 + NUMERIC:]]
    return Table(label, counts, ids)


def read_tsv(path):
    """Reads a synth-clicks TSV file into a Table."""
    raw = np.fromfile(path, dtype=np.uint8)
    nls = np.flatnonzero(raw[:4096] == 10)
    if nls.size == 0:
        raise SystemExit(f"clicks_data: {path}: no header line")
    head = raw[:nls[0]].tobytes().decode("ascii", "replace").rstrip("\r").split("\t")
    if head != HEADER:
        raise SystemExit(f"clicks_data: {path}: the header is not label, i1..i13, c1..c26")
    body = raw[nls[0] + 1:]
    if body.size and body[-1] != 10:
        body = np.concatenate([body, np.array([10], dtype=np.uint8)])
    table = _fast_parse(body)
    if table is None:
        print(f"clicks_data: {path}: not the fixed layout, parsing line by line",
              file=sys.stderr)
        table = _slow_parse(body.tobytes().decode("ascii"), path)
    if len(table) and not np.isin(table.label, (0.0, 1.0)).all():
        raise SystemExit(f"clicks_data: {path}: a label is not 0 or 1")
    if np.any(table.counts < 0):
        raise SystemExit(f"clicks_data: {path}: a numeric field is negative")
    return table


class Vocabulary:
    """Every distinct (field, id) pair of the training ids -> a row 1..V.
    self.train_rows: the training ids' rows (int32 [N, 26])."""

    def __init__(self, train_ids):
        self.fields = []
        self.offsets = []
        self.train_rows = np.empty(train_ids.shape, dtype=np.int32)
        offset = 1
        for f in range(train_ids.shape[1]):
            col = np.ascontiguousarray(train_ids[:, f])
            order = np.argsort(col, kind="stable")
            s = col[order]
            new = np.empty(s.size, dtype=bool)
            new[:1] = True
            np.not_equal(s[1:], s[:-1], out=new[1:])
            rank = np.cumsum(new) - 1                  # 0-based row within the field
            self.train_rows[order, f] = rank + offset
            u = s[new]
            self.fields.append(u)
            self.offsets.append(offset)
            offset += u.size
        self.size = offset - 1          # V; the table has V + 1 rows

    def lookup(self, ids):
        """ids uint64 [N, 26] -> (int32 [N, 26] rows, 0 for unseen pairs;
        the count of unseen pairs)."""
        out = np.zeros(ids.shape, dtype=np.int32)
        unseen = 0
        for f, (u, off) in enumerate(zip(self.fields, self.offsets)):
            col = np.ascontiguousarray(ids[:, f])
            pos = np.searchsorted(u, col)
            pos_c = np.minimum(pos, max(u.size - 1, 0))
            hit = (pos < u.size) & (u[pos_c] == col) if u.size else np.zeros(col.size, bool)
            out[:, f] = np.where(hit, pos_c + off, 0)
            unseen += int((~hit).sum())
        return out, unseen


class Prepared:
    """The arrays both peers train and test on."""
    pass


def prepare(train_path, test_path, log=None):
    """Reads both files and builds the vocabulary. Returns a Prepared with
    train_cat, train_dense, train_label, test_cat, test_dense, test_label,
    vocab_rows (V), test_unseen (the share of test ids not in the vocabulary)
    and load_seconds."""
    t0 = time.perf_counter()
    train = read_tsv(train_path)
    if log:
        log(f"read {len(train)} training rows from {train_path} "
            f"({time.perf_counter() - t0:.1f} s)")
    test = read_tsv(test_path)
    t1 = time.perf_counter()
    if log:
        log(f"read {len(test)} test rows from {test_path}")
    vocab = Vocabulary(train.ids)
    p = Prepared()
    p.train_cat = vocab.train_rows
    p.test_cat, unseen = vocab.lookup(test.ids)
    p.train_dense = np.log1p(train.counts.astype(np.float64)).astype(np.float32)
    p.test_dense = np.log1p(test.counts.astype(np.float64)).astype(np.float32)
    p.train_label, p.test_label = train.label, test.label
    p.vocab_rows = vocab.size
    p.test_unseen = unseen / max(1, p.test_cat.size)
    p.read_seconds = t1 - t0
    p.load_seconds = time.perf_counter() - t0
    if log:
        log(f"vocabulary: {vocab.size} (field, id) rows (+1 out-of-vocabulary row); "
            f"{100 * p.test_unseen:.1f}% of the test ids unseen; "
            f"{p.load_seconds:.1f} s in all")
    return p


def add_common_args(ap, workers_help):
    """The arguments every peer takes: the files, epochs, batch, rate, seed, workers."""
    ap.add_argument("--train", required=True, help="training TSV (psctl data synth-clicks)")
    ap.add_argument("--test", required=True, help="test TSV")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the training rows (1)")
    ap.add_argument("--batch", type=int, default=256, help="rows per step and worker (256)")
    ap.add_argument("--lr", type=float, default=0.05, help="Adagrad learning rate (0.05)")
    ap.add_argument("--seed", type=int, default=1, help="init and shuffle seed (1)")
    ap.add_argument("--workers", type=int, default=2, help=workers_help)


def shard(n, workers, w):
    """The training rows worker w of `workers` owns."""
    return np.arange(w, n, workers, dtype=np.int64)


def epoch_order(n, workers, w, epoch, seed):
    """Worker w's rows in the order it trains on them in `epoch` (0-based)."""
    rows = shard(n, workers, w)
    return rows[np.random.default_rng([seed, epoch, w]).permutation(rows.size)]


def steps_per_epoch(n, workers, batch):
    """Full batches per worker and epoch (every worker the same count: the
    smallest shard's; the rest of each shard is left out of that epoch)."""
    return (n // workers) // batch


def loopback_bytes():
    """Bytes received on the loopback interface so far (/proc/net/dev; the
    machine's, every process's), or None where there is no such file."""
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "lo":
                    return int(rest.split()[0])
    except OSError:
        pass
    return None


def cpu_seconds(pids):
    """User + system CPU seconds the processes pids have used so far (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def traffic(before, after, steps, vocab_rows, dim=16):
    """The loopback traffic of a timed loop against what dense embedding
    gradients would send: a check that the embedding's updates stay sparse."""
    if before is None or after is None:
        return None
    per_step = (after - before) / max(1, steps)
    dense = (vocab_rows + 1) * dim * 4
    return {"loopback_bytes_per_step": round(per_step),
            "dense_embedding_gradient_bytes": dense,
            "note": "machine-wide loopback bytes during the timed loop (other processes' "
                    "traffic included: an upper bound) per step of one worker, against the "
                    "size of one dense [V+1, 16] float gradient"}


def auc(label, score):
    """Exact ROC AUC: the Mann-Whitney statistic with tied scores given their
    average rank."""
    label = np.asarray(label).reshape(-1) > 0.5
    score = np.asarray(score, dtype=np.float64).reshape(-1)
    pos = int(label.sum())
    neg = label.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    _, inv, counts = np.unique(score, return_inverse=True, return_counts=True)
    # average rank (1-based) of each distinct score
    upper = np.cumsum(counts).astype(np.float64)
    avg = upper - (counts - 1) / 2.0
    ranks = avg[inv.reshape(-1)]
    return float((ranks[label].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="training TSV (synth-clicks layout)")
    ap.add_argument("--test", required=True, help="test TSV")
    args = ap.parse_args(argv)
    p = prepare(args.train, args.test, log=lambda m: print(f"clicks_data: {m}", file=sys.stderr))
    print(json.dumps({
        "train_rows": int(p.train_label.size), "test_rows": int(p.test_label.size),
        "vocab_rows": int(p.vocab_rows), "table_rows": int(p.vocab_rows) + 1,
        "train_click_rate": round(float(p.train_label.mean()), 6),
        "test_click_rate": round(float(p.test_label.mean()), 6),
        "test_ids_unseen": round(p.test_unseen, 6),
        "read_seconds": round(p.read_seconds, 2), "load_seconds": round(p.load_seconds, 2),
        "numpy": np.__version__,
    }))


if __name__ == "__main__":
    main(sys.argv[1:])
