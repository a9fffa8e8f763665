//! `evalsql serve`: the session over the PostgreSQL wire protocol, for BI tools and drivers.
//!
//! Query handling is datafusion-postgres's (`DfSessionService`: simple and extended
//! protocol, `SET`/`SHOW`, cursors, transactions as no-ops) and `pg_catalog` is
//! datafusion-pg-catalog's, so tools can browse the tables. What this module adds:
//!
//! - PostgreSQL's face ([`face`]): the version drivers parse, `SHOW` / `current_setting` /
//!   `pg_settings` with real values, `set_config` as `SET`, savepoints, duplicate names.
//! - Passwords, always: SCRAM-SHA-256 (pgwire's) against one user from `EVALSQL_PG_USER` /
//!   `EVALSQL_PG_PASSWORD` or a users file of `name:hash` lines made by `evalsql passwd`.
//! - One session per connection, cloned from the session the `--init` files built: a
//!   client's `SET` changes only its own connection, while tables are shared. (datafusion-
//!   postgres's own `serve` shares one session, and pgwire's SASL handler keeps per-login
//!   state, so the accept loop here builds the handlers per connection.)
//! - Confinement: only objects under the data roots can be read or written (see
//!   [`crate::object_stores::DataRoots`]), and settings that would send the judge's key
//!   elsewhere or write files (`evalsql.*.base_url`, `*.azure_endpoint`, `*.cache`,
//!   `datafusion.runtime.*`) cannot be changed by clients.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, ParamValues, Result, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{CopyTarget, Set, Statement};
use datafusion_cli::exec;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};
use datafusion_postgres::DfSessionService;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::{
    PgCatalogContextProvider, Role,
};
use datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire;
use evalsql_udfs::judge::{
    JudgeFunctionFactory, JudgeOptions, Restriction, cache_path, operator_only, process_env,
    setting_case,
};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{SCRAM_ITERATIONS, ScramAuth, gen_salted_password};
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::api::results::{Response, Tag};
use pgwire::api::{ClientInfo, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::tokio::tokio_rustls::TlsAcceptor;
use pgwire::tokio::tokio_rustls::rustls;
use pgwire::types::format::FormatOptions;

use crate::object_stores::{DataRoots, EvalsqlObjectStoreRegistry};
use crate::policy::PlanPolicy;
use crate::session::{SessionOptions, new_context_with};

mod activity;
pub mod catalog;
mod checkpoints;
pub mod face;
pub mod limits;
pub mod listener;
pub mod memory;
pub mod runner;
mod sessions;
mod sqlstate;

use activity::SessionSlot;
pub use limits::ServeLimits;
use runner::{EvalsqlService, StatementRunner, plan_checked, run_plan, user_error};
use sessions::{CancelRequests, Sessions, Tracking};

/// What `evalsql serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    pub users: Option<PathBuf>,
    pub init: Vec<PathBuf>,
    /// Directories or object-store URLs; the working directory when empty.
    pub data_roots: Vec<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// URL prefixes `invoke_app` may call from the server (none: it calls nothing).
    pub app_urls: Vec<String>,
    /// What clients may do beyond reading.
    pub allow: ClientAllowances,
    /// Refuse connections that do not use TLS.
    pub require_tls: bool,
    /// What one statement may grow (time, bytes, depth, connections).
    pub limits: ServeLimits,
    pub session: SessionOptions,
}

