//! The UDP socket in batches: what tquic hands over in one `on_packets_send` leaves in as
//! few syscalls as the kernel allows, and what arrived is read in as few as it allows.
//!
//! Send, best first (each rung falls back to the next where the kernel refuses it):
//! - `gso`: consecutive packets to one destination with one size (the last may be shorter)
//!   are one message with a `UDP_SEGMENT` cmsg, at most [`MAX_GSO_SEGMENTS`] packets and
//!   [`MAX_GSO_BYTES`]; the kernel cuts it into datagrams of that size (on a device without
//!   segmentation offload, in software before the device), so the frames stay as tquic made
//!   them. The messages of a batch go in one `sendmmsg` (one `sendmsg` each with `-mmsg=false`).
//! - `sendmmsg`: one message per packet, a batch per call.
//! - `sendmsg`: one packet per call, as before batching.
//!
//! Receive: `recvmmsg` of up to [`MAX_BATCH`] datagrams per call (`recvmsg` of one with
//! `-mmsg=false`), with `UDP_GRO` where the kernel accepts it; a coalesced datagram is cut
//! back into packets at the `UDP_GRO` cmsg's segment size.
//!
//! A refusal is a syscall's error, never a guess: GSO is refused by `EIO`, `EINVAL` or
//! `ENOPROTOOPT` from a send with the cmsg, GRO by an error from its `setsockopt`, the
//! `mmsg` calls by `ENOSYS`. With `auto` the socket falls back and records why; with `on` a
//! refusal is an error ([`Refused`]).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

use mio::net::UdpSocket;
use serde::Serialize;
use tquic::PacketInfo;

/// Packets (send) or datagrams (receive) per syscall: tquic's send batch.
pub const MAX_BATCH: usize = 64;

/// Packets in one GSO message (the kernel's `UDP_MAX_SEGMENTS` is at least this).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Bytes of UDP payload in one GSO message: below the 16-bit length limit of IPv4 and IPv6
/// (65535 minus the IPv6 and UDP headers).
pub const MAX_GSO_BYTES: usize = 65_535 - 40 - 8;

/// Bytes per receive buffer: a whole GRO-coalesced datagram, or the largest UDP datagram.
const RECV_BUF_BYTES: usize = 65_535;

/// The Linux values of `SO_NO_CHECK` and `UDP_NO_CHECK6_RX` (not in the libc crate for
/// every target).
const SO_NO_CHECK: libc::c_int = 11;
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// Room for one `UDP_SEGMENT` / `UDP_GRO` cmsg (a u16 or int payload), 8-byte aligned.
const CMSG_WORDS: usize = 4;

/// `-gso` and `-gro`: use when the kernel accepts it, require it, or never.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    Auto,
    On,
    Off,
}

impl fmt::Display for Toggle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Toggle::Auto => "auto",
            Toggle::On => "on",
            Toggle::Off => "off",
        })
    }
}

/// Test only (`-test_refuse`, hidden): make the kernel refuse, so the fallbacks run.
/// `gso` really makes the kernel refuse GSO: the socket sends without UDP checksums
/// (`SO_NO_CHECK`, `UDP_NO_CHECK6_TX`), which the kernel's GSO path rejects with `EINVAL`.
/// `gro` and `mmsg` answer the `UDP_GRO` setsockopt with `ENOPROTOOPT` and the `sendmmsg` /
/// `recvmmsg` calls with `ENOSYS` without asking the kernel, as an old kernel would.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Refuse {
    pub gso: bool,
    pub gro: bool,
    pub mmsg: bool,
}

/// How the socket may batch (from the command line).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchOpts {
    pub gso: Toggle,
    pub gro: Toggle,
    /// sendmmsg / recvmmsg; false: one datagram per syscall.
    pub mmsg: bool,
    pub refuse: Refuse,
}

