"""The README's quick start, as typed (issue 42).

- quick tier: every snakemake command in README.md, docs/*.md and the Makefile puts its target
  before ``--configfile``'s files (Snakemake reads every word after ``--configfile`` as a config
  file: ``--configfile config/quick.yaml all`` stops at once with FileNotFoundError 'all');
  ``make quick`` and ``make all`` build their DAG (their recipes, as make prints them, with
  ``--dry-run``);
- slow tier: the set-up keeps the BoringSSL that tquic's build script compiled in the
  machine's cache, and the next set-up links from it; ``make quick`` itself on a fresh clone
  of the working tree (set-up, 8 real trials, tables and figures). The re-analysis of the published data as typed (``dvc pull``, then
  ``snakemake --cores 1 all``) is tests/test_reanalysis.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import time

import pytest
import yaml

from conftest import ROOT
from noisy_host import passing_trials
from test_dvc import job_counts, run

#: What may follow --configfile: config files (or a placeholder for one).
CONFIG_WORD = re.compile(r"^(\S+\.ya?ml|FILE|CONFIG|<[^>]+>|\$\S+)$")
#: Where a shell command written in prose ends.
END = re.compile(r"`|\s#|&&|;|\|")


def snakemake_commands(text: str) -> list[str]:
    """Every snakemake command line in a Markdown text or a Makefile: from ``snakemake`` (or
    ``$(SNAKEMAKE)``) to the end of the code span, comment or shell list element."""
    out = []
    for line in text.splitlines():
        for m in re.finditer(r"(?:\bsnakemake\b|\$\(SNAKEMAKE\))(?![-_./])", line):
            out.append((m.group(0) + END.split(line[m.end():], 1)[0]).strip())
    return out


def target_after_configfile(cmd: str) -> str | None:
    """The first word after --configfile's files that is not an option and not a config file
    (a target Snakemake would read as a file), or None."""
    words = cmd.split()
    for i, w in enumerate(words):
        if w != "--configfile":
            continue
        for x in words[i + 1:]:
            if x.startswith("-"):
                break
            if not CONFIG_WORD.match(x.rstrip(",:)")):
                return x
    return None


@pytest.mark.shared  # measures nothing and times nothing (tests/conftest.py)
def test_the_checker_finds_a_target_after_configfile():
    """The check below can fail: the README's former `make quick` and its prose form."""
    bad = ("quick: setup\n\t$(SNAKEMAKE) --cores $(CORES) --configfile config/quick.yaml all\n"
           "Use another config with `snakemake --configfile config/quick.yaml ...` (`make quick`)")
    assert [target_after_configfile(c) for c in snakemake_commands(bad)] == ["all", "..."]
    good = ("    .venv/bin/snakemake --cores 1 all --configfile config/quick.yaml   # a comment\n"
            "`snakemake trials --cores 1 --configfile config/paper-rerun.yaml` on a fresh machine\n"
            "(`snakemake --cores 1 trials --configfile config/fast-links-checked.yaml`,")
    cmds = snakemake_commands(good)
    assert len(cmds) == 3 and not any(target_after_configfile(c) for c in cmds), cmds


@pytest.mark.shared  # measures nothing and times nothing (tests/conftest.py)
def test_no_documented_snakemake_command_puts_a_target_after_configfile():
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md"))]
    found, bad = 0, []
    for f in files:
        text = f.read_text()
        if f.name == "Makefile":  # its recipes, not its comments
            text = "\n".join(line for line in text.splitlines() if line.startswith("\t"))
        for cmd in snakemake_commands(text):
            found += "--configfile" in cmd
            word = target_after_configfile(cmd)
            if word is not None:
                bad.append(f"{f.relative_to(ROOT)}: {word!r} after --configfile in: {cmd}")
    assert not bad, "\n".join(bad)
    assert found >= 5  # the README's, the Makefile's, docs/config.md's, the companions'


def _recipe(target: str) -> list[str]:
    """The snakemake command of a make target, as make prints it (`make -n`)."""
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    lines = [line for line in out.splitlines() if "snakemake" in line]
    assert len(lines) == 1, out
    return shlex.split(lines[0])


