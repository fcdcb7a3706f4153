#!/usr/bin/env python3
"""Writes reviews.csv: seeded short film reviews, one per row: the text
(lower-case words separated by spaces) and its sentiment, `positive` or
`negative`.

    python3 examples/reviews/generate.py [--rows 4000] [--seed 3] [--out examples/reviews/reviews.csv]

A review mixes neutral words with a few words of opinion; its sentiment is
the balance of the opinions, where "not" before an opinion word turns it
around ("not good" counts against). Bag-of-words models get most reviews
right, and attention, which sees the order, gets the negations too. The
same seed gives the same file on every machine (Python's own Mersenne
Twister, no numpy)."""

import argparse
import os
import random

POSITIVE = ["good", "great", "moving", "funny", "clever", "superb", "charming", "gripping", "lovely", "brilliant"]
NEGATIVE = ["bad", "dull", "boring", "weak", "clumsy", "awful", "tedious", "flat", "silly", "messy"]
NEUTRAL = ["the", "film", "plot", "actors", "story", "was", "and", "a", "very", "with", "music", "ending",
           "scenes", "director", "it", "this", "of", "cast", "script", "camera", "long", "new", "old", "part"]


def review(rng):
    words, score = [], 0
    for _ in range(rng.randint(1, 3)):
        words += rng.choices(NEUTRAL, k=rng.randint(1, 5))
        positive = rng.random() < 0.5
        word = rng.choice(POSITIVE if positive else NEGATIVE)
        sign = 1 if positive else -1
        if rng.random() < 0.25:
            words.append("not")
            sign = -sign
        words.append(word)
        score += sign
    words += rng.choices(NEUTRAL, k=rng.randint(0, 4))
    if score == 0:
        # Break ties with one more opinion.
        word = rng.choice(POSITIVE + NEGATIVE)
        words.append(word)
        score = 1 if word in POSITIVE else -1
    return " ".join(words), "positive" if score > 0 else "negative"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4000)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--out", default=os.path.join(here, "reviews.csv"))
    a = p.parse_args()
    rng = random.Random(a.seed)
    lines = ["text,sentiment"] + [",".join(review(rng)) for _ in range(a.rows)]
    with open(a.out, "w", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
