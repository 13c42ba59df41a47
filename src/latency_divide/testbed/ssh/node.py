"""Facts about an SSH node: the programs a trial needs, the private work directory our tools
run from, sudo, the interfaces that carry the data plane (``ip route get`` toward the peers,
as the paper did; never the management interface), and the offloads we switch off."""

from __future__ import annotations

import json

from latency_divide.testbed.inventory import Slice
from latency_divide.testbed.ssh.connection import SshSetupError, _node_name
from latency_divide.testbed.ssh.runner import FabricRunner

#: Programs every node needs for a trial (and the Debian package that has each).
NODE_PROGRAMS = {"ip": "iproute2", "tc": "iproute2", "ss": "iproute2", "ping": "iputils-ping",
                 "ethtool": "ethtool", "sysctl": "procps", "python3": "python3",
                 "setsid": "util-linux", "sha256sum": "coreutils"}


PACKAGES = ("iproute2", "iputils-ping", "ethtool", "procps", "python3")


#: ethtool -k feature names of the offloads we switch off (OFFLOAD_ARGS order: tx rx tso gso gro).
OFFLOAD_FEATURES = {"tx": "tx-checksumming", "rx": "rx-checksumming",
                    "tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
                    "gro": "generic-receive-offload"}


#: $@ programs: print those not found.
_MISSING = 'for p in "$@"; do command -v "$p" >/dev/null 2>&1 || echo "$p"; done'


def remote_tool_path(workdir: str, name: str, sha256: str, suffix: str = "") -> str:
    """Uploaded files are content-addressed: a rebuilt tool never runs from a stale copy."""
    return f"{workdir}/bin/{name}-{sha256[:16]}{suffix}"


def ensure_private_workdir(r: "FabricRunner", workdir: str, create: bool = True) -> None:
    """The slice's work directory holds the programs that run as root: it must be a directory
    owned by the SSH user (root, or a user with sudo, who is root's equal anyway) with mode
    0700, so that no other user of the node can replace them. Made so when missing
    (``create``); an existing one with another owner or mode is refused, never changed."""
    def stat():
        res = r.run(["stat", "-c", "%U %a %F", "--", workdir], check=False, sudo=False)
        return res.stdout.strip().split(" ", 2) if res.returncode == 0 else None

    found = stat()
    if found is None and create:
        r.run(["mkdir", "-m", "0700", "--", workdir], sudo=False)
        found = stat()
    if found is None:
        raise SshSetupError(f"{_node_name(r.node)}: work directory {workdir} does not exist "
                            "(provision the slice: latency-divide provision)")
    owner, mode, kind = found
    if kind != "directory" or owner != r.node.user or mode != "700":
        raise SshSetupError(
            f"{_node_name(r.node)}: work directory {workdir} is a {kind} owned by {owner} with "
            f"mode {mode}; it must be a directory owned by {r.node.user} with mode 700, as our "
            "tools run as root from it: remove it, or set another slices[].workdir")


def check_sudo(r: FabricRunner) -> None:
    if not r.sudo:
        return
    res = r.run(["true"], check=False)
    if res.returncode != 0:
        raise SshSetupError(f"{_node_name(r.node)}, step 'sudo': {r.node.user!r} cannot run "
                            f"commands with sudo without a password: "
                            f"{(res.stderr or res.stdout).strip()[:200]}")


def missing_programs(r: FabricRunner, programs) -> list[str]:
    """Looked up as they will run: through sudo (whose secure_path has the sbin directories a
    normal login PATH lacks, where tc, ethtool and sysctl live)."""
    res = r.run(["sh", "-c", _MISSING, "sh", *programs], check=False)
    return res.stdout.split()