/// Starts the server and serves until interrupted.
pub async fn serve(options: ServeOptions) -> Result<()> {
    let users = Arc::new(Users::load(options.users.as_deref())?);
    let roots = if options.data_roots.is_empty() {
        vec![".".to_string()]
    } else {
        options.data_roots.clone()
    };
    let roots = Arc::new(DataRoots::parse(&roots)?);
    let tls = match (&options.tls_cert, &options.tls_key) {
        (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
        (None, None) => None,
        _ => {
            return Err(DataFusionError::Configuration(
                "evalsql serve: TLS needs both --tls-cert and --tls-key".into(),
            ));
        }
    };
    if options.require_tls && tls.is_none() {
        return Err(DataFusionError::Configuration(
            "evalsql serve: --require-tls needs --tls-cert and --tls-key".into(),
        ));
    }

    let mut session = options.session.clone();
    session.memory_limit = Some(
        session
            .memory_limit
            .unwrap_or_else(limits::default_memory_limit),
    );
    let ctx = server_context(&session, &roots, &users).await?;
    face::install(&ctx, face::ServerFace::of(&options.allow));
    // invoke_app POSTs wherever a row says: from the server, only where the administrator
    // allows (a client cannot change this setting).
    let allowed = if options.app_urls.is_empty() {
        "none".to_string()
    } else {
        options.app_urls.join(",")
    };
    ctx.state_ref()
        .write()
        .config_mut()
        .options_mut()
        .set("evalsql.target.allowed_urls", &allowed)?;
    for file in &options.init {
        let sql = std::fs::read_to_string(file).map_err(|e| {
            DataFusionError::Execution(format!("cannot read {}: {e}", file.display()))
        })?;
        let print = PrintOptions {
            format: PrintFormat::Table,
            quiet: true,
            maxrows: MaxRows::Limited(20),
            color: false,
            instrumented_registry: Arc::new(InstrumentedObjectStoreRegistry::new()),
        };
        exec::exec_from_commands(&ctx, vec![sql], &print)
            .await
            .map_err(|e| DataFusionError::Execution(format!("--init {}: {e}", file.display())))?;
    }

    // After the operator's --init: the checked versions bind clients only.
    limits::register_checked_functions(&ctx, options.limits.max_function_bytes)?;
    memory::register_checked_concats(&ctx)?;
    memory::install(options.limits.max_process_memory);
    let server_limits = Arc::new(options.limits.clone());

    let address = format!("{}:{}", options.host, options.port);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .map_err(|e| DataFusionError::Execution(format!("cannot listen on {address}: {e}")))?;
    let bound = listener.local_addr()?;
    eprintln!(
        "evalsql serve: listening on {bound}{} — {} user(s); data roots: {}",
        if tls.is_some() { " (TLS)" } else { "" },
        users.len(),
        roots.describe()
    );

    let sessions = Arc::new(Sessions::default());
    activity::add_stat_activity(&ctx, "datafusion", &sessions)?;
    let base = Arc::new(ctx);
    let slots = Arc::new(tokio::sync::Semaphore::new(options.limits.max_connections));
    let options = Arc::new(options.clone());
    let main = tokio::runtime::Handle::current();
    let front_sessions = Arc::clone(&sessions);
    // Every connection the front door does not answer itself is served here, on the
    // runtime where statements run.
    let hand_over = move |socket: std::net::TcpStream, peer: std::net::SocketAddr| {
        let (base, users, roots, sessions) = (
            Arc::clone(&base),
            Arc::clone(&users),
            Arc::clone(&roots),
            Arc::clone(&sessions),
        );
        let (options, slots, server_limits, tls) = (
            Arc::clone(&options),
            Arc::clone(&slots),
            Arc::clone(&server_limits),
            tls.clone(),
        );
        main.spawn(async move {
            let Ok(socket) = tokio::net::TcpStream::from_std(socket) else {
                return;
            };
            let Ok(slot) = slots.try_acquire_owned() else {
                listener::refuse_busy(socket, options.limits.max_connections).await;
                return;
            };
            let handlers = Connection::new(
                &base,
                &users,
                &roots,
                &sessions,
                options.allow.clone(),
                !options.app_urls.is_empty(),
                server_limits,
            );
            let _slot = slot;
            if options.require_tls && !asks_for_tls(&socket).await {
                refuse_plaintext(socket).await;
                return;
            }
            let tracking = handlers.tracking.clone();
            let max_message_bytes = options.limits.max_message_bytes;
            if let Err(e) =
                listener::serve_connection(socket, tls, handlers, max_message_bytes, tracking).await
            {
                log::info!("connection from {peer}: {e}");
            }
        });
    };
    let listener = listener.into_std()?;
    let front_door = listener::FrontDoor::start(listener, front_sessions, hand_over)?;
    tokio::select! {
        ended = front_door => ended,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("evalsql serve: interrupted, stopping");
            Ok(())
        }
    }
}

/// Whether a connection opens with PostgreSQL's SSLRequest (length 8, code 80877103): with
/// `--require-tls`, anything else is refused before a password or a query is read.
async fn asks_for_tls(socket: &tokio::net::TcpStream) -> bool {
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut first = [0u8; 8];
    listener::peek_exact(socket, &mut first, std::time::Duration::from_secs(10)).await
        && first == SSL_REQUEST
}

/// Answers a plaintext connection with PostgreSQL's ErrorResponse and closes it.
async fn refuse_plaintext(mut socket: tokio::net::TcpStream) {
    listener::write_fatal(
        &mut socket,
        "28000", // invalid_authorization_specification
        "this server accepts TLS connections only (sslmode=require)",
    )
    .await;
}

