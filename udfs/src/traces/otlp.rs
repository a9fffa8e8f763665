//! `read_otlp('path-or-URL')`: OpenTelemetry traces as a table, one row per span.
//!
//! Input is OTLP/JSON as the OpenTelemetry Collector's file exporter writes it: one
//! `ExportTraceServiceRequest` per line (`resourceSpans` → `scopeSpans` → `spans`), ids as
//! hex, 64-bit integers as decimal strings or numbers, enums as integers (their protobuf
//! names are read too). A directory or prefix reads every file under it (a glob such as
//! `traces/*.jsonl` narrows that), local or in object storage, one partition per file.
//!
//! Each line is converted to OTLP's protobuf types and made rows by [`super::spans`], as the
//! OTLP receiver of `evalsql serve` makes its rows: the columns are the same.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DataFusionError, Result, ScalarValue, plan_err};
use datafusion::datasource::TableType;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::Value;

/// OTLP's protobuf types, which the rows are built from.
mod proto {
    pub use opentelemetry_proto::tonic::common::v1::{
        AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
    };
    pub use opentelemetry_proto::tonic::resource::v1::Resource;
    pub use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
    pub use opentelemetry_proto::tonic::trace::v1::{Span, Status};
}

const NAME: &str = "read_otlp";

use super::spans::SpanRows;
pub use super::spans::otlp_schema;

// ---- OTLP/JSON, as serde reads it -----------------------------------------------------
//
// Field names are lowerCamelCase as OTLP/JSON writes them; the snake_case names, which
// protobuf JSON parsers accept too, and the `instrumentationLibrarySpans` of OTLP before
// 0.15 are read as well. Numbers and enums are kept as JSON values and converted with
// errors that name the field ([`int64`], [`span_kind`], [`status_code`]).

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExportRequest {
    #[serde(default, alias = "resource_spans")]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpans {
    #[serde(default)]
    resource: Option<Resource>,
    #[serde(default, alias = "scope_spans")]
    scope_spans: Option<Vec<ScopeSpans>>,
    #[serde(default, alias = "instrumentation_library_spans")]
    instrumentation_library_spans: Option<Vec<ScopeSpans>>,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct ScopeSpans {
    #[serde(default)]
    scope: Option<Scope>,
    #[serde(default)]
    spans: Vec<Span>,
}

#[derive(Deserialize)]
struct Scope {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Span {
    #[serde(default, alias = "trace_id")]
    trace_id: String,
    #[serde(default, alias = "span_id")]
    span_id: String,
    #[serde(default, alias = "parent_span_id")]
    parent_span_id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: Option<Value>,
    #[serde(default, alias = "start_time_unix_nano")]
    start_time_unix_nano: Option<Value>,
    #[serde(default, alias = "end_time_unix_nano")]
    end_time_unix_nano: Option<Value>,
    #[serde(default)]
    attributes: Vec<KeyValue>,
    #[serde(default)]
    events: Vec<Event>,
    #[serde(default)]
    links: Vec<Link>,
    #[serde(default, alias = "trace_state")]
    trace_state: Option<String>,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Link {
    #[serde(default, alias = "trace_id")]
    trace_id: String,
    #[serde(default, alias = "span_id")]
    span_id: String,
    #[serde(default, alias = "trace_state")]
    trace_state: Option<String>,
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(default, alias = "time_unix_nano")]
    time_unix_nano: Option<Value>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<Value>,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: Option<AnyValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyValue {
    #[serde(alias = "string_value")]
    string_value: Option<String>,
    #[serde(alias = "bool_value")]
    bool_value: Option<bool>,
    #[serde(alias = "int_value")]
    int_value: Option<Value>,
    #[serde(alias = "double_value")]
    double_value: Option<Value>,
    #[serde(alias = "array_value")]
    array_value: Option<ArrayValue>,
    #[serde(alias = "kvlist_value")]
    kvlist_value: Option<KvList>,
    #[serde(alias = "bytes_value")]
    bytes_value: Option<String>,
}

#[derive(Deserialize)]
struct ArrayValue {
    #[serde(default)]
    values: Vec<AnyValue>,
}

#[derive(Deserialize)]
struct KvList {
    #[serde(default)]
    values: Vec<KeyValue>,
}

/// A 64-bit integer: OTLP/JSON writes them as decimal strings, some writers as numbers.
/// Values beyond the signed 64-bit range are refused (as timestamps they lie past 2262).
fn int64(v: &Value, field: &str) -> std::result::Result<i64, String> {
    let parsed = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(t) => t.trim().parse::<i64>().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| format!("{field} {v} is not a 64-bit integer"))
}

/// An enum: an integer (the OTLP/JSON form), or the protobuf value name; its number.
fn enum_value(
    v: Option<&Value>,
    field: &str,
    prefix: &str,
    names: &[&'static str],
) -> std::result::Result<i32, String> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|&i| i < names.len() as u64)
            .map(|i| i as i32)
            .ok_or_else(|| format!("{field} {n} is not 0 to {}", names.len() - 1)),
        Some(Value::String(s)) => names
            .iter()
            .position(|k| s.strip_prefix(prefix) == Some(*k))
            .map(|i| i as i32)
            .ok_or_else(|| format!("{field} {s:?} is unknown")),
        Some(other) => Err(format!("{field} {other} is not an enum value")),
    }
}

