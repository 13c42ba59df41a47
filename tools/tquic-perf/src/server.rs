//! The server: accepts connections and sends bulk data on one stream to each until the
//! client closes. Serves until SIGTERM/SIGINT (exit 0), or `-once`: until the first
//! connection has closed. Logs a stats line per connection; `-json` gets the latest.
//! Each connection's RTT samples are collected after every received datagram (crate::rtt).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bytes::Bytes;
use tquic::{Connection, Endpoint, TlsConfig, TransportHandler};

use crate::cli::{App, Opts};
use crate::error::PerfError;
use crate::live::{LiveConfig, LiveSender};
use crate::net::{self, SocketSender, Step};
use crate::report::{self, LiveReport, SenderStats, Summary};
use crate::rtt::{RttSampler, RttState};
use crate::udp::UdpIo;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() -> anyhow::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                anyhow::bail!(
                    "sigaction({sig}) failed: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    Ok(())
}

/// Per-connection sending state.
struct Transfer {
    peer: String,
    stream_id: Option<u64>,
    first_write: Option<(Instant, SystemTime)>,
    bytes_written: u64,
}

/// RTT samplers of the open connections, by connection index: the handler adds and removes
/// them, the event loop feeds them after every datagram.
type Samplers = Rc<RefCell<HashMap<u64, RttSampler>>>;

/// Live senders of the open connections, by connection index (`-app live`): the handler
/// feeds them tquic's callbacks, the event loop ticks their encoders.
type Lives = Rc<RefCell<HashMap<u64, LiveSender>>>;

/// Ticks every live sender; returns the earliest time one wants to be woken.
fn tick_lives(ep: &mut Endpoint, lives: &Lives) -> Option<Instant> {
    let now = Instant::now();
    let mut wake: Option<Instant> = None;
    for (idx, ls) in lives.borrow_mut().iter_mut() {
        if let Some(conn) = ep.conn_get_mut(*idx) {
            let w = ls.tick(conn, now);
            wake = Some(wake.map_or(w, |x| x.min(w)));
        }
    }
    wake
}

/// Feeds each open connection's current RTT state to its sampler (after every datagram).
fn sample_rtts(ep: &mut Endpoint, samplers: &Samplers) {
    for (idx, sampler) in samplers.borrow_mut().iter_mut() {
        if let Some(ps) = ep.conn_get_mut(*idx).and_then(net::path_stats) {
            sampler.observe(RttState::from(ps));
        }
    }
}

struct ServerHandler {
    opts: Opts,
    block: Bytes,
    transfers: HashMap<u64, Transfer>,
    samplers: Samplers,
    finished: Rc<RefCell<Vec<Summary>>>,
    io: Rc<UdpIo>,
    lives: Lives,
    read_buf: Vec<u8>,
}

impl ServerHandler {
    fn fill(&mut self, conn: &mut Connection, stream_id: u64) {
        let Some(idx) = conn.index() else { return };
        let Some(t) = self.transfers.get_mut(&idx) else {
            return;
        };
        // Stops at Err(Done): no flow-control or congestion room; tquic calls back when
        // there is.
        while let Ok(n) = conn.stream_write(stream_id, self.block.clone(), false) {
            if n > 0 && t.first_write.is_none() {
                t.first_write = Some((Instant::now(), SystemTime::now()));
            }
            t.bytes_written += n as u64;
            if n < self.block.len() {
                break;
            }
        }
    }

