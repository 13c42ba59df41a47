"""Side by side: the summary tables of several runs (the main run and its companions, say
tquic-perf and mvfst's tperf) as one Markdown table of mean self-induced delay (ms) / mean
normalized throughput per direction, price bucket and variant.

    latency-divide compare tquic=results/tables/summary.parquet \\
        mvfst=results/companions/mvfst/tables/summary.parquet
"""

from __future__ import annotations

from pathlib import Path

from latency_divide.errors import LatencyDivideError


def load_summaries(named: list[tuple[str, str | Path]]):
    import pandas as pd

    frames = []
    for name, path in named:
        try:
            s = pd.read_parquet(path)
        except (OSError, ValueError) as e:
            raise LatencyDivideError(f"{path}: not a summary table ({e})") from None
        need = {"direction", "price_bucket", "variant", "households", "norm_tput_mean",
                "self_delay_mean_ms_mean"}
        if not need <= set(s.columns):
            raise LatencyDivideError(f"{path}: not a summary table (lacks "
                                     f"{', '.join(sorted(need - set(s.columns)))})")
        frames.append(s.assign(run=name))
    return pd.concat(frames, ignore_index=True)


def markdown(table, variants: list[str] | None = None) -> str:
    """One row per direction and bucket; one column per (run, variant), in the order given."""
    runs = list(dict.fromkeys(table["run"]))
    cols = []
    for run in runs:
        vs = list(dict.fromkeys(table.loc[table["run"] == run, "variant"]))
        for v in (variants or vs):
            if v in vs:
                cols.append((run, v))
    buckets = list(dict.fromkeys(table["price_bucket"]))
    head = "| direction | bucket | " + " | ".join(f"{r} {v}" for r, v in cols) + " |"
    lines = [head, "|" + "---|" * (2 + len(cols))]
    for d in ("downlink", "uplink"):
        for b in buckets:
            cells = []
            for run, v in cols:
                row = table[(table["run"] == run) & (table["variant"] == v)
                            & (table["direction"] == d) & (table["price_bucket"] == b)]
                cells.append("" if row.empty else
                             f"{row['self_delay_mean_ms_mean'].iloc[0]:.1f} / "
                             f"{row['norm_tput_mean'].iloc[0]:.2f}")
            if any(cells):
                lines.append(f"| {d} | ${b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
