//! LEB128 numbers, as the index's rows and records write them.

/// LEB128: small numbers (most vouts, input indexes) take one byte.
pub fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads what `write_varint` writes, and nothing else: a number has one
/// encoding, so a damaged row is an error rather than another row. `None`
/// for a truncated number, a redundant last group of zeros, or one past
/// 64 bits.
pub fn read_varint(input: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for (i, &byte) in input.iter().enumerate().take(10) {
        let group = u64::from(byte & 0x7f);
        // The tenth group holds bit 63 only.
        if i == 9 && group > 1 {
            return None;
        }
        n |= group << (7 * i);
        if byte & 0x80 == 0 {
            if i > 0 && group == 0 {
                return None;
            }
            *input = &input[i + 1..];
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trips() {
        for n in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut buf = Vec::new();
            write_varint(&mut buf, n);
            let mut slice = buf.as_slice();
            assert_eq!(read_varint(&mut slice), Some(n));
            assert!(slice.is_empty());
        }
        assert_eq!(read_varint(&mut &[0x80u8][..]), None);
    }

    #[test]
    fn varints_have_one_encoding() {
        // Found by the fuzz target decode_history_row: 0xd9 0x00 read as
        // 89, whose encoding is 0x59, so a damaged row read as another.
        assert_eq!(read_varint(&mut &[0xd9u8, 0x00][..]), None);
        assert_eq!(read_varint(&mut &[0x80u8, 0x80, 0x00][..]), None);
        let mut max = [0xffu8; 10];
        max[9] = 0x01;
        assert_eq!(read_varint(&mut &max[..]), Some(u64::MAX));
        max[9] = 0x03;
        assert_eq!(read_varint(&mut &max[..]), None, "past 64 bits");
    }
}
