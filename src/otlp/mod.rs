//! Production traces in: `evalsql serve --otlp HOST:PORT` (OTLP/HTTP) and `--otlp-grpc
//! HOST:PORT` (OTLP/gRPC) receive an application's spans and keep them in the store, a Delta
//! Lake table (`--store`), which clients read as the table `spans`.
//!
//! - [`receive`]: the listeners, what they accept and how they answer.
//! - [`store`]: the table and its upkeep (compaction, deletion of removed files and old log
//!   entries).
//! - [`compact`]: the compaction, which joins files by copying what is encoded well.
//! - [`writer`]: how rows get in: group commit (an answer means committed) over one
//!   encoder per core, checkpoints beside it.
//! - [`commit`]: the commit itself, an append to the log that does not read the table.
//! - [`table`]: `spans` as queries see it, each span once.
//! - [`tokens`]: who may send.
//! - [`delta`]: `CREATE EXTERNAL TABLE ... STORED AS DELTA`, for any Delta table.

mod commit;
mod compact;
pub mod delta;
pub mod receive;
pub mod store;
mod synced;
pub mod table;
pub mod tokens;
mod writer;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use tokio::sync::Semaphore;

pub use store::StoreOptions;

/// The default store: `evalsql-store/` in the working directory.
pub const DEFAULT_STORE: &str = "evalsql-store";

/// What `evalsql serve` was asked for about traces.
#[derive(Debug, Clone, Default)]
pub struct OtlpOptions {
    pub http: Option<String>,
    pub grpc: Option<String>,
    pub tokens: Option<PathBuf>,
    /// A directory or object-store URL; [`DEFAULT_STORE`] when not given.
    pub store: Option<String>,
    pub max_body: usize,
    pub deadline: Duration,
    pub store_options: StoreOptions,
}

impl OtlpOptions {
    pub fn store_location(&self) -> &str {
        self.store.as_deref().unwrap_or(DEFAULT_STORE)
    }

    pub fn listening(&self) -> bool {
        self.http.is_some() || self.grpc.is_some()
    }
}

/// The OTLP listeners of `evalsql serve` and the store they write.
#[derive(Debug, Clone, clap::Args)]
pub struct OtlpArgs {
    /// Receive traces over OTLP/HTTP (POST /v1/traces, protobuf or JSON) on HOST:PORT
    #[arg(long, value_name = "HOST:PORT")]
    otlp: Option<String>,
    /// Receive traces over OTLP/gRPC (TraceService/Export) on HOST:PORT
    #[arg(long, value_name = "HOST:PORT")]
    otlp_grpc: Option<String>,
    /// Hashes of the bearer tokens senders must present (lines from `evalsql otlp-token`);
    /// without it the OTLP listeners serve loopback only
    #[arg(long, value_name = "FILE")]
    otlp_tokens: Option<PathBuf>,
    /// The largest request body, after gzip is inflated
    #[arg(long, value_parser = crate::sizes::parse_bytes, default_value = "16m")]
    otlp_max_body: usize,
    /// Seconds a request may take, from its first byte to its answer
    #[arg(long, default_value_t = 30)]
    otlp_deadline: u64,
    /// Milliseconds received spans may wait to share a commit
    #[arg(long, default_value_t = 200)]
    otlp_flush_ms: u64,
    /// Bytes of spans that may wait for a commit; past them senders are told to retry (429)
    #[arg(long, value_parser = crate::sizes::parse_bytes, default_value = "256m")]
    otlp_queue: usize,
    /// Seconds between compactions of the store's small files
    #[arg(long, default_value_t = 300)]
    store_maintenance: u64,
    /// Hours files removed by compaction are kept for readers of older versions
    #[arg(long, default_value_t = 168)]
    store_retention: u64,
}

impl OtlpArgs {
    pub fn to_options(&self, store: Option<String>) -> OtlpOptions {
        OtlpOptions {
            http: self.otlp.clone(),
            grpc: self.otlp_grpc.clone(),
            tokens: self.otlp_tokens.clone(),
            store,
            max_body: self.otlp_max_body,
            deadline: std::time::Duration::from_secs(self.otlp_deadline.max(1)),
            store_options: StoreOptions {
                flush_interval: std::time::Duration::from_millis(self.otlp_flush_ms),
                queue_bytes: self.otlp_queue,
                maintenance_interval: std::time::Duration::from_secs(self.store_maintenance.max(1)),
                retention: std::time::Duration::from_secs(self.store_retention * 3600),
                ..Default::default()
            },
        }
    }
}

/// Registers `spans` (the store's table) in `ctx` when the store holds one; with `required`
/// (the user named the store) its absence is an error.
pub async fn register_spans(ctx: &SessionContext, location: &str, required: bool) -> Result<bool> {
    let url = store::table_url_of(location)?;
    match table::SpansTable::open(&url).await? {
        Some(t) => {
            ctx.register_table("spans", Arc::new(t))?;
            Ok(true)
        }
        None if required => Err(DataFusionError::Configuration(format!(
            "--store {location}: no spans table there yet (evalsql serve --otlp writes it)"
        ))),
        None => Ok(false),
    }
}

async fn bind(address: &str, flag: &str, tokens: bool) -> Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| DataFusionError::Execution(format!("{flag} {address}: cannot listen: {e}")))?;
    let bound: SocketAddr = listener.local_addr()?;
    if !tokens && !bound.ip().is_loopback() {
        return Err(DataFusionError::Configuration(format!(
            "{flag} {address}: without --otlp-tokens the OTLP listeners serve loopback only \
             (anyone who reaches the port could write spans)"
        )));
    }
    Ok(listener)
}

/// Starts the store's writer and the listeners asked for; returns once they listen. Their
/// connections take serve's `slots` (of `max_connections`), at most half of them.
pub async fn start(
    options: &OtlpOptions,
    tls: Option<rustls::ServerConfig>,
    slots: Arc<Semaphore>,
    max_connections: usize,
) -> Result<Arc<store::SpanStore>> {
    let own = Arc::new(Semaphore::new((max_connections / 2).max(1)));
    let tokens = options
        .tokens
        .as_deref()
        .map(tokens::Tokens::load)
        .transpose()?;
    let url = store::table_url_of(options.store_location())?;
    let mut listeners = Vec::new();
    for (address, flag, protocol) in [
        (&options.http, "--otlp", receive::Protocol::Http),
        (&options.grpc, "--otlp-grpc", receive::Protocol::Grpc),
    ] {
        if let Some(address) = address {
            listeners.push((bind(address, flag, tokens.is_some()).await?, protocol));
        }
    }
    let span_store = store::SpanStore::start(url, options.store_options.clone()).await?;
    let receiver = Arc::new(receive::Receiver {
        store: Arc::clone(&span_store),
        tokens,
        max_body: options.max_body,
        deadline: options.deadline,
    });
    for (listener, protocol) in listeners {
        eprintln!(
            "evalsql serve: OTLP/{} on {}{}; spans kept in {}",
            match protocol {
                receive::Protocol::Http => "HTTP",
                receive::Protocol::Grpc => "gRPC",
            },
            listener.local_addr()?,
            if tls.is_some() { " (TLS)" } else { "" },
            span_store.url()
        );
        let tls = tls.clone().map(|c| receive::tls_acceptor(c, protocol));
        tokio::spawn(receive::listen(
            listener,
            protocol,
            Arc::clone(&receiver),
            tls,
            Arc::clone(&slots),
            Arc::clone(&own),
        ));
    }
    Ok(span_store)
}
