//! An in-memory [`BlockFeed`]: a chaingen chain that a test reshapes at
//! will (mine on, fork at any height, go back to a shorter chain, fail or
//! lie about a block), also between two fetches of one sync, as a node
//! that reorganises while the indexer reads it. No node, no files: the
//! indexer's handling of the node's chain is tested on its own.
//!
//! Every branch is real chaingen blocks: the chain is drawn again from
//! genesis with the same config, and [`Generator::branch`] switches to the
//! branch's seed at its fork, so branches share the blocks below the fork
//! and carry their own transactions (spending the shared coins) above it.
//!
//! It is also a [`ChainSource`] with a mempool of its own, for the query
//! layer's tracker: [`ChainFeed::mine`] puts blocks of the test's own
//! transactions (say, from a [`crate::TestWallet`], whose coinbases they
//! pay) on top of the drawn chain; a broadcast replaces the transactions
//! it conflicts with, as a node with full replace-by-fee does; a block
//! takes its transactions and their conflicts out of the mempool; and the
//! transactions of blocks a reorg disconnects go back into it. No policy
//! and no script is checked: the tracker's tests need a node's mempool
//! bookkeeping, not its rules (those are the functional tests', on real
//! nodes).

use bitcoin::block::{Header, Version as BlockVersion};
use bitcoin::blockdata::{locktime::absolute::LockTime, transaction::Version};
use bitcoin::consensus::{deserialize, serialize};
use bitcoin::hashes::Hash;
use bitcoin::{
    Amount, Block, BlockHash, OutPoint, Sequence, Transaction, TxIn, TxMerkleNode, TxOut, Txid,
    Witness,
};
use osprey_chain::{
    BlockFeed, BlockWithPrevouts, ChainSource, Error, MempoolAcceptance, MempoolFees, MempoolTx,
    TxLocation,
};
use osprey_chaingen::{Config, Generator, Profile, Shape, Signatures};
use osprey_core::Height;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// What each coinbase of a block made by [`ChainFeed::mine`] pays.
const MINED_COINBASE: Amount = Amount::from_sat(50 * 100_000_000);

/// The fee floors the feed's mempool reports (1 sat/vB), in BTC/kvB.
const FEED_RELAY_FEE: f64 = 0.000_01;

/// The highest block any branch may reach: the generator's shape is fixed
/// so that a branch drawn again is the same block for block.
pub const FEED_HEIGHT_MAX: u32 = 600;

/// A change to the chain, run between two fetches.
type Change = Box<dyn FnOnce(&ChainFeed) + Send>;

/// A generated chain in memory, served as a node would serve it.
pub struct ChainFeed {
    state: Mutex<State>,
}

struct State {
    /// The best chain's parts: the height each starts at and the seed it
    /// was drawn with; the first starts at genesis.
    segments: Vec<(u32, u64)>,
    /// The best chain's block hashes, genesis first.
    best: Vec<BlockHash>,
    /// Every block any branch had: like a node, the feed still serves a
    /// block that is no longer on its best chain.
    known: HashMap<BlockHash, KnownBlock>,
    /// The outputs of every transaction of those blocks, to give each block
    /// the outputs it spends.
    outputs: HashMap<Txid, Vec<TxOut>>,
    /// Calls to [`BlockFeed::blocks`] so far.
    fetches: usize,
    /// Changes to make once `fetches` reaches their count.
    changes: Vec<(usize, Change)>,
    /// Fetches that ask for a block at or above this height fail.
    failing_from: Option<Height>,
    /// Blocks served without the outputs they spend.
    withheld: HashSet<BlockHash>,
    /// The blocks [`ChainFeed::mine`] made (the others are drawn).
    mined: HashSet<BlockHash>,
    /// The mempool, in the order transactions entered it.
    mempool: Vec<Transaction>,
}

struct KnownBlock {
    height: Height,
    block: Block,
    prevouts: Vec<TxOut>,
    size: usize,
}

