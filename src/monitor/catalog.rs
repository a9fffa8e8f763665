//! The monitors' and alerts' definitions, kept in the store (`<store>/monitor_catalog/` and
//! `<store>/alert_catalog/`, Delta tables) so they survive restarts and every serve process
//! of the store sees the same ones.
//!
//! Each statement is a row: `(name, seq, action, version, at, definition)`. A monitor's
//! state is its rows in `seq` order folded: `create` starts a version (`definition` holds
//! it, as JSON), `pause` / `resume` set whether it runs, `drop` ends it (its rows stay).
//! The commit of a row carries the application transaction `monitor-catalog:<name>` at its
//! `seq`, so two processes changing one monitor at once cannot both win.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::{DataFusionError, Result};
use url::Url;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::statement::{AlertDefinition, Definition};
use super::tables::{append, read_all, table_url};

/// A monitor or an alert as it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<D> {
    pub definition: D,
    pub version: i64,
    /// When this version was created (microseconds since the epoch).
    pub created_at: i64,
    pub paused: bool,
}

pub type Monitor = Versioned<Definition>;

/// What a catalog row of action `budget` changes.
pub trait Budgeted {
    fn set_budget(&mut self, budget: Option<f64>);
}

impl<D: Budgeted> Versioned<D> {
    fn set_budget(&mut self, budget: Option<f64>) {
        self.definition.set_budget(budget);
    }
}

impl Budgeted for Definition {
    fn set_budget(&mut self, budget: Option<f64>) {
        self.budget_usd_per_day = budget;
    }
}

impl Budgeted for AlertDefinition {
    fn set_budget(&mut self, _budget: Option<f64>) {}
}
pub type Alert = Versioned<AlertDefinition>;

/// What the catalog holds of one name.
#[derive(Debug, Clone)]
pub struct Entry<D> {
    /// The definition in force, unless it was dropped.
    pub current: Option<Versioned<D>>,
    /// Every version created, oldest first (as created: later budgets not applied).
    pub versions: Vec<Versioned<D>>,
    /// The last statement's `seq`, and the highest version ever created.
    pub seq: i64,
    pub version: i64,
}

/// The store's catalog of monitors.
#[derive(Debug, Clone)]
pub struct Catalog {
    url: Url,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("seq", DataType::Int64, false),
        Field::new("action", DataType::Utf8, false),
        Field::new("version", DataType::Int64, false),
        Field::new(
            "at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("definition", DataType::Utf8, true),
    ]))
}

/// Microseconds since the epoch, now.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl<D> Default for Entry<D> {
    fn default() -> Self {
        Entry {
            current: None,
            versions: Vec::new(),
            seq: 0,
            version: 0,
        }
    }
}

impl Catalog {
    /// The catalog of monitors (`path`: `monitor_catalog/`) or alerts (`alert_catalog/`).
    pub fn new(base: &Url, path: &str) -> Result<Self> {
        Ok(Catalog {
            url: table_url(base, path)?,
        })
    }

    /// Every name the catalog knows, with its state.
    pub async fn load<D: DeserializeOwned + Budgeted + Clone>(
        &self,
    ) -> Result<BTreeMap<String, Entry<D>>> {
        let mut rows: Vec<(String, i64, String, i64, i64, Option<String>)> = Vec::new();
        for batch in read_all(&self.url).await? {
            let text = |name: &str| -> Result<StringArray> {
                let c = batch.column_by_name(name).ok_or_else(|| {
                    DataFusionError::Execution(format!("monitor_catalog: no column {name}"))
                })?;
                Ok(cast(c, &DataType::Utf8)?.as_string::<i32>().clone())
            };
            let int = |name: &str| -> Result<Int64Array> {
                let c = batch.column_by_name(name).ok_or_else(|| {
                    DataFusionError::Execution(format!("monitor_catalog: no column {name}"))
                })?;
                Ok(cast(c, &DataType::Int64)?
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .clone())
            };
            let (names, seqs, actions, versions, ats, definitions) = (
                text("name")?,
                int("seq")?,
                text("action")?,
                int("version")?,
                int("at")?,
                text("definition")?,
            );
            for i in 0..batch.num_rows() {
                rows.push((
                    names.value(i).to_string(),
                    seqs.value(i),
                    actions.value(i).to_string(),
                    versions.value(i),
                    ats.value(i),
                    (!definitions.is_null(i)).then(|| definitions.value(i).to_string()),
                ));
            }
        }
        rows.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let mut out: BTreeMap<String, Entry<D>> = BTreeMap::new();
        for (name, seq, action, version, at, definition) in rows {
            let entry = out.entry(name.clone()).or_default();
            entry.seq = seq;
            entry.version = entry.version.max(version);
            match action.as_str() {
                "create" => {
                    let text = definition.unwrap_or_default();
                    let definition: D = serde_json::from_str(&text).map_err(|e| {
                        DataFusionError::Execution(format!(
                            "monitor_catalog: the definition of {name} version {version} \
                             cannot be read: {e}"
                        ))
                    })?;
                    let created = Versioned {
                        definition,
                        version,
                        created_at: at,
                        paused: false,
                    };
                    entry.versions.push(created.clone());
                    entry.current = Some(created);
                }
                "pause" | "resume" => {
                    if let Some(m) = &mut entry.current {
                        m.paused = action == "pause";
                    }
                }
                "budget" => {
                    // For monitors only: the definition's budget, as JSON (null: none).
                    let budget: Option<f64> = definition
                        .as_deref()
                        .and_then(|t| serde_json::from_str(t).ok())
                        .flatten();
                    if let Some(m) = &mut entry.current {
                        m.set_budget(budget);
                    }
                }
                "drop" => entry.current = None,
                other => {
                    return Err(DataFusionError::Execution(format!(
                        "monitor_catalog: unknown action {other} for {name}"
                    )));
                }
            }
        }
        Ok(out)
    }

    /// Records one statement about `name`, after `entry` (as loaded): `seq` follows it.
    pub async fn record<D, T: Serialize>(
        &self,
        name: &str,
        entry: &Entry<D>,
        action: &str,
        version: i64,
        definition: Option<&T>,
    ) -> Result<()> {
        let seq = entry.seq + 1;
        let definition = definition
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| DataFusionError::Execution(format!("monitor {name}: {e}")))?;
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from(vec![name])),
                Arc::new(Int64Array::from(vec![seq])),
                Arc::new(StringArray::from(vec![action])),
                Arc::new(Int64Array::from(vec![version])),
                Arc::new(TimestampMicrosecondArray::from(vec![now_micros()]).with_timezone("UTC")),
                Arc::new(StringArray::from(vec![definition])),
            ],
        )?;
        append(
            &self.url,
            schema(),
            vec![batch],
            Some((format!("evalsql-catalog:{name}"), seq)),
        )
        .await
        .map_err(|e| {
            DataFusionError::Execution(format!(
                "monitor {name}: the catalog changed meanwhile (another statement about it, \
                 perhaps from another server); try again ({e})"
            ))
        })
    }
}
