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
//! Every length read from a file is bounded, so a damaged file is an error,
//! never a panic or a huge allocation.

use crate::Error;
use bitcoin::block::Header;
use bitcoin::consensus::{deserialize, Decodable};
use bitcoin::hashes::{sha256d, Hash, HashEngine};
use bitcoin::{Amount, Block, BlockHash, ScriptBuf, TxOut};
use osprey_core::Network;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where a block's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPosition {
    pub file: u32,
    /// Offset of the block's first byte (after the record head).
    pub offset: u64,
    pub len: u32,
}

/// Largest block record accepted (Core's limit is 4 MB of weight).
const BLOCK_BYTES_MAX: u32 = 8 << 20;
/// Open files kept for reuse (Core has thousands on mainnet).
const OPEN_FILES_MAX: usize = 64;
/// Largest script in undo data (consensus: 10,000 bytes).
const SCRIPT_BYTES_MAX: u64 = 10_000;

#[derive(Default)]
struct BlockIndex {
    /// First 8 bytes of a block hash -> where it is (confirmed on read).
    by_hash: HashMap<u64, BlockPosition>,
    /// First 8 bytes of every parent hash in the files, and of those with
    /// two children or more: the undo checksum cannot tell siblings apart.
    parents: HashSet<u64>,
    forks: HashSet<u64>,
    /// Per blk file, how far it has been scanned.
    scanned: Vec<u64>,
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
}