impl ChainFeed {
    /// A chain of blocks `0..=tip` drawn with `seed`. Transfers start at
    /// height 101, once the first coinbase matures.
    ///
    /// # Panics
    /// When `tip` is above [`FEED_HEIGHT_MAX`].
    pub fn new(tip: u32, seed: u64) -> ChainFeed {
        let feed = ChainFeed {
            state: Mutex::new(State {
                segments: vec![(0, seed)],
                best: Vec::new(),
                known: HashMap::new(),
                outputs: HashMap::new(),
                fetches: 0,
                changes: Vec::new(),
                failing_from: None,
                withheld: HashSet::new(),
                mined: HashSet::new(),
                mempool: Vec::new(),
            }),
        };
        feed.state().draw(tip);
        feed
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("feed lock poisoned")
    }

    /// The best block.
    pub fn tip(&self) -> (Height, BlockHash) {
        let state = self.state();
        let hash = *state.best.last().expect("at least genesis");
        (Height(state.best.len() as u32 - 1), hash)
    }

    /// The best chain's block hashes, genesis first.
    pub fn hashes(&self) -> Vec<BlockHash> {
        self.state().best.clone()
    }

    /// The best chain's block at `height`, if it reaches that high.
    pub fn block(&self, height: Height) -> Option<Block> {
        let state = self.state();
        let hash = state.best.get(height.as_usize())?;
        Some(state.known[hash].block.clone())
    }

    /// Mines `blocks` more blocks on the best chain's branch.
    ///
    /// # Panics
    /// When the chain would pass [`FEED_HEIGHT_MAX`], or its tip is a block
    /// of [`ChainFeed::mine`] (drawn blocks cannot follow those).
    pub fn extend(&self, blocks: u32) {
        let mut state = self.state();
        let tip = state.best.len() as u32 - 1;
        state.assert_drawn_above(Height(tip));
        let old = state.best.clone();
        state.draw(tip + blocks);
        state.reorganise_mempool(&old);
    }

    /// Mines one block on the tip holding `txs` (in this order, after a
    /// coinbase paying [`crate::mining_address`]), as a miner would with
    /// whatever transactions, in the mempool or not; returns its hash. They
    /// and the mempool transactions that conflict with them (with their
    /// descendants) leave the mempool.
    ///
    /// # Panics
    /// When a transaction spends an output no block of the feed, no other
    /// of `txs` and nothing in the mempool has.
    pub fn mine(&self, txs: &[Transaction]) -> BlockHash {
        let mut state = self.state();
        let old = state.best.clone();
        let hash = state.mine(txs.to_vec());
        state.reorganise_mempool(&old);
        hash
    }

    /// Mines one block of every mempool transaction, oldest first; returns
    /// its hash.
    pub fn mine_mempool(&self) -> BlockHash {
        let txs = self.state().mempool.clone();
        self.mine(&txs)
    }

    /// Puts `tx` in the mempool, replacing every mempool transaction that
    /// spends an output it spends (and their descendants), as a node with
    /// full replace-by-fee would; returns its txid. No fee rule is checked.
    pub fn add_to_mempool(&self, tx: Transaction) -> Txid {
        let mut state = self.state();
        let txid = tx.compute_txid();
        if state.mempool.iter().any(|t| t.compute_txid() == txid) {
            return txid;
        }
        let spent: HashSet<OutPoint> = tx.input.iter().map(|i| i.previous_output).collect();
        state.drop_from_mempool(|t| t.input.iter().any(|i| spent.contains(&i.previous_output)));
        state.mempool.push(tx);
        txid
    }

    /// Txids in the mempool, oldest first.
    pub fn mempool(&self) -> Vec<Txid> {
        self.state()
            .mempool
            .iter()
            .map(Transaction::compute_txid)
            .collect()
    }

