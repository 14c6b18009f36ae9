//! What Linux says about the indexer process (`/proc/PID/status`, `stat`,
//! `io`) and about its database on disk. The parsers take the files' text so
//! they are tested on fixtures; [`Sampler`] reads the live files.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

/// Memory figures of `/proc/PID/status`, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// `VmHWM`: the peak resident set so far. Absent once the process is a
    /// zombie (its memory is gone), hence the sampling while it runs.
    pub vm_hwm: Option<u64>,
    pub vm_rss: Option<u64>,
}

/// Parses `/proc/PID/status`: the kB figures of `VmHWM` and `VmRSS`.
pub fn parse_status(text: &str) -> Status {
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .and_then(|kb| kb.checked_mul(1024))
    };
    Status {
        vm_hwm: kb("VmHWM"),
        vm_rss: kb("VmRSS"),
    }
}

/// The fields of `/proc/PID/stat` the bench needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, ... `Z` once the process has exited and awaits its parent.
    pub state: char,
    /// Clock ticks in user and kernel mode, all threads (live and exited) included.
    pub utime_ticks: u64,
    pub stime_ticks: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) is in parentheses and
/// may itself hold spaces and parentheses, so fields are counted from the
/// last `)`: state is field 3, utime 14, stime 15.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    Some(Stat {
        state: field(3)?.chars().next()?,
        utime_ticks: field(14)?.parse().ok()?,
        stime_ticks: field(15)?.parse().ok()?,
    })
}

/// Storage I/O of `/proc/PID/io`, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Io {
    /// Bytes the process caused to be fetched from storage.
    pub read_bytes: u64,
    /// Bytes the process caused to be sent to storage, counted when a page
    /// is dirtied (so they count even if written back after the exit).
    pub write_bytes: u64,
    /// Of `write_bytes`, dirty page cache dropped before writeback (files
    /// truncated or deleted: short-lived WAL or compaction files).
    pub cancelled_write_bytes: u64,
}

/// Parses `/proc/PID/io`; `None` unless all three byte counters are there.
pub fn parse_io(text: &str) -> Option<Io> {
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some(Io {
        read_bytes: value("read_bytes")?,
        write_bytes: value("write_bytes")?,
        cancelled_write_bytes: value("cancelled_write_bytes")?,
    })
}

/// Resource figures of a process, accumulated from samples of its /proc files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampler {
    pub samples: u64,
    /// Highest `VmHWM` (or `VmRSS`, if higher between samples) seen.
    pub peak_rss: Option<u64>,
    /// Latest readable `stat` and `io`: the final ones once the process is a zombie.
    pub stat: Option<Stat>,
    pub io: Option<Io>,
}

impl Sampler {
    /// Folds in one reading of the three files (`None` for an unreadable one).
    pub fn add(&mut self, status: Option<&str>, stat: Option<&str>, io: Option<&str>) {
        self.samples += 1;
        if let Some(status) = status.map(parse_status) {
            let peak = status.vm_hwm.max(status.vm_rss);
            self.peak_rss = self.peak_rss.max(peak);
        }
        if let Some(stat) = stat.and_then(parse_stat) {
            self.stat = Some(stat);
        }
        if let Some(io) = io.and_then(parse_io) {
            self.io = Some(io);
        }
    }

    /// Reads `/proc/<pid>/{status,stat,io}` and folds them in; returns the
    /// process state, or `None` when `stat` cannot be read (no procfs).
    pub fn sample(&mut self, pid: u32) -> Option<char> {
        let read = |file: &str| std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok();
        let stat = read("stat");
        self.add(
            read("status").as_deref(),
            stat.as_deref(),
            read("io").as_deref(),
        );
        stat.as_deref().and_then(parse_stat).map(|s| s.state)
    }

    /// User and system CPU seconds of the latest `stat`.
    pub fn cpu_seconds(&self, clock_ticks: u64) -> Option<(f64, f64)> {
        let stat = self.stat?;
        let tick = clock_ticks.max(1) as f64;
        Some((
            stat.utime_ticks as f64 / tick,
            stat.stime_ticks as f64 / tick,
        ))
    }
}

/// Returns the kernel's clock ticks per second (`getconf CLK_TCK`), which
/// `stat`'s times are counted in; 100, the value on every common Linux
/// build, when `getconf` is missing.
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100)
}

