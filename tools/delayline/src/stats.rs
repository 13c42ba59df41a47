//! Per-direction counters, the release-lateness histogram, the final stats line and
//! the JSON file (schema `delayline-stats` version 2, documented in the README).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters one direction updates while running (rx thread and tx thread).
#[derive(Debug, Default)]
pub struct DirCounters {
    /// Frames sent out of the egress interface.
    pub frames: AtomicU64,
    /// Bytes of those frames (Ethernet header included, no FCS).
    pub bytes: AtomicU64,
    /// Frames dropped because the queue held `limit` frames.
    pub drops_limit: AtomicU64,
    /// Frames dropped because they exceed the egress MTU (GRO/TSO super-frames).
    pub drops_oversize: AtomicU64,
    /// Frames the kernel dropped before delayline read them (rx socket buffer full).
    pub drops_rx_socket: AtomicU64,
    /// Frames the kernel refused to send.
    pub send_errors: AtomicU64,
    /// Frames received with checksum offload pending (the peer's tx checksum offload is on).
    pub csum_not_ready: AtomicU64,
    /// Most frames queued at once.
    pub max_queue_frames: AtomicU64,
    /// Frames timed by the kernel's receive timestamp (SO_TIMESTAMPNS).
    pub rx_ts_kernel: AtomicU64,
    /// Frames timed in user space after recvmsg (no or implausible kernel timestamp).
    pub rx_ts_user: AtomicU64,
}

/// Adds `n` to a counter.
pub fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Histogram of how late frames left relative to their release time, in 10 µs bins up
/// to 10 ms (later ones land in the last bin).
#[derive(Debug, Clone)]
pub struct Lateness {
    bins: Vec<u64>,
    max_ns: u64,
    sum_ns: u128,
    count: u64,
}

const BIN_NS: u64 = 10_000;
const NBINS: usize = 1001;

impl Default for Lateness {
    fn default() -> Self {
        Lateness {
            bins: vec![0; NBINS],
            max_ns: 0,
            sum_ns: 0,
            count: 0,
        }
    }
}

impl Lateness {
    pub fn record(&mut self, late_ns: u64) {
        let i = ((late_ns / BIN_NS) as usize).min(NBINS - 1);
        self.bins[i] += 1;
        self.max_ns = self.max_ns.max(late_ns);
        self.sum_ns += late_ns as u128;
        self.count += 1;
    }

    /// Upper edge (µs) of the bin holding quantile `q` (0..=1), or None if empty.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.bins.iter().enumerate() {
            seen += n;
            if seen >= rank && i + 1 < NBINS {
                let edge_us = ((i as u64 + 1) * BIN_NS) as f64 / 1000.0;
                return Some(edge_us.min(self.max_ns as f64 / 1000.0));
            }
        }
        Some(self.max_ns as f64 / 1000.0)
    }

    pub fn summary(&self) -> LatenessSummary {
        LatenessSummary {
            count: self.count,
            mean_us: if self.count == 0 {
                None
            } else {
                Some(self.sum_ns as f64 / self.count as f64 / 1000.0)
            },
            p50_us: self.quantile_us(0.5),
            p99_us: self.quantile_us(0.99),
            max_us: if self.count == 0 {
                None
            } else {
                Some(self.max_ns as f64 / 1000.0)
            },
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatenessSummary {
    pub count: u64,
    pub mean_us: Option<f64>,
    /// Quantiles are upper bin edges (10 µs bins), capped at the maximum.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
}

/// Final numbers of one direction.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DirReport {
    pub iface_in: String,
    pub iface_out: String,
    pub delay_ms: f64,
    pub frames: u64,
    pub bytes: u64,
    /// All dropped frames: drops_limit + drops_oversize + drops_rx_socket + send_errors.
    pub drops: u64,
    pub drops_limit: u64,
    pub drops_oversize: u64,
    pub drops_rx_socket: u64,
    pub send_errors: u64,
    pub csum_not_ready: u64,
    pub max_queue_frames: u64,
    /// Frames still queued when the delay line stopped (not sent, not counted as drops).
    pub queued_at_exit: u64,
    /// How late frames left relative to receive time + delay.
    pub release_lateness: LatenessSummary,
    /// Frames whose receive time is the kernel's timestamp.
    pub rx_ts_kernel: u64,
    /// Frames whose receive time was taken in user space after recvmsg.
    pub rx_ts_user: u64,
    /// How long kernel-timestamped frames waited between the kernel's timestamp and
    /// delayline reading them (how long they waited in the socket for the next wake-up;
    /// the kernel timestamp keeps this out of the delay).
    pub rx_age: LatenessSummary,
    /// How early frames left that were sent before their release time (beside a frame
    /// that was due, within `early_us`); `count` is how many did.
    pub release_earliness: LatenessSummary,
    /// The direction's policer (--police-ab/--police-ba) and what it dropped; absent
    /// without one. Its drops are the emulated link's, not the line's: they are not in
    /// `drops`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub police: Option<PoliceReport>,
}

/// A policer's settings and what it dropped (JSON `police` of a direction).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PoliceReport {
    pub rate_bps: u64,
    pub burst_bytes: u64,
    /// Frames the policer dropped (found the bucket short of tokens).
    pub drops: u64,
    /// Their bytes (Ethernet frames as they would have been forwarded).
    pub drop_bytes: u64,
}

