//! Thin safe wrappers over the Linux calls delayline needs: interface lookups and flags
//! (ioctl), legacy ethtool offload queries, and AF_PACKET sockets.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::error::DelaylineError;
use crate::timing;

const ETH_P_ALL: u16 = 0x0003;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// Most frames one `sendmmsg` call carries.
pub const SEND_BATCH: usize = 64;

/// Legacy ethtool "get" commands that answer a single on/off value.
pub const ETHTOOL_GTXCSUM: u32 = 0x16;
pub const ETHTOOL_GTSO: u32 = 0x1e;
pub const ETHTOOL_GGSO: u32 = 0x23;
pub const ETHTOOL_GGRO: u32 = 0x2b;

#[repr(C)]
#[derive(Clone, Copy)]
union IfrData {
    flags: libc::c_short,
    mtu: libc::c_int,
    data: *mut libc::c_void,
    _pad: [u8; 24],
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    u: IfrData,
}

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

fn ifreq(name: &str) -> IfReq {
    // SAFETY: all-zero is a valid IfReq.
    let mut r: IfReq = unsafe { zeroed() };
    for (d, s) in r.name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = s as libc::c_char;
    }
    r
}

fn io_err(what: &'static str, iface: &str, source: io::Error) -> DelaylineError {
    DelaylineError::Io {
        what,
        iface: iface.to_string(),
        source,
    }
}

/// An AF_INET datagram socket used only as a handle for interface ioctls.
fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Names of the interfaces in this network namespace.
pub fn interface_names() -> Vec<String> {
    let mut names = Vec::new();
    // SAFETY: if_nameindex returns a heap array terminated by a zero entry, freed below.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return names;
        }
        let mut p = list;
        while (*p).if_index != 0 {
            names.push(
                std::ffi::CStr::from_ptr((*p).if_name)
                    .to_string_lossy()
                    .into_owned(),
            );
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    names
}

/// The interface index of `name`, or an error listing the interfaces that do exist.
pub fn ifindex(name: &str) -> Result<i32, DelaylineError> {
    let c = CString::new(name).map_err(|_| DelaylineError::NoSuchInterface {
        name: name.to_string(),
        available: "(name contains NUL)".to_string(),
    })?;
    // SAFETY: valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let mut names = interface_names();
        names.sort();
        return Err(DelaylineError::NoSuchInterface {
            name: name.to_string(),
            available: if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
        });
    }
    Ok(idx as i32)
}

/// Interface flags (IFF_*) and MTU.
pub fn flags_and_mtu(name: &str) -> Result<(libc::c_int, u32), DelaylineError> {
    let s = ctl_socket().map_err(|e| io_err("opening an ioctl socket", name, e))?;
    let mut r = ifreq(name);
    // SAFETY: SIOCGIFFLAGS fills r.u.flags for a valid ifreq.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut r) } < 0 {
        return Err(io_err("reading flags", name, io::Error::last_os_error()));
    }
    // SAFETY: the kernel wrote the flags member.
    let flags = unsafe { r.u.flags } as libc::c_int & 0xffff;
    let mut r = ifreq(name);
    // SAFETY: SIOCGIFMTU fills r.u.mtu.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU as _, &mut r) } < 0 {
        return Err(io_err("reading MTU", name, io::Error::last_os_error()));
    }
    // SAFETY: the kernel wrote the mtu member.
    let mtu = unsafe { r.u.mtu };
    Ok((flags, mtu.max(0) as u32))
}

/// One legacy ethtool on/off query; `Ok(None)` if the driver does not support it.
pub fn ethtool_get(name: &str, cmd: u32) -> Result<Option<bool>, DelaylineError> {
    let s = ctl_socket().map_err(|e| io_err("opening an ioctl socket", name, e))?;
    let mut v = EthtoolValue { cmd, data: 0 };
    let mut r = ifreq(name);
    r.u.data = (&mut v as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL with a valid ethtool_value the kernel reads and writes.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCETHTOOL as _, &mut r) } < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(None),
            _ => Err(io_err("querying offloads (SIOCETHTOOL)", name, e)),
        };
    }
    Ok(Some(v.data != 0))
}

