//! The trajectory metrics as SQL functions: `trajectory_exact_match`,
//! `trajectory_in_order_match`, `trajectory_any_order_match`, `trajectory_precision`,
//! `trajectory_recall` `(predicted, reference)` and `trajectory_single_tool_use(predicted,
//! tool_name)`. One struct serves the six names (their kernels are in [`super::trajectory`]);
//! each is registered as its own function.
//!
//! A trajectory is JSON text (the exact form), or a `List<Struct{tool_name, tool_input}>`
//! column as a JSON or Parquet reader produces it. Schema inference may turn `1` into `1.0`
//! and fill absent keys with NULL, so the list form compares what the reader made of the
//! data; NULL struct fields are left out again before comparing.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, ListArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ScalarFunctionArgs, ScalarUDFImpl, Signature,
};

use super::trajectory::{self, Call, call_from_parts, parse_trajectory};
use crate::common::docs::AGENT_METRICS;
use crate::common::recent::{Recent, memoized};
use crate::common::signature::{is_text, user_defined};
use crate::common::{StrArg, float64_rows, json_values, prepare_args, truncate_for_error};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Pair(Pair),
    SingleToolUse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pair {
    Exact,
    InOrder,
    AnyOrder,
    Precision,
    Recall,
}

impl Pair {
    fn kernel(self) -> fn(&[Call], &[Call]) -> f64 {
        match self {
            Pair::Exact => trajectory::exact_match,
            Pair::InOrder => trajectory::in_order_match,
            Pair::AnyOrder => trajectory::any_order_match,
            Pair::Precision => trajectory::precision,
            Pair::Recall => trajectory::recall,
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TrajectoryFunc {
    name: &'static str,
    kind: Kind,
    signature: Signature,
    doc: Documentation,
}

const CALL_FORM: &str = "A trajectory is JSON text holding an array of {\"tool_name\": ..., \
    \"tool_input\": {...}} (the exact form), or a List<Struct{tool_name, tool_input}> column. \
    Two calls are equal when their tool names are equal and their tool_input are equal as \
    JSON: key order is ignored, 1 and 1.0 differ, a missing tool_input is {}.";

impl TrajectoryFunc {
    fn pair(name: &'static str, kernel: Pair, what: &str) -> Self {
        let doc = Documentation::builder(
            AGENT_METRICS,
            format!(
                "{what} {CALL_FORM} NULL in either argument gives NULL; malformed JSON, a \
                 value that is not an array, or a call without tool_name is an error."
            ),
            format!("{name}(predicted_trajectory, reference_trajectory)"),
        )
        .with_argument("predicted_trajectory", "The tool calls the agent made.")
        .with_argument("reference_trajectory", "The tool calls expected.")
        .build();
        Self {
            name,
            kind: Kind::Pair(kernel),
            signature: user_defined(),
            doc,
        }
    }

    pub fn exact_match() -> Self {
        Self::pair(
            "trajectory_exact_match",
            Pair::Exact,
            "1.0 when the predicted trajectory has exactly the reference's tool calls in the \
             same order (Vertex AI trajectory_exact_match), else 0.0. Two empty trajectories \
             match.",
        )
    }

    pub fn in_order_match() -> Self {
        Self::pair(
            "trajectory_in_order_match",
            Pair::InOrder,
            "1.0 when every reference call appears in the predicted trajectory in the \
             reference's order, extra calls allowed (Vertex AI trajectory_in_order_match), \
             else 0.0. An empty reference always matches.",
        )
    }

    pub fn any_order_match() -> Self {
        Self::pair(
            "trajectory_any_order_match",
            Pair::AnyOrder,
            "1.0 when every reference call appears somewhere in the predicted trajectory, \
             order and extra calls ignored (Vertex AI trajectory_any_order_match), else 0.0. \
             Membership counts: a call the reference repeats is found by one predicted call. \
             An empty reference always matches.",
        )
    }

    pub fn precision() -> Self {
        Self::pair(
            "trajectory_precision",
            Pair::Precision,
            "The share of predicted calls that appear in the reference trajectory (Vertex AI \
             trajectory_precision), counting membership: duplicates are not clipped. 0.0 for \
             an empty prediction.",
        )
    }

    pub fn recall() -> Self {
        Self::pair(
            "trajectory_recall",
            Pair::Recall,
            "The share of reference calls that appear in the predicted trajectory (Vertex AI \
             trajectory_recall), counting membership: duplicates are not clipped. 0.0 for an \
             empty reference.",
        )
    }

    pub fn single_tool_use() -> Self {
        let name = "trajectory_single_tool_use";
        let doc = Documentation::builder(
            AGENT_METRICS,
            format!(
                "1.0 when the predicted trajectory calls the named tool at least once, whatever \
                 its input, order or count (Vertex AI trajectory_single_tool_use), else 0.0. \
                 {CALL_FORM} NULL in either argument gives NULL; malformed JSON is an error."
            ),
            format!("{name}(predicted_trajectory, tool_name)"),
        )
        .with_argument("predicted_trajectory", "The tool calls the agent made.")
        .with_argument("tool_name", "The tool that must be used (string).")
        .build();
        Self {
            name,
            kind: Kind::SingleToolUse,
            signature: user_defined(),
            doc,
        }
    }

    fn usage(&self) -> String {
        match self.kind {
            Kind::Pair(_) => format!(
                "{}(predicted_trajectory: String | List<Struct{{tool_name, tool_input}}>, \
                 reference_trajectory: String | List<Struct{{tool_name, tool_input}}>)",
                self.name
            ),
            Kind::SingleToolUse => format!(
                "{}(predicted_trajectory: String | List<Struct{{tool_name, tool_input}}>, tool_name: String)",
                self.name
            ),
        }
    }
}

fn is_call_list(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) => match f.data_type() {
            DataType::Struct(fields) => fields.iter().any(|f| f.name() == "tool_name"),
            _ => false,
        },
        _ => false,
    }
}

impl ScalarUDFImpl for TrajectoryFunc {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let trajectory = |t: &DataType| is_text(t) || is_call_list(t);
        let ok = arg_types.len() == 2
            && trajectory(&arg_types[0])
            && match self.kind {
                Kind::Pair(_) => trajectory(&arg_types[1]),
                Kind::SingleToolUse => is_text(&arg_types[1]),
            };
        if !ok {
            let got: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
            return plan_err!(
                "{}({}) does not match {}",
                self.name,
                got.join(", "),
                self.usage()
            );
        }
        Ok(arg_types
            .iter()
            .map(|t| {
                if t.is_null() {
                    DataType::Utf8
                } else {
                    t.clone()
                }
            })
            .collect())
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.name;
        let rows = args.number_rows;
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let predicted = TrajectoryArg::new(name, "predicted_trajectory", &args.args[0])?;
        match self.kind {
            Kind::Pair(pair) => {
                let kernel = pair.kernel();
                let reference = TrajectoryArg::new(name, "reference_trajectory", &args.args[1])?;
                float64_rows(all_scalar, rows, |row| {
                    let (Some(p), Some(r)) = (predicted.get(row)?, reference.get(row)?) else {
                        return Ok(None);
                    };
                    Ok(Some(kernel(p, r)))
                })
            }
            Kind::SingleToolUse => {
                let prepared = prepare_args(&args.args[1..])?;
                let tool = prepared.str(name, 0)?;
                float64_rows(all_scalar, rows, |row| {
                    let (Some(p), Some(t)) = (predicted.get(row)?, tool.get(row)) else {
                        return Ok(None);
                    };
                    Ok(Some(trajectory::single_tool_use(p, t)))
                })
            }
        }
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&self.doc)
    }
}