    /// Replaces the blocks above `after` with `blocks` new ones drawn with
    /// `seed`: a reorg to a branch forking after `after`, which is longer,
    /// as long or shorter than the old one as `blocks` says.
    ///
    /// # Panics
    /// When `after` is above the tip, a block of [`ChainFeed::mine`] is at
    /// or below it, or the branch would pass [`FEED_HEIGHT_MAX`].
    pub fn fork(&self, after: Height, blocks: u32, seed: u64) {
        let mut state = self.state();
        assert!(
            after.as_usize() < state.best.len(),
            "no block {after} to fork after"
        );
        state.assert_drawn_above(after);
        let old = state.best.clone();
        state.segments.retain(|&(start, _)| start <= after.0);
        state.segments.push((after.0 + 1, seed));
        state.draw(after.0 + blocks);
        state.reorganise_mempool(&old);
    }

    /// Goes back to the best chain's block at `height`, as a node told to
    /// invalidate the block above it: the chain gets shorter, and the
    /// transactions of the blocks above it go back into the mempool.
    pub fn rewind(&self, height: Height) {
        let mut state = self.state();
        let old = state.best.clone();
        state.best.truncate(height.as_usize() + 1);
        state.segments.retain(|&(start, _)| start <= height.0);
        state.reorganise_mempool(&old);
    }

    /// Makes `change` once `fetches` more calls to [`BlockFeed::blocks`]
    /// have been served: after the blocks of the last one are picked and
    /// before it returns, so the next call (of the same sync) already sees
    /// the changed chain.
    pub fn after_fetches(&self, fetches: usize, change: impl FnOnce(&ChainFeed) + Send + 'static) {
        let mut state = self.state();
        let at = state.fetches + fetches;
        state.changes.push((at, Box::new(change)));
    }

    /// Makes every fetch that asks for a block at or above `height` fail,
    /// as a node that went away would (a transient error); `None` heals it.
    pub fn fail_fetches_from(&self, height: Option<Height>) {
        self.state().failing_from = height;
    }

    /// Serves the best chain's block at `height` without the outputs it
    /// spends, as a buggy or lying node would.
    ///
    /// # Panics
    /// When the chain has no block at `height`.
    pub fn withhold_prevouts(&self, height: Height) {
        let mut state = self.state();
        let hash = state.best[height.as_usize()];
        state.withheld.insert(hash);
    }
}

impl State {
    /// Drawing blocks again replaces the ones above `height`: it must not
    /// reach a block of [`ChainFeed::mine`], which the generator cannot
    /// draw.
    fn assert_drawn_above(&self, height: Height) {
        if let Some(mined) = self.best[..=height.as_usize()]
            .iter()
            .position(|hash| self.mined.contains(hash))
        {
            panic!(
                "block {mined} was mined, not drawn: drawn blocks cannot follow it (mine on, or rewind below it)"
            );
        }
    }

    /// Appends a block of a coinbase and `txs` to the best chain.
    fn mine(&mut self, txs: Vec<Transaction>) -> BlockHash {
        let height = self.best.len() as u32;
        let parent = &self.known[self.best.last().expect("at least genesis")].block;
        let (prev_blockhash, time, bits) = (
            parent.block_hash(),
            parent.header.time + 1,
            parent.header.bits,
        );
        // The height (BIP 34) and how many blocks were mined before: two
        // blocks mined at one height (a reorg) differ even when they hold
        // the same transactions.
        let script_sig = bitcoin::script::Builder::new()
            .push_int(i64::from(height))
            .push_int(self.mined.len() as i64 + 1)
            .into_script();
        let coinbase = Transaction {
            version: Version::ONE,
            lock_time: LockTime::ZERO,
            input: vec![TxIn {
                previous_output: OutPoint::null(),
                script_sig,
                sequence: Sequence::MAX,
                witness: Witness::new(),
            }],
            output: vec![TxOut {
                value: MINED_COINBASE,
                script_pubkey: crate::mining_address().script_pubkey(),
            }],
        };
        let mut block = Block {
            header: Header {
                version: BlockVersion::from_consensus(0x2000_0000),
                prev_blockhash,
                merkle_root: TxMerkleNode::all_zeros(),
                time,
                bits,
                nonce: 0,
            },
            txdata: std::iter::once(coinbase).chain(txs).collect(),
        };
        block.header.merkle_root = block
            .compute_merkle_root()
            .expect("a block has transactions");
        // Outputs spent within the block or from the mempool are learnt
        // with it (`learn` looks every spent output up).
        for tx in &self.mempool {
            self.outputs
                .entry(tx.compute_txid())
                .or_insert_with(|| tx.output.clone());
        }
        let hash = block.block_hash();
        self.mined.insert(hash);
        self.best.push(hash);
        self.learn(Height(height), block);
        hash
    }

