//! The server's connections as PostgreSQL shows them, and what stops a running statement.
//!
//! Every connection that logged in is a [`Session`] in one [`Sessions`] registry, under a
//! process id unique across the server (one id generator for every connection; pgwire's
//! default is one generator per login handler, and the handlers are built per connection,
//! so every connection was process 100000). A statement runs under a [`Running`] handle
//! and ends, with its DataFusion tasks and every judge or target call not yet sent, when:
//!
//! - its deadline passes (the server's `--statement-timeout`, or the client's
//!   `statement_timeout` when it is shorter);
//! - PostgreSQL's cancel request names the session's process id and secret key (what
//!   JDBC's `Statement.cancel`, ODBC's `SQLCancel`, psycopg's `cancel()` and asyncpg's
//!   timeouts send), or `pg_cancel_backend(pid)` / `pg_terminate_backend(pid)` from
//!   another connection of the same user (Superset cancels that way);
//! - the client has closed its socket. pgwire does not read the socket while a statement
//!   runs, and a judged aggregate writes nothing until it ends, so the socket's state is
//!   asked of the kernel (`poll` with `POLLRDHUP`) a few times a second instead.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicIsize, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use datafusion_postgres::pgwire;
use evalsql_udfs::interrupt::{Interrupt, Interrupted};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, RandomPidSecretKeyGenerator};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often a running statement asks whether its client is still connected.
const PEER_CHECK: Duration = Duration::from_millis(200);

/// Why a statement stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Timeout = 1,
    Canceled = 2,
    Terminated = 3,
    Disconnected = 4,
}

impl Stop {
    fn from_u8(value: u8) -> Option<Self> {
        match value {
            1 => Some(Stop::Timeout),
            2 => Some(Stop::Canceled),
            3 => Some(Stop::Terminated),
            4 => Some(Stop::Disconnected),
            _ => None,
        }
    }

    /// PostgreSQL's SQLSTATE and words for it.
    pub fn words(self) -> (&'static str, &'static str) {
        match self {
            Stop::Timeout => (
                "57014", // query_canceled
                "canceling statement due to statement timeout",
            ),
            Stop::Canceled => ("57014", "canceling statement due to user request"),
            Stop::Terminated => (
                "57P01", // admin_shutdown
                "terminating connection due to administrator command",
            ),
            Stop::Disconnected => (
                "08006", // connection_failure
                "the client closed the connection",
            ),
        }
    }

    /// The error PostgreSQL sends for it.
    pub fn error(self) -> PgWireError {
        let severity = match self {
            Stop::Timeout | Stop::Canceled => "ERROR",
            Stop::Terminated | Stop::Disconnected => "FATAL",
        };
        let (code, message) = self.words();
        PgWireError::UserError(Box::new(ErrorInfo::new(
            severity.into(),
            code.into(),
            message.into(),
        )))
    }
}

/// Every logged-in connection of the server, by process id.
#[derive(Debug, Default)]
pub struct Sessions {
    by_pid: RwLock<HashMap<i32, Arc<Session>>>,
    /// The one process-id generator of the server.
    pub ids: Arc<RandomPidSecretKeyGenerator>,
}

/// A session's place in [`Sessions`], given up when the connection ends.
pub struct Registration {
    sessions: Arc<Sessions>,
    pid: i32,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut map) = self.sessions.by_pid.write() {
            map.remove(&self.pid);
        }
    }
}

impl Sessions {
    pub fn register(self: &Arc<Self>, session: Arc<Session>) -> Registration {
        let pid = session.pid;
        self.by_pid
            .write()
            .expect("sessions lock")
            .insert(pid, session);
        Registration {
            sessions: Arc::clone(self),
            pid,
        }
    }

    fn get(&self, pid: i32) -> Option<Arc<Session>> {
        self.by_pid.read().ok()?.get(&pid).cloned()
    }

    /// PostgreSQL's cancel request: stops the named session's running statement when the
    /// secret key matches; anything else is ignored, as PostgreSQL does (the requester
    /// learns nothing either way).
    pub fn cancel_request(&self, pid: i32, secret: &SecretKey) {
        if let Some(session) = self.get(pid)
            && session.secret.eq_value(secret)
        {
            session.stop(Stop::Canceled);
        }
    }

