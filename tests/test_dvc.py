"""DVC: published raw data, re-analysis from a fresh clone, integrity checks (issue 7).

Real git, real DVC (.venv/bin/dvc), real Snakemake, real trial directories (the fixtures in
tests/data/trials, made by `latency-divide trial`). A throwaway project repository is built
from the workflow files of this checkout, its raw data published with `latency-divide publish`
to its own dvc-remote/ (committed to git, as in the real repository), and cloned.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from latency_divide.ops.dvcstore import DataCheckError, md5_file, tracked_outs
from latency_divide.ops.verify import trial_files, verify

from conftest import ROOT, VENV_BIN

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

DVC = str(VENV_BIN / "dvc")
FIXTURES = ROOT / "tests" / "data" / "trials"
# The fixture trials used: both households of price bucket 0-30, uplink, cubic and copa-0.5.
HOUSEHOLDS = [799254, 13570]
TEST_CONFIG = "config/dvc-test.yaml"
WORKFLOW_FILES = ["Snakefile", "rules", "workflow", "config", "envs", "resources", "dvc.yaml",
                  ".dvcignore", ".dvc/config", ".dvc/.gitignore"]
# Those trials (in the definition layout: def-<hash>/<household>/...) and their files (9 each
# when made: meta.json, logs, tool JSON summaries), plus each definition's definition.json.
FIXTURE_TRIALS = sorted(p.parent for p in FIXTURES.glob("def-*/*/*/*/rep*/meta.json")
                        if int(p.parts[-5]) in HOUSEHOLDS)
DEFINITIONS = sorted({d.parents[3].name for d in FIXTURE_TRIALS})
NFILES = sum(1 for d in FIXTURE_TRIALS for p in d.rglob("*") if p.is_file()) + len(DEFINITIONS)


def trial_path(household: int, direction: str, variant: str) -> str:
    """results/raw/<definition id>/<household>/<direction>/<variant>/rep1 of a fixture."""
    (d,) = [d for d in FIXTURE_TRIALS if d.parts[-4:-1] == (str(household), direction, variant)]
    return "results/raw/" + d.relative_to(FIXTURES).as_posix()
TABLE = "results/tables/trials.parquet"
FIGURE = "results/figures/delay_tput.pdf"


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        DVC_NO_ANALYTICS="1",
        DVC_SITE_CACHE_DIR=str(tmp / "dvc-site-cache"),
        GIT_AUTHOR_NAME="test", GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="test", GIT_COMMITTER_EMAIL="test@example.invalid",
        GIT_CONFIG_GLOBAL=str(tmp / "gitconfig"), GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str], check: bool = True,
        timeout: float = 600) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{argv} exited {p.returncode}\n--- stdout\n{p.stdout}\n"
                             f"--- stderr\n{p.stderr}")
    return p


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table (rule -> count); {} when nothing had to run."""
    m = re.search(r"Job stats:\n\s*job\s+count\n[- ]+\n(.*?)\n\s*total\s+(\d+)", output, re.S)
    if not m:
        return {}
    counts = {}
    for line in m.group(1).splitlines():
        name, n = line.split()
        counts[name] = int(n)
    return counts


