#!/usr/bin/env python3
"""A paper model of data-parallel scaling (issue 18), for the figures that
cannot be measured here: 8 GPUs over NVLink, 2 machines over 100 Gb/s.

    python3 benches/scaling_model.py [--wide-samples-s 367005] [--deepnet-step-ms 3.56]
                                     [--nvlink-gbs 350] [--net-gbs 11] [--json FILE]

Nothing here is measured. The model takes:

- the compute of one step on one GPU, from the single-GPU bench
  (`benches/compare_gpu.py`): the defaults are the H100 figures in issue 14
  (KynML fp32, wide: 367,005 samples/s at batch 4096; DeepNet: about 72,000
  samples/s at batch 256, i.e. 3.56 ms a step);
- the gradient's size, from the spec's shapes (fp32 gradients: 4 bytes a
  parameter);
- an interconnect: a ring all-reduce moves 2 (N - 1) / N times the gradient
  over each link, plus a latency per ring step (2 (N - 1) steps) for every
  all-reduce call, after the backward pass, without overlapping it with
  compute. Two plans: one all-reduce per parameter tensor (`per tensor`), or
  every gradient in one buffer (`bucket`), which pays the latency once.

Two ways to grow: `strong` keeps the spec's batch as the global batch (what
`kynml train --device cuda:0,...` does: the same training on 1 or N
devices), so each device takes batch / N rows; `weak` gives each device the
spec's batch (N times the rows per step, a different training). How a
device's step time follows its batch is the main unknown: the model takes
the two ends, a compute-bound step whose time is proportional to its rows
(the wide spec: an optimistic bound, since small products run less
efficiently), and a launch-bound step whose time does not depend on its rows
(DeepNet at batch 256, measured launch-bound on an H100: 72k samples/s for
a model that needs about 1/30 of the wide spec's work per sample).

Efficiency = N-device samples/s / (N x 1-device samples/s).
"""

import argparse
import json
import sys


def params(widths, batchnorm=()):
    """Parameters of a dense stack `widths[0] -> ... -> widths[-1]`, plus two
    per feature of every batchnorm width in `batchnorm`, and the count of
    tensors (weight and bias per layer, two per batchnorm)."""
    count = sum(a * b + b for a, b in zip(widths, widths[1:]))
    count += sum(2 * w for w in batchnorm)
    tensors = 2 * (len(widths) - 1) + 2 * len(batchnorm)
    return count, tensors


SPECS = {
    # 64 -> 4096 -> 4096 -> 4096 -> 10 (benches/compare_gpu.py's wide spec).
    "wide": dict(batch=4096, layers=[64, 4096, 4096, 4096, 10], batchnorm=(), bound="compute"),
    # examples/deepnet/deepnet.kyn: 128 -> 512 (bn) -> 256 (bn) -> 64 -> 1.
    "deepnet": dict(batch=256, layers=[128, 512, 256, 64, 1], batchnorm=(512, 256), bound="launch"),
}

LINKS = {
    # Effective all-reduce bus bandwidth and per-ring-step latency. NVLink 4
    # on an 8-GPU H100 board is 450 GB/s per direction per GPU; NCCL's
    # all-reduce reaches about 350-480 GB/s of bus bandwidth there (NVIDIA's
    # published nccl-tests figures). Burn's collective is not NCCL: these
    # are what a good all-reduce would reach, not what it has been seen to.
    "nvlink": dict(latency_us=10.0),
    # 100 Gb/s Ethernet: 12.5 GB/s raw, about 11 GB/s of payload; a network
    # round trip of about 50 us per ring step.
    "net": dict(latency_us=50.0),
}


def allreduce_s(n, grad_bytes, tensors, gbs, latency_us):
    if n == 1:
        return 0.0
    volume = 2 * (n - 1) / n * grad_bytes / (gbs * 1e9)
    return volume + tensors * 2 * (n - 1) * latency_us * 1e-6


def model(spec, step_1_s, n, gbs, latency_us, mode, bucket):
    grad_params, tensors = params(spec["layers"], spec["batchnorm"])
    grad_bytes = 4 * grad_params
    rows = spec["batch"] // n if mode == "strong" else spec["batch"]
    if spec["bound"] == "compute":
        compute = step_1_s * rows / spec["batch"]
    else:
        compute = step_1_s
    comm = allreduce_s(n, grad_bytes, 1 if bucket else tensors, gbs, latency_us)
    step = compute + comm
    speed_n = rows * n / step
    speed_1 = spec["batch"] / step_1_s
    return dict(
        devices=n, mode=mode, plan="bucket" if bucket else "per tensor", rows_per_device=rows, compute_ms=compute * 1e3, allreduce_ms=comm * 1e3,
        samples_s=speed_n, efficiency=speed_n / (n * speed_1), grad_mb=grad_bytes / 1e6, tensors=tensors,
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wide-samples-s", type=float, default=367005.0,
                   help="one GPU, wide spec, fp32 (issue 14, H100)")
    p.add_argument("--deepnet-step-ms", type=float, default=256 / 72000 * 1e3,
                   help="one GPU, DeepNet, one step of batch 256 (issue 14, H100: ~72k samples/s)")
    p.add_argument("--nvlink-gbs", type=float, default=350.0, help="all-reduce bus bandwidth over NVLink, GB/s")
    p.add_argument("--net-gbs", type=float, default=11.0, help="all-reduce bandwidth between machines, GB/s")
    p.add_argument("--json", help="write the rows here too")
    a = p.parse_args()
    step_1 = {"wide": 4096 / a.wide_samples_s, "deepnet": a.deepnet_step_ms / 1e3}
    cases = [
        ("8 GPUs, NVLink", [1, 2, 4, 8], a.nvlink_gbs, LINKS["nvlink"]["latency_us"]),
        ("2 machines, 100 Gb/s", [1, 2], a.net_gbs, LINKS["net"]["latency_us"]),
    ]
    rows = []
    for name, spec in SPECS.items():
        grad, tensors = params(spec["layers"], spec["batchnorm"])
        print(f"\n{name}: {grad:,} parameters in {tensors} tensors ({4 * grad / 1e6:.1f} MB of fp32 gradients), "
              f"{spec['bound']}-bound step of {step_1[name] * 1e3:.2f} ms at batch {spec['batch']} on one GPU")
        print(f"  {'link':<22}{'N':>3} {'mode':<7}{'rows/dev':>9}{'compute ms':>11}"
              f"{'all-reduce ms':>15}{'efficiency':>12}")
        print(f"  {'':<22}{'':>3} {'':<7}{'':>9}{'':>11}{'per tensor/bucket':>18}{'per tensor/bucket':>18}")
        for link, ns, gbs, lat in cases:
            for mode in ("strong", "weak"):
                for n in ns:
                    a_, b_ = (model(spec, step_1[name], n, gbs, lat, mode, bucket) for bucket in (False, True))
                    for r in (a_, b_):
                        r.update(spec=name, link=link)
                        rows.append(r)
                    print(f"  {link:<22}{n:>3} {mode:<7}{a_['rows_per_device']:>9}{a_['compute_ms']:>11.2f}"
                          f"{a_['allreduce_ms']:>10.2f} / {b_['allreduce_ms']:<5.2f}"
                          f"{a_['efficiency']:>11.2f} / {b_['efficiency']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
