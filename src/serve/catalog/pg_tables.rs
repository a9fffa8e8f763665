//! `pg_catalog` as served: datafusion-pg-catalog's schema, with the tables whose rows must
//! agree with the wire rebuilt from its own.
//!
//! - `pg_attribute`: `atttypid` is the OID the wire sends for the column (the crate's own
//!   mapping says `text` for structs and most lists), with `attlen`, `attbyval`, `attalign`,
//!   `attstorage` and `attndims` of that type; `attrelid` and `atttypid` are sent as `oid`,
//!   as PostgreSQL declares them (not `regclass`/`regtype`, which drivers read as names);
//!   `attnotnull` false for a view's columns, as PostgreSQL never marks them NOT NULL.
//! - `pg_index`, `pg_constraint`: the `int2vector`/`oidvector`/array columns (`indkey`,
//!   `conkey`, …), kept as text by the static catalog, are arrays; and only rows of relations
//!   `pg_class` has are kept (the static rows describe the system tables of the PostgreSQL the
//!   catalog was exported from, under OIDs no relation here has; evalsql's tables have no
//!   indexes or constraints).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int16Array, Int32Array, ListBuilder, PrimitiveBuilder,
    RecordBatch, StringArray,
};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{
    ArrowPrimitiveType, DataType, Field, Int16Type, Int32Type, Schema, SchemaRef,
};
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::collect;

use datafusion_postgres::arrow_pg::datatypes::PG_OID_ALIAS_KEY as OID_ALIAS_KEY;

use super::computed::{ComputedTable, Rows};
use super::types::{PgTypes, wire_oid};

/// datafusion-pg-catalog's `pg_catalog` with [`Rebuilt`] tables in place of some of its own.
#[derive(Debug)]
pub struct PgCatalogSchema {
    source: Arc<Source>,
}

/// Where the rebuilt tables read from.
#[derive(Debug)]
pub struct Source {
    /// datafusion-pg-catalog's `pg_catalog`.
    pub inner: Arc<dyn SchemaProvider>,
    pub catalogs: Arc<dyn CatalogProviderList>,
    pub types: Arc<PgTypes>,
}

impl Source {
    /// All rows of the crate's table `name`.
    pub async fn rows(&self, state: &dyn Session, name: &str) -> Result<Vec<RecordBatch>> {
        let table =
            self.inner.table(name).await?.ok_or_else(|| {
                DataFusionError::Internal(format!("pg_catalog.{name} is missing"))
            })?;
        let plan = table.scan(state, None, &[], None).await?;
        collect(plan, state.task_ctx()).await
    }

    /// The Arrow schema of the relation `schema.table` (the first catalog that has it).
    pub async fn relation(&self, schema: &str, table: &str) -> Result<Option<SchemaRef>> {
        for name in self.catalogs.catalog_names() {
            if let Some(found) = self.catalogs.catalog(&name).and_then(|c| c.schema(schema))
                && let Some(provider) = found.table(table).await?
            {
                return Ok(Some(provider.schema()));
            }
        }
        Ok(None)
    }
}

impl PgCatalogSchema {
    pub fn new(source: Arc<Source>) -> Self {
        PgCatalogSchema { source }
    }
}

/// The tables rebuilt here.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Attribute,
    Index,
    Constraint,
}

impl Kind {
    fn of(name: &str) -> Option<Kind> {
        match name {
            "pg_attribute" => Some(Kind::Attribute),
            "pg_index" => Some(Kind::Index),
            "pg_constraint" => Some(Kind::Constraint),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Attribute => "pg_attribute",
            Kind::Index => "pg_index",
            Kind::Constraint => "pg_constraint",
        }
    }

    /// Text columns that are arrays in PostgreSQL, with their element type.
    fn array_columns(self) -> &'static [(&'static str, DataType)] {
        match self {
            Kind::Attribute => &[],
            Kind::Index => &[
                ("indkey", DataType::Int16),
                ("indcollation", DataType::Int32),
                ("indclass", DataType::Int32),
                ("indoption", DataType::Int16),
            ],
            Kind::Constraint => &[
                ("conkey", DataType::Int16),
                ("confkey", DataType::Int16),
                ("conpfeqop", DataType::Int32),
                ("conppeqop", DataType::Int32),
                ("conffeqop", DataType::Int32),
                ("confdelsetcols", DataType::Int16),
                ("conexclop", DataType::Int32),
            ],
        }
    }

    /// Columns of type `oid` in PostgreSQL that datafusion-pg-catalog declares as another
    /// OID type (`regclass`, `regtype`), which drivers then read as names.
    fn oid_columns(self) -> &'static [&'static str] {
        match self {
            Kind::Attribute => &["attrelid", "atttypid"],
            Kind::Index | Kind::Constraint => &[],
        }
    }

    /// The column naming the relation a row belongs to (0: none).
    fn relation_column(self) -> Option<&'static str> {
        match self {
            Kind::Attribute => None,
            Kind::Index => Some("indrelid"),
            Kind::Constraint => Some("conrelid"),
        }
    }
}

