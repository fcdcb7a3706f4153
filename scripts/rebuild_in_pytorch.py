#!/usr/bin/env python3
"""Rebuilds a KynML safetensors export as a PyTorch `nn.Sequential` from its
two files alone, and predicts with it.

    python3 scripts/rebuild_in_pytorch.py model.safetensors model.json rows.csv

rows.csv: raw rows, read as `kynml predict` reads them (with Python's csv
module): a header naming the model's input columns, in any order (the
target column may be there too, and is ignored), then one row per
prediction; a cell holding commas is quoted. Features are numbers,
categorical ones text. A text model reads its
text column (`""` is an empty text); a sequence model its sequence
columns, each cell numbers separated by spaces (or commas or semicolons).
Prints one line per row: the predictions (regression) or the class
probabilities.
`rebuild(side, weights)` (with the module classes it uses, or this script
imported) is the part to take into a PyTorch program: the module it returns
takes raw rows, normalised inside it as the run did, and gives logits
(`predict` turns them into probabilities).

Module i of the Sequential owns the state-dict entries "i.*". Between
modules the values are flat [rows, features]; a layer whose sidecar entry
has an "input_shape" sees them as [rows, *input_shape] and gives them back
flat, as KynML's layers do. Needs torch and safetensors.
"""

import csv
import json
import math
import re
import struct
import sys

try:
    import torch
    from safetensors.torch import load_file
    from torch import nn
except ImportError as err:
    print(f"rebuild_in_pytorch.py needs torch and safetensors: {err} (python: {sys.executable}); "
          "`pip install torch safetensors`", file=sys.stderr)
    sys.exit(2)

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


class NoFastPath:
    """PyTorch's eval "fast path" for attention (nn.MultiheadAttention and
    nn.TransformerEncoderLayer in eval mode without gradients) gives NaN for
    an input of padding only (an empty text or sequence), where KynML, ONNX
    and PyTorch's ordinary path add the -1e9 padding mask and give finite
    numbers. Within this, that fast path is off, and left as it was after."""
    def __enter__(self):
        mha = getattr(torch.backends, "mha", None)  # torch >= 2.1
        self.mha = mha if hasattr(mha, "set_fastpath_enabled") else None
        if self.mha:
            self.was = self.mha.get_fastpath_enabled()
            self.mha.set_fastpath_enabled(False)

    def __exit__(self, *exc):
        if self.mha:
            self.mha.set_fastpath_enabled(self.was)


class SelfAttention(nn.MultiheadAttention):
    """`attention heads=H`: self-attention over a text's positions, its
    padding (`mask` 0) left out of every position's keys."""
    def __init__(self, spec):
        super().__init__(spec["embed_dim"], spec["num_heads"], batch_first=True)
        self.input_shape = spec["input_shape"]
        self.mask = None

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.input_shape)
        # Added -1e9 as KynML adds it (a text of padding only stays finite;
        # see NoFastPath).
        with NoFastPath():
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
        with NoFastPath():  # an input of padding only stays finite
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


class Normalized(nn.Module):
    """Raw rows in, normalised as the run normalised its rows ((x - mean) / std
    with the training split's statistics), then the model."""
    def __init__(self, net, normalizer):
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(normalizer["mean"]), persistent=False)
        self.register_buffer("std", torch.tensor(normalizer["std"]), persistent=False)

    def forward(self, x):
        return self.net((x - self.mean) / self.std)


def rebuild(side, weights):
    """The model of a sidecar (format kynml-pytorch) with its weights loaded, in
    eval mode. It takes raw rows, as `kynml predict` and the ONNX export do:
    the sidecar's normalisation, where the run had one, is part of it."""
    net = nn.Sequential(*[module(spec) for spec in side["layers"]])
    net.load_state_dict(weights)
    if side.get("input_layout") == "tokens":
        net = Text(net)
    if side.get("input_layout") == "sequence":
        net = Sequence(net, side["sequence"]["length"], len(side["sequence"]["columns"]))
    if side["normalizer"] is not None:
        net = Normalized(net, side["normalizer"])
    return net.eval()


def predict(side, net, rows):
    """The model's outputs on raw rows, as probabilities for a classifier."""
    with torch.no_grad():
        out = net(rows)
    kind = side["head"]["kind"]
    if kind == "softmax":
        return torch.softmax(out, dim=-1)  # column i is class_names[i]
    if kind == "sigmoid":
        p = torch.sigmoid(out)
        return torch.cat([1 - p, p], dim=-1)
    return out


# KynML's whitespace (Rust's `char::is_whitespace`), which it trims cells of
# and splits texts at: Python's `str.strip()` and `str.split()` also take
# \x1c-\x1f for whitespace.
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"