/// A batching feature was required (`on`) and the kernel refused it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("-{flag} on: the kernel refused {what}: {cause}")]
pub struct Refused {
    pub flag: &'static str,
    pub what: &'static str,
    pub cause: String,
}

/// Send rungs, best first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendMode {
    Gso,
    Sendmmsg,
    Sendmsg,
}

/// Receive rungs, best first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecvMode {
    Gro,
    Recvmmsg,
    Recvmsg,
}

impl fmt::Display for SendMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendMode::Gso => "gso",
            SendMode::Sendmmsg => "sendmmsg",
            SendMode::Sendmsg => "sendmsg",
        })
    }
}

impl fmt::Display for RecvMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvMode::Gro => "gro",
            RecvMode::Recvmmsg => "recvmmsg",
            RecvMode::Recvmsg => "recvmsg",
        })
    }
}

/// What the sending side did (JSON `batching.send`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SendReport {
    /// `-gso` as given.
    pub gso: Toggle,
    /// The best rung the flags allow, and the one in use at the end.
    pub requested: SendMode,
    pub mode: SendMode,
    /// Why `mode` is below `requested` (null if it is not).
    pub fallback_reason: Option<String>,
    /// Send syscalls (sendmmsg, sendmsg), failed ones and `EAGAIN`s included.
    pub syscalls: u64,
    /// QUIC packets the kernel accepted.
    pub packets: u64,
    /// Messages that carried more than one packet as GSO segments, and the most in one.
    pub gso_messages: u64,
    pub gso_max_segments: u64,
    /// Calls that found the socket buffer full (the rest of the batch stays with tquic).
    pub would_block: u64,
}

/// What the receiving side did (JSON `batching.recv`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RecvReport {
    /// `-gro` as given.
    pub gro: Toggle,
    pub requested: RecvMode,
    pub mode: RecvMode,
    pub fallback_reason: Option<String>,
    /// Receive syscalls (recvmmsg, recvmsg), the ones that found nothing included.
    pub syscalls: u64,
    /// Datagrams the kernel returned (a GRO-coalesced one counts once).
    pub datagrams: u64,
    /// QUIC packets handed to tquic (coalesced datagrams cut back into their packets).
    pub packets: u64,
    /// Waits of the event loop (epoll_wait), each a syscall too.
    pub polls: u64,
}

/// JSON `batching`: how this process's socket sent and received (since it was opened:
/// on the server, over all its connections).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BatchReport {
    pub send: SendReport,
    pub recv: RecvReport,
}

struct SendState {
    gso: bool,
    mmsg: bool,
    fallbacks: Vec<String>,
    syscalls: u64,
    packets: u64,
    gso_messages: u64,
    gso_max_segments: u64,
    would_block: u64,
    /// A required feature was refused: the event loop ends with this.
    fatal: Option<Refused>,
    /// The first send error other than a full buffer (the packet is dropped; QUIC recovers).
    error: Option<io::Error>,
    /// Per message: how many packets and their segment size (0: no GSO cmsg).
    groups: Vec<(usize, u16)>,
    scratch: SendScratch,
}

/// What one sendmmsg points at, kept between calls so a send allocates nothing.
#[derive(Default)]
struct SendScratch {
    iovs: Vec<libc::iovec>,
    names: Vec<(libc::sockaddr_storage, libc::socklen_t)>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
    hdrs: Vec<libc::mmsghdr>,
}

