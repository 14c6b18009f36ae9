//! A Bitcoin Core or btcd node, as a [`BlockFeed`] and a [`ChainSource`].
//!
//! Blocks and the outputs they spend (the node's undo data) come from the
//! fastest source the node offers, chosen once at startup
//! ([`Daemon::use_block_source`]):
//! - [`BlockSource::Files`]: Core's own `blk*.dat` and `rev*.dat`, read
//!   straight from its data directory ([`CoreBlockFiles`]) when Osprey can
//!   read it: no work at all for the node. A block the files do not give
//!   (not flushed yet, pruned) comes from REST or JSON-RPC instead;
//! - [`BlockSource::Rest`]: Bitcoin Core's binary REST,
//!   `/rest/block/<hash>.bin` and `/rest/spenttxouts/<hash>.bin` (Core
//!   30+, `-rest=1`), several blocks in flight at once. Core serves both
//!   straight from disk, so it costs the node almost nothing;
//! - [`BlockSource::Rpc`]: JSON-RPC. On Core `getblock <hash> 3` carries each
//!   input's prevout and each transaction's hex, so a block is one request
//!   (Core spends real CPU writing that JSON: the slow path). btcd keeps no
//!   undo data it will serve, so there each block's spent outputs are
//!   resolved by fetching the funding transactions in one batch
//!   (`getrawtransaction`, which needs btcd's `--txindex`): slower, but the
//!   rows are the same.
//!
//! One file per job: this one connects, tells the node's kind and picks
//! the block source; [`feed`] follows the chain and dispatches block
//! fetches to [`rest`], [`core_rpc`] or [`btcd`] (Core's files are read by
//! [`CoreBlockFiles`]); [`services`] looks up transactions, reads the
//! mempool, relays and estimates fees.
//!
//! [`BlockFeed`]: crate::BlockFeed
//! [`ChainSource`]: crate::ChainSource

mod btcd;
mod core_rpc;
mod feed;
mod rest;
mod services;

use crate::corefiles::CoreBlockFiles;
use crate::rpc::{Auth, RpcClient};
use crate::Error;
use bitcoin::{BlockHash, Txid};
use osprey_core::Network;
use serde_json::{json, Value};
use std::sync::atomic::AtomicBool;

/// Which node software answers, for the methods where they differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// Bitcoin Core with its numeric version (e.g. 310100 for 31.1).
    BitcoinCore {
        version: u64,
    },
    Btcd,
}

/// Where blocks and their spent outputs are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSource {
    /// Bitcoin Core's block and undo files, read directly.
    Files,
    /// Bitcoin Core's binary REST interface.
    Rest,
    /// JSON-RPC (`getblock <hash> 3` on Core; block plus funding
    /// transactions on btcd).
    Rpc,
}

impl std::fmt::Display for BlockSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BlockSource::Files => "files",
            BlockSource::Rest => "rest",
            BlockSource::Rpc => "rpc",
        })
    }
}

/// Which block source to use: the fastest the node offers, or one named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlockSourceChoice {
    #[default]
    Auto,
    Only(BlockSource),
}

pub struct Daemon {
    rpc: RpcClient,
    kind: NodeKind,
    network: Network,
    block_source: BlockSource,
    /// Core's block files, when readable ([`BlockSource::Files`]).
    files: Option<CoreBlockFiles>,
    /// Why Core's block files are not read, when `auto` wanted them.
    files_refused: Option<String>,
    /// Whether the node serves binary REST blocks and spent outputs: the
    /// fallback for blocks the files do not give.
    rest: bool,
    /// Whether `/rest/blockpart` may serve transactions (Core 31+ with
    /// REST); cleared, and logged once, the first time it does not.
    blockpart: AtomicBool,
    fee_fallback_logged: AtomicBool,
    /// Whether Core's files failed to give the last block they were asked
    /// for (said once, and once more when they serve again).
    files_failing: AtomicBool,
    /// Whether REST failed to give the last block it was asked for (the
    /// node restarted with `-rest=0`), likewise.
    rest_failing: AtomicBool,
}

impl NodeKind {
    fn is_core(self) -> bool {
        matches!(self, NodeKind::BitcoinCore { .. })
    }

