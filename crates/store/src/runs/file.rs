//! A run file: its header, and its history and txid sections as blocks
//! of records ([`RunWriter`], [`RunReader`]). The layout is described in
//! `runs`' module doc; what is in a run, and how runs are merged, is
//! `runs`' job.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use osprey_core::{read_varint, write_varint, TxNum};

use super::SLICE_BITS;
use crate::codec;
use crate::codec::bits::{BitReader, BitWriter};
use crate::open::file_err;
use crate::{Error, Family, Result};

/// Raw bytes of a run file's block before it is compressed. A merge holds
/// one block, raw and compressed, for each run, in each of the two halves
/// of a partition it merges at once: mainnet's ~650 runs take ~85 MB.
const BLOCK_BYTES: usize = 32 << 10;

/// The flag, in a block's compressed length, of a zstd block (the only
/// kind: an LZ4 block of the layout before `RUN_MAGIC` has it clear).
pub(super) const ZSTD_BLOCK: u32 = 1 << 31;

/// What a run file of this layout starts with. A bulk load under way
/// whose runs lack it (an earlier build's: its files a partition each
/// before `osprun3`, its rows with every amount and prefix before
/// `osprun4`, its keys 12-byte script ids before `osprun5`, its txid rows
/// in varints before `osprun6`) is not carried on: the index is of another format
/// ([`super::refuse_earlier_runs`]).
pub(super) const RUN_MAGIC: [u8; 8] = *b"osprun6\0";

/// The header's bytes: the magic, the run's first tx_num, and where the
/// txid section starts.
pub(super) const HEADER_BYTES: u64 = 24;

/// zstd's level for run blocks: written once and read once, they want
/// the fastest level that still finds a block's repeats.
const RUN_ZSTD_LEVEL: i32 = 1;

/// Writes one run file.
pub(super) struct RunWriter {
    out: BufWriter<File>,
    /// The run's first tx_num.
    base: u64,
    block: Vec<u8>,
    compressed: Vec<u8>,
    zstd: zstd_safe::CCtx<'static>,
    previous: Vec<u8>,
    bytes: u64,
    /// Where the txid section starts, once it has.
    txid_at: Option<u64>,
    /// The txid section's block being written, once it has started.
    txids: Option<TxidBits>,
}

/// A block of a run's txid section being written: the Rice parameter of
/// its prefixes' steps and the bits of its rows' tx_nums (the section's),
/// its rows' bits, how many, and the last one's prefix.
struct TxidBits {
    rice_bits: u32,
    offset_bits: u32,
    bits: BitWriter,
    rows: u32,
    previous: Option<u64>,
}

/// Bits of a txid row's prefix.
const TXID_PREFIX_BITS: u32 = 8 * codec::TXID_PREFIX_LEN as u32;

/// Bytes of a txid block's header: the Rice parameter (u8), the bits of
/// a tx_num (u8), the rows (u32 LE).
const TXID_BLOCK_HEADER: usize = 6;

impl RunWriter {
    pub(super) fn create(path: &Path, base: u64) -> io::Result<RunWriter> {
        let mut out = BufWriter::with_capacity(256 << 10, File::create(path)?);
        out.write_all(&RUN_MAGIC)?;
        out.write_all(&base.to_le_bytes())?;
        // The txid section's offset, written by `finish`.
        out.write_all(&0u64.to_le_bytes())?;
        Ok(RunWriter {
            out,
            base,
            block: Vec::with_capacity(BLOCK_BYTES + 1024),
            compressed: Vec::new(),
            // (It panics only where zstd's malloc fails: Rust's own
            // allocations abort there too.)
            zstd: zstd_safe::CCtx::create(),
            previous: Vec::new(),
            bytes: HEADER_BYTES,
            txid_at: None,
            txids: None,
        })
    }

