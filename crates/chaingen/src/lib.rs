//! Seeded synthetic regtest chains shaped like mainnet, and the manifest of
//! the answers an exact server must give about them.
//!
//! - [`generate`] makes the blocks (valid for btcd 0.24.2 and Bitcoin Core
//!   regtest) and the [`manifest::Manifest`] oracle;
//! - [`blkfile`] writes and reads Bitcoin Core `blk*.dat` files;
//! - [`sign`] holds the keys and signing code, shared with `osprey-testenv`;
//! - [`submit`] feeds a generated chain to a running node;
//! - [`cli`] is the `osprey chaingen` command.

pub mod blkfile;
pub mod cli;
pub mod generate;
pub mod manifest;
pub mod params;
pub mod shape;
pub mod sign;
pub mod submit;
pub mod wallet;

pub use blkfile::{read_blocks, read_raw_blocks, BlkError, RawBlock};
pub use cli::{run, ChaingenArgs};
pub use generate::{generate, Config, GenError, Generator, Progress};
pub use manifest::Manifest;
pub use shape::{Preset, Shape};
