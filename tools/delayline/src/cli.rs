//! Command line: `delayline --iface-a IF --iface-b IF --delay-ms MS [...]`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// Largest one-way delay accepted (ms). Beyond this a frame would sit in memory for
/// longer than any experiment here needs, and a typo (e.g. seconds for ms) is likelier.
pub const MAX_DELAY_MS: f64 = 10_000.0;
/// Largest spin window accepted (µs).
pub const MAX_SPIN_US: u64 = 10_000;
/// Largest release window accepted (µs): beyond a millisecond the error it allows would
/// exceed the emulation-health bound on release lateness.
pub const MAX_WINDOW_US: u64 = 1_000;
/// The default release window (µs), chosen by bench/bench_delayline_window.py (README).
pub const DEFAULT_WINDOW_US: &str = "200";

/// Userspace delay line: bridges two interfaces with AF_PACKET sockets and holds each
/// frame for a fixed one-way delay per direction (a netem `delay` stand-in for kernels
/// without sch_netem).
#[derive(Parser, Debug, Clone)]
#[command(name = "delayline", version, about)]
pub struct Opts {
    /// First interface (frames received here go out of --iface-b after the a->b delay).
    #[arg(long, value_parser = parse_iface)]
    pub iface_a: String,

    /// Second interface (frames received here go out of --iface-a after the b->a delay).
    #[arg(long, value_parser = parse_iface)]
    pub iface_b: String,

    /// One-way delay in milliseconds for both directions (fractions allowed, 0..=10000).
    #[arg(long, value_name = "MS", value_parser = parse_delay_ms, allow_hyphen_values = true,
          required_unless_present_all = ["delay_ab_ms", "delay_ba_ms"])]
    pub delay_ms: Option<Duration>,

    /// One-way delay a->b in milliseconds; overrides --delay-ms for that direction.
    #[arg(long, value_name = "MS", value_parser = parse_delay_ms, allow_hyphen_values = true)]
    pub delay_ab_ms: Option<Duration>,

    /// One-way delay b->a in milliseconds; overrides --delay-ms for that direction.
    #[arg(long, value_name = "MS", value_parser = parse_delay_ms, allow_hyphen_values = true)]
    pub delay_ba_ms: Option<Duration>,

    /// Most frames held per direction; frames arriving at a full queue are dropped and
    /// counted (like netem's `limit`).
    #[arg(long, value_name = "N", default_value_t = 50_000,
          value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub limit: u32,

    /// Write the final counters as JSON to this file on exit (written atomically).
    #[arg(long, value_name = "PATH")]
    pub stats_json: Option<PathBuf>,

    /// Start even if TSO/GSO/GRO/tx checksum offload is on (frames may then be oversize
    /// or carry no checksum).
    #[arg(long)]
    pub allow_offload: bool,

    /// Busy-wait this many microseconds before each release time instead of sleeping
    /// (0..=10000); trades CPU for timer wake-up jitter. Default 0: with many delay lines
    /// on a small host the spin costs CPU and gains only tens of microseconds
    /// (bench/bench_delayline_spin.py).
    #[arg(long, value_name = "US", default_value = "0", value_parser = parse_spin_us)]
    pub spin_us: Duration,

    /// Release window (0..=1000 µs): the bridge wakes to send frames at most once per
    /// window, sending every frame due by then; 0 sends each frame at its own release time.
    /// Fewer wake-ups cost less CPU; each frame may leave up to the window minus --early-us
    /// late.
    /// Also read from the environment variable DELAYLINE_WINDOW_US (so a bench or a
    /// user can try another window without changing a trial's definition; the window used
    /// is in the ready and usage lines and the stats JSON).
    #[arg(long, value_name = "US", default_value = DEFAULT_WINDOW_US, env = "DELAYLINE_WINDOW_US",
          value_parser = parse_window_us)]
    pub window_us: Duration,

    /// How early (µs) a frame may leave beside a frame that is due, so that releases of
    /// a window share one wake-up (default: half the window, so the error is symmetric and
    /// the mean delay exact; at most the window). A lone frame always leaves on time.
    #[arg(long, value_name = "US", env = "DELAYLINE_EARLY_US", value_parser = parse_window_us)]
    pub early_us: Option<Duration>,

    /// Frames one wake-up should release (0..=64, default 1): the window in force is the
    /// time this many frames take at the rate the line forwards, at most --window-us, so a
    /// fast line's release error stays within about one frame time (a wider window bends
    /// delay-based senders: README, "Release window"); 0 = always --window-us. Also read
    /// from DELAYLINE_FRAMES_PER_WAKE.
    #[arg(long, value_name = "N", default_value_t = 1, env = "DELAYLINE_FRAMES_PER_WAKE",
          value_parser = clap::value_parser!(u32).range(0..=64))]
    pub frames_per_wake: u32,

    /// Police a->b with a token bucket: RATE_BPS:BURST_BYTES (bit/s, bytes; e.g.
    /// 2000000:15140). Frames that find the bucket short of tokens are dropped and counted
    /// (`police` in the stats), never queued; the bucket refills from each frame's receive
    /// time, so the policer adds no wake-up. The bucket must hold a full-size frame of the
    /// egress interface.
    #[arg(long, value_name = "RATE_BPS:BURST_BYTES", value_parser = crate::police::parse_police)]
    pub police_ab: Option<crate::police::Police>,

    /// Police b->a (as --police-ab).
    #[arg(long, value_name = "RATE_BPS:BURST_BYTES", value_parser = crate::police::parse_police)]
    pub police_ba: Option<crate::police::Police>,

    /// SCHED_FIFO priority of the bridge threads (1..=99), so other busy processes on the
    /// host do not delay releases; 0 keeps the normal scheduler. If the kernel refuses,
    /// delayline warns and runs with the normal scheduler.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u8).range(0..=99))]
    pub rt_priority: u8,
}

