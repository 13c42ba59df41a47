//! The live mode's receiving end (README.md, "Live mode"): reads the sender's streams as
//! messages (crate::wire), measures each frame's latency from capture to the arrival of its
//! last byte, echoes pings, and reports every complete frame back to the sender (`F`), the
//! way a Cast receiver acknowledges frames. Echoes and feedback go on one stream of the
//! receiver's own at the highest urgency.
//!
//! Frame latency compares the receiver's clock with the sender's capture stamp: both ends
//! must share a clock (namespaces of one host do; across hosts it includes their offset).

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use serde::Serialize;
use tquic::Connection;

use crate::live::unix_us;
use crate::livestats::{PerSecond, SampleSummary, Samples};
use crate::wire::{self, Header, Reader};

/// The receiver's `live` object in the JSON report (README.md documents each field).
#[derive(Debug, Clone, Serialize)]
pub struct LiveReceiverReport {
    pub app: &'static str,
    pub frames_received: u64,
    pub key_frames_received: u64,
    pub app_bytes_received: u64,
    pub goodput_fb_kbps: f64,
    pub frame_latency_ms: SampleSummary,
    /// `[t_s, frames, mean_ms, max_ms]` per second since the first byte.
    pub frame_latency_per_s: Vec<(u32, u32, f64, f64)>,
    pub pings_echoed: u64,
}

#[derive(Default)]
pub struct LiveReceiver {
    readers: HashMap<u64, Reader>,
    out_stream: Option<u64>,
    out: Vec<u8>,
    frames: u64,
    keys: u64,
    app_bytes: u64,
    latency: Samples,
    per_s: PerSecond,
    echoed: u64,
    first: Option<Instant>,
    error: Option<String>,
}

impl LiveReceiver {
    /// A malformed message seen, if any (the connection is then closed).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Opens the stream for echoes and feedback. Call when the connection is established,
    /// before the sender's streams arrive: tquic 1.6 advances its next local stream ID past
    /// every peer stream it sees (`StreamMap::get_or_create`), so a stream opened later
    /// would get the peer's ID type and be refused.
    pub fn open(&mut self, conn: &mut Connection) {
        if self.out_stream.is_none() {
            self.out_stream = conn.stream_uni_new(0, false).ok();
        }
    }

    /// Reads stream `sid`; returns the stream bytes read.
    pub fn on_readable(&mut self, conn: &mut Connection, sid: u64, buf: &mut [u8]) -> u64 {
        let mut total = 0u64;
        let mut msgs: Vec<(Header, Instant, SystemTime)> = Vec::new();
        let reader = self.readers.entry(sid).or_default();
        let mut finished = false;
        while let Ok((n, fin)) = conn.stream_read(sid, buf) {
            total += n as u64;
            let (now, wall) = (Instant::now(), SystemTime::now());
            if let Err(e) = reader.feed(&buf[..n], |h| msgs.push((h, now, wall))) {
                self.error = Some(format!("stream {sid}: {e}"));
                let _ = conn.close(true, 2, b"malformed live message");
                return total;
            }
            if fin {
                finished = true;
            }
            if fin || n == 0 {
                break;
            }
        }
        if finished {
            self.readers.remove(&sid);
        }
        if total > 0 && self.first.is_none() {
            self.first = Some(Instant::now());
        }
        for (h, now, wall) in msgs {
            self.on_message(h, now, wall);
        }
        self.flush(conn);
        total
    }

    fn on_message(&mut self, h: Header, now: Instant, wall: SystemTime) {
        let wall_us = unix_us(wall);
        match h.kind {
            wire::VIDEO => {
                self.frames += 1;
                if h.flags & wire::FLAG_KEY != 0 {
                    self.keys += 1;
                }
                self.app_bytes += h.size as u64;
                let ms = (wall_us as f64 - h.time_us as f64) / 1000.0;
                let t = self
                    .first
                    .map_or(0.0, |f| now.saturating_duration_since(f).as_secs_f64());
                self.latency.add(t, ms);
                self.per_s.add(t, ms);
                let fb = Header::small(wire::FEEDBACK, h.flags, h.number, wall_us);
                self.out.extend_from_slice(&fb.encode());
            }
            wire::PING => {
                self.echoed += 1;
                let e = Header::small(wire::ECHO, h.flags, h.number, h.time_us);
                self.out.extend_from_slice(&e.encode());
            }
            _ => {}
        }
    }

    /// Sends pending echoes and feedback.
    pub fn flush(&mut self, conn: &mut Connection) {
        if self.out.is_empty() {
            return;
        }
        let sid = match self.out_stream {
            Some(s) => s,
            None => match conn.stream_uni_new(0, false) {
                Ok(s) => {
                    self.out_stream = Some(s);
                    s
                }
                Err(_) => return,
            },
        };
        let data = Bytes::from(std::mem::take(&mut self.out));
        match conn.stream_write(sid, data.clone(), false) {
            Ok(n) if n < data.len() => {
                self.out = data[n..].to_vec();
                let _ = conn.stream_want_write(sid, true);
            }
            Ok(_) => {}
            Err(_) => self.out = data.to_vec(),
        }
    }

    pub fn report(&self, duration_s: f64) -> LiveReceiverReport {
        LiveReceiverReport {
            app: "live",
            frames_received: self.frames,
            key_frames_received: self.keys,
            app_bytes_received: self.app_bytes,
            goodput_fb_kbps: if duration_s > 0.0 {
                self.app_bytes as f64 * 8.0 / duration_s / 1000.0
            } else {
                0.0
            },
            frame_latency_ms: self.latency.summary(),
            frame_latency_per_s: self.per_s.rows(),
            pings_echoed: self.echoed,
        }
    }
}