    /// Ends the history section: the records from here on are the txid
    /// rows `rows` ([`codec::txid_key_bits`], sorted), which set the
    /// section's Rice parameter and tx_num bits.
    pub(super) fn begin_txid_section(&mut self, rows: &[u128]) -> io::Result<()> {
        self.write_block()?;
        self.txid_at = Some(self.bytes);
        // The rows of one slice of one run: their prefixes are spread
        // evenly over the slice's, so their steps average its span over
        // their count, and a Rice code with about its log takes ~1.6
        // bits more.
        let span = 1u64 << (TXID_PREFIX_BITS - SLICE_BITS);
        let mean_step = span / (rows.len() as u64).max(1);
        let last_offset = rows
            .iter()
            .map(|&key| super::txid_key_tx_num(key) - self.base)
            .max()
            .unwrap_or(0);
        self.txids = Some(TxidBits {
            rice_bits: mean_step.max(1).ilog2(),
            offset_bits: (u64::BITS - last_offset.leading_zeros()).max(1),
            bits: BitWriter::default(),
            rows: 0,
            previous: None,
        });
        Ok(())
    }

    /// A script's rows: its id and its run value.
    pub(super) fn push_history(&mut self, id: &[u8], value: &[u8]) -> io::Result<()> {
        debug_assert_eq!(id.len(), codec::SCRIPT_ID_LEN);
        self.push_key(id);
        write_varint(&mut self.block, value.len() as u64);
        self.block.extend_from_slice(value);
        self.end_record()
    }

    /// A txid row: the txid's prefix and the tx_num, after the rows
    /// before it in key order. In a block's bit string, the first row's
    /// prefix whole, each later one's as its step from the one before,
    /// Rice-coded ([`codec::bits`]), then the tx_num less the run's
    /// first, in the section's bits: ~34 bits a row, where the prefix's
    /// bytes not shared with the row before and a varint took ~50.
    pub(super) fn push_txid(&mut self, prefix: &[u8], tx_num: u64) -> io::Result<()> {
        let prefix = codec::txid_prefix_bits(prefix);
        let txids = self
            .txids
            .as_mut()
            .expect("txid rows come after begin_txid_section");
        match txids.previous {
            None => txids.bits.push(prefix, TXID_PREFIX_BITS),
            Some(previous) => txids.bits.push_step(prefix - previous, txids.rice_bits),
        }
        txids.bits.push(tx_num - self.base, txids.offset_bits);
        txids.rows += 1;
        txids.previous = Some(prefix);
        if txids.bits.len() >= BLOCK_BYTES {
            self.write_txid_block()?;
        }
        Ok(())
    }

    /// Writes the txid block being written, if it has rows.
    fn write_txid_block(&mut self) -> io::Result<()> {
        let Some(txids) = self.txids.as_mut().filter(|t| t.rows > 0) else {
            return Ok(());
        };
        self.block.push(txids.rice_bits as u8);
        self.block.push(txids.offset_bits as u8);
        self.block.extend_from_slice(&txids.rows.to_le_bytes());
        self.block.extend_from_slice(&txids.bits.take());
        txids.rows = 0;
        txids.previous = None;
        self.write_block()
    }

    /// The key's bytes not shared with the previous record's.
    fn push_key(&mut self, key: &[u8]) {
        let shared = key
            .iter()
            .zip(&self.previous)
            .take_while(|(a, b)| a == b)
            .count();
        write_varint(&mut self.block, shared as u64);
        self.block.extend_from_slice(&key[shared..]);
        self.previous.clear();
        self.previous.extend_from_slice(key);
    }

    fn end_record(&mut self) -> io::Result<()> {
        if self.block.len() >= BLOCK_BYTES {
            self.write_block()?;
        }
        Ok(())
    }

    fn write_block(&mut self) -> io::Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        self.compressed
            .resize(zstd_safe::compress_bound(self.block.len()), 0);
        let compressed = self
            .zstd
            .compress(&mut self.compressed[..], &self.block, RUN_ZSTD_LEVEL)
            .map_err(|code| {
                io::Error::other(format!("zstd: {}", zstd_safe::get_error_name(code)))
            })?;
        let too_big = |_| io::Error::new(io::ErrorKind::InvalidInput, "run block over 2 GiB");
        let length = |n: usize| {
            u32::try_from(n)
                .ok()
                .filter(|n| n & ZSTD_BLOCK == 0)
                .ok_or(())
        };
        self.out
            .write_all(&length(self.block.len()).map_err(too_big)?.to_le_bytes())?;
        self.out
            .write_all(&(length(compressed).map_err(too_big)? | ZSTD_BLOCK).to_le_bytes())?;
        self.out.write_all(&self.compressed[..compressed])?;
        self.bytes += 8 + compressed as u64;
        self.block.clear();
        self.previous.clear();
        Ok(())
    }

    /// Writes the last block and the txid section's offset, and syncs the
    /// file; returns its bytes.
    pub(super) fn finish(mut self) -> io::Result<u64> {
        self.write_txid_block()?;
        self.write_block()?;
        self.out.flush()?;
        let txid_at = self.txid_at.unwrap_or(self.bytes);
        let file = self.out.get_mut();
        file.seek(SeekFrom::Start(HEADER_BYTES - 8))?;
        file.write_all(&txid_at.to_le_bytes())?;
        file.sync_all()?;
        Ok(self.bytes)
    }
}