/// The session every connection starts from: the CLI's session over the confined
/// object stores, with `pg_catalog` and a confined `judge_cache`.
async fn server_context(
    options: &SessionOptions,
    roots: &Arc<DataRoots>,
    users: &Arc<Users>,
) -> Result<SessionContext> {
    let registry = Arc::new(EvalsqlObjectStoreRegistry::confined(
        Arc::new(InstrumentedObjectStoreRegistry::new()),
        Arc::clone(roots),
    ));
    let ctx = new_context_with(options, registry, vec![Arc::new(checkpoints::Checkpoints)]).await?;
    setup_pg_catalog(&ctx, "datafusion", Roles(Arc::clone(users))).map_err(|e| *e)?;
    // The catalogs first: the face wraps whatever pg_catalog is registered.
    catalog::install(&ctx).await?;
    face::functions::replace_pg_settings(&ctx, "datafusion")?;
    let inner = ctx.table_function("judge_cache")?.function().clone();
    ctx.register_udtf(
        "judge_cache",
        Arc::new(ConfinedJudgeCache {
            inner,
            roots: Arc::clone(roots),
        }),
    );
    let inner = ctx.table_function("read_otlp")?.function().clone();
    ctx.register_udtf(
        "read_otlp",
        Arc::new(ConfinedReadOtlp {
            inner,
            roots: Arc::clone(roots),
        }),
    );
    Ok(ctx)
}

/// The handlers of one connection.
struct Connection {
    service: Arc<EvalsqlService>,
    startup: Arc<SASLAuthStartupHandler<face::FaceParameters>>,
    cancel: Arc<CancelRequests>,
    tracking: Tracking,
}

impl Connection {
    fn new(
        base: &SessionContext,
        users: &Arc<Users>,
        roots: &Arc<DataRoots>,
        sessions: &Arc<Sessions>,
        allow: ClientAllowances,
        app_urls: bool,
        limits: Arc<ServeLimits>,
    ) -> Self {
        // Its own session (settings), sharing the catalogs, functions and runtime. Judge
        // functions a client creates stay in its session and cannot replace the operator's.
        let ctx = Arc::new(SessionContext::new_with_state(base.state()));
        let tracking = Tracking {
            sessions: Arc::clone(sessions),
            slot: Arc::new(SessionSlot::new()),
            ctx: Arc::clone(&ctx),
        };
        activity::register_functions(&ctx, sessions, &tracking.slot);
        {
            let state = ctx.state_ref();
            let mut state = state.write();
            state.config_mut().set_extension(Arc::clone(&tracking.slot));
            state.set_function_factory(Arc::new(JudgeFunctionFactory::client()));
            if let Some(judge) = state
                .config_mut()
                .options_mut()
                .extensions
                .get_mut::<JudgeOptions>()
            {
                judge.restrict(Restriction::Client);
            }
        }
        let policy = allow.plan_policy(app_urls);
        let time_zone = ctx.state().config_options().execution.time_zone.clone();
        let face = face::ServerFace::of(&allow);
        let face_hook = Arc::new(face::hook::FaceHook::new(
            face::install(&ctx, face.clone()),
            policy.clone(),
            protected_setting,
        ));
        // The policy's checks and SET first, the PostgreSQL statements datafusion-postgres
        // answers itself next, and the runner last: it plans, checks and runs the rest.
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(ServerPolicyHook {
                roots: Arc::clone(roots),
                allow,
                policy: policy.clone(),
                limits: Arc::clone(&limits),
            }),
            // SHOW, set_config (as SET, through these same hooks), savepoints.
            Arc::clone(&face_hook) as Arc<dyn QueryHook>,
            Arc::new(CursorStatementHook),
            Arc::new(SetShowHook),
            Arc::new(TransactionStatementHook),
            Arc::new(catalog::CatalogRewrites::around(StatementRunner {
                policy,
                protected: protected_setting,
            })),
        ];
        face::hook::FaceHook::set_chain(&face_hook, &hooks);
        let service = Arc::new(EvalsqlService::new(
            Arc::new(DfSessionService::new_with_hooks(ctx, hooks)),
            limits,
        ));
        let mut scram = ScramAuth::new(Arc::clone(users) as Arc<dyn AuthSource>);
        scram.set_iterations(users.iterations);
        let startup = Arc::new(
            SASLAuthStartupHandler::new(Arc::new(face::FaceParameters::new(&face, time_zone)))
                .with_scram(scram)
                .with_pid_secret_key_generator(Arc::clone(&sessions.ids) as _),
        );
        Connection {
            service,
            startup,
            cancel: Arc::new(CancelRequests(Arc::clone(sessions))),
            tracking,
        }
    }
}

impl PgWireServerHandlers for Connection {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        Arc::clone(&self.service)
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        Arc::clone(&self.service)
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        Arc::clone(&self.startup)
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::clone(&self.cancel)
    }
}

fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
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
    Ok(TlsAcceptor::from(Arc::new(config)))
}

// ---------------------------------------------------------------------------------------
// Users and password hashes

/// The scheme tag of a users-file hash.
const HASH_SCHEME: &str = "scram-sha-256";

/// The users the server accepts, with their SCRAM salted passwords.
#[derive(Debug)]
pub struct Users {
    by_name: HashMap<String, (Vec<u8>, Vec<u8>)>,
    iterations: usize,
    /// A secret of this process from which unknown names get a salt and key of their own,
    /// stable per name, so they fail exactly as a wrong password does and their salts do
    /// not give them away.
    decoy_secret: Vec<u8>,
}

