#!/usr/bin/env python3
"""PyTorch reference for `kynml bench` on a GPU: the same model, batch,
optimizer and measuring method, one PyTorch variant per process.

    python3 benches/pytorch/gpu.py --config wide --precision bf16
    python3 benches/pytorch/gpu.py --config deepnet --precision tf32 --compile --json /tmp/pt.json
    python3 benches/compare_gpu.py          # KynML and every PyTorch variant side by side

Configs (as examples/wide/wide.kyn and examples/deepnet/deepnet.kyn):
  wide     Linear(64,4096) ReLU Linear(4096,4096) ReLU Linear(4096,4096) ReLU
           Linear(4096,10); cross-entropy; batch 4096.
  deepnet  Linear(128,512) GELU BatchNorm1d Dropout(0.3) Linear(512,256) GELU
           BatchNorm1d Dropout(0.2) Linear(256,64) ReLU Linear(64,1); MSE;
           batch 256.
Both: AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
PyTorch's default init, seeded standard-normal synthetic rows (--rows) kept on
the device, a fresh permutation per round, batches sliced from it (PyTorch's
fastest feed).

Precisions (--precision):
  fp32  strict fp32 products (allow_tf32 off: PyTorch's default for matmuls)
  tf32  fp32 storage, TF32 products (torch.backends.cuda.matmul.allow_tf32)
  bf16  torch.autocast(bfloat16), no loss scaling
  fp16  torch.autocast(float16) with torch.amp.GradScaler
--compile wraps the model in torch.compile; --fused uses AdamW(fused=True).

Measuring, as `kynml bench` does: one warm-up round of --steps steps, then
--rounds timed rounds of --steps steps; each round ends with the loss read
back (a device synchronisation), so queued work is inside its time.
samples/s is the median round's. Also: seconds from the process's start to
the end of the warm-up round (imports included), peak device memory
(torch.cuda.max_memory_allocated and max_memory_reserved), the GPU's name.

Needs torch with CUDA (or --device cpu for a smoke test); says so and exits 2
without it.
"""

import argparse
import json
import statistics
import sys
import time

PROCESS_START = time.perf_counter()
sys.dont_write_bytecode = True  # keep benches/ free of __pycache__

try:
    import torch
    from torch import nn
except ImportError as err:  # torch is optional for the project
    print(f"gpu.py needs torch: {err} (python: {sys.executable}); `pip install torch`", file=sys.stderr)
    sys.exit(2)

CONFIGS = {
    "wide": {"input": 64, "batch": 4096, "classes": 10},
    "deepnet": {"input": 128, "batch": 256, "classes": 0},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="wide")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="bf16")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    p.add_argument("--steps", type=int, default=50, help="steps in each round (default: 50)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up round (default: 3)")
    p.add_argument("--rows", type=int, default=0, help="synthetic rows (default: enough for one round)")
    p.add_argument("--batch", type=int, default=0, help="rows per step (default: the config's)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu for a smoke test")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", metavar="PATH", help="write the results here as JSON")
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        p.error("--steps and --rounds must be at least 1")
    return args


def model_for(config, cfg):
    if config == "wide":
        return nn.Sequential(
            nn.Linear(cfg["input"], 4096), nn.ReLU(),
            nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, cfg["classes"]),
        )
    return nn.Sequential(
        nn.Linear(cfg["input"], 512), nn.GELU(), nn.BatchNorm1d(512), nn.Dropout(0.3),
        nn.Linear(512, 256), nn.GELU(), nn.BatchNorm1d(256), nn.Dropout(0.2),
        nn.Linear(256, 64), nn.ReLU(),
        nn.Linear(64, 1),
    )


def synthetic(cfg, rows, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(rows, cfg["input"], generator=g)
    if cfg["classes"]:
        w = torch.randn(min(8, cfg["input"]), cfg["classes"], generator=g)
        y = (x[:, :w.shape[0]] @ w).argmax(dim=1)
    else:
        y = x[:, :8].tanh().sum(dim=1, keepdim=True)
    return x.to(device), y.to(device)


def run(args):
    cfg = dict(CONFIGS[args.config])
    if args.batch:
        cfg["batch"] = args.batch
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("gpu.py: torch sees no CUDA device (use --device cpu for a smoke test)")
    torch.manual_seed(args.seed)
    # fp32 means strict fp32 products; tf32 is asked for explicitly.
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"

    batch = cfg["batch"]
    rows = args.rows or batch * args.steps
    x, y = synthetic(cfg, rows, device, args.seed)
    model = model_for(args.config, cfg).to(device)
    step_model = torch.compile(model) if args.compile else model
    loss_fn = nn.CrossEntropyLoss() if cfg["classes"] else nn.MSELoss()
    opt_kwargs = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    if args.fused:
        opt_kwargs["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), **opt_kwargs)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def round_():
        """One round of --steps steps; seconds and the last loss (read back)."""
        model.train()
        order = torch.randperm(rows, device=device)
        start = time.perf_counter()
        loss = None
        for step in range(args.steps):
            lo = (step * batch) % max(rows - batch + 1, 1)
            idx = order[lo:lo + batch]
            xb, yb = x[idx], y[idx]
            with torch.autocast(device.type, dtype=half, enabled=half is not None):
                loss = loss_fn(step_model(xb), yb)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        last = float(loss.detach())  # the round ends when its work is done
        sync()
        return time.perf_counter() - start, last

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    warm_s, _ = round_()
    startup = time.perf_counter() - PROCESS_START
    print(f"warm-up round: {batch * args.steps / warm_s:.0f} samples/s, {warm_s:.2f}s", file=sys.stderr, flush=True)
    rounds, last = [], float("nan")
    for r in range(args.rounds):
        secs, last = round_()
        rounds.append(batch * args.steps / secs)
        print(f"round {r + 1}: {rounds[-1]:.0f} samples/s, loss {last:.4f}", file=sys.stderr, flush=True)
    sps = statistics.median_low(rounds)
    return {
        "engine": "pytorch", "torch_version": torch.__version__, "config": args.config,
        "precision": args.precision, "compile": args.compile, "fused_adamw": args.fused,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "batch": batch, "steps": args.steps, "rounds": rounds,
        "samples_per_sec": sps, "step_ms": 1e3 * batch / sps,
        "warmup_round_secs": warm_s, "process_startup_secs": startup,
        "peak_device_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "peak_device_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
        "final_train_loss": last,
    }


def main():
    args = parse_args()
    variant = f"{args.config} {args.precision}{' compile' if args.compile else ''}{' fused' if args.fused else ''}"
    try:
        result = run(args)
    except Exception as err:  # e.g. torch.compile without a working compiler
        lines = str(err).strip().splitlines()
        reason = f"{type(err).__name__}: {lines[0] if lines else ''}"
        print(f"gpu.py: {variant} failed: {reason}", file=sys.stderr)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"engine": "pytorch", "variant": variant, "error": reason}, f)
        raise
    mem = result["peak_device_allocated_bytes"]
    print(f"pytorch {result['torch_version']} {variant} on {result['device']}: "
          f"{result['samples_per_sec']:.0f} samples/s, {result['step_ms']:.3f} ms/step, "
          f"start-up {result['process_startup_secs']:.1f}s"
          + (f", peak device memory {mem / 2**20:.0f} MiB" if mem is not None else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
