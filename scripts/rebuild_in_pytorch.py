#!/usr/bin/env python3
"""Rebuilds a KynML safetensors export as a PyTorch `nn.Sequential` from its
two files alone, and predicts with it.

    python3 scripts/rebuild_in_pytorch.py model.safetensors model.json rows.csv

rows.csv: raw feature rows, comma-separated: with a header naming the
features (in any order; the target column may be there too), or without
one in the sidecar's feature order; categorical columns as text. For a text model, one
text per line. For a sequence model, a header naming its sequence columns,
each cell numbers separated by spaces. Prints
one line per row: the predictions (regression) or the class probabilities.
`rebuild(side, weights)` is the part to copy into a PyTorch program.

Module i of the Sequential owns the state-dict entries "i.*". Between
modules the values are flat [rows, features]; a layer whose sidecar entry
has an "input_shape" sees them as [rows, *input_shape] and gives them back
flat, as KynML's layers do. Needs torch and safetensors.
"""

import json
import sys

import torch
from safetensors.torch import load_file
from torch import nn

ACTIVATIONS = {"linear": nn.Identity, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh,
               "sigmoid": nn.Sigmoid, "silu": nn.SiLU}


def activation(spec):
    if "activation" not in spec:
        return nn.Identity()
    if spec["activation"] == "leaky_relu":
        return nn.LeakyReLU(spec["negative_slope"])
    return ACTIVATIONS[spec["activation"]]()


def shaped(cls):
    """`cls` taking flat rows: reshaped to the layer's input shape, its activation applied, flattened back."""
    class Shaped(cls):
        def __init__(self, spec, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.input_shape = spec.get("input_shape")
            self.activation = activation(spec)

        def forward(self, x):
            if self.input_shape:
                x = x.reshape(x.shape[0], *self.input_shape)
            return self.activation(super().forward(x)).flatten(1)
    return Shaped


class Residual(nn.Module):
    """`residual:`: x + block(x), or projection(x) + block(x) where the width changes."""
    def __init__(self, spec):
        super().__init__()
        self.block = nn.Sequential(*[module(s) for s in spec["layers"]])
        self.projection = module(spec["projection"]) if spec.get("projection") else None

    def forward(self, x):
        skip = x if self.projection is None else self.projection(x)
        return self.block(x) + skip


class CategoricalEmbedding(nn.Module):
    """`embedding D`: each listed column (a category index, 0 for one unseen
    in training) replaced, in its place, by its row of its own nn.Embedding."""
    def __init__(self, spec):
        super().__init__()
        self.positions = [c["position"] for c in spec["columns"]]
        self.tables = nn.ModuleList(
            nn.Embedding(c["num_embeddings"], spec["embedding_dim"]) for c in spec["columns"])

    def forward(self, x):
        parts, start = [], 0
        for p, table in zip(self.positions, self.tables):
            parts += [x[:, start:p], table(x[:, p].long())]
            start = p + 1
        return torch.cat(parts + [x[:, start:]], dim=1)


class Text(nn.Module):
    """A text model: the token ids' padding mask (id 0) is handed to the
    layers that need it before the layers run."""
    def __init__(self, layers):
        super().__init__()
        self.layers = layers

    def forward(self, x):
        mask = (x != 0).float()
        for m in self.layers.modules():
            if hasattr(m, "mask"):
                m.mask = mask
        return self.layers(x)


class MaskedMean(nn.Module):
    """`global_avgpool` on a text's positions: the mean over its tokens."""
    def __init__(self, spec):
        super().__init__()
        self.input_shape = spec["input_shape"]
        self.mask = None

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.input_shape)
        return (x * self.mask[:, :, None]).sum(1) / self.mask.sum(1, keepdim=True).clamp(min=1)


class Tokens(nn.Embedding):
    """`embedding D` on token ids: [rows, L] ids to [rows, L * D] values."""
    def forward(self, x):
        return super().forward(x.long()).flatten(1)


class Positions(nn.Module):
    """`positional`: one learned vector per position, added."""
    def __init__(self, spec):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(*spec["input_shape"]))

    def forward(self, x):
        return x + self.weight.flatten()