impl From<&crate::police::TokenBucket> for PoliceReport {
    fn from(b: &crate::police::TokenBucket) -> Self {
        PoliceReport {
            rate_bps: b.police.rate_bps,
            burst_bytes: b.police.burst_bytes,
            drops: b.drops,
            drop_bytes: b.drop_bytes,
        }
    }
}

impl DirReport {
    pub fn from_counters(
        iface_in: &str,
        iface_out: &str,
        delay_ms: f64,
        c: &DirCounters,
        queued_at_exit: u64,
        lateness: &Lateness,
        rx_age: &Lateness,
    ) -> Self {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (dl, dov, drx, se) = (
            get(&c.drops_limit),
            get(&c.drops_oversize),
            get(&c.drops_rx_socket),
            get(&c.send_errors),
        );
        DirReport {
            iface_in: iface_in.to_string(),
            iface_out: iface_out.to_string(),
            delay_ms,
            frames: get(&c.frames),
            bytes: get(&c.bytes),
            drops: dl + dov + drx + se,
            drops_limit: dl,
            drops_oversize: dov,
            drops_rx_socket: drx,
            send_errors: se,
            csum_not_ready: get(&c.csum_not_ready),
            max_queue_frames: get(&c.max_queue_frames),
            queued_at_exit,
            release_lateness: lateness.summary(),
            rx_ts_kernel: get(&c.rx_ts_kernel),
            rx_ts_user: get(&c.rx_ts_user),
            rx_age: rx_age.summary(),
            release_earliness: Lateness::default().summary(),
            police: None,
        }
    }

    /// The same report with the direction's policer, if it has one.
    pub fn with_police(mut self, police: Option<&crate::police::TokenBucket>) -> Self {
        self.police = police.map(PoliceReport::from);
        self
    }

    /// The same report with the earliness histogram of the frames sent early.
    pub fn with_earliness(mut self, early: &Lateness) -> Self {
        self.release_earliness = early.summary();
        self
    }
}

/// The engine's wake-ups and system calls (JSON `wakes`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct WakeReport {
    /// Times the bridge thread woke while frames were queued or arriving.
    pub wakeups: u64,
    /// Of those, woken by a frame arriving on a watched socket.
    pub wakeups_arrival: u64,
    /// Wake-ups that released frames.
    pub release_wakeups: u64,
    pub recv_calls: u64,
    pub send_calls: u64,
    /// Mean window in force at the wake-ups that released frames, µs.
    pub window_mean_us: f64,
}

