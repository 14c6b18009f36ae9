//! Bitcoin merkle trees, written out in the test from their definition
//! (double SHA-256 of concatenated pairs, the last node of an odd level
//! paired with itself), to check the proofs a server sends: transaction
//! branches against a block's merkle root, header branches against a
//! `cp_height` root. Hashes travel in the protocol as displayed hex
//! (byte-reversed).

use bitcoin::hashes::{sha256d, Hash};

/// Parses a displayed (byte-reversed) hash into internal byte order.
pub fn from_display_hex(hex_str: &str) -> [u8; 32] {
    let mut bytes: [u8; 32] = hex::decode(hex_str)
        .unwrap_or_else(|e| panic!("{hex_str:?} is not hex: {e}"))
        .try_into()
        .unwrap_or_else(|_| panic!("{hex_str:?} is not 32 bytes"));
    bytes.reverse();
    bytes
}

/// Shows an internal-order hash as displayed hex.
pub fn to_display_hex(hash: [u8; 32]) -> String {
    let mut bytes = hash;
    bytes.reverse();
    hex::encode(bytes)
}

fn hash_pair(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut both = [0u8; 64];
    both[..32].copy_from_slice(left);
    both[32..].copy_from_slice(right);
    sha256d::Hash::hash(&both).to_byte_array()
}

/// The merkle root of `leaves` (internal byte order).
///
/// # Panics
/// When there are no leaves.
pub fn root(leaves: &[[u8; 32]]) -> [u8; 32] {
    assert!(!leaves.is_empty(), "a merkle tree needs a leaf");
    let mut level = leaves.to_vec();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| hash_pair(&pair[0], pair.get(1).unwrap_or(&pair[0])))
            .collect();
    }
    level[0]
}

/// Folds a branch (deepest first, displayed hex) from `leaf` at `pos` up to
/// the root it proves.
pub fn fold(leaf: [u8; 32], mut pos: u64, branch: &[String]) -> [u8; 32] {
    let mut hash = leaf;
    for sibling in branch {
        let sibling = from_display_hex(sibling);
        hash = if pos & 1 == 0 {
            hash_pair(&hash, &sibling)
        } else {
            hash_pair(&sibling, &hash)
        };
        pos >>= 1;
    }
    hash
}

/// Reads a JSON array of hex strings.
pub fn branch_of(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("merkle branch is not an array: {value}"))
        .iter()
        .map(|h| {
            h.as_str()
                .unwrap_or_else(|| panic!("branch element {h} is not a string"))
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_of_each_leaf_gives_the_root() {
        for n in 1..12u8 {
            let leaves: Vec<[u8; 32]> = (0..n).map(|i| [i; 32]).collect();
            let want = root(&leaves);
            for pos in 0..leaves.len() {
                // Build the branch the slow way: siblings level by level.
                let mut branch = Vec::new();
                let mut level = leaves.clone();
                let mut p = pos;
                while level.len() > 1 {
                    let sibling = level.get(p ^ 1).unwrap_or(&level[p]);
                    branch.push(to_display_hex(*sibling));
                    level = level
                        .chunks(2)
                        .map(|c| hash_pair(&c[0], c.get(1).unwrap_or(&c[0])))
                        .collect();
                    p /= 2;
                }
                assert_eq!(
                    fold(leaves[pos], pos as u64, &branch),
                    want,
                    "n={n} pos={pos}"
                );
            }
        }
    }
}
