"""Hostile and absurd values (issue "Hardening", section 1): every number has a finite range
and every name a safe form, checked in latency_divide.limits, with an error naming the key,
the value and what is allowed; the command exits non-zero and writes nothing."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from conftest import ROOT, VENV_BIN
from latency_divide import limits
from latency_divide.errors import ConfigError
from latency_divide.config import load_config

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

CLI = str(VENV_BIN / "latency-divide")


def _cfg(**changes):
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = raw
        for k in parents:
            node = node[int(k)] if k.isdigit() else node[k]
        node[int(last) if last.isdigit() else last] = value
    return raw


@pytest.mark.parametrize("path, value, named", [
    ("qfactor", float("nan"), "config: qfactor = nan"),
    ("qfactor", float("inf"), "config: qfactor = inf"),
    ("qfactor", 1e308, "config: qfactor = 1e+308"),
    ("qfactor", 1e6, "config: qfactor = 1000000.0"),
    ("variants__1__delta", float("nan"), "config: variants[1].delta = nan"),
    ("variants__0__window_bytes", 1 << 40, "config: variants[0].window_bytes"),
    ("trial__duration_s", 1e9, "config: trial.duration_s = 1000000000.0"),
    ("trial__idle_s", float("inf"), "config: trial.idle_s = inf"),
    ("trial__ping_interval_s", 1e-9, "config: trial.ping_interval_s"),
    ("trial__queue_interval_s", 1e5, "config: trial.queue_interval_s"),
    ("trial__repetitions", 10**9, "config: trial.repetitions"),
    ("trial__retries", 10**6, "config: trial.retries"),
    ("tool__window_bytes", 10**15, "config: tool.window_bytes"),
    ("households__seed", 2**70, "config: households.seed"),
    ("households__buckets__0__max", float("inf"), "config: households.buckets[0].max = inf"),
])
def test_absurd_numbers_are_refused_with_key_value_and_range(path, value, named):
    with pytest.raises(ConfigError) as e:
        load_config(_cfg(**{path: value}))
    assert named in str(e.value) and "allowed is" in str(e.value), str(e.value)


@pytest.mark.parametrize("path, value", [
    ("variants__0__name", "cubic\n"),
    ("variants__0__name", "c" * 300),
    ("variants__0__name", "c" * 41),
    ("households__buckets__0__name", "0-30\n"),
])
def test_names_must_end_where_they_end_and_be_short(path, value):
    with pytest.raises(ConfigError, match="name is 1 to 40 of letters"):
        load_config(_cfg(**{path: value}))


def test_the_published_configs_are_within_every_range():
    for f in ("config.yaml", "quick.yaml", "test.yaml", "fast-links.yaml", "mvfst.yaml",
              "mvfst-fast-links.yaml"):
        load_config(ROOT / "config" / f)


def test_ranges_are_closed_where_they_say_and_typed():
    assert limits.check("qfactor", 100) == 100 and limits.check("qfactor", 0.05) == 0.05
    assert limits.check("delta", 1.0) == 1.0
    for bad in (0, 0.0, True, "0.5", None):
        with pytest.raises(ConfigError):
            limits.check("delta", bad)
    with pytest.raises(ConfigError, match="an integer"):
        limits.check("repetitions", 2.0)


@pytest.mark.parametrize("argv, named", [
    (["linkplan", "11406", "--qfactor", "1e6"], "qfactor = 1000000.0"),
    (["linkplan", "11406", "--qfactor", "nan"], "qfactor = nan"),
    (["trial", "11406", "--direction", "uplink", "--cc", "copa", "--delta", "inf"], "delta = inf"),
    (["trial", "11406", "--direction", "uplink", "--cc", "cubic", "--duration", "1e9"],
     "duration_s = 1000000000.0"),
    (["trial", "11406", "--direction", "uplink", "--cc", "cubic", "--window", "10"],
     "window_bytes = 10"),
    (["trial", "11406", "--direction", "uplink", "--cc", "cubic", "--retries", "1000"],
     "--retries = 1000"),
    (["sample", "--bucket", "0-30", "-n", "0"], "= 0"),
    (["sample", "--bucket", "1000+", "-n", "2"], "its buckets: 0-30 [0, 30), 30-40"),
    (["publish", "--limit-mb", "inf"], "--limit-mb = inf"),
])
def test_command_line_values_are_refused_before_anything_runs(tmp_path, argv, named):
    out = tmp_path / "out"
    extra = ["--out", str(out)] if argv[0] == "trial" else []
    p = subprocess.run([CLI, *argv, *extra], capture_output=True, text=True, cwd=tmp_path,
                       timeout=60)
    assert p.returncode == 1 and named in p.stderr, p.stderr
    assert p.stdout == "" and not out.exists()
