//! The store: spans kept in a Delta Lake table (`<store>/spans`), written through delta-rs.
//!
//! Receivers hand rows to [`SpanStore::append`]; the writer ([`super::writer`]) groups what
//! arrives into one commit (after `flush_rows` rows, or `flush_interval` after the first row
//! waiting), and every request of the group is answered only once its rows are in a
//! committed version: an acknowledgement means durable. What waits is bounded in bytes (`queue_bytes`); past
//! it `append` says "busy" at once rather than holding the rows.
//!
//! Several processes may write one table on object storage: delta-rs commits with a
//! put-if-absent of the next log entry and retries appends that lost the race (appends never
//! conflict with each other, nor with compaction). Spans delivered twice are dropped by the
//! writer when it has seen them recently; the rest are dropped by the `spans` table's
//! reader (see [`super::table`]).

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use deltalake::kernel::StructType;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use evalsql_udfs::spans::store_schema;
use object_store::ObjectStore;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::writer::{Job, STATS_COLUMNS};
use url::Url;

/// The table's name under the store.
pub const SPANS: &str = "spans";

/// How the store writes and keeps its table.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Commit once this many rows wait...
    pub flush_rows: usize,
    /// ...or this long after the first of them arrived (or sooner, when no more arrive).
    pub flush_interval: Duration,
    /// The most bytes of rows waiting for a commit; past it `append` is refused.
    pub queue_bytes: usize,
    /// How often small files are compacted and removed files past the retention deleted.
    pub maintenance_interval: Duration,
    /// How long files a compaction removed stay (readers of older versions need them).
    pub retention: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            flush_rows: 50_000,
            flush_interval: Duration::from_millis(200),
            queue_bytes: 256 << 20,
            maintenance_interval: Duration::from_secs(300),
            retention: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Where a store lives (a directory, or an object-store URL: `s3://`, `gs://`, `az://`), as
/// a URL ending in a slash; its tables are below it.
pub fn store_url_of(location: &str) -> Result<Url> {
    let base = if location.contains("://") {
        Url::parse(location)
            .map_err(|e| DataFusionError::Configuration(format!("--store {location}: {e}")))?
    } else {
        // Made absolute without touching the disk: reading a store that is not there must
        // not create it (the writer's first commit does).
        let dir = std::path::absolute(location)
            .map_err(|e| DataFusionError::Configuration(format!("--store {location}: {e}")))?;
        Url::from_directory_path(&dir).map_err(|_| {
            DataFusionError::Configuration(format!("--store {location}: not a directory path"))
        })?
    };
    Ok(if base.path().ends_with('/') {
        base
    } else {
        Url::parse(&format!("{base}/")).expect("a URL with a slash is a URL")
    })
}

/// The URL of the spans table of the store at `location`.
pub fn table_url_of(location: &str) -> Result<Url> {
    store_url_of(location)?
        .join(&format!("{SPANS}/"))
        .map_err(|e| DataFusionError::Configuration(format!("--store {location}: {e}")))
}

/// The object store of a store's URL: the local file system (flushing), or the cloud stores configured
/// from the environment as the rest of evalsql configures them (`AWS_*`, `GOOGLE_*`,
/// `AZURE_*`). S3 commits need a conditional put: it is asked for (S3 and the emulators
/// that follow it answer `If-None-Match`).
pub fn object_store_for(url: &Url) -> Result<Arc<dyn ObjectStore>> {
    let bucket = || url.host_str().unwrap_or_default().to_string();
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        // Flushed to the disk before a write returns: an acknowledgement must survive a
        // power cut, not only the process's end.
        "file" => Arc::new(super::synced::SyncedLocal::new()),
        "s3" | "s3a" => Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket())
                .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
                .build()?,
        ),
        "gs" | "gcs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket())
                .build()?,
        ),
        "az" | "abfs" | "abfss" | "azure" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .build()?,
        ),
        other => {
            return Err(DataFusionError::Configuration(format!(
                "--store {url}: the scheme {other}:// is not a store (a directory, s3://, \
                 gs:// or az://)"
            )));
        }
    };
    register_log_store(url.scheme());
    Ok(store)
}

