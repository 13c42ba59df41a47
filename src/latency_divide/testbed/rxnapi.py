"""The receiving veths' NAPI of a local trial (instrument generation v3, trial.instrument): which
trials get threaded NAPI on the veths the delay line sends into, by the rate they can carry and
their variant. Here, in the testbed stage, because the local testbed applies it; the trial's
record of what it had makes its generation.
"""

from __future__ import annotations


def carried_mbit(rate_kbit: float, rtt_ms: float, window_bytes: int | None) -> float:
    """The most a trial can carry: the shaped rate, or less when the receiver window binds
    (window per RTT; queueing only lowers it further, so this is an upper bound)."""
    mbit = rate_kbit / 1000.0
    if window_bytes and rtt_ms > 0:
        mbit = min(mbit, window_bytes * 8 / rtt_ms / 1000.0)
    return mbit


#: Above this many Mbit/s carried (carried_mbit) a trial through the delay line
#: threads the NAPI of its receiving veths: where v2 cannot hold the link on two cores (it held
#: 236.5 Mbit/s, not 299.7). At 300 Mbit/s v3 took 12 % off the host's CPU and halved the delay
#: line's release lateness at p99 (bench/baselines/rx-napi-2026-11-28.txt).
RX_NAPI_FROM_MBIT = 250.0
#: The variants v3 measures as v2 does, checked against repeated runs of both on the links v2
#: holds (176.8 and 236.5 Mbit/s, 2026-11-28; docs/emulation.md, "Instrument v3: the fast
#: links"): Cubic, BBR and Copa with delta up to 0.04. Copa delta 0.5 moved (0.81-0.89 of the
#: 236.5 Mbit/s link against v2's 0.92-0.93 today): its 2-packet standing queue is shorter than
#: the batches the NAPI thread delivers, so its trials stay on v2 (beyond the host there).
V3_CCS = ("cubic", "bbr")
V3_COPA_MAX_DELTA = 0.04
#: ``auto``: by the rate and variant (above); ``off`` and ``threaded`` force it (comparisons;
#: the trial's record says which it had, and its generation follows).
RX_NAPI_CHOICES = ("auto", "off", "threaded")


def v3_measures(cc: str | None, delta: float | None = None) -> bool:
    """Whether v3 is checked to measure this variant as v2 does (``cc`` None: a link alone,
    whatever runs on it)."""
    if cc is None:
        return True
    return cc in V3_CCS or (cc == "copa" and delta is not None and delta <= V3_COPA_MAX_DELTA)


def rx_napi_for(mechanism: str, carried_mbit: float, choice: str = "auto",
                cc: str | None = None, delta: float | None = None) -> str:
    """``threaded`` or ``off``: the receiving veths' NAPI of a trial of variant ``cc``/``delta``
    through ``mechanism`` carrying up to ``carried_mbit``; netem has no delay line and keeps
    the kernel's default."""
    if choice not in RX_NAPI_CHOICES:
        raise ValueError(f"receiving veths' NAPI {choice!r}: use one of "
                         f"{', '.join(RX_NAPI_CHOICES)}")
    if mechanism != "delayline":
        return "off"
    if choice == "auto":
        fast = carried_mbit > RX_NAPI_FROM_MBIT and v3_measures(cc, delta)
        return "threaded" if fast else "off"
    return choice
