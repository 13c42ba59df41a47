"""A subset of a population draw: ``households.population_sample.subset: {n: k, seed: t}``.

A run with it measures k of the n households the draw gives (links.population), not all of
them: a variant on part of a population run's households, e.g. config/live-policed.yaml's 40
of config/live.yaml's 240. The draw itself is the same as without ``subset`` (the same key of
links.drawcache, too), so the subset is always of the very households the run without it
measures.

Rule (``Subset.choose``, ``Subset.apply``)
------------------------------------------
1. Each bucket gets k * n_b / n of the k (n_b: its drawn households), rounded by largest
   remainder, ties to the bucket listed first (``proportional_allocation``).
2. One ``rng = random.Random(t)``; for each bucket in the config's order,
   ``rng.sample(sorted(its drawn IDs), its share)``.
3. The run's households: the chosen ones in draw order, per bucket and in all
   (``PopulationDraw.by_bucket`` and ``.subset``; ``.drawn`` stays the n).
4. ``repeat: {share: s, ...}`` applies to the subset, with k in place of the draw's n:
   max(1, floor(s * k + 1/2)) of the subset, ``rng.sample(subset in draw order, that many)``
   with the same rng after step 2 (the standard library's, so that a trial job, which loads
   the config, imports no numpy once the draw is cached: links.drawcache).

Why stratified: the paper's question is per price bucket. Proportional allocation keeps each
bucket's share of the subset the draw's up to rounding (40 of seed 1's 22, 84, 23, 111: 4, 14,
4, 18), where k uniform of n leaves it to chance (a uniform 40 of 240 gives the $0-30 bucket
3.7 households on average, and 0 or 1 with probability 0.09). Why uniform within a bucket: the
draw is self-weighting (each drawn household stands for the same population weight), so a
uniform pick keeps it so; the subset's only departure from self-weighting is the allocation's
rounding (4 of 22 is 0.182 of a bucket, 18 of 111 is 0.162).

The same rule with seed 41 gives bench/buffer_depth_households.py's 40 households (the
buffer-depth sweep's), so config/live-policed.yaml measures those.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from latency_divide import limits
from latency_divide.errors import ConfigError

#: Generator seed of a draw's repeated households: [households.seed, REPEAT_STREAM].
REPEAT_STREAM = 1


def repeated_households(households: Sequence[int], repeat, seed: int) -> tuple[int, ...]:
    """A draw's households that repeat (links.population, step 5; in the given order), of
    ``repeat``, a links.population Repeat or None: repeat.count(len) of them, by
    ``numpy.random.default_rng([seed, REPEAT_STREAM]).choice(len, count, replace=False)``."""
    if repeat is None:
        return ()
    import numpy as np

    rng = np.random.default_rng([seed, REPEAT_STREAM])
    picked = {int(i) for i in rng.choice(len(households), repeat.count(len(households)),
                                         replace=False)}
    return tuple(h for i, h in enumerate(households) if i in picked)


def proportional_allocation(sizes: dict[str, int], n: int) -> dict[str, int]:
    """n split over the groups in proportion to ``sizes``, by largest remainder (ties: the
    group listed first); the shares sum to n and none exceeds its size."""
    total = sum(sizes.values())
    if not 0 < n <= total:
        raise ValueError(f"allocation of n = {n}: allowed is 1 to {total}, the sizes' sum")
    exact = {g: n * k / total for g, k in sizes.items()}
    share = {g: math.floor(x) for g, x in exact.items()}
    order = sorted(sizes, key=lambda g: (-(exact[g] - share[g]), list(sizes).index(g)))
    for g in order[:n - sum(share.values())]:
        share[g] += 1
    return share


@dataclass(frozen=True)
class Subset:
    """``subset: {n, seed}``: n of the drawn households, spread over the buckets in
    proportion (module docstring)."""

    n: int  # 1 .. the draw's n
    seed: int  # of random.Random

    @classmethod
    def from_dict(cls, s, draw_n: int, where: str) -> "Subset":
        """The config's form, checked against the draw's n: errors name the key, the value and
        what is allowed (``where``: the population sample's key)."""
        if not isinstance(s, dict) or set(s) != {"n", "seed"}:
            raise ConfigError(
                f"{where}.subset = {s!r}: allowed is a mapping with n (1 to the draw's n,"
                f" {draw_n}) and seed (an integer 0 to {2**32 - 1}), and no other key")
        k = s["n"]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= draw_n:
            raise ConfigError(
                f"{where}.subset.n = {k!r}: allowed is an integer 1 to {draw_n}, the draw's n"
                f" ({where.removeprefix('config: ')}.n): the subset is of the drawn households")
        limits.check("seed", s["seed"], f"{where}.subset.seed")
        return cls(k, s["seed"])

    def to_dict(self) -> dict:
        return {"n": self.n, "seed": self.seed}

    def choose(self, by_bucket: dict[str, Sequence[int]], rng: random.Random | None = None
               ) -> set[int]:
        """The chosen IDs of a draw's bucket -> drawn IDs (buckets in the config's order);
        ``rng``: random.Random(seed), given to go on with it."""
        share = proportional_allocation({b: len(ids) for b, ids in by_bucket.items()}, self.n)
        rng = rng or random.Random(self.seed)
        chosen: set[int] = set()
        for b, ids in by_bucket.items():
            chosen.update(rng.sample(sorted(ids), share[b]))
        return chosen

    def apply(self, draw, spec):
        """A links.population.PopulationDraw of the whole draw (``draw``) as the draw of
        ``spec`` (a PopulationSample with this subset): by_bucket, repeated and subset the
        subset's (module docstring, steps 2-4)."""
        if self.n > len(draw.drawn):
            raise ConfigError(f"households.population_sample.subset.n = {self.n}: allowed is 1"
                              f" to {len(draw.drawn)}, the draw's n")
        rng = random.Random(self.seed)
        chosen = self.choose(draw.by_bucket, rng)
        subset = tuple(h for h in draw.drawn if h in chosen)
        again = set(rng.sample(subset, spec.repeat.count(len(subset)))) if spec.repeat else ()
        return dataclasses.replace(
            draw, spec=spec, subset=subset,
            by_bucket={b: [h for h in ids if h in chosen] for b, ids in draw.by_bucket.items()},
            repeated=tuple(h for h in subset if h in again))


def add_to_composition(draw, rows: list[dict], by: str) -> list[dict]:
    """links.population.composition's rows with the subset's households of each group
    (``subset``) and their share of the subset (``subset_share``)."""
    if by == "price_bucket":
        group = {h: b for b, ids in draw.by_bucket.items() for h in ids}
    else:
        group = {int(r["unit_id"]): r[by] for r in draw.eligible}
    counts = Counter(group[h] for h in draw.subset)
    for row in rows:
        row.update(subset=counts[row[by]], subset_share=counts[row[by]] / len(draw.subset))
    return rows
