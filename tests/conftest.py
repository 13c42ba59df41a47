"""Shared test helpers (keep small): the repository root, and the one gate for tests that need
root and network namespaces.

ROOT is the checkout under test (this file's tests/..); every test finds the repository's files
(config/, .venv/bin, target/release, resources/, tests/data/) from it, as
``from conftest import ROOT`` (or VENV_BIN, TEST_DATA, DATA_CSV) or the ``root`` fixture, and
nowhere else (tests/test_layout.py checks).

The gate is the ``netns`` marker (registered in pyproject.toml): a test marked
``@pytest.mark.netns`` (or a module with ``pytestmark = pytest.mark.netns``) is skipped, with
the reason, when the process is not root or the kernel refuses a new network namespace; its
fixtures are not set up then. As root, a missing ``ip`` is a broken setup, not a reason to
skip: those tests fail, naming scripts/setup.sh. Tests that need no namespace must not carry
the marker (they would be skipped for nothing).

The tiers are the ``slow`` marker: ``make test`` runs ``pytest -m "not slow"`` (the quick
tier), ``make test-all`` everything. The split is enforced here: a test without the ``slow``
marker whose set-up and call took over :data:`QUICK_LIMIT_S` fails, saying so (``pytest -o
quick_limit_s=N`` changes the limit, e.g. on a loaded machine).

The ``shared`` marker names the tests (a module's ``pytestmark`` or one test's decorator)
that measure nothing and time nothing (parsing, tables, figures, configs, docs, dry runs, the
re-analysis of published data): they may run beside another test. scripts/test.sh runs the
tests in two phases: ``--phase shared`` in two processes (pytest-xdist, a module to a process
at a time, the modules with the most slow tests first), then ``--phase alone`` in one,
where every other test (a real trial, the host check, the Slurm cluster, the SSH testbed,
anything that reads the host's clock or load) has the host to itself. A test marked
``shared`` and ``netns`` is an error: a namespace test changes the host.
"""

from __future__ import annotations

import collections
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]  # test_layout.py runs the gate below in a session of its own

# pytest rewrites the asserts of each test module it imports and keeps the result as a .pyc
# file, unless Python may not write bytecode: where PYTHONDONTWRITEBYTECODE is set (as on CI's
# machines), every pytest process rewrote all the modules again, half of the 9 s it took to
# collect the tests (2026-12-07). This lets this process write them; the environment its
# subprocesses get is unchanged.
sys.dont_write_bytecode = False

#: The checkout under test.
ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = ROOT / ".venv" / "bin"
#: Captured tool output (ping, qlog, queue, tool) and fixture trials (trials).
TEST_DATA = ROOT / "tests" / "data"
DATA_CSV = ROOT / "resources" / "digitaldivide" / "household-internet-data.csv"


#: The population draws the tests make are kept in a cache of their own (links.drawcache), not in
#: the user's (~/.cache/latency-divide), and removed at the end (pytest_unconfigure).
TEST_CACHE = Path(tempfile.gettempdir()) / f"ld-test-cache-{os.getpid()}"
os.environ["LATENCY_DIVIDE_CACHE_DIR"] = str(TEST_CACHE)

#: The workflows the tests run check the host before their first trial (docs/host.md) and, on a
#: host too noisy for some link, report it and go on: every trial's verdict is still judged, and
#: a test that needs a verdict to pass says so. tests/test_hostcheck.py, which tests the
#: refusal itself, runs without this.
os.environ.setdefault("LATENCY_DIVIDE_HOST_CHECK", "go-on")


def pytest_unconfigure(config: pytest.Config) -> None:
    if os.getpid() == int(TEST_CACHE.name.rsplit("-", 1)[1]):
        shutil.rmtree(TEST_CACHE, ignore_errors=True)


