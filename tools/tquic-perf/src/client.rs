//! The client: connects, reads the server's stream as fast as it arrives, and after
//! `-duration` seconds from the first stream byte closes and prints tperf's summary.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tquic::{Connection, Endpoint, TlsConfig, TransportHandler};

use crate::cli::{App, Opts};
use crate::error::PerfError;
use crate::live_rx::LiveReceiver;
use crate::net::{self, SocketSender, Step};
use crate::report::{self, LiveReport, SenderStats, Summary};
use crate::udp::UdpIo;

/// Read buffer per `stream_read` call.
const READ_CHUNK_BYTES: usize = 256 * 1024;

/// Why the connection ended, as seen by the client.
#[derive(Debug, Clone)]
enum Closed {
    IdleTimeout,
    HandshakeTimeout,
    Other(String),
}

#[derive(Default)]
struct Progress {
    /// When the first stream byte arrived (monotonic and wall clock).
    first_byte: Option<(Instant, SystemTime)>,
    total_bytes: u64,
    established: bool,
    closed: Option<Closed>,
}

struct ClientHandler {
    progress: Rc<RefCell<Progress>>,
    buf: Vec<u8>,
    /// `-app live`: the receiving end of the broadcast.
    live: Option<Rc<RefCell<LiveReceiver>>>,
}

impl ClientHandler {
    fn drain(&mut self, conn: &mut Connection, stream_id: u64) {
        let mut p = self.progress.borrow_mut();
        if let Some(live) = &self.live {
            let n = live
                .borrow_mut()
                .on_readable(conn, stream_id, &mut self.buf);
            if n > 0 && p.first_byte.is_none() {
                p.first_byte = Some((Instant::now(), SystemTime::now()));
            }
            p.total_bytes += n;
            return;
        }
        while let Ok((n, fin)) = conn.stream_read(stream_id, &mut self.buf) {
            if n > 0 && p.first_byte.is_none() {
                p.first_byte = Some((Instant::now(), SystemTime::now()));
            }
            p.total_bytes += n as u64;
            if fin || n == 0 {
                break;
            }
        }
    }
}

impl TransportHandler for ClientHandler {
    fn on_conn_created(&mut self, _conn: &mut Connection) {}

    fn on_conn_established(&mut self, conn: &mut Connection) {
        self.progress.borrow_mut().established = true;
        if let Some(live) = &self.live {
            live.borrow_mut().open(conn);
        }
        glog!('I', "connected to {}", peer_of(conn));
    }

    fn on_conn_closed(&mut self, conn: &mut Connection) {
        let why = if conn.is_handshake_timeout() {
            Closed::HandshakeTimeout
        } else if conn.is_idle_timeout() {
            Closed::IdleTimeout
        } else if let Some(e) = conn.peer_error() {
            Closed::Other(format!(
                "peer error code {} '{}'",
                e.error_code,
                String::from_utf8_lossy(&e.reason)
            ))
        } else if let Some(e) = conn.local_error() {
            Closed::Other(format!(
                "local error code {} '{}'",
                e.error_code,
                String::from_utf8_lossy(&e.reason)
            ))
        } else {
            Closed::Other("closed".into())
        };
        self.progress.borrow_mut().closed = Some(why);
    }

    fn on_stream_created(&mut self, _conn: &mut Connection, _stream_id: u64) {}

    fn on_stream_readable(&mut self, conn: &mut Connection, stream_id: u64) {
        self.drain(conn, stream_id);
    }

    fn on_stream_writable(&mut self, conn: &mut Connection, stream_id: u64) {
        let _ = conn.stream_want_write(stream_id, false);
        if let Some(live) = &self.live {
            live.borrow_mut().flush(conn);
        }
    }

    fn on_stream_closed(&mut self, _conn: &mut Connection, _stream_id: u64) {}

    fn on_new_token(&mut self, _conn: &mut Connection, _token: Vec<u8>) {}
}

fn peer_of(conn: &Connection) -> String {
    conn.paths_iter()
        .next()
        .map(|t| t.remote.to_string())
        .unwrap_or_else(|| "?".into())
}

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Interval reporting: one line per `-interval_ms`, the last one at close, so the
/// interval byte counts add up to the summary's total.
struct Intervals {
    period: Option<Duration>,
    next: Option<Instant>,
    last_total: u64,
}

impl Intervals {
    fn emit(&mut self, now: Instant, first: (Instant, SystemTime), total: u64) {
        let elapsed = now.saturating_duration_since(first.0);
        let t_unix = unix_s(first.1) + elapsed.as_secs_f64();
        glog!(
            'I',
            "{}",
            report::interval_line(
                t_unix,
                elapsed.as_secs_f64(),
                total - self.last_total,
                total
            )
        );
        self.last_total = total;
    }

    fn tick(&mut self, now: Instant, first: (Instant, SystemTime), total: u64) {
        let Some(period) = self.period else { return };
        let next = *self.next.get_or_insert(first.0 + period);
        if now >= next {
            self.emit(now, first, total);
            let mut n = next;
            while n <= now {
                n += period;
            }
            self.next = Some(n);
        }
    }
}