def read_rows(path, columns, target):
    """The cells of `columns` (trimmed), as (line, cells) for each data row of
    the CSV file `path`, read as `kynml predict` reads it: the first row is a
    header naming the columns, in any order, with the target column allowed
    beside them (and ignored); a quoted cell may hold commas, "" for a quote
    and line breaks. Blank lines at the end are skipped, one between rows is
    an error (each row gives one line of output); in a file of one column,
    `""` is a row, its cell empty."""
    def fail(line, message):
        sys.exit(f"{path}:{line}: {message}")

    # utf-8-sig: a byte order mark (as Excel writes) is not part of the first name.
    with open(path, newline="", encoding="utf-8-sig") as f:
        raw = f.readlines()
    reader, records, end = csv.reader(raw), [], 0
    for record in reader:
        records.append((end + 1, record))  # the line the record starts on
        end = reader.line_num

    # Python's csv reads an empty line as [], `""` as [""], spaces as ["  "],
    # and `"  "` as ["  "] too: the line itself tells a quoted cell.
    def quoted(line):
        return raw[line - 1].lstrip(WHITESPACE).startswith('"')

    def blank(record, width, line):
        if not record:
            return True
        if len(record) != 1 or record[0].strip(WHITESPACE):
            return False
        # One column: `""` or `"  "` is a row whose text is empty.
        return width > 1 or (record[0] != "" and not quoted(line))

    records = iter(records)
    first = next(((n, r) for n, r in records if not blank(r, 2, n)), None)
    if first is None:
        fail(1, "the file is empty")
    header_line, header = first[0], [c.strip(WHITESPACE) for c in first[1]]
    rows = []
    missing = [c for c in columns if c not in header]
    if missing:
        fail(header_line, f"the header lacks the column(s) {', '.join(missing)} (it has {', '.join(header)})"
             + ("; line 1 holds numbers: the file has no header, so put one first: " + ",".join(columns)
                if all(number(c) is not None for c in header) else ""))
    # A column with no name (a pandas index saved without index=False, a
    # comma at the end of every line) is passed over, as kynml predict does.
    dup = sorted({h for h in header if h and header.count(h) > 1})
    if dup:
        fail(header_line, f"the header names {', '.join(dup)} more than once")
    extra = [h for h in header if h and h not in columns and h != target]
    if extra:
        fail(header_line, f"column(s) {', '.join(extra)} are neither inputs of this model nor its target ({target})")
    order, width = [header.index(c) for c in columns], len(header)
    blank_at = None
    for line, record in records:
        if blank(record, width, line):
            blank_at = blank_at or line
            continue
        if blank_at:
            fail(blank_at, "a blank line between rows (each row gives one line of output)"
                 + ('; write an empty text as ""' if width == 1 else ""))
        if len(record) != width:
            fail(line, f"{len(record)} cells, expected {width}")
        rows.append((line, [record[c].strip(WHITESPACE) for c in order]))
    if not rows:
        fail(header_line + 1, "no rows after the header")
    return rows


def number(text):
    """`text` as KynML reads a number (an f32, finite), else None."""
    try:
        if "_" in text:  # Python's float() takes 1_000, KynML does not
            return None
        value = struct.unpack("f", struct.pack("f", float(text)))[0]
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def main(argv):
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    weights, sidecar, path = argv[1:]
    side = json.load(open(sidecar))
    text, seq, target = side.get("tokens"), side.get("sequence"), side.get("target")

    def value(line, name, cell):
        v = number(cell)
        if v is None:
            sys.exit(f"{path}:{line}: column {name}: {cell!r} is not a finite number")
        return v

    def sequence_values(line, name, cell):
        # Spaces separate values, any run of them; a comma or semicolon
        # separates two, so `1,,3` and `,1` miss one (an error, as `kynml
        # predict` says); one at the end (`1,2,3,`) ends the cell.
        listed = "," in cell or ";" in cell
        trimmed = cell.rstrip(WHITESPACE)
        trimmed = trimmed[:-1] if trimmed[-1:] in (",", ";") else cell
        vs = []
        for part in re.split("[,;]", trimmed):
            items = [t for t in re.split(f"[{WHITESPACE}]+", part) if t]
            if listed and not items:
                sys.exit(f"{path}:{line}: column {name} misses its value {len(vs) + 1}: a comma or semicolon with "
                         "no number before or after it")
            vs += [value(line, name, t) for t in items]
        return vs

    if text:
        # The text column: split at whitespace, ids 2.. for the vocabulary,
        # 1 for a token it lacks, cut or padded with 0 to `length`.
        ids, length = {t: i + 2 for i, t in enumerate(text["tokens"])}, text["length"]
        rows = []
        for _, (cell,) in read_rows(path, [text["column"]], target):
            r = [ids.get(t, 1) for t in re.split(f"[{WHITESPACE}]+", cell) if t][:length]
            rows.append(r + [0] * (length - len(r)))
    elif seq:
        # The sequence columns, each cell numbers separated by whitespace,
        # commas or semicolons (a cell with commas quoted), position by
        # position, cut or NaN-padded to `length`.
        length, names = seq["length"], seq["columns"]
        rows = []
        for line, cells in read_rows(path, names, target):
            row = [float("nan")] * (length * len(names))
            held = None
            for c, cell in enumerate(cells):
                vs = sequence_values(line, names[c], cell)
                if held is not None and len(vs) != held:
                    sys.exit(f"{path}:{line}: {names[0]} holds {held} values, {names[c]} {len(vs)}")
                held = len(vs)
                for p, v in enumerate(vs[:length]):
                    row[p * len(names) + c] = v
            rows.append(row)
    else:
        # The features by name. A categorical column's text becomes its index: 1 + its place in the
        # vocabulary, 0 for a value training never saw.
        names = side["feature_names"]
        vocab = {c["position"]: {v: i + 1 for i, v in enumerate(c["values"])} for c in side.get("categories", [])}

        def features(line, cells):
            return [float(vocab[i].get(c, 0)) if i in vocab else value(line, names[i], c) for i, c in enumerate(cells)]
        rows = [features(line, cells) for line, cells in read_rows(path, names, target)]

    out = predict(side, rebuild(side, load_file(weights)), torch.tensor(rows, dtype=torch.float32))
    for row in out.tolist():
        print(",".join(f"{v:.6f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
