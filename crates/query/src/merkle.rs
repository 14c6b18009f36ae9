//! Merkle branches, as Bitcoin builds its trees (an odd last node pairs
//! with itself): transaction proofs and `cp_height` header proofs.

use bitcoin::hashes::{sha256d, Hash, HashEngine};
use bitcoin::TxMerkleNode;

fn parent(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut engine = sha256d::Hash::engine();
    engine.input(left);
    engine.input(right);
    sha256d::Hash::from_engine(engine).to_byte_array()
}

/// A Bitcoin-style merkle tree kept level by level, so that many proofs
/// against one tree (a `cp_height` checkpoint) cost no rehashing.
pub struct MerkleTree {
    /// `levels[0]` are the leaves; the last level is the root alone.
    levels: Vec<Vec<[u8; 32]>>,
}

impl MerkleTree {
    /// Builds the tree of `leaves` (internal byte order).
    ///
    /// # Panics
    /// When `leaves` is empty (callers check).
    pub fn new(leaves: Vec<[u8; 32]>) -> MerkleTree {
        assert!(!leaves.is_empty(), "a merkle tree needs a leaf");
        let mut levels = vec![leaves];
        while levels.last().expect("non-empty").len() > 1 {
            let level = levels.last().expect("non-empty");
            let next = level
                .chunks(2)
                .map(|pair| parent(&pair[0], pair.get(1).unwrap_or(&pair[0])))
                .collect();
            levels.push(next);
        }
        MerkleTree { levels }
    }

    pub fn leaf_count(&self) -> usize {
        self.levels[0].len()
    }

    pub fn root(&self) -> TxMerkleNode {
        TxMerkleNode::from_byte_array(self.levels.last().expect("non-empty")[0])
    }

    /// The siblings from leaf `index` up to the root.
    ///
    /// # Panics
    /// When `index` is out of range (callers check).
    pub fn branch(&self, mut index: usize) -> Vec<TxMerkleNode> {
        assert!(
            index < self.leaf_count(),
            "leaf {index} of {}",
            self.leaf_count()
        );
        let mut branch = Vec::with_capacity(self.levels.len());
        for level in &self.levels[..self.levels.len() - 1] {
            // An odd last node pairs with itself.
            let sibling = level.get(index ^ 1).unwrap_or(&level[index]);
            branch.push(TxMerkleNode::from_byte_array(*sibling));
            index /= 2;
        }
        branch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Returns the branch proving leaf `index` and the root.
    ///
    /// # Panics
    /// When `leaves` is empty or `index` is out of range (callers check).
    pub fn merkle_branch(leaves: &[[u8; 32]], index: usize) -> (Vec<TxMerkleNode>, TxMerkleNode) {
        let tree = MerkleTree::new(leaves.to_vec());
        (tree.branch(index), tree.root())
    }
    use bitcoin::Txid;

    /// Every transaction's branch folds back to the block's merkle root.
    #[test]
    fn branches_fold_to_the_root() {
        for n in 1..=9usize {
            let leaves: Vec<[u8; 32]> = (0..n).map(|i| [i as u8 + 1; 32]).collect();
            let root = MerkleTree::new(leaves.clone()).root();
            for i in 0..n {
                let (branch, r) = merkle_branch(&leaves, i);
                assert_eq!(r, root);
                let mut h = leaves[i];
                let mut idx = i;
                for node in &branch {
                    let n = node.to_byte_array();
                    h = if idx % 2 == 0 {
                        parent(&h, &n)
                    } else {
                        parent(&n, &h)
                    };
                    idx /= 2;
                }
                assert_eq!(h, root.to_byte_array(), "n={n} i={i}");
            }
        }
    }

    /// Block 2473 of the spec's status example: a 3-transaction block whose
    /// proofs the spec lists (pos 1 and pos 2 share the same tree).
    #[test]
    fn matches_spec_example_proofs() {
        let leaf = |s: &str| s.parse::<Txid>().unwrap().to_byte_array();
        let txid1 = leaf("9c42f84b2fcdaff676ba25d9d4941741cc0d1a01cce0c23fdc4c0b2afa38431c");
        let txid2 = leaf("770f2d4371b3fabb902dd9a103e2dd005fcd3971181078fca4a2a1d6ff127b30");
        let coinbase = leaf("9b977e4cc0b2eb44cb5ea2adb30bf6eae892c9a838111031cb49c97d8ad57309");
        let leaves = [coinbase, txid1, txid2];
        let (branch, _) = merkle_branch(&leaves, 1);
        let shown: Vec<String> = branch.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown[0],
            "9b977e4cc0b2eb44cb5ea2adb30bf6eae892c9a838111031cb49c97d8ad57309"
        );
        let (branch2, _) = merkle_branch(&leaves, 2);
        // The odd last leaf pairs with itself, so its first sibling is itself.
        assert_eq!(
            branch2[0].to_string(),
            "770f2d4371b3fabb902dd9a103e2dd005fcd3971181078fca4a2a1d6ff127b30"
        );
        assert_eq!(
            shown[1],
            "e7a2891bd8f96488681a596f619de4d88a22d3b08a8aee3b44bbdd913e3e3562"
        );
        assert_eq!(
            branch2[1].to_string(),
            "ee43317b1b79a9a6b101df711a26d12a88b1419f63db15161a9fdb587fabae63"
        );
    }
}