/// delta-rs finds a table's log store by the URL's scheme; its cloud crates would register
/// theirs with their own object stores, but the object store here is evalsql's, so the
/// default log store (commits by put-if-absent) is registered for the scheme instead.
pub fn register_log_store(scheme: &str) {
    #[derive(Debug)]
    struct PutIfAbsent;
    impl deltalake::logstore::LogStoreFactory for PutIfAbsent {
        fn with_options(
            &self,
            prefixed_store: deltalake::logstore::ObjectStoreRef,
            root_store: deltalake::logstore::ObjectStoreRef,
            location: &Url,
            options: &deltalake::logstore::StorageConfig,
        ) -> deltalake::DeltaResult<Arc<dyn deltalake::logstore::LogStore>> {
            Ok(deltalake::logstore::default_logstore(
                prefixed_store,
                root_store,
                location,
                options,
            ))
        }
    }
    let key = Url::parse(&format!("{scheme}://")).expect("a scheme is a URL");
    let factories = deltalake::logstore::logstore_factories();
    if !factories.contains_key(&key) {
        factories.insert(key, Arc::new(PutIfAbsent));
    }
}

fn builder(url: &Url, store: &Arc<dyn ObjectStore>) -> Result<DeltaTableBuilder> {
    Ok(DeltaTableBuilder::from_url(url.clone())
        .map_err(delta_error)?
        .with_storage_backend(Arc::clone(store), url.clone()))
}

