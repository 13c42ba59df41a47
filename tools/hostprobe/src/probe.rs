//! hostprobe's two measurements: timer wake-ups (cyclictest's measure) and a ping-pong
//! between two threads (a wake-up by another thread, as a packet's arrival wakes a reader).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;

use serde::Serialize;

use crate::error::HostError;
use crate::stats::Percentiles;
use crate::sys;

/// One timer row: a thread pinned to `cpu` sleeping to absolute deadlines `gap_us` apart.
#[derive(Debug, Clone, Serialize)]
pub struct TimerRow {
    pub gap_us: f64,
    pub cpu: usize,
    pub wakeups: u64,
    pub cpu_us_per_wakeup: f64,
    pub late_us: Percentiles,
}

/// One side of the ping-pong: wake-ups of both threads, their CPU per wake-up, and the time
/// from one thread's write to the other's return from its blocking read.
#[derive(Debug, Clone, Serialize)]
pub struct PingPong {
    pub wakeups: u64,
    pub cpu_us_per_wakeup: f64,
    pub latency_us: Percentiles,
}

/// How the measuring threads are scheduled: SCHED_FIFO at this priority, or normal (None).
pub type Fifo = Option<i32>;

fn enter(cpu: usize, fifo: Fifo) -> Result<(), HostError> {
    sys::pin_to(cpu).map_err(|e| HostError::sys(format!("pinning a thread to CPU {cpu}"), e))?;
    if let Some(p) = fifo {
        sys::set_fifo(p).map_err(|e| HostError::sys(format!("SCHED_FIFO {p}"), e))?;
    }
    Ok(())
}

/// Sleeps to absolute CLOCK_MONOTONIC deadlines `gap_ns` apart for `dur_ns`, on `cpu`; each
/// wake-up's lateness is now - deadline. A deadline already past when the thread wakes is
/// skipped, never bunched (as cyclictest does).
pub fn timer_row(gap_ns: i64, cpu: usize, dur_ns: i64, fifo: Fifo) -> Result<TimerRow, HostError> {
    enter(cpu, fifo)?;
    let cap = (dur_ns / gap_ns.max(1)) as usize + 2;
    let mut late = Vec::with_capacity(cap.min(1 << 24));
    let c0 = sys::thread_cpu_ns();
    let start = sys::mono_ns();
    let end = start + dur_ns;
    let mut next = start + gap_ns;
    while next <= end {
        match sys::sleep_until(next) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(HostError::sys("clock_nanosleep", e)),
        }
        let now = sys::mono_ns();
        late.push(now - next);
        next += gap_ns;
        while next < now {
            next += gap_ns;
        }
    }
    let cpu_ns = sys::thread_cpu_ns() - c0;
    let n = late.len() as u64;
    Ok(TimerRow {
        gap_us: gap_ns as f64 / 1e3,
        cpu,
        wakeups: n,
        cpu_us_per_wakeup: if n > 0 {
            cpu_ns as f64 / 1e3 / n as f64
        } else {
            0.0
        },
        late_us: Percentiles::of_ns(late),
    })
}

/// One timer row per CPU at once (one thread each, as cyclictest's threads run), for `gap_ns`.
pub fn timer_rows(
    gap_ns: i64,
    cpus: &[usize],
    dur_ns: i64,
    fifo: Fifo,
) -> Result<Vec<TimerRow>, HostError> {
    let handles: Vec<_> = cpus
        .iter()
        .map(|&cpu| thread::spawn(move || timer_row(gap_ns, cpu, dur_ns, fifo)))
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a timer thread panicked"))
        .collect()
}

/// What one side of the ping-pong saw: its latencies and CPU time.
struct Side {
    lat: Vec<i64>,
    cpu_ns: i64,
}

/// The shared state of the ping-pong: a token passes A -> B through `ab` and back through
/// `ba`; each side stores the time it signalled before signalling.
struct Shared {
    ab: sys::EventFd,
    ba: sys::EventFd,
    t_a: AtomicI64,
    t_b: AtomicI64,
    stop: AtomicBool,
}

/// One side's view: what it waits on, what it signals, whose time it reads.
struct Ends<'a> {
    rx: &'a sys::EventFd,
    tx: &'a sys::EventFd,
    sent_by_peer: &'a AtomicI64,
    sent_by_me: &'a AtomicI64,
    stop: &'a AtomicBool,
}

impl Shared {
    fn a(&self) -> Ends<'_> {
        Ends {
            rx: &self.ba,
            tx: &self.ab,
            sent_by_peer: &self.t_b,
            sent_by_me: &self.t_a,
            stop: &self.stop,
        }
    }

    fn b(&self) -> Ends<'_> {
        Ends {
            rx: &self.ab,
            tx: &self.ba,
            sent_by_peer: &self.t_a,
            sent_by_me: &self.t_b,
            stop: &self.stop,
        }
    }
}

