"""Guest halt polling while local trials run: the cpuidle haltpoll governor's
``guest_halt_poll_ns``, raised for as long as any trial of ours holds it, then put back.

On a virtual machine an idle vCPU halts, and waking it costs a VM exit and, from the other
vCPU, an inter-processor interrupt. With halt polling the idle vCPU polls for up to
``guest_halt_poll_ns`` before it halts: a wake-up in that time needs neither (the kernel's
Documentation/virt/guest-halt-polling.rst). The machines this project runs on (Firecracker
guests, 2026-11-28) boot with ``haltpoll.guest_halt_poll_ns=0``: every wake-up of an idle vCPU
pays both. Measured there (bench/_common.host_calibration, docs/emulation.md "Halt polling"):
a wake-up across cores 22-30 µs of wall time at 0 and 3.4-4.3 µs at the kernel's default,
200000 ns; a timer wake-up 21-26 µs of CPU against 13-15. The polling time counts as idle in
/proc/stat: the guest's figures do not hide it as work, but the host's vCPU keeps running
while it polls (the documented downside), so we raise it only while trials run.

Ownership: each trial job that holds it has a record ``HOST_DIR/<pid>``; the first holder
saves the host's own value in ``HOST_DIR/host-value`` and the last one to leave writes it
back. The records live in one place per host (:data:`HOST_DIR`), whatever the testbed's state
directory, because the parameter is one per host. A holder that died leaves its record behind: the next holder or
``latency-divide clean`` (testbed.clean) removes it, and the last live one, or ``clean`` when
none is left, restores the host's value. All of it under one flock, so concurrent trial jobs
see one consistent state. A host without the governor (no such parameter: bare metal, another
cpuidle driver) is left alone and the trial records None; one that refuses the write (a
read-only /sys) is measured as it is, and the trial records why (``halt_poll_refused``).

``LATENCY_DIVIDE_HALT_POLL``: ``off`` (leave the host's value alone, to compare) or the
nanoseconds to poll (0 to :data:`MAX_NS`); default :data:`DEFAULT_NS`. A host whose own value
is higher keeps it.
"""

from __future__ import annotations

import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from latency_divide.errors import ConfigError
from latency_divide.testbed.runners import pid_alive

#: The governor's global limit (module parameter of ``haltpoll``).
PARAM = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
#: What trials ask for: the kernel's own default for the parameter.
DEFAULT_NS = 200_000
#: The most a user may ask for (2 ms of polling per idle period is already a lot of host CPU).
MAX_NS = 2_000_000
ENV = "LATENCY_DIVIDE_HALT_POLL"
DIR_NAME = "haltpoll"
HOST_VALUE = "host-value"
LOCK = ".lock"


def wanted_ns(env: dict | None = None) -> int | None:
    """The polling limit trials ask for: :data:`DEFAULT_NS`, the environment's, or None for
    ``off``; a bad value is an error that names it."""
    raw = (os.environ if env is None else env).get(ENV)
    if raw is None:
        return DEFAULT_NS
    if raw.strip().lower() == "off":
        return None
    try:
        v = int(raw)
    except ValueError:
        v = -1
    if not 0 <= v <= MAX_NS:
        raise ConfigError(f"{ENV}={raw!r}: must be 'off' (leave the host's halt polling alone) "
                          f"or the nanoseconds an idle vCPU polls before it halts, 0 to {MAX_NS}")
    return v


