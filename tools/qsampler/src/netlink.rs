//! One RTM_GETQDISC dump over a NETLINK_ROUTE socket, and the bottleneck FIFO's counters out
//! of it, as `latency_divide.testbed.qsampler` reads them (its `parse_qdisc` and `fifo_only`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// <linux/netlink.h>, <linux/rtnetlink.h>, <linux/pkt_sched.h>, <linux/gen_stats.h>
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const TCA_KIND: u16 = 1;
const TCA_STATS: u16 = 3;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
const NLA_TYPE_MASK: u16 = 0x3FFF;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_GET_STRICT_CHK: libc::c_int = 12;
const NLMSGHDR_LEN: usize = 16;
const TCMSG_LEN: usize = 20;
const RECV_BUF: usize = 1 << 16;

/// What the sampler keeps of one FIFO qdisc: the keys of FIFO_FIELDS that the kernel gave.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fifo {
    pub kind: String,
    pub handle: u32,
    pub parent: u32,
    /// bytes the FIFO sent (None without statistics)
    pub bytes: Option<u64>,
    /// (backlog bytes, qlen packets, drops) (None without queue statistics)
    pub queue: Option<(u32, u32, u32)>,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_ne_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// A payload zero-padded to `n` bytes (the kernel may send a shorter struct than ours).
fn padded(p: &[u8], n: usize) -> Vec<u8> {
    let mut v = p.to_vec();
    v.resize(v.len().max(n), 0);
    v
}

