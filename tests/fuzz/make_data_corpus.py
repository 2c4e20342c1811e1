#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_data (first byte: the reader, see
fuzz_data.c) from the project's fixtures and a few files made here: a small
PNG (stdlib: zlib + struct), a small JPEG (with tensorflow's encoder when it
can be imported; otherwise the existing seed is kept), CSV and TSV tables, and
.npz archives (the fixtures make_npz.py writes: np.savez's, its ZIP64 rewrite, the
compressed one it refuses).
usage: make_data_corpus.py [OUT_DIR]   (default: corpus_data/ beside this script)"""
import os
import struct
import sys
import zlib

here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(here, "..", "fixtures")
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus_data")
os.makedirs(out, exist_ok=True)


def put(name, reader, body):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([reader]) + body)


def png(w, h, gray):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    c = 1 if gray else 3
    raw = b"".join(b"\0" + bytes((x * 17 + y * 5 + k) % 256 for x in range(w) for k in range(c))
                   for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0 if gray else 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


tfr = open(os.path.join(fixtures, "tfrecord", "tf_written.tfrecord"), "rb").read()
put("tfrecord-tf-written", 0, tfr)
n = struct.unpack("<Q", tfr[:8])[0]
put("example-first-record", 1, tfr[12:12 + n])
put("png-rgb-8x5", 2, b"\x03" + png(8, 5, False))
put("png-gray-4x4", 2, b"\x00" + png(4, 4, True))
try:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    img = tf.constant([[[(x * 30 + y * 7 + k * 50) % 256 for k in range(3)] for x in range(8)]
                       for y in range(8)], dtype=tf.uint8)
    put("jpeg-rgb-8x8", 2, b"\x03" + tf.io.encode_jpeg(img, quality=90).numpy())
except ImportError:
    print("make_data_corpus: no tensorflow here: the JPEG seed is kept as it is", file=sys.stderr)
for name in ("f4_2x3", "v2_u1", "u1_5"):
    put("npy-" + name, 3, open(os.path.join(fixtures, "npy", name + ".npy"), "rb").read())
for name in ("xy", "xy_zip64", "xy_compressed"):
    put("npz-" + name, 6, open(os.path.join(fixtures, "npy", name + ".npz"), "rb").read())
put("csv-table", 4, b'a,"b c",c\r\n1,2.5,-3e2\n\n"4",5,inf\n')
put("tsv-table", 5, b"x\ty\n0.25\t1\n")
