//! Bitcoin Core's `blocks/blk?????.dat` format: writing the generated chain
//! and reading any blocks directory back in file order. Each record is the
//! 4-byte network magic, the block size (u32 little-endian) and the block.
//! Core pre-allocates files with zeros (a zero magic ends a file's data) and,
//! since 28.0, may XOR every byte with the 8-byte key in `blocks/xor.dat`;
//! the reader handles both. The writer never obfuscates.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use bitcoin::consensus::Decodable;
use bitcoin::Block;

/// Bitcoin Core starts a new blk file before one would pass 128 MiB.
pub const MAX_BLK_FILE_SIZE: u64 = 128 * 1024 * 1024;

/// Largest block a record may announce (the consensus serialized-size
/// limit); bigger sizes mean a corrupt file, not a big block.
const MAX_BLOCK_SIZE: u32 = 4_000_000;

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
    #[error("{path} at offset {offset}: unexpected magic {magic}, expected {expected}")]
    Magic {
        path: PathBuf,
        offset: u64,
        magic: String,
        expected: String,
    },
    #[error("{path} at offset {offset}: record announces {size} bytes, more than any block")]
    Size {
        path: PathBuf,
        offset: u64,
        size: u32,
    },
    #[error("{path} at offset {offset}: file ends inside a block record")]
    Truncated { path: PathBuf, offset: u64 },
    #[error("{path} at offset {offset}: block does not decode: {source}")]
    Decode {
        path: PathBuf,
        offset: u64,
        source: bitcoin::consensus::encode::Error,
    },
    #[error("{path}: xor.dat must hold 8 bytes, found {len}")]
    XorKey { path: PathBuf, len: usize },
    #[error("{path}: no blk?????.dat files")]
    Empty { path: PathBuf },
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
    /// rerun never leaves stale blocks behind.
    ///
    /// # Errors
    /// When the directory cannot be created or cleaned.
    pub fn create(dir: &Path, magic: [u8; 4]) -> Result<BlkWriter, BlkError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        for name in list_blk_files(dir)? {
            let path = dir.join(name);
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

/// `blk?????.dat` names in `dir`, by file number.
fn list_blk_files(dir: &Path) -> Result<Vec<String>, BlkError> {
    let mut numbered = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let number = name
            .strip_prefix("blk")
            .and_then(|rest| rest.strip_suffix(".dat"))
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u32>().ok());
        if let Some(number) = number {
            numbered.push((number, name));
        }
    }
    numbered.sort();
    Ok(numbered.into_iter().map(|(_, name)| name).collect())
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

/// Iterator over the block records of a blocks directory, in file order
/// (which is height order for chaingen output, not necessarily for Core).
pub struct BlkReader {
    dir: PathBuf,
    files: std::vec::IntoIter<String>,
    xor_key: Option<[u8; 8]>,
    magic: Option<[u8; 4]>,
    current: Option<(XorReader<BufReader<File>>, PathBuf)>,
    failed: bool,
}

impl BlkReader {
    fn open_next(&mut self) -> Result<bool, BlkError> {
        let Some(name) = self.files.next() else {
            return Ok(false);
        };
        let path = self.dir.join(name);
        let file = File::open(&path).map_err(io_err(&path))?;
        let reader = XorReader {
            inner: BufReader::with_capacity(1 << 20, file),
            key: self.xor_key,
            offset: 0,
        };
        self.current = Some((reader, path));
        Ok(true)
    }

    fn next_record(&mut self) -> Result<Option<RawBlock>, BlkError> {
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let (reader, path) = self.current.as_mut().expect("a file is open");
            let start = reader.offset;
            let mut header = [0u8; 8];
            match read_full(reader, &mut header).map_err(io_err(path))? {
                0 => {
                    self.current = None;
                    continue;
                }
                8 => {}
                _ => {
                    return Err(BlkError::Truncated {
                        path: path.clone(),
                        offset: start,
                    })
                }
            }
            let magic: [u8; 4] = header[..4].try_into().expect("4 bytes");
            if magic == [0; 4] {
                // Core's zero-filled pre-allocation: no more data here.
                self.current = None;
                continue;
            }
            let expected = *self.magic.get_or_insert(magic);
            if magic != expected {
                return Err(BlkError::Magic {
                    path: path.clone(),
                    offset: start,
                    magic: hex::encode(magic),
                    expected: hex::encode(expected),
                });
            }
            let size = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
            if !(80..=MAX_BLOCK_SIZE).contains(&size) {
                return Err(BlkError::Size {
                    path: path.clone(),
                    offset: start,
                    size,
                });
            }
            let mut bytes = vec![0u8; size as usize];
            let offset = reader.offset;
            if read_full(reader, &mut bytes).map_err(io_err(path))? != bytes.len() {
                return Err(BlkError::Truncated {
                    path: path.clone(),
                    offset: start,
                });
            }
            return Ok(Some(RawBlock {
                path: path.clone(),
                offset,
                bytes,
            }));
        }
    }
}

