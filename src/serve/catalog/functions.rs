//! Functions and expressions of PostgreSQL that drivers' catalog queries use.
//!
//! - `_pg_expandarray(array)` (`information_schema._pg_expandarray`, pgJDBC's
//!   getPrimaryKeys/getIndexInfo): PostgreSQL's set-returning function of `(x, n)` records,
//!   one per element. Here a function returning the list of those records, which
//!   [`super::rewrite`] unnests where a query calls it.
//! - `pg_get_serial_sequence(table, column)`: NULL — no column of evalsql's is backed by a
//!   sequence. `col_description(table, column)`: NULL — `pg_description` has no row for
//!   the relations served (its rows describe PostgreSQL's own objects, OIDs below 16384). `pg_get_indexdef(index [, column, pretty])`: NULL, as PostgreSQL answers for
//!   an OID that is no index (evalsql's tables have none; see `pg_index`).
//! - `format_type(oid, typmod)` from the served `pg_type` (`record`, `text[]`, …).
//! - `json_build_object(key, value, …)` (SQLAlchemy's column reflection): the object as
//!   JSON text. `pg_collation_is_visible(oid)`: true — every collation served is in
//!   `pg_catalog`, which is always on the search path.
//! - `<boolean> = 't'` ([`BooleanLiterals`]): PostgreSQL reads a quoted literal compared with
//!   a boolean as a boolean (`'t'`, `'false'`, `'yes'`, `'off'`, `'1'`…); DataFusion cannot
//!   compare the two types.
//! - `LIKE … ESCAPE '/'` ([`LikeEscape`]): DataFusion runs LIKE with the backslash as the
//!   only escape; another escape character is rewritten into backslash escapes.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int32Builder, Int64Builder, ListArray, ListBuilder, StructBuilder,
    new_null_array,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue, exec_err};
use datafusion::logical_expr::expr::{Like, ScalarFunction};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::sqlparser::ast::BinaryOperator;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, TypeSignature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use super::plans::rewrite_expressions;
use super::types::{PgTypes, format_type};

/// The fields of `_pg_expandarray`'s records.
fn expanded_fields() -> Fields {
    Fields::from(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("n", DataType::Int32, false),
    ])
}

/// `_pg_expandarray(array) -> list<struct<x, n>>`: each element with its 1-based position.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgExpandArray {
    signature: Signature,
}

pub const PG_EXPANDARRAY: &str = "_pg_expandarray";

impl PgExpandArray {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(PgExpandArray {
            signature: Signature::new(TypeSignature::Any(1), Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for PgExpandArray {
    fn name(&self) -> &str {
        PG_EXPANDARRAY
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::List(_) | DataType::LargeList(_) | DataType::Null] => Ok(
                DataType::new_list(DataType::Struct(expanded_fields()), true),
            ),
            other => exec_err!("{PG_EXPANDARRAY}: expected an array of integers, got {other:?}"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("{PG_EXPANDARRAY} takes one argument");
        };
        let arrays = arg.to_array(args.number_rows)?;
        let arrays =
            datafusion::arrow::compute::cast(&arrays, &DataType::new_list(DataType::Int64, true))
                .or_else(|e| exec_err!("{PG_EXPANDARRAY}: expected an array of integers: {e}"))?;
        let arrays: &ListArray = arrays.as_list::<i32>();
        let mut builder = ListBuilder::new(StructBuilder::from_fields(expanded_fields(), 0))
            .with_field(Arc::new(Field::new(
                "item",
                DataType::Struct(expanded_fields()),
                true,
            )));
        for i in 0..arrays.len() {
            if arrays.is_null(i) {
                builder.append_null();
                continue;
            }
            let values = arrays.value(i);
            let values = values.as_primitive::<Int64Type>();
            for (n, x) in values.iter().enumerate() {
                let record = builder.values();
                if let Some(b) = record.field_builder::<Int64Builder>(0) {
                    b.append_option(x);
                }
                if let Some(b) = record.field_builder::<Int32Builder>(1) {
                    b.append_value(n as i32 + 1);
                }
                record.append(true);
            }
            builder.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(builder.finish()) as ArrayRef))
    }
}

/// A function that answers NULL (text) for every argument because evalsql has none of what
/// it describes.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NullAnswer {
    name: &'static str,
    signature: Signature,
}

impl NullAnswer {
    fn udf(name: &'static str, signatures: Vec<Vec<DataType>>) -> ScalarUDF {
        ScalarUDF::new_from_impl(NullAnswer {
            name,
            signature: Signature::one_of(
                signatures.into_iter().map(TypeSignature::Exact).collect(),
                Volatility::Stable,
            ),
        })
    }
}

impl ScalarUDFImpl for NullAnswer {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Array(new_null_array(
            &DataType::Utf8,
            args.number_rows,
        )))
    }
}

