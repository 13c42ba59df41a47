#!/usr/bin/env python3
"""The delay line's release window: CPU and wake-ups per frame against release error and the
trial's own numbers (issue 40: "show the trade-off measured ... and choose with the
per-trial fidelity data").

The delay line (tools/delayline, 0.2) wakes at most once per release window and sends every
frame due by then, plus those due within half a window after it; so a frame leaves within
±window/2 of its release time (plus the wake-up's own latency), and a wider window costs
fewer wake-ups. For each window this runs real trials through `latency-divide trial` (the
window is passed to the delay line in DELAYLINE_WINDOW_US, so the trials' definitions do not
change) and prints, per window and variant, medians over the repetitions of:

- the delay line's CPU µs per frame forwarded and wake-ups per frame (its usage line);
- its release lateness p50/p99 and earliness p99 (µs, worst direction);
- the trial's norm_tput and mean self-induced delay (ms), and their spread over repetitions,
  to compare with the per-trial fidelity bounds (0.03 and max(1 ms, 20 %)).

Needs root. Example (27337's downlink, 68 Mbit/s; about 12 minutes):

    .venv/bin/python bench/bench_delayline_window.py --windows 0 125 250 500 1000 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _trials import CLI, ROOT, trial_preconditions

sys.path.insert(0, str(ROOT / "src"))

USAGE = re.compile(r"^delayline usage (.*)$", re.M)
STATS = re.compile(r"^delayline stats a->b frames=(\d+) .* b->a frames=(\d+) ", re.M)
#: variant name -> extra trial arguments (unbound Cubic stresses the rate, Copa δ 0.5 at its
#: default window is the variant most sensitive to delay noise: a 2-packet standing queue)
VARIANTS = {
    "cubic-unbound": ["--cc", "cubic", "--window", "16000000"],
    "copa-0.5": ["--cc", "copa", "--delta", "0.5"],
}


def usage_fields(log: str) -> dict[str, str]:
    m = USAGE.findall(log)
    if not m:
        raise ValueError("no 'delayline usage' line in delayline.log")
    return dict(kv.split("=", 1) for kv in m[-1].split() if "=" in kv)


def one(household: int, direction: str, variant: str, window: int, duration: float,
        out: Path) -> dict:
    from latency_divide.analysis.metrics import summarize_trial
    from latency_divide.trial import rawio

    argv = [str(CLI), "trial", str(household), "--direction", direction,
            *VARIANTS[variant], "--duration", f"{duration:g}", "--idle", "2",
            "--delay", "delayline", "--out", str(out)]
    env = dict(os.environ, DELAYLINE_WINDOW_US=str(window))
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, text=True)
    meta = next(out.rglob("meta.json"))
    row = summarize_trial(meta.parent)
    log = rawio.read_text(meta.parent, "delayline.log")
    u = usage_fields(log)
    if int(u.get("window_us", -1)) != window:
        raise SystemExit(f"the delay line ran with window_us={u.get('window_us')}, not {window}: "
                         "is target/release/delayline 0.2 or later?")
    ab, ba = (int(x) for x in STATS.findall(log)[-1])
    frames = ab + ba

    def worst(prefix: str, q: str) -> float:
        vals = [float(u[f"{prefix}_{d}_{q}_us"]) for d in ("ab", "ba")
                if u.get(f"{prefix}_{d}_{q}_us", "na") != "na"]
        return max(vals) if vals else 0.0

    return {
        "cpu_us_per_frame": float(u["cpu_s"]) * 1e6 / max(frames, 1),
        "wakeups_per_frame": int(u["wakeups"]) / max(frames, 1),
        "late_p50_us": worst("late", "p50"),
        "late_p99_us": worst("late", "p99"),
        "early_p99_us": worst("early", "p99"),
        "norm_tput": float(row["norm_tput"]),
        "self_delay_ms": float(row["self_delay_mean_ms"]),
        "verdict": row.get("health_verdict") or "?",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--household", type=int, default=27337)
    ap.add_argument("--direction", choices=("uplink", "downlink"), default="downlink")
    ap.add_argument("--windows", type=int, nargs="+", default=[0, 125, 250, 500, 1000],
                    help="release windows to try, µs (0..1000)")
    ap.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=sorted(VARIANTS))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--duration", type=float, default=20.0, help="transfer s per trial")
    args = ap.parse_args()
    if bad := [w for w in args.windows if not 0 <= w <= 1000]:
        ap.error(f"--windows {bad}: allowed 0 to 1000 µs")
    if (rc := trial_preconditions()) is not None:
        return rc
    runs = [(w, v, r) for r in range(args.repeats) for v in args.variants for w in args.windows]
    results: dict[tuple[int, str], list[dict]] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ld-bench-window-") as tmp:
        for k, (w, v, r) in enumerate(runs, 1):
            out = Path(tmp) / f"w{w}-{v}-{r}"
            results.setdefault((w, v), []).append(
                one(args.household, args.direction, v, w, args.duration, out))
            el = time.monotonic() - t0
            print(f"[{k}/{len(runs)}] window {w} µs {v} rep {r + 1}: elapsed {el:.0f} s, "
                  f"ETA {el / k * (len(runs) - k):.0f} s", file=sys.stderr, flush=True)
    print(f"household {args.household} {args.direction}, {args.duration:g} s transfers, "
          f"medians of {args.repeats} (spread = max - min)")
    print(f"{'window':>6s} {'variant':14s} {'µs/frame':>8s} {'wake/fr':>7s} {'late50':>6s} "
          f"{'late99':>6s} {'early99':>7s} {'norm_tput':>9s} {'spread':>6s} {'self_ms':>7s} "
          f"{'spread':>6s} verdicts")
    for (w, v), rows in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        def med(key: str) -> float:
            return statistics.median(r[key] for r in rows)

        def spread(key: str) -> float:
            return max(r[key] for r in rows) - min(r[key] for r in rows)

        print(f"{w:6d} {v:14s} {med('cpu_us_per_frame'):8.1f} {med('wakeups_per_frame'):7.2f} "
              f"{med('late_p50_us'):6.0f} {med('late_p99_us'):6.0f} {med('early_p99_us'):7.0f} "
              f"{med('norm_tput'):9.3f} {spread('norm_tput'):6.3f} {med('self_delay_ms'):7.2f} "
              f"{spread('self_delay_ms'):6.2f} {','.join(r['verdict'] for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