    fn summary(&self, conn: &mut Connection, t: &Transfer, rtt: Option<RttSampler>) -> Summary {
        let (start_unix, duration_s) = match t.first_write {
            Some((i, s)) => (
                s.duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs_f64(),
                i.elapsed().as_secs_f64(),
            ),
            None => (0.0, 0.0),
        };
        let cs = conn.stats();
        let mut sender = SenderStats {
            packets_sent: Some(cs.sent_count),
            packets_lost: Some(cs.lost_count),
            packets_retransmitted: None,
            bytes_sent: Some(cs.sent_bytes),
            bytes_lost: Some(cs.lost_bytes),
            ..Default::default()
        };
        if let Some(ps) = net::path_stats(conn) {
            sender.loss_events = Some(ps.loss_event_count);
            sender.min_rtt_ms = Some(ps.min_rtt as f64 / 1000.0);
            sender.srtt_ms = Some(ps.srtt as f64 / 1000.0);
            sender.max_cwnd_bytes = Some(ps.max_cwnd);
            if let Some(mut r) = rtt {
                r.observe(RttState::from(ps));
                sender.set_rtt(&r.summary());
            }
        }
        let rate = |f: fn(u64, f64) -> f64| {
            if duration_s > 0.0 {
                f(t.bytes_written, duration_s)
            } else {
                0.0
            }
        };
        Summary {
            format_version: report::JSON_FORMAT_VERSION,
            tool: "tquic-perf",
            tool_version: env!("CARGO_PKG_VERSION"),
            role: "server",
            peer: t.peer.clone(),
            bytes: t.bytes_written,
            duration_s,
            goodput_kbps: rate(report::goodput_kbps),
            throughput_mibps: rate(report::throughput_mibps),
            start_unix,
            cc: self.opts.reported_cc().map(|c| c.name().to_string()),
            latency_factor: self.opts.reported_latency_factor(),
            window: self.opts.window,
            pacing: self.opts.pacing,
            sender,
            batching: self.io.report(),
            live: None,
        }
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "na".into(), |x| x.to_string())
}

/// The per-connection stats line (after the glog prefix).
fn stats_line(s: &Summary) -> String {
    let x = &s.sender;
    format!(
        "connection closed peer={} cc={} latency_factor={} pacing={} stream_bytes={} duration_s={:.6} \
         goodput_kbps={:.1} packets_sent={} packets_lost={} packets_retransmitted={} bytes_sent={} \
         bytes_lost={} loss_events={} min_rtt_ms={} srtt_ms={} max_cwnd_bytes={} rtt_samples={} \
         rtt_mean_ms={} rtt_p50_ms={} rtt_p90_ms={}",
        s.peer,
        opt(&s.cc),
        opt(&s.latency_factor),
        s.pacing,
        s.bytes,
        s.duration_s,
        s.goodput_kbps,
        opt(&x.packets_sent),
        opt(&x.packets_lost),
        opt(&x.packets_retransmitted),
        opt(&x.bytes_sent),
        opt(&x.bytes_lost),
        opt(&x.loss_events),
        opt(&x.min_rtt_ms),
        opt(&x.srtt_ms),
        opt(&x.max_cwnd_bytes),
        opt(&x.rtt_samples),
        opt(&x.rtt_mean_ms),
        opt(&x.rtt_p50_ms),
        opt(&x.rtt_p90_ms),
    )
}

impl TransportHandler for ServerHandler {
    fn on_conn_created(&mut self, conn: &mut Connection) {
        if let Some(idx) = conn.index() {
            let peer = conn
                .paths_iter()
                .next()
                .map(|t| t.remote.to_string())
                .unwrap_or_else(|| "?".into());
            self.transfers.insert(
                idx,
                Transfer {
                    peer,
                    stream_id: None,
                    first_write: None,
                    bytes_written: 0,
                },
            );
            // Baseline before the first datagram is processed: tquic's initial RTT.
            if let Some(ps) = net::path_stats(conn) {
                let baseline = RttState::from(ps);
                self.samplers
                    .borrow_mut()
                    .insert(idx, RttSampler::new(baseline));
            }
        }
    }

