//! Who may hold a connection slot once logged in: at most `--max-connections-per-user`
//! connections of one user, and the last `--reserved-connections` slots for the users named
//! by `--operator-user` (as PostgreSQL's per-role `CONNECTION LIMIT` and
//! `superuser_reserved_connections`), so that one logged-in user cannot hold every slot.
//!
//! PostgreSQL decides this after the password is checked and before the client is told it
//! is logged in: a refused client's connect fails with FATAL 53300. pgwire's SASL handler
//! sends AuthenticationOk, the parameters, the key data and ReadyForQuery in one go, so
//! [`Admitting`] runs it on a [`Held`] client that keeps every message from
//! AuthenticationOk on, decides, and then sends them or refuses instead.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use datafusion_postgres::pgwire;
use futures::{Sink, SinkExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::{ClientInfo, PgWireConnectionState, SessionExtensions};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::{Authentication, SecretKey};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage, ProtocolVersion};
use pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer;
use tokio::sync::Semaphore;

/// The server's rule for logged-in connections, shared by every connection.
#[derive(Debug)]
pub struct Admission {
    /// The server's connection slots (`--max-connections`), held from accept to close.
    slots: Arc<Semaphore>,
    per_user: usize,
    /// Slots only operators may take (0 when no operator is named).
    reserved: usize,
    operators: HashSet<String>,
    open: Mutex<HashMap<String, usize>>,
}

impl Admission {
    pub fn new(
        slots: Arc<Semaphore>,
        per_user: usize,
        reserved: usize,
        operators: &[String],
    ) -> Self {
        Self {
            slots,
            per_user: per_user.max(1),
            reserved: if operators.is_empty() { 0 } else { reserved },
            operators: operators.iter().cloned().collect(),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Admits a connection of `user` that holds one slot already; the returned guard gives
    /// its place back when dropped.
    fn admit(self: &Arc<Self>, user: &str) -> Result<Admitted, PgWireError> {
        let operator = self.operators.contains(user);
        if !operator && self.slots.available_permits() < self.reserved {
            return Err(refused(format!(
                "remaining connection slots are reserved for the operator's users \
                 (--reserved-connections {})",
                self.reserved
            )));
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(user.to_string()).or_default();
        if *count >= self.per_user && !operator {
            return Err(refused(format!(
                "too many connections for role \"{user}\" (this server admits {} per user: \
                 --max-connections-per-user)",
                self.per_user
            )));
        }
        *count += 1;
        Ok(Admitted {
            admission: Arc::clone(self),
            user: user.to_string(),
        })
    }
}

fn refused(message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        "53300".into(), // too_many_connections
        message,
    )))
}

/// A logged-in connection's place among its user's.
#[derive(Debug)]
struct Admitted {
    admission: Arc<Admission>,
    user: String,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut open) = self.admission.open.lock()
            && let Some(count) = open.get_mut(&self.user)
        {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.user);
            }
        }
    }
}

/// A connection's startup handler `H`, admitted by [`Admission`] once `H` has logged the
/// client in. Built per connection: it holds the connection's place until it is dropped.
pub struct Admitting<H> {
    inner: Arc<H>,
    admission: Arc<Admission>,
    admitted: Mutex<Option<Admitted>>,
}

impl<H> Admitting<H> {
    pub fn new(inner: Arc<H>, admission: Arc<Admission>) -> Self {
        Self {
            inner,
            admission,
            admitted: Mutex::new(None),
        }
    }
}

#[async_trait]
impl<H: StartupHandler> StartupHandler for Admitting<H> {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut held = Held {
            client: &mut *client,
            kept: None,
        };
        let result = self.inner.on_startup(&mut held, message).await;
        let kept = held.kept.take();
        result?;
        let Some(kept) = kept else {
            return Ok(()); // not logged in yet
        };
        let user = client.metadata().get("user").cloned().unwrap_or_default();
        match self.admission.admit(&user) {
            Ok(admitted) => {
                if let Ok(mut slot) = self.admitted.lock() {
                    *slot = Some(admitted);
                }
                for message in kept {
                    client.feed(message).await?;
                }
                client.flush().await?;
                Ok(())
            }
            Err(e) => {
                // Not logged in after all: the connection closes with the refusal.
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                Err(e)
            }
        }
    }
}

