"""Tables from the real trial fixtures in tests/data/trials (see regenerate.py there).

Expected values are recomputed here from the raw files directly (receiver.json, ping.log,
queue.jsonl), not through the package's parsers."""

import gzip
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA
from scipy import stats

from latency_divide.errors import LatencyDivideError
from latency_divide.analysis.metrics import row_jsonable, summarize_trial
from latency_divide.analysis.reader import TrialInvalid, TrialSkipped
from latency_divide.analysis.schemas import KEYS, SCHEMAS, SCHEMA_VERSION, TRIALS_SCHEMA
from latency_divide.analysis.tables import NoValidTrials, build_tables, collect, read_table, summary
from latency_divide.cli import main as cli_main

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

TRIALS = TEST_DATA / "trials"
DIRS = sorted(p.parent for p in TRIALS.glob("def-*/*/*/*/rep*/meta.json"))


def test_fixtures_present_and_small():
    assert len(DIRS) == 5 and {d.parents[3].name for d in DIRS} == {
        "def-062df6263f", "def-278b1e4ad6"}
    total = sum(f.stat().st_size for d in DIRS for f in d.rglob("*") if f.is_file())
    assert total < 300_000


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("tables")
    t = build_tables(DIRS, out)
    return t, out


def raw_text(d: Path, name: str) -> str:
    """A raw log, plain or gzip-compressed (the trial runner stores name.gz)."""
    if (d / name).exists():
        return (d / name).read_text()
    return gzip.decompress((d / f"{name}.gz").read_bytes()).decode()


def independent_row(d: Path) -> dict:
    """The measurement definitions of EXPERIMENT.md, from the raw files."""
    rj = json.loads((d / "receiver.json").read_text())
    meta = json.loads((d / "meta.json").read_text())
    start, end = rj["start_unix"], rj["start_unix"] + rj["duration_s"]
    replies = [(float(m[1]), float(m[2])) for m in re.finditer(
        r"^\[([\d.]+)\] \d+ bytes from .*? time=([\d.]+) ms", raw_text(d, "ping.log"), re.M)]
    base = min(r for t, r in replies if t < start)
    during = np.array([r for t, r in replies if start <= t <= end]) - base
    backlog = []
    for line in raw_text(d, "queue.jsonl").splitlines():
        rec = json.loads(line)
        if start <= rec["t_unix"] <= end:
            backlog += [q["backlog"] for q in rec["qdisc"] if q["kind"] == "bfifo"]
    goodput = rj["bytes"] * 8 / rj["duration_s"] / 1000
    return {
        "goodput_kbps": goodput,
        "norm_tput": goodput / meta["capacity_kbps"],
        "base_rtt_measured_ms": base,
        "self_delay_mean_ms": during.mean(),
        "self_delay_median_ms": np.median(during),
        "self_delay_p95_ms": np.percentile(during, 95),
        "queue_mean_bytes": np.mean(backlog),
        "household_id": meta["household"]["unit_id"],
        "capacity_kbps": meta["capacity_kbps"],
    }


def test_trials_table_matches_independent_computation(built):
    t, _ = built
    df = t.trials
    assert len(df) == 5 and not t.skipped
    assert list(df.columns) == TRIALS_SCHEMA.names
    for d in DIRS:
        row = df[df["trial_path"] == d.as_posix()].iloc[0]
        exp = independent_row(d)
        for k, v in exp.items():
            assert row[k] == pytest.approx(v, rel=1e-3, abs=1e-3), (d, k)
        assert row["window_source"] == "receiver_intervals"
        assert row["ping_loss_pct"] == 0.0
        assert 0 < row["norm_tput"] <= 1.05
        assert row["started_at"] < row["ended_at"]


def test_parquet_files_typed_and_versioned(built):
    _, out = built
    for name, rel in [("trials", "trials.parquet"), ("summary", "summary.parquet"),
                      ("ping", "timeseries/ping.parquet"), ("queue", "timeseries/queue.parquet"),
                      ("throughput", "timeseries/throughput.parquet")]:
        schema = pq.read_schema(out / rel)
        md = schema.metadata
        assert md[b"latency_divide.table"] == name.encode()
        assert md[b"latency_divide.schema_version"] == str(SCHEMA_VERSION).encode()
        assert schema.remove_metadata().equals(SCHEMAS[name]), name
    assert not list(out.rglob("*ld-tmp*"))


