//! `trajectory_agg(tool_name, tool_arguments ORDER BY start_time)`: the tool calls of a
//! group of spans as the trajectory JSON text the trajectory metrics take,
//! `[{"tool_name": ..., "tool_input": <tool_arguments as JSON; {} when NULL>}, ...]`.
//!
//! Rows whose tool name is NULL (spans that are not tool calls) are left out, so
//! `GROUP BY trace_id` over every span of `read_otlp` gives each trace's trajectory. The
//! state keeps every call's ordering values, and the result is sorted by them, so partial
//! states from several partitions merge into the order one pass would give. Calls with equal
//! ordering values keep their order within a partition; across partitions their order is
//! the merge's (give a unique ordering, such as `start_time, span_id`, when it matters).

use std::cmp::Ordering;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use crate::common::docs::AGENT_METRICS;
use crate::common::signature::is_text;
use crate::common::truncate_for_error;

const NAME: &str = "trajectory_agg";

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        AGENT_METRICS,
        "The trajectory of a group of spans, as the JSON text the trajectory metrics take: \
         [{\"tool_name\": ..., \"tool_input\": ...}] in the order given by ORDER BY (give \
         one: ORDER BY start_time). tool_input is tool_arguments parsed as JSON ({} when \
         NULL; text that is not JSON is an error). Rows with a NULL tool name are left out; a \
         group without a tool call gives []. Merges partial results in order.",
        "trajectory_agg(tool_name, tool_arguments ORDER BY start_time)",
    )
    .with_argument(
        "tool_name",
        "The tool a span called (NULL for other spans).",
    )
    .with_argument("tool_arguments", "The call's arguments, JSON text.")
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TrajectoryAggFunc {
    signature: Signature,
}

