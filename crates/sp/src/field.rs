//! Arithmetic modulo secp256k1's field prime `p = 2^256 − 2^32 − 977`: just
//! what the batched scan kernel needs to add points in affine coordinates
//! with one field inversion for a whole batch (Montgomery's trick), which
//! libsecp256k1's API cannot do (each of its point additions returns an
//! affine point, so pays an inversion of its own: scan.rs, `CandidateBatch`).
//!
//! Elements are four 64-bit limbs, least significant first, always fully
//! reduced (below `p`), so equal elements have equal bytes. Reductions use
//! masks rather than branches: the coordinates added are derived from the
//! client's scan key.

/// `2^256 − p`: a carry out of 256 bits is worth this much modulo `p`.
const C: u64 = 0x1_0000_03D1;

/// `p`, least significant limb first.
const P: [u64; 4] = [
    0xFFFF_FFFE_FFFF_FC2F,
    0xFFFF_FFFF_FFFF_FFFF,
    0xFFFF_FFFF_FFFF_FFFF,
    0xFFFF_FFFF_FFFF_FFFF,
];

/// An element of the field, below `p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fe([u64; 4]);

impl Fe {
    pub(crate) const ONE: Fe = Fe([1, 0, 0, 0]);

    /// From 32 big-endian bytes; `None` at or above `p`.
    pub(crate) fn from_be_bytes(bytes: &[u8; 32]) -> Option<Fe> {
        let mut limbs = [0u64; 4];
        for (i, limb) in limbs.iter_mut().enumerate() {
            let start = 32 - 8 * (i + 1);
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[start..start + 8]);
            *limb = u64::from_be_bytes(word);
        }
        // Below p exactly when adding 2^256 − p does not carry out.
        let (_, carry) = add_c(limbs, 0);
        (carry == 0).then_some(Fe(limbs))
    }

    pub(crate) fn to_be_bytes(self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        for (i, limb) in self.0.iter().enumerate() {
            let start = 32 - 8 * (i + 1);
            bytes[start..start + 8].copy_from_slice(&limb.to_be_bytes());
        }
        bytes
    }

    pub(crate) fn is_zero(self) -> bool {
        self.0 == [0; 4]
    }

    pub(crate) fn sub(self, other: Fe) -> Fe {
        let mut difference = [0u64; 4];
        let mut borrow = 0u64;
        for (i, limb) in difference.iter_mut().enumerate() {
            let (d, b1) = self.0[i].overflowing_sub(other.0[i]);
            let (d, b2) = d.overflowing_sub(borrow);
            *limb = d;
            borrow = u64::from(b1) | u64::from(b2);
        }
        // After a borrow the limbs hold `self − other + 2^256`, and the
        // answer is that plus `p`, i.e. minus `2^256 − p`. The limbs are
        // then at least `2^256 − p + 1`, so this cannot borrow again.
        let mut out = [0u64; 4];
        let mut borrow2 = 0u64;
        let subtrahend = [C & borrow.wrapping_neg(), 0, 0, 0];
        for (i, limb) in out.iter_mut().enumerate() {
            let (d, b1) = difference[i].overflowing_sub(subtrahend[i]);
            let (d, b2) = d.overflowing_sub(borrow2);
            *limb = d;
            borrow2 = u64::from(b1) | u64::from(b2);
        }
        Fe(out)
    }

    pub(crate) fn mul(self, other: Fe) -> Fe {
        let mut wide = [0u64; 8];
        for i in 0..4 {
            let mut carry = 0u128;
            for j in 0..4 {
                // At most (2^64 − 1) + (2^64 − 1)^2 + (2^64 − 1) < 2^128.
                let acc = u128::from(wide[i + j])
                    + u128::from(self.0[i]) * u128::from(other.0[j])
                    + carry;
                wide[i + j] = acc as u64;
                carry = acc >> 64;
            }
            wide[i + 4] = carry as u64;
        }
        reduce_wide(wide)
    }

    pub(crate) fn square(self) -> Fe {
        self.mul(self)
    }

    /// `self^(p − 2)`, the inverse of a non-zero element (Fermat), by a
    /// fixed sequence of squarings and multiplications. Zero gives zero.
    pub(crate) fn invert(self) -> Fe {
        // p − 2, least significant limb first.
        let exponent = [P[0] - 2, P[1], P[2], P[3]];
        let mut result = Fe::ONE;
        for limb in exponent.iter().rev() {
            for bit in (0..64).rev() {
                result = result.square();
                if (limb >> bit) & 1 == 1 {
                    result = result.mul(self);
                }
            }
        }
        result
    }
}

/// Inverts every element of `values` (none may be zero) with one field
/// inversion and three multiplications each (Montgomery's trick);
/// `scratch` is reused between calls.
pub(crate) fn batch_invert(values: &mut [Fe], scratch: &mut Vec<Fe>) {
    let Some(&first) = values.first() else {
        return;
    };
    // scratch[i] = values[0] · … · values[i].
    scratch.clear();
    scratch.push(first);
    for value in &values[1..] {
        let product = scratch[scratch.len() - 1].mul(*value);
        scratch.push(product);
    }
    let mut inverse = scratch[scratch.len() - 1].invert();
    for i in (1..values.len()).rev() {
        // inverse = (values[0] · … · values[i])^-1 here.
        let value_inverse = inverse.mul(scratch[i - 1]);
        inverse = inverse.mul(values[i]);
        values[i] = value_inverse;
    }
    values[0] = inverse;
}

