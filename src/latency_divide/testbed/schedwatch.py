"""How long a trial's own processes waited for a CPU while they were measuring.

The kernel keeps, for every thread, the time it spent runnable but waiting on a run queue
(``/proc/PID/task/TID/schedstat``: time on a CPU, time waiting, timeslices run; ns). A tool
end that waits for a CPU answers late: its ACKs, and so the RTT samples its peer's congestion
control sees, carry the wait. A delay-based controller reads that as queueing (Copa with
δ = 0.8 aims at 1.25 packets of queue, 2 to 4 ms on a 3 to 5 Mbit/s link), so a host whose
CPU is contended bends Copa's throughput while the link emulation itself looks fine.

:class:`SchedWatch` samples those counters for the named processes of one trial (sender,
receiver, delay line) every ``interval_s`` from a thread of the trial job, plus the host's
CPU pressure (``/proc/pressure/cpu``, PSI ``some``), and summarises the window it watched:
per process the wait per second of wall time (mean and the worst ``interval_s`` window) and
per timeslice. Local processes only: an SSH testbed's processes run on other hosts.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

PSI_CPU = "/proc/pressure/cpu"


def _psi_some(key: str, path: str = PSI_CPU) -> float | None:
    """One field (``total``, ``avg10``, ...) of the host's PSI ``some`` line, or None where
    the kernel has no PSI."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("some "):
                    fields = dict(p.split("=", 1) for p in line.split()[1:])
                    return float(fields[key])
    except (OSError, ValueError, KeyError):
        return None
    return None


def read_psi_some_us(path: str = PSI_CPU) -> int | None:
    """The host's cumulative CPU pressure (µs during which some runnable task waited for a
    CPU), or None where the kernel has no PSI."""
    v = _psi_some("total", path)
    return None if v is None else int(v)


def psi_avg10(path: str = PSI_CPU) -> float | None:
    """The host's CPU pressure over the last 10 s (PSI some avg10, %), or None without PSI."""
    return _psi_some("avg10", path)


def read_schedstat(pid: int) -> dict[int, tuple[int, int, int]]:
    """Per thread of ``pid``: (ns on a CPU, ns waiting on a run queue, timeslices); empty
    when the process is gone or the kernel keeps no schedstat."""
    out: dict[int, tuple[int, int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                a, b, c = f.read().split()[:3]
            out[int(tid)] = (int(a), int(b), int(c))
        except (OSError, ValueError):
            continue
    return out


@dataclass
class _Track:
    pid: int
    first: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    last: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    #: (monotonic time, total wait ns so far) per sample, for the worst window
    series: list[tuple[float, int]] = field(default_factory=list)

    def update(self, now: float, sample: dict[int, tuple[int, int, int]]) -> None:
        for tid, v in sample.items():
            # a thread seen for the first time after the start began inside the window:
            # its counters start at zero
            self.first.setdefault(tid, v if not self.series else (0, 0, 0))
            self.last[tid] = v
        self.series.append((now, self.total(1)))

    def total(self, i: int) -> int:
        return sum(self.last[t][i] - self.first.get(t, (0, 0, 0))[i] for t in self.last)


class SchedWatch:
    """Samples run-queue waits of named processes (and the host's CPU pressure) from start()
    to stop(); ``summary()`` gives the numbers of the window."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self._tracks: dict[str, _Track] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0
        self._psi0 = self._psi1 = None

    def add(self, name: str, pid: int | None) -> None:
        if pid is None:
            return
        with self._lock:
            track = _Track(pid)
            track.update(time.monotonic(), read_schedstat(pid))
            self._tracks[name] = track

    def start(self) -> "SchedWatch":
        self._t0 = time.monotonic()
        self._psi0 = read_psi_some_us()
        self._thread = threading.Thread(target=self._run, name="ld-schedwatch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        with self._lock:
            now = time.monotonic()
            for track in self._tracks.values():
                s = read_schedstat(track.pid)
                if s:
                    track.update(now, s)

    def stop(self) -> None:
        """End the window: one last sample (a process that exited keeps its last one)."""
        self.sample()
        self._t1 = time.monotonic()
        self._psi1 = read_psi_some_us()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self) -> dict:
        wall = max(self._t1 - self._t0, 1e-9)
        procs = {}
        for name, tr in self._tracks.items():
            wait_ns, slices, run_ns = tr.total(1), tr.total(2), tr.total(0)
            worst = 0.0
            for (ta, wa), (tb, wb) in zip(tr.series, tr.series[1:]):
                if tb - ta >= self.interval_s * 0.5:
                    worst = max(worst, (wb - wa) / 1e6 / (tb - ta))
            procs[name] = {
                "cpu_s": round(run_ns / 1e9, 3),
                "wait_s": round(wait_ns / 1e9, 4),
                "slices": slices,
                # ms of run-queue wait per s of the window: mean, and its worst sample interval
                "wait_ms_per_s": round(wait_ns / 1e6 / wall, 3),
                "wait_ms_per_s_worst": round(worst, 3),
                "wait_per_slice_us": round(wait_ns / 1e3 / slices, 1) if slices else None,
            }
        psi = None
        if self._psi0 is not None and self._psi1 is not None:
            psi = round(100.0 * (self._psi1 - self._psi0) / 1e6 / wall, 1)
        return {"window_s": round(wall, 2), "interval_s": self.interval_s,
                "cpu_pressure_some_pct": psi, "processes": procs}
