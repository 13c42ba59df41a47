"""The SSH testbed inventory: which machines play server, gateway, delay and client, how to
log in to them, and (optionally) their data-plane interfaces. One inventory may list several
four-node *slices*; trials spread over them, one trial per slice at a time.

The file (YAML) is checked against config/testbeds/inventory.schema.yaml (strict: unknown keys
are errors), then by the checks a schema cannot express. Every error is a ConfigError naming
the file, the key and the value. config/testbeds/ssh.example.yaml documents every key.

Relative paths (keys, known_hosts) are relative to the inventory file's directory; ``~`` is
expanded.
"""

from __future__ import annotations

import functools
import getpass
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from latency_divide.errors import ConfigError, yaml_path
from latency_divide.links.plan import check_ifname
from latency_divide.paths import INVENTORY_SCHEMA
from latency_divide.vocab import ROLE_NAMES, ROLE_OF

SCHEMA_PATH = INVENTORY_SCHEMA




DEFAULT_SERVER_ADDR = "10.10.1.1"


DEFAULT_CLIENT_ADDR = "10.10.2.2"


DEFAULT_WORKDIR = "/var/tmp/latency-divide"


DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


DEFAULT_CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Jump:
    host: str
    user: str
    port: int
    key: str | None

    def describe(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True)
class Node:
    role: str  # server | gateway | delay | client
    host: str
    user: str
    port: int
    key: str | None
    jump: Jump | None = None
    #: gateway: {"uplink": ifname, "downlink": ifname}; delay: (ifname, ifname); else None.
    interfaces: Any = None
    #: delay only: two addresses whose routes (ip route get) give the two ports.
    probe_addrs: tuple[str, ...] | None = None

    def describe(self) -> str:
        via = f" via {self.jump.describe()}" if self.jump else ""
        return f"{self.role} {self.user}@{self.host}:{self.port}{via}"

    def to_dict(self) -> dict:
        return {"role": self.role, "host": self.host, "user": self.user, "port": self.port,
                "key": self.key, "jump": None if self.jump is None else vars(self.jump).copy(),
                "interfaces": (dict(self.interfaces) if isinstance(self.interfaces, Mapping)
                               else list(self.interfaces) if self.interfaces else None),
                "probe_addrs": list(self.probe_addrs) if self.probe_addrs else None}


@dataclass(frozen=True)
class Slice:
    name: str
    workdir: str
    server_addr: str
    client_addr: str
    nodes: Mapping[str, Node]  # by inventory role name

    def node(self, role: str) -> Node:
        """By inventory role (server, ...) or topology role (srv, ...)."""
        return self.nodes[ROLE_NAMES.get(role, role)]


@dataclass(frozen=True)
class Inventory:
    path: Path | None
    slices: tuple[Slice, ...]
    known_hosts: str | None  # None when insecure_host_keys
    insecure_host_keys: bool = False
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def slice(self, name: str | None = None) -> Slice:
        if name is None:
            return self.slices[0]
        for s in self.slices:
            if s.name == name:
                return s
        raise ConfigError(f"inventory {self.path}: no slice named {name!r} "
                          f"(slices: {', '.join(s.name for s in self.slices)})")

    def slice_names(self) -> list[str]:
        return [s.name for s in self.slices]


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    with open(SCHEMA_PATH) as f:
        return yaml.safe_load(f)


def _schema_error(name: str, err: jsonschema.ValidationError) -> ConfigError:
    best = jsonschema.exceptions.best_match([err])
    where = yaml_path(best.absolute_path)
    if best.validator == "additionalProperties":
        allowed = sorted(best.schema.get("properties", {}))
        extra = sorted(set(best.instance) - set(allowed))
        keys = ", ".join(f"{where}.{k}" if best.absolute_path else k for k in extra)
        return ConfigError(f"inventory {name}: unknown key {keys} (allowed here: "
                           f"{', '.join(allowed)})")
    if best.validator == "required":
        return ConfigError(f"inventory {name}: {where}: {best.message}")
    return ConfigError(f"inventory {name}: {where} = {best.instance!r}: {best.message}")


def _resolve_path(value: str, base: Path) -> str:
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else (base / p).resolve())