/// `pg_get_serial_sequence`, `col_description` and `pg_get_indexdef`.
pub fn null_answers() -> Vec<ScalarUDF> {
    use DataType::{Boolean, Int64, Utf8};
    vec![
        NullAnswer::udf("pg_get_serial_sequence", vec![vec![Utf8, Utf8]]),
        NullAnswer::udf("col_description", vec![vec![Int64, Int64]]),
        NullAnswer::udf(
            "pg_get_indexdef",
            vec![vec![Int64], vec![Int64, Int64, Boolean]],
        ),
    ]
}

/// Data a function holds, compared by identity: two instances of a function are the same
/// function when they share their data (DataFusion compares and hashes functions).
#[derive(Debug)]
pub(super) struct Shared<T>(pub Arc<T>);

impl<T> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl<T> Eq for Shared<T> {}
impl<T> std::hash::Hash for Shared<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.0), state)
    }
}
impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A function's arguments as arrays of its number of rows.
pub(super) fn arrays(args: &ScalarFunctionArgs) -> Result<Vec<ArrayRef>> {
    args.args
        .iter()
        .map(|a| a.to_array(args.number_rows))
        .collect()
}

/// `json_build_object(key1, value1, …)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonBuildObject {
    signature: Signature,
}

impl JsonBuildObject {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(JsonBuildObject {
            signature: Signature::variadic_any(Volatility::Immutable),
        })
    }
}

/// A value as JSON: numbers, booleans, text and NULL as themselves, anything else as its
/// text.
fn json_value(value: ScalarValue) -> serde_json::Value {
    use serde_json::Value;
    if value.is_null() {
        return Value::Null;
    }
    match value {
        ScalarValue::Boolean(Some(b)) => Value::Bool(b),
        ScalarValue::Float32(Some(f)) => serde_json::Number::from_f64(f64::from(f))
            .map_or_else(|| Value::String(f.to_string()), Value::Number),
        ScalarValue::Float64(Some(f)) => serde_json::Number::from_f64(f)
            .map_or_else(|| Value::String(f.to_string()), Value::Number),
        v if v.data_type().is_integer() => v
            .to_string()
            .parse::<serde_json::Number>()
            .map_or_else(|_| Value::String(v.to_string()), Value::Number),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Value::String(s),
        other => Value::String(other.to_string()),
    }
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if !args.len().is_multiple_of(2) {
            return exec_err!(
                "json_build_object: the arguments must alternate keys and values, got {}",
                args.len()
            );
        }
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (rows, arrays) = (args.number_rows, arrays(&args)?);
        let mut out = datafusion::arrow::array::StringBuilder::new();
        for row in 0..rows {
            let mut object = serde_json::Map::new();
            for pair in arrays.chunks(2) {
                let [key, value] = pair else { continue };
                let key = ScalarValue::try_from_array(key, row)?;
                if key.is_null() {
                    return exec_err!("json_build_object: a key is NULL");
                }
                let key = match key {
                    ScalarValue::Utf8(Some(k))
                    | ScalarValue::LargeUtf8(Some(k))
                    | ScalarValue::Utf8View(Some(k)) => k,
                    other => other.to_string(),
                };
                object.insert(key, json_value(ScalarValue::try_from_array(value, row)?));
            }
            out.append_value(serde_json::Value::Object(object).to_string());
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `pg_collation_is_visible(oid)`.
pub fn collation_is_visible() -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        "pg_collation_is_visible",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let [oid] = args else {
                return exec_err!("pg_collation_is_visible takes one argument");
            };
            Ok(match oid {
                ColumnarValue::Scalar(v) => {
                    ColumnarValue::Scalar(ScalarValue::Boolean((!v.is_null()).then_some(true)))
                }
                ColumnarValue::Array(a) => ColumnarValue::Array(Arc::new(
                    (0..a.len())
                        .map(|i| a.is_valid(i).then_some(true))
                        .collect::<datafusion::arrow::array::BooleanArray>(),
                )),
            })
        }),
    )
}

