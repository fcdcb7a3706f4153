#!/usr/bin/env python3
"""Checks KynML's PyTorch-style export (a safetensors state dict plus its JSON
sidecar) by rebuilding the model from those two files alone, in numpy
(float64), and comparing its outputs with expected ones.

Usage: check_safetensors_export.py <weights.safetensors> <sidecar.json> <inputs> <expected.json> [--tolerance T]

The weights are read with the `safetensors` package's own loader. The
sidecar (format "kynml-pytorch", version 1) gives the normalizer, the layer
list and the head; module i of the rebuilt nn.Sequential owns the tensors
"i.*": dense -> Linear ("i.weight" [out, in], "i.bias") then its activation;
batchnorm -> BatchNorm1d/2d in eval mode ("i.weight", "i.bias",
"i.running_mean", "i.running_var", "i.num_batches_tracked" int64 scalar);
layernorm -> LayerNorm over the last dimension ("i.weight", "i.bias");
conv1d/conv2d -> Conv1d/Conv2d ("i.weight" [out, in, k(, k)], "i.bias")
then its activation; maxpool/avgpool -> MaxPool/AvgPool 1d/2d;
global_avgpool -> AdaptiveAvgPool(1) then Flatten; flatten -> Flatten;
dropout -> identity. A layer with an "input_shape" sees the values as
[rows, *input_shape]; between layers they are flat [rows, features]. Every
tensor of the file must be used, with the shape and dtype the sidecar lists.

<inputs> and <expected.json> are as for check_onnx.py: raw feature rows
(.json tensors file with key "features", .npy, or .csv) and a tensors file
{"<name>": {"shape": [rows, cols], "data": [row-major values]}} whose keys
are the outputs: "prediction" for regression, "logits" and "probabilities"
for a softmax or sigmoid head (sigmoid: probabilities [rows, 2] =
[1 - sigmoid(logit), sigmoid(logit)], column i is class_names[i]).

A value matches when |got - expected| <= T * max(1, |expected|) (the "scaled
diff" printed is |got - expected| / max(1, |expected|)); T defaults
to 1e-4. Prints the max abs diff of each output; exits 0 when all match, 1
on a mismatch or an inconsistent export (with a message), 2 on misuse.

Needs numpy and safetensors (scripts/setup-export-test-deps.sh).
"""

import json
import math
import os
import sys

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_onnx import DEFAULT_TOLERANCE, compare, load_inputs, load_tensors  # noqa: E402

SIDECAR_FORMAT = "kynml-pytorch"
SIDECAR_VERSION = 1


class ExportError(Exception):
    pass


def activation(name, layer, x):
    import numpy as np

    if name == "linear":
        return x
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":  # exact: 0.5 x (1 + erf(x / sqrt 2))
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return sigmoid(x)
    if name == "silu":
        return x * sigmoid(x)
    if name == "leaky_relu":
        return np.where(x >= 0.0, x, float(layer["negative_slope"]) * x)
    raise ExportError(f"unknown activation '{name}'")


def sigmoid(x):
    import numpy as np

    # exp of a non-positive number only, so no overflow warnings
    e = np.exp(-np.abs(x))
    return np.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


