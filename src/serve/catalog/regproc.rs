//! `regproc` columns: names when shown, function OIDs when compared.
//!
//! PostgreSQL's `pg_type.typinput`, `typreceive`, … are of type `regproc`: an OID that prints
//! as the function's name. The static catalog keeps only the name (text), so a driver's
//! `typinput = 'pg_catalog.array_in'::regproc` (pgJDBC, for every struct column) or
//! `JOIN pg_proc ON pg_proc.oid = typ.typreceive` (Npgsql's type loading) compared a name with
//! an OID: DataFusion casts the name to an integer and fails ("Cannot cast string 'record_in'
//! to value of Int32 type").
//!
//! [`RegprocAsOid`] runs after DataFusion's type coercion, on plans that read a catalog table
//! with such a column, and rewrites two shapes:
//!
//! - `CAST(<regproc column> AS <integer>)` — the cast type coercion put where the name meets
//!   an OID — becomes `regproc_oid(<column>)`, the OID of the named function;
//! - `(SELECT oid FROM pg_catalog.pg_proc WHERE proname = '<name>')`, the subquery
//!   datafusion-pg-catalog writes for `'<name>'::regproc`, becomes `regproc_oid('<name>')`,
//!   which also understands schema-qualified names (`pg_catalog.array_in`), as PostgreSQL
//!   does (the subquery compared them with the bare `proname` and found nothing).
//!
//! `SELECT typinput` is untouched and still shows the name.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int32Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, Cast, ColumnarValue, Expr, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, TryCast, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use super::functions::Shared;
use super::plans::{reads_catalog_table, rewrite_expressions, scanned_table, strip_aliases};

/// PostgreSQL's `regproc` columns of the catalog tables evalsql serves, by table.
const REGPROC_COLUMNS: &[(&str, &[&str])] = &[
    (
        "pg_type",
        &[
            "typinput",
            "typoutput",
            "typreceive",
            "typsend",
            "typmodin",
            "typmodout",
            "typanalyze",
            "typsubscript",
        ],
    ),
    (
        "pg_aggregate",
        &[
            "aggfnoid",
            "aggtransfn",
            "aggfinalfn",
            "aggcombinefn",
            "aggserialfn",
            "aggdeserialfn",
            "aggmtransfn",
            "aggminvtransfn",
            "aggmfinalfn",
        ],
    ),
    ("pg_operator", &["oprcode", "oprrest", "oprjoin"]),
    ("pg_range", &["rngcanonical", "rngsubdiff"]),
    ("pg_proc", &["prosupport"]),
    ("pg_am", &["amhandler"]),
    ("pg_conversion", &["conproc"]),
    (
        "pg_ts_parser",
        &[
            "prsstart",
            "prstoken",
            "prsend",
            "prsheadline",
            "prslextype",
        ],
    ),
    ("pg_ts_template", &["tmplinit", "tmpllexize"]),
];

/// The name of the function that maps a `regproc` name to its OID.
pub const REGPROC_OID: &str = "regproc_oid";

/// Function names (unqualified, as `pg_proc.proname`) to their OIDs.
#[derive(Debug, Default)]
pub struct ProcOids {
    by_name: HashMap<String, i32>,
}

impl ProcOids {
    /// From `pg_proc`'s `(oid, proname)` rows. An overloaded name keeps its smallest OID
    /// (PostgreSQL refuses `'name'::regproc` for those; the catalog's regproc columns never
    /// name one).
    pub fn new(rows: impl IntoIterator<Item = (i32, String)>) -> Self {
        let mut by_name: HashMap<String, i32> = HashMap::new();
        for (oid, name) in rows {
            by_name
                .entry(name)
                .and_modify(|o| *o = (*o).min(oid))
                .or_insert(oid);
        }
        ProcOids { by_name }
    }

    /// The OID `text::regproc` gives: `-` is 0 (no function), a name optionally qualified
    /// with `pg_catalog.` (quoted or not) is looked up; anything else has no OID.
    fn oid(&self, text: &str) -> Option<i32> {
        let text = text.trim();
        if text == "-" {
            return Some(0);
        }
        if let Ok(oid) = text.parse::<i32>() {
            return Some(oid);
        }
        let unquote = |s: &str| s.trim_matches('"').to_string();
        let name = match text.split_once('.') {
            Some((schema, name)) if unquote(schema) == "pg_catalog" => unquote(name),
            Some(_) => return None,
            None => unquote(text),
        };
        self.by_name.get(&name).copied()
    }
}

/// `regproc_oid(text) -> int4`: the OID of the named function, NULL when none has the name.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RegprocOid {
    signature: Signature,
    oids: Shared<ProcOids>,
}

impl RegprocOid {
    pub fn udf(oids: Arc<ProcOids>) -> ScalarUDF {
        ScalarUDF::new_from_impl(RegprocOid {
            signature: Signature::string(1, Volatility::Immutable),
            oids: Shared(oids),
        })
    }
}

