"""One trial: (household, direction, variant, repetition) on a fresh topology.

Lifecycle (flent's habit): ``check`` finds every program and fails before anything starts;
``run`` builds the topology, starts the sender, the queue sampler and the ping, waits the
idle baseline, runs the receiver for the configured duration, stops everything by PID and
collects; the trial directory is built in a temporary directory beside its final place and
renamed only when complete (see /docs in README: "Raw data").

Roles (EXPERIMENT.md): the traffic tool's *server* sends. Downlink: the sender runs on the
server node and the receiver (the tool's client) on the client node; uplink: the reverse.
"""

from __future__ import annotations

from pathlib import Path

from latency_divide.trial.spec import TrialSpec


def trial_dir(root: Path, spec: TrialSpec, testbed_kind: str = "local") -> Path:
    """``root/<definition id>/<household>/<direction>/<variant>/rep<r>``."""
    return Path(root) / spec.definition_id(testbed_kind) / spec.trial_id


def trial_meta_path(raw_root: str | Path, definition_id: str, household: int, direction: str,
                    variant: str, rep: int) -> Path:
    return (Path(raw_root) / definition_id / str(household) / direction / variant / f"rep{rep}"
            / "meta.json")
