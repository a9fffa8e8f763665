//! The persistent judge cache: successful judgements by content address, in SQLite.
//!
//! SQLite in WAL mode because several processes (two CLI runs, a server and a batch job,
//! Ballista executors on one host) may open the same file at once: readers never block, one
//! writer at a time waits its turn (`busy_timeout`). Every success is committed on its own as
//! soon as it arrives, so a killed job loses at most the calls that were in flight; `NORMAL`
//! synchronisation in WAL mode keeps commits across a process crash (only an OS crash can
//! lose the last ones), which is the failure this cache is for.
//!
//! Only successes are stored: a failure is worth retrying on the next run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{
    ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{MemTable, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::common::{ScalarValue, plan_err};
use datafusion::logical_expr::Expr;
use rusqlite::{Connection, OptionalExtension, params};

use crate::common::process_env;
use crate::llm::settings::{JudgeOptions, cache_path};
use crate::llm::usage::Usage;

/// One stored judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedJudgement {
    pub score: f64,
    pub reason: String,
    /// The model that answered, as the endpoint named it.
    pub reply_model: Option<String>,
    /// Tokens, what the call cost when it was made, and its time.
    pub usage: Usage,
    /// The probability the model gave its score (from the reply's log-probabilities, when
    /// they were asked for and given): a cascade's confidence.
    pub confidence: Option<f64>,
}

/// What a row of the cache says about where a judgement came from.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheEntry<'a> {
    pub key: &'a str,
    pub metric: &'a str,
    pub rubric_version: &'a str,
    pub model: &'a str,
    pub judgement: &'a CachedJudgement,
}

/// An open cache file, shared by everything in the process that uses the same path.
#[derive(Debug)]
pub struct JudgeCache {
    path: PathBuf,
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS judgements (
    key               TEXT PRIMARY KEY,
    metric            TEXT NOT NULL,
    rubric_version    TEXT NOT NULL,
    model             TEXT NOT NULL,
    score             REAL NOT NULL,
    reason            TEXT NOT NULL,
    reply_model       TEXT,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    latency_ms        REAL NOT NULL,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    cached_tokens     INTEGER,
    cost_usd          REAL
);
CREATE TABLE IF NOT EXISTS generations (
    key               TEXT PRIMARY KEY,
    function          TEXT NOT NULL,
    target            TEXT NOT NULL,
    response          TEXT,
    trajectory        TEXT,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    latency_ms        REAL NOT NULL,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    cached_tokens     INTEGER,
    cost_usd          REAL
);";

/// Batch mode's record of what it submitted: every batch file (and the batch made of it,
/// once made) is written here before anything waits on it, so a job killed while waiting
/// and run again polls the same batches instead of paying for new ones.
const BATCH_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS batches (
    input_file   TEXT PRIMARY KEY,
    id           TEXT,
    endpoint     TEXT NOT NULL,
    model        TEXT NOT NULL,
    metric       TEXT NOT NULL,
    status       TEXT NOT NULL,
    lines        INTEGER NOT NULL,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at   TEXT
);
CREATE TABLE IF NOT EXISTS batch_lines (
    key          TEXT NOT NULL,
    input_file   TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    state        TEXT NOT NULL,
    error        TEXT,
    PRIMARY KEY (key, input_file)
);
CREATE INDEX IF NOT EXISTS batch_lines_pending ON batch_lines (key) WHERE state = 'pending';";

/// A batch file recorded in the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRecord {
    pub input_file: String,
    /// The provider's batch id (`None`: the file is uploaded, the batch not made yet).
    pub id: Option<String>,
    pub endpoint: String,
    pub model: String,
    pub metric: String,
    pub status: String,
    pub lines: i64,
    pub created_at: String,
}

/// A line waiting in a batch: which file and how many times it has been submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingLine {
    pub input_file: String,
    pub attempt: i64,
}

/// Columns added after the first release, as `(table, column, type)`: a cache file written
/// before them gains them (NULL in its old rows) when it is opened.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("judgements", "cached_tokens", "INTEGER"),
    ("judgements", "cost_usd", "REAL"),
    ("generations", "cached_tokens", "INTEGER"),
    ("generations", "cost_usd", "REAL"),
    ("judgements", "confidence", "REAL"),
];

