//! The transport's RTT samples over a connection: count, mean and percentiles, without
//! allocating per sample (README.md, "RTT samples").
//!
//! tquic 1.6 has no per-ACK hook and keeps its RTT estimator private (`Recovery` and its
//! `RttEstimator` are `pub(crate)`, so `latest_rtt` is not readable). What it exposes is
//! `PathStats`: smoothed RTT, RTT variation, min and max RTT, in whole microseconds, updated
//! only by `RttEstimator::update`, i.e. once per RTT sample. The server therefore polls them
//! after every datagram it hands to tquic (one client datagram carries at most one ACK frame
//! once the handshake is over): a change of any of the four is a new sample, and its value
//! follows from the smoothed RTT's step, `srtt' = (7 srtt + s) / 8`, as
//! `s = 8 srtt' - 7 srtt` (the first sample sets srtt to itself). `s` is the sample as it
//! enters srtt: tquic's latest_rtt minus the peer's ack delay, unless that would go below
//! min_rtt (RFC 9002, Section 5.3), in which case it is latest_rtt itself.

use serde::Serialize;

/// What `tquic::PathStats` shows of the RTT estimator, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttState {
    pub srtt_us: u64,
    pub rttvar_us: u64,
    pub min_rtt_us: u64,
    pub max_rtt_us: u64,
}

impl From<&tquic::PathStats> for RttState {
    fn from(s: &tquic::PathStats) -> Self {
        RttState {
            srtt_us: s.srtt,
            rttvar_us: s.rttvar,
            min_rtt_us: s.min_rtt,
            max_rtt_us: s.max_rtt,
        }
    }
}

/// Sub-buckets per power of two: bucket width <= 1/128 of the value above 128 µs.
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
/// Values from 2^27 µs (134 s) on share the last bucket.
const MAX_EXP: u32 = 27;
const BUCKETS: usize = SUB + (MAX_EXP - SUB_BITS) as usize * SUB;

/// A log-linear histogram of microsecond values: exact below 128 µs, then 128 buckets per
/// power of two (a bucket's midpoint is within 0.4 % of every value in it). Fixed size
/// (~10 KiB), allocated once.
pub struct Histogram {
    counts: Box<[u32; BUCKETS]>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            total: 0,
        }
    }
}

impl Histogram {
    fn index(us: u64) -> usize {
        let v = us.min((1 << MAX_EXP) - 1);
        if v < SUB as u64 {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros(); // SUB_BITS ..= MAX_EXP - 1
        let shift = exp - SUB_BITS;
        SUB + shift as usize * SUB + ((v >> shift) as usize - SUB)
    }

    /// The midpoint of bucket `i`, in microseconds (the value itself below 128 µs).
    fn midpoint_us(i: usize) -> f64 {
        if i < SUB {
            return i as f64;
        }
        let shift = ((i - SUB) / SUB) as u32;
        let low = ((SUB + (i - SUB) % SUB) as u64) << shift;
        let width = 1u64 << shift;
        low as f64 + (width - 1) as f64 / 2.0
    }

    pub fn record(&mut self, us: u64) {
        let c = &mut self.counts[Self::index(us)];
        *c = c.saturating_add(1);
        self.total += 1;
    }

    /// Nearest-rank quantile `q` in (0, 1], in microseconds (bucket midpoint); None if empty.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Self::midpoint_us(i));
            }
        }
        None
    }
}

/// Summary of a connection's RTT samples (milliseconds; null without samples).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RttSummary {
    pub samples: u64,
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
}

/// Turns successive [`RttState`]s of one path into RTT samples (module docs).
pub struct RttSampler {
    last: RttState,
    samples: u64,
    sum_us: u64,
    hist: Histogram,
}

impl RttSampler {
    /// `baseline`: the path's state before its first RTT sample (tquic's initial RTT).
    pub fn new(baseline: RttState) -> Self {
        RttSampler {
            last: baseline,
            samples: 0,
            sum_us: 0,
            hist: Histogram::default(),
        }
    }

    /// Takes the path's current state; returns the sample (µs) if the state changed since
    /// the last call. Two samples between calls are taken as one (their value is then off).
    pub fn observe(&mut self, now: RttState) -> Option<u64> {
        if now == self.last {
            return None;
        }
        let estimate = if self.samples == 0 {
            // The first sample sets srtt (and min and max RTT) to itself.
            i128::from(now.srtt_us)
        } else {
            8 * i128::from(now.srtt_us) - 7 * i128::from(self.last.srtt_us)
        };
        // Microsecond rounding of srtt makes the estimate off by up to 8 µs; a sample is
        // never below min_rtt nor above max_rtt.
        let lo = i128::from(now.min_rtt_us);
        let hi = i128::from(now.max_rtt_us.max(now.min_rtt_us));
        let sample = estimate.clamp(lo, hi) as u64;
        self.last = now;
        self.record(sample);
        Some(sample)
    }

    fn record(&mut self, us: u64) {
        self.samples += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.hist.record(us);
    }

