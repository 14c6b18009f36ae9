//! Regtest test environment for Osprey's integration tests and benches:
//! real nodes ([`BtcdNode`], and [`BitcoindNode`] where Bitcoin Core is
//! installed) started on loopback ports in temporary directories, and a
//! [`TestWallet`] that signs real transactions of every script kind, and
//! [`ChainFixture`]s: generated chains to read or to load into a node, and
//! a [`ChainFeed`]: a generated chain in memory that reorganises on cue,
//! with a mempool of its own, a chain source for the indexer's and the
//! query layer's tests.
//! Never used by production code (`publish = false`).

mod blocks;
mod feed;
mod fixture;
mod node;
mod wallet;

pub use blocks::{burn_script, submit_block_on};
pub use feed::{ChainFeed, FEED_HEIGHT_MAX};
pub use fixture::ChainFixture;

pub use node::{
    mining_address, mining_key, start_node, BitcoindNode, BitcoindOptions, BtcdNode, Node,
    NodeKind, RPC_PASS, RPC_USER,
};
pub use osprey_chaingen::sign::ScriptKind;
pub use wallet::{TestWallet, WalletCoin};
