"""The mechanism check of the live rows (issue 58, item 5; analysis.live_mechanism,
docs/live-mechanism.md): on crafted broadcasts written here in the real formats (meta.json,
the tool's sender and receiver JSON reports, the queue sampler's queue.jsonl), a down-switch
after a queue build-up is reported as queue-led, the rung times sum to the broadcast, a
policed broadcast (no queue) has no queue-led switch, a missing report is named, and the
figure is the same bytes twice; then the subcommand on real trials, when they are on disk
(LATENCY_DIVIDE_LIVE_RAW, default results/raw)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from latency_divide.analysis import live_mechanism as lm
from latency_divide.analysis.reader import TrialInvalid
from latency_divide.trial import definition

from conftest import ROOT, VENV_BIN

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

LADDER = [145, 365, 730, 1100, 2000, 3000, 4000]
START = 1_800_000_000.0
DUR = 60.0
CAP = 1000  # kbit/s
#: the bitrate: 145 at the start, 730 at 1 s, 1100 (above the link) at 20 s, 730 at 30 s
TIMELINE = [[0.0, 145], [1.0, 730], [20.0, 1100], [30.0, 730]]


def _summary(series) -> dict:
    ms = [v for _, v in series]
    return {"samples": len(ms), "mean_ms": sum(ms) / len(ms), "p50_ms": sorted(ms)[len(ms) // 2],
            "p95_ms": max(ms), "max_ms": max(ms), "truncated": False, "series": series}


def _sender(inband_peak: float) -> dict:
    at = {k: 0.0 for k in LADDER}
    for (t, k), nxt in zip(TIMELINE, [r[0] for r in TIMELINE[1:]] + [DUR]):
        at[k] += nxt - t
    prio = [[i + 0.01, 40.0] for i in range(int(DUR))]
    inband = [[i + 0.01, inband_peak if 26 <= i < 30 else 40.0] for i in range(int(DUR))]
    return {"format_version": 3, "tool": "tquic-perf", "role": "server", "start_unix": START,
            "duration_s": DUR, "bytes": 6_000_000,
            "live": {"app": "live", "abr": "rate", "fps": 30, "gop_s": 2.0,
                     "keyframe_ratio": 5.0, "frame_deadline_ms": 700, "seed": 1,
                     "ladder_kbps": LADDER, "broadcast_s": DUR, "frames_produced": 1800,
                     "frames_sent": 1790, "frames_acked": 1790, "frames_dropped": 10,
                     "app_bytes_produced": 6_100_000, "app_bytes_sent": 6_000_000,
                     "app_bytes_acked": 6_000_000, "bitrate_mean_kbps": 790.0,
                     "bitrate_switches": len(TIMELINE) - 1, "bitrate_timeline": TIMELINE,
                     "bitrate_timeline_truncated": False,
                     "time_at_rung_s": [[k, at[k]] for k in LADDER], "queue_max_frames": 4,
                     "app_rtt_ms": _summary(prio), "app_rtt_inband_ms": _summary(inband),
                     "pings_sent": 120, "transport_rtt_mean_ms": 45.0,
                     "transport_rtt_samples": 900, "transport_bytes_acked": 6_200_000,
                     "transport_bytes_lost": 62_000}}


RECEIVER = {"format_version": 3, "tool": "tquic-perf", "role": "client", "start_unix": START,
            "duration_s": DUR, "bytes": 6_000_000,
            "live": {"app": "live", "abr": "rate", "frames_received": 1790,
                     "key_frames_received": 30, "app_bytes_received": 6_000_000,
                     "pings_echoed": 120, "frame_latency_ms": {"samples": 1790, "mean_ms": 60.0,
                                                               "p50_ms": 55.0, "p95_ms": 120.0,
                                                               "max_ms": 400.0}}}


def _queue(backlog_at) -> str:
    """queue.jsonl: a sample every 0.25 s from 2 s before the broadcast to its end."""
    lines = []
    for i in range(int((DUR + 2) * 4) + 1):
        t = -2.0 + i * 0.25
        lines.append(json.dumps({"t_unix": START + t, "dev": "ld-gs", "qdisc": [
            {"kind": "bfifo", "handle": "10:", "bytes": 1000 * i, "backlog": backlog_at(t),
             "qlen": backlog_at(t) // 1250, "drops": 0}]}))
    return "\n".join(lines) + "\n"


def build_up(t: float) -> int:
    """Bytes queued: none, but 25-30 s a build-up to 50 KB (400 ms at 1000 kbit/s)."""
    return int(10_000 * (t - 25)) if 25 <= t < 30 else 0


def write_trial(raw: Path, household: int = 11406, variant: str = "cubic", cc: str = "cubic",
                policed: bool = False, backlog_at=build_up, inband_peak: float = 300.0,
                skip: tuple = ()) -> Path:
    d_ = definition.make_definition(testbed="local", delay="auto", qfactor=2.0,
                                    duration_s=DUR, idle_s=5.0, ping_interval_s=0.2,
                                    queue_interval_s=0.25, tool_name="tquic-perf",
                                    window_bytes=4194304, tool_args=["-app=live", "-abr=rate"],
                                    cc=cc, delta=0.04 if cc == "copa" else None,
                                    buffer_model="policed-5ms" if policed else "qfactor")
    def_id = definition.definition_id(d_)
    definition.ensure_file(raw / def_id, d_)
    d = raw / def_id / str(household) / "uplink" / variant / "rep1"
    d.mkdir(parents=True)
    meta = {"format_version": 4, "definition_id": def_id, "definition": d_, "config_hash": "x",
            "capacity_kbps": CAP, "direction": "uplink", "repetition": 1, "qfactor": 2.0,
            "household": {"unit_id": household, "price_bucket": "0-30", "rtt_ms": 40.0,
                          "upload_kbps": CAP},
            "variant": {"name": variant, "cc": cc, "delta": d_["variant"]["delta"]}}
    files = {"meta.json": json.dumps(meta), "sender.json": json.dumps(_sender(inband_peak)),
             "receiver.json": json.dumps(RECEIVER), "queue.jsonl": _queue(backlog_at)}
    for name, text in files.items():
        if name not in skip:
            (d / name).write_text(text)
    return d


def test_a_down_switch_after_a_queue_build_up_is_queue_led(tmp_path):
    d = write_trial(tmp_path / "raw")
    rows, sw, rungs, _ = lm.collect([d])
    down = sw[sw["kind"] == "down"]
    assert list(down["t_s"]) == [30.0]
    s = down.iloc[0]
    # the second before 30 s held up to 47.5 KB (29.75 s): 380 ms at 1000 kbit/s; median 0
    assert s["queue_before_ms"] == pytest.approx(47_500 * 8 / CAP)
    assert s["queue_median_ms"] == 0 and bool(s["queue_led"])
    assert s["inband_before_ms"] == 300.0 and s["inband_median_ms"] == 40.0
    assert s["prio_before_ms"] == 40.0 and not s["deep"]    # 1100 -> 730: the rung below
    assert not sw[sw["kind"] == "up"]["queue_led"].any()    # no queue before the ups
    r = rows.iloc[0]
    assert (r["switches_down"], r["switches_up"], r["down_deep"]) == (1, 2, 0)
    assert r["down_queue_led_share"] == 1.0 and r["up_queue_led_share"] == 0.0
    # 5 of the 60 whole seconds held the build-up (25-30 s): the base rate
    assert r["seconds_queue_high_share"] == pytest.approx(5 / 60)
    assert r["down_inband_excess_median_ms"] == pytest.approx(260.0)
    assert r["rung_below_kbps"] == 730 and r["condition"] == "2 x BDP FIFO"
    assert r["share_above"] == pytest.approx(10 / 60)       # 1100 for 20-30 s
    assert r["rtx_overhead"] == pytest.approx(0.01) and r["frames_dropped"] == 10


def test_time_at_rungs_sums_to_the_broadcast(tmp_path):
    rows, _, rungs, _ = lm.collect([write_trial(tmp_path / "raw")])
    assert rungs["time_s"].sum() == pytest.approx(DUR)
    assert rungs["share"].sum() == pytest.approx(1.0)
    assert set(rungs["rung_kbps"]) == set(LADDER)
    r = rows.iloc[0]
    assert r["share_at_rung_below"] + r["share_above"] + r["share_below"] == pytest.approx(1.0)
    assert r["share_at_rung_below"] == pytest.approx(49 / 60)  # 730 for 1-20 s and 30-60 s


def test_a_policed_broadcast_has_no_queue_led_switch(tmp_path):
    d = write_trial(tmp_path / "raw", policed=True, backlog_at=lambda t: 0)
    rows, sw, _, _ = lm.collect([d])
    r = rows.iloc[0]
    assert r["condition"] == "policed-5ms" and r["queue_median_ms"] == 0
    assert r["switches_down"] == 1 and r["down_queue_led_share"] == 0
    assert r["seconds_queue_high_share"] == 0 and not sw["queue_led"].any()
    # its in-band ping waited 260 ms more than the priority one before the down-switch: the
    # video waited in the sender, not in the network
    down = sw[sw["kind"] == "down"].iloc[0]
    assert down["sender_wait_before_ms"] == 260.0 and bool(down["sender_led"])
    assert r["sender_wait_median_ms"] == 0 and r["down_sender_led_share"] == 1.0
    assert r["seconds_sender_high_share"] == pytest.approx(4 / 60)


def test_the_rung_below_the_link(tmp_path):
    assert lm.rung_below(LADDER, 1063) == 730 and lm.rung_below(LADDER, 4240) == 4000
    assert lm.rung_below(LADDER, 1100) == 730 and lm.rung_below(LADDER, 100) == 145


@pytest.mark.parametrize("missing", ["sender.json", "queue.jsonl", "receiver.json"])
def test_a_missing_report_is_named(tmp_path, missing):
    d = write_trial(tmp_path / "raw", skip=(missing,))
    with pytest.raises(TrialInvalid, match=f"{d}: missing file {missing}"):
        lm.read_broadcast(d)


def test_a_malformed_report_is_named(tmp_path):
    d = write_trial(tmp_path / "raw")
    doc = json.loads((d / "sender.json").read_text())
    doc["live"]["app_rtt_inband_ms"]["series"] = [[1.0]]
    (d / "sender.json").write_text(json.dumps(doc))
    with pytest.raises(TrialInvalid, match=r"sender.json.*app_rtt_inband_ms.series\[0\]"):
        lm.read_broadcast(d)


@pytest.mark.parametrize("key, value, named", [
    ("capacity_kbps", None, "capacity_kbps=None"), ("capacity_kbps", 0, "capacity_kbps=0"),
    ("rtt_ms", None, "household.rtt_ms=None"), ("rtt_ms", -3.0, "household.rtt_ms=-3.0")])
def test_a_link_without_a_rate_or_an_rtt_is_named(tmp_path, key, value, named):
    """No silent NaN shares or a rate taken from the wrong direction: the value is named."""
    d = write_trial(tmp_path / "raw")
    meta = json.loads((d / "meta.json").read_text())
    (meta["household"] if key == "rtt_ms" else meta)[key] = value
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TrialInvalid, match=f"{named}: a positive number is needed"):
        lm.read_broadcast(d)


def _digest(paths) -> list[str]:
    return [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths]


def test_the_subcommand_writes_tables_and_the_same_figure_twice(tmp_path, monkeypatch):
    """Two trees (2 x BDP and policed), two variants: the tables, the Markdown, a figure whose
    PDF and PNG are the same bytes when drawn again (SOURCE_DATE_EPOCH), its provenance; a
    tree with a broken trial fails naming the file."""
    from latency_divide.analysis.live_mechanism_figure import build_mechanism_figure
    from latency_divide.analysis.live_mechanism_report import build

    fifo, pol, out = tmp_path / "fifo", tmp_path / "policed", tmp_path / "a"
    write_trial(fifo), write_trial(fifo, variant="copa-0.04", cc="copa", inband_peak=40.0)
    write_trial(pol, policed=True, backlog_at=lambda t: 0)
    write_trial(pol, 12268, policed=True)                   # another household: left out
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}
    p = subprocess.run([str(VENV_BIN / "latency-divide"), "live-mechanism", "--raw", str(fifo),
                        "--raw", str(pol), "--out", str(out)], env=env, capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    again = tmp_path / "b"
    res = build([fifo, pol], again)
    build_mechanism_figure(res["used"], again / "f.pdf", again / "f.png", again / "f.json")
    assert _digest([out / "live_mechanism.pdf", out / "live_mechanism.png"]) == _digest(
        [again / "f.pdf", again / "f.png"])
    assert "3 broadcasts" in p.stdout and "| policed-5ms | cubic | 1 |" in p.stdout
    rows = lm.pd.read_parquet(out / "live_mechanism.parquet")
    assert sorted(zip(rows["condition"], rows["variant"])) == [
        ("2 x BDP FIFO", "copa-0.04"), ("2 x BDP FIFO", "cubic"), ("policed-5ms", "cubic")]
    summ = lm.pd.read_parquet(out / "live_mechanism_summary.parquet")
    from latency_divide.analysis.live_mechanism_report import SUMMARY_COLUMNS
    assert sorted(summ.columns) == sorted(SUMMARY_COLUMNS)  # every column the Markdown has
    copa = summ[summ["variant"] == "copa-0.04"].iloc[0]
    assert copa["higher_than_cubic"] == "0 of 1" and copa["bitrate_vs_cubic_pct"] == 0.0
    side = json.loads((out / "live_mechanism.provenance.json").read_text())
    assert len(side["trials"]) == 3 and len(side["tables"]) == 4
    (next(pol.glob("def-*/11406/uplink/cubic/rep1")) / "sender.json").unlink()
    p = subprocess.run([str(VENV_BIN / "latency-divide"), "live-mechanism", "--raw", str(fifo),
                        "--raw", str(pol), "--out", str(tmp_path / "c")], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 1 and "missing file sender.json" in p.stderr


def test_the_subcommand_on_real_trials_if_present(tmp_path):
    raw = Path(os.environ.get("LATENCY_DIVIDE_LIVE_RAW", ROOT / "results" / "raw"))
    try:
        trials = lm.live_trials([raw])
    except lm.MechanismError:
        trials = []
    if not trials:
        pytest.skip(f"no live trial under {raw} (set LATENCY_DIVIDE_LIVE_RAW to a results "
                    "tree's raw data, e.g. config/live-traces.yaml's run)")
    hh = int(trials[0].parent.parent.parent.name)
    p = subprocess.run([str(VENV_BIN / "latency-divide"), "live-mechanism", "--raw", str(raw),
                        "--households", str(hh), "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    rows = lm.pd.read_parquet(tmp_path / "live_mechanism.parquet")
    assert set(rows["household_id"]) == {hh} and (tmp_path / "live_mechanism.png").is_file()
    rungs = lm.pd.read_parquet(tmp_path / "live_mechanism_rungs.parquet")
    for r in rows.itertuples():  # one broadcast per condition and variant: a household of
        # live.yaml is also one of live-policed.yaml's (its own condition)
        mine = rungs[(rungs["condition"] == r.condition) & (rungs["variant"] == r.variant)]
        assert mine["time_s"].sum() == pytest.approx(r.broadcast_s, rel=1e-3)
        assert 0 <= r.share_at_rung_below <= 1 and r.switches_down >= 0


def test_a_truncated_timeline_is_drawn_to_its_last_change_only(tmp_path):
    from latency_divide.analysis.live_mechanism_figure import BITRATE, mechanism_frame

    d = write_trial(tmp_path / "raw")
    whole = lm.read_broadcast(d)
    doc = json.loads((d / "sender.json").read_text())
    doc["live"]["bitrate_timeline_truncated"] = True
    (d / "sender.json").write_text(json.dumps(doc))
    cut = lm.read_broadcast(d)
    for b, end in ((whole, DUR), (cut, TIMELINE[-1][0])):
        frame, _ = mechanism_frame([b])
        assert frame[frame["metric"] == BITRATE]["t_s"].max() == end
    rows, _, _, _ = lm.collect([d])
    assert bool(rows.iloc[0]["timeline_truncated"]) and rows.iloc[0]["bitrate_switches"] == 3