impl Default for TrajectoryAggFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for TrajectoryAggFunc {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() != 2 || !arg_types.iter().all(is_text) {
            return plan_err!(
                "{NAME} takes two strings, the tool name and its JSON arguments: {}",
                DOC.syntax_example
            );
        }
        Ok(vec![DataType::Utf8, DataType::Utf8])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let list = |name: String, t: DataType| -> FieldRef {
            Arc::new(Field::new_list(name, Field::new_list_field(t, true), true))
        };
        let mut fields = vec![
            list(format!("{}_names", args.name), DataType::Utf8),
            list(format!("{}_inputs", args.name), DataType::Utf8),
        ];
        for (i, f) in args.ordering_fields.iter().enumerate() {
            fields.push(list(
                format!("{}_order_{i}", args.name),
                f.data_type().clone(),
            ));
        }
        Ok(fields)
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        // The ordering values are kept and sorted on at the end: sorted input only saves work.
        AggregateOrderSensitivity::SoftRequirement
    }

    fn with_beneficial_ordering(
        self: Arc<Self>,
        _beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(Some(self))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            return plan_err!("{NAME} takes no DISTINCT: a trajectory keeps repeated calls");
        }
        let mut order_types = Vec::new();
        let mut options = Vec::new();
        for sort in args.order_bys {
            order_types.push(sort.expr.data_type(args.schema)?);
            options.push(sort.options);
        }
        Ok(Box::new(TrajectoryAcc {
            calls: Vec::new(),
            order_types,
            options,
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

#[derive(Debug)]
struct Call {
    order: Vec<ScalarValue>,
    name: String,
    /// The arguments' JSON text, checked; `None` for NULL.
    input: Option<String>,
}

#[derive(Debug)]
struct TrajectoryAcc {
    calls: Vec<Call>,
    order_types: Vec<DataType>,
    options: Vec<SortOptions>,
}

fn text_column(a: &ArrayRef) -> Result<ArrayRef> {
    Ok(cast(a, &DataType::Utf8)?)
}

impl TrajectoryAcc {
    fn push(&mut self, name: &str, input: Option<&str>, order: Vec<ScalarValue>) -> Result<()> {
        let input = match input {
            None => None,
            Some(text) => {
                if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
                    return exec_err!(
                        "{NAME}: the arguments {} of tool {} are not JSON",
                        truncate_for_error(text),
                        truncate_for_error(name)
                    );
                }
                Some(text.trim().to_string())
            }
        };
        self.calls.push(Call {
            order,
            name: name.to_string(),
            input,
        });
        Ok(())
    }

    fn compare(&self, a: &Call, b: &Call) -> Ordering {
        for ((x, y), opt) in a.order.iter().zip(&b.order).zip(&self.options) {
            let ord = match (x.is_null(), y.is_null()) {
                (true, true) => Ordering::Equal,
                (true, false) => {
                    if opt.nulls_first {
                        Ordering::Less
                    } else {
                        Ordering::Greater
                    }
                }
                (false, true) => {
                    if opt.nulls_first {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    }
                }
                (false, false) => {
                    let o = x.partial_cmp(y).unwrap_or(Ordering::Equal);
                    if opt.descending { o.reverse() } else { o }
                }
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

impl Accumulator for TrajectoryAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let names = text_column(&values[0])?;
        let inputs = text_column(&values[1])?;
        let (names, inputs) = (names.as_string::<i32>(), inputs.as_string::<i32>());
        let orders = &values[2..];
        for row in 0..names.len() {
            if names.is_null(row) {
                continue;
            }
            let order = orders
                .iter()
                .map(|o| ScalarValue::try_from_array(o, row))
                .collect::<Result<Vec<_>>>()?;
            let input = inputs.is_valid(row).then(|| inputs.value(row));
            self.push(names.value(row), input, order)?;
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let names = states[0].as_list::<i32>();
        let inputs = states[1].as_list::<i32>();
        let orders: Vec<_> = states[2..].iter().map(|s| s.as_list::<i32>()).collect();
        for row in 0..names.len() {
            if names.is_null(row) {
                continue;
            }
            let n = names.value(row);
            let n = n.as_string::<i32>();
            let i = inputs.value(row);
            let i = i.as_string::<i32>();
            let o: Vec<ArrayRef> = orders.iter().map(|l| l.value(row)).collect();
            for j in 0..n.len() {
                let order = o
                    .iter()
                    .map(|a| ScalarValue::try_from_array(a, j))
                    .collect::<Result<Vec<_>>>()?;
                // Already checked when the partial state was built.
                self.calls.push(Call {
                    order,
                    name: n.value(j).to_string(),
                    input: i.is_valid(j).then(|| i.value(j).to_string()),
                });
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let names: Vec<ScalarValue> = self
            .calls
            .iter()
            .map(|c| ScalarValue::Utf8(Some(c.name.clone())))
            .collect();
        let inputs: Vec<ScalarValue> = self
            .calls
            .iter()
            .map(|c| ScalarValue::Utf8(c.input.clone()))
            .collect();
        let mut out = vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&names, &DataType::Utf8)),
            ScalarValue::List(ScalarValue::new_list_nullable(&inputs, &DataType::Utf8)),
        ];
        for (k, t) in self.order_types.iter().enumerate() {
            let values: Vec<ScalarValue> = self.calls.iter().map(|c| c.order[k].clone()).collect();
            out.push(ScalarValue::List(ScalarValue::new_list_nullable(
                &values, t,
            )));
        }
        Ok(out)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let mut calls = std::mem::take(&mut self.calls);
        calls.sort_by(|a, b| self.compare(a, b));
        let mut out = String::from("[");
        for (i, c) in calls.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str("{\"tool_name\": ");
            out.push_str(&serde_json::Value::String(c.name.clone()).to_string());
            out.push_str(", \"tool_input\": ");
            out.push_str(c.input.as_deref().unwrap_or("{}"));
            out.push('}');
        }
        out.push(']');
        self.calls = calls;
        Ok(ScalarValue::Utf8(Some(out)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .calls
                .iter()
                .map(|c| {
                    std::mem::size_of::<Call>()
                        + c.name.len()
                        + c.input.as_ref().map_or(0, String::len)
                        + c.order.iter().map(ScalarValue::size).sum::<usize>()
                })
                .sum::<usize>()
    }
}