/// Cascade calibrations (`judge_calibrate`): one row per metric, rubric, models and
/// guarantee (`key`), the newest replacing an older one.
const CALIBRATION_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS calibrations (
    key             TEXT PRIMARY KEY,
    metric          TEXT NOT NULL,
    rubric_version  TEXT NOT NULL,
    model           TEXT NOT NULL,
    small_model     TEXT NOT NULL,
    threshold       REAL,
    sample_size     INTEGER NOT NULL,
    agreement       REAL NOT NULL,
    lower_bound     REAL NOT NULL,
    escalated_share REAL NOT NULL,
    reason          TEXT,
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
";

/// A stored cascade calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCalibration {
    pub metric: String,
    pub rubric_version: String,
    pub model: String,
    pub small_model: String,
    /// `None`: no threshold qualified, every row escalates.
    pub threshold: Option<f64>,
    pub sample_size: i64,
    pub agreement: f64,
    pub lower_bound: f64,
    pub escalated_share: f64,
    pub reason: Option<String>,
}

/// A calibration from a row whose first columns are those of [`CALIBRATION_SCHEMA`] after
/// the key, in order.
fn calibration_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredCalibration> {
    Ok(StoredCalibration {
        metric: r.get(0)?,
        rubric_version: r.get(1)?,
        model: r.get(2)?,
        small_model: r.get(3)?,
        threshold: r.get(4)?,
        sample_size: r.get(5)?,
        agreement: r.get(6)?,
        lower_bound: r.get(7)?,
        escalated_share: r.get(8)?,
        reason: r.get(9)?,
    })
}

/// Adds the [`ADDED_COLUMNS`] a file lacks.
fn migrate(conn: &Connection) -> std::result::Result<(), String> {
    for (table, column, kind) in ADDED_COLUMNS {
        let present = conn
            .prepare(&format!(
                "SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?1"
            ))
            .and_then(|mut stmt| stmt.exists([column]))
            .map_err(|e| format!("cannot read the {table} table's columns: {e}"))?;
        if present {
            continue;
        }
        match conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}")) {
            Ok(()) => {}
            // Another process added it first.
            Err(e) if e.to_string().contains("duplicate column") => {}
            Err(e) => return Err(format!("cannot add {table}.{column}: {e}")),
        }
    }
    Ok(())
}

/// One stored target result (`generate`, `invoke_app`).
#[derive(Debug, Clone, PartialEq)]
pub struct CachedGeneration {
    pub response: Option<String>,
    pub trajectory: Option<String>,
    pub usage: Usage,
}

impl JudgeCache {
    /// The process-wide handle of the cache at `path`, opening (and creating) it on first use.
    pub fn open(path: &Path) -> Result<Arc<JudgeCache>> {
        static OPEN: OnceLock<Mutex<HashMap<PathBuf, Arc<JudgeCache>>>> = OnceLock::new();
        let mut open = OPEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(cache) = open.get(path) {
            return Ok(Arc::clone(cache));
        }
        let cache = Arc::new(Self::open_new(path).map_err(|e| {
            DataFusionError::Execution(format!(
                "judge cache {}: {e} (SET evalsql.judge.cache = 'off' or \
                 EVALSQL_JUDGE_CACHE=off runs without it)",
                path.display()
            ))
        })?);
        open.insert(path.to_path_buf(), Arc::clone(&cache));
        Ok(cache)
    }