def test_read_table_rejects_unversioned_or_wrong_table(built, tmp_path):
    _, out = built
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"a": [1]}), plain)
    with pytest.raises(LatencyDivideError, match="schema version"):
        read_table(plain)
    with pytest.raises(LatencyDivideError, match="table 'trials' schema version .*; this code reads 'summary'"):
        read_table(out / "trials.parquet", "summary")


def test_timeseries_keyed_and_relative_to_transfer_start(built):
    t, _ = built
    for name in ("ping", "queue", "throughput"):
        df = getattr(t, name)
        assert list(df.columns[:6]) == ["definition_id", "household_id", "direction", "variant",
                                       "repetition", "t_s"]
        assert df.groupby(list(KEYS)).ngroups == 5
    d = DIRS[0]
    meta = json.loads((d / "meta.json").read_text())
    rj = json.loads((d / "receiver.json").read_text())
    key = (t.throughput["household_id"] == meta["household"]["unit_id"]) & (
        t.throughput["direction"] == meta["direction"]) & (
        t.throughput["variant"] == meta["variant"]["name"])
    thr = t.throughput[key]
    assert thr["bytes"].sum() == rj["bytes"]
    assert thr["t_s"].iloc[-1] == pytest.approx(rj["duration_s"], abs=1e-3)
    ping = t.ping[(t.ping["household_id"] == meta["household"]["unit_id"]) & (
        t.ping["direction"] == meta["direction"]) & (t.ping["variant"] == meta["variant"]["name"])]
    assert (ping.loc[ping["t_s"] < 0, "during_transfer"] == False).all()  # noqa: E712
    assert ping.loc[~ping["during_transfer"] & (ping["t_s"] < 0), "self_delay_ms"].min() == 0.0


def test_summary_ci_over_households(built):
    t, _ = built
    s = summary(t.trials)
    up = s[(s["price_bucket"] == "0-30") & (s["direction"] == "uplink") & (s["variant"] == "cubic")]
    assert len(up) == 1
    up = up.iloc[0]
    x = t.trials[(t.trials["price_bucket"] == "0-30") & (t.trials["variant"] == "cubic")][
        "self_delay_mean_ms"].to_numpy()
    assert up["households"] == 2
    half = stats.t.ppf(0.975, 1) * x.std(ddof=1) / math.sqrt(2)
    assert up["self_delay_mean_ms_mean"] == pytest.approx(x.mean())
    assert up["self_delay_mean_ms_ci95_lo"] == pytest.approx(x.mean() - half)
    assert up["self_delay_mean_ms_ci95_hi"] == pytest.approx(x.mean() + half)
    one = s[(s["price_bucket"] == "30-40")].iloc[0]  # one household: no interval
    assert one["households"] == 1 and math.isnan(one["norm_tput_ci95_lo"])


def test_summary_averages_repetitions_within_household_first(built):
    t, _ = built
    base = t.trials[(t.trials["direction"] == "uplink") & (t.trials["variant"] == "cubic")]
    a, b = base.iloc[0].copy(), base.iloc[1].copy()
    # household a: three repetitions 10, 20, 30 (mean 20); household b: one, 40
    rows = []
    for rep, val in ((1, 10.0), (2, 20.0), (3, 30.0)):
        r = a.copy()
        r["repetition"], r["self_delay_mean_ms"] = rep, val
        rows.append(r)
    b["self_delay_mean_ms"] = 40.0
    rows.append(b)
    s = summary(pd.DataFrame(rows)).iloc[0]
    assert s["households"] == 2 and s["trials"] == 4
    assert s["self_delay_mean_ms_mean"] == pytest.approx(30.0)  # not (10+20+30+40)/4 = 25
    assert s["self_delay_mean_ms_sd"] == pytest.approx(np.std([20.0, 40.0], ddof=1))


