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

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held, for tests (and fuzz targets) of the memory bound.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Returns the next frame, or `None` until more bytes arrive.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            let newline = self.buf[self.scanned..].iter().position(|&b| b == b'\n');
            match newline {
                Some(offset) => {
                    let end = self.scanned + offset;
                    let mut line: Vec<u8> = self.buf.drain(..=end).collect();
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
                        self.buf.clear();
                        self.scanned = 0;
                        return None;
                    }
                    if self.buf.len() > self.line_bytes_max {
                        self.buf.clear();
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
}