impl ScalarUDFImpl for RegprocOid {
    fn name(&self) -> &str {
        REGPROC_OID
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("{REGPROC_OID} takes one argument, got {}", args.args.len());
        };
        match arg {
            ColumnarValue::Scalar(value) => {
                let text = match value.cast_to(&DataType::Utf8)? {
                    ScalarValue::Utf8(text) => text,
                    other => return exec_err!("{REGPROC_OID}: not a name: {other}"),
                };
                let oid = text.and_then(|t| self.oids.oid(&t));
                Ok(ColumnarValue::Scalar(ScalarValue::Int32(oid)))
            }
            ColumnarValue::Array(array) => {
                let names = cast(array, &DataType::Utf8)?;
                let names = names.as_string::<i32>();
                let oids: Int32Array = names
                    .iter()
                    .map(|n| n.and_then(|n| self.oids.oid(n)))
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(oids) as ArrayRef))
            }
        }
    }
}

/// The analyzer rule described in the module's documentation.
#[derive(Debug)]
pub struct RegprocAsOid {
    udf: Arc<ScalarUDF>,
}

impl RegprocAsOid {
    pub fn new(udf: Arc<ScalarUDF>) -> Self {
        RegprocAsOid { udf }
    }

    fn call(&self, arg: Expr) -> Expr {
        Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&self.udf), vec![arg]))
    }

    fn rewrite(&self, expr: Expr, columns: &[&str]) -> Result<Transformed<Expr>> {
        match expr {
            Expr::Cast(Cast { expr: inner, field })
            | Expr::TryCast(TryCast { expr: inner, field })
                if field.data_type().is_integer() && is_regproc_column(&inner, columns) =>
            {
                let oid = self.call(*inner);
                Ok(Transformed::yes(if field.data_type() == &DataType::Int32 {
                    oid
                } else {
                    Expr::Cast(Cast::new_from_field(Box::new(oid), field))
                }))
            }
            Expr::ScalarSubquery(subquery) => match regproc_lookup(&subquery.subquery) {
                Some(name) => Ok(Transformed::yes(self.call(name))),
                None => Ok(Transformed::no(Expr::ScalarSubquery(subquery))),
            },
            other => Ok(Transformed::no(other)),
        }
    }
}

/// Whether `expr` is a column of one of the `regproc` names still holding text.
fn is_regproc_column(expr: &Expr, columns: &[&str]) -> bool {
    matches!(expr, Expr::Column(c) if columns.contains(&c.name.as_str()))
}

/// The name in datafusion-pg-catalog's `'<name>'::regproc` subquery,
/// `SELECT oid FROM pg_catalog.pg_proc WHERE proname = <name>`.
fn regproc_lookup(plan: &LogicalPlan) -> Option<Expr> {
    let LogicalPlan::Projection(projection) = plan else {
        return None;
    };
    let [Expr::Column(column)] = projection.expr.as_slice() else {
        return None;
    };
    let LogicalPlan::Filter(filter) = strip_aliases(&projection.input) else {
        return None;
    };
    if column.name != "oid" || scanned_table(&filter.input)? != "pg_proc" {
        return None;
    }
    match &filter.predicate {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), name) | (name, Expr::Column(c))
                if c.name == "proname" && !matches!(name, Expr::Column(_)) =>
            {
                Some(strip_casts(name).clone())
            }
            _ => None,
        },
        _ => None,
    }
}

fn strip_casts(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => strip_casts(expr),
        other => other,
    }
}

impl AnalyzerRule for RegprocAsOid {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let tables: Vec<&str> = REGPROC_COLUMNS.iter().map(|(t, _)| *t).collect();
        let mut read = Vec::new();
        reads_catalog_table(&plan, &tables, &mut read)?;
        if read.is_empty() {
            return Ok(plan);
        }
        let columns: Vec<&str> = REGPROC_COLUMNS
            .iter()
            .filter(|(t, _)| read.contains(t))
            .flat_map(|(_, c)| c.iter().copied())
            .collect();
        rewrite_expressions(plan, |e, _| self.rewrite(e, &columns))
    }

    fn name(&self) -> &str {
        "evalsql_regproc_as_oid"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_qualified_names_resolve() {
        let oids = ProcOids::new([(750, "array_in".into()), (2290, "record_in".into())]);
        assert_eq!(oids.oid("array_in"), Some(750));
        assert_eq!(oids.oid("pg_catalog.array_in"), Some(750));
        assert_eq!(oids.oid("\"pg_catalog\".\"array_in\""), Some(750));
        assert_eq!(oids.oid("-"), Some(0));
        assert_eq!(oids.oid("750"), Some(750));
        assert_eq!(oids.oid("public.array_in"), None);
        assert_eq!(oids.oid("nope"), None);
    }
}
