//! The four ways a wallet connects, behind one interface so that the
//! session (`session.rs`) is written once: newline-terminated lines over TCP
//! or TLS, and one JSON-RPC message (a request, a batch, a response or a
//! notification) per WebSocket message over plain or TLS WebSocket, as
//! ElectrumX and Fulcrum do for browser wallets.
//!
//! Why the session asks for whole requests rather than reading bytes
//! through an AsyncRead shim over the WebSocket: a WebSocket already frames
//! requests, and turning its messages back into a byte stream would split
//! them again on newlines (JSON allows them as whitespace), and would hide
//! the size error that tungstenite raises before buffering an oversized
//! message. So framing, the size limit and closing belong to the transport,
//! and the session only sees [`Frame`]s in and lines out.

use crate::framer::{Frame, LineFramer};
use crate::proxy_protocol::HeaderGuard;
use crate::tls::Tls;
use futures_util::{SinkExt, StreamExt};
use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

/// Bytes read from a line-framed socket at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerKind {
    /// Newline-framed JSON-RPC over TCP (Electrum's `t`).
    Tcp,
    /// The same over TLS (Electrum's `s`).
    Tls,
    /// One JSON-RPC message per WebSocket message.
    Ws,
    /// The same over TLS.
    Wss,
}

impl ListenerKind {
    pub(crate) fn uses_tls(self) -> bool {
        matches!(self, ListenerKind::Tls | ListenerKind::Wss)
    }
}

impl fmt::Display for ListenerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListenerKind::Tcp => "tcp",
            ListenerKind::Tls => "tls",
            ListenerKind::Ws => "ws",
            ListenerKind::Wss => "wss",
        })
    }
}

/// A connection's bytes, in clear or through TLS; either way closed if
/// they start with a PROXY header (see [`HeaderGuard`]).
pub(crate) enum Stream {
    Plain(HeaderGuard<TcpStream>),
    Tls(Box<TlsStream<HeaderGuard<TcpStream>>>),
}

/// A connection after its handshakes: what the session reads requests from
/// and writes responses and notifications to.
pub(crate) enum Transport {
    Lines {
        stream: BufWriter<Stream>,
        framer: LineFramer,
        buf: Vec<u8>,
    },
    WebSocket {
        ws: Box<WebSocketStream<Stream>>,
        /// The last message received, until the session takes it.
        pending: Option<Frame>,
        /// A message went over the limit: the rest of it is still on the
        /// wire, so nothing more can be read.
        overflowed: bool,
        line_bytes_max: usize,
    },
}

impl Transport {
    /// Runs the TLS and WebSocket handshakes `kind` needs (the caller
    /// bounds them in time). `tcp` is past the PROXY header, if its source
    /// sends one: a further header closes the connection.
    ///
    /// # Errors
    /// A failed handshake, or a PROXY header.
    pub async fn open(
        kind: ListenerKind,
        tcp: TcpStream,
        tls: Option<&Tls>,
        line_bytes_max: usize,
    ) -> io::Result<Transport> {
        let tcp = HeaderGuard::new(tcp);
        let stream = match (kind.uses_tls(), tls) {
            (false, _) => Stream::Plain(tcp),
            (true, Some(tls)) => Stream::Tls(Box::new(tls.accept(tcp).await?)),
            (true, None) => return Err(io::Error::other("no TLS certificate configured")),
        };
        match kind {
            ListenerKind::Tcp | ListenerKind::Tls => Ok(Transport::Lines {
                stream: BufWriter::new(stream),
                framer: LineFramer::new(line_bytes_max),
                buf: vec![0; READ_CHUNK_BYTES],
            }),
            ListenerKind::Ws | ListenerKind::Wss => {
                // A message is at most a request line; a frame may be the
                // whole message.
                let config = WebSocketConfig::default()
                    .max_message_size(Some(line_bytes_max))
                    .max_frame_size(Some(line_bytes_max));
                let ws = tokio_tungstenite::accept_async_with_config(stream, Some(config))
                    .await
                    .map_err(ws_to_io)?;
                Ok(Transport::WebSocket {
                    ws: Box::new(ws),
                    pending: None,
                    overflowed: false,
                    line_bytes_max,
                })
            }
        }
    }