    fn on_conn_established(&mut self, conn: &mut Connection) {
        let Some(idx) = conn.index() else { return };
        if self.opts.app == App::Live {
            let now = Instant::now();
            if let Some(t) = self.transfers.get_mut(&idx) {
                t.first_write = Some((now, SystemTime::now()));
                glog!(
                    'I',
                    "new connection from {}, live broadcast abr={}",
                    t.peer,
                    self.opts.abr
                );
            }
            let mut ls = LiveSender::new(LiveConfig::from_opts(&self.opts), now);
            ls.open(conn);
            self.lives.borrow_mut().insert(idx, ls);
            return;
        }
        match conn.stream_uni_new(0, false) {
            Ok(sid) => {
                if let Some(t) = self.transfers.get_mut(&idx) {
                    t.stream_id = Some(sid);
                    glog!(
                        'I',
                        "new connection from {}, sending on stream {sid}",
                        t.peer
                    );
                }
                let _ = conn.stream_want_write(sid, true);
                self.fill(conn, sid);
            }
            Err(e) => {
                glog!('E', "cannot open a stream: {e}");
                let _ = conn.close(true, 1, b"no stream");
            }
        }
    }

    fn on_conn_closed(&mut self, conn: &mut Connection) {
        let Some(idx) = conn.index() else { return };
        let Some(mut t) = self.transfers.remove(&idx) else {
            return;
        };
        let rtt = self.samplers.borrow_mut().remove(&idx);
        let live = self.lives.borrow_mut().remove(&idx);
        if let Some(ls) = &live {
            t.bytes_written = ls.counts().app_bytes_sent;
        }
        let mut s = self.summary(conn, &t, rtt);
        if let Some(ls) = live {
            let (acked, lost) =
                net::path_stats(conn).map_or((0, 0), |p| (p.acked_bytes, p.lost_bytes));
            let r = ls.report((s.sender.rtt_mean_ms, s.sender.rtt_samples), acked, lost);
            glog!(
                'I',
                "live broadcast closed abr={} frames_produced={} frames_sent={} frames_dropped={} goodput_fb_kbps={:.1} bitrate_mean_kbps={:.1} bitrate_switches={} app_rtt_mean_ms={} app_rtt_inband_mean_ms={} rtx_overhead={}",
                r.abr,
                r.counts.frames_produced,
                r.counts.frames_sent,
                r.counts.frames_dropped,
                r.goodput_fb_kbps,
                r.bitrate.bitrate_mean_kbps,
                r.bitrate.bitrate_switches,
                opt(&r.app_rtt_ms.mean_ms),
                opt(&r.app_rtt_inband_ms.mean_ms),
                opt(&r.rtx_overhead),
            );
            s.live = Some(LiveReport::Sender(Box::new(r)));
        }
        glog!('I', "{}", stats_line(&s));
        glog!('I', "{}", report::batching_line(&s.batching));
        self.finished.borrow_mut().push(s);
    }

    fn on_stream_created(&mut self, _conn: &mut Connection, _stream_id: u64) {}

    fn on_stream_readable(&mut self, conn: &mut Connection, stream_id: u64) {
        let mut lives = self.lives.borrow_mut();
        if let Some(ls) = conn.index().and_then(|i| lives.get_mut(&i)) {
            ls.on_readable(conn, stream_id, &mut self.read_buf);
            return;
        }
        // Bulk clients send nothing; discard whatever arrives.
        let mut buf = [0u8; 4096];
        while let Ok((n, fin)) = conn.stream_read(stream_id, &mut buf) {
            if n == 0 || fin {
                break;
            }
        }
    }

    fn on_stream_writable(&mut self, conn: &mut Connection, stream_id: u64) {
        let mut lives = self.lives.borrow_mut();
        if let Some(ls) = conn.index().and_then(|i| lives.get_mut(&i)) {
            let _ = conn.stream_want_write(stream_id, false);
            ls.on_writable(conn);
            return;
        }
        drop(lives);
        self.fill(conn, stream_id);
    }

    fn on_stream_closed(&mut self, conn: &mut Connection, stream_id: u64) {
        let mut lives = self.lives.borrow_mut();
        if let Some(ls) = conn.index().and_then(|i| lives.get_mut(&i)) {
            ls.on_stream_closed(stream_id);
        }
    }

    fn on_new_token(&mut self, _conn: &mut Connection, _token: Vec<u8>) {}
}