impl Users {
    /// From `--users FILE`, else `EVALSQL_PG_USER` / `EVALSQL_PG_PASSWORD`; without either
    /// the server does not start.
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let decoy_secret = random_bytes(32)?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                DataFusionError::Configuration(format!("--users {}: {e}", path.display()))
            })?;
            let mut by_name = HashMap::new();
            let mut iterations = None;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let bad = |why: &str| {
                    DataFusionError::Configuration(format!(
                        "--users {} line {}: {why} (expected name:{HASH_SCHEME}$ITERATIONS$SALT$KEY \
                         as printed by `evalsql passwd NAME`)",
                        path.display(),
                        n + 1
                    ))
                };
                let (name, hash) = line.split_once(':').ok_or_else(|| bad("no ':'"))?;
                let (iters, salt, salted) = parse_hash(hash).ok_or_else(|| bad("not a hash"))?;
                if *iterations.get_or_insert(iters) != iters {
                    return Err(bad("all hashes must use the same iteration count"));
                }
                if by_name.insert(name.to_string(), (salt, salted)).is_some() {
                    return Err(bad(&format!("user {name:?} appears twice")));
                }
            }
            if by_name.is_empty() {
                return Err(DataFusionError::Configuration(format!(
                    "--users {}: no users",
                    path.display()
                )));
            }
            return Ok(Users {
                by_name,
                iterations: iterations.unwrap_or(SCRAM_ITERATIONS),
                decoy_secret,
            });
        }
        match (
            std::env::var("EVALSQL_PG_USER"),
            std::env::var("EVALSQL_PG_PASSWORD"),
        ) {
            (Ok(user), Ok(password)) if !user.is_empty() && !password.is_empty() => {
                let salt = random_bytes(16)?;
                let salted = gen_salted_password(&password, &salt, SCRAM_ITERATIONS);
                Ok(Users {
                    by_name: HashMap::from([(user, (salt, salted))]),
                    iterations: SCRAM_ITERATIONS,
                    decoy_secret,
                })
            }
            _ => Err(DataFusionError::Configuration(
                "evalsql serve requires a password: set EVALSQL_PG_USER and EVALSQL_PG_PASSWORD, \
                 or pass --users FILE (lines made by `evalsql passwd NAME`)"
                    .into(),
            )),
        }
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let name = login.user().unwrap_or_default();
        if let Some((salt, salted)) = self.by_name.get(name) {
            return Ok(Password::new(Some(salt.clone()), salted.clone()));
        }
        // HMAC-based derivations (PBKDF2 with one round) of the name under the secret.
        let salt = gen_salted_password(name, &self.decoy_secret, 1)[..16].to_vec();
        let key = gen_salted_password(&format!("key:{name}"), &self.decoy_secret, 1);
        Ok(Password::new(Some(salt), key))
    }
}

/// The users-file line of `name` with `password`: `name:scram-sha-256$4096$SALT$KEY`, where
/// KEY is SCRAM's SaltedPassword (PBKDF2-HMAC-SHA-256). It stands in for the password when
/// logging in to this server, so keep the file private, as PostgreSQL's own hashes.
pub fn hash_line(name: &str, password: &str) -> Result<String> {
    if name.is_empty() || name.contains(':') || name.chars().any(char::is_whitespace) {
        return Err(DataFusionError::Configuration(format!(
            "evalsql passwd: {name:?} is not a usable user name (no ':' or spaces)"
        )));
    }
    let salt = random_bytes(16)?;
    let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
    Ok(format!(
        "{name}:{HASH_SCHEME}${SCRAM_ITERATIONS}${}${}",
        BASE64.encode(&salt),
        BASE64.encode(&salted)
    ))
}

fn parse_hash(hash: &str) -> Option<(usize, Vec<u8>, Vec<u8>)> {
    let mut parts = hash.split('$');
    if parts.next()? != HASH_SCHEME {
        return None;
    }
    let iterations: usize = parts.next()?.parse().ok().filter(|&i| i >= 4096)?;
    let salt = BASE64.decode(parts.next()?).ok()?;
    let salted = BASE64
        .decode(parts.next()?)
        .ok()
        .filter(|k| k.len() == 32)?;
    parts.next().is_none().then_some((iterations, salt, salted))
}

fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    getrandom_v02::getrandom(&mut buf)
        .map_err(|e| DataFusionError::External(format!("no random source: {e}").into()))?;
    Ok(buf)
}

