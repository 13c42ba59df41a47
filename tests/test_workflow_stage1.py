"""The real Snakemake stages 1-2 (household records, link plans, households table), run as a
subprocess on a copy of the workflow in a temporary directory."""

import json
import shutil
import subprocess

import pandas as pd
import pytest

from conftest import ROOT, VENV_BIN
from latency_divide.data.buckets import PAPER_IDS
from latency_divide.data.households import get_household
from latency_divide.links.plan import make_linkplan

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

SNAKEMAKE = str(VENV_BIN / "snakemake")


def copy_workflow(dst):
    for name in ["Snakefile", "rules", "workflow", "config", "envs"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / name)
    (dst / "resources").mkdir()
    shutil.copytree(ROOT / "resources" / "digitaldivide", dst / "resources" / "digitaldivide")
    return dst


def snakemake(wd, *args, check=True):
    p = subprocess.run(
        [SNAKEMAKE, *args, "--cores", "2", "--directory", str(wd), "--snakefile",
         str(wd / "Snakefile")],
        capture_output=True, text=True, timeout=900,
    )
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def wd(tmp_path_factory):
    return copy_workflow(tmp_path_factory.mktemp("wf"))


def test_test_config_builds_records_links_and_table(wd):
    targets = ["results/tables/households.parquet", "results/links/11406.json",
               "results/links/12512.json"]
    snakemake(wd, *targets, "--configfile", str(wd / "config" / "test.yaml"))
    for hid in (11406, 12512):
        rec = json.loads((wd / f"results/households/{hid}.json").read_text())
        assert rec == get_household(hid).to_dict()
        plan = json.loads((wd / f"results/links/{hid}.json").read_text())
        want = make_linkplan(get_household(hid), qfactor=2.0, mechanism=plan["delay"]["mechanism"])
        assert plan == json.loads(json.dumps(want.to_dict()))
        assert plan["delay"]["mechanism"] in ("netem", "delayline")
    log = (wd / "logs/households/households.log").read_text()
    assert "wrote 2 household records" in log
    assert (wd / "logs/households_table/households_table.log").is_file()
    assert (wd / "logs/linkplans/linkplans.log").read_text().count("link plan for ") == 2
    plan = json.loads((wd / "results/links/11406.json").read_text())
    assert plan["uplink"]["queue_bytes"] == 19326 and plan["downlink"]["queue_bytes"] == 58785
    df = pd.read_parquet(wd / "results/tables/households.parquet")
    assert df["unit_id"].tolist() == [11406, 12512]
    assert df["price_bucket"].tolist() == ["0-30", "30-40"]
    assert df.loc[0, "upload_kbps"] == 1150
    assert not list((wd / "results").rglob(".*ld-tmp*"))
    # nothing left to do
    p = snakemake(wd, *targets, "--configfile", str(wd / "config" / "test.yaml"), "-n")
    assert "Nothing to be done" in p.stdout + p.stderr


def test_bad_config_fails_with_a_readable_message(wd, tmp_path):
    bad = (wd / "config" / "test.yaml").read_text().replace("ids: [12512]", "ids: [11406]")
    (tmp_path / "bad.yaml").write_text(bad)
    p = snakemake(wd, "results/tables/households.parquet", "-n", "--configfile",
                  str(tmp_path / "bad.yaml"), check=False)
    assert p.returncode != 0
    assert "household ID 11406 costs $6.99, outside the bucket's price range [30, 40)" in (
        p.stdout + p.stderr)


def test_default_config_table_has_the_38_paper_households(wd):
    snakemake(wd, "results/tables/households.parquet")
    df = pd.read_parquet(wd / "results/tables/households.parquet")
    assert len(df) == 38
    assert df["unit_id"].tolist() == [h for ids in PAPER_IDS.values() for h in ids]
    for name, ids in PAPER_IDS.items():
        assert set(df.loc[df["price_bucket"] == name, "unit_id"]) == set(ids)
    assert df["unit_id"].is_unique
    assert (df["upload_kbps"] > 0).all() and (df["rtt_ms"] > 0).all()
