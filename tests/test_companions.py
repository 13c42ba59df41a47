"""Companion data sets (latency_divide.analysis.companions): which configs, named how, with what trials."""
from __future__ import annotations

import pytest
import yaml

from conftest import ROOT
from latency_divide.analysis.companions import companion_metas, load_companions, table_files
from latency_divide.errors import ConfigError
from latency_divide.config import load_config
from latency_divide.trial.sweep import trial_ids


# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared


def _write(tmp, name, **changes):
    raw = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    raw.pop("companions", None)
    raw.update(changes)
    p = tmp / name
    p.write_text(yaml.safe_dump(raw))
    return p


def test_the_main_config_names_the_published_companions():
    cfg = load_config(ROOT / "config/config.yaml")
    comps = load_companions(cfg.companions, base=ROOT)
    assert [c.name for c in comps] == ["fast-links", "fast-links-checked", "mvfst",
                                       "mvfst-fast-links", "paper-rerun", "population",
                                       "population-mvfst", "population-buffers",
                                       "population-mvfst-buffers", "buffer-depth-100ms",
                                       "buffer-depth-200ms", "buffer-depth-500ms",
                                       "buffer-depth-1000ms", "buffer-depth-mvfst-100ms",
                                       "buffer-depth-mvfst-200ms", "buffer-depth-mvfst-500ms",
                                       "buffer-depth-mvfst-1000ms", "live-policed", "live-traces",
                                       "live", "live-buffers"]
    fast, checked, mvfst, _, rerun, pop, popm, popb, popmb, *rest = comps
    depths, mdepths, (policed, traces, live, liveb) = rest[:4], rest[4:8], rest[8:]
    # the live broadcasts (issue 58, docs/live.md): 40 uplinks policed, 5 behind the FIFO, the
    # population's 240 behind it and behind the measured buffers, all of definitions of their
    # own; live-traces' 20 are trials of live.yaml (its definitions, 5 of its households)
    assert len(policed.trials) == 192 and policed.cfg.buffer_model == "policed-5ms"
    assert len(traces.trials) == 20 and {t[2] for t in traces.trials} == {"uplink"}
    assert len(live.trials) == 1152 and live.cfg.buffer_model == "qfactor"
    assert set(traces.trials) <= set(live.trials)
    assert len(liveb.trials) == 1152 and liveb.cfg.buffer_model == "mba-2014"
    assert [t[1:] for t in liveb.trials] == [t[1:] for t in live.trials]
    assert not {t[0] for t in liveb.trials} & {t[0] for t in live.trials}
    # a live run draws its answer's figures only (re-analysis time, issue 58); live-traces none
    for c in (policed, live, liveb):
        assert c.cfg.figures == ("percentiles", "percentiles_buckets"), c.name
    assert traces.cfg.figures == ()
    live_defs = {t[0] for c in (policed, traces, live, liveb) for t in c.trials}
    assert not live_defs & {t[0] for c in comps[:-4] for t in c.trials}
    # the population study (docs/population.md): its own definitions, none of the run's; with
    # tperf the same trials under other definitions
    assert len(pop.trials) == 2 * 4 * (240 + 2 * 24) and pop.cfg.population is not None
    assert not {t[0] for t in pop.trials} & {t[0] for t in trial_ids(cfg)}
    assert [t[1:] for t in popm.trials] == [t[1:] for t in pop.trials]
    assert not {t[0] for t in popm.trials} & {t[0] for t in pop.trials}
    assert popm.cfg.tool.name == "tperf" and popm.cfg.tool.qlog
    # issue 41: the same trials with the measured buffers, under definitions of their own; the
    # buffer-depth sweep's uplinks of 40 of those households, 120 trials a depth (each analysed
    # once all its trials are on disk; rules/depth.smk builds the sweep from them)
    assert [t[1:] for t in popb.trials] == [t[1:] for t in pop.trials]
    assert popb.cfg.buffer_model == "mba-2014"
    assert not {t[0] for t in popb.trials} & {t[0] for t in pop.trials}
    # mvfst's tperf with the measured buffers: the uplinks of tperf's population trials
    assert sorted(t[1:] for t in popmb.trials) == sorted(t[1:] for t in popm.trials
                                                      if t[2] == "uplink")
    assert len(popmb.trials) == 4 * (240 + 2 * 24) and popmb.cfg.tool.name == "tperf"
    assert popmb.cfg.buffer_model == "mba-2014"
    assert not {t[0] for t in popmb.trials} & {t[0] for t in popm.trials}
    assert [c.cfg.buffer_model for c in depths] == [f"queue-{n}ms" for n in (100, 200, 500,
                                                                             1000)]
    assert all(len(c.trials) == 120 and {t[2] for t in c.trials} == {"uplink"} for c in depths)
    assert len({t[0] for c in depths for t in c.trials}) == 12
    # the same sweep with tperf: the same trials of each depth under tperf's definitions,
    # none of tperf's population run's
    for c, q in zip(mdepths, depths):
        assert c.cfg.buffer_model == q.cfg.buffer_model and c.cfg.tool.name == "tperf"
        assert sorted(t[1:] for t in c.trials) == sorted(t[1:] for t in q.trials)
    mdefs = {t[0] for c in mdepths for t in c.trials}
    assert len(mdefs) == 12 and not mdefs & {t[0] for c in depths for t in c.trials}
    assert not mdefs & {t[0] for t in popm.trials}
    # the paper's own definitions measured again: repetition 2 of every reference trial
    assert sorted((t[0], t[1], t[2], t[3]) for t in rerun.trials) == \
        sorted((t[0], t[1], t[2], t[3]) for t in trial_ids(cfg))
    assert {t[4] for t in rerun.trials} == {2}
    assert len(fast.trials) == 28 * 2 * 8
    # measured again: the unbound definitions of fast-links, repetition 2 (2-4 on $50+)
    unbound = {t[0] for t in fast.trials if t[3].endswith("-1m")}
    assert {t[0] for t in checked.trials} == unbound
    assert len(checked.trials) == 19 * 2 * 4 + 9 * 2 * 4 * 3
    assert {t[4] for t in checked.trials} == {2, 3, 4}
    assert len(mvfst.trials) == 38 * 2 * 4 and mvfst.cfg.tool.name == "tperf"
    # the fast-links capped variants are the reference run's trials, not new ones
    ref = {t[0] for t in trial_ids(cfg)}
    assert len({t[0] for t in fast.trials} & ref) == 4
    assert table_files(fast.root)["summary"] == "results/companions/fast-links/tables/summary.parquet"


