//! `stallinject [--duty 0.015] [--short 300us..2ms] [--long 5ms..25ms] [--long-fraction 0.1]
//! [--cpus all] [--priority 99] [--seed N] [--duration S] [--parent-pid PID]`: a noisy host
//! on demand (README.md). It ends with its parent (PR_SET_PDEATHSIG), on SIGTERM or SIGINT,
//! or after --duration.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;

use clap::Parser;
use hostprobe::inject::{run_thread, Params, Rng, Tally};
use hostprobe::{sys, units};

/// Real-time threads, one per chosen CPU, that take the CPU away in bursts (busy spins at
/// SCHED_FIFO, above every trial thread) with random gaps between, as a hypervisor's steal
/// does. Defaults: issue 57's noisy host.
#[derive(Parser, Debug)]
#[command(name = "stallinject", version, about)]
struct Opts {
    /// The fraction of each CPU the bursts take, in (0, 0.5].
    #[arg(long, default_value = "0.015")]
    duty: f64,
    /// Short bursts' lengths, uniform in LO..HI (each at most 100ms).
    #[arg(long, value_name = "LO..HI", default_value = "300us..2ms", value_parser = units::parse_range_ns)]
    short: (i64, i64),
    /// Long bursts' lengths, uniform in LO..HI (each at most 100ms).
    #[arg(long, value_name = "LO..HI", default_value = "5ms..25ms", value_parser = units::parse_range_ns)]
    long: (i64, i64),
    /// The probability that a burst is long (0 to 1).
    #[arg(long, default_value = "0.1")]
    long_fraction: f64,
    /// The CPUs to steal from: all (every allowed one) or a list such as 0,1.
    #[arg(long, default_value = "all")]
    cpus: String,
    /// SCHED_FIFO priority of the bursts (1-99; trial threads use 10 and below).
    #[arg(long, default_value = "99", value_parser = clap::value_parser!(i32).range(1..=99))]
    priority: i32,
    /// The seed of the bursts (each CPU's thread has its own stream of it); default: from the
    /// clock, printed in the ready line.
    #[arg(long)]
    seed: Option<u64>,
    /// End after S seconds (default: run until SIGTERM, SIGINT or the parent's end).
    #[arg(long, value_name = "S", value_parser = parse_duration_s)]
    duration: Option<f64>,
    /// The process that started us: exit at once if it is no longer our parent (it died
    /// before the death signal was armed).
    #[arg(long, value_name = "PID")]
    parent_pid: Option<i32>,
}

fn parse_duration_s(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 7.0 * 86400.0 => Ok(v),
        _ => Err(format!(
            "--duration must be > 0 and at most a week, in s, got {s:?}"
        )),
    }
}

/// SIGKILL when the parent ends; armed before anything else.
fn die_with_parent() -> i32 {
    // SAFETY: plain syscalls.
    unsafe {
        let before = libc::getppid();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        before
    }
}

