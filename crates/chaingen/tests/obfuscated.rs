//! `osprey demo`'s block source (`osprey_chain::BlkFiles`) reads a
//! generated chain from XOR-obfuscated files, as Bitcoin Core 28+ writes
//! them (key in `blocks/xor.dat`, zero preallocation left plain), exactly
//! as it reads the plain files.

use std::path::Path;

use bitcoin::consensus::serialize;
use bitcoin::{BlockHash, VarInt};
use osprey_chain::{BlkFiles, BlockFeed, ChainSource, TxLocation};
use osprey_chaingen::{generate, Config, Preset, Signatures};
use osprey_core::{Height, Network};

/// Copies the blk files of `from` into `to`, obfuscated with `key`, each
/// followed by some of Core's (plain) zero preallocation.
fn obfuscate(from: &Path, to: &Path, key: [u8; 8]) {
    std::fs::create_dir_all(to).unwrap();
    let mut copied = 0;
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let mut bytes = std::fs::read(entry.path()).unwrap();
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte ^= key[i % 8];
        }
        bytes.resize(bytes.len() + 4096 + 3, 0);
        std::fs::write(to.join(entry.file_name()), bytes).unwrap();
        copied += 1;
    }
    assert!(copied > 0);
    std::fs::write(to.join("xor.dat"), key).unwrap();
}

#[test]
fn demo_source_reads_obfuscated_blk_files_like_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        preset: "tiny".into(),
        seed: 7,
        shape: Preset::Tiny.shape(),
        signatures: Signatures::Real,
    };
    generate(config, dir.path(), &mut |_| {}).unwrap();
    let plain_dir = dir.path().join("blocks");
    let obfuscated_dir = dir.path().join("obfuscated");
    obfuscate(
        &plain_dir,
        &obfuscated_dir,
        [0x9d, 0x71, 0x93, 0x32, 0x0c, 0x58, 0xfa, 0x99],
    );

    let plain = BlkFiles::open(&plain_dir, Network::Regtest).unwrap();
    let obfuscated = BlkFiles::open(&obfuscated_dir, Network::Regtest).unwrap();
    let (tip, tip_hash) = plain.best_block().unwrap();
    assert!(tip.0 > 100, "a chain with spends");
    assert_eq!(obfuscated.best_block().unwrap(), (tip, tip_hash));
    let hashes = plain.block_hashes(Height(0), tip.0 + 1).unwrap();
    assert_eq!(
        obfuscated.block_hashes(Height(0), tip.0 + 1).unwrap(),
        hashes
    );

    let wanted: Vec<(Height, BlockHash)> = hashes
        .iter()
        .enumerate()
        .map(|(h, hash)| (Height(h as u32), *hash))
        .collect();
    let expected = plain.blocks(&wanted).unwrap();
    let got = obfuscated.blocks(&wanted).unwrap();
    assert_eq!(got.len(), expected.len());
    let mut spends = 0;
    for (got, expected) in got.iter().zip(&expected) {
        assert_eq!(got.height, expected.height);
        assert_eq!(got.block, expected.block);
        assert_eq!(got.prevouts, expected.prevouts);
        assert_eq!(got.size, expected.size);
        spends += got.prevouts.len();
    }
    assert!(spends > 0, "prevouts were resolved");

    // A transaction read by its place in the block, as the server does.
    let last = &expected.last().unwrap().block;
    let position = last.txdata.len() - 1;
    let offset = 80
        + VarInt(last.txdata.len() as u64).size()
        + last.txdata[..position]
            .iter()
            .map(|tx| serialize(tx).len())
            .sum::<usize>();
    let tx = &last.txdata[position];
    let location = TxLocation {
        block_hash: tip_hash,
        height: tip,
        position: position as u32,
        offset: offset as u32,
        len: serialize(tx).len() as u32,
    };
    let txid = tx.compute_txid();
    assert_eq!(
        obfuscated.transaction(&txid, Some(location)).unwrap(),
        serialize(tx)
    );
    assert_eq!(
        plain.transaction(&txid, Some(location)).unwrap(),
        serialize(tx)
    );
}
