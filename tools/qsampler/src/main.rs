//! `qsampler --dev DEV --interval S --fifo KIND [--out PATH]`: every S seconds, one JSON line
//! with the FIFO's counters, byte for byte what `python -m latency_divide.testbed.qsampler
//! ... --fifo KIND` writes, until SIGTERM. README.md says why it exists.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use qsampler::netlink::QdiscReader;
use qsampler::{t_unix_ms, FIFO_KINDS};

/// Most seconds between two samples (a typo, e.g. ms for s, is likelier beyond).
const MAX_INTERVAL_S: f64 = 3600.0;

/// The bottleneck FIFO's qdisc statistics over rtnetlink, one JSON line per tick.
#[derive(Parser, Debug)]
#[command(name = "qsampler", version, about)]
struct Opts {
    /// Interface whose qdiscs are sampled (in this network namespace).
    #[arg(long, value_parser = parse_dev)]
    dev: String,
    /// Seconds between samples (0 < S <= 3600).
    #[arg(long, value_name = "S", default_value = "0.1", value_parser = parse_interval)]
    interval: f64,
    /// Output file (JSON lines); - for stdout.
    #[arg(long, default_value = "-")]
    out: String,
    /// The FIFO's kind: only its qdiscs are written, with kind, handle, parent, bytes,
    /// backlog, qlen and drops, time to the ms.
    #[arg(long, value_name = "KIND", value_parser = FIFO_KINDS)]
    fifo: String,
}

fn parse_dev(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() < libc::IFNAMSIZ
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-@".contains(&c));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not an interface name (1-15 of A-Z a-z 0-9 _ . - @)"
        ))
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= MAX_INTERVAL_S => Ok(v),
        _ => Err(format!(
            "--interval must be > 0 and <= {MAX_INTERVAL_S} seconds, got {s:?}"
        )),
    }
}

/// A float as Python's str() prints it where the two differ for an interval: "1.0", not "1".
fn py_float(v: f64) -> String {
    let s = v.to_string();
    if s.contains('.') {
        s
    } else {
        s + ".0"
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGTERM and SIGINT end the loop; without SA_RESTART, so they cut a sleep short.
fn catch_term() {
    // SAFETY: a handler that only stores an atomic; sigaction is plain data.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_term as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in [libc::SIGTERM, libc::SIGINT] {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a local.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Sleeps until `t_ns` (CLOCK_REALTIME, as Python's time.time()); a signal cuts it short.
fn sleep_until(t_ns: i64) {
    let ts = libc::timespec {
        tv_sec: t_ns / 1_000_000_000,
        tv_nsec: t_ns % 1_000_000_000,
    };
    // SAFETY: valid pointer to a local.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_REALTIME,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

fn ifindex(dev: &str) -> io::Result<i32> {
    let c = CString::new(dev).expect("validated: no NUL");
    // SAFETY: a NUL-terminated name.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i as i32),
    }
}

/// Samples DEV: the FIFOs of its kind, the socket and ifindex kept between calls; a failed
/// dump closes the socket (the next call opens another), as the Python sampler does.
struct Sampler {
    dev: String,
    kind: String,
    reader: Option<QdiscReader>,
    ifindex: Option<i32>,
}

impl Sampler {
    fn sample(&mut self) -> io::Result<String> {
        let r = self.try_sample();
        if r.is_err() {
            self.reader = None;
        }
        r
    }

    fn try_sample(&mut self) -> io::Result<String> {
        if self.reader.is_none() {
            self.reader = Some(QdiscReader::open()?);
        }
        let reader = self.reader.as_mut().expect("opened above");
        let idx = match self.ifindex {
            Some(i) => i,
            None => *self.ifindex.insert(ifindex(&self.dev)?),
        };
        let mut found = reader.dump(idx, &self.kind)?;
        if found.is_empty() {
            // the device may have been deleted and created again under another index
            let new = ifindex(&self.dev)?;
            if new != idx {
                self.ifindex = Some(new);
                found = reader.dump(new, &self.kind)?;
            }
        }
        let parts: Vec<String> = found.iter().map(|q| q.to_json()).collect();
        Ok(format!("[{}]", parts.join(",")))
    }
}

fn main() -> ExitCode {
    let o = Opts::parse();
    let mut s = Sampler {
        dev: o.dev.clone(),
        kind: o.fifo.clone(),
        reader: None,
        ifindex: None,
    };
    catch_term();
    // the first sample before the output exists: a bad device leaves no file behind
    if let Err(e) = s.sample() {
        eprintln!("qsampler: cannot read qdiscs of {}: {e}", o.dev);
        return ExitCode::from(2);
    }
    let mut out: Box<dyn Write> = if o.out == "-" {
        Box::new(io::stdout().lock())
    } else {
        match File::create(&o.out) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("qsampler: cannot write {:?}: {e}", o.out);
                return ExitCode::from(2);
            }
        }
    };
    eprintln!(
        "qsampler ready dev={} interval={}",
        o.dev,
        py_float(o.interval)
    );
    let interval = (o.interval * 1e9).round() as i64;
    let (mut n, mut skipped) = (0u64, 0i64);
    let mut next = now_ns();
    while !STOP.load(Ordering::Relaxed) {
        let now = now_ns();
        if now < next {
            sleep_until(next);
            continue;
        }
        if now - next > interval {
            // more than one tick behind: skip (and count) the missed ones, never bunch them
            let late = (now - next) / interval;
            skipped += late;
            next += late * interval;
        }
        let t = now_ns();
        let q = s.sample().unwrap_or_else(|e| {
            eprintln!("qsampler: sample failed: {e}");
            "null".into()
        });
        let line = format!(
            "{{\"t_unix\":{},\"dev\":\"{}\",\"qdisc\":{q}}}\n",
            t_unix_ms(t),
            o.dev
        );
        if let Err(e) = out.write_all(line.as_bytes()).and_then(|_| out.flush()) {
            eprintln!("qsampler: cannot write a sample: {e}");
            return ExitCode::from(1);
        }
        n += 1;
        next += interval;
    }
    eprintln!("qsampler stats samples={n} skipped={skipped}");
    ExitCode::SUCCESS
}
