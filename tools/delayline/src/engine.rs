//! The bridge: one thread for both directions, woken once per release window, not per
//! frame.
//!
//! A wake-up costs far more than a frame on the hosts this runs on (about 20 µs of CPU
//! for a timer wake-up against about 1 µs for an AF_PACKET send on a veth), so the loop
//! spends as few of them as the schedule allows:
//!
//! - **No wake-up per arrival.** While frames are queued the thread sleeps on a timer only;
//!   frames that arrive meanwhile wait in the receive socket and are read, all at once
//!   (`recvmmsg`), at the next wake-up. Each keeps the kernel's receive timestamp, so when
//!   it was read does not change when it leaves. A frame arriving during a sleep is due no
//!   earlier than the sleep ends (the delay is constant per direction; with different
//!   delays, the socket of a direction whose frames could fall due first is watched too).
//!   Only an empty line blocks on the sockets.
//! - **One wake-up per release window.** The thread wakes at the oldest frame's release
//!   time, but no sooner than `window` after the last wake-up that released frames; at
//!   each, it sends every frame of either direction due by then, plus those due within
//!   `early` after it (`sendmmsg`, in FIFO order). A frame therefore leaves between
//!   `early` before and `window - early` after its release time (plus the wake-up's own
//!   latency); with `early = window / 2` the error is symmetric and the mean delay is the
//!   configured one. A frame is only ever sent early beside a frame that is due, so a lone
//!   frame (an idle ping) leaves on time. `window = 0` releases every frame at its own
//!   release time.
//! - **The window follows the link's packet time.** A batch only needs a few frames to pay
//!   for its wake-up; more make the thread hold the frames of one direction behind those of
//!   the other and the receivers wait (at 300 Mbit/s a 500 µs window cost as much CPU as
//!   150 µs and released frames 2 ms late at p99). So the window in force is the time
//!   `frames_per_wake` frames take at the rate the line forwards (measured every 20 ms),
//!   at most `window`, and `early` scales with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;

use crate::frame;
use crate::police::{Police, TokenBucket};
use crate::queue::{DelayQueue, Frame};
use crate::stats::{bump, DirCounters, Lateness};
use crate::sys::{BatchFrame, PacketSocket, RxBatch};
use crate::timing;

/// Longest sleep, so the thread notices a stop request promptly.
const MAX_SLEEP_NS: u64 = 100_000_000;
/// Frames read per `recvmmsg` call.
const RX_SLOTS: usize = 64;
/// Most `recvmmsg` calls per socket per wake-up, so a flood on one side cannot hold back
/// the releases (about 1000 frames; the rest are read at the next wake-up).
const MAX_RX_CALLS: usize = 16;
/// Frame buffers kept for reuse.
const POOL_MAX: usize = 8192;

/// How the engine schedules its wake-ups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Least time between two wake-ups that release frames.
    pub window: Duration,
    /// How long before its release time a frame may leave beside a frame that is due.
    pub early: Duration,
    /// Frames one wake-up should release: the window in force is the time this many frames
    /// take at the measured rate, at most `window` (0: always `window`).
    pub frames_per_wake: u32,
    /// Busy-wait before each timed wake-up.
    pub spin: Duration,
}

/// Counters of the engine as a whole.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WakeCounters {
    /// Times the thread woke (timer or a socket), after its first frame.
    pub wakeups: u64,
    /// Of those, woken by a frame arriving on an empty (or watched) socket.
    pub wakeups_arrival: u64,
    /// Wake-ups that released at least one frame.
    pub release_wakeups: u64,
    /// `recvmmsg` calls that returned frames or found none.
    pub recv_calls: u64,
    /// `sendmmsg` calls.
    pub send_calls: u64,
    /// Sum of the window in force at each release wake-up, ns (its mean = this / release_wakeups).
    pub window_sum_ns: u64,
}