def forward(weights, side, rows):
    """{output name: float64 array} for the raw rows, from the files alone."""
    import numpy as np

    used = set()

    def take(name, shape, dtype=np.float32):
        if name not in weights:
            raise ExportError(f"tensor '{name}' is missing from the weights")
        t = weights[name]
        if t.dtype != dtype or list(t.shape) != list(shape):
            raise ExportError(f"tensor '{name}' is {t.dtype} {list(t.shape)}, expected {np.dtype(dtype)} {list(shape)}")
        used.add(name)
        return t.astype(np.float64)

    if side.get("format") != SIDECAR_FORMAT or side.get("format_version") != SIDECAR_VERSION:
        raise ExportError(f"sidecar format is {side.get('format')!r} v{side.get('format_version')!r}")
    width = int(side["input"])
    if rows.shape[1] != width:
        raise ExportError(f"inputs have {rows.shape[1]} features, the model takes {width}")
    if len(side["feature_names"]) != width:
        raise ExportError(f"{len(side['feature_names'])} feature names for {width} features")

    x = rows.astype(np.float64)
    # A text model's input is token ids; 0 is padding.
    mask = (rows != 0).astype(np.float64) if side.get("input_layout") == "tokens" else None
    if side["normalizer"] is not None:
        mean = np.asarray(side["normalizer"]["mean"], dtype=np.float32).astype(np.float64)
        std = np.asarray(side["normalizer"]["std"], dtype=np.float32).astype(np.float64)
        if mean.shape != (width,) or std.shape != (width,):
            raise ExportError("normalizer mean/std do not match the input width")
        x = (x - mean) / std
    if side.get("input_layout") == "sequence":
        # NaN (null in a tensors file) is a sequence's padding: a position is
        # present where its first value is a number; padding reads as 0.
        length, channels = int(side["sequence"]["length"]), len(side["sequence"]["columns"])
        mask = (~np.isnan(x.reshape(-1, length, channels)[:, :, 0])).astype(np.float64)
        x = np.where(np.isnan(x), 0.0, x)

    def run(layers, x, width, prefix, indexed=True):
        """The layers on x ([rows, width]); tensor names are prefix + "i.field",
        or prefix + "field" for a single unindexed module (a projection)."""
        # Values travel as [rows, features]; a layer whose sidecar entry has an
        # `input_shape` sees them as [rows, *input_shape] (PyTorch's layout).
        for i, layer in enumerate(layers):
            kind = layer["kind"]
            base = f"{prefix}{i}." if indexed else prefix
            if layer["index"] != i:
                raise ExportError(f"layer {i} says index {layer['index']}")
            shape = [int(d) for d in layer.get("input_shape", [width])]
            if int(np.prod(shape)) != width:
                raise ExportError(f"layer {i}: input_shape {shape} does not hold {width} values")
            n_rows = x.shape[0]
            xs = x.reshape([n_rows] + shape)
            if kind == "dense":
                # On a sequence ([L, D]), each position alike, as nn.Linear.
                n_in, n_out = int(layer["in_features"]), int(layer["out_features"])
                if n_in != shape[-1]:
                    raise ExportError(f"layer {i}: dense takes {n_in} inputs, gets {shape[-1]}")
                w = take(base + "weight", [n_out, n_in])
                b = take(base + "bias", [n_out])
                x = activation(layer["activation"], layer, xs @ w.T + b).reshape(n_rows, -1)
            elif kind in ("conv1d", "conv2d"):
                cin, cout = int(layer["in_channels"]), int(layer["out_channels"])
                k, s, p = int(layer["kernel_size"]), int(layer["stride"]), int(layer["padding"])
                if shape[0] != cin:
                    raise ExportError(f"layer {i}: {kind} takes {cin} channels, gets {shape[0]}")
                if kind == "conv1d":
                    w = take(base + "weight", [cout, cin, k])[:, :, None, :]
                    xs = xs[:, :, None, :]
                    kh, sh, ph = 1, 1, 0
                else:
                    w = take(base + "weight", [cout, cin, k, k])
                    kh, sh, ph = k, s, p
                b = take(base + "bias", [cout])
                padded = np.pad(xs, ((0, 0), (0, 0), (ph, ph), (p, p)))
                oh = (padded.shape[2] - kh) // sh + 1
                ow = (padded.shape[3] - k) // s + 1
                y = np.zeros((n_rows, cout, oh, ow))
                for ky in range(kh):
                    for kx in range(k):
                        patch = padded[:, :, ky : ky + sh * (oh - 1) + 1 : sh, kx : kx + s * (ow - 1) + 1 : s]
                        y += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx])
                y += b[None, :, None, None]
                x = activation(layer["activation"], layer, y.reshape(n_rows, -1))
            elif kind in ("maxpool", "avgpool"):
                k, s = int(layer["kernel_size"]), int(layer["stride"])
                if len(shape) == 2:
                    xs = xs[:, :, None, :]
                    kh, sh = 1, 1
                else:
                    kh, sh = k, s
                oh = (xs.shape[2] - kh) // sh + 1
                ow = (xs.shape[3] - k) // s + 1
                windows = [
                    xs[:, :, ky : ky + sh * (oh - 1) + 1 : sh, kx : kx + s * (ow - 1) + 1 : s]
                    for ky in range(kh)
                    for kx in range(k)
                ]
                y = np.max(windows, axis=0) if kind == "maxpool" else np.mean(windows, axis=0)
                x = y.reshape(n_rows, -1)
            elif kind == "global_avgpool" and layer.get("over") == "positions":
                # A text's positions [rows, L, D]: the mean over its tokens, padding left out.
                if mask is None:
                    raise ExportError(f"layer {i}: pools a text's positions, but the input is not a text")
                count = np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
                x = (xs * mask[:, :, None]).sum(axis=1) / count
            elif kind == "global_avgpool":
                x = xs.reshape(n_rows, shape[0], -1).mean(axis=-1)
            elif kind == "flatten":
                x = xs.reshape(n_rows, -1)
            elif kind == "batchnorm":
                n = int(layer["num_features"])
                if n != shape[0]:
                    raise ExportError(f"layer {i}: batchnorm over {n} channels, gets {shape[0]}")
                gamma = take(base + "weight", [n])
                beta = take(base + "bias", [n])
                mean = take(base + "running_mean", [n])
                var = take(base + "running_var", [n])
                take(base + "num_batches_tracked", [], np.int64)
                per = [1, n] + [1] * (len(shape) - 1)
                y = (xs - mean.reshape(per)) / np.sqrt(var.reshape(per) + float(layer["eps"]))
                x = (y * gamma.reshape(per) + beta.reshape(per)).reshape(n_rows, -1)
            elif kind == "layernorm":
                n = int(layer["normalized_shape"])
                if n != shape[-1]:
                    raise ExportError(f"layer {i}: layernorm over {n} features, gets {shape[-1]}")
                gamma = take(base + "weight", [n])
                beta = take(base + "bias", [n])
                mu = xs.mean(axis=-1, keepdims=True)
                var = ((xs - mu) ** 2).mean(axis=-1, keepdims=True)
                x = ((xs - mu) / np.sqrt(var + float(layer["eps"])) * gamma + beta).reshape(n_rows, -1)
            elif kind == "positional":
                x = x + take(base + "weight", shape).reshape(-1)
            elif kind in ("attention", "transformer"):
                # A text's positions [rows, L, D], attending to its tokens only.
                L, D = shape
                heads = int(layer["num_heads"] if kind == "attention" else layer["nhead"])
                pre = base if kind == "attention" else base + "self_attn."

                def attend(v):
                    w_in = take(pre + "in_proj_weight", [3 * D, D])
                    b_in = take(pre + "in_proj_bias", [3 * D])
                    w_out = take(pre + "out_proj.weight", [D, D])
                    b_out = take(pre + "out_proj.bias", [D])
                    dh = D // heads
                    qkv = v @ w_in.T + b_in
                    split = lambda a: a.reshape(n_rows, L, heads, dh).transpose(0, 2, 1, 3)
                    q, k, val = (split(qkv[..., j * D:(j + 1) * D]) for j in range(3))
                    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
                    if mask is not None:
                        scores = scores + ((mask - 1.0) * 1e9)[:, None, None, :]
                    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                    weights = scores / scores.sum(axis=-1, keepdims=True)
                    mixed = (weights @ val).transpose(0, 2, 1, 3).reshape(n_rows, L, D)
                    return mixed @ w_out.T + b_out

                def norm(v, name):
                    gamma, beta = take(base + name + ".weight", [D]), take(base + name + ".bias", [D])
                    mu = v.mean(axis=-1, keepdims=True)
                    var = ((v - mu) ** 2).mean(axis=-1, keepdims=True)
                    return (v - mu) / np.sqrt(var + 1e-5) * gamma + beta

                if kind == "attention":
                    y = attend(xs)
                else:
                    F = int(layer["dim_feedforward"])
                    h = xs + attend(norm(xs, "norm1"))
                    f = norm(h, "norm2") @ take(base + "linear1.weight", [F, D]).T + take(base + "linear1.bias", [F])
                    f = activation("gelu", layer, f)
                    f = f @ take(base + "linear2.weight", [D, F]).T + take(base + "linear2.bias", [D])
                    y = h + f
                x = y.reshape(n_rows, -1)
            elif kind == "embedding" and "num_embeddings" in layer:
                # A text's token ids (0: padding, 1: unseen) become their table rows.
                n, dim = int(layer["num_embeddings"]), int(layer["embedding_dim"])
                table = take(base + "weight", [n, dim])
                ids = x.astype(np.int64)
                if ids.min() < 0 or ids.max() >= n:
                    raise ExportError(f"layer {i}: token ids outside 0..{n}")
                x = table[ids].reshape(n_rows, -1)
            elif kind == "embedding":
                # Each listed column holds a category index (0: unseen in
                # training); it becomes its table's row, in its place.
                dim, columns = int(layer["embedding_dim"]), layer["columns"]
                if int(layer["in_features"]) != width:
                    raise ExportError(f"layer {i}: embedding takes {layer['in_features']} inputs, gets {width}")
                parts, start = [], 0
                for k, c in enumerate(columns):
                    p, n = int(c["position"]), int(c["num_embeddings"])
                    table = take(f"{base}tables.{k}.weight", [n, dim])
                    parts.append(x[:, start:p])
                    index = x[:, p]
                    known = (index >= 0) & (index < n) & (index == np.floor(index))
                    parts.append(table[np.where(known, index, 0).astype(np.int64)])
                    start = p + 1
                parts.append(x[:, start:])
                x = np.concatenate(parts, axis=1)
            elif kind == "dropout":
                p = float(layer["p"])
                if not 0.0 <= p < 1.0:
                    raise ExportError(f"layer {i}: dropout p {p}")
            elif kind == "residual":
                y, _ = run(layer["layers"], x, width, f"{base}block.")
                projection = layer.get("projection")
                if projection is not None:
                    skip, _ = run([projection], x, width, f"{base}projection.", indexed=False)
                else:
                    skip = x
                if skip.shape != y.shape:
                    raise ExportError(f"layer {i}: residual adds {list(skip.shape)} to {list(y.shape)}")
                x = y + skip
            else:
                raise ExportError(f"layer {i}: unknown kind '{kind}'")
            width = x.shape[1]
        return x, width


    x, width = run(side["layers"], x, width, "")

    extra = sorted(set(weights) - used)
    if extra:
        raise ExportError(f"tensors no layer uses: {extra}")
    listed = sorted(t["name"] for t in side["tensors"])
    if listed != sorted(weights):
        raise ExportError(f"sidecar lists tensors {listed}, the file holds {sorted(weights)}")
    if int(side["output"]) != width:
        raise ExportError(f"sidecar says {side['output']} outputs, the layers give {width}")

    head = side["head"]
    classes = head["class_names"]
    if head["kind"] == "regression":
        return {"prediction": x}
    if head["kind"] == "softmax":
        if len(classes) != width:
            raise ExportError(f"{len(classes)} class names for {width} logits")
        z = np.exp(x - x.max(axis=-1, keepdims=True))
        return {"logits": x, "probabilities": z / z.sum(axis=-1, keepdims=True)}
    if head["kind"] == "sigmoid":
        if len(classes) != 2 or width != 1:
            raise ExportError(f"sigmoid head with {len(classes)} classes and {width} logits")
        return {"logits": x, "probabilities": np.concatenate([sigmoid(-x), sigmoid(x)], axis=-1)}
    raise ExportError(f"unknown head kind '{head['kind']}'")


