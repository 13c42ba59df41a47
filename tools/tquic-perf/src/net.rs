//! What client and server share: tquic configuration, the UDP socket, the packet sender
//! and the event loop.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use tquic::{Config, Endpoint, PacketInfo, PacketSendHandler};

use crate::cli::{App, Congestion, Opts};
use crate::error::PerfError;
use crate::udp::UdpIo;

/// ALPN both ends announce.
pub const ALPN: &[u8] = b"tquic-perf";

/// Socket buffers: large enough for ~100 Mbit/s bursts without drops in the host.
const SOCKET_BUFFER_BYTES: libc::c_int = 8 * 1024 * 1024;

const SOCKET: Token = Token(0);

/// Live mode: unidirectional streams the peer may open at first.
const LIVE_MAX_STREAMS: u64 = 100_000;

pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, PerfError> {
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| PerfError::Resolve {
            host: host.to_string(),
            reason: e.to_string(),
        })?;
    addrs.next().ok_or_else(|| PerfError::Resolve {
        host: host.to_string(),
        reason: "no addresses".into(),
    })
}

/// The tquic configuration shared by both roles. The congestion control only matters on
/// the sender (the server); the window only on the receiver (the client); both are set
/// on both ends, as tperf does.
pub fn base_config(opts: &Opts) -> Result<Config, PerfError> {
    let q = |e: tquic::Error| PerfError::Quic(e.to_string());
    let mut c = Config::new().map_err(q)?;
    c.set_max_idle_timeout(opts.idle_timeout_ms);
    c.set_max_handshake_timeout(opts.idle_timeout_ms);
    c.set_congestion_control_algorithm(opts.congestion.to_tquic());
    if opts.congestion == Congestion::Copa {
        // tquic keeps two deltas (slow start and steady state, both 0.04 by default);
        // δ must reach both, or slow start runs with 0.04.
        c.set_copa_slow_start_delta(opts.latency_factor);
        c.set_copa_steady_delta(opts.latency_factor);
        // tquic's flag only picks the standing-RTT window: true = srtt, false = srtt/2.
        // srtt/2 is Copa's (and mvfst's) definition. See README.md.
        c.enable_copa_use_standing_rtt(false);
    }
    c.enable_pacing(opts.pacing);
    // Fixed 1200-byte packets: Copa counts its target in max_datagram_size units, which
    // DPLPMTUD would make differ from the packets actually sent.
    c.enable_dplpmtud(false);
    // Receive window: fixed at -window (tquic would auto-tune it up to 6 MB otherwise).
    c.set_initial_max_data(opts.window);
    c.set_initial_max_stream_data_bidi_local(opts.window);
    c.set_initial_max_stream_data_bidi_remote(opts.window);
    c.set_initial_max_stream_data_uni(opts.window);
    c.set_max_stream_window(opts.window);
    c.set_max_connection_window(opts.window);
    c.set_initial_max_streams_bidi(16);
    c.set_initial_max_streams_uni(match opts.app {
        App::Bulk => 16,
        // Live: a stream per frame and ping; the credit is also renewed as streams close.
        App::Live => LIVE_MAX_STREAMS,
    });
    Ok(c)
}

/// A non-blocking UDP socket with large buffers.
pub fn udp_socket(bind: SocketAddr) -> io::Result<UdpSocket> {
    let std_sock = std::net::UdpSocket::bind(bind)?;
    std_sock.set_nonblocking(true)?;
    let fd = std_sock.as_raw_fd();
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        // SAFETY: fd is an open socket; the option value is a c_int we own.
        unsafe {
            let v = SOCKET_BUFFER_BYTES;
            let p = &v as *const libc::c_int as *const libc::c_void;
            let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // The FORCE variant needs CAP_NET_ADMIN; fall back to the capped one.
            if libc::setsockopt(fd, libc::SOL_SOCKET, force, p, len) != 0 {
                libc::setsockopt(fd, libc::SOL_SOCKET, plain, p, len);
            }
        }
    }
    Ok(UdpSocket::from_std(std_sock))
}

/// Hands tquic's batches to the socket ([`UdpIo::send_packets`]): GSO or sendmmsg where
/// the kernel allows. A full socket buffer stops the batch (tquic keeps the rest queued and
/// retries); other errors drop the packet and are recorded for the event loop.
pub struct SocketSender {
    pub io: Rc<UdpIo>,
}

