//! The receiving side of the PROXY protocol, versions 1 (text) and 2
//! (binary), as HAProxy's `doc/proxy-protocol.txt` specifies it: a load
//! balancer in front of the server starts each connection with a header
//! naming the client it relays, so that the per-address cap, add_peer's
//! rate limit and the logs see the client rather than the balancer.
//!
//! Owns the header's parsing and reading, and the guard that closes any
//! other connection starting with a header. Which sources may send one
//! (`Limits::proxy_protocol_from`) and what the client's address is used
//! for are the accept loop's (`lib.rs`).
//!
//! A header is honoured only from the configured sources, never guessed
//! (the spec's section 5: a client that could send one would pass as
//! anybody). A connection from a configured source must start with one;
//! from anywhere else, one closes the connection ([`HeaderGuard`]).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The longest v1 header, CRLF included (the spec's worst case, an
/// `UNKNOWN` line with two full IPv6 addresses).
const V1_BYTES_MAX: usize = 107;
/// What a v1 header starts with.
const V1_SIGNATURE: &[u8; 6] = b"PROXY ";
/// What a v2 header starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Signature, version and command, family and protocol, length.
const V2_FIXED_BYTES: usize = 16;
/// Most bytes a v2 header may carry after its fixed part: the addresses
/// (216 bytes for AF_UNIX) and the TLVs balancers add (AWS's endpoint ID,
/// HAProxy's unique ID and TLS details), which are skipped. Beyond this a
/// header is refused rather than buffered.
const V2_ADDRESS_BYTES_MAX: usize = 1024;
/// The longest header of either version.
const HEADER_BYTES_MAX: usize = V2_FIXED_BYTES + V2_ADDRESS_BYTES_MAX;
/// How long a proxy has to send the whole header. The spec asks for at
/// least 3 s, to cover a TCP retransmit; a balancer sends it at once.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// What a valid header says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Header {
    /// Relayed for the client at this address (v1 `TCP4`/`TCP6`, v2
    /// `PROXY` over TCP/IPv4 or TCP/IPv6).
    Relayed(SocketAddr),
    /// The proxy's own connection (v2 `LOCAL`: a health check), or one it
    /// cannot describe (v1 `UNKNOWN`; v2 AF_UNSPEC, AF_UNIX or datagrams):
    /// the socket's own peer address stands, as the spec asks.
    Unrelayed,
}

impl Header {
    /// The client's address: the relayed one, else the socket's `peer`.
    pub fn client(self, peer: SocketAddr) -> SocketAddr {
        match self {
            Header::Relayed(client) => client,
            Header::Unrelayed => peer,
        }
    }
}

/// Why a connection's header was refused. Each closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeaderError {
    #[error("no PROXY header: the connection starts with {0}")]
    Missing(FirstBytes),
    #[error("PROXY v1 header without CRLF in its first {V1_BYTES_MAX} bytes")]
    V1TooLong,
    #[error("malformed PROXY v1 header: {0}")]
    V1Malformed(&'static str),
    #[error("PROXY v2 header of version {0}, not 2")]
    V2Version(u8),
    #[error("PROXY v2 header with unknown command {0:#x}")]
    V2Command(u8),
    #[error("PROXY v2 header with unknown address family and protocol {0:#04x}")]
    V2Family(u8),
    #[error(
        "PROXY v2 header announcing {0} bytes after its fixed part, over {V2_ADDRESS_BYTES_MAX}"
    )]
    V2TooLong(usize),
    #[error("PROXY v2 header of {len} address bytes, short of the {need} its family needs")]
    V2AddressesShort { need: usize, len: usize },
    #[error("the connection ended {0} bytes into its PROXY header")]
    Truncated(usize),
    #[error("no complete PROXY header within {0:?}")]
    Timeout(Duration),
    #[error("reading the PROXY header: {0}")]
    Io(String),
}

/// Up to the first 8 bytes of a connection, for a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FirstBytes(Vec<u8>);

