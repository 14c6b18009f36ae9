//! The local process behind a measured server, and its memory: the
//! many-wallets workload reports the server's RSS under load. To the bench a
//! server is only HOST:PORT, so its process is found the way `ss -ltnp` finds
//! it: the LISTEN socket on that port in `/proc/net/tcp` and `tcp6`, then the
//! process holding that socket among `/proc/PID/fd/*`. Its RSS is then read
//! from `/proc/PID/status`.
//!
//! Linux only, and best effort: wherever the process cannot be found or read
//! (a remote server, another user's process, no procfs) the answer is `None`
//! and the bench goes on without the figure. A server behind a port-forwarder
//! (e.g. `docker-proxy`) is seen as the forwarder, which is why the process
//! found is logged by name.

use crate::index::procfs::parse_status;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Between RSS samples: often enough to catch a peak that lasts a fraction
/// of a second, rarely enough to cost nothing next to the server (one small
/// read of /proc).
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// `st` of a socket in LISTEN state in `/proc/net/tcp` (`TCP_LISTEN`).
const TCP_LISTEN: &str = "0A";

/// Returns the pid of the local process listening on the port of `address`
/// (HOST:PORT), or `None` when HOST is not this machine's loopback or no
/// such process can be seen.
pub fn find_server_pid(address: &str) -> Option<u32> {
    listening_pid(loopback_port(address)?)
}

/// Returns the port of HOST:PORT when HOST is `localhost` or a loopback IP
/// (`127.0.0.0/8`, `[::1]`): only then is the listener a process of this
/// machine that /proc can show.
fn loopback_port(address: &str) -> Option<u16> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    loopback.then(|| port.parse().ok()).flatten()
}

/// Returns the pid of the process holding a socket that listens on TCP
/// `port` (IPv4 or IPv6). When several do (workers forked with the listening
/// socket), the lowest pid, normally their parent.
pub fn listening_pid(port: u16) -> Option<u32> {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter().find(|&pid| holds_socket(pid, &inodes))
}

/// Parses a `/proc/net/tcp` or `tcp6` table and returns the inodes of the
/// sockets listening on `port`. Lines are `sl local_address rem_address st
/// ... uid timeout inode ...`, the address as hex `IP:PORT`.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1) // The column headings.
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (_, local_port) = fields.get(1)?.rsplit_once(':')?;
            let listening =
                *fields.get(3)? == TCP_LISTEN && u16::from_str_radix(local_port, 16).ok()? == port;
            listening.then(|| fields.get(9)?.parse().ok()).flatten()
        })
        .collect()
}

/// Returns whether one of `pid`'s file descriptors is one of the sockets
/// `inodes`; false when its fds cannot be read (another user's process).
fn holds_socket(pid: u32, inodes: &HashSet<u64>) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| socket_inode(target.to_str()?))
        .any(|inode| inodes.contains(&inode))
}

/// Parses the target of a `/proc/PID/fd/*` link to a socket, `socket:[INODE]`.
fn socket_inode(link_target: &str) -> Option<u64> {
    link_target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Returns the command name of `pid` (`/proc/PID/comm`), for the log.
pub fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

/// Returns the resident set size of `pid` in bytes (`VmRSS`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status(&status).vm_rss
}

/// Samples a process's RSS every [`SAMPLE_INTERVAL`] until
/// [`finish`](Self::finish), keeping the highest. The current RSS is
/// sampled rather than `VmHWM`, the kernel's own peak, because that would
/// include peaks from before the run, such as the server's start-up. Runs
/// on a thread of its own, so a runtime busy with many sessions does not
/// delay the samples.
pub struct PeakRssSampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Option<u64>>,
}

impl PeakRssSampler {
    /// Starts sampling `pid`; `None` if no thread could be started, which
    /// only costs the figure.
    pub fn start(pid: u32) -> Option<PeakRssSampler> {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("rss-of-{pid}"))
            .spawn(move || {
                let mut peak = rss_bytes(pid);
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(SAMPLE_INTERVAL) {
                    peak = peak.max(rss_bytes(pid));
                }
                // A last sample at the stop, so a run shorter than the
                // interval is sampled at its end too.
                peak.max(rss_bytes(pid))
            })
            .ok()?;
        Some(PeakRssSampler { stop, thread })
    }

    /// Stops the sampling and returns the highest RSS sampled, in bytes, or
    /// `None` if no sample could be read.
    pub fn finish(self) -> Option<u64> {
        // The thread ends on the message, or on the disconnect if it is gone.
        let _ = self.stop.send(());
        self.thread.join().ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listening_sockets_of_a_port() {
        // 127.0.0.1:50001 (0xC351) listening, then a connection from it, then
        // another port listening.
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:C351 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0\n\
            1: 0100007F:C351 0100007F:D000 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0000000000000000 20 4 30 10 -1\n\
            2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(listening_inodes(tcp, 50001), [4242]);
        assert_eq!(listening_inodes(tcp, 22), [17]);
        assert!(listening_inodes(tcp, 50002).is_empty());
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 00000000000000000000000001000000:C351 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5151 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(listening_inodes(tcp6, 50001), [5151]);
        assert!(listening_inodes("garbage\nmore garbage", 50001).is_empty());
    }

    #[test]
    fn only_loopback_servers_are_looked_up() {
        assert_eq!(loopback_port("127.0.0.1:50001"), Some(50001));
        assert_eq!(loopback_port("localhost:50001"), Some(50001));
        assert_eq!(loopback_port("[::1]:50002"), Some(50002));
        assert_eq!(loopback_port("electrum.example.com:50001"), None);
        assert_eq!(loopback_port("192.0.2.1:50001"), None);
        assert_eq!(loopback_port("127.0.0.1:notaport"), None);
    }

    #[test]
    fn parses_socket_links() {
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[4242]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    /// The listener of this very test process is found, and its RSS read.
    #[cfg(target_os = "linux")]
    #[test]
    fn finds_the_process_listening_on_a_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let pid = find_server_pid(&address);
        assert_eq!(pid, Some(std::process::id()), "listener at {address}");
        assert!(rss_bytes(std::process::id()).is_some_and(|rss| rss > 0));

        let sampler = PeakRssSampler::start(std::process::id()).unwrap();
        assert!(sampler.finish().is_some_and(|peak| peak > 0));

        drop(listener);
        assert_eq!(find_server_pid(&address), None, "closed listener");
    }
}
