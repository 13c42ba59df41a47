"""Subcommands on the household data: ``household`` (one household's link profile), ``sample``
(a seeded weighted draw from a price bucket, or with ``--config`` the households a config runs:
a population sample with its exclusions and composition) and ``linkplan`` (a household's tc
and delay commands).

Each is an ``add_arguments`` / ``run`` pair registered in cli.COMMANDS.
"""

from __future__ import annotations

import argparse
import json

from latency_divide.vocab import DELAY_MECHANISMS


def _household_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="household ID (unit_id in the data set)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")


def _household(args) -> int:
    from latency_divide.data.households import get_household

    h = get_household(args.id)
    if args.json:
        print(json.dumps(h.to_dict(), indent=2))
    else:
        print(h.describe())
    return 0


def _sample_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bucket",
        help="price bucket: 0-30, 30-40, 40-50, 50+ or a range LO-HI (US $, [LO, HI)) / LO+",
    )
    p.add_argument("-n", type=int, help="number of households to draw")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument(
        "--config", metavar="FILE",
        help="instead of --bucket/-n/--seed: the households a config runs (its seed; for a "
             "households.population_sample, also its exclusions and its composition against "
             "the weighted population)")
    p.add_argument("--json", action="store_true", help="print the records as a JSON list "
                   "(with --config: an object with households, composition and excluded)")


def _sample(args) -> int:
    from latency_divide.data.buckets import DEFAULT_BUCKETS, parse_bucket, sample_bucket
    from latency_divide.data.households import get_households
    from latency_divide.errors import ConfigError

    if args.config is not None:
        if args.bucket is not None or args.n is not None:
            raise ConfigError("sample: give either --config FILE or --bucket and -n, not both")
        return _sample_config(args)
    if args.bucket is None or args.n is None:
        raise ConfigError("sample: --bucket and -n are required (or --config FILE)")
    bucket = parse_bucket(args.bucket)
    ids = sample_bucket(bucket, args.n, args.seed)
    # price_bucket: the default bucket names, or the given range for a custom one
    records = get_households(ids, buckets=None if bucket in DEFAULT_BUCKETS else [bucket])
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return 0
    print(f"# {len(ids)} households of bucket {bucket.name} {bucket.interval()}, seed {args.seed}")
    print(f"{'unit_id':>8}  {'price':>7}  {'down kbit/s':>11}  {'up kbit/s':>9}  {'rtt ms':>8}  technology  isp")
    for r in records:
        print(
            f"{r.unit_id:>8}  {r.monthly_charge:>7.2f}  {r.download_kbps:>11}  {r.upload_kbps:>9}"
            f"  {r.rtt_ms:>8.3f}  {r.technology:<10}  {r.isp}"
        )
    return 0