    fn open_new(path: &Path) -> std::result::Result<JudgeCache, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create its directory: {e}"))?;
        }
        let conn = Connection::open(path).map_err(|e| format!("cannot open: {e}"))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(|e| e.to_string())?;
        // journal_mode returns a row, so it is a query, not an execute. SQLite answers
        // "database is locked" at once, without the busy handler, while another process is
        // switching the same new file (Ballista executors opening one cache together), so
        // wait for it here.
        let started = std::time::Instant::now();
        let mode: String = loop {
            match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)) {
                Ok(mode) => break mode,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy
                        && started.elapsed() < std::time::Duration::from_secs(30) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(format!("cannot switch to WAL mode: {e}")),
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!(
                "the file system does not support WAL mode ({mode})"
            ));
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL;")
            .map_err(|e| e.to_string())?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| format!("cannot create the judgements table: {e}"))?;
        migrate(&conn)?;
        conn.execute_batch(BATCH_SCHEMA)
            .map_err(|e| format!("cannot create the batches table: {e}"))?;
        conn.execute_batch(CALIBRATION_SCHEMA)
            .map_err(|e| format!("cannot create the calibrations table: {e}"))?;
        Ok(JudgeCache {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn error(&self, what: &str, e: rusqlite::Error) -> DataFusionError {
        DataFusionError::Execution(format!("judge cache {}: {what}: {e}", self.path.display()))
    }

    /// The stored judgements among `keys` (blocking; call from a blocking thread).
    pub fn get_many(&self, keys: &[String]) -> Result<HashMap<String, CachedJudgement>> {
        self.lookup(
            "SELECT score, reason, reply_model, prompt_tokens, completion_tokens, latency_ms,
                    cached_tokens, cost_usd, confidence
             FROM judgements WHERE key = ?1",
            keys,
            |r| {
                Ok(CachedJudgement {
                    score: r.get(0)?,
                    reason: r.get(1)?,
                    reply_model: r.get(2)?,
                    usage: Usage {
                        prompt_tokens: r.get(3)?,
                        completion_tokens: r.get(4)?,
                        latency_ms: Some(r.get(5)?),
                        cached_tokens: r.get(6)?,
                        cost_usd: r.get(7)?,
                    },
                    confidence: r.get(8)?,
                })
            },
        )
    }

    /// The row `sql` (one parameter: the key) finds for each of `keys`, read by `row`;
    /// keys without one are absent from the map (blocking).
    fn lookup<T>(
        &self,
        sql: &str,
        keys: &[String],
        row: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<HashMap<String, T>> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(sql)
            .map_err(|e| self.error("cannot read", e))?;
        let mut found = HashMap::new();
        for key in keys {
            let value = stmt
                .query_row([key], &row)
                .optional()
                .map_err(|e| self.error("cannot read", e))?;
            if let Some(v) = value {
                found.insert(key.clone(), v);
            }
        }
        Ok(found)
    }

    /// Commits one judgement (blocking). A key already present is left as it is: the first
    /// committed judgement is the one every later run sees.
    pub fn put(&self, entry: &CacheEntry<'_>) -> Result<()> {
        let j = entry.judgement;
        let conn = self.lock();
        conn.prepare_cached(
            "INSERT OR IGNORE INTO judgements (key, metric, rubric_version, model, score, reason,
                 reply_model, prompt_tokens, completion_tokens, latency_ms, cached_tokens,
                 cost_usd, confidence)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                entry.key,
                entry.metric,
                entry.rubric_version,
                entry.model,
                j.score,
                j.reason,
                j.reply_model,
                j.usage.prompt_tokens,
                j.usage.completion_tokens,
                j.usage.latency_ms.unwrap_or(0.0),
                j.usage.cached_tokens,
                j.usage.cost_usd,
                j.confidence,
            ])
        })
        .map_err(|e| self.error("cannot write", e))?;
        Ok(())
    }

    /// Stores a calibration under `key`, replacing an older one (blocking).
    pub fn put_calibration(&self, key: &str, c: &StoredCalibration) -> Result<()> {
        self.lock()
            .prepare_cached(
                "INSERT OR REPLACE INTO calibrations (key, metric, rubric_version, model,
                     small_model, threshold, sample_size, agreement, lower_bound,
                     escalated_share, reason)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    key,
                    c.metric,
                    c.rubric_version,
                    c.model,
                    c.small_model,
                    c.threshold,
                    c.sample_size,
                    c.agreement,
                    c.lower_bound,
                    c.escalated_share,
                    c.reason,
                ])
            })
            .map_err(|e| self.error("cannot write", e))?;
        Ok(())
    }

    /// Every stored calibration with its key and when it was made, newest first (blocking).
    pub fn calibrations(&self) -> Result<Vec<(String, StoredCalibration, String)>> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT metric, rubric_version, model, small_model, threshold, sample_size,
                        agreement, lower_bound, escalated_share, reason, created_at, key
                 FROM calibrations ORDER BY created_at DESC, metric",
            )
            .map_err(|e| self.error("cannot read", e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(11)?, calibration_row(r)?, r.get(10)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.error("cannot read", e))?;
        Ok(rows)
    }

    /// The calibration stored under `key` (blocking).
    pub fn calibration(&self, key: &str) -> Result<Option<StoredCalibration>> {
        let found = self.lookup(
            "SELECT metric, rubric_version, model, small_model, threshold, sample_size,
                    agreement, lower_bound, escalated_share, reason
             FROM calibrations WHERE key = ?1",
            &[key.to_string()],
            calibration_row,
        )?;
        Ok(found.into_values().next())
    }

    /// The mean completion tokens of the stored `metric` judgements by `model`, and how
    /// many there are (blocking).
    pub fn completion_mean(&self, metric: &str, model: &str) -> Result<(f64, u64)> {
        let conn = self.lock();
        conn.prepare_cached(
            "SELECT coalesce(avg(completion_tokens), 0), count(completion_tokens)
             FROM judgements WHERE metric = ?1 AND model = ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_row([metric, model], |r| {
                Ok((r.get::<_, f64>(0)?, r.get::<_, i64>(1)? as u64))
            })
        })
        .map_err(|e| self.error("cannot read", e))
    }

    /// Records an uploaded batch file and its lines `(key, attempt)` as pending (blocking).
    pub fn record_batch_file(&self, file: &BatchRecord, lines: &[(String, i64)]) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn
            .transaction()
            .map_err(|e| self.error("cannot write", e))?;
        tx.execute(
            "INSERT INTO batches (input_file, id, endpoint, model, metric, status, lines)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                file.input_file,
                file.id,
                file.endpoint,
                file.model,
                file.metric,
                file.status,
                file.lines
            ],
        )
        .map_err(|e| self.error("cannot write", e))?;
        {
            let mut stmt = tx
                .prepare(
                    "INSERT OR REPLACE INTO batch_lines (key, input_file, attempt, state)
                     VALUES (?1, ?2, ?3, 'pending')",
                )
                .map_err(|e| self.error("cannot write", e))?;
            for (key, attempt) in lines {
                stmt.execute(params![key, file.input_file, attempt])
                    .map_err(|e| self.error("cannot write", e))?;
            }
        }
        tx.commit().map_err(|e| self.error("cannot write", e))
    }

    /// Sets the batch id and status of a recorded file (blocking).
    pub fn set_batch(&self, input_file: &str, id: &str, status: &str) -> Result<()> {
        self.lock()
            .execute(
                "UPDATE batches SET id = ?2, status = ?3,
                        updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                 WHERE input_file = ?1",
                params![input_file, id, status],
            )
            .map_err(|e| self.error("cannot write", e))?;
        Ok(())
    }

    /// The recorded batch files, oldest first (blocking).
    pub fn batches(&self) -> Result<Vec<BatchRecord>> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare(
                "SELECT input_file, id, endpoint, model, metric, status, lines, created_at
                 FROM batches ORDER BY created_at, input_file",
            )
            .map_err(|e| self.error("cannot read", e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(BatchRecord {
                    input_file: r.get(0)?,
                    id: r.get(1)?,
                    endpoint: r.get(2)?,
                    model: r.get(3)?,
                    metric: r.get(4)?,
                    status: r.get(5)?,
                    lines: r.get(6)?,
                    created_at: r.get(7)?,
                })
            })
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| self.error("cannot read", e))?;
        Ok(rows)
    }

    /// The lines among `keys` waiting in a batch (blocking).
    pub fn pending_lines(&self, keys: &[String]) -> Result<HashMap<String, PendingLine>> {
        self.lookup(
            "SELECT input_file, attempt FROM batch_lines
             WHERE key = ?1 AND state = 'pending' ORDER BY attempt DESC LIMIT 1",
            keys,
            |r| {
                Ok(PendingLine {
                    input_file: r.get(0)?,
                    attempt: r.get(1)?,
                })
            },
        )
    }

    /// Marks a line `done`, `failed` or `resubmitted` (blocking).
    pub fn line_state(
        &self,
        key: &str,
        input_file: &str,
        state: &str,
        error: Option<&str>,
    ) -> Result<()> {
        self.lock()
            .prepare_cached(
                "UPDATE batch_lines SET state = ?3, error = ?4 WHERE key = ?1 AND input_file = ?2",
            )
            .and_then(|mut stmt| stmt.execute(params![key, input_file, state, error]))
            .map_err(|e| self.error("cannot write", e))?;
        Ok(())
    }

    /// The stored target results among `keys` (blocking).
    pub fn get_generations(&self, keys: &[String]) -> Result<HashMap<String, CachedGeneration>> {
        self.lookup(
            "SELECT response, trajectory, prompt_tokens, completion_tokens, latency_ms,
                    cached_tokens, cost_usd
             FROM generations WHERE key = ?1",
            keys,
            |r| {
                Ok(CachedGeneration {
                    response: r.get(0)?,
                    trajectory: r.get(1)?,
                    usage: Usage {
                        prompt_tokens: r.get(2)?,
                        completion_tokens: r.get(3)?,
                        latency_ms: Some(r.get(4)?),
                        cached_tokens: r.get(5)?,
                        cost_usd: r.get(6)?,
                    },
                })
            },
        )
    }

    /// Commits one target result (blocking); the first one stored for a key stays.
    pub fn put_generation(
        &self,
        key: &str,
        function: &str,
        target: &str,
        g: &CachedGeneration,
    ) -> Result<()> {
        let conn = self.lock();
        conn.prepare_cached(
            "INSERT OR IGNORE INTO generations (key, function, target, response, trajectory,
                 prompt_tokens, completion_tokens, latency_ms, cached_tokens, cost_usd)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                key,
                function,
                target,
                g.response,
                g.trajectory,
                g.usage.prompt_tokens,
                g.usage.completion_tokens,
                g.usage.latency_ms.unwrap_or(0.0),
                g.usage.cached_tokens,
                g.usage.cost_usd,
            ])
        })
        .map_err(|e| self.error("cannot write", e))?;
        Ok(())
    }

    /// The schema of [`JudgeCache::to_batch`].
    pub fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("metric", DataType::Utf8, false),
            Field::new("rubric_version", DataType::Utf8, false),
            Field::new("model", DataType::Utf8, false),
            Field::new("score", DataType::Float64, false),
            Field::new("reason", DataType::Utf8, false),
            Field::new("reply_model", DataType::Utf8, true),
            Field::new("prompt_tokens", DataType::Int64, true),
            Field::new("cached_tokens", DataType::Int64, true),
            Field::new("completion_tokens", DataType::Int64, true),
            Field::new("cost_usd", DataType::Float64, true),
            Field::new("latency_ms", DataType::Float64, false),
            Field::new("created_at", DataType::Utf8, false),
        ]))
    }

    /// Every stored judgement as one Arrow batch, oldest first (blocking).
    pub fn to_batch(&self) -> Result<RecordBatch> {
        let conn = self.lock();
        judgements_batch(&conn, &JUDGEMENT_COLUMNS.join(", "), |what, e| {
            self.error(what, e)
        })
    }
}