fn malformed(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The rtattrs of `b`: (type without flags, payload).
fn attrs(b: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= b.len() {
        let len = u16_at(b, off) as usize;
        if len < 4 || off + len > b.len() {
            return Err(malformed(format!(
                "malformed netlink attribute (len {len})"
            )));
        }
        out.push((u16_at(b, off + 2) & NLA_TYPE_MASK, &b[off + 4..off + len]));
        off += (len + 3) & !3;
    }
    Ok(out)
}

/// The ifindex and counters of one RTM_NEWQDISC payload (tcmsg + attributes).
pub fn parse_qdisc(body: &[u8]) -> io::Result<(i32, Fifo)> {
    if body.len() < TCMSG_LEN {
        return Err(malformed("short RTM_NEWQDISC message".into()));
    }
    let ifindex = u32_at(body, 4) as i32;
    let mut q = Fifo {
        handle: u32_at(body, 8),
        parent: u32_at(body, 12),
        ..Fifo::default()
    };
    let (mut stats2, mut old_stats) = (false, None);
    for (t, p) in attrs(&body[TCMSG_LEN..])? {
        match t {
            TCA_KIND => {
                let end = p.iter().position(|&c| c == 0).unwrap_or(p.len());
                q.kind = String::from_utf8_lossy(&p[..end]).into_owned();
            }
            TCA_STATS2 => {
                stats2 = true;
                for (st, sp) in attrs(p)? {
                    if st == TCA_STATS_BASIC {
                        q.bytes = Some(u64_at(&padded(sp, 12), 0));
                    } else if st == TCA_STATS_QUEUE {
                        let v = padded(sp, 20);
                        q.queue = Some((u32_at(&v, 4), u32_at(&v, 0), u32_at(&v, 8)));
                    }
                }
            }
            TCA_STATS => old_stats = Some(p),
            _ => {}
        }
    }
    if !stats2 {
        // kernels without TCA_STATS2: the old struct tc_stats (tc falls back the same way)
        if let Some(p) = old_stats {
            let v = padded(p, 36);
            q.bytes = Some(u64_at(&v, 0));
            q.queue = Some((u32_at(&v, 32), u32_at(&v, 28), u32_at(&v, 12)));
        }
    }
    Ok((ifindex, q))
}

/// "maj:" as tc prints a qdisc handle.
pub fn tc_handle(h: u32) -> String {
    format!("{:x}:", h >> 16)
}

/// A parent as tc prints it (iproute2 print_tc_classid).
pub fn tc_classid(h: u32) -> String {
    let (maj, min) = (h >> 16, h & 0xFFFF);
    match (h, maj, min) {
        (TC_H_ROOT, _, _) => "root".into(),
        (0, _, _) => "none".into(),
        (_, 0, _) => format!(":{min:x}"),
        (_, _, 0) => format!("{maj:x}:"),
        _ => format!("{maj:x}:{min:x}"),
    }
}

impl Fifo {
    /// The qdisc as the Python sampler's `fifo_only` writes it: FIFO_FIELDS in their order,
    /// only those present.
    pub fn to_json(&self) -> String {
        let mut s = format!(
            "{{\"kind\":\"{}\",\"handle\":\"{}\"",
            self.kind,
            tc_handle(self.handle)
        );
        if self.parent != 0 && self.parent != TC_H_ROOT {
            s += &format!(",\"parent\":\"{}\"", tc_classid(self.parent));
        }
        if let Some(b) = self.bytes {
            s += &format!(",\"bytes\":{b}");
        }
        if let Some((backlog, qlen, drops)) = self.queue {
            s += &format!(",\"backlog\":{backlog},\"qlen\":{qlen},\"drops\":{drops}");
        }
        s + "}"
    }
}

/// The qdisc statistics of one namespace, from a socket opened once (in the namespace this
/// process is in).
pub struct QdiscReader {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl QdiscReader {
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2); the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new socket nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data; zeroed with its family set is a valid address.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let one: libc::c_int = 1;
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: valid fd, pointers to locals of the sizes given.
        unsafe {
            if libc::bind(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // the kernel filters the dump by ifindex where it can; we filter too
            libc::setsockopt(
                fd.as_raw_fd(),
                SOL_NETLINK,
                NETLINK_GET_STRICT_CHK,
                &one as *const _ as *const libc::c_void,
                4,
            );
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        let seq = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() as u32 & 0x7FFF_FFFF);
        Ok(QdiscReader {
            fd,
            seq,
            buf: vec![0; RECV_BUF],
        })
    }

    /// The qdiscs of `kind` on `ifindex`, in the kernel's order.
    pub fn dump(&mut self, ifindex: i32, kind: &str) -> io::Result<Vec<Fifo>> {
        self.seq = (self.seq + 1) & 0x7FFF_FFFF;
        let mut req = [0u8; NLMSGHDR_LEN + TCMSG_LEN];
        req[0..4].copy_from_slice(&((NLMSGHDR_LEN + TCMSG_LEN) as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&RTM_GETQDISC.to_ne_bytes());
        req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        req[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        req[NLMSGHDR_LEN + 4..NLMSGHDR_LEN + 8].copy_from_slice(&ifindex.to_ne_bytes());
        // SAFETY: valid fd and buffer.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                req.as_ptr() as *const libc::c_void,
                req.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: valid fd; buf is ours, of the length given.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(malformed(format!(
                    "netlink reply of {n} bytes truncated to {}",
                    self.buf.len()
                )));
            }
            if parse_reply(&self.buf[..n], self.seq, ifindex, kind, &mut out)? {
                return Ok(out);
            }
        }
    }
}

/// Adds the FIFOs of one recv's messages to `out`; true once the dump is done.
pub fn parse_reply(
    b: &[u8],
    seq: u32,
    ifindex: i32,
    kind: &str,
    out: &mut Vec<Fifo>,
) -> io::Result<bool> {
    let mut off = 0;
    while off + NLMSGHDR_LEN <= b.len() {
        let len = u32_at(b, off) as usize;
        if len < NLMSGHDR_LEN || off + len > b.len() {
            return Err(malformed(format!("malformed netlink message (len {len})")));
        }
        let (mtype, mseq) = (u16_at(b, off + 4), u32_at(b, off + 8));
        let body = &b[off + NLMSGHDR_LEN..off + len];
        off += (len + 3) & !3;
        if mseq != seq {
            continue; // left over from an earlier request
        }
        let err = || {
            if body.len() >= 4 {
                u32_at(body, 0) as i32
            } else {
                -libc::EIO
            }
        };
        match mtype {
            NLMSG_DONE => {
                if err() < 0 && body.len() >= 4 {
                    return Err(io::Error::from_raw_os_error(-err()));
                }
                return Ok(true);
            }
            NLMSG_ERROR if err() == 0 => {} // an ACK; a dump ends with NLMSG_DONE
            NLMSG_ERROR => return Err(io::Error::from_raw_os_error(-err())),
            NLMSG_OVERRUN => return Err(malformed("netlink overrun".into())),
            RTM_NEWQDISC => {
                if body.len() >= TCMSG_LEN && u32_at(body, 4) as i32 != ifindex {
                    continue; // a kernel without strict checking dumps every device's qdiscs
                }
                let (_, q) = parse_qdisc(body)?;
                if q.kind == kind {
                    out.push(q);
                }
            }
            _ => {}
        }
    }
    Ok(false)
}
