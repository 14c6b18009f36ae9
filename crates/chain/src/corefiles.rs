//! Bitcoin Core's own block and undo files, read directly: the fastest
//! source there is (no RPC, no REST, no work for the node) whenever Osprey
//! can read the node's data directory.
//!
//! - `blocks/blkNNNNN.dat`: records `magic | size (u32 LE) | block`. Blocks
//!   are stored in the order they arrived, so positions are found by a scan
//!   that reads only each record's 8-byte head and 80-byte header, and is
//!   resumed when a block is not found yet (Core appends while we read).
//! - `blocks/revNNNNN.dat`: records `magic | size | CBlockUndo | checksum`,
//!   the checksum being SHA256d(previous block hash || CBlockUndo). The undo
//!   of a block stored in `blkN` is in `revN`, appended when the block was
//!   connected, so active-chain blocks follow height order there. Each
//!   record is matched to its block by that checksum: a wrong match is
//!   impossible, a miss means "not here" and the caller asks the node.
//! - Since Core 28 both are XOR-obfuscated with the 8-byte key in
//!   `blocks/xor.dat` (byte `i` of a file XOR `key[i % 8]`).
//!
//! The record format, the XOR key and the open files are
//! [`crate::blkfile::BlocksDir`]'s; this module finds blocks and matches
//! undo records to them. Every length read from a file is bounded, so a
//! damaged file is an error, never a panic or a huge allocation.

use crate::blkfile::{BlockPosition, BlocksDir, FileKind};
use crate::Error;
use bitcoin::block::Header;
use bitcoin::consensus::{deserialize, Decodable};
use bitcoin::hashes::{sha256d, Hash, HashEngine};
use bitcoin::{Amount, Block, BlockHash, ScriptBuf, TxOut};
use osprey_core::Network;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

/// Largest script in undo data (consensus: 10,000 bytes).
const SCRIPT_BYTES_MAX: u64 = 10_000;

#[derive(Default)]
struct BlockIndex {
    /// First 8 bytes of a block hash -> where it is (confirmed on read).
    by_hash: HashMap<u64, BlockPosition>,
    /// First 8 bytes of every parent hash in the files (with those of its
    /// first child), and of those with two children or more: the undo
    /// checksum cannot tell siblings apart. A block stored twice (Core
    /// stores a block again when it lost it in a crash) is no sibling.
    parents: HashMap<u64, u64>,
    forks: HashSet<u64>,
    /// Per blk file, how far it has been scanned.
    scanned: Vec<u64>,
    /// Per blk file, where its scan last stopped at bytes that are no
    /// record (see [`CoreBlockFiles::rescan`]).
    damaged_at: HashMap<u32, u64>,
}

/// What one scan of a blk file found: (hash key, parent's hash key,
/// position) of each block, where it stopped, and why when that was bytes
/// that are no block record.
struct Scan {
    blocks: Vec<(u64, u64, BlockPosition)>,
    end: u64,
    damage: Option<String>,
}

/// Matched blocks a rev file remembers (see `RevFile::after`): far more
/// than the blocks fetched at once.
const RECENT_MATCHES_MAX: usize = 4096;

/// The records of one rev file, found so far, and where the next match is
/// most likely.
#[derive(Default)]
struct RevFile {
    /// (offset of the undo bytes, their length)
    records: Vec<(u64, u32)>,
    scanned: u64,
    cursor: usize,
    /// For each block matched here (by hash key), the index after its
    /// record: Core writes undo records in the order it connects blocks,
    /// so a block's record most likely follows its parent's. Blocks are
    /// fetched on several threads, so the last match alone (`cursor`) is
    /// often another thread's, and every miss costs hashing a record. Only
    /// recent blocks are parents of blocks still to come, so the map is
    /// emptied at `RECENT_MATCHES_MAX` entries.
    after: HashMap<u64, usize>,
    /// Where the last walk stopped at bytes that are no record.
    damaged_at: Option<u64>,
}

