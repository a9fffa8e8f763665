//! Alerts: a condition over a monitor's rows in a trailing window, per group, checked after
//! each run of the monitor.
//!
//! Each (alert, group) has a state: `ok`, `firing` (the condition holds), `resolved` (it
//! held, and no longer does), `no_data` (no rows in the window, or a condition that is
//! NULL). Every change is a row of the `alerts` table (`<store>/alerts/`); changes into or
//! out of `firing` are notified, and a firing group again every `REPEAT`.
//!
//! The condition is meant for `mean_cs`, whose confidence sequence holds at every check at
//! once: checked after every run, `mean_cs(x, lo, hi)['upper'] < t` fires on a stream whose
//! true mean is above `t` with probability at most alpha, however many runs there are. A
//! plain `avg(x) < t` checked as often fires on noise.
//!
//! Notifications are JSON POSTs to the alert's `NOTIFY` URL (only under a `--alert-url`
//! prefix), signed: `X-Evalsql-Signature: sha256=<hex HMAC-SHA256 of the body under the
//! --alert-secret-file key>`, with an `Idempotency-Key` that is the same for every attempt
//! of one notification; retried with backoff on failures and 408/429/5xx.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use evalsql_udfs::displayed_url as shown;
use hmac::{KeyInit, Mac};
use serde_json::json;
use url::Url;

use super::catalog::{Alert, Catalog, Entry};
use super::statement::AlertDefinition;
use super::tables::{append, read_all, table_url};

/// What the operator allows alerts to do.
#[derive(Debug, Clone, Default)]
pub struct AlertOptions {
    /// `--alert-url`: the URL prefixes notifications may go to (none: no NOTIFY).
    pub urls: Vec<String>,
    /// `--alert-secret-file`: the key notifications are signed with.
    pub secret: Option<Arc<Vec<u8>>>,
}

impl AlertOptions {
    /// The options of `--alert-url` prefixes and a secret file (its text, trimmed).
    pub fn load(urls: Vec<String>, secret_file: Option<&std::path::Path>) -> Result<Self> {
        let secret = match secret_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    DataFusionError::Configuration(format!(
                        "--alert-secret-file {}: {e}",
                        path.display()
                    ))
                })?;
                let key = text.trim().as_bytes().to_vec();
                if key.len() < 16 {
                    return Err(DataFusionError::Configuration(format!(
                        "--alert-secret-file {}: the key must be at least 16 bytes",
                        path.display()
                    )));
                }
                Some(Arc::new(key))
            }
        };
        Ok(AlertOptions { urls, secret })
    }
}

/// The signature of `body` under `key`, as the `X-Evalsql-Signature` header carries it.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn transitions_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("alert", DataType::Utf8, false),
        Field::new("monitor", DataType::Utf8, false),
        Field::new("group_key", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("previous", DataType::Utf8, true),
        Field::new("value", DataType::Float64, true),
        Field::new("rows", DataType::Int64, false),
        Field::new("window_seconds", DataType::Float64, false),
        Field::new("run_id", DataType::Utf8, false),
        Field::new("monitor_version", DataType::Int64, false),
        Field::new(
            "at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]))
}

fn show_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("monitor", DataType::Utf8, false),
        Field::new("version", DataType::Int64, false),
        Field::new("condition", DataType::Utf8, false),
        Field::new("window", DataType::Utf8, false),
        Field::new("group_by", DataType::Utf8, false),
        Field::new("notify", DataType::Utf8, true),
        Field::new("firing", DataType::Int64, false),
    ]))
}

/// The schema of `SHOW ALERTS`.
pub fn answer_schema() -> SchemaRef {
    show_schema()
}

/// A quoted identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The query that evaluates `alert` over the rows of `table` (the monitor's) that arrived
/// after `since` (microseconds):
/// one row per group, its values, whether the condition holds, the value, the rows.
///
/// It is put together from the definition's parts, each parsed by sqlparser when the
/// alert was created and printed by it then: names quoted, the condition and the value as
/// expressions. It is planned and checked like a client's statement when the alert is
/// created.
fn evaluation(alert: &AlertDefinition, table: &str, since: i64) -> String {
    let groups: Vec<String> = alert.group_by.iter().map(|g| quoted(g)).collect();
    let mut items = groups.clone();
    items.push(format!("CAST(({}) AS BOOLEAN) AS firing", alert.condition));
    items.push(match &alert.value {
        Some(v) => format!("TRY_CAST(({v}) AS DOUBLE) AS value"),
        None => "CAST(NULL AS DOUBLE) AS value".into(),
    });
    items.push("count(*) AS rows".into());
    let mut sql = format!(
        "SELECT {} FROM {table} WHERE CAST(run_at AS BIGINT) > {since}",
        items.join(", "),
    );
    if !groups.is_empty() {
        sql.push_str(&format!(" GROUP BY {}", groups.join(", ")));
    }
    sql
}