/// Size of a directory tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    /// Blocks allocated on disk, as `du` counts them.
    pub allocated_bytes: u64,
    /// Sum of the files' lengths, as `du --apparent-size` counts them.
    pub apparent_bytes: u64,
    pub files: u64,
}

/// Walks `dir` like `du`: every file once (hard links by inode), symlinks not followed.
///
/// # Errors
/// When a directory or file's metadata cannot be read.
pub fn disk_usage(dir: &Path) -> std::io::Result<DiskUsage> {
    let mut usage = DiskUsage::default();
    let mut seen = HashSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
            continue;
        }
        if !add_file(&mut seen, &meta) {
            continue;
        }
        usage.files += 1;
        usage.apparent_bytes += meta.len();
        usage.allocated_bytes += allocated(&meta).unwrap_or(meta.len());
    }
    Ok(usage)
}

/// The largest a directory got while something wrote into it: sampled on a
/// thread of its own every interval until [`DiskPeak::stop`]. A sample
/// that fails (a compaction deleted a file while it was walked) is
/// skipped; the next one counts.
pub struct DiskPeak {
    stop: std::sync::mpsc::Sender<()>,
    sampler: std::thread::JoinHandle<Option<u64>>,
}

impl DiskPeak {
    /// Samples every `interval`, or every 20 walks' time when a walk of
    /// the directory takes longer than a twentieth of it.
    pub fn watch(dir: &Path, interval: std::time::Duration) -> DiskPeak {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let dir = dir.to_path_buf();
        let sampler = std::thread::spawn(move || {
            let mut peak = None;
            loop {
                let walk = std::time::Instant::now();
                if let Ok(usage) = disk_usage(&dir) {
                    peak = peak.max(Some(usage.allocated_bytes));
                }
                let wait = interval.max(walk.elapsed() * 20);
                match stopped.recv_timeout(wait) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return peak,
                }
            }
        });
        DiskPeak { stop, sampler }
    }

    /// Stops sampling; the largest size seen, `None` if no sample succeeded.
    pub fn stop(self) -> Option<u64> {
        // The sampler may have ended already; its peak is still joined.
        let _ = self.stop.send(());
        self.sampler.join().unwrap_or(None)
    }
}

/// The silent-payment files of an index (docs/silent-payments.md, 3.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpFiles {
    /// `sptweaks.dat`: the records.
    pub tweaks_bytes: u64,
    /// `spoffsets.dat`: 8 bytes per block.
    pub offsets_bytes: u64,
}

impl SpFiles {
    pub fn total_bytes(&self) -> u64 {
        self.tweaks_bytes + self.offsets_bytes
    }
}

