#!/usr/bin/env python3
"""Train the users' DeepNet spec with KynML and with PyTorch on this machine's
CPU, one after the other, and print their throughput side by side.

    python3 benches/compare_pytorch.py                     # 3 timed epochs, all cores
    python3 benches/compare_pytorch.py --epochs 5 --threads 2 --json /tmp/compare.json
    python3 benches/compare_pytorch.py --kynml ~/.cache/kynml/target/release/kynml

Needs the data (`python3 scripts/gen_large_train.py`) and a release build of
the CLI (`cargo build --release -p kynml-cli`; by default the binary is looked
for at $CARGO_TARGET_DIR/release/kynml, else target/release/kynml). PyTorch is
optional: without it KynML's row is printed alone, with a note, and the exit
status is 0.

Runs, each in its own process so that each one's peak RSS is its own (taken
from os.wait4 on the child's pid):
  kynml             `kynml train deepnet.kyn --device cpu --epochs N+1 --fresh`
                    on a copy of the spec in a temporary folder (its `data`
                    links to examples/deepnet/data), so that the checkpoints the
                    spec asks for land there and the repository stays clean.
                    RAYON_NUM_THREADS = --threads. Figures from the run's
                    metrics.jsonl.
  pytorch MODE/PIPE benches/pytorch/deepnet.py --mode MODE --pipeline PIPE, for
                    eager/tensor, eager/dataloader, compile/tensor and
                    compile/dataloader; each compile run starts with an empty
                    inductor cache, so its warm-up shows the whole compilation.
Both engines train epoch 1 as a warm-up, left out of the figures, then N timed
epochs. "train" samples/s counts the training steps (with shuffling and
batching); "epoch" samples/s adds the validation pass; both are training rows
over the timed epochs' seconds. A PyTorch run that fails (say torch.compile
without a C++ compiler) is reported as failed, with the reason, and the rest go
on.

Exit status: 0 when KynML ran (whatever PyTorch did), 1 when KynML failed, 2
when the binary or the data is missing. Standard library only; the PyTorch runs
need torch and numpy in --python's environment.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep benches/ free of __pycache__

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(REPO, "examples", "deepnet", "deepnet.kyn")
DATA_DIR = os.path.join(REPO, "examples", "deepnet", "data")
CSV = os.path.join(DATA_DIR, "large_train.csv")
PYTORCH_SCRIPT = os.path.join(REPO, "benches", "pytorch", "deepnet.py")
BUSY_SHARE = 0.10  # warn when others used more than this share of the CPU during a run
PYTORCH_RUNS = [("eager", "tensor"), ("eager", "dataloader"), ("compile", "tensor"), ("compile", "dataloader")]


def default_kynml():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    return os.path.join(target, "release", "kynml")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3, help="timed epochs, after one warm-up epoch (default: 3)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="threads for each engine (default: os.cpu_count(), %(default)s here)")
    p.add_argument("--kynml", metavar="PATH", default=default_kynml(), help="the kynml binary (default: %(default)s)")
    p.add_argument("--python", metavar="PATH", default=sys.executable,
                   help="the Python that runs PyTorch (default: this one, %(default)s)")
    p.add_argument("--json", metavar="PATH", help="write every run's results here as JSON")
    args = p.parse_args()
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    if args.threads < 1:
        p.error("--threads must be at least 1")
    return args


# ---- running a child --------------------------------------------------------

def cpu_seconds_used():
    """CPU seconds spent so far by the whole machine (all processes, plus time the
    hypervisor gave to other guests), from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_child(cmd, cwd, env, log_path):
    """Runs cmd with its output in log_path. Returns (exit code, wall seconds,
    peak RSS KiB, share of the machine's CPU that others used meanwhile, or None).

    os.wait4 gives this child's own rusage; getrusage(RUSAGE_CHILDREN) would
    fold every child of this script into one maximum. The machine is shared, so
    the CPU time that was not the child's is measured too: on 2 cores a build
    running alongside halves a figure."""
    with open(log_path, "wb") as log:
        cpu_before, start = cpu_seconds_used(), time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall, cpu_after = time.perf_counter() - start, cpu_seconds_used()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    others = None
    if cpu_before is not None and cpu_after is not None and wall > 0:
        own = usage.ru_utime + usage.ru_stime
        others = max(0.0, (cpu_after - cpu_before - own) / (wall * os.cpu_count()))
    return proc.returncode, wall, usage.ru_maxrss, others


