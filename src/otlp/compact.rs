//! Compaction of the span table: fewer files, without encoding again what is encoded well.
//!
//! delta-rs's `optimize` decodes every file under its target size and encodes the rows
//! again. Under a flood the commits' files are all under any useful target (each holds one
//! commit's share of rows, a few MiB), so `optimize` re-encoded everything the receivers
//! took — on one core, at about the rate the writer encodes on two: measured over a
//! 20-minute flood, each run lasted about as long as the interval, ingest fell by half while
//! it ran, and what it held in memory (~590 MiB) became the process's peak.
//!
//! Those files do not need encoding again: each is one row group of thousands of rows (a
//! commit's share of the requests waiting: 6,144 rows, about 1 MiB, with 24 senders), and
//! a row group of that size serves readers well — a monitor reading a few traces skips all
//! but their row groups by the bloom filter on `trace_id`. What has to shrink is the number
//! of files. So a file of at least [`Compaction::copy_rows`] rows is joined to others by
//! copying its encoded column chunks, with their bloom filters and page offsets, into a
//! larger file (`SerializedRowGroupWriter::append_column`, what parquet's own
//! `parquet-concat` does): the cost is reading and writing the bytes. Files of fewer rows —
//! what commits write when few spans arrive — are decoded and encoded again into row groups
//! of up to [`Compaction::row_group_rows`]; there are few rows in them by definition.
//!
//! A file is a candidate while it is under half the target size, so a file this compaction
//! wrote full is not rewritten by the next. The new files' log statistics are the removed
//! files' merged (minimum of minimums, maximum of maximums, sums of null counts): the same
//! bounds the reader skipped files by. The commit (an `OPTIMIZE`) goes through the writer's
//! [`Log`]: refused when another process removed one of the same files after they were
//! chosen; appends meanwhile do not conflict with it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::bloom_filter::Sbbf;
use datafusion::parquet::column::writer::ColumnCloseResult;
use datafusion::parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader,
};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::file::writer::SerializedFileWriter;
use deltalake::kernel::{Action, Add, DataType, PrimitiveType, Remove, StructType};
use deltalake::protocol::DeltaOperation;
use deltalake::{DeltaTable, DeltaTableError};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::{Map, Value};

use super::commit::Log;

/// How the table is compacted.
#[derive(Debug, Clone)]
pub struct Compaction {
    /// The size a compacted file is filled up to; files of half of it and more are left.
    pub target: u64,
    /// Files of at least this many rows are joined by copying; smaller ones are encoded
    /// again.
    pub copy_rows: usize,
    /// Row groups of files encoded again hold at most this many rows.
    pub row_group_rows: usize,
    /// A commit is made once the files it replaces reach this many bytes, so one long run
    /// does not lose all its work to a crash.
    pub commit_bytes: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            target: 64 << 20,
            copy_rows: 2_048,
            row_group_rows: 65_536,
            commit_bytes: 1 << 30,
        }
    }
}

/// What one compaction did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Compacted {
    /// Files replaced.
    pub removed: usize,
    /// Files written in their place.
    pub added: usize,
    /// Of the files replaced, those joined by copying their encoded chunks.
    pub copied: usize,
    /// Versions committed.
    pub commits: usize,
}

/// A file that may be compacted.
struct Candidate {
    location: Path,
    /// Its directory under the table (its partition).
    dir: String,
    size: u64,
    partition_values: HashMap<String, Option<String>>,
    stats: Option<String>,
    remove: Remove,
}

/// Files of one partition compacted into one.
struct Bin {
    copy: bool,
    files: Vec<Candidate>,
}

impl Compaction {
    /// Compacts `table`'s small files; `table` is brought up to the last version committed.
    pub async fn run(
        &self,
        table: &mut DeltaTable,
        writer: &WriterProperties,
    ) -> Result<Compacted, DeltaTableError> {
        table.update_state().await?;
        self.run_loaded(table, writer).await
    }

