"""Regenerate the real trial fixtures in this directory (needs root and
target/release/tquic-perf; about 10 s per trial). Each trial is run by the project's own trial
code (latency_divide.trial.run_trial, the code behind ``latency-divide trial``), short and
with sparse sampling so the whole set stays under 300 KB:
5 s transfer, 1.5 s idle, ping every 0.2 s, queue sample every 0.3 s.

    sudo .venv/bin/python tests/data/trials/regenerate.py

Set: households 799254 and 13570 (price bucket 0-30) uplink, 9254 (30-40) downlink; cubic and
copa-0.5 each.
"""

from __future__ import annotations

import sys
from pathlib import Path

from latency_divide.households import get_household
from latency_divide.trial import TrialSpec, Variant, run_trial

HERE = Path(__file__).resolve().parent
SET = [(799254, "uplink"), (13570, "uplink"), (9254, "downlink")]
VARIANTS = [Variant("cubic", "cubic"), Variant("copa-0.5", "copa", 0.5)]


def main() -> int:
    for hh, direction in SET:
        for v in VARIANTS:
            spec = TrialSpec(household=get_household(hh), direction=direction, variant=v,
                             duration_s=5.0, idle_s=1.5, tail_s=0.5, ping_interval_s=0.2,
                             queue_interval_s=0.3)
            print(run_trial(spec, HERE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
