//! Command line: mvfst `tperf`'s flags (gflags style) plus our additions.
//!
//! gflags accepts `-flag value`, `-flag=value`, `--flag value`, `--flag=value`, and for
//! booleans `-flag`, `-flag=false` and `-noflag`. clap only knows `--flag`, so
//! [`normalize_gflags`] rewrites single-dash long flags before clap parses them.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

use crate::abr::AbrKind;
use crate::udp::{BatchOpts, Refuse, Toggle};

/// Boolean flags, for the `-noflag` spelling.
const BOOL_FLAGS: &[&str] = &["once", "pacing", "mmsg", "gso", "gro"];

#[derive(Parser, Debug, Clone)]
#[command(
    name = "tquic-perf",
    version,
    about = "tperf-compatible QUIC bulk transfer on tquic: the server sends, the client reads",
    allow_negative_numbers = true,
    // gflags: a repeated flag is allowed, the last one wins.
    args_override_self = true
)]
pub struct Opts {
    /// Role: `server` sends bulk data to every client; `client` reads and reports.
    #[arg(long, value_enum, default_value_t = Mode::Server)]
    pub mode: Mode,

    /// Server: address to listen on. Client: server to connect to (name or address).
    #[arg(long, default_value = "::1")]
    pub host: String,

    /// UDP port.
    #[arg(long, default_value_t = 6666)]
    pub port: u16,

    /// Client: seconds to read after the first stream byte (> 0).
    #[arg(long, default_value = "10", value_parser = parse_duration_s)]
    pub duration: f64,

    /// Sender's congestion control: cubic, copa, bbr, bbr3.
    #[arg(long, default_value = "cubic", value_parser = parse_congestion)]
    pub congestion: Congestion,

    /// Copa's latency factor δ, in (0, 1] (sender side).
    #[arg(long = "latency_factor", default_value = "0.5", value_parser = parse_latency_factor)]
    pub latency_factor: f64,

    /// Receiver flow-control window in bytes, per stream and per connection
    /// (tperf's 2021 default: 65536).
    #[arg(long, default_value = "65536", value_parser = parse_window)]
    pub window: u64,

    /// Pace the sender (tperf: off by default).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = parse_gflags_bool)]
    pub pacing: bool,

    /// Bytes handed to the QUIC stream per write call (sender side).
    #[arg(long = "block_size", default_value = "65536", value_parser = parse_block_size)]
    pub block_size: usize,

    /// Client: print one `interval` line every this many ms (0: none).
    #[arg(long = "interval_ms", default_value_t = 100)]
    pub interval_ms: u64,

    /// Write a JSON summary to this path (atomically: temp file, then rename).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Server: exit after the first connection has closed.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = parse_gflags_bool)]
    pub once: bool,

    /// Server: certificate (PEM). Default: a self-signed one made at startup.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,

    /// Server: private key (PEM) for `-cert`.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,

    /// Idle and handshake timeout in ms: a silent peer ends the connection after this.
    #[arg(long = "idle_timeout_ms", default_value = "5000", value_parser = parse_idle_timeout_ms)]
    pub idle_timeout_ms: u64,

