"""The raw layout: where a trial's files are, defined once.

A trial directory is ``<raw root>/<definition id>/<household>/<direction>/<variant>/rep<r>/``
(trial.definition: the id hashes every setting that shapes the measurement). It appears only
complete: it is built in a temporary directory beside its final place (``.ld-tmp-rep<r>-<owner
pid>-<random>``, removed by `latency-divide clean` once its owner is gone) and renamed.

Files of a trial directory (README, "Raw data"): ``meta.json`` (written last), the traffic
tool's logs, the ping log, the queue samples, the delay line's log. Since format 4 every file but
meta.json is packed into one archive, ``logs.tar.xz``, with the set-up records as
``setup.json`` (SETUP_KEYS): a trial is two files, about three 4 KiB blocks on disk instead of
ten. Formats 1-3 keep the files
side by side, the large logs gzip-compressed. trial.rawio reads every form. Each definition
directory holds ``definition.json``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from latency_divide import PREFIX

#: A definition id: ``def-`` + 10 hex digits (trial.definition); a trial path's first part.
ID_PREFIX = "def-"
ID_PATTERN = r"def-[0-9a-f]{10}"
_ID_RE = re.compile(rf"\A{ID_PATTERN}\Z")

META = "meta.json"
DEFINITION = "definition.json"
SENDER_LOG = "sender.log"
RECEIVER_LOG = "receiver.log"
#: tquic-perf's JSON summaries, written by each end where it runs
SENDER_JSON = "sender.json"
RECEIVER_JSON = "receiver.json"
#: tperf with tool.qlog: the directory its server writes qlogs into while the trial runs,
#: and what the trial keeps of them (parsers.qlog.summarize_server_qlog)
QLOG_DIR = "qlog"
QLOG_SUMMARY = "qlog_summary.json"
PING_LOG = "ping.log"
PING_ERR = "ping.err"
QUEUE_LOG = "queue.jsonl"
QSAMPLER_LOG = "qsampler.log"
DELAYLINE_LOG = "delayline.log"
#: The logs the analysis reads: a trial without one of them is incomplete.
REQUIRED_LOGS = (RECEIVER_LOG, PING_LOG, QUEUE_LOG)
#: Logs compressed when a format-3 trial was finalised (meta.json and small logs stay plain).
COMPRESSED_LOGS = (QUEUE_LOG, RECEIVER_LOG, PING_LOG)
#: Format 4: every file of a trial but meta.json, in one deterministic tar.xz (trial.rawio).
ARCHIVE = "logs.tar.xz"
#: Format 4: the records of how the trial was set up, moved out of meta.json into the archive
#: (so that meta.json fits one 4 KiB block): the link plan's commands, the testbed's
#: namespaces and devices, the offloads, the host's facts, the run-queue watch and the qdisc
#: dumps before and after the transfer, under the keys meta.json had for them in formats 1-3
#: (trial.rawio.full_meta merges them back).
SETUP_JSON = "setup.json"
SETUP_KEYS = ("linkplan", "testbed", "offloads", "host", "sched", "qdisc_before", "qdisc_after",
              "instrument_detail")

#: A trial's temporary directory while it runs: ``.ld-tmp-rep<r>-<owner pid>-<random>``.
TMP_PREFIX = f".{PREFIX}tmp-"
TMP_DIR = re.compile(rf"^\.{re.escape(PREFIX)}tmp-rep\d+-(?P<pid>\d+)-")


class TrialPath(NamedTuple):
    """The parts of a trial directory's path."""

    definition_id: str
    household: int
    direction: str
    variant: str
    repetition: int

    def relative(self) -> Path:
        return Path(self.definition_id, str(self.household), self.direction, self.variant,
                    f"rep{self.repetition}")


def trial_id(household: int, direction: str, variant: str, repetition: int) -> str:
    """``<household>/<direction>/<variant>/rep<r>``: a trial within its definition."""
    return f"{household}/{direction}/{variant}/rep{repetition}"


def trial_path(raw_root: str | Path, definition_id: str, household: int, direction: str,
               variant: str, rep: int) -> Path:
    """A trial's directory."""
    return Path(raw_root) / definition_id / trial_id(household, direction, variant, rep)


def trial_meta_path(raw_root: str | Path, definition_id: str, household: int, direction: str,
                    variant: str, rep: int) -> Path:
    """A trial's meta.json: present iff the trial is complete (the workflow's target)."""
    return trial_path(raw_root, definition_id, household, direction, variant, rep) / META


def trial_dirs_under(raw_root: Path | str) -> list[Path]:
    """Every complete trial directory of the layout under ``raw_root`` (it has its meta.json)."""
    return sorted(p.parent for p in Path(raw_root).glob(f"{ID_PREFIX}*/*/*/*/rep*/{META}"))


def tmp_dir_prefix(repetition: int, pid: int) -> str:
    """The name prefix of a running trial's temporary directory (matches TMP_DIR)."""
    return f"{TMP_PREFIX}rep{repetition}-{pid}-"


def is_id(text: str) -> bool:
    """True for a definition id."""
    return bool(_ID_RE.match(text))


def parse_trial_path(path: Path | str) -> TrialPath | None:
    """The layout's parts of a trial directory, or None when ``path`` does not end in it."""
    parts = Path(path).parts[-5:]
    if len(parts) < 5:
        return None
    def_id, household, direction, variant, rep = parts
    if not (is_id(def_id) and household.isdigit() and rep.startswith("rep")
            and rep[3:].isdigit()):
        return None
    return TrialPath(def_id, int(household), direction, variant, int(rep[3:]))
