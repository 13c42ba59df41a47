"""Queue sampler: DEV's qdisc statistics, as ``tc -s -j qdisc show dev DEV`` prints them.

Every INTERVAL seconds, one timestamped JSON object per line (``{"t_unix": ..., "dev": ...,
"qdisc": [...]}``), until SIGTERM.

Standard library only, so the same file runs on a remote testbed node with the system
python3 >= 3.8 (``python3 qsampler.py --dev IF --interval 0.1 > FILE``). Ticks are scheduled on
absolute times, so the cadence does not drift with the cost of each sample; a tick that falls
more than one interval behind is skipped (and counted), never bunched.

The statistics are read over rtnetlink from this process (one NETLINK_ROUTE socket, one
RTM_GETQDISC dump per sample), not by forking ``tc``: with many trials on a small host the
fork+exec of ``tc`` ten times a second per trial was a real CPU cost. Each qdisc object has the
keys ``tc -s -j`` (iproute2 6.1) prints, in its order and with its values: ``kind``, ``handle``
("1:"), ``root`` (true, for the root qdisc) or else ``parent`` ("1:3"), ``refcnt`` (when not
1), ``options`` (``{"limit": N}`` for bfifo/pfifo/pfifo_head_drop; r2q, default,
direct_packets_stat, direct_qlen for htb; ``{}`` for other kinds), ``bytes``, ``packets``,
``drops``, ``overlimits``, ``requeues``, ``backlog``, ``qlen``. ``--tc`` samples with ``tc``
as before (for comparison). ``--fifo bfifo`` (trial format 3) keeps only the FIFO's
FIFO_FIELDS, time to the ms: a 60 s trial's queue log goes from 17 KB to 3 KB gzipped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

_stop = False


# <linux/netlink.h>, <linux/rtnetlink.h>, <linux/pkt_sched.h>, <linux/gen_stats.h>
NETLINK_ROUTE = 0


NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4


NLM_F_REQUEST, NLM_F_MULTI, NLM_F_DUMP = 0x1, 0x2, 0x300


RTM_NEWQDISC, RTM_GETQDISC = 36, 38


TCA_KIND, TCA_OPTIONS, TCA_STATS, TCA_STATS2, TCA_HW_OFFLOAD = 1, 2, 3, 7, 12


TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8


NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER


TC_H_ROOT, TC_H_UNSPEC = 0xFFFFFFFF, 0


FIFO_KINDS = ("bfifo", "pfifo", "pfifo_head_drop")  # TCA_OPTIONS = struct tc_fifo_qopt


TCA_HTB_INIT, TCA_HTB_DIRECT_QLEN = 2, 5  # htb's TCA_OPTIONS is nested


_NLMSGHDR = struct.Struct("=IHHII")    # len, type, flags, seq, pid


_TCMSG = struct.Struct("=BBHiIII")     # family, pad, pad, ifindex, handle, parent, info


_RTATTR = struct.Struct("=HH")         # len, type


_U32 = struct.Struct("=I")


_I32 = struct.Struct("=i")


_U64 = struct.Struct("=Q")


_HTB_GLOB = struct.Struct("=IiIII")    # struct tc_htb_glob: version, rate2quantum, defcls, debug,


#                                        direct_pkts
_BASIC = struct.Struct("=QI")          # struct gnet_stats_basic: bytes, packets


_QUEUE = struct.Struct("=IIIII")       # struct gnet_stats_queue: qlen, backlog, drops, requeues,


#                                        overlimits
_TC_STATS = struct.Struct("=QIIIIIII")  # struct tc_stats (old TCA_STATS): bytes, packets, drops,


#                                        overlimits, bps, pps, qlen, backlog
RECV_BUF = 1 << 16


TIMEOUT_S = 5.0


class NetlinkError(OSError):
    """The kernel answered with an error (errno set), or a reply was not understood."""


def _on_term(signum, frame):  # noqa: ARG001
    global _stop
    _stop = True


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attrs(buf, off: int, end: int) -> dict:
    """{type: (payload offset, payload length)} of the rtattrs in buf[off:end]."""
    out = {}
    while off + 4 <= end:
        alen, atype = _RTATTR.unpack_from(buf, off)
        if alen < 4 or off + alen > end:
            raise NetlinkError(f"malformed netlink attribute (len {alen})")
        out[atype & NLA_TYPE_MASK] = (off + 4, alen - 4)
        off += _align(alen)
    return out


def tc_handle(h: int) -> str:
    """A qdisc handle as tc prints it: major in hex, then ':'."""
    return f"{h >> 16:x}:"


def tc_classid(h: int) -> str:
    """A parent/class id as tc prints it (iproute2 print_tc_classid)."""
    if h == TC_H_ROOT:
        return "root"
    if h == TC_H_UNSPEC:
        return "none"
    maj, mnr = h >> 16, h & 0xFFFF
    if maj == 0:
        return f":{mnr:x}"
    if mnr == 0:
        return f"{maj:x}:"
    return f"{maj:x}:{mnr:x}"


def _options(kind, buf, o: int, n: int) -> dict:
    """tc's "options" of a fifo ({"limit": N}) or htb; {} for other kinds."""
    opts: dict = {}
    if kind in FIFO_KINDS:
        if n >= 4:
            opts["limit"] = _U32.unpack_from(buf, o)[0]
    elif kind == "htb":
        tb = _attrs(buf, o, o + n)
        if TCA_HTB_INIT in tb and tb[TCA_HTB_INIT][1] >= _HTB_GLOB.size:
            _ver, r2q, defcls, _debug, direct = _HTB_GLOB.unpack_from(buf, tb[TCA_HTB_INIT][0])
            opts.update(r2q=r2q, default=f"{defcls:#x}" if defcls else "0",
                        direct_packets_stat=direct)
        if TCA_HTB_DIRECT_QLEN in tb and tb[TCA_HTB_DIRECT_QLEN][1] >= 4:
            opts["direct_qlen"] = _U32.unpack_from(buf, tb[TCA_HTB_DIRECT_QLEN][0])[0]
    return opts