    /// UDP GSO on send: several packets per message, cut into datagrams by the kernel.
    /// auto: where the kernel accepts it; on: required (a refusal is an error); off: never.
    /// gflags booleans are accepted too (`-gso=false`, `-nogso`: off; `-gso`: on).
    #[arg(long, default_value = "auto", num_args = 0..=1, default_missing_value = "on",
          value_parser = parse_toggle)]
    pub gso: Toggle,

    /// UDP GRO on receive (setsockopt UDP_GRO): auto, on or off, as `-gso`.
    #[arg(long, default_value = "auto", num_args = 0..=1, default_missing_value = "on",
          value_parser = parse_toggle)]
    pub gro: Toggle,

    /// sendmmsg/recvmmsg: a batch of datagrams per syscall (false: one per syscall; with
    /// `-gso off -gro off` that is the tool before batching).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_value = "true",
          default_missing_value = "true", value_parser = parse_gflags_bool)]
    pub mmsg: bool,

    /// Tests only: make the kernel refuse `gso`, `gro`, `mmsg` (comma-separated), so the
    /// fallbacks run (see udp::Refuse).
    #[arg(long = "test_refuse", hide = true, default_value = "", value_parser = parse_refuse)]
    pub test_refuse: Refuse,

    /// What the sender sends: `bulk` (tperf's transfer, the default) or `live` (an encoder
    /// model with an ABR; README.md, "Live mode"). Give both ends the same value.
    #[arg(long, default_value = "bulk", value_parser = parse_app)]
    pub app: App,

    /// Live: the ABR, `backlog` (OBS Studio's dynamic bitrate) or `rate` (Chromium Cast's).
    #[arg(long, default_value = "backlog", value_parser = parse_abr)]
    pub abr: AbrKind,

    /// Live: frames per second, in [1, 120].
    #[arg(long, default_value = "30", value_parser = parse_fps)]
    pub fps: u32,

    /// Live: seconds between key frames (the GOP), in (0, 60].
    #[arg(long = "gop_s", default_value = "2", value_parser = parse_gop_s)]
    pub gop_s: f64,

    /// Live: a key frame's size over a delta frame's, in [1, 50].
    #[arg(long = "keyframe_ratio", default_value = "5", value_parser = parse_keyframe_ratio)]
    pub keyframe_ratio: f64,

    /// Live: frame sizes vary uniformly by +- this fraction of their mean, in [0, 0.9].
    #[arg(long = "frame_jitter", default_value = "0.1", value_parser = parse_frame_jitter)]
    pub frame_jitter: f64,

    /// Live: a delta frame still waiting in the sender's queue this long after its capture
    /// is dropped (with the rest of its GOP); also the rate ABR's latency budget.
    #[arg(long = "frame_deadline_ms", default_value = "700", value_parser = parse_frame_deadline_ms)]
    pub frame_deadline_ms: u64,

    /// Live: the sender sends a ping pair (on its own stream, and in-band) this often;
    /// 0: none. In {0} or [10, 60000].
    #[arg(long = "ping_interval_ms", default_value = "1000", value_parser = parse_ping_interval_ms)]
    pub ping_interval_ms: u64,

    /// Live: a frame due while the sender sleeps is made at its next wake-up (for ACKs or
    /// tquic's timers), stamped with its capture time; the sender wakes for it by its
    /// capture time plus this many ms at the latest. 0: a wake-up at every capture time.
    /// In [0, 10].
    #[arg(long = "frame_slack_ms", default_value = "4", value_parser = parse_frame_slack_ms)]
    pub frame_slack_ms: u64,

    /// Live: the seed of the frame-size jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Whether `-congestion` was given on the command line (not a clap argument). The
    /// client records its congestion flags only if given: the sender decides.
    #[arg(skip)]
    pub congestion_given: bool,
}

impl Opts {
    /// The congestion control this process can vouch for: the server's always, the
    /// client's only if it was told.
    pub fn reported_cc(&self) -> Option<Congestion> {
        (self.mode == Mode::Server || self.congestion_given).then_some(self.congestion)
    }

    /// How the socket may batch.
    pub fn batch_opts(&self) -> BatchOpts {
        BatchOpts {
            gso: self.gso,
            gro: self.gro,
            mmsg: self.mmsg,
            refuse: self.test_refuse,
        }
    }

    /// δ as far as it applies: only with Copa.
    pub fn reported_latency_factor(&self) -> Option<f64> {
        (self.reported_cc() == Some(Congestion::Copa)).then_some(self.latency_factor)
    }
}

/// What the sender sends (`-app`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum App {
    Bulk,
    Live,
}

impl App {
    pub fn name(self) -> &'static str {
        match self {
            App::Bulk => "bulk",
            App::Live => "live",
        }
    }
}