def _sample_config(args) -> int:
    """``sample --config FILE``: the config's households with weight, bucket, technology and
    repetitions; for a population sample also the composition and the exclusions."""
    from latency_divide.config import load_config
    from latency_divide.links.population import composition, population_draw
    from latency_divide.links.subset import add_to_composition
    from latency_divide.data.households import get_households

    cfg = load_config(args.config)
    records = get_households(cfg.household_ids(), cfg.buckets)
    draw = None
    if cfg.population is not None:
        draw = population_draw(cfg.population, cfg.buckets, cfg.seed, qfactor=cfg.qfactor)
    rank = {h: i + 1 for i, h in enumerate(draw.drawn)} if draw else {}
    comp = {by: composition(draw, by) for by in ("price_bucket", "technology")} if draw else {}
    if draw and draw.subset is not None:  # the households the run measures (links.subset)
        comp = {by: add_to_composition(draw, rows, by) for by, rows in comp.items()}
    excluded = [{"unit_id": int(r["unit_id"]), "technology": r.get("technology"),
                 "monthly_charge": r.get("monthly.charge"), "reason": why}
                for r, why in draw.excluded] if draw else []
    if args.json:
        print(json.dumps({
            "config": str(args.config), "seed": cfg.seed,
            "population_sample": cfg.population.to_dict() if cfg.population else None,
            "households": [{**r.to_dict(), "draw_rank": rank.get(r.unit_id),
                            "repetitions": list(cfg.repetitions_of(r.unit_id))} for r in records],
            "composition": comp, "eligible": len(draw.eligible) if draw else None,
            "excluded": excluded}, indent=2))
        return 0
    if draw:
        p = cfg.population
        print(f"# {args.config}: population sample of {p.n} households weighted by "
              f"{p.weight!r}, seed {cfg.seed}, from {len(draw.eligible)} eligible households "
              f"of the data set ({len(draw.excluded)} excluded)")
        if p.subset is not None:
            print(f"# the run measures a subset of {p.subset.n} of them, per price bucket in "
                  f"proportion (seed {p.subset.seed}): the households listed")
        if p.repeat is not None:
            print(f"# {len(draw.repeated)} of them (share {p.repeat.share:g}) run repetitions "
                  f"{list(cfg.repetitions_of(draw.repeated[0]))}, the others "
                  f"{list(cfg.trial.repetitions)}")
    else:
        print(f"# {args.config}: {len(records)} households, seed {cfg.seed}")
    print(f"{'rank':>4}  {'unit_id':>8}  {'bucket':<6}  {'price':>7}  {'weight':>8}  "
          f"{'technology':<10}  {'down kbit/s':>11}  {'up kbit/s':>9}  {'rtt ms':>8}  reps")
    for r in records:
        reps = ",".join(map(str, cfg.repetitions_of(r.unit_id)))
        print(f"{rank.get(r.unit_id, ''):>4}  {r.unit_id:>8}  {r.price_bucket or '-':<6}  "
              f"{r.monthly_charge:>7.2f}  {r.weight:>8.4f}  {r.technology:<10}  "
              f"{r.download_kbps:>11}  {r.upload_kbps:>9}  {r.rtt_ms:>8.3f}  {reps}")
    for by, rows in comp.items():
        print(f"\n# composition by {by}: the eligible households, their weighted share"
              " (population %) and the drawn sample")
        sub = draw.subset is not None
        print(f"{by:<12}  {'households':>10}  {'households %':>12}  {'population %':>12}"
              f"  {'drawn':>5}  {'drawn %':>7}"
              + (f"  {'subset':>6}  {'subset %':>8}" if sub else ""))
        for c in rows:
            print(f"{c[by]:<12}  {c['households']:>10}"
                  f"  {100 * c['households'] / len(draw.eligible):>12.1f}"
                  f"  {100 * c['population_share']:>12.1f}"
                  f"  {c['drawn']:>5}  {100 * c['drawn_share']:>7.1f}"
                  + (f"  {c['subset']:>6}  {100 * c['subset_share']:>8.1f}" if sub else ""))
    if draw:
        print(f"\n# excluded before the draw: {len(excluded)}")
        for e in excluded:
            print(f"{e['unit_id']:>8}  {e['technology']}  {e['reason']}")
    return 0


def _linkplan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="household ID")
    from latency_divide.links.buffers import ALLOWED, DEFAULT_MODEL, cli_model

    p.add_argument("--qfactor", type=float, default=2.0, help="queue size in BDPs (default 2)")
    p.add_argument("--buffer-model", type=cli_model, default=DEFAULT_MODEL, metavar="MODEL",
                   help=f"the FIFO's model (links.buffers; {ALLOWED}): qfactor x BDP "
                        "(default), the FCC panel's loaded minus idle RTT of the household's "
                        "technology, or N ms of queue at the link's rate")
    p.add_argument("--delay", choices=DELAY_MECHANISMS, default="netem",
                   help="propagation delay mechanism (default netem)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def _linkplan(args) -> int:
    from latency_divide.data.households import get_household
    from latency_divide.links.plan import make_linkplan

    plan = make_linkplan(get_household(args.id), qfactor=args.qfactor, mechanism=args.delay,
                         buffer_model=args.buffer_model)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(plan.render_shell(), end="")
    return 0
