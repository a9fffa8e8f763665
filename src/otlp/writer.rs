//! The store's writer: group commit over parallel encoders.
//!
//! One coordinating task takes what the receivers hand over (`store::SpanStore`)
//! and forms groups: a group closes at `flush_rows` rows, `flush_interval` after its first
//! request, or once no request came for [`LINGER`] (senders waiting on their answers send
//! nothing more, so waiting longer would only delay them). Each request is passed on as it
//! arrives to one of several *lanes*, one per core, each a task with its own Parquet writer:
//! encoding, the costly part, runs on every core and overlaps the forming of the group. When
//! the group closes, every lane it used closes its files, and their files are committed
//! together as one Delta version; then every request of the group is answered. A failed
//! file or commit fails the whole group (its senders retry): nothing is acknowledged that
//! is not in a committed version.
//!
//! The commit is an append to the log and nothing more ([`super::commit`]): it does not
//! bring a list of the table's files up to date, so its cost does not grow with the table.
//! Checkpoints are written beside it ([`Checkpoints`]), and old log entries are removed by
//! the store's maintenance.

use std::collections::HashSet;
use std::time::Duration;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::Date32Type;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};
use datafusion::parquet::schema::types::ColumnPath;
use deltalake::kernel::Add;
use deltalake::kernel::scalars::ScalarExt;
use deltalake::writer::{DeltaWriter, RecordBatchWriter, WriteMode};
use deltalake::{DeltaTable, DeltaTableError};
use indexmap::IndexMap;
use tokio::sync::{mpsc, oneshot};

use super::commit::Log;

/// A group closes once no request came for this long.
pub const LINGER: Duration = Duration::from_millis(10);

/// The columns Delta keeps minimum and maximum values of in its log, for readers to skip
/// files: the ones queries filter on. Ids are random and texts long: their bounds would
/// cost log space and skip nothing.
pub const STATS_COLUMNS: &str = "name,kind,start_time,end_time,duration_ms,status_code,\
service_name,operation_name,model,agent_name,tool_name,input_tokens,output_tokens,\
start_time_unix_nano,end_time_unix_nano,ingested_at";

/// Columns whose values rarely repeat: a dictionary for them is built, found useless and
/// dropped, for nothing.
const NO_DICTIONARY: [&str; 16] = [
    "trace_id",
    "span_id",
    "parent_span_id",
    "status_message",
    "attributes",
    "conversation_id",
    "tool_call_id",
    "tool_arguments",
    "tool_result",
    "input_messages",
    "output_messages",
    "input_text",
    "output_text",
    "trace_state",
    "events",
    "links",
];

/// How the span files are written: snappy, as delta-rs writes by default; statistics per
/// column chunk for the columns of [`STATS_COLUMNS`] only; no dictionaries where values
/// rarely repeat; a bloom filter on `trace_id`.
pub fn writer_properties() -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_statistics_enabled(EnabledStatistics::None);
    for c in STATS_COLUMNS.split(',') {
        b = b.set_column_statistics_enabled(ColumnPath::from(c), EnabledStatistics::Chunk);
    }
    for c in NO_DICTIONARY {
        b = b.set_column_dictionary_enabled(ColumnPath::from(c), false);
    }
    // A monitor reads the spans of the traces it scores, whatever file they are in: with a
    // bloom filter on `trace_id` a scan skips each row group that holds none of them after
    // reading a few KiB. Sized for the traces of a compacted file's row group (a commit's
    // files hold fewer; more only raise the false positives, never lose a row).
    let trace = ColumnPath::from("trace_id");
    b = b
        .set_column_bloom_filter_enabled(trace.clone(), true)
        .set_column_bloom_filter_max_ndv(trace.clone(), 16_384)
        .set_column_bloom_filter_fpp(trace, 0.01);
    b.build()
}

/// Rows handed to the writer, and where to say whether they were committed.
pub struct Job {
    pub batch: RecordBatch,
    pub done: oneshot::Sender<Result<(), String>>,
    /// The queue's bytes this job holds, given back once it is answered and dropped.
    pub _permit: tokio::sync::OwnedSemaphorePermit,
}

/// What a lane is asked to do.
enum ToLane {
    Write(RecordBatch),
    /// Close the files of the group and hand back their `Add` actions.
    Close(oneshot::Sender<Result<Vec<Add>, String>>),
}

