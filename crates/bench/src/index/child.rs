//! Runs the indexer as a child process and watches it: collects its stdout
//! lines, keeps the tail of its stderr, and samples its /proc files until
//! it exits.
//!
//! The child is reaped only after it has been seen as a zombie: until its
//! parent waits for it, an exited process keeps its `/proc/PID/stat` and
//! `io` with the final CPU times and write counters of all its threads, so
//! the figures include the last flush instead of stopping at the last
//! periodic sample. Pure std, no `unsafe`: the state letter in `stat` says
//! when the process has exited, without a `waitid(WNOWAIT)`.

use super::procfs::Sampler;
use anyhow::Context;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Between samples of a running child: often enough to catch the RSS peak
/// of a phase that lasts a fraction of a second, rarely enough to cost
/// nothing next to the indexer (three small reads of /proc).
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// The first interval, doubled up to [`SAMPLE_INTERVAL`]: a build of a tiny
/// chain is over in less than 100 ms and would otherwise only be sampled
/// as a zombie, which has no memory figures left.
const FIRST_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);
/// Between samples once the child closed its stdout, waiting for its zombie.
const EXIT_POLL: Duration = Duration::from_millis(2);
/// How long to wait for the zombie after stdout closed before reaping
/// anyway (a child that closed stdout but lives on, or no procfs).
const EXIT_GRACE: Duration = Duration::from_secs(10);
/// Lines of stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 40;

/// From the stdout reader to the watcher.
enum Event {
    /// A line was read.
    Line,
    /// Stdout closed, at this instant.
    Eof(Instant),
}

/// What was seen of one run of the child.
#[derive(Debug)]
pub struct Watched {
    /// Spawn to the close of its stdout, which the kernel does as the
    /// process exits (after everything it wrote to disk).
    pub wall: Duration,
    pub status: ExitStatus,
    /// Every stdout line, in order.
    pub stdout: Vec<String>,
    pub stderr_tail: Vec<String>,
    pub sampler: Sampler,
    /// True when a sample was taken of the exited process, so CPU and I/O
    /// are final; false when they are from the last sample while it ran.
    pub final_sample: bool,
}

/// Spawns `command` with piped stdout and stderr and watches it to its end.
///
/// # Errors
/// When the child cannot be started or waited for, or its output cannot be
/// read; how the child itself ended is in [`Watched::status`].
pub fn watch(mut command: Command) -> anyhow::Result<Watched> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let program = command.get_program().to_string_lossy().into_owned();
    let started = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let pid = child.id();
    let stdout = child.stdout.take().context("child stdout")?;
    let stderr = child.stderr.take().context("child stderr")?;

    let (event_tx, event_rx) = mpsc::channel::<Event>();
    let stdout_reader = std::thread::Builder::new()
        .name("indexer-stdout".into())
        .spawn(move || -> std::io::Result<Vec<String>> {
            let mut lines = Vec::new();
            // Sends fail only if the watcher has gone; the lines are still wanted.
            for line in BufReader::new(stdout).lines() {
                lines.push(line?);
                let _ = event_tx.send(Event::Line);
            }
            let _ = event_tx.send(Event::Eof(Instant::now()));
            Ok(lines)
        })
        .context("starting the stdout reader")?;
    let stderr_reader = std::thread::Builder::new()
        .name("indexer-stderr".into())
        .spawn(move || tail(stderr, STDERR_TAIL_LINES))
        .context("starting the stderr reader")?;

    let mut sampler = Sampler::default();
    let mut eof: Option<Instant> = None;
    let mut final_sample = false;
    let mut interval = FIRST_SAMPLE_INTERVAL;
    loop {
        // A progress line is a commit, when memory is likely at its highest:
        // it is sampled too, besides the clock.
        match eof {
            None => match event_rx.recv_timeout(interval) {
                Ok(Event::Line) => {}
                Ok(Event::Eof(at)) => eof = Some(at),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    interval = (interval * 2).min(SAMPLE_INTERVAL);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => eof = Some(Instant::now()),
            },
            Some(_) => std::thread::sleep(EXIT_POLL),
        }
        match sampler.sample(pid) {
            Some('Z' | 'X') => {
                final_sample = true;
                break;
            }
            // No procfs: the exit is all there is to wait for.
            None if eof.is_some() => break,
            _ => {}
        }
        if eof.is_some_and(|at| at.elapsed() > EXIT_GRACE) {
            break;
        }
    }
    // Seen as a zombie, or given up on: reaping (or waiting) is now right.
    let status = child
        .wait()
        .with_context(|| format!("waiting for {program}"))?;
    let stdout = stdout_reader
        .join()
        .map_err(|_| anyhow::anyhow!("the stdout reader panicked"))?
        .with_context(|| format!("reading the stdout of {program}"))?;
    // When the zombie was seen before the reader's message, the message
    // still holds the time stdout closed.
    let exited = eof
        .or_else(|| {
            event_rx.try_iter().find_map(|event| match event {
                Event::Eof(at) => Some(at),
                Event::Line => None,
            })
        })
        .unwrap_or_else(Instant::now);
    let stderr_tail = stderr_reader
        .join()
        .map_err(|_| anyhow::anyhow!("the stderr reader panicked"))?;
    Ok(Watched {
        wall: exited.saturating_duration_since(started),
        status,
        stdout,
        stderr_tail,
        sampler,
        final_sample,
    })
}

/// Reads `input` to its end, keeping its last `keep` lines (lossy UTF-8: a
/// log line is for reading, not worth failing the run over).
fn tail(input: impl Read, keep: usize) -> Vec<String> {
    let mut lines = VecDeque::with_capacity(keep);
    let mut reader = BufReader::new(input);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if lines.len() == keep {
                    lines.pop_front();
                }
                lines.push_back(String::from_utf8_lossy(&buf).trim_end().to_owned());
            }
        }
    }
    lines.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let text = "one\ntwo\nthree\nfour";
        assert_eq!(tail(text.as_bytes(), 2), ["three", "four"]);
        assert_eq!(tail(&b"a\xffb\n"[..], 5), ["a\u{fffd}b"]);
        assert!(tail(&b""[..], 3).is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn watches_a_child_to_its_end() {
        // A shell that prints, writes a file, burns a little CPU and fails.
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new("sh");
        command.current_dir(dir.path()).args([
            "-c",
            "echo line1; echo oops >&2; head -c 200000 /dev/zero > f; sync; \
             i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo line2; exit 3",
        ]);
        let w = watch(command).unwrap();
        assert_eq!(w.stdout, ["line1", "line2"]);
        assert_eq!(w.stderr_tail, ["oops"]);
        assert_eq!(w.status.code(), Some(3));
        assert!(w.final_sample, "the zombie was sampled");
        assert!(w.sampler.samples >= 1);
        assert!(w.sampler.stat.is_some());
        assert!(w.wall > Duration::ZERO);
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let err = watch(Command::new("/nonexistent/osprey")).unwrap_err();
        assert!(
            format!("{err:#}").contains("starting /nonexistent/osprey"),
            "{err:#}"
        );
    }
}