impl From<crate::engine::WakeCounters> for WakeReport {
    fn from(w: crate::engine::WakeCounters) -> Self {
        WakeReport {
            wakeups: w.wakeups,
            wakeups_arrival: w.wakeups_arrival,
            release_wakeups: w.release_wakeups,
            recv_calls: w.recv_calls,
            send_calls: w.send_calls,
            window_mean_us: if w.release_wakeups == 0 {
                0.0
            } else {
                w.window_sum_ns as f64 / w.release_wakeups as f64 / 1000.0
            },
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub format: &'static str,
    pub format_version: u32,
    pub limit: u32,
    pub spin_us: u64,
    pub rt_priority: u8,
    /// The bridge's design ("batched": one thread, release windows).
    pub engine: &'static str,
    /// Least time between two wake-ups that release frames, µs.
    pub window_us: u64,
    /// How early a frame may leave beside a due frame, µs (at the largest window).
    pub early_us: u64,
    /// Frames a wake-up should release (the window follows the rate; 0 = fixed window).
    pub frames_per_wake: u32,
    /// delayline's version.
    pub version: &'static str,
    pub wakes: WakeReport,
    pub a_to_b: DirReport,
    pub b_to_a: DirReport,
    /// "kernel" if both receive sockets took SO_TIMESTAMPNS, else "user".
    pub rx_timestamps: &'static str,
    /// The process's CPU time (getrusage RUSAGE_SELF) at exit, seconds.
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    /// `cpu_user_s + cpu_sys_s`.
    pub cpu_s: f64,
    /// Seconds from start to exit; `cpu_s / wall_s` is the CPU it used per second.
    pub wall_s: f64,
}

impl Report {
    /// The one-line summary printed to stderr on exit (format fixed; callers parse it).
    pub fn line(&self) -> String {
        format!(
            "delayline stats a->b frames={} bytes={} drops={} b->a frames={} bytes={} drops={}",
            self.a_to_b.frames,
            self.a_to_b.bytes,
            self.a_to_b.drops,
            self.b_to_a.frames,
            self.b_to_a.bytes,
            self.b_to_a.drops
        )
    }

    /// A second summary line (new keys go at its end): CPU time and how frames were
    /// timed, e.g. `delayline usage cpu_s=0.412 user_s=0.300 sys_s=0.112 wall_s=20.013
    /// rx_timestamps=kernel rx_ts_kernel=5800 rx_ts_user=0 late_ab_p50_us=20.0 ...`; the
    /// `late_*` keys are each direction's release lateness (p50, p99, max µs, or `na`).
    pub fn usage_line(&self) -> String {
        format!(
            "delayline usage cpu_s={:.3} user_s={:.3} sys_s={:.3} wall_s={:.3} rx_timestamps={} rx_ts_kernel={} rx_ts_user={}",
            self.cpu_s,
            self.cpu_user_s,
            self.cpu_sys_s,
            self.wall_s,
            self.rx_timestamps,
            self.a_to_b.rx_ts_kernel + self.b_to_a.rx_ts_kernel,
            self.a_to_b.rx_ts_user + self.b_to_a.rx_ts_user
        ) + &format!(
            " late_ab_p50_us={} late_ab_p99_us={} late_ab_max_us={} late_ba_p50_us={} late_ba_p99_us={} late_ba_max_us={}",
            opt_us(self.a_to_b.release_lateness.p50_us),
            opt_us(self.a_to_b.release_lateness.p99_us),
            opt_us(self.a_to_b.release_lateness.max_us),
            opt_us(self.b_to_a.release_lateness.p50_us),
            opt_us(self.b_to_a.release_lateness.p99_us),
            opt_us(self.b_to_a.release_lateness.max_us)
        ) + &format!(
            " engine={} window_us={} early_us={} wakeups={} wakeups_arrival={} recv_calls={} send_calls={} early_ab_p99_us={} early_ab_max_us={} early_ba_p99_us={} early_ba_max_us={} version={} frames_per_wake={} window_mean_us={:.1}",
            self.engine,
            self.window_us,
            self.early_us,
            self.wakes.wakeups,
            self.wakes.wakeups_arrival,
            self.wakes.recv_calls,
            self.wakes.send_calls,
            opt_us(self.a_to_b.release_earliness.p99_us),
            opt_us(self.a_to_b.release_earliness.max_us),
            opt_us(self.b_to_a.release_earliness.p99_us),
            opt_us(self.b_to_a.release_earliness.max_us),
            self.version,
            self.frames_per_wake,
            self.wakes.window_mean_us
        ) + &self.police_keys()
    }

    /// The policers' keys of the usage line, only when a direction is policed (so the line
    /// of an unpoliced run is what it always was): ` police_ab_drops=N
    /// police_ab_drop_bytes=N police_ba_drops=N police_ba_drop_bytes=N`, `na` for a
    /// direction without a policer.
    fn police_keys(&self) -> String {
        if self.a_to_b.police.is_none() && self.b_to_a.police.is_none() {
            return String::new();
        }
        let keys = |dir: &str, p: &Option<PoliceReport>| match p {
            Some(p) => format!(
                " police_{dir}_drops={} police_{dir}_drop_bytes={}",
                p.drops, p.drop_bytes
            ),
            None => format!(" police_{dir}_drops=na police_{dir}_drop_bytes=na"),
        };
        keys("ab", &self.a_to_b.police) + &keys("ba", &self.b_to_a.police)
    }
}

/// A lateness figure for the usage line: µs with one decimal, or `na` (no frame).
fn opt_us(v: Option<f64>) -> String {
    v.map_or_else(|| "na".to_string(), |x| format!("{x:.1}"))
}

/// CPU time this process has used so far (all threads): (user, system) seconds, from
/// getrusage(RUSAGE_SELF).
pub fn process_cpu_s() -> (f64, f64) {
    // SAFETY: all-zero is a valid rusage; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer; RUSAGE_SELF always exists.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let s = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// Writes `value` as pretty JSON to `path` via a temporary file in the same directory and
/// a rename, so readers never see a partial file.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("--stats-json {path:?} has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("creating temporary stats file {tmp:?}"))?;
        serde_json::to_writer_pretty(&mut f, value)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming {tmp:?} to {path:?}"))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_quantiles() {
        let mut l = Lateness::default();
        assert_eq!(l.quantile_us(0.5), None);
        for _ in 0..98 {
            l.record(5_000); // 5 µs -> bin 0 (0..10 µs)
        }
        l.record(250_000); // 250 µs
        l.record(50_000_000); // 50 ms -> last bin
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_us, Some(10.0));
        assert_eq!(s.p99_us, Some(260.0));
        assert_eq!(s.max_us, Some(50_000.0));
        assert_eq!(l.quantile_us(1.0), Some(50_000.0));
    }

