//! The live mode's bitrate ladder and its two ABRs (README.md, "Live mode", where the rules
//! and constants are attributed). Both are pure state machines on times in seconds, driven
//! by crate::live with what the sender sees, so tests can drive them with synthetic signals.
//!
//! - [`BacklogAbr`], after OBS Studio's dynamic bitrate (obs-outputs `rtmp-stream.c`): when
//!   the frames waiting in the sender's output buffer span 200 ms or more (and at least 5
//!   wait), lower the bitrate to what the output drained over the last 1-2 s, or back to the
//!   rung before the last increase; then step up one rung every 4 s until the top.
//! - [`RateAbr`], after Chromium's Cast sender (`media/cast/sender/congestion_control.cc`,
//!   AdaptiveCongestionControl): the rate at which the last 100 frames were delivered while
//!   the path was busy with them, times the fraction of the latency budget the backlog
//!   leaves free, divided by 0.9 (it aims to keep its virtual buffer 90 % empty).
//!
//! Both choose the highest rung of the ladder at or below what their rule asks for.

use std::collections::VecDeque;

use serde::Serialize;

/// The default ladder, kbit/s: the 16:9 rungs up to 720p of Apple's HLS Authoring
/// Specification's example ladder (145 ... 3000), topped by Facebook Live's maximum for
/// 720p at 30 fps (4000). README.md cites both.
pub const LADDER_KBPS: [u32; 7] = [145, 365, 730, 1100, 2000, 3000, 4000];

/// OBS: buffered duration at which the bitrate is lowered (`DBR_TRIGGER_USEC`, 200 ms).
pub const DBR_TRIGGER_S: f64 = 0.2;
/// OBS: fewer buffered packets than this count as no congestion.
pub const DBR_MIN_QUEUED: usize = 5;
/// OBS: time between increases (`DBR_INC_TIMER`: 4 s in current OBS, 30 s before).
pub const DBR_INC_S: f64 = 4.0;
/// OBS: the send-rate estimate needs at least 1 s of frames and keeps at most 2 s
/// (`MIN_ESTIMATE_DURATION_MS`, `MAX_ESTIMATE_DURATION_MS`).
pub const DBR_EST_MIN_S: f64 = 1.0;
pub const DBR_EST_MAX_S: f64 = 2.0;
/// Cast: the fraction of its virtual buffer it tries to keep empty.
pub const CAST_TARGET_EMPTY: f64 = 0.9;
/// Cast: frames of history in the delivery-rate estimate (`kHistorySize`).
pub const CAST_HISTORY_FRAMES: usize = 100;

/// Which ABR (`-abr`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AbrKind {
    Backlog,
    Rate,
}

impl AbrKind {
    pub const ALL: [AbrKind; 2] = [AbrKind::Backlog, AbrKind::Rate];

    pub fn name(self) -> &'static str {
        match self {
            AbrKind::Backlog => "backlog",
            AbrKind::Rate => "rate",
        }
    }
}

impl std::fmt::Display for AbrKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The index of the highest rung at or below `kbps` (the lowest rung if none is).
pub fn rung_at_most(ladder: &[u32], kbps: f64) -> usize {
    ladder.iter().rposition(|&r| r as f64 <= kbps).unwrap_or(0)
}

/// A frame the sender handed to the transport at `sent_s` and learnt delivered at `done_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delivered {
    pub sent_s: f64,
    pub done_s: f64,
    pub bytes: u64,
}

/// What the sender sees when it decides (once per frame).
#[derive(Debug, Clone, Copy, Default)]
pub struct Signals {
    pub now_s: f64,
    /// Frames waiting in the sender's own queue (not yet handed to the transport).
    pub queued_frames: usize,
    /// OBS's buffer duration: newest queued frame's capture time minus the oldest queued
    /// delta frame's, seconds (0 if none).
    pub queued_span_s: f64,
    /// Bytes not yet delivered: queued plus handed to the transport and not acknowledged.
    pub backlog_bytes: u64,
    /// The transport's minimum RTT, seconds.
    pub min_rtt_s: f64,
}

/// OBS Studio's dynamic bitrate, on a ladder.
#[derive(Debug, Clone)]
pub struct BacklogAbr {
    ladder: Vec<u32>,
    rung: usize,
    prev: Option<usize>,
    inc_at: Option<f64>,
    est: VecDeque<Delivered>,
    est_bytes: u64,
}