class SelfAttention(nn.MultiheadAttention):
    """`attention heads=H`: self-attention over a text's positions, its
    padding (`mask` 0) left out of every position's keys."""
    def __init__(self, spec):
        super().__init__(spec["embed_dim"], spec["num_heads"], batch_first=True)
        self.input_shape = spec["input_shape"]
        self.mask = None

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.input_shape)
        # Added -1e9 as KynML adds it (a text of padding only stays finite).
        y = super().forward(x, x, x, key_padding_mask=(self.mask - 1) * 1e9, need_weights=False)[0]
        return y.flatten(1)


class Encoder(nn.TransformerEncoderLayer):
    """`transformer heads=H ff=F [dropout=P]`: a pre-norm encoder block with gelu."""
    def __init__(self, spec):
        super().__init__(spec["d_model"], spec["nhead"], spec["dim_feedforward"], dropout=spec.get("dropout", 0.0),
                         activation="gelu", batch_first=True, norm_first=True)
        self.input_shape = spec["input_shape"]
        self.mask = None

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.input_shape)
        return super().forward(x, src_key_padding_mask=(self.mask - 1) * 1e9).flatten(1)


def module(spec):
    kind, dims = spec["kind"], len(spec.get("input_shape", [0]))
    d = "1d" if dims <= 2 else "2d"
    if kind == "dense":
        return shaped(nn.Linear)(spec, spec["in_features"], spec["out_features"])
    if kind in ("conv1d", "conv2d"):
        cls = nn.Conv1d if kind == "conv1d" else nn.Conv2d
        return shaped(cls)(spec, spec["in_channels"], spec["out_channels"], spec["kernel_size"],
                           stride=spec["stride"], padding=spec["padding"])
    if kind == "batchnorm":
        return shaped(getattr(nn, f"BatchNorm{d}"))(spec, spec["num_features"], eps=spec["eps"])
    if kind == "layernorm":
        return shaped(nn.LayerNorm)(spec, spec["normalized_shape"], eps=spec["eps"])
    if kind == "maxpool":
        return shaped(getattr(nn, f"MaxPool{d}"))(spec, spec["kernel_size"], stride=spec["stride"])
    if kind == "avgpool":
        return shaped(getattr(nn, f"AvgPool{d}"))(spec, spec["kernel_size"], stride=spec["stride"])
    if kind == "global_avgpool" and spec.get("over") == "positions":
        return MaskedMean(spec)
    if kind == "global_avgpool":
        return shaped(getattr(nn, f"AdaptiveAvgPool{d}"))(spec, 1)
    if kind == "flatten":
        return nn.Flatten()
    if kind == "dropout":
        return nn.Dropout(spec["p"])
    if kind == "positional":
        return Positions(spec)
    if kind == "attention":
        return SelfAttention(spec)
    if kind == "transformer":
        return Encoder(spec)
    if kind == "embedding" and "num_embeddings" in spec:
        return Tokens(spec["num_embeddings"], spec["embedding_dim"], padding_idx=spec["padding_idx"])
    if kind == "embedding":
        return CategoricalEmbedding(spec)
    if kind == "residual":
        return Residual(spec)
    raise ValueError(f"unknown layer kind {kind!r}")


class Sequence(nn.Module):
    """A sequence model: its input is `length` positions of `channels` values,
    NaN where a sequence is padded (after the normalizer). A position is
    present where its first value is a number; that mask is handed to the
    layers that read it, and padding reads as 0."""
    def __init__(self, net, length, channels):
        super().__init__()
        self.net, self.length, self.channels = net, length, channels

    def forward(self, x):
        first = x.reshape(x.shape[0], self.length, self.channels)[:, :, 0]
        mask = (~torch.isnan(first)).float()
        for m in self.net.modules():
            if hasattr(m, "mask"):
                m.mask = mask
        return self.net(torch.nan_to_num(x, nan=0.0))


def rebuild(side, weights):
    """The model of a sidecar (format kynml-pytorch) with its weights loaded, in eval mode."""
    net = nn.Sequential(*[module(spec) for spec in side["layers"]])
    net.load_state_dict(weights)
    if side.get("input_layout") == "tokens":
        net = Text(net)
    if side.get("input_layout") == "sequence":
        net = Sequence(net, side["sequence"]["length"], len(side["sequence"]["columns"]))
    return net.eval()