pub struct CoreBlockFiles {
    dir: BlocksDir,
    index: Mutex<BlockIndex>,
    revs: Mutex<HashMap<u32, RevFile>>,
}

fn hash_key(hash: &BlockHash) -> u64 {
    u64::from_le_bytes(hash.as_byte_array()[..8].try_into().expect("8 bytes"))
}

impl CoreBlockFiles {
    /// Opens `blocks_dir` (`<datadir>/<network subdir>/blocks`) and indexes
    /// the blocks in it.
    ///
    /// # Errors
    /// When the directory or its first block file cannot be read, or holds
    /// another network's blocks.
    pub fn open(blocks_dir: &Path, network: Network) -> Result<CoreBlockFiles, Error> {
        let magic = network.bitcoin().magic().to_bytes();
        let files = CoreBlockFiles {
            dir: BlocksDir::open(blocks_dir, Some(magic))?,
            index: Mutex::new(BlockIndex::default()),
            revs: Mutex::new(HashMap::new()),
        };
        // The first record of blk00000.dat must be this network's genesis.
        let mut head = [0u8; 88];
        files.dir.read_exact(FileKind::Blk, 0, 0, &mut head)?;
        let genesis: Header = deserialize(&head[8..]).map_err(|e| {
            Error::persistent(format!("{}: bad first header: {e}", blocks_dir.display()))
        })?;
        if head[..4] != magic || genesis.block_hash() != network.genesis_hash() {
            return Err(Error::persistent(format!(
                "{} does not hold {network}'s blocks",
                blocks_dir.display()
            )));
        }
        files.rescan()?;
        Ok(files)
    }

    /// Indexes what was appended to the blk files since the last scan.
    ///
    /// Bytes that are no block record where a scan resumes mean Core wrote
    /// over what was scanned: restarted after a crash, it writes from where
    /// its last flush left the file, over the blocks it lost, and records
    /// scanned before may now be elsewhere. The file is scanned again from
    /// its start then, once per such place, up to the first bytes that are
    /// no record: where Core writes its next block. Blocks not found come
    /// from the node meanwhile.
    fn rescan(&self) -> Result<(), Error> {
        let mut index = self.index.lock().expect("block index lock");
        let mut file = index.scanned.len().saturating_sub(1) as u32;
        loop {
            if self.dir.file_len(FileKind::Blk, file)?.is_none() {
                return Ok(());
            }
            let from = index.scanned.get(file as usize).copied().unwrap_or(0);
            let mut scan = self.scan(file, from)?;
            if let Some(what) = &scan.damage {
                if from > 0 && index.damaged_at.get(&file) != Some(&scan.end) {
                    tracing::warn!(
                        "{what}: written over since it was scanned (the node restarted after a crash?); scanning {} again from its start",
                        self.dir.path(FileKind::Blk, file).display()
                    );
                    scan = self.scan(file, 0)?;
                }
            }
            match scan.damage {
                Some(_) => index.damaged_at.insert(file, scan.end),
                None => index.damaged_at.remove(&file),
            };
            for (key, parent, pos) in scan.blocks {
                index.by_hash.insert(key, pos);
                match index.parents.get(&parent) {
                    None => {
                        index.parents.insert(parent, key);
                    }
                    Some(&child) if child != key => {
                        index.forks.insert(parent);
                    }
                    Some(_) => {}
                }
            }
            match index.scanned.get_mut(file as usize) {
                Some(scanned) => *scanned = scan.end,
                None => index.scanned.push(scan.end),
            }
            file += 1;
        }
    }

