#!/usr/bin/env python3
"""KynML against PyTorch on one GPU: `kynml bench` and benches/pytorch/gpu.py
on the same config, precision by precision, one process each, then a table.
Each row is printed (on stderr) and saved to --json as it ends, KynML and
PyTorch in turn at each precision, so that a run cut short keeps pairs.

    python3 benches/compare_gpu.py                              # wide and deepnet, every precision
    python3 benches/compare_gpu.py --config all                 # and the CNN and the transformer
    python3 benches/compare_gpu.py --config wide --precisions bf16 fp16 --json /tmp/gpu.json
    python3 benches/compare_gpu.py --kynml ./kynml --no-pytorch  # KynML alone (a machine with only the binary)

KynML rows: `kynml bench examples/CONFIG/CONFIG.kyn --device cuda --precision P
--synthetic ROWS --steps S --rounds R --json ...`, and for bf16 also with
`--fused` (the optimizer's fused=true, beside PyTorch's fused AdamW row). PyTorch rows: gpu.py with
the same config, precision, steps and rounds, eager, and at bf16 also with fused
AdamW and bf16 with torch.compile. For `cnn28` and `transformer` (batch 64,
Adam) the PyTorch rows are benches/pytorch/cnn.py and transformer.py, eager,
with `--device` and `--precision`. Both engines time their rounds the same way
(see gpu.py and `kynml bench --help`); "start-up" is from the process's start
to the end of its warm-up round. The kernel cache (`--cache`) is KynML's: run
the script twice to see a warm start.

Exit status 0 when every KynML run worked (PyTorch failures are reported as
rows), 1 otherwise, 2 when the binary is missing. Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# `kynml bench` holds a fifth of the rows back for validation: wide's 256,001
# rows leave 50 full steps of 4096 a round (81,920 left 16, rounds of 0.1 s).
ROWS = {"wide": 256001, "deepnet": 256 * 200, "cnn28": 8192, "transformer": 8192}
# The configs whose PyTorch reference is a script of their own (batch 64, Adam).
SCRIPTS = {"cnn28": "cnn.py", "transformer": "transformer.py"}


def default_kynml():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    return os.path.join(target, "release", "kynml")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kynml", default=default_kynml(), help="the kynml binary (default: %(default)s)")
    p.add_argument("--python", default=sys.executable, help="the Python with torch (default: this one)")
    p.add_argument("--config", default="both",
                   help="wide, deepnet, cnn28 or transformer, or several in order with commas (deepnet,wide); "
                        "both: wide and deepnet; all: the four")
    p.add_argument("--precisions", nargs="+", default=["fp32", "tf32", "bf16", "fp16"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--cache", help="KynML's kernel cache folder (default: its own default)")
    p.add_argument("--no-pytorch", action="store_true")
    p.add_argument("--json", metavar="PATH", help="write every row here as JSON")
    return p.parse_args()


def run_json(cmd, env=None):
    """Runs cmd (which writes JSON to the path that is its last argument); the parsed JSON or an error row."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        print("$ " + " ".join(cmd + [out]), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd + [out], env=env)
        try:
            with open(out) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        if proc.returncode != 0 and "error" not in data:
            data["error"] = f"exit status {proc.returncode}"
        return data
    finally:
        os.unlink(out)


def table(rows):
    """The rows as the table this script prints."""
    lines = [f"{'config':<11} {'engine':<16} {'asked':<6} {'ran':<6} {'samples/s':>12} {'ms/step':>9} "
             f"{'start-up s':>10} {'device MiB':>10}"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['config']:<11} {r['engine'].strip():<16} {r['asked']:<6} failed: {r['error']}")
            continue
        mem = (r.get("peak_device_memory") or {}).get("in_use") if r["engine"].startswith("kynml") \
            else r.get("peak_device_allocated_bytes")
        startup = r.get("process_startup_secs") or r.get("startup_secs") or float("nan")
        lines.append(f"{r['config']:<11} {r['engine'].strip():<16} {r['asked']:<6} {r.get('precision', '?'):<6} "
                     f"{r['samples_per_sec']:>12.0f} {r['step_ms']:>9.3f} {startup:>10.1f} "
                     f"{(mem or 0) / 2**20:>10.0f}")
    return "\n".join(lines)


def main():
    args = parse_args()
    if not os.path.isfile(args.kynml):
        print(f"compare_gpu.py: no kynml binary at {args.kynml} (cargo build --release -p kynml-cli, or --kynml)",
              file=sys.stderr)
        return 2
    named = {"both": ["wide", "deepnet"], "all": ["wide", "deepnet", "cnn28", "transformer"]}
    configs = [c for part in args.config.split(",") for c in named.get(part, [part])]
    unknown = [c for c in configs if c not in ROWS]
    if unknown:
        print(f"compare_gpu.py: unknown config {', '.join(unknown)} (wide, deepnet, cnn28, transformer, both, all)",
              file=sys.stderr)
        return 2
    rows, kynml_failed = [], False

    def add(row):
        # Each row is kept (and the JSON rewritten) as it comes, so that a run
        # stopped at a time limit keeps the rows it finished, in pairs: KynML
        # and PyTorch at each precision before the next precision.
        rows.append(row)
        print(table([row]).splitlines()[1], file=sys.stderr, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=2)
                f.write("\n")

    for config in configs:
        spec = os.path.join(REPO, "examples", config, f"{config}.kyn")
        for precision in args.precisions:
            cmd = [args.kynml, "bench", spec, "--device", args.device, "--precision", precision,
                   "--synthetic", str(ROWS[config]), "--steps", str(args.steps), "--rounds", str(args.rounds)]
            if args.cache:
                cmd += ["--cache", args.cache]
            r = run_json(cmd + ["--json"])
            kynml_failed |= "error" in r
            add({**r, "config": config, "engine": "kynml " + r.get("engine", ""), "asked": precision})
            if args.no_pytorch:
                pytorch = []
            elif config in SCRIPTS:
                pytorch = [("pytorch", [args.python, os.path.join(HERE, "pytorch", SCRIPTS[config]),
                                        "--device", args.device, "--precision", precision, "--steps", str(args.steps),
                                        "--rounds", str(args.rounds), "--rows", str(ROWS[config])])]
            else:
                gpu = [args.python, os.path.join(HERE, "pytorch", "gpu.py"), "--config", config,
                       "--precision", precision, "--steps", str(args.steps), "--rounds", str(args.rounds),
                       "--rows", str(ROWS[config]), "--device", args.device]
                pytorch = [("pytorch", gpu)]
                if precision == "bf16":
                    pytorch += [("pytorch fused", gpu + ["--fused"]), ("pytorch compile", gpu + ["--compile"])]
            for engine, pcmd in pytorch:
                add({**run_json(pcmd + ["--json"]), "config": config, "engine": engine, "asked": precision})
            if precision == "bf16":
                # Beside PyTorch's fused AdamW row: KynML's fused update.
                r = run_json(cmd + ["--fused", "--json"])
                kynml_failed |= "error" in r
                add({**r, "config": config, "engine": "kynml fused", "asked": precision})

    print("\n" + table(rows))
    return 1 if kynml_failed else 0


if __name__ == "__main__":
    sys.exit(main())