/// `evalsql passwd NAME [--users FILE]`: asks for the password (twice on a terminal; one
/// line from stdin otherwise) and prints the users-file line, or adds / replaces it in FILE.
pub fn passwd(name: &str, users: Option<&Path>) -> Result<()> {
    use std::io::IsTerminal;
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!("password for {name}: "))?;
        let again = rpassword::prompt_password("again: ")?;
        if first != again {
            return Err(DataFusionError::Configuration(
                "evalsql passwd: the passwords differ".into(),
            ));
        }
        first
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    if password.is_empty() {
        return Err(DataFusionError::Configuration(
            "evalsql passwd: empty password".into(),
        ));
    }
    let line = hash_line(name, &password)?;
    let Some(file) = users else {
        println!("{line}");
        return Ok(());
    };
    let existing = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(DataFusionError::Execution(format!(
                "cannot read {}: {e}",
                file.display()
            )));
        }
    };
    let prefix = format!("{name}:");
    let mut lines: Vec<String> = existing
        .lines()
        .filter(|l| !l.trim_start().starts_with(&prefix))
        .map(str::to_string)
        .collect();
    lines.push(line);
    write_private(file, &(lines.join("\n") + "\n"))?;
    eprintln!("{}: set the password of {name}", file.display());
    Ok(())
}

/// Replaces `path` with `text`, readable by its owner only, atomically: a temporary file
/// of mode 0600 beside it is written, synced and renamed over it, so a crash leaves the old
/// file or the new one, never half of one, and never a moment with other permissions.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: std::io::Error| {
        DataFusionError::Execution(format!("cannot write {}: {e}", path.display()))
    };
    let name = path
        .file_name()
        .ok_or_else(|| fail(std::io::Error::other("not a file name")))?;
    let temporary = path.with_file_name(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(fail)
}

/// The users, as `pg_roles` shows them.
#[derive(Debug, Clone)]
struct Roles(Arc<Users>);

#[async_trait]
impl PgCatalogContextProvider for Roles {
    // pg_roles and pg_user list no user: a client would learn every other user's name.
    async fn roles(&self) -> Vec<String> {
        Vec::new()
    }

    // pg_roles asks for every name `roles` gave (and unwraps the answer).
    async fn role(&self, name: &str) -> Option<Role> {
        self.0.by_name.contains_key(name).then(|| Role {
            name: name.to_string(),
            is_superuser: false,
            can_login: true,
            can_create_db: false,
            can_create_role: false,
            can_create_user: false,
            can_replication: false,
            grants: vec![],
            inherited_roles: vec![],
        })
    }
}

// ---------------------------------------------------------------------------------------
// What clients may not do

/// Settings a client may not change: where the judge and target keys are sent, and files
/// the server writes.
///
/// Also the settings that change how a statement's text is read (`datafusion.sql_parser.*`:
/// a second reader of the text that disagrees with the first is how checks on text are
/// evaded) and where tables are created (`datafusion.catalog.*`). Names are lower-cased as
/// DataFusion does (Unicode rules: a Kelvin sign is a `k`).
pub fn protected_setting(name: &str) -> bool {
    let name = setting_case(name);
    [
        "datafusion.runtime.",
        "datafusion.sql_parser.",
        "datafusion.catalog.",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || operator_only(&name)
}

fn refused(message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        "42501".to_string(), // insufficient_privilege
        message,
    )))
}

/// Refuses protected settings, and files or URLs outside the data roots named in FROM (the
/// stores refuse them anyway, but DataFusion's lookup of tables by path reports any failure
/// as "table not found"). Runs `SET evalsql.*` / `SET datafusion.*` on the connection's
/// session with errors reported (datafusion-postgres's SET hook ignores them).
struct ServerPolicyHook {
    roots: Arc<DataRoots>,
    allow: ClientAllowances,
    policy: PlanPolicy,
    limits: Arc<ServeLimits>,
}

impl ServerPolicyHook {
    /// Everything a client's statement must pass before it is planned.
    fn check(&self, statement: &Statement) -> PgWireResult<()> {
        // datafusion-postgres's SHOW handler indexes the first name without looking.
        if let Statement::ShowVariable { variable } = statement
            && variable.is_empty()
        {
            return Err(user_error("42601", "SHOW needs a setting name".into()));
        }
        limits::check_expression_depth(statement, &self.limits)
            .map_err(|e| user_error("54001", e))?; // statement_too_complex
        check_statement(statement, &self.allow).map_err(refused)?;
        // The stores refuse a write outside the roots anyway, but DataFusion reports that
        // as a failure to finalise; say why.
        if let Statement::Copy {
            target: CopyTarget::File { filename },
            ..
        } = statement
            && !self.roots.allows_location(filename)
        {
            return Err(refused(format!(
                "{filename} is outside the data roots of this server ({})",
                self.roots.describe()
            )));
        }
        self.check_relations(statement)
    }