/// The columns of the judgements table in the order [`judgements_batch`] reads them, and
/// whether each may be NULL (a nullable column an older file lacks is read as NULL).
const JUDGEMENT_COLUMNS: [&str; 13] = [
    "key",
    "metric",
    "rubric_version",
    "model",
    "score",
    "reason",
    "reply_model",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "created_at",
    "cached_tokens",
    "cost_usd",
];
const NULLABLE: [&str; 5] = [
    "reply_model",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost_usd",
];

/// Every judgement of `conn` as one Arrow batch, oldest first; `select` is the list of
/// [`JUDGEMENT_COLUMNS`] (or NULLs in their place).
fn judgements_batch(
    conn: &Connection,
    select: &str,
    error: impl Fn(&str, rusqlite::Error) -> DataFusionError,
) -> Result<RecordBatch> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {select} FROM judgements ORDER BY created_at, key"
        ))
        .map_err(|e| error("cannot read", e))?;
    let mut text: Vec<StringBuilder> = (0..5).map(|_| StringBuilder::new()).collect();
    let mut reply_model = StringBuilder::new();
    let mut created = StringBuilder::new();
    let mut score = Float64Builder::new();
    let mut latency = Float64Builder::new();
    let mut prompt = Int64Builder::new();
    let mut completion = Int64Builder::new();
    let mut cached = Int64Builder::new();
    let mut cost = Float64Builder::new();
    let mut rows = stmt.query([]).map_err(|e| error("cannot read", e))?;
    while let Some(r) = rows.next().map_err(|e| error("cannot read", e))? {
        let read = |e| error("cannot read", e);
        for (i, col) in [0usize, 1, 2, 3, 5].iter().enumerate() {
            text[i].append_value(r.get::<_, String>(*col).map_err(read)?);
        }
        score.append_value(r.get(4).map_err(read)?);
        reply_model.append_option(r.get::<_, Option<String>>(6).map_err(read)?);
        prompt.append_option(r.get::<_, Option<i64>>(7).map_err(read)?);
        completion.append_option(r.get::<_, Option<i64>>(8).map_err(read)?);
        latency.append_value(r.get(9).map_err(read)?);
        created.append_value(r.get::<_, String>(10).map_err(read)?);
        cached.append_option(r.get::<_, Option<i64>>(11).map_err(read)?);
        cost.append_option(r.get::<_, Option<f64>>(12).map_err(read)?);
    }
    let mut text = text
        .into_iter()
        .map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let mut next = || text.next().expect("five text columns");
    let (key, metric, version, model, reason) = (next(), next(), next(), next(), next());
    let columns: Vec<ArrayRef> = vec![
        key,
        metric,
        version,
        model,
        Arc::new(score.finish()),
        reason,
        Arc::new(reply_model.finish()),
        Arc::new(prompt.finish()),
        Arc::new(cached.finish()),
        Arc::new(completion.finish()),
        Arc::new(cost.finish()),
        Arc::new(latency.finish()),
        Arc::new(created.finish()),
    ];
    Ok(RecordBatch::try_new(JudgeCache::schema(), columns)?)
}

