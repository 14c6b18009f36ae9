//! Bitcoin Core's `blocks/blk?????.dat` format: writing the generated chain,
//! and reading any blocks directory back in file order. Each record is the
//! 4-byte network magic, the block size (u32 little-endian) and the block.
//! The writer never obfuscates (and removes a stale `xor.dat`). Reading is
//! `osprey_chain::BlocksDir`'s, the one reader of the format (Core's zero
//! preallocation, its XOR obfuscation, bounded lengths); the functions here
//! only turn its records into blocks.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use bitcoin::consensus::Decodable;
use bitcoin::Block;
use osprey_chain::{BlocksDir, FileKind};

/// Bitcoin Core starts a new blk file before one would pass 128 MiB.
pub const MAX_BLK_FILE_SIZE: u64 = 128 * 1024 * 1024;

/// Name of Core's obfuscation key file inside the blocks directory.
const XOR_FILE: &str = "xor.dat";

/// File name of blk file number `n`, as Core names them.
pub fn blk_file_name(n: u32) -> String {
    format!("blk{n:05}.dat")
}

/// Why a blocks directory could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum BlkError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// Reading the directory: the message names the file and offset.
    #[error(transparent)]
    Read(#[from] osprey_chain::Error),
    #[error("{path} at offset {offset}: block does not decode: {source}")]
    Decode {
        path: PathBuf,
        offset: u64,
        source: bitcoin::consensus::encode::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BlkError + '_ {
    move |source| BlkError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Appends blocks to `blk?????.dat` files, rolling to a new file like Core.
pub struct BlkWriter {
    dir: PathBuf,
    magic: [u8; 4],
    current: Option<(BufWriter<File>, PathBuf)>,
    current_size: u64,
    files: Vec<String>,
    bytes_written: u64,
}

impl BlkWriter {
    /// Creates `dir` if needed and removes any `blk*.dat` already there, so a
    /// rerun never leaves stale blocks behind, and any `xor.dat`, which
    /// would make readers garble the plain files written here.
    ///
    /// # Errors
    /// When the directory cannot be created or cleaned.
    pub fn create(dir: &Path, magic: [u8; 4]) -> Result<BlkWriter, BlkError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let xor = dir.join(XOR_FILE);
        match std::fs::remove_file(&xor) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&xor)(e)),
            _ => {}
        }
        let existing = BlocksDir::open(dir, Some(magic))?;
        for n in existing.blk_files()? {
            let path = existing.path(FileKind::Blk, n);
            std::fs::remove_file(&path).map_err(io_err(&path))?;
        }
        Ok(BlkWriter {
            dir: dir.to_path_buf(),
            magic,
            current: None,
            current_size: 0,
            files: Vec::new(),
            bytes_written: 0,
        })
    }

    /// Appends one serialized block.
    ///
    /// # Errors
    /// On any write error.
    pub fn write_block(&mut self, block: &[u8]) -> Result<(), BlkError> {
        let record = 8 + block.len() as u64;
        let full = self.current_size + record > MAX_BLK_FILE_SIZE;
        if self.current.is_none() || (full && self.current_size > 0) {
            self.roll()?;
        }
        let (file, path) = self.current.as_mut().expect("roll opened a file");
        let size = u32::try_from(block.len()).expect("generated blocks are below 4 MB");
        file.write_all(&self.magic)
            .and_then(|()| file.write_all(&size.to_le_bytes()))
            .and_then(|()| file.write_all(block))
            .map_err(io_err(path))?;
        self.current_size += record;
        self.bytes_written += record;
        Ok(())
    }

    fn roll(&mut self) -> Result<(), BlkError> {
        self.flush_current()?;
        let name = blk_file_name(self.files.len() as u32);
        let path = self.dir.join(&name);
        let file = File::create(&path).map_err(io_err(&path))?;
        self.current = Some((BufWriter::with_capacity(1 << 20, file), path));
        self.current_size = 0;
        self.files.push(name);
        Ok(())
    }

    fn flush_current(&mut self) -> Result<(), BlkError> {
        if let Some((mut file, path)) = self.current.take() {
            file.flush().map_err(io_err(&path))?;
            file.get_ref().sync_all().map_err(io_err(&path))?;
        }
        Ok(())
    }

    /// Total bytes written so far, record headers included.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Flushes and syncs the last file and returns the file names in order.
    ///
    /// # Errors
    /// On any write error.
    pub fn finish(mut self) -> Result<Vec<String>, BlkError> {
        self.flush_current()?;
        Ok(std::mem::take(&mut self.files))
    }
}

