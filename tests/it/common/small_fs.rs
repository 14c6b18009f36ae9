//! A filesystem of a given size that a test can fill: a tmpfs mounted on
//! a directory of its own, unmounted when dropped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size mounted on `path`.
pub struct SmallFilesystem {
    path: PathBuf,
}

impl SmallFilesystem {
    /// Mounts a tmpfs of `bytes` on `path` (created if missing).
    ///
    /// # Panics
    /// When it cannot be mounted: these tests need root (`mount`), and fail
    /// rather than skip without it.
    pub fn mount(path: &Path, bytes: u64) -> SmallFilesystem {
        std::fs::create_dir_all(path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .output()
            .unwrap_or_else(|e| panic!("running mount: {e}"));
        assert!(
            output.status.success(),
            "mounting a tmpfs of {bytes} bytes on {} failed ({}): {}\n\
             the disk-full tests fill a filesystem of their own and must run as root",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        SmallFilesystem {
            path: path.to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes still free.
    pub fn free(&self) -> u64 {
        let output = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.path)
            .output()
            .expect("running df");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .nth(1)
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| panic!("df of {}: {output:?}", self.path.display()))
    }

    /// Writes a file of zeros (tmpfs keeps every page) that leaves about
    /// `keep` bytes free, and returns its path.
    pub fn fill(&self, keep: u64) -> PathBuf {
        let path = self.path.join("filler");
        let mut file = std::fs::File::create(&path).expect("creating the filler");
        let chunk = vec![0u8; 1 << 20];
        let mut left = self.free().saturating_sub(keep);
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            match file.write_all(&chunk[..n]) {
                Ok(()) => left -= n as u64,
                // Osprey wrote meanwhile: the filesystem is full now.
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("writing the filler: {e}"),
            }
        }
        path
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        // Lazily: a process the test failed to stop may still hold it.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