/// One trajectory argument, readable per row as parsed calls.
enum TrajectoryArg {
    /// JSON text, parsed once per column (see [`parsed_column`]); a literal is one row.
    Text {
        rows: ParsedRows,
        scalar: bool,
        function: &'static str,
        what: &'static str,
    },
    /// A list of structs, converted once per batch.
    Calls(Vec<Option<Arc<[Call]>>>, bool),
}

/// A parsed text column: per row NULL, the calls, or (the value shown, why it is not a
/// trajectory).
type ParsedColumn = Vec<Option<std::result::Result<Vec<Call>, (String, String)>>>;
type ParsedRows = Arc<ParsedColumn>;

thread_local! {
    /// Text columns parsed lately on this thread (see [`crate::common::recent`]): the six
    /// trajectory metrics over the same columns parse each trajectory once, not six times.
    static RECENT: std::cell::RefCell<Recent<ParsedColumn>> =
        const { std::cell::RefCell::new(Recent::new()) };
}

#[cfg(test)]
thread_local! {
    static PARSED_ROWS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn parse_column(text: &StrArg<'_>, rows: usize) -> ParsedColumn {
    #[cfg(test)]
    PARSED_ROWS.with(|n| n.set(n.get() + rows));
    (0..rows)
        .map(|row| {
            text.get(row).map(|value| {
                parse_trajectory(value).map_err(|e| (truncate_for_error(value), e.to_string()))
            })
        })
        .collect()
}

/// The parsed rows of a text column, from this thread's recent columns when it was parsed
/// already.
fn parsed_column(function: &'static str, value: &ColumnarValue) -> Result<(ParsedRows, bool)> {
    let prepared = prepare_args(std::slice::from_ref(value))?;
    let text = prepared.str(function, 0)?;
    let ColumnarValue::Array(array) = value else {
        return Ok((Arc::new(parse_column(&text, 1)), true));
    };
    let rows = memoized(&RECENT, array, || parse_column(&text, array.len()));
    Ok((rows, false))
}

impl TrajectoryArg {
    fn new(function: &'static str, what: &'static str, value: &ColumnarValue) -> Result<Self> {
        let is_list = matches!(
            value.data_type(),
            DataType::List(_) | DataType::LargeList(_)
        );
        if is_list {
            let (array, scalar) = match value {
                ColumnarValue::Array(a) => (Arc::clone(a), false),
                ColumnarValue::Scalar(s) => (s.to_array_of_size(1)?, true),
            };
            let list = cast(&array, &list_of(&array))?;
            return Ok(Self::Calls(
                calls_from_list(function, list.as_list::<i32>())?,
                scalar,
            ));
        }
        let (rows, scalar) = parsed_column(function, value)?;
        Ok(Self::Text {
            rows,
            scalar,
            function,
            what,
        })
    }

    fn get(&self, row: usize) -> Result<Option<&[Call]>> {
        match self {
            Self::Calls(rows, scalar) => Ok(rows[if *scalar { 0 } else { row }].as_deref()),
            Self::Text {
                rows,
                scalar,
                function,
                what,
            } => match &rows[if *scalar { 0 } else { row }] {
                None => Ok(None),
                Some(Ok(calls)) => Ok(Some(calls.as_slice())),
                Some(Err((value, e))) => {
                    exec_err!("{function}: {what} {value} is not a trajectory: {e}")
                }
            },
        }
    }
}

/// `List<Struct>` with 32-bit offsets, whatever list flavour came in.
fn list_of(array: &dyn Array) -> DataType {
    match array.data_type() {
        DataType::List(f) | DataType::LargeList(f) => DataType::List(Arc::clone(f)),
        other => other.clone(),
    }
}

/// Converts every row of a `List<Struct{tool_name, tool_input, ...}>` to calls. `tool_input`
/// goes through Arrow's JSON writer, which leaves NULL fields out: what the JSON reader
/// filled in for absent keys disappears again.
fn calls_from_list(function: &str, list: &ListArray) -> Result<Vec<Option<Arc<[Call]>>>> {
    let calls = list.values().as_struct();
    let Some(names) = calls.column_by_name("tool_name") else {
        return exec_err!("{function}: the trajectory structs have no tool_name field");
    };
    let names = cast(names, &DataType::Utf8)?;
    let names = names.as_string::<i32>();
    let inputs: Vec<Option<serde_json::Value>> = match calls.column_by_name("tool_input") {
        None => vec![None; calls.len()],
        Some(col) => json_values(col)?,
    };
    let offsets = list.value_offsets();
    let mut rows = Vec::with_capacity(list.len());
    for row in 0..list.len() {
        if list.is_null(row) {
            rows.push(None);
            continue;
        }
        let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
        let mut row_calls = Vec::with_capacity(end - start);
        for i in start..end {
            if calls.is_null(i) || names.is_null(i) {
                return exec_err!(
                    "{function}: tool call {} of row {row} has no tool_name",
                    i - start
                );
            }
            row_calls.push(call_from_parts(names.value(i), inputs[i].as_ref()));
        }
        rows.push(Some(row_calls.into()));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, StringArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;
    use datafusion::logical_expr::ScalarUDF;

    fn invoke(f: TrajectoryFunc, p: &ArrayRef, r: &ArrayRef) -> Result<ColumnarValue> {
        let field = Arc::new(Field::new("t", DataType::Utf8, true));
        ScalarUDF::from(f).invoke_with_args(ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Array(Arc::clone(p)),
                ColumnarValue::Array(Arc::clone(r)),
            ],
            arg_fields: vec![Arc::clone(&field), field],
            number_rows: p.len(),
            return_field: Arc::new(Field::new("x", DataType::Float64, true)),
            config_options: Arc::new(ConfigOptions::default()),
        })
    }

    #[test]
    fn the_metrics_of_one_projection_parse_each_column_once() {
        let call = r#"[{"tool_name": "a", "tool_input": {"x": 1}}]"#;
        let p: ArrayRef = Arc::new(StringArray::from(vec![Some(call), None, Some("[]")]));
        let r: ArrayRef = Arc::new(StringArray::from(vec![Some(call), Some(call), Some(call)]));
        let before = PARSED_ROWS.with(|n| n.get());
        for f in [
            TrajectoryFunc::exact_match(),
            TrajectoryFunc::precision(),
            TrajectoryFunc::recall(),
            TrajectoryFunc::any_order_match(),
        ] {
            invoke(f, &p, &r).unwrap();
        }
        assert_eq!(
            PARSED_ROWS.with(|n| n.get()) - before,
            6,
            "two columns of three rows"
        );
        // A new array with the same content is parsed again (identity, not content).
        let p2: ArrayRef = Arc::new(StringArray::from(vec![Some(call), None, Some("[]")]));
        invoke(TrajectoryFunc::precision(), &p2, &r).unwrap();
        assert_eq!(PARSED_ROWS.with(|n| n.get()) - before, 9);
        // A malformed row is still an error at the row it is in, for every function.
        let bad: ArrayRef = Arc::new(StringArray::from(vec![Some(call), Some("oops")]));
        let r2: ArrayRef = Arc::new(StringArray::from(vec![Some(call), Some(call)]));
        for _ in 0..2 {
            let err = invoke(TrajectoryFunc::recall(), &bad, &r2)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(
                    "trajectory_recall: predicted_trajectory \"oops\" is not a trajectory"
                ),
                "{err}"
            );
        }
    }
}