def _test_config() -> dict:
    cfg = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    cfg["households"]["buckets"] = [{"name": "0-30", "min": 0, "max": 30, "ids": HOUSEHOLDS}]
    cfg["directions"] = ["uplink"]
    cfg["variants"] = [{"name": "cubic", "cc": "cubic"},
                       {"name": "copa-0.5", "cc": "copa", "delta": 0.5}]
    cfg["trial"]["repetitions"] = 1
    cfg["trial"]["idle_s"] = 1.5  # the fixtures' definition (tests/data/trials/regenerate.py)
    return cfg


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict:
    """A git repository of the workflow + 4 real trials, published with `latency-divide
    publish` to its dvc-remote/ and committed (dvc.lock, dvc-remote/ included)."""
    tmp = tmp_path_factory.mktemp("dvc")
    env = _env(tmp)
    (tmp / "gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    src = tmp / "origin"
    src.mkdir()
    for name in WORKFLOW_FILES:
        s, d = ROOT / name, src / name
        d.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if s.is_dir() else shutil.copy2)(s, d)
    (src / TEST_CONFIG).write_text(yaml.safe_dump(_test_config(), sort_keys=False))
    (src / ".gitignore").write_text("/results/*\n/logs/\n/.snakemake/\n")
    raw = src / "results" / "raw"
    for d in FIXTURE_TRIALS:
        shutil.copytree(d, raw / d.relative_to(FIXTURES))
    for name in DEFINITIONS:
        shutil.copy2(FIXTURES / name / "definition.json", raw / name / "definition.json")
    run(["git", "init", "-q"], src, env)
    pub = run([str(VENV_BIN / "latency-divide"), "publish"], src, env)
    run(["git", "add", "-A"], src, env)
    run(["git", "commit", "-q", "-m", "published raw data"], src, env)
    return {"tmp": tmp, "env": env, "origin": src, "publish_log": pub.stderr}


def clone_and_pull(published: dict, name: str) -> Path:
    dst = published["tmp"] / name
    run(["git", "clone", "-q", str(published["origin"]), str(dst)], published["tmp"],
        published["env"])
    assert not (dst / "results" / "raw").exists()
    run([DVC, "pull"], dst, published["env"])
    return dst


def test_publish_records_every_file_and_fills_the_remote(published):
    src = published["origin"]
    lock = yaml.safe_load((src / "dvc.lock").read_text())
    (out,) = lock["stages"]["trials"]["outs"]
    assert out["path"] == "results/raw" and out["md5"].endswith(".dir")
    files = sorted(p for p in (src / "results" / "raw").rglob("*") if p.is_file())
    assert out["nfiles"] == len(files) == NFILES and NFILES >= 4 * 6 + 2
    # the .dir manifest (in the committed remote) lists every file with its own md5
    obj = out["md5"].removesuffix(".dir")
    manifest = json.loads((src / "dvc-remote" / "files" / "md5" / obj[:2] /
                           f"{obj[2:]}.dir").read_text())
    assert {e["relpath"]: e["md5"] for e in manifest} == {
        f.relative_to(src / "results" / "raw").as_posix(): md5_file(f) for f in files}
    # the remote is committed to git, and the publish log reported its size under the limit
    tracked = run(["git", "ls-files", "dvc-remote"], src, published["env"]).stdout.split()
    assert len(tracked) == len({e["md5"] for e in manifest}) + 1
    m = re.search(r"published: .* holds (\d+) bytes \(limit 250000000\)", published["publish_log"])
    assert m and 0 < int(m.group(1)) <= 250_000_000


def test_clone_pull_reanalysis_runs_no_trial(published):
    """The quick tier's re-analysis of a small real data set: 4 real trials published, a fresh
    clone pulls them, `snakemake` builds the table and the figure, measuring nothing."""
    clone = clone_and_pull(published, "reanalysis")
    env = published["env"]
    assert len([p for p in (clone / "results/raw").rglob("*") if p.is_file()]) == NFILES
    ok = run([str(VENV_BIN / "latency-divide"), "verify"], clone, env)
    assert f"OK: {NFILES} tracked files" in ok.stdout
    # no .snakemake metadata, no households/links, fresh mtimes: the trials must still count
    p = run([str(VENV_BIN / "snakemake"), "--cores", "1", TABLE, FIGURE,
             "--configfile", TEST_CONFIG], clone, {**env, "LATENCY_DIVIDE_FORBID_TRIALS": "1"},
            timeout=900)
    jobs = job_counts(p.stdout + p.stderr)
    assert jobs, p.stdout + p.stderr
    assert "trial" not in jobs, jobs
    assert jobs.get("analysis_tables") == 1 and jobs.get("figures") == 1, jobs
    assert (clone / TABLE).stat().st_size > 0 and (clone / FIGURE).stat().st_size > 0
    # the raw data are untouched by the analysis
    assert run([str(VENV_BIN / "latency-divide"), "verify"], clone, env).returncode == 0
    # trace: the figure -> households and the DVC-tracked files (md5 as in the manifest)
    t = run([str(VENV_BIN / "latency-divide"), "trace", FIGURE], clone, env, check=False)
    lock = yaml.safe_load((clone / "dvc.lock").read_text())
    dir_md5 = lock["stages"]["trials"]["outs"][0]["md5"]
    assert f"results/raw  dvc.lock stage trials  md5 {dir_md5}" in t.stdout, t.stdout
    for h in HOUSEHOLDS:
        assert str(h) in t.stdout
    meta = trial_path(799254, "uplink", "cubic")
    assert f"meta.json md5 {md5_file(clone / meta / 'meta.json')}" in t.stdout, t.stdout


