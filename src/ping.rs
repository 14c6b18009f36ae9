//! `osprey ping`: does an Osprey answer at this address? One `server.ping`
//! over plain TCP, bounded in time. The container's HEALTHCHECK runs it.
//! The Electrum port opens at startup and is answered during the first
//! sync too, so an answer means the server is up, not that wallets are
//! served yet (until then they get an error with the sync's progress).

use anyhow::{bail, Context};
use clap::Args;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct PingArgs {
    /// The Electrum address (plain TCP); an unspecified IP (0.0.0.0, ::),
    /// as in a listen address, means this machine
    #[arg(env = "OSPREY_ELECTRUM_RPC_ADDR", default_value = "127.0.0.1:50001")]
    addr: String,
    /// Seconds to wait for the connection and for the answer, each
    #[arg(long, default_value_t = 5)]
    timeout: u64,
}

pub fn run(args: PingArgs) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout);
    let addr = args
        .addr
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", args.addr))?
        .next()
        .with_context(|| format!("{} resolves to no address", args.addr))?;
    let addr = SocketAddr::new(local_if_unspecified(addr.ip()), addr.port());
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"server.ping\",\"params\":[]}\n")
        .with_context(|| format!("writing to {addr}"))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .with_context(|| format!("reading from {addr}"))?;
    if line.is_empty() {
        bail!("{addr} closed the connection without answering");
    }
    let reply: serde_json::Value = serde_json::from_str(&line)
        .with_context(|| format!("{addr} answered {:?}, not JSON", line.trim_end()))?;
    if reply.get("id") != Some(&serde_json::json!(0))
        || reply.get("error").is_some()
        || !reply.get("result").is_some_and(serde_json::Value::is_null)
    {
        bail!("{addr} answered server.ping with {}", line.trim_end());
    }
    Ok(())
}

fn local_if_unspecified(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(ip) if ip.is_unspecified() => Ipv4Addr::LOCALHOST.into(),
        IpAddr::V6(ip) if ip.is_unspecified() => Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    }
}