    /// [`Compaction::run`] on the files of the version `table` has loaded.
    async fn run_loaded(
        &self,
        table: &mut DeltaTable,
        writer: &WriterProperties,
    ) -> Result<Compacted, DeltaTableError> {
        let bins = self.plan(table).await?;
        let store = table.log_store().object_store(None);
        let schema = table.snapshot()?.schema();
        let mut log = Log::of(table)?;
        let mut done = Compacted::default();
        let mut actions = Vec::new();
        let mut written = Vec::new();
        let mut pending = 0u64;
        let count = bins.len();
        for (i, bin) in bins.into_iter().enumerate() {
            let joined = match self.join(&store, bin, writer, &schema).await {
                Ok(j) => j,
                Err(e) => {
                    forget(&store, &written).await;
                    return Err(e);
                }
            };
            if let Some((add, removed, copied)) = joined {
                pending += removed
                    .iter()
                    .map(|r| r.size.unwrap_or(0) as u64)
                    .sum::<u64>();
                done.removed += removed.len();
                done.added += 1;
                done.copied += copied;
                written.push(Path::from(add.path.as_str()));
                actions.push(Action::Add(add));
                actions.extend(removed.into_iter().map(Action::Remove));
            }
            if !actions.is_empty() && (pending >= self.commit_bytes || i + 1 == count) {
                let operation = DeltaOperation::Optimize {
                    predicate: None,
                    target_size: self.target as i64,
                };
                if let Err(e) = log.commit(std::mem::take(&mut actions), operation).await {
                    // Not in the table: nobody will read them.
                    forget(&store, &written).await;
                    return Err(DeltaTableError::Generic(e));
                }
                done.commits += 1;
                written.clear();
                pending = 0;
            }
        }
        if done.commits > 0 {
            table.update_state().await?;
        }
        Ok(done)
    }

    /// The bins of this compaction: per partition, the candidates in the order they were
    /// written, packed up to the target; a bin of one file would change nothing.
    async fn plan(&self, table: &DeltaTable) -> Result<Vec<Bin>, DeltaTableError> {
        let state = table.snapshot()?;
        let log_store = table.log_store();
        let mut groups: BTreeMap<(String, bool), Vec<Candidate>> = BTreeMap::new();
        let mut files = state.snapshot().file_views(log_store.as_ref(), None);
        while let Some(file) = files.next().await {
            let file = file?;
            let size = file.size().max(0) as u64;
            if size >= self.target / 2 || file.deletion_vector_descriptor().is_some() {
                continue;
            }
            let path = file.path().to_string();
            let dir = path
                .rsplit_once('/')
                .map(|(d, _)| d.to_string())
                .unwrap_or_default();
            let copy = file.num_records().is_some_and(|n| n >= self.copy_rows);
            groups
                .entry((dir.clone(), copy))
                .or_default()
                .push(Candidate {
                    location: file.object_store_path(),
                    dir,
                    size,
                    partition_values: file.partition_values_map(),
                    stats: file.stats(),
                    remove: file.remove_action(false),
                });
        }
        let mut bins = Vec::new();
        for ((_, copy), mut files) in groups {
            // The log lists the newest first.
            files.reverse();
            let mut bin = Bin {
                copy,
                files: Vec::new(),
            };
            let mut size = 0;
            for file in files {
                if !bin.files.is_empty() && size + file.size > self.target {
                    bins.push(std::mem::replace(
                        &mut bin,
                        Bin {
                            copy,
                            files: Vec::new(),
                        },
                    ));
                    size = 0;
                }
                size += file.size;
                bin.files.push(file);
            }
            bins.push(bin);
        }
        bins.retain(|b| b.files.len() > 1);
        Ok(bins)
    }