/// Sizes the silent-payment files of the index in `index_dir` (the
/// network's directory inside `--db-dir`); `None` when it has neither.
///
/// # Errors
/// When a file exists but its metadata cannot be read, or only one exists.
pub fn sp_files(index_dir: &Path) -> std::io::Result<Option<SpFiles>> {
    let size = |name: &str| match std::fs::metadata(index_dir.join(name)) {
        Ok(meta) => Ok(Some(meta.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    };
    match (size("sptweaks.dat")?, size("spoffsets.dat")?) {
        (None, None) => Ok(None),
        (Some(tweaks_bytes), Some(offsets_bytes)) => Ok(Some(SpFiles {
            tweaks_bytes,
            offsets_bytes,
        })),
        _ => Err(std::io::Error::other(format!(
            "{}: one of sptweaks.dat and spoffsets.dat without the other",
            index_dir.display()
        ))),
    }
}

#[cfg(unix)]
fn add_file(seen: &mut HashSet<(u64, u64)>, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    seen.insert((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn add_file(_: &mut HashSet<(u64, u64)>, _: &std::fs::Metadata) -> bool {
    true
}

#[cfg(unix)]
fn allocated(meta: &std::fs::Metadata) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    // st_blocks is in 512-byte units whatever the file system's block size.
    meta.blocks().checked_mul(512)
}

#[cfg(not(unix))]
fn allocated(_: &std::fs::Metadata) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tosprey\nUmask:\t0022\nState:\tS (sleeping)\n\
        VmPeak:\t 1200000 kB\nVmSize:\t 1100000 kB\nVmHWM:\t  345678 kB\nVmRSS:\t  300000 kB\n\
        Threads:\t5\n";

    #[test]
    fn status_memory_in_bytes() {
        let s = parse_status(STATUS);
        assert_eq!(s.vm_hwm, Some(345_678 * 1024));
        assert_eq!(s.vm_rss, Some(300_000 * 1024));
        // A zombie's status has no memory lines.
        let zombie = parse_status("Name:\tosprey\nState:\tZ (zombie)\nThreads:\t1\n");
        assert_eq!(zombie, Status::default());
    }

    #[test]
    fn stat_fields_counted_after_the_command_name() {
        // The name "(a) b)" holds a space and parentheses: naive splitting
        // would shift every field.
        let text = "1234 ((a) b)) R 1 1234 1234 0 -1 4194304 5000 0 3 0 4321 876 0 0 20 0 7 0 \
                    100 2000000 30000 18446744073709551615\n";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.state, 'R');
        assert_eq!((stat.utime_ticks, stat.stime_ticks), (4321, 876));
        assert_eq!(
            parse_stat("99 (osprey) Z 1 2 3 4 5 6 7 8 9 10 11 12\n").unwrap(),
            Stat {
                state: 'Z',
                utime_ticks: 11,
                stime_ticks: 12
            }
        );
        assert_eq!(parse_stat("1234 (osprey) R 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn io_counters() {
        let text = "rchar: 1000\nwchar: 2000\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\n\
                    write_bytes: 81920\ncancelled_write_bytes: 8192\n";
        assert_eq!(
            parse_io(text),
            Some(Io {
                read_bytes: 4096,
                write_bytes: 81_920,
                cancelled_write_bytes: 8192
            })
        );
        // Without I/O accounting in the kernel only the char counters are there.
        assert_eq!(parse_io("rchar: 1\nwchar: 2\n"), None);
    }

    #[test]
    fn sampler_keeps_the_peak_and_the_latest_counters() {
        let mut s = Sampler::default();
        let io = |w: u64| format!("read_bytes: 0\nwrite_bytes: {w}\ncancelled_write_bytes: 0\n");
        s.add(
            Some("VmHWM:\t 100 kB\nVmRSS:\t 100 kB\n"),
            Some("1 (x) R 1 2 3 4 5 6 7 8 9 10 50 5\n"),
            Some(&io(10)),
        );
        s.add(
            Some("VmHWM:\t 300 kB\nVmRSS:\t 200 kB\n"),
            None,
            Some(&io(20)),
        );
        // The zombie: no memory lines, final CPU and I/O.
        s.add(
            Some("State:\tZ (zombie)\n"),
            Some("1 (x) Z 1 2 3 4 5 6 7 8 9 10 250 50\n"),
            Some(&io(30)),
        );
        assert_eq!(s.samples, 3);
        assert_eq!(s.peak_rss, Some(300 * 1024));
        assert_eq!(s.io.map(|io| io.write_bytes), Some(30));
        assert_eq!(s.cpu_seconds(100), Some((2.5, 0.5)));
        assert_eq!(Sampler::default().cpu_seconds(100), None);
    }

    #[test]
    fn samples_this_process() {
        let mut s = Sampler::default();
        let state = s.sample(std::process::id());
        if cfg!(target_os = "linux") {
            // The state is the main thread's, which waits for the test threads.
            assert!(state.is_some_and(|c| c.is_ascii_uppercase()), "{state:?}");
            assert!(s.peak_rss.unwrap_or(0) > 0);
            assert!(s.stat.is_some());
        }
        assert!(clock_ticks() > 0);
    }

    #[test]
    fn disk_usage_counts_every_file_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 10_000]).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![2u8; 5]).unwrap();
        #[cfg(unix)]
        std::fs::hard_link(dir.path().join("a"), dir.path().join("sub/a-link")).unwrap();
        let usage = disk_usage(dir.path()).unwrap();
        assert_eq!(usage.files, 2);
        assert_eq!(usage.apparent_bytes, 10_005);
        assert!(disk_usage(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn sp_files_are_both_or_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(sp_files(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join("sptweaks.dat"), vec![0u8; 1_030]).unwrap();
        assert!(sp_files(dir.path()).is_err(), "records without offsets");
        std::fs::write(dir.path().join("spoffsets.dat"), vec![0u8; 80]).unwrap();
        let files = sp_files(dir.path()).unwrap().unwrap();
        assert_eq!((files.tweaks_bytes, files.offsets_bytes), (1_030, 80));
        assert_eq!(files.total_bytes(), 1_110);
    }
}