def main(argv):
    args = argv[1:]
    tolerance = DEFAULT_TOLERANCE
    if "--tolerance" in args:
        k = args.index("--tolerance")
        try:
            tolerance = float(args[k + 1])
        except (IndexError, ValueError):
            print("check_safetensors_export: --tolerance needs a number", file=sys.stderr)
            return 2
        del args[k : k + 2]
    if len(args) != 4:
        print(
            f"usage: {os.path.basename(argv[0])} <weights.safetensors> <sidecar.json> <inputs> <expected.json> "
            "[--tolerance T]",
            file=sys.stderr,
        )
        return 2
    weights_path, sidecar_path, inputs_path, expected_path = args

    from safetensors.numpy import load_file

    weights = load_file(weights_path)
    with open(sidecar_path) as f:
        side = json.load(f)
    rows = load_inputs(inputs_path)
    expected = load_tensors(expected_path)
    try:
        got = forward(weights, side, rows)
    except (ExportError, KeyError, TypeError, ValueError) as e:
        print(f"check_safetensors_export: FAIL inconsistent export: {e!r}", file=sys.stderr)
        return 1
    if sorted(got) != sorted(expected):
        message = f"outputs {sorted(got)}, expected file has {sorted(expected)}"
        print(f"check_safetensors_export: FAIL {message}", file=sys.stderr)
        return 1

    failures = []
    for name in sorted(got):
        max_diff, max_scaled, error = compare(name, got[name], expected[name], tolerance)
        if error:
            failures.append(error)
        if max_diff is not None:
            print(
                f"check_safetensors_export: {name} {list(got[name].shape)} max abs diff {max_diff:.3g}, "
                f"max scaled diff {max_scaled:.3g}"
            )
    if failures:
        for f in failures:
            print(f"check_safetensors_export: FAIL {f}", file=sys.stderr)
        return 1
    print(f"check_safetensors_export: OK {weights_path} ({len(rows)} rows, tolerance {tolerance})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
