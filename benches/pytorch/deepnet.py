#!/usr/bin/env python3
"""PyTorch reference for the DeepNet benchmark: the users' examples/deepnet/deepnet.kyn,
trained the way KynML trains it, so that the two engines' throughput can be compared.

    python3 benches/pytorch/deepnet.py                         # eager, tensor pipeline, 3 timed epochs
    python3 benches/pytorch/deepnet.py --mode compile --pipeline dataloader --json /tmp/pt.json
    python3 benches/compare_pytorch.py                          # this script and KynML side by side

What it trains (as KynML does): the CSV's 50,000 rows (f0..f127, target `outcome`)
split 80/20 with a seeded permutation, features z-scored with the training rows'
mean and population std (a constant column keeps std 1), target as is. Model
Linear(128,512) GELU BatchNorm1d Dropout(0.3) Linear(512,256) GELU BatchNorm1d
Dropout(0.2) Linear(256,64) ReLU Linear(64,1), PyTorch's default Linear init; MSE
loss; AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01); batch 256;
CosineAnnealingLR(T_max=100) stepped once per epoch; fp32 unless --precision bf16.

Pipelines (--pipeline):
  dataloader  TensorDataset + DataLoader(batch_size=256, shuffle=True, num_workers=0),
              what users write.
  tensor      a torch.randperm per epoch and slices of tensors built once, the
              fastest way to feed PyTorch from memory.
Modes (--mode): eager, or compile (torch.compile(model); the loss and the
optimizer stay eager).
Precision (--precision): fp32, or bf16 (the forward and the loss under
torch.autocast("cpu", dtype=torch.bfloat16), as PyTorch users run the spec's
`precision = bf16` on a CPU: products in bf16 through oneDNN, on AMX or
AVX-512 BF16 where the CPU has them; weights and optimizer stay fp32).

Timing. Epoch 1 is a warm-up (for compile it includes compilation), reported
but left out of the figures; epochs 2..N+1 are timed. Per epoch:
  train seconds  shuffling and batching plus forward, backward and optimizer step
                 over every training batch (a last batch of one row is dropped,
                 since BatchNorm needs two);
  epoch seconds  train seconds plus the validation pass (model.eval(),
                 torch.no_grad(), batches of 4096, MSE over all rows).
samples/s = training rows / seconds, over all timed epochs together. The CSV
load and tensor building happen once, before any timing. Also reported: the
process's peak RSS (ru_maxrss) and the last epoch's train and validation loss.

Needs torch and numpy; says so and exits 2 when either is missing.
"""

import argparse
import csv
import json
import math
import os
import resource
import sys
import time

sys.dont_write_bytecode = True  # keep benches/ free of __pycache__

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as err:  # torch is optional for the project
    print(f"deepnet.py needs torch and numpy: {err} (python: {sys.executable}); "
          "`pip install torch numpy`", file=sys.stderr)
    sys.exit(2)

IMPORT_RSS_KIB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # what the imports alone cost

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DATA = os.path.join(REPO, "examples", "deepnet", "data", "large_train.csv")
TARGET = "outcome"
TRAIN_FRACTION = 0.8
BATCH = 256
EVAL_BATCH = 4096
T_MAX = 100


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA, help="the DeepNet CSV (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs, after one warm-up epoch (default: 3)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch.set_num_threads (default: os.cpu_count(), %(default)s here)")
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--pipeline", choices=["dataloader", "tensor"], default="tensor")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--seed", type=int, default=42, help="split, init, dropout and shuffle seed (KynML's default is 42)")
    p.add_argument("--json", metavar="PATH", help="write the results here as JSON")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    if args.threads < 1:
        p.error("--threads must be at least 1")
    return args


# ---- data -------------------------------------------------------------------

def load_csv(path):
    """Feature matrix (float32, rows x 128) and target vector from the CSV, by column name."""
    with open(path, newline="") as f:
        header = next(csv.reader(f))
    if TARGET not in header:
        raise SystemExit(f"{path}: no `{TARGET}` column (columns: {', '.join(header[:5])}, ...)")
    table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32, ndmin=2)
    t = header.index(TARGET)
    features = np.delete(table, t, axis=1)
    return np.ascontiguousarray(features), np.ascontiguousarray(table[:, t])


def split_and_normalise(x, y, seed):
    """Seeded 80/20 split; features z-scored with the training rows' statistics."""
    order = np.random.default_rng(seed).permutation(len(x))
    n_train = int(round(len(x) * TRAIN_FRACTION))
    tr, va = order[:n_train], order[n_train:]
    mean = x[tr].astype(np.float64).mean(axis=0)
    std = x[tr].astype(np.float64).std(axis=0)  # population std, like KynML
    std[std == 0] = 1.0

    def normalise(rows):
        return ((x[rows] - mean) / std).astype(np.float32)

    return normalise(tr), y[tr], normalise(va), y[va]


# ---- model ------------------------------------------------------------------

def deepnet(n_features):
    return nn.Sequential(
        nn.Linear(n_features, 512), nn.GELU(), nn.BatchNorm1d(512), nn.Dropout(0.3),
        nn.Linear(512, 256), nn.GELU(), nn.BatchNorm1d(256), nn.Dropout(0.2),
        nn.Linear(256, 64), nn.ReLU(),
        nn.Linear(64, 1),
    )


# ---- batches ----------------------------------------------------------------

