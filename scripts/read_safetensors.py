#!/usr/bin/env python3
"""Prints the tensors of a safetensors file, or of a KynML checkpoint, as JSON.

Usage: read_safetensors.py <file>

Output: {"<name>": {"dtype": "<numpy dtype>", "shape": [...], "sum": <float>}, ...},
names sorted. It reads the tensors with the `safetensors` package's own
loader, so it checks KynML's hand-written writer
(kynml-core/src/checkpoint/format.rs) against the reference reader
rather than against our own understanding of the format. Sums are taken in
float64.

A KynML checkpoint (it starts with `KYNCKPT\\0`) is a safetensors payload
between a 12-byte prefix (magic, u32 version) and a 32-byte footer (u64
length of what precedes it, u32 CRC32C, 12 zero bytes, magic); the payload is
cut out after checking the footer's length and magic.

Needs the `safetensors` and `numpy` packages (pip install safetensors numpy).
"""

import json
import os
import struct
import sys

MAGIC = b"KYNCKPT\0"
PREFIX_LEN = 12
FOOTER_LEN = 32


def payload(data):
    """The safetensors bytes of `data`: itself, or a checkpoint's middle."""
    if not data.startswith(MAGIC):
        return data
    if len(data) < PREFIX_LEN + FOOTER_LEN:
        raise ValueError("checkpoint is truncated")
    footer = data[-FOOTER_LEN:]
    (body_len,) = struct.unpack("<Q", footer[:8])
    if footer[-8:] != MAGIC or body_len != len(data) - FOOTER_LEN:
        raise ValueError("checkpoint footer is missing or damaged")
    return data[PREFIX_LEN : len(data) - FOOTER_LEN]


def read_tensors(path):
    # Imported here so that misuse still gets a usage message even when the
    # packages are not installed.
    import numpy as np
    from safetensors.numpy import load

    with open(path, "rb") as f:
        tensors = load(payload(f.read()))
    return {
        name: {
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            "sum": float(np.sum(array, dtype=np.float64)),
        }
        for name, array in sorted(tensors.items())
    }


def main(argv):
    if len(argv) != 2:
        print(f"usage: {os.path.basename(argv[0])} <file>", file=sys.stderr)
        return 2
    print(json.dumps(read_tensors(argv[1]), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