fn span_kind(kind: Option<&Value>) -> std::result::Result<i32, String> {
    enum_value(kind, "kind", "SPAN_KIND_", &super::spans::KINDS)
}

fn status_code(code: Option<&Value>) -> std::result::Result<i32, String> {
    enum_value(
        code,
        "status code",
        "STATUS_CODE_",
        &super::spans::STATUS_CODES,
    )
}

/// An attribute value in protobuf's form; the errors name the field.
fn any_value(v: &AnyValue) -> std::result::Result<proto::AnyValue, String> {
    use proto::any_value::Value as V;
    let value = if let Some(s) = &v.string_value {
        Some(V::StringValue(s.clone()))
    } else if let Some(b) = v.bool_value {
        Some(V::BoolValue(b))
    } else if let Some(i) = &v.int_value {
        Some(V::IntValue(int64(i, "intValue")?))
    } else if let Some(d) = &v.double_value {
        Some(V::DoubleValue(match d {
            Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
            // JSON has no NaN or infinity: OTLP/JSON spells them.
            Value::String(t) if t == "NaN" => f64::NAN,
            Value::String(t) if t == "Infinity" => f64::INFINITY,
            Value::String(t) if t == "-Infinity" => f64::NEG_INFINITY,
            Value::String(t) => t
                .parse::<f64>()
                .map_err(|_| format!("doubleValue {t:?} is not a number"))?,
            other => return Err(format!("doubleValue {other} is not a number")),
        }))
    } else if let Some(a) = &v.array_value {
        Some(V::ArrayValue(proto::ArrayValue {
            values: a
                .values
                .iter()
                .map(any_value)
                .collect::<std::result::Result<_, _>>()?,
        }))
    } else if let Some(kv) = &v.kvlist_value {
        Some(V::KvlistValue(proto::KeyValueList {
            values: key_values(&kv.values)?,
        }))
    } else if let Some(b) = &v.bytes_value {
        // Kept as the text it was sent as: the column shows bytes as base64.
        Some(V::BytesValue(
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|_| format!("bytesValue {b:?} is not base64"))?,
        ))
    } else {
        None
    };
    Ok(proto::AnyValue { value })
}

fn key_values(kvs: &[KeyValue]) -> std::result::Result<Vec<proto::KeyValue>, String> {
    kvs.iter()
        .map(|kv| {
            Ok(proto::KeyValue {
                key: kv.key.clone(),
                value: match &kv.value {
                    Some(v) => {
                        Some(any_value(v).map_err(|e| format!("attribute {}: {e}", kv.key))?)
                    }
                    None => None,
                },
                ..Default::default()
            })
        })
        .collect()
}

