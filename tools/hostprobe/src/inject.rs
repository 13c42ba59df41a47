//! stallinject's bursts: what each thread draws (burst lengths, gaps), from a seeded stream of
//! its own, and the loop that spins them at SCHED_FIFO. The defaults are issue 57's noisy host
//! ("3. A noisy host on demand"): bursts taking 1.5 % of each CPU, nine in ten of them
//! 0.3-2 ms and one in ten 5-25 ms.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::HostError;
use crate::sys;
use crate::units::fmt_ns;

/// No spin longer than this (the kernel's RT throttling allows 95 % of each second; a burst
/// this long is already far beyond any host we mean to play).
pub const MAX_BURST_NS: i64 = 100_000_000;
/// The longest single sleep; a stop is seen within it.
pub const SLEEP_CHUNK_NS: i64 = 100_000_000;

/// What one thread does: its duty cycle and burst lengths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// The fraction of each CPU the bursts take, in (0, 0.5].
    pub duty: f64,
    /// Short bursts: uniform in [lo, hi] ns.
    pub short_ns: (i64, i64),
    /// Long bursts: uniform in [lo, hi] ns.
    pub long_ns: (i64, i64),
    /// The probability that a burst is long.
    pub long_fraction: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            duty: 0.015,
            short_ns: (300_000, 2_000_000),
            long_ns: (5_000_000, 25_000_000),
            long_fraction: 0.1,
        }
    }
}

