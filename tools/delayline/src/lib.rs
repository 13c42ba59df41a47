//! delayline: a userspace stand-in for `netem delay` on kernels without sch_netem.
//!
//! It bridges two interfaces of a network namespace with AF_PACKET raw sockets and holds
//! every frame for a fixed one-way delay per direction before sending it, unchanged, out
//! of the other interface. See README.md for the design and its measured limits.

pub mod bridge;
pub mod cli;
pub mod error;
pub mod frame;
pub mod offload;
pub mod queue;
pub mod stats;
pub mod sys;
pub mod timing;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::bridge::{Direction, Shared};
use crate::cli::Opts;
use crate::error::DelaylineError;
use crate::stats::{DirCounters, DirReport, Lateness, Report};
use crate::sys::PacketSocket;

/// Socket receive buffer per interface: room for a burst while the rx thread is not
/// scheduled (about 1 s of 35 Mbit/s).
const RCVBUF_BYTES: i32 = 8 << 20;
/// How often blocked threads and the main thread look for a stop request.
const POLL: Duration = Duration::from_millis(100);

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// One interface, checked and opened.
struct Iface {
    name: String,
    mtu: u32,
}

fn check_iface(name: &str, allow_offload: bool) -> anyhow::Result<Iface> {
    let (flags, mtu) = sys::flags_and_mtu(name)?;
    if flags & libc::IFF_UP == 0 {
        return Err(DelaylineError::InterfaceDown(name.to_string()).into());
    }
    if allow_offload {
        let on = offload::enabled_on(name)?;
        if !on.is_empty() {
            eprintln!(
                "delayline: warning: {name}: offloads on ({}); continuing because of --allow-offload",
                on.join(", ")
            );
        }
    } else {
        offload::require_off(name)?;
    }
    Ok(Iface {
        name: name.to_string(),
        mtu,
    })
}

/// Blocks SIGINT and SIGTERM in this thread (and the threads it spawns later), so they
/// can be taken synchronously with `sigtimedwait`.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for SIGINT/SIGTERM; returns the signal number if one came.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timespec; siginfo not requested.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// Runs the delay line until SIGINT/SIGTERM (Ok) or a socket error (Err).
pub fn run(opts: Opts) -> anyhow::Result<()> {
    let t_start = timing::now_ns();
    if opts.iface_a == opts.iface_b {
        return Err(DelaylineError::SameInterface(opts.iface_a.clone()).into());
    }
    // Existence first, then permission (opening the sockets), then state and offloads.
    let index_a = sys::ifindex(&opts.iface_a)?;
    let index_b = sys::ifindex(&opts.iface_b)?;
    let rx_a = PacketSocket::open_rx(&opts.iface_a, index_a, RCVBUF_BYTES, POLL)?;
    let rx_b = PacketSocket::open_rx(&opts.iface_b, index_b, RCVBUF_BYTES, POLL)?;
    let tx_a = PacketSocket::open_tx(&opts.iface_a, index_a)?;
    let tx_b = PacketSocket::open_tx(&opts.iface_b, index_b)?;
    let a = check_iface(&opts.iface_a, opts.allow_offload)?;
    let b = check_iface(&opts.iface_b, opts.allow_offload)?;
    let rx_timestamps = if rx_a.kernel_timestamps() && rx_b.kernel_timestamps() {
        "kernel"
    } else {
        "user"
    };

    let (delay_ab, delay_ba) = (opts.delay_ab(), opts.delay_ba());
    let limit = opts.limit as usize;
    let sigset = block_stop_signals();

    let dir = |name, rx, tx, delay, out: &Iface| Direction {
        name,
        rx,
        tx,
        delay,
        max_frame_bytes: frame::max_frame_bytes(out.mtu),
        spin: opts.spin_us,
        rt_priority: opts.rt_priority,
        shared: Arc::new(Shared::new(limit)),
        counters: Arc::new(DirCounters::default()),
    };
    let ab = dir("a->b", rx_a, tx_b, delay_ab, &b).start()?;
    let ba = dir("b->a", rx_b, tx_a, delay_ba, &a).start()?;
    eprintln!(
        "delayline ready a={} b={} delay_ab_ms={} delay_ba_ms={} limit={} spin_us={} rt_priority={} rx_timestamps={}",
        a.name,
        b.name,
        ms(delay_ab),
        ms(delay_ba),
        opts.limit,
        opts.spin_us.as_micros(),
        opts.rt_priority,
        rx_timestamps
    );

    let mut signal = None;
    while signal.is_none() && !ab.any_finished() && !ba.any_finished() {
        signal = wait_signal(&sigset, POLL);
    }
    let (c_ab, c_ba) = (ab.counters.clone(), ba.counters.clone());
    let (res_ab, q_ab) = ab.stop();
    let (res_ba, q_ba) = ba.stop();
    let (cpu_user_s, cpu_sys_s) = stats::process_cpu_s();
    let none = (Lateness::default(), Lateness::default());
    let (late_ab, age_ab) = res_ab.as_ref().unwrap_or(&none);
    let (late_ba, age_ba) = res_ba.as_ref().unwrap_or(&none);
    let report = Report {
        format: "delayline-stats",
        format_version: 1,
        limit: opts.limit,
        spin_us: opts.spin_us.as_micros() as u64,
        rt_priority: opts.rt_priority,
        a_to_b: DirReport::from_counters(
            &a.name,
            &b.name,
            ms(delay_ab),
            &c_ab,
            q_ab,
            late_ab,
            age_ab,
        ),
        b_to_a: DirReport::from_counters(
            &b.name,
            &a.name,
            ms(delay_ba),
            &c_ba,
            q_ba,
            late_ba,
            age_ba,
        ),
        rx_timestamps,
        cpu_user_s,
        cpu_sys_s,
        cpu_s: cpu_user_s + cpu_sys_s,
        wall_s: timing::now_ns().saturating_sub(t_start) as f64 / 1e9,
    };
    eprintln!("{}", report.line());
    eprintln!("{}", report.usage_line());
    res_ab.context("direction a->b failed")?;
    res_ba.context("direction b->a failed")?;
    if signal.is_none() {
        anyhow::bail!("a bridge thread ended without a stop signal");
    }
    if let Some(path) = &opts.stats_json {
        stats::write_json_atomic(path, &report)
            .with_context(|| format!("writing --stats-json {path:?}"))?;
    }
    Ok(())
}
