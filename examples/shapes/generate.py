#!/usr/bin/env python3
"""Writes shapes.csv: seeded 8x8 grey images of a short bar (horizontal
or vertical) or a diagonal line on a noisy background, one row per image:
64 pixel columns p0..p63 (row by row, values 0-9), then the class.

    python3 examples/shapes/generate.py [--rows 900] [--seed 11] [--out examples/shapes/shapes.csv]

The same seed gives the same file on every machine (Python's own
Mersenne Twister, no numpy)."""

import argparse
import os
import random

SIZE = 8
CLASSES = ["horizontal", "vertical", "diagonal"]


def image(rng, kind):
    px = [[rng.randint(0, 4) for _ in range(SIZE)] for _ in range(SIZE)]
    length = rng.randint(3, 5)
    start = rng.randint(0, SIZE - length)
    line = rng.randint(0, SIZE - 1)
    offset = rng.randint(-2, 2)
    for i in range(start, start + length):
        if kind == "horizontal":
            px[line][i] = rng.randint(5, 9)
        elif kind == "vertical":
            px[i][line] = rng.randint(5, 9)
        else:
            px[i][min(max(i + offset, 0), SIZE - 1)] = rng.randint(5, 9)
    return [v for row in px for v in row]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=900)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", default=os.path.join(here, "shapes.csv"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with open(args.out, "w") as f:
        f.write(",".join([f"p{i}" for i in range(SIZE * SIZE)] + ["shape"]) + "\n")
        for n in range(args.rows):
            kind = CLASSES[n % len(CLASSES)]
            f.write(",".join(str(v) for v in image(rng, kind)) + f",{kind}\n")


if __name__ == "__main__":
    main()
