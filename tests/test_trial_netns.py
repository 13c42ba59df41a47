"""Real trials on the local testbed (network namespaces, htb+bfifo, the delay line or netem,
our QUIC tool): fidelity of the emulated link, the raw layout, and the workflow's trial stage
including a run killed midway, cleaned up and resumed."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from latency_divide.paths import built_tool
from latency_divide.testbed.local import resolve_delay_mechanism
from latency_divide.testbed.netns import CLIENT_ADDR, GATEWAY_EGRESS, existing_namespaces
from latency_divide.config import ToolSettings, Variant, load_config
from latency_divide.errors import TrialError
from latency_divide.data.households import get_household
from latency_divide.parsers.ping import parse_ping
from latency_divide.parsers.queue import parse_queue
from latency_divide.parsers.tool import parse_tool_log
from latency_divide.trial.layout import SETUP_KEYS
from latency_divide.trial import rawio
from latency_divide.trial.rawio import full_meta, read_text
from latency_divide.testbed.runners import pid_alive
from latency_divide.trial.spec import TrialSpec
from latency_divide.trial.run import run_trial
from latency_divide.testbed.haltpoll import DEFAULT_NS, read_ns
from latency_divide.trial.meta import cpu_busy_pct, cpu_model, cpu_times
from latency_divide.trial.sweep import trial_ids
from latency_divide.trial.layout import trial_meta_path

from conftest import ROOT, VENV_BIN

pytestmark = pytest.mark.netns

BIG_WINDOW = 16 * 1024 * 1024  # flow control out of the way: the link is the bottleneck
#: format 4: meta.json and the archive, which holds (at least) these logs
EXPECTED_FILES = {"meta.json", "logs.tar.xz"}
EXPECTED_MEMBERS = {"receiver.log", "sender.log", "ping.log", "queue.jsonl", "setup.json"}


def _cubic(household, direction="downlink", duration=8.0, window=BIG_WINDOW):
    return TrialSpec(household=get_household(household), direction=direction,
                     variant=Variant(name="cubic", cc="cubic"), duration_s=duration, idle_s=2.0,
                     tool=ToolSettings(name="tquic-perf", path=None, window_bytes=window))


def _wait_for_a_quiet_host(busy_pct: float = 25.0, timeout_s: float = 30.0) -> None:
    """Before a fidelity trial: wait (at most ``timeout_s``) until the host's CPUs are mostly
    idle over a second: the kernel tears the namespaces of earlier tests down in the
    background, and other users share this host."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = cpu_times()
        time.sleep(1.0)
        busy = cpu_busy_pct(before, cpu_times())
        if busy is None or busy <= busy_pct:
            return


def _wire_kbps(d: Path, meta: dict) -> float:
    """What the bottleneck sent during the transfer, on the wire: the byte count of the FIFO
    under the gateway's htb class (frames, as the rate is configured; every packet takes that
    class) at the queue samples nearest the transfer's start and end."""
    rows = [json.loads(line) for line in read_text(d, "queue.jsonl").splitlines() if line]
    t = meta["timing"]

    def sent_at(when: float) -> tuple[float, int]:
        r = min(rows, key=lambda r: abs(r["t_unix"] - when))
        return r["t_unix"], next(q["bytes"] for q in r["qdisc"] if q["kind"] == "bfifo")

    (ta, a), (tb, b) = sent_at(t["transfer_started_unix"]), sent_at(t["transfer_ended_unix"])
    return (b - a) * 8 / 1000 / (tb - ta)


def _metrics(d: Path) -> dict:
    meta = full_meta(d)
    tool = parse_tool_log(read_text(d, "receiver.log"))
    ping = parse_ping(read_text(d, "ping.log"))
    t0 = meta["timing"]["transfer_started_unix"]
    idle = ping[(ping.t_unix < t0) & (ping.t_unix > t0 - meta["idle_s"] + 0.5)]["rtt_ms"]
    queue = parse_queue(read_text(d, "queue.jsonl"))
    limit = meta["linkplan"][meta["direction"]]["queue_bytes"]
    return {"meta": meta, "goodput_kbps": tool.goodput_kbps, "wire_kbps": _wire_kbps(d, meta),
            "capacity_kbps": meta["capacity_kbps"], "idle_rtt_ms": idle.min(),
            "queue_max_bytes": queue["backlog_bytes"].max(), "queue_limit_bytes": limit,
            "drops": int(queue["drops"].sum())}


