"""An SSH lab on this host: the paper's four nodes as network namespaces, each running a real
OpenSSH server, wired as the line topology for the data plane

    server 10.10.1.1 --- gateway --- delay --- client 10.10.2.2

(the same wiring as the local testbed, testbed.netns.setup_commands) plus a management network:
one veth pair per namespace from the root namespace, a /30 each out of 10.213.X.0/24 (X
random and unused on this host), sshd listening on port 22 of the namespace's end. Keys (host
keys, the client key, a wrong key) are generated with ssh-keygen; known_hosts lists the lab's
host keys.

Needs root. Everything is named ``ld-<tag>-<role>`` / ``ld<tag>m<i>`` and an owner record
is written first, so ``latency-divide clean`` removes a lab whose test process died.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from latency_divide.testbed.netns import STATE_DIR, new_tag, ns_name, remove_namespace, setup_commands
from latency_divide.testbed.runners import LocalRunner, wait_for

SSHD = "/usr/sbin/sshd"
ROLE_ORDER = (("server", "srv"), ("gateway", "gw"), ("delay", "dly"), ("client", "cli"))

SSHD_CONFIG = """\
Port 22
ListenAddress {addr}
HostKey {host_key}
PidFile none
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
MaxSessions 64
MaxStartups 64
LogLevel INFO
# A lab home without this host's shell start-up files (root's .bashrc may be slow: pyenv):
# sessions see what a fresh node would.
SetEnv HOME={home}
"""


def keygen(path: Path, comment: str) -> str:
    LocalRunner().run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                       "-f", str(path)])
    return Path(f"{path}.pub").read_text().strip()


def _free_octet() -> int:
    used = LocalRunner().run(["ip", "-j", "addr", "show"]).stdout
    routes = LocalRunner().run(["ip", "-j", "route", "show"]).stdout
    for _ in range(50):
        x = random.randrange(1, 255)
        if f'"10.213.{x}.' not in used and f'"10.213.{x}.' not in routes:
            return x
    raise RuntimeError("no free 10.213.X.0/24 for the management network")


@dataclass
class SshLab:
    dir: Path
    tag: str = field(default_factory=new_tag)
    octet: int = 0
    mgmt_addr: dict = field(default_factory=dict)  # role -> address of sshd
    sshd: dict = field(default_factory=dict)  # role -> LocalProcess
    client_key: Path | None = None
    wrong_key: Path | None = None
    known_hosts: Path | None = None
    host_links: list = field(default_factory=list)

    def ns(self, role: str) -> str:
        return ns_name(self.tag, role)

    @property
    def owner_file(self) -> Path:
        return STATE_DIR / f"{self.tag}.json"

    def up(self) -> "SshLab":
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.owner_file.write_text(json.dumps({
            "tag": self.tag, "pid": os.getpid(), "created_unix": time.time(),
            "namespaces": [self.ns(r) for _, r in ROLE_ORDER]}))
        host = LocalRunner()
        # the data plane: exactly the local testbed's wiring (delay node without a bridge)
        for node, argv in setup_commands(self.tag, "delayline"):
            (host if node is None else LocalRunner(self.ns(node))).run(argv)
        # the management network
        self.octet = _free_octet()
        for i, (_, role) in enumerate(ROLE_ORDER):
            hostif = f"ld{self.tag}m{i}"
            base = 4 * i
            host.run(["ip", "link", "add", hostif, "type", "veth", "peer", "name", "ld-mgmt",
                      "netns", self.ns(role)])
            self.host_links.append(hostif)
            host.run(["ip", "addr", "add", f"10.213.{self.octet}.{base + 1}/30", "dev", hostif])
            host.run(["ip", "link", "set", hostif, "up"])
            r = LocalRunner(self.ns(role))
            addr = f"10.213.{self.octet}.{base + 2}"
            r.run(["ip", "addr", "add", f"{addr}/30", "dev", "ld-mgmt"])
            r.run(["ip", "link", "set", "ld-mgmt", "up"])
            self.mgmt_addr[role] = addr
        # keys
        self.client_key = self.dir / "id_lab"
        pub = keygen(self.client_key, "latency-divide lab client")
        self.wrong_key = self.dir / "id_wrong"
        keygen(self.wrong_key, "not authorized")
        auth = self.dir / "authorized_keys"
        auth.write_text(pub + "\n")
        auth.chmod(0o600)
        known = []
        home = self.dir / "home"
        home.mkdir(exist_ok=True)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        for _, role in ROLE_ORDER:
            hk = self.dir / f"host_{role}"
            hpub = keygen(hk, f"lab host {role}")
            known.append(f"{self.mgmt_addr[role]} {hpub}")
            cfg = self.dir / f"sshd_{role}.conf"
            cfg.write_text(SSHD_CONFIG.format(addr=self.mgmt_addr[role], host_key=hk,
                                              authorized_keys=auth, home=home))
            log = self.dir / f"sshd_{role}.log"
            self.sshd[role] = LocalRunner(self.ns(role)).start(
                [SSHD, "-D", "-e", "-f", str(cfg), "-h", str(hk)], stdout=log, stderr=log)
        self.known_hosts = self.dir / "known_hosts"
        self.known_hosts.write_text("\n".join(known) + "\n")
        for _, role in ROLE_ORDER:
            wait_for(lambda role=role: self._listening(role), timeout=10,
                     what=f"sshd of {role} on {self.mgmt_addr[role]}:22 "
                          f"(log {self.dir / f'sshd_{role}.log'})")
        return self

    def _listening(self, role: str) -> bool:
        if self.sshd[role].poll() is not None:
            raise RuntimeError(f"sshd of {role} exited: "
                               f"{(self.dir / f'sshd_{role}.log').read_text()[-500:]}")
        try:
            with socket.create_connection((self.mgmt_addr[role], 22), timeout=0.5):
                return True
        except OSError:
            return False

    def inventory(self, **overrides) -> dict:
        """An inventory mapping for the lab's one slice; ``overrides`` patch node entries
        (``gateway={"interfaces": ...}``) or top-level keys (``known_hosts=...``)."""
        nodes = {name: {"host": self.mgmt_addr[role]} for name, role in ROLE_ORDER}
        for name in list(overrides):
            if name in nodes:
                nodes[name].update(overrides.pop(name))
        inv = {"defaults": {"user": "root", "key": str(self.client_key)},
               "known_hosts": str(self.known_hosts),
               "connect_timeout_s": 5,
               "slices": [{"name": f"lab-{self.tag}", "workdir": str(self.dir / "work"),
                           "nodes": nodes}]}
        inv.update(overrides)
        return inv

    def write_inventory(self, path: Path, **overrides) -> Path:
        path.write_text(yaml.safe_dump(self.inventory(**overrides), sort_keys=False))
        return path

    def down(self) -> list[str]:
        errors = []
        for role, proc in self.sshd.items():
            try:
                proc.stop(timeout=3)
            except Exception as e:
                errors.append(f"sshd {role}: {e}")
        for _, role in ROLE_ORDER:
            errors += remove_namespace(self.ns(role))
        for hostif in self.host_links:  # gone with their peers; make sure
            LocalRunner().run(["ip", "link", "del", hostif], check=False)
        self.owner_file.unlink(missing_ok=True)
        return errors


def make_lab() -> SshLab:
    d = Path(tempfile.mkdtemp(prefix="ld-sshlab-"))
    lab = SshLab(d)
    try:
        return lab.up()
    except BaseException:
        lab.down()
        shutil.rmtree(d, ignore_errors=True)
        raise


def main(argv=None) -> int:
    """Keep SSH labs up for manual runs: ``sudo .venv/bin/python tests/sshlab.py --slices 2
    --inventory /tmp/lab.yaml`` writes an inventory of N slices and waits for Ctrl-C/SIGTERM,
    then tears everything down."""
    import argparse
    import signal

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=1, help="number of four-node labs (slices)")
    ap.add_argument("--inventory", required=True, help="where to write the inventory (YAML)")
    a = ap.parse_args(argv)
    if a.slices < 1:
        ap.error(f"--slices must be >= 1, got {a.slices}")

    def _term(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    labs: list[SshLab] = []
    try:
        for _ in range(a.slices):
            labs.append(make_lab())
        known = "".join(lab.known_hosts.read_text() for lab in labs)
        kh = Path(a.inventory).with_suffix(".known_hosts")
        kh.write_text(known)
        inv = labs[0].inventory(known_hosts=str(kh))
        for lab in labs[1:]:
            sl = lab.inventory()["slices"][0]
            for node in sl["nodes"].values():
                node["key"] = str(lab.client_key)
            inv["slices"].append(sl)
        Path(a.inventory).write_text(yaml.safe_dump(inv, sort_keys=False))
        print(f"lab ready: {a.inventory} ({a.slices} slice(s)); Ctrl-C to tear down", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for lab in labs:
            errs = lab.down()
            shutil.rmtree(lab.dir, ignore_errors=True)
            for e in errs:
                print(f"teardown error: {e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
