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

use bitcoin::{Block, BlockHash, TxOut, Txid};
use osprey_chain::{BlockFeed, BlockWithPrevouts, Error};
use osprey_chaingen::{Config, Generator, Profile, Shape, Signatures};
use osprey_core::Height;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

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
    /// When the chain would pass [`FEED_HEIGHT_MAX`].
    pub fn extend(&self, blocks: u32) {
        let mut state = self.state();
        let tip = state.best.len() as u32 - 1;
        state.draw(tip + blocks);
    }

    /// Replaces the blocks above `after` with `blocks` new ones drawn with
    /// `seed`: a reorg to a branch forking after `after`, which is longer,
    /// as long or shorter than the old one as `blocks` says.
    ///
    /// # Panics
    /// When `after` is above the tip, or the branch would pass
    /// [`FEED_HEIGHT_MAX`].
    pub fn fork(&self, after: Height, blocks: u32, seed: u64) {
        let mut state = self.state();
        assert!(
            after.as_usize() < state.best.len(),
            "no block {after} to fork after"
        );
        state.segments.retain(|&(start, _)| start <= after.0);
        state.segments.push((after.0 + 1, seed));
        state.draw(after.0 + blocks);
    }

    /// Goes back to the best chain's block at `height`, as a node told to
    /// invalidate the block above it: the chain gets shorter.
    pub fn rewind(&self, height: Height) {
        let mut state = self.state();
        state.best.truncate(height.as_usize() + 1);
        state.segments.retain(|&(start, _)| start <= height.0);
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