    pub fn summary(&self) -> RttSummary {
        let ms = |us: f64| us / 1000.0;
        RttSummary {
            samples: self.samples,
            mean_ms: (self.samples > 0)
                .then(|| ms((self.sum_us as f64 / self.samples as f64).round())),
            p50_ms: self.hist.quantile_us(0.5).map(ms),
            p90_ms: self.hist.quantile_us(0.9).map(ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tquic's `RttEstimator::update` in nanoseconds, as PathStats shows it (µs, truncated).
    struct Estimator {
        srtt_ns: Option<u64>,
        rttvar_ns: u64,
        min_ns: u64,
        max_ns: u64,
    }

    impl Estimator {
        fn new(initial_ns: u64) -> Self {
            Estimator {
                srtt_ns: None,
                rttvar_ns: initial_ns / 2,
                min_ns: initial_ns,
                max_ns: initial_ns,
            }
        }

        fn update(&mut self, ack_delay_ns: u64, rtt_ns: u64) {
            match self.srtt_ns {
                None => {
                    self.srtt_ns = Some(rtt_ns);
                    self.rttvar_ns = rtt_ns / 2;
                    self.min_ns = rtt_ns;
                    self.max_ns = rtt_ns;
                }
                Some(s) => {
                    self.min_ns = self.min_ns.min(rtt_ns);
                    self.max_ns = self.max_ns.max(rtt_ns);
                    let adj = if self.min_ns + ack_delay_ns <= rtt_ns {
                        rtt_ns - ack_delay_ns
                    } else {
                        rtt_ns
                    };
                    self.rttvar_ns = (3 * self.rttvar_ns + s.abs_diff(adj)) / 4;
                    self.srtt_ns = Some((7 * s + adj) / 8);
                }
            }
        }

        fn state(&self, initial_ns: u64) -> RttState {
            RttState {
                srtt_us: self.srtt_ns.unwrap_or(initial_ns) / 1000,
                rttvar_us: self.rttvar_ns / 1000,
                min_rtt_us: self.min_ns / 1000,
                max_rtt_us: self.max_ns / 1000,
            }
        }
    }

    #[test]
    fn every_sample_is_counted_and_recovered_within_8_us() {
        let initial = 333_000_000;
        let mut e = Estimator::new(initial);
        let mut s = RttSampler::new(e.state(initial));
        // A queue that builds up and drains: 20 ms base, up to 15 ms of queueing, with
        // sub-microsecond noise.
        let mut sum_ns = 0u64;
        let n = 5000u64;
        for k in 0..n {
            let rtt = 20_000_000 + (k * 7919 % 15_000) * 1000 + (k * 104_729) % 1000;
            e.update(0, rtt);
            sum_ns += rtt;
            let got = s.observe(e.state(initial)).expect("a new sample");
            assert!(
                got.abs_diff(rtt / 1000) <= 8,
                "sample {k}: {got} us vs {rtt} ns"
            );
        }
        let sum = s.summary();
        assert_eq!(sum.samples, n);
        let mean_ms = sum_ns as f64 / n as f64 / 1e6;
        assert!(
            (sum.mean_ms.unwrap() - mean_ms).abs() < 0.005,
            "{sum:?} vs {mean_ms}"
        );
        // Uniform over 20..35 ms.
        assert!((sum.p50_ms.unwrap() - 27.5).abs() < 0.2, "{sum:?}");
        assert!((sum.p90_ms.unwrap() - 33.5).abs() < 0.2, "{sum:?}");
    }

    #[test]
    fn unchanged_state_is_no_sample() {
        let st = RttState {
            srtt_us: 333_000,
            rttvar_us: 166_500,
            min_rtt_us: 333_000,
            max_rtt_us: 333_000,
        };
        let mut s = RttSampler::new(st);
        assert_eq!(s.observe(st), None);
        assert_eq!(s.summary(), RttSummary::default());
    }

    #[test]
    fn ack_delay_is_taken_out_as_in_srtt() {
        let initial = 333_000_000;
        let mut e = Estimator::new(initial);
        let mut s = RttSampler::new(e.state(initial));
        e.update(0, 20_000_000);
        assert_eq!(s.observe(e.state(initial)), Some(20_000));
        // 30 ms with 5 ms of ack delay enters srtt as 25 ms.
        e.update(5_000_000, 30_000_000);
        let got = s.observe(e.state(initial)).unwrap();
        assert!(got.abs_diff(25_000) <= 8, "{got}");
    }

    #[test]
    fn histogram_buckets_and_quantiles() {
        for us in [0, 1, 127, 128, 129, 255, 256, 20_135, 1 << 26, u64::MAX] {
            let i = Histogram::index(us);
            assert!(i < BUCKETS);
            let mid = Histogram::midpoint_us(i);
            let v = us.min((1 << MAX_EXP) - 1) as f64;
            assert!((mid - v).abs() <= v / 256.0 + 0.5, "{us}: {mid}");
        }
        let mut h = Histogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        for us in 1..=100 {
            h.record(us);
        }
        assert_eq!(h.quantile_us(0.5), Some(50.0));
        assert_eq!(h.quantile_us(0.9), Some(90.0));
        assert_eq!(h.quantile_us(1.0), Some(100.0));
    }
}