impl fmt::Display for FirstBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// Reads the header a connection from a configured proxy must start with,
/// and not one byte more: what follows belongs to TLS, WebSocket or the
/// request lines, which read the same socket afterwards.
///
/// # Errors
/// A missing, malformed, oversized or truncated header, or one not
/// complete within [`HEADER_TIMEOUT`] (so a stalled proxy holds no slot).
pub(crate) async fn read_header(stream: &mut TcpStream) -> Result<Header, HeaderError> {
    match tokio::time::timeout(HEADER_TIMEOUT, read_header_unbounded(stream)).await {
        Ok(read) => read,
        Err(_) => Err(HeaderError::Timeout(HEADER_TIMEOUT)),
    }
}

/// [`read_header`] without its deadline.
///
/// Peeks rather than reads, so as not to take bytes past the header: when
/// what is there is not yet a whole header, all of it lies inside the
/// header, so it is consumed (and the next peek waits for new bytes);
/// once it holds a whole header, exactly the header's rest is consumed.
async fn read_header_unbounded(stream: &mut TcpStream) -> Result<Header, HeaderError> {
    let io_error = |e: io::Error| HeaderError::Io(e.to_string());
    let mut consumed: Vec<u8> = Vec::with_capacity(V1_BYTES_MAX);
    let mut peeked = vec![0; HEADER_BYTES_MAX];
    loop {
        let room = HEADER_BYTES_MAX - consumed.len();
        // `parse` refuses a header before it outgrows the buffer.
        debug_assert!(room > 0, "an incomplete header fills the buffer");
        let n = stream.peek(&mut peeked[..room]).await.map_err(io_error)?;
        if n == 0 {
            return Err(HeaderError::Truncated(consumed.len()));
        }
        let mut seen = consumed.clone();
        seen.extend_from_slice(&peeked[..n]);
        match parse(&seen)? {
            Some((header, len)) => {
                debug_assert!(len > consumed.len(), "a shorter header was complete before");
                let rest = len - consumed.len();
                stream
                    .read_exact(&mut peeked[..rest])
                    .await
                    .map_err(io_error)?;
                return Ok(header);
            }
            None => {
                stream
                    .read_exact(&mut peeked[..n])
                    .await
                    .map_err(io_error)?;
                consumed.extend_from_slice(&peeked[..n]);
            }
        }
    }
}

/// Parses the header `bytes` start with: `Ok(None)` while all of `bytes`
/// may still be the start of one, else the header and its length.
///
/// # Errors
/// Bytes that cannot start a valid header.
fn parse(bytes: &[u8]) -> Result<Option<(Header, usize)>, HeaderError> {
    match signature(bytes) {
        Signature::V1 => parse_v1(bytes),
        Signature::V2 => parse_v2(bytes),
        Signature::Undecided => Ok(None),
        Signature::None => Err(HeaderError::Missing(FirstBytes(
            bytes[..bytes.len().min(8)].to_vec(),
        ))),
    }
}

/// Which header `bytes` start with, as far as they tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signature {
    V1,
    V2,
    /// Too few bytes to tell; they match the start of one.
    Undecided,
    None,
}

fn signature(bytes: &[u8]) -> Signature {
    let starts = |signature: &[u8]| {
        let n = bytes.len().min(signature.len());
        bytes[..n] == signature[..n]
    };
    if starts(V1_SIGNATURE) {
        if bytes.len() >= V1_SIGNATURE.len() {
            Signature::V1
        } else {
            Signature::Undecided
        }
    } else if starts(V2_SIGNATURE) {
        if bytes.len() >= V2_SIGNATURE.len() {
            Signature::V2
        } else {
            Signature::Undecided
        }
    } else {
        Signature::None
    }
}