    /// `pg_cancel_backend` / `pg_terminate_backend` on behalf of `user`: only that user's
    /// own sessions are found (another user's process id is answered like an unknown one).
    pub fn signal(&self, user: &str, pid: i32, stop: Stop) -> bool {
        match self.get(pid) {
            Some(session) if session.user == user => {
                session.stop(stop);
                true
            }
            _ => false,
        }
    }

    /// The sessions of `user`, ordered by process id, for `pg_stat_activity`.
    pub fn of_user(&self, user: &str) -> Vec<Arc<Session>> {
        let mut sessions: Vec<_> = self
            .by_pid
            .read()
            .map(|map| map.values().filter(|s| s.user == user).cloned().collect())
            .unwrap_or_default();
        sessions.sort_by_key(|s| s.pid);
        sessions
    }
}

/// What a connection needs to become a session of the server when it logs in: the
/// registry, the slot its own SQL functions (`pg_backend_pid()`, …) read it from, and its
/// DataFusion session, whose settings startup parameters set (`TimeZone`).
#[derive(Clone)]
pub struct Tracking {
    pub sessions: Arc<Sessions>,
    pub slot: Arc<OnceLock<Arc<Session>>>,
    pub ctx: Arc<datafusion::prelude::SessionContext>,
}

/// PostgreSQL's cancel request, answered from the server's registry of sessions.
pub struct CancelRequests(pub Arc<Sessions>);

#[async_trait::async_trait]
impl CancelHandler for CancelRequests {
    async fn on_cancel_request(&self, request: CancelRequest) {
        self.0.cancel_request(request.pid, &request.secret_key);
    }
}

/// One logged-in connection.
#[derive(Debug)]
pub struct Session {
    pub pid: i32,
    secret: SecretKey,
    pub user: String,
    pub database: String,
    pub application_name: String,
    pub client: SocketAddr,
    pub started: SystemTime,
    /// The connection's socket, to ask the kernel whether the client hung up.
    #[cfg(unix)]
    fd: Option<std::os::fd::RawFd>,
    running: Mutex<Option<Arc<Running>>>,
    next_statement: AtomicU64,
    /// Set by `pg_terminate_backend`: the connection closes.
    pub terminated: CancellationToken,
}

/// What a session is running now.
#[derive(Debug)]
pub struct Running {
    id: u64,
    pub query: String,
    pub started: SystemTime,
    stop: CancellationToken,
    why: AtomicU8,
    /// When the statement must end, for the plan's checkpoints ([`Interrupt`]), which
    /// cannot wait on a timer.
    deadline: Mutex<Option<Instant>>,
    /// The heap bytes allocated less those freed while the statement was current on a
    /// thread ([`evalsql_udfs::interrupt::charge`]): what it holds, near enough.
    memory: AtomicIsize,
}

/// Statements running now, across the server (see [`running_statements`]).
static RUNNING_STATEMENTS: AtomicUsize = AtomicUsize::new(0);

/// How many statements are running now: the server's memory is shared among them
/// ([`super::memory::check`]).
pub fn running_statements() -> usize {
    RUNNING_STATEMENTS.load(Ordering::Relaxed)
}

impl Session {
    /// The session of a connection that has just logged in; `fd` is its socket.
    pub fn new<C: ClientInfo + ?Sized>(
        client: &C,
        #[cfg(unix)] fd: Option<std::os::fd::RawFd>,
    ) -> Self {
        let (pid, secret) = client.pid_and_secret_key();
        let meta = client.metadata();
        let get = |key: &str| meta.get(key).cloned().unwrap_or_default();
        Session {
            pid,
            secret,
            user: get("user"),
            database: get("database"),
            application_name: get("application_name"),
            client: client.socket_addr(),
            started: SystemTime::now(),
            #[cfg(unix)]
            fd,
            running: Mutex::new(None),
            next_statement: AtomicU64::new(1),
            terminated: CancellationToken::new(),
        }
    }

    /// What the session runs now, if anything.
    pub fn running(&self) -> Option<Arc<Running>> {
        self.running.lock().ok()?.clone()
    }

