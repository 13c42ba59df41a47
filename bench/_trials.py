"""Shared by the trial benchmarks: run `latency-divide trial` processes (one per trial, as
Snakemake's trial jobs do) either N at a time or admitted by CPU budget exactly as the
workflow admits them (latency_divide.ops.admission), and read the results back."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_divide.ops.admission import trial_host_load
from latency_divide.data.households import get_household
from latency_divide.links.plan import make_linkplan

CLI = ROOT / ".venv" / "bin" / "latency-divide"
#: The paper's variants (config/config.yaml): name -> (cc, delta)
VARIANTS = {"cubic": ("cubic", None), "copa-0.2": ("copa", 0.2), "copa-0.5": ("copa", 0.5),
            "copa-0.8": ("copa", 0.8)}


@dataclass(frozen=True)
class Trial:
    household: int
    direction: str
    variant: str

    def argv(self, out: Path, duration: float, idle: float, window: int) -> list[str]:
        cc, delta = VARIANTS[self.variant]
        argv = [str(CLI), "trial", str(self.household), "--direction", self.direction,
                "--cc", cc, "--duration", f"{duration:g}", "--idle", f"{idle:g}",
                "--window", str(window), "--out", str(out)]
        return argv + (["--delta", f"{delta:g}"] if delta is not None else [])

    def host_load(self, window: int, busy_s: float) -> int:
        plan = make_linkplan(get_household(self.household))
        return trial_host_load(plan, self.direction, window, busy_s=busy_s)


def trial_preconditions() -> int | None:
    """None if trials can run here (root, the setup's CLI), else the exit code after saying why."""
    import os

    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    if not CLI.exists():
        print(f"{CLI} missing: run scripts/setup.sh", file=sys.stderr)
        return 2
    return None


def profile_budget() -> int:
    """The workflow profile's host_load budget (profiles/default/config.yaml)."""
    import yaml

    prof = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    return int(prof["resources"]["host_load"])


def run_batch(trials: list[Trial], out: Path, *, duration: float, idle: float, window: int,
              label: str, n: int | None = None, budget: int | None = None) -> float:
    """Run ``trials`` with at most ``n`` at once, or (``budget``) as many as fit the CPU
    budget in host_load units, first fit in order; return the wall seconds."""
    if (n is None) == (budget is None):
        raise ValueError("give n or budget")
    loads = {t: t.host_load(window, idle + duration) for t in trials} if budget else {}
    t0 = time.monotonic()
    pending = list(trials)
    running: list[tuple[subprocess.Popen, Trial]] = []
    done = peak = 0
    while pending or running:
        used = sum(loads.get(t, 0) for _, t in running)
        for t in list(pending):
            fits = (len(running) < n) if n else (used + loads[t] <= budget or not running)
            if not fits:
                if n:
                    break
                continue
            pending.remove(t)
            used += loads.get(t, 0)
            running.append((subprocess.Popen(t.argv(out, duration, idle, window),
                                             stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True), t))
        peak = max(peak, len(running))
        for p, t in list(running):
            if p.poll() is None:
                continue
            running.remove((p, t))
            done += 1
            if p.returncode != 0:
                print(f"  {label}: trial {t} failed: {p.stderr.read()[-300:]}", file=sys.stderr)
            el = time.monotonic() - t0
            eta = el / done * (len(trials) - done)
            print(f"  {label}: {done}/{len(trials)} done, {len(running)} running (peak {peak}),"
                  f" elapsed {el:.0f} s, ETA {eta:.0f} s", flush=True)
        time.sleep(0.1)
    return time.monotonic() - t0


def summaries(out: Path) -> dict[Trial, dict]:
    """summarize_trial() row and meta.json of every trial under ``out``, by trial."""
    from latency_divide.analysis.metrics import summarize_trial
    from latency_divide.trial import rawio

    res = {}
    for meta in out.rglob("meta.json"):
        r = summarize_trial(meta.parent)
        r["meta"] = rawio.full_meta(meta.parent)  # with the set-up records (format 4)
        res[Trial(int(r["household_id"]), r["direction"], r["variant"])] = r
    return res