struct RecvState {
    gro: bool,
    mmsg: bool,
    fallbacks: Vec<String>,
    syscalls: u64,
    datagrams: u64,
    packets: u64,
    bufs: Vec<Vec<u8>>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

/// One UDP socket of the tool, with its batching state and counters.
pub struct UdpIo {
    socket: UdpSocket,
    /// Client: the socket is connected (sends carry no address; ICMP errors surface).
    connected: bool,
    opts: BatchOpts,
    send: RefCell<SendState>,
    recv: RefCell<RecvState>,
    polls: Cell<u64>,
}

/// The outcome of one receive call.
pub struct RecvBatch {
    /// Datagrams the kernel returned.
    pub datagrams: usize,
    /// The call filled every buffer: more may be waiting.
    pub full: bool,
}

fn is_gso_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

fn is_mmsg_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EOPNOTSUPP))
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    let len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: fd is an open socket; the value is a c_int on our stack.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `addr` as a sockaddr for msg_name.
fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_scope_id = a.scope_id();
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A received msg_name as an address (None for a family we do not speak).
fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET).
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 (family AF_INET6).
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Splits `pkts` into messages for one send call: with `gso`, runs of packets to the first
/// packet's destination with its size (the last of a run may be shorter), within the GSO
/// limits; otherwise one packet per message. At most [`MAX_BATCH`] messages.
/// Each entry: (packets, segment size; 0 = a plain datagram).
fn plan_messages(pkts: &[(Vec<u8>, PacketInfo)], gso: bool, out: &mut Vec<(usize, u16)>) {
    out.clear();
    let mut i = 0;
    while i < pkts.len() && out.len() < MAX_BATCH {
        let (first, info) = &pkts[i];
        let seg = first.len();
        let mut n = 1;
        if gso && seg > 0 && seg <= u16::MAX as usize {
            let mut bytes = seg;
            while i + n < pkts.len() && n < MAX_GSO_SEGMENTS {
                let (p, pi) = &pkts[i + n];
                if pi.dst != info.dst
                    || p.len() > seg
                    || p.is_empty()
                    || bytes + p.len() > MAX_GSO_BYTES
                {
                    break;
                }
                bytes += p.len();
                n += 1;
                if p.len() < seg {
                    break; // a shorter packet ends the run
                }
            }
        }
        out.push((n, if n > 1 { seg as u16 } else { 0 }));
        i += n;
    }
}