/// One encoder: a task with its own Parquet writer, fed one request at a time.
async fn lane(mut writer: RecordBatchWriter, mut work: mpsc::UnboundedReceiver<ToLane>) {
    // After a failed write the window is dropped whole at the next close: nothing of the
    // group may be committed, or some of its requests would be half in.
    let mut failed: Option<String> = None;
    while let Some(next) = work.recv().await {
        match next {
            ToLane::Write(batch) => {
                if failed.is_none()
                    && let Err(e) = write(&mut writer, batch).await
                {
                    failed = Some(e.to_string());
                }
            }
            ToLane::Close(answer) => {
                let closed = match failed.take() {
                    Some(e) => {
                        writer.reset();
                        Err(e)
                    }
                    None => writer.flush().await.map_err(|e| e.to_string()),
                };
                let _ = answer.send(closed);
            }
        }
    }
}

/// Writes `batch` into its day's file. A request's spans nearly always start on one day:
/// their day is given to the writer, which then takes the batch as it is (it would
/// otherwise sort the rows by day and copy every column).
async fn write(writer: &mut RecordBatchWriter, batch: RecordBatch) -> Result<(), DeltaTableError> {
    let day = batch.column(batch.num_columns() - 1);
    let one_day = match day.as_primitive_opt::<Date32Type>() {
        Some(days) if days.null_count() == 0 => {
            let first = days.value(0);
            days.values().iter().all(|d| *d == first)
        }
        _ => false,
    };
    if !one_day || batch.schema().field(batch.num_columns() - 1).name() != "start_date" {
        return writer.write(batch).await;
    }
    let Some(value) = ScalarExt::from_array(day.as_ref(), 0) else {
        return writer.write(batch).await;
    };
    let mut partition = IndexMap::new();
    partition.insert("start_date".to_string(), value);
    writer
        .write_partition(batch, &partition, WriteMode::Default)
        .await
        .map(|_| ())
}

/// A span's identity: its trace id and span id as numbers (24 bytes, no padding; the
/// receiver made both hex of 16 and 8 bytes).
type Key = ([u64; 2], u64);

fn keys(batch: &RecordBatch) -> Vec<Key> {
    let trace = batch.column(0).as_string::<i32>();
    let span = batch.column(1).as_string::<i32>();
    let num = |hex: &str| u64::from_str_radix(hex, 16).unwrap_or(u64::MAX);
    (0..batch.num_rows())
        .map(|i| {
            let t = trace.value(i);
            let (high, low) = t.split_at(t.len().min(16));
            ([num(high), num(low)], num(span.value(i)))
        })
        .collect()
}

type KeySet = HashSet<Key>;

/// The spans written lately, in two generations so the memory stays bounded: a retried
/// export usually comes back within seconds.
struct Recent {
    now: KeySet,
    before: KeySet,
    cap: usize,
}

impl Recent {
    fn new(cap: usize) -> Self {
        Recent {
            now: KeySet::new(),
            before: KeySet::new(),
            cap,
        }
    }

    fn contains(&self, k: &Key) -> bool {
        self.now.contains(k) || self.before.contains(k)
    }

    fn insert(&mut self, k: Key) {
        if self.now.len() >= self.cap {
            self.before = std::mem::take(&mut self.now);
        }
        self.now.insert(k);
    }
}

/// A group being formed.
struct Group {
    jobs: Vec<Job>,
    rows: usize,
    /// Keys of the rows kept, for [`Recent`] once committed (and to drop repeats within).
    kept: KeySet,
    /// Which lanes were given rows.
    used: Vec<bool>,
}

/// Checkpoints written beside the commits, one at a time, every `every` versions but no
/// more often than every `spacing`: a checkpoint costs in proportion to the table's files
/// (under a flood, one every 20 versions took a fifth of a core), and readers replay the
/// log since the last one. The task keeps its own copy of the table, brought up to each
/// checkpoint's version (the commits keep none).
struct Checkpoints {
    every: u64,
    spacing: Duration,
    last: u64,
    last_at: tokio::time::Instant,
    table: Option<DeltaTable>,
    running: Option<tokio::task::JoinHandle<DeltaTable>>,
}

impl Checkpoints {
    async fn after_commit(&mut self, version: u64) {
        if version.saturating_sub(self.last) < self.every
            || self.last_at.elapsed() < self.spacing
            || self.running.as_ref().is_some_and(|r| !r.is_finished())
        {
            return;
        }
        if let Some(done) = self.running.take() {
            match done.await {
                Ok(table) => self.table = Some(table),
                Err(e) => log::warn!("span store checkpoint task: {e}"),
            }
        }
        let Some(mut table) = self.table.take() else {
            return;
        };
        self.last = version;
        self.last_at = tokio::time::Instant::now();
        self.running = Some(tokio::spawn(async move {
            match table.update_incremental(Some(version)).await {
                Ok(()) => {
                    if let Err(e) = deltalake::checkpoints::create_checkpoint(&table, None).await {
                        log::warn!("span store checkpoint at version {version}: {e}");
                    }
                }
                Err(e) => {
                    log::warn!("span store checkpoint: reading version {version}: {e}");
                    // Read from the start next time rather than from a half-updated state.
                    table.state = None;
                }
            }
            table
        }));
    }
}