impl BacklogAbr {
    /// Starts at the top rung: OBS starts at the configured bitrate and only lowers it.
    pub fn new(ladder: &[u32]) -> Self {
        BacklogAbr {
            ladder: ladder.to_vec(),
            rung: ladder.len() - 1,
            prev: None,
            inc_at: None,
            est: VecDeque::new(),
            est_bytes: 0,
        }
    }

    pub fn on_delivered(&mut self, d: Delivered) {
        self.est.push_back(d);
        self.est_bytes += d.bytes;
        while self.est.len() > 1 && self.span_s() >= DBR_EST_MAX_S {
            let f = self.est.pop_front().expect("non-empty");
            self.est_bytes -= f.bytes;
        }
    }

    /// From the first delivery in the window to the last (OBS: from the first frame's
    /// send start to the last one's send end; our frames' delivery times play that part,
    /// since a frame's hand-over time would count the queue it then waits in).
    fn span_s(&self) -> f64 {
        match (self.est.front(), self.est.back()) {
            (Some(a), Some(b)) => b.done_s - a.done_s,
            _ => 0.0,
        }
    }

    /// What the output drained over the last 1-2 s, kbit/s: the bytes delivered after the
    /// window's first delivery over the time since it (None: under 1 s of data).
    pub fn estimate_kbps(&self) -> Option<f64> {
        let span = self.span_s();
        let first = self.est.front().map_or(0, |d| d.bytes);
        (span >= DBR_EST_MIN_S).then(|| (self.est_bytes - first) as f64 * 8.0 / span / 1000.0)
    }

    pub fn decide(&mut self, s: &Signals) -> usize {
        let top = self.ladder.len() - 1;
        if self.inc_at.is_some_and(|t| s.now_s >= t) {
            self.inc_at = None;
            if self.rung < top {
                self.prev = Some(self.rung);
                self.rung += 1;
                if self.rung < top {
                    self.inc_at = Some(s.now_s + DBR_INC_S);
                }
            }
        }
        if s.queued_frames >= DBR_MIN_QUEUED && s.queued_span_s >= DBR_TRIGGER_S {
            let lower = match self.estimate_kbps() {
                Some(est) if est < self.ladder[self.rung] as f64 => {
                    // OBS starts a fresh estimate after using one.
                    self.est.clear();
                    self.est_bytes = 0;
                    Some(rung_at_most(&self.ladder, est))
                }
                _ => self.prev,
            };
            if let Some(n) = lower.filter(|&n| n != self.rung) {
                self.rung = n;
                self.prev = None;
                self.inc_at = Some(s.now_s + DBR_INC_S);
            }
        }
        self.rung
    }
}

/// Chromium Cast's adaptive congestion control, on a ladder.
#[derive(Debug, Clone)]
pub struct RateAbr {
    ladder: Vec<u32>,
    rung: usize,
    hist: VecDeque<Delivered>,
    budget_s: f64,
    /// The busy intervals' buffer, kept between decisions (one a frame) to allocate once.
    scratch: Vec<(f64, f64)>,
}

impl RateAbr {
    /// Starts at the lowest rung: Cast uses its minimum bitrate until frames are acked.
    /// `budget_s`: the latency budget (Cast's playout delay; here `-frame_deadline_ms`).
    pub fn new(ladder: &[u32], budget_s: f64) -> Self {
        RateAbr {
            ladder: ladder.to_vec(),
            rung: 0,
            hist: VecDeque::new(),
            budget_s,
            scratch: Vec::with_capacity(CAST_HISTORY_FRAMES + 1),
        }
    }

    pub fn on_delivered(&mut self, d: Delivered) {
        self.hist.push_back(d);
        while self.hist.len() > CAST_HISTORY_FRAMES {
            self.hist.pop_front();
        }
    }

    /// Bits delivered over the time the path was busy with them, kbit/s: each frame busy
    /// from its hand-over to its delivery minus the path's minimum RTT (Cast subtracts the
    /// idle "dead time" between frames; the RTT we remove too, see README.md), intervals
    /// merged. None without history.
    pub fn delivery_kbps(&self, min_rtt_s: f64) -> Option<f64> {
        self.delivery_kbps_in(min_rtt_s, &mut Vec::new())
    }