/// A client whose messages from AuthenticationOk on are kept rather than sent.
struct Held<'a, C> {
    client: &'a mut C,
    kept: Option<Vec<PgWireBackendMessage>>,
}

impl<C: Sink<PgWireBackendMessage> + Unpin> Sink<PgWireBackendMessage> for Held<'_, C> {
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        if self.kept.is_some() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut *self.client).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), C::Error> {
        if matches!(
            item,
            PgWireBackendMessage::Authentication(Authentication::Ok)
        ) {
            self.kept.get_or_insert_with(Vec::new);
        }
        match self.kept.as_mut() {
            Some(kept) => {
                kept.push(item);
                Ok(())
            }
            None => Pin::new(&mut *self.client).start_send(item),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.client).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.client).poll_close(cx)
    }
}

impl<C: ClientInfo> ClientInfo for Held<'_, C> {
    fn socket_addr(&self) -> SocketAddr {
        self.client.socket_addr()
    }
    fn is_secure(&self) -> bool {
        self.client.is_secure()
    }
    fn protocol_version(&self) -> ProtocolVersion {
        self.client.protocol_version()
    }
    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.client.set_protocol_version(version)
    }
    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.client.pid_and_secret_key()
    }
    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.client.set_pid_and_secret_key(pid, secret_key)
    }
    fn state(&self) -> PgWireConnectionState {
        self.client.state()
    }
    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.client.set_state(new_state)
    }
    fn transaction_status(&self) -> TransactionStatus {
        self.client.transaction_status()
    }
    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.client.set_transaction_status(new_status)
    }
    fn metadata(&self) -> &HashMap<String, String> {
        self.client.metadata()
    }
    fn metadata_mut(&mut self) -> &mut HashMap<String, String> {
        self.client.metadata_mut()
    }
    fn session_extensions(&self) -> &SessionExtensions {
        self.client.session_extensions()
    }
    fn sni_server_name(&self) -> Option<&str> {
        self.client.sni_server_name()
    }
    fn client_certificates<'a>(&self) -> Option<&[CertificateDer<'a>]> {
        self.client.client_certificates()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_user_and_reserved_slots() {
        let slots = Arc::new(Semaphore::new(4));
        let admission = Arc::new(Admission::new(
            Arc::clone(&slots),
            2,
            1,
            &["root".to_string()],
        ));
        // Each admitted connection holds a slot, as the server's do.
        let _p1 = Arc::clone(&slots).try_acquire_owned().unwrap();
        let a = admission.admit("carol").unwrap();
        let _p2 = Arc::clone(&slots).try_acquire_owned().unwrap();
        let b = admission.admit("carol").unwrap();
        let _p3 = Arc::clone(&slots).try_acquire_owned().unwrap();
        let err = admission.admit("carol").unwrap_err().to_string();
        assert!(err.contains("--max-connections-per-user"), "{err}");
        // That slot goes to dave; the last one is reserved for operators.
        let _dave = admission.admit("dave").unwrap();
        let _p4 = Arc::clone(&slots).try_acquire_owned().unwrap();
        let err = admission.admit("erin").unwrap_err().to_string();
        assert!(err.contains("--reserved-connections"), "{err}");
        let _root = admission.admit("root").unwrap();
        drop((a, b, _p1));
        assert!(admission.admit("carol").is_ok());
    }

    #[test]
    fn nothing_is_reserved_without_operators() {
        let slots = Arc::new(Semaphore::new(1));
        let admission = Arc::new(Admission::new(Arc::clone(&slots), 5, 3, &[]));
        let _p = Arc::clone(&slots).try_acquire_owned().unwrap();
        assert!(admission.admit("carol").is_ok());
    }
}