    /// Scans blk file `file` from `from`: each record's 8-byte head and
    /// 80-byte header.
    fn scan(&self, file: u32, from: u64) -> Result<Scan, Error> {
        let mut blocks = Vec::new();
        let mut unwritten = None;
        let mut bad_header = None;
        let (end, damage) = self.dir.walk(FileKind::Blk, file, from, |offset, len| {
            let mut header = [0u8; 80];
            if unwritten.is_none() && bad_header.is_none() && len >= 80 {
                self.dir
                    .read_stored(FileKind::Blk, file, offset, &mut header)?;
                if header == [0; 80] {
                    // Core wrote the record's head but its header is not
                    // on disk yet: scan it again next time.
                    unwritten = Some(offset - 8);
                    return Ok(());
                }
                self.dir.unobfuscate(offset, &mut header);
                match deserialize::<Header>(&header) {
                    Ok(header) => blocks.push((
                        hash_key(&header.block_hash()),
                        hash_key(&header.prev_blockhash),
                        BlockPosition { file, offset, len },
                    )),
                    Err(e) => {
                        bad_header = Some((
                            offset - 8,
                            format!(
                                "{} at offset {offset}: bad block header: {e}",
                                self.dir.path(FileKind::Blk, file).display()
                            ),
                        ))
                    }
                }
            }
            Ok(())
        })?;
        Ok(match (unwritten, bad_header) {
            (Some(at), _) => Scan {
                blocks,
                end: at,
                damage: None,
            },
            (None, Some((at, what))) => Scan {
                blocks,
                end: at,
                damage: Some(what),
            },
            (None, None) => Scan {
                blocks,
                end,
                damage,
            },
        })
    }

    /// Where the block with this hash is; rescans once on a miss.
    ///
    /// # Errors
    /// When the files cannot be read.
    pub fn block_position(&self, hash: &BlockHash) -> Result<Option<BlockPosition>, Error> {
        let lookup = || {
            self.index
                .lock()
                .expect("block index lock")
                .by_hash
                .get(&hash_key(hash))
                .copied()
        };
        if let Some(pos) = lookup() {
            return Ok(Some(pos));
        }
        self.rescan()?;
        Ok(lookup())
    }

    /// The block with this hash, or `None` when the files do not hold it.
    ///
    /// # Errors
    /// When the files cannot be read or the block does not parse.
    pub fn block(&self, hash: &BlockHash) -> Result<Option<(Block, BlockPosition)>, Error> {
        let Some(pos) = self.block_position(hash)? else {
            return Ok(None);
        };
        if self.dir.file(FileKind::Blk, pos.file)?.is_none() {
            return Ok(None); // Pruned since it was scanned.
        }
        let bytes = self.dir.read_block(pos)?;
        // Positions are keyed by 8 bytes of the hash, and a record can be
        // read while Core still writes it: a block that does not parse or
        // has another hash is "not here", and the caller asks the node.
        Ok(deserialize::<Block>(&bytes)
            .ok()
            .filter(|block| block.block_hash() == *hash)
            .map(|block| (block, pos)))
    }