def management_dev(r: FabricRunner) -> str | None:
    """The interface carrying our SSH session (never a data-plane interface)."""
    res = r.run(["sh", "-c", 'echo "$SSH_CONNECTION"'], check=False, sudo=False)
    parts = res.stdout.split()
    if len(parts) != 4:
        return None
    local_ip = parts[2]
    addrs = json.loads(r.run(["ip", "-j", "addr", "show"]).stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            if a.get("local") == local_ip:
                return link["ifname"]
    return None


def route_dev(r: FabricRunner, addr: str, step: str) -> str:
    res = r.run(["ip", "-j", "route", "get", addr], check=False)
    try:
        routes = json.loads(res.stdout) if res.returncode == 0 else []
    except json.JSONDecodeError:
        routes = []
    if not routes or "dev" not in routes[0]:
        raise SshSetupError(f"{_node_name(r.node)}, step '{step}': no route to {addr} "
                            f"(ip route get {addr}: {(res.stderr or res.stdout).strip()[:200]}); "
                            "give the interfaces explicitly in the inventory")
    return routes[0]["dev"]


def link_exists(r: FabricRunner, dev: str) -> bool:
    return r.run(["ip", "-j", "link", "show", "dev", dev], check=False).returncode == 0


def discover_interfaces(runners: dict, sl: Slice) -> dict:
    """{"gw": {"uplink": dev, "downlink": dev}, "dly": [dev, dev]}: explicit interfaces are
    checked to exist; otherwise ``ip route get`` toward the peers, as the paper did."""
    step = "discover interfaces"
    gw, dly = runners["gw"], runners["dly"]
    out: dict = {}
    node = sl.node("gateway")
    mgmt = management_dev(gw)
    if node.interfaces:
        devs = dict(node.interfaces)
    else:
        devs = {"uplink": route_dev(gw, sl.server_addr, step),
                "downlink": route_dev(gw, sl.client_addr, step)}
    for direction, dev in devs.items():
        if not link_exists(gw, dev):
            raise SshSetupError(f"{_node_name(node)}, step '{step}': interface {dev!r} "
                                f"({direction} egress) not found")
        if dev == mgmt:
            raise SshSetupError(f"{_node_name(node)}, step '{step}': the {direction} egress "
                                f"{dev!r} is the management interface (our SSH session): the "
                                "data plane must be on other interfaces; check the addresses "
                                "or give gateway.interfaces")
    if devs["uplink"] == devs["downlink"]:
        raise SshSetupError(f"{_node_name(node)}, step '{step}': the routes to the server "
                            f"({sl.server_addr}) and the client ({sl.client_addr}) both leave "
                            f"through {devs['uplink']!r}; the gateway must sit between them")
    out["gw"] = devs
    node = sl.node("delay")
    mgmt = management_dev(dly)
    if node.interfaces:
        ports = list(node.interfaces)
    elif node.probe_addrs:
        ports = [route_dev(dly, a, step) for a in node.probe_addrs]
    else:
        # A delay node is a layer-2 hop without data-plane addresses: its two ports are the
        # Ethernet interfaces other than the management one.
        links = json.loads(dly.run(["ip", "-j", "-d", "link", "show"]).stdout or "[]")
        skip = {"bridge", "dummy", "tun", "vxlan", "ipip", "gre", "wireguard", "bond"}
        ports = [link["ifname"] for link in links
                 if link.get("link_type") == "ether" and link["ifname"] != mgmt
                 and link.get("linkinfo", {}).get("info_kind") not in skip]
        if len(ports) != 2:
            raise SshSetupError(f"{_node_name(node)}, step '{step}': expected two data-plane "
                                f"ports besides the management interface {mgmt!r}, found "
                                f"{ports}; give delay.interfaces in the inventory")
    for dev in ports:
        if not link_exists(dly, dev):
            raise SshSetupError(f"{_node_name(node)}, step '{step}': interface {dev!r} not found")
        if dev == mgmt:
            raise SshSetupError(f"{_node_name(node)}, step '{step}': {dev!r} is the management "
                                "interface (our SSH session), not a delay port")
    if ports[0] == ports[1]:
        raise SshSetupError(f"{_node_name(node)}, step '{step}': both delay ports are {ports[0]!r}")
    out["dly"] = ports
    return out




def read_offloads(r: FabricRunner, dev: str) -> dict[str, str]:
    """{"tx": "on", ...} for the offloads we change; fixed features are left out."""
    res = r.run(["ethtool", "-k", dev], check=False)
    feats = {}
    for line in res.stdout.splitlines():
        name, _, val = line.strip().partition(":")
        feats[name] = val.strip()
    out = {}
    for short, name in OFFLOAD_FEATURES.items():
        val = feats.get(name, "")
        if val and "[fixed]" not in val:
            out[short] = val.split()[0]
    return out
