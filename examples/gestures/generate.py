#!/usr/bin/env python3
"""Writes gestures.csv: seeded pen traces, one per row: the trace's `x` and
`y` coordinates (numbers separated by spaces, one per sampled point, 24 to
64 points) and the gesture drawn: `circle`, `line`, `zigzag` or `spiral`.

    python3 examples/gestures/generate.py [--rows 800] [--seed 7] [--out examples/gestures/gestures.csv]

Each trace starts near the middle, in any direction, at any size, drawn at any
speed, with jitter on every point. What tells the gestures apart is how the
points follow each other: a circle turns steadily and comes back, a line
does not turn, a zigzag turns back and forth, a spiral turns while its
radius grows. The same seed gives the same file on every machine (Python's
own Mersenne Twister, no numpy)."""

import argparse
import math
import os
import random

GESTURES = ["circle", "line", "zigzag", "spiral"]


def trace(rng, gesture):
    n = rng.randint(24, 64)
    size = rng.uniform(0.5, 2.0)
    angle = rng.uniform(0, 2 * math.pi)
    cx, cy = rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5)
    points = []
    for i in range(n):
        s = i / (n - 1)
        if gesture == "circle":
            a = angle + 2 * math.pi * s
            u, v = math.cos(a), math.sin(a)
        elif gesture == "spiral":
            a = angle + 4 * math.pi * s
            u, v = (0.2 + 0.8 * s) * math.cos(a), (0.2 + 0.8 * s) * math.sin(a)
        else:
            along = 2 * s - 1
            across = 0.0
            if gesture == "zigzag":
                teeth = 3
                phase = (s * teeth * 2) % 2
                across = 0.6 * (phase if phase < 1 else 2 - phase) - 0.3
            u = along * math.cos(angle) - across * math.sin(angle)
            v = along * math.sin(angle) + across * math.cos(angle)
        points.append((cx + size * u + rng.gauss(0, 0.03), cy + size * v + rng.gauss(0, 0.03)))
    return points


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=800)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "gestures.csv"))
    a = p.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w") as f:
        f.write("x,y,gesture\n")
        for _ in range(a.rows):
            gesture = rng.choice(GESTURES)
            points = trace(rng, gesture)
            xs = " ".join(f"{x:.2f}" for x, _ in points)
            ys = " ".join(f"{y:.2f}" for _, y in points)
            f.write(f"{xs},{ys},{gesture}\n")


if __name__ == "__main__":
    main()