def load_inventory(source: str | Path | Mapping[str, Any], *, base: Path | None = None) -> Inventory:
    """Read (path) or take (mapping) an inventory, validate it, apply the defaults."""
    if isinstance(source, Mapping):
        raw = dict(source)
        path = None
        name = "(mapping)"
        base = base or Path.cwd()
    else:
        path = Path(source)
        name = str(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"inventory file not found: {path}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"inventory {path} is not valid YAML: {e}") from None
        base = base or path.resolve().parent
    if not isinstance(raw, dict):
        raise ConfigError(f"inventory {name} must be a mapping of keys, not {type(raw).__name__}")
    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    errors = sorted(cls(schema).iter_errors(raw),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise _schema_error(name, errors[0])

    insecure = bool(raw.get("insecure_host_keys", False))
    known_hosts = None
    if not insecure:
        known_hosts = _resolve_path(raw.get("known_hosts", DEFAULT_KNOWN_HOSTS), base)
        if not os.path.isfile(known_hosts):
            raise ConfigError(
                f"inventory {name}: known_hosts = {known_hosts!r}: file not found. Host keys are "
                "verified against it (add the nodes with ssh-keyscan after checking their "
                "fingerprints), or set insecure_host_keys: true to skip the check")
    defaults = raw.get("defaults", {})

    def key_path(value, where: str) -> str | None:
        if value is None:
            return None
        p = _resolve_path(value, base)
        if not os.path.isfile(p):
            raise ConfigError(f"inventory {name}: {where} = {value!r}: key file {p} not found")
        if not os.access(p, os.R_OK):
            raise ConfigError(f"inventory {name}: {where} = {value!r}: key file {p} is not "
                              "readable")
        return p

    def jump_of(j, where: str) -> Jump | None:
        if j is None:
            return None
        return Jump(host=j["host"], user=j.get("user", defaults.get("user", getpass.getuser())),
                    port=j.get("port", 22),
                    key=key_path(j.get("key", defaults.get("key")), f"{where}.key"))

    slices = []
    seen_hosts: dict[tuple[str, int], str] = {}
    for i, s in enumerate(raw["slices"]):
        sw = f"slices[{i}]"
        if s["name"] in (x.name for x in slices):
            raise ConfigError(f"inventory {name}: {sw}.name = {s['name']!r}: slice name repeated")
        addrs = {}
        for k, default in (("server_addr", DEFAULT_SERVER_ADDR), ("client_addr", DEFAULT_CLIENT_ADDR)):
            v = s.get(k, default)
            try:
                ipaddress.IPv4Address(v)
            except ValueError:
                raise ConfigError(f"inventory {name}: {sw}.{k} = {v!r}: not an IPv4 address") from None
            addrs[k] = v
        if addrs["server_addr"] == addrs["client_addr"]:
            raise ConfigError(f"inventory {name}: {sw}: server_addr and client_addr are both "
                              f"{addrs['server_addr']!r}")
        nodes = {}
        for role in ROLE_OF:
            n = s["nodes"][role]
            nw = f"{sw}.nodes.{role}"
            key = key_path(n.get("key", defaults.get("key")), f"{nw}.key")
            jump_raw = n["jump"] if "jump" in n else defaults.get("jump")
            interfaces = n.get("interfaces")
            if isinstance(interfaces, dict):
                for d, ifname in interfaces.items():
                    try:
                        check_ifname(ifname)
                    except ConfigError as e:
                        raise ConfigError(f"inventory {name}: {nw}.interfaces.{d}: {e}") from None
                if interfaces["uplink"] == interfaces["downlink"]:
                    raise ConfigError(f"inventory {name}: {nw}.interfaces: uplink and downlink are "
                                      f"both {interfaces['uplink']!r}")
            elif interfaces is not None:
                interfaces = tuple(interfaces)
                for ifname in interfaces:
                    try:
                        check_ifname(ifname)
                    except ConfigError as e:
                        raise ConfigError(f"inventory {name}: {nw}.interfaces: {e}") from None
            probes = n.get("probe_addrs")
            if probes is not None:
                for a in probes:
                    try:
                        ipaddress.IPv4Address(a)
                    except ValueError:
                        raise ConfigError(f"inventory {name}: {nw}.probe_addrs: {a!r} is not an "
                                          "IPv4 address") from None
                probes = tuple(probes)
            node = Node(role=role, host=n["host"],
                        user=n.get("user", defaults.get("user", getpass.getuser())),
                        port=n.get("port", defaults.get("port", 22)), key=key,
                        jump=jump_of(jump_raw, f"{nw}.jump"), interfaces=interfaces,
                        probe_addrs=probes)
            hk = (node.host, node.port)
            if hk in seen_hosts:
                raise ConfigError(f"inventory {name}: {nw}.host = {node.host!r} (port {node.port}) "
                                  f"is also {seen_hosts[hk]}: every node plays one role in one slice")
            seen_hosts[hk] = nw
            nodes[role] = node
        slices.append(Slice(name=s["name"], workdir=s.get("workdir", DEFAULT_WORKDIR).rstrip("/"),
                            server_addr=addrs["server_addr"], client_addr=addrs["client_addr"],
                            nodes=nodes))
    return Inventory(path=path, slices=tuple(slices), known_hosts=known_hosts,
                     insecure_host_keys=insecure,
                     connect_timeout_s=float(raw.get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S)),
                     raw=raw)
