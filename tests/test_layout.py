"""The package layout shows the pipeline (issue 15), checked on the source with ``ast``:

- no import cycles among latency_divide modules (imports at module level and inside functions);
- stage order: a module imports only from its own stage or an earlier one;
- no module over 400 lines;
- the top-level package holds only the core modules and the stages;
- every import of the package, in it and around it (tests, code the tests run from strings,
  workflow scripts, rules, benches), names a module that exists and a name it defines;
- the test suite's own rules: one repository root and one namespace gate (tests/conftest.py).

(That a trial job does not import pandas/pyarrow/numpy/plotnine: tests/test_job_startup.py.)
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

PACKAGE = "latency_divide"
SRC = ROOT / "src" / PACKAGE
#: The core: what every stage may use.
CORE = ("__init__", "errors", "fsio", "limits", "paths", "vocab")
#: The stages in pipeline order (after the core); each a subpackage (or, for a one-module
#: stage such as config, a module) of the top-level package.
STAGES = ("core", "data", "links", "config", "parsers", "testbed", "trial", "ops", "analysis",
          "cli")
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module of ours
    where: str  # file:line


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py")) if "__pycache__" not in p.parts}


MODULES = _modules()


def _is_package(mod: str) -> bool:
    return MODULES[mod].name == "__init__.py"


def _ours(name: str) -> str | None:
    """The longest prefix of a dotted name that is one of our modules, None if not ours."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        cand = ".".join(parts[:n])
        if cand in MODULES:
            return cand
    return None