impl Iterator for BlkReader {
    type Item = Result<RawBlock, BlkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_record().transpose();
        if matches!(item, Some(Err(_))) {
            // A broken file leaves the reader at an unknown position:
            // report once, then stop.
            self.failed = true;
        }
        item
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Undoes Core's blk file obfuscation: byte `i` of a file is XORed with
/// `key[i % 8]`.
struct XorReader<R> {
    inner: R,
    key: Option<[u8; 8]>,
    offset: u64,
}

impl<R: Read> Read for XorReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(key) = self.key {
            for (i, byte) in buf[..n].iter_mut().enumerate() {
                *byte ^= key[((self.offset + i as u64) % 8) as usize];
            }
        }
        self.offset += n as u64;
        Ok(n)
    }
}

/// Opens a blocks directory (chaingen's `DIR/blocks` or Core's
/// `<datadir>/blocks`) and iterates over its raw block records in file
/// order. The magic of the first record fixes the network; later records
/// must match it.
///
/// # Errors
/// When the directory cannot be listed, holds no blk files, or has an
/// unreadable or malformed `xor.dat`.
pub fn read_raw_blocks(dir: &Path) -> Result<BlkReader, BlkError> {
    let files = list_blk_files(dir)?;
    if files.is_empty() {
        return Err(BlkError::Empty {
            path: dir.to_path_buf(),
        });
    }
    let xor_path = dir.join(XOR_FILE);
    let xor_key = match std::fs::read(&xor_path) {
        Ok(bytes) => {
            let key: [u8; 8] = bytes.as_slice().try_into().map_err(|_| BlkError::XorKey {
                path: xor_path.clone(),
                len: bytes.len(),
            })?;
            (key != [0; 8]).then_some(key)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(BlkError::Io {
                path: xor_path,
                source,
            })
        }
    };
    Ok(BlkReader {
        dir: dir.to_path_buf(),
        files: files.into_iter(),
        xor_key,
        magic: None,
        current: None,
        failed: false,
    })
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
    fn reads_obfuscated_and_zero_padded_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut plain = Vec::new();
        plain.extend_from_slice(&crate::params::REGTEST_MAGIC);
        let block = genesis_bytes();
        plain.extend_from_slice(&(block.len() as u32).to_le_bytes());
        plain.extend_from_slice(&block);
        plain.extend_from_slice(&[0u8; 64]);
        let obfuscated: Vec<u8> = plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 8])
            .collect();
        std::fs::write(dir.path().join("blk00000.dat"), obfuscated).unwrap();
        std::fs::write(dir.path().join("xor.dat"), key).unwrap();
        let blocks: Vec<RawBlock> = read_raw_blocks(dir.path())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].bytes, block);
        assert_eq!(blocks[0].offset, 8);
    }

    #[test]
    fn reports_truncation_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let block = genesis_bytes();
        let mut data = crate::params::REGTEST_MAGIC.to_vec();
        data.extend_from_slice(&(block.len() as u32).to_le_bytes());
        data.extend_from_slice(&block[..block.len() - 1]);
        std::fs::write(dir.path().join("blk00000.dat"), &data).unwrap();
        let mut reader = read_raw_blocks(dir.path()).unwrap();
        assert!(matches!(
            reader.next(),
            Some(Err(BlkError::Truncated { .. }))
        ));
        assert!(reader.next().is_none());

        let mut data = crate::params::REGTEST_MAGIC.to_vec();
        data.extend_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(dir.path().join("blk00000.dat"), &data).unwrap();
        assert!(matches!(
            read_raw_blocks(dir.path()).unwrap().next(),
            Some(Err(BlkError::Size { .. }))
        ));

        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_raw_blocks(empty.path()),
            Err(BlkError::Empty { .. })
        ));
    }
}
