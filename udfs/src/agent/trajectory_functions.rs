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
                    Ok(Some(kernel(&p, &r)))
                })
            }
            Kind::SingleToolUse => {
                let prepared = prepare_args(&args.args[1..])?;
                let tool = prepared.str(name, 0)?;
                float64_rows(all_scalar, rows, |row| {
                    let (Some(p), Some(t)) = (predicted.get(row)?, tool.get(row)) else {
                        return Ok(None);
                    };
                    Ok(Some(trajectory::single_tool_use(&p, t)))
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
    /// JSON text; a literal is parsed once.
    Text {
        prepared: crate::common::args::PreparedArgs,
        constant: Option<Option<Arc<[Call]>>>,
        function: &'static str,
        what: &'static str,
    },
    /// A list of structs, converted once per batch.
    Calls(Vec<Option<Arc<[Call]>>>, bool),
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
        let prepared = prepare_args(std::slice::from_ref(value))?;
        let mut arg = Self::Text {
            prepared,
            constant: None,
            function,
            what,
        };
        if let Self::Text {
            prepared, constant, ..
        } = &mut arg
            && matches!(value, ColumnarValue::Scalar(_))
        {
            let text = prepared.str(function, 0)?;
            *constant = Some(parse_row(function, what, &text, 0)?);
        }
        Ok(arg)
    }

    fn get(&self, row: usize) -> Result<Option<Arc<[Call]>>> {
        match self {
            Self::Calls(rows, scalar) => Ok(rows[if *scalar { 0 } else { row }].clone()),
            Self::Text {
                constant: Some(c), ..
            } => Ok(c.clone()),
            Self::Text {
                prepared,
                function,
                what,
                ..
            } => parse_row(function, what, &prepared.str(function, 0)?, row),
        }
    }
}

fn parse_row(
    function: &str,
    what: &str,
    text: &StrArg<'_>,
    row: usize,
) -> Result<Option<Arc<[Call]>>> {
    let Some(value) = text.get(row) else {
        return Ok(None);
    };
    match parse_trajectory(value) {
        Ok(calls) => Ok(Some(calls.into())),
        Err(e) => exec_err!(
            "{function}: {what} {} is not a trajectory: {e}",
            truncate_for_error(value)
        ),
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