def parse_qdisc(buf, off: int, end: int) -> tuple[int, dict]:
    """(ifindex, tc -s -j style dict) of one RTM_NEWQDISC payload buf[off:end]."""
    if off + _TCMSG.size > end:
        raise NetlinkError("short RTM_NEWQDISC message")
    _, _, _, ifindex, handle, parent, info = _TCMSG.unpack_from(buf, off)
    tb = _attrs(buf, off + _TCMSG.size, end)
    q: dict = {}
    if TCA_KIND in tb:
        o, n = tb[TCA_KIND]
        q["kind"] = bytes(buf[o:o + n]).split(b"\0", 1)[0].decode("ascii", "replace")
    q["handle"] = tc_handle(handle)
    if parent == TC_H_ROOT:
        q["root"] = True
    elif parent:
        q["parent"] = tc_classid(parent)
    if info != 1:
        q["refcnt"] = info
    if TCA_HW_OFFLOAD in tb:
        o, n = tb[TCA_HW_OFFLOAD]
        if n >= 1 and buf[o]:
            q["offloaded"] = True
    q["options"] = _options(q.get("kind"), buf, *tb[TCA_OPTIONS]) if TCA_OPTIONS in tb else {}
    if TCA_STATS2 in tb:
        o, n = tb[TCA_STATS2]
        st = _attrs(buf, o, o + n)
        if TCA_STATS_BASIC in st:
            so, sn = st[TCA_STATS_BASIC]
            nbytes, packets = _BASIC.unpack_from(bytes(buf[so:so + sn]).ljust(_BASIC.size, b"\0"))
            if TCA_STATS_PKT64 in st:
                po, pn = st[TCA_STATS_PKT64]
                packets = (_U64.unpack_from(buf, po)[0] if pn >= 8 else 0) or packets
            q["bytes"], q["packets"] = nbytes, packets
        if TCA_STATS_QUEUE in st:
            so, sn = st[TCA_STATS_QUEUE]
            qlen, backlog, drops, requeues, overlimits = _QUEUE.unpack_from(
                bytes(buf[so:so + sn]).ljust(_QUEUE.size, b"\0"))
            q["drops"], q["overlimits"], q["requeues"] = drops, overlimits, requeues
            q["backlog"], q["qlen"] = backlog, qlen
    elif TCA_STATS in tb:  # kernels without TCA_STATS2 (tc falls back the same way)
        o, n = tb[TCA_STATS]
        nbytes, packets, drops, overlimits, _bps, _pps, qlen, backlog = _TC_STATS.unpack_from(
            bytes(buf[o:o + n]).ljust(_TC_STATS.size, b"\0"))
        q.update(bytes=nbytes, packets=packets, drops=drops, overlimits=overlimits, requeues=0,
                 backlog=backlog, qlen=qlen)
    return ifindex, q


