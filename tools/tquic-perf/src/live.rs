//! The live mode's sending end, one per connection (README.md, "Live mode").
//!
//! Every frame interval the encoder model (crate::encoder) makes a frame at the rung the ABR
//! (crate::abr) chooses, stamped with its capture time, and puts it in the sender's own
//! queue, the "output buffer" an ABR watches. A queued message goes to the transport, on a
//! unidirectional QUIC stream of its own (so that the transport's acknowledgement of the
//! whole frame is visible: tquic closes the stream then), only while the bytes the transport
//! holds unacknowledged are below its congestion window: the backlog stays in the queue, as
//! with TCP_NOTSENT_LOWAT, instead of piling up unseen in the transport's buffers. Streams
//! share one urgency and are not incremental, so tquic sends them in order, like one stream.
//!
//! A delta frame still queued `-frame_deadline_ms` after its capture is dropped, and with it
//! every later delta frame until the next key frame (they could not be decoded), as OBS does
//! when it drops; key frames are not dropped.
//!
//! Pings: every `-ping_interval_ms` one ping on a stream of its own at the highest urgency
//! (it waits for the congestion window but not behind video data), and one in-band ping
//! queued behind the video (it waits like a frame). The receiver echoes both, and reports
//! each complete frame back (`F`), which both ABRs use as the delivery signal.
//!
//! Wake-ups ([`FrameClock`]): the event loop calls [`LiveSender::tick`] whenever it wakes,
//! for the peer's ACKs and tquic's timers too. A frame whose capture time has passed is made
//! then, stamped with its capture time (its queueing, deadline and latency count from it),
//! and a wake-up of its own is asked for only at the capture time plus `-frame_slack_ms`:
//! while the connection is busy the frame rides on a wake-up that happens anyway, and a
//! frame is made at most the slack after its capture. Pings are stamped when they are
//! written, so the slack never counts in an RTT.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::Serialize;
use tquic::Connection;

use crate::abr::{Abr, AbrKind, Delivered, Signals, LADDER_KBPS};
use crate::cli::Opts;
use crate::encoder::{Encoder, EncoderConfig, HEADER_BYTES};
use crate::livestats::{BitrateLog, BitrateReport, SampleSummary, Samples};
use crate::wire::{self, Header, Reader};

/// Urgencies (RFC 9218 style: lower is sent first): priority pings before video.
const URGENCY_PING: u8 = 0;
const URGENCY_VIDEO: u8 = 3;

/// The live configuration, from the command line.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub abr: AbrKind,
    pub encoder: EncoderConfig,
    pub deadline: Duration,
    pub ping_interval: Option<Duration>,
    pub ladder: Vec<u32>,
    /// How late after its capture (or ping) time a frame may be made when no other wake-up
    /// comes first ([`FrameClock`]).
    pub slack: Duration,
}

impl LiveConfig {
    pub fn from_opts(o: &Opts) -> Self {
        LiveConfig {
            abr: o.abr,
            encoder: EncoderConfig {
                fps: o.fps,
                gop_s: o.gop_s,
                keyframe_ratio: o.keyframe_ratio,
                jitter: o.frame_jitter,
                seed: o.seed,
            },
            deadline: Duration::from_millis(o.frame_deadline_ms),
            ping_interval: (o.ping_interval_ms > 0)
                .then(|| Duration::from_millis(o.ping_interval_ms)),
            ladder: LADDER_KBPS.to_vec(),
            slack: Duration::from_millis(o.frame_slack_ms),
        }
    }
}

/// The encoder's clock: frame `n` is captured at `start + n * interval`. A frame is due once
/// its capture time has passed; the sender must be woken for it by its capture time plus the
/// slack at the latest ([`FrameClock::deadline`]), and may make it at any wake-up before.
#[derive(Debug, Clone)]
pub struct FrameClock {
    next: Instant,
    interval: Duration,
    slack: Duration,
}

impl FrameClock {
    pub fn new(start: Instant, interval: Duration, slack: Duration) -> Self {
        FrameClock {
            next: start,
            interval,
            slack,
        }
    }

    /// Whether a frame is due at `now`.
    pub fn is_due(&self, now: Instant) -> bool {
        self.next <= now
    }

    /// The capture time of the next frame due at `now`, and the clock moves on; None if the
    /// next frame is not due yet.
    pub fn pop_due(&mut self, now: Instant) -> Option<Instant> {
        if self.next > now {
            return None;
        }
        let captured = self.next;
        self.next += self.interval;
        Some(captured)
    }

    /// The next frame's capture time.
    pub fn next_capture(&self) -> Instant {
        self.next
    }

