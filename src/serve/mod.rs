//! `evalsql serve`: the session over the PostgreSQL wire protocol, for BI tools and drivers.
//!
//! The protocol is datafusion-postgres's (`DfSessionService`: simple and extended protocol,
//! `SET`/`SHOW`, cursors, transactions as no-ops) and `pg_catalog` is datafusion-pg-catalog's,
//! so tools can browse the tables; statements are read once by [`statements`] and answered
//! by the hooks built here. What this module adds:
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

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use datafusion_cli::exec;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};
use datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog;
use datafusion_postgres::hooks::QueryHook;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::pgwire;
use evalsql_udfs::{JudgeFunctionFactory, JudgeOptions, Restriction};
use pgwire::api::PgWireServerHandlers;
use pgwire::api::auth::AuthSource;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;

use crate::object_stores::{DataRoots, EvalsqlObjectStoreRegistry};
use crate::session::{SessionOptions, new_context_with};

mod activity;
mod admission;
mod bounded_aggregates;
pub mod catalog;
mod checkpoints;
mod confined;
pub mod face;
pub mod limits;
pub mod listener;
pub mod memory;
mod planning;
pub mod runner;
mod sessions;
mod sqlstate;
mod statement_policy;
pub mod statements;
mod users;

use activity::SessionSlot;
pub use limits::ServeLimits;
use runner::{EvalsqlService, StatementRunner};
use sessions::{CancelRequests, Sessions, Tracking};

pub use crate::policy::{ClientAllowances, MODEL_SETTINGS};
use confined::{ConfinedJudgeCache, ConfinedReadOtlp};
use statement_policy::ServerPolicyHook;
pub use statement_policy::protected_setting;
use users::Roles;
pub use users::{Users, hash_line, passwd};

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
    /// The OTLP listeners and the store of spans.
    pub otlp: crate::otlp::OtlpOptions,
    /// Where alert notifications may go and how they are signed.
    pub alerts: crate::monitor::AlertOptions,
    /// A Ballista cluster's session (`--ballista`): the monitors' queries run on it.
    pub cluster: Option<Cluster>,
    /// How long a monitor's lease lasts when its holder stops extending it.
    pub monitor_lease: std::time::Duration,
}