/// `PROXY TCP4 192.0.2.1 198.51.100.1 56324 50001\r\n`, or `TCP6` with
/// IPv6 addresses, or `UNKNOWN` followed by anything.
fn parse_v1(bytes: &[u8]) -> Result<Option<(Header, usize)>, HeaderError> {
    let window = &bytes[..bytes.len().min(V1_BYTES_MAX)];
    // The spec forbids ending the line with a lone CR or LF.
    let Some(cr) = window.iter().position(|b| *b == b'\r' || *b == b'\n') else {
        return if bytes.len() >= V1_BYTES_MAX {
            Err(HeaderError::V1TooLong)
        } else {
            Ok(None)
        };
    };
    match window.get(cr..cr + 2) {
        Some(b"\r\n") => {}
        Some(_) => return Err(HeaderError::V1Malformed("a line not ended by CRLF")),
        None if window[cr] == b'\r' && bytes.len() < V1_BYTES_MAX => return Ok(None),
        None => return Err(HeaderError::V1Malformed("a line not ended by CRLF")),
    }
    let line = std::str::from_utf8(&window[..cr])
        .map_err(|_| HeaderError::V1Malformed("bytes that are not text"))?;
    let fields: Vec<&str> = line.split(' ').collect();
    let header = match fields.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Header::Unrelayed,
        ["PROXY", "TCP4", source, _destination, source_port, _destination_port] => {
            let ip: Ipv4Addr = source
                .parse()
                .map_err(|_| HeaderError::V1Malformed("a TCP4 source that is not IPv4"))?;
            Header::Relayed(SocketAddr::new(IpAddr::V4(ip), v1_port(source_port)?))
        }
        ["PROXY", "TCP6", source, _destination, source_port, _destination_port] => {
            let ip: Ipv6Addr = source
                .parse()
                .map_err(|_| HeaderError::V1Malformed("a TCP6 source that is not IPv6"))?;
            Header::Relayed(SocketAddr::new(IpAddr::V6(ip), v1_port(source_port)?))
        }
        ["PROXY", "TCP4" | "TCP6", ..] => {
            return Err(HeaderError::V1Malformed(
                "not four fields after the protocol, one space apart",
            ))
        }
        _ => {
            return Err(HeaderError::V1Malformed(
                "a protocol other than TCP4, TCP6 or UNKNOWN",
            ))
        }
    };
    Ok(Some((header, cr + 2)))
}

/// A port in decimal, without leading zeros (the spec's rule).
fn v1_port(text: &str) -> Result<u16, HeaderError> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = text.len() > 1 && text.starts_with('0');
    if !digits || leading_zero {
        return Err(HeaderError::V1Malformed(
            "a port that is not a decimal number",
        ));
    }
    text.parse()
        .map_err(|_| HeaderError::V1Malformed("a port over 65535"))
}

/// The binary header: signature, version and command, family and
/// protocol, a big-endian length, then that many bytes of addresses and
/// TLVs.
fn parse_v2(bytes: &[u8]) -> Result<Option<(Header, usize)>, HeaderError> {
    let Some(fixed) = bytes.get(..V2_FIXED_BYTES) else {
        return Ok(None);
    };
    let version = fixed[12] >> 4;
    let command = fixed[12] & 0x0f;
    let family = fixed[13];
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if version != 2 {
        return Err(HeaderError::V2Version(version));
    }
    if command > 1 {
        return Err(HeaderError::V2Command(command));
    }
    if family >> 4 > 3 || family & 0x0f > 2 {
        return Err(HeaderError::V2Family(family));
    }
    if len > V2_ADDRESS_BYTES_MAX {
        return Err(HeaderError::V2TooLong(len));
    }
    let Some(block) = bytes.get(V2_FIXED_BYTES..V2_FIXED_BYTES + len) else {
        return Ok(None);
    };
    const LOCAL: u8 = 0;
    const TCP_IPV4: u8 = 0x11;
    const TCP_IPV6: u8 = 0x21;
    let header = match (command, family) {
        // A health check: the family is to be ignored.
        (LOCAL, _) => Header::Unrelayed,
        (_, TCP_IPV4) => {
            let need = 2 * 4 + 2 * 2;
            let addresses = block
                .get(..need)
                .ok_or(HeaderError::V2AddressesShort { need, len })?;
            let ip: [u8; 4] = addresses[..4].try_into().expect("4 bytes by the slice");
            let port = u16::from_be_bytes([addresses[8], addresses[9]]);
            Header::Relayed(SocketAddr::new(IpAddr::from(ip), port))
        }
        (_, TCP_IPV6) => {
            let need = 2 * 16 + 2 * 2;
            let addresses = block
                .get(..need)
                .ok_or(HeaderError::V2AddressesShort { need, len })?;
            let ip: [u8; 16] = addresses[..16].try_into().expect("16 bytes by the slice");
            let port = u16::from_be_bytes([addresses[32], addresses[33]]);
            Header::Relayed(SocketAddr::new(IpAddr::from(ip), port))
        }
        // AF_UNSPEC, AF_UNIX, datagrams: nothing a TCP client's address
        // can come from; the spec lets the receiver use the socket's.
        _ => Header::Unrelayed,
    };
    Ok(Some((header, V2_FIXED_BYTES + len)))
}