    /// When the sender must wake at the latest for the next frame.
    pub fn deadline(&self) -> Instant {
        self.next + self.slack
    }
}

pub fn unix_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros() as u64
}

/// A message waiting in the sender's queue.
#[derive(Debug, Clone)]
struct Item {
    header: Header,
    captured: Instant,
}

impl Item {
    fn is_video(&self) -> bool {
        self.header.kind == wire::VIDEO
    }
    fn is_key(&self) -> bool {
        self.header.flags & wire::FLAG_KEY != 0
    }
}

/// A message handed to the transport and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
struct Held {
    bytes: u64,
    video: bool,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct FrameCounts {
    pub frames_produced: u64,
    /// Handed to the transport whole.
    pub frames_sent: u64,
    /// Acknowledged whole by the transport.
    pub frames_acked: u64,
    pub frames_dropped: u64,
    pub app_bytes_produced: u64,
    pub app_bytes_sent: u64,
    pub app_bytes_acked: u64,
}

/// The sender's `live` object in the JSON report (README.md documents each field).
#[derive(Debug, Clone, Serialize)]
pub struct LiveSenderReport {
    pub app: &'static str,
    pub abr: AbrKind,
    pub fps: u32,
    pub gop_s: f64,
    pub keyframe_ratio: f64,
    pub frame_jitter: f64,
    pub frame_deadline_ms: u64,
    pub ping_interval_ms: u64,
    pub frame_slack_ms: u64,
    pub seed: u64,
    pub ladder_kbps: Vec<u32>,
    pub broadcast_s: f64,
    #[serde(flatten)]
    pub counts: FrameCounts,
    pub goodput_fb_kbps: f64,
    #[serde(flatten)]
    pub bitrate: BitrateReport,
    pub queue_max_frames: u64,
    /// How long after its capture time each frame was made (the slack, and the event loop's
    /// timer resolution), ms.
    pub frame_lateness_ms: SampleSummary,
    pub app_rtt_ms: SampleSummary,
    pub app_rtt_inband_ms: SampleSummary,
    pub pings_sent: u64,
    pub transport_rtt_mean_ms: Option<f64>,
    pub transport_rtt_samples: Option<u64>,
    pub transport_bytes_acked: u64,
    pub transport_bytes_lost: u64,
    pub rtx_overhead: Option<f64>,
}

/// RTX overhead as Facebook defines it: bytes retransmitted / bytes acknowledged. QUIC
/// re-sends the frames of a packet declared lost, so the bytes of lost packets stand for
/// the bytes retransmitted. None before anything was acknowledged.
pub fn rtx_overhead(bytes_lost: u64, bytes_acked: u64) -> Option<f64> {
    (bytes_acked > 0).then(|| bytes_lost as f64 / bytes_acked as f64)
}

pub struct LiveSender {
    cfg: LiveConfig,
    enc: Encoder,
    abr: Abr,
    t0: Instant,
    t0_unix_us: u64,
    clock: FrameClock,
    next_ping: Option<Instant>,
    queue: VecDeque<Item>,
    /// A message the transport accepted only in part: its stream and the rest.
    writing: Option<(u64, Bytes)>,
    held: HashMap<u64, Held>,
    held_bytes: u64,
    /// Frames handed over, by number, for the receiver's feedback: (time s, bytes).
    sent: HashMap<u32, (f64, u64)>,
    skip_until_key: bool,
    ping_stream: Option<u64>,
    ping_seq: u32,
    pings: HashMap<u32, (Instant, bool)>,
    readers: HashMap<u64, Reader>,
    counts: FrameCounts,
    bitrate: BitrateLog,
    queue_max: u64,
    lateness: Samples,
    rtt_prio: Samples,
    rtt_inband: Samples,
    pings_sent: u64,
    zeros: Bytes,
}

impl LiveSender {
    pub fn new(cfg: LiveConfig, now: Instant) -> Self {
        let abr = Abr::new(cfg.abr, &cfg.ladder, cfg.deadline.as_secs_f64());
        let enc = Encoder::new(cfg.encoder);
        let interval = Duration::from_secs_f64(enc.frame_interval_s());
        let start_rung = match cfg.abr {
            AbrKind::Backlog => cfg.ladder.len() - 1,
            AbrKind::Rate => 0,
        };
        LiveSender {
            enc,
            abr,
            t0: now,
            t0_unix_us: unix_us(SystemTime::now()),
            clock: FrameClock::new(now, interval, cfg.slack),
            next_ping: cfg.ping_interval.map(|_| now),
            queue: VecDeque::new(),
            writing: None,
            held: HashMap::new(),
            held_bytes: 0,
            sent: HashMap::new(),
            skip_until_key: false,
            ping_stream: None,
            ping_seq: 0,
            pings: HashMap::new(),
            readers: HashMap::new(),
            counts: FrameCounts::default(),
            bitrate: BitrateLog::new(&cfg.ladder, start_rung),
            queue_max: 0,
            lateness: Samples::default(),
            rtt_prio: Samples::with_series(),
            rtt_inband: Samples::with_series(),
            pings_sent: 0,
            zeros: Bytes::from(vec![0u8; 64 * 1024]),
            cfg,
        }
    }