def test_verify_names_corrupted_and_missing_files(published):
    clone = clone_and_pull(published, "integrity")
    env = published["env"]
    cli = str(VENV_BIN / "latency-divide")
    assert run([cli, "verify"], clone, env).returncode == 0
    corrupt = trial_path(13570, "uplink", "copa-0.5") + "/ping.log.gz"
    gone = trial_path(799254, "uplink", "cubic") + "/meta.json"
    extra = trial_path(799254, "uplink", "cubic") + "/notes.txt"
    with open(clone / corrupt, "r+b") as f:  # flip one byte, same size
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 0xFF]))
    (clone / gone).unlink()
    (clone / extra).write_text("not part of the data set\n")
    p = run([cli, "verify"], clone, env, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert any(line.split()[:2] == ["CORRUPTED", f"{corrupt}:"] for line in lines), p.stdout
    assert any(line.split()[:2] == ["MISSING", f"{gone}:"] for line in lines), p.stdout
    assert any(line.split()[:2] == ["UNTRACKED", f"{extra}:"] for line in lines), p.stdout
    assert f"{NFILES - 2} intact, 1 missing, 1 corrupted" in p.stdout
    # a part of the tracked directory: only its files are checked
    part = trial_path(13570, "uplink", "copa-0.5").rsplit("/", 3)[0]  # .../<def>/13570
    p = run([cli, "verify", part], clone, env, check=False)
    assert p.returncode == 2 and corrupt in p.stdout and gone not in p.stdout
    cubic = trial_path(13570, "uplink", "cubic")
    rep = verify(clone / cubic, repo=clone)
    n = sum(1 for p in (FIXTURES / cubic.removeprefix("results/raw/")).rglob("*") if p.is_file())
    assert rep.ok and rep.checked == n and not rep.findings
    # `dvc checkout` restores both from the cache: verify agrees again
    (clone / extra).unlink()
    run([DVC, "checkout", "--force"], clone, env)
    assert run([cli, "verify"], clone, env).returncode == 0


def test_verify_errors_name_the_problem(published, tmp_path):
    clone = clone_and_pull(published, "errors")
    env = published["env"]
    cli = str(VENV_BIN / "latency-divide")
    p = run([cli, "verify", "config"], clone, env, check=False)
    assert p.returncode == 1 and "config: not tracked by DVC" in p.stderr
    # without the cache and with the remote's manifest damaged, the manifest cannot be trusted
    shutil.rmtree(clone / ".dvc" / "cache")
    (out,) = [o for o in tracked_outs(clone) if o.path == "results/raw"]
    obj = out.md5.removesuffix(".dir")
    man = clone / "dvc-remote" / "files" / "md5" / obj[:2] / f"{obj[2:]}.dir"
    man.write_text(man.read_text().replace('"relpath"', '"relpath" ', 1))
    with pytest.raises(DataCheckError, match=r"manifest .*\.dir of results/raw .* corrupted"):
        verify(clone / "results/raw", repo=clone)
    assert trial_files([trial_path(13570, "uplink", "cubic")], clone)[0].files == {}
    p = run([cli, "verify"], clone, env, check=False)
    assert p.returncode == 1 and "run `dvc fetch`" in p.stderr


def test_publish_refuses_over_the_size_limit(published):
    clone = published["tmp"] / "limit"
    env = published["env"]
    run(["git", "clone", "-q", str(published["origin"]), str(clone)], published["tmp"], env)
    run([DVC, "pull"], clone, env)
    before = sorted(p.relative_to(clone).as_posix() for p in (clone / "dvc-remote").rglob("*"))
    # a new file in the raw data: publishing it would need more than the (tiny) limit
    (clone / trial_path(13570, "uplink", "cubic") / "extra.log").write_text("x" * 5000)
    p = run([str(VENV_BIN / "latency-divide"), "publish", "--limit-mb", "0.01"], clone, env,
            check=False)
    assert p.returncode == 1 and "over the limit of 10000 bytes: nothing pushed" in p.stderr
    after = sorted(p.relative_to(clone).as_posix() for p in (clone / "dvc-remote").rglob("*"))
    assert after == before


def test_a_second_publish_removes_the_superseded_manifest_only(published):
    clone = published["tmp"] / "republish"
    env = published["env"]
    run(["git", "clone", "-q", str(published["origin"]), str(clone)], published["tmp"], env)
    run([DVC, "pull"], clone, env)
    remote = clone / "dvc-remote"
    manifests = lambda: sorted(remote.rglob("*.dir"))  # noqa: E731
    (old,) = manifests()
    objects = {p for p in remote.rglob("*") if p.is_file() and p.suffix != ".dir"}
    (clone / trial_path(13570, "uplink", "cubic") / "extra.log").write_text("more data\n")
    p = run([str(VENV_BIN / "latency-divide"), "publish"], clone, env)
    assert f"removing superseded manifest {old.relative_to(remote)}" in p.stderr
    (new,) = manifests()
    lock = yaml.safe_load((clone / "dvc.lock").read_text())
    (out,) = lock["stages"]["trials"]["outs"]
    assert new.name == out["md5"][2:] and new != old
    # every data object stays; the new file's object is added
    after = {p for p in remote.rglob("*") if p.is_file() and p.suffix != ".dir"}
    assert objects < after and len(after - objects) == 1
    # a fresh clone of this state pulls every file
    run(["git", "add", "-A"], clone, env)
    run(["git", "commit", "-q", "-m", "republished"], clone, env)
    again = published["tmp"] / "republish-clone"
    run(["git", "clone", "-q", str(clone), str(again)], published["tmp"], env)
    run([DVC, "pull"], again, env)
    assert (again / trial_path(13570, "uplink", "cubic") / "extra.log").read_text() == \
        "more data\n"


def test_repro_keeps_raw_logs(published):
    """`dvc repro --force trials` with every trial present runs no trial and deletes nothing:
    results/raw is `persist: true` and trials are never re-run by Snakemake."""
    clone = clone_and_pull(published, "repro")
    env = published["env"]
    (clone / ".venv").symlink_to(ROOT / ".venv")  # dvc.yaml runs .venv/bin/snakemake
    shutil.copy2(clone / TEST_CONFIG, clone / "config/config.yaml")  # the stage's config
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns)
              for p in (clone / "results/raw").rglob("*") if p.is_file()}
    p = run([DVC, "repro", "--force", "trials"], clone, env, timeout=900)
    jobs = job_counts(p.stdout + p.stderr)
    assert "trial" not in jobs, p.stdout
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns)
             for p in (clone / "results/raw").rglob("*") if p.is_file()}
    assert after == before
    lock = yaml.safe_load((clone / "dvc.lock").read_text())
    assert lock["stages"]["trials"]["outs"][0]["nfiles"] == NFILES
    assert run([str(VENV_BIN / "latency-divide"), "verify"], clone, env).returncode == 0