    fn check_relations(&self, statement: &Statement) -> PgWireResult<()> {
        use std::ops::ControlFlow;
        let outcome = datafusion::sql::sqlparser::ast::visit_relations(statement, |name| {
            let [part] = name.0.as_slice() else {
                return ControlFlow::Continue(());
            };
            let Some(ident) = part.as_ident() else {
                return ControlFlow::Continue(());
            };
            let location = ident.value.as_str();
            let path_like = location.contains('/') || location.starts_with('~');
            if path_like && !self.roots.allows_location(location) {
                return ControlFlow::Break(refused(format!(
                    "{location} is outside the data roots of this server ({})",
                    self.roots.describe()
                )));
            }
            ControlFlow::Continue(())
        });
        match outcome {
            ControlFlow::Break(e) => Err(e),
            ControlFlow::Continue(()) => Ok(()),
        }
    }

    async fn set(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
    ) -> Option<PgWireResult<Response>> {
        let Statement::Set(set) = statement else {
            // Every other statement is a new query: the judge budgets count from zero.
            evalsql_udfs::judge::start_query(ctx);
            return None;
        };
        // Names as DataFusion reads them: quotes dropped, parts joined, lower case (so
        // `SET "evalsql.judge.base_url"` or `evalsql.judge."base_url"` are caught too).
        let names: Vec<String> = match set {
            Set::SingleAssignment { variable, .. } => vec![setting_name(variable)],
            Set::ParenthesizedAssignments { variables, .. } => {
                variables.iter().map(setting_name).collect()
            }
            Set::MultipleAssignments { assignments } => {
                assignments.iter().map(|a| setting_name(&a.name)).collect()
            }
            _ => return None,
        };
        if let Some(name) = names.iter().find(|n| protected_setting(n)) {
            return Some(Err(refused(format!(
                "SET {name} is not allowed over the server: its administrator sets it \
                 (environment or --init)"
            ))));
        }
        if let Set::SingleAssignment { values, .. } = set
            && let Some(name) = names.iter().find(|n| MODEL_SETTINGS.contains(&n.as_str()))
        {
            let model = values
                .first()
                .map(|v| v.to_string().trim_matches(['\'', '"']).to_string())
                .unwrap_or_default();
            if !model.is_empty() && !self.allow.models.contains(&model) {
                let allowed = if self.allow.models.is_empty() {
                    "none: the server's own models only".to_string()
                } else {
                    self.allow.models.join(", ")
                };
                return Some(Err(refused(format!(
                    "SET {name}: model {model:?} is not among the models this server's \
                     clients may use ({allowed}; its administrator adds one with \
                     --allowed-model)"
                ))));
            }
        }
        let ours = |n: &String| n.starts_with("evalsql.") || n.starts_with("datafusion.");
        match set {
            Set::SingleAssignment { .. } if names.iter().all(ours) => {}
            _ if names.iter().any(ours) => {
                return Some(Err(refused(
                    "SET evalsql.* / datafusion.*: one setting per SET statement".into(),
                )));
            }
            _ => return None,
        }
        if let Set::SingleAssignment { values, .. } = set
            && let Some(value) = values.first()
        {
            let current = |key: &str| {
                ctx.state()
                    .config_options()
                    .entries()
                    .into_iter()
                    .find(|entry| entry.key == key)
                    .and_then(|entry| entry.value)
            };
            if let Err(why) = limits::check_bounded_setting(&names[0], &value.to_string(), &current)
            {
                return Some(Err(refused(why)));
            }
        }
        // Planned from the syntax tree and checked like every other statement.
        let plan = match plan_checked(statement, ctx, &self.policy, protected_setting).await {
            Ok(plan) => plan,
            Err(e) => return Some(Err(e)),
        };
        Some(match ctx.execute_logical_plan(plan).await {
            Ok(_) => Ok(Response::Execution(Tag::new("SET"))),
            Err(e) => Err(PgWireError::ApiError(Box::new(e))),
        })
    }

    /// The checks, then the statements this hook runs itself (`DECLARE`, `SET` of evalsql
    /// and DataFusion keys); `None` passes the statement on to the next hook.
    async fn answer(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if let Err(e) = self.check(statement) {
            return Some(Err(e));
        }
        if let Some(done) = self.declare(statement, ctx, client).await {
            return Some(done);
        }
        self.set(statement, ctx).await
    }

    /// `DECLARE name CURSOR FOR query`: the query planned from its syntax tree and checked
    /// (datafusion-postgres's cursor hook would parse its text again).
    async fn declare(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        use datafusion::sql::sqlparser::ast::DeclareType;
        use pgwire::api::portal::{Format, Portal};
        use pgwire::api::stmt::StoredStatement;
        use pgwire::api::store::PortalStore;
        let Statement::Declare { stmts } = statement else {
            return None;
        };
        for declare in stmts {
            let (Some(DeclareType::Cursor), Some(name), Some(query)) = (
                declare.declare_type.as_ref(),
                declare.names.first(),
                declare.for_query.as_ref(),
            ) else {
                return Some(Err(user_error(
                    "42601",
                    "DECLARE: only DECLARE name CURSOR FOR query".into(),
                )));
            };
            let query_statement = Statement::Query(query.clone());
            let result = async {
                let plan =
                    plan_checked(&query_statement, ctx, &self.policy, protected_setting).await?;
                let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
                let Response::Query(rows) = run_plan(plan, ctx, options).await? else {
                    return Err(user_error("42601", "DECLARE: not a query".into()));
                };
                let stored = Arc::new(StoredStatement::new(
                    name.value.clone(),
                    (query.to_string(), None),
                    vec![],
                ));
                let portal = Portal::new_cursor(name.value.clone(), stored);
                portal.start(rows).await;
                client.portal_store().put_portal(Arc::new(portal));
                let _ = Format::UnifiedText;
                Ok(())
            }
            .await;
            if let Err(e) = result {
                return Some(Err(e));
            }
        }
        Some(Ok(Response::Execution(Tag::new("DECLARE CURSOR"))))
    }
}