    fn t_s(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    fn unix_of(&self, t: Instant) -> u64 {
        self.t0_unix_us + t.saturating_duration_since(self.t0).as_micros() as u64
    }

    /// Opens the priority-ping stream. Call when the connection is established (see
    /// crate::live_rx::LiveReceiver::open for why streams are opened early).
    pub fn open(&mut self, conn: &mut Connection) {
        if self.ping_stream.is_none() && self.cfg.ping_interval.is_some() {
            self.ping_stream = conn.stream_uni_new(URGENCY_PING, false).ok();
        }
    }

    /// The latest time the sender must be woken (the next frame's or ping's time plus the
    /// slack).
    pub fn wake_at(&self) -> Instant {
        let frame = self.clock.deadline();
        match self.next_ping {
            Some(p) => frame.min(p + self.cfg.slack),
            None => frame,
        }
    }

    /// Produces what is due, sends what the transport takes; returns when to wake next at
    /// the latest. Called at every wake-up of the event loop, whatever woke it.
    pub fn tick(&mut self, conn: &mut Connection, now: Instant) -> Instant {
        let ping_due = self.next_ping.is_some_and(|p| p <= now);
        if !ping_due && !self.clock.is_due(now) && self.queue.is_empty() && self.writing.is_none() {
            // Nothing to make, drop or hand over (most wake-ups: the peer's ACKs).
            return self.wake_at();
        }
        let (cwnd, min_rtt_s) = match crate::net::path_stats(conn) {
            Some(ps) => (ps.final_cwnd.max(1), ps.min_rtt as f64 / 1e6),
            None => (u64::MAX, 0.0),
        };
        while let Some(captured) = self.clock.pop_due(now) {
            let late_ms = now.saturating_duration_since(captured).as_secs_f64() * 1000.0;
            self.lateness.add(self.t_s(captured), late_ms);
            self.produce(captured, min_rtt_s);
        }
        if let (true, Some(p), Some(every)) = (ping_due, self.next_ping, self.cfg.ping_interval) {
            // Stamped now, not at its scheduled time: the slack must not count in the RTT.
            self.ping(conn, now);
            self.next_ping = Some(p + every);
        }
        self.drop_expired(now);
        self.push(conn, cwnd);
        self.queue_max = self.queue_max.max(self.queue.len() as u64);
        self.wake_at()
    }

    fn signals(&self, now_s: f64, min_rtt_s: f64) -> Signals {
        let video = self.queue.iter().filter(|i| i.is_video());
        let newest = self.queue.iter().rev().find(|i| i.is_video());
        let oldest_delta = self.queue.iter().find(|i| i.is_video() && !i.is_key());
        let span = match (newest, oldest_delta) {
            (Some(n), Some(o)) => n
                .captured
                .saturating_duration_since(o.captured)
                .as_secs_f64(),
            _ => 0.0,
        };
        let queued: u64 = self.queue.iter().map(|i| i.header.size as u64).sum();
        let partial = self.writing.as_ref().map_or(0, |(_, b)| b.len() as u64);
        Signals {
            now_s,
            queued_frames: video.count(),
            queued_span_s: span,
            backlog_bytes: queued + partial + self.held_bytes,
            min_rtt_s,
        }
    }

    fn produce(&mut self, captured: Instant, min_rtt_s: f64) {
        let now_s = self.t_s(captured);
        let rung = self.abr.decide(&self.signals(now_s, min_rtt_s));
        self.bitrate.set(now_s, rung);
        let f = self.enc.next_frame(self.cfg.ladder[rung]);
        self.counts.frames_produced += 1;
        self.counts.app_bytes_produced += f.bytes as u64;
        if f.key {
            self.skip_until_key = false;
        } else if self.skip_until_key {
            self.counts.frames_dropped += 1;
            return;
        }
        let header = Header {
            kind: wire::VIDEO,
            flags: if f.key { wire::FLAG_KEY } else { 0 },
            number: f.number,
            time_us: self.unix_of(captured),
            size: f.bytes as u32,
        };
        self.queue.push_back(Item { header, captured });
    }

    fn ping(&mut self, conn: &mut Connection, at: Instant) {
        let sid = match self.ping_stream {
            Some(s) => s,
            None => match conn.stream_uni_new(URGENCY_PING, false) {
                Ok(s) => {
                    self.ping_stream = Some(s);
                    s
                }
                Err(_) => return,
            },
        };
        for inband in [false, true] {
            self.ping_seq = self.ping_seq.wrapping_add(1);
            let flags = if inband { wire::FLAG_INBAND } else { 0 };
            let header = Header::small(wire::PING, flags, self.ping_seq, self.unix_of(at));
            self.pings.insert(self.ping_seq, (at, inband));
            self.pings_sent += 1;
            if inband {
                self.queue.push_back(Item {
                    header,
                    captured: at,
                });
            } else {
                // 24 bytes on a stream of its own; the window is far larger.
                let _ = conn.stream_write(sid, Bytes::copy_from_slice(&header.encode()), false);
            }
        }
    }

    /// Drops delta frames queued past their deadline, and later deltas up to a key frame.
    fn drop_expired(&mut self, now: Instant) {
        let deadline = self.cfg.deadline;
        let mut dropping = false;
        let mut dropped = 0;
        self.queue.retain(|i| {
            if !i.is_video() {
                return true;
            }
            if i.is_key() {
                dropping = false;
                return true;
            }
            if dropping || now.saturating_duration_since(i.captured) > deadline {
                dropping = true;
                dropped += 1;
                return false;
            }
            true
        });
        self.counts.frames_dropped += dropped;
        if dropping {
            self.skip_until_key = true;
        }
    }

    pub fn counts(&self) -> FrameCounts {
        self.counts
    }

    /// The transport can take more (tquic's writable callback).
    pub fn on_writable(&mut self, conn: &mut Connection) {
        let cwnd = crate::net::path_stats(conn).map_or(u64::MAX, |ps| ps.final_cwnd.max(1));
        self.push(conn, cwnd);
    }

    /// Hands queued messages to the transport while it holds less than its window.
    fn push(&mut self, conn: &mut Connection, cwnd: u64) {
        if let Some((sid, rest)) = self.writing.take() {
            if !self.write(conn, sid, rest) {
                return;
            }
        }
        while self.held_bytes < cwnd {
            if self.queue.is_empty() {
                return;
            }
            let Ok(sid) = conn.stream_uni_new(URGENCY_VIDEO, false) else {
                return; // stream limit: the receiver raises it as streams complete
            };
            let item = self.queue.pop_front().expect("non-empty");
            let h = item.header;
            let size = h.size as usize;
            let mut buf = Vec::with_capacity(size);
            buf.extend_from_slice(&h.encode());
            let mut left = size - HEADER_BYTES;
            while left > 0 {
                let n = left.min(self.zeros.len());
                buf.extend_from_slice(&self.zeros[..n]);
                left -= n;
            }
            let video = h.kind == wire::VIDEO;
            self.held.insert(
                sid,
                Held {
                    bytes: size as u64,
                    video,
                },
            );
            self.held_bytes += size as u64;
            if video {
                let now_s = self.t_s(Instant::now());
                self.sent.insert(h.number, (now_s, size as u64));
                self.counts.frames_sent += 1;
                self.counts.app_bytes_sent += size as u64;
            }
            if !self.write(conn, sid, Bytes::from(buf)) {
                return;
            }
        }
    }

    /// Writes `data` (the end of a message) with FIN; false if the transport took only part.
    fn write(&mut self, conn: &mut Connection, sid: u64, data: Bytes) -> bool {
        match conn.stream_write(sid, data.clone(), true) {
            Ok(n) if n == data.len() => true,
            Ok(n) => {
                let _ = conn.stream_want_write(sid, true);
                self.writing = Some((sid, data.slice(n..)));
                false
            }
            Err(tquic::Error::Done) => {
                let _ = conn.stream_want_write(sid, true);
                self.writing = Some((sid, data));
                false
            }
            Err(_) => true, // the stream is gone (connection closing)
        }
    }

    /// A stream of ours closed: everything on it was acknowledged.
    pub fn on_stream_closed(&mut self, sid: u64) {
        if let Some(h) = self.held.remove(&sid) {
            self.held_bytes -= h.bytes;
            if h.video {
                self.counts.frames_acked += 1;
                self.counts.app_bytes_acked += h.bytes;
            }
        }
    }

    /// Reads the receiver's echoes and feedback.
    pub fn on_readable(&mut self, conn: &mut Connection, sid: u64, buf: &mut [u8]) {
        let now = Instant::now();
        let now_s = self.t_s(now);
        let mut msgs = Vec::new();
        let reader = self.readers.entry(sid).or_default();
        while let Ok((n, fin)) = conn.stream_read(sid, buf) {
            if reader.feed(&buf[..n], |h| msgs.push(h)).is_err() {
                let _ = conn.close(true, 2, b"malformed live message");
                return;
            }
            if fin || n == 0 {
                break;
            }
        }
        for h in msgs {
            match h.kind {
                wire::ECHO => {
                    if let Some((at, inband)) = self.pings.remove(&h.number) {
                        let ms = now.saturating_duration_since(at).as_secs_f64() * 1000.0;
                        let t = self.t_s(at);
                        if inband {
                            self.rtt_inband.add(t, ms);
                        } else {
                            self.rtt_prio.add(t, ms);
                        }
                    }
                }
                wire::FEEDBACK => {
                    if let Some((sent_s, bytes)) = self.sent.remove(&h.number) {
                        self.abr.on_delivered(Delivered {
                            sent_s,
                            done_s: now_s,
                            bytes,
                        });
                    }
                }
                _ => {}
            }
        }
    }

    /// The report at the connection's close, with the transport's counters.
    pub fn report(
        &self,
        transport_rtt: (Option<f64>, Option<u64>),
        bytes_acked: u64,
        bytes_lost: u64,
    ) -> LiveSenderReport {
        let broadcast_s = self.t0.elapsed().as_secs_f64();
        let c = &self.cfg;
        LiveSenderReport {
            app: "live",
            abr: c.abr,
            fps: c.encoder.fps,
            gop_s: c.encoder.gop_s,
            keyframe_ratio: c.encoder.keyframe_ratio,
            frame_jitter: c.encoder.jitter,
            frame_deadline_ms: c.deadline.as_millis() as u64,
            ping_interval_ms: c.ping_interval.map_or(0, |d| d.as_millis() as u64),
            frame_slack_ms: c.slack.as_millis() as u64,
            seed: c.encoder.seed,
            ladder_kbps: c.ladder.clone(),
            broadcast_s,
            counts: self.counts,
            goodput_fb_kbps: if broadcast_s > 0.0 {
                self.counts.app_bytes_acked as f64 * 8.0 / broadcast_s / 1000.0
            } else {
                0.0
            },
            bitrate: self.bitrate.report(broadcast_s),
            queue_max_frames: self.queue_max,
            frame_lateness_ms: self.lateness.summary(),
            app_rtt_ms: self.rtt_prio.summary(),
            app_rtt_inband_ms: self.rtt_inband.summary(),
            pings_sent: self.pings_sent,
            transport_rtt_mean_ms: transport_rtt.0,
            transport_rtt_samples: transport_rtt.1,
            transport_bytes_acked: bytes_acked,
            transport_bytes_lost: bytes_lost,
            rtx_overhead: rtx_overhead(bytes_lost, bytes_acked),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_stamped_with_their_capture_time_and_woken_for_by_the_slack() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c = FrameClock::new(t0, ms(33), ms(4));
        // The first frame is due at once; the wake-up for the next is its capture + slack.
        assert_eq!(c.pop_due(t0), Some(t0));
        assert_eq!(c.pop_due(t0), None);
        assert_eq!((c.next_capture(), c.deadline()), (t0 + ms(33), t0 + ms(37)));
        assert!(!c.is_due(t0 + ms(32)));
        // A wake-up (an ACK) 2 ms after the capture time makes the frame then, stamped with
        // its capture time; a late wake-up makes every frame due, each with its own stamp.
        assert_eq!(c.pop_due(t0 + ms(35)), Some(t0 + ms(33)));
        assert_eq!(c.pop_due(t0 + ms(35)), None);
        let late: Vec<_> = std::iter::from_fn(|| c.pop_due(t0 + ms(140))).collect();
        assert_eq!(late, vec![t0 + ms(66), t0 + ms(99), t0 + ms(132)]);
        assert_eq!(c.deadline(), t0 + ms(169));
        // Without slack the deadline is the capture time (a wake-up per frame).
        let c0 = FrameClock::new(t0, ms(33), Duration::ZERO);
        assert_eq!(c0.deadline(), t0);
    }

    #[test]
    fn rtx_overhead_is_lost_over_acked() {
        assert_eq!(rtx_overhead(0, 0), None);
        assert_eq!(rtx_overhead(50, 1000), Some(0.05));
        assert_eq!(rtx_overhead(0, 1000), Some(0.0));
    }
}
