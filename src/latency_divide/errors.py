"""Domain errors. The CLI turns these into a one-line message and a non-zero exit."""

from __future__ import annotations


class LatencyDivideError(Exception):
    """Base class: an error a user can act on; str(e) is the whole message."""


class ConfigError(LatencyDivideError, ValueError):
    """A config value is invalid: the message names the key, the value and what is allowed
    (a ValueError too, for callers that validate values generally)."""


class HouseholdError(LatencyDivideError):
    """An unknown or malformed household ID."""


class EnvironmentError_(LatencyDivideError):
    """A program, kernel feature or privilege the run needs is missing."""


class CommandError(LatencyDivideError):
    """A command run through a runner failed."""

    def __init__(self, argv, returncode, stdout="", stderr="", where="local"):
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.where = where
        tail = (stderr or stdout or "").strip().splitlines()[-3:]
        super().__init__(
            f"command failed on {where} (exit {returncode}): {' '.join(self.argv)}"
            + (f"\n  {' | '.join(tail)}" if tail else "")
        )


class TrialError(LatencyDivideError):
    """A trial could not be completed; no trial directory was written."""


def yaml_path(path) -> str:
    """Where a value sits in a YAML document, from a jsonschema path: ``a.b[2].c``, or
    ``(top level)``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out or "(top level)"


class UnhealthyTrial(TrialError):
    """A trial ran, but the emulation did not hold while it measured (trial.health): it is
    measured again; no trial directory was written."""