    /// [`RateAbr::delivery_kbps`] with `ends` as the intervals' buffer.
    fn delivery_kbps_in(&self, min_rtt_s: f64, ends: &mut Vec<(f64, f64)>) -> Option<f64> {
        let mut busy = 0.0;
        let mut bits = 0.0;
        let mut cur: Option<(f64, f64)> = None;
        ends.clear();
        ends.extend(
            self.hist
                .iter()
                .map(|d| (d.sent_s, (d.done_s - min_rtt_s).max(d.sent_s))),
        );
        // Feedback mostly arrives in hand-over order: sort (stably, as before) only if not.
        if !ends.windows(2).all(|w| w[0].0 <= w[1].0) {
            ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        for &(a, b) in ends.iter() {
            cur = match cur {
                Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
                Some((ca, cb)) => {
                    busy += cb - ca;
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((ca, cb)) = cur {
            busy += cb - ca;
        }
        for d in &self.hist {
            bits += d.bytes as f64 * 8.0;
        }
        (!self.hist.is_empty()).then(|| bits / busy.max(1e-3) / 1000.0)
    }

    pub fn decide(&mut self, s: &Signals) -> usize {
        let min = self.ladder[0] as f64;
        let max = *self.ladder.last().expect("non-empty ladder") as f64;
        let mut ends = std::mem::take(&mut self.scratch);
        let safe = self.delivery_kbps_in(s.min_rtt_s, &mut ends).unwrap_or(min);
        self.scratch = ends;
        let drain_s = s.backlog_bytes as f64 * 8.0 / (safe.max(1.0) * 1000.0);
        let empty = ((self.budget_s - drain_s) / self.budget_s).clamp(0.0, 1.0);
        let target = (safe * empty / CAST_TARGET_EMPTY).clamp(min, max);
        self.rung = rung_at_most(&self.ladder, target);
        self.rung
    }
}

/// Either ABR.
#[derive(Debug, Clone)]
pub enum Abr {
    Backlog(BacklogAbr),
    Rate(RateAbr),
}

impl Abr {
    pub fn new(kind: AbrKind, ladder: &[u32], budget_s: f64) -> Self {
        match kind {
            AbrKind::Backlog => Abr::Backlog(BacklogAbr::new(ladder)),
            AbrKind::Rate => Abr::Rate(RateAbr::new(ladder, budget_s)),
        }
    }

    pub fn on_delivered(&mut self, d: Delivered) {
        match self {
            Abr::Backlog(a) => a.on_delivered(d),
            Abr::Rate(a) => a.on_delivered(d),
        }
    }

    /// The rung to encode the next frame at.
    pub fn decide(&mut self, s: &Signals) -> usize {
        match self {
            Abr::Backlog(a) => a.decide(s),
            Abr::Rate(a) => a.decide(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: &[u32] = &LADDER_KBPS;

    /// Frames delivered back to back at `kbps` from `t0` for `secs` (30 per second).
    fn deliver(abr: &mut Abr, t0: f64, secs: f64, kbps: f64, rtt_s: f64) {
        let n = (secs * 30.0) as usize;
        let bytes = (kbps * 1000.0 / 8.0 / 30.0) as u64;
        for i in 0..n {
            let sent = t0 + i as f64 / 30.0;
            let tx = bytes as f64 * 8.0 / (kbps * 1000.0);
            abr.on_delivered(Delivered {
                sent_s: sent,
                done_s: sent + tx.max(1.0 / 30.0) + rtt_s,
                bytes,
            });
        }
    }

    fn congested(now_s: f64) -> Signals {
        Signals {
            now_s,
            queued_frames: 12,
            queued_span_s: 0.4,
            backlog_bytes: 200_000,
            min_rtt_s: 0.05,
        }
    }

    fn clear(now_s: f64) -> Signals {
        Signals {
            now_s,
            min_rtt_s: 0.05,
            ..Default::default()
        }
    }

    #[test]
    fn rungs() {
        assert_eq!(rung_at_most(L, 10.0), 0);
        assert_eq!(rung_at_most(L, 1100.0), 3);
        assert_eq!(rung_at_most(L, 1999.0), 3);
        assert_eq!(rung_at_most(L, 1e9), 6);
    }

    #[test]
    fn backlog_steps_down_to_the_drain_rate_and_back_up_every_4_s() {
        let mut a = Abr::new(AbrKind::Backlog, L, 0.7);
        assert_eq!(a.decide(&clear(0.0)), 6, "starts at the top");
        // The output drained 1.5 Mbit/s over 2 s, the buffer holds 400 ms: down to 1100.
        deliver(&mut a, 0.0, 2.0, 1500.0, 0.05);
        assert_eq!(a.decide(&congested(2.1)), 3);
        // Still congested but no new estimate and no earlier rung: stays.
        assert_eq!(a.decide(&congested(2.2)), 3);
        // Fewer than 5 frames waiting is no congestion, whatever their span.
        let few = Signals {
            queued_frames: 4,
            ..congested(2.3)
        };
        assert_eq!(a.decide(&few), 3);
        // Cleared: one rung up 4 s after the decrease, then every 4 s, up to the top.
        assert_eq!(a.decide(&clear(6.0)), 3);
        assert_eq!(a.decide(&clear(6.2)), 4);
        assert_eq!(a.decide(&clear(10.1)), 4);
        assert_eq!(a.decide(&clear(10.3)), 5);
        assert_eq!(a.decide(&clear(14.4)), 6);
        assert_eq!(a.decide(&clear(30.0)), 6);
    }

    #[test]
    fn backlog_goes_back_to_the_rung_before_an_increase_that_congested() {
        let mut a = Abr::new(AbrKind::Backlog, L, 0.7);
        deliver(&mut a, 0.0, 2.0, 1200.0, 0.05);
        assert_eq!(a.decide(&congested(2.0)), 3);
        assert_eq!(a.decide(&clear(6.1)), 4);
        // Congested again, and the estimate (cleared at the decrease) is too short: back
        // to the rung before the increase.
        deliver(&mut a, 6.1, 0.5, 1900.0, 0.05);
        assert_eq!(a.decide(&congested(6.7)), 3);
    }

    #[test]
    fn rate_starts_low_climbs_with_the_delivery_rate_and_drops_with_a_backlog() {
        let mut a = Abr::new(AbrKind::Rate, L, 0.7);
        assert_eq!(a.decide(&clear(0.0)), 0, "no history: lowest rung");
        // Frames of a 365 kbit/s stream each drain at 5 Mbit/s (then 50 ms of RTT):
        // the path delivers 5 Mbit/s while busy, the buffer is empty: top rung.
        let mut t = 0.0;
        for _ in 0..60 {
            let bytes = 365_000 / 8 / 30;
            let tx = bytes as f64 * 8.0 / 5e6;
            a.on_delivered(Delivered {
                sent_s: t,
                done_s: t + tx + 0.05,
                bytes,
            });
            t += 1.0 / 30.0;
        }
        assert_eq!(a.decide(&clear(t)), 6);
        // Delivery at 1.2 Mbit/s with the path always busy, buffer empty:
        // 1.2 / 0.9 = 1.33 Mbit/s -> 1100.
        deliver(&mut a, t, 4.0, 1200.0, 0.05);
        assert_eq!(a.decide(&clear(t + 4.0)), 3);
        // The same rate with 60 KB waiting (0.4 s of a 0.7 s budget): 1.2 * 0.43 / 0.9
        // = 0.57 Mbit/s -> 365.
        let s = Signals {
            backlog_bytes: 60_000,
            ..clear(t + 4.0)
        };
        assert_eq!(a.decide(&s), 1);
        // A backlog larger than the budget: the lowest rung.
        assert_eq!(a.decide(&congested(t + 4.0)), 0);
        // Cleared again: back up.
        assert_eq!(a.decide(&clear(t + 4.1)), 3);
    }

    #[test]
    fn decisions_are_deterministic() {
        let run = |kind| {
            let mut a = Abr::new(kind, L, 0.7);
            let mut out = Vec::new();
            for k in 0..40 {
                let t = k as f64 * 0.5;
                deliver(&mut a, t, 0.5, 300.0 + 100.0 * (k % 7) as f64, 0.04);
                let s = if k % 5 == 0 {
                    congested(t + 0.5)
                } else {
                    clear(t + 0.5)
                };
                out.push(a.decide(&s));
            }
            out
        };
        for kind in AbrKind::ALL {
            assert_eq!(run(kind), run(kind));
        }
    }
}