pub fn parse_app(s: &str) -> Result<App, String> {
    match s {
        "bulk" => Ok(App::Bulk),
        "live" => Ok(App::Live),
        _ => Err(format!("unknown app '{s}'; allowed: bulk, live")),
    }
}

pub fn parse_abr(s: &str) -> Result<AbrKind, String> {
    AbrKind::ALL
        .into_iter()
        .find(|a| a.name() == s)
        .ok_or_else(|| format!("unknown abr '{s}'; allowed: backlog, rate"))
}

/// A number in `[lo, hi]`, or an error naming the flag, the value and the range.
fn ranged<T: std::str::FromStr + PartialOrd + fmt::Display + Copy>(
    flag: &str,
    s: &str,
    lo: T,
    hi: T,
) -> Result<T, String> {
    let v: T = s
        .parse()
        .map_err(|_| format!("{flag} '{s}' is not a number; allowed: [{lo}, {hi}]"))?;
    // `!(..)` so that NaN is refused too.
    if !(v >= lo && v <= hi) {
        return Err(format!("{flag} {s} is not in [{lo}, {hi}]"));
    }
    Ok(v)
}

pub fn parse_fps(s: &str) -> Result<u32, String> {
    ranged("fps", s, 1, 120)
}

pub fn parse_gop_s(s: &str) -> Result<f64, String> {
    let v = ranged("gop_s", s, 0.0, 60.0)?;
    if v == 0.0 {
        return Err(format!("gop_s {s} is not in (0, 60]"));
    }
    Ok(v)
}

pub fn parse_keyframe_ratio(s: &str) -> Result<f64, String> {
    ranged("keyframe_ratio", s, 1.0, 50.0)
}

pub fn parse_frame_jitter(s: &str) -> Result<f64, String> {
    ranged("frame_jitter", s, 0.0, 0.9)
}

pub fn parse_frame_deadline_ms(s: &str) -> Result<u64, String> {
    ranged("frame_deadline_ms", s, 50, 60_000)
}

pub fn parse_frame_slack_ms(s: &str) -> Result<u64, String> {
    ranged("frame_slack_ms", s, 0, 10)
}

pub fn parse_ping_interval_ms(s: &str) -> Result<u64, String> {
    if s == "0" {
        return Ok(0);
    }
    ranged("ping_interval_ms", s, 10, 60_000).map_err(|e| format!("{e} (or 0 for no pings)"))
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Server,
    Client,
}

/// Congestion controls this tool offers (tquic's, named as in tperf where both exist).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Congestion {
    Cubic,
    Copa,
    Bbr,
    Bbr3,
}

impl Congestion {
    pub const ALL: [Congestion; 4] = [
        Congestion::Cubic,
        Congestion::Copa,
        Congestion::Bbr,
        Congestion::Bbr3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Congestion::Cubic => "cubic",
            Congestion::Copa => "copa",
            Congestion::Bbr => "bbr",
            Congestion::Bbr3 => "bbr3",
        }
    }

    pub fn to_tquic(self) -> tquic::CongestionControlAlgorithm {
        match self {
            Congestion::Cubic => tquic::CongestionControlAlgorithm::Cubic,
            Congestion::Copa => tquic::CongestionControlAlgorithm::Copa,
            Congestion::Bbr => tquic::CongestionControlAlgorithm::Bbr,
            Congestion::Bbr3 => tquic::CongestionControlAlgorithm::Bbr3,
        }
    }
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn allowed_cc() -> String {
    Congestion::ALL
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn parse_congestion(s: &str) -> Result<Congestion, String> {
    Congestion::ALL
        .into_iter()
        .find(|c| c.name() == s)
        .ok_or_else(|| {
            format!(
                "unknown congestion control '{s}'; allowed: {}",
                allowed_cc()
            )
        })
}

pub fn parse_latency_factor(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number; latency_factor must be in (0, 1]"))?;
    if v.is_finite() && v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("latency_factor {s} is outside (0, 1]"))
    }
}