/// A trace or span id: OTLP/JSON's hex, or the base64 protobuf's own JSON mapping writes
/// (some SDK exporters do).
fn id_bytes(id: &str, bytes: usize, what: &str) -> std::result::Result<Vec<u8>, String> {
    if id.len() == bytes * 2 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok((0..bytes)
            .map(|i| u8::from_str_radix(&id[2 * i..2 * i + 2], 16).expect("hex digits"))
            .collect());
    }
    match base64::engine::general_purpose::STANDARD.decode(id) {
        Ok(raw) if raw.len() == bytes => Ok(raw),
        _ => Err(format!(
            "{what} {id:?} is not {bytes} bytes of hex (or base64)"
        )),
    }
}

/// A time: signed nanoseconds kept in the unsigned protobuf field's bits (see
/// [`SpanRows::push`]); absent is 0, as in protobuf.
fn time(v: Option<&Value>, field: &str) -> std::result::Result<u64, String> {
    Ok(v.map(|v| int64(v, field)).transpose()?.unwrap_or(0) as u64)
}

impl Span {
    /// The span in protobuf's form.
    fn to_proto(&self) -> std::result::Result<proto::Span, String> {
        let kind = span_kind(self.kind.as_ref())?;
        let status = self.status.as_ref();
        let code = status_code(status.and_then(|s| s.code.as_ref()))?;
        Ok(proto::Span {
            trace_id: id_bytes(&self.trace_id, 16, "traceId")?,
            span_id: id_bytes(&self.span_id, 8, "spanId")?,
            parent_span_id: match self.parent_span_id.as_deref() {
                None | Some("") => Vec::new(),
                Some(p) => id_bytes(p, 8, "parentSpanId")?,
            },
            name: self.name.clone(),
            kind,
            start_time_unix_nano: time(self.start_time_unix_nano.as_ref(), "startTimeUnixNano")?,
            end_time_unix_nano: time(self.end_time_unix_nano.as_ref(), "endTimeUnixNano")?,
            attributes: key_values(&self.attributes)?,
            events: self
                .events
                .iter()
                .map(|e| {
                    Ok(proto::Event {
                        time_unix_nano: time(e.time_unix_nano.as_ref(), "timeUnixNano")?,
                        name: e.name.clone(),
                        attributes: key_values(&e.attributes)?,
                        ..Default::default()
                    })
                })
                .collect::<std::result::Result<_, String>>()?,
            links: self
                .links
                .iter()
                .map(|l| {
                    Ok(proto::Link {
                        trace_id: id_bytes(&l.trace_id, 16, "link traceId")?,
                        span_id: id_bytes(&l.span_id, 8, "link spanId")?,
                        trace_state: l.trace_state.clone().unwrap_or_default(),
                        attributes: key_values(&l.attributes)?,
                        ..Default::default()
                    })
                })
                .collect::<std::result::Result<_, String>>()?,
            trace_state: self.trace_state.clone().unwrap_or_default(),
            status: status.map(|s| proto::Status {
                message: s.message.clone().unwrap_or_default(),
                code,
            }),
            ..Default::default()
        })
    }
}

/// The spans of one file, line by line, in batches of at most `batch_size` rows.
pub struct SpanParser {
    schema: SchemaRef,
    rows: SpanRows,
    file: String,
    batch_size: usize,
    line_no: usize,
}

impl SpanParser {
    pub fn new(file: &str, batch_size: usize) -> Self {
        SpanParser {
            schema: otlp_schema(),
            rows: SpanRows::for_read_otlp(),
            file: file.to_string(),
            batch_size: batch_size.max(1),
            line_no: 0,
        }
    }

