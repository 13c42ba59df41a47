//! delayline: a userspace stand-in for `netem delay` on kernels without sch_netem.
//!
//! It bridges two interfaces of a network namespace with AF_PACKET raw sockets and holds
//! every frame for a fixed one-way delay per direction before sending it, unchanged, out
//! of the other interface. See README.md for the design and its measured limits.

pub mod cli;
pub mod engine;
pub mod error;
pub mod frame;
pub mod offload;
pub mod police;
pub mod queue;
pub mod stats;
pub mod sys;
pub mod timing;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cli::Opts;
use crate::engine::{Engine, Schedule, Side};
use crate::error::DelaylineError;
use crate::stats::{DirReport, Report};
use crate::sys::PacketSocket;

/// Socket receive buffer per interface. Frames wait there until the next wake-up (up to
/// one delay at the start of a burst): 64 MiB hold about 0.4 s of 350 Mbit/s in 1500-byte
/// frames at the kernel's accounting of about 4.5 KiB a frame. Memory is only used while
/// frames wait.
const RCVBUF_BYTES: i32 = 64 << 20;
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

/// The policers' keys of the ready line, only when a direction is policed:
/// ` police_ab=RATE_BPS:BURST_BYTES police_ba=off`.
fn police_ready(opts: &Opts) -> String {
    if opts.police_ab.is_none() && opts.police_ba.is_none() {
        return String::new();
    }
    let key = |p: Option<police::Police>| p.map_or_else(|| "off".to_string(), |p| p.to_string());
    format!(
        " police_ab={} police_ba={}",
        key(opts.police_ab),
        key(opts.police_ba)
    )
}

/// Runs the delay line until SIGINT/SIGTERM (Ok) or a socket error (Err).
pub fn run(opts: Opts) -> anyhow::Result<()> {
    let t_start = timing::now_ns();
    if opts.iface_a == opts.iface_b {
        return Err(DelaylineError::SameInterface(opts.iface_a.clone()).into());
    }
    if opts.early() > opts.window_us {
        anyhow::bail!(
            "--early-us {} is larger than --window-us {}; allowed 0 to the window",
            opts.early().as_micros(),
            opts.window_us.as_micros()
        );
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

    // A bucket smaller than a full-size frame of its egress would drop every such frame.
    for (flag, police, egress) in [
        ("--police-ab", opts.police_ab, &b),
        ("--police-ba", opts.police_ba, &a),
    ] {
        if let Some(p) = police {
            let frame = frame::max_frame_bytes(egress.mtu) as u64;
            if p.burst_bytes < frame {
                anyhow::bail!(
                    "{flag} {p}: a burst of {} bytes cannot pass a full-size frame of {} ({} bytes, MTU {}); \
                     give a burst of at least {frame} bytes",
                    p.burst_bytes, egress.name, frame, egress.mtu
                );
            }
        }
    }
    let (delay_ab, delay_ba) = (opts.delay_ab(), opts.delay_ba());
    let limit = opts.limit as usize;
    let sigset = block_stop_signals();

    let schedule = Schedule {
        window: opts.window_us,
        early: opts.early(),
        frames_per_wake: opts.frames_per_wake,
        spin: opts.spin_us,
    };
    let mut engine = Engine {
        sides: [
            Side::new(
                "a->b",
                rx_a,
                tx_b,
                delay_ab,
                frame::max_frame_bytes(b.mtu),
                limit,
            )?
            .policed(opts.police_ab),
            Side::new(
                "b->a",
                rx_b,
                tx_a,
                delay_ba,
                frame::max_frame_bytes(a.mtu),
                limit,
            )?
            .policed(opts.police_ba),
        ],
        schedule,
        wakes: Default::default(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, rt) = (stop.clone(), opts.rt_priority);
    let worker = std::thread::Builder::new()
        .name("bridge".into())
        .spawn(move || {
            if let Err(e) = timing::set_realtime(rt) {
                eprintln!(
                    "delayline: warning: SCHED_FIFO priority {rt} refused ({e}); \
                     using the normal scheduler (releases may be late on a busy host)"
                );
            }
            let res = engine.run(&stop2);
            (engine, res)
        })
        .context("spawning the bridge thread")?;
    eprintln!(
        "delayline ready a={} b={} delay_ab_ms={} delay_ba_ms={} limit={} spin_us={} rt_priority={} rx_timestamps={} engine=batched window_us={} early_us={} frames_per_wake={}{}",
        a.name,
        b.name,
        ms(delay_ab),
        ms(delay_ba),
        opts.limit,
        opts.spin_us.as_micros(),
        opts.rt_priority,
        rx_timestamps,
        schedule.window.as_micros(),
        schedule.early.as_micros(),
        schedule.frames_per_wake,
        police_ready(&opts)
    );

    let mut signal = None;
    while signal.is_none() && !worker.is_finished() {
        signal = wait_signal(&sigset, POLL);
    }
    stop.store(true, Ordering::SeqCst);
    let (engine, res) = worker
        .join()
        .map_err(|_| anyhow::anyhow!("the bridge thread panicked"))?;
    let (cpu_user_s, cpu_sys_s) = stats::process_cpu_s();
    let [ab, ba] = &engine.sides;
    let dir_report = |s: &Side, i: &Iface, o: &Iface, d: Duration| {
        DirReport::from_counters(
            &i.name,
            &o.name,
            ms(d),
            &s.counters,
            s.queued() as u64,
            &s.late,
            &s.age,
        )
        .with_earliness(&s.early)
        .with_police(s.police.as_ref())
    };
    let report = Report {
        format: "delayline-stats",
        format_version: 2,
        limit: opts.limit,
        spin_us: opts.spin_us.as_micros() as u64,
        rt_priority: opts.rt_priority,
        engine: "batched",
        window_us: schedule.window.as_micros() as u64,
        early_us: schedule.early.as_micros() as u64,
        frames_per_wake: schedule.frames_per_wake,
        version: env!("CARGO_PKG_VERSION"),
        wakes: engine.wakes.into(),
        a_to_b: dir_report(ab, &a, &b, delay_ab),
        b_to_a: dir_report(ba, &b, &a, delay_ba),
        rx_timestamps,
        cpu_user_s,
        cpu_sys_s,
        cpu_s: cpu_user_s + cpu_sys_s,
        wall_s: timing::now_ns().saturating_sub(t_start) as f64 / 1e9,
    };
    eprintln!("{}", report.line());
    eprintln!("{}", report.usage_line());
    res.context("the bridge failed")?;
    if signal.is_none() {
        anyhow::bail!("the bridge thread ended without a stop signal");
    }
    if let Some(path) = &opts.stats_json {
        stats::write_json_atomic(path, &report)
            .with_context(|| format!("writing --stats-json {path:?}"))?;
    }
    Ok(())
}