/// One direction: its sockets, its FIFO and its numbers.
#[derive(Debug)]
pub struct Side {
    /// "a->b" or "b->a", for messages.
    pub name: &'static str,
    rx: PacketSocket,
    tx: PacketSocket,
    delay_ns: u64,
    /// Largest frame the egress interface can send.
    max_frame_bytes: usize,
    queue: DelayQueue,
    pub counters: DirCounters,
    /// Send time minus release time, for frames sent at or after it.
    pub late: Lateness,
    /// Release time minus send time, for frames sent before it.
    pub early: Lateness,
    /// How long kernel-timestamped frames waited in the socket before they were read.
    pub age: Lateness,
    /// The direction's policer (--police-ab/--police-ba), None without one.
    pub police: Option<TokenBucket>,
    last_rx_ns: u64,
    last_drop_poll_ns: u64,
    warned: [bool; 4],
    pool: Vec<Vec<u8>>,
    due: Vec<Frame>,
}

const W_OVERSIZE: usize = 0;
const W_CSUM: usize = 1;
const W_FULL: usize = 2;
const W_SEND: usize = 3;

impl Side {
    pub fn new(
        name: &'static str,
        rx: PacketSocket,
        tx: PacketSocket,
        delay: Duration,
        max_frame_bytes: usize,
        limit: usize,
    ) -> anyhow::Result<Self> {
        rx.set_nonblocking()
            .with_context(|| format!("making the receive socket on {} non-blocking", rx.iface()))?;
        Ok(Side {
            name,
            rx,
            tx,
            delay_ns: delay.as_nanos() as u64,
            max_frame_bytes,
            queue: DelayQueue::new(limit),
            counters: DirCounters::default(),
            late: Lateness::default(),
            early: Lateness::default(),
            age: Lateness::default(),
            police: None,
            last_rx_ns: 0,
            last_drop_poll_ns: timing::now_ns(),
            warned: [false; 4],
            pool: Vec::new(),
            due: Vec::with_capacity(256),
        })
    }

    /// The same side, policed by a token bucket of `police` (full at the start).
    pub fn policed(mut self, police: Option<Police>) -> Self {
        self.police = police.map(TokenBucket::new);
        self
    }

    fn warn_once(&mut self, kind: usize, msg: impl FnOnce() -> String) {
        if !std::mem::replace(&mut self.warned[kind], true) {
            eprintln!("delayline: warning: {}", msg());
        }
    }