/// One thread of the ping-pong; the starter (A, `until` set) sends the first token and ends
/// the exchange at `until`. On any error the other side is told to stop and woken, so
/// neither thread waits for ever.
fn side(cpu: usize, fifo: Fifo, e: Ends<'_>, until: Option<i64>) -> Result<Side, HostError> {
    let r = side_loop(cpu, fifo, &e, until);
    if r.is_err() {
        e.stop.store(true, Ordering::Release);
        let _ = e.tx.signal();
    }
    r
}

fn side_loop(cpu: usize, fifo: Fifo, e: &Ends<'_>, until: Option<i64>) -> Result<Side, HostError> {
    enter(cpu, fifo)?;
    let io = |err: std::io::Error| HostError::sys("ping-pong eventfd", err);
    let mut lat = Vec::with_capacity(1 << 16);
    let c0 = sys::thread_cpu_ns();
    if until.is_some() {
        e.sent_by_me.store(sys::mono_ns(), Ordering::Release);
        e.tx.signal().map_err(io)?;
    }
    loop {
        e.rx.wait().map_err(io)?;
        let now = sys::mono_ns();
        if e.stop.load(Ordering::Acquire) {
            break;
        }
        lat.push(now - e.sent_by_peer.load(Ordering::Acquire));
        if until.is_some_and(|end| now >= end) {
            // the last round: tell the other side to stop, and wake it
            e.stop.store(true, Ordering::Release);
            e.tx.signal().map_err(io)?;
            break;
        }
        e.sent_by_me.store(sys::mono_ns(), Ordering::Release);
        e.tx.signal().map_err(io)?;
    }
    Ok(Side {
        lat,
        cpu_ns: sys::thread_cpu_ns() - c0,
    })
}

/// Two threads, on `cpu_a` and `cpu_b` (the same CPU or two), passing a token back and forth
/// through two eventfds with blocking reads for `dur_ns`, as `perf bench sched pipe` does.
pub fn pingpong(
    cpu_a: usize,
    cpu_b: usize,
    dur_ns: i64,
    fifo: Fifo,
) -> Result<PingPong, HostError> {
    let efd = || sys::EventFd::new().map_err(|e| HostError::sys("eventfd", e));
    let sh = Arc::new(Shared {
        ab: efd()?,
        ba: efd()?,
        t_a: AtomicI64::new(0),
        t_b: AtomicI64::new(0),
        stop: AtomicBool::new(false),
    });
    let b = {
        let sh = sh.clone();
        thread::spawn(move || side(cpu_b, fifo, sh.b(), None))
    };
    let until = sys::mono_ns() + dur_ns;
    let a = {
        let sh = sh.clone();
        thread::spawn(move || side(cpu_a, fifo, sh.a(), Some(until)))
    };
    let ra = a.join().expect("a ping-pong thread panicked");
    let rb = b.join().expect("a ping-pong thread panicked");
    let (ra, rb) = (ra?, rb?);
    let mut lat = ra.lat;
    lat.extend(rb.lat);
    let n = lat.len() as u64;
    Ok(PingPong {
        wakeups: n,
        cpu_us_per_wakeup: if n > 0 {
            (ra.cpu_ns + rb.cpu_ns) as f64 / 1e3 / n as f64
        } else {
            0.0
        },
        latency_us: Percentiles::of_ns(lat),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_row_counts_its_wakeups_and_their_lateness() {
        let cpu = *sys::allowed_cpus().unwrap().last().unwrap();
        let r = timer_row(1_000_000, cpu, 100_000_000, None).unwrap();
        assert!((50..=100).contains(&r.wakeups), "{r:?}");
        let p = r.late_us;
        assert!(p.p50 >= 0.0 && p.p50 <= p.p99 && p.p99 <= p.p999 && p.p999 <= p.max);
        assert!(
            r.cpu_us_per_wakeup > 0.0 && r.cpu_us_per_wakeup < 1000.0,
            "{r:?}"
        );
    }

    #[test]
    fn a_ping_pong_on_one_cpu_ends_and_counts_both_sides() {
        let cpu = sys::allowed_cpus().unwrap()[0];
        let r = pingpong(cpu, cpu, 50_000_000, None).unwrap();
        assert!(r.wakeups > 10, "{r:?}");
        assert!(r.latency_us.p50 > 0.0 && r.latency_us.p50 <= r.latency_us.max);
    }
}
