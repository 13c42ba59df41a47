//! The per-direction FIFO: frames with their release time, bounded by a frame limit.
//!
//! The delay is constant per direction, so arrival order is release order and a plain FIFO
//! keeps frames in order without sorting.

use std::collections::VecDeque;

/// One held frame: its bytes and the monotonic time (ns) at which it may leave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub release_ns: u64,
    pub data: Vec<u8>,
}

/// Bounded FIFO of frames.
#[derive(Debug)]
pub struct DelayQueue {
    frames: VecDeque<Frame>,
    limit: usize,
    max_len: usize,
}

impl DelayQueue {
    pub fn new(limit: usize) -> Self {
        DelayQueue {
            frames: VecDeque::with_capacity(limit.min(4096)),
            limit,
            max_len: 0,
        }
    }

    /// Appends a frame; gives it back if the queue already holds `limit` frames.
    pub fn push(&mut self, frame: Frame) -> Result<(), Frame> {
        if self.frames.len() >= self.limit {
            return Err(frame);
        }
        debug_assert!(
            !matches!(self.frames.back(), Some(b) if b.release_ns > frame.release_ns),
            "release times must not decrease"
        );
        self.frames.push_back(frame);
        self.max_len = self.max_len.max(self.frames.len());
        Ok(())
    }

    /// Release time of the oldest frame.
    pub fn next_release_ns(&self) -> Option<u64> {
        self.frames.front().map(|f| f.release_ns)
    }

    /// Moves every frame due at `now_ns` into `out`, oldest first; returns how many.
    pub fn pop_due(&mut self, now_ns: u64, out: &mut Vec<Frame>) -> usize {
        let mut n = 0;
        while self.frames.front().is_some_and(|f| f.release_ns <= now_ns) {
            out.extend(self.frames.pop_front());
            n += 1;
        }
        n
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Most frames held at once so far.
    pub fn max_len(&self) -> usize {
        self.max_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(t: u64, b: u8) -> Frame {
        Frame {
            release_ns: t,
            data: vec![b],
        }
    }

    #[test]
    fn fifo_and_due_only() {
        let mut q = DelayQueue::new(10);
        q.push(f(10, 1)).unwrap();
        q.push(f(20, 2)).unwrap();
        q.push(f(20, 3)).unwrap();
        q.push(f(30, 4)).unwrap();
        let mut out = Vec::new();
        assert_eq!(q.pop_due(9, &mut out), 0);
        assert_eq!(q.next_release_ns(), Some(10));
        assert_eq!(q.pop_due(20, &mut out), 3);
        assert_eq!(
            out.iter().map(|f| f.data[0]).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(q.len(), 1);
        assert_eq!(q.next_release_ns(), Some(30));
        assert_eq!(q.max_len(), 4);
    }

    #[test]
    fn limit_rejects_and_returns_frame() {
        let mut q = DelayQueue::new(2);
        q.push(f(1, 1)).unwrap();
        q.push(f(2, 2)).unwrap();
        assert_eq!(q.push(f(3, 3)), Err(f(3, 3)));
        let mut out = Vec::new();
        q.pop_due(1, &mut out);
        q.push(f(4, 4)).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q.max_len(), 2);
    }
}