/// A self-signed certificate in a private temporary directory, removed on drop.
struct TempCert {
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl TempCert {
    fn create() -> anyhow::Result<Self> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let ck = rcgen::generate_simple_self_signed(vec!["tquic-perf".to_string()])
            .context("cannot generate a self-signed certificate")?;
        // Per process and per server in it (tests run several servers in one process).
        static SERVERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tquic-perf-cert-{}-{n}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let me = TempCert {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            dir,
        };
        std::fs::write(&me.cert, ck.cert.pem())?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&me.key)?;
        std::io::Write::write_all(&mut f, ck.key_pair.serialize_pem().as_bytes())?;
        Ok(me)
    }
}

impl Drop for TempCert {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .with_context(|| format!("path {} is not valid UTF-8", p.display()))
}

pub fn run(opts: &Opts) -> anyhow::Result<()> {
    install_signal_handlers()?;
    let addr: SocketAddr = net::resolve(&opts.host, opts.port)?;
    let socket = net::udp_socket(addr).map_err(|cause| PerfError::Bind { addr, cause })?;
    let io = Rc::new(UdpIo::new(socket, false, opts.batch_opts()).map_err(PerfError::from)?);

    let temp_cert = match (&opts.cert, &opts.key) {
        (Some(_), Some(_)) => None,
        _ => Some(TempCert::create()?),
    };
    let (cert, key) = match (&opts.cert, &opts.key, &temp_cert) {
        (Some(c), Some(k), _) => (c.clone(), k.clone()),
        (_, _, Some(t)) => (t.cert.clone(), t.key.clone()),
        _ => unreachable!("a temporary certificate is made when -cert/-key are not given"),
    };
    let mut config = net::base_config(opts)?;
    let tls = TlsConfig::new_server_config(
        path_str(&cert)?,
        path_str(&key)?,
        vec![net::ALPN.to_vec()],
        false,
    )
    .map_err(|e| {
        PerfError::Tls(format!(
            "{e} (cert {}, key {})",
            cert.display(),
            key.display()
        ))
    })?;
    config.set_tls_config(tls);
    // BoringSSL has read both files: remove a generated key now, so even a SIGKILLed server
    // leaves nothing behind.
    drop(temp_cert);

    let finished = Rc::new(RefCell::new(Vec::new()));
    let samplers: Samplers = Rc::default();
    let lives: Lives = Rc::default();
    let handler = ServerHandler {
        opts: opts.clone(),
        block: Bytes::from(vec![0u8; opts.block_size]),
        transfers: HashMap::new(),
        samplers: samplers.clone(),
        finished: finished.clone(),
        io: io.clone(),
        lives: lives.clone(),
        read_buf: vec![0u8; 64 * 1024],
    };
    let sender = Rc::new(SocketSender { io: io.clone() });
    let mut endpoint = Endpoint::new(Box::new(config), true, Box::new(handler), sender.clone());
    glog!(
        'I',
        "server listening on {} cc={} latency_factor={} pacing={} window={} gso={} gro={} mmsg={}",
        io.local_addr()?,
        opts.congestion,
        opts.latency_factor,
        opts.pacing,
        opts.window,
        opts.gso,
        opts.gro,
        opts.mmsg
    );

    let mut served = 0usize;
    let after_datagram = |ep: &mut Endpoint| sample_rtts(ep, &samplers);
    net::event_loop_with(&mut endpoint, &io, after_datagram, |ep, io_error| {
        if let Some(e) = io_error {
            glog!('W', "socket error: {e}");
        }
        let stop = STOP.load(Ordering::SeqCst);
        if stop {
            glog!('I', "signal received, closing");
            // Reports every open connection through on_conn_closed.
            ep.close(true);
        }
        for s in finished.borrow_mut().drain(..) {
            served += 1;
            if let Some(path) = &opts.json {
                report::write_json_atomic(path, &s)?;
            }
        }
        if stop || (opts.once && served > 0) {
            return Ok(Step::Stop { flush: !stop });
        }
        Ok(Step::Continue(tick_lives(ep, &lives)))
    })?;
    Ok(())
}
