//! A token-bucket policer per direction (`--police-ab`, `--police-ba`): frames that find the
//! bucket short of tokens are dropped, never queued, as an ISP's policer does (Flach et al.,
//! "An Internet-Wide Analysis of Traffic Policing", SIGCOMM 2016: "enforces a flow rate by
//! dropping excess traffic").
//!
//! The bucket holds at most `burst_bytes` and fills at `rate_bps`; it starts full (as the
//! kernel's police action does). A frame of `len` bytes (its Ethernet frame as forwarded, the
//! length the kernel's police action and htb count) passes if the bucket holds at least
//! `len` bytes of tokens, which it then spends; otherwise it is dropped and the tokens stay.
//!
//! The bucket is refilled lazily, from the frame's own receive time (the kernel's timestamp),
//! when a frame is judged: the policer needs no timer and adds no wake-up, and when the bridge
//! reads a frame (up to one release window after it arrived) does not change its fate.
//! Integer arithmetic in units of 10^-9 bit (a byte is 8·10^9 units; a rate in bit/s times
//! nanoseconds gives units), so there is no rounding drift over a long run.

use std::fmt;

/// Largest rate accepted, bit/s (100 Gbit/s: far above what a veth here carries).
pub const MAX_RATE_BPS: u64 = 100_000_000_000;
/// Largest bucket accepted, bytes (1 GB: a typo guard; ISP buckets are KB to a few MB).
pub const MAX_BURST_BYTES: u64 = 1_000_000_000;

/// Token units per byte: 8 bits of 10^9 units each.
const UNITS_PER_BYTE: u128 = 8_000_000_000;

/// A policer's settings: the rate tokens arrive at and the bucket's depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Police {
    pub rate_bps: u64,
    pub burst_bytes: u64,
}

impl fmt::Display for Police {
    /// The form `--police-ab` takes: `RATE_BPS:BURST_BYTES`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.rate_bps, self.burst_bytes)
    }
}

/// `RATE_BPS:BURST_BYTES`, both whole numbers: the rate in bit/s (1..=100e9) and the bucket
/// in bytes (1..=1e9). Whether the bucket holds a full-size frame is checked once the egress
/// interface's MTU is known (lib.rs).
pub fn parse_police(s: &str) -> Result<Police, String> {
    let (rate, burst) = s.trim().split_once(':').ok_or_else(|| {
        format!("policer {s:?} must be RATE_BPS:BURST_BYTES (e.g. 2000000:15140)")
    })?;
    let rate_bps: u64 = rate
        .parse()
        .map_err(|_| format!("policer rate {rate:?} is not a whole number of bit/s"))?;
    let burst_bytes: u64 = burst
        .parse()
        .map_err(|_| format!("policer burst {burst:?} is not a whole number of bytes"))?;
    if !(1..=MAX_RATE_BPS).contains(&rate_bps) {
        return Err(format!(
            "policer rate {rate_bps} bit/s is out of range; allowed 1 to {MAX_RATE_BPS}"
        ));
    }
    if !(1..=MAX_BURST_BYTES).contains(&burst_bytes) {
        return Err(format!(
            "policer burst {burst_bytes} bytes is out of range; allowed 1 to {MAX_BURST_BYTES}"
        ));
    }
    Ok(Police {
        rate_bps,
        burst_bytes,
    })
}