    /// Marks `query` as running until the returned guard (and every clone of it) is gone.
    pub fn start(self: &Arc<Self>, query: &str) -> Arc<RunningGuard> {
        let running = Arc::new(Running {
            id: self.next_statement.fetch_add(1, Ordering::Relaxed),
            query: query.to_string(),
            started: SystemTime::now(),
            stop: CancellationToken::new(),
            why: AtomicU8::new(0),
            deadline: Mutex::new(None),
            memory: AtomicIsize::new(0),
        });
        RUNNING_STATEMENTS.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut slot) = self.running.lock() {
            *slot = Some(Arc::clone(&running));
        }
        if self.terminated.is_cancelled() {
            running.stop_with(Stop::Terminated);
        }
        Arc::new(RunningGuard {
            session: Arc::clone(self),
            running,
        })
    }

    fn stop(&self, why: Stop) {
        if why == Stop::Terminated {
            self.terminated.cancel();
        }
        if let Some(running) = self.running() {
            running.stop_with(why);
        }
    }

    /// Whether the client has closed its end of the connection.
    fn peer_gone(&self) -> bool {
        #[cfg(target_os = "linux")]
        let hangup = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
        #[cfg(all(unix, not(target_os = "linux")))]
        let hangup = libc::POLLHUP | libc::POLLERR;
        #[cfg(unix)]
        if let Some(fd) = self.fd {
            let mut poll = libc::pollfd {
                fd,
                events: hangup,
                revents: 0,
            };
            // SAFETY: `fd` is the socket of this session's connection, which is open for as
            // long as a statement of the connection runs (the only time this is asked); a
            // zero timeout never blocks.
            let ready = unsafe { libc::poll(&mut poll, 1, 0) };
            return ready > 0 && poll.revents & hangup != 0;
        }
        false
    }
}

impl Running {
    fn stop_with(&self, why: Stop) {
        let _ = self
            .why
            .compare_exchange(0, why as u8, Ordering::AcqRel, Ordering::Acquire);
        self.stop.cancel();
    }

    /// Why the statement stopped, if it has; a passed deadline stops it now.
    fn stopped_now(&self) -> Option<Stop> {
        if let Some(why) = Stop::from_u8(self.why.load(Ordering::Acquire)) {
            return Some(why);
        }
        let deadline = *self.deadline.lock().ok()?;
        if deadline.is_some_and(|at| Instant::now() >= at) {
            self.stop_with(Stop::Timeout);
            return Some(Stop::Timeout);
        }
        None
    }
}

/// The checkpoints of a running plan ask here (see [`evalsql_udfs::interrupt`]).
impl Interrupt for Running {
    fn interrupted(&self) -> Option<Interrupted> {
        let (code, message) = self.stopped_now()?.words();
        Some(Interrupted { code, message })
    }

    fn memory(&self) -> Option<&AtomicIsize> {
        Some(&self.memory)
    }
}

/// A running statement; the session shows it as running until this is dropped.
#[derive(Debug)]
pub struct RunningGuard {
    session: Arc<Session>,
    running: Arc<Running>,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        RUNNING_STATEMENTS.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut slot) = self.session.running.lock()
            && slot.as_ref().is_some_and(|r| r.id == self.running.id)
        {
            *slot = None;
        }
    }
}

impl RunningGuard {
    /// What the statement's checkpoints and kernels ask.
    pub fn interrupt(&self) -> Arc<dyn Interrupt> {
        Arc::clone(&self.running) as Arc<dyn Interrupt>
    }

    /// Why the statement stopped, if it has (a passed deadline counts).
    pub fn stop_reason(&self) -> Option<Stop> {
        self.running.stopped_now()
    }

    /// Resolves when the statement must stop: at `deadline`, on a cancel or terminate
    /// request, or when the client has gone.
    /// The deadline is recorded at once, for the plan's checkpoints, which may run
    /// before this future is first polled.
    pub fn stopped(
        self: Arc<Self>,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Stop> + Send {
        if let Ok(mut slot) = self.running.deadline.lock() {
            *slot = deadline;
        }
        async move {
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(sleep);
            let mut peer = tokio::time::interval(PEER_CHECK);
            peer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = self.running.stop.cancelled() => {
                        return Stop::from_u8(self.running.why.load(Ordering::Acquire))
                            .unwrap_or(Stop::Canceled);
                    }
                    _ = &mut sleep => {
                        self.running.stop_with(Stop::Timeout);
                        return Stop::Timeout;
                    }
                    _ = peer.tick() => {
                        if self.session.peer_gone() {
                            self.running.stop_with(Stop::Disconnected);
                            return Stop::Disconnected;
                        }
                    }
                }
            }
        }
    }
}

