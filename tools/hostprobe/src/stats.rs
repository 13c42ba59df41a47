//! Percentiles of a latency sample, in µs.

use serde::Serialize;

/// p50, p99, p99.9 and max of a sample, in µs (nearest rank: the smallest value with at
/// least that fraction of the sample at or below it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// The value of rank ceil(q n) of a sorted sample (q in (0, 1]).
fn nearest_rank(sorted: &[i64], q: f64) -> i64 {
    let n = sorted.len();
    let k = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[k - 1]
}

impl Percentiles {
    /// Of ns values (sorted here); all zero for an empty sample.
    pub fn of_ns(mut v: Vec<i64>) -> Self {
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_unstable();
        let us = |ns: i64| ns as f64 / 1e3;
        Percentiles {
            p50: us(nearest_rank(&v, 0.50)),
            p99: us(nearest_rank(&v, 0.99)),
            p999: us(nearest_rank(&v, 0.999)),
            max: us(*v.last().expect("not empty")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_in_us() {
        let v: Vec<i64> = (1..=1000).map(|i| i * 1000).collect();
        let p = Percentiles::of_ns(v.into_iter().rev().collect());
        assert_eq!(
            p,
            Percentiles {
                p50: 500.0,
                p99: 990.0,
                p999: 999.0,
                max: 1000.0
            }
        );
        let one = Percentiles::of_ns(vec![2500]);
        assert_eq!((one.p50, one.p999, one.max), (2.5, 2.5, 2.5));
        assert_eq!(Percentiles::of_ns(vec![]), Percentiles::default());
    }
}