    /// The next request already received, if any.
    pub fn next_frame(&mut self) -> Option<Frame> {
        match self {
            Transport::Lines { framer, .. } => framer.next_frame(),
            Transport::WebSocket { pending, .. } => pending.take(),
        }
    }

    /// Bytes of requests received and not yet taken. A WebSocket message
    /// counts once complete: tungstenite assembles it up to the line limit,
    /// so a session's incomplete message is bounded by that limit alone.
    pub fn buffered(&self) -> usize {
        match self {
            Transport::Lines { framer, .. } => framer.buffered(),
            Transport::WebSocket { pending, .. } => match pending {
                Some(Frame::Line(line)) => line.len(),
                _ => 0,
            },
        }
    }

    /// Waits for more input; `Ok(false)` at the end of the stream.
    /// Cancel-safe: nothing received is lost if the future is dropped.
    ///
    /// # Errors
    /// I/O errors, a WebSocket protocol error, and reading on after an
    /// oversized WebSocket message.
    pub async fn receive(&mut self) -> io::Result<bool> {
        match self {
            Transport::Lines {
                stream,
                framer,
                buf,
            } => {
                let n = stream.read(buf).await?;
                framer.push(&buf[..n]);
                Ok(n > 0)
            }
            Transport::WebSocket {
                ws,
                pending,
                overflowed,
                line_bytes_max,
            } => {
                if *overflowed {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("WebSocket message over {line_bytes_max} bytes"),
                    ));
                }
                match ws.next().await {
                    None => Ok(false),
                    Some(Ok(Message::Text(text))) => {
                        *pending = Some(Frame::Line(text.as_bytes().to_vec()));
                        Ok(true)
                    }
                    Some(Ok(Message::Binary(bytes))) => {
                        *pending = Some(Frame::Line(bytes.to_vec()));
                        Ok(true)
                    }
                    Some(Ok(Message::Close(_))) => Ok(false),
                    // tungstenite answers pings itself.
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => Ok(true),
                    Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) => {
                        *pending = Some(Frame::TooLong);
                        *overflowed = true;
                        Ok(true)
                    }
                    // The end of the stream, with or without a close frame.
                    Some(Err(
                        WsError::ConnectionClosed
                        | WsError::AlreadyClosed
                        | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake),
                    )) => Ok(false),
                    Some(Err(e)) => Err(ws_to_io(e)),
                }
            }
        }
    }

    /// Queues one line (a response or a notification); see [`Self::flush`].
    ///
    /// # Errors
    /// I/O errors.
    pub async fn write_line(&mut self, line: &str) -> io::Result<()> {
        match self {
            Transport::Lines { stream, .. } => {
                stream.write_all(line.as_bytes()).await?;
                stream.write_all(b"\n").await
            }
            Transport::WebSocket { ws, .. } => ws.feed(Message::text(line)).await.map_err(ws_to_io),
        }
    }

    /// Sends what was queued.
    ///
    /// # Errors
    /// I/O errors.
    pub async fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Lines { stream, .. } => stream.flush().await,
            Transport::WebSocket { ws, .. } => SinkExt::flush(ws.as_mut()).await.map_err(ws_to_io),
        }
    }

    /// Ends the connection politely: a TLS close_notify, a WebSocket close
    /// frame (code 1009 after an oversized message), then the TCP FIN.
    ///
    /// # Errors
    /// I/O errors (the peer may be gone already).
    pub async fn close(&mut self) -> io::Result<()> {
        match self {
            Transport::Lines { stream, .. } => stream.shutdown().await,
            Transport::WebSocket {
                ws,
                overflowed,
                line_bytes_max,
                ..
            } => {
                let frame = overflowed.then(|| CloseFrame {
                    code: CloseCode::Size,
                    reason: format!("message over {line_bytes_max} bytes").into(),
                });
                WebSocketStream::close(ws, frame).await.map_err(ws_to_io)
            }
        }
    }
}

fn ws_to_io(error: WsError) -> io::Error {
    match error {
        WsError::Io(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