def log_tail(path, lines=8):
    with open(path, errors="replace") as f:
        return [line.rstrip() for line in f.readlines()[-lines:]]


def failure_reason(log_path, code):
    """The last error-looking line of a failed run's output."""
    lines = [line for line in log_tail(log_path, 40) if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "failed" in line:
            return line.strip()[:300]
    return (lines[-1].strip()[:300] if lines else "no output") + f" (exit status {code})"


# ---- KynML ------------------------------------------------------------------

def run_kynml(args, work):
    """Trains a copy of the spec; returns a result dict (with "error" on failure)."""
    spec_dir = os.path.join(work, "kynml-spec")
    os.makedirs(spec_dir)
    shutil.copy(SPEC, spec_dir)
    os.symlink(DATA_DIR, os.path.join(spec_dir, "data"))
    out = os.path.join(work, "kynml-run")
    log = os.path.join(work, "kynml.log")
    cmd = [args.kynml, "train", os.path.basename(SPEC), "--device", "cpu",
           "--epochs", str(args.epochs + 1), "--out", out, "--fresh"]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    result = {"name": "kynml", "engine": "kynml", "command": " ".join(cmd), "log": log}
    try:
        code, wall, rss, others = run_child(cmd, spec_dir, env, log)
    except OSError as err:  # e.g. "Text file busy" while cargo is linking it
        return dict(result, error=f"could not start {args.kynml}: {err.strerror}; if it is being rebuilt, retry")
    result.update(wall_seconds=wall, peak_rss_kib=rss, others_cpu_share=others)
    if code != 0:
        return dict(result, error=failure_reason(log, code))

    with open(os.path.join(out, "metrics.jsonl")) as f:
        epochs = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(out, "data.json")) as f:
        train_rows = json.load(f)["train_rows"]
    timed = epochs[1:]
    if not timed:
        return dict(result, error=f"only {len(epochs)} epoch(s) in metrics.jsonl, no timed epoch")
    # samples_per_sec covers the training steps; seconds, the whole epoch with validation.
    train_s = sum(train_rows / e["samples_per_sec"] for e in timed)
    epoch_s = sum(e["seconds"] for e in timed)
    return dict(
        result,
        train_rows=train_rows, timed_epochs=len(timed),
        train_samples_per_sec=train_rows * len(timed) / train_s,
        epoch_samples_per_sec=train_rows * len(timed) / epoch_s,
        warmup_seconds=epochs[0]["seconds"],
        final_train_loss=timed[-1]["train_loss"], final_val_loss=timed[-1]["val_loss"],
        epochs=epochs,
    )


def kynml_version(path):
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


# ---- PyTorch ----------------------------------------------------------------

def torch_version(python):
    """torch's version in that Python, or None with the import error's text."""
    probe = "import numpy, torch; print(torch.__version__)"
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300)
    except OSError as err:
        return None, f"{python}: {err.strerror}"
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"exit status {out.returncode}"
    return out.stdout.strip(), None


def run_pytorch(args, work, mode, pipeline):
    name = f"pytorch {mode}/{pipeline}"
    tag = f"pytorch-{mode}-{pipeline}"
    log, out = os.path.join(work, tag + ".log"), os.path.join(work, tag + ".json")
    cmd = [args.python, PYTORCH_SCRIPT, "--data", CSV, "--epochs", str(args.epochs),
           "--threads", str(args.threads), "--mode", mode, "--pipeline", pipeline, "--json", out]
    # A fresh inductor cache: the warm-up then shows a first compilation, as a user meets it.
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(work, tag + "-inductor-cache"))
    result = {"name": name, "engine": "pytorch", "mode": mode, "pipeline": pipeline,
              "command": " ".join(cmd), "log": log}
    code, wall, rss, others = run_child(cmd, REPO, env, log)
    result.update(wall_seconds=wall, peak_rss_kib=rss, others_cpu_share=others)
    reported = None
    if os.path.exists(out):
        with open(out) as f:
            reported = json.load(f)
    if code != 0 or reported is None or "error" in reported:
        reason = (reported or {}).get("error") or failure_reason(log, code)
        return dict(result, error=reason)
    # The table's RSS is wait4's for every engine; the script's own figure is kept too.
    reported["self_peak_rss_kib"] = reported.pop("peak_rss_kib")
    return dict(result, **{k: v for k, v in reported.items() if k not in ("engine", "mode", "pipeline")})


# ---- report -----------------------------------------------------------------

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def percent(share):
    return "?" if share is None else f"{100 * share:.0f}%"