def read_ns(param: Path = PARAM) -> int | None:
    """The limit in force, or None where the host has no haltpoll governor."""
    try:
        return int(param.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _write(param: Path, ns: int) -> str | None:
    """Set the limit; why the kernel refused it, or None."""
    try:
        param.write_text(f"{int(ns)}\n")
    except OSError as e:
        return f"writing {ns} to {param}: {e.strerror or e}"
    return None


#: Where the holders of the host's parameter keep their records: one directory per host, not
#: per state directory (``LATENCY_DIVIDE_STATE_DIR``: a test's own, another clone's run). With
#: the records under each run's state directory, two runs with different ones each saw no
#: holder, the later saved the earlier's raised value as the host's own, and whichever left
#: last put that back: guest halt polling stayed at 200000 ns after every run had ended
#: (2026-12-01, the host check's tests beside a sweep).
HOST_DIR = Path("/run/latency-divide") / DIR_NAME


def _dir(param: Path = PARAM) -> Path:
    """The holders' records for ``param``: :data:`HOST_DIR` for the host's parameter, a
    directory beside any other (a test's stand-in file)."""
    return HOST_DIR if param == PARAM else param.with_name(param.name + ".holders")


def _live_holders(d: Path) -> list[int]:
    """PIDs of the live holders; the records of dead ones are removed."""
    live = []
    for rec in d.iterdir():
        if not rec.name.isdigit():
            continue
        if pid_alive(int(rec.name)):
            live.append(int(rec.name))
        else:
            rec.unlink(missing_ok=True)
    return live


@contextmanager
def _locked(d: Path) -> Iterator[None]:
    d.mkdir(parents=True, exist_ok=True)
    with open(d / LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def _restore_if_unheld(d: Path, param: Path) -> int | None:
    """With the lock held: no live holder left -> the host's value back; returns the value
    restored, None if nothing was."""
    saved = d / HOST_VALUE
    if _live_holders(d) or not saved.is_file():
        return None
    try:
        host = int(saved.read_text().strip())
    except ValueError:
        host = None
    if host is not None and read_ns(param) is not None:
        _write(param, host)
    saved.unlink(missing_ok=True)
    return host


@contextmanager
def halt_polling(ns: int | None, param: Path = PARAM) -> Iterator[dict]:
    """Hold the host's halt polling at least at ``ns`` (None: leave it alone; trials pass
    :func:`wanted_ns`) while the body runs; yields what meta.json records: ``halt_poll_ns``
    (the limit in force, None without the governor) and ``host_halt_poll_ns`` (the host's own
    value)."""
    now = read_ns(param)
    if ns is None or now is None:
        yield {"halt_poll_ns": now, "host_halt_poll_ns": now}
        return
    d = _dir(param)
    me = d / str(os.getpid())
    with _locked(d):
        saved = d / HOST_VALUE
        _live_holders(d)  # drop dead holders' records
        try:  # a dead run's saved value is the host's own; the first holder saves it
            host = int(saved.read_text().strip())
        except (FileNotFoundError, ValueError):
            host = read_ns(param)
            saved.write_text(f"{host}\n")
        refused = _write(param, ns) if read_ns(param) < ns else None
        me.write_text(f"{ns}\n")
        record = {"halt_poll_ns": read_ns(param), "host_halt_poll_ns": host}
        if refused:
            record["halt_poll_refused"] = refused
            print(f"[latency-divide] warning: guest halt polling left at {record['halt_poll_ns']}"
                  f" ns: {refused}", file=sys.stderr, flush=True)
    try:
        yield record
    finally:
        with _locked(d):
            me.unlink(missing_ok=True)
            _restore_if_unheld(d, param)


def clean_halt_poll(force: bool = False, param: Path = PARAM) -> tuple[list[str], str | None]:
    """``latency-divide clean``: remove the records of holders that are gone (``force``: of
    live ones too) and, when no live one is left, put the host's value back; returns (the
    records removed, what was restored or None)."""
    d = _dir(param)
    if not d.is_dir():
        return [], None
    with _locked(d):
        before = {r.name for r in d.iterdir() if r.name.isdigit()}
        if force:
            for name in before:
                (d / name).unlink(missing_ok=True)
        host = _restore_if_unheld(d, param)
        after = {r.name for r in d.iterdir() if r.name.isdigit()}
    restored = None if host is None else (
        f"the host's guest halt polling (haltpoll guest_halt_poll_ns) back to its own {host} ns")
    return [f"{DIR_NAME}/{name}" for name in sorted(before - after)], restored
