//! One client connection, from the first byte to the last: the connection limit, the size
//! of every message (small before login), and pgwire's message loop.
//!
//! pgwire's `process_socket` accepts a message of up to 1 GiB in any state, before a
//! password was ever checked. This module runs the same loop over pgwire's public pieces
//! (`negotiate_tls`, `process_message`, `process_error`) with a [`FrameGuard`] between the
//! socket (after TLS) and pgwire's decoder, which reads each message's length as it arrives
//! and refuses one over the limit before its body is buffered.

use std::fs::File;
use std::io;
use std::io::BufReader;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use datafusion_postgres::pgwire;
use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::ErrorInfo;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::PasswordMessageFamily;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::TlsAcceptor;
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use pgwire::tokio::tokio_rustls::rustls;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};

use super::limits::{PRE_LOGIN_MESSAGE_BYTES, ServeLimits};
use super::sessions::{
    Registration, Session, Stop, Tracking, startup_statement_timeout, startup_time_zone,
};
use super::sqlstate;

/// Serves one connection with `handlers` until the client leaves, within `limits`: it must
/// log in within `--login-timeout`, messages after login may have at most
/// `--max-message-bytes`, and a session idle outside a transaction block is closed after
/// `--idle-timeout`.
pub async fn serve_connection<H: PgWireServerHandlers>(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    handlers: H,
    limits: &ServeLimits,
    tracking: Tracking,
) -> io::Result<()> {
    #[cfg(unix)]
    let fd = Some(std::os::fd::AsRawFd::as_raw_fd(&socket));
    let max_message_bytes = limits.max_message_bytes;
    // The login's time is the client's: only time spent waiting for its bytes counts, so a
    // server busy answering (a statement planning on every worker) does not close a client
    // that answers at once.
    let mut login_left = limits.login_timeout;
    let waiting = tokio::time::Instant::now();
    let negotiated = tokio::select! {
        _ = tokio::time::sleep(login_left) => return Ok(()),
        negotiated = negotiate_tls(socket, tls) => negotiated?,
    };
    login_left = login_left.saturating_sub(waiting.elapsed());
    let Some(negotiated) = negotiated else {
        return Ok(());
    };
    let parts = negotiated.into_parts();
    let logged_in = Arc::new(AtomicBool::new(false));
    let mut guard = FrameGuard {
        io: parts.io,
        framing: Framing::default(),
        logged_in: Arc::clone(&logged_in),
        max_message_bytes,
    };
    // Bytes pgwire read while negotiating are the start of the first message.
    if let Err(e) = guard.observe(&parts.read_buf) {
        let _ = e;
        return Ok(());
    }
    let mut guarded = FramedParts::new(guard, parts.codec);
    guarded.read_buf = parts.read_buf;
    guarded.write_buf = parts.write_buf;
    let mut socket = Framed::from_parts(guarded);

    let startup = handlers.startup_handler();
    let simple = handlers.simple_query_handler();
    let extended = handlers.extended_query_handler();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel_handler();
    // The session once logged in, and its place in the server's registry (left when this
    // function returns).
    let mut session: Option<(Arc<Session>, Registration)> = None;
    // Whether the client's SASL initial response has come (the first password message).
    let mut sasl_started = false;
    loop {
        // How long a session waiting outside a transaction block may stay idle.
        let idle = limits
            .idle_timeout
            .filter(|_| socket.transaction_status() == TransactionStatus::Idle);
        let message = match &session {
            Some((session, _)) => tokio::select! {
                message = socket.next() => message,
                _ = session.terminated.cancelled() => {
                    let _ = socket.send(PgWireBackendMessage::ErrorResponse(
                        error_info(Stop::Terminated.error()).into(),
                    )).await;
                    break;
                }
                _ = async {
                    match idle {
                        Some(timeout) => tokio::time::sleep(timeout).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let info = ErrorInfo::new(
                        "FATAL".into(),
                        "57P05".into(), // idle_session_timeout
                        "terminating connection due to idle-session timeout (--idle-timeout)"
                            .into(),
                    );
                    let _ = socket.send(PgWireBackendMessage::ErrorResponse(info.into())).await;
                    break;
                }
            },
            None => {
                let waiting = tokio::time::Instant::now();
                let message = tokio::select! {
                    _ = tokio::time::sleep(login_left) => None,
                    message = socket.next() => message,
                };
                login_left = login_left.saturating_sub(waiting.elapsed());
                message
            }
        };
        let message = match message {
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                // An over-long message (or a broken one): say why, then close.
                let code = match &e {
                    pgwire::error::PgWireError::IoError(io)
                        if io.kind() == io::ErrorKind::InvalidData =>
                    {
                        "54000" // program_limit_exceeded: the frame guard's refusal
                    }
                    _ => "08P01", // protocol_violation
                };
                let info = ErrorInfo::new("FATAL".into(), code.into(), e.to_string());
                let _ = socket
                    .send(PgWireBackendMessage::ErrorResponse(info.into()))
                    .await;
                break;
            }
            None => break,
        };
        if matches!(message, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        // pgwire decodes the first password message as SASL's initial response and panics
        // on one whose lengths are wrong (a missing length, or one past the message's end):
        // such a message gets PostgreSQL's protocol violation instead, before pgwire reads it.
        if session.is_none()
            && let PgWireFrontendMessage::PasswordMessageFamily(password) = &message
            && !std::mem::replace(&mut sasl_started, true)
            && let Err(why) = check_sasl_initial_response(password)
        {
            log::warn!("connection from {}: {why}", socket.socket_addr());
            let info = ErrorInfo::new("FATAL".into(), "08P01".into(), why);
            let _ = socket
                .send(PgWireBackendMessage::ErrorResponse(info.into()))
                .await;
            break;
        }
        let is_extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        if let Err(e) = process_message(
            message,
            &mut socket,
            startup.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await
        {
            let e = match e {
                pgwire::error::PgWireError::InvalidPassword(_) => {
                    sqlstate::login_failed(socket.metadata().get("user").map_or("", String::as_str))
                }
                e => e,
            };
            let fatal =
                matches!(&e, pgwire::error::PgWireError::UserError(info) if info.is_fatal());
            process_error(&mut socket, e, is_extended_query).await?;
            // pgwire has closed the socket (and marked it ready for a query): nothing more.
            if fatal {
                break;
            }
        }
        if session.is_none() && matches!(socket.state(), PgWireConnectionState::ReadyForQuery) {
            logged_in.store(true, Ordering::Relaxed);
            session = Some(log_in(&mut socket, &tracking, fd));
        }
        if session
            .as_ref()
            .is_some_and(|(s, _)| s.terminated.is_cancelled())
        {
            break;
        }
    }
    Ok(())
}

/// Registers a connection that has just logged in as a session of the server, and applies
/// the `statement_timeout` of its startup message.
fn log_in<C: ClientInfo>(
    client: &mut C,
    tracking: &Tracking,
    #[cfg(unix)] fd: Option<std::os::fd::RawFd>,
) -> (Arc<Session>, Registration) {
    if let Some(timeout) = startup_statement_timeout(client.metadata()) {
        client.metadata_mut().insert(
            "statement_timeout_ms".into(),
            timeout.as_millis().to_string(),
        );
    }
    if let Some(zone) = startup_time_zone(client.metadata()) {
        // As `SET TIME ZONE` does: `now()`, casts and the zone results are shown in.
        let state = tracking.ctx.state_ref();
        state.write().config_mut().options_mut().execution.time_zone = Some(zone);
    }
    let session = Arc::new(Session::new(client, fd));
    client.session_extensions().insert(Arc::clone(&session));
    let _ = tracking.slot.set(Arc::clone(&session));
    let registration = tracking.sessions.register(Arc::clone(&session));
    (session, registration)
}

/// Whether `message`, the first password message of a SASL login, is a well-formed
/// SASLInitialResponse: a mechanism name ended by NUL, then a length of -1 or of exactly
/// the bytes that follow.
fn check_sasl_initial_response(message: &PasswordMessageFamily) -> Result<(), String> {
    let PasswordMessageFamily::Raw(body) = message else {
        return Ok(());
    };
    let malformed = |why: &str| Err(format!("invalid SASL initial response: {why}"));
    let Some(nul) = body.iter().position(|&b| b == 0) else {
        return malformed("the mechanism name has no terminator");
    };
    let rest = &body[nul + 1..];
    let Some(length) = rest.get(..4) else {
        return malformed("the response has no length");
    };
    let length = i32::from_be_bytes(length.try_into().expect("4 bytes"));
    let data = rest.len() - 4;
    if length == -1 || usize::try_from(length).is_ok_and(|n| n == data) {
        Ok(())
    } else {
        malformed(&format!(
            "its length says {length} bytes, the message holds {data}"
        ))
    }
}

fn error_info(error: pgwire::error::PgWireError) -> ErrorInfo {
    match error {
        pgwire::error::PgWireError::UserError(info) => *info,
        other => ErrorInfo::new("ERROR".into(), "XX000".into(), other.to_string()),
    }
}

/// Where the reader stands in the stream of messages.
#[derive(Debug, Default)]
struct Framing {
    /// Whether the first (untyped) message has been read past.
    past_first: bool,
    /// Header bytes read so far (type byte and length, or the length alone).
    header: [u8; 5],
    header_len: usize,
    /// Body bytes of the current message still to come.
    body_left: u64,
}

/// The socket as pgwire's decoder reads it, with each message's length checked on arrival.
pub struct FrameGuard<IO> {
    io: IO,
    framing: Framing,
    logged_in: Arc<AtomicBool>,
    max_message_bytes: usize,
}

impl<IO> FrameGuard<IO> {
    /// Follows the message boundaries through `bytes`; an error names a message over the
    /// limit of the connection's state.
    fn observe(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        let limit = if self.logged_in.load(Ordering::Relaxed) {
            self.max_message_bytes
        } else {
            PRE_LOGIN_MESSAGE_BYTES
        };
        let f = &mut self.framing;
        while !bytes.is_empty() {
            if f.body_left > 0 {
                let n = (f.body_left as usize).min(bytes.len());
                f.body_left -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            // The first message (startup or cancel request) has no type byte.
            let header_size = if f.past_first { 5 } else { 4 };
            let n = (header_size - f.header_len).min(bytes.len());
            f.header[f.header_len..f.header_len + n].copy_from_slice(&bytes[..n]);
            f.header_len += n;
            bytes = &bytes[n..];
            if f.header_len < header_size {
                break;
            }
            let at = header_size - 4;
            let length = u32::from_be_bytes(f.header[at..at + 4].try_into().expect("4 bytes"));
            if length < 4 || length as usize > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "a message of {length} bytes is over this server's limit of {limit}{}",
                        if self.logged_in.load(Ordering::Relaxed) {
                            " (--max-message-bytes)"
                        } else {
                            " before login"
                        }
                    ),
                ));
            }
            f.body_left = length as u64 - 4;
            f.header_len = 0;
            f.past_first = true;
        }
        Ok(())
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for FrameGuard<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let fresh = buf.filled()[before..].to_vec();
            self.observe(&fresh)?;
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for FrameGuard<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Answers a connection over `--max-connections` with PostgreSQL's FATAL 53300 and closes it,
/// after its startup message as PostgreSQL does (a client that opens with an SSL or GSS
/// request is told "no" first, so that it reads the error instead of a failed handshake).
pub async fn refuse_busy(mut socket: TcpStream, max: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let read_startup = async {
        for _ in 0..3 {
            let length = socket.read_u32().await? as usize;
            if !(8..=PRE_LOGIN_MESSAGE_BYTES).contains(&length) {
                return Ok::<(), io::Error>(());
            }
            let mut body = vec![0u8; length - 4];
            socket.read_exact(&mut body).await?;
            let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
            // SSLRequest and GSSENCRequest: refuse, and read the startup message after it.
            if length == 8 && (code == 80_877_103 || code == 80_877_104) {
                socket.write_all(b"N").await?;
                continue;
            }
            return Ok(());
        }
        Ok(())
    };
    if tokio::time::timeout(Duration::from_secs(5), read_startup)
        .await
        .is_err()
    {
        return;
    }
    write_fatal(
        &mut socket,
        "53300", // too_many_connections
        &format!("sorry, too many clients already (this server admits {max}: --max-connections)"),
    )
    .await;
}

/// Writes a FATAL ErrorResponse straight to a socket no protocol state has been set up for.
pub async fn write_fatal(socket: &mut TcpStream, code: &str, message: &str) {
    use tokio::io::AsyncWriteExt;
    let mut fields = Vec::new();
    for (tag, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', message),
    ] {
        fields.push(tag);
        fields.extend_from_slice(value.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut out = vec![b'E'];
    out.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(&fields);
    let _ = socket.write_all(&out).await;
    let _ = socket.shutdown().await;
}

/// Whether a connection opens with PostgreSQL's SSLRequest (length 8, code 80877103): with
/// `--require-tls`, anything else is refused before a password or a query is read.
pub(super) async fn asks_for_tls(socket: &tokio::net::TcpStream) -> bool {
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut first = [0u8; 8];
    peek_exact(socket, &mut first, std::time::Duration::from_secs(10)).await && first == SSL_REQUEST
}

/// Answers a plaintext connection with PostgreSQL's ErrorResponse and closes it.
pub(super) async fn refuse_plaintext(mut socket: tokio::net::TcpStream) {
    write_fatal(
        &mut socket,
        "28000", // invalid_authorization_specification
        "this server accepts TLS connections only (sslmode=require)",
    )
    .await;
}

/// The TLS acceptor of `--tls-cert` and `--tls-key`.
pub(super) fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    Ok(TlsAcceptor::from(Arc::new(tls_config(cert, key)?)))
}

/// The TLS configuration of `--tls-cert` and `--tls-key` (the OTLP listeners add ALPN).
pub fn tls_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig> {
    let fail = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        DataFusionError::Configuration(format!("evalsql serve: {what} {}: {e}", path.display()))
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = rustls_pemfile::certs(&mut BufReader::new(
        File::open(cert).map_err(|e| fail("cannot read", cert, &e))?,
    ))
    .collect::<std::result::Result<Vec<_>, _>>()
    .map_err(|e| fail("bad certificate", cert, &e))?;
    let key_der = rustls_pemfile::private_key(&mut BufReader::new(
        File::open(key).map_err(|e| fail("cannot read", key, &e))?,
    ))
    .map_err(|e| fail("bad key", key, &e))?
    .ok_or_else(|| fail("no private key in", key, &"empty"))?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| fail("unusable certificate or key", cert, &e))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(logged_in: bool) -> FrameGuard<()> {
        FrameGuard {
            io: (),
            framing: Framing::default(),
            logged_in: Arc::new(AtomicBool::new(logged_in)),
            max_message_bytes: 1000,
        }
    }

    #[test]
    fn follows_messages_across_reads() {
        let mut g = guard(false);
        // A startup message of 8 bytes, then a typed message of 100 split over reads.
        g.observe(&[0, 0, 0, 8, 0, 3, 0, 0]).unwrap();
        g.observe(&[b'p', 0, 0]).unwrap();
        g.observe(&[0, 100]).unwrap();
        g.observe(&[7; 96]).unwrap();
        assert_eq!(g.framing.body_left, 0);
        // A 1 GiB query before login is refused at its header.
        let err = g.observe(&[b'Q', 0x40, 0, 0, 0]).unwrap_err();
        assert!(err.to_string().contains("before login"), "{err}");
    }

    #[test]
    fn after_login_the_message_limit_applies() {
        let mut g = guard(true);
        g.framing.past_first = true;
        g.observe(&[b'Q', 0, 0, 3, 0xe8]).unwrap();
        g.observe(&[0; 996]).unwrap();
        assert!(g.observe(&[b'Q', 0, 0, 3, 0xe9]).is_err());
    }
}

/// PostgreSQL's CancelRequest code (the first message of a connection that only cancels).
const CANCEL_REQUEST_CODE: [u8; 4] = [0x04, 0xd2, 0x16, 0x2e];

/// The server's listening socket, on a thread and a runtime of its own.
///
/// Statements run on the main runtime's workers, and an operator of a plan can compute
/// there for a long time between two yields (the plan's checkpoints end it at its deadline
/// or on a cancel, see `checkpoints`). While every worker computes, the main runtime
/// neither accepts nor reads a socket, so a cancel request sent then would wait for what
/// it is meant to stop. The front door accepts every connection and answers cancel
/// requests itself (from the registry of sessions, which needs no runtime); any other
/// connection is handed to the main runtime.
pub struct FrontDoor;

impl FrontDoor {
    /// Starts the front door; the returned future ends only if it stops (with the reason).
    pub fn start(
        listener: std::net::TcpListener,
        sessions: Arc<super::sessions::Sessions>,
        hand_over: impl Fn(std::net::TcpStream, std::net::SocketAddr) + Send + Sync + 'static,
    ) -> io::Result<impl std::future::Future<Output = datafusion::common::Result<()>>> {
        let hand_over = Arc::new(hand_over);
        let (ended, stopped) = tokio::sync::oneshot::channel::<io::Error>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("evalsql-front-door".into())
            .spawn(move || {
                let error = runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => return e,
                    };
                    loop {
                        let (mut socket, peer) = match listener.accept().await {
                            Ok(accepted) => accepted,
                            Err(e) => {
                                log::warn!("accept: {e}");
                                // Out of descriptors: give the others a moment to close theirs.
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                        };
                        // Each on its own task: a client slow to say anything holds up no one.
                        let (sessions, hand_over) = (Arc::clone(&sessions), Arc::clone(&hand_over));
                        tokio::spawn(async move {
                            if let Some((pid, secret)) = cancel_request(&mut socket).await {
                                sessions.cancel_request(pid, &secret);
                                close_after_cancel(socket).await;
                                return;
                            }
                            match socket.into_std() {
                                Ok(socket) => hand_over(socket, peer),
                                Err(e) => log::info!("connection from {peer}: {e}"),
                            }
                        });
                    }
                });
                let _ = ended.send(error);
            })?;
        Ok(async move {
            match stopped.await {
                Ok(e) => Err(datafusion::common::DataFusionError::Execution(format!(
                    "the listening socket failed: {e}"
                ))),
                Err(_) => Err(datafusion::common::DataFusionError::Execution(
                    "the listening socket's thread ended".into(),
                )),
            }
        })
    }
}

