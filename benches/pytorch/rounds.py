"""The timing that `kynml bench` uses, for PyTorch reference scripts that
train one model on tensors in memory (cnn.py, transformer.py).

One warm-up round, then `--rounds` timed rounds of `--steps` optimizer
steps each; each round takes its batches in order from a fresh permutation
of the rows and ends with the loss read back. Reports the median round's
samples/s, every round, and the process's peak RSS, and writes them as
JSON with `--json`.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time


def arguments(description, steps):
    """The command-line arguments every such script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--json")
    return p.parse_args()


def adam_step(torch, net, x, y):
    """One optimizer step on rows `idx` of `x`, `y`: cross-entropy, Adam(lr=1e-3),
    gradients set to None between steps; returns the step as `step(idx) -> loss`."""
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(idx):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x[idx]), y[idx])
        loss.backward()
        opt.step()
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
            print(f"warm-up round: {rate:.0f} samples/s, train loss {last:.4f}", file=sys.stderr)
        else:
            rates.append(rate)
            print(f"round {r}: {rate:.0f} samples/s, train loss {last:.4f}", file=sys.stderr)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    median = statistics.median(rates)
    print(f"pytorch {torch.__version__} eager, {args.threads} threads, batch {args.batch}: "
          f"{median:.0f} samples/s (rounds {', '.join(f'{r:.0f}' for r in rates)}), peak RSS {rss:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples_per_sec": median, "rounds": rates, "warmup": first, "peak_rss_mib": rss,
                       "torch": torch.__version__, "threads": args.threads, "batch": args.batch}, f)