#[async_trait]
impl SchemaProvider for PgCatalogSchema {
    fn table_names(&self) -> Vec<String> {
        self.source.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let Some(kind) = Kind::of(&name.to_ascii_lowercase()) else {
            return self.source.inner.table(name).await;
        };
        let Some(inner) = self.source.inner.table(kind.name()).await? else {
            return Ok(None);
        };
        let fields: Vec<Field> = inner
            .schema()
            .fields()
            .iter()
            .map(
                |f| match kind.array_columns().iter().find(|(c, _)| c == f.name()) {
                    Some((_, element)) if f.data_type() == &DataType::Utf8 => {
                        Field::new(f.name(), DataType::new_list(element.clone(), true), true)
                    }
                    _ if kind.oid_columns().contains(&f.name().as_str()) => {
                        let mut metadata = f.metadata().clone();
                        metadata.insert(OID_ALIAS_KEY.to_string(), "oid".to_string());
                        f.as_ref().clone().with_metadata(metadata)
                    }
                    _ => f.as_ref().clone(),
                },
            )
            .collect();
        Ok(Some(Arc::new(ComputedTable(Rebuilt {
            kind,
            schema: Arc::new(Schema::new_with_metadata(
                fields,
                inner.schema().metadata().clone(),
            )),
            source: Arc::clone(&self.source),
        }))))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.source.inner.table_exist(name)
    }
}

/// A `pg_catalog` table computed from the crate's rows when scanned.
#[derive(Debug)]
struct Rebuilt {
    kind: Kind,
    schema: SchemaRef,
    source: Arc<Source>,
}

#[async_trait]
impl Rows for Rebuilt {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        let rows = self.source.rows(state, self.kind.name()).await?;
        match self.kind {
            Kind::Attribute => self.attributes(state, rows).await,
            Kind::Index | Kind::Constraint => self.with_arrays(state, rows).await,
        }
    }
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog: no column {name}")))
}

fn int32s<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a Int32Array> {
    column(batch, name)?
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog: {name} is not int4")))
}

fn strings<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    column(batch, name)?
        .as_string_opt::<i32>()
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog: {name} is not text")))
}

impl Rebuilt {
    /// The relations `pg_class` lists, by OID, with their schema's and their own name and
    /// whether they are views.
    async fn relations(&self, state: &dyn Session) -> Result<HashMap<i32, (String, String, bool)>> {
        let mut namespaces = HashMap::new();
        for batch in self.source.rows(state, "pg_namespace").await? {
            let (oid, name) = (int32s(&batch, "oid")?, strings(&batch, "nspname")?);
            for i in 0..batch.num_rows() {
                namespaces.insert(oid.value(i), name.value(i).to_string());
            }
        }
        let mut relations = HashMap::new();
        for batch in self.source.rows(state, "pg_class").await? {
            let oid = int32s(&batch, "oid")?;
            let name = strings(&batch, "relname")?;
            let namespace = int32s(&batch, "relnamespace")?;
            let kind = strings(&batch, "relkind")?;
            for i in 0..batch.num_rows() {
                if let Some(schema) = namespaces.get(&namespace.value(i)) {
                    let view = kind.value(i) == "v";
                    relations.insert(
                        oid.value(i),
                        (schema.clone(), name.value(i).to_string(), view),
                    );
                }
            }
        }
        Ok(relations)
    }