@pytest.mark.parametrize("household", [11406, 8268], ids=["slow-3.5Mbit", "fast-37Mbit"])
@pytest.mark.slow
def test_cubic_fills_the_link_and_its_queue(tmp_path, household):
    """Fidelity: Cubic fills the link, >= 90% of the configured rate on the wire (the htb's
    own byte count: the rate is configured in frames), with a goodput >= 85% of it (QUIC,
    UDP, IP and Ethernet headers take about 6% of these 1,240-byte frames, so goodput is at
    most ~94% of the rate); the bfifo fills to within 10% of its limit, the idle RTT is the
    household's RTT within 1 ms, nothing is left behind. The host is shared and its CPU is
    sometimes taken (steal): up to three trials are run while they fall short of the rate,
    and the best of those whose health verdict passed is judged (a trial the verdict fails is
    left out of the tables, as the analysis does). Where the verdict failed every attempt, the
    host could not hold the link while the test ran: the test says so and why, and skips."""
    tried = []
    for attempt in "abc":
        _wait_for_a_quiet_host()
        d = run_trial(_cubic(household), tmp_path / attempt)
        assert EXPECTED_FILES == {p.name for p in d.iterdir()}
        assert EXPECTED_MEMBERS <= set(rawio.members(d))
        m = _metrics(d)
        tried.append((d, m))
        if (m["meta"]["health"]["verdict"] == "pass"
                and m["wire_kbps"] >= 0.9 * m["capacity_kbps"]):
            break
    judged = [t for t in tried if t[1]["meta"]["health"]["verdict"] == "pass"]
    if not judged:
        pytest.skip("the host bent every attempt (each failed its health verdict: "
                    + "; ".join(", ".join(t[1]["meta"]["health"]["reasons"]) for t in tried)
                    + ")")
    d, m = max(judged, key=lambda t: t[1]["wire_kbps"])
    h = get_household(household)
    assert m["capacity_kbps"] == h.download_kbps
    assert m["wire_kbps"] >= 0.9 * m["capacity_kbps"], m
    assert m["goodput_kbps"] >= 0.85 * m["capacity_kbps"], m
    assert m["queue_max_bytes"] >= 0.9 * m["queue_limit_bytes"], m
    assert abs(m["idle_rtt_ms"] - h.rtt_ms) <= 1.0, m
    assert m["meta"]["delay_mechanism"] == resolve_delay_mechanism("auto")
    assert not [n for n in existing_namespaces()
                if n.startswith(f"ld-{m['meta']['testbed']['tag']}-")]


