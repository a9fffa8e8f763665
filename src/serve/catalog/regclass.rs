//! `CAST(<expression> AS regclass)`: a relation's name, computed per row, to its OID.
//!
//! datafusion-pg-catalog resolves `'<name>'::regclass` when the name is written in the
//! statement; a name computed per row (Metabase's field sync:
//! `col_description(CAST(CAST(format('%I.%I', table_schema, table_name) AS REGCLASS) AS OID),
//! ordinal_position)`) reached DataFusion as a cast of text to an integer and failed. Such
//! casts become `to_regclass(<expression>)` ([`super::rewrite`]), PostgreSQL's function: the
//! OID of the relation the name finds (`schema.name`, or `name` in `pg_catalog` then the
//! current schema, as PostgreSQL's search path), NULL when none. An integer (an OID cast to
//! `regclass`, as SQLAlchemy's `CAST(attrelid AS REGCLASS)`) stays that OID.
//!
//! The relations are `pg_class`'s when the statement is planned: the function is registered
//! on the connection's session with that snapshot before each statement that uses it.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int32Array};
use datafusion::arrow::datatypes::{DataType, Int32Type};
use datafusion::common::{DataFusionError, Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;

use super::functions::Shared;

pub const TO_REGCLASS: &str = "to_regclass";

/// Relations by (schema, name), as `pg_class` and `pg_namespace` list them.
#[derive(Debug, Default)]
pub struct Relations {
    by_name: HashMap<(String, String), i32>,
    current_schema: String,
}

impl Relations {
    /// `pg_class`'s relations now, as the session `ctx` sees them.
    pub async fn of(ctx: &SessionContext) -> Result<Self> {
        let batches = ctx
            .sql(
                "SELECT n.nspname, c.relname, c.oid FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace",
            )
            .await?
            .collect()
            .await?;
        let mut by_name = HashMap::new();
        for batch in batches {
            let (Some(schemas), Some(names), Some(oids)) = (
                batch.column(0).as_string_opt::<i32>(),
                batch.column(1).as_string_opt::<i32>(),
                batch.column(2).as_primitive_opt::<Int32Type>(),
            ) else {
                return Err(DataFusionError::Internal(
                    "to_regclass: unexpected pg_class columns".into(),
                ));
            };
            for i in 0..batch.num_rows() {
                by_name
                    .entry((schemas.value(i).to_string(), names.value(i).to_string()))
                    .or_insert(oids.value(i));
            }
        }
        let current_schema = ctx.state().config_options().catalog.default_schema.clone();
        Ok(Relations {
            by_name,
            current_schema,
        })
    }

    /// The OID of the relation `name` finds.
    fn find(&self, name: &str) -> Option<i32> {
        let parts = identifier_parts(name)?;
        let get = |schema: &str, rel: &str| {
            self.by_name
                .get(&(schema.to_string(), rel.to_string()))
                .copied()
        };
        match parts.as_slice() {
            [rel] => get("pg_catalog", rel).or_else(|| get(&self.current_schema, rel)),
            [.., schema, rel] if parts.len() <= 3 => get(schema, rel),
            _ => None,
        }
    }
}

/// The parts of a qualified name as PostgreSQL reads it: split at dots outside double
/// quotes, unquoted parts folded to lower case, `""` inside quotes a quote. None when
/// malformed.
pub(super) fn identifier_parts(name: &str) -> Option<Vec<String>> {
    let mut parts = vec![];
    let mut part = String::new();
    let mut chars = name.trim().chars().peekable();
    let mut quoted_part = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted_part = true;
                loop {
                    match chars.next()? {
                        '"' if chars.peek() == Some(&'"') => {
                            chars.next();
                            part.push('"');
                        }
                        '"' => break,
                        other => part.push(other),
                    }
                }
            }
            '.' => {
                if part.is_empty() && !quoted_part {
                    return None;
                }
                parts.push(std::mem::take(&mut part));
                quoted_part = false;
            }
            c => part.extend(c.to_lowercase()),
        }
    }
    if part.is_empty() && !quoted_part {
        return None;
    }
    parts.push(part);
    Some(parts)
}

/// `to_regclass(name)` over a snapshot of the relations.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToRegclass {
    signature: Signature,
    relations: Shared<Relations>,
}

impl ToRegclass {
    pub fn udf(relations: Relations) -> ScalarUDF {
        ScalarUDF::new_from_impl(ToRegclass {
            signature: Signature::new(TypeSignature::Any(1), Volatility::Stable),
            relations: Shared(Arc::new(relations)),
        })
    }
}

impl ScalarUDFImpl for ToRegclass {
    fn name(&self) -> &str {
        TO_REGCLASS
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [t] if t.is_integer() || t.is_null() || is_text(t) => Ok(DataType::Int32),
            other => exec_err!("{TO_REGCLASS}: expected a name or an OID, got {other:?}"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("{TO_REGCLASS} takes one argument");
        };
        let values = arg.to_array(args.number_rows)?;
        let oids: Int32Array = if is_text(values.data_type()) {
            let names = datafusion::arrow::compute::cast(&values, &DataType::Utf8)?;
            names
                .as_string::<i32>()
                .iter()
                .map(|n| n.and_then(|n| self.relations.find(n)))
                .collect()
        } else if values.data_type().is_null() {
            Int32Array::new_null(values.len())
        } else {
            let cast = datafusion::arrow::compute::cast(&values, &DataType::Int32)?;
            cast.as_primitive::<Int32Type>().clone()
        };
        if let ColumnarValue::Scalar(_) = arg {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &oids, 0,
            )?));
        }
        Ok(ColumnarValue::Array(Arc::new(oids)))
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// Registers `to_regclass` on `ctx` with its relations now.
pub async fn register_snapshot(ctx: &SessionContext) -> Result<()> {
    ctx.register_udf(ToRegclass::udf(Relations::of(ctx).await?));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_postgresql_reads_them() {
        let parts = |s: &str| identifier_parts(s);
        assert_eq!(parts("public.qa"), Some(vec!["public".into(), "qa".into()]));
        assert_eq!(parts("QA"), Some(vec!["qa".into()]));
        assert_eq!(
            parts("\"My Schema\".\"a\"\"b\""),
            Some(vec!["My Schema".into(), "a\"b".into()])
        );
        assert_eq!(parts("a..b"), None);
        assert_eq!(parts("\"open"), None);
        assert_eq!(parts(""), None);
    }

    #[test]
    fn lookups_follow_the_search_path() {
        let relations = Relations {
            by_name: HashMap::from([
                (("public".into(), "qa".into()), 16390),
                (("pg_catalog".into(), "pg_class".into()), 16500),
                (("public".into(), "pg_class".into()), 16600),
            ]),
            current_schema: "public".into(),
        };
        assert_eq!(relations.find("qa"), Some(16390));
        assert_eq!(relations.find("public.qa"), Some(16390));
        assert_eq!(relations.find("datafusion.public.qa"), Some(16390));
        assert_eq!(relations.find("pg_class"), Some(16500));
        assert_eq!(relations.find("public.pg_class"), Some(16600));
        assert_eq!(relations.find("other.qa"), None);
        assert_eq!(relations.find("a.b.c.d"), None);
    }
}