    fn bad(&self, why: String) -> DataFusionError {
        DataFusionError::Execution(format!(
            "{NAME}: {} line {}: {why}",
            self.file, self.line_no
        ))
    }

    /// Reads the next line (without its newline); full batches go to `out`.
    pub fn line(&mut self, line: &[u8], out: &mut Vec<RecordBatch>) -> Result<()> {
        self.line_no += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let request: ExportRequest = serde_json::from_slice(line)
            .map_err(|e| self.bad(format!("not an OTLP/JSON ExportTraceServiceRequest: {e}")))?;
        for rs in &request.resource_spans {
            let resource = rs.resource.as_ref().map(|r| {
                key_values(&r.attributes).map(|attributes| proto::Resource {
                    attributes,
                    ..Default::default()
                })
            });
            let resource = resource
                .transpose()
                .map_err(|why| self.bad(format!("resource: {why}")))?;
            let scopes = match (&rs.scope_spans, &rs.instrumentation_library_spans) {
                (Some(s), _) | (None, Some(s)) => s,
                (None, None) => {
                    return Err(self.bad("a resourceSpans entry has no scopeSpans".into()));
                }
            };
            for ss in scopes {
                let scope = ss.scope.as_ref().map(|s| proto::InstrumentationScope {
                    name: s.name.clone(),
                    version: s.version.clone(),
                    ..Default::default()
                });
                for span in &ss.spans {
                    span.to_proto()
                        .and_then(|p| {
                            self.rows
                                .push(resource.as_ref(), scope.as_ref(), &p, &self.file)
                        })
                        .map_err(|why| self.bad(format!("span {:?}: {why}", span.name)))?;
                    if self.rows.rows() >= self.batch_size {
                        out.push(self.rows.finish_read_otlp(&self.schema)?);
                    }
                }
            }
        }
        Ok(())
    }

    /// The last, partial batch.
    pub fn finish(&mut self, out: &mut Vec<RecordBatch>) -> Result<()> {
        if self.rows.rows() > 0 {
            out.push(self.rows.finish_read_otlp(&self.schema)?);
        }
        Ok(())
    }
}

/// An OTLP/JSON `ExportTraceServiceRequest` (the body of an OTLP/HTTP request) in protobuf's
/// form, with the spans that could not be converted left out: how many, and why the first
/// was. An error is a body that is not such a request at all.
pub fn decode_json_request(
    body: &[u8],
) -> std::result::Result<
    (
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
        usize,
        Option<String>,
    ),
    String,
