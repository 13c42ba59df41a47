"""Make SSH nodes ready for trials (`latency-divide provision`, rules/provision.smk): Debian
packages, forwarding, the private work directory, and our tools uploaded content-addressed
(a rebuilt tool never runs from a stale copy): tquic-perf to the tool ends, the queue sampler
to the gateway, the delay line to a delay node without netem, and tools/hostprobe to every
node that runs a real-time part (testbed.ssh.nodecheck.PROBED_ROLES: the ends and the delay
node) for its host check of itself."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from latency_divide.errors import CommandError, ConfigError, EnvironmentError_
from latency_divide.fsio import sha256_file, write_json_atomic
from latency_divide.testbed.delay import probe_netem
from latency_divide.testbed.inventory import (
    Inventory,
    load_inventory,
)
from latency_divide.testbed.ssh.connection import SshSetupError, _node_name, connect
from latency_divide.testbed.ssh.node import (
    NODE_PROGRAMS,
    PACKAGES,
    check_sudo,
    ensure_private_workdir,
    missing_programs,
    remote_tool_path,
)
from latency_divide.testbed.ssh.nodecheck import PROBED_ROLES
from latency_divide.testbed.ssh.runner import FabricRunner
from latency_divide.testbed.ssh.testbed import QSAMPLER_SRC
from latency_divide.vocab import ROLE_NAMES, ROLE_OF


def provision_node(inv: Inventory, slice_name: str | None, role: str, *, root: Path | None = None,
                   log=print) -> dict:
    """Make one node ready for trials (idempotent): packages, our tools, forwarding.
    Returns the facts recorded in the sentinel file."""
    from latency_divide.paths import repo_root

    root = root or repo_root()
    sl = inv.slice(slice_name)
    role = ROLE_OF.get(role, role)  # server -> srv, ...
    if role not in ROLE_NAMES:
        raise ConfigError(f"role {role!r} is not one of {', '.join(ROLE_OF)}")
    node = sl.node(role)
    t0 = time.monotonic()
    log(f"[provision] {_node_name(node)}: connect")
    conn = connect(node, inv)
    try:
        r = FabricRunner(conn, node)
        check_sudo(r)
        facts: dict = {"slice": sl.name, "role": role, "host": node.host, "user": node.user,
                       "port": node.port}
        facts["kernel"] = r.run(["uname", "-r"], sudo=False).stdout.strip()
        osr = r.run(["cat", "/etc/os-release"], check=False, sudo=False).stdout
        facts["os"] = next((ln.split("=", 1)[1].strip('"') for ln in osr.splitlines()
                            if ln.startswith("PRETTY_NAME=")), None)
        # packages
        if missing_programs(r, ["dpkg-query", "apt-get"]):
            raise SshSetupError(f"{_node_name(node)}, step 'packages': not a Debian/Ubuntu node "
                                f"(no dpkg-query/apt-get); install {', '.join(PACKAGES)} by hand")
        missing = []
        for pkg in PACKAGES:
            res = r.run(["dpkg-query", "-W", "-f", "${Status}", pkg], check=False, sudo=False)
            if "install ok installed" not in res.stdout:
                missing.append(pkg)
        if missing:
            log(f"[provision] {_node_name(node)}: apt-get install {' '.join(missing)}")
            env = ["env", "DEBIAN_FRONTEND=noninteractive"]
            try:
                r.run([*env, "apt-get", "update", "-q"], timeout=600)
                r.run([*env, "apt-get", "install", "-y", "-q", *missing], timeout=1800)
            except CommandError as e:
                raise SshSetupError(f"{_node_name(node)}, step 'packages': {e}") from None
        facts["packages_installed"] = missing
        still = missing_programs(r, NODE_PROGRAMS)
        if still:
            raise SshSetupError(f"{_node_name(node)}, step 'packages': still missing {still}")
        # our files
        ensure_private_workdir(r, sl.workdir)
        r.run(["mkdir", "-p", "--", f"{sl.workdir}/bin", f"{sl.workdir}/run"], sudo=False)
        uploads: list[tuple[str, Path, str]] = []
        if role in ("srv", "cli"):
            uploads.append(("tquic-perf", root / "target" / "release" / "tquic-perf", ""))
        if role in PROBED_ROLES:  # the node's host check of itself (testbed.ssh.nodecheck)
            uploads.append(("hostprobe", root / "target" / "release" / "hostprobe", ""))
        if role == "gw":
            uploads.append(("qsampler", QSAMPLER_SRC, ".py"))
            r.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
            facts["ip_forward"] = 1
        if role == "dly":
            facts["netem"] = probe_netem(r)
            if not facts["netem"]:
                uploads.append(("delayline", root / "target" / "release" / "delayline", ""))
        facts["files"] = {}
        for name, local, suffix in uploads:
            if not local.exists():
                raise EnvironmentError_(f"provisioning {_node_name(node)}: {local} is not built "
                                        "(run scripts/setup.sh)")
            sha = sha256_file(local)
            remote = remote_tool_path(sl.workdir, name, sha, suffix)
            if r.sha256(remote) != sha:
                log(f"[provision] {_node_name(node)}: upload {local.name} -> {remote}")
                r.put(local, remote)
                if r.sha256(remote) != sha:
                    raise SshSetupError(f"{_node_name(node)}, step 'upload': {remote} does not "
                                        "match after upload")
            facts["files"][name] = {"path": remote, "sha256": sha}
        facts["provision_s"] = round(time.monotonic() - t0, 2)
        log(f"[provision] {_node_name(node)}: ready in {facts['provision_s']} s")
        return facts
    finally:
        conn.close()


def write_sentinel(path: Path, facts: dict) -> None:
    write_json_atomic(path, facts)


def provision_job(smk) -> None:
    """The provision_node rule: one node -> its sentinel file."""
    from latency_divide.config import load_config

    cfg = load_config(dict(smk.config))
    inv = load_inventory(cfg.testbed.inventory)
    with open(smk.log[0], "a", buffering=1) as logf:
        def say(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)
            print(msg, file=logf)

        facts = provision_node(inv, smk.wildcards.slice, smk.wildcards.role, log=say)
    write_sentinel(Path(smk.output[0]), facts)