/// A group's state as last recorded.
#[derive(Debug, Clone)]
pub struct GroupState {
    state: String,
    /// When a firing group was last notified (microseconds), for `REPEAT`.
    notified: Option<i64>,
}

/// The alerts of a store.
pub struct Alerts {
    catalog: Catalog,
    table: Url,
    options: AlertOptions,
    entries: Mutex<BTreeMap<String, Entry<AlertDefinition>>>,
    /// (alert, group key) -> state; `None` until read from the table.
    states: tokio::sync::Mutex<Option<States>>,
    client: reqwest::Client,
}

/// One run of the monitor, as the alerts see it.
pub struct RunInfo<'a> {
    pub monitor: &'a str,
    pub run_id: &'a str,
    pub version: i64,
    /// When the run started (microseconds): the window ends there.
    pub at: i64,
}

impl Alerts {
    pub fn new(base: &Url, options: AlertOptions) -> Result<Self> {
        Ok(Alerts {
            catalog: Catalog::new(base, "alert_catalog/")?,
            table: table_url(base, "alerts/")?,
            options,
            entries: Mutex::default(),
            states: tokio::sync::Mutex::new(None),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| DataFusionError::Configuration(format!("alerts: {e}")))?,
        })
    }

    pub fn table_url(&self) -> &Url {
        &self.table
    }

    /// An empty `alerts` table, so that it can be read before anything fired.
    pub async fn create_table(&self) -> Result<()> {
        append(&self.table, transitions_schema(), Vec::new(), None).await
    }

    pub async fn reload(&self) -> Result<BTreeMap<String, Entry<AlertDefinition>>> {
        let entries = self.catalog.load().await?;
        if let Ok(mut kept) = self.entries.lock() {
            *kept = entries.clone();
        }
        Ok(entries)
    }

    /// Checks a new alert: its monitor exists, its URL is allowed, and its evaluation plans
    /// in `ctx` (so its columns are the monitor's) and passes `check`.
    pub async fn validate(
        &self,
        alert: &AlertDefinition,
        monitor_exists: bool,
        ctx: &SessionContext,
        check: &(dyn Fn(&LogicalPlan) -> std::result::Result<(), String> + Send + Sync),
    ) -> Result<()> {
        let name = &alert.name;
        let fail = |why: String| DataFusionError::Plan(format!("CREATE ALERT {name}: {why}"));
        if !monitor_exists {
            return Err(fail(format!("there is no monitor {}", alert.monitor)));
        }
        if let Some(target) = &alert.notify {
            let url = Url::parse(target)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"));
            let Some(url) = url else {
                return Err(fail("NOTIFY takes an http:// or https:// URL".into()));
            };
            if !self
                .options
                .urls
                .iter()
                .any(|prefix| evalsql_udfs::url_under(&url, prefix))
            {
                return Err(fail(format!(
                    "NOTIFY {}: the URL is outside --alert-url ({})",
                    shown(&url),
                    if self.options.urls.is_empty() {
                        "none given: the server notifies nowhere".to_string()
                    } else {
                        self.options.urls.join(", ")
                    }
                )));
            }
            if self.options.secret.is_none() {
                return Err(fail(
                    "NOTIFY needs the server's --alert-secret-file (notifications are signed)"
                        .into(),
                ));
            }
        }
        let plan = ctx
            .state()
            .create_logical_plan(&evaluation(
                alert,
                &format!("monitors.{}", quoted(&alert.monitor)),
                0,
            ))
            .await
            .map_err(|e| fail(e.to_string()))?;
        check(&plan).map_err(fail)
    }

    /// Records a checked `CREATE ALERT`; its answer.
    pub async fn create(&self, or_replace: bool, alert: &AlertDefinition) -> Result<String> {
        let entries = self.reload().await?;
        let name = &alert.name;
        let entry = entries.get(name).cloned().unwrap_or_default();
        if let Some(current) = &entry.current {
            if &current.definition == alert {
                return Ok(format!(
                    "CREATE ALERT {name}: unchanged (version {})",
                    current.version
                ));
            }
            if !or_replace {
                return Err(DataFusionError::Plan(format!(
                    "alert {name} exists (CREATE OR REPLACE ALERT changes it)"
                )));
            }
        }
        let version = entry.version + 1;
        self.catalog
            .record(name, &entry, "create", version, Some(alert))
            .await?;
        self.reload().await?;
        Ok(format!("CREATE ALERT {name} (version {version})"))
    }

    /// Records a `DROP ALERT`; its answer.
    pub async fn drop_alert(&self, name: &str, if_exists: bool) -> Result<String> {
        let entries = self.reload().await?;
        let entry = entries.get(name).cloned().unwrap_or_default();
        let Some(current) = &entry.current else {
            return if if_exists {
                Ok(format!("DROP ALERT {name}: there is none"))
            } else {
                Err(DataFusionError::Plan(format!("no alert {name}")))
            };
        };
        self.catalog
            .record(name, &entry, "drop", current.version, None::<&()>)
            .await?;
        self.reload().await?;
        Ok(format!("DROP ALERT {name}"))
    }

    /// `SHOW ALERTS`: each alert and how many of its groups fire.
    pub async fn show(&self) -> Result<RecordBatch> {
        let entries = self.reload().await?;
        let states = self.states().await?;
        let alerts: Vec<&Alert> = entries
            .values()
            .filter_map(|e| e.current.as_ref())
            .collect();
        let firing = |name: &str| {
            states
                .iter()
                .filter(|((a, _), s)| a == name && s.state == "firing")
                .count() as i64
        };
        let d = |a: &&Alert| a.definition.clone();
        Ok(RecordBatch::try_new(
            show_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    alerts.iter().map(|a| d(a).name),
                )),
                Arc::new(StringArray::from_iter_values(
                    alerts.iter().map(|a| d(a).monitor),
                )),
                Arc::new(Int64Array::from_iter_values(
                    alerts.iter().map(|a| a.version),
                )),
                Arc::new(StringArray::from_iter_values(
                    alerts.iter().map(|a| d(a).condition),
                )),
                Arc::new(StringArray::from_iter_values(
                    alerts
                        .iter()
                        .map(|a| format!("{} seconds", d(a).window.as_secs_f64())),
                )),
                Arc::new(StringArray::from_iter_values(
                    alerts.iter().map(|a| d(a).group_by.join(", ")),
                )),
                Arc::new(StringArray::from_iter(alerts.iter().map(|a| {
                    d(a).notify
                        .as_deref()
                        .and_then(|u| Url::parse(u).ok())
                        .map(|u| shown(&u))
                }))),
                Arc::new(Int64Array::from_iter_values(
                    alerts.iter().map(|a| firing(&a.definition.name)),
                )),
            ],
        )?)
    }

    /// The groups' states, read from the `alerts` table the first time.
    async fn states(&self) -> Result<tokio::sync::MappedMutexGuard<'_, States>> {
        let mut guard = self.states.lock().await;
        if guard.is_none() {
            let mut rows: Vec<(i64, String, String, String)> = Vec::new();
            for b in read_all(&self.table).await? {
                let text = |n: &str| -> Result<StringArray> {
                    Ok(cast(
                        b.column_by_name(n).expect("an alerts column"),
                        &DataType::Utf8,
                    )?
                    .as_string::<i32>()
                    .clone())
                };
                let at = cast(
                    b.column_by_name("at").expect("an alerts column"),
                    &DataType::Int64,
                )?;
                let at = at.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
                let (alert, group, state) = (text("alert")?, text("group_key")?, text("state")?);
                for i in 0..b.num_rows() {
                    rows.push((
                        at.value(i),
                        alert.value(i).to_string(),
                        group.value(i).to_string(),
                        state.value(i).to_string(),
                    ));
                }
            }
            rows.sort();
            let mut states = HashMap::new();
            for (_, alert, group, state) in rows {
                states.insert(
                    (alert, group),
                    GroupState {
                        state,
                        notified: None,
                    },
                );
            }
            *guard = Some(states);
        }
        Ok(tokio::sync::MutexGuard::map(guard, |s| {
            s.as_mut().expect("read above")
        }))
    }

    /// The alerts on `monitor` in force.
    pub fn on(&self, monitor: &str) -> Vec<Alert> {
        self.entries
            .lock()
            .map(|e| {
                e.values()
                    .filter_map(|e| e.current.clone())
                    .filter(|a| a.definition.monitor == monitor)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Evaluates the alerts on `run.monitor` in `ctx` (a session with `monitors.*`):
    /// records every change of state and sends the notifications.
    pub async fn evaluate(&self, run: &RunInfo<'_>, ctx: &SessionContext) -> Result<()> {
        let alerts = self.on(run.monitor);
        if alerts.is_empty() {
            return Ok(());
        }
        let table = format!("monitors.{}", quoted(run.monitor));
        let mut states = self.states().await?;
        let changes = step(&alerts, run, ctx, &table, &mut states).await?;
        drop(states);
        let recorded: Vec<&Change> = changes.iter().filter(|c| c.changed).collect();
        if !recorded.is_empty() {
            self.record(run, &recorded).await?;
        }
        for c in changes.iter().filter(|c| c.notify) {
            self.notify(run, c);
        }
        Ok(())
    }

    async fn record(&self, run: &RunInfo<'_>, changes: &[&Change]) -> Result<()> {
        let batch = transitions(run, changes)?;
        append(&self.table, transitions_schema(), vec![batch], None).await
    }

    /// Sends one notification in the background, retried with backoff.
    fn notify(&self, run: &RunInfo<'_>, change: &Change) {
        let (alert, group, state) = (&change.alert, &change.group, &change.state);
        let (previous, value) = (change.previous.as_deref(), change.value);
        let (Some(url), Some(key)) = (alert.notify.clone(), self.options.secret.clone()) else {
            return;
        };
        let group_value: serde_json::Value = serde_json::from_str(group).unwrap_or(json!({}));
        let at = chrono::DateTime::from_timestamp_micros(run.at)
            .map(|t| t.to_rfc3339())
            .unwrap_or_default();
        let body = json!({
            "alert": alert.name,
            "monitor": alert.monitor,
            "group": group_value,
            "state": state,
            "previous": previous,
            "value": value,
            "condition": alert.condition,
            "window_seconds": alert.window.as_secs_f64(),
            "run_id": run.run_id,
            "version": run.version,
            "at": at,
        })
        .to_string();
        let idempotency = {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(
                format!("{}\0{group}\0{state}\0{}", alert.name, run.at).as_bytes(),
            );
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let signed = signature(&key, body.as_bytes());
        let client = self.client.clone();
        let name = alert.name.clone();
        tokio::spawn(async move {
            let shown_url = Url::parse(&url).map(|u| shown(&u)).unwrap_or_default();
            let mut wait = Duration::from_millis(500);
            for attempt in 1..=5 {
                let sent = client
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .header("X-Evalsql-Signature", &signed)
                    .header("Idempotency-Key", &idempotency)
                    .body(body.clone())
                    .send()
                    .await;
                let retry = match sent {
                    Ok(r) if r.status().is_success() => return,
                    Ok(r) => {
                        let s = r.status().as_u16();
                        log::warn!("alert {name}: {shown_url} answered {s} (attempt {attempt})");
                        s == 408 || s == 429 || s >= 500
                    }
                    Err(e) => {
                        log::warn!(
                            "alert {name}: {shown_url}: {} (attempt {attempt})",
                            e.without_url()
                        );
                        true
                    }
                };
                if !retry {
                    return;
                }
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        });
    }
}

/// Each (alert, group key)'s state.
pub type States = HashMap<(String, String), GroupState>;

/// What one evaluation found for one (alert, group).
#[derive(Debug, Clone)]
pub struct Change {
    pub alert: AlertDefinition,
    /// The group's values, as a JSON object.
    pub group: String,
    pub state: String,
    pub previous: Option<String>,
    pub value: Option<f64>,
    pub rows: i64,
    /// Whether the state changed (a row of `alerts`).
    pub changed: bool,
    /// Whether to notify.
    pub notify: bool,
}

/// Evaluates `alerts` over `table` (the monitor's rows) for `run`, and moves `states`:
/// the (alert, group)s looked at, each with its state now.
pub async fn step(
    alerts: &[Alert],
    run: &RunInfo<'_>,
    ctx: &SessionContext,
    table: &str,
    states: &mut States,
) -> Result<Vec<Change>> {
    let mut found: Vec<(AlertDefinition, String, &'static str, Option<f64>, i64)> = Vec::new();
    for alert in alerts {
        let a = &alert.definition;
        let since = run.at - a.window.as_micros() as i64;
        let rows = ctx
            .sql(&evaluation(a, table, since))
            .await?
            .collect()
            .await?;
        let mut seen = Vec::new();
        for b in &rows {
            let g = a.group_by.len();
            let groups: Vec<ArrayRef> = (0..g)
                .map(|i| cast(b.column(i), &DataType::Utf8))
                .collect::<std::result::Result<_, _>>()?;
            let firing = b.column(g).as_boolean();
            let value = b
                .column(g + 1)
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>();
            let count = cast(b.column(g + 2), &DataType::Int64)?;
            let count = count.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            for i in 0..b.num_rows() {
                let key = serde_json::Value::Object(
                    a.group_by
                        .iter()
                        .zip(&groups)
                        .map(|(name, col)| {
                            let c = col.as_string::<i32>();
                            let v = (!c.is_null(i)).then(|| c.value(i).to_string());
                            (name.clone(), json!(v))
                        })
                        .collect(),
                )
                .to_string();
                let state = match (count.value(i), firing.is_null(i)) {
                    (0, _) | (_, true) => "no_data",
                    _ if firing.value(i) => "firing",
                    _ => "ok",
                };
                let v = (!value.is_null(i)).then(|| value.value(i));
                seen.push(key.clone());
                found.push((a.clone(), key, state, v, count.value(i)));
            }
        }
        // Groups known before with no rows in the window now.
        for (name, key) in states.keys() {
            if name == &a.name && !seen.contains(key) {
                found.push((a.clone(), key.clone(), "no_data", None, 0));
            }
        }
    }
    let mut changes = Vec::with_capacity(found.len());
    for (a, key, state, value, rows) in found {
        let known = states.get(&(a.name.clone(), key.clone())).cloned();
        let previous = known.as_ref().map(|k| k.state.clone());
        // `ok` after firing is `resolved`, and stays so until it fires again.
        let state = match (state, previous.as_deref()) {
            ("ok", Some("firing" | "resolved")) => "resolved",
            (s, _) => s,
        }
        .to_string();
        let mut notified = known.as_ref().and_then(|k| k.notified);
        let changed = previous.as_deref() != Some(state.as_str());
        let repeat_due = !changed
            && state == "firing"
            && a.repeat
                .is_some_and(|r| notified.is_none_or(|at| run.at - at >= r.as_micros() as i64));
        let involves_firing = state == "firing" || previous.as_deref() == Some("firing");
        let notify = a.notify.is_some() && ((changed && involves_firing) || repeat_due);
        if notify {
            notified = Some(run.at);
        }
        states.insert(
            (a.name.clone(), key.clone()),
            GroupState {
                state: state.clone(),
                notified,
            },
        );
        changes.push(Change {
            alert: a,
            group: key,
            state,
            previous,
            value,
            rows,
            changed,
            notify,
        });
    }
    Ok(changes)
}

/// `changes` as rows of the `alerts` table.
pub fn transitions(run: &RunInfo<'_>, changes: &[&Change]) -> Result<RecordBatch> {
    let n = changes.len();
    Ok(RecordBatch::try_new(
        transitions_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                changes.iter().map(|c| c.alert.name.clone()),
            )),
            Arc::new(StringArray::from(vec![run.monitor; n])),
            Arc::new(StringArray::from_iter_values(
                changes.iter().map(|c| c.group.clone()),
            )),
            Arc::new(StringArray::from_iter_values(
                changes.iter().map(|c| c.state.clone()),
            )),
            Arc::new(StringArray::from_iter(
                changes.iter().map(|c| c.previous.clone()),
            )),
            Arc::new(Float64Array::from_iter(changes.iter().map(|c| c.value))),
            Arc::new(Int64Array::from_iter_values(changes.iter().map(|c| c.rows))),
            Arc::new(Float64Array::from_iter_values(
                changes.iter().map(|c| c.alert.window.as_secs_f64()),
            )),
            Arc::new(StringArray::from(vec![run.run_id; n])),
            Arc::new(Int64Array::from(vec![run.version; n])),
            Arc::new(TimestampMicrosecondArray::from(vec![run.at; n]).with_timezone("UTC")),
        ],
    )?)
}