/// What is checked of a cache file before and after an immutable read: if any of it
/// changed (or a WAL file appeared), a writer may have been at work and the read is redone.
#[derive(Debug, PartialEq)]
struct FileState {
    len: u64,
    modified: Option<std::time::SystemTime>,
    wal: bool,
}

/// Where the SQLite files beside `path` would be (`<path>-wal`, `<path>-shm`).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A non-empty file at `path` (following links).
fn non_empty_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0)
}

/// `judge_cache(path)`: the judgements of an existing evalsql cache file, read without
/// writing anything and without keeping the file open (blocking).
///
/// Any client of a server may name any file under the data roots, so this never creates a
/// file or directory, never turns a file into a database, and holds no descriptor after
/// the read (the process-wide [`JudgeCache::open`] handles are for the caches the judge
/// writes). Two ways to read without writing:
/// - a WAL database with its `-wal` and `-shm` files present (a writer has it open, or
///   crashed): an ordinary read-only connection, which uses those files and so sees every
///   committed row;
/// - otherwise every committed row is in the main file, which is read with SQLite's
///   `immutable` flag (a plain read-only open would create the `-wal` and `-shm` files).
///   As that read takes no lock, it is redone if the file changed meanwhile (a writer
///   opened it).
pub fn read_cache_file(path: &Path) -> Result<RecordBatch> {
    let fail =
        |what: String| DataFusionError::Plan(format!("judge_cache('{}'): {what}", path.display()));
    let path = std::path::absolute(path).map_err(|e| fail(format!("bad path: {e}")))?;
    let state = || -> Result<FileState> {
        let meta = std::fs::metadata(&path).map_err(|e| {
            fail(if e.kind() == std::io::ErrorKind::NotFound {
                "no such file (judge_cache reads an existing judge cache, it creates none)"
                    .to_string()
            } else {
                format!("cannot read it: {e}")
            })
        })?;
        if !meta.is_file() {
            return Err(fail("not a file".into()));
        }
        Ok(FileState {
            len: meta.len(),
            modified: meta.modified().ok(),
            wal: sibling(&path, "-wal").exists(),
        })
    };
    let not_a_cache = |why: &str| fail(format!("not an evalsql judge cache ({why})"));
    for _ in 0..10 {
        let before = state()?;
        let mut header = [0u8; 100];
        std::io::Read::read_exact(
            &mut std::fs::File::open(&path).map_err(|e| fail(format!("cannot read it: {e}")))?,
            &mut header,
        )
        .map_err(|_| not_a_cache("not a SQLite database"))?;
        if !header.starts_with(b"SQLite format 3\0") {
            return Err(not_a_cache("not a SQLite database"));
        }
        let wal_mode = header[18] == 2;
        let wal = sibling(&path, "-wal");
        let live = wal_mode && before.wal && sibling(&path, "-shm").exists();
        if wal_mode && before.wal && !live && non_empty_file(&wal) {
            return Err(fail(format!(
                "{} has no -shm file beside it: open the cache once with evalsql's judge \
                 (a writer) to recover it",
                wal.display()
            )));
        }
        let conn = if live {
            // An absolute path: the bundled SQLite would read "file:..." as a URI.
            Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        } else {
            Connection::open_with_flags(
                format!("file://{}?immutable=1", uri_path(&path)),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_URI
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        }
        .map_err(|e| fail(format!("cannot open it: {e}")))?;
        let sql_error = |what: &str, e: rusqlite::Error| fail(format!("{what}: {e}"));
        conn.execute_batch("PRAGMA trusted_schema = OFF; PRAGMA query_only = ON;")
            .map_err(|e| sql_error("cannot read", e))?;
        let select = cache_columns(&conn).map_err(|e| match e {
            Ok(why) => not_a_cache(&why),
            Err(e) => sql_error("cannot read", e),
        })?;
        let batch = judgements_batch(&conn, &select, sql_error)?;
        drop(conn);
        if live || state()? == before {
            return Ok(batch);
        }
    }
    Err(fail(
        "it kept changing while it was read (a judge is writing it); try again".into(),
    ))
}

/// The select list of [`JUDGEMENT_COLUMNS`] for the file of `conn`: `Err(Ok(why))` when it
/// is not an evalsql cache.
fn cache_columns(
    conn: &Connection,
) -> std::result::Result<String, std::result::Result<String, rusqlite::Error>> {
    let is_table: bool =
        conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'judgements'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(|e| match e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
                Ok("not a SQLite database".to_string())
            }
            e => Err(e),
        })? == 1;
    if !is_table {
        return Err(Ok("it has no judgements table".into()));
    }
    let present: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('judgements')")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(Err)?;
    let mut select = Vec::new();
    for column in JUDGEMENT_COLUMNS {
        if present.iter().any(|p| p.eq_ignore_ascii_case(column)) {
            select.push(column.to_string());
        } else if NULLABLE.contains(&column) {
            select.push(format!("NULL AS {column}"));
        } else {
            return Err(Ok(format!("its judgements table has no {column} column")));
        }
    }
    Ok(select.join(", "))
}