    /// The crate's `pg_attribute` rows with each column's type as the wire sends it.
    async fn attributes(
        &self,
        state: &dyn Session,
        rows: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        let relations = self.relations(state).await?;
        let mut schemas: HashMap<i32, Option<SchemaRef>> = HashMap::new();
        let mut out = Vec::with_capacity(rows.len());
        for batch in rows {
            let relids = int32s(&batch, "attrelid")?;
            let attnums = column(&batch, "attnum")?
                .as_primitive_opt::<Int16Type>()
                .ok_or_else(|| DataFusionError::Internal("pg_attribute.attnum".into()))?;
            let old_types = int32s(&batch, "atttypid")?;
            let old_not_null = column(&batch, "attnotnull")?
                .as_boolean_opt()
                .ok_or_else(|| DataFusionError::Internal("pg_attribute.attnotnull".into()))?;
            let mut not_null = vec![];
            let (mut oids, mut lens, mut byvals) = (vec![], vec![], vec![]);
            let (mut aligns, mut storages, mut ndims) = (vec![], vec![], vec![]);
            for i in 0..batch.num_rows() {
                let relid = relids.value(i);
                if let Entry::Vacant(slot) = schemas.entry(relid) {
                    let schema = match relations.get(&relid) {
                        Some((schema, table, _)) => self.source.relation(schema, table).await?,
                        None => None,
                    };
                    slot.insert(schema);
                }
                let field = schemas[&relid].as_ref().and_then(|s| {
                    usize::try_from(attnums.value(i) - 1)
                        .ok()
                        .and_then(|n| s.fields().get(n))
                });
                let oid = field.map_or(old_types.value(i) as u32, |f| wire_oid(f));
                let row = self.source.types.get(oid);
                oids.push(oid as i32);
                // PostgreSQL never marks a view's column NOT NULL.
                let view = relations.get(&relid).is_some_and(|r| r.2);
                not_null.push(old_not_null.value(i) && !view);
                lens.push(row.map_or(-1, |r| r.typlen));
                byvals.push(row.is_some_and(|r| r.typbyval));
                aligns.push(row.map_or("i".to_string(), |r| r.typalign.clone()));
                storages.push(row.map_or("x".to_string(), |r| r.typstorage.clone()));
                ndims.push(i32::from(
                    row.is_some_and(|r| r.typelem != 0 && r.typlen == -1),
                ));
            }
            let replaced: [(&str, ArrayRef); 7] = [
                ("attnotnull", Arc::new(BooleanArray::from(not_null))),
                ("atttypid", Arc::new(Int32Array::from(oids))),
                ("attlen", Arc::new(Int16Array::from(lens))),
                ("attbyval", Arc::new(BooleanArray::from(byvals))),
                ("attalign", Arc::new(StringArray::from(aligns))),
                ("attstorage", Arc::new(StringArray::from(storages))),
                ("attndims", Arc::new(Int32Array::from(ndims))),
            ];
            out.push(self.replace(&batch, &replaced)?);
        }
        Ok(out)
    }

    /// The crate's rows of relations `pg_class` has (or of none), with arrays for the text
    /// columns PostgreSQL keeps as arrays.
    async fn with_arrays(
        &self,
        state: &dyn Session,
        rows: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        let relations: HashSet<i32> = self.relations(state).await?.into_keys().collect();
        let mut out = Vec::with_capacity(rows.len());
        for batch in rows {
            let batch = match self.kind.relation_column() {
                Some(name) => {
                    let relid = int32s(&batch, name)?;
                    let keep: BooleanArray = relid
                        .iter()
                        .map(|r| Some(r.is_none_or(|r| r == 0 || relations.contains(&r))))
                        .collect();
                    filter_record_batch(&batch, &keep)?
                }
                None => batch,
            };
            let mut replaced: Vec<(&str, ArrayRef)> = vec![];
            for (name, element) in self.kind.array_columns() {
                let Some(text) = batch.column_by_name(name).and_then(|c| c.as_string_opt()) else {
                    continue;
                };
                let list = match element {
                    DataType::Int16 => parse_arrays::<Int16Type>(name, text)?,
                    _ => parse_arrays::<Int32Type>(name, text)?,
                };
                replaced.push((name, list));
            }
            out.push(self.replace(&batch, &replaced)?);
        }
        Ok(out)
    }

    /// `batch` in this table's schema with the named columns replaced.
    fn replace(&self, batch: &RecordBatch, replaced: &[(&str, ArrayRef)]) -> Result<RecordBatch> {
        let columns = self
            .schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(field, old)| {
                replaced
                    .iter()
                    .find(|(name, _)| name == field.name())
                    .map_or_else(|| Arc::clone(old), |(_, new)| Arc::clone(new))
            })
            .collect();
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// Text arrays as the static catalog writes them (`1 2` for an int2vector, `[1, 2]` or
/// `{1,2}` for an array) as lists of `T`.
fn parse_arrays<T: ArrowPrimitiveType>(column: &str, text: &StringArray) -> Result<ArrayRef>
where
    T::Native: std::str::FromStr,
{
    let mut builder = ListBuilder::new(PrimitiveBuilder::<T>::new());
    for value in text.iter() {
        let Some(value) = value else {
            builder.append_null();
            continue;
        };
        let inner = value
            .trim()
            .trim_start_matches(['[', '{'])
            .trim_end_matches([']', '}']);
        for item in inner.split([',', ' ']).filter(|s| !s.is_empty()) {
            let parsed = item.parse::<T::Native>().map_err(|_| {
                DataFusionError::Internal(format!("pg_catalog: {column} holds {value:?}"))
            })?;
            builder.values().append_value(parsed);
        }
        builder.append(true);
    }
    Ok(Arc::new(builder.finish()))
}