/// `format_type(type_oid, typmod)` over the served `pg_type`, replacing
/// datafusion-pg-catalog's, which knows only some built-in OIDs (`oid(2249)` for `record`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FormatType {
    signature: Signature,
    types: Shared<PgTypes>,
}

impl FormatType {
    pub fn udf(types: Arc<PgTypes>) -> ScalarUDF {
        use DataType::Int64;
        ScalarUDF::new_from_impl(FormatType {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![Int64, Int64]),
                    TypeSignature::Exact(vec![Int64]),
                ],
                Volatility::Stable,
            ),
            types: Shared(types),
        })
    }
}

impl ScalarUDFImpl for FormatType {
    fn name(&self) -> &str {
        "format_type"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (rows, arrays) = (args.number_rows, arrays(&args)?);
        let Some(oids) = arrays
            .first()
            .and_then(|a| a.as_primitive_opt::<Int64Type>())
        else {
            return exec_err!("format_type: expected a type OID");
        };
        let typmods = arrays
            .get(1)
            .and_then(|a| a.as_primitive_opt::<Int64Type>());
        let formatted: datafusion::arrow::array::StringArray = (0..rows)
            .map(|i| {
                if oids.is_null(i) {
                    return None;
                }
                let typmod = typmods
                    .filter(|m| m.is_valid(i))
                    .and_then(|m| i32::try_from(m.value(i)).ok());
                let oid = u32::try_from(oids.value(i)).unwrap_or(0);
                Some(format_type(oid, typmod, &self.types))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(formatted)))
    }
}

/// PostgreSQL's boolean input: `t`, `true`, `yes`, `on`, `1` and their opposites, any
/// case, and any unambiguous prefix of the words.
fn pg_bool(text: &str) -> Option<bool> {
    let t = text.trim().to_ascii_lowercase();
    let prefix_of = |word: &str, min: usize| t.len() >= min && word.starts_with(t.as_str());
    if prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) || t == "1" {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || t == "0" {
        Some(false)
    } else {
        None
    }
}

/// The expression planner reading string literals compared with booleans as booleans.
#[derive(Debug, Default)]
pub struct BooleanLiterals;

impl ExprPlanner for BooleanLiterals {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        use BinaryOperator::*;
        if !matches!(expr.op, Eq | NotEq | Lt | LtEq | Gt | GtEq) {
            return Ok(PlannerResult::Original(expr));
        }
        let is_bool = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Boolean));
        let as_bool = |e: &Expr| match e {
            Expr::Literal(ScalarValue::Utf8(Some(s)), _) => pg_bool(s),
            _ => None,
        };
        let RawBinaryExpr { op, left, right } = expr;
        let (left, right) = match (as_bool(&left), as_bool(&right)) {
            (_, Some(b)) if is_bool(&left) => (left, Expr::Literal(ScalarValue::from(b), None)),
            (Some(b), _) if is_bool(&right) => (Expr::Literal(ScalarValue::from(b), None), right),
            _ => (left, right),
        };
        Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }))
    }
}

/// The analyzer rule turning `LIKE p ESCAPE 'c'` into `LIKE p'` with backslash escapes.
#[derive(Debug, Default)]
pub struct LikeEscape;

