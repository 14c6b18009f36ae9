//! Block files as Bitcoin Core writes them (`blkNNNNN.dat`: records of
//! magic, length and block, XOR-obfuscated since Core 28, preallocated
//! with plain zeros), read by `BlocksDir` and `CoreBlockFiles`.
//!
//! Input: byte 0 holds flags: bit 0, an XOR key follows (8 bytes, written
//! to `xor.dat`); bit 1, the network's magic is given (regtest), else the
//! first record's is taken; bit 2, the file starts with the regtest genesis
//! record and is also opened as a node's files by `CoreBlockFiles`; bits 3
//! to 7, how many times 4 bytes of plain zeros end the file (Core's
//! preallocated space, never obfuscated). The rest is the file's plain
//! content, stored obfuscated.
//! Properties: no panic; `BlocksDir::blocks` yields exactly the records a
//! model of the format written here finds, and stops with an error exactly
//! where the model does; each record reads back as the file's bytes
//! unobfuscated (the plain content, unless the record runs into the
//! preallocated zeros, as one Core is still writing does); every
//! block `CoreBlockFiles` returns has the hash asked for and is one of the
//! file's, and each of the file's blocks is found unless the format lets
//! the scan skip it.
#![no_main]

use bitcoin::consensus::{deserialize, serialize};
use bitcoin::{Block, BlockHash};
use libfuzzer_sys::fuzz_target;
use osprey_chain::{BlockPosition, BlocksDir, CoreBlockFiles};
use osprey_core::Network;
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

const REGTEST_MAGIC: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];
/// The format's bounds (blkfile.rs): the largest record, the smallest block.
const RECORD_BYTES_MAX: usize = 8 << 20;
const BLOCK_BYTES_MIN: usize = 80;

fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        // Memory-backed where there is one: every input is a file write.
        let shm = Path::new("/dev/shm");
        let parent = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        tempfile::tempdir_in(parent).expect("a temporary directory")
    })
    .path()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (key, rest) = match flags & 1 {
        1 if rest.len() >= 8 => {
            let (key, rest) = rest.split_at(8);
            (Some(<[u8; 8]>::try_from(key).expect("8 bytes")), rest)
        }
        _ => (None, rest),
    };
    let magic = (flags & 2 != 0).then_some(REGTEST_MAGIC);
    let core = flags & 4 != 0;
    let mut plain = Vec::new();
    if core {
        let genesis = serialize(&bitcoin::constants::genesis_block(
            bitcoin::Network::Regtest,
        ));
        plain.extend_from_slice(&REGTEST_MAGIC);
        plain.extend_from_slice(&(genesis.len() as u32).to_le_bytes());
        plain.extend_from_slice(&genesis);
    }
    plain.extend_from_slice(rest);
    let key_or_none = key.unwrap_or([0; 8]);
    let mut stored = obfuscate(&plain, key_or_none);
    stored.resize(stored.len() + usize::from(flags >> 3) * 4, 0);
    // What reading any part of the file gives.
    let read = obfuscate(&stored, key_or_none);
    let dir = dir();
    std::fs::write(dir.join("blk00000.dat"), &stored).expect("write blk00000.dat");
    match key {
        Some(key) => std::fs::write(dir.join("xor.dat"), key).expect("write xor.dat"),
        None => {
            let _ = std::fs::remove_file(dir.join("xor.dat"));
        }
    }

    let (records, clean_end) = model(&stored, key_or_none, magic);
    let blocks_dir = BlocksDir::open(dir, magic).expect("xor.dat holds 8 bytes");
    let mut found = Vec::new();
    let mut failed = false;
    for record in blocks_dir.blocks().expect("blk00000.dat is there") {
        match record {
            Ok(pos) => {
                assert_eq!(pos.file, 0);
                let bytes = blocks_dir.read_block(pos).expect("a record found reads");
                let start = pos.offset as usize;
                assert_eq!(bytes, read[start..start + pos.len as usize]);
                found.push((start, pos.len as usize));
            }
            Err(_) => failed = true,
        }
    }
    assert_eq!(found, records);
    assert_eq!(failed, !clean_end);

    if core {
        let walked = core_walk(&stored, key_or_none);
        check_core_files(dir, &read, &stored, &records, &walked);
    }
});

/// XOR with the key by file offset, which Core's obfuscation is, and
/// undoes.
fn obfuscate(bytes: &[u8], key: [u8; 8]) -> Vec<u8> {
    bytes
        .iter()
        .enumerate()
        .map(|(i, &b)| b ^ key[i % 8])
        .collect()
}