pub fn parse_duration_s(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds; duration must be > 0"))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err(format!("duration {s} s is not in (0, 86400]"))
    }
}

pub fn parse_window(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a byte count; window must be an integer >= 1200"))?;
    // One full-size packet must fit; QUIC varints stop at 2^62 - 1.
    if (1200..=(1u64 << 40)).contains(&v) {
        Ok(v)
    } else {
        Err(format!("window {v} bytes is not in [1200, 2^40]"))
    }
}

pub fn parse_block_size(s: &str) -> Result<usize, String> {
    let v: usize = s
        .parse()
        .map_err(|_| format!("'{s}' is not a byte count; block_size must be in [1, 16777216]"))?;
    if (1..=16 * 1024 * 1024).contains(&v) {
        Ok(v)
    } else {
        Err(format!("block_size {v} bytes is not in [1, 16777216]"))
    }
}

pub fn parse_idle_timeout_ms(s: &str) -> Result<u64, String> {
    let v: u64 = s.parse().map_err(|_| {
        format!("'{s}' is not a number of ms; idle_timeout_ms must be in [100, 600000]")
    })?;
    if (100..=600_000).contains(&v) {
        Ok(v)
    } else {
        Err(format!("idle_timeout_ms {v} is not in [100, 600000]"))
    }
}

/// `-gso` / `-gro`: auto, on, off, or a gflags boolean (true: on, false: off).
pub fn parse_toggle(s: &str) -> Result<Toggle, String> {
    match s {
        "auto" => Ok(Toggle::Auto),
        "on" => Ok(Toggle::On),
        "off" => Ok(Toggle::Off),
        _ => match parse_gflags_bool(s) {
            Ok(true) => Ok(Toggle::On),
            Ok(false) => Ok(Toggle::Off),
            Err(_) => Err(format!("'{s}' is not auto, on or off")),
        },
    }
}

/// `-test_refuse`: a comma-separated subset of gso, gro, mmsg (empty: none).
pub fn parse_refuse(s: &str) -> Result<Refuse, String> {
    let mut r = Refuse::default();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part {
            "gso" => r.gso = true,
            "gro" => r.gro = true,
            "mmsg" => r.mmsg = true,
            _ => return Err(format!("'{part}' is not gso, gro or mmsg")),
        }
    }
    Ok(r)
}

/// gflags' boolean spellings.
pub fn parse_gflags_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" | "1" | "yes" | "y" | "t" => Ok(true),
        "false" | "0" | "no" | "n" | "f" => Ok(false),
        _ => Err(format!("'{s}' is not a boolean; use true or false")),
    }
}

/// Rewrites gflags-style arguments into clap's: `-flag[=v]` -> `--flag[=v]`,
/// `-noflag`/`--noflag` (boolean flags only) -> `--flag=false`. The program name, values
/// (anything not starting with `-` followed by a letter, e.g. `-0.5`) and everything
/// after `--` pass through unchanged.
pub fn normalize_gflags<I, T>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut out = Vec::new();
    let mut rest_verbatim = false;
    for (i, arg) in args.into_iter().enumerate() {
        let arg: OsString = arg.into();
        if i == 0 || rest_verbatim {
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            rest_verbatim = true;
            out.push(arg);
            continue;
        }
        let body = s.strip_prefix("--").or_else(|| s.strip_prefix('-'));
        let Some(body) = body else {
            out.push(arg);
            continue;
        };
        let starts_alpha = body.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
        // `-h` stays a short flag; `-0.5` stays a value.
        if !starts_alpha || (s.len() == 2 && !s.starts_with("--")) {
            out.push(arg);
            continue;
        }
        let name = body.split('=').next().unwrap_or(body);
        if let Some(flag) = name.strip_prefix("no") {
            if !body.contains('=') && BOOL_FLAGS.contains(&flag) {
                out.push(OsString::from(format!("--{flag}=false")));
                continue;
            }
        }
        out.push(OsString::from(format!("--{body}")));
    }
    out
}