    /// Writes the file that replaces `bin`'s; its `Add`, the `Remove`s of the files it
    /// replaces (those whose Parquet schema is the first's: others stay as they are) and how
    /// many were copied. `None` when fewer than two files could be joined.
    async fn join(
        &self,
        store: &Arc<dyn ObjectStore>,
        bin: Bin,
        writer: &WriterProperties,
        schema: &StructType,
    ) -> Result<Option<(Add, Vec<Remove>, usize)>, DeltaTableError> {
        let first = &bin.files[0];
        let (dir, partition_values) = (first.dir.clone(), first.partition_values.clone());
        let mut out = if bin.copy {
            Output::Copy(None)
        } else {
            Output::Encode(None)
        };
        let mut taken = Vec::new();
        // The output's bytes are about the inputs': allocated once, not grown by doubling.
        let capacity = bin.files.iter().map(|f| f.size).sum::<u64>() as usize + (64 << 10);
        for file in bin.files {
            let bytes = store.get(&file.location).await?.bytes().await?;
            let row_group_rows = self.row_group_rows;
            let props = writer.clone();
            // Copying is memory traffic and encoding is CPU: neither belongs on the runtime.
            let (next, took) = tokio::task::spawn_blocking(move || {
                let took = out.take(&bytes, &props, row_group_rows, capacity);
                (out, took)
            })
            .await
            .map_err(|e| DeltaTableError::Generic(format!("compaction: {e}")))?;
            out = next;
            if took.map_err(|e| {
                DeltaTableError::Generic(format!("compacting {}: {e}", file.location))
            })? {
                taken.push(file);
            }
        }
        if taken.len() < 2 {
            return Ok(None);
        }
        let copied = if bin.copy { taken.len() } else { 0 };
        let (bytes, rows) = tokio::task::spawn_blocking(move || out.finish())
            .await
            .map_err(|e| DeltaTableError::Generic(format!("compaction: {e}")))?
            .map_err(|e| DeltaTableError::Generic(format!("compaction: {e}")))?;
        let name = format!("part-00000-{}-c000.snappy.parquet", uuid::Uuid::new_v4());
        let path = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        let size = bytes.len() as i64;
        store
            .put(&Path::from(path.as_str()), PutPayload::from(bytes))
            .await?;
        let stats = merge_stats(taken.iter().map(|f| f.stats.as_deref()), rows, schema);
        let add = Add {
            path,
            partition_values,
            size,
            modification_time: chrono::Utc::now().timestamp_millis(),
            data_change: false,
            stats: Some(stats),
            ..Default::default()
        };
        Ok(Some((
            add,
            taken.into_iter().map(|f| f.remove).collect(),
            copied,
        )))
    }
}

/// The file being written.
enum Output {
    /// Column chunks copied as they are encoded.
    Copy(Option<(SerializedFileWriter<Vec<u8>>, ParquetMetaData, i64)>),
    /// Rows decoded and encoded again.
    Encode(Option<(ArrowWriter<Vec<u8>>, ParquetMetaData, i64)>),
}

impl Output {
    /// Adds the file `bytes` holds; false when its Parquet schema is not the first file's.
    fn take(
        &mut self,
        bytes: &Bytes,
        props: &WriterProperties,
        row_group_rows: usize,
        capacity: usize,
    ) -> datafusion::parquet::errors::Result<bool> {
        let meta = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(bytes)?;
        let rows = meta.file_metadata().num_rows();
        match self {
            Output::Copy(writer) => {
                if writer.is_none() {
                    let kv = meta.file_metadata().key_value_metadata().cloned();
                    let props = props
                        .clone()
                        .into_builder()
                        .set_key_value_metadata(kv)
                        .build();
                    let root = meta.file_metadata().schema_descr().root_schema_ptr();
                    let w = SerializedFileWriter::new(
                        Vec::with_capacity(capacity),
                        root,
                        Arc::new(props),
                    )?;
                    *writer = Some((w, meta.clone(), 0));
                }
                let (w, first, total) = writer.as_mut().expect("set above");
                if first.file_metadata().schema() != meta.file_metadata().schema() {
                    return Ok(false);
                }
                for (g, group) in meta.row_groups().iter().enumerate() {
                    let mut out = w.next_row_group()?;
                    for (c, column) in group.columns().iter().enumerate() {
                        let result = ColumnCloseResult {
                            bytes_written: column.compressed_size() as u64,
                            rows_written: group.num_rows() as u64,
                            metadata: column.clone(),
                            bloom_filter: Sbbf::read_from_column_chunk(column, bytes)
                                .ok()
                                .flatten(),
                            column_index: meta
                                .column_index()
                                .and_then(|i| i.get(g))
                                .and_then(|i| i.get(c))
                                .cloned(),
                            offset_index: meta
                                .offset_index()
                                .and_then(|i| i.get(g))
                                .and_then(|i| i.get(c))
                                .cloned(),
                        };
                        out.append_column(bytes, result)?;
                    }
                    out.close()?;
                }
                *total += rows;
            }
            Output::Encode(writer) => {
                let reader = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())?;
                if writer.is_none() {
                    let props = props
                        .clone()
                        .into_builder()
                        .set_max_row_group_row_count(Some(row_group_rows))
                        .build();
                    let w = ArrowWriter::try_new(
                        Vec::with_capacity(capacity),
                        reader.schema().clone(),
                        Some(props),
                    )?;
                    *writer = Some((w, meta.clone(), 0));
                }
                let (w, first, total) = writer.as_mut().expect("set above");
                if first.file_metadata().schema() != meta.file_metadata().schema() {
                    return Ok(false);
                }
                for batch in reader.build()? {
                    w.write(&batch?)?;
                }
                *total += rows;
            }
        }
        Ok(true)
    }

    /// The file's bytes and rows.
    fn finish(self) -> datafusion::parquet::errors::Result<(Bytes, i64)> {
        match self {
            Output::Copy(Some((w, _, rows))) => Ok((Bytes::from(w.into_inner()?), rows)),
            Output::Encode(Some((w, _, rows))) => Ok((Bytes::from(w.into_inner()?), rows)),
            _ => Err(datafusion::parquet::errors::ParquetError::General(
                "no file was taken".into(),
            )),
        }
    }
}

