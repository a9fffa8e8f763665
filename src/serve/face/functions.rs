//! `version()`, `current_setting()`, `set_config()` and `pg_catalog.pg_settings`.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::SessionContext;
use evalsql_udfs::{columnar_result, prepare_args};

use super::{PgSession, SettingRow, unrecognized, version_string};

/// Registers the functions; `set_config` and `version` are the same for every session,
/// `current_setting` reads this connection's `session`.
pub fn register(ctx: &SessionContext, session: &Arc<PgSession>) {
    ctx.register_udf(ScalarUDF::new_from_impl(Version::new()));
    ctx.register_udf(ScalarUDF::new_from_impl(SetConfig::new()));
    ctx.register_udf(ScalarUDF::new_from_impl(CurrentSetting::new(Arc::clone(
        session,
    ))));
    ctx.register_udf(ScalarUDF::new_from_impl(CurrentSetting::session_user(
        Arc::clone(session),
    )));
}

/// `version()`: [`version_string`].
#[derive(Debug, PartialEq, Eq, Hash)]
struct Version {
    signature: Signature,
}

impl Version {
    fn new() -> Self {
        Self {
            signature: Signature::exact(vec![], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Version {
    fn name(&self) -> &str {
        "version"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            version_string(),
        ))))
    }
}

/// `current_setting(name [, missing_ok])`: what `SHOW name` gives; an unknown name is an
/// error, or NULL with `missing_ok`. Also `session_user` (the parser reads `current_user`
/// as it): `current_setting('session_authorization')`, the name the client logged in with
/// (datafusion-pg-catalog's says `postgres`).
#[derive(Debug)]
struct CurrentSetting {
    name: &'static str,
    signature: Signature,
    session: Arc<PgSession>,
}

impl PartialEq for CurrentSetting {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.session, &other.session)
    }
}
impl Eq for CurrentSetting {}
impl std::hash::Hash for CurrentSetting {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl CurrentSetting {
    fn new(session: Arc<PgSession>) -> Self {
        let mut forms = Vec::new();
        for text in [DataType::Utf8, DataType::Utf8View, DataType::LargeUtf8] {
            forms.push(TypeSignature::Exact(vec![text.clone()]));
            forms.push(TypeSignature::Exact(vec![text, DataType::Boolean]));
        }
        Self {
            name: "current_setting",
            signature: Signature::one_of(forms, Volatility::Stable),
            session,
        }
    }

    fn session_user(session: Arc<PgSession>) -> Self {
        Self {
            name: "session_user",
            signature: Signature::exact(vec![], Volatility::Stable),
            session,
        }
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if self.name == "session_user" {
            let user = self
                .session
                .lookup("session_authorization", &args.config_options)
                .and_then(|row| row.value);
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(user)));
        }
        let prepared = prepare_args(&args.args)?;
        let names = prepared.str("current_setting", 0)?;
        let missing_ok = if prepared.len() > 1 {
            Some(prepared.bool("current_setting", 1)?)
        } else {
            None
        };
        let rows = if prepared.all_scalar() {
            1
        } else {
            args.number_rows
        };
        let mut out = StringBuilder::new();
        for row in 0..rows {
            let Some(name) = names.get(row) else {
                out.append_null();
                continue;
            };
            match self.session.lookup(name, &args.config_options) {
                Some(setting) => out.append_option(setting.value),
                None if missing_ok.as_ref().and_then(|m| m.get(row)) == Some(true) => {
                    out.append_null()
                }
                None => return exec_err!("current_setting(): {}", unrecognized(name)),
            }
        }
        columnar_result(prepared.all_scalar(), Arc::new(out.finish()))
    }
}

/// `set_config(name, value, is_local)` as a function: only planned here. The statement
/// `SELECT set_config(...)` is answered by [`super::hook::FaceHook`], which applies it as
/// `SET` with `SET`'s checks; any other use (in a query over rows, with computed arguments)
/// is an error when it runs, so no setting changes outside those checks.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SetConfig {
    signature: Signature,
}

impl SetConfig {
    fn new() -> Self {
        Self {
            signature: Signature::exact(
                vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
                Volatility::Volatile,
            ),
        }
    }
}

impl ScalarUDFImpl for SetConfig {
    fn name(&self) -> &str {
        "set_config"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
        exec_err!(
            "set_config() runs on this server only as a statement of its own, \
             SELECT set_config('name', 'value', false), with constant or bound arguments"
        )
    }
}

