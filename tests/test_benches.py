"""The benches still run, and bench/README.md lists each one (issue 42).

Each bench's ``--help`` runs its imports and builds its argument parser: a bench whose code no
longer fits the package fails here, in the quick tier, instead of on the day someone needs its
numbers. The index must name every bench on disk, and every bench it lists must be on disk,
except those another issue is still adding (IN_PROGRESS).

The ``--help`` runs share one helper process (``bench_help``): it imports what the benches
share (numpy, pandas, pyarrow, yaml, the package's modules they use) once, then runs each bench
in a child of its own forked from it, as ``python bench/NAME.py --help`` would (the bench's own
imports and argument parser, its own exit status, output and 60 s limit; the same status and
output as a fresh interpreter, for every bench, when this was written). A fresh interpreter for
each bench spent 0.3 s of CPU importing the same modules, and the shared phase is CPU-bound on
the 2-core machine: ``pytest tests/test_benches.py -k parses`` took 13.5 s of CPU (15.6 s wall)
with a fresh interpreter for each bench, 2.3 s (2.5 s) with the helper, 0.6 s of either being
pytest's own start (medians of 3, 2026-12-08).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile

import pytest

from conftest import ROOT, VENV_BIN

BENCH = ROOT / "bench"
INDEX = BENCH / "README.md"
BENCHES = sorted(p.name for p in BENCH.glob("bench_*.py"))
#: Benches issue 40 is adding: checked once they are on disk with an argument parser (until
#: then a --help might run the bench itself).
IN_PROGRESS = {"bench_instrument_cost.py", "bench_tool_batching.py", "bench_delayline_window.py",
               "bench_instrument_fidelity.py"}
#: A bench's --help is killed after this long (s), and fails.
HELP_TIMEOUT_S = 60

#: The helper (``python -c HELPER BENCH_DIR TIMEOUT_S``): for each bench named on a line of its
#: stdin, a line of JSON on its stdout: {"rc", "stdout", "stderr"} of that bench's ``--help``.
HELPER = r'''
import json, os, runpy, select, signal, sys, tempfile, traceback

bench_dir, timeout_s = sys.argv[1], float(sys.argv[2])
sys.path[0] = bench_dir  # as for `python bench/NAME.py`: `from _common import ...` works
# What most benches import, once for all. A module that fails to import here is left out: the
# bench that imports it fails with the error, in its own child.
for name in ("numpy", "pandas", "pyarrow.parquet", "yaml", "latency_divide.analysis.metrics",
             "latency_divide.config", "latency_divide.data.households",
             "latency_divide.links.plan", "latency_divide.ops.admission",
             "latency_divide.trial.health", "latency_divide.trial.rawio", "_common"):
    try:
        __import__(name)
    except Exception:
        pass
sys.stdout.flush()
sys.stderr.flush()


def child(path, out, err):
    """Run ``path --help`` here, with fds 1 and 2 on ``out`` and ``err``; never returns."""
    code = 1
    try:
        # a bench reading stdin must not read the helper's requests
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = [path, "--help"]
        try:
            runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as e:  # as the interpreter reports it at exit
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)  # not the helper's loop, nor its exit handlers


for line in sys.stdin:
    path = os.path.join(bench_dir, line.strip())
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            child(path, out, err)
        pidfd = os.pidfd_open(pid)
        killed = not select.select([pidfd], [], [], timeout_s)[0]
        if killed:
            os.kill(pid, signal.SIGKILL)
        os.close(pidfd)
        rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        res = {}
        for key, f in (("stdout", out), ("stderr", err)):
            f.seek(0)
            res[key] = f.read().decode(errors="replace")
        if killed:
            res["stderr"] += f"\n(killed: no exit after {timeout_s:g} s)"
    print(json.dumps({"rc": rc, **res}), flush=True)
'''


def _checked(name: str):
    if name in IN_PROGRESS and "ArgumentParser" not in (BENCH / name).read_text():
        return pytest.param(name, marks=pytest.mark.skip(reason=f"{name}: no argument parser yet"))
    return name


def _index_rows() -> dict[str, str]:
    """bench name -> its table row, for the tables above the "Removed" section."""
    text = INDEX.read_text().split("\n## Removed", 1)[0]
    return {m.group(1): line for line in text.splitlines()
            for m in [re.match(r"\| `(bench_[a-z0-9_]+\.py)` \|", line)] if m}


@pytest.fixture(scope="module")
def bench_help():
    """bench name -> {"rc", "stdout", "stderr"} of its ``--help``, run by the helper (HELPER),
    started at the first bench asked for. One bench at a time: each test's time is its own
    bench's (the quick tier's limit), and ``-k`` runs only the benches it selects."""
    with tempfile.TemporaryFile(mode="w+") as log:  # the helper's own errors
        helper = subprocess.Popen([str(VENV_BIN / "python"), "-c", HELPER, str(BENCH),
                                   str(HELP_TIMEOUT_S)], cwd=ROOT, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, text=True)

        def run(bench: str) -> dict:
            try:
                helper.stdin.write(bench + "\n")
                helper.stdin.flush()
                answer = helper.stdout.readline()
            except BrokenPipeError:  # it exited at an earlier bench
                answer = ""
            if not answer:
                log.seek(0)
                pytest.fail(f"the --help helper exited ({helper.wait()}): {log.read()[-2000:]}")
            return json.loads(answer)

        try:
            yield run
        finally:
            helper.communicate(timeout=HELP_TIMEOUT_S)  # it exits at the end of its input


@pytest.mark.shared  # measures nothing and times nothing (tests/conftest.py)
def test_the_index_lists_every_bench_on_disk_and_no_other():
    rows = _index_rows()
    assert not set(BENCHES) - set(rows), f"not in bench/README.md: {set(BENCHES) - set(rows)}"
    gone = {b for b, row in rows.items() if b not in BENCHES and b not in IN_PROGRESS}
    assert not gone, f"listed in bench/README.md but not in bench/: {gone}"
    for b, row in rows.items():
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 5 and all(cells), f"{b}: question, cited in, cost, run: {row}"
    removed = INDEX.read_text().split("\n## Removed", 1)[1]
    for b in re.findall(r"\| `(bench_[a-z0-9_]+\.py)` \|", removed):
        assert b not in BENCHES, f"{b} is listed as removed but is in bench/"


@pytest.mark.shared  # measures nothing and times nothing (tests/conftest.py)
@pytest.mark.parametrize("bench", [_checked(b) for b in BENCHES])
def test_each_bench_parses_its_arguments(bench, bench_help):
    res = bench_help(bench)
    assert res["rc"] == 0, f"{bench} --help: {res['stderr'][-2000:]}"
    assert "usage:" in res["stdout"], res["stdout"][:500]


def test_host_calibration_measures_this_machine():
    """bench_instrument_cost's header: the CPU model and kernel, and what a timer wake-up and a
    wake-up on the same core and across cores cost, measured here (not read from a table)."""
    import os
    import sys
    sys.path.insert(0, str(BENCH))
    try:
        from _common import calibration_line, host_calibration
    finally:
        sys.path.remove(str(BENCH))
    cal = host_calibration(wakeups=2000)
    models = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
              if line.split(":", 1)[0].strip() == "model name"]
    assert cal["cpu_model"] == (models[0] if models else None)
    assert cal["kernel"] == os.uname().release and cal["cpus"] == os.cpu_count()
    # a wake-up costs something and less than a millisecond on any machine this runs on
    assert 0 < cal["timer_wake_cpu_us"] < 1000, cal
    assert 0 < cal["same_core_wake_us"] < 1000, cal
    if len(os.sched_getaffinity(0)) > 1:
        assert 0 < cal["cross_core_wake_us"] < 1000, cal
    assert cal["timer_policy"] in ("SCHED_FIFO 10", "normal")
    assert f"kernel {cal['kernel']}" in calibration_line(cal)