    /// Frames still queued.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    fn next_release_ns(&self) -> Option<u64> {
        self.queue.next_release_ns()
    }

    /// Reads every frame waiting on the receive socket (up to [`MAX_RX_CALLS`] batches)
    /// into the FIFO.
    fn drain(
        &mut self,
        batch: &mut RxBatch,
        got: &mut Vec<BatchFrame>,
        w: &mut WakeCounters,
    ) -> anyhow::Result<()> {
        let now = timing::now_ns();
        if now.saturating_sub(self.last_drop_poll_ns) > 1_000_000_000 {
            self.last_drop_poll_ns = now;
            bump(
                &self.counters.drops_rx_socket,
                self.rx.take_kernel_drops().unwrap_or(0),
            );
        }
        for _ in 0..MAX_RX_CALLS {
            got.clear();
            let n = self
                .rx
                .recv_batch(batch, got)
                .with_context(|| format!("receiving on {} ({})", self.rx.iface(), self.name))?;
            w.recv_calls += 1;
            for f in got.iter() {
                let data = batch.slot(f.slot, f.len);
                self.accept(f, data);
            }
            if n < RX_SLOTS {
                break;
            }
        }
        Ok(())
    }

    /// Timestamps, checks and queues one received frame (or drops and counts it).
    fn accept(&mut self, f: &BatchFrame, bytes: &[u8]) {
        let name = self.name;
        if f.time.kernel {
            bump(&self.counters.rx_ts_kernel, 1);
            self.age.record(f.time.age_ns());
        } else {
            bump(&self.counters.rx_ts_user, 1);
        }
        // Receive times never decrease (FIFO order is release order), even if two
        // conversions of kernel timestamps disagree by a few ns.
        let t_rx = f.time.rx_ns.max(self.last_rx_ns);
        self.last_rx_ns = t_rx;
        let wire_len = f.len
            + if f.vlan.is_some() {
                frame::VLAN_HLEN
            } else {
                0
            };
        if f.len > bytes.len() || wire_len > self.max_frame_bytes {
            bump(&self.counters.drops_oversize, 1);
            let (iface, max) = (self.rx.iface().to_string(), self.max_frame_bytes);
            self.warn_once(W_OVERSIZE, || {
                format!(
                    "{name}: dropped a {wire_len}-byte frame from {iface} (larger than the egress MTU allows: {max} bytes); \
                     GRO/TSO/GSO is on somewhere: ethtool -K IF tx off rx off tso off gso off gro off on every veth end"
                )
            });
            return;
        }
        // The policer judges the frame at its receive time, before it takes a buffer:
        // a frame it drops costs nothing more.
        if let Some(b) = self.police.as_mut() {
            if !b.admit(t_rx, wire_len) {
                return;
            }
        }
        if f.csum_not_ready {
            bump(&self.counters.csum_not_ready, 1);
            let iface = self.rx.iface().to_string();
            self.warn_once(W_CSUM, || {
                format!(
                    "{name}: frames from {iface} carry no checksum yet (tx checksum offload is on at the sending end); \
                     receivers may drop them: ethtool -K PEER tx off on the sender's interface"
                )
            });
        }
        let mut data = self.pool.pop().unwrap_or_default();
        match f.vlan {
            Some((tpid, tci)) => frame::restore_vlan(bytes, tpid, tci, &mut data),
            None => {
                data.clear();
                data.extend_from_slice(bytes);
            }
        }
        let fr = Frame {
            release_ns: t_rx + self.delay_ns,
            data,
        };
        match self.queue.push(fr) {
            Ok(()) => {
                let n = self.queue.len() as u64;
                if n > self.counters.max_queue_frames.load(Ordering::Relaxed) {
                    self.counters.max_queue_frames.store(n, Ordering::Relaxed);
                }
            }
            Err(fr) => {
                self.recycle(fr.data);
                bump(&self.counters.drops_limit, 1);
                self.warn_once(W_FULL, || {
                    format!("{name}: queue full, dropping frames (see --limit)")
                });
            }
        }
    }

    fn recycle(&mut self, v: Vec<u8>) {
        if self.pool.len() < POOL_MAX {
            self.pool.push(v);
        }
    }

    /// Sends, oldest first, every frame due by `until_ns`; `now_ns` is the send time
    /// their lateness or earliness is measured against.
    fn release(&mut self, until_ns: u64, w: &mut WakeCounters) {
        self.due.clear();
        self.queue.pop_due(until_ns, &mut self.due);
        if self.due.is_empty() {
            return;
        }
        let t = timing::now_ns();
        for f in &self.due {
            if t >= f.release_ns {
                self.late.record(t - f.release_ns);
            } else {
                self.early.record(f.release_ns - t);
            }
        }
        let frames: Vec<&[u8]> = self.due.iter().map(|f| f.data.as_slice()).collect();
        let mut errors: Vec<(usize, std::io::Error)> = Vec::new();
        let (sent, calls) = self.tx.send_batch(&frames, |i, e| errors.push((i, e)));
        drop(frames);
        w.send_calls += calls as u64;
        bump(&self.counters.frames, sent as u64);
        let mut bytes: u64 = self.due.iter().map(|f| f.data.len() as u64).sum();
        for (i, e) in errors {
            bump(&self.counters.send_errors, 1);
            let len = self.due[i].data.len();
            bytes -= len as u64;
            let (name, iface) = (self.name, self.tx.iface().to_string());
            self.warn_once(W_SEND, || {
                format!("{name}: sending a {len}-byte frame on {iface} failed: {e}")
            });
        }
        bump(&self.counters.bytes, bytes);
        let done: Vec<Frame> = self.due.drain(..).collect();
        for f in done {
            self.recycle(f.data);
        }
    }

    /// Counts what the kernel dropped since the last poll (at the end of a run).
    pub fn final_drops(&self) {
        bump(
            &self.counters.drops_rx_socket,
            self.rx.take_kernel_drops().unwrap_or(0),
        );
    }
}

