//! The networks banned with `osprey admin ban`, kept across restarts in a
//! small text file in the network's index directory, beside the admin
//! socket: `<db_dir>/<network>/banned.txt`, one address or prefix a line.
//!
//! Each ban or unban rewrites the whole file atomically (a temporary file,
//! fsynced, renamed over it, the directory fsynced), so that a crash leaves
//! the old list or the new one, never half of one. `osprey serve` reads it
//! at startup. A read-only replica reads it too, and then follows it
//! (every [`FOLLOW_INTERVAL`]), so that a ban made through the writer's
//! admin interface closes the banned client's sessions on the replicas as
//! well; a replica never writes it. A file that
//! cannot be read is a warning, not a refusal to start: a ban list is not
//! worth an outage. Lines that do not parse are named in the warning and
//! skipped; the next ban or unban rewrites the file without them.

use osprey_server::{Sessions, Subnet, BANNED_MAX};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The file's name in the network's index directory.
pub const FILE_NAME: &str = "banned.txt";
/// The largest file read: [`BANNED_MAX`] IPv6 prefixes of the longest
/// spelling (43 bytes and a newline) fit well within it.
const FILE_BYTES_MAX: u64 = 1 << 20;
/// Skipped lines named in the startup warning; the count says the rest.
const BAD_LINES_SHOWN: usize = 5;
/// How often a replica looks whether its writer's ban file changed: a
/// `stat`, and a read only when it did.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

const HEADER: &str =
    "# Networks banned with `osprey admin ban`, one a line: read when osprey serve starts,\n\
                      # rewritten on each ban and unban.\n";

/// The ban file of one index directory; its writes are serialized.
pub struct BanFile {
    path: PathBuf,
    writing: Mutex<()>,
}

impl BanFile {
    /// The ban file in `dir`, the network's index directory.
    pub fn new(dir: &Path) -> BanFile {
        BanFile {
            path: dir.join(FILE_NAME),
            writing: Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's version now, to tell whether it changed since.
    pub fn stamp(&self) -> Stamp {
        Stamp(
            std::fs::metadata(&self.path)
                .ok()
                .map(|m| (m.ino(), m.mtime(), m.mtime_nsec(), m.len())),
        )
    }

    /// The networks the file lists, in its order. No file is no bans; a
    /// file that cannot be read, or lines that do not parse, are logged as
    /// warnings and skipped.
    pub fn load(&self) -> Vec<Subnet> {
        let path = self.path.display();
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                tracing::warn!(%path, "cannot read the ban list, starting without bans: {e}");
                return Vec::new();
            }
        };
        let mut bytes = Vec::new();
        if let Err(e) = file.take(FILE_BYTES_MAX + 1).read_to_end(&mut bytes) {
            tracing::warn!(%path, "cannot read the ban list, starting without bans: {e}");
            return Vec::new();
        }
        if bytes.len() as u64 > FILE_BYTES_MAX {
            tracing::warn!(
                %path,
                "the ban list is larger than {FILE_BYTES_MAX} bytes, not a file osprey wrote: \
                 starting without bans (the next ban or unban replaces it)"
            );
            return Vec::new();
        }
        let (banned, bad) = parse(&bytes);
        if !bad.is_empty() {
            let shown: Vec<&str> = bad
                .iter()
                .take(BAD_LINES_SHOWN)
                .map(String::as_str)
                .collect();
            tracing::warn!(
                %path,
                skipped = bad.len(),
                "the ban list has lines that are not addresses or prefixes, skipped: {} \
                 (the next ban or unban rewrites the file without them)",
                shown.join("; ")
            );
        }
        banned
    }

    /// Replaces the file with `banned`, atomically.
    ///
    /// # Errors
    /// The directory cannot be written or synced.
    pub fn save(&self, banned: &[Subnet]) -> std::io::Result<()> {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::from(HEADER);
        for subnet in banned {
            text.push_str(&subnet.to_string());
            text.push('\n');
        }
        let temporary = self.path.with_extension("txt.tmp");
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temporary, &self.path)?;
        // The rename is durable once the directory is.
        match self.path.parent() {
            Some(dir) => std::fs::File::open(dir)?.sync_all(),
            None => Ok(()),
        }
    }
}