    #[test]
    fn stats_line_and_json_roundtrip() {
        let c = DirCounters::default();
        bump(&c.frames, 3);
        bump(&c.bytes, 300);
        bump(&c.drops_limit, 2);
        bump(&c.drops_oversize, 1);
        bump(&c.rx_ts_kernel, 5);
        let mut age = Lateness::default();
        age.record(30_000);
        let a = DirReport::from_counters("x", "y", 10.0, &c, 0, &Lateness::default(), &age);
        let b = DirReport::from_counters(
            "y",
            "x",
            5.0,
            &DirCounters::default(),
            0,
            &Lateness::default(),
            &Lateness::default(),
        );
        let r = Report {
            format: "delayline-stats",
            format_version: 2,
            limit: 5,
            spin_us: 50,
            rt_priority: 10,
            engine: "batched",
            window_us: 200,
            early_us: 100,
            frames_per_wake: 4,
            version: "0.2.0",
            wakes: WakeReport {
                wakeups: 7,
                wakeups_arrival: 1,
                release_wakeups: 6,
                recv_calls: 9,
                send_calls: 6,
                window_mean_us: 150.0,
            },
            a_to_b: a,
            b_to_a: b,
            rx_timestamps: "kernel",
            cpu_user_s: 0.25,
            cpu_sys_s: 0.125,
            cpu_s: 0.375,
            wall_s: 2.0,
        };
        // The stats line is parsed by callers: its format must not change.
        assert_eq!(
            r.line(),
            "delayline stats a->b frames=3 bytes=300 drops=3 b->a frames=0 bytes=0 drops=0"
        );
        assert_eq!(
            r.usage_line(),
            "delayline usage cpu_s=0.375 user_s=0.250 sys_s=0.125 wall_s=2.000 \
             rx_timestamps=kernel rx_ts_kernel=5 rx_ts_user=0 late_ab_p50_us=na \
             late_ab_p99_us=na late_ab_max_us=na late_ba_p50_us=na late_ba_p99_us=na \
             late_ba_max_us=na engine=batched window_us=200 early_us=100 wakeups=7 \
             wakeups_arrival=1 recv_calls=9 send_calls=6 early_ab_p99_us=na early_ab_max_us=na \
             early_ba_p99_us=na early_ba_max_us=na version=0.2.0 frames_per_wake=4 \
             window_mean_us=150.0"
        );
        let dir = std::env::temp_dir().join(format!("delayline-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        write_json_atomic(&p, &r).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["a_to_b"]["drops_limit"], 2);
        assert_eq!(v["b_to_a"]["delay_ms"], 5.0);
        assert_eq!(v["a_to_b"]["rx_ts_kernel"], 5);
        assert_eq!(v["a_to_b"]["rx_age"]["p50_us"], 30.0);
        assert_eq!(v["rx_timestamps"], "kernel");
        assert_eq!(v["cpu_s"], 0.375);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "temp file left behind"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_policed_direction_adds_its_keys_and_nothing_else_changes() {
        let c = DirCounters::default();
        bump(&c.frames, 4);
        bump(&c.drops_limit, 1);
        let none = Lateness::default();
        let mut tb = crate::police::TokenBucket::new(crate::police::Police {
            rate_bps: 1_000_000,
            burst_bytes: 3000,
        });
        assert!(tb.admit(0, 3000));
        assert!(!tb.admit(0, 1500));
        let a = DirReport::from_counters("x", "y", 1.0, &c, 0, &none, &none).with_police(None);
        let b = DirReport::from_counters("y", "x", 1.0, &c, 0, &none, &none).with_police(Some(&tb));
        assert_eq!(b.drops, 1, "the policer's drops are not the line's");
        let mut r = Report {
            format: "delayline-stats",
            format_version: 2,
            limit: 5,
            spin_us: 0,
            rt_priority: 10,
            engine: "batched",
            window_us: 200,
            early_us: 100,
            frames_per_wake: 1,
            version: "0.2.1",
            wakes: WakeReport::default(),
            a_to_b: a,
            b_to_a: b,
            rx_timestamps: "kernel",
            cpu_user_s: 0.0,
            cpu_sys_s: 0.0,
            cpu_s: 0.0,
            wall_s: 1.0,
        };
        let line = r.usage_line();
        assert!(
            line.ends_with(
                "window_mean_us=0.0 police_ab_drops=na police_ab_drop_bytes=na \
                 police_ba_drops=1 police_ba_drop_bytes=1500"
            ),
            "{line}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["a_to_b"].get("police").is_none());
        assert_eq!(v["b_to_a"]["police"]["rate_bps"], 1_000_000);
        assert_eq!(v["b_to_a"]["police"]["burst_bytes"], 3000);
        assert_eq!(v["b_to_a"]["police"]["drops"], 1);
        assert_eq!(v["b_to_a"]["police"]["drop_bytes"], 1500);
        // Unpoliced: the usage line ends where it always did.
        r.b_to_a.police = None;
        assert!(r.usage_line().ends_with("window_mean_us=0.0"));
        assert!(serde_json::to_value(&r).unwrap()["b_to_a"]
            .get("police")
            .is_none());
    }

    #[test]
    fn process_cpu_counts_our_own_work() {
        // Busy work until getrusage shows 20 ms more CPU (on a busy host that may take
        // longer than 20 ms of wall time, hence the loop), or fail after 10 s.
        let (u0, s0) = process_cpu_s();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        loop {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            let (u1, s1) = process_cpu_s();
            assert!(u1 >= u0 && s1 >= s0);
            if (u1 + s1) - (u0 + s0) >= 0.02 {
                break;
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "CPU time did not grow: {u0}+{s0} -> {u1}+{s1}"
            );
        }
    }
}
