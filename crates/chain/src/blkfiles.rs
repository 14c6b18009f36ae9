//! A chain read from `blk*.dat` files with no node at all: what `osprey
//! demo` indexes and serves. Blocks must be stored in chain order (as
//! `osprey chaingen` writes them), genesis first; the files may be
//! XOR-obfuscated like Core's (read by [`crate::blkfile::BlocksDir`]).
//!
//! There is no undo data, so spent outputs are resolved from an in-memory
//! map of unspent outputs built while blocks are handed out in order. That
//! suits generated chains; it is not meant for mainnet-sized ones.

use crate::blkfile::{BlockPosition, BlocksDir, FileKind};
use crate::parallel::in_parallel;
use crate::source::{
    BlockFeed, BlockWithPrevouts, ChainSource, MempoolAcceptance, MempoolFees, MempoolTx,
    TxLocation,
};
use crate::Error;
use bitcoin::block::Header;
use bitcoin::consensus::deserialize;
use bitcoin::{Block, BlockHash, OutPoint, TxOut, Txid};
use osprey_core::{Height, Network};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// The ids of `block`'s transactions, in order.
fn txids_of(block: &Block) -> Vec<Txid> {
    block.txdata.iter().map(|tx| tx.compute_txid()).collect()
}

/// Threads that read and parse a request's blocks.
const PARSE_THREADS: usize = 2;

/// Hashes an outpoint by its txid's first 8 bytes and its vout: a txid is
/// already a hash, and these are a generated chain's own outputs. SipHash
/// over 36 bytes was most of the map's cost.
#[derive(Clone, Copy, Default)]
struct OutPointHash;

impl std::hash::BuildHasher for OutPointHash {
    type Hasher = OutPointHasher;

    fn build_hasher(&self) -> OutPointHasher {
        OutPointHasher(0)
    }
}

/// See [`OutPointHash`]: `OutPoint`'s `Hash` writes the txid's 32 bytes,
/// then the vout.
struct OutPointHasher(u64);