    /// Brings the mempool from the chain `old` to the best chain, as a node
    /// does: the transactions of the blocks that left the chain come back
    /// (ahead of the others, which may spend them), then the transactions
    /// of the blocks that joined it go, with those that conflict with them
    /// and their descendants.
    fn reorganise_mempool(&mut self, old: &[BlockHash]) {
        let common = old
            .iter()
            .zip(&self.best)
            .take_while(|(a, b)| a == b)
            .count();
        let mut returned: Vec<Transaction> = old[common..]
            .iter()
            .flat_map(|hash| self.known[hash].block.txdata.iter().skip(1).cloned())
            .collect();
        if !returned.is_empty() {
            returned.append(&mut self.mempool);
            self.mempool = returned;
        }
        let mut confirmed = HashSet::new();
        let mut spent = HashSet::new();
        for hash in &self.best[common..] {
            for tx in &self.known[hash].block.txdata {
                confirmed.insert(tx.compute_txid());
                spent.extend(tx.input.iter().map(|i| i.previous_output));
            }
        }
        if confirmed.is_empty() {
            return;
        }
        // The confirmed ones leave first: as conflicts (their own inputs
        // are in `spent`) they would take their mempool children along.
        self.mempool
            .retain(|t| !confirmed.contains(&t.compute_txid()));
        self.drop_from_mempool(|t| t.input.iter().any(|i| spent.contains(&i.previous_output)));
    }

    /// Removes the mempool transactions `doomed` picks, and every mempool
    /// transaction spending an output of one removed.
    fn drop_from_mempool(&mut self, doomed: impl Fn(&Transaction) -> bool) {
        let mut gone: HashSet<Txid> = HashSet::new();
        // Oldest first: a child entered after its parent.
        self.mempool.retain(|tx| {
            let drop = doomed(tx)
                || tx
                    .input
                    .iter()
                    .any(|i| gone.contains(&i.previous_output.txid));
            if drop {
                gone.insert(tx.compute_txid());
            }
            !drop
        });
    }

    /// The transaction `txid`, from the block `location` names, else the
    /// mempool, else any block of the best chain.
    fn transaction(&self, txid: &Txid, location: Option<TxLocation>) -> Option<&Transaction> {
        let located = location.and_then(|at| {
            self.known
                .get(&at.block_hash)?
                .block
                .txdata
                .get(at.position as usize)
        });
        located
            .into_iter()
            .chain(&self.mempool)
            .chain(
                self.best
                    .iter()
                    .flat_map(|hash| &self.known[hash].block.txdata),
            )
            .find(|tx| tx.compute_txid() == *txid)
    }

    /// Makes the best chain the blocks `0..=tip` drawn along `segments`,
    /// learning the ones not seen before.
    fn draw(&mut self, tip: u32) {
        assert!(
            tip <= FEED_HEIGHT_MAX,
            "the feed's chains end at {FEED_HEIGHT_MAX}"
        );
        let mut generator = Generator::new(Config {
            preset: "custom".into(),
            seed: self.segments[0].1,
            shape: Shape {
                blocks: FEED_HEIGHT_MAX,
                // A few transfers per block from height 101: enough that
                // reorgs move history rows, little enough to draw a chain
                // again in milliseconds.
                txs_per_block: 10,
                wallet_addresses: 20,
                exchanges: 2,
                reuse_percent: 15,
                profile: Profile::Synthetic,
                silent_payments_ppm: 0,
            },
            signatures: Signatures::Real,
        })
        .expect("the feed's shape is valid");
        self.best.clear();
        for height in 0..=tip {
            if let Some(&(_, seed)) = self.segments[1..]
                .iter()
                .find(|(start, _)| *start == height)
            {
                generator.branch(seed);
            }
            let block = generator.next_block().expect("below the shape's tip");
            self.best.push(block.block_hash());
            self.learn(Height(height), block);
        }
    }

