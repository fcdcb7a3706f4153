"""The timing that `kynml bench` uses, for PyTorch reference scripts that
train one model on tensors in memory (cnn.py, transformer.py).

One warm-up round, then `--rounds` timed rounds of `--steps` optimizer
steps each; each round takes its batches in order from a fresh permutation
of the rows and ends with the loss read back (which waits for a GPU).
Reports the median round's samples/s, every round, the start-up (from this
module's import, before torch's, to the end of the warm-up round, as gpu.py
and `kynml bench` count it), and the process's peak RSS (and on CUDA the peak device memory PyTorch allocated), and writes them
as JSON with `--json`.

`--device cuda` runs on the GPU with the data already there; `--precision`
is fp32, tf32 (TF32 matmuls), bf16 (autocast) or fp16 (autocast with a
GradScaler), as `benches/pytorch/gpu.py` runs them.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

# Imported before torch by the scripts that use it: the start of the process, near enough.
PROCESS_START = time.perf_counter()


def arguments(description, steps):
    """The command-line arguments every such script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    p.add_argument("--json")
    return p.parse_args()


def adam_step(torch, net, x, y, args=None):
    """One optimizer step on rows `idx` of `x`, `y`: cross-entropy, Adam(lr=1e-3),
    gradients set to None between steps, on `args.device` in `args.precision`;
    returns the step as `step(idx) -> loss`."""
    device = getattr(args, "device", "cpu")
    precision = getattr(args, "precision", "fp32")
    net, x, y = net.to(device), x.to(device), y.to(device)
    if precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(idx):
        idx = idx.to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.split(":")[0], dtype=half, enabled=half is not None):
            loss = loss_fn(net(x[idx]), y[idx])
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    return step


def measure(torch, args, step):
    """Times `step(indices)`, one optimizer step on those rows returning its
    loss tensor, as described above; prints and (with --json) writes the figures."""
    rates = []
    first = None
    for r in range(args.rounds + 1):
        order = torch.randperm(args.rows)
        start = time.perf_counter()
        for s in range(args.steps):
            at = (s * args.batch) % (args.rows - args.batch + 1)
            loss = step(order[at : at + args.batch])
        last = loss.item()
        seconds = time.perf_counter() - start
        rate = args.steps * args.batch / seconds
        if r == 0:
            first = rate
            startup = time.perf_counter() - PROCESS_START
            print(f"warm-up round: {rate:.0f} samples/s, train loss {last:.4f}", file=sys.stderr)
        else:
            rates.append(rate)
            print(f"round {r}: {rate:.0f} samples/s, train loss {last:.4f}", file=sys.stderr)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    median = statistics.median(rates)
    on_gpu = args.device.startswith("cuda")
    device_peak = torch.cuda.max_memory_allocated() if on_gpu else None
    where = f"{args.device} {args.precision}" if on_gpu else f"{args.threads} threads"
    print(f"pytorch {torch.__version__} eager, {where}, batch {args.batch}: "
          f"{median:.0f} samples/s (rounds {', '.join(f'{r:.0f}' for r in rates)}), start-up {startup:.1f}s, "
          f"peak RSS {rss:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples_per_sec": median, "rounds": rates, "warmup": first, "peak_rss_mib": rss,
                       "torch": torch.__version__, "threads": args.threads, "batch": args.batch,
                       "step_ms": 1e3 * args.batch / median, "precision": args.precision,
                       "peak_device_allocated_bytes": device_peak, "process_startup_secs": startup}, f)