/// Parses a full argv (program name first), gflags style.
pub fn parse_args<I, T>(args: I) -> Result<Opts, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    use clap::{parser::ValueSource, CommandFactory, FromArgMatches};
    let matches = Opts::command().try_get_matches_from(normalize_gflags(args))?;
    let mut opts = Opts::from_arg_matches(&matches)?;
    opts.congestion_given = matches.value_source("congestion") == Some(ValueSource::CommandLine);
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Opts, clap::Error> {
        let mut v = vec!["tquic-perf"];
        v.extend_from_slice(args);
        parse_args(v)
    }

    #[test]
    fn gflags_spellings_are_equivalent() {
        let a = parse(&["-mode", "client", "-port", "5550", "-latency_factor", "0.2"]).unwrap();
        let b = parse(&["-mode=client", "-port=5550", "-latency_factor=0.2"]).unwrap();
        let c = parse(&["--mode", "client", "--port=5550", "--latency_factor", "0.2"]).unwrap();
        for o in [&a, &b, &c] {
            assert_eq!(o.mode, Mode::Client);
            assert_eq!(o.port, 5550);
            assert_eq!(o.latency_factor, 0.2);
        }
    }

    #[test]
    fn defaults_match_tperf_2021() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.mode, Mode::Server);
        assert_eq!(o.host, "::1");
        assert_eq!(o.port, 6666);
        assert_eq!(o.duration, 10.0);
        assert_eq!(o.congestion, Congestion::Cubic);
        assert_eq!(o.latency_factor, 0.5);
        assert_eq!(o.window, 65536);
        assert!(!o.pacing);
        assert!(!o.once);
        assert_eq!(o.interval_ms, 100);
        assert_eq!((o.gso, o.gro, o.mmsg), (Toggle::Auto, Toggle::Auto, true));
        assert_eq!(o.test_refuse, Refuse::default());
    }

    #[test]
    fn batching_flags() {
        for (args, gso) in [
            (&["-gso", "off"][..], Toggle::Off),
            (&["-gso=on"], Toggle::On),
            (&["-gso"], Toggle::On),
            (&["-gso=false"], Toggle::Off),
            (&["-nogso"], Toggle::Off),
            (&["--gso", "auto"], Toggle::Auto),
        ] {
            assert_eq!(parse(args).unwrap().gso, gso, "{args:?}");
        }
        assert_eq!(parse(&["-nogro"]).unwrap().gro, Toggle::Off);
        assert!(!parse(&["-nommsg"]).unwrap().mmsg);
        assert!(!parse(&["-mmsg=false"]).unwrap().mmsg);
        let e = parse(&["-gso", "maybe"]).unwrap_err().to_string();
        assert!(e.contains("maybe"), "{e}");
        let r = parse(&["-test_refuse", "gso,mmsg"]).unwrap().test_refuse;
        assert_eq!(
            r,
            Refuse {
                gso: true,
                gro: false,
                mmsg: true
            }
        );
        assert!(parse(&["-test_refuse", "gso,tso"]).is_err());
    }

    #[test]
    fn congestion_is_reported_only_where_known() {
        let client = parse(&["-mode", "client"]).unwrap();
        assert_eq!(client.reported_cc(), None);
        assert_eq!(client.reported_latency_factor(), None);
        let told = parse(&["-mode", "client", "-congestion", "copa"]).unwrap();
        assert_eq!(told.reported_cc(), Some(Congestion::Copa));
        assert_eq!(told.reported_latency_factor(), Some(0.5));
        let server = parse(&["-mode", "server"]).unwrap();
        assert_eq!(server.reported_cc(), Some(Congestion::Cubic));
        assert_eq!(server.reported_latency_factor(), None);
    }

    #[test]
    fn last_repeated_flag_wins() {
        assert_eq!(parse(&["-port", "1", "-port=2"]).unwrap().port, 2);
    }

    #[test]
    fn boolean_flags() {
        assert!(parse(&["-once"]).unwrap().once);
        assert!(parse(&["-once", "-port", "1"]).unwrap().once);
        assert!(!parse(&["-once=false"]).unwrap().once);
        assert!(!parse(&["-pacing", "-nopacing"]).unwrap().pacing);
        assert!(parse(&["--pacing=true"]).unwrap().pacing);
    }

    #[test]
    fn congestion_names() {
        for c in Congestion::ALL {
            assert_eq!(parse(&["-congestion", c.name()]).unwrap().congestion, c);
        }
        let e = parse(&["-congestion", "newreno"]).unwrap_err().to_string();
        assert!(
            e.contains("newreno") && e.contains("cubic, copa, bbr, bbr3"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_are_rejected_with_the_value_named() {
        for (args, needle) in [
            (vec!["-latency_factor", "0"], "0"),
            (vec!["-latency_factor", "1.5"], "1.5"),
            (vec!["-latency_factor", "-0.5"], "-0.5"),
            (vec!["-latency_factor", "nan"], "nan"),
            (vec!["-duration", "0"], "duration 0"),
            (vec!["-duration", "-3"], "-3"),
            (vec!["-window", "10"], "window 10"),
            (vec!["-port", "70000"], "70000"),
            (vec!["-mode", "relay"], "relay"),
            (vec!["-bogus_flag", "1"], "bogus_flag"),
        ] {
            let e = parse(&args).unwrap_err().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        assert!(parse(&["-latency_factor", "1"]).is_ok());
    }

    #[test]
    fn live_flags_default_to_bulk_and_are_checked() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.app, App::Bulk);
        assert_eq!((o.abr, o.fps, o.gop_s), (AbrKind::Backlog, 30, 2.0));
        assert_eq!(
            (o.frame_deadline_ms, o.ping_interval_ms, o.frame_slack_ms),
            (700, 1000, 4)
        );
        assert_eq!(parse(&["-frame_slack_ms=0"]).unwrap().frame_slack_ms, 0);
        let o = parse(&["--app", "live", "-abr=rate", "-fps", "25", "-gop_s", "1.5"]).unwrap();
        assert_eq!(
            (o.app, o.abr, o.fps, o.gop_s),
            (App::Live, AbrKind::Rate, 25, 1.5)
        );
        assert_eq!(
            parse(&["-ping_interval_ms", "0"]).unwrap().ping_interval_ms,
            0
        );
        for (args, needle) in [
            (
                vec!["-app", "video"],
                "unknown app 'video'; allowed: bulk, live",
            ),
            (
                vec!["-abr", "bola"],
                "unknown abr 'bola'; allowed: backlog, rate",
            ),
            (vec!["-fps", "0"], "fps 0 is not in [1, 120]"),
            (vec!["-fps", "x"], "fps 'x' is not a number"),
            (vec!["-gop_s", "0"], "gop_s 0 is not in (0, 60]"),
            (vec!["-keyframe_ratio", "0.5"], "keyframe_ratio 0.5"),
            (vec!["-frame_jitter", "nan"], "frame_jitter nan"),
            (vec!["-frame_deadline_ms", "10"], "frame_deadline_ms 10"),
            (vec!["-ping_interval_ms", "5"], "ping_interval_ms 5"),
            (
                vec!["-frame_slack_ms", "11"],
                "frame_slack_ms 11 is not in [0, 10]",
            ),
        ] {
            let e = parse(&args).unwrap_err().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn values_starting_with_dash_are_not_rewritten() {
        let v = normalize_gflags(["p", "-latency_factor", "-0.5", "-h", "--", "-x"]);
        let v: Vec<_> = v.iter().map(|s| s.to_str().unwrap()).collect();
        assert_eq!(v, ["p", "--latency_factor", "-0.5", "-h", "--", "-x"]);
    }
}