    fn learn(&mut self, height: Height, block: Block) {
        let hash = block.block_hash();
        if self.known.contains_key(&hash) {
            return;
        }
        for tx in &block.txdata {
            self.outputs.insert(tx.compute_txid(), tx.output.clone());
        }
        let prevouts = block
            .txdata
            .iter()
            .skip(1)
            .flat_map(|tx| &tx.input)
            .map(|input| {
                let spent = input.previous_output;
                self.outputs[&spent.txid][spent.vout as usize].clone()
            })
            .collect();
        let size = bitcoin::consensus::serialize(&block).len();
        self.known.insert(
            hash,
            KnownBlock {
                height,
                block,
                prevouts,
                size,
            },
        );
    }

    fn serve(&self, wanted: &[(Height, BlockHash)]) -> Result<Vec<BlockWithPrevouts>, Error> {
        if let Some(from) = self.failing_from {
            if wanted.iter().any(|&(height, _)| height >= from) {
                return Err(Error::transient(format!(
                    "the node is unreachable (blocks from {from})"
                )));
            }
        }
        wanted
            .iter()
            .map(|&(height, hash)| {
                let known = self
                    .known
                    .get(&hash)
                    .filter(|known| known.height == height)
                    .ok_or_else(|| Error::persistent(format!("no block {hash} at {height}")))?;
                let prevouts = if self.withheld.contains(&hash) {
                    Vec::new()
                } else {
                    known.prevouts.clone()
                };
                Ok(BlockWithPrevouts {
                    height,
                    block: known.block.clone(),
                    prevouts,
                    size: known.size,
                })
            })
            .collect()
    }
}

impl BlockFeed for ChainFeed {
    fn best_block(&self) -> Result<(Height, BlockHash), Error> {
        Ok(self.tip())
    }

    fn block_hashes(&self, start: Height, count: u32) -> Result<Vec<BlockHash>, Error> {
        Ok(self
            .state()
            .best
            .iter()
            .skip(start.as_usize())
            .take(count as usize)
            .copied()
            .collect())
    }

    fn blocks(&self, wanted: &[(Height, BlockHash)]) -> Result<Vec<BlockWithPrevouts>, Error> {
        let (served, due) = {
            let mut state = self.state();
            state.fetches += 1;
            let served = state.serve(wanted);
            let fetches = state.fetches;
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.changes)
                .into_iter()
                .partition(|(at, _)| *at == fetches);
            state.changes = later;
            (served, due)
        };
        // Outside the lock: a change reshapes the chain through `self`.
        for (_, change) in due {
            change(self);
        }
        served
    }
}

impl ChainSource for ChainFeed {
    fn transaction(&self, txid: &Txid, location: Option<TxLocation>) -> Result<Vec<u8>, Error> {
        self.state()
            .transaction(txid, location)
            .map(serialize)
            .ok_or_else(|| Error::persistent(format!("no transaction {txid}")))
    }

    fn transaction_verbose(
        &self,
        txid: &Txid,
        _location: Option<TxLocation>,
    ) -> Result<serde_json::Value, Error> {
        Err(Error::unsupported(format!(
            "the feed has no node to describe {txid}"
        )))
    }

    fn mempool_txids(&self) -> Result<Vec<Txid>, Error> {
        Ok(self.mempool())
    }