def test_uplink_sender_runs_on_the_client_and_meta_is_complete(tmp_path):
    spec = TrialSpec(household=get_household(9747), direction="uplink",
                     variant=Variant(name="copa-0.5", cc="copa", delta=0.5), duration_s=4,
                     idle_s=1.0)
    from latency_divide.ops.admission import spec_rt_cores

    d = run_trial(spec, tmp_path, expected_rt_cores=spec_rt_cores(spec))
    assert d == tmp_path / spec.definition_id() / "9747" / "uplink" / "copa-0.5" / "rep1"
    meta = json.loads((d / "meta.json").read_text())
    # the trial's definition: recorded, in its directory's definition.json, and in its path
    defn = json.loads((d.parents[3] / "definition.json").read_text())
    assert meta["definition"] == defn["definition"] == spec.definition()
    assert meta["definition_id"] == defn["id"] == d.parts[-5]
    assert defn["definition"]["variant"] == {"cc": "copa", "delta": 0.5}
    assert defn["definition"]["trial"]["duration_s"] == 4.0
    assert meta["tool"]["sender_node"] == "cli" and meta["tool"]["receiver_node"] == "srv"
    assert meta["tool"]["sender_argv"][meta["tool"]["sender_argv"].index("-host") + 1] == \
        CLIENT_ADDR
    assert "-latency_factor" in meta["tool"]["sender_argv"]
    assert meta["capacity_kbps"] == get_household(9747).upload_kbps
    assert meta["queue"]["dev"] == GATEWAY_EGRESS["uplink"]
    # format 4: two files, every log and the set-up records packed in the archive, meta.json
    # in one 4 KiB block
    assert meta["format_version"] == 4
    assert sorted(p.name for p in d.iterdir()) == ["logs.tar.xz", "meta.json"]
    assert (d / "meta.json").stat().st_size <= 4096
    assert {"receiver.log", "ping.log", "queue.jsonl", "setup.json", "delayline.log"} <= \
        set(meta["archive"]["members"])
    assert not set(SETUP_KEYS) & set(meta)
    meta = full_meta(d)
    for key in ("household", "linkplan", "variant", "tool", "host", "delay_mechanism",
                "qdisc_before", "qdisc_after", "testbed", "sched", "timing", "concurrency",
                "git_revision", "config_hash", "format_version"):
        assert key in meta, key
    assert meta["host"]["kernel"] == os.uname().release
    assert meta["host"]["cpu_model"] == cpu_model()  # the machine: its CPU figures are its own
    # the queue sampled by our native sampler (tools/qsampler), as the trial's argv records
    q_argv = meta["queue"]["argv"]
    assert Path(q_argv[q_argv.index("--dev") - 1]) == built_tool("qsampler"), q_argv
    gw_kinds = {q["kind"] for q in meta["qdisc_before"]["gw"]}
    assert {"htb", "bfifo"} <= gw_kinds
    assert parse_tool_log(read_text(d, "receiver.log")).complete
    # the instrument that measured it (trial.instrument): delay line 0.2's release windows,
    # tquic-perf's batching, generation v2 (the admission's cost model of its own)
    inst, detail = meta["instrument"], meta["instrument_detail"]
    if meta["delay_mechanism"] == "delayline":
        dl = detail["delay"]["delayline"]
        assert dl["engine"] == "batched" and dl["frames_per_wake"] >= 0 and dl["frames"] > 0
        assert 0 < dl["wakeups_per_frame"] <= 1.5, dl
        assert inst["delay"]["delayline"]["engine"] == "batched"
    assert inst["generation"] == "v2"
    if meta["delay_mechanism"] == "delayline":  # a slow link: the kernel's NAPI
        assert inst["delay"]["rx_napi"] == "off" == meta["testbed"]["rx_napi"]
    assert detail["tool"]["sender_batching"]["send"]["mode"], detail["tool"]
    assert inst["tool"]["sender"]["send"] == detail["tool"]["sender_batching"]["send"]["mode"]
    # a slow link's processes run on one core, the record of it gone afterwards
    assert meta["placement"]["cpu"] in os.sched_getaffinity(0), meta["placement"]
    assert not list((Path("/run/latency-divide") / "cpus").glob(f"{os.getpid()}.json"))
    # with the host's halt polling held while it ran (testbed.haltpoll), and let go after
    host_poll = read_ns()
    if host_poll is None:
        assert meta["placement"]["halt_poll_ns"] is None
    else:
        assert meta["placement"]["halt_poll_ns"] >= DEFAULT_NS, meta["placement"]
        assert meta["placement"]["host_halt_poll_ns"] == host_poll
        assert not (Path("/run/latency-divide") / "haltpoll" / str(os.getpid())).exists()
    # nothing but the final directory in the parent: the temporary one was renamed
    assert [p.name for p in d.parent.iterdir()] == ["rep1"]


def test_failed_trial_leaves_no_directory(tmp_path):
    spec = _cubic(11406, duration=2.0)
    bad = TrialSpec(**{**spec.__dict__, "tool": ToolSettings(
        name="tquic-perf", path=str(ROOT / "target" / "release" / "delayline"),
        window_bytes=65536)})  # a binary that is not a traffic tool: the sender never listens
    with pytest.raises(TrialError, match="sender"):
        run_trial(bad, tmp_path)
    leftovers = [p for p in tmp_path.rglob("*") if p.is_dir() and p.name.startswith(("rep", ".ld"))]
    assert leftovers == []


# ------------------------------------------------------------------------------------------
# the workflow: tiny config, killed midway, cleaned, resumed
# ------------------------------------------------------------------------------------------