def copy_trial(d: Path, dst_root: Path) -> Path:
    """A fixture trial and its definition.json, in the raw layout under ``dst_root``."""
    dst = dst_root / d.relative_to(TRIALS)
    shutil.copytree(d, dst)
    defn = d.parents[3] / "definition.json"
    if not (dst.parents[3] / "definition.json").exists():
        shutil.copy2(defn, dst.parents[3] / "definition.json")
    return dst


def test_build_tables_lists_exclusions_with_their_reason(tmp_path):
    dirs = [copy_trial(d, tmp_path / "raw") for d in DIRS]
    text = raw_text(dirs[1], "receiver.log")
    cut = text[: text.index("Received ")]  # the tool failed: no transfer summary
    (dirs[1] / "receiver.log.gz").write_bytes(gzip.compress(cut.encode()))
    with pytest.warns(TrialSkipped):
        t = build_tables(dirs, tmp_path / "tables", repo=None)
    ex = read_table(tmp_path / "tables" / "exclusions.parquet", "exclusions")
    assert len(t.trials) == 4 and len(ex) == 1
    row = ex.iloc[0]
    assert row["trial_path"] == dirs[1].as_posix()
    assert row["reason"] == "receiver.log is truncated (no complete transfer summary)"
    assert row["definition_id"] == dirs[1].parents[3].name
    assert row["household_id"] == int(dirs[1].parts[-4]) and row["repetition"] == 1


