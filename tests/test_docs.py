"""The docs stay pages a reader can finish, and say what is (issue 59).

- No page (README.md, docs/*.md) over 400 lines; CHANGELOG.md, the history, is exempt.
- No README table cell holds more than one measurement of the same thing: at most one
  wall-clock duration (`17 min 21 s`, `33 s`, `3 min 3 s` count as one each; units h, min, s,
  ms, µs) and at most one date (`2026-11-29`) per cell. The runs a cell used to list live in
  CHANGELOG.md.
- Every command the README shows (its code blocks, and the backtick spans of its tables) is
  accepted by its program: `latency-divide SUB --help` for each subcommand, a dry run for each
  snakemake command (its target and --configfile, in a scratch copy of the workflow, with
  LATENCY_DIVIDE_FORBID_TRIALS=1 so nothing is measured), `make -n TARGET` for each make
  target, `dvc SUB --help` for each dvc command.

Each checker is also run on a crafted bad case, so that it can fail.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

MAX_LINES = 400
#: A wall-clock duration: a number and a unit, and the parts that follow it in the same
#: duration ("17 min 21 s", "1 h 39 min") count as one.
_UNIT = r"(?:h|min|s|ms|µs|us)"
DURATION = re.compile(rf"(?<![\w.])\d+(?:[.,]\d+)?\s?{_UNIT}(?![\w/])"
                      rf"(?:\s+\d+(?:[.,]\d+)?\s?{_UNIT}(?![\w/]))*")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
#: The programs whose commands the README shows, as the README types them.
PROGRAMS = (".venv/bin/latency-divide", ".venv/bin/snakemake", ".venv/bin/dvc", "snakemake", "make")
#: What a scratch copy of the workflow needs (as tests/test_quickstart.py builds one).
WORKFLOW = ("Snakefile", "rules", "workflow", "config", "envs", "resources", "profiles", ".venv")


def pages(root: Path = ROOT) -> list[Path]:
    """The pages held to the length limit: the README and every docs/ page."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def long_pages(paths: list[Path], limit: int = MAX_LINES) -> list[str]:
    """Each page over `limit` lines, with its length."""
    out = []
    for p in paths:
        n = len(p.read_text().splitlines())
        if n > limit:
            out.append(f"{p.name}: {n} lines (at most {limit})")
    return out