/// A PostgreSQL duration setting (`statement_timeout`): a number of milliseconds, or a
/// number with one of PostgreSQL's units (`ms`, `s`, `min`, `h`, `d`); `0` is none.
pub fn parse_duration(text: &str) -> Option<Option<Duration>> {
    let text = text.trim().trim_matches(['\'', '"']).trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let ms_per = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => 1.0,
        "s" => 1e3,
        "min" => 60e3,
        "h" => 3600e3,
        "d" => 86400e3,
        _ => return None,
    };
    let ms = number * ms_per;
    if !ms.is_finite() || ms < 0.0 || ms > u64::MAX as f64 / 2.0 {
        return None;
    }
    Some((ms >= 1.0).then(|| Duration::from_millis(ms as u64)))
}

/// The `statement_timeout` a client asked for in its startup message, either as a
/// parameter of its own (node-postgres) or in `options` (`-c statement_timeout=2000`,
/// `--statement_timeout=2s`, libpq's `PGOPTIONS`).
pub fn startup_statement_timeout(metadata: &HashMap<String, String>) -> Option<Duration> {
    startup_setting(metadata, "statement_timeout").and_then(|v| parse_duration(&v).flatten())
}

/// The `TimeZone` a client asked for in its startup message (pgJDBC sends the JVM's, libpq
/// `PGTZ`), if it names a zone: PostgreSQL makes it the session's time zone.
pub fn startup_time_zone(metadata: &HashMap<String, String>) -> Option<String> {
    use datafusion::arrow::array::timezone::Tz;
    startup_setting(metadata, "timezone").filter(|zone| zone.parse::<Tz>().is_ok())
}

/// The setting `name` (lower case) of a startup message: a parameter of its own (any case)
/// or `-c name=value` / `--name=value` in `options`, which wins as in PostgreSQL.
fn startup_setting(metadata: &HashMap<String, String>, name: &str) -> Option<String> {
    let mut found = metadata
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.clone());
    if let Some(options) = metadata.get("options") {
        let mut words = options.split_whitespace();
        while let Some(word) = words.next() {
            let setting = match word {
                "-c" => words.next().unwrap_or_default(),
                w => w
                    .strip_prefix("--")
                    .or_else(|| w.strip_prefix("-c"))
                    .unwrap_or_default(),
            };
            if let Some((key, value)) = setting.split_once('=')
                && key.replace('-', "_").eq_ignore_ascii_case(name)
            {
                found = Some(value.to_string());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_postgresql_reads_them() {
        let ms = |t: &str| parse_duration(t).map(|d| d.map(|d| d.as_millis()));
        assert_eq!(ms("2000"), Some(Some(2000)));
        assert_eq!(ms("'2s'"), Some(Some(2000)));
        assert_eq!(ms("1.5min"), Some(Some(90_000)));
        assert_eq!(ms("0"), Some(None));
        assert_eq!(ms("2 weeks"), None);
        assert_eq!(ms("-1"), None);
    }

    /// A startup message's parameters.
    fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn startup_options_carry_the_timeout() {
        let ms = |m: &HashMap<String, String>| startup_statement_timeout(m).map(|d| d.as_millis());
        assert_eq!(
            ms(&meta(&[("options", "-c statement_timeout=2000")])),
            Some(2000)
        );
        assert_eq!(
            ms(&meta(&[("options", "--statement-timeout=3s")])),
            Some(3000)
        );
        assert_eq!(
            ms(&meta(&[("options", "-cstatement_timeout=1s -c x=y")])),
            Some(1000)
        );
        assert_eq!(ms(&meta(&[("statement_timeout", "500")])), Some(500));
        assert_eq!(ms(&meta(&[("options", "-c search_path=x")])), None);
    }

    #[test]
    fn startup_time_zone_only_when_it_names_a_zone() {
        assert_eq!(
            startup_time_zone(&meta(&[("TimeZone", "Europe/Berlin")])).as_deref(),
            Some("Europe/Berlin")
        );
        assert_eq!(
            startup_time_zone(&meta(&[("options", "-c TimeZone=Asia/Tokyo")])).as_deref(),
            Some("Asia/Tokyo")
        );
        assert_eq!(startup_time_zone(&meta(&[("TimeZone", "Mars/Base")])), None);
        assert_eq!(startup_time_zone(&meta(&[])), None);
    }
}
