"""parse_queue on real `tc -s -j qdisc show` samples of an htb+bfifo with TCP traffic through it
(tests/data/queue/capture.py); the qdisc was deleted and re-created mid-capture."""

import json

import numpy as np
import pytest
from conftest import TEST_DATA

from latency_divide.parsers.queue import QueueParseError, drops_per_interval, parse_queue

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared

DATA = TEST_DATA / "queue"


@pytest.fixture(scope="module")
def text():
    return (DATA / "queue.jsonl").read_text()


def raw_fifo(text):
    out = []
    for line in text.splitlines():
        rec = json.loads(line)
        q = [d for d in rec["qdisc"] if d["kind"] == "bfifo"][0]
        out.append((rec["t_unix"], q["backlog"], q["qlen"], q["drops"]))
    return out


def test_columns_and_values_match_the_bfifo_entries(text):
    df = parse_queue(text)
    raw = raw_fifo(text)
    assert list(df.columns) == ["t_unix", "backlog_bytes", "backlog_pkts", "drops_total", "drops"]
    assert len(df) == len(raw) == 50
    assert df["t_unix"].tolist() == [r[0] for r in raw]
    assert df["backlog_bytes"].tolist() == [r[1] for r in raw]
    assert df["backlog_pkts"].tolist() == [r[2] for r in raw]
    assert df["drops_total"].tolist() == [r[3] for r in raw]
    assert df["backlog_bytes"].max() > 0


def test_drops_per_interval_with_real_counter_reset(text):
    df = parse_queue(text)
    d = df["drops"].to_numpy()
    tot = df["drops_total"].to_numpy()
    assert d[0] == 0
    assert (d >= 0).all()
    resets = np.flatnonzero(np.diff(tot) < 0) + 1
    assert len(resets) == 1  # the capture re-created the qdisc once
    r = resets[0]
    assert d[r] == tot[r]
    # all drops seen = increase before the reset + everything counted after it
    assert d.sum() == (tot[r - 1] - tot[0]) + tot[-1]


def test_drops_per_interval_rules():
    assert drops_per_interval(np.array([5, 7, 7, 2, 4])).tolist() == [0, 2, 0, 2, 2]
    assert drops_per_interval(np.array([], dtype=int)).tolist() == []


def test_truncated_last_line_is_ignored_but_bad_middle_line_is_an_error(text):
    lines = text.splitlines()
    cut = "\n".join(lines[:3]) + "\n" + lines[3][:50]
    assert len(parse_queue(cut)) == 3
    bad = "\n".join(lines[:2] + ["{not json"] + lines[2:4]) + "\n"
    with pytest.raises(QueueParseError, match="line 3"):
        parse_queue(bad)


def test_missing_fifo_sample_is_skipped(text):
    lines = text.splitlines()
    rec = json.loads(lines[1])
    rec["qdisc"] = [q for q in rec["qdisc"] if q["kind"] != "bfifo"]
    df = parse_queue("\n".join([lines[0], json.dumps(rec), lines[2]]) + "\n")
    assert len(df) == 2


def test_other_kind_selectable(text):
    df = parse_queue(text, kind="htb")
    assert df["drops_total"].iloc[1] == raw_fifo(text)[1][3]  # htb root counts the child's drops


def test_a_failed_tc_sample_is_skipped_not_fatal():
    """The sampler writes "qdisc": null when one tc call fails (e.g. times out under load):
    that tick is skipped, and the next sample's drops cover both intervals."""
    fifo = lambda drops, backlog: {"kind": "bfifo", "handle": "10:", "parent": "1:3",  # noqa: E731
                                   "drops": drops, "backlog": backlog, "qlen": 1}
    lines = [
        {"t_unix": 1.0, "dev": "ld-gc", "qdisc": [fifo(0, 100)]},
        {"t_unix": 1.1, "dev": "ld-gc", "qdisc": None},
        {"t_unix": 1.2, "dev": "ld-gc", "qdisc": [fifo(3, 200)]},
    ]
    df = parse_queue("".join(json.dumps(x) + "\n" for x in lines))
    assert df["t_unix"].tolist() == [1.0, 1.2]
    assert df["drops"].tolist() == [0, 3]
    with pytest.raises(QueueParseError, match="line 1"):
        parse_queue(json.dumps({"t_unix": 1.0, "dev": "x", "qdisc": "oops"}) + "\n")


def test_the_fast_path_reads_exactly_what_the_full_parse_reads(text, monkeypatch):
    """Lines of the sampler's plain form are read from t_unix and the FIFO's own object only;
    the result must be the full parse's, and anything else goes to the full parse."""
    import pandas as pd

    from latency_divide.parsers import queue

    assert queue._fast_samples(text.split("\n"), "bfifo") is None  # spaced JSON: full parse
    # as the sampler writes it (compact), the real samples take the fast path
    text = "".join(json.dumps(json.loads(ln), separators=(",", ":")) + "\n"
                   for ln in text.splitlines())
    assert queue._fast_samples(text.split("\n"), "bfifo") is not None
    fast = parse_queue(text)
    with monkeypatch.context() as m:
        m.setattr(queue, "_fast_samples", lambda lines, kind: None)
        pd.testing.assert_frame_equal(fast, parse_queue(text))
    lines = text.splitlines()
    cut = "\n".join(lines) + "\n" + lines[0][: len(lines[0]) - 3]  # cut after the FIFO object
    assert queue._fast_samples(cut.split("\n"), "bfifo") is None
    pd.testing.assert_frame_equal(parse_queue(cut), fast)  # the cut line is left out
    two = lines[0].replace("]}", f",{json.dumps(json.loads(lines[0])['qdisc'][-1])}]}}")
    assert queue._fast_samples([two], "bfifo") is None
    with pytest.raises(QueueParseError, match="line 1: 2 qdiscs of kind 'bfifo'"):
        parse_queue(two + "\n")
