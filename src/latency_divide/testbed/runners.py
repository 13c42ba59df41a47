"""Runners execute commands given as argv lists, on this host, in a network namespace, or
(later) on a remote node over SSH. Nothing here builds commands from strings: callers pass
validated argv lists and a runner decides how to get them executed.

Lifecycle of a background process: ``start()`` returns a :class:`Process`; ``stop()`` sends
SIGTERM to exactly that process (never by name), waits, escalates to SIGKILL, and returns
when the log files given to ``start()`` are complete on the local disk.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from latency_divide.errors import CommandError


@dataclass
class Completed:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


class Process(Protocol):
    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def stop(self, timeout: float = 5.0, sig: int = signal.SIGTERM) -> int: ...

    def read_output(self) -> str: ...


class Runner(Protocol):
    #: Where commands run, for messages and metadata ("local", "netns ld-ab12-gw", "ssh user@host").
    where: str

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 30.0, input: str | None = None
    ) -> Completed: ...

    def start(
        self, argv: Sequence[str], *, stdout: Path | None = None, stderr: Path | None = None
    ) -> Process: ...


#: Programs that read several commands from one process (``-batch -``) and switch to a network
#: namespace themselves (``-n``): iproute2's.
BATCH_PROGRAMS = ("ip", "tc")
_BATCH_WORD = re.compile(r"\A[^\s\"'#\\]+\Z")


def _argv(argv: Sequence[str]) -> list[str]:
    out = [str(a) for a in argv]
    if not out:
        raise ValueError("empty command")
    return out


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, with the children it has reaped) of a live or zombie
    process, from /proc/PID/stat; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17
    return round(sum(int(x) for x in fields[11:15]) / _CLK_TCK, 2)


def _exited_unreaped(pid: int, block: bool) -> bool:
    """True once ``pid`` has exited; it stays a zombie (not reaped), so /proc still has its
    CPU times."""
    flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
    try:
        return os.waitid(os.P_PID, pid, flags) is not None
    except ChildProcessError:
        return True  # already reaped


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (Linux 5.3 and later), or None where the kernel or Python lacks it."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class LocalProcess:
    """A background process on this host; stopped by its PID only. ``cpu_s`` is its CPU
    time (user + system, seconds) once it has ended (None before)."""

    def __init__(self, popen: subprocess.Popen, argv: list[str], files: list,
                 out_path: Path | None = None):
        self._popen = popen
        self.pid = popen.pid
        self.argv = argv
        self._files = files
        self._out_path = out_path
        self.cpu_s: float | None = None

    def read_output(self) -> str:
        """Its stdout file as it is now ("" without one): for 'ready' lines."""
        try:
            return self._out_path.read_text(errors="replace") if self._out_path else ""
        except FileNotFoundError:
            return ""

    def poll(self) -> int | None:
        if self._popen.returncode is None and _exited_unreaped(self.pid, block=False):
            self._reap()
        return self._popen.returncode

    def _wait_exit(self, timeout: float | None) -> None:
        """Wait for the exit without reaping, read its CPU time, then reap. With a timeout the
        wait sleeps on the process's pidfd, which turns readable when it exits: one wake-up,
        not one every 50 ms as Popen.wait's polling (1,300 in a trial's receiver, each dear on
        a VM and taken from the trials); where pidfds are refused, it polls as before."""
        if timeout is None:
            _exited_unreaped(self.pid, block=True)
        else:
            deadline = time.monotonic() + timeout
            delay = 0.0005
            fd = _pidfd(self.pid)
            exited = select.poll()
            if fd is not None:
                exited.register(fd, select.POLLIN)
            try:
                while not _exited_unreaped(self.pid, block=False):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise subprocess.TimeoutExpired(self.argv, timeout)
                    if fd is not None:
                        exited.poll(max(1, int(remaining * 1000) + 1))  # ms
                        continue
                    delay = min(delay * 2, remaining, 0.05)  # as Popen.wait: back off to 50 ms
                    time.sleep(delay)
            finally:
                if fd is not None:
                    os.close(fd)
        self._reap()

    def _reap(self) -> None:
        if self._popen.returncode is None:
            cpu = process_cpu_s(self.pid)
            if cpu is not None:
                self.cpu_s = cpu
        self._popen.wait()

    def wait(self, timeout: float | None = None) -> int:
        if self._popen.returncode is None:
            self._wait_exit(timeout)
        self._close()
        return self._popen.returncode

    def stop(self, timeout: float = 5.0, sig: int = signal.SIGTERM) -> int:
        if self.poll() is None:
            try:
                self._popen.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                self._wait_exit(timeout)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._wait_exit(timeout)
        self._close()
        return self._popen.returncode

    def _close(self) -> None:
        for f in self._files:
            try:
                f.close()
            except OSError:
                pass
        self._files = []


class LocalRunner:
    """Runs commands on this host, optionally inside a network namespace (``ip netns exec``).

    ``ip netns exec NS cmd`` execs cmd in place, so the PID we hold is the command's own PID
    and signals reach it directly.
    """

    def __init__(self, netns: str | None = None, env: dict[str, str] | None = None):
        self.netns = netns
        self.where = f"netns {netns}" if netns else "local"
        self._env = env

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The command as run: ``ip``/``tc`` in a namespace switch to it themselves (``-n``: one
        program started, not two); anything else through ``ip netns exec``."""
        argv = _argv(argv)
        if not self.netns:
            return argv
        if argv[0] in BATCH_PROGRAMS and argv[1:2] != ["netns"]:
            return [argv[0], "-n", self.netns, *argv[1:]]
        return ["ip", "netns", "exec", self.netns, *argv]

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = 30.0) -> Completed:
        """Several ``ip`` (or several ``tc``) commands in one process, ``PROG -batch -``: one
        program started instead of one per command, in order, stopping at the first that
        fails, which the error names (a CommandError as :meth:`run` raises). Words are
        passed as they are: one with a space, quote, ``#`` or backslash is refused (the batch
        reader would split or drop it), and so is a mix of programs."""
        cmds = [_argv(a) for a in argvs]
        if not cmds:
            raise ValueError("empty batch")
        prog = cmds[0][0]
        if prog not in BATCH_PROGRAMS or any(c[0] != prog for c in cmds):
            raise ValueError(f"a batch is of one program, {' or '.join(BATCH_PROGRAMS)}: got "
                             f"{sorted({c[0] for c in cmds})}")
        bad = [w for c in cmds for w in c[1:] if not _BATCH_WORD.match(w)]
        if bad:
            raise ValueError(f"{bad[0]!r} cannot be passed through {prog} -batch (a space, "
                             "quote, '#' or backslash, or empty)")
        text = "".join(" ".join(c[1:]) + "\n" for c in cmds)
        res = self.run([prog, "-batch", "-"], check=False, timeout=timeout, input=text)
        if res.returncode != 0:
            m = re.search(r"Command failed -:(\d+)", res.stderr)
            failed = (cmds[int(m.group(1)) - 1] if m and 0 < int(m.group(1)) <= len(cmds)
                      else [prog, "-batch", "-"])
            raise CommandError(self.wrap(failed), res.returncode, res.stdout, res.stderr,
                               self.where)
        return res

    def run(self, argv, *, check=True, timeout=30.0, input=None) -> Completed:
        full = self.wrap(argv)
        try:
            p = subprocess.run(
                full, capture_output=True, text=True, timeout=timeout, input=input, env=self._env
            )
        except subprocess.TimeoutExpired as e:
            raise CommandError(full, -1, "", f"timed out after {timeout} s", self.where) from e
        except FileNotFoundError as e:
            raise CommandError(full, 127, "", f"program not found: {full[0]}", self.where) from e
        res = Completed(full, p.returncode, p.stdout, p.stderr)
        if check and p.returncode != 0:
            raise CommandError(full, p.returncode, p.stdout, p.stderr, self.where)
        return res

    def start(self, argv, *, stdout=None, stderr=None) -> LocalProcess:
        full = self.wrap(argv)
        files = []
        out = subprocess.DEVNULL
        err = subprocess.DEVNULL
        if stdout is not None:
            out = open(stdout, "wb")
            files.append(out)
        if stderr is not None:
            if stdout is not None and Path(stderr) == Path(stdout):
                err = subprocess.STDOUT
            else:
                err = open(stderr, "wb")
                files.append(err)
        try:
            popen = subprocess.Popen(
                full, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=self._env,
                start_new_session=True,
            )
        except FileNotFoundError as e:
            for f in files:
                f.close()
            raise CommandError(full, 127, "", f"program not found: {full[0]}", self.where) from e
        return LocalProcess(popen, full, files, Path(stdout) if stdout is not None else None)


def wait_for(predicate, timeout: float, interval: float = 0.02, what: str = "condition") -> None:
    """Poll ``predicate()`` until true; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs; a zombie (dead, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def interrupt_on_sigterm() -> None:
    """Turn SIGTERM (how Snakemake and `kill` stop a job) into KeyboardInterrupt, so that
    ``finally`` blocks run: topologies are torn down, temporary trial directories removed."""

    def _raise(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise)