/// When a frame arrived, on CLOCK_MONOTONIC (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxTime {
    /// The receive time to schedule by: the kernel's receive timestamp (SO_TIMESTAMPNS)
    /// converted to CLOCK_MONOTONIC, or `read_ns` if there was none (or it was not
    /// plausible).
    pub rx_ns: u64,
    /// CLOCK_MONOTONIC right after recvmmsg returned (the user-space time).
    pub read_ns: u64,
    /// `rx_ns` came from the kernel timestamp.
    pub kernel: bool,
}

impl RxTime {
    /// How long the frame waited in the kernel before delayline read it (0 for a
    /// user-space timestamp).
    pub fn age_ns(&self) -> u64 {
        self.read_ns.saturating_sub(self.rx_ns)
    }
}

/// What the control messages of one received frame say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Aux {
    /// The kernel stripped a VLAN tag into auxdata: (tpid, tci).
    vlan: Option<(u16, u16)>,
    /// Checksum offload still pending (TP_STATUS_CSUMNOTREADY).
    csum_not_ready: bool,
    /// The kernel's receive timestamp (CLOCK_REALTIME ns), if it stamped the frame.
    kernel_rt_ns: Option<i64>,
}

/// Walks the control messages (PACKET_AUXDATA, SCM_TIMESTAMPNS) the kernel wrote for one
/// received frame.
fn parse_aux(msg: &libc::msghdr) -> Aux {
    let mut aux = Aux::default();
    // SAFETY: walking the control messages the kernel wrote into msg's control buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                let a: libc::tpacket_auxdata = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                if a.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                    let tpid = if a.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                        a.tp_vlan_tpid
                    } else {
                        crate::frame::ETH_P_8021Q
                    };
                    aux.vlan = Some((tpid, a.tp_vlan_tci));
                }
                aux.csum_not_ready = a.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0;
            } else if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(size_of::<libc::timespec>() as u32) as usize
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                // A zero timestamp means the kernel did not stamp this frame.
                if ts.tv_sec != 0 || ts.tv_nsec != 0 {
                    aux.kernel_rt_ns = Some(timing::timespec_ns(&ts));
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    aux
}

/// Control buffer of one received frame: room for PACKET_AUXDATA (40 bytes with header)
/// and SCM_TIMESTAMPNS (32) with plenty to spare; u64 elements keep it aligned.
type Ctrl = [u64; 32];

/// One frame read by [`PacketSocket::recv_batch`]: where its bytes are in the batch's
/// buffers, and what the kernel said of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFrame {
    /// Index of the slot holding the bytes ([`RxBatch::slot`]).
    pub slot: usize,
    /// The frame's real length (may exceed the slot: then it was truncated).
    pub len: usize,
    pub vlan: Option<(u16, u16)>,
    pub csum_not_ready: bool,
    pub time: RxTime,
}

/// Buffers for reading up to `slots` frames with one `recvmmsg`.
pub struct RxBatch {
    slot_bytes: usize,
    data: Vec<u8>,
    ctrl: Vec<Ctrl>,
    addrs: Vec<libc::sockaddr_ll>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxBatch")
            .field("slots", &self.hdrs.len())
            .field("slot_bytes", &self.slot_bytes)
            .finish()
    }
}

impl RxBatch {
    /// Room for `slots` frames of up to `slot_bytes` each.
    pub fn new(slots: usize, slot_bytes: usize) -> Self {
        let slots = slots.max(1);
        // SAFETY: all-zero is a valid sockaddr_ll, iovec and mmsghdr.
        let (addr, iov, hdr) = unsafe { (zeroed(), zeroed(), zeroed()) };
        RxBatch {
            slot_bytes,
            data: vec![0; slots * slot_bytes],
            ctrl: vec![[0; 32]; slots],
            addrs: vec![addr; slots],
            iovs: vec![iov; slots],
            hdrs: vec![hdr; slots],
        }
    }

