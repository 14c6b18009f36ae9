//! The session's newline framer against a model of what it must yield.
//!
//! Input: byte 0 picks the line cap (0..=63, so that caps are hit often),
//! byte 1 seeds the sizes of the reads the stream arrives in, the rest is
//! the stream. After each read every frame is taken, as a session does.
//! Properties: no line is longer than the cap; the frames are exactly the
//! stream's lines, with one `TooLong` for each line over the cap (reported
//! as soon as the bytes held pass the cap, or when its newline comes); the
//! bytes held never exceed the cap plus the read that brought them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use osprey_server::framer::{Frame, LineFramer};

fuzz_target!(|data: &[u8]| {
    let [cap, seed, stream @ ..] = data else {
        return;
    };
    let line_bytes_max = usize::from(cap % 64);
    let mut framer = LineFramer::new(line_bytes_max);
    let mut got = Vec::new();
    let mut rest = stream;
    let mut step = *seed;
    while !rest.is_empty() {
        // Reads of 1 to 32 bytes, in a pattern the seed picks.
        step = step.wrapping_mul(31).wrapping_add(17);
        let n = (usize::from(step % 32) + 1).min(rest.len());
        let (read, after) = rest.split_at(n);
        rest = after;
        framer.push(read);
        assert!(framer.buffered() <= line_bytes_max + read.len());
        while let Some(frame) = framer.next_frame() {
            if let Frame::Line(line) = &frame {
                assert!(line.len() <= line_bytes_max, "a line over the cap");
                assert!(!line.contains(&b'\n'));
            }
            got.push(frame);
        }
        assert!(
            framer.buffered() <= line_bytes_max,
            "{} bytes held after the frames were taken, cap {line_bytes_max}",
            framer.buffered()
        );
    }
    assert_eq!(got, expected(stream, line_bytes_max));
});

/// Every complete line, or `TooLong` for one over the cap; a last line
/// without its newline yields `TooLong` if it is already over the cap.
fn expected(stream: &[u8], line_bytes_max: usize) -> Vec<Frame> {
    let mut lines: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    let unfinished = lines.pop().expect("split yields at least one piece");
    let mut frames: Vec<Frame> = lines
        .into_iter()
        .map(|line| {
            if line.len() > line_bytes_max {
                Frame::TooLong
            } else {
                Frame::Line(line.to_vec())
            }
        })
        .collect();
    if unfinished.len() > line_bytes_max {
        frames.push(Frame::TooLong);
    }
    frames
}