def print_table(runs):
    head = f"{'run':<28} {'train samples/s':>15} {'epoch samples/s':>15} {'warm-up s':>9} " \
           f"{'peak RSS MiB':>12} {'val loss':>8} {'wall s':>7} {'others':>6}"
    print(head)
    print("-" * len(head))
    for r in runs:
        if "error" in r:
            print(f"{r['name']:<28} failed: {r['error']}")
            continue
        print(f"{r['name']:<28} {r['train_samples_per_sec']:>15,.0f} {r['epoch_samples_per_sec']:>15,.0f} "
              f"{r['warmup_seconds']:>9.2f} {r['peak_rss_kib'] / 1024:>12,.0f} {r['final_val_loss']:>8.4f} "
              f"{r['wall_seconds']:>7.1f} {percent(r.get('others_cpu_share')):>6}")


def ratios(kynml, pytorch_runs):
    rows = []
    for r in pytorch_runs:
        if "error" in r:
            continue
        rows.append({"vs": r["name"],
                     "train": kynml["train_samples_per_sec"] / r["train_samples_per_sec"],
                     "epoch": kynml["epoch_samples_per_sec"] / r["epoch_samples_per_sec"]})
    return rows


def main():
    args = parse_args()
    if not os.path.exists(CSV):
        print(f"no data at {CSV}; generate it with `python3 scripts/gen_large_train.py`", file=sys.stderr)
        return 2
    if not (os.path.isfile(args.kynml) and os.access(args.kynml, os.X_OK)):
        print(f"no kynml binary at {args.kynml}; build it with `cargo build --release -p kynml-cli` "
              "(or pass --kynml PATH)", file=sys.stderr)
        return 2

    torch_ver, torch_missing = torch_version(args.python)
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads,
               "load_average_before": os.getloadavg()[0], "kynml": kynml_version(args.kynml),
               "kynml_binary": args.kynml, "python": args.python, "torch": torch_ver}
    print(f"DeepNet on {machine['cpu']}, {machine['cores']} cores, {args.threads} threads per engine; "
          f"1 warm-up + {args.epochs} timed epochs each")
    print(f"{machine['kynml'] or 'kynml'} ({args.kynml}); "
          f"torch {torch_ver or 'missing'} ({args.python}); "
          f"load average {machine['load_average_before']:.2f} before start")
    print()

    work = tempfile.mkdtemp(prefix="kynml-compare-")
    runs = []
    print(f"kynml: training {args.epochs + 1} epochs ...", flush=True)
    kynml = run_kynml(args, work)
    runs.append(kynml)
    pytorch_runs = []
    if torch_ver:
        for mode, pipeline in PYTORCH_RUNS:
            print(f"pytorch {mode}/{pipeline}: training {args.epochs + 1} epochs ...", flush=True)
            pytorch_runs.append(run_pytorch(args, work, mode, pipeline))
        runs += pytorch_runs
    machine["load_average_after"] = os.getloadavg()[0]

    print()
    print_table(runs)
    if torch_missing:
        print()
        print(f"PyTorch is not installed for {args.python} ({torch_missing}); `pip install torch` to compare")
    rows = ratios(kynml, pytorch_runs) if "error" not in kynml else []
    if rows:
        print()
        print(f"{'KynML / PyTorch':<28} {'train':>7} {'epoch':>7}")
        for r in rows:
            print(f"{r['vs']:<28} {r['train']:>6.2f}x {r['epoch']:>6.2f}x")
    print()
    print("samples/s: training rows over the timed epochs' seconds; train = steps with shuffling and "
          "batching, epoch = train + validation. RSS: each process's peak, from wait4. others: the share "
          "of the machine's CPU that other processes (or other VMs) used during the run.")
    busy = [r["name"] for r in runs if (r.get("others_cpu_share") or 0) > BUSY_SHARE]
    if busy:
        print(f"warning: the machine was busy during {', '.join(busy)}; rerun when it is idle "
              "for figures that compare")

    for r in runs:
        if "error" not in r:
            del r["log"]  # removed with the temporary folder below
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"epochs": args.epochs, "machine": machine, "runs": runs, "ratios": rows}, f, indent=2)
            f.write("\n")
        print(f"results: {args.json}")

    failed = [r for r in runs if "error" in r]
    if failed:
        print(f"logs of the failed runs: {', '.join(r['log'] for r in failed)}")
    else:
        shutil.rmtree(work, ignore_errors=True)  # the logs went with it
    return 1 if "error" in kynml else 0


if __name__ == "__main__":
    sys.exit(main())