> {
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans as PR, ScopeSpans as PS};
    let request: ExportRequest = serde_json::from_slice(body)
        .map_err(|e| format!("not an OTLP/JSON ExportTraceServiceRequest: {e}"))?;
    let mut rejected = 0;
    let mut first: Option<String> = None;
    let mut refuse = |why: String, rejected: &mut usize| {
        *rejected += 1;
        first.get_or_insert(why);
    };
    let mut out = Vec::with_capacity(request.resource_spans.len());
    for rs in &request.resource_spans {
        let scopes = match (&rs.scope_spans, &rs.instrumentation_library_spans) {
            (Some(s), _) | (None, Some(s)) => s.as_slice(),
            (None, None) => &[],
        };
        let resource = match rs.resource.as_ref().map(|r| key_values(&r.attributes)) {
            Some(Ok(attributes)) => Some(proto::Resource {
                attributes,
                ..Default::default()
            }),
            None => None,
            Some(Err(why)) => {
                for ss in scopes {
                    for _ in &ss.spans {
                        refuse(format!("resource: {why}"), &mut rejected);
                    }
                }
                continue;
            }
        };
        let mut scope_spans = Vec::with_capacity(scopes.len());
        for ss in scopes {
            let mut spans = Vec::with_capacity(ss.spans.len());
            for span in &ss.spans {
                match span.to_proto() {
                    Ok(p) => spans.push(p),
                    Err(why) => refuse(format!("span {:?}: {why}", span.name), &mut rejected),
                }
            }
            scope_spans.push(PS {
                scope: ss.scope.as_ref().map(|s| proto::InstrumentationScope {
                    name: s.name.clone(),
                    version: s.version.clone(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            });
        }
        out.push(PR {
            resource,
            scope_spans,
            ..Default::default()
        });
    }
    Ok((
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
            resource_spans: out,
        },
        rejected,
        first,
    ))
}

/// Every span of one file's text, in batches of at most `batch_size` rows.
pub fn parse_otlp(text: &str, file: &str, batch_size: usize) -> Result<Vec<RecordBatch>> {
    let mut parser = SpanParser::new(file, batch_size);
    let mut batches = Vec::new();
    for line in text.lines() {
        parser.line(line.as_bytes(), &mut batches)?;
    }
    parser.finish(&mut batches)?;
    Ok(batches)
}

/// The longest line read: one ExportTraceServiceRequest (the Collector's batches are far
/// smaller); past it the file is refused rather than buffered without end.
const MAX_LINE_BYTES: usize = 256 << 20;

// ---- The table function -------------------------------------------------------------------

/// `read_otlp('path-or-URL')`.
#[derive(Debug, Default)]
pub struct ReadOtlpFunc;

/// The location argument of a `read_otlp` call (also for callers that confine it).
pub fn location_argument(exprs: &[Expr]) -> Result<String> {
    match exprs {
        [Expr::Literal(ScalarValue::Utf8(Some(p)), _)]
        | [Expr::Literal(ScalarValue::Utf8View(Some(p)), _)]
        | [Expr::Literal(ScalarValue::LargeUtf8(Some(p)), _)] => Ok(p.clone()),
        other => plan_err!(
            "{NAME}('path-or-URL') takes one string literal: a file, directory, glob or \
             object-store URL of OTLP/JSON traces; got {other:?}"
        ),
    }
}

/// A location as a listing URL: a path (DataFusion reads its glob), or an object-store URL
/// whose glob, if any, is split off here (DataFusion reads globs in paths only).
pub fn parse_location(location: &str) -> Result<ListingTableUrl> {
    let parsed = match location.split_once("://") {
        // In an HTTP URL `?` starts the query (a pre-signed URL's signature); HTTP cannot
        // list, so it has no glob either.
        Some((scheme, _))
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            ListingTableUrl::parse(location)
        }
        Some((scheme, rest)) if scheme != "file" && rest.contains(['*', '?', '[']) => {
            let first_glob = rest.find(['*', '?', '[']).expect("contains one");
            let cut = rest[..first_glob].rfind('/').map_or(0, |i| i + 1);
            let base = format!("{scheme}://{}", &rest[..cut]);
            ListingTableUrl::parse(&base).and_then(|u| u.with_glob(&rest[cut..]))
        }
        _ => ListingTableUrl::parse(location),
    };
    parsed.map_err(|e| DataFusionError::Plan(format!("{NAME}({location:?}): {e}")))
}

impl TableFunctionImpl for ReadOtlpFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let location = location_argument(args.exprs())?;
        let url = parse_location(&location)?;
        Ok(Arc::new(OtlpTable { url, location }))
    }
}

/// The spans under one location.
#[derive(Debug)]
pub struct OtlpTable {
    url: ListingTableUrl,
    location: String,
}

