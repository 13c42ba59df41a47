//! What the live mode reports, and the small accumulators behind it: sample summaries
//! (mean, nearest-rank percentiles), the bitrate log (timeline, time at each rung,
//! switches) and per-second frame-latency rows. Units are in every field's name; README.md,
//! "Live mode: the report", documents each.

use serde::Serialize;

/// At most this many samples are kept for percentiles (30 fps for 18 h); beyond it the
/// summary covers the first ones and `truncated` says so.
const MAX_SAMPLES: usize = 2_000_000;
/// At most this many bitrate changes are listed in the timeline (all are counted).
pub const MAX_TIMELINE: usize = 2000;

/// Values in ms with their times: count, mean, p50, p95, max; optionally the series.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    values: Vec<f64>,
    series: Vec<(f64, f64)>,
    keep_series: bool,
    count: u64,
    sum: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SampleSummary {
    pub samples: u64,
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// True if more samples arrived than were kept for the percentiles.
    pub truncated: bool,
    /// `[t_s, ms]` per sample (app RTT only: one a second), t_s from the broadcast's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<Vec<(f64, f64)>>,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Samples {
    pub fn with_series() -> Self {
        Samples {
            keep_series: true,
            ..Default::default()
        }
    }

    pub fn add(&mut self, t_s: f64, ms: f64) {
        self.count += 1;
        self.sum += ms;
        if self.values.len() < MAX_SAMPLES {
            self.values.push(ms);
            if self.keep_series {
                self.series.push((round3(t_s), round3(ms)));
            }
        }
    }

    pub fn summary(&self) -> SampleSummary {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| -> Option<f64> {
            if v.is_empty() {
                return None;
            }
            let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
            Some(round3(v[k - 1]))
        };
        SampleSummary {
            samples: self.count,
            mean_ms: (self.count > 0).then(|| round3(self.sum / self.count as f64)),
            p50_ms: rank(0.5),
            p95_ms: rank(0.95),
            max_ms: v.last().copied().map(round3),
            truncated: self.count as usize > v.len(),
            series: self.keep_series.then(|| self.series.clone()),
        }
    }
}

/// The bitrate chosen over time.
#[derive(Debug, Clone)]
pub struct BitrateLog {
    ladder: Vec<u32>,
    rung: usize,
    since_s: f64,
    time_at: Vec<f64>,
    switches: u64,
    timeline: Vec<(f64, u32)>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BitrateReport {
    /// Time-weighted mean over the broadcast, kbit/s.
    pub bitrate_mean_kbps: f64,
    pub bitrate_switches: u64,
    /// `[t_s, kbps]`: the start and every change (the first MAX_TIMELINE).
    pub bitrate_timeline: Vec<(f64, u32)>,
    pub bitrate_timeline_truncated: bool,
    /// `[kbps, s]` for every rung of the ladder.
    pub time_at_rung_s: Vec<(u32, f64)>,
}

impl BitrateLog {
    pub fn new(ladder: &[u32], rung: usize) -> Self {
        BitrateLog {
            ladder: ladder.to_vec(),
            rung,
            since_s: 0.0,
            time_at: vec![0.0; ladder.len()],
            switches: 0,
            timeline: vec![(0.0, ladder[rung])],
        }
    }

    pub fn rung(&self) -> usize {
        self.rung
    }

    /// The encoder runs at `rung` from `t_s` on.
    pub fn set(&mut self, t_s: f64, rung: usize) {
        if rung == self.rung {
            return;
        }
        self.time_at[self.rung] += (t_s - self.since_s).max(0.0);
        self.since_s = t_s;
        self.rung = rung;
        self.switches += 1;
        if self.timeline.len() < MAX_TIMELINE {
            self.timeline.push((round3(t_s), self.ladder[rung]));
        }
    }

    /// The report at the broadcast's end, `end_s`.
    pub fn report(&self, end_s: f64) -> BitrateReport {
        let mut time_at = self.time_at.clone();
        time_at[self.rung] += (end_s - self.since_s).max(0.0);
        let total: f64 = time_at.iter().sum();
        let weighted: f64 = time_at
            .iter()
            .zip(&self.ladder)
            .map(|(t, &k)| t * k as f64)
            .sum();
        BitrateReport {
            bitrate_mean_kbps: if total > 0.0 {
                round3(weighted / total)
            } else {
                self.ladder[self.rung] as f64
            },
            bitrate_switches: self.switches,
            bitrate_timeline: self.timeline.clone(),
            bitrate_timeline_truncated: self.switches as usize + 1 > self.timeline.len(),
            time_at_rung_s: self
                .ladder
                .iter()
                .zip(&time_at)
                .map(|(&k, &t)| (k, round3(t)))
                .collect(),
        }
    }
}

/// Frame latency per second of the broadcast: `[t_s, frames, mean_ms, max_ms]` rows.
#[derive(Debug, Clone, Default)]
pub struct PerSecond {
    rows: Vec<(u32, u32, f64, f64)>,
    cur: Option<(u32, u32, f64, f64)>,
}

impl PerSecond {
    pub fn add(&mut self, t_s: f64, ms: f64) {
        let sec = t_s.max(0.0) as u32;
        match &mut self.cur {
            Some((s, n, sum, max)) if *s == sec => {
                *n += 1;
                *sum += ms;
                *max = max.max(ms);
            }
            _ => {
                self.flush();
                self.cur = Some((sec, 1, ms, ms));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((s, n, sum, max)) = self.cur.take() {
            self.rows.push((s, n, round3(sum / n as f64), round3(max)));
        }
    }

    pub fn rows(&self) -> Vec<(u32, u32, f64, f64)> {
        let mut me = self.clone();
        me.flush();
        me.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_use_nearest_rank() {
        let mut s = Samples::with_series();
        assert_eq!(s.summary().mean_ms, None);
        for (i, v) in [5.0, 1.0, 3.0, 2.0, 4.0].into_iter().enumerate() {
            s.add(i as f64, v);
        }
        let r = s.summary();
        assert_eq!(
            (r.samples, r.mean_ms, r.p50_ms, r.p95_ms, r.max_ms),
            (5, Some(3.0), Some(3.0), Some(5.0), Some(5.0))
        );
        assert_eq!(r.series.unwrap()[1], (1.0, 1.0));
        assert!(Samples::default().summary().series.is_none());
    }

    #[test]
    fn bitrate_log_weights_time_and_counts_switches() {
        let ladder = [100, 200, 400];
        let mut b = BitrateLog::new(&ladder, 2);
        b.set(1.0, 2); // no change
        b.set(2.0, 0);
        b.set(3.0, 1);
        let r = b.report(4.0);
        // 2 s at 400, 1 s at 100, 1 s at 200: (800 + 100 + 200) / 4
        assert_eq!(r.bitrate_mean_kbps, 275.0);
        assert_eq!(r.bitrate_switches, 2);
        assert_eq!(r.bitrate_timeline, vec![(0.0, 400), (2.0, 100), (3.0, 200)]);
        assert_eq!(r.time_at_rung_s, vec![(100, 1.0), (200, 1.0), (400, 2.0)]);
        assert!(!r.bitrate_timeline_truncated);
    }

    #[test]
    fn per_second_rows() {
        let mut p = PerSecond::default();
        for (t, ms) in [(0.1, 10.0), (0.9, 30.0), (2.5, 5.0)] {
            p.add(t, ms);
        }
        assert_eq!(p.rows(), vec![(0, 2, 20.0, 30.0), (2, 1, 5.0, 5.0)]);
    }
}