/// One block record as stored: where it was found and its raw bytes.
#[derive(Clone, Debug)]
pub struct RawBlock {
    pub path: PathBuf,
    /// Offset of the block bytes (after magic and size) in the file.
    pub offset: u64,
    pub bytes: Vec<u8>,
}

impl RawBlock {
    /// Decodes the block.
    ///
    /// # Errors
    /// When the bytes are not exactly one consensus-encoded block.
    pub fn decode(&self) -> Result<Block, BlkError> {
        let decode_err = |source| BlkError::Decode {
            path: self.path.clone(),
            offset: self.offset,
            source,
        };
        let mut slice = self.bytes.as_slice();
        let block = Block::consensus_decode(&mut slice).map_err(decode_err)?;
        if !slice.is_empty() {
            return Err(decode_err(bitcoin::consensus::encode::Error::ParseFailed(
                "data left after the block",
            )));
        }
        Ok(block)
    }
}

/// Opens a blocks directory (chaingen's `DIR/blocks` or Core's
/// `<datadir>/blocks`) and iterates over its raw block records in file
/// order. The magic of the first record fixes the network; later records
/// must match it. After an error the iteration ends.
///
/// # Errors
/// When the directory cannot be listed, holds no blk files, or has an
/// unreadable or malformed `xor.dat`.
pub fn read_raw_blocks(
    dir: &Path,
) -> Result<impl Iterator<Item = Result<RawBlock, BlkError>>, BlkError> {
    let mut records = BlocksDir::open(dir, None)?.into_blocks()?;
    let mut failed = false;
    Ok(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let raw = records.next()?.and_then(|pos| {
            Ok(RawBlock {
                path: records.dir().path(FileKind::Blk, pos.file),
                offset: pos.offset,
                bytes: records.dir().read_block(pos)?,
            })
        });
        failed = raw.is_err();
        Some(raw.map_err(BlkError::from))
    }))
}

/// Like [`read_raw_blocks`], decoding each block.
///
/// # Errors
/// As [`read_raw_blocks`]; each item fails when its record is malformed.
pub fn read_blocks(dir: &Path) -> Result<impl Iterator<Item = Result<Block, BlkError>>, BlkError> {
    Ok(read_raw_blocks(dir)?.map(|raw| raw.and_then(|raw| raw.decode())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::consensus::serialize;

    fn genesis_bytes() -> Vec<u8> {
        serialize(&bitcoin::blockdata::constants::genesis_block(
            bitcoin::Network::Regtest,
        ))
    }

    #[test]
    fn writes_and_reads_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        // A stale key would garble the plain files written now.
        std::fs::write(dir.path().join("xor.dat"), [1u8; 8]).unwrap();
        std::fs::write(dir.path().join("blk00007.dat"), b"stale").unwrap();
        let mut writer = BlkWriter::create(dir.path(), crate::params::REGTEST_MAGIC).unwrap();
        let block = genesis_bytes();
        for _ in 0..3 {
            writer.write_block(&block).unwrap();
        }
        assert_eq!(writer.finish().unwrap(), vec!["blk00000.dat".to_string()]);
        let blocks: Vec<Block> = read_blocks(dir.path())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(blocks.len(), 3);
        assert_eq!(
            blocks[0].block_hash(),
            bitcoin::blockdata::constants::genesis_block(bitcoin::Network::Regtest).block_hash()
        );
    }

    #[test]
    fn reports_truncation_once() {
        let dir = tempfile::tempdir().unwrap();
        let block = genesis_bytes();
        let mut data = crate::params::REGTEST_MAGIC.to_vec();
        data.extend_from_slice(&(block.len() as u32).to_le_bytes());
        data.extend_from_slice(&block);
        data.extend_from_slice(&data.clone()[..block.len()]);
        std::fs::write(dir.path().join("blk00000.dat"), &data).unwrap();
        let mut blocks = read_blocks(dir.path()).unwrap();
        assert!(blocks.next().unwrap().is_ok());
        let err = blocks.next().unwrap().unwrap_err();
        assert!(matches!(err, BlkError::Read(_)), "{err}");
        assert!(
            err.to_string().contains(&format!(
                "blk00000.dat at offset {}: file ends inside",
                block.len() + 8
            )),
            "{err}"
        );
        assert!(blocks.next().is_none());
        assert!(matches!(
            read_raw_blocks(tempfile::tempdir().unwrap().path()),
            Err(BlkError::Read(_))
        ));
    }
}
