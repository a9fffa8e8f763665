//! `information_schema` as PostgreSQL clients read it.
//!
//! DataFusion's `information_schema.columns` gives Arrow type names (`Utf8`,
//! `Timestamp(ns)`) and no `udt_name`; BI tools (Metabase's field sync, psycopg/SQLAlchemy
//! users, DBeaver) read PostgreSQL's. The server registers this schema as
//! `information_schema` in each catalog and turns DataFusion's built-in one off for its
//! sessions (it would shadow a registered schema of that name). It serves:
//!
//! - `columns` in PostgreSQL's shape (its 44 columns; `data_type` `text`, `bigint`,
//!   `timestamp with time zone`, `ARRAY`, `record`…, `udt_name` `text`, `int8`, `_text`,
//!   `record`…), from the same wire type OIDs as `pg_attribute`;
//! - empty `table_constraints`, `key_column_usage`, `referential_constraints` and
//!   `constraint_column_usage` with PostgreSQL's columns (evalsql's tables have no
//!   constraints);
//! - DataFusion's own other tables (`tables`, `views`, `schemata`, `df_settings`,
//!   `routines`, `parameters`), so `SHOW ALL`, `SHOW TABLES` and `SHOW COLUMNS` work as in
//!   the CLI (they read these tables by name).
//!
//! The CLI keeps DataFusion's `information_schema`.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int32Builder, RecordBatch, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::information_schema::InformationSchemaProvider;
use datafusion::catalog::{
    CatalogProviderList, MemTable, SchemaProvider, Session, TableFunction, TableProvider,
};
use datafusion::common::Result;
use datafusion::datasource::TableType;

use super::computed::{ComputedTable, Rows};
use super::types::{PgTypes, datetime_precision, numeric_shape, sql_type_name, wire_oid};

/// The tables served here rather than by DataFusion.
const OWN_TABLES: &[&str] = &[
    "columns",
    "table_constraints",
    "key_column_usage",
    "referential_constraints",
    "constraint_column_usage",
];

/// PostgreSQL's `information_schema.columns`, in order; `true` for `cardinal_number`
/// (integer) columns, the rest are text.
const COLUMNS: &[(&str, bool)] = &[
    ("table_catalog", false),
    ("table_schema", false),
    ("table_name", false),
    ("column_name", false),
    ("ordinal_position", true),
    ("column_default", false),
    ("is_nullable", false),
    ("data_type", false),
    ("character_maximum_length", true),
    ("character_octet_length", true),
    ("numeric_precision", true),
    ("numeric_precision_radix", true),
    ("numeric_scale", true),
    ("datetime_precision", true),
    ("interval_type", false),
    ("interval_precision", true),
    ("character_set_catalog", false),
    ("character_set_schema", false),
    ("character_set_name", false),
    ("collation_catalog", false),
    ("collation_schema", false),
    ("collation_name", false),
    ("domain_catalog", false),
    ("domain_schema", false),
    ("domain_name", false),
    ("udt_catalog", false),
    ("udt_schema", false),
    ("udt_name", false),
    ("scope_catalog", false),
    ("scope_schema", false),
    ("scope_name", false),
    ("maximum_cardinality", true),
    ("dtd_identifier", false),
    ("is_self_referencing", false),
    ("is_identity", false),
    ("identity_generation", false),
    ("identity_start", false),
    ("identity_maximum", false),
    ("identity_minimum", false),
    ("identity_increment", false),
    ("identity_cycle", false),
    ("is_generated", false),
    ("generation_expression", false),
    ("is_updatable", false),
];

const TABLE_CONSTRAINTS: &[&str] = &[
    "constraint_catalog",
    "constraint_schema",
    "constraint_name",
    "table_catalog",
    "table_schema",
    "table_name",
    "constraint_type",
    "is_deferrable",
    "initially_deferred",
    "enforced",
    "nulls_distinct",
];

const KEY_COLUMN_USAGE: &[&str] = &[
    "constraint_catalog",
    "constraint_schema",
    "constraint_name",
    "table_catalog",
    "table_schema",
    "table_name",
    "column_name",
    "ordinal_position",
    "position_in_unique_constraint",
];

const REFERENTIAL_CONSTRAINTS: &[&str] = &[
    "constraint_catalog",
    "constraint_schema",
    "constraint_name",
    "unique_constraint_catalog",
    "unique_constraint_schema",
    "unique_constraint_name",
    "match_option",
    "update_rule",
    "delete_rule",
];

const CONSTRAINT_COLUMN_USAGE: &[&str] = &[
    "table_catalog",
    "table_schema",
    "table_name",
    "column_name",
    "constraint_catalog",
    "constraint_schema",
    "constraint_name",
];

/// PostgreSQL's `information_schema` over DataFusion's.
#[derive(Debug)]
pub struct PgInformationSchema {
    catalogs: Arc<dyn CatalogProviderList>,
    table_functions: HashMap<String, Arc<TableFunction>>,
    types: Arc<PgTypes>,
}

impl PgInformationSchema {
    pub fn new(
        catalogs: Arc<dyn CatalogProviderList>,
        table_functions: HashMap<String, Arc<TableFunction>>,
        types: Arc<PgTypes>,
    ) -> Self {
        PgInformationSchema {
            catalogs,
            table_functions,
            types,
        }
    }

    fn datafusion(&self) -> InformationSchemaProvider {
        InformationSchemaProvider::new(Arc::clone(&self.catalogs))
            .with_table_functions(self.table_functions.clone())
    }
}