pub struct CoreBlockFiles {
    dir: PathBuf,
    magic: [u8; 4],
    xor: [u8; 8],
    index: Mutex<BlockIndex>,
    revs: Mutex<HashMap<u32, RevFile>>,
    open: Mutex<HashMap<(bool, u32), Arc<File>>>,
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
        let xor = match std::fs::read(blocks_dir.join("xor.dat")) {
            Ok(key) => key.try_into().map_err(|_| {
                Error::persistent(format!("{}: xor.dat is not 8 bytes", blocks_dir.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => [0; 8],
            Err(e) => {
                return Err(Error::persistent(format!(
                    "{}: {e}",
                    blocks_dir.join("xor.dat").display()
                )))
            }
        };
        let files = CoreBlockFiles {
            dir: blocks_dir.to_path_buf(),
            magic: network.bitcoin().magic().to_bytes(),
            xor,
            index: Mutex::new(BlockIndex::default()),
            revs: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
        };
        // The first record of blk00000.dat must be this network's genesis.
        let mut head = [0u8; 88];
        files.read_exact(false, 0, 0, &mut head)?;
        let genesis: Header = deserialize(&head[8..]).map_err(|e| {
            Error::persistent(format!("{}: bad first header: {e}", blocks_dir.display()))
        })?;
        if head[..4] != files.magic || genesis.block_hash() != network.genesis_hash() {
            return Err(Error::persistent(format!(
                "{} does not hold {network}'s blocks",
                blocks_dir.display()
            )));
        }
        files.rescan()?;
        Ok(files)
    }

    fn path(&self, rev: bool, file: u32) -> PathBuf {
        let name = if rev { "rev" } else { "blk" };
        self.dir.join(format!("{name}{file:05}.dat"))
    }

    fn file(&self, rev: bool, file: u32) -> Result<Option<Arc<File>>, Error> {
        let mut open = self.open.lock().expect("open files lock");
        if let Some(f) = open.get(&(rev, file)) {
            return Ok(Some(Arc::clone(f)));
        }
        let path = self.path(rev, file);
        let f = match File::open(&path) {
            Ok(f) => Arc::new(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::persistent(format!("{}: {e}", path.display()))),
        };
        if open.len() >= OPEN_FILES_MAX {
            open.clear();
        }
        open.insert((rev, file), Arc::clone(&f));
        Ok(Some(f))
    }

    /// Reads `buf.len()` bytes at `offset` of a blk (or rev) file, undoing
    /// the XOR obfuscation. Fails when the file is shorter.
    fn read_exact(&self, rev: bool, file: u32, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.read_stored(rev, file, offset, buf)?;
        self.unobfuscate(offset, buf);
        Ok(())
    }

    /// Undoes the XOR obfuscation of `buf`, read at `offset` of a file.
    fn unobfuscate(&self, offset: u64, buf: &mut [u8]) {
        if self.xor != [0; 8] {
            for (i, byte) in buf.iter_mut().enumerate() {
                *byte ^= self.xor[((offset + i as u64) % 8) as usize];
            }
        }
    }

    /// Reads bytes as stored: the space Core preallocated but has not
    /// written yet is zeros there, not obfuscated zeros.
    fn read_stored(&self, rev: bool, file: u32, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let f = self.file(rev, file)?.ok_or_else(|| {
            Error::persistent(format!("{} is missing", self.path(rev, file).display()))
        })?;
        f.read_exact_at(buf, offset).map_err(|e| {
            Error::persistent(format!(
                "{} at offset {offset}: {e}",
                self.path(rev, file).display()
            ))
        })
    }

    fn file_len(&self, rev: bool, file: u32) -> Result<Option<u64>, Error> {
        Ok(match self.file(rev, file)? {
            Some(f) => Some(
                f.metadata()
                    .map_err(|e| {
                        Error::persistent(format!("{}: {e}", self.path(rev, file).display()))
                    })?
                    .len(),
            ),
            None => None,
        })
    }

    /// Walks records of a blk or rev file from `from`, calling `found` with
    /// each complete record's (offset of its data, length); returns where
    /// the walk stopped (a zero magic or a record not fully written yet).
    fn walk(
        &self,
        rev: bool,
        file: u32,
        from: u64,
        mut found: impl FnMut(u64, u32) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        let Some(len) = self.file_len(rev, file)? else {
            return Ok(from);
        };
        let trailer = if rev { 32 } else { 0 };
        let mut pos = from;
        while pos + 8 <= len {
            let mut head = [0u8; 8];
            self.read_stored(rev, file, pos, &mut head)?;
            if head[..4] == [0; 4] {
                break; // Core preallocates files with (plain) zeros.
            }
            self.unobfuscate(pos, &mut head);
            if head[..4] != self.magic {
                return Err(Error::persistent(format!(
                    "{} at offset {pos}: bad magic",
                    self.path(rev, file).display()
                )));
            }
            let size = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
            if size > BLOCK_BYTES_MAX {
                return Err(Error::persistent(format!(
                    "{} at offset {pos}: record of {size} bytes",
                    self.path(rev, file).display()
                )));
            }
            let end = pos + 8 + u64::from(size) + trailer;
            if end > len {
                break; // Still being written.
            }
            found(pos + 8, size)?;
            pos = end;
        }
        Ok(pos)
    }

    /// Indexes what was appended to the blk files since the last scan.
    fn rescan(&self) -> Result<(), Error> {
        let mut index = self.index.lock().expect("block index lock");
        let mut file = index.scanned.len().saturating_sub(1) as u32;
        loop {
            if self.file_len(false, file)?.is_none() {
                return Ok(());
            }
            let from = index.scanned.get(file as usize).copied().unwrap_or(0);
            let mut found = Vec::new();
            let mut unwritten = None;
            let end = self.walk(false, file, from, |offset, len| {
                let mut header = [0u8; 80];
                if unwritten.is_none() && len >= 80 {
                    self.read_stored(false, file, offset, &mut header)?;
                    if header == [0; 80] {
                        // Core wrote the record's head but its header is not
                        // on disk yet: scan it again next time.
                        unwritten = Some(offset - 8);
                        return Ok(());
                    }
                    self.unobfuscate(offset, &mut header);
                    let header: Header = deserialize(&header)
                        .map_err(|e| Error::persistent(format!("block header at {offset}: {e}")))?;
                    found.push((
                        hash_key(&header.block_hash()),
                        hash_key(&header.prev_blockhash),
                        offset,
                        len,
                    ));
                }
                Ok(())
            })?;
            let end = unwritten.unwrap_or(end);
            for (key, parent, offset, len) in found {
                index
                    .by_hash
                    .insert(key, BlockPosition { file, offset, len });
                if !index.parents.insert(parent) {
                    index.forks.insert(parent);
                }
            }
            match index.scanned.get_mut(file as usize) {
                Some(scanned) => *scanned = end,
                None => index.scanned.push(end),
            }
            file += 1;
        }
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
        let mut bytes = vec![0u8; pos.len as usize];
        if self.file(false, pos.file)?.is_none() {
            return Ok(None); // Pruned since it was scanned.
        }
        self.read_exact(false, pos.file, pos.offset, &mut bytes)?;
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
        self.read_exact(false, pos.file, pos.offset + u64::from(offset), &mut bytes)?;
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
        let mut revs = self.revs.lock().expect("rev files lock");
        let rev = revs.entry(pos.file).or_default();
        let matches = |offset: u64, len: u32| -> Result<Option<Vec<u8>>, Error> {
            let mut bytes = vec![0u8; len as usize + 32];
            self.read_exact(true, pos.file, offset, &mut bytes)?;
            let (undo, checksum) = bytes.split_at(len as usize);
            let mut engine = sha256d::Hash::engine();
            engine.input(prev.as_byte_array());
            engine.input(undo);
            let ok = sha256d::Hash::from_engine(engine).as_byte_array()[..] == *checksum;
            bytes.truncate(len as usize);
            Ok(ok.then_some(bytes))
        };
        // Most likely the record after the last match; then the rest.
        for pass in 0..2 {
            if pass == 1 {
                let from = rev.scanned;
                let mut found = Vec::new();
                rev.scanned = self.walk(true, pos.file, from, |offset, len| {
                    found.push((offset, len));
                    Ok(())
                })?;
                rev.records.extend(found);
            }
            let n = rev.records.len();
            let start = rev
                .after
                .get(&hash_key(&prev))
                .copied()
                .unwrap_or(rev.cursor);
            for i in 0..n {
                let at = (start + i) % n;
                let (offset, len) = rev.records[at];
                if let Some(undo) = matches(offset, len)? {
                    rev.cursor = at + 1;
                    if rev.after.len() >= RECENT_MATCHES_MAX {
                        rev.after.clear();
                    }
                    rev.after.insert(hash_key(&block.block_hash()), at + 1);
                    return decode_block_undo(&undo, block).map(Some).map_err(|what| {
                        Error::persistent(format!(
                            "{} at offset {offset}: {what}",
                            self.path(true, pos.file).display()
                        ))
                    });
                }
            }
        }
        Ok(None)
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
fn decode_block_undo(mut bytes: &[u8], block: &Block) -> Result<Vec<TxOut>, String> {
    let txs = read_count(&mut bytes)?;
    if txs + 1 != block.txdata.len() as u64 {
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

    #[test]
    fn xor_applies_by_file_offset() {
        let dir = tempfile::tempdir().unwrap();
        let key = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let plain: Vec<u8> = (0u8..40).collect();
        let stored: Vec<u8> = plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 8])
            .collect();
        std::fs::write(dir.path().join("blk00000.dat"), &stored).unwrap();
        let files = CoreBlockFiles {
            dir: dir.path().to_path_buf(),
            magic: [0; 4],
            xor: key,
            index: Mutex::new(BlockIndex::default()),
            revs: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
        };
        let mut buf = [0u8; 5];
        files.read_exact(false, 0, 13, &mut buf).unwrap();
        assert_eq!(buf, plain[13..18]);
    }

    #[test]
    fn records_end_where_cores_preallocated_zeros_begin() {
        let dir = tempfile::tempdir().unwrap();
        let key = [0x9d, 0x71, 0x93, 0x32, 0x0c, 0x58, 0xfa, 0x99];
        let magic = [0xfa, 0xbf, 0xb5, 0xda];
        let mut plain = Vec::new();
        for body in [&[7u8; 5][..], &[8u8; 3][..]] {
            plain.extend_from_slice(&magic);
            plain.extend_from_slice(&(body.len() as u32).to_le_bytes());
            plain.extend_from_slice(body);
        }
        let written = plain.len();
        let mut stored: Vec<u8> = plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 8])
            .collect();
        // Preallocated space is plain zeros, which do not decode to zeros.
        stored.resize(written + 64, 0);
        std::fs::write(dir.path().join("blk00000.dat"), &stored).unwrap();
        let files = CoreBlockFiles {
            dir: dir.path().to_path_buf(),
            magic,
            xor: key,
            index: Mutex::new(BlockIndex::default()),
            revs: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
        };
        let mut records = Vec::new();
        let end = files
            .walk(false, 0, 0, |offset, len| {
                records.push((offset, len));
                Ok(())
            })
            .unwrap();
        assert_eq!(records, vec![(8, 5), (21, 3)]);
        assert_eq!(end, written as u64);
    }
}
