//! Feeds a generated chain to a running node with `submitblock`, in
//! JSON-RPC batches, skipping the blocks the node already has; for a chain
//! with placeholder signatures, the headers first (`submitheader`). Talks
//! to the node only through `osprey_chain::rpc`.

use std::path::Path;
use std::time::{Duration, Instant};

use bitcoin::BlockHash;
use osprey_chain::rpc::RpcClient;
use serde_json::Value;

use crate::blkfile::{read_raw_blocks, BlkError, RawBlock};

/// Limits of one `submitblock` batch. Bitcoin Core refuses HTTP bodies over
/// 32 MB; hex doubles a block's size.
#[derive(Clone, Debug)]
pub struct SubmitLimits {
    pub batch_hex_bytes_max: usize,
    pub batch_blocks_max: usize,
}

impl Default for SubmitLimits {
    fn default() -> Self {
        SubmitLimits {
            batch_hex_bytes_max: 16 << 20,
            batch_blocks_max: 200,
        }
    }
}

/// How far a submission got; passed to the progress callback after every
/// batch and returned at the end.
#[derive(Clone, Debug, Default)]
pub struct SubmitProgress {
    /// Height of the last block the node has from this chain.
    pub height: u32,
    /// Blocks the node already had when we started (genesis included).
    pub skipped: u32,
    /// Blocks sent in this run.
    pub submitted: u32,
    /// Bytes of block data sent in this run.
    pub bytes: u64,
    pub elapsed: Duration,
}

/// Why a submission stopped.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Blk(#[from] BlkError),
    #[error("{context}: {source}")]
    Rpc {
        context: String,
        source: osprey_chain::Error,
    },
    #[error("block {height} ({hash}) rejected: {reason}")]
    Rejected {
        height: u32,
        hash: BlockHash,
        reason: String,
    },
    #[error(
        "the node has block {node} at height {height} where the chain has {ours}: \
         it follows another chain; start a fresh regtest node"
    )]
    OtherChain {
        height: u32,
        node: String,
        ours: BlockHash,
    },
    #[error("after submitting up to block {height} ({hash}) the node's tip is {tip}: it did not connect the blocks")]
    NotConnected {
        height: u32,
        hash: BlockHash,
        tip: String,
    },
}

fn rpc_err(context: impl Into<String>) -> impl FnOnce(osprey_chain::Error) -> SubmitError {
    let context = context.into();
    move |source| SubmitError::Rpc { context, source }
}

/// Submits every block of `blocks_dir` (genesis first, in height order, as
/// chaingen writes them) that the node does not have yet.
///
/// # Errors
/// When the files cannot be read, the node cannot be reached, follows
/// another chain, or rejects a block (with the node's reason).
pub fn submit_chain(
    blocks_dir: &Path,
    rpc: &RpcClient,
    limits: &SubmitLimits,
    progress: &mut dyn FnMut(&SubmitProgress),
) -> Result<SubmitProgress, SubmitError> {
    let started = Instant::now();
    let node_height: u32 = rpc
        .call("getblockcount", &[])
        .map_err(rpc_err("getblockcount"))?;
    let mut state = SubmitProgress::default();
    let mut blocks = read_raw_blocks(blocks_dir)?.enumerate();

    // Compare the blocks the node already has, a batch of hashes at a time.
    let mut have: Vec<(u32, BlockHash)> = Vec::new();
    let mut pending: Option<(u32, RawBlock)> = None;
    for (height, raw) in blocks.by_ref() {
        let raw = raw?;
        let height = height as u32;
        if height > node_height {
            pending = Some((height, raw));
            break;
        }
        have.push((height, block_hash(&raw)));
        if have.len() == 1_000 {
            check_known(rpc, &have)?;
            have.clear();
        }
        state.height = height;
        state.skipped += 1;
    }
    check_known(rpc, &have)?;
    if state.skipped > 0 {
        tracing::info!(
            height = state.height,
            "node already has the chain up to this height"
        );
    }

    let mut batch: Vec<(u32, RawBlock)> = Vec::new();
    let mut batch_hex = 0usize;
    let mut next = pending.map(Ok);
    loop {
        let item = match next.take() {
            Some(item) => Some(item),
            None => blocks.next().map(|(h, raw)| raw.map(|raw| (h as u32, raw))),
        };
        let flush = match &item {
            None => true,
            Some(Ok((_, raw))) => {
                !batch.is_empty()
                    && (batch.len() >= limits.batch_blocks_max
                        || batch_hex + 2 * raw.bytes.len() > limits.batch_hex_bytes_max)
            }
            Some(Err(_)) => true,
        };
        if flush && !batch.is_empty() {
            submit_batch(rpc, &batch)?;
            state.height = batch.last().expect("batch is not empty").0;
            state.submitted += batch.len() as u32;
            state.bytes += batch
                .iter()
                .map(|(_, raw)| raw.bytes.len() as u64)
                .sum::<u64>();
            state.elapsed = started.elapsed();
            progress(&state);
            batch.clear();
            batch_hex = 0;
        }
        match item {
            None => break,
            Some(Err(e)) => return Err(e.into()),
            Some(Ok((height, raw))) => {
                batch_hex += 2 * raw.bytes.len();
                batch.push((height, raw));
            }
        }
    }
    state.elapsed = started.elapsed();
    Ok(state)
}

