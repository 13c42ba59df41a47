//! One direction of the bridge: an rx thread that timestamps and queues frames, and a tx
//! thread that releases them at receive time + delay.
//!
//! Two threads per direction keep receiving and sending independent: the rx thread sits
//! in a blocking recv and gives each frame the kernel's receive time (SO_TIMESTAMPNS,
//! converted to CLOCK_MONOTONIC), or CLOCK_MONOTONIC as soon as recv returns if the kernel
//! gave none; the tx thread sleeps until the oldest frame is due (absolute clock_nanosleep, 1 ns
//! timer slack, then a short spin) and sends every frame that is due.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

use crate::frame;
use crate::queue::{DelayQueue, Frame};
use crate::stats::{bump, DirCounters, Lateness};
use crate::sys::{PacketSocket, Recv};
use crate::timing;

/// Receive buffer: larger than any frame (GRO/TSO super-frames are up to 64 KiB), so an
/// oversize frame is seen whole and reported, not silently cut.
pub const RX_BUF_BYTES: usize = 65_536;
/// Longest single sleep of the tx thread, so it notices a stop request promptly.
const MAX_SLEEP_NS: u64 = 100_000_000;

/// State shared by the rx and tx threads of one direction.
#[derive(Debug)]
pub struct Shared {
    queue: Mutex<DelayQueue>,
    ready: Condvar,
    stop: AtomicBool,
}

