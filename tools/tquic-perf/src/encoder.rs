//! The live mode's encoder model: frame sizes that follow the current bitrate, a key frame
//! every GOP, seeded size jitter (README.md, "Live mode").
//!
//! Within a GOP of `n` frames, one key frame is `keyframe_ratio` times a delta frame, so a
//! delta frame is `bitrate * gop_s / 8 / (keyframe_ratio + n - 1)` bytes and the GOP carries
//! `bitrate * gop_s / 8` bytes on average: the bitrate is kept per GOP, as a CBR encoder's
//! rate control does. Each size is then scaled by a factor drawn uniformly from
//! `[1 - jitter, 1 + jitter]` (mean 1) from a seeded PRNG, so a run is reproducible.

/// Bytes of the header every message carries (see crate::live::Header).
pub const HEADER_BYTES: usize = 24;

/// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014): a small, well-mixed, seedable generator; no dependency needed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
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
}

/// What the encoder is configured with.
#[derive(Debug, Clone, Copy)]
pub struct EncoderConfig {
    pub fps: u32,
    pub gop_s: f64,
    pub keyframe_ratio: f64,
    /// Relative half-width of the uniform size jitter, in [0, 0.9].
    pub jitter: f64,
    pub seed: u64,
}

/// One encoded frame: its number, size in bytes (header included) and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub number: u32,
    pub bytes: usize,
    pub key: bool,
}

#[derive(Debug, Clone)]
pub struct Encoder {
    cfg: EncoderConfig,
    gop_frames: u32,
    rng: Rng,
    next_number: u32,
}

impl Encoder {
    pub fn new(cfg: EncoderConfig) -> Self {
        let gop_frames = ((cfg.gop_s * cfg.fps as f64).round() as u32).max(1);
        Encoder {
            cfg,
            gop_frames,
            rng: Rng::new(cfg.seed),
            next_number: 0,
        }
    }

    /// Frames per GOP (the key frame period in frames).
    pub fn gop_frames(&self) -> u32 {
        self.gop_frames
    }

    /// The interval between frames, in seconds.
    pub fn frame_interval_s(&self) -> f64 {
        1.0 / self.cfg.fps as f64
    }

    /// Mean sizes (bytes) of a delta and a key frame at `kbps`, before jitter.
    pub fn mean_sizes(&self, kbps: u32) -> (f64, f64) {
        let gop_bytes = kbps as f64 * 1000.0 / 8.0 * self.gop_frames as f64 / self.cfg.fps as f64;
        let delta = gop_bytes / (self.cfg.keyframe_ratio + self.gop_frames as f64 - 1.0);
        (delta, delta * self.cfg.keyframe_ratio)
    }

    /// The next frame at the current bitrate `kbps`.
    pub fn next_frame(&mut self, kbps: u32) -> Frame {
        let number = self.next_number;
        self.next_number = self.next_number.wrapping_add(1);
        let key = number.is_multiple_of(self.gop_frames);
        let (delta, keyf) = self.mean_sizes(kbps);
        let mean = if key { keyf } else { delta };
        let factor = 1.0 + self.cfg.jitter * (2.0 * self.rng.unit() - 1.0);
        let bytes = ((mean * factor).round() as usize).max(HEADER_BYTES);
        Frame { number, bytes, key }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(jitter: f64, seed: u64) -> Encoder {
        Encoder::new(EncoderConfig {
            fps: 30,
            gop_s: 2.0,
            keyframe_ratio: 5.0,
            jitter,
            seed,
        })
    }

    #[test]
    fn a_gop_carries_the_bitrate_and_key_frames_come_every_gop() {
        let mut e = enc(0.1, 7);
        assert_eq!(e.gop_frames(), 60);
        for kbps in [145u32, 1100, 4000] {
            // Mean bitrate over 20 GOPs within 2 % of the target (jitter is mean-free).
            let frames: Vec<Frame> = (0..60 * 20).map(|_| e.next_frame(kbps)).collect();
            let bits: f64 = frames.iter().map(|f| f.bytes as f64 * 8.0).sum();
            let got_kbps = bits / (frames.len() as f64 / 30.0) / 1000.0;
            assert!(
                (got_kbps / kbps as f64 - 1.0).abs() < 0.02,
                "{kbps}: {got_kbps}"
            );
            let keys: Vec<u32> = frames.iter().filter(|f| f.key).map(|f| f.number).collect();
            assert_eq!(keys.len(), 20);
            assert!(keys.windows(2).all(|w| w[1] - w[0] == 60), "{keys:?}");
        }
    }

    #[test]
    fn key_frames_are_ratio_times_delta_frames() {
        let mut e = enc(0.0, 1);
        let f: Vec<Frame> = (0..60).map(|_| e.next_frame(2000)).collect();
        assert!(f[0].key && !f[1].key);
        let ratio = f[0].bytes as f64 / f[1].bytes as f64;
        assert!((ratio - 5.0).abs() < 0.01, "{ratio}");
        // Without jitter one GOP is exactly bitrate * gop_s / 8 (to rounding).
        let sum: usize = f.iter().map(|x| x.bytes).sum();
        assert!(
            (sum as f64 - 2000.0 * 1000.0 / 8.0 * 2.0).abs() < 60.0,
            "{sum}"
        );
    }

    #[test]
    fn sizes_follow_a_bitrate_change() {
        let mut e = enc(0.0, 1);
        let _ = e.next_frame(1000); // key
        let low = e.next_frame(1000).bytes;
        let high = e.next_frame(4000).bytes;
        assert!(
            (high as f64 / low as f64 - 4.0).abs() < 0.01,
            "{low} {high}"
        );
    }

    #[test]
    fn same_seed_same_sizes_other_seed_other_sizes() {
        let a: Vec<usize> = {
            let mut e = enc(0.1, 42);
            (0..100).map(|_| e.next_frame(1100).bytes).collect()
        };
        let b: Vec<usize> = {
            let mut e = enc(0.1, 42);
            (0..100).map(|_| e.next_frame(1100).bytes).collect()
        };
        let c: Vec<usize> = {
            let mut e = enc(0.1, 43);
            (0..100).map(|_| e.next_frame(1100).bytes).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn a_frame_is_never_smaller_than_its_header() {
        let mut e = Encoder::new(EncoderConfig {
            fps: 120,
            gop_s: 10.0,
            keyframe_ratio: 50.0,
            jitter: 0.9,
            seed: 3,
        });
        assert!((0..2000).all(|_| e.next_frame(1).bytes >= HEADER_BYTES));
    }
}
