#!/usr/bin/env python3
"""Prints the scalars in a folder of TensorBoard event files as JSON.

Usage: read_tensorboard.py <event-file folder>

Output: {"<tag>": [[step, value], ...], ...}, tags sorted, points in the order
TensorBoard itself loads them. It reads the files with TensorBoard's own
EventAccumulator, so it checks KynML's hand-written event writer
(kynml-core/src/report/tensorboard.rs) against the real reader rather
than against our own understanding of the format. Values are the f32 that was
written, widened exactly to a Python float; non-finite values print as
NaN/Infinity (Python's json default).

Needs the `tensorboard` package (scripts/setup-python-test-deps.sh).
"""

import json
import os
import sys


def read_scalars(folder):
    # Imported here so that `--help`-style misuse still gets a usage message
    # even when tensorboard is not installed.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # size_guidance 0 = keep every point; the default reservoir-samples
    # scalars down to 10,000 per tag, which would make comparisons lossy.
    accumulator = EventAccumulator(folder, size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [[event.step, event.value] for event in accumulator.Scalars(tag)]
        for tag in sorted(accumulator.Tags()["scalars"])
    }


def main(argv):
    if len(argv) != 2:
        print(f"usage: {os.path.basename(argv[0])} <event-file folder>", file=sys.stderr)
        return 2
    folder = argv[1]
    if not os.path.isdir(folder):
        print(f"read_tensorboard: not a folder: {folder}", file=sys.stderr)
        return 2
    print(json.dumps(read_scalars(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
