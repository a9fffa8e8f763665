//! A column's PostgreSQL type as the wire declares it, and what the catalogs say about it.
//!
//! The OID is arrow-pg's (`field_into_pg_type`, the function that writes RowDescription), so
//! `pg_attribute.atttypid` and `information_schema.columns` agree with what a client receives
//! for the same column: structs are `record` (2249), lists arrays (`text[]` 1009, …),
//! `Utf8View`/`LargeUtf8` `text`, timestamps with a time zone `timestamptz` (1184), decimals
//! `numeric`. The rest (length, alignment, name) comes from the served `pg_type` rows.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int16Type, Int32Type};
use datafusion::common::{DataFusionError, Result};
use datafusion_postgres::arrow_pg::datatypes::field_into_pg_type;

/// `text`, what a column of a type arrow-pg cannot send is described as.
const TEXT_OID: u32 = 25;

/// One `pg_type` row, the parts the catalogs repeat.
#[derive(Debug, Clone)]
pub struct PgTypeRow {
    pub typname: String,
    pub typlen: i16,
    pub typbyval: bool,
    pub typalign: String,
    pub typstorage: String,
    /// The element type of an array type, 0 otherwise.
    pub typelem: u32,
    /// The type a domain is over, 0 for other types.
    pub typbasetype: u32,
}

/// The served `pg_type`, by OID.
#[derive(Debug, Default)]
pub struct PgTypes {
    by_oid: HashMap<u32, PgTypeRow>,
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a Arc<dyn Array>> {
    batch.column_by_name(name).ok_or_else(|| {
        DataFusionError::Internal(format!("pg_catalog.pg_type has no column {name}"))
    })
}

impl PgTypes {
    /// From batches of `pg_catalog.pg_type`.
    pub fn from_batches(batches: &[RecordBatch]) -> Result<Self> {
        let mut by_oid = HashMap::new();
        for batch in batches {
            let oid = column(batch, "oid")?.as_primitive_opt::<Int32Type>();
            let name = column(batch, "typname")?.as_string_opt::<i32>();
            let len = column(batch, "typlen")?.as_primitive_opt::<Int16Type>();
            let byval = column(batch, "typbyval")?.as_boolean_opt();
            let align = column(batch, "typalign")?.as_string_opt::<i32>();
            let storage = column(batch, "typstorage")?.as_string_opt::<i32>();
            let elem = column(batch, "typelem")?.as_primitive_opt::<Int32Type>();
            let base = column(batch, "typbasetype")?.as_primitive_opt::<Int32Type>();
            let (
                Some(oid),
                Some(name),
                Some(len),
                Some(byval),
                Some(align),
                Some(storage),
                Some(elem),
                Some(base),
            ) = (oid, name, len, byval, align, storage, elem, base)
            else {
                return Err(DataFusionError::Internal(
                    "pg_catalog.pg_type: unexpected column types".into(),
                ));
            };
            for i in 0..batch.num_rows() {
                by_oid.insert(
                    oid.value(i) as u32,
                    PgTypeRow {
                        typname: name.value(i).to_string(),
                        typlen: len.value(i),
                        typbyval: byval.value(i),
                        typalign: align.value(i).to_string(),
                        typstorage: storage.value(i).to_string(),
                        typelem: elem.value(i) as u32,
                        typbasetype: base.value(i) as u32,
                    },
                );
            }
        }
        Ok(PgTypes { by_oid })
    }

    pub fn get(&self, oid: u32) -> Option<&PgTypeRow> {
        self.by_oid.get(&oid)
    }

    /// The type under the domain `oid` and any domains it is over (a domain over a domain
    /// is over that domain's type); 0 when `oid` is no domain, `None` when it is no type.
    pub fn domain_base(&self, oid: u32) -> Option<u32> {
        let mut base = self.get(oid)?.typbasetype;
        // PostgreSQL forbids cycles; the bound only keeps a bad catalog from hanging.
        for _ in 0..64 {
            match self.get(base).map(|row| row.typbasetype) {
                Some(next) if next != 0 => base = next,
                _ => break,
            }
        }
        Some(base)
    }

