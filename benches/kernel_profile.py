#!/usr/bin/env python3
"""Where a training step's device time goes, kernel by kernel.

CubeCL's profiler (`CUBECL_DEBUG_OPTION=profile CUBECL_DEBUG_LOG=FILE`)
writes one line per launch, `| 1.23ms | Name | part | ... | Runtime`, timed
with the device synchronised around it. A log holds the start-up too
(autotune, the warm-up round), so two runs that differ only in their step
count are compared: what the longer one launched beyond the shorter one is
`EXTRA_STEPS` training steps.

    kernel_profile.py SHORT.log LONG.log EXTRA_STEPS [--json OUT]

prints, per kind of kernel, the launches a step, the device time a step,
the mean launch and the share of the step's kernel time, longest first; and
the totals. Kinds are the launch's name and its distinguishing parts (the
matmul's family and loaders, the element-wise operator), so that the
products that took a slow kernel stand apart from those that took a fast one.
"""

import json
import re
import sys
from collections import defaultdict

UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# Parts every launch of a kind repeats and that tell kernels nothing apart.
NOISE = {"TensorArgs", "DynamicScalar", "DynamicSize", "Option", "()", "StridedStageFamily", "UnitWriterFamily"}


def seconds(text):
    m = re.fullmatch(r"([0-9.]+)\s*([a-zµ]+)", text.strip())
    if not m or m.group(2) not in UNITS:
        return None
    return float(m.group(1)) * UNITS[m.group(2)]


SHORTER = [("MatmulFamily", ""), ("CyclicLoading", "Cyclic"), ("TilingOrder", ""), ("GlobalPartitionMatmul", "Partition")]


def kind(parts):
    kept = [p for p in parts if p and p not in NOISE and not p.startswith("__") and not p.endswith("Runtime")]
    text = " ".join(kept) or "(unnamed)"
    for long, short in SHORTER:
        text = text.replace(long, short)
    return text


def read(path):
    """{kind: [launches, seconds]} over the whole log."""
    totals = defaultdict(lambda: [0, 0.0])
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("|"):
                continue
            fields = [p.strip() for p in line.strip().strip("|").split("|")]
            if len(fields) < 2:
                continue
            t = seconds(fields[0])
            if t is None:
                continue
            entry = totals[kind(fields[1:])]
            entry[0] += 1
            entry[1] += t
    return totals


def per_step(short, long, steps):
    """The kinds the extra steps launched (however rarely: an optimizer
    kernel under `accumulate`, a periodic read-back). A kind launched as
    often in both runs (start-up, validation) is left out whatever its time
    difference, which is noise; a kind's time below zero (noise too) counts
    as zero and is marked."""
    rows = []
    for k in set(short) | set(long):
        n = (long.get(k, [0, 0.0])[0] - short.get(k, [0, 0.0])[0]) / steps
        t = (long.get(k, [0, 0.0])[1] - short.get(k, [0, 0.0])[1]) / steps
        if n > 0:
            rows.append({"kind": k, "launches": n, "seconds": max(t, 0.0), "noisy": t < 0})
    rows.sort(key=lambda r: -r["seconds"])
    return rows


def fmt_time(t):
    return f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out = argv[i + 1]
        args = [a for a in args if a != out]
    if len(args) != 3:
        sys.exit(__doc__)
    steps = float(args[2])
    if steps <= 0:
        sys.exit("kernel_profile.py: EXTRA_STEPS must be above 0")
    short, long = read(args[0]), read(args[1])
    if not long:
        sys.exit(f"kernel_profile.py: {args[1]} holds no profiled launches (was CUBECL_DEBUG_OPTION=profile set?)")
    print(f"{sum(v[0] for v in long.values())} launches in {args[1]}, {sum(v[0] for v in short.values())} in {args[0]}")
    rows = per_step(short, long, steps)
    total_t = sum(r["seconds"] for r in rows)
    total_n = sum(r["launches"] for r in rows)
    print(f"| kernel kind | launches a step | device time a step | mean launch | share |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        mean = r["seconds"] / r["launches"] if r["launches"] > 0 else float("nan")
        share = r["seconds"] / total_t if total_t > 0 else float("nan")
        noisy = " (below zero: noise)" if r["noisy"] else ""
        print(f"| {r['kind']} | {r['launches']:.1f} | {fmt_time(r['seconds'])}{noisy} | {fmt_time(mean)} | {share:.1%} |")
    print(f"| all | {total_n:.1f} | {fmt_time(total_t)} | | 100% |")
    if out:
        with open(out, "w") as f:
            json.dump({"steps": steps, "launches": total_n, "seconds": total_t, "kinds": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
