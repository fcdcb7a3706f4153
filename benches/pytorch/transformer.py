#!/usr/bin/env python3
"""PyTorch eager reference for examples/transformer/transformer.kyn,
measured the way `kynml bench` measures it, so that the two can be compared
on one machine.

    python3 benches/pytorch/transformer.py [--steps 20] [--rounds 3] [--batch 64] [--threads N] [--json FILE]
    kynml bench examples/transformer/transformer.kyn --device cpu --synthetic 8192 --steps 20

Model: Embedding(1002, 128, padding_idx=0), learned positions (64 x 128),
2 x TransformerEncoderLayer(128, 4, 512, dropout=0.0, activation="gelu",
batch_first=True, norm_first=True) with the padding mask, LayerNorm(128),
the mean over the tokens, Linear(128, 2); cross-entropy; Adam(lr=1e-3);
fp32; PyTorch's default init. Data: 8192 seeded texts of 32 to 64 token
ids (0 pads the rest) and 2 random classes, in memory as tensors.

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
    print(f"transformer.py needs torch: {err}; `pip install torch`", file=sys.stderr)
    sys.exit(2)

L, D, HEADS, FF, VOCAB = 64, 128, 4, 512, 1002


class TextEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D, padding_idx=0)
        self.positions = nn.Parameter(torch.randn(L, D))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(2))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, 2)

    def forward(self, ids):
        mask = (ids != 0).float()
        x = self.embedding(ids) * mask[:, :, None] + self.positions
        for block in self.blocks:
            x = block(x, src_key_padding_mask=mask == 0)
        x = self.norm(x)
        x = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return self.head(x)


def main():
    args = rounds.arguments(__doc__.split("\n\n")[0], steps=20)
    torch.set_num_threads(args.threads)
    torch.manual_seed(7)
    lengths = torch.randint(L // 2, L + 1, (args.rows,))
    ids = torch.randint(2, VOCAB, (args.rows, L))
    ids[torch.arange(L)[None, :] >= lengths[:, None]] = 0
    y = torch.randint(0, 2, (args.rows,))
    rounds.measure(torch, args, rounds.adam_step(torch, TextEncoder(), ids, y, args))


if __name__ == "__main__":
    main()