#[async_trait]
impl TableProvider for OtlpTable {
    fn schema(&self) -> SchemaRef {
        otlp_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![
            TableProviderFilterPushDown::Unsupported;
            filters.len()
        ])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let location = &self.location;
        let store = state
            .runtime_env()
            .object_store(self.url.object_store())
            .map_err(|e| DataFusionError::Plan(format!("{NAME}({location:?}): {e}")))?;
        let mut files = list_files(&self.url, store.as_ref())
            .await
            .map_err(|e| DataFusionError::Plan(format!("{NAME}({location:?}): {e}")))?;
        if files.is_empty() {
            return plan_err!("{NAME}({location:?}): no file there");
        }
        files.sort_by(|a, b| a.location.cmp(&b.location));
        let schema = otlp_schema();
        let partitions: Vec<Arc<dyn PartitionStream>> = files
            .into_iter()
            .map(|meta| {
                Arc::new(OtlpFile {
                    schema: Arc::clone(&schema),
                    store: Arc::clone(&store),
                    meta,
                    shown: location.clone(),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        StreamingTable::try_new(schema, partitions)?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// The files at `url`: the object itself, or every object under the prefix, in
/// subdirectories too (a trace archive is often split by day or by host), narrowed by the
/// URL's glob. (DataFusion's listing skips subdirectories by default, as tables want.)
async fn list_files(url: &ListingTableUrl, store: &dyn ObjectStore) -> Result<Vec<ObjectMeta>> {
    let prefix = url.prefix();
    if !url.is_collection() {
        match store.head(prefix).await {
            Ok(meta) => return Ok(vec![meta]),
            Err(datafusion::object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let listed: Vec<ObjectMeta> = store.list(Some(prefix)).try_collect().await?;
    Ok(listed
        .into_iter()
        .filter(|m| url.contains(&m.location, false))
        .collect())
}

/// One file: one partition.
struct OtlpFile {
    schema: SchemaRef,
    store: Arc<dyn ObjectStore>,
    meta: ObjectMeta,
    shown: String,
}

impl fmt::Debug for OtlpFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OtlpFile({})", self.meta.location)
    }
}

impl OtlpFile {
    /// The file's name as users see it: its path within the store, under the URL's scheme.
    fn name(&self) -> String {
        let path = self.meta.location.as_ref();
        match self.shown.split_once("://") {
            Some((scheme, rest)) if scheme != "file" => {
                let bucket = rest.split('/').next().unwrap_or("");
                format!("{scheme}://{bucket}/{path}")
            }
            _ => format!("/{path}"),
        }
    }
}

impl PartitionStream for OtlpFile {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let store = Arc::clone(&self.store);
        let location = self.meta.location.clone();
        let name = self.name();
        let batch_size = ctx.session_config().batch_size();
        let failed = {
            let name = name.clone();
            move |e: datafusion::object_store::Error| {
                DataFusionError::Execution(format!("{NAME}: {name}: {e}"))
            }
        };
        // The object is read as a stream of chunks, cut into lines and parsed as they come:
        // one batch and one line in memory per file, whatever the file's size.
        let opened = async move {
            let bytes = store.get(&location).await.map_err(&failed)?.into_stream();
            let state = Reading {
                bytes: bytes.map_err(failed).boxed(),
                pending: Vec::new(),
                parser: SpanParser::new(&name, batch_size),
                ready: std::collections::VecDeque::new(),
                ended: false,
            };
            Ok::<_, DataFusionError>(futures::stream::try_unfold(state, Reading::next))
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(opened).try_flatten().boxed(),
        ))
    }
}

/// One file being read: the chunks still to come, the bytes of an unfinished line, and the
/// batches parsed but not yet returned.
struct Reading {
    bytes: futures::stream::BoxStream<'static, Result<bytes::Bytes>>,
    pending: Vec<u8>,
    parser: SpanParser,
    ready: std::collections::VecDeque<RecordBatch>,
    ended: bool,
}

impl Reading {
    async fn next(mut self) -> Result<Option<(RecordBatch, Reading)>> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                return Ok(Some((batch, self)));
            }
            if self.ended {
                return Ok(None);
            }
            let mut out = Vec::new();
            match self.bytes.next().await {
                Some(chunk) => {
                    self.pending.extend_from_slice(&chunk?);
                    let mut start = 0;
                    while let Some(end) = self.pending[start..].iter().position(|&b| b == b'\n') {
                        self.parser
                            .line(&self.pending[start..start + end], &mut out)?;
                        start += end + 1;
                    }
                    self.pending.drain(..start);
                    if self.pending.len() > MAX_LINE_BYTES {
                        self.parser.line_no += 1;
                        return Err(self.parser.bad(format!(
                            "the line is longer than {} MiB",
                            MAX_LINE_BYTES >> 20
                        )));
                    }
                }
                None => {
                    let rest = std::mem::take(&mut self.pending);
                    self.parser.line(&rest, &mut out)?;
                    self.parser.finish(&mut out)?;
                    self.ended = true;
                }
            }
            self.ready.extend(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;

    fn rows(text: &str) -> Result<usize> {
        Ok(parse_otlp(text, "t.jsonl", 2)?
            .iter()
            .map(RecordBatch::num_rows)
            .sum())
    }

    const SPAN: &str = r#"{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "s", "startTimeUnixNano": "1", "endTimeUnixNano": "2000001"}"#;

    #[test]
    fn older_and_snake_case_field_names_are_read() {
        let old = format!(
            r#"{{"resourceSpans": [{{"instrumentationLibrarySpans": [{{"spans": [{SPAN}, {SPAN}, {SPAN}]}}]}}]}}"#
        );
        assert_eq!(rows(&old).unwrap(), 3);
        let snake = r#"{"resource_spans": [{"scope_spans": [{"spans": [{"trace_id": "5b8efff798038103d269b633813fc60c", "span_id": "eee19b7ec3c1b174", "name": "s", "kind": "SPAN_KIND_SERVER", "status": {"code": "STATUS_CODE_ERROR"}}]}]}]}"#;
        let batches = parse_otlp(snake, "t.jsonl", 10).unwrap();
        let b = &batches[0];
        assert_eq!(
            b.column_by_name("kind")
                .unwrap()
                .as_string::<i32>()
                .value(0),
            "SERVER"
        );
        assert_eq!(
            b.column_by_name("status_code")
                .unwrap()
                .as_string::<i32>()
                .value(0),
            "ERROR"
        );
    }

    #[test]
    fn base64_ids_become_hex() {
        let line = r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "W47/95gDgQPSabYzgT/GDA==", "spanId": "7uGbfsPBsXQ=", "name": "s"}]}]}]}"#;
        let b = &parse_otlp(line, "t", 10).unwrap()[0];
        assert_eq!(
            b.column(0).as_string::<i32>().value(0),
            "5b8efff798038103d269b633813fc60c"
        );
        assert_eq!(b.column(1).as_string::<i32>().value(0), "eee19b7ec3c1b174");
    }

    #[test]
    fn bad_values_are_errors_naming_the_field_file_and_line() {
        let cases = [
            (
                r#"{"resourceSpans": [{"resource": {}}]}"#,
                "has no scopeSpans",
            ),
            (
                r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "startTimeUnixNano": "18446744073709551615"}]}]}]}"#,
                "startTimeUnixNano \"18446744073709551615\" is not a 64-bit integer",
            ),
            (
                r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "kind": 9}]}]}]}"#,
                "kind 9 is not 0 to 5",
            ),
            (
                r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "eee19b7ec3c1b174"}]}]}]}"#,
                "traceId \"xyz\" is not 16 bytes",
            ),
        ];
        for (line, want) in cases {
            let text = format!("\n{line}\n");
            let err = rows(&text).unwrap_err().to_string();
            assert!(err.contains("read_otlp: t.jsonl line 2: "), "{err}");
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        let line = r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "startTimeUnixNano": "-9223372036854775808", "endTimeUnixNano": 9223372036854775807}]}]}]}"#;
        let b = &parse_otlp(line, "t", 10).unwrap()[0];
        let ms = b
            .column_by_name("duration_ms")
            .unwrap()
            .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
            .value(0);
        assert!(ms > 1.8e13, "{ms}");
    }
}
