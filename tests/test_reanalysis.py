"""Re-analysis of the published data, exactly as the README tells a user to do it:

    .venv/bin/dvc pull
    .venv/bin/snakemake --cores 1 all

on a fresh clone of this working tree (its tracked and new files, committed into a throwaway
repository and cloned), pulling from the in-repo remote dvc-remote/. Trial execution is made
impossible (LATENCY_DIVIDE_FORBID_TRIALS): a regression that schedules a measurement fails the
job at once instead of starting hours of trials. Then: corrupted or incomplete pulled data
stops the analysis with the trial and the file named; a changed trial-shaping setting
schedules new trials and a code edit or an unrelated key none; dvc.lock is current.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import ROOT, VENV_BIN
from latency_divide.config import load_config
from latency_divide.trial import packs, rawio
from latency_divide.trial.sweep import trial_ids
from test_dvc import _env as dvc_env
from test_dvc import job_counts, run

# slow; measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]

DVC = str(VENV_BIN / "dvc")
SNAKEMAKE = str(VENV_BIN / "snakemake")
CLI = str(VENV_BIN / "latency-divide")
FIGURES = ["delay_tput", "self_delay", "timeseries", "divide"]
TABLES = ["trials", "summary", "exclusions", "timeseries/ping", "timeseries/queue",
          "timeseries/throughput", "households"]
# the reference run's trial definitions (cubic, copa-0.2, -0.5, -0.8; tests/test_definition.py)
REFERENCE_DEFINITIONS = ("def-7b4e62e9a6", "def-01a0987011", "def-8cfa77f619", "def-16ce5f986b")
# what the published config's trials recorded as their configuration's hash
PUBLISHED_CONFIG_HASH = "b43589888ee2296447ec199076f3325ceec02854d3274710852fad0d5fd707dd"


def _env(tmp: Path) -> dict[str, str]:
    return {**dvc_env(tmp), "LATENCY_DIVIDE_FORBID_TRIALS": "1"}


def fresh_clone(tmp: Path, env) -> Path:
    """A clone of a repository holding exactly this working tree's files (tracked, and new
    ones git does not ignore), with .venv linked in as setup would have made it. A working
    tree that is its commit (CI's fresh clone) is cloned itself: copying it and committing
    the copy took 12 s of which 10.5 s of CPU, the clone 0.8 s (2026-12-07, issue 59)."""
    (tmp / "gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    clone = tmp / "clone"
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    if not changed:
        run(["git", "clone", "-q", str(ROOT), str(clone)], tmp, env)
        (clone / ".venv").symlink_to(ROOT / ".venv")
        return clone
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    origin = tmp / "origin"
    for f in (x.decode() for x in files if x):
        src = ROOT / f
        if not src.is_file():  # deleted in the working tree
            continue
        dst = origin / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    run(["git", "init", "-q"], origin, env)
    run(["git", "add", "-A"], origin, env)
    run(["git", "commit", "-q", "-m", "working tree"], origin, env)
    run(["git", "clone", "-q", str(origin), str(clone)], tmp, env)
    (clone / ".venv").symlink_to(ROOT / ".venv")
    return clone


def raw_state(clone: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under results/raw: (inode, mtime, md5)."""
    import hashlib

    out = {}
    for p in sorted((clone / "results/raw").rglob("*")):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(clone).as_posix()] = (st.st_ino, st.st_mtime_ns,
                                                    hashlib.md5(p.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module")
def pulled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reanalysis")
    env = _env(tmp)
    clone = fresh_clone(tmp, env)
    run([DVC, "pull"], clone, env)  # the README's first command, as typed
    return {"clone": clone, "env": env, "tmp": tmp}


#: The population runs (docs/population.md), measured over several sessions and published in
#: parts as they go: tquic-perf's and mvfst tperf's, at 2 x BDP and with measured buffers (the
#: last uplinks only: 1152 trials, the others 2304)
POPULATION_CONFIGS = ("population.yaml", "population-mvfst.yaml", "population-buffers.yaml",
                      "population-mvfst-buffers.yaml")
#: The buffer-depth sweep (issue 41, step 3; docs/population.md): 40 households' uplinks x
#: cubic, bbr, copa-0.04 at 100, 200, 500 and 1000 ms of queue, per tool (120 trials a step)
DEPTH_MS = (100, 200, 500, 1000)
DEPTH_CONFIGS = tuple(f"buffer-depth{t}-{n}ms.yaml" for t in ("", "-mvfst") for n in DEPTH_MS)
#: Steps not published yet (none of their trials): none since 2026-11-28 (tperf's 1000 ms, the
#: last, is published); a step measured later goes here until it is
DEPTH_UNPUBLISHED: frozenset[str] = frozenset()
#: Each sweep's tool: its population runs (2 x BDP, measured buffers) and its fixed depths
SWEEP_TOOLS = {"tquic-perf": ("population.yaml", "population-buffers.yaml"),
               "tperf": ("population-mvfst.yaml", "population-mvfst-buffers.yaml")}
SWEEP_DEPTHS = {"tquic-perf": DEPTH_CONFIGS[:4], "tperf": DEPTH_CONFIGS[4:]}
#: The live broadcasts (issue 58, docs/live.md), each published whole: 40 uplinks behind a
#: policer (4 of them three times), 5 behind the 2 x BDP FIFO and the population's 240 behind it
#: and behind the panel's measured buffers (24 of them three times; live-traces' 20 are among
#: them), x Cubic, BBR, Copa 0.04 and 0.5
LIVE_CONFIGS = {"live-policed.yaml": 192, "live-traces.yaml": 20, "live.yaml": 1152,
                "live-buffers.yaml": 1152}
#: The live runs set beside Facebook's table (analysis.answer: the pair, the policed run
#: beside it) and their households
LIVE_ANSWER = {"live": 240, "live-buffers": 240, "live-policed": 40}
#: Facebook's per-broadcast metrics (the trials table's live columns): every broadcast has them
LIVE_COLUMNS = ("goodput_fb_kbps", "app_rtt_mean_ms", "app_rtt_inband_mean_ms",
                "transport_rtt_mean_ms", "rtx_overhead", "bitrate_mean_kbps", "frames_produced",
                "frames_dropped_pct", "frame_latency_p50_ms")
#: The tools whose sweep is complete (buffer_depth.parquet has their rows)
SWEPT = {t for t, cs in SWEEP_DEPTHS.items() if not DEPTH_UNPUBLISHED & set(cs)}
#: Published trials whose health verdict failed at all three attempts, kept and left out of the
#: analysis with the reason (exclusions.parquet): the delay line released late (1.1-4.5 ms at
#: p99) on 0.7-78 Mbit/s uplinks while a full re-parse of the published packs ran beside the
#: sweep on 2026-11-27 (docs/population.md)
KEPT_FAILED = {"population-buffers.yaml": {("243236", "uplink", "copa-0.04", "rep2")},
               "buffer-depth-200ms.yaml": {("1167", "uplink", "copa-0.04", "rep1")},
               "buffer-depth-1000ms.yaml": {("26604", "uplink", "cubic", "rep1")}}
#: Of those, the ones today's bounds pass (in the link's own units, trial.health; issue 57):
#: the analysis judges by today's bounds and keeps them (`latency-divide rejudge` lists them)
REJUDGED_PASS = {"population-buffers.yaml": {("243236", "uplink", "copa-0.04", "rep2")},
                 "buffer-depth-200ms.yaml": {("1167", "uplink", "copa-0.04", "rep1")}}


def left_out_failed(config: str) -> set:
    """The trials of ``config`` the analysis leaves out for a failed verdict."""
    return KEPT_FAILED.get(config, set()) - REJUDGED_PASS.get(config, set())

#: Published definitions that no config names any more -> their trials: tperf's BBR run
#: unpaced, which mvfst ran as Cubic (docs/population.md; the config's BBR is paced now)
RETIRED = {"def-f1f96f89f2": 454}


def total(config: str) -> int:
    """How many trials a population run (or a buffer-depth step) has when complete."""
    return len(population_trials(config))


@functools.cache
def population_trials(config: str = "population.yaml") -> frozenset[tuple]:
    """(definition, household, direction, variant, rep) of a population run's trials, computed
    once per config for the module (published_trials asks for all twelve at every call)."""
    from latency_divide.config import load_config

    return frozenset((d, str(h), dr, v, f"rep{r}") for d, h, dr, v, r in
                     trial_ids(load_config(ROOT / "config" / config)))


def on_disk(clone: Path) -> list[Path]:
    """Every trial under results/raw: loose (its meta.json) or in a pack (its index)."""
    raw = clone / "results/raw"
    loose = {p.parent for p in raw.glob("def-*/*/*/*/rep*/meta.json")}
    return sorted(loose | {d / k for d in raw.glob("def-*") for k in packs.trials_in(d)})


def published_trials(clone: Path, population: str | None = None,
                     every: list[Path] | None = None) -> list[Path]:
    """Published trials: the paper's run and its other companions, or (``population``: its
    config file) a population run's (or a buffer-depth step's) trials published so far, among
    ``every`` (on_disk(clone), 0.3 s a listing of 12,500 trials, if not given)."""
    pop = {c: {t[0] for t in population_trials(c)}
           for c in (*POPULATION_CONFIGS, *DEPTH_CONFIGS, *LIVE_CONFIGS)}
    mine = pop[population] if population else set()
    others = set().union(*pop.values(), RETIRED)
    return [t for t in (on_disk(clone) if every is None else every)
            if (t.parts[-5] in mine if population else t.parts[-5] not in others)]


@functools.cache
def meta_facts(trial: Path) -> tuple[int, str | None]:
    """(format_version, health verdict) of a published trial's own meta.json, read once for the
    module (read_meta_facts reads many in their packs' order)."""
    meta = json.loads(rawio.read_text(trial, "meta.json"))
    return meta["format_version"], (meta.get("health") or {}).get("verdict")


def read_meta_facts(trials: list[Path]) -> list[tuple[int, str | None]]:
    """meta_facts of ``trials``, read pack by pack: each pack is decompressed once. In path order
    a household's repetitions lie in several packs of a definition, and the reader's cache of
    the last two packs decompressed one again every few trials (2 minutes for these checks)."""
    def pack_order(t: Path) -> tuple[str, str]:
        p = rawio.packed(t)
        return (str(p.archive) if p is not None else "", str(t))

    for t in sorted(trials, key=pack_order):
        meta_facts(t)
    return [meta_facts(t) for t in trials]


def pack_of(definition: str) -> str:
    """The first pack of a published definition (relative, without its suffixes)."""
    return f"results/raw/{definition}/packs/pack-0001"


def test_dvc_status_lists_no_changed_dependency(pulled):
    """dvc.lock was written for this code, config and data (`make lock` re-records it)."""
    p = run([DVC, "status", "--json"], pulled["clone"], pulled["env"])
    status = json.loads(p.stdout or "{}")
    changed = {stage: [e for e in entries if isinstance(e, dict) and "changed deps" in e]
               for stage, entries in status.items()}
    changed = {k: v for k, v in changed.items() if v}
    assert not changed, f"dvc.lock is stale (run `make lock` and commit dvc.lock): {changed}"


def test_pull_then_all_measures_nothing_and_rebuilds_every_table_and_figure(pulled):
    clone, env = pulled["clone"], pulled["env"]
    before = raw_state(clone)
    every = on_disk(clone)  # listed once: nothing below adds, moves or removes a trial
    trials = published_trials(clone, every=every)
    # the reference run (304), the fast-links run (224 more), mvfst's tperf: the paper's sweep
    # (304) and its fast links unbound (144 more); the fast links unbound measured again with
    # health checks (368 more); the paper's sweep measured again (304)
    assert len(trials) == 976 + 368 + 304
    # published data is packed (docs/data.md "Packs"): no trial has a directory of its own
    assert not list((clone / "results/raw").glob("def-*/*/*/*/rep*/meta.json"))
    # the population study published so far (docs/population.md): its own trials, in format 4,
    # every verdict passing but on the links beyond the host (measured once, kept, left out);
    # analysed by `snakemake all` once all its trials are published. A run published whole is
    # checked in its tables below (_population_analysed: every trial in its trials table or
    # its exclusions, each with its reason, one pack's meta.json files read for the format); one
    # in part here, from each trial's own meta.json (its packs decompressed: about 1 s a 1,000)
    published = {}
    for c in POPULATION_CONFIGS:
        pop = published_trials(clone, population=c, every=every)
        assert {t.relative_to(clone / "results/raw").parts for t in pop} <= population_trials(c)
        published[c] = len(pop)
        if len(pop) == total(c):
            continue
        facts = read_meta_facts(pop)
        assert {version for version, _ in facts} <= {4}
        assert all(verdict == "pass" for t, (_, verdict) in zip(pop, facts)
                   if not ((int(t.parts[-4]), t.parts[-2]) in BEYOND_HOST[c]
                           and t.parts[-3] == "downlink")
                   and t.parts[-4:] not in KEPT_FAILED.get(c, set()))
    # the buffer-depth sweep: each step complete (or not published at all), every verdict
    # passing but those kept and listed
    for c in DEPTH_CONFIGS:
        depth = published_trials(clone, population=c, every=every)
        assert len(depth) == (0 if c in DEPTH_UNPUBLISHED else 120), c
        failed = {t.parts[-4:] for t, (_, verdict) in zip(depth, read_meta_facts(depth))
                  if verdict != "pass"}
        assert failed == KEPT_FAILED.get(c, set()), (c, failed)
    # the retired definitions stay published, each of their trials with the reason it was
    # retired in its own log (the sender ran Cubic, not BBR)
    from latency_divide.parsers.tool import cc_fallback
    for d, n in RETIRED.items():
        old = [t for t in every if t.parts[-5] == d]
        assert len(old) == n
        old.sort(key=lambda t: str(rawio.packed(t).archive))  # each pack decompressed once
        assert all(cc_fallback(rawio.read_text(t, "sender.log")) for t in old)
    # the README's second command, as typed (the env forbids trial jobs: one would fail)
    p = run([SNAKEMAKE, "--cores", "1", "all"], clone, env)
    log = p.stdout + p.stderr
    jobs = job_counts(log)
    assert "trial" not in jobs, jobs
    assert jobs.get("analysis_tables") == 1 and jobs.get("figures") == 1, jobs
    # the published companion data sets (config: companions) are analysed beside the run, all
    # in one tables job and one figures job (one start-up and one import for all)
    assert jobs.get("companion_tables") == 1 and jobs.get("companion_figures") == 1, jobs
    # what Snakemake records beside each output stays small: no input checksums (the
    # workflow profile), the companions' trials in the tables job's params as digests (with
    # the lists and the checksums, 880 kB records and 15 s of this command hashing inputs)
    records = list((clone / ".snakemake/metadata").iterdir())
    assert records and max(r.stat().st_size for r in records) < 150_000
    assert not any(json.loads(r.read_text()).get("input_checksums") for r in records)
    for c, n in published.items():  # named, and left out: no table of a half-published set
        name = c.removesuffix(".yaml")
        if n < total(c):
            assert not (clone / f"results/companions/{name}").exists()
            assert (f"companion {name} (config/{c}) left out: {total(c) - n} of its {total(c)} "
                    "trials are not on disk") in log, log[-3000:]
        else:
            assert f"companion {name} " not in log, log[-3000:]
    assert "refusing to measure" not in log
    assert raw_state(clone) == before  # no file under results/raw deleted, rewritten or added
    for t in TABLES:
        assert (clone / f"results/tables/{t}.parquet").stat().st_size > 0, t
    for f in FIGURES:
        for ext in ("pdf", "png", "provenance.json"):
            assert (clone / f"results/figures/{f}.{ext}").stat().st_size > 0
    # the buffer-depth sweep: each step analysed as a companion, and the sweep's table and
    # figure (docs/population.md "Buffer depth as a factor: the sweep")
    for c in DEPTH_CONFIGS:
        step = clone / f"results/companions/{c.removesuffix('.yaml')}"
        if c in DEPTH_UNPUBLISHED:  # nothing of it on disk: nothing built, nothing measured
            assert not step.exists(), c
            continue
        dt = pq.read_table(step / "tables/trials.parquet")
        assert dt.num_rows == 120 - len(left_out_failed(c)), c
        # a step's figure is buffer_depth: its config draws none of its own (figures.draw)
        assert not (step / "figures").exists()
    for tool, depths in SWEEP_DEPTHS.items():  # a sweep in part: left out, its lacking named
        lacking = [c.removesuffix(".yaml") for c in depths if c in DEPTH_UNPUBLISHED]
        assert (f"buffer_depth: {tool}'s sweep left out: companion(s) {', '.join(lacking)} "
                "not all on disk" in log) == (tool not in SWEPT), (tool, log[-3000:])
    for ext in ("pdf", "png", "provenance.json"):
        assert (clone / f"results/figures/buffer_depth.{ext}").stat().st_size > 0
    for c, n in LIVE_CONFIGS.items():  # the live broadcasts: every one healthy, every metric
        # every trial of it is published (live-traces' definitions are live.yaml's, whose
        # other trials may be published too)
        on = {t.relative_to(clone / "results/raw").parts
              for t in published_trials(clone, population=c, every=every)}
        assert population_trials(c) <= on and total(c) == n, c
        lt = pq.read_table(clone / f"results/companions/{c.removesuffix('.yaml')}/tables/"
                           "trials.parquet").to_pandas()
        assert len(lt) == n and (lt["health_verdict"] == "pass").all(), c
        assert set(lt["live_abr"]) == {"rate"} and lt["broadcast_s"].between(170, 200).all(), c
        for col in LIVE_COLUMNS:
            assert lt[col].notna().all(), (c, col)
        policed = load_config(ROOT / "config" / c).buffer_model == "policed-5ms"
        assert lt["policer_drops"].notna().all() == policed, c
    bd = pq.read_table(clone / "results/tables/buffer_depth.parquet").to_pandas()
    assert set(bd["tool"]) == SWEPT  # every complete sweep (docs/population.md)
    for tool in SWEPT:
        buffers = SWEEP_TOOLS[tool][1]
        measured = {"measured (mba-2014)"} if published[buffers] == total(buffers) else set()
        steps = {"2 x BDP", "100 ms", "200 ms", "500 ms", "1000 ms"} | measured
        assert set(bd.loc[bd["tool"] == tool, "step"]) == steps, tool
    assert set(bd["variant"]) == {"copa-0.04", "bbr"} and (bd["n_households"] >= 39).all()
    tr = pq.read_table(clone / "results/tables/trials.parquet").to_pandas()
    assert len(tr) == 304 and tr["definition_id"].nunique() == 4
    assert (tr["config_hash"] == PUBLISHED_CONFIG_HASH).all()
    assert pq.read_table(clone / "results/tables/exclusions.parquet").num_rows == 0
    fast = clone / "results/companions/fast-links"
    ft = pq.read_table(fast / "tables/trials.parquet").to_pandas()
    # 28 households x 2 directions x 8 variants: 224 reference trials reused, 224 unbound
    assert len(ft) == 448 and ft["definition_id"].nunique() == 8
    assert sorted(ft["window_bytes"].unique()) == [65536, 1048576]
    for f in FIGURES:
        assert (fast / f"figures/{f}.pdf").stat().st_size > 0
    mv = pq.read_table(clone / "results/companions/mvfst/tables/trials.parquet").to_pandas()
    assert len(mv) == 304 and mv["definition_id"].nunique() == 4 and (mv["tool"] == "tperf").all()
    checked = pq.read_table(clone / "results/companions/fast-links-checked/tables/"
                            "trials.parquet").to_pandas()
    assert len(checked) == 368 and set(checked["repetition"]) == {2, 3, 4}
    assert (checked["health_verdict"] == "pass").all()
    assert set(checked["definition_id"]) == set(
        ft.loc[ft["window_bytes"] == 1048576, "definition_id"])
    mvf = pq.read_table(clone / "results/companions/mvfst-fast-links/tables/trials.parquet")
    assert mvf.num_rows == 288 and len(set(mvf.column("definition_id").to_pylist())) == 8
    # the paper's definitions measured again with today's instrument: repetition 2, all healthy
    rr = pq.read_table(clone / "results/companions/paper-rerun/tables/trials.parquet").to_pandas()
    assert len(rr) == 304 and set(rr["repetition"]) == {2}
    assert set(rr["definition_id"]) == set(tr["definition_id"])
    assert (rr["health_verdict"] == "pass").all()
    for c, n in published.items():
        if n == total(c):
            _population_analysed(clone, env, c, every)
    # Facebook's table beside 2 x BDP and the measured buffers (docs/population.md "The answer,
    # side by side"), once both runs of a tool are complete
    answer = clone / "results/tables/buffers_answer"
    answered = {tool for tool, (_, b) in SWEEP_TOOLS.items() if published[b] == total(b)}
    if answered:
        ans = pq.read_table(answer.with_suffix(".parquet")).to_pandas()
        assert set(ans["tool"]) == answered
        md = answer.with_suffix(".md").read_text()
        for tool in answered:  # 12 rows per buffer model and direction both runs have
            mine = ans[(ans["tool"] == tool) & (ans["app"] == "bulk")]
            # the directions both of its runs measured (tperf's measured buffers: uplinks)
            directions = set.intersection(*(set(load_config(ROOT / "config" / c).directions)
                                            for c in SWEEP_TOOLS[tool]))
            assert set(mine["direction"]) == directions, tool
            assert len(mine) == 2 * len(directions) * 12, tool
            assert set(mine["buffer_model"]) == {"qfactor", "mba-2014"}
            assert (mine["n_households"] >= 200).all(), tool
            assert f"## {tool}, uplinks" in md
        assert "| transport RTT | p90 | copa | -38 % |" in md
        # the live runs beside them, uplinks (Facebook's 12 rows and its 4 RTX rows each)
        live = ans[ans["app"] == "live"]
        assert set(live["tool"]) == {"tquic-perf"} and set(live["direction"]) == {"uplink"}
        assert live.groupby("run")["n_households"].max().to_dict() == LIVE_ANSWER
        assert live.groupby("run").size().to_dict() == dict.fromkeys(LIVE_ANSWER, 16)
        assert live.loc[live["facebook"].notna(), "change"].notna().all()
        assert ("| live 2 x BDP [95 % CI] | live mba-2014 [95 % CI] | live policed-5ms [95 % CI] |"
                in md)
    else:
        assert not answer.with_suffix(".parquet").exists()
    # the same command again: nothing to do
    again = run([SNAKEMAKE, "--cores", "1", "all"], clone, env)
    assert "Nothing to be done" in again.stdout + again.stderr
    _a_sweep_in_part_is_named(clone, env)


def _a_sweep_in_part_is_named(clone: Path, env: dict) -> None:
    """With one step of a complete sweep partly on disk (a definition of tperf's 1000 ms step
    moved aside), `snakemake -n all` leaves that tool's sweep out and names the step; the
    definition is put back afterwards."""
    step = "buffer-depth-mvfst-1000ms"
    if f"{step}.yaml" in DEPTH_UNPUBLISHED:
        return  # the partial case is the published state itself, checked above
    definition = min(t[0] for t in population_trials(f"{step}.yaml"))
    raw = clone / "results/raw" / definition
    aside = clone / "results" / f"aside-{definition}"
    raw.rename(aside)
    try:
        p = run([SNAKEMAKE, "-n", "--cores", "1", "all"], clone, env)
    finally:
        aside.rename(raw)
    assert (f"buffer_depth: tperf's sweep left out: companion(s) {step} not all on disk"
            in p.stdout + p.stderr), (p.stdout + p.stderr)[-3000:]


#: The downlinks beyond a 2-core host for tperf only: 107.2, 108.2, 112.0 and 139.6 Mbit/s.
TPERF_ONLY = {6210, 27316, 799192, 798416}
#: The population's downlink trials beyond a 2-core host (ops.admission.beyond_host, by the cost
#: model of the instrument that measured each trial), per config, as (household, variant): with
#: tquic-perf 354.5 Mbit/s, and Copa delta 0.5 on 299.7 (176.8 and 236.5 were beyond instrument
#: v1 and were measured again with v2, which holds them; 299.7 with v3 for the variants checked
#: on it: their trials supersede the old ones, docs/data.md "Superseding a published trial");
#: with tperf, whose cost per Mbit/s is taken as 1.5 times tquic-perf's, all four and also the
#: 107-150 Mbit/s ones.
VARIANTS = ("cubic", "bbr", "copa-0.04", "copa-0.5")


def _every_variant(households: set[int]) -> set[tuple[int, str]]:
    return {(h, v) for h in households for v in VARIANTS}


BEYOND_HOST = {"population.yaml": _every_variant({676068}) | {(797442, "copa-0.5")},
               "population-mvfst.yaml": _every_variant({798212, 657938, 797442, 676068}
                                                       | TPERF_ONLY),
               "population-buffers.yaml": _every_variant({676068}) | {(797442, "copa-0.5")},
               "population-mvfst-buffers.yaml": set()}  # uplinks only: all within the host
#: Variants run without a transport-RTT source: tperf's Copa delta 0.5 (its qlog would bend
#: it, docs/population.md), so no transport RTT and no loss rate.
NO_QLOG = {"population.yaml": set(), "population-mvfst.yaml": {"copa-0.5"},
           "population-buffers.yaml": set(), "population-mvfst-buffers.yaml": {"copa-0.5"}}


def _population_analysed(clone: Path, env, config: str, every: list[Path]) -> None:
    """A population run (docs/population.md): 240 households x its directions x 4 variants,
    24 of them three times; every trial healthy, with its loss rate and transport RTT where
    its sender reports them; its percentile table and figures, and the side-by-side with
    Facebook's numbers."""
    name = config.removesuffix(".yaml")
    pop = clone / f"results/companions/{name}"
    pt = pq.read_table(pop / "tables/trials.parquet").to_pandas()
    ex = pq.read_table(pop / "tables/exclusions.parquet").to_pandas()
    # every trial is on disk; the only ones left out are the downlinks that a 2-core host
    # cannot emulate even alone (README "Links beyond the host"), by household and variant
    directions = set(load_config(ROOT / "config" / config).directions)
    assert len(pt) + len(ex) == total(config) == 240 * len(directions) * 4 + 24 * 2 * len(
        directions) * 4 and pt["household_id"].nunique() == 240
    assert set(pt["direction"]) == directions
    beyond = BEYOND_HOST[config]
    kept = left_out_failed(config)  # failed at every attempt and today, kept and listed
    is_kept = [(str(h), d, v, f"rep{r}") in kept for h, d, v, r in
               zip(ex["household_id"], ex["direction"], ex["variant"], ex["repetition"])]
    assert sum(is_kept) == len(kept), name
    host = ex.loc[[not k for k in is_kept]]  # (.loc: rows, also when none is excluded)
    assert set(zip(host["household_id"], host["variant"])) == beyond, name
    assert len(host) == len(beyond), name
    assert set(host["direction"]) <= {"downlink"}
    assert ex["reason"].str.startswith(("beyond the host it ran on: ",
                                        "emulation health failed: ")).all()
    assert pt["definition_id"].nunique() == 4
    assert set(pt["repetition"]) == {1, 2, 3}
    assert (pt["health_verdict"] == "pass").all()
    measured = pt[~pt["variant"].isin(NO_QLOG[config])]
    assert measured["sender_loss_pct"].notna().all()
    assert measured["transport_rtt_samples"].gt(0).all()
    assert pt.loc[pt["variant"].isin(NO_QLOG[config]), "transport_rtt_samples"].isna().all()
    # the format, from the trials of one pack of a definition (every trial's columns above are
    # format 4's; reading all 38 packs of it cost this test 31 s, on the shared phase's longest
    # path: issue 59)
    one = [t for t in every if t.parts[-5] == pt["definition_id"].iloc[0]]
    arc = {t: getattr(rawio.packed(t), "archive", None) for t in one}
    one = [t for t in one if arc[t] == arc[one[0]]]
    assert len(one) > 1 and {meta_facts(t)[0] for t in one} == {4}
    pct = pq.read_table(pop / "tables/percentiles.parquet").to_pandas()
    assert set(pct["variant"]) == {"cubic", "bbr", "copa-0.04", "copa-0.5"}
    for f in ("percentiles", "percentiles_buckets"):
        assert (pop / f"figures/{f}.pdf").stat().st_size > 0
    table = run([CLI, "percentiles", f"results/companions/{name}/tables/percentiles.parquet"],
                clone, env).stdout
    assert table.count("\n") == 14 and "| transport RTT | p90 | copa (copa-0.04) | -38 % |" in table


def test_figures_name_each_trials_definition_and_config(pulled):
    clone, env = pulled["clone"], pulled["env"]
    if not (clone / "results/figures/delay_tput.provenance.json").exists():
        run([SNAKEMAKE, "--cores", "1", "all"], clone, env)
    side = json.loads((clone / "results/figures/delay_tput.provenance.json").read_text())
    assert "config_hash" not in side  # no run-wide hash of the config that drew the figure
    defs = side["definitions"]
    assert len(defs) == 4
    assert {d["variant"]["delta"] for d in defs.values()} == {None, 0.2, 0.5, 0.8}
    assert all(d["qfactor"] == 2.0 and d["trial"]["duration_s"] == 60.0
               and d["tool"]["window_bytes"] == 65536 for d in defs.values())
    assert len(side["trials"]) == 304
    for t in side["trials"]:
        assert t["path"].startswith(f"results/raw/{t['definition_id']}/{t['household_id']}/")
        assert t["config_hash"] == PUBLISHED_CONFIG_HASH
    out = run([CLI, "trace", "results/figures/delay_tput.pdf"], clone, env).stdout
    assert "definitions:  4" in out and "copa delta=0.8; tquic-perf window=65536" in out
    assert re.search(r"results/raw/def-[0-9a-f]{10}/11406/uplink/cubic/rep1 .*def-[0-9a-f]{10}, "
                     r"config b43589888ee2", out), out


def _config(clone: Path) -> dict:
    return yaml.safe_load((clone / "config/config.yaml").read_text())


def _dry_run(clone: Path, env, cfg: dict | None = None) -> dict[str, int]:
    argv = [SNAKEMAKE, "-n", "--cores", "1", "all"]
    if cfg is not None:
        (clone / "alt.yaml").write_text(yaml.safe_dump(cfg))
        argv += ["--configfile", "alt.yaml"]
    p = run(argv, clone, env)
    return job_counts(p.stdout + p.stderr)


def _changed(cfg: dict, key: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    node = cfg
    *parents, leaf = key.split(".")
    for k in parents:
        node = node[k]
    node[leaf] = value
    return cfg


def test_a_trial_shaping_change_schedules_every_affected_trial_anew(pulled):
    """Snakemake schedules all 304 trials anew after a qfactor change (a dry run, nothing
    measured or touched); every other setting that shapes a trial does the same by the same
    means: it changes every trial's definition id, the first part of its path."""
    clone, env = pulled["clone"], pulled["env"]
    cfg = _config(clone)
    before = raw_state(clone)
    assert _dry_run(clone, env, _changed(cfg, "qfactor", 3)).get("trial") == 304
    assert raw_state(clone) == before
    published = {t[0] for t in trial_ids(load_config(cfg))}
    for key, value in [("trial.duration_s", 30), ("tool.window_bytes", 1 << 22),
                       ("trial.ping_interval_s", 0.1), ("testbed.delay", "delayline"),
                       ("tool.args", ["-x=1"])]:
        ids = [t[0] for t in trial_ids(load_config(_changed(cfg, key, value)))]
        assert len(ids) == 304 and not published & set(ids), key


def test_a_delta_change_reruns_that_variant_only(pulled):
    cfg = _config(pulled["clone"])
    cfg["variants"][2]["delta"] = 0.6  # copa-0.5 now means delta 0.6: 76 new trials
    assert _dry_run(pulled["clone"], pulled["env"], cfg).get("trial") == 76


def test_code_edits_figure_options_and_unrelated_keys_schedule_no_trial(pulled):
    clone, env = pulled["clone"], pulled["env"]
    cfg = _config(clone)
    cfg["trial"]["retries"] = 5
    cfg["figures"]["timeseries_household"] = 12251
    cfg["tool"]["path"] = "target/release/tquic-perf"
    for f in ("rules/analysis.smk", "rules/trials.smk", "workflow/scripts/run_trial.py"):
        with open(clone / f, "a") as fh:
            fh.write("\n# an edit\n")
    try:
        jobs = _dry_run(clone, env, cfg)
        assert "trial" not in jobs, jobs
    finally:
        run(["git", "checkout", "--", "."], clone, env)


def test_fewer_households_rebuild_the_tables_from_pulled_trials_only(pulled):
    clone, env = pulled["clone"], pulled["env"]
    if not (clone / "results/tables/trials.parquet").exists():
        run([SNAKEMAKE, "--cores", "1", "all"], clone, env)
    cfg = _config(clone)
    cfg["households"]["buckets"] = cfg["households"]["buckets"][:1]  # the $0-30 bucket
    jobs = _dry_run(clone, env, cfg)
    assert "trial" not in jobs, jobs
    assert jobs.get("analysis_tables") == 1 and jobs.get("households_table") == 1, jobs


def _analysis_fails(clone: Path, env, *needles: str) -> str:
    shutil.rmtree(clone / "results/tables", ignore_errors=True)
    shutil.rmtree(clone / "results/figures", ignore_errors=True)
    p = run([SNAKEMAKE, "--cores", "1", "all"], clone, env, check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    for n in needles:
        assert n in out, f"{n!r} not in the output:\n{out[-3000:]}"
    assert "dvc checkout --force" in out and "dvc pull --force" in out
    assert not (clone / "results/tables/trials.parquet").exists()
    assert not (clone / "results/tables/exclusions.parquet").exists()
    assert "trial" not in job_counts(out)
    return out


def _analysed(clone: Path, env) -> None:
    """The pulled data analysed (test_pull_then_all_... does it when the module runs whole)."""
    if not all((clone / f"results/companions/{c}/tables/trials.parquet").exists()
               for c in ("fast-links", "fast-links-checked", "mvfst", "mvfst-fast-links",
                         "paper-rerun")):
        run([SNAKEMAKE, "--cores", "1", "all"], clone, env)


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` anew (a new file: a link into DVC's cache is left as it was)."""
    path.unlink()
    path.write_bytes(data)


@pytest.fixture
def companions_kept(pulled):
    """results/companions as it was before the test, put back after it: a failed `all` deletes
    the companion tables (its failed job's outputs), and the next test to need them analysed
    everything again (70 s)."""
    comp = pulled["clone"] / "results/companions"
    kept = pulled["tmp"] / "companions-kept"
    shutil.rmtree(kept, ignore_errors=True)
    if comp.is_dir():
        shutil.copytree(comp, kept, symlinks=True)  # (copy2: the same mtimes)
    yield
    if kept.is_dir():
        shutil.rmtree(comp, ignore_errors=True)
        kept.rename(comp)


def test_corrupted_or_incomplete_pulled_data_stops_the_analysis_with_a_name(pulled,
                                                                           companions_kept):
    clone, env = pulled["clone"], pulled["env"]
    _analysed(clone, env)
    a, b, c = (pack_of(d) for d in REFERENCE_DEFINITIONS[:3])
    # three problems at once, each named in the one failed run (the check reports every
    # finding before it stops): 1. a parsed cache edited after the pull (every capacity
    # doubled: the tables read the cache instead of the logs), 2. an archive with 64 flipped
    # bytes, 3. a deleted archive (its index keeps its trials packed: named, never measured)
    saved = {f: (clone / f).read_bytes() for f in (f"{a}.trials.parquet", f"{b}.tar.xz",
                                                  f"{c}.tar.xz")}
    t = pq.read_table(clone / f"{a}.trials.parquet")
    i = t.column_names.index("capacity_kbps")
    t = t.set_column(i, "capacity_kbps", pc.multiply(t.column(i), 2))
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    _replace(clone / f"{a}.trials.parquet", sink.getvalue().to_pybytes())
    data = bytearray(saved[f"{b}.tar.xz"])
    for i in range(64):
        data[len(data) // 2 + i] ^= 0xFF
    _replace(clone / f"{b}.tar.xz", bytes(data))
    (clone / f"{c}.tar.xz").unlink()
    _analysis_fails(clone, env, f"{a}.trials.parquet: modified",
                    f"{b}.tar.xz: modified",
                    f"{b}.tar.xz: its sha256 or size is not the one its index records",
                    f"{c}.tar.xz: missing")
    for f, data in saved.items():  # as pulled again (the repair `dvc checkout` is checked below)
        _replace(clone / f, data) if (clone / f).exists() else (clone / f).write_bytes(data)
    # 4. a companion's own pack (mvfst): its analysis stops, naming it; no table of it
    mvfst = sorted({t[0] for t in trial_ids(load_config(clone / "config/mvfst.yaml"))})
    d = pack_of(next(m for m in mvfst if (clone / f"{pack_of(m)}.tar.xz").exists()))
    (clone / f"{d}.tar.xz").unlink()
    table = clone / "results/companions/mvfst/tables/trials.parquet"
    aside = table.with_name("trials.parquet.aside")
    if table.exists():  # (the failed `all` above may have removed it already)
        table.rename(aside)  # its table is to be rebuilt (put back afterwards, as it was)
    try:
        p = run([SNAKEMAKE, "--cores", "1", table.relative_to(clone).as_posix()], clone, env,
                check=False)
        out = p.stdout + p.stderr
        assert p.returncode != 0 and f"{d}.tar.xz: missing" in out, out[-3000:]
        assert "trial" not in job_counts(out)
        assert not table.exists(), "a companion with a missing file was analysed"
    finally:
        if aside.exists():
            aside.rename(table)
    # 5. an index deleted: its trials cannot be known, and none is scheduled for measurement:
    # the workflow stops at once, naming the archive and the repair
    (clone / f"{a}.json.xz").unlink()
    p = run([SNAKEMAKE, "-n", "--cores", "1", "all"], clone, env, check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and f"{a}.tar.xz: an archive without its index" in out, out[-3000:]
    assert "dvc checkout --force" in out and "trial" not in job_counts(out)
    # the repair the messages name works: every file as published again, and the trials the
    # analysis refused pass its check (a clean pull's `all` is test_pull_then_all_...)
    run([DVC, "checkout", "--force"], clone, env)
    assert "verified:   OK:" in run([CLI, "verify"], clone, env).stdout
    from latency_divide.analysis.integrity import check_trials

    refused = [clone / f"results/raw/{p.split('/')[2]}" / k for p in (a, b, c, d)
               for k in sorted(packs.trials_in(clone / p.rsplit("/", 2)[0]))[:3]]
    assert len(refused) == 12 and check_trials(refused, clone) == []


def test_a_trial_measured_here_at_a_published_path_is_not_held_to_the_pins(pulled):
    """A fresh clone that never pulled measures the reference run itself (`make all`): its
    trials sit, loose, at the published paths with other bytes. They are measurements made
    here, not corrupted published data (a fresh clone's sweep once stopped at the analysis on
    this): dvc.lock pins the packs, not them, and the workflow reads a loose trial before a
    pack that holds its path. Simulated on a pulled trial unpacked beside its pack with its
    logs compressed otherwise (other bytes, the same measurement), with DVC's local cache and
    without it (a clone that never pulled)."""
    import lzma
    import tempfile

    from latency_divide.analysis.integrity import check_trials

    clone, env = pulled["clone"], pulled["env"]
    t = published_trials(clone)[5]
    files = packs.files_of(rawio.packed(t))
    created = next(p for p in (*reversed(t.parents[:3]), t) if not p.exists())
    t.mkdir(parents=True)
    try:
        (t / "meta.json").write_bytes(files.pop("meta.json"))
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in files.items():
                (Path(tmp) / name).write_bytes(data)
            rawio.pack(tmp)
            archive = lzma.decompress((Path(tmp) / "logs.tar.xz").read_bytes())
        (t / "logs.tar.xz").write_bytes(lzma.compress(archive, preset=1))
        assert check_trials([t], clone) == []
        meta = (t / "meta.json").relative_to(clone).as_posix()
        assert packs.split([meta], base=clone) == ([meta], [])
        cache, away = clone / ".dvc" / "cache", clone / ".dvc" / "cache-away"
        cache.rename(away)
        try:
            assert check_trials([t], clone) == []
        finally:
            away.rename(cache)
    finally:
        shutil.rmtree(created)
        run([DVC, "checkout", "--force"], clone, env)
    assert rawio.packed(t) is not None and check_trials([t], clone) == []


def test_the_published_fast_links_run_reanalyses_with_no_trial(pulled):
    """The unbound-window trials are published too: their config re-analyses them as pulled."""
    clone, env = pulled["clone"], pulled["env"]
    p = run([SNAKEMAKE, "all", "-n", "--cores", "1", "--configfile", "config/fast-links.yaml"],
            clone, env)
    jobs = job_counts(p.stdout + p.stderr)
    assert "trial" not in jobs and jobs.get("analysis_tables") == 1, jobs
    p = run([SNAKEMAKE, "all", "-n", "--cores", "1", "--configfile",
             "config/fast-links-checked.yaml"], clone, env)
    jobs = job_counts(p.stdout + p.stderr)
    assert "trial" not in jobs and jobs.get("analysis_tables") == 1, jobs
    assert len(published_trials(clone)) == 976 + 368 + 304


def test_a_companion_with_a_trial_missing_is_left_out_and_named(pulled):
    """A half-pulled companion data set yields no tables that look complete: `all` names it
    and leaves it out; it never measures the missing trials (here a whole pack not pulled)."""
    clone, env = pulled["clone"], pulled["env"]
    _analysed(clone, env)
    gone = clone / "results/raw/def-9eb8324303/packs"
    n = sum(1 for t in trial_ids(load_config(clone / "config/fast-links.yaml"))
            if t[0] == gone.parent.name)
    shutil.rmtree(gone)
    try:
        p = run([SNAKEMAKE, "-n", "--cores", "1", "all"], clone, env)
        log = p.stdout + p.stderr
        jobs = job_counts(log)
        assert "trial" not in jobs, jobs
        assert "results/companions/fast-links/" not in log, log[-3000:]  # no output of it
        if "companion_tables" in jobs:  # the others' outputs are listed where it would be
            assert "results/companions/paper-rerun/tables/trials.parquet" in log
        assert n > 0 and (f"companion fast-links (config/fast-links.yaml) left out: {n} of its "
                          "448 trials are not on disk") in log, log
    finally:
        run([DVC, "checkout", "--force"], clone, env)