// ---------------------------------------------------------------------------------------
// pg_catalog.pg_settings

/// PostgreSQL's columns of `pg_settings` (`enumvals`, an array there, is text here).
fn pg_settings_schema() -> SchemaRef {
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    Arc::new(Schema::new(vec![
        text("name"),
        text("setting"),
        text("unit"),
        text("category"),
        text("short_desc"),
        text("extra_desc"),
        text("context"),
        text("vartype"),
        text("source"),
        text("min_val"),
        text("max_val"),
        text("enumvals"),
        text("boot_val"),
        text("reset_val"),
        text("sourcefile"),
        Field::new("sourceline", DataType::Int32, true),
        Field::new("pending_restart", DataType::Boolean, true),
    ]))
}

/// PostgreSQL's `vartype` of a value.
fn vartype(value: Option<&str>) -> &'static str {
    match value {
        Some("on" | "off" | "true" | "false") => "bool",
        Some(v) if v.parse::<i64>().is_ok() => "integer",
        Some(v) if v.parse::<f64>().is_ok() => "real",
        _ => "string",
    }
}

fn settings_batch(schema: &SchemaRef, rows: &[SettingRow]) -> Result<RecordBatch> {
    use datafusion::arrow::array::{BooleanArray, Int32Array};
    let text = |f: &dyn Fn(&SettingRow) -> Option<&str>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<StringArray>())
    };
    let none = || -> ArrayRef { Arc::new(StringArray::new_null(rows.len())) };
    let columns: Vec<ArrayRef> = vec![
        text(&|r| Some(r.name.as_str())),
        text(&|r| r.value.as_deref()),
        none(),
        text(&|r| {
            Some(if r.name.contains('.') {
                "evalsql"
            } else {
                "PostgreSQL"
            })
        }),
        text(&|r| Some(r.description.as_str())),
        none(),
        text(&|r| Some(r.context)),
        text(&|r| Some(vartype(r.value.as_deref()))),
        text(&|_| Some("session")),
        none(),
        none(),
        none(),
        none(),
        text(&|r| r.value.as_deref()),
        none(),
        Arc::new(Int32Array::new_null(rows.len())),
        Arc::new(BooleanArray::from(vec![Some(false); rows.len()])),
    ];
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// `pg_settings` of the session that reads it (its [`PgSession`] and its settings, the
/// values `df_settings` shows).
#[derive(Debug)]
struct PgSettings {
    schema: SchemaRef,
}

impl PartitionStream for PgSettings {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let config = ctx.session_config();
        let batch = match config.get_extension::<PgSession>() {
            Some(session) => settings_batch(&self.schema, &session.all(config.options())),
            None => exec_err!("pg_settings: this session has no PostgreSQL settings"),
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(async move { batch }),
        ))
    }
}

/// datafusion-pg-catalog's `pg_catalog` with `pg_settings` answered from the session.
#[derive(Debug)]
struct FacePgCatalog {
    inner: Arc<dyn SchemaProvider>,
    settings: Arc<dyn TableProvider>,
}

#[async_trait]
impl SchemaProvider for FacePgCatalog {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(
        &self,
        name: &str,
    ) -> Result<Option<Arc<dyn TableProvider>>, datafusion::error::DataFusionError> {
        if name == "pg_settings" {
            return Ok(Some(Arc::clone(&self.settings)));
        }
        self.inner.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        name == "pg_settings" || self.inner.table_exist(name)
    }
}

/// Replaces `pg_catalog.pg_settings` in `catalog` (registered by datafusion-pg-catalog).
pub fn replace_pg_settings(ctx: &SessionContext, catalog: &str) -> Result<()> {
    let Some(catalog) = ctx.catalog(catalog) else {
        return plan_err!("pg_settings: no catalog {catalog}");
    };
    let Some(inner) = catalog.schema("pg_catalog") else {
        return plan_err!("pg_settings: no pg_catalog schema");
    };
    let schema = pg_settings_schema();
    let settings = StreamingTable::try_new(
        Arc::clone(&schema),
        vec![Arc::new(PgSettings { schema }) as Arc<dyn PartitionStream>],
    )?;
    catalog.register_schema(
        "pg_catalog",
        Arc::new(FacePgCatalog {
            inner,
            settings: Arc::new(settings),
        }),
    )?;
    Ok(())
}
