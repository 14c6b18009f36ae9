//! Osprey's shared vocabulary: heights, transaction numbers, script hashes,
//! status hashes and network parameters. No I/O, no async, no storage: every
//! other crate speaks in these types.

mod budget;
mod network;
mod types;
mod varint;

pub use budget::{ByteBudget, Charge};
pub use network::Network;
pub use types::{Height, ScriptHash, StatusHash, TxNum};
pub use varint::{read_varint, write_varint};

/// Lower-case hex of `bytes`. The `hex` crate's `encode` collects a char
/// iterator one character at a time, which showed in profiles of serving
/// transactions and headers; encoding into a buffer does not.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut buf = vec![0u8; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut buf).expect("the buffer is twice the input");
    String::from_utf8(buf).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    #[test]
    fn to_hex_is_lower_case_two_digits_a_byte() {
        assert_eq!(super::to_hex(&[]), "");
        assert_eq!(super::to_hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(super::to_hex(&bytes), hex::encode(&bytes));
    }
}