/// A client's byte stream that ends in an error if it starts with a PROXY
/// header: one is honoured only from `proxy_protocol_from`, and from
/// anyone else it would be either a client trying to pass as another or a
/// balancer the operator has not listed (whose clients would otherwise
/// all count as the balancer).
///
/// The first bytes are held back until they tell (a JSON request starts
/// with `{` or `[`, TLS with 0x16, WebSocket with `GET`, so one byte
/// usually does), so that nothing of a header ever reaches the framer,
/// rustls or tungstenite. Writes pass straight through.
pub(crate) struct HeaderGuard<S> {
    inner: S,
    /// The first bytes, while they may be the start of a header.
    held: [u8; V2_SIGNATURE.len()],
    held_len: usize,
    state: Guard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Holding the first bytes back.
    Undecided,
    /// No header: handing out the bytes held, from this one.
    Releasing(usize),
    /// No header, and nothing held any more.
    Passing,
}

/// What a [`HeaderGuard`] fails a read with, inside an `io::Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a PROXY header from a source not in proxy_protocol_from")]
pub(crate) struct UnexpectedHeader;

impl<S> HeaderGuard<S> {
    pub fn new(inner: S) -> HeaderGuard<S> {
        HeaderGuard {
            inner,
            held: [0; V2_SIGNATURE.len()],
            held_len: 0,
            state: Guard::Undecided,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HeaderGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.state {
                Guard::Passing => return Pin::new(&mut this.inner).poll_read(cx, buf),
                Guard::Releasing(from) => {
                    let n = buf.remaining().min(this.held_len - from);
                    buf.put_slice(&this.held[from..from + n]);
                    this.state = if from + n == this.held_len {
                        Guard::Passing
                    } else {
                        Guard::Releasing(from + n)
                    };
                    return Poll::Ready(Ok(()));
                }
                Guard::Undecided => {
                    // No more than a signature: anything further is the
                    // reader's, into its own buffer.
                    let mut first = ReadBuf::new(&mut this.held[this.held_len..]);
                    ready!(Pin::new(&mut this.inner).poll_read(cx, &mut first))?;
                    let n = first.filled().len();
                    this.held_len += n;
                    let ended = n == 0;
                    match signature(&this.held[..this.held_len]) {
                        Signature::V1 | Signature::V2 => {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                UnexpectedHeader,
                            )))
                        }
                        Signature::Undecided if !ended => {}
                        // The end of the stream, or not a header: what was
                        // held goes to the reader (nothing, at once, ends
                        // the stream).
                        Signature::Undecided | Signature::None => {
                            if this.held_len == 0 {
                                this.state = Guard::Passing;
                                return Poll::Ready(Ok(()));
                            }
                            this.state = Guard::Releasing(0);
                        }
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeaderGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// A v2 header: `command` (0 LOCAL, 1 PROXY), `family`, then `block`.
    fn v2(command: u8, family: u8, block: &[u8]) -> Vec<u8> {
        let mut header = V2_SIGNATURE.to_vec();
        header.push(0x20 | command);
        header.push(family);
        header.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
        header.extend_from_slice(block);
        header
    }

    /// The address block of TCP over IPv4 or IPv6, from `source` to `destination`.
    fn addresses(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
        let mut block = Vec::new();
        for a in [source, destination] {
            match a.ip() {
                IpAddr::V4(ip) => block.extend_from_slice(&ip.octets()),
                IpAddr::V6(ip) => block.extend_from_slice(&ip.octets()),
            }
        }
        block.extend_from_slice(&source.port().to_be_bytes());
        block.extend_from_slice(&destination.port().to_be_bytes());
        block
    }

    fn tcp4_v2(source: &str) -> Vec<u8> {
        v2(0x1, 0x11, &addresses(addr(source), addr("127.0.0.1:50001")))
    }

    /// Parses `header` followed by a request, and checks that every
    /// shorter prefix of the header asks for more.
    fn parse_whole(header: &[u8]) -> Result<Header, HeaderError> {
        for end in 0..header.len() {
            assert_eq!(parse(&header[..end]), Ok(None), "{end} bytes of {header:?}");
        }
        let mut bytes = header.to_vec();
        bytes.extend_from_slice(b"{\"id\":1}\n");
        parse(&bytes).map(|parsed| {
            let (header_parsed, len) = parsed.expect("a whole header");
            assert_eq!(len, header.len(), "exactly the header is taken");
            header_parsed
        })
    }

    #[test]
    fn v1_headers_name_the_client() {
        for (line, client) in [
            ("PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001\r\n", Some("192.0.2.7:56324")),
            ("PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n", Some("255.255.255.255:65535")),
            ("PROXY TCP4 0.0.0.0 127.0.0.1 0 50001\r\n", Some("0.0.0.0:0")),
            ("PROXY TCP6 2001:db8::7 ::1 443 50002\r\n", Some("[2001:db8::7]:443")),
            (
                "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
                Some("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
            ),
            ("PROXY UNKNOWN\r\n", None),
            (
                "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
                None,
            ),
        ] {
            let want = client.map_or(Header::Unrelayed, |c| Header::Relayed(addr(c)));
            assert_eq!(parse_whole(line.as_bytes()), Ok(want), "{line:?}");
        }
        // The spec's longest line is 107 bytes, and is accepted.
        let longest = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(longest.len(), V1_BYTES_MAX);
    }

    #[test]
    fn malformed_v1_headers_are_refused() {
        for line in [
            "PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001\n",
            "PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001\rX",
            "PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001\n\r",
            "PROXY TCP4 192.0.2.7 127.0.0.1 56324\r\n",
            "PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001 7\r\n",
            "PROXY TCP4  192.0.2.7 127.0.0.1 56324 50001\r\n",
            "PROXY TCP4 192.0.2.7 127.0.0.1 056324 50001\r\n",
            "PROXY TCP4 192.0.2.7 127.0.0.1 65536 50001\r\n",
            "PROXY TCP4 192.0.2.7 127.0.0.1 +5 50001\r\n",
            "PROXY TCP4 192.0.2.7 127.0.0.1 -1 50001\r\n",
            "PROXY TCP4 192.0.2.007 127.0.0.1 56324 50001\r\n",
            "PROXY TCP4 192.0.2 127.0.0.1 56324 50001\r\n",
            "PROXY TCP4 2001:db8::7 ::1 56324 50001\r\n",
            "PROXY TCP6 192.0.2.7 127.0.0.1 56324 50001\r\n",
            "PROXY UDP4 192.0.2.7 127.0.0.1 56324 50001\r\n",
            "PROXY tcp4 192.0.2.7 127.0.0.1 56324 50001\r\n",
            "PROXY \r\n",
            "PROXY TCP4 192.0.2.\u{e9} 127.0.0.1 56324 50001\r\n",
        ] {
            assert!(
                matches!(parse(line.as_bytes()), Err(HeaderError::V1Malformed(_))),
                "{line:?}: {:?}",
                parse(line.as_bytes())
            );
        }
        // No CRLF in the first 107 bytes: refused, however much follows.
        let endless = format!("PROXY UNKNOWN {}", "f".repeat(200));
        assert_eq!(parse(&endless.as_bytes()[..106]), Ok(None));
        assert_eq!(
            parse(&endless.as_bytes()[..107]),
            Err(HeaderError::V1TooLong)
        );
        assert_eq!(parse(endless.as_bytes()), Err(HeaderError::V1TooLong));
        // A CR as the 107th byte cannot be followed by the LF in time.
        let late = format!("PROXY UNKNOWN {}\r\n", "f".repeat(92));
        assert_eq!(late.find('\r'), Some(106));
        assert!(parse(late.as_bytes()).is_err());
    }

    #[test]
    fn v2_headers_name_the_client_and_skip_the_rest() {
        assert_eq!(
            parse_whole(&tcp4_v2("192.0.2.7:56324")),
            Ok(Header::Relayed(addr("192.0.2.7:56324")))
        );
        let tcp6 = v2(
            0x1,
            0x21,
            &addresses(addr("[2001:db8:1:2::7]:443"), addr("[::1]:50001")),
        );
        assert_eq!(
            parse_whole(&tcp6),
            Ok(Header::Relayed(addr("[2001:db8:1:2::7]:443")))
        );
        // TLVs after the addresses (here HAProxy's unique ID and a NOOP)
        // are skipped.
        let mut block = addresses(addr("192.0.2.7:1"), addr("127.0.0.1:2"));
        block.extend_from_slice(&[0x05, 0x00, 0x03, b'a', b'b', b'c', 0x04, 0x00, 0x00]);
        assert_eq!(
            parse_whole(&v2(0x1, 0x11, &block)),
            Ok(Header::Relayed(addr("192.0.2.7:1")))
        );
        // The largest block allowed.
        let mut block = addresses(addr("192.0.2.7:1"), addr("127.0.0.1:2"));
        block.resize(V2_ADDRESS_BYTES_MAX, 0);
        assert_eq!(
            parse_whole(&v2(0x1, 0x11, &block)),
            Ok(Header::Relayed(addr("192.0.2.7:1")))
        );
        // LOCAL (a health check): the socket's address, whatever the
        // family says and whatever address bytes come along.
        for local in [
            v2(0x0, 0x00, &[]),
            v2(
                0x0,
                0x11,
                &addresses(addr("192.0.2.7:1"), addr("127.0.0.1:2")),
            ),
            v2(0x0, 0x11, &[]),
        ] {
            assert_eq!(parse_whole(&local), Ok(Header::Unrelayed), "{local:?}");
        }
        // Families a TCP client cannot come from: the socket's address.
        for (family, len) in [
            (0x00, 0),
            (0x00, 12),
            (0x31, 216),
            (0x32, 216),
            (0x12, 12),
            (0x22, 36),
        ] {
            let header = v2(0x1, family, &vec![7; len]);
            assert_eq!(parse_whole(&header), Ok(Header::Unrelayed), "{family:#x}");
        }
        assert_eq!(
            Header::Unrelayed.client(addr("127.0.0.1:4000")),
            addr("127.0.0.1:4000")
        );
        assert_eq!(
            Header::Relayed(addr("192.0.2.7:1")).client(addr("127.0.0.1:4000")),
            addr("192.0.2.7:1")
        );
    }

    #[test]
    fn malformed_v2_headers_are_refused() {
        let mut wrong_version = tcp4_v2("192.0.2.7:1");
        wrong_version[12] = 0x11;
        assert_eq!(parse(&wrong_version), Err(HeaderError::V2Version(1)));
        let mut wrong_command = tcp4_v2("192.0.2.7:1");
        wrong_command[12] = 0x22;
        assert_eq!(parse(&wrong_command), Err(HeaderError::V2Command(2)));
        for family in [0x41, 0x13, 0xff] {
            let header = v2(0x1, family, &[0; 12]);
            assert_eq!(parse(&header), Err(HeaderError::V2Family(family)));
        }
        // The length is refused from the fixed part alone: nothing more is
        // read or buffered.
        let mut oversized = v2(0x1, 0x11, &[]);
        oversized[14..16].copy_from_slice(&1025u16.to_be_bytes());
        assert_eq!(parse(&oversized), Err(HeaderError::V2TooLong(1025)));
        oversized[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(parse(&oversized), Err(HeaderError::V2TooLong(65535)));
        assert_eq!(
            parse(&v2(0x1, 0x11, &[0; 11])),
            Err(HeaderError::V2AddressesShort { need: 12, len: 11 })
        );
        assert_eq!(
            parse(&v2(0x1, 0x21, &[0; 12])),
            Err(HeaderError::V2AddressesShort { need: 36, len: 12 })
        );
    }

    #[test]
    fn what_clients_send_first_is_not_a_header() {
        for first in [
            &b"{\"jsonrpc\":\"2.0\"}\n"[..],
            b"[{\"id\":1}]\n",
            b"GET / HTTP/1.1\r\n",
            &[0x16, 0x03, 0x01, 0x02, 0x00],
            b"PROXZ TCP4",
            b"PROXYTCP4",
            b"\r\n\r\n\0\r\nQUIZ\n",
            b"\r\n{}",
        ] {
            assert!(
                matches!(parse(first), Err(HeaderError::Missing(_))),
                "{first:?}"
            );
            let mut guarded = Vec::new();
            let mut undecided = true;
            for b in first {
                guarded.push(*b);
                undecided &= signature(&guarded) == Signature::Undecided;
            }
            assert!(!undecided, "{first:?} tells");
        }
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\n").unwrap_err().to_string(),
            "no PROXY header: the connection starts with \"GET / HT\""
        );
    }

    /// Mutated headers and random bytes: the parser never panics, never
    /// claims more bytes than it has or than a header may have, asks for
    /// more only while under the largest header, and a header it finds is
    /// found again in its own bytes alone. The seed comes from
    /// `$OSPREY_TEST_SEED` when set, and is printed on failure.
    #[test]
    fn mutated_headers_parse_or_fail_cleanly() {
        let seed: u64 = std::env::var("OSPREY_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x05ee_d0f9_b0c5);
        let mut state = seed | 1;
        let mut next = move || {
            // xorshift64: enough to spread mutations, and replayable.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let valid: Vec<Vec<u8>> = vec![
            b"PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001\r\n".to_vec(),
            b"PROXY TCP6 2001:db8::7 ::1 443 50002\r\n".to_vec(),
            b"PROXY UNKNOWN\r\n".to_vec(),
            tcp4_v2("192.0.2.7:56324"),
            v2(
                0x1,
                0x21,
                &addresses(addr("[2001:db8::7]:443"), addr("[::1]:1")),
            ),
            v2(0x0, 0x00, &[]),
        ];
        for round in 0..200_000 {
            let mut bytes = valid[(next() % valid.len() as u64) as usize].clone();
            for _ in 0..next() % 4 {
                match next() % 4 {
                    0 if !bytes.is_empty() => {
                        let i = (next() % bytes.len() as u64) as usize;
                        bytes[i] = next() as u8;
                    }
                    1 => bytes.truncate((next() % (bytes.len() as u64 + 1)) as usize),
                    2 => bytes.extend((0..next() % 64).map(|_| next() as u8)),
                    _ => bytes.insert(0, next() as u8),
                }
            }
            let parsed = parse(&bytes);
            let context = || format!("seed {seed}, round {round}: {bytes:?} -> {parsed:?}");
            match &parsed {
                Ok(Some((header, len))) => {
                    assert!(
                        *len <= bytes.len() && *len <= HEADER_BYTES_MAX,
                        "{}",
                        context()
                    );
                    assert_eq!(
                        parse(&bytes[..*len]),
                        Ok(Some((*header, *len))),
                        "{}",
                        context()
                    );
                }
                Ok(None) => assert!(bytes.len() < HEADER_BYTES_MAX, "{}", context()),
                Err(_) => {}
            }
        }
    }

    /// A connected pair of sockets on loopback: (client, server).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    /// Everything left on `stream` until the other end closes.
    async fn rest<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<Vec<u8>> {
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await?;
        Ok(rest)
    }

    #[tokio::test]
    async fn reading_a_header_leaves_what_follows_on_the_socket() {
        let v1 = b"PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001\r\n".to_vec();
        for header in [v1, tcp4_v2("192.0.2.7:56324")] {
            let (mut client, mut server) = pair().await;
            let mut sent = header.clone();
            // What follows looks like a header too: it must be left alone.
            sent.extend_from_slice(b"PROXY TCP4 10.0.0.1 127.0.0.1 1 2\r\n{\"id\":1}\n");
            client.write_all(&sent).await.unwrap();
            drop(client);
            assert_eq!(
                read_header(&mut server).await,
                Ok(Header::Relayed(addr("192.0.2.7:56324")))
            );
            assert_eq!(rest(&mut server).await.unwrap(), &sent[header.len()..]);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_header_sent_a_byte_at_a_time_is_read_in_time() {
        for header in [
            b"PROXY TCP6 2001:db8::7 ::1 443 50002\r\n".to_vec(),
            v2(
                0x1,
                0x21,
                &addresses(addr("[2001:db8::7]:443"), addr("[::1]:50002")),
            ),
        ] {
            let (mut client, mut server) = pair().await;
            let started = tokio::time::Instant::now();
            let sent = header.clone();
            let writer = tokio::spawn(async move {
                for b in sent {
                    client.write_all(&[b]).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                client.write_all(b"{}\n").await.unwrap();
            });
            assert_eq!(
                read_header(&mut server).await,
                Ok(Header::Relayed(addr("[2001:db8::7]:443")))
            );
            assert!(started.elapsed() < HEADER_TIMEOUT);
            writer.await.unwrap();
            assert_eq!(rest(&mut server).await.unwrap(), b"{}\n");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_or_cut_header_is_refused() {
        // Part of a header, then nothing: refused at the deadline.
        let (mut client, mut server) = pair().await;
        client.write_all(b"PROXY TCP4 192.0.2.7 ").await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(
            read_header(&mut server).await,
            Err(HeaderError::Timeout(HEADER_TIMEOUT))
        );
        assert!(started.elapsed() >= HEADER_TIMEOUT);
        // Nothing at all: the same.
        let (_silent, mut server) = pair().await;
        assert_eq!(
            read_header(&mut server).await,
            Err(HeaderError::Timeout(HEADER_TIMEOUT))
        );
        // Part of a header, then the end of the connection.
        for part in [&b"PROXY TCP4 192.0.2.7 "[..], &tcp4_v2("192.0.2.7:1")[..20]] {
            let (mut client, mut server) = pair().await;
            client.write_all(part).await.unwrap();
            drop(client);
            assert_eq!(
                read_header(&mut server).await,
                Err(HeaderError::Truncated(part.len()))
            );
        }
        // A client that never heard of the PROXY protocol.
        let (mut client, mut server) = pair().await;
        client.write_all(b"{\"id\":1}\n").await.unwrap();
        assert!(matches!(
            read_header(&mut server).await,
            Err(HeaderError::Missing(_))
        ));
        // An endless v1 line: refused at 107 bytes, not read on.
        let (mut client, mut server) = pair().await;
        client.write_all(&[b'P'; 1]).await.unwrap();
        client
            .write_all(format!("ROXY UNKNOWN {}", "f".repeat(5000)).as_bytes())
            .await
            .unwrap();
        assert_eq!(read_header(&mut server).await, Err(HeaderError::V1TooLong));
    }

    #[tokio::test]
    async fn the_guard_passes_clients_through_untouched() {
        for sent in [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1}\n"[..],
            b"\r\n{\"id\":1}\n",
            b"\r\n\r\n\0\r\nQUIZ\n",
            b"PRO",
            b"P",
            b"",
            &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5],
        ] {
            let (mut client, server) = pair().await;
            client.write_all(sent).await.unwrap();
            drop(client);
            let mut guarded = HeaderGuard::new(server);
            assert_eq!(rest(&mut guarded).await.unwrap(), sent, "{sent:?}");
        }
        // Reads into a small buffer get the held bytes piece by piece.
        let (mut client, server) = pair().await;
        client.write_all(b"\r\n\r\n{}\n").await.unwrap();
        drop(client);
        let mut guarded = HeaderGuard::new(server);
        let mut got = Vec::new();
        let mut one = [0u8; 1];
        while guarded.read(&mut one).await.unwrap() == 1 {
            got.push(one[0]);
        }
        assert_eq!(got, b"\r\n\r\n{}\n");
    }

    #[tokio::test]
    async fn the_guard_closes_a_stream_that_starts_with_a_header() {
        let v1 = b"PROXY TCP4 192.0.2.7 127.0.0.1 56324 50001\r\n{}\n".to_vec();
        for sent in [
            v1,
            tcp4_v2("192.0.2.7:1"),
            b"PROXY ".to_vec(),
            V2_SIGNATURE.to_vec(),
        ] {
            let (mut client, server) = pair().await;
            // In pieces: the guard waits for enough bytes to tell.
            for piece in sent.chunks(3) {
                client.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            let mut guarded = HeaderGuard::new(server);
            let error = rest(&mut guarded).await.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData);
            assert_eq!(
                error.to_string(),
                "a PROXY header from a source not in proxy_protocol_from"
            );
            drop(client);
        }
    }
}
