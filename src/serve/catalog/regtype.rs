//! `to_regtype(name)`, `pg_type_is_visible(oid)` and the type functions the catalog
//! rewrites call, over the served `pg_type`.
//!
//! psycopg 3 looks types up by name (`WHERE t.oid = to_regtype('hstore')`, SQLAlchemy's
//! psycopg dialect on connect); SQLAlchemy's enum reflection asks
//! `pg_type_is_visible(pg_type.oid)`. Every served type is in `pg_catalog`, which is always
//! on the search path, so a type is visible when it exists; an unknown OID answers NULL, as
//! PostgreSQL does.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int32Array};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};

use super::regclass::identifier_parts;
use super::types::{PgTypes, format_type};

/// SQL's names for types whose `typname` differs.
const SQL_NAMES: &[(&str, &str)] = &[
    ("integer", "int4"),
    ("int", "int4"),
    ("smallint", "int2"),
    ("bigint", "int8"),
    ("real", "float4"),
    ("double precision", "float8"),
    ("boolean", "bool"),
    ("character varying", "varchar"),
    ("character", "bpchar"),
    ("char", "bpchar"),
    ("decimal", "numeric"),
    ("timestamp without time zone", "timestamp"),
    ("timestamp with time zone", "timestamptz"),
    ("time without time zone", "time"),
    ("time with time zone", "timetz"),
];

/// The OID of the type `name` names (`int4`, `integer`, `pg_catalog.text`, `text[]`), as
/// PostgreSQL's `to_regtype` reads it; None when no served type has that name.
pub fn find_type(types: &PgTypes, name: &str) -> Option<u32> {
    let name = name.trim();
    if let Some(element) = name.strip_suffix("[]") {
        let element = types.get(find_type(types, element)?)?;
        return types.oid_named(&format!("_{}", element.typname));
    }
    let folded = name.split_whitespace().collect::<Vec<_>>().join(" ");
    let folded = folded.to_lowercase();
    if let Some((_, typname)) = SQL_NAMES.iter().find(|(sql, _)| *sql == folded) {
        return types.oid_named(typname);
    }
    match identifier_parts(name)?.as_slice() {
        [typname] => types.oid_named(typname),
        [schema, typname] if schema == "pg_catalog" => types.oid_named(typname),
        _ => None,
    }
}

/// `values`, one per row of `arg`, as a scalar when `arg` is one.
fn shaped_like(arg: &ColumnarValue, values: ArrayRef) -> Result<ColumnarValue> {
    Ok(match arg {
        ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::try_from_array(&values, 0)?),
        ColumnarValue::Array(_) => ColumnarValue::Array(values),
    })
}

/// `to_regtype(text)`: the type's OID, NULL when unknown.
pub fn to_regtype(types: Arc<PgTypes>) -> ScalarUDF {
    create_udf(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let [name] = args else {
                return exec_err!("to_regtype takes one argument");
            };
            let names = name.to_array(1)?;
            let oids: Int32Array = names
                .as_string::<i32>()
                .iter()
                .map(|n| n.and_then(|n| find_type(&types, n)).map(|oid| oid as i32))
                .collect();
            shaped_like(name, Arc::new(oids))
        }),
    )
}

/// A function of one type OID over the served `pg_type`: `value` gives each non-NULL OID's
/// result (NULL in, NULL out).
fn per_oid(
    name: &'static str,
    returns: DataType,
    types: Arc<PgTypes>,
    value: impl Fn(&PgTypes, i64) -> ScalarValue + Send + Sync + 'static,
) -> ScalarUDF {
    let null = ScalarValue::try_from(&returns).unwrap_or(ScalarValue::Null);
    create_udf(
        name,
        vec![DataType::Int64],
        returns,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let [oid] = args else {
                return exec_err!("{name} takes one argument");
            };
            let oids = oid.to_array(1)?;
            let values = oids
                .as_primitive::<Int64Type>()
                .iter()
                .map(|o| o.map_or_else(|| null.clone(), |o| value(&types, o)));
            shaped_like(oid, ScalarValue::iter_to_array(values)?)
        }),
    )
}

/// The name of [`regtype_text`].
pub const REGTYPE_TEXT: &str = "evalsql_regtype_text";

/// `evalsql_regtype_text(oid)`: `oid::regtype::text` as PostgreSQL's `regtypeout` writes
/// it: the type's SQL name (`integer`, `text[]`, `record`), `-` for 0, the number for an
/// OID that is no type. [`super::rewrite`] puts it where a statement casts an OID to
/// `regtype` and then to text (asyncpg's `elemtype::regtype::text`).
pub fn regtype_text(types: Arc<PgTypes>) -> ScalarUDF {
    per_oid(REGTYPE_TEXT, DataType::Utf8, types, |types, oid| {
        ScalarValue::Utf8(Some(match u32::try_from(oid) {
            Ok(0) => "-".to_string(),
            Ok(o) if types.get(o).is_some() => format_type(o, None, types),
            _ => oid.to_string(),
        }))
    })
}

/// The name of [`domain_base_type`].
pub const DOMAIN_BASE_TYPE: &str = "evalsql_domain_base_type";

/// `evalsql_domain_base_type(oid)`: the type under a domain, through domains over domains
/// ([`PgTypes::domain_base`]); what asyncpg's recursive subquery over `pg_type.typbasetype`
/// computes per type, and what [`super::rewrite`] puts in its place.
pub fn domain_base_type(types: Arc<PgTypes>) -> ScalarUDF {
    per_oid(DOMAIN_BASE_TYPE, DataType::Int32, types, |types, oid| {
        ScalarValue::Int32(
            u32::try_from(oid)
                .ok()
                .and_then(|o| types.domain_base(o))
                .map(|b| b as i32),
        )
    })
}

/// `pg_type_is_visible(oid)`: true for a served type, NULL for an unknown OID.
pub fn type_is_visible(types: Arc<PgTypes>) -> ScalarUDF {
    per_oid(
        "pg_type_is_visible",
        DataType::Boolean,
        types,
        |types, oid| {
            ScalarValue::Boolean(
                u32::try_from(oid)
                    .ok()
                    .and_then(|o| types.get(o).map(|_| true)),
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_are_none() {
        let types = PgTypes::default();
        assert_eq!(find_type(&types, "hstore"), None);
        assert_eq!(find_type(&types, "integer[]"), None);
        assert_eq!(find_type(&types, "a.b.c"), None);
    }
}