/// The block records of a stored file, and whether the file ends cleanly
/// (at its end or at preallocated zeros) rather than at a broken record.
fn model(stored: &[u8], key: [u8; 8], magic: Option<[u8; 4]>) -> (Vec<(usize, usize)>, bool) {
    let plain_at = |i: usize| stored[i] ^ key[i % 8];
    let mut magic = magic;
    let mut records = Vec::new();
    let mut pos = 0;
    loop {
        let left = stored.len() - pos;
        if left == 0 {
            return (records, true);
        }
        if left < 8 {
            return (records, stored[pos..].iter().all(|&b| b == 0));
        }
        if stored[pos..pos + 4] == [0; 4] {
            return (records, true);
        }
        let head: Vec<u8> = (pos..pos + 8).map(plain_at).collect();
        let expected = *magic.get_or_insert([head[0], head[1], head[2], head[3]]);
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if head[..4] != expected
            || len > RECORD_BYTES_MAX
            || len > left - 8
            || len < BLOCK_BYTES_MIN
        {
            return (records, false);
        }
        records.push((pos + 8, len));
        pos += 8 + len;
    }
}

/// The records a node's scan (`CoreBlockFiles`) walks: unlike a static
/// directory's reader, it goes on past a record too short for a block (a
/// file Core is writing is not "broken"), to the end, preallocated zeros or
/// a record not complete yet. A wrong magic or an oversized record stops
/// the node's scan where the static reader stops with an error (bytes Core
/// wrote over after a crash look like that), so every block the static
/// reader finds before it is still to be found.
fn core_walk(stored: &[u8], key: [u8; 8]) -> Vec<(usize, usize)> {
    let plain_at = |i: usize| stored[i] ^ key[i % 8];
    let mut records = Vec::new();
    let mut pos = 0;
    while stored.len() - pos >= 8 && stored[pos..pos + 4] != [0; 4] {
        let head: Vec<u8> = (pos..pos + 8).map(plain_at).collect();
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if len > stored.len() - pos - 8 {
            break;
        }
        records.push((pos + 8, len));
        pos += 8 + len;
    }
    records
}

/// `read`: the file's bytes unobfuscated; `records`, the blocks a static
/// reader finds, each to be found; `walked`, every record the node's scan
/// sees (`core_walk`), a superset that may share their hash keys.
fn check_core_files(
    dir: &Path,
    read: &[u8],
    stored: &[u8],
    records: &[(usize, usize)],
    walked: &[(usize, usize)],
) {
    let Ok(files) = CoreBlockFiles::open(dir, Network::Regtest) else {
        // No regtest genesis first: the directory is refused.
        return;
    };
    let blocks: Vec<(Block, usize, usize)> = records
        .iter()
        .filter_map(|&(offset, len)| {
            let block = deserialize::<Block>(&read[offset..offset + len]).ok()?;
            Some((block, offset, len))
        })
        .collect();
    // Records the scan walks sharing the first 8 bytes of a block hash (the index's key),
    // or whose header is stored as zeros (a record Core has not finished
    // writing: the scan stops there), may be missed, never confused.
    let mut keys: HashMap<[u8; 8], usize> = HashMap::new();
    for &(offset, len) in walked {
        if len >= 80 {
            let hash = bitcoin::block::Header::block_hash(
                &deserialize(&read[offset..offset + 80]).expect("80 bytes are a header"),
            );
            *keys.entry(key_of(&hash)).or_default() += 1;
        }
    }
    let unfinished = walked
        .iter()
        .any(|&(offset, len)| len >= 80 && stored[offset..offset + 80] == [0; 80]);
    for (block, offset, len) in &blocks {
        let hash = block.block_hash();
        match files.block(&hash).expect("the files read") {
            Some((found, pos)) => {
                assert_eq!(found.block_hash(), hash);
                let BlockPosition {
                    offset: o, len: l, ..
                } = pos;
                assert_eq!(read[o as usize..][..l as usize], serialize(&found)[..]);
                let header = files.read_in_block(pos, 0, 80).expect("a header reads");
                assert_eq!(header, serialize(&found.header));
            }
            None => assert!(
                unfinished || keys[&key_of(&hash)] > 1,
                "block at {offset} ({len} bytes) not found"
            ),
        }
    }
}

fn key_of(hash: &BlockHash) -> [u8; 8] {
    use bitcoin::hashes::Hash;
    hash.as_byte_array()[..8].try_into().expect("8 bytes")
}