/// What tells one version of the file from the next: each save renames a
/// new file into place (a new inode), and an edit by hand changes its
/// time or length. `None` while there is no file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp(Option<(u64, i64, i64, u64)>);

/// For a read-only replica: applies `file`, which its writer rewrites on
/// each ban and unban, to `sessions` whenever it changes (bans added close
/// their sessions; bans gone are lifted), until the task is aborted.
/// `sessions` holds what the file held at `seen`.
pub async fn follow(file: BanFile, sessions: Sessions, mut seen: Stamp) {
    let file = Arc::new(file);
    loop {
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        let now = file.stamp();
        if now == seen {
            continue;
        }
        seen = now;
        let reading = Arc::clone(&file);
        let Ok(wanted) = tokio::task::spawn_blocking(move || reading.load()).await else {
            continue;
        };
        let held = sessions.banned();
        for subnet in wanted.iter().filter(|s| !held.contains(s)) {
            match sessions.ban(*subnet) {
                Ok((_, kicked)) => {
                    tracing::info!(%subnet, ?kicked, "banned, as the writer's ban list says");
                }
                Err(e) => tracing::warn!(%subnet, "ban list: {e}"),
            }
        }
        for subnet in held.iter().filter(|s| !wanted.contains(s)) {
            sessions.unban(*subnet);
            tracing::info!(%subnet, "ban lifted, as the writer's ban list says");
        }
    }
}

/// The networks in a ban file's `bytes`, and a description of each line
/// that is neither one, a comment nor blank. Past [`BANNED_MAX`] networks
/// the rest are reported, as the server would refuse them.
fn parse(bytes: &[u8]) -> (Vec<Subnet>, Vec<String>) {
    let mut banned: Vec<Subnet> = Vec::new();
    let mut bad = Vec::new();
    for (number, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let number = number + 1;
        let Ok(line) = std::str::from_utf8(line) else {
            bad.push(format!("line {number}: not UTF-8"));
            continue;
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.parse::<Subnet>() {
            Ok(_) if banned.len() >= BANNED_MAX => {
                bad.push(format!("line {number}: past the {BANNED_MAX} bans kept"));
            }
            Ok(subnet) if banned.contains(&subnet) => {}
            Ok(subnet) => banned.push(subnet),
            Err(e) => {
                let shown: String = line.chars().take(60).collect();
                bad.push(format!("line {number} ({shown:?}): {e}"));
            }
        }
    }
    (banned, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(s: &str) -> Subnet {
        s.parse().unwrap()
    }

    #[test]
    fn a_saved_list_is_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = BanFile::new(dir.path());
        assert_eq!(file.load(), Vec::<Subnet>::new(), "no file, no bans");
        let banned = [
            subnet("10.0.0.0/8"),
            subnet("2001:db8:1:2::/64"),
            subnet("192.0.2.7"),
        ];
        file.save(&banned).unwrap();
        assert_eq!(file.load(), banned);
        file.save(&banned[1..]).unwrap();
        assert_eq!(file.load(), banned[1..]);
        assert!(
            !file.path().with_extension("txt.tmp").exists(),
            "no temporary file is left"
        );
    }

    #[test]
    fn bad_lines_are_skipped_and_named() {
        let bytes =
            b"# comment\n\n10.0.0.0/8\nnot an address\n10.0.0.1/8\n\xff\xfe\n  ::1  \n10.0.0.0/8\n";
        let (banned, bad) = parse(bytes);
        assert_eq!(banned, [subnet("10.0.0.0/8"), subnet("::1/128")]);
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad[0].starts_with("line 4 (\"not an address\")"), "{bad:?}");
        assert!(bad[1].starts_with("line 5"), "{bad:?}");
        assert_eq!(bad[2], "line 6: not UTF-8");
    }

    #[test]
    fn an_oversized_or_unreadable_file_is_no_bans() {
        let dir = tempfile::tempdir().unwrap();
        let file = BanFile::new(dir.path());
        std::fs::write(file.path(), vec![b'#'; FILE_BYTES_MAX as usize + 1]).unwrap();
        assert_eq!(file.load(), Vec::<Subnet>::new());
        // A directory in the file's place cannot be read as one.
        std::fs::remove_file(file.path()).unwrap();
        std::fs::create_dir(file.path()).unwrap();
        assert_eq!(file.load(), Vec::<Subnet>::new());
    }
}
