#!/usr/bin/env python3
"""Checks an ONNX file exported by KynML against expected outputs, with the
reference tools: `onnx.checker.check_model(..., full_check=True)` (which also
runs strict shape inference) and an onnxruntime CPU session.

Usage: check_onnx.py <model.onnx> <inputs> <expected.json> [--tolerance T]

<inputs>: the raw feature rows, float32, shape [rows, features], one of
  - a .json "tensors file" (below) with the key "features";
  - a .npy file holding a 2-D array;
  - a .csv file of numbers, one row per line, comma-separated; a first line
    that is not all numbers is taken as a header and skipped.
<expected.json>: a tensors file whose keys are graph output names
  ("prediction", or "logits" and "probabilities"); every key must be an
  output of the graph, and every output of the graph must be a key.

A tensors file is JSON: {"<name>": {"shape": [rows, cols], "data": [v, ...]}}
with "data" row-major (rows * cols numbers).

A value matches when |got - expected| <= T * max(1, |expected|) (the "scaled
diff" printed is |got - expected| / max(1, |expected|)); T defaults
to 1e-4 (float32 evaluation by different kernels and summation orders).
Prints the max abs diff of each output and exits 0 when all match, 1 on a
mismatch or an invalid model (with a message saying which), 2 on misuse.

Needs numpy, onnx and onnxruntime (scripts/setup-export-test-deps.sh).
"""

import json
import os
import sys

DEFAULT_TOLERANCE = 1e-4


def load_tensors(path):
    """A tensors file as {name: float64 array of its shape}."""
    import numpy as np

    with open(path) as f:
        raw = json.load(f)
    out = {}
    for name, t in raw.items():
        data = np.asarray(t["data"], dtype=np.float64)
        shape = tuple(int(d) for d in t["shape"])
        if data.size != int(np.prod(shape)):
            raise ValueError(f"{path}: '{name}' has {data.size} values for shape {list(shape)}")
        out[name] = data.reshape(shape)
    return out


def load_inputs(path):
    """The raw feature rows of `path` as a float32 [rows, features] array."""
    import numpy as np

    if path.endswith(".npy"):
        rows = np.load(path)
    elif path.endswith(".csv"):
        with open(path) as f:
            lines = [line.strip() for line in f if line.strip()]
        if lines:
            try:
                [float(v) for v in lines[0].split(",")]
            except ValueError:
                lines = lines[1:]
        rows = np.array([[float(v) for v in line.split(",")] for line in lines])
    else:
        tensors = load_tensors(path)
        if "features" not in tensors:
            raise ValueError(f"{path}: no 'features' tensor")
        rows = tensors["features"]
    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim != 2:
        raise ValueError(f"{path}: inputs must be 2-D [rows, features], got shape {list(rows.shape)}")
    return rows


def compare(name, got, expected, tolerance):
    """(max abs diff, max scaled diff, error message or None) of one output; the scaled diff
    is |got - expected| / max(1, |expected|), the quantity held to the tolerance."""
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    if got.shape != expected.shape:
        return None, None, f"{name}: shape {list(got.shape)}, expected {list(expected.shape)}"
    if got.size == 0:
        return 0.0, 0.0, None
    diff = np.abs(got - expected)
    scaled = diff / np.maximum(1.0, np.abs(expected))
    bad = ~(scaled <= tolerance)
    finite = bool(np.all(np.isfinite(diff)))
    max_diff = float(np.max(diff)) if finite else float("inf")
    max_scaled = float(np.max(scaled)) if finite else float("inf")
    if np.any(bad):
        i = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), diff.shape)
        index = [int(k) for k in i]
        return max_diff, max_scaled, (
            f"{name}: {int(np.sum(bad))} of {diff.size} values differ beyond tolerance {tolerance}; "
            f"worst at {index}: got {float(got[i])!r}, expected {float(expected[i])!r}"
        )
    return max_diff, max_scaled, None


def main(argv):
    args = argv[1:]
    tolerance = DEFAULT_TOLERANCE
    if "--tolerance" in args:
        k = args.index("--tolerance")
        try:
            tolerance = float(args[k + 1])
        except (IndexError, ValueError):
            print("check_onnx: --tolerance needs a number", file=sys.stderr)
            return 2
        del args[k : k + 2]
    if len(args) != 3:
        usage = f"usage: {os.path.basename(argv[0])} <model.onnx> <inputs> <expected.json> [--tolerance T]"
        print(usage, file=sys.stderr)
        return 2
    model_path, inputs_path, expected_path = args

    import onnx
    import onnxruntime as ort

    try:
        model = onnx.load(model_path)
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # the checker raises several exception types
        print(f"check_onnx: FAIL {model_path} is not a valid ONNX model: {e}", file=sys.stderr)
        return 1

    rows = load_inputs(inputs_path)
    expected = load_tensors(expected_path)
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    graph_inputs = session.get_inputs()
    if len(graph_inputs) != 1:
        print(f"check_onnx: FAIL the graph has {len(graph_inputs)} inputs, expected 1", file=sys.stderr)
        return 1
    width = graph_inputs[0].shape[-1] if graph_inputs[0].shape else None
    if isinstance(width, int) and rows.shape[1] != width:
        print(f"check_onnx: FAIL inputs have {rows.shape[1]} features, the graph takes {width}", file=sys.stderr)
        return 1
    metadata = session.get_modelmeta().custom_metadata_map
    if "feature_names" in metadata and len(json.loads(metadata["feature_names"])) != rows.shape[1]:
        print(f"check_onnx: FAIL metadata feature_names has {metadata['feature_names']}", file=sys.stderr)
        return 1
    output_names = [o.name for o in session.get_outputs()]
    if sorted(output_names) != sorted(expected):
        print(f"check_onnx: FAIL graph outputs {output_names}, expected file has {sorted(expected)}", file=sys.stderr)
        return 1
    got = session.run(output_names, {graph_inputs[0].name: rows})

    failures = []
    for name, value in zip(output_names, got):
        max_diff, max_scaled, error = compare(name, value, expected[name], tolerance)
        if error:
            failures.append(error)
        if max_diff is not None:
            print(
                f"check_onnx: {name} {list(value.shape)} max abs diff {max_diff:.3g}, "
                f"max scaled diff {max_scaled:.3g}"
            )
    if failures:
        for f in failures:
            print(f"check_onnx: FAIL {f}", file=sys.stderr)
        return 1
    print(f"check_onnx: OK {model_path} ({len(rows)} rows, tolerance {tolerance})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