impl UdpIo {
    /// Wraps a bound (and, for a client, connected) socket; sets up GRO as `opts` ask.
    /// Fails only if a feature required with `on` is refused.
    pub fn new(socket: UdpSocket, connected: bool, opts: BatchOpts) -> Result<Self, Refused> {
        let fd = socket.as_raw_fd();
        let mut recv_fallbacks = Vec::new();
        if opts.refuse.gso {
            // The kernel's GSO path rejects sockets that send without checksums.
            let v6 = socket.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
            // IPv6 requires UDP checksums: a receiver drops a zero one unless it allows it,
            // so this socket allows it too (both ends of a test get the flag).
            let _ = if v6 {
                setsockopt_int(fd, libc::SOL_UDP, libc::UDP_NO_CHECK6_TX, 1)
                    .and_then(|()| setsockopt_int(fd, libc::SOL_UDP, UDP_NO_CHECK6_RX, 1))
            } else {
                setsockopt_int(fd, libc::SOL_SOCKET, SO_NO_CHECK, 1)
            };
        }
        let mut gro = false;
        if opts.gro != Toggle::Off {
            let res = if opts.refuse.gro {
                Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT))
            } else {
                setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1)
            };
            match res {
                Ok(()) => gro = true,
                Err(e) if opts.gro == Toggle::On => {
                    return Err(Refused {
                        flag: "gro",
                        what: "UDP GRO (setsockopt UDP_GRO)",
                        cause: e.to_string(),
                    })
                }
                Err(e) => {
                    recv_fallbacks.push(format!("UDP GRO refused by setsockopt UDP_GRO: {e}"))
                }
            }
        }
        let n = if opts.mmsg { MAX_BATCH } else { 1 };
        Ok(UdpIo {
            socket,
            connected,
            opts,
            send: RefCell::new(SendState {
                gso: opts.gso != Toggle::Off,
                mmsg: opts.mmsg,
                fallbacks: Vec::new(),
                syscalls: 0,
                packets: 0,
                gso_messages: 0,
                gso_max_segments: 0,
                would_block: 0,
                fatal: None,
                error: None,
                groups: Vec::with_capacity(MAX_BATCH),
                scratch: SendScratch::default(),
            }),
            recv: RefCell::new(RecvState {
                gro,
                mmsg: opts.mmsg,
                fallbacks: recv_fallbacks,
                syscalls: 0,
                datagrams: 0,
                packets: 0,
                bufs: (0..n).map(|_| vec![0u8; RECV_BUF_BYTES]).collect(),
                // SAFETY: all-zero is a valid sockaddr_storage.
                names: vec![unsafe { mem::zeroed() }; n],
                cmsgs: vec![[0u64; CMSG_WORDS]; n],
                iovs: Vec::with_capacity(n),
                hdrs: Vec::with_capacity(n),
            }),
            polls: Cell::new(0),
        })
    }

    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Counts one wait of the event loop.
    pub fn count_poll(&self) {
        self.polls.set(self.polls.get() + 1);
    }

    /// The first send error since the last call (the packet was dropped).
    pub fn take_send_error(&self) -> Option<io::Error> {
        self.send.borrow_mut().error.take()
    }

    /// A required feature the kernel refused during a send.
    pub fn fatal(&self) -> Option<Refused> {
        self.send.borrow().fatal.clone()
    }

    /// Sends `pkts` in order; returns how many were handled: sent, or dropped for an error
    /// (recorded, as a single packet's error always was). Stops at a full socket buffer
    /// (the rest stays with tquic, which retries), or when a required feature was refused.
    pub fn send_packets(&self, pkts: &[(Vec<u8>, PacketInfo)]) -> usize {
        let mut guard = self.send.borrow_mut();
        let st = &mut *guard;
        let mut done = 0;
        while done < pkts.len() && st.fatal.is_none() {
            let rest = &pkts[done..];
            let mut groups = mem::take(&mut st.groups);
            plan_messages(rest, st.gso, &mut groups);
            st.syscalls += 1;
            let res = if st.mmsg {
                self.sendmmsg(rest, &groups, &mut st.scratch)
            } else {
                self.sendmsg(rest, groups[0]).map(|()| 1)
            };
            match res {
                Ok(k) => {
                    for &(n, seg) in &groups[..k] {
                        if seg > 0 {
                            st.gso_messages += 1;
                            st.gso_max_segments = st.gso_max_segments.max(n as u64);
                        }
                        done += n;
                        st.packets += n as u64;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.would_block += 1;
                    st.groups = groups;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if groups[0].1 > 0 && is_gso_refusal(&e) => {
                    // The first message carried the GSO cmsg and the kernel refused it: send
                    // the same packets again without it.
                    if self.opts.gso == Toggle::On {
                        st.fatal = Some(Refused {
                            flag: "gso",
                            what: "UDP GSO (cmsg UDP_SEGMENT)",
                            cause: e.to_string(),
                        });
                    } else {
                        let why = format!(
                            "UDP GSO refused by the kernel: {e} (after {} GSO messages sent)",
                            st.gso_messages
                        );
                        glog!('W', "{why}; sending without GSO");
                        st.fallbacks.push(why);
                        st.gso = false;
                    }
                }
                Err(e) if st.mmsg && is_mmsg_refusal(&e) => {
                    let why = format!("sendmmsg refused by the kernel: {e}");
                    glog!('W', "{why}; one sendmsg per message");
                    st.fallbacks.push(why);
                    st.mmsg = false;
                }
                Err(e) => {
                    // Drop the first message's packets (QUIC recovers) and remember why.
                    st.error.get_or_insert(e);
                    done += groups[0].0;
                }
            }
            st.groups = groups;
        }
        done
    }

    /// One message per entry of `groups`, from the front of `pkts`, in one sendmmsg.
    fn sendmmsg(
        &self,
        pkts: &[(Vec<u8>, PacketInfo)],
        groups: &[(usize, u16)],
        x: &mut SendScratch,
    ) -> io::Result<usize> {
        if self.opts.refuse.mmsg {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        }
        let total: usize = groups.iter().map(|g| g.0).sum();
        // Fill every vector before taking pointers into it: no reallocation afterwards.
        x.iovs.clear();
        x.iovs
            .extend(pkts[..total].iter().map(|(buf, _)| libc::iovec {
                iov_base: buf.as_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            }));
        x.names.clear();
        x.cmsgs.clear();
        let mut at = 0;
        for &(n, _) in groups {
            x.names.push(to_sockaddr(pkts[at].1.dst));
            x.cmsgs.push([0u64; CMSG_WORDS]);
            at += n;
        }
        x.hdrs.clear();
        let mut at = 0;
        for (m, &(n, seg)) in groups.iter().enumerate() {
            // SAFETY: all-zero is a valid mmsghdr.
            let mut hdr: libc::mmsghdr = unsafe { mem::zeroed() };
            let h = &mut hdr.msg_hdr;
            if !self.connected {
                h.msg_name = &mut x.names[m].0 as *mut _ as *mut libc::c_void;
                h.msg_namelen = x.names[m].1;
            }
            h.msg_iov = x.iovs[at..].as_mut_ptr();
            h.msg_iovlen = n as _;
            if seg > 0 {
                // SAFETY: cmsgs[m] is CMSG_WORDS * 8 bytes, more than CMSG_SPACE(2), and
                // stays put until the call returns.
                unsafe { write_segment_cmsg(h, &mut x.cmsgs[m], seg) };
            }
            x.hdrs.push(hdr);
            at += n;
        }
        // SAFETY: every pointer in hdrs points into x's vectors or the packets, all alive
        // and unmoved until the call returns.
        let rc = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                x.hdrs.as_mut_ptr(),
                x.hdrs.len() as libc::c_uint,
                0,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }

    /// The first message of a plan, in one sendmsg.
    fn sendmsg(&self, pkts: &[(Vec<u8>, PacketInfo)], (n, seg): (usize, u16)) -> io::Result<()> {
        let mut iovs: [libc::iovec; MAX_GSO_SEGMENTS] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_GSO_SEGMENTS];
        for (iov, (buf, _)) in iovs.iter_mut().zip(&pkts[..n]) {
            iov.iov_base = buf.as_ptr() as *mut libc::c_void;
            iov.iov_len = buf.len();
        }
        let (mut name, namelen) = to_sockaddr(pkts[0].1.dst);
        let mut cmsg = [0u64; CMSG_WORDS];
        // SAFETY: all-zero is a valid msghdr.
        let mut h: libc::msghdr = unsafe { mem::zeroed() };
        if !self.connected {
            h.msg_name = &mut name as *mut _ as *mut libc::c_void;
            h.msg_namelen = namelen;
        }
        h.msg_iov = iovs.as_mut_ptr();
        h.msg_iovlen = n as _;
        if seg > 0 {
            // SAFETY: cmsg is CMSG_WORDS * 8 bytes, more than CMSG_SPACE(2).
            unsafe { write_segment_cmsg(&mut h, &mut cmsg, seg) };
        }
        // SAFETY: h points to iovs, name and cmsg on this stack frame and to the packets.
        let rc = unsafe { libc::sendmsg(self.socket.as_raw_fd(), &h, 0) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Receives one batch and hands each QUIC packet to `deliver` (coalesced datagrams cut
    /// at their segment size). `Err(WouldBlock)`: nothing was waiting.
    pub fn recv_batch(
        &self,
        mut deliver: impl FnMut(&mut [u8], SocketAddr),
    ) -> io::Result<RecvBatch> {
        let mut guard = self.recv.borrow_mut();
        let st = &mut *guard;
        let vlen = if st.mmsg { st.bufs.len() } else { 1 };
        st.iovs.clear();
        for b in st.bufs.iter_mut().take(vlen) {
            st.iovs.push(libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            });
        }
        st.hdrs.clear();
        for i in 0..vlen {
            // SAFETY: all-zero is a valid mmsghdr.
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            m.msg_hdr.msg_name = &mut st.names[i] as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_iov = &mut st.iovs[i];
            m.msg_hdr.msg_iovlen = 1;
            if st.gro {
                m.msg_hdr.msg_control = st.cmsgs[i].as_mut_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_controllen = (CMSG_WORDS * 8) as _;
            }
            st.hdrs.push(m);
        }
        let fd = self.socket.as_raw_fd();
        st.syscalls += 1;
        let got = if st.mmsg {
            let rc = if self.opts.refuse.mmsg {
                Err(io::Error::from_raw_os_error(libc::ENOSYS))
            } else {
                // SAFETY: hdrs point into bufs, names, cmsgs and iovs, owned by st and not
                // touched until the call returns.
                let rc = unsafe {
                    libc::recvmmsg(
                        fd,
                        st.hdrs.as_mut_ptr(),
                        vlen as libc::c_uint,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                    )
                };
                if rc < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(rc as usize)
                }
            };
            match rc {
                Err(e) if is_mmsg_refusal(&e) => {
                    let why = format!("recvmmsg refused by the kernel: {e}");
                    glog!('W', "{why}; one recvmsg per datagram");
                    st.fallbacks.push(why);
                    st.mmsg = false;
                    // Nothing was read: the caller calls again.
                    return Ok(RecvBatch {
                        datagrams: 0,
                        full: true,
                    });
                }
                other => other?,
            }
        } else {
            // SAFETY: as above, for the first header.
            let rc = unsafe { libc::recvmsg(fd, &mut st.hdrs[0].msg_hdr, libc::MSG_DONTWAIT) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            st.hdrs[0].msg_len = rc as libc::c_uint;
            1
        };
        for i in 0..got {
            let h = &st.hdrs[i];
            let len = (h.msg_len as usize).min(RECV_BUF_BYTES);
            let seg = if st.gro {
                gro_segment(&h.msg_hdr)
            } else {
                None
            };
            let Some(src) = from_sockaddr(&st.names[i]) else {
                continue;
            };
            st.datagrams += 1;
            let buf = &mut st.bufs[i][..len];
            match seg {
                Some(s) if s > 0 && s < len => {
                    for chunk in buf.chunks_mut(s) {
                        st.packets += 1;
                        deliver(chunk, src);
                    }
                }
                _ => {
                    st.packets += 1;
                    deliver(buf, src);
                }
            }
        }
        Ok(RecvBatch {
            datagrams: got,
            full: got == vlen,
        })
    }

    /// What the socket did, for the JSON report.
    pub fn report(&self) -> BatchReport {
        let s = self.send.borrow();
        let r = self.recv.borrow();
        let send_requested = if self.opts.gso != Toggle::Off {
            SendMode::Gso
        } else if self.opts.mmsg {
            SendMode::Sendmmsg
        } else {
            SendMode::Sendmsg
        };
        let send_mode = if s.gso {
            SendMode::Gso
        } else if s.mmsg {
            SendMode::Sendmmsg
        } else {
            SendMode::Sendmsg
        };
        let recv_requested = if self.opts.gro != Toggle::Off {
            RecvMode::Gro
        } else if self.opts.mmsg {
            RecvMode::Recvmmsg
        } else {
            RecvMode::Recvmsg
        };
        let recv_mode = if r.gro {
            RecvMode::Gro
        } else if r.mmsg {
            RecvMode::Recvmmsg
        } else {
            RecvMode::Recvmsg
        };
        let reason = |v: &[String]| (!v.is_empty()).then(|| v.join("; "));
        BatchReport {
            send: SendReport {
                gso: self.opts.gso,
                requested: send_requested,
                mode: send_mode,
                fallback_reason: reason(&s.fallbacks),
                syscalls: s.syscalls,
                packets: s.packets,
                gso_messages: s.gso_messages,
                gso_max_segments: s.gso_max_segments,
                would_block: s.would_block,
            },
            recv: RecvReport {
                gro: self.opts.gro,
                requested: recv_requested,
                mode: recv_mode,
                fallback_reason: reason(&r.fallbacks),
                syscalls: r.syscalls,
                datagrams: r.datagrams,
                packets: r.packets,
                polls: self.polls.get(),
            },
        }
    }
}

/// Writes a `UDP_SEGMENT` cmsg with `seg` into `space` and points `h` at it.
///
/// # Safety
/// `space` must stay alive and unmoved while `h` is used.
unsafe fn write_segment_cmsg(h: &mut libc::msghdr, space: &mut [u64; CMSG_WORDS], seg: u16) {
    h.msg_control = space.as_mut_ptr() as *mut libc::c_void;
    h.msg_controllen = libc::CMSG_SPACE(mem::size_of::<u16>() as u32) as _;
    let c = libc::CMSG_FIRSTHDR(h);
    (*c).cmsg_level = libc::SOL_UDP;
    (*c).cmsg_type = libc::UDP_SEGMENT;
    (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg);
}

/// The segment size of a GRO-coalesced datagram, from its `UDP_GRO` cmsg.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    if h.msg_control.is_null() || h.msg_controllen == 0 {
        return None;
    }
    // SAFETY: the kernel filled msg_control up to msg_controllen with well-formed cmsgs.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
                return usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn pkt(len: usize, port: u16) -> (Vec<u8>, PacketInfo) {
        let a: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        (
            vec![0u8; len],
            PacketInfo {
                src: a,
                dst: a,
                time: Instant::now(),
            },
        )
    }

    fn plan(pkts: &[(Vec<u8>, PacketInfo)], gso: bool) -> Vec<(usize, u16)> {
        let mut out = Vec::new();
        plan_messages(pkts, gso, &mut out);
        out
    }

    #[test]
    fn runs_of_one_size_and_destination_make_one_message() {
        let p: Vec<_> = [1200, 1200, 1200, 700, 1200, 1200]
            .iter()
            .map(|&l| pkt(l, 1))
            .collect();
        // A shorter packet ends its run; a lone packet goes without the cmsg.
        assert_eq!(plan(&p, true), [(4, 1200), (2, 1200)]);
        assert_eq!(plan(&p[..1], true), [(1, 0)]);
        assert_eq!(plan(&p, false), vec![(1, 0); 6]);
    }

    #[test]
    fn a_larger_packet_or_another_destination_ends_a_run() {
        let p = vec![
            pkt(500, 1),
            pkt(500, 1),
            pkt(1200, 1),
            pkt(1200, 2),
            pkt(1200, 2),
        ];
        assert_eq!(plan(&p, true), [(2, 500), (1, 0), (2, 1200)]);
    }

    #[test]
    fn runs_stay_within_the_gso_limits() {
        let p: Vec<_> = (0..64).map(|_| pkt(1200, 1)).collect();
        let g = plan(&p, true);
        let per = MAX_GSO_BYTES / 1200;
        assert_eq!(g[0], (per, 1200));
        assert_eq!(g.iter().map(|x| x.0).sum::<usize>(), 64);
        let small: Vec<_> = (0..100).map(|_| pkt(100, 1)).collect();
        let g = plan(&small, true);
        assert_eq!(g[0], (MAX_GSO_SEGMENTS, 100));
        assert_eq!(g[1], (100 - MAX_GSO_SEGMENTS, 100));
    }

    #[test]
    fn sockaddrs_round_trip() {
        for a in ["127.0.0.1:4433", "[::1]:80", "[fe80::1%2]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(from_sockaddr(&to_sockaddr(a).0), Some(a));
        }
    }
}
