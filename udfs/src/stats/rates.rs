//! `pass_rate(passed)` and `win_rate(choice, side)`: shares of non-NULL rows.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;

use crate::common::docs::STATISTICS;

/// Which rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Rate {
    Pass,
    Win,
}

/// `pass_rate` or `win_rate`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RateFunc {
    rate: Rate,
    signature: Signature,
}

impl RateFunc {
    pub fn pass_rate() -> Self {
        Self {
            rate: Rate::Pass,
            signature: Signature::exact(vec![DataType::Boolean], Volatility::Immutable),
        }
    }

    pub fn win_rate() -> Self {
        Self {
            rate: Rate::Win,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

static PASS_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "The share of non-NULL rows that are true, e.g. pass_rate(groundedness_details(...)\
         ['passed']). NULL when every row is NULL.",
        "pass_rate(passed)",
    )
    .with_argument("passed", "A Boolean.")
    .build()
});

static WIN_DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "The share of non-NULL choices equal to side ('A', 'B' or 'TIE', case-insensitive), \
         e.g. win_rate(pairwise_preference(q, a, b), 'A'). Ties stay in the denominator, as \
         Vertex AI reports win rates. NULL when every choice is NULL.",
        "win_rate(choice, side)",
    )
    .with_argument("choice", "'A', 'B' or 'TIE' per row.")
    .with_argument("side", "The side whose wins are counted (a constant).")
    .build()
});

impl AggregateUDFImpl for RateFunc {
    fn name(&self) -> &str {
        match self.rate {
            Rate::Pass => "pass_rate",
            Rate::Win => "win_rate",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let text = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            )
        };
        match arg_types {
            [a, b] if text(a) && text(b) => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => {
                let types: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
                plan_err!(
                    "win_rate({}) does not match win_rate(choice, side)",
                    types.join(", ")
                )
            }
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(ShareAccumulator::state_fields(args.name))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let hit = match self.rate {
            // A true Boolean is at least 1.
            Rate::Pass => Hit::AtLeast(1.0),
            Rate::Win => {
                let lit = args.exprs.get(1).and_then(|e| e.downcast_ref::<Literal>());
                match lit.map(|l| l.value().clone()) {
                    Some(
                        ScalarValue::Utf8(Some(s))
                        | ScalarValue::LargeUtf8(Some(s))
                        | ScalarValue::Utf8View(Some(s)),
                    ) => Hit::Equals(s.trim().to_string()),
                    _ => return exec_err!("win_rate: side must be a constant such as 'A'"),
                }
            }
        };
        Ok(Box::new(ShareAccumulator::new(hit)))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(match self.rate {
            Rate::Pass => &PASS_DOC,
            Rate::Win => &WIN_DOC,
        })
    }
}

/// What counts as a hit of a [`ShareAccumulator`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Hit {
    /// A true Boolean (numbers: at least the bound, for `defect_rate(severity, min)`).
    AtLeast(f64),
    /// A text equal to this (trimmed, ASCII case-insensitive).
    Equals(String),
}

/// The share of non-NULL rows that are hits: `pass_rate`, `win_rate` and `defect_rate`.
/// The state is two counts, merged by addition.
#[derive(Debug)]
pub(crate) struct ShareAccumulator {
    hit: Hit,
    rows: i64,
    hits: i64,
}

impl ShareAccumulator {
    pub(crate) fn new(hit: Hit) -> Self {
        Self {
            hit,
            rows: 0,
            hits: 0,
        }
    }

    /// The state fields of an aggregate called `name`.
    pub(crate) fn state_fields(name: &str) -> Vec<FieldRef> {
        vec![
            Arc::new(Field::new(format!("{name}[rows]"), DataType::Int64, true)),
            Arc::new(Field::new(format!("{name}[hits]"), DataType::Int64, true)),
        ]
    }

    fn count(&mut self, hits: impl Iterator<Item = bool>) {
        for hit in hits {
            self.rows += 1;
            self.hits += i64::from(hit);
        }
    }
}

impl Accumulator for ShareAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let values = &values[0];
        match (&self.hit, values.data_type()) {
            (Hit::AtLeast(_), DataType::Boolean) => {
                let flags = values.as_boolean().clone();
                self.count(flags.iter().flatten());
            }
            (Hit::AtLeast(min), _) => {
                let min = *min;
                let numbers = cast(values, &DataType::Float64)?;
                let numbers = numbers.as_primitive::<Float64Type>().clone();
                self.count(numbers.iter().flatten().map(|v| v >= min));
            }
            (Hit::Equals(side), _) => {
                let side = side.clone();
                let choices = cast(values, &DataType::Utf8)?;
                self.count(
                    choices
                        .as_string::<i32>()
                        .iter()
                        .flatten()
                        .map(|c| c.trim().eq_ignore_ascii_case(&side)),
                );
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let rows: &Int64Array = states[0].as_primitive();
        let hits: &Int64Array = states[1].as_primitive();
        self.rows += rows.iter().flatten().sum::<i64>();
        self.hits += hits.iter().flatten().sum::<i64>();
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Int64(Some(self.rows)),
            ScalarValue::Int64(Some(self.hits)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(
            (self.rows > 0).then(|| self.hits as f64 / self.rows as f64),
        ))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + match &self.hit {
                Hit::Equals(s) => s.capacity(),
                Hit::AtLeast(_) => 0,
            }
    }
}