impl PacketSendHandler for SocketSender {
    fn on_packets_send(&self, pkts: &[(Vec<u8>, PacketInfo)]) -> tquic::Result<usize> {
        Ok(self.io.send_packets(pkts))
    }
}

/// What the application wants after each turn of the event loop.
pub enum Step {
    /// Keep going; wake up no later than this (None: only for network/tquic events).
    Continue(Option<Instant>),
    /// Leave the loop; `flush`: let tquic send what the app queued (e.g. CONNECTION_CLOSE)
    /// first. Must be false after `Endpoint::close(true)`: tquic 1.6 then keeps the removed
    /// connections in its tickable queue and `process_connections` never returns.
    Stop { flush: bool },
}

/// Drives an endpoint: poll the socket, feed datagrams to tquic, run its timers, and call
/// `app` after every turn. Receives everything queued before processing (in batches: see
/// crate::udp), so a receiver keeps up with the link.
pub fn event_loop(
    endpoint: &mut Endpoint,
    io: &Rc<UdpIo>,
    app: impl FnMut(&mut Endpoint, Option<io::Error>) -> anyhow::Result<Step>,
) -> anyhow::Result<()> {
    event_loop_with(endpoint, io, |_| {}, app)
}

/// [`event_loop`], and `after_datagram` after tquic has processed each received datagram
/// (its ACK frames included); it must be cheap.
pub fn event_loop_with(
    endpoint: &mut Endpoint,
    io: &Rc<UdpIo>,
    mut after_datagram: impl FnMut(&mut Endpoint),
    mut app: impl FnMut(&mut Endpoint, Option<io::Error>) -> anyhow::Result<Step>,
) -> anyhow::Result<()> {
    let mut poll = Poll::new()?;
    // mio registers by fd; the Rc keeps the socket alive for the loop's lifetime.
    let mut source = mio::unix::SourceFd(&io.socket().as_raw_fd());
    poll.registry()
        .register(&mut source, SOCKET, Interest::READABLE)?;
    let mut events = Events::with_capacity(64);
    let local = io.local_addr()?;
    let mut wake_at: Option<Instant> = None;
    loop {
        endpoint
            .process_connections()
            .map_err(|e| PerfError::Quic(e.to_string()))?;
        if let Some(refused) = io.fatal() {
            return Err(refused.into());
        }

        let now = Instant::now();
        let mut timeout = endpoint.timeout();
        if let Some(w) = wake_at {
            let d = w.saturating_duration_since(now);
            timeout = Some(timeout.map_or(d, |t| t.min(d)));
        }
        // Wake at least every 100 ms so signals and deadlines are noticed.
        let timeout = Some(timeout.map_or(Duration::from_millis(100), |t| {
            t.min(Duration::from_millis(100))
        }));
        io.count_poll();
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e.into());
            }
        }

        let mut recv_error = None;
        loop {
            let res = io.recv_batch(|buf, src| {
                let info = PacketInfo {
                    src,
                    dst: local,
                    time: Instant::now(),
                };
                // A malformed or stray datagram is tquic's to drop; keep serving.
                let _ = endpoint.recv(buf, &info);
                after_datagram(endpoint);
            });
            match res {
                // A batch that did not fill the buffers emptied the socket: any datagram
                // arriving later wakes the (edge-triggered) poll again.
                Ok(batch) if batch.full => continue,
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    recv_error = Some(e);
                    break;
                }
            }
        }
        endpoint.on_timeout(Instant::now());

        let send_error = io.take_send_error();
        match app(endpoint, recv_error.or(send_error))? {
            Step::Continue(w) => wake_at = w,
            Step::Stop { flush } => {
                if flush {
                    let _ = endpoint.process_connections();
                }
                return Ok(());
            }
        }
    }
}

/// Path statistics of a connection's active path, if it has one. Allocates nothing (tquic's
/// `paths_iter` would), so it can run after every datagram.
pub fn path_stats(conn: &mut tquic::Connection) -> Option<&tquic::PathStats> {
    let (local, remote) = {
        let p = conn.get_active_path().ok()?;
        (p.local_addr(), p.remote_addr())
    };
    conn.get_path_stats(local, remote).ok()
}