/// One direction's bucket and what it dropped.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    pub police: Police,
    /// Tokens, in 10^-9 bit.
    tokens: u128,
    cap: u128,
    /// Time of the last refill (ns, monotonic); None before the first frame.
    last_ns: Option<u64>,
    /// Frames dropped and their bytes.
    pub drops: u64,
    pub drop_bytes: u64,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(police: Police) -> Self {
        let cap = police.burst_bytes as u128 * UNITS_PER_BYTE;
        TokenBucket {
            police,
            tokens: cap,
            cap,
            last_ns: None,
            drops: 0,
            drop_bytes: 0,
        }
    }

    /// Whether a frame of `len` bytes received at `now_ns` passes (spending its tokens) or
    /// is dropped (counted). Times earlier than the last one count as the last one.
    pub fn admit(&mut self, now_ns: u64, len: usize) -> bool {
        if let Some(last) = self.last_ns {
            let dt = now_ns.saturating_sub(last) as u128;
            self.tokens = (self.tokens + dt * self.police.rate_bps as u128).min(self.cap);
        }
        self.last_ns = Some(self.last_ns.map_or(now_ns, |l| l.max(now_ns)));
        let need = len as u128 * UNITS_PER_BYTE;
        if self.tokens >= need {
            self.tokens -= need;
            true
        } else {
            self.drops += 1;
            self.drop_bytes += len as u64;
            false
        }
    }

    /// Whole bytes of tokens in the bucket now (for tests and messages).
    pub fn tokens_bytes(&self) -> u64 {
        (self.tokens / UNITS_PER_BYTE) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn bucket(rate_bps: u64, burst_bytes: u64) -> TokenBucket {
        TokenBucket::new(Police {
            rate_bps,
            burst_bytes,
        })
    }

    #[test]
    fn a_full_bucket_passes_its_burst_then_drops() {
        // 10 frames of 1500 bytes fit a 15000-byte bucket; the 11th, at the same instant, not.
        let mut b = bucket(8_000_000, 15_000);
        for i in 0..10 {
            assert!(b.admit(0, 1500), "frame {i} of the burst");
        }
        assert!(!b.admit(0, 1500));
        assert_eq!((b.drops, b.drop_bytes), (1, 1500));
        assert_eq!(b.tokens_bytes(), 0);
    }

    #[test]
    fn tokens_refill_at_the_rate_and_never_beyond_the_burst() {
        // 8 Mbit/s = 1000 bytes per ms.
        let mut b = bucket(8_000_000, 3000);
        assert!(b.admit(0, 3000));
        assert!(!b.admit(MS, 1500), "1 ms gives 1000 bytes, not 1500");
        assert!(b.admit(MS * 3 / 2, 1500), "1.5 ms gives 1500");
        assert_eq!(b.tokens_bytes(), 0);
        // A long idle spell fills the bucket to its depth only.
        b.admit(10_000 * MS, 0);
        assert_eq!(b.tokens_bytes(), 3000);
    }

    #[test]
    fn offered_twice_the_rate_it_passes_the_rate() {
        // 2 Mbit/s policer, 1500-byte frames offered at 4 Mbit/s for 10 s: about half pass,
        // plus the burst; the bytes passed are the rate x time + burst, within one frame.
        let (rate, burst, len) = (2_000_000u64, 15_140u64, 1500usize);
        let mut b = bucket(rate, burst);
        let gap_ns = len as u64 * 8 * 1_000_000_000 / (2 * rate); // 4 Mbit/s
        let (mut passed, mut offered, mut t) = (0u64, 0u64, 0u64);
        while t < 10_000 * MS {
            offered += len as u64;
            if b.admit(t, len) {
                passed += len as u64;
            }
            t += gap_ns;
        }
        // At the last frame's time the bucket has earned burst + rate x time and holds less
        // than one frame's tokens (the offer exceeds the rate).
        let earned = burst + rate * (t - gap_ns) / 8 / 1_000_000_000;
        assert!(
            passed <= earned && passed + len as u64 > earned,
            "passed {passed}, earned {earned}"
        );
        assert!(passed < offered * 6 / 10 && passed > offered * 4 / 10);
        assert_eq!(b.drop_bytes + passed, offered);
    }

    #[test]
    fn time_going_backwards_does_not_mint_tokens() {
        let mut b = bucket(8_000_000, 2000);
        assert!(b.admit(5 * MS, 2000));
        assert!(!b.admit(4 * MS, 1000), "an earlier time refills nothing");
        assert!(
            b.admit(6 * MS, 1000),
            "1 ms after the latest time: 1000 bytes"
        );
    }

    #[test]
    fn parse_names_bad_values() {
        assert_eq!(
            parse_police("2000000:15140").unwrap(),
            Police {
                rate_bps: 2_000_000,
                burst_bytes: 15_140
            }
        );
        assert_eq!(
            parse_police("2000000:15140").unwrap().to_string(),
            "2000000:15140"
        );
        for (bad, says) in [
            ("2000000", "RATE_BPS:BURST_BYTES"),
            ("2mbit:1500", "\"2mbit\""),
            ("2000000:15k", "\"15k\""),
            ("0:1500", "rate 0 bit/s is out of range"),
            ("1000:0", "burst 0 bytes is out of range"),
            ("100000000001:1500", "out of range"),
            ("1000:1000000001", "out of range"),
            ("-5:1500", "\"-5\""),
        ] {
            let e = parse_police(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
