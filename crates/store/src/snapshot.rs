//! Snapshots: the whole index as one tar file, so that it can be built on a
//! big machine and served from a small one.
//!
//! The first entry is a JSON [`Manifest`] (index format, network, tip, and
//! every file with its size and SHA-256); the files follow: the flat files
//! cut to the tip, then a RocksDB checkpoint (`rocksdb/…`). Export and
//! import stream every file through a fixed buffer, so memory stays bounded
//! whatever the index's size. An import checks the format and network
//! before it writes anything, every file's size and hash as it writes, and
//! finally opens the result to confirm the tip the manifest claims.
//!
//! This module knows the tar layout and the store's files; whether the tip
//! is in the node's best chain is for the caller, which knows the node.

use crate::layout::{FLAT_FILES, ROCKSDB_DIR};
use crate::{schema_tag, space, Error, Result, Store, CF_META, META_NETWORK, SCHEMA_VERSION};
use bitcoin::hashes::{sha256, Hash, HashEngine};
use bitcoin::BlockHash;
use osprey_core::Height;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The name of a snapshot's first entry.
pub const MANIFEST_NAME: &str = "osprey-snapshot.json";

/// The largest manifest read: a mainnet index has a few hundred to a few
/// thousand files, ~150 bytes each in the manifest.
const MANIFEST_BYTES_MAX: u64 = 4 << 20;

/// Bytes read and written at a time.
const COPY_BUFFER_BYTES: usize = 1 << 20;

/// What a snapshot holds, written as its first entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The index format (`SCHEMA_VERSION`, what `osprey --version` prints).
    pub index_format: u32,
    /// The full format tag: the version and the key prefix lengths, hex.
    pub format_tag: String,
    /// The network's name (`bitcoin`, `regtest`, …).
    pub network: String,
    pub tip_height: u32,
    pub tip_hash: BlockHash,
    /// Every file of the index, in the order of the archive.
    pub files: Vec<FileEntry>,
}

/// One file of a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// The path inside the index directory: a flat file's name, or
    /// `rocksdb/NAME`.
    pub path: String,
    pub bytes: u64,
    /// SHA-256 of the contents, hex.
    pub sha256: String,
}

fn refused(message: impl Into<String>) -> Error {
    Error::Snapshot(message.into())
}

fn file_err(path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::File { path, source }
}

/// Whether `path` is one a snapshot may hold: a flat file, or a plain name
/// inside `rocksdb/`. Nothing else is ever written on import.
fn is_index_path(path: &str) -> bool {
    if FLAT_FILES.contains(&path) {
        return true;
    }
    path.strip_prefix("rocksdb/").is_some_and(|name| {
        !name.is_empty()
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    })
}

/// Copies exactly `bytes` bytes from `from` to `to` (when given) through a
/// fixed buffer, and returns their SHA-256.
fn copy_hashed(
    from: &mut impl Read,
    mut to: Option<&mut dyn Write>,
    bytes: u64,
) -> io::Result<String> {
    let mut engine = sha256::Hash::engine();
    let mut buffer = vec![0u8; COPY_BUFFER_BYTES];
    let mut left = bytes;
    while left > 0 {
        let want = left.min(COPY_BUFFER_BYTES as u64) as usize;
        let got = from.read(&mut buffer[..want])?;
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("ended {left} bytes short of {bytes}"),
            ));
        }
        engine.input(&buffer[..got]);
        if let Some(to) = to.as_mut() {
            to.write_all(&buffer[..got])?;
        }
        left -= got as u64;
    }
    Ok(sha256::Hash::from_engine(engine).to_string())
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

fn tar_header(bytes: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(bytes);
    header.set_mode(0o640);
    header.set_mtime(0);
    header
}

impl Store {
    /// The network this index was built for, as recorded in it.
    ///
    /// # Errors
    /// On database errors.
    pub fn network(&self) -> Result<String> {
        let db = self.db()?;
        let meta = db.cf_handle(CF_META).expect("meta cf opened in open");
        let found = db.get_cf(meta, META_NETWORK)?.unwrap_or_default();
        Ok(String::from_utf8_lossy(&found).into_owned())
    }

