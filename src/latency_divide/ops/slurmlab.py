"""A one-host Slurm cluster from Debian's packages, for the tests and the bench (docs/cluster.md).

``python -m latency_divide.ops.slurmlab up [--dir DIR]`` starts, as root, all under DIR
(default /tmp/ld-slurm, a directory we own; nothing in /etc is read or written), and prints
what a client's shell must set, as ``export`` lines for ``eval`` (``env`` prints them again):

- ``munged`` with its own key and socket (``DIR/munge/``);
- ``slurmctld`` of the cluster ``ld-test`` (``ClusterName``), no accounting (no slurmdbd);
- two ``slurmd``, nodes ``ld1`` and ``ld2`` on this host (``NodeName=ld[1-2] NodeHostname=<host>
  NodeAddr=127.0.0.1 Port=[...]``, each started as ``slurmd -N ld<i>``, spool and PID file
  templated by ``%n``); each node has the count-only generic resource ``hostload`` (its trial
  budget in thousandths of a core, ``Gres=hostload:N`` and a ``Count=``-only gres.conf line);
- an Epilog that runs ``latency-divide clean`` after every job on the node.

Every client (sbatch, squeue, Snakemake's Slurm executor) finds the cluster by ``SLURM_CONF``
(:meth:`SlurmLab.env`). ``down`` cancels the cluster's jobs, stops the daemons by the PIDs
recorded at start (``DIR/pids.json``) and removes DIR. Commands are argv lists; config values
are written into slurm.conf only after validation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from latency_divide.errors import ConfigError, EnvironmentError_
from latency_divide.testbed.runners import pid_alive

#: Where a lab lives unless told otherwise (our prefix; removed by ``down``).
DEFAULT_DIR = Path("/tmp/ld-slurm")
CLUSTER = "ld-test"
PARTITION = "ld"
#: slurmctld's port; node i listens on BASE_PORT + i.
CTLD_PORT = 16817
#: MinJobAge (s): the executor's squeue status check needs finished jobs kept this long (it
#: falls back to sacct below 3 x its first status delay, and sacct hangs without accounting).
MIN_JOB_AGE = 600
#: AuthInfo cred_expire (s): a job credential's lifetime, and how long Slurm holds a requeued
#: job (a node set DOWN under it) before it may start again (Slurm's default: 120; below 5 it
#: is refused and the default taken). A launch on this one host reaches its slurmd in well under
#: a second.
CRED_EXPIRE_S = 10
#: Debian packages (program -> package), installed by scripts/setup.sh.
PROGRAMS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd",
            "sbatch": "slurm-client", "squeue": "slurm-client", "scontrol": "slurm-client",
            "scancel": "slurm-client", "sinfo": "slurm-client"}
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")

SLURM_CONF = """\
# Written by latency_divide.ops.slurmlab: a one-host test cluster (docs/cluster.md).
ClusterName={cluster}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/munge.socket,cred_expire={cred_expire}
StateSaveLocation={dir}/ctld
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdSpoolDir={dir}/spool/%n
SlurmdPidFile={dir}/run/slurmd-%n.pid
SlurmdLogFile={dir}/log/slurmd-%n.log
PlugStackConfig={dir}/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
MinJobAge={min_job_age}
SlurmdTimeout=30
KillWait=30
Epilog={dir}/epilog.sh
GresTypes=hostload
NodeName={nodes} NodeHostname={host} NodeAddr=127.0.0.1 Port=[{port_lo}-{port_hi}] CPUs={cpus} RealMemory={mem_mb} Gres=hostload:{budget} State=UNKNOWN
PartitionName={partition} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:{oversubscribe}
"""

GRES_CONF = "NodeName={nodes} Name=hostload Count={budget}\n"

EPILOG = """\
#!/bin/sh
# Runs as root on the node after every job (slurm.conf Epilog). When a trial was killed too
# hard for its own teardown (SIGKILL after KillWait, a crashed job), its owner record names a
# dead PID: then `latency-divide clean` removes its namespaces, processes and temporary trial
# directory. Otherwise it does nothing (it runs after every job: keep it cheap). It always
# exits 0: a failing Epilog drains the node.
dead=
for f in {state}/*.json; do
  [ -f "$f" ] || continue
  pid=$(sed -n 's/.*"pid": *\\([0-9][0-9]*\\).*/\\1/p' "$f")
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then dead=1; fi
done
[ -n "$dead" ] || exit 0
{clean} clean --results {results} >>{dir}/log/epilog-"$SLURMD_NODENAME".log 2>&1 ||
  echo "job $SLURM_JOB_ID: latency-divide clean failed" >>{dir}/log/epilog-"$SLURMD_NODENAME".log