/// The process id and key of a connection's CancelRequest, read off the socket (the whole
/// message, so that closing the socket afterwards is an orderly close: a socket closed
/// with unread bytes is reset, and node-postgres's process dies of an unhandled reset);
/// `None`, with nothing read, for any other first message. Waits at most a moment for the
/// first bytes, so that a client that says nothing does not hold up the door.
async fn cancel_request(
    socket: &mut TcpStream,
) -> Option<(i32, pgwire::messages::startup::SecretKey)> {
    use pgwire::messages::startup::SecretKey;
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 8];
    if !peek_exact(socket, &mut head, Duration::from_millis(200)).await
        || head[4..8] != CANCEL_REQUEST_CODE
    {
        return None;
    }
    // Length, code, process id, then a key of 4 bytes (protocol 3.0) or up to 256 (3.2).
    let length = u32::from_be_bytes(head[..4].try_into().ok()?) as usize;
    if !(16..=12 + 256).contains(&length) {
        return None;
    }
    let mut message = vec![0u8; length];
    tokio::time::timeout(Duration::from_secs(1), socket.read_exact(&mut message))
        .await
        .ok()?
        .ok()?;
    let pid = i32::from_be_bytes(message[8..12].try_into().ok()?);
    let key = &message[12..];
    let secret = match <[u8; 4]>::try_from(key) {
        Ok(four) => SecretKey::I32(i32::from_be_bytes(four)),
        Err(_) => SecretKey::Bytes(key.to_vec().into()),
    };
    Some((pid, secret))
}

/// Closes a cancel request's connection as PostgreSQL does, whether the key was known or
/// not: nothing is answered, the server's side is shut (FIN), and what the client still
/// sends is read and dropped until it closes too (briefly), so the close is never a reset.
async fn close_after_cancel(mut socket: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = socket.shutdown().await;
    let mut sink = [0u8; 256];
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Whether the first `buf.len()` bytes of the connection arrived within `wait`, copied into
/// `buf` without being consumed (pgwire reads them afterwards).
pub async fn peek_exact(socket: &TcpStream, buf: &mut [u8], wait: Duration) -> bool {
    let wanted = buf.len();
    tokio::time::timeout(wait, async {
        loop {
            match socket.peek(buf).await {
                Ok(n) if n == wanted => return true,
                Ok(0) | Err(_) => return false,
                Ok(_) => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
    })
    .await
    .unwrap_or(false)
}