impl Opts {
    /// Delay a->b: --delay-ab-ms, else --delay-ms.
    pub fn delay_ab(&self) -> Duration {
        self.delay_ab_ms.or(self.delay_ms).unwrap_or_default()
    }

    /// How early a frame may leave: --early-us, else half of --window-us.
    pub fn early(&self) -> Duration {
        self.early_us.unwrap_or(self.window_us / 2)
    }

    /// Delay b->a: --delay-ba-ms, else --delay-ms.
    pub fn delay_ba(&self) -> Duration {
        self.delay_ba_ms.or(self.delay_ms).unwrap_or_default()
    }
}

/// Linux interface names: 1..=15 bytes, not "." or "..", no '/', ':' or whitespace.
pub fn parse_iface(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 15 {
        return Err(format!(
            "interface name {s:?} must be 1 to 15 bytes long (got {})",
            s.len()
        ));
    }
    if s == "." || s == ".." {
        return Err(format!("interface name {s:?} is not allowed"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "interface name {s:?} contains {c:?}; '/', ':', whitespace and control characters are not allowed"
        ));
    }
    Ok(s.to_string())
}

/// A delay in milliseconds (decimal, e.g. `12.5`), 0..=10000, to nanosecond precision.
pub fn parse_delay_ms(s: &str) -> Result<Duration, String> {
    let ms: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("delay {s:?} is not a number of milliseconds (e.g. 12.5)"))?;
    if !ms.is_finite() || !(0.0..=MAX_DELAY_MS).contains(&ms) {
        return Err(format!(
            "delay {s:?} ms is out of range; allowed 0 to {MAX_DELAY_MS} ms"
        ));
    }
    Ok(Duration::from_nanos((ms * 1e6).round() as u64))
}

/// Whole microseconds, 0..=`max`; `what` names the option in the message.
fn parse_us(s: &str, what: &str, max: u64) -> Result<Duration, String> {
    let us: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{what} {s:?} is not a whole number of microseconds"))?;
    if us > max {
        return Err(format!(
            "{what} {us} us is out of range; allowed 0 to {max} us"
        ));
    }
    Ok(Duration::from_micros(us))
}

/// A release window (or early allowance) in whole microseconds, 0..=1000.
pub fn parse_window_us(s: &str) -> Result<Duration, String> {
    parse_us(s, "window", MAX_WINDOW_US)
}