def predict(side, net, rows):
    x = rows
    if side["normalizer"] is not None:
        x = (x - torch.tensor(side["normalizer"]["mean"])) / torch.tensor(side["normalizer"]["std"])
    with torch.no_grad():
        out = net(x)
    kind = side["head"]["kind"]
    if kind == "softmax":
        return torch.softmax(out, dim=-1)  # column i is class_names[i]
    if kind == "sigmoid":
        p = torch.sigmoid(out)
        return torch.cat([1 - p, p], dim=-1)
    return out


def main(argv):
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    weights, sidecar, csv = argv[1:]
    side = json.load(open(sidecar))
    text = side.get("tokens")
    # Blank lines are skipped, as KynML's CSV reader skips them. (A text of
    # padding only, written `""`, gives NaN in PyTorch's eval fast path where
    # KynML gives the model's output for an empty text.)
    lines = [line.strip() for line in open(csv) if line.strip()]
    # A categorical column's text becomes its index: 1 + its place in the
    # vocabulary, 0 for a value training never saw.
    vocab = {c["position"]: {v: i + 1 for i, v in enumerate(c["values"])} for c in side.get("categories", [])}
    if text:
        # One text per line (a header line "text" is skipped): split at
        # whitespace, ids 2.. for the vocabulary, 1 unseen, 0 padding.
        ids = {t: i + 2 for i, t in enumerate(text["tokens"])}
        if lines and lines[0] == text["column"]:
            lines = lines[1:]
        rows = [[ids.get(t, 1) for t in line.split()][: text["length"]] for line in lines]
        rows = torch.tensor([r + [0] * (text["length"] - len(r)) for r in rows], dtype=torch.float32)
        out = predict(side, rebuild(side, load_file(weights)), rows)
        for row in out.tolist():
            print(",".join(f"{v:.6f}" for v in row))
        return 0

    seq = side.get("sequence")
    if seq:
        # The sequence columns by name, each cell numbers separated by
        # spaces (or commas or semicolons), cut or NaN-padded to `length`.
        import csv as csvmod
        import re
        length, names = seq["length"], seq["columns"]
        rows = []
        for record in csvmod.DictReader(open(csv)):
            values = [[float(v) for v in re.split(r"[\s,;]+", record[n].strip()) if v] for n in names]
            row = [float("nan")] * (length * len(names))
            for c, vs in enumerate(values):
                for p, v in enumerate(vs[:length]):
                    row[p * len(names) + c] = v
            rows.append(row)
        out = predict(side, rebuild(side, load_file(weights)), torch.tensor(rows, dtype=torch.float32))
        for row in out.tolist():
            print(",".join(f"{v:.6f}" for v in row))
        return 0

    def value(i, cell):
        return float(vocab[i].get(cell.strip(), 0)) if i in vocab else float(cell)

    # Columns by name when the file has a header naming every feature (in
    # any order, the target allowed beside them, as `kynml predict` reads
    # them); else in the sidecar's feature order.
    import csv as csvmod
    names = side["feature_names"]
    # utf-8-sig: a byte order mark (as Excel writes) is not part of the first name.
    with open(csv, newline="", encoding="utf-8-sig") as f:
        records = [[c.strip() for c in r] for r in csvmod.reader(f) if any(c.strip() for c in r)]
    order = list(range(len(names)))
    if records and set(names) <= set(records[0]):
        header = records.pop(0)
        extra = [h for h in header if h not in names and h != side.get("target")]
        if extra:
            sys.exit(f"{csv}:1: column(s) {', '.join(extra)} are neither features of this model nor its target")
        order = [header.index(n) for n in names]
    elif records:
        try:
            [value(i, v) for i, v in enumerate(records[0])]
        except (ValueError, IndexError):
            missing = [n for n in names if n not in records[0]]
            sys.exit(f"{csv}:1: the header lacks the feature column(s) {', '.join(missing)}")
    width = len(records[0]) if records else 0
    for n, r in enumerate(records):
        if len(r) != width or len(r) < len(names):
            sys.exit(f"{csv}: row {n + 1} has {len(r)} cells, expected {max(width, len(names))}")
    rows = torch.tensor([[value(i, r[c]) for i, c in enumerate(order)] for r in records], dtype=torch.float32)
    out = predict(side, rebuild(side, load_file(weights)), rows)
    for row in out.tolist():
        print(",".join(f"{v:.6f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