def test_companion_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_companions(["nope.yaml"], base=tmp_path)
    bad = _write(tmp_path, "Bad Name.yaml")
    with pytest.raises(ConfigError, match="'Bad Name.yaml': a companion is a config file"):
        load_companions([bad.name], base=tmp_path)
    one = _write(tmp_path, "one.yaml")
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub", "one.yaml")
    with pytest.raises(ConfigError, match="a second companion named 'one'"):
        load_companions(["one.yaml", "sub/one.yaml"], base=tmp_path)
    nested = _write(tmp_path, "nested.yaml", companions=[one.name])
    with pytest.raises(ConfigError, match="'nested.yaml' names companions of its own"):
        load_companions([nested.name], base=tmp_path)


def test_missing_lists_trials_not_on_disk(tmp_path):
    one = _write(tmp_path, "one.yaml")
    (c,) = load_companions([one.name], base=tmp_path)
    assert len(c.missing(base=tmp_path)) == len(c.trials) > 0
    first = tmp_path / c.metas()[0]
    first.parent.mkdir(parents=True)
    first.write_text("{}")
    assert len(c.missing(base=tmp_path)) == len(c.trials) - 1



def test_the_tables_job_lists_a_companions_trials_again_from_its_config(tmp_path):
    """rule companion_tables passes each companion's config file and the digest of its trials
    (Snakemake records a job's params beside each of its outputs: the lists were 120 MB); the
    job lists them again and refuses a config changed since the DAG was made."""
    one = _write(tmp_path, "one.yaml")
    (c,) = load_companions([one.name], base=tmp_path)
    assert len(c.digest()) == 64 and len(c.trials) > 1
    assert companion_metas(one.name, c.digest(), base=tmp_path) == c.metas()
    other = _write(tmp_path, "one.yaml", directions=["uplink"])  # half the trials now
    with pytest.raises(ConfigError, match=r"companion one \(one.yaml\): its trials are not"):
        companion_metas(other.name, c.digest(), base=tmp_path)

def test_schema_refuses_a_companion_that_is_not_a_yaml_file(tmp_path):
    p = _write(tmp_path, "x.yaml", companions=["config/a.txt"])
    with pytest.raises(ConfigError, match="companions"):
        load_config(p)
