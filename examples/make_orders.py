"""Write a CSV of random orders: order_id, customer, item, amount (reproducible with --seed).

    python examples/make_orders.py orders.csv [--rows 5000] [--customers 40] [--seed 7]
"""
from __future__ import annotations

import argparse
import csv
import random

ITEMS = ("book", "lamp", "chair", "kettle", "plant", "mug", "desk", "rug")


def write_orders(path: str, rows: int, customers: int, seed: int) -> None:
    """Write `rows` orders by `customers` customers to a CSV file with a header line."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["order_id", "customer", "item", "amount"])
        for n in range(rows):
            writer.writerow([f"o-{n:07d}", f"customer-{rng.randrange(customers):03d}", rng.choice(ITEMS),
                             f"{rng.uniform(1, 200):.2f}"])


def main() -> None:
    """Parse the flags and write the file."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path")
    p.add_argument("--rows", type=int, default=5000)
    p.add_argument("--customers", type=int, default=40)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    write_orders(args.path, args.rows, args.customers, args.seed)


if __name__ == "__main__":
    main()
