#!/usr/bin/env python3
"""PyTorch eager reference for examples/cnn28/cnn28.kyn, measured the way
`kynml bench` measures it, so that the two can be compared on one machine.

    python3 benches/pytorch/cnn.py [--steps 50] [--rounds 3] [--batch 64] [--threads N] [--json FILE]
    kynml bench examples/cnn28/cnn28.kyn --device cpu --synthetic 8192

Model: Conv2d(1,16,3,padding=1) ReLU MaxPool2d(2) Conv2d(16,32,3,padding=1)
ReLU MaxPool2d(2) Flatten Linear(1568,128) ReLU Linear(128,10); cross-entropy;
Adam(lr=1e-3); fp32; PyTorch's default init. Data: 8192 seeded rows of
standard-normal 1x28x28 inputs and 10 random classes, in memory as tensors.

Timing, as `kynml bench`: see rounds.py.

Needs torch; says so and exits 2 without it.
"""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rounds  # noqa: E402

try:
    import torch
    from torch import nn
except ImportError as err:
    print(f"cnn.py needs torch: {err}; `pip install torch`", file=sys.stderr)
    sys.exit(2)


def model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10),
    )


def main():
    args = rounds.arguments(__doc__.split("\n\n")[0], steps=50)
    torch.set_num_threads(args.threads)
    torch.manual_seed(7)
    x = torch.randn(args.rows, 1, 28, 28)
    y = torch.randint(0, 10, (args.rows,))
    rounds.measure(torch, args, rounds.adam_step(torch, model(), x, y, args))


if __name__ == "__main__":
    main()