/// Reads one run file's records in order. Unbuffered: it reads whole
/// blocks, and a merge holds one reader per run.
pub(super) struct RunReader {
    input: File,
    path: PathBuf,
    family: Family,
    /// The run's first tx_num.
    pub(super) base: u64,
    /// Bytes of the family's section not read yet.
    left: u64,
    block: Vec<u8>,
    compressed: Vec<u8>,
    at: usize,
    /// The record's key: a script id (history), or the txid's prefix and
    /// the tx_num (5 bytes, big-endian: [`codec::txid_key_bits`]'s).
    pub(super) key: Vec<u8>,
    value: std::ops::Range<usize>,
    /// In the txid section, the block being read.
    txids: TxidCursor,
}

/// Where a reader is in a txid block (see [`RunWriter::push_txid`]).
#[derive(Default)]
struct TxidCursor {
    rice_bits: u32,
    offset_bits: u32,
    rows_left: u32,
    /// Bits of the block read.
    at: usize,
    previous: Option<u64>,
}

impl RunReader {
    /// Opens the `family` section of run file `path`;
    /// `Err(Error::Corrupt)` when it is not a run of this layout.
    pub(super) fn open(path: &Path, family: Family) -> Result<RunReader> {
        let mut reader = RunReader {
            input: File::open(path).map_err(file_err(path))?,
            path: path.to_path_buf(),
            family,
            base: 0,
            left: 0,
            block: Vec::new(),
            compressed: Vec::new(),
            at: 0,
            key: Vec::new(),
            value: 0..0,
            txids: TxidCursor::default(),
        };
        let mut header = [0u8; HEADER_BYTES as usize];
        match reader.input.read_exact(&mut header) {
            Ok(()) if header[..RUN_MAGIC.len()] == RUN_MAGIC => {}
            Ok(()) => return Err(reader.corrupt("not a run of this build's layout")),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(reader.corrupt("shorter than its header"))
            }
            Err(e) => return Err(file_err(path)(e)),
        }
        let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
        reader.base = word(RUN_MAGIC.len());
        let txid_at = word(RUN_MAGIC.len() + 8);
        let len = reader.input.metadata().map_err(file_err(path))?.len();
        if !(HEADER_BYTES..=len).contains(&txid_at) {
            return Err(reader.corrupt("bad txid section offset"));
        }
        reader.left = match family {
            Family::History => txid_at - HEADER_BYTES,
            _ => {
                reader
                    .input
                    .seek(SeekFrom::Start(txid_at))
                    .map_err(file_err(path))?;
                len - txid_at
            }
        };
        Ok(reader)
    }

    pub(super) fn corrupt(&self, what: &str) -> Error {
        Error::Corrupt(format!("bulk load run {}: {what}", self.path.display()))
    }

    /// Moves to the next txid row; `false` at the end of the file.
    fn advance_txid(&mut self, decompressor: &mut zstd_safe::DCtx<'_>) -> Result<bool> {
        if self.txids.rows_left == 0 {
            if !self.read_block(decompressor)? {
                return Ok(false);
            }
            let Some(&[rice_bits, offset_bits, ref rows @ ..]) =
                self.block.get(..TXID_BLOCK_HEADER)
            else {
                return Err(self.corrupt("bad txid block"));
            };
            let rows = u32::from_le_bytes(rows.try_into().expect("4 bytes"));
            if u32::from(rice_bits) > TXID_PREFIX_BITS
                || !(1..=40).contains(&offset_bits)
                || rows == 0
            {
                return Err(self.corrupt("bad txid block"));
            }
            self.txids = TxidCursor {
                rice_bits: u32::from(rice_bits),
                offset_bits: u32::from(offset_bits),
                rows_left: rows,
                at: 8 * TXID_BLOCK_HEADER,
                previous: None,
            };
        }
        let cursor = &mut self.txids;
        let mut bits = BitReader::from(&self.block, cursor.at);
        let row = (|| {
            let prefix = match cursor.previous {
                None => bits.bits(TXID_PREFIX_BITS)?,
                Some(previous) => previous
                    .checked_add(bits.step(cursor.rice_bits)?)
                    .filter(|&prefix| prefix >> TXID_PREFIX_BITS == 0)?,
            };
            let tx_num = self
                .base
                .checked_add(bits.bits(cursor.offset_bits)?)
                .filter(|&tx_num| tx_num <= TxNum::MAX)?;
            Some((prefix, tx_num))
        })();
        let Some((prefix, tx_num)) = row else {
            return Err(self.corrupt("bad txid row"));
        };
        cursor.at = bits.position();
        cursor.previous = Some(prefix);
        cursor.rows_left -= 1;
        if cursor.rows_left == 0 && bits.left() >= 8 {
            return Err(self.corrupt("a txid block longer than its rows"));
        }
        self.key.clear();
        self.key
            .extend_from_slice(&prefix.to_be_bytes()[8 - codec::TXID_PREFIX_LEN..]);
        self.key.extend_from_slice(&TxNum(tx_num).to_bytes());
        Ok(true)
    }

    /// Moves to the next record; `false` at the end of the file. A
    /// history record is `varint(bytes of the key shared with the
    /// previous one) · the rest of the key · varint(value length) ·
    /// value`, the first of a block sharing nothing.
    pub(super) fn advance(&mut self, decompressor: &mut zstd_safe::DCtx<'_>) -> Result<bool> {
        if self.family != Family::History {
            return self.advance_txid(decompressor);
        }
        if self.at >= self.block.len() && !self.read_block(decompressor)? {
            return Ok(false);
        }
        let mut rest = &self.block[self.at..];
        let before = rest.len();
        let shared = read_varint(&mut rest).ok_or_else(|| self.corrupt("bad record"))? as usize;
        let key_len = codec::SCRIPT_ID_LEN;
        if shared > key_len || shared > self.key.len() || key_len - shared > rest.len() {
            return Err(self.corrupt("bad key"));
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(&rest[..key_len - shared]);
        rest = &rest[key_len - shared..];
        let len = read_varint(&mut rest).ok_or_else(|| self.corrupt("bad record"))? as usize;
        if len > rest.len() {
            return Err(self.corrupt("bad value"));
        }
        let start = self.at + (before - rest.len());
        self.value = start..start + len;
        self.at = start + len;
        Ok(true)
    }

    /// Reads and decompresses the next block; `false` at the end of the
    /// family's section.
    fn read_block(&mut self, decompressor: &mut zstd_safe::DCtx<'_>) -> Result<bool> {
        if self.left == 0 {
            return Ok(false);
        }
        let mut lengths = [0u8; 8];
        match self.input.read_exact(&mut lengths) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(self.corrupt("shorter than its sections"))
            }
            Err(e) => return Err(file_err(&self.path)(e)),
        }
        let raw = u32::from_le_bytes(lengths[..4].try_into().expect("4 bytes")) as usize;
        let field = u32::from_le_bytes(lengths[4..].try_into().expect("4 bytes"));
        let compressed = (field & !ZSTD_BLOCK) as usize;
        if field & ZSTD_BLOCK == 0
            || raw > 2 * BLOCK_BYTES + (1 << 20)
            || compressed > zstd_safe::compress_bound(raw)
            || 8 + compressed as u64 > self.left
        {
            return Err(self.corrupt("bad block length"));
        }
        self.left -= 8 + compressed as u64;
        self.compressed.resize(compressed, 0);
        self.input
            .read_exact(&mut self.compressed)
            .map_err(file_err(&self.path))?;
        self.block.resize(raw, 0);
        let n = decompressor
            .decompress(&mut self.block[..], &self.compressed)
            .map_err(|code| {
                self.corrupt(&format!("bad block: {}", zstd_safe::get_error_name(code)))
            })?;
        if n != raw {
            return Err(self.corrupt("short block"));
        }
        self.at = 0;
        self.key.clear();
        Ok(true)
    }

    pub(super) fn value(&self) -> &[u8] {
        &self.block[self.value.clone()]
    }
}