    /// `getrawtransaction`'s parameters. Core takes the verbose flag as a
    /// boolean and, given the block, finds a confirmed transaction without
    /// `-txindex`; btcd takes the flag as a number and has no block
    /// parameter.
    fn getrawtransaction_params(
        self,
        txid: &Txid,
        verbose: bool,
        block: Option<BlockHash>,
    ) -> Vec<Value> {
        match self {
            NodeKind::BitcoinCore { .. } => {
                let mut params = vec![json!(txid), json!(verbose)];
                params.extend(block.map(|hash| json!(hash)));
                params
            }
            NodeKind::Btcd => vec![json!(txid), json!(u8::from(verbose))],
        }
    }
}

/// Refuses a pruned node: Osprey indexes every block from genesis, and a
/// pruned node has deleted most of them (and deletes each new one's
/// predecessors as it goes). A node that cannot say (an old btcd without
/// `getblockchaininfo`) is taken as unpruned, which btcd always is.
fn refuse_pruned(rpc: &RpcClient) -> Result<(), Error> {
    let info: Value = match rpc.call("getblockchaininfo", &[]) {
        Ok(info) => info,
        Err(e) if e.is_transient() => return Err(e),
        Err(_) => return Ok(()),
    };
    if info.get("pruned").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    let kept_from = info
        .get("pruneheight")
        .and_then(Value::as_u64)
        .map_or_else(String::new, |h| {
            format!(" (it keeps blocks from height {h} on)")
        });
    Err(Error::persistent(format!(
        "the node is pruned{kept_from}: Osprey indexes every block from genesis, so it needs a node started without -prune (the index itself stays small)"
    )))
}

impl Daemon {
    /// Connects to the node at `addr`, tells Bitcoin Core from btcd and
    /// checks that it serves `network`.
    ///
    /// # Errors
    /// Transient errors while the node is unreachable or warming up;
    /// persistent ones for bad credentials or the wrong network.
    pub fn connect(addr: &str, auth: Auth, network: Network) -> Result<Daemon, Error> {
        let rpc = RpcClient::new(addr, auth);
        let genesis: BlockHash = rpc.call("getblockhash", &[json!(0)])?;
        if genesis != network.genesis_hash() {
            let on = Network::ALL
                .into_iter()
                .find(|n| n.genesis_hash() == genesis)
                .map_or_else(
                    || format!("a chain Osprey does not know (genesis {genesis})"),
                    |n| n.name().to_string(),
                );
            return Err(Error::persistent(format!(
                "the node is on {on}, not {network}: set network to match the node, or daemon_rpc_addr to a {network} node"
            )));
        }
        refuse_pruned(&rpc)?;
        let kind = match rpc.call::<Value>("getnetworkinfo", &[]) {
            Ok(info) => NodeKind::BitcoinCore {
                version: info.get("version").and_then(Value::as_u64).unwrap_or(0),
            },
            Err(e) if e.is_transient() => return Err(e),
            // btcd: "Command unimplemented".
            Err(_) => NodeKind::Btcd,
        };
        Ok(Daemon {
            rpc,
            kind,
            network,
            block_source: BlockSource::Rpc,
            files: None,
            files_refused: None,
            rest: false,
            blockpart: AtomicBool::new(kind.is_core()),
            fee_fallback_logged: AtomicBool::new(false),
            files_failing: AtomicBool::new(false),
            rest_failing: AtomicBool::new(false),
        })
    }

    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// The node's software and version, e.g. "Bitcoin Core 30.0.0" or
    /// "btcd 0.24.2" (btcd's only from `getinfo`, asked here).
    pub fn node_version(&self) -> String {
        match self.kind {
            NodeKind::BitcoinCore { version } => format!("Bitcoin Core {}", core_version(version)),
            NodeKind::Btcd => match self.rpc.call::<Value>("getinfo", &[]) {
                Ok(info) => match info.get("version").and_then(Value::as_u64) {
                    Some(version) => format!("btcd {}", btcd_version(version)),
                    None => "btcd".to_string(),
                },
                Err(_) => "btcd".to_string(),
            },
        }
    }

    /// Whether the node keeps a transaction index, `None` when it cannot
    /// tell. Core says so in `getindexinfo`. btcd does not say: its
    /// `getrawtransaction` of a confirmed transaction (the genesis
    /// coinbase, on every network) fails with "specify --txindex" without
    /// one, and finds it or says "No information" with one.
    pub fn has_txindex(&self) -> Option<bool> {
        match self.kind {
            NodeKind::BitcoinCore { .. } => {
                let info: Value = self.rpc.call("getindexinfo", &[]).ok()?;
                Some(info.get("txindex").is_some())
            }
            NodeKind::Btcd => {
                let genesis = bitcoin::constants::genesis_block(self.network.bitcoin());
                let coinbase = genesis.txdata[0].compute_txid();
                match self
                    .rpc
                    .call::<Value>("getrawtransaction", &[json!(coinbase), json!(0)])
                {
                    Ok(_) => Some(true),
                    Err(e) if e.message().contains("--txindex") => Some(false),
                    Err(e) if e.message().contains("No information") => Some(true),
                    Err(_) => None,
                }
            }
        }
    }