@pytest.mark.shared  # measures nothing and times nothing (tests/conftest.py)
@pytest.mark.parametrize("target, trials", [("quick", 8), ("all", None)])
def test_make_quick_and_make_all_build_their_dag(target, trials, tmp_path):
    """Their recipes as make prints them, with --dry-run: the DAG builds (no word read as a
    config file), and `make quick` schedules its 8 trials in a directory with no results."""
    argv = _recipe(target)
    assert argv[0] == ".venv/bin/snakemake" and "all" in argv
    cwd = ROOT
    if trials is not None:  # a checkout without results: every trial is scheduled
        cwd = tmp_path / "wf"
        cwd.mkdir()
        for item in ("Snakefile", "rules", "workflow", "config", "envs", "resources", "profiles"):
            (cwd / item).symlink_to(ROOT / item)
        (cwd / ".venv").symlink_to(ROOT / ".venv")
    res = subprocess.run([*argv, "--dry-run"], cwd=cwd, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    if trials is not None:
        assert job_counts(res.stdout).get("trial") == trials, res.stdout[-3000:]


@pytest.mark.slow  # its cargo builds may wait for the lint's, and a fresh clone's builds ours
@pytest.mark.shared  # measures nothing and times nothing
def test_setup_keeps_boringssl_and_the_crates_and_a_fresh_clone_builds_from_them(tmp_path):
    """scripts/setup.sh as `make` runs it, against a cache of its own (XDG_CACHE_HOME). In this
    checkout: the first run keeps the two static libraries tquic's build linked (byte for byte)
    under a key of what went into them, and a copy of target/release in place of any other
    entry; the second finds the libraries and says it links from them; with
    LATENCY_DIVIDE_NO_BUILD_CACHE=1 it neither reads nor adds an entry. Then in a fresh clone
    (no target/): the set-up starts from the copy, builds ours from the clone's own sources even
    where they look older than the copy's build (a change with an old time), links tquic again
    from the cache (the copy's linked this checkout's BoringSSL), reuses every other crate as
    copied, and keeps its build in place of the copy."""
    import filecmp
    import glob

    from test_dvc import _env
    from test_reanalysis import fresh_clone

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cache = tmp_path / "cache" / "latency-divide" / "boringssl"
    crates = tmp_path / "cache" / "latency-divide" / "target"
    (crates / "0123456789abcdef" / "release").mkdir(parents=True)  # another key's: it goes

    def setup(cwd=ROOT, **extra) -> str:
        res = subprocess.run(["./scripts/setup.sh"], cwd=cwd, env={**env, **extra},
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        return res.stderr

    first = setup()
    entries = sorted(p for p in cache.iterdir() if not p.name.startswith("."))
    assert len(entries) == 1 and f"kept BoringSSL for the next clone's build: {entries[0]}" in \
        first, first
    assert re.fullmatch(r"[0-9a-f]{16}", entries[0].name)
    outputs = glob.glob(str(ROOT / "target/release/build/tquic-*/output"))
    linked = {line.split("=", 2)[2] for o in outputs for line in open(o).read().splitlines()
              if line.startswith("cargo:rustc-link-search=native=")}
    built = [d for d in linked if os.path.isfile(f"{d}/libssl.a")]
    assert built and all(filecmp.cmp(f"{built[0]}/{lib}", entries[0] / lib, shallow=False)
                         for lib in ("libssl.a", "libcrypto.a")), (linked, entries)
    kept = sorted(crates.iterdir())
    assert len(kept) == 1 and re.fullmatch(r"[0-9a-f]{16}", kept[0].name), kept
    assert f"kept this build's crates for the next clone's: {kept[0]}" in first, first
    assert (kept[0] / "release" / "tquic-perf").is_file()
    second = setup()
    assert f"BoringSSL from this machine's cache, {entries[0]}" in second, second
    assert "kept" not in second, second
    off = setup(LATENCY_DIVIDE_NO_BUILD_CACHE="1")
    assert "the first build compiles BoringSSL" in off and "kept" not in off, off
    assert sorted(cache.iterdir()) == entries  # nothing added, no temporary left
    assert sorted(crates.iterdir()) == kept

    clone = fresh_clone(tmp_path, _env(tmp_path))
    cli = clone / "tools" / "delayline" / "src" / "cli.rs"
    cli.write_text(cli.read_text().replace("First interface (", "First interface, changed ("))
    for f in (clone / "tools").rglob("*"):  # 2000-01-01 (a tarball's times): cargo's own check
        os.utime(f, (946684800, 946684800))  # finds every one of ours older than the copy's
    rlibs = {p.name: p.stat().st_mtime_ns for p in (kept[0] / "release" / "deps").glob("*.rlib")}
    log = setup(clone)
    assert f"target/ copied from this machine's last build ({kept[0]}): building ours" in log, log
    assert "rebuilding tquic" in log and f"kept this build's crates for the next clone's: " \
        f"{kept[0]}" in log, log
    assert sorted(crates.iterdir()) == kept and not list(clone.glob(".ld-target.*"))
    # as cargo makes it: others may run the tools (tests/test_hostprobe.py runs one as nobody)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((clone / "target").stat().st_mode) == 0o777 & ~umask
    help_text = subprocess.run([str(clone / "target/release/delayline"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    assert "First interface, changed (" in help_text, help_text[:600]
    # every crates.io crate but tquic as copied, not built again (ours and tquic are)
    after = {p.name: p.stat().st_mtime_ns for p in (clone / "target/release/deps").glob("*.rlib")}
    rebuilt = ("tquic", "tquic_perf", "delayline", "qsampler", "hostprobe")
    reused = {n for n in rlibs if n.split("-", 1)[0].removeprefix("lib") not in rebuilt}
    assert len(reused) > 50 and all(after.get(n) == rlibs[n] for n in reused), \
        sorted(n for n in reused if after.get(n) != rlibs[n])
    # the kept copy is the clone's build now: its tquic links the cache's BoringSSL
    out = glob.glob(str(kept[0] / "release/build/tquic-*/output"))
    assert out and f"cargo:rustc-link-search=native={entries[0]}" in open(out[0]).read()


@pytest.mark.slow
@pytest.mark.netns
def test_make_quick_as_typed_on_a_fresh_clone(tmp_path):
    """`make quick` on a fresh clone of the working tree (.venv linked in and target/ copied
    in, as set-up would make them; set-up's cargo build finds our Rust tools built): 8 real
    trials of 20 s, every health verdict passing (under the stall injector,
    some may fail on its stalls alone and stay out of the tables), then the tables and the
    paper's figure."""
    import pyarrow.parquet as pq
    from test_dvc import _env
    from test_reanalysis import fresh_clone

    env = _env(tmp_path)
    clone = fresh_clone(tmp_path, env)
    # The set-up's `cargo build` runs in the clone and finds our tools built: target/ comes from
    # this checkout, as .venv does, and the workspace's files keep this checkout's times (cargo
    # judges a crate by them), so it builds only what the working tree changed since. Building
    # them from nothing (BoringSSL: minutes; our crates: 15 s of the test on 2026-12-07) is the
    # set-up `make test-all` ran on CI's own fresh clone just before, the same command: not
    # done twice.
    if (ROOT / "target" / "release").is_dir():
        subprocess.run(["cp", "-a", "--reflink=auto", str(ROOT / "target"), str(clone)],
                       check=True, timeout=600)
        for src in (ROOT / "Cargo.toml", ROOT / "Cargo.lock", *(ROOT / "tools").rglob("*")):
            dst = clone / src.relative_to(ROOT)
            if src.is_file() and dst.is_file():
                st = src.stat()
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    t0 = time.monotonic()
    res = run(["make", "quick"], clone, env, timeout=1800)
    took = time.monotonic() - t0
    cfg = yaml.safe_load((ROOT / "config" / "quick.yaml").read_text())
    trials = pq.read_table(clone / "results" / "tables" / "trials.parquet").to_pylist()
    metas = sorted((clone / "results" / "raw").rglob("meta.json"))
    assert len(metas) == 8, res.stdout[-2000:]
    # every verdict passes; under the stall injector some may fail on its stalls alone (CI
    # under it, 2026-12-02: 7 of 8 in the table), and the table leaves them out
    metas = {m.parent: json.loads(m.read_text()) for m in metas}
    passing = passing_trials({d: meta["health"] for d, meta in metas.items()})
    assert len(trials) == len(passing), res.stdout[-2000:]
    households = {i for b in cfg["households"]["buckets"] for i in b["ids"]}
    assert {meta["household"]["unit_id"] for meta in metas.values()} == households
    assert {t["household_id"] for t in trials} == {metas[d]["household"]["unit_id"]
                                                   for d in passing}
    assert {t["health_verdict"] for t in trials} == {"pass"}
    # each passing trial taught the admission what it cost here (testbed.hostlearn: this
    # boot's trial log beside the host record), once
    (log,) = (clone / "results" / "host").glob("*.trials.jsonl")
    taught = [json.loads(line)["trial"] for line in log.read_text().splitlines()]
    assert sorted(taught) == sorted(metas[d]["trial_id"] for d in passing), taught
    # every trial carried its link (11750's 20.5 Mbit/s downlink only to the 64 KiB window's
    # window / (2 x RTT), about 0.46 of it: docs/results.md)
    assert all(t["norm_tput"] > 0.4 for t in trials), [(t["trial_path"], t["norm_tput"])
                                                       for t in trials]
    for name in ("delay_tput.pdf", "delay_tput.png", "delay_tput.provenance.json"):
        assert (clone / "results" / "figures" / name).stat().st_size > 0
    print(f"make quick on a fresh clone: {took:.0f} s (set-up included)")