/// `limbs + (2^256 − p)` and its carry out of 256 bits.
fn add_c(limbs: [u64; 4], extra_carry: u64) -> ([u64; 4], u64) {
    let mut out = [0u64; 4];
    let mut carry = 0u64;
    let addend = [C, 0, 0, 0];
    for (i, limb) in out.iter_mut().enumerate() {
        let (s, c1) = limbs[i].overflowing_add(addend[i]);
        let (s, c2) = s.overflowing_add(carry);
        *limb = s;
        carry = u64::from(c1) | u64::from(c2);
    }
    (out, carry | extra_carry)
}

/// `limbs + carry·2^256`, below `2p`, reduced below `p`: it is at least
/// `p` exactly when adding `2^256 − p` carries out (or it already did).
fn reduce_once(limbs: [u64; 4], carry: u64) -> Fe {
    let (minus_p, over) = add_c(limbs, carry);
    let mask = over.wrapping_neg();
    let mut out = [0u64; 4];
    for (i, limb) in out.iter_mut().enumerate() {
        *limb = (minus_p[i] & mask) | (limbs[i] & !mask);
    }
    Fe(out)
}

/// A 512-bit product reduced modulo `p`: `2^256 ≡ 2^256 − p`, folded twice.
fn reduce_wide(wide: [u64; 8]) -> Fe {
    let mut low = [0u64; 4];
    let mut carry = 0u128;
    for i in 0..4 {
        // At most (2^64 − 1) + (2^64 − 1)·C + 2^34 < 2^98.
        let acc = u128::from(wide[i]) + u128::from(wide[i + 4]) * u128::from(C) + carry;
        low[i] = acc as u64;
        carry = acc >> 64;
    }
    // carry < 2^34, so carry·C < 2^67: fold it in once more.
    let mut acc = u128::from(low[0]) + carry * u128::from(C);
    low[0] = acc as u64;
    for limb in &mut low[1..] {
        acc = (acc >> 64) + u128::from(*limb);
        *limb = acc as u64;
    }
    // A carry out here leaves the limbs below 2^67, so adding it back as
    // `2^256 − p` cannot carry again; `reduce_once` does that and the final
    // subtraction of `p` in one.
    reduce_once(low, (acc >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigUint;

    fn p() -> BigUint {
        BigUint::from_bytes_be(&hex_bytes(
            "fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc2f",
        ))
    }

    fn hex_bytes(text: &str) -> Vec<u8> {
        hex::decode(text).expect("hex")
    }

    fn big(fe: Fe) -> BigUint {
        BigUint::from_bytes_be(&fe.to_be_bytes())
    }

    fn fe(value: &BigUint) -> Fe {
        let bytes = value.to_bytes_be();
        let mut padded = [0u8; 32];
        padded[32 - bytes.len()..].copy_from_slice(&bytes);
        Fe::from_be_bytes(&padded).expect("below p")
    }

    /// Values where carries and reductions go wrong if they are going to:
    /// 0, 1, 2, p − 1, p − 2, 2^256 − p − 1 and around it, limb edges, and
    /// pseudo-random ones.
    fn samples() -> Vec<BigUint> {
        let p = p();
        let one = BigUint::from(1u8);
        let mut values = vec![
            BigUint::from(0u8),
            one.clone(),
            BigUint::from(2u8),
            &p - 1u8,
            &p - 2u8,
            BigUint::from(C),
            BigUint::from(C - 1),
            BigUint::from(C + 1),
            (&one << 64u32) - 1u8,
            &one << 64u32,
            (&one << 128u32) - 1u8,
            (&one << 192u32) + 5u8,
            (&one << 255u32) - 1u8,
            &p >> 1u32,
        ];
        let mut state = BigUint::from(0x1234_5678_9abc_def0u64);
        for _ in 0..40 {
            state = (&state * &state + 0x9e37_79b9_7f4a_7c15u64) % &p;
            values.push(state.clone());
        }
        values
    }

    #[test]
    fn bytes_round_trip_and_refuse_p_and_above() {
        for value in samples() {
            assert_eq!(big(fe(&value)), value);
        }
        let p = p().to_bytes_be();
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&p);
        assert_eq!(Fe::from_be_bytes(&bytes), None);
        assert_eq!(Fe::from_be_bytes(&[0xff; 32]), None);
        bytes[31] -= 1;
        assert!(Fe::from_be_bytes(&bytes).is_some());
    }

    #[test]
    fn arithmetic_agrees_with_big_integers() {
        let p = p();
        let values = samples();
        for a in &values {
            for b in &values {
                let (x, y) = (fe(a), fe(b));
                assert_eq!(big(x.sub(y)), (a + &p - b) % &p, "{a} - {b}");
                assert_eq!(big(x.mul(y)), (a * b) % &p, "{a} * {b}");
            }
            if *a != BigUint::from(0u8) {
                let inverse = fe(a).invert();
                assert_eq!(big(inverse.mul(fe(a))), BigUint::from(1u8), "1 / {a}");
            }
        }
    }

    #[test]
    fn a_batch_inverts_each_element() {
        let values: Vec<Fe> = samples()
            .iter()
            .filter(|v| **v != BigUint::from(0u8))
            .map(fe)
            .collect();
        let mut inverted = values.clone();
        let mut scratch = Vec::new();
        batch_invert(&mut inverted, &mut scratch);
        for (value, inverse) in values.iter().zip(&inverted) {
            assert_eq!(*inverse, value.invert());
        }
        // One element, and none.
        let mut single = [values[3]];
        batch_invert(&mut single, &mut scratch);
        assert_eq!(single[0], values[3].invert());
        batch_invert(&mut [], &mut scratch);
    }
}