pub use crate::policy::{ClientAllowances, MODEL_SETTINGS};

/// Whether `statement` calls `generate(...)` anywhere (any case, any schema).
fn calls_generate(statement: &Statement) -> bool {
    use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, visit_expressions};
    use std::ops::ControlFlow;
    visit_expressions(statement, |expr| match expr {
        SqlExpr::Function(f)
            if f.name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case("generate")) =>
        {
            ControlFlow::Break(())
        }
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

/// Whether a client may run `statement`, decided on the parsed statement (never on its
/// text), for the simple and the extended protocol alike. Reading, settings, cursors,
/// transactions and descriptions are allowed; writes and function definitions only as the
/// operator allowed; anything else is refused.
fn check_statement(statement: &Statement, allow: &ClientAllowances) -> Result<(), String> {
    use Statement as S;
    use datafusion::sql::sqlparser::ast::Reset;
    let name = || {
        let text = statement.to_string();
        text.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_uppercase()
    };
    if !allow.generate && calls_generate(statement) {
        return Err(
            "generate() is disabled on this server (it spends the server's key on the \
                    client's prompts): its administrator can start it with --allow-generate"
                .into(),
        );
    }
    match statement {
        S::Query(_)
        | S::Set(_)
        | S::ShowFunctions { .. }
        | S::ShowVariable { .. }
        | S::ShowStatus { .. }
        | S::ShowVariables { .. }
        | S::ShowCreate { .. }
        | S::ShowColumns { .. }
        | S::ShowCatalogs { .. }
        | S::ShowDatabases { .. }
        | S::ShowSchemas { .. }
        | S::ShowCharset(_)
        | S::ShowObjects(_)
        | S::ShowTables { .. }
        | S::ShowViews { .. }
        | S::ShowCollation { .. }
        | S::StartTransaction { .. }
        | S::Commit { .. }
        | S::Rollback { .. }
        | S::Savepoint { .. }
        | S::ReleaseSavepoint { .. }
        | S::Declare { .. }
        | S::Fetch { .. }
        | S::Close { .. }
        | S::Discard { .. }
        | S::Deallocate { .. }
        | S::Execute { .. }
        | S::ExplainTable { .. } => Ok(()),
        // EXPLAIN ANALYZE runs its statement; PREPARE defines one that EXECUTE runs.
        S::Explain { statement, .. } | S::Prepare { statement, .. } => {
            check_statement(statement, allow)
        }
        S::Reset(reset) => match &reset.reset {
            Reset::ALL => Err(
                "RESET ALL is not allowed over the server: it would drop the operator's \
                 settings; reset settings one by one"
                    .into(),
            ),
            Reset::ConfigurationParameter(parameter) => {
                let setting = setting_name(parameter);
                if protected_setting(&setting) {
                    Err(format!(
                        "RESET {setting} is not allowed over the server: its administrator \
                         sets it (environment or --init)"
                    ))
                } else {
                    Ok(())
                }
            }
        },
        S::CreateFunction(_) if allow.create_function => Ok(()),
        S::CreateFunction(_) => Err(
            "CREATE FUNCTION is disabled on this server (a judge metric spends the server's \
             key on every call): its administrator can start it with --allow-create-function"
                .into(),
        ),
        S::Copy { .. }
        | S::CreateTable(_)
        | S::CreateView(_)
        | S::CreateIndex(_)
        | S::AlterTable(_)
        | S::AlterView { .. }
        | S::Insert(_)
        | S::Update(_)
        | S::Delete(_)
        | S::Merge(_)
        | S::Truncate(_)
        | S::Drop { .. }
        | S::DropFunction(_)
        | S::CreateSchema { .. }
        | S::CreateDatabase { .. } => {
            if allow.writes {
                Ok(())
            } else {
                Err(format!(
                    "{}: writes are disabled; start the server with --allow-writes",
                    name()
                ))
            }
        }
        _ => Err(format!("{} is not allowed over this server", name())),
    }
}

/// A setting's name as DataFusion resolves it (Unicode lower case, as its SET does).
fn setting_name(name: &datafusion::sql::sqlparser::ast::ObjectName) -> String {
    let joined = name
        .0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => ident.value.clone(),
            None => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".");
    setting_case(&joined)
}