impl std::hash::Hasher for OutPointHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut first = [0u8; 8];
        let n = bytes.len().min(8);
        first[..n].copy_from_slice(&bytes[..n]);
        self.0 ^= u64::from_le_bytes(first);
    }

    fn write_u32(&mut self, n: u32) {
        self.0 ^= u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

struct Unspent {
    outputs: HashMap<OutPoint, TxOut, OutPointHash>,
    /// The next height whose outputs are not yet in `outputs`.
    next: u32,
}

pub struct BlkFiles {
    dir: BlocksDir,
    /// Each block's position and hash, by height.
    blocks: Vec<(BlockPosition, BlockHash)>,
    unspent: Mutex<Unspent>,
}

impl BlkFiles {
    /// Scans `blocks_dir` for `blk*.dat` files and indexes the blocks in them.
    ///
    /// # Errors
    /// When a file cannot be read, holds another network's blocks, or the
    /// blocks are not a chain starting at `network`'s genesis block.
    pub fn open(blocks_dir: &Path, network: Network) -> Result<BlkFiles, Error> {
        let dir = BlocksDir::open(blocks_dir, Some(network.bitcoin().magic().to_bytes()))?;
        let mut blocks: Vec<(BlockPosition, BlockHash)> = Vec::new();
        for pos in dir.blocks()? {
            let pos = pos?;
            let mut header = [0u8; 80];
            dir.read_exact(FileKind::Blk, pos.file, pos.offset, &mut header)?;
            let header: Header = deserialize(&header).map_err(|e| {
                Error::persistent(format!(
                    "{} at offset {}: bad block header: {e}",
                    dir.path(FileKind::Blk, pos.file).display(),
                    pos.offset - 8
                ))
            })?;
            if let Some(&(_, prev)) = blocks.last() {
                if header.prev_blockhash != prev {
                    return Err(Error::persistent(format!(
                        "{} at offset {}: the block does not extend the previous one (files must be in chain order)",
                        dir.path(FileKind::Blk, pos.file).display(),
                        pos.offset - 8
                    )));
                }
            }
            blocks.push((pos, header.block_hash()));
        }
        match blocks.first() {
            Some(&(_, hash)) if hash == network.genesis_hash() => {}
            _ => {
                return Err(Error::persistent(format!(
                    "{} does not start with the {network} genesis block",
                    blocks_dir.display()
                )))
            }
        }
        Ok(BlkFiles {
            dir,
            blocks,
            unspent: Mutex::new(Unspent {
                outputs: HashMap::default(),
                next: 0,
            }),
        })
    }

    /// Reads `len` bytes at `offset` of the block at `height` (all of it
    /// when `None`).
    fn read_block_bytes(&self, height: Height, span: Option<(u32, u32)>) -> Result<Vec<u8>, Error> {
        let &(pos, _) = self
            .blocks
            .get(height.as_usize())
            .ok_or_else(|| Error::persistent(format!("no block at height {height}")))?;
        let (offset, len) = span.unwrap_or((0, pos.len));
        if u64::from(offset) + u64::from(len) > u64::from(pos.len) {
            return Err(Error::persistent(format!("span beyond block {height}")));
        }
        let mut buf = vec![0u8; len as usize];
        self.dir.read_exact(
            FileKind::Blk,
            pos.file,
            pos.offset + u64::from(offset),
            &mut buf,
        )?;
        Ok(buf)
    }

    fn read_block(&self, height: Height) -> Result<(Block, usize), Error> {
        let buf = self.read_block_bytes(height, None)?;
        let block = deserialize(&buf)
            .map_err(|e| Error::persistent(format!("block {height} does not parse: {e}")))?;
        Ok((block, buf.len()))
    }

    /// Adds the outputs of `block`, whose transactions' ids are `txids`, to
    /// the unspent map and returns the outputs its inputs spend.
    fn connect(
        unspent: &mut Unspent,
        height: u32,
        block: &Block,
        txids: &[Txid],
    ) -> Result<Vec<TxOut>, Error> {
        let mut prevouts = Vec::new();
        for (i, (tx, &txid)) in block.txdata.iter().zip(txids).enumerate() {
            if i > 0 {
                for input in &tx.input {
                    let out = unspent
                        .outputs
                        .remove(&input.previous_output)
                        .ok_or_else(|| {
                            Error::persistent(format!(
                                "block {height} spends unknown output {}",
                                input.previous_output
                            ))
                        })?;
                    prevouts.push(out);
                }
            }
            for (vout, out) in tx.output.iter().enumerate() {
                if !out.script_pubkey.is_op_return() {
                    unspent.outputs.insert(
                        OutPoint {
                            txid,
                            vout: vout as u32,
                        },
                        out.clone(),
                    );
                }
            }
        }
        unspent.next = height + 1;
        Ok(prevouts)
    }
}

impl BlockFeed for BlkFiles {
    fn best_block(&self) -> Result<(Height, BlockHash), Error> {
        let &(_, tip) = self
            .blocks
            .last()
            .expect("at least the genesis block, checked on open");
        Ok((Height(self.blocks.len() as u32 - 1), tip))
    }

    fn block_hashes(&self, start: Height, count: u32) -> Result<Vec<BlockHash>, Error> {
        Ok(self
            .blocks
            .iter()
            .skip(start.as_usize())
            .take(count as usize)
            .map(|&(_, hash)| hash)
            .collect())
    }

    fn blocks(&self, blocks: &[(Height, BlockHash)]) -> Result<Vec<BlockWithPrevouts>, Error> {
        // Read, parsed and hashed on threads of their own, outside the
        // lock: only the map of unspent outputs is serial. All of it under
        // the lock, on one thread, was what a 50M-transaction chain's
        // sync waited for once the index took half the CPU it did.
        let parsed = in_parallel(blocks, PARSE_THREADS, |&(height, hash)| {
            let (block, size) = self.read_block(height)?;
            if block.block_hash() != hash {
                return Err(Error::persistent(format!("block {height} is not {hash}")));
            }
            let txids = txids_of(&block);
            Ok((height, block, size, txids))
        })?;
        let mut unspent = self.unspent.lock().expect("unspent lock poisoned");
        let mut result = Vec::with_capacity(blocks.len());
        for (height, block, size, txids) in parsed {
            if height.0 < unspent.next {
                // Asked again (a restart mid-chain): rebuild the map from scratch.
                *unspent = Unspent {
                    outputs: HashMap::default(),
                    next: 0,
                };
            }
            while unspent.next < height.0 {
                let next = unspent.next;
                let (block, _) = self.read_block(Height(next))?;
                let txids = txids_of(&block);
                Self::connect(&mut unspent, next, &block, &txids)?;
            }
            let prevouts = Self::connect(&mut unspent, height.0, &block, &txids)?;
            result.push(BlockWithPrevouts {
                height,
                block,
                prevouts,
                size,
            });
        }
        Ok(result)
    }
}

impl ChainSource for BlkFiles {
    fn transactions_are_local(&self) -> bool {
        true
    }

    fn transaction(&self, txid: &Txid, location: Option<TxLocation>) -> Result<Vec<u8>, Error> {
        let loc =
            location.ok_or_else(|| Error::persistent(format!("transaction {txid} not found")))?;
        self.read_block_bytes(loc.height, Some((loc.offset, loc.len)))
    }

    fn transaction_verbose(
        &self,
        _txid: &Txid,
        _location: Option<TxLocation>,
    ) -> Result<serde_json::Value, Error> {
        Err(no_node("verbose transactions"))
    }

    fn mempool_txids(&self) -> Result<Vec<Txid>, Error> {
        Ok(Vec::new())
    }

    fn mempool_transactions(&self, _txids: &[Txid]) -> Result<Vec<MempoolTx>, Error> {
        Ok(Vec::new())
    }

    fn broadcast(&self, _raw_hex: &str) -> Result<Txid, Error> {
        Err(no_node("broadcasting"))
    }

    fn broadcast_package(&self, _raw_hexes: &[String]) -> Result<serde_json::Value, Error> {
        Err(no_node("broadcasting"))
    }

    fn test_mempool_accept(&self, _raw_hexes: &[String]) -> Result<Vec<MempoolAcceptance>, Error> {
        Err(no_node("testing mempool acceptance"))
    }

    fn estimate_fee(&self, _blocks: u16, _mode: Option<&str>) -> Result<Option<f64>, Error> {
        Ok(None)
    }

    fn relay_fee(&self) -> Result<f64, Error> {
        Ok(DEMO_RELAY_FEE)
    }

    fn mempool_fees(&self) -> Result<MempoolFees, Error> {
        // No node, no mempool: its floors are the relay fee.
        Ok(MempoolFees {
            mempoolminfee: DEMO_RELAY_FEE,
            minrelaytxfee: DEMO_RELAY_FEE,
            incrementalrelayfee: DEMO_RELAY_FEE,
        })
    }
}

/// The relay fee answered without a node: Bitcoin Core's long-standing
/// default of 1 sat/vB, in BTC/kvB.
const DEMO_RELAY_FEE: f64 = 0.00001;

fn no_node(what: &str) -> Error {
    Error::unsupported(format!(
        "{what} needs a node; this server reads blk files only (osprey demo)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::consensus::serialize;

    #[test]
    fn a_broken_record_is_an_error_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let genesis = serialize(&bitcoin::blockdata::constants::genesis_block(
            bitcoin::Network::Regtest,
        ));
        let mut record = Network::Regtest.bitcoin().magic().to_bytes().to_vec();
        record.extend_from_slice(&(genesis.len() as u32).to_le_bytes());
        record.extend_from_slice(&genesis);
        let path = dir.path().join("blk00000.dat");
        let open_err = || {
            BlkFiles::open(dir.path(), Network::Regtest)
                .err()
                .expect("an error")
                .message()
                .to_string()
        };

        std::fs::write(&path, &record).unwrap();
        let files = BlkFiles::open(dir.path(), Network::Regtest).unwrap();
        assert_eq!(files.best_block().unwrap().0, Height(0));

        let mut data = record.clone();
        data.extend_from_slice(&record[..record.len() - 1]);
        std::fs::write(&path, &data).unwrap();
        let m = open_err();
        let second = record.len();
        assert!(
            m.contains(&format!(
                "blk00000.dat at offset {second}: file ends inside a block record"
            )),
            "{m}"
        );

        let mut data = record.clone();
        data.extend_from_slice(b"garbage, not a record");
        std::fs::write(&path, &data).unwrap();
        let m = open_err();
        assert!(
            m.contains(&format!("blk00000.dat at offset {second}: magic")),
            "{m}"
        );

        let mut data = record.clone();
        data.extend_from_slice(&record);
        std::fs::write(&path, &data).unwrap();
        let m = open_err();
        assert!(
            m.contains(&format!(
                "blk00000.dat at offset {second}: the block does not extend"
            )),
            "{m}"
        );

        std::fs::write(&path, b"").unwrap();
        assert!(open_err().contains("does not start with the regtest genesis block"));
    }
}