def _workflow_copy(dst: Path) -> Path:
    for item in ("Snakefile", "rules", "workflow", "config", "envs", "resources"):
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dst / item)
        else:
            shutil.copy2(src, dst / item)
    return dst


def _config(dst: Path, **trial) -> Path:
    cfg = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    cfg["households"]["buckets"] = [cfg["households"]["buckets"][0]]  # one household
    cfg["variants"] = [{"name": "cubic", "cc": "cubic"}]
    cfg["trial"].update(trial)
    p = dst / "config" / "kill.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants (Snakemake puts jobs in their own process
    groups, and our runner starts tools in their own sessions): freeze first, so nothing
    escapes by being re-parented, then kill."""
    tree = {pid} | _descendants(pid)
    for p in tree:
        os.kill(p, signal.SIGSTOP)
    tree |= _descendants(pid)
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.05)


class TwoTrialRun(NamedTuple):
    wf: Path
    cfg: Path
    metas: list
    cmd: list
    env: dict
    proc: subprocess.Popen
    first: Path   # complete
    second: Path  # under way


def _run_until_second_trial(tmp_path: Path) -> TwoTrialRun:
    """`snakemake all` of one household's two Cubic trials (4 s each), one at a time (a budget
    smaller than any trial's host_load admits one), returned once the first trial is complete
    and the second under way. The caller kills the run (or its Snakemake) and must reap it.
    Its output pipe stays open while the caller holds ``proc``, so orphaned jobs can write."""
    wf = _workflow_copy(tmp_path)
    cfg = _config(wf, duration_s=4, idle_s=1)
    hh = yaml.safe_load(cfg.read_text())["households"]["buckets"][0]["ids"][0]
    metas = [trial_meta_path(wf / "results" / "raw", *t) for t in trial_ids(load_config(str(cfg)))
             if t[1] == hh and t[3] == "cubic"]
    assert [m.parts[-4] for m in metas] == ["uplink", "downlink"]
    cmd = [str(VENV_BIN / "snakemake"), "all", "--cores", "1", "--resources", "host_load=1",
           "--configfile", str(cfg)]
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    proc = subprocess.Popen(cmd, cwd=wf, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any(m.exists() for m in metas):   # first trial complete
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "first trial did not finish in 120 s"
            time.sleep(0.2)
        first = next(m for m in metas if m.exists())
        second = next(m for m in metas if m != first)
        while not list(second.parent.parent.glob(".ld-tmp-*")):  # second trial under way
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "second trial did not start"
            time.sleep(0.05)
    except BaseException:
        _kill_tree(proc.pid)
        proc.wait()
        raise
    return TwoTrialRun(wf, cfg, metas, cmd, env, proc, first, second)


@pytest.mark.slow  # a workflow run of real trials, killed and resumed
def test_killed_run_is_cleaned_and_resumed_without_redoing_trials(tmp_path):
    r = _run_until_second_trial(tmp_path)
    wf, cfg, cmd, env, proc, first, second = r.wf, r.cfg, r.cmd, r.env, r.proc, r.first, r.second
    try:
        time.sleep(2.0)
        _kill_tree(proc.pid)   # the worst case (power cut, OOM kill): no handler runs
        proc.wait()
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)
            proc.wait()
    first_mtime = first.stat().st_mtime_ns
    assert not second.exists()

    # the killed trial left namespaces (owner dead) and its temporary directory: clean both
    out = subprocess.run([str(VENV_BIN / "latency-divide"), "clean", "--results",
                          str(wf / "results" / "raw")], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "removed namespace" in out.stdout
    assert not list((wf / "results" / "raw").rglob(".ld-tmp-*"))
    again = subprocess.run([str(VENV_BIN / "latency-divide"), "clean", "--results",
                            str(wf / "results" / "raw")], capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "removed" not in again.stdout

    subprocess.run([str(VENV_BIN / "snakemake"), "--unlock", "--cores", "1",
                    "--configfile", str(cfg)], cwd=wf, env=env, check=True, capture_output=True)
    res = subprocess.run(cmd, cwd=wf, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert second.exists()
    assert first.stat().st_mtime_ns == first_mtime, "a completed trial was redone"
    assert "trial 2 of 2" in res.stderr
    assert "ETA" in res.stderr