/// Deletes files written for a commit that did not happen.
async fn forget(store: &Arc<dyn ObjectStore>, written: &[Path]) {
    for path in written {
        if let Err(e) = store.delete(path).await {
            log::warn!("span store compaction: removing unused {path}: {e}");
        }
    }
}

/// Log statistics of a file holding the rows of files with statistics `each`: `rows` records;
/// per column, the least minimum, the greatest maximum and the sum of null counts, where
/// every file has them (a file without a column's bounds may hold any value, unless all of
/// its values are null) — otherwise the column has none, and readers do not skip by it.
fn merge_stats<'a>(
    each: impl Iterator<Item = Option<&'a str>>,
    rows: i64,
    schema: &StructType,
) -> String {
    let parsed: Option<Vec<Map<String, Value>>> = each
        .map(|s| match serde_json::from_str::<Value>(s?) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        })
        .collect();
    let mut out = Map::new();
    out.insert("numRecords".into(), rows.into());
    let Some(parsed) = parsed else {
        return Value::Object(out).to_string();
    };
    let get = |m: &'_ Map<String, Value>, key: &str, column: &str| -> Option<Value> {
        m.get(key)?.as_object()?.get(column).cloned()
    };
    let mut columns: Vec<String> = parsed
        .iter()
        .flat_map(|m| {
            ["minValues", "maxValues", "nullCount"]
                .into_iter()
                .filter_map(|k| m.get(k).and_then(Value::as_object))
                .flat_map(|s| s.keys().cloned())
                .collect::<Vec<_>>()
        })
        .collect();
    columns.sort();
    columns.dedup();
    let (mut mins, mut maxes, mut nulls) = (Map::new(), Map::new(), Map::new());
    for column in columns {
        let kind = schema.field(&column).map(|f| f.data_type().clone());
        let mut null_sum = Some(0i64);
        // Per bound: `None` once it is unknown; `Some(None)` while every file so far held
        // only nulls.
        let mut bounds: [Option<Option<Value>>; 2] = [Some(None), Some(None)];
        for m in &parsed {
            let count = get(m, "nullCount", &column).and_then(|v| v.as_i64());
            let records = m.get("numRecords").and_then(Value::as_i64);
            null_sum = null_sum.zip(count).map(|(a, b)| a + b);
            let all_null = count.is_some() && count == records;
            for (slot, key, keep) in [
                (0, "minValues", std::cmp::Ordering::Less),
                (1, "maxValues", std::cmp::Ordering::Greater),
            ] {
                let Some(best) = &bounds[slot] else { continue };
                bounds[slot] = match get(m, key, &column) {
                    Some(v) if !v.is_object() => match best {
                        None => Some(Some(v)),
                        Some(b) => match order(&v, b, kind.as_ref()) {
                            Some(o) if o == keep => Some(Some(v)),
                            Some(_) => Some(Some(b.clone())),
                            None => None,
                        },
                    },
                    _ if all_null => Some(best.clone()),
                    _ => None,
                };
            }
        }
        let [min, max] = bounds;
        if let Some(Some(v)) = min {
            mins.insert(column.clone(), v);
        }
        if let Some(Some(v)) = max {
            maxes.insert(column.clone(), v);
        }
        if let Some(n) = null_sum {
            nulls.insert(column, n.into());
        }
    }
    out.insert("minValues".into(), Value::Object(mins));
    out.insert("maxValues".into(), Value::Object(maxes));
    out.insert("nullCount".into(), Value::Object(nulls));
    Value::Object(out).to_string()
}

