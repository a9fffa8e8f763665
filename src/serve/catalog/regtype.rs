//! `to_regtype(name)` and `pg_type_is_visible(oid)` over the served `pg_type`.
//!
//! psycopg 3 looks types up by name (`WHERE t.oid = to_regtype('hstore')`, SQLAlchemy's
//! psycopg dialect on connect); SQLAlchemy's enum reflection asks
//! `pg_type_is_visible(pg_type.oid)`. Every served type is in `pg_catalog`, which is always
//! on the search path, so a type is visible when it exists; an unknown OID answers NULL, as
//! PostgreSQL does.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, Int32Array};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};

use super::regclass::identifier_parts;
use super::types::PgTypes;

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

/// `pg_type_is_visible(oid)`: true for a served type, NULL for an unknown OID.
pub fn type_is_visible(types: Arc<PgTypes>) -> ScalarUDF {
    create_udf(
        "pg_type_is_visible",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let [oid] = args else {
                return exec_err!("pg_type_is_visible takes one argument");
            };
            let oids = oid.to_array(1)?;
            let visible: BooleanArray = oids
                .as_primitive::<Int64Type>()
                .iter()
                .map(|o| {
                    o.and_then(|o| u32::try_from(o).ok())
                        .and_then(|o| types.get(o).map(|_| true))
                })
                .collect();
            shaped_like(oid, Arc::new(visible))
        }),
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
