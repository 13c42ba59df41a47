//! The live mode's messages on the wire: every message starts with a 24-byte header, a video
//! frame's header is followed by its payload (README.md, "Live mode: on the wire").
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind: `V` video frame, `P` ping, `E` echo of a ping, `F` feedback (a frame received) |
//! | 1 | flags: bit 0 key frame, bit 1 in-band ping (sent on the video path) |
//! | 2-3 | zero |
//! | 4-7 | number: frame number or ping sequence number (big-endian) |
//! | 8-15 | time, Unix µs: capture (`V`), send (`P`, `E`), receipt (`F`) (big-endian) |
//! | 16-19 | size: the message's bytes, header included (big-endian) |
//! | 20-23 | zero |

use crate::encoder::HEADER_BYTES;

pub const VIDEO: u8 = b'V';
pub const PING: u8 = b'P';
pub const ECHO: u8 = b'E';
pub const FEEDBACK: u8 = b'F';
pub const FLAG_KEY: u8 = 1;
pub const FLAG_INBAND: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub flags: u8,
    pub number: u32,
    pub time_us: u64,
    pub size: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0] = self.kind;
        b[1] = self.flags;
        b[4..8].copy_from_slice(&self.number.to_be_bytes());
        b[8..16].copy_from_slice(&self.time_us.to_be_bytes());
        b[16..20].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<Header, String> {
        let h = Header {
            kind: b[0],
            flags: b[1],
            number: u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")),
            time_us: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
            size: u32::from_be_bytes(b[16..20].try_into().expect("4 bytes")),
        };
        let ok_kind = matches!(h.kind, VIDEO | PING | ECHO | FEEDBACK);
        let ok_size = if h.kind == VIDEO {
            h.size as usize >= HEADER_BYTES
        } else {
            h.size as usize == HEADER_BYTES
        };
        if !ok_kind || !ok_size {
            return Err(format!(
                "malformed live message header: kind {:#04x}, size {}",
                h.kind, h.size
            ));
        }
        Ok(h)
    }

    /// A header-only message (ping, echo, feedback).
    pub fn small(kind: u8, flags: u8, number: u32, time_us: u64) -> Header {
        Header {
            kind,
            flags,
            number,
            time_us,
            size: HEADER_BYTES as u32,
        }
    }
}

/// Reads a stream of messages as it arrives in pieces; a message is reported when its last
/// byte has arrived.
#[derive(Debug, Default)]
pub struct Reader {
    hdr: [u8; HEADER_BYTES],
    have: usize,
    payload_left: usize,
    cur: Option<Header>,
}

impl Reader {
    pub fn feed(&mut self, mut data: &[u8], mut on_msg: impl FnMut(Header)) -> Result<(), String> {
        while !data.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(data.len());
                self.payload_left -= n;
                data = &data[n..];
                if self.payload_left == 0 {
                    on_msg(self.cur.take().expect("a header precedes its payload"));
                }
                continue;
            }
            let n = (HEADER_BYTES - self.have).min(data.len());
            self.hdr[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == HEADER_BYTES {
                self.have = 0;
                let h = Header::decode(&self.hdr)?;
                let payload = h.size as usize - HEADER_BYTES;
                if payload == 0 {
                    on_msg(h);
                } else {
                    self.payload_left = payload;
                    self.cur = Some(h);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            kind: VIDEO,
            flags: FLAG_KEY,
            number: 77,
            time_us: 1_795_000_000_123_456,
            size: 5000,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Header::decode(&bad).unwrap_err().contains("0x58"));
        let short = Header { size: 3, ..h };
        assert!(Header::decode(&short.encode()).is_err());
    }

    #[test]
    fn messages_split_anywhere_are_reassembled() {
        let mut wire = Vec::new();
        let a = Header {
            kind: VIDEO,
            flags: 0,
            number: 1,
            time_us: 5,
            size: 1000,
        };
        wire.extend_from_slice(&a.encode());
        wire.extend(std::iter::repeat_n(0u8, 1000 - HEADER_BYTES));
        let p = Header::small(PING, FLAG_INBAND, 9, 6);
        wire.extend_from_slice(&p.encode());
        for chunk in [1usize, 7, 23, 24, 25, 999, 5000] {
            let mut r = Reader::default();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                r.feed(piece, |h| got.push(h)).unwrap();
            }
            assert_eq!(got, vec![a, p], "chunk {chunk}");
        }
    }
}