/// How two statistics values of a column of type `kind` compare; `None` when they cannot be
/// compared (then the column gets no bounds).
fn order(a: &Value, b: &Value, kind: Option<&DataType>) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
        },
        (Value::String(x), Value::String(y)) => match kind {
            // Written with and without a fraction of a second: compared as instants.
            Some(DataType::Primitive(PrimitiveType::Timestamp)) => {
                let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
                Some(t(x)?.cmp(&t(y)?))
            }
            Some(DataType::Primitive(PrimitiveType::TimestampNtz)) => {
                let t =
                    |s: &str| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok();
                Some(t(x)?.cmp(&t(y)?))
            }
            Some(DataType::Primitive(PrimitiveType::String | PrimitiveType::Date)) => {
                Some(x.as_bytes().cmp(y.as_bytes()))
            }
            _ => None,
        },
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::receive::rows_of;
    use crate::otlp::store::{SpanStore, StoreOptions, open};
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
    use datafusion::prelude::SessionContext;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value as V};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    /// `n` spans of trace `seed`, on the same day; every second one has a model.
    fn spans(seed: u64, n: u64) -> datafusion::arrow::array::RecordBatch {
        let kv = |k: &str, v: V| KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        };
        let spans = (0..n)
            .map(|i| Span {
                trace_id: [seed.to_be_bytes(), 1u64.to_be_bytes()].concat(),
                span_id: (seed << 20 | (i + 1)).to_be_bytes().to_vec(),
                name: format!("chat {i}"),
                // Whole seconds for some spans, fractions for others: the statistics are
                // written both ways.
                start_time_unix_nano: 1_780_000_000_000_000_000
                    + seed * 1_000_000_000
                    + i * 250_000_000,
                end_time_unix_nano: 1_780_000_001_000_000_000 + seed * 1_000_000_000,
                attributes: if i % 2 == 0 {
                    vec![kv(
                        "gen_ai.request.model",
                        V::StringValue(format!("m{seed}")),
                    )]
                } else {
                    Vec::new()
                },
                ..Default::default()
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", V::StringValue("svc".into()))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        rows_of(&request, "test", 1_780_000_000_000_000_000)
            .0
            .unwrap()
    }

    async fn rows(url: &url::Url) -> Vec<String> {
        let ctx = SessionContext::new();
        crate::otlp::register_spans(&ctx, url.as_str(), true)
            .await
            .unwrap();
        let batches = ctx
            .sql(
                "SELECT span_id, trace_id, name, start_time, end_time, model, service_name \
                 FROM spans ORDER BY span_id",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn local(uri: &str) -> std::path::PathBuf {
        match url::Url::parse(uri) {
            Ok(u) => u.to_file_path().unwrap(),
            Err(_) => uri.into(),
        }
    }

    /// The table's files, with the rows and row groups of each.
    fn files(table: &DeltaTable) -> Vec<(String, i64, usize)> {
        let mut out: Vec<_> = table
            .get_file_uris()
            .unwrap()
            .map(|uri| {
                let reader =
                    SerializedFileReader::new(std::fs::File::open(local(&uri)).unwrap()).unwrap();
                let m = reader.metadata();
                (uri, m.file_metadata().num_rows(), m.num_row_groups())
            })
            .collect();
        out.sort();
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn files_are_joined_by_copying_or_encoding_and_every_row_stays_once() {
        let dir = std::env::temp_dir().join(format!("evalsql-compact-{}", uuid::Uuid::new_v4()));
        let url = url::Url::from_directory_path(&dir).unwrap();
        let table_url = url.join("spans/").unwrap();
        let options = StoreOptions {
            maintenance_interval: std::time::Duration::from_secs(3600),
            ..Default::default()
        };
        let store = SpanStore::start(table_url.clone(), options).await.unwrap();
        // One commit each: three of 300 rows, four of 5.
        for seed in 1..=3 {
            store.append(spans(seed, 300)).await.unwrap();
        }
        for seed in 4..=7 {
            store.append(spans(seed, 5)).await.unwrap();
        }
        let before = rows(&url).await;
        assert_eq!(before.len(), 920 + 4, "{before:?}");
        let mut table = open(&table_url).await.unwrap().unwrap();
        assert_eq!(files(&table).len(), 7);
        // Another process that chose the same files at the same version commits first.
        let mut other = open(&table_url).await.unwrap().unwrap();

        let compaction = Compaction {
            copy_rows: 100,
            ..Default::default()
        };
        let props = crate::otlp::writer::writer_properties();
        let first = compaction.run_loaded(&mut other, &props).await.unwrap();
        let refused = compaction
            .run_loaded(&mut table, &props)
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("compacted the same files"), "{refused}");
        // What the refused one wrote is gone; the table has the first one's files.
        table.update_state().await.unwrap();
        let on_disk = |d: &std::path::Path| {
            std::fs::read_dir(d.join("spans"))
                .unwrap()
                .flat_map(|e| std::fs::read_dir(e.unwrap().path()).into_iter().flatten())
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "parquet")
                })
                .count()
        };
        assert_eq!(on_disk(&dir), 7 + 2, "the removed 7 stay for older readers");
        assert_eq!(rows(&url).await, before);
        let done = first;
        assert_eq!(
            done,
            Compacted {
                removed: 7,
                added: 2,
                copied: 3,
                commits: 1
            }
        );
        // The copied file keeps its three row groups; the small ones became one.
        let after = files(&table);
        let shape: Vec<(i64, usize)> = after.iter().map(|f| (f.1, f.2)).collect::<Vec<_>>();
        assert!(
            shape.contains(&(900, 3)) && shape.contains(&(20, 1)) && shape.len() == 2,
            "{after:?}"
        );
        for (uri, ..) in &after {
            let reader =
                SerializedFileReader::new(std::fs::File::open(local(uri)).unwrap()).unwrap();
            for group in reader.metadata().row_groups() {
                let trace = group
                    .columns()
                    .iter()
                    .find(|c| c.column_path().string() == "trace_id")
                    .unwrap();
                assert!(trace.bloom_filter_offset().is_some(), "{uri}");
            }
        }
        assert_eq!(rows(&url).await, before);

        // The log's bounds are the removed files' merged: a filter on them still finds the
        // rows (a wrong bound would skip the file).
        let ctx = SessionContext::new();
        crate::otlp::register_spans(&ctx, url.as_str(), true)
            .await
            .unwrap();
        for (filter, want) in [
            ("model = 'm1'", 150),
            ("model = 'm7'", 3),
            ("model IS NULL", 458),
            ("start_time < TIMESTAMP '2026-05-28T20:26:42Z'", 4),
            ("start_time >= TIMESTAMP '2026-05-28T20:27:55Z'", 24),
            ("start_time >= TIMESTAMP '2026-05-28T20:26:43Z'", 908),
        ] {
            let n = ctx
                .sql(&format!("SELECT count(*) FROM spans WHERE {filter}"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap()[0]
                .column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .unwrap()
                .value(0);
            assert_eq!(n, want, "{filter}");
        }

        // Nothing left to join: each remaining file is alone in its kind.
        let again = compaction.run(&mut table, &props).await.unwrap();
        assert_eq!(again, Compacted::default());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn statistics_merge_to_bounds_of_every_file() {
        let schema = StructType::try_new(vec![
            deltalake::kernel::StructField::new("t", DataType::TIMESTAMP, true),
            deltalake::kernel::StructField::new("s", DataType::STRING, true),
            deltalake::kernel::StructField::new("n", DataType::LONG, true),
        ])
        .unwrap();
        let a = r#"{"numRecords":2,"minValues":{"t":"2026-12-07T10:00:00Z","s":"b","n":5},
            "maxValues":{"t":"2026-12-07T10:00:00.500Z","s":"c","n":9},
            "nullCount":{"t":0,"s":0,"n":0}}"#;
        // Its `s` is null throughout, so it has no bounds for `s`, and none are lost.
        let b = r#"{"numRecords":3,"minValues":{"t":"2026-12-07T09:59:59.900Z","n":-1},
            "maxValues":{"t":"2026-12-07T10:00:00Z","n":3},"nullCount":{"t":0,"s":3,"n":1}}"#;
        let merged: Value =
            serde_json::from_str(&merge_stats([Some(a), Some(b)].into_iter(), 5, &schema)).unwrap();
        assert_eq!(
            merged,
            serde_json::json!({"numRecords":5,
                "minValues":{"t":"2026-12-07T09:59:59.900Z","s":"b","n":-1},
                "maxValues":{"t":"2026-12-07T10:00:00.500Z","s":"c","n":9},
                "nullCount":{"t":0,"s":3,"n":1}})
        );
        // A file whose `n` has no bounds though not all null: `n` gets none.
        let c = r#"{"numRecords":1,"minValues":{},"maxValues":{},"nullCount":{"n":0}}"#;
        let merged: Value =
            serde_json::from_str(&merge_stats([Some(a), Some(c)].into_iter(), 3, &schema)).unwrap();
        assert_eq!(merged["minValues"], serde_json::json!({}));
        assert_eq!(merged["nullCount"], serde_json::json!({"n": 0}));
        // A file without statistics: only the count.
        assert_eq!(
            merge_stats([Some(a), None].into_iter(), 3, &schema),
            r#"{"numRecords":3}"#
        );
    }
}
