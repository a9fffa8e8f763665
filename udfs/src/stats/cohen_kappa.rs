//! `cohen_kappa(a, b)`: agreement of two raters, as scikit-learn computes it.

use std::sync::LazyLock;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::arrow::datatypes::{Float64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, Documentation, Signature, Volatility,
};

use super::kappa::{KappaState, Weights};
use super::state::{Constants, check_arity, list_field, list_str, list_u64, state_parts};
use crate::common::docs::STATISTICS;

static DOC: LazyLock<Documentation> = LazyLock::new(|| {
    Documentation::builder(
        STATISTICS,
        "Cohen's kappa between two raters' labels (integers, strings or booleans; numbers \
         compare by value), equal to sklearn.metrics.cohen_kappa_score; with weights \
         'linear' or 'quadratic', the weighted kappa for ordinal labels, equal to \
         cohen_kappa_score(a, b, weights=...) (weights are distances between the labels' \
         positions in sorted order). Rows with a NULL label are left out; NULL when there is \
         no row or both raters used a single label.",
        "cohen_kappa(a, b [, weights])",
    )
    .with_argument(
        "weights",
        "Optional: 'linear' or 'quadratic' (a constant); unweighted without it.",
    )
    .build()
});

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CohenKappaFunc {
    signature: Signature,
}

impl Default for CohenKappaFunc {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for CohenKappaFunc {
    fn name(&self) -> &str {
        "cohen_kappa"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(
            self.name(),
            "cohen_kappa(a, b [, weights])",
            arg_types,
            2,
            3,
            true,
        )?;
        let mut types = vec![
            label_type(&arg_types[0], &arg_types[1]),
            label_type(&arg_types[1], &arg_types[0]),
        ];
        if arg_types.len() == 3 {
            types.push(DataType::Utf8);
        }
        Ok(types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            list_field(&args, "a", DataType::Utf8),
            list_field(&args, "b", DataType::Utf8),
            list_field(&args, "counts", DataType::UInt64),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let constants = Constants {
            name: self.name(),
            args: &args,
        };
        let weights = match constants.str_at(2)? {
            None => None,
            Some(name) => match Weights::named(&name) {
                Some(w) => Some(w),
                None => {
                    return exec_err!(
                        "cohen_kappa: weights must be 'linear' or 'quadratic', got {}",
                        crate::common::truncate_for_error(&name)
                    );
                }
            },
        };
        let numeric = args
            .expr_fields
            .first()
            .is_some_and(|f| *f.data_type() == DataType::Float64);
        Ok(Box::new(KappaAcc {
            state: KappaState::new(),
            weights,
            numeric,
        }))
    }

    fn documentation(&self) -> Option<&Documentation> {
        Some(&DOC)
    }
}

/// Kappa labels: numbers by value (both sides as Float64 when both are numeric), otherwise
/// text.
fn label_type(t: &DataType, other: &DataType) -> DataType {
    if t.is_numeric() && (other.is_numeric() || other.is_null()) {
        DataType::Float64
    } else {
        DataType::Utf8
    }
}

#[derive(Debug)]
struct KappaAcc {
    state: KappaState,
    weights: Option<Weights>,
    /// The labels are numbers (they sort by value for the weights).
    numeric: bool,
}

/// A label as text: numbers by value (`1`, `1.0` and `1e0` are one label), text as it is.
fn labels(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    Ok(match a.data_type() {
        DataType::Float64 => a
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map(|v| format!("{v}")))
            .collect(),
        _ => cast(a, &DataType::Utf8)?
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect(),
    })
}

impl Accumulator for KappaAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for (a, b) in labels(&values[0])?.iter().zip(labels(&values[1])?.iter()) {
            if let (Some(a), Some(b)) = (a, b) {
                self.state.update(a, b);
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for part in state_parts(states) {
            let (a, b, c) = (
                part[0].as_string::<i32>(),
                part[1].as_string::<i32>(),
                part[2].as_primitive::<UInt64Type>(),
            );
            for i in 0..a.len() {
                self.state.update_count(a.value(i), b.value(i), c.value(i));
            }
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let entries = self.state.entries();
        Ok(vec![
            list_str(entries.iter().map(|e| e.0).collect()),
            list_str(entries.iter().map(|e| e.1).collect()),
            list_u64(entries.iter().map(|e| e.2).collect()),
        ])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(match self.weights {
            None => self.state.kappa(),
            Some(w) => self.state.weighted_kappa(w, self.numeric),
        }))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.state.entries().len() * 48
    }
}