/// Headers per `submitheader` batch (160 hex characters each).
const HEADERS_PER_BATCH: usize = 2_000;

/// Sends the header of every block of `blocks_dir` above the node's block
/// count with `submitheader` (Bitcoin Core only), so that the node knows
/// the whole chain's headers before it connects a block. Bitcoin Core's
/// `-assumevalid` skips the script checks of a block only when the best
/// header is two weeks of work above it, which a chain with placeholder
/// signatures needs of every block that holds them. Returns the number
/// of headers sent.
///
/// # Errors
/// When the files cannot be read, the node cannot be reached, or it
/// refuses a header (with the node's reason).
pub fn submit_headers(blocks_dir: &Path, rpc: &RpcClient) -> Result<u32, SubmitError> {
    let node_height: u32 = rpc
        .call("getblockcount", &[])
        .map_err(rpc_err("getblockcount"))?;
    let mut sent = 0;
    let mut batch: Vec<(u32, bitcoin::block::Header)> = Vec::with_capacity(HEADERS_PER_BATCH);
    for (height, raw) in read_raw_blocks(blocks_dir)?.enumerate() {
        let raw = raw?;
        let height = height as u32;
        if height <= node_height {
            continue;
        }
        batch.push((height, header(&raw)));
        if batch.len() == HEADERS_PER_BATCH {
            submit_header_batch(rpc, &batch)?;
            sent += batch.len() as u32;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        submit_header_batch(rpc, &batch)?;
        sent += batch.len() as u32;
    }
    Ok(sent)
}

fn submit_header_batch(
    rpc: &RpcClient,
    batch: &[(u32, bitcoin::block::Header)],
) -> Result<(), SubmitError> {
    let params: Vec<Vec<Value>> = batch
        .iter()
        .map(|(_, header)| {
            vec![Value::String(hex::encode(bitcoin::consensus::serialize(
                header,
            )))]
        })
        .collect();
    let replies = rpc
        .call_batch("submitheader", &params)
        .map_err(rpc_err("submitheader"))?;
    for ((height, header), reply) in batch.iter().zip(replies) {
        match reply {
            Ok(Value::Null) => {}
            Ok(other) => {
                return Err(SubmitError::Rejected {
                    height: *height,
                    hash: header.block_hash(),
                    reason: format!("header: {other}"),
                })
            }
            Err(e) => {
                return Err(SubmitError::Rejected {
                    height: *height,
                    hash: header.block_hash(),
                    reason: format!("header: {e}"),
                })
            }
        }
    }
    Ok(())
}

fn header(raw: &RawBlock) -> bitcoin::block::Header {
    // The reader checked that a record holds at least the 80-byte header.
    bitcoin::consensus::deserialize(&raw.bytes[..80]).expect("80 bytes always decode as a header")
}

fn block_hash(raw: &RawBlock) -> BlockHash {
    header(raw).block_hash()
}

/// Checks that the node's blocks at these heights are ours.
fn check_known(rpc: &RpcClient, blocks: &[(u32, BlockHash)]) -> Result<(), SubmitError> {
    let params: Vec<Vec<Value>> = blocks.iter().map(|(h, _)| vec![Value::from(*h)]).collect();
    let replies = rpc
        .call_batch("getblockhash", &params)
        .map_err(rpc_err("getblockhash"))?;
    for ((height, ours), reply) in blocks.iter().zip(replies) {
        let node = reply.map_err(rpc_err(format!("getblockhash {height}")))?;
        let node = node.as_str().unwrap_or_default().to_string();
        if node != ours.to_string() {
            return Err(SubmitError::OtherChain {
                height: *height,
                node,
                ours: *ours,
            });
        }
    }
    Ok(())
}

fn submit_batch(rpc: &RpcClient, batch: &[(u32, RawBlock)]) -> Result<(), SubmitError> {
    let params: Vec<Vec<Value>> = batch
        .iter()
        .map(|(_, raw)| vec![Value::String(hex::encode(&raw.bytes))])
        .collect();
    let replies = rpc
        .call_batch("submitblock", &params)
        .map_err(rpc_err("submitblock"))?;
    for ((height, raw), reply) in batch.iter().zip(replies) {
        let rejected = |reason: String| SubmitError::Rejected {
            height: *height,
            hash: block_hash(raw),
            reason,
        };
        match reply {
            Ok(Value::Null) => {}
            // Core says "duplicate", btcd "rejected: already have block ...".
            Ok(Value::String(s)) if s == "duplicate" || s.contains("already have block") => {}
            Ok(Value::String(s)) => return Err(rejected(s)),
            Ok(other) => return Err(rejected(other.to_string())),
            Err(e) => return Err(rejected(e.to_string())),
        }
    }
    // btcd answers null for a block it keeps as an orphan, so only the tip
    // proves the batch connected.
    let (height, raw) = batch.last().expect("batch is not empty");
    let hash = block_hash(raw);
    let tip: String = rpc
        .call("getbestblockhash", &[])
        .map_err(rpc_err("getbestblockhash"))?;
    if tip != hash.to_string() {
        return Err(SubmitError::NotConnected {
            height: *height,
            hash,
            tip,
        });
    }
    Ok(())
}