exit 0
"""

def _run(argv: list[str], env: dict | None = None, timeout: float = 30.0,
         check: bool = True) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        p = subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout:g} s")
    if check and p.returncode != 0:
        raise EnvironmentError_(f"{' '.join(argv)} failed (exit {p.returncode}): "
                                f"{(p.stderr or p.stdout).strip()}")
    return p


@dataclass
class SlurmLab:
    """A one-host Slurm cluster under ``dir``."""

    dir: Path = DEFAULT_DIR
    nodes: int = 2
    #: each node's hostload budget (thousandths of a core its trials may use together)
    budget: int = 900
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    mem_mb: int = 4000
    #: jobs that may share one core (the GRES, not the cores, limits the trials on a node)
    oversubscribe: int = 64
    ctld_port: int = CTLD_PORT
    results: Path | None = None
    cluster: str = CLUSTER

    def __post_init__(self):
        self.dir = Path(self.dir).resolve()
        for what, v, lo, hi in (("nodes", self.nodes, 1, 16), ("budget", self.budget, 1, 10**7),
                                ("cpus", self.cpus, 1, 4096), ("mem_mb", self.mem_mb, 100, 10**8),
                                ("oversubscribe", self.oversubscribe, 1, 1024),
                                ("ctld_port", self.ctld_port, 1024, 65000 - 16)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ConfigError(f"slurmlab {what}: {v!r} is not an integer in [{lo}, {hi}]")
        if not _NAME.match(self.cluster):
            raise ConfigError(f"slurmlab cluster name {self.cluster!r}: lower-case letters, digits "
                              "and '-', at most 31 characters")
        if not re.fullmatch(r"/[A-Za-z0-9_./-]+", str(self.dir)):
            raise ConfigError(f"slurmlab directory {str(self.dir)!r}: an absolute path of letters, "
                              "digits and _ . / - only (it is written into slurm.conf)")
        from latency_divide.paths import RAW, repo_root
        self.results = Path(self.results or (repo_root() / RAW)).resolve()

    # --- names and environment ----------------------------------------------------------
    @property
    def node_names(self) -> list[str]:
        return [f"ld{i}" for i in range(1, self.nodes + 1)]

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    def env(self, base: dict | None = None) -> dict[str, str]:
        """The environment of a client of this cluster (sbatch, squeue, snakemake)."""
        e = dict(os.environ if base is None else base)
        e["SLURM_CONF"] = str(self.conf)
        # snakemake-executor-plugin-slurm-jobstep drops every SLURM_* variable but the job's
        # identity before its inner `srun`, SLURM_CONF included: our `srun` (DIR/bin, first on
        # PATH) puts it back from LD_SLURM_CONF and runs the real one
        e["LD_SLURM_CONF"] = str(self.conf)
        e["PATH"] = f"{self.dir / 'bin'}:{e.get('PATH', os.defpath)}"
        return e

    def exports(self) -> str:
        """What a user's shell must set to use this cluster, as lines ``eval`` runs: every
        variable :meth:`env` sets (the srun shim's directory first on PATH), after a comment
        that says how to get them into another shell."""
        where = "" if self.dir == DEFAULT_DIR else f" --dir {self.dir}"
        return "\n".join([
            f"# cluster {self.cluster}: nodes {', '.join(self.node_names)}. The shell that runs "
            "snakemake needs all three lines: eval \"$(.venv/bin/python -m "
            f"latency_divide.ops.slurmlab env{where})\"",
            f"export SLURM_CONF={self.conf}",
            f"export LD_SLURM_CONF={self.conf}",
            f'export PATH="{self.dir / "bin"}:$PATH"'])

    def _pids_file(self) -> Path:
        return self.dir / "pids.json"

    def pids(self) -> dict[str, int]:
        try:
            return json.loads(self._pids_file().read_text())
        except FileNotFoundError:
            return {}

    def _record(self, name: str, pid: int) -> None:
        pids = self.pids()
        pids[name] = pid
        self._pids_file().write_text(json.dumps(pids))

    # --- configuration --------------------------------------------------------------------
    def write_config(self) -> None:
        host = socket.gethostname()
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", host):
            raise EnvironmentError_(f"this host's name {host!r} cannot be a Slurm NodeHostname")
        for sub in ("munge", "ctld", "spool", "run", "log"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        os.chmod(self.dir / "munge", 0o700)
        nodes = f"ld[1-{self.nodes}]" if self.nodes > 1 else "ld1"
        port_lo = self.ctld_port + 1
        self.conf.write_text(SLURM_CONF.format(
            cluster=self.cluster, host=host, ctld_port=self.ctld_port, dir=self.dir, nodes=nodes,
            port_lo=port_lo, port_hi=port_lo + self.nodes - 1, cpus=self.cpus, mem_mb=self.mem_mb,
            budget=self.budget, partition=PARTITION, min_job_age=MIN_JOB_AGE,
            cred_expire=CRED_EXPIRE_S, oversubscribe=self.oversubscribe))
        (self.dir / "gres.conf").write_text(GRES_CONF.format(nodes=nodes, budget=self.budget))
        (self.dir / "plugstack.conf").write_text("")
        (self.dir / "bin").mkdir(exist_ok=True)
        srun = self.dir / "bin" / "srun"
        real = shutil.which("srun", path=os.defpath + ":/usr/bin") or "/usr/bin/srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF="$LD_SLURM_CONF" exec {real} "$@"\n')
        srun.chmod(0o755)
        clean = Path(sys.executable).parent / "latency-divide"
        epilog = self.dir / "epilog.sh"
        from latency_divide.testbed.netns import STATE_DIR
        epilog.write_text(EPILOG.format(clean=clean, results=self.results, dir=self.dir,
                                        state=STATE_DIR))
        epilog.chmod(0o755)
        key = self.dir / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)

    # --- daemons ----------------------------------------------------------------------------
    def _start(self, name: str, argv: list[str]) -> int:
        log = open(self.dir / "log" / f"{name}.out", "ab")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True, env=self.env())
        log.close()
        self._record(name, p.pid)
        time.sleep(0.2)
        if p.poll() is not None:
            tail = (self.dir / "log" / f"{name}.out").read_text(errors="replace")[-800:]
            raise EnvironmentError_(f"{name} exited at start (code {p.returncode}): {tail}")
        return p.pid

    def up(self, timeout: float = 60.0) -> "SlurmLab":
        """Start munged, slurmctld and the slurmd daemons; return when every node is idle."""
        if os.geteuid() != 0:
            raise EnvironmentError_("the Slurm test cluster needs root (slurmd runs jobs as root)")
        missing = [f"{p} (Debian package {pkg})" for p, pkg in PROGRAMS.items()
                   if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
        if missing:
            raise EnvironmentError_("missing programs: " + ", ".join(missing) +
                                    "; run scripts/setup.sh")
        if any(pid_alive(pid) for pid in self.pids().values()):
            raise EnvironmentError_(f"a Slurm lab is already running in {self.dir} "
                                    f"(PIDs {self.pids()}); stop it with `down --dir {self.dir}`")
        self.write_config()
        m = self.dir / "munge"
        try:
            self._start("munged", ["munged", "--foreground", "--force",
                                   f"--key-file={m / 'munge.key'}", f"--socket={m / 'munge.socket'}",
                                   f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                                   f"--seed-file={m / 'munge.seed'}"])
            _wait(lambda: (m / "munge.socket").exists(), 10, "munged's socket")
            self._start("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
            _wait(lambda: _run(["scontrol", "ping"], self.env(), check=False).returncode == 0,
                  timeout, "slurmctld to answer `scontrol ping`")
            for n in self.node_names:
                self._start(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", str(self.conf)])
            _wait(self.all_idle, timeout, f"nodes {self.node_names} to be idle")
        except BaseException:
            self.down()
            raise
        return self

    def node_states(self) -> dict[str, str]:
        p = _run(["sinfo", "-h", "-N", "-o", "%N %T"], self.env(), check=False)
        out = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def all_idle(self) -> bool:
        st = self.node_states()
        return sorted(st) == self.node_names and all(s == "idle" for s in st.values())

    def down(self, timeout: float = 60.0) -> None:
        """Cancel the cluster's jobs, stop every daemon we started (by PID) and remove DIR."""
        pids = self.pids()
        if pids.get("slurmctld") and pid_alive(pids["slurmctld"]):
            _run(["scancel", "--full", "--partition", PARTITION], self.env(), check=False)
            try:
                _wait(lambda: not _run(["squeue", "-h", "-o", "%i"], self.env(),
                                       check=False).stdout.strip(), timeout, "jobs to end")
            except TimeoutError:
                pass
        for name in [n for n in pids if n.startswith("slurmd-")] + ["slurmctld", "munged"]:
            pid = pids.get(name)
            if pid and pid_alive(pid):
                _stop(pid)
        if self.dir.is_dir() and str(self.dir) != "/":
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers for tests and the bench ----------------------------------------------------
    def sbatch(self, argv: list[str]) -> str:
        """Submit ``sbatch --parsable ARGV...``; return the job id."""
        p = _run(["sbatch", "--parsable", *argv], self.env())
        return p.stdout.strip().split(";")[0]

    def squeue(self, fmt: str = "%i %T %N") -> list[list[str]]:
        p = _run(["squeue", "-h", "-t", "all", "-o", fmt], self.env())
        return [line.split() for line in p.stdout.splitlines() if line.strip()]


def _stop(pid: int, timeout: float = 15.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.1)
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m latency_divide.ops.slurmlab",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["up", "env", "down", "status"],
                    help="up: start the cluster and print what to set (export lines, for eval); "
                         "env: print them again for a cluster that is up")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"state (default {DEFAULT_DIR})")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--port", type=int, default=CTLD_PORT,
                    help=f"slurmctld's port; node i listens on PORT + i (default {CTLD_PORT})")
    ap.add_argument("--budget", type=int, default=900,
                    help="each node's hostload GRES (thousandths of a core; default 900)")
    a = ap.parse_args(argv)
    try:
        lab = SlurmLab(dir=a.dir, nodes=a.nodes, budget=a.budget, ctld_port=a.port)
        if a.action == "up":
            lab.up()
            print(lab.exports())
        elif a.action == "env":
            if not lab.conf.exists():
                raise EnvironmentError_(f"no cluster in {lab.dir}: start it with `up`")
            print(lab.exports())
        elif a.action == "down":
            lab.down()
            print(f"cluster {lab.cluster} in {lab.dir} stopped and removed")
        else:
            print(json.dumps({"pids": lab.pids(), "nodes": lab.node_states()}))
    except (ConfigError, EnvironmentError_, TimeoutError) as e:
        print(f"slurmlab: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
