#!/usr/bin/env python3
"""The 40 households of the buffer-depth sweep (issue 41, step 3; docs/population.md "Buffer
depth as a factor: the sweep"), chosen from the population draw by a seeded rule.

The draw is config/population.yaml's: 240 households, seed 1, sorted into its four price
buckets (latency_divide.links.population). The rule:

1. each bucket gets a share of the 40 proportional to its households in the draw, rounded by
   largest remainder (ties: the bucket listed first); for the draw of seed 1 (22, 84, 23, 111
   households) that is 4, 14, 4, 18;
2. one ``random.Random(41)`` (41: the issue), and for each bucket in the config's order
   ``rng.sample(sorted(bucket's ids), its share)``;
3. each bucket's chosen ids in ascending order.

Prints the ``households.buckets`` block of config/buffer-depth-*.yaml (the ids listed there
must be these; tests/test_buffer_depth.py compares), or with ``--json`` a JSON object bucket ->
ids.

    .venv/bin/python bench/buffer_depth_households.py [--config config/population.yaml]
        [--n 40] [--seed 41] [--json]

Seconds; reads the vendored data only (it measures nothing).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.config import load_config  # noqa: E402
from latency_divide.links.subset import proportional_allocation  # noqa: E402

N = 40
SEED = 41


def allocate(sizes: dict[str, int], n: int) -> dict[str, int]:
    """n split over the buckets in proportion to ``sizes``, by largest remainder (ties: the
    bucket listed first): links.subset's rule, which config/live-policed.yaml's subset uses."""
    try:
        return proportional_allocation(sizes, n)
    except ValueError:
        raise SystemExit(f"--n {n}: allowed is 1 to {sum(sizes.values())}, the households of "
                         "the draw") from None


def choose(by_bucket: dict[str, list[int]], n: int = N, seed: int = SEED) -> dict[str, list[int]]:
    """The rule of the module docstring: bucket name -> chosen ids (ascending)."""
    share = allocate({b: len(ids) for b, ids in by_bucket.items()}, n)
    rng = random.Random(seed)
    return {b: sorted(rng.sample(sorted(ids), share[b])) for b, ids in by_bucket.items()}


def buckets_block(cfg, chosen: dict[str, list[int]]) -> str:
    """The ``households.buckets`` YAML of the configs (config/config.yaml's form)."""
    lines = ["  buckets:"]
    for b in cfg.buckets:
        hi = "null" if b.max_usd is None else f"{b.max_usd:g}"
        lines += [f'    - name: "{b.name}"', f"      min: {b.min_usd:g}", f"      max: {hi}",
                  f"      ids: [{', '.join(str(h) for h in chosen[b.name])}]"]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "config" / "population.yaml"),
                    help="the config whose population draw is chosen from (default %(default)s)")
    ap.add_argument("--n", type=int, default=N, help="households to choose (default %(default)s)")
    ap.add_argument("--seed", type=int, default=SEED,
                    help="seed of random.Random (default %(default)s)")
    ap.add_argument("--json", action="store_true", help="print bucket -> ids as JSON")
    a = ap.parse_args()
    cfg = load_config(a.config)
    chosen = choose({b: list(ids) for b, ids in cfg.households_by_bucket.items()}, a.n, a.seed)
    if a.json:
        print(json.dumps(chosen))
    else:
        print(buckets_block(cfg, chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