    pub fn block_source(&self) -> BlockSource {
        self.block_source
    }

    /// Why `auto` did not take Core's block files, when it wanted them
    /// (the directory is missing, unreadable, or another network's).
    pub fn files_refused(&self) -> Option<&str> {
        self.files_refused.as_deref()
    }

    /// Picks where blocks come from: with [`BlockSourceChoice::Auto`],
    /// Core's own files when `blocks_dir` (`<datadir>/<network>/blocks`)
    /// can be read, else binary REST when the node serves it (spent outputs
    /// need Core 30+), else JSON-RPC. A named source the node cannot serve
    /// is an error that says how to enable it.
    ///
    /// # Errors
    /// When the node cannot be reached, or cannot serve the named source.
    pub fn use_block_source(
        &mut self,
        choice: BlockSourceChoice,
        blocks_dir: Option<&std::path::Path>,
    ) -> Result<BlockSource, Error> {
        self.rest = if self.kind.is_core() {
            let genesis: BlockHash = self.rpc.call("getblockhash", &[json!(0)])?;
            self.rpc
                .rest_get(&format!("/rest/spenttxouts/{genesis}.bin"))?
                .is_some()
        } else {
            false
        };
        let wants_files = matches!(
            choice,
            BlockSourceChoice::Auto | BlockSourceChoice::Only(BlockSource::Files)
        );
        self.files = match (blocks_dir, self.kind) {
            (Some(dir), NodeKind::BitcoinCore { .. }) if wants_files => {
                match CoreBlockFiles::open(dir, self.network) {
                    Ok(files) => Some(files),
                    Err(e) if choice == BlockSourceChoice::Auto => {
                        self.files_refused = Some(e.to_string());
                        None
                    }
                    Err(e) => {
                        return Err(Error::persistent(format!(
                            "block source files: {e} (Osprey needs read access to the node's blocks directory)"
                        )))
                    }
                }
            }
            _ => None,
        };
        self.block_source = match choice {
            BlockSourceChoice::Only(BlockSource::Files) => match self.files {
                Some(_) => BlockSource::Files,
                None => {
                    return Err(Error::persistent(
                        "block source files: needs Bitcoin Core and --daemon-dir naming its data directory".into(),
                    ))
                }
            },
            BlockSourceChoice::Only(BlockSource::Rpc) => BlockSource::Rpc,
            BlockSourceChoice::Only(BlockSource::Rest) => {
                if !self.rest {
                    return Err(Error::persistent(format!(
                        "block source rest: the node at {} does not serve /rest/spenttxouts (needs Bitcoin Core 30+ started with -rest=1)",
                        self.rpc.addr()
                    )));
                }
                BlockSource::Rest
            }
            BlockSourceChoice::Auto if self.files.is_some() => BlockSource::Files,
            BlockSourceChoice::Auto if self.rest => BlockSource::Rest,
            BlockSourceChoice::Auto => BlockSource::Rpc,
        };
        Ok(self.block_source)
    }
}

/// Core's numeric version as people write it: 300100 is 30.1.0 (and
/// 210100, before Core 22, was 0.21.1).
fn core_version(version: u64) -> String {
    let (major, minor, patch) = (version / 10_000, version / 100 % 100, version % 100);
    if major < 22 {
        format!("0.{major}.{minor}")
    } else {
        format!("{major}.{minor}.{patch}")
    }
}

/// btcd's numeric version as people write it: 240200 is 0.24.2.
fn btcd_version(version: u64) -> String {
    format!(
        "{}.{}.{}",
        version / 1_000_000,
        version / 10_000 % 100,
        version / 100 % 100
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_their_releases_are_named() {
        assert_eq!(core_version(300100), "30.1.0");
        assert_eq!(core_version(250200), "25.2.0");
        assert_eq!(core_version(210100), "0.21.1");
        assert_eq!(btcd_version(240200), "0.24.2");
        assert_eq!(btcd_version(1_020_300), "1.2.3");
    }
}