/// `pattern` with escape character `escape` rewritten to use the backslash.
fn backslash_escapes(pattern: &str, escape: char) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == escape {
            match chars.next() {
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push('\\'),
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    out
}

fn like_with_backslash(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::Like(Like {
            negated,
            expr,
            pattern,
            escape_char: Some(escape),
            case_insensitive,
        }) if escape != '\\' => {
            let pattern = match *pattern {
                Expr::Literal(ScalarValue::Utf8(Some(p)), m) => {
                    Expr::Literal(ScalarValue::Utf8(Some(backslash_escapes(&p, escape))), m)
                }
                Expr::Literal(ScalarValue::Utf8View(Some(p)), m) => Expr::Literal(
                    ScalarValue::Utf8View(Some(backslash_escapes(&p, escape))),
                    m,
                ),
                // A pattern computed per row (SQLAlchemy's `NOT LIKE $1 || '%' ESCAPE '/'`)
                // is converted when it runs, by PostgreSQL's `like_escape`.
                other => {
                    let text = other.get_type(schema)?;
                    Expr::ScalarFunction(ScalarFunction::new_udf(
                        Arc::new(like_escape()),
                        vec![
                            other.cast_to(&DataType::Utf8, schema)?,
                            Expr::Literal(ScalarValue::Utf8(Some(escape.into())), None),
                        ],
                    ))
                    .cast_to(&text, schema)?
                }
            };
            Ok(Transformed::yes(Expr::Like(Like {
                negated,
                expr,
                pattern: Box::new(pattern),
                escape_char: None,
                case_insensitive,
            })))
        }
        other => Ok(Transformed::no(other)),
    }
}

/// `like_escape(pattern, escape)`, PostgreSQL's function: `pattern` with the escape character
/// `escape` (one character) rewritten into backslash escapes.
pub fn like_escape() -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        "like_escape",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let [pattern, escape] = args else {
                return exec_err!("like_escape takes two arguments");
            };
            let rows = match (pattern, escape) {
                (ColumnarValue::Array(a), _) | (_, ColumnarValue::Array(a)) => a.len(),
                _ => 1,
            };
            let (pattern, escape) = (pattern.to_array(rows)?, escape.to_array(rows)?);
            let (pattern, escape) = (pattern.as_string::<i32>(), escape.as_string::<i32>());
            let mut out = datafusion::arrow::array::StringBuilder::new();
            for (p, e) in pattern.iter().zip(escape.iter()) {
                match (p, e) {
                    (Some(p), Some(e)) => {
                        let mut chars = e.chars();
                        match (chars.next(), chars.next()) {
                            (None, _) => out.append_value(p.replace('\\', "\\\\")),
                            (Some(c), None) => out.append_value(backslash_escapes(p, c)),
                            _ => {
                                return exec_err!(
                                    "like_escape: the escape string must be one character, got {e:?}"
                                );
                            }
                        }
                    }
                    _ => out.append_null(),
                }
            }
            let out = out.finish();
            Ok(match (args[0].clone(), args[1].clone()) {
                (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)) => {
                    ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
                }
                _ => ColumnarValue::Array(Arc::new(out)),
            })
        }),
    )
}

impl AnalyzerRule for LikeEscape {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, like_with_backslash)
    }

    fn name(&self) -> &str {
        "evalsql_like_escape"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_booleans() {
        for t in ["t", "TRUE", "yes", "y", "on", "1", "tr"] {
            assert_eq!(pg_bool(t), Some(true), "{t}");
        }
        for f in ["f", "false", "no", "off", "0", "N"] {
            assert_eq!(pg_bool(f), Some(false), "{f}");
        }
        for neither in ["o", "maybe", "", "2"] {
            assert_eq!(pg_bool(neither), None, "{neither}");
        }
    }

    #[test]
    fn escapes_become_backslashes() {
        assert_eq!(backslash_escapes("a/_b%", '/'), "a\\_b%");
        assert_eq!(backslash_escapes("a\\b//", '/'), "a\\\\b\\/");
    }
}
