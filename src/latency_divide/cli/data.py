"""Subcommands on the household data: ``household`` (one household's link profile), ``sample``
(a seeded weighted draw from a price bucket) and ``linkplan`` (a household's tc and delay
commands).

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
        required=True,
        help="price bucket: 0-30, 30-40, 40-50, 50+ or a range LO-HI (US $, [LO, HI)) / LO+",
    )
    p.add_argument("-n", type=int, required=True, help="number of households to draw")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--json", action="store_true", help="print the records as a JSON list")


def _sample(args) -> int:
    from latency_divide.data.buckets import DEFAULT_BUCKETS, parse_bucket, sample_bucket
    from latency_divide.data.households import get_households

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


def _linkplan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="household ID")
    p.add_argument("--qfactor", type=float, default=2.0, help="queue size in BDPs (default 2)")
    p.add_argument("--delay", choices=DELAY_MECHANISMS, default="netem",
                   help="propagation delay mechanism (default netem)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def _linkplan(args) -> int:
    from latency_divide.data.households import get_household
    from latency_divide.links.plan import make_linkplan

    plan = make_linkplan(get_household(args.id), qfactor=args.qfactor, mechanism=args.delay)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(plan.render_shell(), end="")
    return 0