    /// The OID of the type named `typname` (the lowest, should two share it).
    pub fn oid_named(&self, typname: &str) -> Option<u32> {
        self.by_oid
            .iter()
            .filter(|(_, row)| row.typname == typname)
            .map(|(oid, _)| *oid)
            .min()
    }
}

/// The type OID the wire sends for a column (`text` for types arrow-pg cannot send).
pub fn wire_oid(field: &Field) -> u32 {
    field_into_pg_type(&Arc::new(field.clone()))
        .map(|t| t.oid())
        .unwrap_or(TEXT_OID)
}

/// PostgreSQL's SQL name of a built-in type that is not its `typname`.
fn sql_name(oid: u32) -> Option<&'static str> {
    Some(match oid {
        16 => "boolean",
        18 => "\"char\"",
        20 => "bigint",
        21 => "smallint",
        23 => "integer",
        700 => "real",
        701 => "double precision",
        1042 => "character",
        1043 => "character varying",
        1083 => "time without time zone",
        1114 => "timestamp without time zone",
        1184 => "timestamp with time zone",
        1266 => "time with time zone",
        1560 => "bit",
        1562 => "bit varying",
        _ => return None,
    })
}

fn is_array(row: &PgTypeRow) -> bool {
    row.typelem != 0 && row.typlen == -1
}

/// `information_schema.columns.data_type`: PostgreSQL's SQL name of a built-in type,
/// `ARRAY` for arrays (as PostgreSQL's own view says, from `format_type`).
pub fn sql_type_name(oid: u32, types: &PgTypes) -> String {
    let row = types.get(oid);
    if row.is_some_and(is_array) {
        return "ARRAY".into();
    }
    match (sql_name(oid), row) {
        (Some(name), _) => name.into(),
        (None, Some(row)) => row.typname.clone(),
        (None, None) => "text".into(),
    }
}

/// PostgreSQL's `format_type(oid, typmod)`: the SQL name with the modifier (`numeric(10,2)`,
/// `character varying(20)`, `timestamp(3) with time zone`), `[]` for arrays, `???` for an
/// OID that is no type.
pub fn format_type(oid: u32, typmod: Option<i32>, types: &PgTypes) -> String {
    let Some(row) = types.get(oid) else {
        return "???".into();
    };
    if is_array(row) {
        return format!("{}[]", format_type(row.typelem, typmod, types));
    }
    let modifier = typmod.filter(|m| *m >= 0);
    match (oid, modifier) {
        (1700, Some(m)) if m >= 4 => {
            format!("numeric({},{})", ((m - 4) >> 16) & 0xffff, (m - 4) & 0xffff)
        }
        (1042 | 1043, Some(m)) if m >= 4 => format!("{}({})", sql_name(oid).unwrap_or(""), m - 4),
        (1042, _) => "bpchar".into(),
        (1083 | 1114 | 1184 | 1266, Some(m)) => {
            let name = sql_name(oid).unwrap_or("");
            let (head, tail) = name.split_once(' ').unwrap_or((name, ""));
            format!("{head}({m}) {tail}")
        }
        _ => sql_name(oid).map_or_else(|| row.typname.clone(), str::to_string),
    }
}

/// `numeric_precision`, `numeric_precision_radix` and `numeric_scale` of a column, as
/// PostgreSQL reports them (bits for integers and floats, digits for decimals).
pub fn numeric_shape(data_type: &DataType, oid: u32) -> (Option<i32>, Option<i32>, Option<i32>) {
    match (oid, data_type) {
        (21, _) => (Some(16), Some(2), Some(0)),
        (23, _) => (Some(32), Some(2), Some(0)),
        (20, _) => (Some(64), Some(2), Some(0)),
        (700, _) => (Some(24), Some(2), None),
        (701, _) => (Some(53), Some(2), None),
        (
            1700,
            DataType::Decimal32(p, s)
            | DataType::Decimal64(p, s)
            | DataType::Decimal128(p, s)
            | DataType::Decimal256(p, s),
        ) => (Some(*p as i32), Some(10), Some(*s as i32)),
        (1700, _) => (None, Some(10), None),
        _ => (None, None, None),
    }
}

/// `datetime_precision`: microseconds for times and timestamps (PostgreSQL's most), 0 for
/// dates; intervals say 6 too.
pub fn datetime_precision(oid: u32) -> Option<i32> {
    match oid {
        1082 => Some(0),
        1083 | 1114 | 1184 | 1266 | 1186 => Some(6),
        _ => None,
    }
}
