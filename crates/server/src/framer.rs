//! Splits a byte stream into newline-terminated lines with a length cap.
//! An oversized line is reported once and then discarded up to its newline,
//! so memory stays bounded and the session can go on. No I/O here.

/// What the framer yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, without its `\n`.
    Line(Vec<u8>),
    /// A line passed the limit; its bytes up to the next `\n` are dropped.
    TooLong,
}

/// An incomplete line this long is likely to be much longer (a wallet's
/// lines are a few kilobytes; the session parses lines up to 64 KiB on
/// its own task).
const LONG_LINE_BYTES: usize = 64 * 1024;

/// Newline framing with a maximum line length.
#[derive(Debug)]
pub struct LineFramer {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for `\n`, so each byte is scanned once.
    scanned: usize,
    line_bytes_max: usize,
    discarding: bool,
}

impl LineFramer {
    pub fn new(line_bytes_max: usize) -> Self {
        LineFramer {
            buf: Vec::new(),
            scanned: 0,
            line_bytes_max,
            discarding: false,
        }
    }

    /// Appends received bytes. An incomplete line past
    /// [`LONG_LINE_BYTES`] gets room for the longest line allowed at once:
    /// growing it by doubling copied it four more times and faulted in
    /// fresh pages each time, and six hundred sessions sending 581 KiB
    /// lines spent 42% of the server's CPU clearing those pages. Room not
    /// written to is not resident.
    pub fn push(&mut self, bytes: &[u8]) {
        let needed = self.buf.len() + bytes.len();
        if needed > self.buf.capacity() && self.buf.len() >= LONG_LINE_BYTES {
            let longest = self.line_bytes_max + 1;
            self.buf.reserve_exact(longest.max(needed) - self.buf.len());
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held (an incomplete line, or complete ones not yet taken).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Returns the next frame, or `None` until more bytes arrive.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            let newline = self.buf[self.scanned..].iter().position(|&b| b == b'\n');
            match newline {
                Some(offset) => {
                    let end = self.scanned + offset;
                    // A buffer that is exactly one line becomes that line,
                    // taking its capacity along: a session that once sent a
                    // megabyte does not keep a megabyte.
                    let mut line = if end + 1 == self.buf.len() {
                        std::mem::take(&mut self.buf)
                    } else {
                        self.buf.drain(..=end).collect()
                    };
                    line.pop();
                    self.scanned = 0;
                    if self.discarding {
                        // The tail of an oversized line: already reported.
                        self.discarding = false;
                        continue;
                    }
                    if line.len() > self.line_bytes_max {
                        return Some(Frame::TooLong);
                    }
                    return Some(Frame::Line(line));
                }
                None => {
                    if self.discarding {
                        self.buf = Vec::new();
                        self.scanned = 0;
                        return None;
                    }
                    if self.buf.len() > self.line_bytes_max {
                        self.buf = Vec::new();
                        self.scanned = 0;
                        self.discarding = true;
                        return Some(Frame::TooLong);
                    }
                    self.scanned = self.buf.len();
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(framer: &mut LineFramer) -> Vec<Frame> {
        std::iter::from_fn(|| framer.next_frame()).collect()
    }

    #[test]
    fn splits_lines_across_reads() {
        let mut f = LineFramer::new(100);
        f.push(b"{\"a\":1}\n{\"b\"");
        assert_eq!(frames(&mut f), vec![Frame::Line(b"{\"a\":1}".to_vec())]);
        f.push(b":2}\n\n");
        assert_eq!(
            frames(&mut f),
            vec![Frame::Line(b"{\"b\":2}".to_vec()), Frame::Line(vec![])]
        );
        assert_eq!(f.buffered(), 0);
    }

    #[test]
    fn oversized_line_is_reported_once_and_skipped() {
        let mut f = LineFramer::new(10);
        f.push(&[b'x'; 8]);
        assert_eq!(frames(&mut f), vec![]);
        f.push(&[b'x'; 8]);
        assert_eq!(frames(&mut f), vec![Frame::TooLong]);
        f.push(&[b'y'; 1000]);
        assert_eq!(frames(&mut f), vec![]);
        assert_eq!(f.buffered(), 0, "discarded bytes are not kept");
        f.push(b"yyy\nok\n");
        assert_eq!(frames(&mut f), vec![Frame::Line(b"ok".to_vec())]);
        // A whole oversized line arriving at once.
        f.push(b"0123456789ABC\nnext\n");
        assert_eq!(
            frames(&mut f),
            vec![Frame::TooLong, Frame::Line(b"next".to_vec())]
        );
        // Exactly at the limit is fine.
        f.push(b"0123456789\n");
        assert_eq!(frames(&mut f), vec![Frame::Line(b"0123456789".to_vec())]);
    }

    #[test]
    fn a_large_line_takes_its_memory_along() {
        let mut f = LineFramer::new(1 << 20);
        for _ in 0..50 {
            f.push(&[b'x'; 10_000]);
            assert_eq!(f.next_frame(), None);
        }
        f.push(b"\n");
        assert!(matches!(f.next_frame(), Some(Frame::Line(line)) if line.len() == 500_000));
        assert_eq!(f.capacity(), 0, "an idle session keeps no buffer");
        f.push(&[b'y'; 2_000_000]);
        assert_eq!(f.next_frame(), Some(Frame::TooLong));
        assert_eq!(f.capacity(), 0, "nor after an oversized line");
    }
}