#[async_trait]
impl QueryHook for ServerPolicyHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        session_context: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(statement, session_context, client).await
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _session_context: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        // SetShowHook plans SET as an empty relation
        self.check(statement).err().map(Err)
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        _logical_plan: &LogicalPlan,
        _params: &ParamValues,
        session_context: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(statement, session_context, client).await
    }
}

/// `judge_cache(path)` reads a file (read-only): in the server only under a data root.
#[derive(Debug)]
struct ConfinedJudgeCache {
    inner: Arc<dyn TableFunctionImpl>,
    roots: Arc<DataRoots>,
}

impl TableFunctionImpl for ConfinedJudgeCache {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let (path, shown) = match args.exprs() {
            [Expr::Literal(ScalarValue::Utf8(Some(p)), _)]
            | [Expr::Literal(ScalarValue::Utf8View(Some(p)), _)]
            | [Expr::Literal(ScalarValue::LargeUtf8(Some(p)), _)] => {
                // SQLite reads "file:..." as a URI naming any file: not a path here.
                if p.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("file:")) {
                    return Err(DataFusionError::Plan(format!(
                        "judge_cache({p:?}): give a file path, not a URI"
                    )));
                }
                let path = std::path::absolute(p)?;
                let shown = path.display().to_string();
                (path, shown)
            }
            // The session's cache: readable only if it lies under a root too.
            [] => {
                let options = args.session().config_options();
                let session = options.extensions.get::<JudgeOptions>();
                match cache_path(session, &process_env) {
                    Some(p) => (std::path::absolute(p)?, "the server's judge cache".into()),
                    None => return self.inner.call_with_args(args),
                }
            }
            _ => return self.inner.call_with_args(args),
        };
        if !self.roots.allows_local_file(&path) {
            return Err(DataFusionError::Plan(format!(
                "judge_cache(): {shown} is outside the data roots of this server ({}); an \
                 administrator can put the judge cache under one",
                self.roots.describe()
            )));
        }
        self.inner.call_with_args(args)
    }
}

/// `read_otlp(location)` reads traces: in the server only under a data root (the confined
/// stores would refuse the read anyway; this says why before anything is listed).
#[derive(Debug)]
struct ConfinedReadOtlp {
    inner: Arc<dyn TableFunctionImpl>,
    roots: Arc<DataRoots>,
}

impl TableFunctionImpl for ConfinedReadOtlp {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let location = evalsql_udfs::traces::otlp::location_argument(args.exprs())?;
        // What is checked is what will be listed: the parsed URL's store and prefix, not the
        // text (where `?` may be a glob or a query, and `file://host/…` a local path).
        let url = evalsql_udfs::traces::otlp::parse_location(&location)?;
        let listed = match url.get_url().to_file_path() {
            Ok(path) if url.scheme() == "file" => path.display().to_string(),
            _ => format!(
                "{}://{}/{}",
                url.scheme(),
                url.get_url().host_str().unwrap_or(""),
                url.prefix()
            ),
        };
        if !self.roots.allows_location(&listed) || !self.roots.allows_location(&location) {
            return Err(DataFusionError::Plan(format!(
                "read_otlp(): {location} is outside the data roots of this server ({})",
                self.roots.describe()
            )));
        }
        self.inner.call_with_args(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_round_trip_and_verify_like_scram() {
        let line = hash_line("alice", "s3cret").unwrap();
        let (name, hash) = line.split_once(':').unwrap();
        assert_eq!(name, "alice");
        let (iters, salt, salted) = parse_hash(hash).unwrap();
        assert_eq!(iters, SCRAM_ITERATIONS);
        assert_eq!(salted, gen_salted_password("s3cret", &salt, iters));
        assert_ne!(salted, gen_salted_password("s3cret!", &salt, iters));
        // A fresh salt every time.
        assert_ne!(line, hash_line("alice", "s3cret").unwrap());
        assert!(hash_line("a:b", "x").is_err());
        assert!(parse_hash("md5$abc").is_none());
        assert!(parse_hash(&format!("{HASH_SCHEME}$100$AAAA$AAAA")).is_none());
    }

    #[test]
    fn protected_settings() {
        for name in [
            "evalsql.judge.base_url",
            "EVALSQL.JUDGE.AZURE_ENDPOINT",
            "evalsql.judge.cache",
            "evalsql.target.base_url",
            "datafusion.runtime.temp_directory",
        ] {
            assert!(protected_setting(name), "{name}");
        }
        for name in [
            "evalsql.judge.model",
            "evalsql.judge.groundedness.threshold",
            "datafusion.execution.batch_size",
        ] {
            assert!(!protected_setting(name), "{name}");
        }
    }
}