    /// The bytes read into slot `i` (at most `len` of them, the slot's size at most).
    pub fn slot(&self, i: usize, len: usize) -> &[u8] {
        let start = i * self.slot_bytes;
        &self.data[start..start + len.min(self.slot_bytes)]
    }

    /// Points every header at its own buffers (they do not move between calls, but the
    /// kernel rewrites the lengths).
    fn arm(&mut self) {
        for i in 0..self.hdrs.len() {
            self.iovs[i] = libc::iovec {
                iov_base: self.data[i * self.slot_bytes..].as_mut_ptr().cast(),
                iov_len: self.slot_bytes,
            };
            let h = &mut self.hdrs[i];
            h.msg_len = 0;
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.ctrl[i].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = size_of::<Ctrl>() as _;
            h.msg_hdr.msg_flags = 0;
        }
    }
}

/// An AF_PACKET raw socket bound to one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    iface: String,
    /// SO_TIMESTAMPNS is on: frames carry the kernel's receive time.
    timestamps: bool,
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: val points to a T of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn packet_socket(iface: &str, ifindex: i32, protocol: u16) -> Result<OwnedFd, DelaylineError> {
    // Protocol 0 at socket(): nothing is received until bind() names the interface, so no
    // frame of another interface slips in between.
    // SAFETY: plain socket(2) call; the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => DelaylineError::NotPermitted { source: e },
            _ => io_err("opening an AF_PACKET socket", iface, e),
        });
    }
    // SAFETY: fd is a fresh, valid descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero is a valid sockaddr_ll.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: sll is a valid sockaddr_ll of the length given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io_err(
            "binding the AF_PACKET socket",
            iface,
            io::Error::last_os_error(),
        ));
    }
    Ok(fd)
}