def tensor_batches(x, y):
    """A fresh permutation of the rows, then contiguous slices of it: PyTorch's
    fastest in-memory pipeline (one gather per epoch instead of one per batch)."""
    order = torch.randperm(len(x))
    xs, ys = x[order], y[order]
    for start in range(0, len(x), BATCH):
        yield xs[start:start + BATCH], ys[start:start + BATCH]


def make_batches(pipeline, x, y):
    if pipeline == "tensor":
        return lambda: tensor_batches(x, y)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=BATCH, shuffle=True, num_workers=0)
    return lambda: iter(loader)


# ---- one epoch --------------------------------------------------------------

def autocast(precision):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


def train_epoch(model, loss_fn, opt, batches, precision):
    """Steps over every batch; returns (seconds, mean train loss per row)."""
    model.train()
    total, rows = 0.0, 0
    start = time.perf_counter()
    for xb, yb in batches():
        n = len(xb)
        if n < 2:  # BatchNorm cannot normalise one row
            continue
        with autocast(precision):
            loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.item() * n
        rows += n
    return time.perf_counter() - start, total / rows


@torch.no_grad()
def validate(model, x, y, precision):
    """Seconds and MSE over all validation rows, in eval mode."""
    model.eval()
    start = time.perf_counter()
    sse = 0.0
    for s in range(0, len(x), EVAL_BATCH):
        with autocast(precision):
            out = model(x[s:s + EVAL_BATCH])
        diff = out.float() - y[s:s + EVAL_BATCH]
        sse += float(diff.square().sum())
    return time.perf_counter() - start, sse / len(x)


# ---- main -------------------------------------------------------------------

def run(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    x, y = load_csv(args.data)
    xtr, ytr, xva, yva = split_and_normalise(x, y, args.seed)
    xtr, xva = torch.from_numpy(xtr), torch.from_numpy(xva)
    ytr, yva = torch.from_numpy(ytr).unsqueeze(1), torch.from_numpy(yva).unsqueeze(1)
    load_seconds = time.perf_counter() - t0
    n_train, n_valid = len(xtr), len(xva)

    model = deepnet(xtr.shape[1])
    step_model = torch.compile(model) if args.mode == "compile" else model
    loss_fn = nn.MSELoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T_MAX)
    batches = make_batches(args.pipeline, xtr, ytr)

    epochs = []
    for epoch in range(1, args.epochs + 2):
        lr = opt.param_groups[0]["lr"]
        train_s, train_loss = train_epoch(step_model, loss_fn, opt, batches, args.precision)
        val_s, val_loss = validate(step_model, xva, yva, args.precision)
        sched.step()
        e = {
            "epoch": epoch, "warmup": epoch == 1, "lr": lr,
            "train_seconds": train_s, "epoch_seconds": train_s + val_s,
            "train_samples_per_sec": n_train / train_s, "epoch_samples_per_sec": n_train / (train_s + val_s),
            "train_loss": train_loss, "val_loss": val_loss,
        }
        epochs.append(e)
        print(f"epoch {epoch:2d}{' (warm-up)' if e['warmup'] else '          '}  lr {lr:.2e}  "
              f"train_loss {train_loss:.4f}  val_loss {val_loss:.4f}  "
              f"train {e['train_samples_per_sec']:8.0f} samples/s  epoch {e['epoch_samples_per_sec']:8.0f} samples/s  "
              f"{e['epoch_seconds']:.2f}s", flush=True)

    timed = epochs[1:]
    train_s = sum(e["train_seconds"] for e in timed)
    epoch_s = sum(e["epoch_seconds"] for e in timed)
    return {
        "engine": "pytorch", "mode": args.mode, "pipeline": args.pipeline, "precision": args.precision,
        "torch_version": torch.__version__, "python": sys.executable,
        "threads": torch.get_num_threads(), "seed": args.seed, "data": os.path.abspath(args.data),
        "train_rows": n_train, "valid_rows": n_valid, "load_seconds": load_seconds,
        "timed_epochs": len(timed),
        "train_samples_per_sec": n_train * len(timed) / train_s,
        "epoch_samples_per_sec": n_train * len(timed) / epoch_s,
        "warmup_seconds": epochs[0]["epoch_seconds"],
        "final_train_loss": epochs[-1]["train_loss"], "final_val_loss": epochs[-1]["val_loss"],
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,  # KiB on Linux
        "import_rss_kib": IMPORT_RSS_KIB,
        "epochs": epochs,
    }


def main():
    args = parse_args()
    try:
        result = run(args)
    except Exception as err:  # e.g. torch.compile without a working C++ compiler
        lines = str(err).strip().splitlines()
        reason = f"{type(err).__name__}: {lines[0] if lines else ''}"
        print(f"deepnet.py: {args.mode}/{args.pipeline} failed: {reason}", file=sys.stderr)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"engine": "pytorch", "mode": args.mode, "pipeline": args.pipeline, "error": reason}, f)
        raise
    print(f"pytorch {result['torch_version']} {args.mode}/{args.pipeline}, {result['threads']} threads, "
          f"{result['train_rows']} train rows, {result['timed_epochs']} timed epochs "
          f"(warm-up {result['warmup_seconds']:.2f}s, data load {result['load_seconds']:.2f}s):")
    print(f"  train {result['train_samples_per_sec']:.0f} samples/s, "
          f"epoch with validation {result['epoch_samples_per_sec']:.0f} samples/s, "
          f"peak RSS {result['peak_rss_kib'] / 1024:.0f} MiB ({IMPORT_RSS_KIB / 1024:.0f} after imports), "
          f"final train_loss {result['final_train_loss']:.4f} val_loss {result['final_val_loss']:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