def test_repacked_trials_publish_and_their_old_objects_leave_the_remote(published):
    """`latency-divide repack` then `publish --replace-published`: the remote holds the new
    objects, the replaced files' objects are removed (the earlier revision has them in its
    committed dvc-remote/), and a fresh clone pulls trials that rebuild every original file."""
    clone = clone_and_pull(published, "repack")
    env = published["env"]
    remote = clone / "dvc-remote"
    cli = str(VENV_BIN / "latency-divide")
    before = {p.name for p in remote.rglob("*") if p.is_file()}
    gz = {md5_file(p) for p in (clone / "results/raw").rglob("*.gz")}
    assert gz
    run([cli, "repack"], clone, env)
    refused = run([cli, "publish"], clone, env, check=False)
    assert refused.returncode == 1 and "modified" in refused.stderr  # only adds by default
    # loose, as repack leaves them (publish would pack them: tests/test_packs.py)
    p = run([cli, "publish", "--replace-published", "--no-pack"], clone, env)
    assert re.search(r"removing \d+ objects no manifest of dvc.lock references", p.stderr)
    after = {p.parent.name + p.name for p in remote.rglob("*") if p.is_file()}
    assert not gz & after  # the gzip logs' objects are gone
    assert len(after) < len(before)
    run(["git", "add", "-A"], clone, env)
    run(["git", "commit", "-q", "-m", "repacked"], clone, env)
    again = published["tmp"] / "repack-clone"
    run(["git", "clone", "-q", str(clone), str(again)], published["tmp"], env)
    run([DVC, "pull"], again, env)
    files = [p.name for p in (again / "results/raw").rglob("*") if p.is_file()]
    assert sorted(set(files)) == ["definition.json", "logs.tar.xz", "meta.json"]
    check = run([cli, "repack", "--check"], again, env)
    assert f"{len(FIXTURE_TRIALS)} repacked trial(s) checked: every original file rebuilt" \
        in check.stdout
    assert run([cli, "verify"], again, env).returncode == 0