#: A test outside the ``slow`` tier may take this long (set-up and call, s), no longer.
QUICK_LIMIT_S = 30.0
_SETUP_S = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("quick_limit_s", f"the quick tier's limit per test, s (default {QUICK_LIMIT_S:g})",
                  default=str(QUICK_LIMIT_S))
    parser.addoption("--phase", choices=("all", "shared", "alone"), default="all",
                     help="the tests marked shared only (they may run beside others), the "
                          "others only (each with the host to itself), or all (default)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--phase: keep the tests of that phase, deselect the rest (scripts/test.sh)."""
    both = [i.nodeid for i in items
            if i.get_closest_marker("shared") and i.get_closest_marker("netns")]
    if both:
        raise pytest.UsageError(f"marked both shared and netns (a namespace test changes the "
                                f"host, it cannot run beside another): {', '.join(both)}")
    phase = config.getoption("phase")
    if phase == "all":
        return
    keep = [i for i in items if bool(i.get_closest_marker("shared")) == (phase == "shared")]
    kept = {id(i) for i in keep}
    gone = [i for i in items if id(i) not in kept]
    if gone:
        config.hook.pytest_deselected(items=gone)
    if phase == "shared":
        # whole modules: those with the most slow tests first (the re-analysis: about 270 s of
        # the phase's 510 s of tests, 2026-12-07), then those with the most tests (xdist's own
        # order; collection order took the quick tier's shared phase from 174 s to 191 s).
        # pytest-xdist hands them out in this order with --no-loadscope-reorder
        # (scripts/test.sh); by its own order the re-analysis started behind others
        slow = collections.Counter(i.path for i in keep if i.get_closest_marker("slow"))
        count = collections.Counter(i.path for i in keep)
        keep.sort(key=lambda i: (-slow[i.path], -count[i.path]))
    items[:] = keep


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def ssh_lab():
    """The four-node SSH lab (tests/sshlab.py: namespaces with real sshd), up once a session
    for test_ssh_hostcheck.py and test_ssh_testbed.py: bringing it up and provisioning it took
    6 s for each (2026-12-07). Down at the session's end, checked."""
    if not Path("/usr/sbin/sshd").exists():
        pytest.fail("needs OpenSSH's sshd (/usr/sbin/sshd): run scripts/setup.sh")
    for b in ("tquic-perf", "delayline"):
        if not (ROOT / "target" / "release" / b).exists():
            pytest.fail(f"needs target/release/{b}: run scripts/setup.sh")
    from sshlab import make_lab

    lab = make_lab()
    try:
        yield lab
    finally:
        errors = lab.down()
        shutil.rmtree(lab.dir, ignore_errors=True)
        assert not errors, errors


@pytest.fixture(scope="session")
def ssh_provisioned(ssh_lab):
    """Provision the lab with the command line tool (`latency-divide provision`), check what
    it found on each node, and return the inventory's path."""
    import json

    from latency_divide.testbed.inventory import load_inventory

    lab = ssh_lab
    inv = lab.write_inventory(lab.dir / "inventory.yaml")
    out = lab.dir / "provision"
    res = subprocess.run([str(VENV_BIN / "latency-divide"), "provision", "--inventory",
                          str(inv), "--out", str(out)], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    sl = load_inventory(inv).slices[0].name
    for role in ("server", "gateway", "delay", "client"):
        facts = json.loads((out / sl / f"{role}.json").read_text())
        assert facts["role"] == {"server": "srv", "gateway": "gw", "delay": "dly",
                                 "client": "cli"}[role]
    files = json.loads((out / sl / "server.json").read_text())["files"]
    assert files["tquic-perf"]["path"].startswith(str(lab.dir / "work" / "bin"))
    assert not json.loads((out / sl / "delay.json").read_text())["netem"]  # this kernel has none
    return inv


@functools.cache
def netns_skip_reason() -> str | None:
    """Why tests marked ``netns`` cannot run on this machine, or None if they can."""
    if sys.platform != "linux":
        return "needs Linux network namespaces"
    if os.geteuid() != 0:
        return "needs root (network namespaces, tc)"
    # A namespace of no name, gone with the process: nothing to clean up, nothing another
    # test's `latency-divide clean` could see. util-linux is Essential on Debian/Ubuntu.
    unshare = shutil.which("unshare")
    if unshare is not None:
        p = subprocess.run([unshare, "--net", "true"], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            return f"this kernel or container refuses a network namespace: {p.stderr.strip()}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The gate: runs before the test's fixtures are set up."""
    if item.get_closest_marker("netns") is None:
        return
    reason = netns_skip_reason()
    if reason is not None:
        pytest.skip(f"netns: {reason}")
    if shutil.which("ip") is None:
        pytest.fail("netns: `ip` (iproute2) is missing: run scripts/setup.sh (it installs it)",
                    pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """The tiers' guard: a passing test that is not marked ``slow`` and took over the quick
    tier's limit (its set-up, module fixtures included, and its call) fails."""
    outcome = yield
    rep = outcome.get_result()
    if call.when == "setup":
        item.stash[_SETUP_S] = call.duration
        return
    if call.when != "call" or not rep.passed or item.get_closest_marker("slow") is not None:
        return
    limit = float(item.config.getini("quick_limit_s"))
    setup_s = item.stash.get(_SETUP_S, 0.0)
    if setup_s + call.duration > limit:
        rep.outcome = "failed"
        rep.longrepr = (f"quick tier: {item.nodeid} took {setup_s + call.duration:.1f} s (set-up "
                        f"{setup_s:.1f} s, call {call.duration:.1f} s), over the limit of "
                        f"{limit:g} s for a test without the slow marker: mark it "
                        "@pytest.mark.slow (make test-all runs it) or make it quicker")