pub fn run(opts: &Opts) -> anyhow::Result<()> {
    let server = net::resolve(&opts.host, opts.port)?;
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let socket = net::udp_socket(bind).context("cannot open a UDP socket")?;
    socket
        .connect(server)
        .map_err(|cause| PerfError::Unreachable {
            addr: server,
            cause,
        })?;
    let local = socket.local_addr()?;
    let io = Rc::new(UdpIo::new(socket, true, opts.batch_opts()).map_err(PerfError::from)?);

    let mut config = net::base_config(opts)?;
    let mut tls = TlsConfig::new_client_config(vec![net::ALPN.to_vec()], false)
        .map_err(|e| PerfError::Tls(e.to_string()))?;
    // Self-signed server certificates, as with tperf: no verification.
    tls.set_verify(false);
    config.set_tls_config(tls);

    let progress = Rc::new(RefCell::new(Progress::default()));
    let live = (opts.app == App::Live).then(|| Rc::new(RefCell::new(LiveReceiver::default())));
    let handler = ClientHandler {
        progress: progress.clone(),
        buf: vec![0u8; READ_CHUNK_BYTES],
        live: live.clone(),
    };
    let sender = Rc::new(SocketSender { io: io.clone() });
    let mut endpoint = Endpoint::new(Box::new(config), false, Box::new(handler), sender.clone());
    let conn_idx = endpoint
        .connect(local, server, Some("tquic-perf"), None, None, None)
        .map_err(|e| PerfError::Quic(format!("connect to {server}: {e}")))?;
    glog!(
        'I',
        "client connecting to {server} duration_s={} window={} interval_ms={}",
        opts.duration,
        opts.window,
        opts.interval_ms
    );

    let duration = Duration::from_secs_f64(opts.duration);
    let mut intervals = Intervals {
        period: (opts.interval_ms > 0).then(|| Duration::from_millis(opts.interval_ms)),
        next: None,
        last_total: 0,
    };
    let mut outcome: Option<anyhow::Result<(u64, f64, SystemTime)>> = None;

    net::event_loop(&mut endpoint, &io, |ep, io_error| {
        let now = Instant::now();
        let p = progress.borrow();
        if let Some(e) = io_error {
            // ICMP errors on the connected socket: refused, no route, ...
            if p.first_byte.is_none() {
                outcome = Some(Err(PerfError::Unreachable {
                    addr: server,
                    cause: e,
                }
                .into()));
                return Ok(Step::Stop { flush: true });
            }
            glog!('W', "socket error during transfer: {e}");
        }
        if let Some(why) = &p.closed {
            let elapsed_s = p
                .first_byte
                .map_or(0.0, |f| now.duration_since(f.0).as_secs_f64());
            let err: PerfError = match why {
                Closed::HandshakeTimeout => PerfError::HandshakeTimeout {
                    addr: server,
                    timeout_ms: opts.idle_timeout_ms,
                },
                Closed::IdleTimeout if !p.established => PerfError::HandshakeTimeout {
                    addr: server,
                    timeout_ms: opts.idle_timeout_ms,
                },
                Closed::IdleTimeout => PerfError::PeerVanished {
                    addr: server,
                    timeout_ms: opts.idle_timeout_ms,
                    bytes: p.total_bytes,
                    elapsed_s,
                    duration_s: opts.duration,
                },
                Closed::Other(reason) => PerfError::ClosedEarly {
                    addr: server,
                    bytes: p.total_bytes,
                    duration_s: opts.duration,
                    reason: reason.clone(),
                },
            };
            outcome = Some(Err(err.into()));
            return Ok(Step::Stop { flush: true });
        }
        let Some(first) = p.first_byte else {
            return Ok(Step::Continue(None));
        };
        let end = first.0 + duration;
        if now >= end {
            let total = p.total_bytes;
            let elapsed = now.duration_since(first.0);
            if intervals.period.is_some() {
                intervals.emit(now, first, total);
            }
            drop(p);
            if let Some(conn) = ep.conn_get_mut(conn_idx) {
                let _ = conn.close(true, 0, b"done");
            }
            outcome = Some(Ok((total, elapsed.as_secs_f64(), first.1)));
            return Ok(Step::Stop { flush: true });
        }
        intervals.tick(now, first, p.total_bytes);
        let wake = intervals.next.map_or(end, |n| n.min(end));
        Ok(Step::Continue(Some(wake)))
    })?;

    let batching = io.report();
    glog!('I', "{}", report::batching_line(&batching));
    let (bytes, duration_s, start) = outcome.context("event loop ended without an outcome")??;
    let [l1, l2] = report::summary_lines(bytes, duration_s);
    glog!('I', "{l1}");
    glog!('I', "{l2}");
    if let Some(path) = &opts.json {
        let summary = Summary {
            format_version: report::JSON_FORMAT_VERSION,
            tool: "tquic-perf",
            tool_version: env!("CARGO_PKG_VERSION"),
            role: "client",
            peer: server.to_string(),
            bytes,
            duration_s,
            goodput_kbps: report::goodput_kbps(bytes, duration_s),
            throughput_mibps: report::throughput_mibps(bytes, duration_s),
            start_unix: unix_s(start),
            cc: opts.reported_cc().map(|c| c.name().to_string()),
            latency_factor: opts.reported_latency_factor(),
            window: opts.window,
            pacing: opts.pacing,
            sender: SenderStats::default(),
            batching,
            live: live.map(|l| LiveReport::Receiver(Box::new(l.borrow().report(duration_s)))),
        };
        report::write_json_atomic(path, &summary)?;
    }
    Ok(())
}