impl Shared {
    pub fn new(limit: usize) -> Self {
        Shared {
            queue: Mutex::new(DelayQueue::new(limit)),
            ready: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// Asks both threads to finish and wakes the tx thread.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _guard = self.queue.lock();
        self.ready.notify_all();
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Frames still queued.
    pub fn queued(&self) -> usize {
        self.queue.lock().map(|q| q.len()).unwrap_or(0)
    }
}

/// Everything one direction needs.
#[derive(Debug)]
pub struct Direction {
    /// "a->b" or "b->a", for messages.
    pub name: &'static str,
    pub rx: PacketSocket,
    pub tx: PacketSocket,
    pub delay: Duration,
    /// Largest frame the egress interface can send.
    pub max_frame_bytes: usize,
    pub spin: Duration,
    /// SCHED_FIFO priority of both threads; 0 = normal scheduling.
    pub rt_priority: u8,
    pub shared: Arc<Shared>,
    pub counters: Arc<DirCounters>,
}

/// Real-time scheduling for a bridge thread, with a warning if the kernel refuses.
fn realtime(name: &str, priority: u8) {
    if let Err(e) = timing::set_realtime(priority) {
        eprintln!(
            "delayline: warning: {name}: SCHED_FIFO priority {priority} refused ({e}); \
             using the normal scheduler (releases may be late on a busy host)"
        );
    }
}

fn warn_once(flag: &AtomicBool, msg: impl FnOnce() -> String) {
    if !flag.swap(true, Ordering::Relaxed) {
        eprintln!("delayline: warning: {}", msg());
    }
}

/// Receives frames until stopped: timestamp, restore any stripped VLAN tag, drop oversize
/// frames, queue the rest (or drop them if the queue is full). Returns the histogram of
/// how long kernel-timestamped frames waited before they were read.
pub fn rx_loop(
    name: &'static str,
    rx: PacketSocket,
    delay: Duration,
    max_frame_bytes: usize,
    shared: Arc<Shared>,
    c: Arc<DirCounters>,
) -> anyhow::Result<Lateness> {
    let delay_ns = delay.as_nanos() as u64;
    let mut buf = vec![0u8; RX_BUF_BYTES];
    let warned_oversize = AtomicBool::new(false);
    let warned_csum = AtomicBool::new(false);
    let warned_full = AtomicBool::new(false);
    let mut rx_age = Lateness::default();
    // Receive times handed to the queue never decrease (FIFO order is release order),
    // even if two conversions of kernel timestamps disagree by a few ns.
    let mut last_rx_ns = 0u64;
    let mut last_poll_ns = timing::now_ns();
    while !shared.stopping() {
        // Kernel-side drops (socket buffer overflow), polled about once a second.
        if timing::now_ns().saturating_sub(last_poll_ns) > 1_000_000_000 {
            last_poll_ns = timing::now_ns();
            bump(&c.drops_rx_socket, rx.take_kernel_drops().unwrap_or(0));
        }
        let got = rx
            .recv(&mut buf)
            .with_context(|| format!("receiving on {} ({name})", rx.iface()))?;
        let (len, vlan, csum_not_ready, time) = match got {
            Recv::Frame {
                len,
                vlan,
                csum_not_ready,
                time,
            } => (len, vlan, csum_not_ready, time),
            Recv::Outgoing | Recv::Timeout => continue,
        };
        if time.kernel {
            bump(&c.rx_ts_kernel, 1);
            rx_age.record(time.age_ns());
        } else {
            bump(&c.rx_ts_user, 1);
        }
        let t_rx = time.rx_ns.max(last_rx_ns);
        last_rx_ns = t_rx;
        let wire_len = len + if vlan.is_some() { frame::VLAN_HLEN } else { 0 };
        if len > buf.len() || wire_len > max_frame_bytes {
            bump(&c.drops_oversize, 1);
            warn_once(&warned_oversize, || {
                format!(
                    "{name}: dropped a {wire_len}-byte frame from {} (larger than the egress MTU allows: {max_frame_bytes} bytes); \
                     GRO/TSO/GSO is on somewhere: ethtool -K IF tx off rx off tso off gso off gro off on every veth end",
                    rx.iface()
                )
            });
            continue;
        }
        if csum_not_ready {
            bump(&c.csum_not_ready, 1);
            warn_once(&warned_csum, || {
                format!(
                    "{name}: frames from {} carry no checksum yet (tx checksum offload is on at the sending end); \
                     receivers may drop them: ethtool -K PEER tx off on the sender's interface",
                    rx.iface()
                )
            });
        }
        let data = match vlan {
            Some((tpid, tci)) => {
                let mut v = Vec::new();
                frame::restore_vlan(&buf[..len], tpid, tci, &mut v);
                v
            }
            None => buf[..len].to_vec(),
        };
        let f = Frame {
            release_ns: t_rx + delay_ns,
            data,
        };
        let mut q = shared.queue.lock().expect("queue lock poisoned");
        let was_empty = q.is_empty();
        match q.push(f) {
            Ok(()) => {
                let n = q.len() as u64;
                if n > c.max_queue_frames.load(Ordering::Relaxed) {
                    c.max_queue_frames.store(n, Ordering::Relaxed);
                }
                drop(q);
                if was_empty {
                    shared.ready.notify_one();
                }
            }
            Err(_) => {
                drop(q);
                bump(&c.drops_limit, 1);
                warn_once(&warned_full, || {
                    format!("{name}: queue full, dropping frames (see --limit)")
                });
            }
        }
    }
    bump(&c.drops_rx_socket, rx.take_kernel_drops().unwrap_or(0));
    Ok(rx_age)
}

/// Sends frames when due until stopped; returns the release-lateness histogram.
pub fn tx_loop(
    name: &'static str,
    tx: PacketSocket,
    spin: Duration,
    shared: Arc<Shared>,
    c: Arc<DirCounters>,
) -> anyhow::Result<Lateness> {
    timing::tighten_timer_slack();
    let mut late = Lateness::default();
    let mut due: Vec<Frame> = Vec::with_capacity(256);
    let warned = AtomicBool::new(false);
    let mut q = shared.queue.lock().expect("queue lock poisoned");
    loop {
        if shared.stopping() {
            return Ok(late);
        }
        let Some(next) = q.next_release_ns() else {
            q = shared.ready.wait(q).expect("queue lock poisoned");
            continue;
        };
        let now = timing::now_ns();
        if next > now {
            drop(q);
            timing::sleep_until(next.min(now + MAX_SLEEP_NS), spin);
            q = shared.queue.lock().expect("queue lock poisoned");
            continue;
        }
        q.pop_due(now, &mut due);
        drop(q);
        for f in due.drain(..) {
            let t = timing::now_ns();
            late.record(t.saturating_sub(f.release_ns));
            match tx.send(&f.data) {
                Ok(()) => {
                    bump(&c.frames, 1);
                    bump(&c.bytes, f.data.len() as u64);
                }
                Err(e) => {
                    bump(&c.send_errors, 1);
                    warn_once(&warned, || {
                        format!(
                            "{name}: sending a {}-byte frame on {} failed: {e}",
                            f.data.len(),
                            tx.iface()
                        )
                    });
                }
            }
        }
        q = shared.queue.lock().expect("queue lock poisoned");
    }
}

impl Direction {
    /// Starts the rx and tx threads of this direction.
    pub fn start(self) -> anyhow::Result<Running> {
        let Direction {
            name,
            rx,
            tx,
            delay,
            max_frame_bytes,
            spin,
            rt_priority,
            shared,
            counters,
        } = self;
        let (s, c) = (shared.clone(), counters.clone());
        let rx = std::thread::Builder::new()
            .name(format!("rx {name}"))
            .spawn(move || {
                realtime(name, rt_priority);
                rx_loop(name, rx, delay, max_frame_bytes, s, c)
            })
            .context("spawning an rx thread")?;
        let (s, c) = (shared.clone(), counters.clone());
        let tx = std::thread::Builder::new()
            .name(format!("tx {name}"))
            .spawn(move || {
                realtime(name, rt_priority);
                tx_loop(name, tx, spin, s, c)
            })
            .context("spawning a tx thread")?;
        Ok(Running {
            name,
            rx,
            tx,
            shared,
            counters,
        })
    }
}

/// A direction whose threads are running.
#[derive(Debug)]
pub struct Running {
    pub name: &'static str,
    rx: JoinHandle<anyhow::Result<Lateness>>,
    tx: JoinHandle<anyhow::Result<Lateness>>,
    pub shared: Arc<Shared>,
    pub counters: Arc<DirCounters>,
}

impl Running {
    /// True once either thread has ended (only on error or after a stop request).
    pub fn any_finished(&self) -> bool {
        self.rx.is_finished() || self.tx.is_finished()
    }

    /// Stops both threads and waits for them; returns the release-lateness and
    /// receive-age histograms and the number of frames left in the queue, or the first
    /// thread error.
    pub fn stop(self) -> (anyhow::Result<(Lateness, Lateness)>, u64) {
        self.shared.request_stop();
        let name = self.name;
        let rx = self
            .rx
            .join()
            .map_err(|_| anyhow::anyhow!("rx thread {name} panicked"))
            .and_then(|r| r);
        let tx = self
            .tx
            .join()
            .map_err(|_| anyhow::anyhow!("tx thread {name} panicked"))
            .and_then(|r| r);
        let queued = self.shared.queued() as u64;
        let both = match (rx, tx) {
            (Ok(age), Ok(late)) => Ok((late, age)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        (both, queued)
    }
}
