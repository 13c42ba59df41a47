//! `hostprobe --seconds S [--gaps 100us,1ms,5ms,20ms] [--priority 10] [--cpus all] [--json]`:
//! what this host's wake-ups cost and how late they come (README.md).

use std::process::ExitCode;

use clap::Parser;
use hostprobe::{human, probe_host, sys, units};

/// What this host's wake-ups cost and how late they come: timer wake-ups at each gap on every
/// allowed CPU, a two-thread ping-pong on one core and across two, and the hypervisor's steal.
#[derive(Parser, Debug)]
#[command(name = "hostprobe", version, about)]
struct Opts {
    /// The whole measurement's length in s (1 to 600), split across the measurements.
    #[arg(long, value_name = "S", default_value = "20", value_parser = parse_seconds)]
    seconds: f64,
    /// The timer's gaps between deadlines (each 10us to 1s), comma-separated.
    #[arg(long, value_name = "LIST", default_value = "100us,1ms,5ms,20ms", value_parser = parse_gaps)]
    gaps: Gaps,
    /// SCHED_FIFO priority of the measuring threads (1-99; 10 is the delay line's).
    #[arg(long, default_value = "10", value_parser = clap::value_parser!(i32).range(1..=99))]
    priority: i32,
    /// The CPUs measured: all (every allowed one) or a list such as 0,1.
    #[arg(long, default_value = "all")]
    cpus: String,
    /// One JSON document (schema hostprobe/1) on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (1.0..=600.0).contains(&v) => Ok(v),
        _ => Err(format!("--seconds must be 1 to 600, got {s:?}")),
    }
}

/// The timer's gaps in ns, in the order given.
#[derive(Clone, Debug)]
struct Gaps(Vec<i64>);

fn parse_gaps(s: &str) -> Result<Gaps, String> {
    let v = units::parse_duration_list_ns(s).map_err(|e| format!("--gaps: {e}"))?;
    if let Some(g) = v.iter().find(|&&g| !(10_000..=1_000_000_000).contains(&g)) {
        return Err(format!("--gaps: {} is outside 10us..1s", units::fmt_ns(*g)));
    }
    Ok(Gaps(v))
}

fn main() -> ExitCode {
    let o = Opts::parse();
    let gaps = o.gaps.0;
    let allowed = match sys::allowed_cpus() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("hostprobe: sched_getaffinity: {e}");
            return ExitCode::from(1);
        }
    };
    let cpus = match units::parse_cpus(&o.cpus, &allowed) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hostprobe: {e}");
            return ExitCode::from(2);
        }
    };
    let fifo = match sys::fifo_allowed(o.priority) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "hostprobe: SCHED_FIFO {} refused ({e}); measuring at normal priority",
                o.priority
            );
            false
        }
    };
    match probe_host(o.seconds, &gaps, &cpus, o.priority, fifo) {
        Ok(r) if o.json => {
            println!("{}", serde_json::to_string(&r).expect("plain data"));
            ExitCode::SUCCESS
        }
        Ok(r) => {
            print!("{}", human(&r));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hostprobe: {e}");
            ExitCode::from(1)
        }
    }
}