impl PacketSocket {
    /// A receiving socket: all protocols, promiscuous, our own transmissions ignored,
    /// a large receive buffer, VLAN/checksum auxdata, kernel receive timestamps
    /// (SO_TIMESTAMPNS, if the kernel accepts it), and a receive timeout so the thread
    /// can notice a stop request.
    pub fn open_rx(
        iface: &str,
        ifindex: i32,
        rcvbuf_bytes: i32,
        timeout: Duration,
    ) -> Result<Self, DelaylineError> {
        let fd = packet_socket(iface, ifindex, ETH_P_ALL)?;
        let one: libc::c_int = 1;
        // Ask the kernel not to deliver our own transmissions (Linux >= 4.20); recv()
        // also checks PACKET_OUTGOING, so older kernels are fine too.
        let _ = setsockopt(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, &one)
            .map_err(|e| io_err("enabling PACKET_AUXDATA", iface, e))?;
        // The kernel's receive time (CLOCK_REALTIME) with every frame; without it the
        // frames are stamped in user space after recvmmsg (per frame, as a fallback).
        let timestamps = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one).is_ok();
        // SO_RCVBUFFORCE passes rmem_max (root); fall back to SO_RCVBUF.
        if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf_bytes).is_err() {
            setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf_bytes)
                .map_err(|e| io_err("setting SO_RCVBUF", iface, e))?;
        }
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
            .map_err(|e| io_err("setting SO_RCVTIMEO", iface, e))?;
        let mr = libc::packet_mreq {
            mr_ifindex: ifindex,
            mr_type: libc::PACKET_MR_PROMISC as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        // Promiscuous mode lasts as long as this socket.
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mr)
            .map_err(|e| io_err("enabling promiscuous mode", iface, e))?;
        Ok(PacketSocket {
            fd,
            iface: iface.to_string(),
            timestamps,
        })
    }

    /// A sending socket bound to the interface with protocol 0, so it receives nothing.
    pub fn open_tx(iface: &str, ifindex: i32) -> Result<Self, DelaylineError> {
        let fd = packet_socket(iface, ifindex, 0)?;
        Ok(PacketSocket {
            fd,
            iface: iface.to_string(),
            timestamps: false,
        })
    }

    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The kernel accepted SO_TIMESTAMPNS on this socket.
    pub fn kernel_timestamps(&self) -> bool {
        self.timestamps
    }

    /// Frames the kernel dropped on this socket since the last call (receive buffer
    /// full), from PACKET_STATISTICS, which resets on read.
    pub fn take_kernel_drops(&self) -> io::Result<u64> {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: st and len are valid for the kernel to fill.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.tp_drops as u64)
    }

    /// Makes every call on this socket non-blocking (the batched engine reads what is
    /// there and never waits in a receive call).
    pub fn set_nonblocking(&self) -> io::Result<()> {
        // SAFETY: fcntl on our own valid descriptor.
        unsafe {
            let fl = libc::fcntl(self.fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(self.fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The raw descriptor, for `ppoll`.
    pub fn raw_fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// Reads every frame waiting, up to the batch's size, with one `recvmmsg` (the socket
    /// must be non-blocking): appends them to `out` with the kernel's receive time of each
    /// (on CLOCK_MONOTONIC, timing::kernel_rx_mono_ns) and returns how many datagrams the
    /// call returned (our own transmissions included, which are skipped). 0 = nothing waiting.
    pub fn recv_batch(&self, b: &mut RxBatch, out: &mut Vec<BatchFrame>) -> io::Result<usize> {
        b.arm();
        let n = loop {
            // SAFETY: every header points at live buffers of the sizes given (arm); MSG_TRUNC
            // makes each msg_len the real frame length.
            let n = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    b.hdrs.as_mut_ptr(),
                    b.hdrs.len() as libc::c_uint,
                    libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(0),
                _ => return Err(e),
            }
        };
        // Both clocks at once after the call, realtime first (timing::kernel_rx_mono_ns).
        let real_now = timing::realtime_ns();
        let mono_now = timing::now_ns();
        for i in 0..n {
            if b.addrs[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let Aux {
                vlan,
                csum_not_ready,
                kernel_rt_ns,
            } = parse_aux(&b.hdrs[i].msg_hdr);
            let kernel_mono = kernel_rt_ns.and_then(|k| {
                timing::kernel_rx_mono_ns(k, real_now, mono_now, timing::MAX_RX_AGE_NS)
            });
            out.push(BatchFrame {
                slot: i,
                len: b.hdrs[i].msg_len as usize,
                vlan,
                csum_not_ready,
                time: RxTime {
                    rx_ns: kernel_mono.unwrap_or(mono_now),
                    read_ns: mono_now,
                    kernel: kernel_mono.is_some(),
                },
            });
        }
        Ok(n)
    }

    /// Sends `frames` in order out of the bound interface with as few `sendmmsg` calls as
    /// the kernel allows (at most [`SEND_BATCH`] frames a call). A frame the kernel
    /// refuses is reported through `on_error` and skipped; the rest are still sent.
    /// Returns (frames sent, sendmmsg calls made).
    pub fn send_batch<F>(&self, frames: &[&[u8]], mut on_error: F) -> (usize, usize)
    where
        F: FnMut(usize, io::Error),
    {
        let (mut sent, mut calls, mut i) = (0usize, 0usize, 0usize);
        // SAFETY: all-zero is a valid iovec / mmsghdr.
        let mut iovs: [libc::iovec; SEND_BATCH] = unsafe { zeroed() };
        let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { zeroed() };
        while i < frames.len() {
            let n = (frames.len() - i).min(SEND_BATCH);
            for k in 0..n {
                let f = frames[i + k];
                iovs[k] = libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                };
                // SAFETY: all-zero is a valid msghdr.
                hdrs[k].msg_hdr = unsafe { zeroed() };
                hdrs[k].msg_hdr.msg_iov = &mut iovs[k];
                hdrs[k].msg_hdr.msg_iovlen = 1;
                hdrs[k].msg_len = 0;
            }
            calls += 1;
            // SAFETY: n headers, each pointing at one live frame (read only by the kernel).
            let rc = unsafe {
                libc::sendmmsg(self.fd.as_raw_fd(), hdrs.as_mut_ptr(), n as libc::c_uint, 0)
            };
            if rc > 0 {
                sent += rc as usize;
                i += rc as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // The first frame of this call was refused: report it, go on with the next.
            on_error(i, e);
            i += 1;
        }
        (sent, calls)
    }
}
