//! Two tools for hosts that are not the one the instrument was fitted on (issue 57; README.md):
//!
//! - `hostprobe`: what this host's wake-ups cost and how late they come, cyclictest's measure
//!   (Debian rt-tests) made small: timer wake-ups at the gaps trials use, on every allowed CPU,
//!   a ping-pong between two threads on one core and across two, and the hypervisor's steal
//!   over the window, as one JSON document (schema `hostprobe/1`).
//! - `stallinject`: a noisy host on demand, real-time threads that take the CPUs away in
//!   bursts (inject.rs).

pub mod error;
pub mod inject;
pub mod probe;
pub mod stats;
pub mod sys;
pub mod units;

use serde::Serialize;

use error::HostError;
use probe::{PingPong, TimerRow};

/// The version of hostprobe's JSON document; a change of its keys or their meaning bumps it.
pub const SCHEMA: &str = "hostprobe/1";

/// The share of the window the timer rows take; the ping-pong takes the rest, half on one
/// core and half across two.
pub const TIMER_SHARE: f64 = 0.7;

#[derive(Debug, Clone, Serialize)]
pub struct PingPongs {
    pub same_core: PingPong,
    /// None (JSON null) when only one CPU is allowed.
    pub cross_core: Option<PingPong>,
}

/// hostprobe's JSON document (README.md, "The JSON document").
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub seconds: f64,
    pub cpus: Vec<usize>,
    pub cpu_model: String,
    pub kernel: String,
    pub fifo: bool,
    pub priority: i32,
    pub timer: Vec<TimerRow>,
    pub pingpong: PingPongs,
    pub steal_pct: f64,
}

/// How a window of `seconds` is split: ns per gap (all CPUs at once) and per ping-pong.
pub fn plan_ns(seconds: f64, n_gaps: usize, cross_core: bool) -> (i64, i64) {
    let total = seconds * 1e9;
    let timer = total * TIMER_SHARE / n_gaps.max(1) as f64;
    let pp = total * (1.0 - TIMER_SHARE) / if cross_core { 2.0 } else { 1.0 };
    (timer as i64, pp as i64)
}

/// Measures the host for about `seconds`: the timer rows for each gap (one thread per CPU of
/// `cpus`, at once), then the ping-pongs; SCHED_FIFO `priority` when `fifo`.
pub fn probe_host(
    seconds: f64,
    gaps_ns: &[i64],
    cpus: &[usize],
    priority: i32,
    fifo: bool,
) -> Result<Report, HostError> {
    let sched = fifo.then_some(priority);
    let cross = cpus.len() > 1;
    let (timer_ns, pp_ns) = plan_ns(seconds, gaps_ns.len(), cross);
    let stat0 = sys::read_proc_stat();
    let t0 = sys::mono_ns();
    let mut timer = Vec::new();
    for &gap in gaps_ns {
        timer.extend(probe::timer_rows(gap, cpus, timer_ns, sched)?);
    }
    let first = cpus[0];
    let last = *cpus.last().expect("at least one CPU");
    let same_core = probe::pingpong(last, last, pp_ns, sched)?;
    let cross_core = if cross {
        Some(probe::pingpong(first, last, pp_ns, sched)?)
    } else {
        None
    };
    let elapsed = (sys::mono_ns() - t0) as f64 / 1e9;
    let steal_pct = match (stat0, sys::read_proc_stat()) {
        (Some(a), Some(b)) => sys::steal_pct(a, b),
        _ => 0.0,
    };
    Ok(Report {
        schema: SCHEMA,
        seconds: elapsed,
        cpus: cpus.to_vec(),
        cpu_model: sys::cpu_model(),
        kernel: sys::kernel_release(),
        fifo,
        priority,
        timer,
        pingpong: PingPongs {
            same_core,
            cross_core,
        },
        steal_pct,
    })
}

/// The report as a short table for people.
pub fn human(r: &Report) -> String {
    let mut s = format!(
        "{} | kernel {} | CPUs {:?} | {} | steal {:.2} % over {:.1} s\n",
        r.cpu_model,
        r.kernel,
        r.cpus,
        if r.fifo {
            format!("SCHED_FIFO {}", r.priority)
        } else {
            "normal scheduler (SCHED_FIFO refused)".into()
        },
        r.steal_pct,
        r.seconds
    );
    s += "what                 cpu  wakeups  cpu_us/wake   p50_us   p99_us  p999_us   max_us\n";
    for t in &r.timer {
        let p = t.late_us;
        s += &format!(
            "timer {:>9} late {:>4} {:>8} {:>12.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}\n",
            units::fmt_ns((t.gap_us * 1e3).round() as i64),
            t.cpu,
            t.wakeups,
            t.cpu_us_per_wakeup,
            p.p50,
            p.p99,
            p.p999,
            p.max
        );
    }
    for (name, pp) in [
        ("ping-pong same core", Some(&r.pingpong.same_core)),
        ("ping-pong cross core", r.pingpong.cross_core.as_ref()),
    ] {
        match pp {
            Some(pp) => {
                let p = pp.latency_us;
                s += &format!(
                    "{name:<20}    - {:>8} {:>12.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}\n",
                    pp.wakeups, pp.cpu_us_per_wakeup, p.p50, p.p99, p.p999, p.max
                );
            }
            None => s += &format!("{name:<20}    - (one CPU only)\n"),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_split_within_its_seconds() {
        let (t, p) = plan_ns(20.0, 4, true);
        assert_eq!(t, 3_500_000_000);
        assert_eq!(p, 3_000_000_000);
        assert!(4 * t + 2 * p <= 20_000_000_000);
        let (_, p1) = plan_ns(5.0, 4, false);
        assert_eq!(p1, 1_500_000_000);
    }

    #[test]
    fn a_short_probe_fills_the_schema() {
        let cpus = sys::allowed_cpus().unwrap();
        let r = probe_host(0.5, &[1_000_000, 5_000_000], &cpus, 10, false).unwrap();
        assert_eq!(r.timer.len(), 2 * cpus.len());
        assert_eq!(r.pingpong.cross_core.is_some(), cpus.len() > 1);
        assert!(r.seconds > 0.4 && r.seconds < 2.0, "{}", r.seconds);
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        for k in [
            "schema",
            "seconds",
            "cpus",
            "cpu_model",
            "kernel",
            "fifo",
            "priority",
            "timer",
            "pingpong",
            "steal_pct",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        assert_eq!(v["schema"], "hostprobe/1");
        assert!(v["timer"][0]["late_us"]["p999"].is_number());
        assert!(human(&r).contains("ping-pong same core"));
    }
}
