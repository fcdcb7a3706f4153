#!/usr/bin/env python3
"""Writes rentals.csv: seeded daily bike rentals at stations in eight
cities, one row per station-day: the city, the weekday and the weather
(categories, as text), the temperature and humidity (numbers), then the
number of bikes rented.

    python3 examples/rentals/generate.py [--rows 1500] [--seed 5] [--out examples/rentals/rentals.csv]

Each city has its own level of demand and its own sensitivity to
temperature, weekends lift leisure cities and lower commuter ones, and
rain lowers demand everywhere: the target depends on the categories in
ways a single number per category cannot express, so an `embedding` of
them pays. The same seed gives the same file on every machine (Python's
own Mersenne Twister, no numpy)."""

import argparse
import math
import os
import random

# city: (base demand, per-degree effect, weekend effect)
CITIES = {
    "Amsterdam": (420, 6.0, -60),
    "Barcelona": (300, 2.0, 90),
    "Copenhagen": (380, 7.5, -40),
    "Lisbon": (180, 1.0, 120),
    "Munich": (260, 9.0, 30),
    "Oslo": (150, 11.0, 10),
    "Paris": (340, 4.0, 60),
    "Vienna": (230, 5.0, -20),
}
WEEKDAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
WEATHER = {"sunny": 1.0, "cloudy": 0.85, "rain": 0.55, "snow": 0.35}


def row(rng):
    city = rng.choice(sorted(CITIES))
    day = rng.choice(WEEKDAYS)
    weather = rng.choices(sorted(WEATHER), weights=[3, 2, 4, 1])[0]
    temperature = round(rng.gauss(14, 8) - (8 if weather == "snow" else 0), 1)
    humidity = round(min(100, max(20, rng.gauss(65, 15) + (15 if weather == "rain" else 0))), 0)
    base, per_degree, weekend = CITIES[city]
    demand = base + per_degree * (temperature - 14) + (weekend if day in ("Sat", "Sun") else 0)
    demand *= WEATHER[weather] * (1 - 0.004 * (humidity - 65))
    rented = max(0, round(demand + rng.gauss(0, 20)))
    return [city, day, weather, f"{temperature}", f"{humidity:.0f}", f"{rented}"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1500)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--out", default=os.path.join(here, "rentals.csv"))
    a = p.parse_args()
    rng = random.Random(a.seed)
    lines = ["city,weekday,weather,temperature,humidity,rented"]
    lines += [",".join(row(rng)) for _ in range(a.rows)]
    with open(a.out, "w", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