impl Params {
    /// Refuses values outside what the injector can do honestly, naming the value.
    pub fn validate(&self) -> Result<(), HostError> {
        if !(self.duty > 0.0 && self.duty <= 0.5) {
            return Err(HostError::bad(
                "--duty",
                &self.duty.to_string(),
                "the duty cycle must be in (0, 0.5]",
            ));
        }
        if !(0.0..=1.0).contains(&self.long_fraction) {
            return Err(HostError::bad(
                "--long-fraction",
                &self.long_fraction.to_string(),
                "a probability: 0 to 1",
            ));
        }
        for (what, (lo, hi)) in [("--short", self.short_ns), ("--long", self.long_ns)] {
            let v = format!("{}..{}", fmt_ns(lo), fmt_ns(hi));
            if lo <= 0 || lo > hi {
                return Err(HostError::bad(what, &v, "need 0 < LO <= HI"));
            }
            if hi > MAX_BURST_NS {
                return Err(HostError::bad(
                    what,
                    &v,
                    format!(
                        "bursts above {} are refused (RT throttling; no host we play stalls so long)",
                        fmt_ns(MAX_BURST_NS)
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn mean_burst_ns(&self) -> f64 {
        let mid = |(lo, hi): (i64, i64)| (lo + hi) as f64 / 2.0;
        (1.0 - self.long_fraction) * mid(self.short_ns) + self.long_fraction * mid(self.long_ns)
    }

    /// The mean gap between bursts that gives the duty cycle: burst / (burst + gap) = duty.
    pub fn mean_gap_ns(&self) -> f64 {
        self.mean_burst_ns() * (1.0 - self.duty) / self.duty
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, good enough for burst lengths.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The stream of thread `index` for `seed`: streams of one seed differ, and repeat.
    pub fn stream(seed: u64, index: u64) -> Self {
        let mut r = Rng(seed ^ index.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn uniform_ns(&mut self, (lo, hi): (i64, i64)) -> i64 {
        lo + ((hi - lo) as f64 * self.unit()).round() as i64
    }
}

/// The next burst's length in ns: long with probability long_fraction.
pub fn draw_burst_ns(p: &Params, rng: &mut Rng) -> i64 {
    let range = if rng.unit() < p.long_fraction {
        p.long_ns
    } else {
        p.short_ns
    };
    rng.uniform_ns(range).min(MAX_BURST_NS)
}

/// The next gap in ns: exponential with the mean that gives the duty cycle.
pub fn draw_gap_ns(p: &Params, rng: &mut Rng) -> i64 {
    (-p.mean_gap_ns() * (1.0 - rng.unit()).ln()).round() as i64
}

/// What one thread did.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub cpu: usize,
    pub bursts: u64,
    /// The thread's CPU time while it spun (what it took from everything below it).
    pub stolen_ns: i64,
    pub longest_ns: i64,
}

/// Spins until CLOCK_MONOTONIC reaches `until` or `stop` is set.
fn spin_until(until: i64, stop: &AtomicBool) {
    while sys::mono_ns() < until && !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

/// Sleeps until `until`, in chunks so that `stop` is seen within SLEEP_CHUNK_NS.
fn sleep_until(until: i64, stop: &AtomicBool) {
    loop {
        let now = sys::mono_ns();
        if now >= until || stop.load(Ordering::Relaxed) {
            return;
        }
        let _ = sys::sleep_until(until.min(now + SLEEP_CHUNK_NS));
    }
}

/// One thread's loop on `cpu` (already pinned and prioritised by the caller): a gap, a burst,
/// a gap, ... until `stop`. The first gap is drawn too, so threads do not burst together at
/// the start.
pub fn run_thread(cpu: usize, p: &Params, mut rng: Rng, stop: &AtomicBool) -> Tally {
    let mut t = Tally {
        cpu,
        ..Tally::default()
    };
    let mut at = sys::mono_ns() + draw_gap_ns(p, &mut rng);
    loop {
        sleep_until(at, stop);
        if stop.load(Ordering::Relaxed) {
            return t;
        }
        let burst = draw_burst_ns(p, &mut rng);
        let c0 = sys::thread_cpu_ns();
        let start = sys::mono_ns();
        spin_until(start + burst, stop);
        let end = sys::mono_ns();
        t.bursts += 1;
        t.stolen_ns += sys::thread_cpu_ns() - c0;
        t.longest_ns = t.longest_ns.max(end - start);
        at = end + draw_gap_ns(p, &mut rng);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_issue_57s() {
        let p = Params::default();
        p.validate().unwrap();
        assert_eq!(p.duty, 0.015);
        assert_eq!(p.short_ns, (300_000, 2_000_000));
        assert_eq!(p.long_ns, (5_000_000, 25_000_000));
        assert_eq!(p.long_fraction, 0.1);
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let bad = |p: Params, what: &str| {
            let e = p.validate().unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        let d = Params::default();
        bad(Params { duty: 0.0, ..d }, "--duty");
        bad(Params { duty: 0.6, ..d }, "--duty");
        bad(
            Params {
                duty: f64::NAN,
                ..d
            },
            "--duty",
        );
        bad(
            Params {
                long_fraction: 1.5,
                ..d
            },
            "--long-fraction",
        );
        bad(
            Params {
                short_ns: (2_000_000, 300_000),
                ..d
            },
            "--short",
        );
        bad(
            Params {
                long_ns: (5_000_000, 150_000_000),
                ..d
            },
            "--long",
        );
        bad(
            Params {
                long_ns: (0, 1_000_000),
                ..d
            },
            "--long",
        );
    }

    #[test]
    fn a_seed_gives_the_same_draws_and_threads_differ() {
        let p = Params::default();
        let draws = |seed, i| {
            let mut r = Rng::stream(seed, i);
            (0..50)
                .map(|_| (draw_burst_ns(&p, &mut r), draw_gap_ns(&p, &mut r)))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(7, 0), draws(7, 0));
        assert_ne!(draws(7, 0), draws(7, 1));
        assert_ne!(draws(7, 0), draws(8, 0));
    }

    #[test]
    fn the_draws_give_the_duty_cycle_and_the_mix_of_bursts() {
        for duty in [0.015, 0.15, 0.5] {
            let p = Params {
                duty,
                ..Params::default()
            };
            let mut r = Rng::stream(57, 0);
            let (mut busy, mut idle, mut long, n) = (0i64, 0i64, 0, 200_000);
            for _ in 0..n {
                let b = draw_burst_ns(&p, &mut r);
                assert!((300_000..=25_000_000).contains(&b));
                long += (b >= 5_000_000) as i32;
                busy += b;
                idle += draw_gap_ns(&p, &mut r);
            }
            let got = busy as f64 / (busy + idle) as f64;
            assert!((got / duty - 1.0).abs() < 0.03, "duty {duty}: got {got}");
            let frac = long as f64 / n as f64;
            assert!((frac - 0.1).abs() < 0.005, "long fraction {frac}");
        }
    }

    #[test]
    fn a_thread_spins_about_its_duty_and_stops() {
        use std::sync::Arc;
        let p = Params {
            duty: 0.3,
            short_ns: (1_000_000, 2_000_000),
            long_ns: (3_000_000, 4_000_000),
            long_fraction: 0.0,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let h = std::thread::spawn(move || run_thread(0, &p, Rng::stream(1, 0), &s2));
        std::thread::sleep(std::time::Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let t = h.join().unwrap();
        assert!(t.bursts > 10, "{t:?}");
        assert!(
            t.longest_ns >= 1_000_000 && t.longest_ns < 50_000_000,
            "{t:?}"
        );
        // 0.3 of 500 ms: 150 ms, a loaded machine allowing
        assert!((40_000_000..400_000_000).contains(&t.stolen_ns), "{t:?}");
    }
}