/// The next wake-up: the earliest release time, but no sooner than `window` after the last
/// wake-up that released frames, and never more than [`MAX_SLEEP_NS`] away. `None` when
/// nothing is queued (then the thread waits for a frame).
pub fn next_wake_ns(
    next_release_ns: Option<u64>,
    last_release_wake_ns: u64,
    window_ns: u64,
    now_ns: u64,
) -> Option<u64> {
    next_release_ns.map(|r| {
        r.max(last_release_wake_ns.saturating_add(window_ns))
            .min(now_ns + MAX_SLEEP_NS)
    })
}

/// Both directions and the schedule: the whole bridge, run by one thread.
#[derive(Debug)]
pub struct Engine {
    pub sides: [Side; 2],
    pub schedule: Schedule,
    pub wakes: WakeCounters,
}

impl Engine {
    /// Frames sent so far, both directions.
    fn frames_sent(&self) -> u64 {
        self.sides
            .iter()
            .map(|s| s.counters.frames.load(Ordering::Relaxed))
            .sum()
    }

    /// Bridges until `stop` is set; a socket error ends it with Err.
    pub fn run(&mut self, stop: &AtomicBool) -> anyhow::Result<()> {
        timing::tighten_timer_slack();
        let slot_bytes = self
            .sides
            .iter()
            .map(|s| s.max_frame_bytes)
            .max()
            .unwrap_or(1518)
            + 64;
        let mut batch = RxBatch::new(RX_SLOTS, slot_bytes);
        let mut got = Vec::with_capacity(RX_SLOTS);
        let max_window_ns = self.schedule.window.as_nanos() as u64;
        let max_early_ns = self.schedule.early.as_nanos() as u64;
        let mut pace = Pace::new(self.schedule.frames_per_wake, max_window_ns);
        let mut last_release = 0u64;
        let mut pollfds: Vec<libc::pollfd> = Vec::with_capacity(2);
        while !stop.load(Ordering::Relaxed) {
            for s in self.sides.iter_mut() {
                s.drain(&mut batch, &mut got, &mut self.wakes)?;
            }
            let t = timing::now_ns();
            let any_due = self
                .sides
                .iter()
                .any(|s| s.next_release_ns().is_some_and(|r| r <= t));
            let window_ns = pace.window_ns(t, self.frames_sent());
            // early scales with the window in force (half of it by default)
            let early_ns = if max_window_ns == 0 {
                0
            } else {
                (max_early_ns as u128 * window_ns as u128 / max_window_ns as u128) as u64
            };
            if any_due {
                for s in self.sides.iter_mut() {
                    s.release(t.saturating_add(early_ns), &mut self.wakes);
                }
                last_release = t;
                self.wakes.release_wakeups += 1;
                self.wakes.window_sum_ns += window_ns;
            }
            let now = timing::now_ns();
            let next = self.sides.iter().filter_map(|s| s.next_release_ns()).min();
            pollfds.clear();
            let (deadline, spin) = match next_wake_ns(next, last_release, window_ns, now) {
                // Nothing queued: wait for a frame on either side.
                None => {
                    for s in &self.sides {
                        pollfds.push(pollfd(s.rx.raw_fd()));
                    }
                    (now + MAX_SLEEP_NS, Duration::ZERO)
                }
                // Queued frames: sleep to the next wake-up; watch only the sides whose
                // frames, arriving now, would fall due before it.
                Some(d) => {
                    for s in &self.sides {
                        if now.saturating_add(s.delay_ns) < d {
                            pollfds.push(pollfd(s.rx.raw_fd()));
                        }
                    }
                    (d, self.schedule.spin)
                }
            };
            let by_frame = timing::wait_until(deadline, spin, &mut pollfds);
            // Idle ticks of an empty line (the stop check) are not counted.
            if next.is_some() || by_frame {
                self.wakes.wakeups += 1;
                self.wakes.wakeups_arrival += u64::from(by_frame);
            }
        }
        for s in &self.sides {
            s.final_drops();
        }
        Ok(())
    }
}