    /// Writes the index as a snapshot to `out`: a RocksDB checkpoint (hard
    /// links to the immutable table files) taken in `scratch`, which must
    /// not exist and must be on the index's file system, plus the flat files
    /// cut to the tip. Files are read twice: once to hash them for the
    /// manifest, which comes first, and once into the archive (hashed
    /// again, so that a file changed in between fails the export).
    ///
    /// The store must not be written meanwhile: the caller holds it, and
    /// RocksDB's lock keeps any other process out.
    ///
    /// # Errors
    /// When the index is empty or in a bulk load, on I/O or database
    /// errors.
    pub fn export_snapshot(&self, scratch: &Path, out: impl Write) -> Result<Manifest> {
        let Some((tip_height, tip_hash)) = self.tip() else {
            return Err(refused("the index is empty: nothing to export"));
        };
        if self.in_bulk_load() {
            return Err(refused(
                "the index is in its first sync's bulk load (its rows are in sorted runs, \
                 not yet in the database): export it once the sync has reached the node's tip",
            ));
        }
        self.flush()?;
        let checkpoint = scratch.join(ROCKSDB_DIR);
        std::fs::create_dir_all(scratch).map_err(file_err(scratch))?;
        rocksdb::checkpoint::Checkpoint::new(&*self.db()?)?.create_checkpoint(&checkpoint)?;

        // The flat files are cut to the tip whenever no commit runs.
        let mut sources: Vec<(String, PathBuf, u64)> = self
            .files
            .read()
            .expect("files lock poisoned")
            .named()
            .into_iter()
            .map(|(name, file)| (name.to_string(), self.path.join(name), file.bytes()))
            .collect();
        let mut names = Vec::new();
        for item in std::fs::read_dir(&checkpoint).map_err(file_err(&checkpoint))? {
            let item = item.map_err(file_err(&checkpoint))?;
            let meta = item.metadata().map_err(file_err(&item.path()))?;
            let name = item.file_name().to_string_lossy().into_owned();
            if !meta.is_file() || !is_index_path(&format!("rocksdb/{name}")) {
                return Err(refused(format!(
                    "unexpected entry {} in the RocksDB checkpoint",
                    item.path().display()
                )));
            }
            names.push((name, meta.len()));
        }
        names.sort();
        sources.extend(
            names
                .into_iter()
                .map(|(name, bytes)| (format!("rocksdb/{name}"), checkpoint.join(name), bytes)),
        );

        let mut files = Vec::with_capacity(sources.len());
        for (path, source, bytes) in &sources {
            let mut file = File::open(source).map_err(file_err(source))?;
            let sha256 = copy_hashed(&mut file, None, *bytes).map_err(file_err(source))?;
            files.push(FileEntry {
                path: path.clone(),
                bytes: *bytes,
                sha256,
            });
        }
        let manifest = Manifest {
            index_format: SCHEMA_VERSION,
            format_tag: osprey_core::to_hex(&schema_tag(self.config.silent_payments)),
            network: self.network()?,
            tip_height: tip_height.0,
            tip_hash,
            files,
        };

        let out_err = |source| Error::File {
            path: PathBuf::from("(snapshot output)"),
            source,
        };
        let mut archive = tar::Builder::new(out);
        let json = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
        let mut header = tar_header(json.len() as u64);
        archive
            .append_data(&mut header, MANIFEST_NAME, json.as_slice())
            .map_err(out_err)?;
        for ((path, source, bytes), entry) in sources.iter().zip(&manifest.files) {
            let mut header = tar_header(*bytes);
            header.set_path(path).map_err(out_err)?;
            header.set_cksum();
            let mut file = File::open(source).map_err(file_err(source))?;
            let mut hashed = HashedReader::new(&mut file, *bytes);
            archive.append(&header, &mut hashed).map_err(out_err)?;
            if hashed.finish().map_err(file_err(source))? != entry.sha256 {
                return Err(refused(format!(
                    "{} changed during the export",
                    source.display()
                )));
            }
        }
        archive
            .into_inner()
            .and_then(|mut out| out.flush())
            .map_err(out_err)?;
        Ok(manifest)
    }
}

/// Reads exactly `bytes` bytes of a file while hashing them: what the tar
/// builder copies into the archive.
struct HashedReader<'a, R> {
    inner: io::Take<&'a mut R>,
    bytes: u64,
    read: u64,
    engine: sha256::HashEngine,
}

impl<'a, R: Read> HashedReader<'a, R> {
    fn new(inner: &'a mut R, bytes: u64) -> Self {
        HashedReader {
            inner: inner.take(bytes),
            bytes,
            read: 0,
            engine: sha256::Hash::engine(),
        }
    }

    /// The hash of what was read, or an error when the file was shorter
    /// than its header said (the archive is then unusable).
    fn finish(self) -> io::Result<String> {
        if self.read != self.bytes {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} bytes read of {}", self.read, self.bytes),
            ));
        }
        Ok(sha256::Hash::from_engine(self.engine).to_string())
    }
}