@pytest.mark.slow
def test_published_packs_pull_and_analyse_as_the_loose_trials(published):
    """Repacked trials published as packs (the default): a fresh clone pulls one pack per
    definition with its index and parsed cache, and analyses them into the same table as the
    loose trials, from the cache, measuring nothing."""
    import pandas as pd

    env = {**published["env"], "LATENCY_DIVIDE_FORBID_TRIALS": "1"}
    cli = str(VENV_BIN / "latency-divide")
    table = [str(VENV_BIN / "snakemake"), "--cores", "1", TABLE, "--configfile", TEST_CONFIG]
    clone = clone_and_pull(published, "packs")
    run(table, clone, env)
    loose = pd.read_parquet(clone / TABLE)
    run([cli, "repack"], clone, env)
    p = run([cli, "publish", "--replace-published"], clone, env)
    assert p.stderr.count("loose trials packed into pack-0001.tar.xz") == len(DEFINITIONS)
    run(["git", "add", "-A"], clone, env)
    run(["git", "commit", "-q", "-m", "packed"], clone, env)
    again = published["tmp"] / "packs-clone"
    run(["git", "clone", "-q", str(clone), str(again)], published["tmp"], env)
    run([DVC, "pull"], again, env)
    files = {p.relative_to(again / "results/raw").as_posix().split("/", 1)[1]
             for p in (again / "results/raw").rglob("*") if p.is_file()}
    assert files == {"definition.json", *(f"packs/pack-0001.{s}" for s in (
        "tar.xz", "json.xz", "parsed.json", "trials.parquet", "ping.parquet", "queue.parquet",
        "throughput.parquet"))}
    run(table, again, env)
    packed = pd.read_parquet(again / TABLE)
    pd.testing.assert_frame_equal(packed, loose, check_exact=True)
    assert "parsing its" not in (again / "logs/analysis_tables/analysis_tables.log").read_text()
    # publishing again adds nothing and finds nothing wrong
    p = run([cli, "publish"], again, env)
    assert "packed into" not in p.stderr and "+0 objects" in p.stderr
    # the repacked trials' original files rebuild from the packs as from the loose trials
    check = run([cli, "repack", "--check"], again, env)
    assert f"{len(FIXTURE_TRIALS)} repacked trial(s) checked: every original file rebuilt" \
        in check.stdout


