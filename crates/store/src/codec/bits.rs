//! Bit strings, most significant bit first, and the Rice code of the
//! steps between sorted numbers: a `txid` bucket's tx_nums
//! ([`super::txid`]) and the txid prefixes of a bulk load's runs.
//!
//! A Rice code with `k` bits writes a step as its quotient by 2^k in
//! unary (that many ones, then a zero) and its remainder in `k` bits: for
//! steps spread as the gaps between random numbers are (geometrically)
//! and `k` near the log of their mean, ~1.6 bits over `k`, where LEB128
//! pays a byte for every 7 bits and rounds up. A quotient of
//! [`UNARY_MAX`] or more is that many ones and the step whole, in
//! [`STEP_BITS`], which bounds what a step can take.

/// Quotients from which a step is written whole.
const UNARY_MAX: u64 = 32;

/// Bits of a step written whole.
pub(crate) const STEP_BITS: u32 = 40;

/// Bits appended most significant first.
#[derive(Default)]
pub(crate) struct BitWriter {
    bytes: Vec<u8>,
    /// Bits not yet in `bytes`: the low `pending` bits of `acc`.
    acc: u64,
    pending: u32,
}

impl BitWriter {
    /// Appends the low `count` bits of `bits` (at most 56).
    pub(crate) fn push(&mut self, bits: u64, count: u32) {
        debug_assert!(count <= 56);
        if count == 0 {
            return;
        }
        self.acc = self.acc << count | (bits & ((1 << count) - 1));
        self.pending += count;
        while self.pending >= 8 {
            self.pending -= 8;
            self.bytes.push((self.acc >> self.pending) as u8);
        }
        self.acc &= (1 << self.pending) - 1;
    }

    /// Appends `step` Rice-coded with `rice_bits` bits (below
    /// 2^[`STEP_BITS`]).
    pub(crate) fn push_step(&mut self, step: u64, rice_bits: u32) {
        debug_assert!(step < 1 << STEP_BITS);
        let quotient = (step >> rice_bits).min(UNARY_MAX);
        self.push((1 << quotient) - 1, quotient as u32);
        if quotient == UNARY_MAX {
            self.push(step, STEP_BITS);
        } else {
            self.push(0, 1);
            self.push(step, rice_bits);
        }
    }

    /// Bytes written so far, the last partly filled one included.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len() + usize::from(self.pending > 0)
    }

    /// The bytes, the last one padded with zeros; the writer is left
    /// empty.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        if self.pending > 0 {
            self.push(0, 8 - self.pending);
        }
        std::mem::take(&mut self.bytes)
    }
}

/// Reads bits most significant first.
pub(crate) struct BitReader<'a> {
    bytes: &'a [u8],
    /// Bits read.
    at: usize,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> BitReader<'a> {
        BitReader { bytes, at: 0 }
    }

    /// A reader of `bytes` from bit `at` on.
    pub(crate) fn from(bytes: &'a [u8], at: usize) -> BitReader<'a> {
        BitReader {
            bytes,
            at: at.min(bytes.len() * 8),
        }
    }

    /// Bits read from the start of the bytes.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// Bits not read yet.
    pub(crate) fn left(&self) -> usize {
        self.bytes.len() * 8 - self.at
    }

    /// The next `count` bits (at most 64); `None` past the end.
    pub(crate) fn bits(&mut self, count: u32) -> Option<u64> {
        if count as usize > self.left() {
            return None;
        }
        let mut n = 0u64;
        let mut need = count;
        while need > 0 {
            let byte = u64::from(self.bytes[self.at / 8]);
            let available = 8 - (self.at % 8) as u32;
            let take = available.min(need);
            let chunk = byte >> (available - take) & ((1 << take) - 1);
            n = n << take | chunk;
            self.at += take as usize;
            need -= take;
        }
        Some(n)
    }

    /// The next step, Rice-coded with `rice_bits` bits; `None` past the
    /// end, or for a step written whole that the unary code would have
    /// held (each step has one encoding).
    pub(crate) fn step(&mut self, rice_bits: u32) -> Option<u64> {
        let mut quotient = 0;
        while quotient < UNARY_MAX && self.bits(1)? == 1 {
            quotient += 1;
        }
        if quotient == UNARY_MAX {
            return self
                .bits(STEP_BITS)
                .filter(|&step| step >> rice_bits >= UNARY_MAX);
        }
        Some(quotient << rice_bits | self.bits(rice_bits)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_bits_read_back_as_written() {
        let steps = [
            0u64,
            1,
            5,
            (1 << 20) - 1,
            1 << 20,
            31 << 20,
            32 << 20,
            (1 << 40) - 1,
        ];
        for rice_bits in [0, 1, 6, 20] {
            let mut out = BitWriter::default();
            for &step in &steps {
                out.push_step(step, rice_bits);
                out.push(0b101, 3);
            }
            let bytes = out.take();
            let mut read = BitReader::new(&bytes);
            for &step in &steps {
                assert_eq!(read.step(rice_bits), Some(step), "k {rice_bits}");
                assert_eq!(read.bits(3), Some(0b101));
            }
            assert!(read.left() < 8);
            assert_eq!(read.bits(read.left() as u32), Some(0), "zero padding");
        }
        // A step written whole where the unary code holds it is refused.
        let mut out = BitWriter::default();
        out.push(u64::MAX, 32);
        out.push(5, STEP_BITS);
        let bytes = out.take();
        assert_eq!(BitReader::new(&bytes).step(20), None);
    }
}