def table_cells(text: str) -> list[tuple[int, str]]:
    """(line number, cell) for every cell of every Markdown table row, separator rows skipped."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not (s.startswith("|") and s.endswith("|")) or re.fullmatch(r"[|\s:-]+", s):
            continue
        out += [(i, c.strip()) for c in s.strip("|").split("|")]
    return out


def crowded_cells(text: str) -> list[str]:
    """Every table cell holding more than one duration or more than one date."""
    bad = []
    for line, cell in table_cells(text):
        for what, rx in (("durations", DURATION), ("dates", DATE)):
            found = rx.findall(cell)
            if len(found) > 1:
                bad.append(f"line {line}: {len(found)} {what} {found} in one cell: {cell[:120]}")
    return bad


def shown_commands(text: str) -> list[str]:
    """The commands a Markdown text shows: the lines of its code blocks (indented or fenced)
    and the backtick spans of its table cells, split at `&&` and `;`, comments dropped; only
    those of PROGRAMS."""
    chunks, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            chunks.append(line.split(" #")[0].strip())
    for _, cell in table_cells(text):
        chunks += re.findall(r"`([^`]+)`", cell)
    out = []
    for chunk in chunks:
        for cmd in re.split(r"&&|;", chunk):
            cmd = cmd.strip()
            if any(cmd == p or cmd.startswith(p + " ") for p in PROGRAMS):
                out.append(cmd)
    return list(dict.fromkeys(out))


def program_of(cmd: str) -> str:
    return Path(shlex.split(cmd)[0]).name


def check_argv(cmd: str) -> list[str]:
    """The argv that checks a shown command without running it (see the module docstring)."""
    words = shlex.split(cmd)
    prog = program_of(cmd)
    if prog == "latency-divide":
        return [str(ROOT / ".venv/bin/latency-divide"), words[1], "--help"]
    if prog == "dvc":
        return [str(ROOT / ".venv/bin/dvc"), *[w for w in words[1:] if not w.startswith("-")][:1],
                "--help"]
    if prog == "make":
        return ["make", "-n", *words[1:]]
    if prog == "snakemake":
        return [str(ROOT / ".venv/bin/snakemake"), *words[1:], "--dry-run"]
    raise ValueError(f"no check for {cmd!r}")


def run_check(cmd: str, workdir: Path | None = None) -> subprocess.CompletedProcess:
    """Run the check of one shown command: make in the checkout (`-n` prints, runs nothing),
    snakemake in `workdir` (a scratch copy of the workflow: a dry run there schedules every
    trial and measures none, and leaves the checkout's .snakemake alone)."""
    env = dict(os.environ, LATENCY_DIVIDE_FORBID_TRIALS="1")
    cwd = workdir if program_of(cmd) == "snakemake" else ROOT
    return subprocess.run(check_argv(cmd), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def unknown_options(cmd: str, help_text: str) -> list[str]:
    """The long options a shown latency-divide or dvc command uses that its --help does not
    name (a renamed or removed flag)."""
    opts = {w.split("=")[0] for w in shlex.split(cmd)[1:] if w.startswith("--")}
    return sorted(o for o in opts if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", help_text))


def scratch_workflow(tmp: Path) -> Path:
    wf = tmp / "wf"
    wf.mkdir()
    for item in WORKFLOW:
        (wf / item).symlink_to(ROOT / item)
    return wf


README = (ROOT / "README.md").read_text()
COMMANDS = shown_commands(README)


# ---- the checkers can fail -------------------------------------------------------------------

def test_the_length_check_finds_a_long_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("ok\n" * 400)
    (tmp_path / "docs" / "long.md").write_text("a line\n" * 401)
    assert long_pages(pages(tmp_path)) == ["long.md: 401 lines (at most 400)"]


def test_the_cell_check_finds_a_crowded_cell():
    bad = ("| command | wall clock |\n|---|---|\n"
           "| `make all` | 17 min 21 s on a fresh clone (2026-11-27); 19 min 3 s (2026-11-29) |\n"
           "| `make quick` | 33 s, earlier 4 min 37 s |\n"
           "| `make test` | 3 min 3 s (2026-11-27) |\n"
           "| 1 Mbit/s | 75.7 µs | 0.0295 |\n")
    found = crowded_cells(bad)
    assert len(found) == 3, found  # make all: two durations and two dates; make quick: two
    assert "['17 min 21 s', '19 min 3 s']" in found[0] and "2 dates" in found[1]
    assert "['33 s', '4 min 37 s']" in found[2]


def test_the_command_finder_reads_code_blocks_and_table_cells():
    text = ("    .venv/bin/dvc pull && .venv/bin/latency-divide verify   # the raw data\n"
            "```sh\nmake lock && git add dvc.lock\n```\n"
            "| `make quick` | 8 trials (`snakemake --cores 1 all --configfile config/quick.yaml`) |\n"
            "Prose `make prose` is not a shown command.\n")
    assert shown_commands(text) == [".venv/bin/dvc pull", ".venv/bin/latency-divide verify",
                                    "make lock", "make quick",
                                    "snakemake --cores 1 all --configfile config/quick.yaml"]


def test_the_option_check_finds_a_renamed_flag():
    help_text = run_check(".venv/bin/latency-divide sample --seed 1").stdout
    assert unknown_options(".venv/bin/latency-divide sample --seed 1 -n 10", help_text) == []
    assert unknown_options(".venv/bin/latency-divide sample --sed 1 --bucket=0-30",
                           help_text) == ["--sed"]


@pytest.mark.parametrize("cmd", [".venv/bin/latency-divide nosuch 11406", "make nosuch",
                                 ".venv/bin/dvc nosuch"])
def test_the_command_check_refuses_an_unknown_command(cmd):
    res = run_check(cmd)
    assert res.returncode != 0, (res.stdout[-500:], res.stderr[-500:])


def test_the_command_check_refuses_an_unknown_snakemake_target(tmp_path):
    res = run_check(".venv/bin/snakemake --cores 1 results/figures/nosuch.pdf",
                    scratch_workflow(tmp_path))
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "MissingRuleException" in out and "nosuch.pdf" in out, out[-1000:]


# ---- the docs as they are ----------------------------------------------------------------------

def test_no_page_over_400_lines():
    assert len(pages()) > 10
    assert not long_pages(pages()), "\n".join(long_pages(pages()))


def test_no_readme_table_cell_holds_two_measurements():
    cells = table_cells(README)
    assert sum(bool(DURATION.search(c)) for _, c in cells) >= 5  # the time table is read
    assert not crowded_cells(README), "\n".join(crowded_cells(README))


def test_the_readme_shows_each_kind_of_command():
    progs = {program_of(c) for c in COMMANDS}
    assert progs == {"latency-divide", "snakemake", "make", "dvc"}, COMMANDS
    assert {"make quick", "make test", "make all", "make test-all"} <= set(COMMANDS)


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if program_of(c) != "snakemake"])
def test_every_command_the_readme_shows_is_accepted(cmd):
    res = run_check(cmd)
    assert res.returncode == 0, f"{check_argv(cmd)}: {res.stdout[-1000:]}{res.stderr[-2000:]}"
    if program_of(cmd) != "make":  # and every long option it shows is one its --help names
        assert not unknown_options(cmd, res.stdout), (cmd, unknown_options(cmd, res.stdout))


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if program_of(c) == "snakemake"])
def test_every_snakemake_command_the_readme_shows_builds_its_dag(cmd, tmp_path):
    res = run_check(cmd, scratch_workflow(tmp_path))
    assert res.returncode == 0, f"{check_argv(cmd)}: {res.stdout[-1000:]}{res.stderr[-3000:]}"