/// A spin window in whole microseconds, 0..=10000.
pub fn parse_spin_us(s: &str) -> Result<Duration, String> {
    parse_us(s, "spin", MAX_SPIN_US)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Opts, clap::Error> {
        Opts::try_parse_from(std::iter::once("delayline").chain(args.iter().copied()))
    }

    #[test]
    fn delay_ms_sets_both_and_overrides_win() {
        let o = parse(&["--iface-a", "x", "--iface-b", "y", "--delay-ms", "10"]).unwrap();
        assert_eq!(o.delay_ab(), Duration::from_millis(10));
        assert_eq!(o.delay_ba(), Duration::from_millis(10));
        assert_eq!(o.limit, 50_000);
        assert_eq!(o.spin_us, Duration::ZERO, "no spin by default");
        assert_eq!(o.rt_priority, 10);
        let o = parse(&[
            "--iface-a",
            "x",
            "--iface-b",
            "y",
            "--delay-ms",
            "10",
            "--delay-ba-ms",
            "2.5",
        ])
        .unwrap();
        assert_eq!(o.delay_ab(), Duration::from_millis(10));
        assert_eq!(o.delay_ba(), Duration::from_micros(2500));
    }

    #[test]
    fn delay_ms_optional_only_when_both_directions_given() {
        assert!(parse(&["--iface-a", "x", "--iface-b", "y", "--delay-ab-ms", "1"]).is_err());
        let o = parse(&[
            "--iface-a",
            "x",
            "--iface-b",
            "y",
            "--delay-ab-ms",
            "1",
            "--delay-ba-ms",
            "3",
        ])
        .unwrap();
        assert_eq!(o.delay_ab(), Duration::from_millis(1));
        assert_eq!(o.delay_ba(), Duration::from_millis(3));
    }

    #[test]
    fn policers_are_off_by_default_and_per_direction() {
        let o = parse(&["--iface-a", "x", "--iface-b", "y", "--delay-ms", "1"]).unwrap();
        assert_eq!((o.police_ab, o.police_ba), (None, None));
        let o = parse(&[
            "--iface-a",
            "x",
            "--iface-b",
            "y",
            "--delay-ms",
            "1",
            "--police-ba",
            "1000000:15140",
        ])
        .unwrap();
        assert_eq!(o.police_ab, None);
        assert_eq!(o.police_ba.unwrap().to_string(), "1000000:15140");
        let e = parse(&[
            "--iface-a",
            "x",
            "--iface-b",
            "y",
            "--delay-ms",
            "1",
            "--police-ab",
            "0:1500",
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("rate 0 bit/s is out of range"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse_delay_ms("-1").unwrap_err();
        assert!(e.contains("\"-1\"") && e.contains("0 to"), "{e}");
        assert!(parse_delay_ms("nan").is_err());
        let e = parse(&["--iface-a", "x", "--iface-b", "y", "--delay-ms", "-3"]).unwrap_err();
        assert!(e.to_string().contains("\"-3\" ms is out of range"), "{e}");
        assert!(parse_delay_ms("10001").is_err());
        assert!(parse_delay_ms("10ms").unwrap_err().contains("10ms"));
        assert_eq!(parse_delay_ms("0.001").unwrap(), Duration::from_micros(1));
        assert!(parse_iface("").is_err());
        assert!(parse_iface("sixteen-chars-xx").is_err());
        assert!(parse_iface("a/b").unwrap_err().contains("'/'"));
        assert!(parse_iface("a b").is_err());
        assert_eq!(parse_iface("ld1a2b3cda").unwrap(), "ld1a2b3cda");
        assert!(parse(&[
            "--iface-a",
            "x",
            "--iface-b",
            "y",
            "--delay-ms",
            "1",
            "--limit",
            "0"
        ])
        .is_err());
        assert!(parse_spin_us("10001").is_err());
        assert_eq!(parse_spin_us("0").unwrap(), Duration::ZERO);
        assert!(parse(&[
            "--iface-a",
            "x",
            "--iface-b",
            "y",
            "--delay-ms",
            "1",
            "--rt-priority",
            "100"
        ])
        .is_err());
    }
}