def imports_of(mod: str, source: str | None = None) -> list[Import]:
    """Every import of our modules in ``mod`` (its file, or ``source``), wherever it is:
    module level, functions, methods, ``if TYPE_CHECKING:``."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    rel = path.relative_to(ROOT)
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = mod.split(".") if _is_package(mod) else mod.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1])
                frm = f"{base}.{node.module}" if node.module else base
            else:
                frm = node.module or ""
            # `from a.b import c`: the module a.b.c if there is one, else a.b itself
            targets = [f"{frm}.{a.name}" if f"{frm}.{a.name}" in MODULES else frm
                       for a in node.names]
        for t in targets:
            ours = _ours(t)
            if ours is not None and ours != mod:
                out.append(Import(mod, ours, f"{rel}:{node.lineno}"))
    return out


IMPORTS = [i for mod in MODULES for i in imports_of(mod)]


def stage_of(mod: str) -> str | None:
    parts = mod.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in CORE):
        return "core"
    return parts[1] if parts[1] in STAGES else None


def test_the_package_is_found_and_parsed():
    """Guards the other tests against passing on nothing."""
    assert {"latency_divide", "latency_divide.errors", "latency_divide.trial.run",
            "latency_divide.cli"} <= set(MODULES), sorted(MODULES)
    assert len(MODULES) > 40 and len(IMPORTS) > 100


def test_imports_are_seen_everywhere_and_resolved():
    source = (
        "import latency_divide.links.plan as plan\n"
        "from latency_divide.data import buckets, households\n"
        "from .. import errors\n"
        "from . import run\n"
        "def late():\n"
        "    from latency_divide.cli import main\n"
        "class C:\n"
        "    def m(self):\n"
        "        import latency_divide.analysis.tables\n"
        "import json, pandas\n")
    got = {(i.target, i.where.rsplit(":", 1)[1])
           for i in imports_of("latency_divide.trial.spec", source)}
    assert got == {("latency_divide.links.plan", "1"), ("latency_divide.data.buckets", "2"),
                   ("latency_divide.data.households", "2"), ("latency_divide.errors", "3"),
                   ("latency_divide.trial.run", "4"), ("latency_divide.cli", "6"),
                   ("latency_divide.analysis.tables", "9")}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    edges: dict[str, set[str]] = {}
    for i in IMPORTS:
        edges.setdefault(i.source, set()).add(i.target)
    problems = []
    for comp in _cycles(edges):
        inside = sorted({f"{i.where}: {i.source} -> {i.target}" for i in IMPORTS
                         if i.source in comp and i.target in comp})
        problems.append(f"cycle among {', '.join(comp)}:\n    " + "\n    ".join(inside))
    assert not problems, "\n".join(problems)


def test_stage_order():
    """A module imports only from its own stage or an earlier one
    (core < data < config < links < parsers < testbed < trial < ops < analysis < cli)."""
    later = []
    for i in IMPORTS:
        src, dst = stage_of(i.source), stage_of(i.target)
        if src is None or dst is None:
            continue  # test_top_level_holds_only_core_and_stages names it
        if STAGES.index(dst) > STAGES.index(src):
            later.append(f"{i.where}: {i.source} ({src}) imports {i.target} ({dst})")
    assert not later, "imports from a later stage:\n" + "\n".join(sorted(later))


def test_stage_order_catches_a_late_import():
    assert STAGES.index(stage_of("latency_divide.trial.run")) > STAGES.index(
        stage_of("latency_divide.data.buckets"))
    assert stage_of("latency_divide.paths") == stage_of("latency_divide") == "core"
    assert stage_of("latency_divide.config") == "config"
    assert stage_of("latency_divide.testbed.ssh.testbed") == "testbed"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_top_level_holds_only_core_and_stages():
    stray = []
    for p in sorted(SRC.iterdir()):
        if p.name == "__pycache__" or p.name == "py.typed":
            continue
        if p.is_dir():
            if p.name not in STAGES[1:]:
                stray.append(f"{p.name}/: not a stage")
            elif not (p / "__init__.py").is_file():
                stray.append(f"{p.name}/: a stage without __init__.py")
        elif p.suffix == ".py":
            if p.stem not in CORE and p.stem not in STAGES[1:]:
                stray.append(f"{p.name}: neither a core module nor a stage")
        else:
            stray.append(f"{p.name}: not a Python module")
    assert not stray, "src/latency_divide/ holds:\n" + "\n".join(stray)
    # every module belongs to the core or a stage
    assert all(stage_of(m) for m in MODULES), [m for m in MODULES if not stage_of(m)]


@pytest.mark.parametrize("stage", STAGES[1:])
def test_each_stage_exists(stage):
    assert f"{PACKAGE}.{stage}" in MODULES, f"no stage {stage} in src/latency_divide"


# --- every import of the package resolves ---------------------------------------------------

#: Where code outside the package imports it (including code run from strings, as tests do).
USERS = ("tests/**/*.py", "workflow/**/*.py", "rules/*.smk", "Snakefile", "bench/**/*.py",
         "scripts/**/*.py")
_IMPORT_RE = re.compile(
    r"(?:^|[\s\"';])(?:from\s+(latency_divide(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n\"'#;]*)"
    r"|import\s+(latency_divide(?:\.\w+)*))")


@functools.cache  # each module parsed once: the import check asks for some 2,000 names
def _top_level_names(mod: str) -> frozenset[str]:
    """Names a module defines at its top level (defs, classes, assignments, imports)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for part in ("body", "orelse", "finalbody"):
                    visit(getattr(node, part, []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)

    visit(ast.parse(MODULES[mod].read_text()).body)
    return frozenset(names)


def unresolved(module: str, names: list[str] | None) -> list[str]:
    """What of ``import module`` (names None) or ``from module import names`` does not exist."""
    if module not in MODULES:
        return [module]
    if names is None:
        return []
    return [f"{module}.{n}" for n in names
            if n != "*" and f"{module}.{n}" not in MODULES and n not in _top_level_names(module)]


def _names(text: str) -> list[str]:
    """The imported names of ``from M import <text>`` (in a file or a string literal)."""
    text = re.sub(r"#[^\n]*", "", text.replace("\\n", "\n"))
    return [m.group(1) for part in text.strip("()").split(",")
            if (m := re.match(r"\s*(\w+|\*)", part))]


def test_resolver_catches_missing_modules_and_names():
    assert unresolved("latency_divide.data.buckets", ["PAPER_IDS", "sample_bucket"]) == []
    assert unresolved("latency_divide", ["PREFIX", "errors"]) == []
    assert unresolved("latency_divide", ["ssh"]) == ["latency_divide.ssh"]
    assert unresolved("latency_divide.households", None) == ["latency_divide.households"]
    assert unresolved("latency_divide.data.buckets", ["no_such_name"]) == [
        "latency_divide.data.buckets.no_such_name"]
    m = _IMPORT_RE.search('x = "from latency_divide.data import (\\n  buckets,\\n  source as s)"')
    assert m and m.group(1) == "latency_divide.data" and _names(m.group(2)) == ["buckets", "source"]


def test_every_import_of_the_package_names_what_exists():
    missing = []
    for mod in MODULES:  # the package itself, by its syntax tree
        tree = ast.parse(MODULES[mod].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module and (
                    node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                bad = unresolved(node.module, [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                bad = [b for a in node.names if a.name.split(".")[0] == PACKAGE
                       for b in unresolved(a.name, None)]
            else:
                continue
            missing += [f"{MODULES[mod].relative_to(ROOT)}:{node.lineno}: {b}" for b in bad]
    for pattern in USERS:  # around it, by text: code in strings is seen too
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text()
            for m in _IMPORT_RE.finditer(text):
                line = text.count("\n", 0, m.start(1) if m.group(1) else m.start(3)) + 1
                bad = (unresolved(m.group(1), _names(m.group(2))) if m.group(1)
                       else unresolved(m.group(3), None))
                missing += [f"{path.relative_to(ROOT)}:{line}: {b}" for b in bad]
    assert not missing, "imports of what does not exist:\n" + "\n".join(missing)


# --- the test suite's own rules: one root, one gate (conftest.py) ---------------------------

#: What only conftest.py may do: find the checkout, or decide about root and namespaces.
_OWN_GATES = {
    "a root of its own": re.compile(r"Path\(__file__\)[^\n]*\.parents?\b|\brepo_root\(\)"),
    "a root check of its own": re.compile(r"\bgeteuid\(\)"),
    "a skip marker for root": re.compile(r"\bneeds_root\b|skipif\([^)]*(?:geteuid|root)"),
}


def test_one_root_and_one_namespace_gate():
    """conftest.py alone defines the checkout (ROOT) and gates on root and namespaces (the
    ``netns`` marker); test files import ROOT and mark tests ``netns``. (Helper scripts under
    tests/data/ that run outside pytest find their own directory.)"""
    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        if path.name in ("conftest.py", "test_layout.py", "netns_util.py"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"tests/{path.name}:{i}: {what}: {line.strip()}"
                      for what, pattern in _OWN_GATES.items() if pattern.search(line)]
    assert not found, "\n".join(found)


_GATED = '''
import pytest

@pytest.mark.netns
def test_marked():
    pass

def test_unmarked():
    pass
'''


def test_the_netns_marker_skips_when_not_root(pytester, monkeypatch):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_gated=_GATED)
    pytester.makeini("[pytest]\nmarkers =\n    netns: gated\n")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    res = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["*SKIPPED*netns: needs root*"])


def test_the_netns_marker_fails_as_root_without_ip(pytester, monkeypatch):
    """As root, a missing `ip` is a broken setup, not a reason to skip: an error."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_gated=_GATED)
    pytester.makeini("[pytest]\nmarkers =\n    netns: gated\n")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(pytester.path))  # no ip, no unshare
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, errors=1)  # failed in setup, before any fixture
    res.stdout.fnmatch_lines(["*netns: `ip` (iproute2) is missing: run scripts/setup.sh*"])


_TIMED = '''
import time
import pytest


def test_quick():
    pass


def test_over_the_limit():
    time.sleep(0.6)


@pytest.mark.slow
def test_over_the_limit_but_slow():
    time.sleep(0.6)


@pytest.fixture(scope="module")
def costly():
    time.sleep(0.6)


def test_its_fixture_counts(costly):
    pass
'''


def test_a_test_over_the_quick_limit_without_the_slow_marker_fails(pytester):
    """The tiers' guard (tests/conftest.py): over the limit (here 0.5 s instead of 30 s), a
    test outside the slow tier fails and says why; its fixtures' set-up counts; a slow test
    may take as long as it needs."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_timed=_TIMED)
    pytester.makeini("[pytest]\nmarkers =\n    netns: gated\n    slow: long\n"
                     "quick_limit_s = 0.5\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=2, failed=2)
    res.stdout.fnmatch_lines(["*quick tier: test_timed.py::test_over_the_limit took 0.6 s*"
                              "over the limit of 0.5 s*mark it @pytest.mark.slow*",
                              "*FAILED test_timed.py::test_over_the_limit *",
                              "*FAILED test_timed.py::test_its_fixture_counts*"],
                             consecutive=False)
    # the quick tier as make test selects it: the slow test is not run at all
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-m", "not slow")
    res.assert_outcomes(passed=1, failed=2, deselected=1)


_PHASED = '''
import pytest

pytestmark = pytest.mark.shared


def test_parses():
    pass


@pytest.mark.slow
def test_reanalyses():
    pass
'''

_PULLS = '''
import pytest

pytestmark = [pytest.mark.shared, pytest.mark.slow]


def test_pulls():
    pass


def test_reanalyses_all():
    pass
'''

_ALONE = '''
import pytest


def test_measures():
    pass


@pytest.mark.shared
def test_dry_run():
    pass
'''


def test_the_two_phases_select_by_the_shared_marker_and_refuse_it_on_a_netns_test(pytester):
    """scripts/test.sh's phases (tests/conftest.py): --phase shared runs the tests marked
    shared (a module's or one test's mark; whole modules, those with the most slow tests
    first), --phase alone every other
    one, a test without the mark runs alone; a test marked shared and netns is an error."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_phased=_PHASED, test_alone=_ALONE, test_pulls=_PULLS)
    pytester.makeini("[pytest]\nmarkers =\n    netns: gated\n    slow: long\n    shared: beside\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--phase", "shared", "-v")
    res.assert_outcomes(passed=5, deselected=1)
    # whole modules, the most slow tests first, then the most tests, then as collected
    res.stdout.fnmatch_lines(["*test_pulls.py::test_pulls PASSED*",
                              "*test_pulls.py::test_reanalyses_all PASSED*",
                              "*test_phased.py::test_parses PASSED*",
                              "*test_phased.py::test_reanalyses PASSED*",
                              "*test_alone.py::test_dry_run PASSED*"])
    # without a slow test, the module with more tests first (test_alone's three before
    # test_aa's one, collected first)
    pytester.makepyfile(test_pulls="", test_phased="", test_alone=_ALONE.replace(
        "def test_measures():", "@pytest.mark.shared\ndef test_a():\n    pass\n\n\n"
        "@pytest.mark.shared\ndef test_b():\n    pass\n\n\ndef test_measures():"),
        test_aa="import pytest\n\npytestmark = pytest.mark.shared\n\n\ndef test_one():\n"
                 "    pass\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--phase", "shared", "-v")
    res.assert_outcomes(passed=4, deselected=1)
    res.stdout.fnmatch_lines(["*test_alone.py::test_a PASSED*", "*test_alone.py::test_b PASSED*",
                              "*test_alone.py::test_dry_run PASSED*",
                              "*test_aa.py::test_one PASSED*"])
    pytester.makepyfile(test_pulls=_PULLS, test_phased=_PHASED, test_alone=_ALONE)
    (pytester.path / "test_aa.py").unlink()
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--phase", "alone", "-v")
    res.assert_outcomes(passed=1, deselected=5)
    res.stdout.fnmatch_lines(["*test_alone.py::test_measures PASSED*"])
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=6)
    pytester.makepyfile(test_both="import pytest\n\n\n@pytest.mark.shared\n"
                                  "@pytest.mark.netns\ndef test_both():\n    pass\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--phase", "shared")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*marked both shared and netns*test_both.py::test_both*"])