/// A Ballista cluster's client session, for [`ServeOptions::cluster`].
#[derive(Clone)]
pub struct Cluster(pub SessionContext);

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cluster")
    }
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
        (Some(cert), Some(key)) => Some(listener::tls_acceptor(cert, key)?),
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
            .unwrap_or_else(memory::default_memory_limit),
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
    let slots = Arc::new(tokio::sync::Semaphore::new(options.limits.max_connections));
    // Traces in: the listeners share the connection slots; `spans` is every client's to read
    // (a table without writes: INSERT and COPY into it fail).
    if options.otlp.listening() {
        let tls = match (&options.tls_cert, &options.tls_key) {
            (Some(cert), Some(key)) => Some(listener::tls_config(cert, key)?),
            _ => None,
        };
        crate::otlp::start(
            &options.otlp,
            tls,
            Arc::clone(&slots),
            options.limits.max_connections,
        )
        .await?;
    }
    crate::otlp::register_spans(
        &ctx,
        options.otlp.store_location(),
        options.otlp.store.is_some() || options.otlp.listening(),
    )
    .await?;

    // Monitors run where a store is named (or traces arrive): definitions from --init and
    // from clients allowed to, their tables readable by everyone.
    let monitors = if options.otlp.store.is_some() || options.otlp.listening() {
        let base = crate::otlp::store::store_url_of(options.otlp.store_location())?;
        let monitors = crate::monitor::Monitors::open(&base, true, options.alerts.clone()).await?;
        monitors.install(&ctx).await?;
        Some(monitors)
    } else {
        None
    };

    for file in &options.init {
        let sql = std::fs::read_to_string(file).map_err(|e| {
            DataFusionError::Execution(format!("cannot read {}: {e}", file.display()))
        })?;
        run_init(&ctx, &sql, monitors.as_ref())
            .await
            .map_err(|e| DataFusionError::Execution(format!("--init {}: {e}", file.display())))?;
    }

    // After the operator's --init: the checked versions bind clients only.
    limits::register_checked_functions(&ctx, options.limits.max_function_bytes)?;
    memory::register_checked_concats(&ctx)?;
    bounded_aggregates::register(&ctx)?;
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
    if let Some(monitors) = &monitors {
        // On a cluster, a monitor's query is planned here and run by the executors.
        monitors.start(
            Arc::clone(&base),
            options.cluster.clone().map(|c| c.0),
            options.monitor_lease,
        )?;
    } else if options.cluster.is_some() {
        return Err(DataFusionError::Configuration(
            "evalsql serve --ballista runs the monitors' queries on the cluster (clients' \
             statements run in serve): give --store or --otlp"
                .into(),
        ));
    }
    for name in &options.limits.operator_users {
        if !users.by_name.contains_key(name) {
            return Err(DataFusionError::Configuration(format!(
                "evalsql serve: --operator-user {name} is not one of the server's users"
            )));
        }
    }
    let admission = Arc::new(admission::Admission::new(
        Arc::clone(&slots),
        options.limits.max_connections_per_user,
        options.limits.reserved_connections,
        &options.limits.operator_users,
    ));
    let options = Arc::new(options.clone());
    let stopping = monitors.clone();
    let main = tokio::runtime::Handle::current();
    let front_sessions = Arc::clone(&sessions);
    // Every connection the front door does not answer itself is served here, on the
    // runtime where statements run.
    let hand_over = move |socket: std::net::TcpStream, peer: std::net::SocketAddr| {
        let (base, users, roots, sessions, monitors) = (
            Arc::clone(&base),
            Arc::clone(&users),
            Arc::clone(&roots),
            Arc::clone(&sessions),
            monitors.clone(),
        );
        let (options, slots, server_limits, tls, admission) = (
            Arc::clone(&options),
            Arc::clone(&slots),
            Arc::clone(&server_limits),
            tls.clone(),
            Arc::clone(&admission),
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
                admission,
                monitors,
            );
            let _slot = slot;
            if options.require_tls && !listener::asks_for_tls(&socket).await {
                listener::refuse_plaintext(socket).await;
                return;
            }
            let tracking = handlers.tracking.clone();
            if let Err(e) =
                listener::serve_connection(socket, tls, handlers, &options.limits, tracking).await
            {
                log::info!("connection from {peer}: {e}");
            }
        });
    };
    let listener = listener.into_std()?;
    let front_door = listener::FrontDoor::start(listener, front_sessions, hand_over)?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let ended = tokio::select! {
        ended = front_door => ended,
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminate.recv() => Ok(()),
    };
    eprintln!("evalsql serve: stopping");
    // Another process of the store takes the monitors at once.
    if let Some(monitors) = stopping {
        monitors.stop().await;
    }
    ended
}

/// Runs an `--init` file: its SQL as the CLI runs it, its statements about monitors (which
/// need a store) by `monitors`.
async fn run_init(
    ctx: &SessionContext,
    sql: &str,
    monitors: Option<&Arc<crate::monitor::Monitors>>,
) -> Result<()> {
    let print = PrintOptions {
        format: PrintFormat::Table,
        quiet: true,
        maxrows: MaxRows::Limited(20),
        color: false,
        instrumented_registry: Arc::new(InstrumentedObjectStoreRegistry::new()),
    };
    crate::monitor::run_script(
        ctx,
        sql,
        monitors,
        |sql| async { exec::exec_from_commands(ctx, vec![sql], &print).await },
        |answer| {
            eprintln!(
                "evalsql serve: {}",
                datafusion::arrow::util::pretty::pretty_format_batches(&[answer])?
            );
            Ok(())
        },
    )
    .await
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
    startup: Arc<admission::Admitting<SASLAuthStartupHandler<face::FaceParameters>>>,
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
        admission: Arc<admission::Admission>,
        monitors: Option<Arc<crate::monitor::Monitors>>,
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
        let monitors = monitors.map(|monitors| runner::MonitorAccess {
            monitors,
            may_change: allow.monitors,
            policy: policy.clone(),
            protected: protected_setting,
        });
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
        let service = Arc::new(EvalsqlService::new(ctx, hooks, limits, monitors));
        let mut scram = ScramAuth::new(Arc::clone(users) as Arc<dyn AuthSource>);
        scram.set_iterations(users.iterations);
        let startup = Arc::new(
            SASLAuthStartupHandler::new(Arc::new(face::FaceParameters::new(&face, time_zone)))
                .with_scram(scram)
                .with_pid_secret_key_generator(Arc::clone(&sessions.ids) as _),
        );
        let startup = Arc::new(admission::Admitting::new(startup, admission));
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