fn term_signals() -> libc::sigset_t {
    // SAFETY: a sigset_t filled by sigemptyset/sigaddset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Waits for SIGTERM/SIGINT (blocked in every thread) or until `deadline_ns`; also returns
/// when the parent is gone (PR_SET_PDEATHSIG should have killed us; belt and braces).
fn wait_for_end(set: &libc::sigset_t, deadline_ns: Option<i64>, ppid: i32) -> String {
    loop {
        let now = sys::mono_ns();
        let left = deadline_ns.map_or(1_000_000_000, |d| (d - now).min(1_000_000_000));
        if left <= 0 {
            return "duration".into();
        }
        let ts = libc::timespec {
            tv_sec: left / 1_000_000_000,
            tv_nsec: left % 1_000_000_000,
        };
        // SAFETY: valid pointers to locals.
        let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
        if sig == libc::SIGTERM {
            return "SIGTERM".into();
        }
        if sig == libc::SIGINT {
            return "SIGINT".into();
        }
        // SAFETY: plain syscall.
        if unsafe { libc::getppid() } != ppid {
            return "parent gone".into();
        }
    }
}

fn main() -> ExitCode {
    let ppid = die_with_parent();
    let o = Opts::parse();
    // SAFETY: plain syscall.
    let now_ppid = unsafe { libc::getppid() };
    if now_ppid != ppid || o.parent_pid.is_some_and(|p| p != now_ppid) {
        eprintln!("stallinject: the parent process is gone; exiting");
        return ExitCode::from(1);
    }
    // Parented by init (pid 1), or by a process outside our PID namespace (pid 0): the parent
    // may have died before the death signal was armed (it would then never end: 2026-12-02, an
    // injector ran orphaned for 2.5 h), or init started us. A subreaper's orphan is not seen.
    if now_ppid <= 1 && o.duration.is_none() {
        eprintln!(
            "stallinject: the parent process is gone, or is init or outside this PID namespace \
             (parent pid {now_ppid}): nothing would end us; give --duration S"
        );
        return ExitCode::from(1);
    }
    let p = Params {
        duty: o.duty,
        short_ns: o.short,
        long_ns: o.long,
        long_fraction: o.long_fraction,
    };
    if let Err(e) = p.validate() {
        eprintln!("stallinject: {e}");
        return ExitCode::from(2);
    }
    let allowed = sys::allowed_cpus().unwrap_or_default();
    let cpus = match units::parse_cpus(&o.cpus, &allowed) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            eprintln!("stallinject: no CPU to run on");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("stallinject: {e}");
            return ExitCode::from(2);
        }
    };
    let fifo = match sys::fifo_allowed(o.priority) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "stallinject: warning: SCHED_FIFO {} refused ({e}): the bursts run at normal \
                 priority and will not take the CPU from real-time threads",
                o.priority
            );
            false
        }
    };
    let seed = o.seed.unwrap_or_else(|| {
        (sys::clock_ns(libc::CLOCK_REALTIME) as u64) ^ (std::process::id() as u64) << 32
    });
    let set = term_signals();
    // SAFETY: blocks the two signals in this thread, and so in every thread spawned below.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let handles: Vec<thread::JoinHandle<Tally>> = cpus
        .iter()
        .enumerate()
        .map(|(i, &cpu)| {
            let (stop, ready) = (stop.clone(), ready_tx.clone());
            let prio = o.priority;
            thread::spawn(move || {
                let r = sys::pin_to(cpu)
                    .map_err(|e| format!("pinning to CPU {cpu}: {e}"))
                    .and_then(|_| {
                        if fifo {
                            sys::set_fifo(prio).map_err(|e| format!("SCHED_FIFO {prio}: {e}"))
                        } else {
                            Ok(())
                        }
                    });
                let ok = r.is_ok();
                let _ = ready.send(r);
                drop(ready);
                if !ok {
                    return Tally {
                        cpu,
                        ..Tally::default()
                    };
                }
                run_thread(cpu, &p, Rng::stream(seed, i as u64), &stop)
            })
        })
        .collect();
    drop(ready_tx);
    let failed: Vec<String> = ready_rx
        .iter()
        .take(cpus.len())
        .filter_map(|r| r.err())
        .collect();
    let why = if failed.is_empty() {
        let cpu_list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        eprintln!(
            "stallinject ready pid={} cpus={} duty={} short={}..{} long={}..{} long_fraction={} \
             priority={} fifo={} seed={} mean_burst_ms={:.3} mean_gap_ms={:.3}",
            std::process::id(),
            cpu_list.join(","),
            p.duty,
            units::fmt_ns(p.short_ns.0),
            units::fmt_ns(p.short_ns.1),
            units::fmt_ns(p.long_ns.0),
            units::fmt_ns(p.long_ns.1),
            p.long_fraction,
            o.priority,
            fifo as u8,
            seed,
            p.mean_burst_ns() / 1e6,
            p.mean_gap_ns() / 1e6
        );
        let deadline = o.duration.map(|s| sys::mono_ns() + (s * 1e9) as i64);
        wait_for_end(&set, deadline, ppid)
    } else {
        for f in &failed {
            eprintln!("stallinject: {f}");
        }
        "error".into()
    };
    stop.store(true, Ordering::Relaxed);
    let tallies: Vec<Tally> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    let stolen: Vec<String> = tallies
        .iter()
        .map(|t| format!("cpu{}:{:.1}", t.cpu, t.stolen_ns as f64 / 1e6))
        .collect();
    eprintln!(
        "stallinject done bursts={} stolen_ms={} longest_ms={:.2} ended_by={why}",
        tallies.iter().map(|t| t.bursts).sum::<u64>(),
        stolen.join(","),
        tallies.iter().map(|t| t.longest_ns).max().unwrap_or(0) as f64 / 1e6
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