impl<R: Read> Read for HashedReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.engine.input(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

/// A snapshot being imported: its manifest read and checked, its files
/// still to come.
pub struct SnapshotReader<R> {
    manifest: Manifest,
    rest: R,
    silent_payments: bool,
}

impl<R: Read> SnapshotReader<R> {
    /// Reads the manifest (the first entry) from `input` and checks that
    /// this build reads its index format, with silent payments as
    /// `silent_payments` says, and that it is for `network`.
    ///
    /// # Errors
    /// When the input is not a snapshot, or one of another format (or
    /// `silent_payments` setting) or network; on read errors.
    pub fn open(mut input: R, network: &str, silent_payments: bool) -> Result<SnapshotReader<R>> {
        let read_err = |source| Error::File {
            path: PathBuf::from("(snapshot input)"),
            source,
        };
        let mut header = tar::Header::new_old();
        input.read_exact(header.as_mut_bytes()).map_err(read_err)?;
        let name = header.path_bytes();
        if name.as_ref() != MANIFEST_NAME.as_bytes() {
            return Err(refused(format!(
                "not an Osprey snapshot: its first entry is {:?}, not {MANIFEST_NAME}",
                String::from_utf8_lossy(&name)
            )));
        }
        let bytes = header
            .entry_size()
            .map_err(|e| refused(format!("manifest header: {e}")))?;
        if bytes > MANIFEST_BYTES_MAX {
            return Err(refused(format!(
                "manifest of {bytes} bytes, more than the {MANIFEST_BYTES_MAX} allowed"
            )));
        }
        let mut json = vec![0u8; bytes as usize];
        input.read_exact(&mut json).map_err(read_err)?;
        // Entries are padded to 512-byte blocks.
        let padding = (512 - bytes % 512) % 512;
        io::copy(&mut (&mut input).take(padding), &mut io::sink()).map_err(read_err)?;
        let manifest: Manifest = serde_json::from_slice(&json)
            .map_err(|e| refused(format!("the manifest is damaged: {e}")))?;

        let tag = osprey_core::to_hex(&schema_tag(silent_payments));
        if manifest.index_format != SCHEMA_VERSION || manifest.format_tag != tag {
            let other_setting = osprey_core::to_hex(&schema_tag(!silent_payments));
            let advice = if manifest.format_tag == other_setting {
                format!(
                    "it was built with silent_payments {}, this configuration has it {}",
                    on_off(!silent_payments),
                    on_off(silent_payments)
                )
            } else {
                "export it again with this release".to_string()
            };
            return Err(refused(format!(
                "the snapshot has index format {} ({}), this build reads format {SCHEMA_VERSION} ({tag}): {advice}",
                manifest.index_format, manifest.format_tag
            )));
        }
        if manifest.network != network {
            return Err(refused(format!(
                "the snapshot is of network {}, not {network}",
                manifest.network
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for file in &manifest.files {
            if !is_index_path(&file.path) || !seen.insert(file.path.as_str()) {
                return Err(refused(format!(
                    "the manifest lists {:?}, which is no index file (or twice)",
                    file.path
                )));
            }
        }
        Ok(SnapshotReader {
            manifest,
            rest: input,
            silent_payments,
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Writes the snapshot's files into `dir`, which must not exist,
    /// checking each one's size and hash, then opens the index there to
    /// confirm its format, network and tip. On any error `dir` is removed.
    ///
    /// # Errors
    /// A file that is missing, extra, of another size or hash, an index
    /// whose tip is not the manifest's; I/O and database errors.
    pub fn unpack(self, dir: &Path) -> Result<Manifest> {
        self.unpack_waiting_for_room(dir, &mut |_| false)
    }

    /// [`SnapshotReader::unpack`], except that a full disk does not end
    /// it: each time a write finds no room, `wait` gets the
    /// [`Error::NoSpace`] (with the bytes left to unpack), and the write is
    /// tried again where it stopped if it returns `true` (after waiting
    /// for room, say), or fails the unpack if it returns `false`.
    ///
    /// # Errors
    /// Those of [`SnapshotReader::unpack`].
    pub fn unpack_waiting_for_room(
        self,
        dir: &Path,
        wait: &mut dyn FnMut(&Error) -> bool,
    ) -> Result<Manifest> {
        std::fs::create_dir(dir).map_err(file_err(dir))?;
        let result = self.unpack_into(dir, wait);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(dir);
        }
        result
    }

    fn unpack_into(self, dir: &Path, wait: &mut dyn FnMut(&Error) -> bool) -> Result<Manifest> {
        let SnapshotReader {
            manifest,
            rest,
            silent_payments,
        } = self;
        let rocksdb_dir = dir.join(ROCKSDB_DIR);
        std::fs::create_dir(&rocksdb_dir).map_err(file_err(&rocksdb_dir))?;
        let mut expected: HashMap<&str, &FileEntry> = manifest
            .files
            .iter()
            .map(|file| (file.path.as_str(), file))
            .collect();
        let archive_err = |e: io::Error| refused(format!("the archive is damaged: {e}"));
        let mut left: u64 = manifest.files.iter().map(|file| file.bytes).sum();
        let mut archive = tar::Archive::new(rest);
        for entry in archive.entries().map_err(archive_err)? {
            let mut entry = entry.map_err(archive_err)?;
            let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let Some(file) = expected.remove(path.as_str()) else {
                return Err(refused(format!(
                    "the archive holds {path:?}, which its manifest does not list (or twice)"
                )));
            };
            if entry.header().entry_type() != tar::EntryType::Regular || entry.size() != file.bytes
            {
                return Err(refused(format!(
                    "{path}: {} bytes in the archive, {} in the manifest",
                    entry.size(),
                    file.bytes
                )));
            }
            let target = dir.join(&path);
            let mut out = UnpackedFile {
                file: File::create_new(&target).map_err(file_err(&target))?,
                path: &target,
                written: 0,
                dir,
                left,
                wait: &mut *wait,
                failed: None,
            };
            let copied = copy_hashed(&mut entry, Some(&mut out as &mut dyn Write), file.bytes);
            if let Some(failed) = out.failed.take() {
                return Err(failed);
            }
            let sha256 = copied.map_err(archive_err)?;
            left -= file.bytes;
            let out = out.file;
            if sha256 != file.sha256 {
                return Err(refused(format!(
                    "{path}: its SHA-256 is {sha256}, the manifest says {}: the snapshot is damaged",
                    file.sha256
                )));
            }
            out.sync_all().map_err(file_err(&target))?;
        }
        if let Some(missing) = expected.keys().next() {
            return Err(refused(format!(
                "the archive ends without {missing} (and {} more files): it is cut short",
                expected.len() - 1
            )));
        }
        for synced in [rocksdb_dir.as_path(), dir] {
            File::open(synced)
                .and_then(|d| d.sync_all())
                .map_err(file_err(synced))?;
        }
        let config = crate::StoreConfig {
            silent_payments,
            ..crate::StoreConfig::default()
        };
        // Opening writes too (a new manifest and log).
        let store = loop {
            match Store::open(dir, &manifest.network, config.clone()) {
                Ok(store) => break store,
                Err(e) => {
                    if !(e.is_no_space() && wait(&e)) {
                        return Err(e);
                    }
                }
            }
        };
        let tip = store.tip();
        if tip != Some((Height(manifest.tip_height), manifest.tip_hash)) {
            return Err(refused(format!(
                "the imported index ends at {tip:?}, its manifest says height {} {}",
                manifest.tip_height, manifest.tip_hash
            )));
        }
        Ok(manifest)
    }
}

/// One file being unpacked: each write goes where the file ends so far,
/// so that a write cut short by a full disk is tried again, once
/// `wait` says so, over the bytes it left.
struct UnpackedFile<'a> {
    file: File,
    path: &'a Path,
    written: u64,
    /// The index being unpacked, whose filesystem is asked for room.
    dir: &'a Path,
    /// Bytes of the whole snapshot still to write when this file began.
    left: u64,
    wait: &'a mut dyn FnMut(&Error) -> bool,
    /// Why a write failed: the archive is then not to blame.
    failed: Option<Error>,
}

impl Write for UnpackedFile<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        loop {
            match self.file.write_at(buf, self.written) {
                Ok(n) => {
                    self.written += n as u64;
                    return Ok(n);
                }
                Err(e) if space::io_is_no_space(&e) => {
                    let full = Error::NoSpace {
                        path: self.dir.to_path_buf(),
                        needed: self.left - self.written,
                        free: space::free_bytes(self.dir).unwrap_or(0),
                    };
                    if !(self.wait)(&full) {
                        self.failed = Some(full);
                        return Err(e);
                    }
                }
                Err(e) => {
                    let returned = io::Error::new(e.kind(), e.to_string());
                    self.failed = Some(Error::File {
                        path: self.path.to_path_buf(),
                        source: e,
                    });
                    return Err(returned);
                }
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