pub fn delta_error(e: DeltaTableError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The table at `url`, not loaded: to load, or to create by its first write.
pub fn unloaded(url: &Url) -> Result<DeltaTable> {
    if let Ok(dir) = url.to_file_path() {
        std::fs::create_dir_all(&dir).map_err(|e| {
            DataFusionError::Configuration(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    builder(url, &object_store_for(url)?)?
        .build()
        .map_err(delta_error)
}

/// Opens the table at `url`, if there is one.
pub async fn open(url: &Url) -> Result<Option<DeltaTable>> {
    let store = object_store_for(url)?;
    // A table is a `_delta_log` with a commit in it; anything else is no table yet.
    let has_log = {
        use futures::StreamExt;
        let prefix = object_store::path::Path::from(
            format!("{}_delta_log/", url.path().trim_start_matches('/')).as_str(),
        );
        store.list(Some(&prefix)).next().await.is_some()
    };
    if !has_log {
        return Ok(None);
    }
    match builder(url, &store)?.load().await {
        Ok(t) => Ok(Some(t)),
        Err(DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(delta_error(e)),
    }
}

/// Opens the table at `url`, creating it first if there is none (two processes creating it
/// at once: one creates it, the other opens it).
pub async fn open_or_create(url: &Url) -> Result<DeltaTable> {
    for _ in 0..3 {
        if let Some(t) = open(url).await? {
            return Ok(t);
        }
        if let Ok(dir) = url.to_file_path() {
            std::fs::create_dir_all(&dir).map_err(|e| {
                DataFusionError::Configuration(format!(
                    "--store {}: cannot create it: {e}",
                    dir.display()
                ))
            })?;
        }
        let store = object_store_for(url)?;
        let schema: StructType = store_schema()
            .as_ref()
            .try_into_kernel()
            .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?;
        let table = builder(url, &store)?.build().map_err(delta_error)?;
        let created = table
            .create()
            .with_table_name(SPANS)
            .with_comment("OpenTelemetry spans received by evalsql serve")
            .with_columns(schema.fields().cloned())
            .with_partition_columns(["start_date"])
            .with_configuration([
                ("delta.checkpointInterval", Some("20")),
                ("delta.dataSkippingStatsColumns", Some(STATS_COLUMNS)),
                ("delta.logRetentionDuration", Some("interval 7 days")),
                (
                    "delta.deletedFileRetentionDuration",
                    Some("interval 7 days"),
                ),
            ])
            .await;
        match created {
            Ok(t) => return Ok(t),
            Err(e) => log::info!("creating {url}: {e}; opening what another process created"),
        }
    }
    Err(DataFusionError::Execution(format!(
        "the store at {url} could not be created or opened"
    )))
}

/// Why rows were not taken.
#[derive(Debug)]
pub enum Refused {
    /// More rows wait than the queue holds: try again shortly.
    Busy,
    /// The commit failed (the store is unreachable, or full).
    Failed(String),
}

/// The writing side of the store.
pub struct SpanStore {
    url: Url,
    jobs: mpsc::UnboundedSender<Job>,
    queued: Arc<Semaphore>,
    queue_bytes: usize,
}

impl std::fmt::Debug for SpanStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SpanStore({})", self.url)
    }
}

/// The bytes of a batch in queue units (KiB, so a 256 MiB queue fits a semaphore's count).
fn units(batch: &RecordBatch) -> u32 {
    (batch.get_array_memory_size() / 1024 + 1).min(u32::MAX as usize) as u32
}

impl SpanStore {
    /// Opens (or creates) the table and starts its writer and its maintenance.
    pub async fn start(url: Url, options: StoreOptions) -> Result<Arc<SpanStore>> {
        let table = open_or_create(&url).await?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let queue = (options.queue_bytes / 1024).max(1);
        let store = Arc::new(SpanStore {
            url,
            jobs,
            queued: Arc::new(Semaphore::new(queue)),
            queue_bytes: queue,
        });
        let maintenance = table.clone();
        tokio::spawn(super::writer::writer(
            table,
            rx,
            options.flush_rows,
            options.flush_interval,
        ));
        tokio::spawn(maintain(maintenance, options));
        Ok(store)
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    /// Takes `batch` (rows of [`store_schema`]) and answers once they are committed.
    pub async fn append(&self, batch: RecordBatch) -> std::result::Result<(), Refused> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let want = units(&batch).min(self.queue_bytes as u32);
        let permit = Arc::clone(&self.queued)
            .try_acquire_many_owned(want)
            .map_err(|_| Refused::Busy)?;
        let (done, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                batch,
                done,
                _permit: permit,
            })
            .map_err(|_| Refused::Failed("the store's writer has stopped".into()))?;
        match answer.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Refused::Failed(e)),
            Err(_) => Err(Refused::Failed("the store's writer has stopped".into())),
        }
    }
}

/// Compaction of small files (each commit writes a file per encoder and day it holds),
/// deletion of removed files past the retention, and of log entries past the table's log
/// retention, every `maintenance_interval`. Checkpoints are written by the writer.
async fn maintain(mut table: DeltaTable, options: StoreOptions) {
    let mut tick = tokio::time::interval(options.maintenance_interval);
    // A run that outlasts the interval is followed by a whole interval, not by another run.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(e) = maintain_once(&mut table, &options).await {
            log::warn!("span store maintenance: {e}");
        }
    }
}

pub async fn maintain_once(table: &mut DeltaTable, options: &StoreOptions) -> Result<String> {
    let compacted = super::compact::Compaction::default()
        .run(table, &super::writer::writer_properties())
        .await
        .map_err(delta_error)?;
    let (vacuumed, removed) = table
        .clone()
        .vacuum()
        .with_retention_period(
            chrono::Duration::from_std(options.retention).unwrap_or(chrono::Duration::days(7)),
        )
        .with_enforce_retention_duration(false)
        .await
        .map_err(delta_error)?;
    *table = vacuumed;
    // The commits leave the log alone (see `super::writer`): entries past the table's log
    // retention that a checkpoint covers go here.
    let logs = deltalake::checkpoints::cleanup_metadata(table, None)
        .await
        .map_err(delta_error)?;
    Ok(format!(
        "{} files compacted into {} ({} of them by copying), {} removed files deleted, \
         {logs} log entries deleted",
        compacted.removed,
        compacted.added,
        compacted.copied,
        removed.files_deleted.len()
    ))
}