/// The coordinating task; see the module's documentation.
pub async fn writer(
    table: DeltaTable,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    flush_rows: usize,
    flush_interval: Duration,
) {
    let lanes: Vec<mpsc::UnboundedSender<ToLane>> = {
        let n = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8);
        let mut lanes = Vec::with_capacity(n);
        for _ in 0..n {
            match RecordBatchWriter::for_table(&table) {
                Ok(w) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    tokio::spawn(lane(w.with_writer_properties(writer_properties()), rx));
                    lanes.push(tx);
                }
                Err(e) => {
                    log::error!("the span store cannot write its table: {e}");
                    return;
                }
            }
        }
        lanes
    };
    // Half a million spans a generation: at 100,000 spans a second a retry is caught for
    // five seconds at least (and dropped by the readers after that).
    let mut recent = Recent::new(1 << 19);
    let mut next_lane = 0;
    let mut log = match Log::of(&table) {
        Ok(log) => log,
        Err(e) => {
            log::error!("the span store cannot append to its table: {e}");
            return;
        }
    };
    let mut checkpoints = Checkpoints {
        every: 20,
        spacing: Duration::from_secs(10),
        last: log.version(),
        // The first checkpoint waits for versions only.
        last_at: {
            let now = tokio::time::Instant::now();
            now.checked_sub(Duration::from_secs(10)).unwrap_or(now)
        },
        table: Some(table),
        running: None,
    };
    while let Some(first) = jobs.recv().await {
        let deadline = tokio::time::Instant::now() + flush_interval;
        let mut group = Group {
            jobs: Vec::new(),
            rows: 0,
            kept: KeySet::new(),
            used: vec![false; lanes.len()],
        };
        let mut take = |job: Job, group: &mut Group| {
            let batch = drop_repeats(&job.batch, &recent, &mut group.kept);
            group.rows += job.batch.num_rows();
            if batch.num_rows() > 0 {
                let _ = lanes[next_lane].send(ToLane::Write(batch));
                group.used[next_lane] = true;
                next_lane = (next_lane + 1) % lanes.len();
            }
            group.jobs.push(job);
        };
        take(first, &mut group);
        while group.rows < flush_rows {
            let quiet = (tokio::time::Instant::now() + LINGER).min(deadline);
            tokio::select! {
                next = jobs.recv() => match next {
                    Some(job) => take(job, &mut group),
                    None => break,
                },
                _ = tokio::time::sleep_until(quiet) => break,
            }
        }
        let answer = match close(&lanes, &group.used).await {
            Ok(adds) => log.append(adds).await,
            Err(e) => Err(e),
        };
        let answer = match answer {
            Ok(version) => {
                for k in group.kept {
                    recent.insert(k);
                }
                checkpoints.after_commit(version).await;
                Ok(())
            }
            Err(e) => {
                log::warn!("the span store could not commit {} rows: {e}", group.rows);
                Err(format!("the store could not commit: {e}"))
            }
        };
        for job in group.jobs {
            let _ = job.done.send(answer.clone());
        }
    }
}

/// The rows of `batch` neither written lately nor already in the group.
fn drop_repeats(batch: &RecordBatch, recent: &Recent, kept: &mut KeySet) -> RecordBatch {
    let keep: BooleanArray = keys(batch)
        .into_iter()
        .map(|k| Some(!recent.contains(&k) && kept.insert(k)))
        .collect();
    if keep.true_count() == batch.num_rows() {
        batch.clone()
    } else {
        filter_record_batch(batch, &keep).expect("a mask of the batch's length")
    }
}

/// Closes the files of the lanes `used`, all at once; their `Add` actions.
async fn close(lanes: &[mpsc::UnboundedSender<ToLane>], used: &[bool]) -> Result<Vec<Add>, String> {
    let mut answers = Vec::new();
    for (lane, _) in lanes.iter().zip(used).filter(|(_, u)| **u) {
        let (tx, rx) = oneshot::channel();
        lane.send(ToLane::Close(tx))
            .map_err(|_| "an encoder of the store has stopped".to_string())?;
        answers.push(rx);
    }
    let mut adds = Vec::new();
    // Every lane is waited for, even after one failed: each must be ready for the next group.
    let mut failed = None;
    for answer in answers {
        match answer.await {
            Ok(Ok(a)) => adds.extend(a),
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some("an encoder of the store has stopped".into()),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(adds),
    }
}
