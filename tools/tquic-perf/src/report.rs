//! What the tool reports: tperf's summary lines, our interval lines, and the JSON summary.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::live::LiveSenderReport;
use crate::live_rx::LiveReceiverReport;
use crate::rtt::RttSummary;
use crate::udp::BatchReport;

/// Version of the JSON summary's schema (see README.md). 2: `sender.rtt_*` added;
/// 3: `batching` added.
pub const JSON_FORMAT_VERSION: u32 = 3;

/// Formats like a C++ iostream with default flags and precision 6 (printf `%g`):
/// 6 significant digits, trailing zeros dropped, scientific below 1e-4 and from 1e6.
pub fn format_g6(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Round to 6 significant digits first; the exponent after rounding decides the style.
    let sci = format!("{:.5e}", x);
    let (mant, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    if !(-4..6).contains(&exp) {
        let mant = strip_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        strip_zeros(&format!("{:.*}", decimals, x)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// tperf's throughput unit: "Mb/s" = 2^20 bit/s.
pub fn throughput_mibps(bytes: u64, duration_s: f64) -> f64 {
    bytes as f64 / 131_072.0 / duration_s
}

/// The project's goodput: SI kilobits per second.
pub fn goodput_kbps(bytes: u64, duration_s: f64) -> f64 {
    bytes as f64 * 8.0 / duration_s / 1000.0
}

/// tperf's two summary lines (without the glog prefix).
pub fn summary_lines(bytes: u64, duration_s: f64) -> [String; 2] {
    [
        format!(
            "Received {bytes} bytes in {} seconds.",
            format_g6(duration_s)
        ),
        format!(
            "Overall throughput: {}Mb/s",
            format_g6(throughput_mibps(bytes, duration_s))
        ),
    ]
}

/// One interval line (without the glog prefix).
pub fn interval_line(t_unix: f64, elapsed_s: f64, bytes: u64, total_bytes: u64) -> String {
    format!("interval t_unix={t_unix:.6} elapsed_s={elapsed_s:.6} bytes={bytes} total_bytes={total_bytes}")
}

/// Sender-side counters from tquic (`None` where the role cannot know them).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SenderStats {
    pub packets_sent: Option<u64>,
    pub packets_lost: Option<u64>,
    /// tquic 1.6 does not count retransmissions (QUIC re-sends lost frames in new packets);
    /// always null. `packets_lost` is the closest figure.
    pub packets_retransmitted: Option<u64>,
    pub bytes_sent: Option<u64>,
    pub bytes_lost: Option<u64>,
    pub loss_events: Option<u64>,
    pub min_rtt_ms: Option<f64>,
    pub srtt_ms: Option<f64>,
    pub max_cwnd_bytes: Option<u64>,
    /// The transport's RTT samples over the connection (crate::rtt): how many, their mean
    /// and nearest-rank median and 90th percentile. Means and percentiles are null without
    /// samples; all four are null on the client.
    pub rtt_samples: Option<u64>,
    pub rtt_mean_ms: Option<f64>,
    pub rtt_p50_ms: Option<f64>,
    pub rtt_p90_ms: Option<f64>,
}

impl SenderStats {
    /// Sets the `rtt_*` fields from a connection's RTT samples.
    pub fn set_rtt(&mut self, r: &RttSummary) {
        self.rtt_samples = Some(r.samples);
        self.rtt_mean_ms = r.mean_ms;
        self.rtt_p50_ms = r.p50_ms;
        self.rtt_p90_ms = r.p90_ms;
    }
}

/// The JSON summary written by `-json` (both roles use this schema).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub format_version: u32,
    pub tool: &'static str,
    pub tool_version: &'static str,
    /// "client" (bytes = stream bytes received) or "server" (bytes = stream bytes written).
    pub role: &'static str,
    pub peer: String,
    pub bytes: u64,
    pub duration_s: f64,
    pub goodput_kbps: f64,
    pub throughput_mibps: f64,
    /// Unix time of the first stream byte (client: received; server: written).
    pub start_unix: f64,
    /// Sender's congestion control; null on a client not given `-congestion`.
    pub cc: Option<String>,
    /// Copa's δ; null unless cc is copa.
    pub latency_factor: Option<f64>,
    pub window: u64,
    pub pacing: bool,
    pub sender: SenderStats,
    /// How this process's socket sent and received: modes, fallbacks, syscall counts.
    pub batching: BatchReport,
    /// `-app live` only (absent in bulk mode): the broadcast's metrics, by role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveReport>,
}

/// The `live` object: the sender's or the receiver's (README.md, "Live mode: the report").
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum LiveReport {
    Sender(Box<LiveSenderReport>),
    Receiver(Box<LiveReceiverReport>),
}

/// The `batching ...` log line (after the glog prefix): the JSON's `batching`, flat.
pub fn batching_line(b: &BatchReport) -> String {
    let (s, r) = (&b.send, &b.recv);
    let na = |v: &Option<String>| v.as_deref().map_or("na".into(), |x| format!("{x:?}"));
    format!(
        "batching send_requested={} send_mode={} send_syscalls={} send_packets={} \
         send_gso_messages={} send_gso_max_segments={} send_would_block={} \
         recv_requested={} recv_mode={} recv_syscalls={} recv_datagrams={} recv_packets={} \
         recv_polls={} send_fallback={} recv_fallback={}",
        s.requested,
        s.mode,
        s.syscalls,
        s.packets,
        s.gso_messages,
        s.gso_max_segments,
        s.would_block,
        r.requested,
        r.mode,
        r.syscalls,
        r.datagrams,
        r.packets,
        r.polls,
        na(&s.fallback_reason),
        na(&r.fallback_reason),
    )
}

/// Writes `value` as JSON to `path` atomically: a temporary file in the same directory,
/// fsync, then rename, so a reader never sees a partial summary.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("JSON path {} has no file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut text = serde_json::to_string_pretty(value)?;
        text.push('\n');
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
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
    fn g6_matches_iostream_defaults() {
        for (x, s) in [
            (10.000_213_4, "10.0002"),
            (10.0, "10"),
            (2.5, "2.5"),
            (123_456.0, "123456"),
            (1_234_567.0, "1.23457e+06"),
            (999_999.7, "1e+06"),
            (0.0001, "0.0001"),
            (0.000_012_345, "1.2345e-05"),
            (19.073_486_328_125, "19.0735"),
            (0.0, "0"),
            (5.000_000_1, "5"),
        ] {
            assert_eq!(format_g6(x), s, "{x}");
        }
    }

    #[test]
    fn summary_is_tperf_format() {
        let [a, b] = summary_lines(25_000_000, 10.0);
        assert_eq!(a, "Received 25000000 bytes in 10 seconds.");
        assert_eq!(b, "Overall throughput: 19.0735Mb/s");
    }

    #[test]
    fn units() {
        assert_eq!(goodput_kbps(1_000_000, 8.0), 1000.0);
        assert_eq!(throughput_mibps(131_072, 1.0), 1.0);
    }

    #[test]
    fn interval_format() {
        assert_eq!(
            interval_line(1_700_000_000.5, 0.1, 12, 34),
            "interval t_unix=1700000000.500000 elapsed_s=0.100000 bytes=12 total_bytes=34"
        );
    }

    #[test]
    fn json_is_written_whole() {
        let dir = std::env::temp_dir().join(format!("tquic-perf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        write_json_atomic(&p, &serde_json::json!({"bytes": 5})).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["bytes"], 5);
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