/// How often the forwarding rate is measured.
const PACE_PERIOD_NS: u64 = 20_000_000;

/// The window in force: the time `frames_per_wake` frames take at the rate the line forwards
/// (frames of both directions, measured over the last [`PACE_PERIOD_NS`]), at most the
/// configured window.
#[derive(Debug, Clone)]
pub struct Pace {
    frames_per_wake: u32,
    max_window_ns: u64,
    t0_ns: u64,
    frames0: u64,
    window_ns: u64,
}

impl Pace {
    pub fn new(frames_per_wake: u32, max_window_ns: u64) -> Self {
        Pace {
            frames_per_wake,
            max_window_ns,
            t0_ns: 0,
            frames0: 0,
            window_ns: max_window_ns,
        }
    }

    /// The window at time `now_ns` with `frames` sent so far.
    pub fn window_ns(&mut self, now_ns: u64, frames: u64) -> u64 {
        if self.frames_per_wake == 0 {
            return self.max_window_ns;
        }
        let dt = now_ns.saturating_sub(self.t0_ns);
        if dt >= PACE_PERIOD_NS {
            let n = frames.saturating_sub(self.frames0);
            self.window_ns = if n == 0 {
                self.max_window_ns
            } else {
                // frames_per_wake frames at n frames per dt
                (dt as u128 * self.frames_per_wake as u128 / n as u128)
                    .min(self.max_window_ns as u128) as u64
            };
            self.t0_ns = now_ns;
            self.frames0 = frames;
        }
        self.window_ns
    }
}

fn pollfd(fd: libc::c_int) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_follows_the_rate() {
        let ms = 1_000_000u64;
        let mut p = Pace::new(4, 500_000);
        // Nothing measured yet: the configured window.
        assert_eq!(p.window_ns(0, 0), 500_000);
        // 36,000 frames/s (300 Mbit/s both ways): 4 frames take 111 µs.
        assert_eq!(p.window_ns(20 * ms, 720), 111_111);
        // Within the period: unchanged.
        assert_eq!(p.window_ns(25 * ms, 725), 111_111);
        // 750 frames/s (5 Mbit/s): 4 frames take 5.3 ms, so the configured 500 µs.
        assert_eq!(p.window_ns(40 * ms, 735), 500_000);
        // An idle period: the configured window.
        assert_eq!(p.window_ns(60 * ms, 735), 500_000);
        // frames_per_wake 0: always the configured window.
        let mut p = Pace::new(0, 300_000);
        assert_eq!(p.window_ns(20 * ms, 10_000), 300_000);
    }

    #[test]
    fn next_wake_waits_for_the_window() {
        // Nothing queued: no timed wake-up.
        assert_eq!(next_wake_ns(None, 0, 300, 1_000), None);
        // The oldest frame is due after the window: wake at its release time.
        assert_eq!(next_wake_ns(Some(5_000), 1_000, 300, 1_200), Some(5_000));
        // Due within the window of the last release: wait for the window's end.
        assert_eq!(next_wake_ns(Some(1_100), 1_000, 300, 1_050), Some(1_300));
        // Window 0: every frame at its own time.
        assert_eq!(next_wake_ns(Some(1_100), 1_000, 0, 1_050), Some(1_100));
        // A release far off: never sleep longer than the stop-check bound.
        assert_eq!(
            next_wake_ns(Some(u64::MAX), 0, 300, 7),
            Some(7 + MAX_SLEEP_NS)
        );
    }
}