    /// Reads `len` bytes at `offset` of a block (a transaction's bytes).
    ///
    /// # Errors
    /// When the span lies outside the block or the file cannot be read.
    pub fn read_in_block(
        &self,
        pos: BlockPosition,
        offset: u32,
        len: u32,
    ) -> Result<Vec<u8>, Error> {
        if u64::from(offset) + u64::from(len) > u64::from(pos.len) {
            return Err(Error::persistent(format!(
                "span {offset}+{len} is outside a block of {} bytes",
                pos.len
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        self.dir.read_exact(
            FileKind::Blk,
            pos.file,
            pos.offset + u64::from(offset),
            &mut bytes,
        )?;
        Ok(bytes)
    }

    /// The outputs `block` (stored at `pos`) spends, one per input of each
    /// non-coinbase transaction in block order, from its undo record, or
    /// `None` when no record of its rev file has its checksum (not written
    /// yet, or pruned), or when the files hold a sibling of the block.
    ///
    /// The checksum covers the parent's hash and the undo bytes, not the
    /// block's own hash: the undo of a sibling (a block with the same
    /// parent, connected before a reorg) matches it just as well. So where
    /// the files hold siblings, the caller asks the node instead.
    ///
    /// # Errors
    /// When a file cannot be read or the matching record is malformed.
    pub fn spent_outputs(
        &self,
        block: &Block,
        pos: BlockPosition,
    ) -> Result<Option<Vec<TxOut>>, Error> {
        let prev = block.header.prev_blockhash;
        // A sibling is stored before it is connected, so after this rescan
        // every sibling whose undo exists is known.
        self.rescan()?;
        if self
            .index
            .lock()
            .expect("block index lock")
            .forks
            .contains(&hash_key(&prev))
        {
            return Ok(None);
        }
        let matches = |offset: u64, len: u32| -> Result<Option<Vec<u8>>, Error> {
            let mut bytes = vec![0u8; len as usize + 32];
            self.dir
                .read_exact(FileKind::Rev, pos.file, offset, &mut bytes)?;
            let (undo, checksum) = bytes.split_at(len as usize);
            let mut engine = sha256d::Hash::engine();
            engine.input(prev.as_byte_array());
            engine.input(undo);
            let ok = sha256d::Hash::from_engine(engine).as_byte_array()[..] == *checksum;
            bytes.truncate(len as usize);
            Ok(ok.then_some(bytes))
        };
        let decode = |undo: Vec<u8>, offset: u64| {
            decode_block_undo(&undo, block).map(Some).map_err(|what| {
                Error::persistent(format!(
                    "{} at offset {offset}: {what}",
                    self.dir.path(FileKind::Rev, pos.file).display()
                ))
            })
        };
        // Reading, hashing and decoding a record run outside the lock: held
        // through them, it made the fetch threads take turns (one core busy
        // of two, chaingen `large` from Core's files). Under the lock only
        // the likely records are picked: the one after the parent's, and
        // the one after the last match (or the one after that, when
        // another thread's block is being matched right now).
        let likely: Vec<(usize, (u64, u32))> = {
            let mut revs = self.revs.lock().expect("rev files lock");
            let rev = revs.entry(pos.file).or_default();
            let mut picks: Vec<usize> = Vec::with_capacity(3);
            if let Some(&after) = rev.after.get(&hash_key(&prev)) {
                picks.push(after);
            }
            for at in [rev.cursor, rev.cursor + 1] {
                if !picks.contains(&at) {
                    picks.push(at);
                }
            }
            picks
                .into_iter()
                .filter_map(|at| rev.records.get(at).map(|record| (at, *record)))
                .collect()
        };
        for (at, (offset, len)) in likely {
            if let Some(undo) = matches(offset, len)? {
                self.remember_match(pos.file, at, block);
                return decode(undo, offset);
            }
        }
        // Not where expected: walk what Core appended since the last scan
        // and try every record, under the lock (rare: a new file, a reorg).
        let mut revs = self.revs.lock().expect("rev files lock");
        let rev = revs.entry(pos.file).or_default();
        // Bytes that are no record where the walk resumes: Core wrote over
        // the file after a crash, as over blk files (see `rescan`): walked
        // again from its start, once per such place.
        let from = rev.scanned;
        let mut found = Vec::new();
        let walk = |from: u64, found: &mut Vec<(u64, u32)>| {
            self.dir.walk(FileKind::Rev, pos.file, from, |offset, len| {
                found.push((offset, len));
                Ok(())
            })
        };
        let (mut end, mut damage) = walk(from, &mut found)?;
        if damage.is_some() && from > 0 && rev.damaged_at != Some(end) {
            found.clear();
            (end, damage) = walk(0, &mut found)?;
            *rev = RevFile::default();
        }
        rev.damaged_at = damage.map(|_| end);
        rev.scanned = end;
        rev.records.extend(found);
        let n = rev.records.len();
        let start = rev.cursor;
        for i in 0..n {
            let at = (start + i) % n;
            let (offset, len) = rev.records[at];
            if let Some(undo) = matches(offset, len)? {
                drop(revs);
                self.remember_match(pos.file, at, block);
                return decode(undo, offset);
            }
        }
        Ok(None)
    }

    /// Notes that `block`'s undo record is record `at` of rev file `file`,
    /// so that its child's is looked for right after it.
    fn remember_match(&self, file: u32, at: usize, block: &Block) {
        let mut revs = self.revs.lock().expect("rev files lock");
        let rev = revs.entry(file).or_default();
        rev.cursor = at + 1;
        if rev.after.len() >= RECENT_MATCHES_MAX {
            rev.after.clear();
        }
        rev.after.insert(hash_key(&block.block_hash()), at + 1);
    }
}

/// Core's VARINT (serialize.h): base 128, most significant group first,
/// each continuation adding one, so every number has one encoding.
fn read_varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut n: u64 = 0;
    loop {
        let (&byte, rest) = bytes.split_first().ok_or("truncated varint")?;
        *bytes = rest;
        if n > (u64::MAX >> 7) {
            return Err("varint too large".into());
        }
        n = (n << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Ok(n);
        }
        n = n.checked_add(1).ok_or("varint too large")?;
    }
}

/// Core's `DecompressAmount` (compressor.cpp).
fn decompress_amount(x: u64) -> u64 {
    if x == 0 {
        return 0;
    }
    let mut x = x - 1;
    let mut e = x % 10;
    x /= 10;
    let mut n = if e < 9 {
        let d = (x % 9) + 1;
        x /= 9;
        x.saturating_mul(10).saturating_add(d)
    } else {
        x.saturating_add(1)
    };
    while e > 0 {
        n = n.saturating_mul(10);
        e -= 1;
    }
    n
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if bytes.len() < n {
        return Err("truncated".into());
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

/// Core's `ScriptCompression`: six special forms, else the raw script.
fn read_script(bytes: &mut &[u8]) -> Result<ScriptBuf, String> {
    let size = read_varint(bytes)?;
    let script = match size {
        0 => {
            let hash = take(bytes, 20)?;
            let mut s = vec![0x76, 0xa9, 20];
            s.extend_from_slice(hash);
            s.extend_from_slice(&[0x88, 0xac]);
            s
        }
        1 => {
            let hash = take(bytes, 20)?;
            let mut s = vec![0xa9, 20];
            s.extend_from_slice(hash);
            s.push(0x87);
            s
        }
        2 | 3 => {
            let x = take(bytes, 32)?;
            let mut s = vec![33, size as u8];
            s.extend_from_slice(x);
            s.push(0xac);
            s
        }
        4 | 5 => {
            let x = take(bytes, 32)?;
            let mut compressed = vec![size as u8 - 2];
            compressed.extend_from_slice(x);
            let key = bitcoin::secp256k1::PublicKey::from_slice(&compressed)
                .map_err(|e| format!("bad compressed public key: {e}"))?;
            let mut s = vec![65];
            s.extend_from_slice(&key.serialize_uncompressed());
            s.push(0xac);
            s
        }
        n => {
            let len = n - 6;
            if len > SCRIPT_BYTES_MAX {
                return Err(format!("script of {len} bytes"));
            }
            take(bytes, len as usize)?.to_vec()
        }
    };
    Ok(ScriptBuf::from_bytes(script))
}

fn read_count(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut cursor = std::io::Cursor::new(*bytes);
    let n = bitcoin::VarInt::consensus_decode(&mut cursor)
        .map_err(|e| format!("bad count: {e}"))?
        .0;
    *bytes = &bytes[cursor.position() as usize..];
    Ok(n)
}

/// Decodes a `CBlockUndo` into the outputs `block` spends, checking that
/// the counts fit the block input for input.
///
/// # Errors
/// What is wrong with the bytes, when they are not the undo of `block`.
pub fn decode_block_undo(mut bytes: &[u8], block: &Block) -> Result<Vec<TxOut>, String> {
    let txs = read_count(&mut bytes)?;
    // The count is read from the file: u64::MAX must not overflow.
    if txs.checked_add(1) != Some(block.txdata.len() as u64) {
        return Err(format!(
            "undo for {txs} transactions, the block has {} besides its coinbase",
            block.txdata.len().saturating_sub(1)
        ));
    }
    let mut outputs = Vec::new();
    for tx in block.txdata.iter().skip(1) {
        let spent = read_count(&mut bytes)?;
        if spent != tx.input.len() as u64 {
            return Err(format!(
                "undo for {spent} inputs, the transaction has {}",
                tx.input.len()
            ));
        }
        for _ in 0..spent {
            let code = read_varint(&mut bytes)?;
            if code >> 1 > 0 {
                read_varint(&mut bytes)?; // The old format's version; unused.
            }
            let value = decompress_amount(read_varint(&mut bytes)?);
            let script_pubkey = read_script(&mut bytes)?;
            outputs.push(TxOut {
                value: Amount::from_sat(value),
                script_pubkey,
            });
        }
    }
    if !bytes.is_empty() {
        return Err("trailing bytes".into());
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::consensus::serialize;

    const REGTEST_MAGIC: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

    /// A block on `parent` whose coinbase carries `tag` (`tag` bytes of it:
    /// blocks of different sizes).
    fn block_on(parent: BlockHash, tag: usize) -> Block {
        let mut block = bitcoin::blockdata::constants::genesis_block(bitcoin::Network::Regtest);
        block.header.prev_blockhash = parent;
        block.txdata[0].input[0].script_sig = ScriptBuf::from_bytes(vec![0x51; tag]);
        block.header.merkle_root = block.compute_merkle_root().expect("a coinbase");
        block
    }

    fn record(block: &Block) -> Vec<u8> {
        let bytes = serialize(block);
        let mut r = REGTEST_MAGIC.to_vec();
        r.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        r.extend_from_slice(&bytes);
        r
    }

    /// Core killed after storing blocks A and B, restarted, and storing C
    /// and D from where its last flush left the file (after the genesis),
    /// over A and B: C and D are found, though the bytes where the last
    /// scan stopped are inside D now, and A is not mistaken for a fork of
    /// itself when the file is scanned again.
    #[test]
    fn blocks_written_over_after_a_crash_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blk00000.dat");
        let genesis = bitcoin::blockdata::constants::genesis_block(bitcoin::Network::Regtest);
        let a = block_on(genesis.block_hash(), 10);
        let b = block_on(a.block_hash(), 10);
        let mut data = record(&genesis);
        let flushed = data.len();
        data.extend(record(&a));
        data.extend(record(&b));
        std::fs::write(&path, &data).unwrap();
        let files = CoreBlockFiles::open(dir.path(), Network::Regtest).unwrap();
        assert!(files.block(&b.block_hash()).unwrap().is_some());

        // C and D are longer than A and B: the old scan's end falls inside D.
        let c = block_on(genesis.block_hash(), 40);
        let d = block_on(c.block_hash(), 40);
        data.truncate(flushed);
        data.extend(record(&c));
        data.extend(record(&d));
        std::fs::write(&path, &data).unwrap();
        for block in [&c, &d] {
            let (found, _) = files.block(&block.block_hash()).unwrap().expect("found");
            assert_eq!(found, *block);
        }
        // A and C are siblings: their undo cannot tell them apart. A block
        // seen twice is not its own sibling.
        let index = files.index.lock().unwrap();
        assert!(index.forks.contains(&hash_key(&genesis.block_hash())));
        assert!(!index.forks.contains(&hash_key(&c.block_hash())));
    }

    #[test]
    fn varints_read_cores_encodings() {
        // serialize.h: 0:[0x00] 1:[0x01] 127:[0x7F] 128:[0x80 0x00]
        // 255:[0x80 0x7F] 256:[0x81 0x00] 16383:[0xFE 0x7F] 16384:[0xFF 0x00]
        // 16511:[0xFF 0x7F] 65535:[0x82 0xFE 0x7F] 2^32:[0x8E 0xFE 0xFE 0xFF 0x00]
        for (bytes, n) in [
            (&[0x00][..], 0u64),
            (&[0x01], 1),
            (&[0x7f], 127),
            (&[0x80, 0x00], 128),
            (&[0x80, 0x7f], 255),
            (&[0x81, 0x00], 256),
            (&[0xfe, 0x7f], 16383),
            (&[0xff, 0x00], 16384),
            (&[0xff, 0x7f], 16511),
            (&[0x82, 0xfe, 0x7f], 65535),
            (&[0x8e, 0xfe, 0xfe, 0xff, 0x00], 1 << 32),
        ] {
            let mut b = bytes;
            assert_eq!(read_varint(&mut b), Ok(n), "{bytes:02x?}");
            assert!(b.is_empty());
        }
        assert!(read_varint(&mut &[0x80][..]).is_err());
        assert!(read_varint(&mut &[0xff; 12][..]).is_err());
    }

    #[test]
    fn amounts_decompress_like_core() {
        // compress_tests.cpp: CompressAmount(0)=0x0, (1)=0x1, (CENT)=0x7,
        // (COIN)=0x9, (50*COIN)=0x32, (21M*COIN)=0x1406f40.
        for (compressed, sat) in [
            (0x0, 0u64),
            (0x1, 1),
            (0x7, 1_000_000),
            (0x9, 100_000_000),
            (0x32, 5_000_000_000),
            (0x1406f40, 2_100_000_000_000_000),
        ] {
            assert_eq!(decompress_amount(compressed), sat);
        }
    }

    #[test]
    fn a_transaction_count_of_u64_max_is_an_error() {
        // Found by the fuzz target decode_block_undo: the count plus the
        // coinbase overflowed (a panic where overflow is checked).
        let block = bitcoin::constants::genesis_block(bitcoin::Network::Regtest);
        let undo = [[0xffu8].as_slice(), &u64::MAX.to_le_bytes()].concat();
        let e = decode_block_undo(&undo, &block).unwrap_err();
        assert_eq!(
            e,
            "undo for 18446744073709551615 transactions, the block has 0 besides its coinbase"
        );
    }

    #[test]
    fn scripts_decompress_to_every_form() {
        let p2pkh = read_script(&mut &[[0u8].as_slice(), &[7; 20]].concat()[..]).unwrap();
        assert!(p2pkh.is_p2pkh());
        let p2sh = read_script(&mut &[[1u8].as_slice(), &[7; 20]].concat()[..]).unwrap();
        assert!(p2sh.is_p2sh());
        // The generator point's x; its y is even, so prefix 02 / form 4.
        let g: [u8; 32] =
            hex::decode("79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798")
                .unwrap()
                .try_into()
                .unwrap();
        let compressed = read_script(&mut &[[2u8].as_slice(), &g].concat()[..]).unwrap();
        assert!(compressed.is_p2pk());
        assert_eq!(compressed.len(), 35);
        let uncompressed = read_script(&mut &[[4u8].as_slice(), &g].concat()[..]).unwrap();
        assert!(uncompressed.is_p2pk());
        assert_eq!(uncompressed.len(), 67);
        assert_eq!(uncompressed.as_bytes()[1], 0x04);
        let raw = read_script(&mut &[6u8 + 2, 0x51, 0x52][..]).unwrap();
        assert_eq!(raw.as_bytes(), &[0x51, 0x52]);
        assert!(read_script(&mut &[6u8 + 3, 0x51][..]).is_err(), "truncated");
        assert!(
            read_script(&mut &[0xff, 0xff, 0x7f][..]).is_err(),
            "too long"
        );
        assert!(
            read_script(&mut &[[4u8].as_slice(), &[0xff; 32]].concat()[..]).is_err(),
            "not a point"
        );
    }
}