def test_build_tables_stops_on_a_damaged_trial_and_writes_nothing(tmp_path):
    from latency_divide.analysis.integrity import DataIntegrityError

    dirs = [copy_trial(d, tmp_path / "raw") for d in DIRS]
    (dirs[0] / "ping.log.gz").unlink()
    raw = bytearray((dirs[2] / "queue.jsonl.gz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (dirs[2] / "queue.jsonl.gz").write_bytes(bytes(raw))
    meta = json.loads((dirs[3] / "meta.json").read_text())
    meta["definition"]["qfactor"] = 4.0
    (dirs[3] / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataIntegrityError) as e:
        build_tables(dirs, tmp_path / "tables", repo=None)
    msg = str(e.value)
    assert f"{dirs[0]}/ping.log: missing (nor ping.log.gz)" in msg
    assert f"{dirs[2]}/queue.jsonl.gz: not a readable gzip file" in msg
    assert f"{dirs[3]}/meta.json: records definition" in msg
    assert "dvc checkout --force" in msg
    assert not (tmp_path / "tables").exists()


def test_a_trial_in_the_wrong_definition_directory_is_refused(tmp_path):
    from latency_divide.analysis.integrity import check_trial

    d = copy_trial(DIRS[0], tmp_path / "raw")
    other = next(x for x in DIRS if x.parents[3].name != DIRS[0].parents[3].name)
    wrong = tmp_path / "raw" / other.parents[3].name / d.relative_to(d.parents[3])
    copy_trial(other, tmp_path / "raw")
    shutil.copytree(d, wrong)
    found = [str(f) for f in check_trial(wrong)]
    assert any("was not measured under" in f and "variant." in f for f in found), found


def test_missing_file_and_truncated_log_are_named_and_left_out(tmp_path):
    good = [copy_trial(d, tmp_path) for d in DIRS]
    (good[0] / "ping.log.gz").unlink()
    text = raw_text(good[1], "receiver.log")
    cut = text[: text.index("Received ")]  # the log ends before the transfer summary
    (good[1] / "receiver.log.gz").write_bytes(gzip.compress(cut.encode()))
    with pytest.warns(TrialSkipped) as rec:
        t = collect(good)
    msgs = [str(w.message) for w in rec]
    assert any(str(good[0]) in m and "missing file ping.log (or ping.log.gz)" in m for m in msgs)
    assert any(str(good[1]) in m and "receiver.log is truncated" in m for m in msgs)
    assert len(t.trials) == 3
    assert {e.path for e in t.skipped} == {str(good[0]), str(good[1])}
    assert str(good[0].as_posix()) not in set(t.trials["trial_path"])


def test_zero_valid_trials_is_an_error(tmp_path):
    d = copy_trial(DIRS[0], tmp_path)
    (d / "meta.json").write_text("{")
    with pytest.warns(TrialSkipped):
        with pytest.raises(NoValidTrials, match="no valid trials among 1 trial directory"):
            collect([d])
    with pytest.raises(NoValidTrials):
        collect([])


def test_no_idle_ping_is_invalid(tmp_path):
    d = copy_trial(DIRS[0], tmp_path)
    start = json.loads((d / "receiver.json").read_text())["start_unix"]
    lines = raw_text(d, "ping.log").splitlines(keepends=True)
    kept = [l for l in lines if not l.startswith("[") or float(l[1:l.index("]")]) >= start]
    (d / "ping.log.gz").unlink()
    (d / "ping.log").write_text("".join(kept))
    with pytest.raises(TrialInvalid, match="no ping reply before the transfer"):
        summarize_trial(d)


def test_duplicate_keys_rejected(tmp_path):
    a = copy_trial(DIRS[0], tmp_path / "a")
    b = copy_trial(DIRS[0], tmp_path / "b")
    with pytest.raises(LatencyDivideError, match="share household"):
        collect([a, b])


def test_cli_summarize_prints_the_table_row(built, capsys):
    t, _ = built
    d = DIRS[0]
    assert cli_main(["summarize", str(d), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    row = t.trials[t.trials["trial_path"] == d.as_posix()].iloc[0].to_dict()
    exp = row_jsonable(row)
    assert got.keys() == exp.keys()
    for k, v in exp.items():
        if isinstance(v, float):
            assert got[k] == pytest.approx(v)
        else:
            assert got[k] == v
    assert cli_main(["summarize", str(d)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^self_delay_mean_ms\s+\S+", text, re.M)


def test_cli_summarize_bad_dir(tmp_path, capsys):
    assert cli_main(["summarize", str(tmp_path / "nope")]) == 1
    assert "not a directory" in capsys.readouterr().err


def test_parallel_collect_gives_the_same_tables(tmp_path):
    dirs = [copy_trial(d, tmp_path) for d in DIRS]
    (dirs[2] / "queue.jsonl.gz").unlink()
    with pytest.warns(TrialSkipped, match="missing file queue.jsonl"):
        one = collect(dirs, jobs=1)
    with pytest.warns(TrialSkipped, match="missing file queue.jsonl"):
        two = collect(dirs, jobs=2)
    assert [e.path for e in two.skipped] == [str(dirs[2])]
    for name in ("trials", "ping", "queue", "throughput"):
        pd.testing.assert_frame_equal(getattr(one, name), getattr(two, name))


@pytest.mark.parametrize("mbit, cores, beyond", [(300, 2, True), (300, 4, False),
                                                 (108, 2, False), (300, None, False)])
def test_a_trial_beyond_the_host_it_ran_on_is_named(tmp_path, mbit, cores, beyond):
    """docs/emulation.md "Links beyond the host": from the trial's records (capacity, RTT, tool, window,
    and the host's cores in setup.json) the analysis names a link the host could not emulate
    even alone; a host with the cores for it, a slower link, or no record of the host: None."""
    from latency_divide.analysis.metrics import beyond_host_of
    from latency_divide.analysis.reader import Trial

    if cores is not None:
        (tmp_path / "setup.json").write_text(json.dumps({"host": {"cpu_count": cores}}))
    meta = {"capacity_kbps": mbit * 1000, "household": {"rtt_ms": 19.0},
            "tool": {"name": "tquic-perf", "window_bytes": 16 << 20},
            "definition": {"testbed": "local"}}
    trial = Trial(path=tmp_path, meta=meta, ping=None, queue=None, intervals=None,
                  received_bytes=0, duration_s=60.0, goodput_kbps=0.0)
    why = beyond_host_of(trial)
    assert (why is not None) == beyond
    if beyond:
        assert f"{mbit:.1f} Mbit/s" in why and f"{cores} core(s)" in why
