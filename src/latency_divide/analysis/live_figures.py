"""The figure of a live run (docs/live.md): ``live_bitrate_queue``, the bitrate the ABR chose and
the bottleneck queue over one broadcast, for each variant, all of one household (the first of
the configured ones with a live trial of every variant; its lowest repetition).

The bitrate is the sender's ``bitrate_timeline`` (parsers.live: the start and every rung
change, held until the next; t from the broadcast's start, the connection's establishment),
read from each trial's sender.json; the queue is the trials table's queue series (the gateway's
FIFO, t from the receiver's first stream byte: the two clocks' zeros differ by the handshake and
one one-way delay, tens of ms). Drawn only for a config with live variants (rules/figures.smk).
:func:`live_frame` and :func:`live_plot` take frames and never read files (testable);
:func:`build_live_figure` reads the tables and the reports and writes PDF, PNG and the
provenance sidecar.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from latency_divide.analysis.figures import FigureError, _cat, _theme, save, variant_order

NAME = "live_bitrate_queue"
BITRATE = "bitrate (kbit/s)"
QUEUE = "bottleneck queue (KB)"


def live_trials(trials: pd.DataFrame, order: Sequence[int] = ()) -> pd.DataFrame:
    """One live trial per variant (its lowest repetition), all of one household and direction
    (the uplink, if it has one): the first of ``order`` with a live trial of every live variant,
    else the lowest such ID, else the household with most."""
    live = trials[trials["live_abr"].notna()]
    if live.empty:
        raise FigureError(f"{NAME}: no live trial in the trials table")
    variants = set(live["variant"])
    counts = live.groupby("household_id")["variant"].nunique()
    full = [int(h) for h in counts.index if counts[h] == len(variants)]
    ranked = [int(h) for h in order if int(h) in full] + sorted(full)
    hh = ranked[0] if ranked else int(counts.idxmax())
    d = live[live["household_id"] == hh]
    d = d[d["direction"] == ("uplink" if (d["direction"] == "uplink").any()
                             else d["direction"].iloc[0])]
    return d[d["repetition"] == d.groupby("variant")["repetition"].transform("min")]


def live_frame(used: pd.DataFrame, queue: pd.DataFrame,
               timelines: dict[str, list[tuple[float, float]]]) -> pd.DataFrame:
    """Long frame (variant, t_s, metric, value): each trial's bitrate steps (``timelines`` by
    trial_path, held to the broadcast's end) and its queue samples during the broadcast."""
    parts = []
    for r in used.itertuples(index=False):
        tl = timelines[r.trial_path]
        t = [x for x, _ in tl] + [max(float(r.broadcast_s), tl[-1][0])]
        k = [y for _, y in tl] + [tl[-1][1]]
        parts.append(pd.DataFrame({"variant": r.variant, "t_s": t, "metric": BITRATE,
                                   "value": k}))
        q = queue[(queue["household_id"] == r.household_id) & (queue["variant"] == r.variant)
                  & (queue["direction"] == r.direction) & (queue["repetition"] == r.repetition)
                  & queue["during_transfer"]]
        parts.append(pd.DataFrame({"variant": r.variant, "t_s": q["t_s"].to_numpy(),
                                   "metric": QUEUE,
                                   "value": q["backlog_bytes"].to_numpy() / 1000.0}))
    out = pd.concat(parts, ignore_index=True)
    out["metric"] = pd.Categorical(out["metric"], categories=[BITRATE, QUEUE], ordered=True)
    return out


def live_plot(frame: pd.DataFrame, trials: pd.DataFrame, household: int, direction: str):
    from plotnine import aes, facet_grid, geom_line, geom_step, ggplot, labs

    if frame.empty:
        raise FigureError(f"{NAME}: no samples for household {household}")
    d = _cat(frame, "variant", [v for v in variant_order(trials) if v in set(frame["variant"])])
    return (
        ggplot(d, aes("t_s", "value", colour="variant"))
        + geom_step(d[d["metric"] == BITRATE], direction="hv", size=0.5)
        + geom_line(d[d["metric"] == QUEUE], size=0.4)
        + facet_grid("metric ~ variant", scales="free_y")
        + labs(x="time since the broadcast started (s)", y="",
               title=f"household {household}, {direction}: the ABR's bitrate and the queue")
        + _theme()
    )


def build_live_figure(tables_dir: Path | str, pdf: Path | str, png: Path | str,
                      sidecar: Path | str, household_order: Sequence[int] = (),
                      read_sender: Callable[[str], str] | None = None) -> dict:
    """Draw :data:`NAME` from the tables under ``tables_dir`` and the chosen trials' sender
    reports (``read_sender(trial_path)``; default: their sender.json, trial.rawio)."""
    from latency_divide.analysis.provenance import build_sidecar, write_sidecar
    from latency_divide.analysis.tables import read_table
    from latency_divide.parsers.live import bitrate_timeline
    from latency_divide.trial import rawio
    from latency_divide.trial.layout import SENDER_JSON

    tdir = Path(tables_dir)
    trials = read_table(tdir / "trials.parquet", "trials")
    used = live_trials(trials, household_order)
    hh = int(used["household_id"].iloc[0])
    queue = read_table(tdir / "timeseries" / "queue.parquet", "queue",
                       filters=[("household_id", "=", hh)])
    read = read_sender or (lambda p: rawio.read_text(p, SENDER_JSON))
    timelines = {p: bitrate_timeline(read(p)) for p in used["trial_path"]}
    frame = live_frame(used, queue, timelines)
    plot = live_plot(frame, trials, hh, str(used["direction"].iloc[0]))
    outputs = save(plot, pdf, png, width=max(7.5, 2.6 * used["variant"].nunique()), height=5.0)
    rec = build_sidecar(pdf, outputs, used, tables=[tdir / "trials.parquet",
                                                   tdir / "timeseries" / "queue.parquet"])
    write_sidecar(rec, sidecar)
    return rec