/// An absolute path as the path of a `file:` URI (everything but unreserved characters and
/// `/` percent-encoded, so nothing in it is read as a query parameter).
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `judge_cache([path])`: the judge cache as a table (the session's cache file unless a path
/// is given).
#[derive(Debug, Default)]
pub struct JudgeCacheTableFunc;

impl TableFunctionImpl for JudgeCacheTableFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let batch = match args.exprs() {
            [] => {
                let options = args.session().config_options();
                let session = options.extensions.get::<JudgeOptions>();
                // The session's own cache: the judge's writer handle (created if need be).
                match cache_path(session, &process_env) {
                    Some(p) => JudgeCache::open(&p)?.to_batch()?,
                    None => return plan_err!("judge_cache(): the judge cache is off"),
                }
            }
            [Expr::Literal(ScalarValue::Utf8(Some(p)), _)]
            | [Expr::Literal(ScalarValue::Utf8View(Some(p)), _)]
            | [Expr::Literal(ScalarValue::LargeUtf8(Some(p)), _)] => read_cache_file(Path::new(p))?,
            other => {
                return plan_err!(
                    "judge_cache([path]) takes no argument or a path string, got {other:?}"
                );
            }
        };
        Ok(Arc::new(MemTable::try_new(
            JudgeCache::schema(),
            vec![vec![batch]],
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judgement(score: f64) -> CachedJudgement {
        CachedJudgement {
            score,
            reason: "because".into(),
            reply_model: Some("m-2024".into()),
            usage: Usage {
                prompt_tokens: Some(120),
                cached_tokens: Some(0),
                completion_tokens: None,
                cost_usd: Some(0.001),
                latency_ms: Some(12.5),
            },
            confidence: None,
        }
    }

    #[test]
    fn stores_reads_and_keeps_the_first_judgement() {
        let dir = std::env::temp_dir().join(format!("evalsql-cache-test-{}", std::process::id()));
        let path = dir.join("nested").join("c.sqlite");
        let _ = std::fs::remove_dir_all(&dir);
        let cache = JudgeCache::open(&path).unwrap();
        assert!(Arc::ptr_eq(&cache, &JudgeCache::open(&path).unwrap()));
        let entry = |key, j| CacheEntry {
            key,
            metric: "fluency",
            rubric_version: "fluency@1",
            model: "m",
            judgement: j,
        };
        let (four, one, two) = (judgement(4.0), judgement(1.0), judgement(2.0));
        cache.put(&entry("a", &four)).unwrap();
        cache.put(&entry("a", &one)).unwrap();
        cache.put(&entry("b", &two)).unwrap();
        let found = cache
            .get_many(&["a".into(), "zz".into(), "b".into()])
            .unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found["a"], judgement(4.0));
        assert_eq!(found["b"].score, 2.0);

        // A second connection (as another process would open) sees the commits.
        let other = JudgeCache::open_new(&path).unwrap();
        assert_eq!(other.get_many(&["b".into()]).unwrap().len(), 1);
        let batch = other.to_batch().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), JudgeCache::schema());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every file and directory under `dir`, with its size.
    fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let meta = e.metadata().unwrap();
                if meta.is_dir() {
                    todo.push(e.path());
                }
                out.push((e.path(), if meta.is_dir() { 0 } else { meta.len() }));
            }
        }
        out.sort();
        out
    }

    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    /// `judge_cache(path)` is what any client of a server may call on any file under the
    /// data roots: it must create nothing (no database, no directory, no -wal/-shm), change
    /// no file, refuse what is not a cache, and keep no descriptor, however many paths.
    #[tokio::test]
    async fn judge_cache_of_a_path_reads_without_writing_or_holding_files() {
        use datafusion::prelude::SessionContext;

        let dir = std::env::temp_dir().join(format!("evalsql-cache-ro-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let entry = |key, j| CacheEntry {
            key,
            metric: "fluency",
            rubric_version: "fluency@1",
            model: "m",
            judgement: j,
        };
        let (four, two) = (judgement(4.0), judgement(2.0));
        // A cache the judge wrote and closed (WAL mode, no -wal file left).
        let real = dir.join("real.sqlite");
        {
            let cache = JudgeCache::open_new(&real).unwrap();
            cache.put(&entry("a", &four)).unwrap();
            cache.put(&entry("b", &two)).unwrap();
        }
        // A cache a judge holds open, its last commit still in the WAL only.
        let live_path = dir.join("live.sqlite");
        let live = JudgeCache::open_new(&live_path).unwrap();
        live.put(&entry("a", &four)).unwrap();
        // A cache written before cached_tokens and cost_usd existed (rollback journal).
        let v1 = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/judge_cache_v1/judge-cache.sqlite");
        std::fs::copy(&v1, dir.join("v1.sqlite")).unwrap();
        // A SQLite database that is not a judge cache.
        Connection::open(dir.join("other.db"))
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let mut paths = Vec::new();
        for i in 0..500 {
            let copy = dir.join(format!("copy-{i}.sqlite"));
            std::fs::copy(&real, &copy).unwrap();
            paths.push((copy, Ok(2)));
            let empty = dir.join(format!("empty-{i}.csv"));
            std::fs::write(&empty, "").unwrap();
            paths.push((
                empty,
                Err("not an evalsql judge cache (not a SQLite database)"),
            ));
            let csv = dir.join(format!("rows-{i}.csv"));
            std::fs::write(&csv, "a,b\n1,2\n".repeat(20)).unwrap();
            paths.push((
                csv,
                Err("not an evalsql judge cache (not a SQLite database)"),
            ));
            paths.push((
                dir.join(format!("missing-{i}/c.sqlite")),
                Err("no such file"),
            ));
        }
        paths.push((dir.join("other.db"), Err("it has no judgements table")));
        paths.push((dir.join("v1.sqlite"), Ok(68)));
        paths.push((live_path.clone(), Ok(1)));
        paths.push((dir.clone(), Err("not a file")));

        let ctx = SessionContext::new();
        ctx.register_udtf("judge_cache", Arc::new(JudgeCacheTableFunc));
        let count = |path: PathBuf| {
            let ctx = ctx.clone();
            async move {
                let sql = format!(
                    "SELECT count(*) AS n, count(cached_tokens) AS c FROM judge_cache('{}')",
                    path.display()
                );
                let batches = ctx.sql(&sql).await?.collect().await?;
                let n = batches[0]
                    .column(0)
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::Int64Array>()
                    .unwrap()
                    .value(0);
                Ok::<i64, DataFusionError>(n)
            }
        };
        // Warm up (the runtime's own descriptors), then measure.
        count(real.clone()).await.unwrap();
        let files = listing(&dir);
        let fds = open_fds();
        for (round, (path, expected)) in paths.iter().enumerate() {
            let got = count(path.clone()).await;
            match (expected, got) {
                (Ok(n), Ok(got)) => assert_eq!(got, *n, "{}", path.display()),
                (Err(why), Err(e)) => {
                    let e = e.to_string();
                    assert!(
                        e.contains(&format!("judge_cache('{}')", path.display())),
                        "{e}"
                    );
                    assert!(e.contains(why), "{e}");
                }
                (_, got) => panic!("{}: {got:?}", path.display()),
            }
            if round % 250 == 0 {
                assert!(
                    open_fds() <= fds + 4,
                    "descriptors kept after {round} paths"
                );
            }
        }
        assert!(
            open_fds() <= fds + 4,
            "{} descriptors, {fds} before",
            open_fds()
        );
        assert_eq!(listing(&dir), files, "judge_cache created or changed files");

        // A writer's later commit is seen by the next read.
        live.put(&entry("b", &two)).unwrap();
        assert_eq!(count(live_path.clone()).await.unwrap(), 2);
        drop(live);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unusable_path_is_a_clear_error() {
        let err = JudgeCache::open(Path::new("/proc/evalsql/no/c.sqlite"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("judge cache /proc/evalsql/no/c.sqlite"),
            "{err}"
        );
        assert!(err.contains("'off'"), "{err}");
    }
}