class QdiscReader:
    """Qdisc statistics of one device over rtnetlink, from a socket opened once.

    The socket belongs to the network namespace this process is in when it is opened.
    """

    def __init__(self, sock: socket.socket | None = None):
        self._sock = sock
        self._seq = int(time.time()) & 0x7FFFFFFF
        self._buf = bytearray(RECV_BUF)
        self._ifindex: dict = {}

    def _socket(self) -> socket.socket:
        if self._sock is None:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
            try:
                s.settimeout(TIMEOUT_S)
                s.bind((0, 0))
            except OSError:
                s.close()
                raise
            self._sock = s
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def dump(self, ifindex: int) -> list:
        """The qdiscs of ifindex, in the kernel's order. On any failure the socket is closed
        (a half-read dump would confuse the next one) and reopened by the next call."""
        try:
            return self._dump(ifindex)
        except BaseException:
            self.close()
            raise

    def _dump(self, ifindex: int) -> list:
        sock = self._socket()
        self._seq = (self._seq + 1) & 0x7FFFFFFF
        seq = self._seq
        req = _NLMSGHDR.pack(_NLMSGHDR.size + _TCMSG.size, RTM_GETQDISC,
                             NLM_F_REQUEST | NLM_F_DUMP, seq, 0) \
            + _TCMSG.pack(socket.AF_UNSPEC, 0, 0, ifindex, 0, 0, 0)
        sock.send(req)
        buf = self._buf
        out = []
        while True:
            n = sock.recv_into(buf, len(buf), socket.MSG_TRUNC)
            if n > len(buf):
                raise NetlinkError(f"netlink reply of {n} bytes truncated to {len(buf)}")
            off = 0
            while off + _NLMSGHDR.size <= n:
                mlen, mtype, _flags, mseq, _pid = _NLMSGHDR.unpack_from(buf, off)
                if mlen < _NLMSGHDR.size or off + mlen > n:
                    raise NetlinkError(f"malformed netlink message (len {mlen})")
                body, end = off + _NLMSGHDR.size, off + mlen
                off += _align(mlen)
                if mseq != seq:
                    continue  # left over from an earlier request
                if mtype == NLMSG_DONE:
                    if end - body >= 4:
                        err = _I32.unpack_from(buf, body)[0]
                        if err < 0:
                            raise NetlinkError(-err, f"qdisc dump failed: {os.strerror(-err)}")
                    return out
                if mtype == NLMSG_ERROR:
                    err = _I32.unpack_from(buf, body)[0] if end - body >= 4 else -1
                    if err == 0:
                        continue  # an ACK; a dump ends with NLMSG_DONE
                    raise NetlinkError(-err, f"RTM_GETQDISC: {os.strerror(-err)}")
                if mtype == NLMSG_OVERRUN:
                    raise NetlinkError("netlink overrun")
                if mtype != RTM_NEWQDISC:
                    continue
                if end - body >= _TCMSG.size and _I32.unpack_from(buf, body + 4)[0] != ifindex:
                    continue  # the kernel dumps every device's qdiscs
                out.append(parse_qdisc(buf, body, end)[1])

    def read(self, dev: str) -> list:
        """The qdiscs of dev (a list like ``tc -s -j qdisc show dev DEV``). OSError if dev does
        not exist; the ifindex is looked up again when dev has no qdisc (deleted, re-created)."""
        idx = self._ifindex.get(dev)
        if idx is None:
            idx = self._ifindex[dev] = socket.if_nametoindex(dev)
        out = self.dump(idx)
        if not out:  # every existing device has a root qdisc (noop/noqueue at least)
            new = socket.if_nametoindex(dev)
            if new != idx:
                self._ifindex[dev] = new
                out = self.dump(new)
        return out