fn schema_of(columns: &[&str], integers: &[&str]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| {
                let t = if integers.contains(c) {
                    DataType::Int32
                } else {
                    DataType::Utf8
                };
                Field::new(*c, t, true)
            })
            .collect::<Vec<_>>(),
    ))
}

fn empty(schema: SchemaRef) -> Result<Arc<dyn TableProvider>> {
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![]])?))
}

#[async_trait]
impl SchemaProvider for PgInformationSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.datafusion().table_names();
        for own in OWN_TABLES {
            if !names.iter().any(|n| n == own) {
                names.push(own.to_string());
            }
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let positions = ["ordinal_position", "position_in_unique_constraint"];
        match name.to_ascii_lowercase().as_str() {
            "columns" => Ok(Some(Arc::new(ComputedTable(Columns {
                schema: columns_schema(),
                catalogs: Arc::clone(&self.catalogs),
                types: Arc::clone(&self.types),
            })))),
            "table_constraints" => empty(schema_of(TABLE_CONSTRAINTS, &[])).map(Some),
            "key_column_usage" => empty(schema_of(KEY_COLUMN_USAGE, &positions)).map(Some),
            "referential_constraints" => empty(schema_of(REFERENTIAL_CONSTRAINTS, &[])).map(Some),
            "constraint_column_usage" => empty(schema_of(CONSTRAINT_COLUMN_USAGE, &[])).map(Some),
            _ => self.datafusion().table(name).await,
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        OWN_TABLES.contains(&name.to_ascii_lowercase().as_str())
            || self.datafusion().table_exist(name)
    }
}

fn columns_schema() -> SchemaRef {
    let names: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
    let integers: Vec<&str> = COLUMNS
        .iter()
        .filter(|(_, i)| *i)
        .map(|(n, _)| *n)
        .collect();
    schema_of(&names, &integers)
}

/// `information_schema.columns`, computed when scanned.
#[derive(Debug)]
struct Columns {
    schema: SchemaRef,
    catalogs: Arc<dyn CatalogProviderList>,
    types: Arc<PgTypes>,
}

#[async_trait]
impl Rows for Columns {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    async fn rows(&self, _state: &dyn Session) -> Result<Vec<RecordBatch>> {
        Ok(vec![self.batch().await?])
    }
}

/// One column of `information_schema.columns` being built.
enum Builder {
    Text(StringBuilder),
    Integer(Int32Builder),
}

impl Columns {
    async fn batch(&self) -> Result<RecordBatch> {
        let mut builders: Vec<Builder> = COLUMNS
            .iter()
            .map(|(_, integer)| match integer {
                true => Builder::Integer(Int32Builder::new()),
                false => Builder::Text(StringBuilder::new()),
            })
            .collect();
        for catalog_name in self.catalogs.catalog_names() {
            let Some(catalog) = self.catalogs.catalog(&catalog_name) else {
                continue;
            };
            for schema_name in catalog.schema_names() {
                let Some(schema) = catalog.schema(&schema_name) else {
                    continue;
                };
                for table_name in schema.table_names() {
                    let Some(table) = schema.table(&table_name).await? else {
                        continue;
                    };
                    let updatable = yes_no(table.table_type() == TableType::Base);
                    for (i, field) in table.schema().fields().iter().enumerate() {
                        let oid = wire_oid(field);
                        let udt = self
                            .types
                            .get(oid)
                            .map_or("text".to_string(), |r| r.typname.clone());
                        let (precision, radix, scale) = numeric_shape(field.data_type(), oid);
                        let position = i as i32 + 1;
                        let data_type = sql_type_name(oid, &self.types);
                        let dtd = position.to_string();
                        let text = |column: &str| -> Option<&str> {
                            Some(match column {
                                "table_catalog" | "udt_catalog" => &catalog_name,
                                "table_schema" => &schema_name,
                                "table_name" => &table_name,
                                "column_name" => field.name(),
                                // PostgreSQL never marks a view's column NOT NULL.
                                "is_nullable" => yes_no(
                                    field.is_nullable() || table.table_type() == TableType::View,
                                ),
                                "data_type" => &data_type,
                                "udt_schema" => "pg_catalog",
                                "udt_name" => &udt,
                                "dtd_identifier" => &dtd,
                                "is_self_referencing" | "is_identity" => "NO",
                                "is_generated" => "NEVER",
                                "is_updatable" => updatable,
                                _ => return None,
                            })
                        };
                        let integer = |column: &str| match column {
                            "ordinal_position" => Some(position),
                            // PostgreSQL's for text: the longest value, 1 GB.
                            "character_octet_length" if oid == 25 => Some(1 << 30),
                            "numeric_precision" => precision,
                            "numeric_precision_radix" => radix,
                            "numeric_scale" => scale,
                            "datetime_precision" => datetime_precision(oid),
                            _ => None,
                        };
                        for ((name, _), builder) in COLUMNS.iter().zip(builders.iter_mut()) {
                            match builder {
                                Builder::Text(b) => b.append_option(text(name)),
                                Builder::Integer(b) => b.append_option(integer(name)),
                            }
                        }
                    }
                }
            }
        }
        let columns: Vec<ArrayRef> = builders
            .into_iter()
            .map(|b| -> ArrayRef {
                match b {
                    Builder::Text(mut b) => Arc::new(b.finish()),
                    Builder::Integer(mut b) => Arc::new(b.finish()),
                }
            })
            .collect();
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "YES" } else { "NO" }
}
