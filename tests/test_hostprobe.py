"""hostprobe (tools/hostprobe) run for real: its JSON document has exactly schema hostprobe/1's
keys, every number is there and positive and each distribution is ordered; one allowed CPU
gives a null cross-core ping-pong without hanging; a refused SCHED_FIFO is reported; bad
options are refused by name; ``latency-divide host-probe`` passes the document through."""

import json
import os
import subprocess

import pytest

from latency_divide.paths import built_tool

from conftest import VENV_BIN

TOP_KEYS = ["schema", "seconds", "cpus", "cpu_model", "kernel", "fifo", "priority", "timer",
            "pingpong", "steal_pct"]
TIMER_KEYS = ["gap_us", "cpu", "wakeups", "cpu_us_per_wakeup", "late_us"]
PP_KEYS = ["wakeups", "cpu_us_per_wakeup", "latency_us"]
PCT_KEYS = ["p50", "p99", "p999", "max"]
GAPS_US = [100.0, 1000.0, 5000.0, 20000.0]


def hostprobe():
    path = built_tool("hostprobe")
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup.sh (cargo build --release -p hostprobe)")
    return path


def run(args, timeout=60, **kw):
    return subprocess.run([str(hostprobe()), *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def check_percentiles(p: dict, where: str) -> None:
    assert list(p) == PCT_KEYS, where
    assert all(isinstance(p[k], float) for k in PCT_KEYS), (where, p)
    assert 0 < p["p50"] <= p["p99"] <= p["p999"] <= p["max"], (where, p)


def check_document(doc: dict, cpus: list[int], gaps_us: list[float]) -> None:
    assert list(doc) == TOP_KEYS
    assert doc["schema"] == "hostprobe/1"
    assert doc["cpus"] == cpus
    assert isinstance(doc["cpu_model"], str) and doc["cpu_model"]
    assert doc["kernel"] == os.uname().release
    assert isinstance(doc["fifo"], bool) and doc["priority"] == 10
    assert 0.0 <= doc["steal_pct"] <= 100.0
    rows = doc["timer"]
    assert [(r["gap_us"], r["cpu"]) for r in rows] == [(g, c) for g in gaps_us for c in cpus]
    for r in rows:
        assert list(r) == TIMER_KEYS
        assert r["wakeups"] > 0 and r["cpu_us_per_wakeup"] > 0, r
        # about window x 0.7 / gaps / gap wake-ups (skipped deadlines aside)
        check_percentiles(r["late_us"], f"timer {r['gap_us']} us cpu {r['cpu']}")
    pp = doc["pingpong"]
    assert list(pp) == ["same_core", "cross_core"]
    for name in ("same_core", "cross_core"):
        if name == "cross_core" and len(cpus) == 1:
            assert pp[name] is None
            continue
        assert list(pp[name]) == PP_KEYS
        assert pp[name]["wakeups"] > 100 and pp[name]["cpu_us_per_wakeup"] > 0
        check_percentiles(pp[name]["latency_us"], name)


@pytest.mark.slow
def test_the_json_document_is_schema_1_with_every_number():
    res = run(["--json", "--seconds", "5"])
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    check_document(doc, sorted(os.sched_getaffinity(0)), GAPS_US)
    assert 4.9 <= doc["seconds"] <= 6.0
    assert doc["fifo"] == ("SCHED_FIFO 10 refused" not in res.stderr), res.stderr
    # 0.875 s per gap: the 100 µs row has thousands of wake-ups, the 20 ms one tens
    assert doc["timer"][0]["wakeups"] > 2000
    assert 20 <= doc["timer"][-1]["wakeups"] <= 44


def test_one_allowed_cpu_gives_a_null_cross_core_and_ends():
    cpu = max(os.sched_getaffinity(0))
    res = run(["--json", "--seconds", "1", "--gaps", "1ms"],
              preexec_fn=lambda: os.sched_setaffinity(0, {cpu}), timeout=20)
    assert res.returncode == 0, res.stderr
    check_document(json.loads(res.stdout), [cpu], [1000.0])


@pytest.mark.netns  # the gate for root: it drops to an unprivileged user
def test_a_refused_sched_fifo_is_reported_and_measured_anyway():
    def unprivileged():
        os.setgid(65534)
        os.setuid(65534)

    res = run(["--json", "--seconds", "1", "--gaps", "1ms"], preexec_fn=unprivileged, cwd="/",
              timeout=20)
    if res.returncode != 0 and "Permission denied" in res.stderr:
        pytest.skip(f"nobody cannot run {hostprobe()}: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["fifo"] is False
    assert "SCHED_FIFO 10 refused" in res.stderr
    check_document(doc, sorted(os.sched_getaffinity(0)), [1000.0])


@pytest.mark.parametrize("args, named", [
    (["--seconds", "0.5"], "--seconds"),
    (["--seconds", "abc"], "--seconds"),
    (["--gaps", "1ms,3"], '"3"'),
    (["--gaps", "5us"], "5us"),
    (["--priority", "100"], "--priority"),
    (["--cpus", "4095"], "CPU 4095"),
    (["--bogus"], "--bogus"),
])
def test_a_bad_option_is_refused_by_name(args, named):
    res = run(args, timeout=20)
    assert res.returncode == 2, res
    assert named in res.stderr, res.stderr
    assert res.stdout == ""


def test_latency_divide_host_probe_prints_the_document():
    res = subprocess.run([str(VENV_BIN / "latency-divide"), "host-probe", "--seconds", "1",
                          "--json"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    check_document(doc, sorted(os.sched_getaffinity(0)), GAPS_US)
    table = subprocess.run([str(VENV_BIN / "latency-divide"), "host-probe", "--seconds", "1"],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and "ping-pong same core" in table.stdout, table
    bad = subprocess.run([str(VENV_BIN / "latency-divide"), "host-probe", "--seconds", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--seconds" in bad.stderr