    fn mempool_transactions(&self, txids: &[Txid]) -> Result<Vec<MempoolTx>, Error> {
        let wanted: HashSet<&Txid> = txids.iter().collect();
        Ok(self
            .state()
            .mempool
            .iter()
            .map(|tx| (tx.compute_txid(), tx))
            .filter(|(txid, _)| wanted.contains(txid))
            .map(|(txid, tx)| MempoolTx {
                txid,
                tx: tx.clone(),
            })
            .collect())
    }

    fn broadcast(&self, raw_hex: &str) -> Result<Txid, Error> {
        let tx: Transaction = hex::decode(raw_hex)
            .ok()
            .and_then(|raw| deserialize(&raw).ok())
            .ok_or_else(|| Error::persistent("TX decode failed".to_string()))?;
        Ok(self.add_to_mempool(tx))
    }

    fn broadcast_package(&self, _raw_hexes: &[String]) -> Result<serde_json::Value, Error> {
        Err(Error::unsupported(
            "the feed relays no packages".to_string(),
        ))
    }

    fn test_mempool_accept(&self, _raw_hexes: &[String]) -> Result<Vec<MempoolAcceptance>, Error> {
        Err(Error::unsupported("the feed checks no policy".to_string()))
    }

    fn estimate_fee(&self, _blocks: u16, _mode: Option<&str>) -> Result<Option<f64>, Error> {
        Ok(None)
    }

    fn relay_fee(&self) -> Result<f64, Error> {
        Ok(FEED_RELAY_FEE)
    }

    fn mempool_fees(&self) -> Result<MempoolFees, Error> {
        Ok(MempoolFees {
            mempoolminfee: FEED_RELAY_FEE,
            minrelaytxfee: FEED_RELAY_FEE,
            incrementalrelayfee: FEED_RELAY_FEE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ScriptKind, TestWallet};

    /// A feed whose first coinbases paying the test wallet are mature, and
    /// that wallet.
    fn funded() -> (ChainFeed, TestWallet) {
        let feed = ChainFeed::new(1, 5);
        for _ in 0..101 {
            feed.mine(&[]);
        }
        let mut wallet = TestWallet::new();
        wallet.sync_feed(&feed);
        (feed, wallet)
    }

    /// The mempool's bookkeeping, as a node keeps it: a second broadcast
    /// of a transaction changes nothing; a replacement evicts its original
    /// and the original's child; a block takes its transactions out and
    /// leaves their children; a rewind puts the block's transactions back,
    /// ahead of the children that spend them.
    #[test]
    fn the_mempool_follows_broadcasts_replacements_blocks_and_rewinds() {
        let (feed, mut wallet) = funded();
        let payee = wallet.new_script(ScriptKind::P2wpkh);
        let parent = wallet
            .send(payee.clone(), Amount::from_sat(1_000_000))
            .expect("a payment");
        let parent_id = feed.add_to_mempool(parent.clone());
        let paid = OutPoint {
            txid: parent_id,
            vout: 0,
        };
        let child = wallet
            .spend(&[paid], &[(payee.clone(), Amount::from_sat(900_000))])
            .expect("a child");
        let child_id = feed.add_to_mempool(child);
        assert_eq!(feed.add_to_mempool(parent.clone()), parent_id);
        assert_eq!(feed.mempool(), [parent_id, child_id], "nothing changed");

        let mut replacement = parent.clone();
        replacement.output[0].value = Amount::from_sat(990_000);
        let replacement_id = feed.add_to_mempool(replacement);
        assert_eq!(feed.mempool(), [replacement_id], "original and child gone");

        feed.add_to_mempool(parent.clone());
        wallet
            .abandon(child_id)
            .expect("the first child is pending");
        let child = wallet
            .spend(&[paid], &[(payee, Amount::from_sat(800_000))])
            .expect("a child again");
        let child_id = feed.add_to_mempool(child);
        let before = feed.tip().0;
        feed.mine(&[parent]);
        assert_eq!(feed.mempool(), [child_id], "the child waits");

        feed.rewind(before);
        assert_eq!(feed.mempool(), [parent_id, child_id], "the parent is back");
    }
}