def test_publish_writes_stale_caches_again_and_publishes_them(published, monkeypatch, capsys):
    """After an edit of the parsing code the published caches are stale (their key is of
    other code): `publish` parses those packs again, writes their caches for this code and
    publishes them, although they now differ from what dvc.lock pinned (every other pinned
    file is still held to its pin)."""
    from latency_divide.analysis import parsedcache
    from latency_divide.cli import main

    env = published["env"]
    cli = str(VENV_BIN / "latency-divide")
    clone = clone_and_pull(published, "stale")
    run([cli, "repack"], clone, env)
    run([cli, "publish", "--replace-published"], clone, env)
    run(["git", "add", "-A"], clone, env)
    run(["git", "commit", "-q", "-m", "packed"], clone, env)
    lock = (clone / "dvc.lock").read_text()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(clone)
    monkeypatch.setattr(parsedcache, "code_key", lambda: "0" * 64)  # the code edited
    assert main(["publish"]) == 0
    err = capsys.readouterr().err
    assert err.count("parsed cache of other code: parsed its") == len(DEFINITIONS), err
    assert (clone / "dvc.lock").read_text() != lock
    for d in DEFINITIONS:
        arc = clone / "results/raw" / d / "packs/pack-0001.tar.xz"
        assert parsedcache.load(arc)[0] is not None  # this code's cache now
    # a cache damaged after the pull is still refused (only this publish's rewrites are new)
    t = clone / "results/raw" / DEFINITIONS[0] / "packs/pack-0001.ping.parquet"
    data = t.read_bytes()
    t.unlink()
    t.write_bytes(data[:-8] + b"\0" * 8)
    monkeypatch.setattr(parsedcache, "code_key", lambda: "1" * 64)
    assert main(["publish"]) != 0
    err = capsys.readouterr().err
    assert "pack-0001.ping.parquet: modified" in err, err


def test_publish_refuses_a_damaged_pack_and_data_out_of_the_layout(published):
    """A published pack cut short and a trial directory outside the layout (format 1's
    results/raw/<household>/...): `publish` refuses, naming both, and pushes nothing (the
    remote and dvc.lock as they were). Its check of the raw tree is the same for any tree: here
    the 4 real trials published as packs, not the 11,134 published trials (it decompressed
    and checked every one of them for 1.5 minutes; tests/test_reanalysis.py pulls and
    re-analyses those)."""
    cli = str(VENV_BIN / "latency-divide")
    env = published["env"]
    clone = clone_and_pull(published, "refused")
    run([cli, "repack"], clone, env)
    run([cli, "publish", "--replace-published"], clone, env)  # the trials as packs
    remote_before = sorted(p.relative_to(clone).as_posix()
                           for p in (clone / "dvc-remote").rglob("*"))
    lock_before = (clone / "dvc.lock").read_text()
    arc = f"results/raw/{DEFINITIONS[0]}/packs/pack-0001.tar.xz"
    data = (clone / arc).read_bytes()
    (clone / arc).unlink()  # a new file: DVC's cache keeps the published bytes
    (clone / arc).write_bytes(data[: len(data) // 2])
    stray = clone / "results/raw" / str(HOUSEHOLDS[0]) / "uplink/cubic/rep1"
    stray.mkdir(parents=True)
    (stray / "meta.json").write_text("{}")
    p = run([cli, "publish"], clone, env, check=False)
    assert p.returncode != 0
    assert f"{arc}: its sha256 or size is not the one its index records" in p.stderr, p.stderr
    assert f"results/raw/{HOUSEHOLDS[0]}: not a definition directory" in p.stderr, p.stderr
    assert sorted(p.relative_to(clone).as_posix()
                  for p in (clone / "dvc-remote").rglob("*")) == remote_before
    assert (clone / "dvc.lock").read_text() == lock_before