_reader: QdiscReader | None = None


def sample_once(dev: str) -> list:
    """The qdiscs of dev over rtnetlink, through one socket kept open for the process."""
    global _reader
    if _reader is None:
        _reader = QdiscReader()
    return _reader.read(dev)


def sample_tc(dev: str) -> list:
    """The old way: fork ``tc -s -j qdisc show dev DEV``."""
    out = subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", dev],
                         capture_output=True, text=True, check=True, timeout=5).stdout
    return json.loads(out)


SAMPLE_ERRORS = (OSError, ValueError, struct.error, subprocess.CalledProcessError,
                 subprocess.TimeoutExpired)  # OSError covers NetlinkError; ValueError JSON


#: What --fifo keeps of each qdisc of its kind (parsers.queue reads backlog, qlen and drops;
#: bytes, what the FIFO sent, gives the bottleneck's rate on the wire)
FIFO_FIELDS = ("kind", "handle", "parent", "bytes", "backlog", "qlen", "drops")


def fifo_only(qdiscs: list | None, kind: str) -> list | None:
    """The qdiscs of ``kind`` with only FIFO_FIELDS (None, a failed sample, stays None)."""
    if qdiscs is None:
        return None
    return [{k: q[k] for k in FIFO_FIELDS if k in q} for q in qdiscs if q.get("kind") == kind]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dev", required=True, help="interface whose qdiscs are sampled")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between samples (>0)")
    ap.add_argument("--out", default="-", help="output file (JSON lines); - for stdout (default)")
    ap.add_argument("--tc", action="store_true",
                    help="fork `tc -s -j qdisc show` per sample instead of using rtnetlink")
    ap.add_argument("--fifo", metavar="KIND", help="record only the qdiscs of this kind, with "
                    f"{', '.join(FIFO_FIELDS)}, time to the ms (default: all, to the µs)")
    a = ap.parse_args(argv)
    if not a.interval > 0:
        ap.error(f"--interval must be > 0 seconds, got {a.interval}")
    if a.fifo is not None and a.fifo not in FIFO_KINDS:
        ap.error(f"--fifo {a.fifo!r}: allowed is one of {', '.join(FIFO_KINDS)}")
    sample = sample_tc if a.tc else sample_once
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    skipped = 0
    n = 0
    f = sys.stdout if a.out == "-" else open(a.out, "w", buffering=1)
    with f:
        try:
            sample(a.dev)
        except SAMPLE_ERRORS as e:
            print(f"qsampler: cannot read qdiscs of {a.dev}: {e}", file=sys.stderr)
            return 2
        print(f"qsampler ready dev={a.dev} interval={a.interval}", file=sys.stderr, flush=True)
        next_t = time.time()
        while not _stop:
            now = time.time()
            if now < next_t:
                time.sleep(min(next_t - now, 0.5))  # a wake-up a sample; SIGTERM seen in 0.5 s
                continue
            if now - next_t > a.interval:
                late = int((now - next_t) // a.interval)
                skipped += late
                next_t += late * a.interval
            t = time.time()
            try:
                q = sample(a.dev)
            except SAMPLE_ERRORS as e:
                print(f"qsampler: sample failed: {e}", file=sys.stderr)
                q = None
            if a.fifo is not None:
                q = fifo_only(q, a.fifo)
            f.write(json.dumps({"t_unix": round(t, 6 if a.fifo is None else 3), "dev": a.dev,
                                "qdisc": q}, separators=(",", ":")) + "\n")
            f.flush()
            n += 1
            next_t += a.interval
    print(f"qsampler stats samples={n} skipped={skipped}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
