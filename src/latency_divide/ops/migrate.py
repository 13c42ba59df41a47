"""Move trials of the format-1 layout (``<household>/<direction>/<variant>/rep<r>/``, before
trial definitions) into the definition layout (``<definition id>/<household>/...``).

The definition of a format-1 trial is taken from the configuration it ran under, which must be
given: its hash must be the ``config_hash`` the trial recorded (so the trial is the config's
own), and every setting the trial recorded must agree with the definition the config gives its
variant. The files are moved, never rewritten: a published trial keeps every byte (and every
DVC object); only DVC's directory manifest changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from latency_divide.config import config_hash, load_config
from latency_divide.errors import LatencyDivideError
from latency_divide.trial import definition
from latency_divide.trial.layout import META


def legacy_trials(raw_root: Path | str) -> list[Path]:
    """Every trial directory of the format-1 layout under ``raw_root``."""
    return sorted(p.parent for p in Path(raw_root).glob(f"[0-9]*/*/*/rep*/{META}"))


def migrate(raw_root: Path | str, config: dict, *, dry_run: bool = False) -> list[tuple[Path, Path]]:
    """Plan (and unless ``dry_run`` make) the moves; refuse all if any trial does not fit."""
    raw_root = Path(raw_root)
    cfg = load_config(config)
    want_hash = config_hash(config)
    moves, problems = [], []
    for d in legacy_trials(raw_root):
        meta = json.loads((d / META).read_text())
        if meta.get("config_hash") != want_hash:
            problems.append(f"{d}: recorded config_hash {str(meta.get('config_hash'))[:12]}, "
                            f"the given config hashes to {want_hash[:12]}")
            continue
        variant = cfg.variant(meta["variant"]["name"])
        defn = definition.of_config(cfg, variant)
        bad = definition.mismatches(defn, meta)
        if bad:
            problems.append(f"{d}: " + "; ".join(bad))
            continue
        moves.append((d, raw_root / definition.definition_id(defn) / d.relative_to(raw_root),
                      defn))
    if problems:
        raise LatencyDivideError("not migrated (nothing moved):\n  " + "\n  ".join(problems))
    for src, dst, defn in moves:
        if dst.exists():
            raise LatencyDivideError(f"{dst} exists: not overwriting a trial (nothing more moved)")
    if not dry_run:
        for src, dst, defn in moves:
            definition.ensure_file(dst.parents[3], defn)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.rename(src, dst)
            for parent in list(src.parents)[:3]:  # variant, direction, household directories
                try:
                    parent.rmdir()
                except OSError:
                    break
    return [(s, d) for s, d, _ in moves]
